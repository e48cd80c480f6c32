"""Preferred leader elections on three combined nodes (RF=3): asked for with
ElectLeaders through a real admin client, and made by the active controller's
automatic rebalance."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import ElectionType, TopicPartition  # noqa: E402
from confluent_kafka.error import KafkaException  # noqa: E402

BOUND_S = 20.0


def start(tmp_path, extra) -> ReplicatedCluster:
    cluster = ReplicatedCluster(tmp_path, session_timeout_ms=1800, extra=extra)
    cluster.start()
    return cluster


def leader_away_from_preferred(cluster: ReplicatedCluster) -> tuple[str, int]:
    """A topic whose preferred replica was killed and is back in the ISR, not leading."""
    topic = f"elect-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic)
    state = cluster.wait_for_isr(topic, 0, NODE_IDS, BOUND_S, everywhere=True)
    assert state is not None, cluster.describe(topic)
    preferred = state.replicas[0]
    assert state.leader == preferred, state
    cluster.kill(preferred)
    assert cluster.leader_of(topic, 0, BOUND_S, exclude={preferred}) is not None, cluster.describe(topic)
    cluster.restart(preferred)
    assert cluster.wait_for_isr(topic, 0, NODE_IDS, BOUND_S) is not None, cluster.describe(topic)
    return topic, preferred


def test_preferred_election_through_the_admin_client(tmp_path):
    cluster = start(tmp_path, {"auto.leader.rebalance.enable": "false"})
    try:
        topic, preferred = leader_away_from_preferred(cluster)
        assert cluster.partition(topic, 0).leader != preferred
        admin = cluster.admin()
        partitions = [TopicPartition(topic, 0)]
        result = admin.elect_leaders(ElectionType.PREFERRED, partitions).result(timeout=30)
        assert result[TopicPartition(topic, 0)] is None, result  # no error: elected
        assert wait_until(lambda: (cluster.partition(topic, 0) or None) and cluster.partition(topic, 0).leader == preferred, BOUND_S)
        again = admin.elect_leaders(ElectionType.PREFERRED, partitions).result(timeout=30)
        assert again[TopicPartition(topic, 0)].code() == confluent_kafka.KafkaError.ELECTION_NOT_NEEDED, again
        # An unknown partition is named as such; the others are still answered.
        mixed = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 7)]).result(timeout=30)
        assert mixed[TopicPartition(topic, 7)].code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART, mixed
    except KafkaException as exc:
        pytest.fail(f"ElectLeaders failed: {exc}")
    finally:
        cluster.stop()


def test_the_controller_moves_leadership_back_on_its_own(tmp_path):
    cluster = start(tmp_path, {"leader.imbalance.check.interval.seconds": "1", "leader.imbalance.per.broker.percentage": "0"})
    try:
        topic, preferred = leader_away_from_preferred(cluster)
        started = time.monotonic()
        back = wait_until(lambda: (cluster.partition(topic, 0) or None) and cluster.partition(topic, 0).leader == preferred, BOUND_S)
        assert back, f"leader still {cluster.partition(topic, 0)} {time.monotonic() - started:.1f} s after the rejoin"
    finally:
        cluster.stop()
