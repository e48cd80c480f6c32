"""A topic created right after the active controller is killed is placed only on
brokers that are alive.

Three combined nodes; the active controller (a broker too) is SIGKILLed. The
new active controller grants every unfenced broker a fresh session, the dead
one included, which stays unfenced until that session runs out (6 s here).
Topics created meanwhile, through a surviving broker with a real client, go
only to the brokers that have heartbeated to the new controller; a topic that
would need the dead broker fails with INVALID_REPLICATION_FACTOR.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.cluster.test_quorum_processes import Cluster, alive_brokers, find_leader, metadata, wait_until_true

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

# Long enough that the dead broker is still unfenced while the topics are created.
SESSION_TIMEOUT_MS = 6000
FAILOVER_BOUND_S = 10


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path)
    for process in cluster.nodes.values():
        process.overrides["broker.session.timeout.ms"] = str(SESSION_TIMEOUT_MS)
    yield cluster
    cluster.stop()


def create(admin: AdminClient, topic: NewTopic):
    """None, or the KafkaError the creation failed with."""
    future = admin.create_topics([topic], request_timeout=20)[topic.topic]
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        return exc.args[0]
    return None


def test_a_topic_created_after_the_controller_is_killed_avoids_the_dead_broker(cluster):
    cluster.start()
    leader, _ = find_leader(cluster, [1, 2, 3], 15)
    assert leader is not None
    survivors = [n for n in (1, 2, 3) if n != leader]
    witness = cluster.nodes[survivors[0]]
    assert wait_until_true(lambda: alive_brokers(witness) == [1, 2, 3], 15)

    cluster.nodes[leader].stop(signal.SIGKILL)
    killed_at = time.monotonic()
    new_leader, _ = find_leader(cluster, survivors, FAILOVER_BOUND_S)
    assert new_leader in survivors

    admin = AdminClient({"bootstrap.servers": ",".join(cluster.nodes[n].bootstrap for n in survivors)})
    error = create(admin, NewTopic("after-kill", num_partitions=6, replication_factor=2))
    # A request retried across the failover (its first answer lost) may find its own topic.
    assert error is None or error.name() == "TOPIC_ALREADY_EXISTS", error
    created_s = time.monotonic() - killed_at
    # The scenario held: the dead broker was still unfenced when the topic was placed.
    assert leader in alive_brokers(witness), f"the killed broker was fenced already ({created_s:.1f} s after the kill)"
    # The witness learns of the topic from the metadata log: maybe a moment after the answer.
    assert wait_until_true(lambda: any(t.name == "after-kill" for t in metadata(witness).topics), 10)
    topic = next(t for t in metadata(witness).topics if t.name == "after-kill")
    assert len(topic.partitions) == 6
    for partition in topic.partitions:
        assert set(partition.replica_nodes) == set(survivors), (partition.partition_index, partition.replica_nodes)
        assert partition.leader_id in survivors

    # Three replicas would need the dead broker: refused, not placed on it.
    error = create(admin, NewTopic("needs-three", num_partitions=1, replication_factor=3))
    assert error is not None and error.name() == "INVALID_REPLICATION_FACTOR", error
    assert "needs-three" not in {t.name for t in metadata(witness).topics}
