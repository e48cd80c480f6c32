"""Consumer groups on three combined nodes: every broker names the same
coordinator for a group (the leader of its __consumer_offsets partition), so
members bootstrapped to different brokers share one group."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from broker.net.node_client import KafkaClientConnection
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402

PARTITIONS = 6
OFFSET_FETCH = APIS_BY_NAME["OffsetFetch"]
_OF = struct_classes(OFFSET_FETCH.request)


def offset_fetch_body(version: int, group: str, topic: str):
    """An OffsetFetch for partition 0 of ``topic``, in the shape of ``version``."""
    if version >= 8:
        return _OF.OffsetFetchRequest(
            groups=[_OF.OffsetFetchRequestGroup(group_id=group, topics=[_OF.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])]
        )
    return _OF.OffsetFetchRequest(group_id=group, topics=[_OF.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])


def offset_fetch(cluster: ReplicatedCluster, node: int, version: int, group: str, topic: str):
    """A raw OffsetFetch to ``node`` for partition 0 of ``topic``."""
    body = offset_fetch_body(version, group, topic)
    process = cluster.nodes[node]

    async def ask():
        connection = KafkaClientConnection(process.host, process.port, "offset-fetch-test")
        try:
            return await connection.request(OFFSET_FETCH, version, body, timeout_ms=10_000)
        finally:
            connection.close()

    return asyncio.run(ask())


def test_members_bootstrapped_to_different_brokers_share_one_group(tmp_path):
    cluster = ReplicatedCluster(tmp_path, session_timeout_ms=1800)
    cluster.start()
    consumers = []
    try:
        topic = f"shared-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, partitions=PARTITIONS)
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
        for i in range(300):
            producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
        assert producer.flush(30) == 0
        group = f"g-{uuid.uuid4().hex[:6]}"
        coordinators = set()
        for node in NODE_IDS:
            admin = cluster.admin([node])
            # Each broker is asked on its own: all must name the same coordinator.
            described = admin.describe_consumer_groups([group])[group].result(timeout=20)
            coordinators.add(described.coordinator.id)
        assert len(coordinators) == 1, coordinators
        (coordinator,) = coordinators
        other = next(n for n in NODE_IDS if n != coordinator)
        # A group request at any other broker is refused, never answered from its own (empty) state.
        v1 = offset_fetch(cluster, other, 1, group, topic)
        assert {p.error_code for t in v1.topics for p in t.partitions} == {ErrorCode.NOT_COORDINATOR}, v1
        v8 = offset_fetch(cluster, other, 8, group, topic)
        assert [g.error_code for g in v8.groups] == [ErrorCode.NOT_COORDINATOR], v8
        for node in NODE_IDS[:2]:
            consumer = Consumer(
                {
                    "bootstrap.servers": cluster.bootstrap([node]),
                    "group.id": group,
                    "auto.offset.reset": "earliest",
                    "session.timeout.ms": 6000,
                    "heartbeat.interval.ms": 500,
                }
            )
            consumer.subscribe([topic])
            consumers.append(consumer)
        deadline = time.monotonic() + 40
        assignments: list[set[int]] = [set(), set()]
        seen = 0
        while time.monotonic() < deadline:
            for i, consumer in enumerate(consumers):
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    seen += 1
                assignments[i] = {tp.partition for tp in consumer.assignment()}
            if seen >= 300 and assignments[0] and assignments[1] and len(assignments[0]) + len(assignments[1]) == PARTITIONS:
                break
        assert assignments[0] and assignments[1], assignments
        assert not assignments[0] & assignments[1], f"both members own {assignments[0] & assignments[1]}"
        assert assignments[0] | assignments[1] == set(range(PARTITIONS)), assignments
    finally:
        for consumer in consumers:
            consumer.close()
        cluster.stop()


FIND_COORDINATOR = APIS_BY_NAME["FindCoordinator"]
DESCRIBE_GROUPS = APIS_BY_NAME["DescribeGroups"]
_FC = struct_classes(FIND_COORDINATOR.request)
_DG = struct_classes(DESCRIBE_GROUPS.request)


def _ask(cluster: ReplicatedCluster, node: int, api, version: int, body):
    process = cluster.nodes[node]

    async def ask():
        connection = KafkaClientConnection(process.host, process.port, "group-failover-test", connect_timeout_ms=3000)
        try:
            return await connection.request(api, version, body, timeout_ms=5000)
        finally:
            connection.close()

    try:
        return asyncio.run(ask())
    except Exception:  # the node is down or did not answer: ask again later
        return None


def _coordinator(cluster: ReplicatedCluster, node: int, group: str) -> int | None:
    response = _ask(cluster, node, FIND_COORDINATOR, 3, _FC.FindCoordinatorRequest(key=group, key_type=0))
    if response is None or response.error_code != ErrorCode.NONE:
        return None
    return response.node_id


def _members(cluster: ReplicatedCluster, node: int, group: str) -> tuple[int, list[str]] | None:
    response = _ask(cluster, node, DESCRIBE_GROUPS, 5, _DG.DescribeGroupsRequest(groups=[group]))
    if response is None:
        return None
    (described,) = response.groups
    return described.error_code, sorted(m.member_id for m in described.members)


def _committed(cluster: ReplicatedCluster, node: int, group: str, topic: str) -> int | None:
    response = _ask(cluster, node, OFFSET_FETCH, 8, offset_fetch_body(8, group, topic))
    if response is None:
        return None
    (answer,) = response.groups
    if answer.error_code != ErrorCode.NONE:
        return None
    return answer.topics[0].partitions[0].committed_offset


def _poll_values(consumer, values: list, count: int, bound_s: float) -> None:
    """Poll until ``values`` holds ``count`` record values or ``bound_s`` passes."""
    deadline = time.monotonic() + bound_s
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value())


def _commit(consumer) -> bool:
    try:
        consumer.commit(asynchronous=False)
        return True
    except Exception:  # retriable while the client finds the new coordinator
        return False


def test_group_keeps_offsets_and_members_when_its_coordinator_is_killed(tmp_path):
    """__consumer_offsets has three replicas: SIGKILL of the broker coordinating a
    group moves the group to the new leader of its partition with its committed
    offsets and its member, and the member goes on committing there."""
    cluster = ReplicatedCluster(tmp_path, session_timeout_ms=1800)
    cluster.start()
    consumer = None
    try:
        topic = f"orders-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, partitions=1)
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "enable.idempotence": True})
        for i in range(200):
            producer.produce(topic, value=f"v{i}".encode())
        assert producer.flush(30) == 0
        group = f"g-{uuid.uuid4().hex[:6]}"
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap(),
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 300,
            }
        )
        consumer.subscribe([topic])
        values = []
        _poll_values(consumer, values, 100, 40)
        assert values == [f"v{i}".encode() for i in range(100)]
        consumer.commit(asynchronous=False)  # offset 100, answered once on every in-sync replica

        coordinator = _coordinator(cluster, NODE_IDS[0], group)
        assert coordinator in NODE_IDS
        _, members = _members(cluster, coordinator, group)
        assert len(members) == 1
        cluster.kill(coordinator)
        survivor = next(n for n in NODE_IDS if n != coordinator)
        # A new leader of the group's partition coordinates it, with the offsets
        # and the member that the old one had stored.
        assert wait_until(lambda: _coordinator(cluster, survivor, group) not in (None, coordinator), 30)
        new_coordinator = _coordinator(cluster, survivor, group)
        assert wait_until(lambda: _committed(cluster, new_coordinator, group, topic) is not None, 10)
        assert _committed(cluster, new_coordinator, group, topic) == 100
        assert _members(cluster, new_coordinator, group) == (ErrorCode.NONE, members)

        # The member keeps consuming where it was and commits to the new coordinator.
        _poll_values(consumer, values, 200, 40)
        assert values == [f"v{i}".encode() for i in range(200)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _commit(consumer):
            consumer.poll(0.2)
        assert wait_until(lambda: _committed(cluster, new_coordinator, group, topic) == 200, 10)
    finally:
        if consumer is not None:
            consumer.close()
        cluster.stop()
