"""ElectLeaders sent to a node that is not the active controller, on three
combined nodes (RF=3): the broker forwards it to the active controller
(broker/controller_node/forwarding.py) and relays the answer, for every version; with no
quorum to reach it answers NOT_CONTROLLER, which clients retry.

Metadata names the contacted broker itself as the controller, so an admin
client may or may not land on the active controller; these raw requests pick
the node on purpose."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("confluent_kafka")

from broker.net.node_client import KafkaClientConnection  # noqa: E402
from protocol.errors import ErrorCode  # noqa: E402
from protocol.registry import APIS_BY_NAME  # noqa: E402
from protocol.schema import struct_classes  # noqa: E402
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until  # noqa: E402
from tests.cluster.test_leader_elections import BOUND_S, leader_away_from_preferred, start  # noqa: E402

API = APIS_BY_NAME["ElectLeaders"]
Q = struct_classes(API.request)


def elect(cluster: ReplicatedCluster, node: int, version: int, election_type: int, partitions, timeout_s: float = 30.0):
    """One raw ElectLeaders to ``node``'s client listener; ``partitions`` None asks about every partition."""
    process = cluster.nodes[node]
    topic_partitions = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        topic_partitions = [Q.TopicPartitions(topic=t, partitions=p) for t, p in by_topic.items()]
    body = Q.ElectLeadersRequest(election_type=election_type, topic_partitions=topic_partitions, timeout_ms=10000)

    async def ask():
        connection = KafkaClientConnection(process.host, process.port, "elect-test")
        try:
            return await connection.request(API, version, body, timeout_ms=int(timeout_s * 1000))
        finally:
            connection.close()

    return asyncio.run(ask())


def answers(response) -> dict[tuple[str, int], int]:
    return {(r.topic, p.partition_id): p.error_code for r in response.replica_election_results for p in r.partition_result}


def test_a_broker_that_is_not_the_controller_forwards_elections(tmp_path):
    cluster = start(tmp_path, {"auto.leader.rebalance.enable": "false"})
    try:
        topic, preferred = leader_away_from_preferred(cluster)
        controller = cluster.active_controller(BOUND_S)
        assert controller is not None
        via = next(n for n in cluster.alive() if n != controller)
        response = elect(cluster, via, 2, 0, [(topic, 0)])
        assert response.error_code == ErrorCode.NONE
        assert answers(response) == {(topic, 0): ErrorCode.NONE}, response
        # The answer came after the commit: the broker that was asked soon shows the new leader.
        assert wait_until(lambda: (state := cluster.partition(topic, 0, via)) is not None and state.leader == preferred, BOUND_S), (
            cluster.describe(topic, via)
        )
        # Still the same active controller, so the request really was forwarded
        # (the node asked could not have acted on its own).
        assert cluster.active_controller(BOUND_S) == controller
        for version in (0, 1, 2):
            again = elect(cluster, via, version, 0, [(topic, 0), (topic, 9)])
            assert answers(again) == {(topic, 0): ErrorCode.ELECTION_NOT_NEEDED, (topic, 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            if version >= 1:
                assert again.error_code == ErrorCode.NONE
                # Every partition: only where an election happened is answered.
                everything = elect(cluster, via, version, 1, None)
                assert (everything.error_code, everything.replica_election_results) == (ErrorCode.NONE, [])
        unclean = elect(cluster, via, 2, 1, [(topic, 0)])
        assert answers(unclean) == {(topic, 0): ErrorCode.ELECTION_NOT_NEEDED}
        bad = elect(cluster, via, 2, 7, [(topic, 0)])
        assert (bad.error_code, answers(bad)) == (ErrorCode.INVALID_REQUEST, {(topic, 0): ErrorCode.INVALID_REQUEST})
    finally:
        cluster.stop()


def test_without_a_quorum_the_answer_is_not_controller(tmp_path):
    cluster = start(tmp_path, {"auto.leader.rebalance.enable": "false"})
    try:
        topic = "no-quorum"
        cluster.create_topic(topic)
        assert cluster.leader_of(topic, 0, BOUND_S) is not None
        # The survivor is not the active controller: a leader that has not yet
        # noticed it lost its quorum (check-quorum takes 1.5 fetch timeouts) may
        # still answer a request that needs no write, as Kafka's would.
        active = cluster.active_controller()
        survivor = next(n for n in NODE_IDS if n != active)
        others = [n for n in NODE_IDS if n != survivor]
        for node in others:
            cluster.kill(node)
        started = time.monotonic()
        # The broker keeps trying to reach a controller for a while (as Kafka's
        # forwarding does), then answers NOT_CONTROLLER: retriable for clients.
        response = elect(cluster, survivor, 2, 0, [(topic, 0)], timeout_s=30.0)
        assert time.monotonic() - started < 30.0
        assert response.error_code == ErrorCode.NOT_CONTROLLER
        assert answers(response) == {(topic, 0): ErrorCode.NOT_CONTROLLER}
    finally:
        cluster.stop()
