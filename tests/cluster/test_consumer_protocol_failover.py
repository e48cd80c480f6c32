"""A KIP-848 consumer group (confluent-kafka, ``group.protocol=consumer``) on
three combined nodes keeps going when its coordinator is killed (SIGKILL)
while a producer writes.

The new leader of the group's ``__consumer_offsets`` partition replays the
group's records: ConsumerGroupDescribe there shows the same members at the
same epochs, and the committed offsets are those committed before the kill.
The consumers carry on; every record the producer had acknowledged is
consumed, none skipped (a record may come twice only past its partition's
last committed offset, which a commit lost in the failover leaves behind), and
at the end the committed offsets reach each partition's end.

Every wait is bounded; the cluster is stopped and the clients closed.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from broker.net.node_client import KafkaClientConnection
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
if confluent_kafka.libversion()[1] < 0x020C0000:
    pytest.skip("group.protocol=consumer needs librdkafka 2.12+", allow_module_level=True)
from confluent_kafka import Consumer, KafkaException, Producer  # noqa: E402

PARTITIONS = 4
BEFORE_KILL = 200
AFTER_KILL = 200
FIND_COORDINATOR = APIS_BY_NAME["FindCoordinator"]
DESCRIBE = APIS_BY_NAME["ConsumerGroupDescribe"]
OFFSET_FETCH = APIS_BY_NAME["OffsetFetch"]
_FC = struct_classes(FIND_COORDINATOR.request)
_CGD = struct_classes(DESCRIBE.request)
_OF = struct_classes(OFFSET_FETCH.request)


def _ask(cluster: ReplicatedCluster, node: int, api, version: int, body):
    process = cluster.nodes[node]

    async def ask():
        connection = KafkaClientConnection(process.host, process.port, "kip848-failover-test", connect_timeout_ms=3000)
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


def _described(cluster: ReplicatedCluster, node: int, group: str):
    """(group epoch, {member id: member epoch}) as ``node`` describes the group, or None."""
    response = _ask(cluster, node, DESCRIBE, 0, _CGD.ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False))
    if response is None:
        return None
    (described,) = response.groups
    if described.error_code != ErrorCode.NONE:
        return None
    return described.group_epoch, {m.member_id: m.member_epoch for m in described.members}


def _committed(cluster: ReplicatedCluster, node: int, group: str, topic: str) -> dict[int, int] | None:
    body = _OF.OffsetFetchRequest(groups=[_OF.OffsetFetchRequestGroup(
        group_id=group, member_id=None, member_epoch=-1,
        topics=[_OF.OffsetFetchRequestTopics(name=topic, partition_indexes=list(range(PARTITIONS)))])], require_stable=False)
    response = _ask(cluster, node, OFFSET_FETCH, 9, body)
    if response is None:
        return None
    (answer,) = response.groups
    if answer.error_code != ErrorCode.NONE:
        return None
    return {p.partition_index: p.committed_offset for p in answer.topics[0].partitions}


class Member:
    """A consumer-protocol consumer polled from the test's thread; each record is
    committed (synchronously) before the next poll. Commits that fail while the
    group moves are left behind: the next one covers them."""

    def __init__(self, bootstrap: str, group: str, topic: str):
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        })
        self.consumer.subscribe([topic])
        # partition -> the offsets consumed, in order
        self.consumed: dict[int, list[int]] = {}
        self.values: list[bytes] = []
        self.failed_commits = 0

    def poll(self) -> None:
        message = self.consumer.poll(0.05)
        if message is None or message.error() is not None:
            return
        self.consumed.setdefault(message.partition(), []).append(message.offset())
        self.values.append(message.value())
        try:
            self.consumer.commit(message=message, asynchronous=False)
        except KafkaException:
            self.failed_commits += 1

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


class BackgroundProducer(threading.Thread):
    """Writes ``count`` records (``v<n>``, partition n % PARTITIONS) at a steady pace,
    idempotent with acks=all; ``acked`` holds the values the cluster acknowledged."""

    def __init__(self, bootstrap: str, topic: str, start_at: int, count: int, pace_s: float):
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "message.timeout.ms": 60_000})
        self.topic, self.start_at, self.count, self.pace_s = topic, start_at, count, pace_s
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.unflushed = -1

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked.append(message.value())
        else:
            self.failed.append(str(error))

    def run(self) -> None:
        for n in range(self.start_at, self.start_at + self.count):
            self.producer.produce(self.topic, f"v{n}".encode(), partition=n % PARTITIONS, on_delivery=self._delivered)
            self.producer.poll(0)
            time.sleep(self.pace_s)
        self.unflushed = self.producer.flush(90)


def test_consumer_group_survives_its_coordinator_killed_while_producing(tmp_path):
    cluster = ReplicatedCluster(tmp_path, extra={"group.consumer.heartbeat.interval.ms": "300"})
    cluster.start()
    members: list[Member] = []
    producers: list[BackgroundProducer] = []
    try:
        topic = f"kip848-failover-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, partitions=PARTITIONS)
        group = f"g-{uuid.uuid4().hex[:6]}"
        members = [Member(cluster.bootstrap(), group, topic) for _ in range(2)]

        def poll_until(done, bound_s: float, what) -> None:
            deadline = time.monotonic() + bound_s
            while time.monotonic() < deadline:
                for member in members:
                    member.poll()
                if done():
                    return
            pytest.fail(f"timed out after {bound_s}s waiting for {what()}")

        poll_until(lambda: [len(m.partitions()) for m in members] == [2, 2], 60,
                   lambda: f"two partitions each, got {[m.partitions() for m in members]}")
        first = BackgroundProducer(cluster.bootstrap(), topic, 0, BEFORE_KILL, 0.01)
        producers.append(first)
        first.start()
        poll_until(lambda: not first.is_alive() and sum(len(m.values) for m in members) >= BEFORE_KILL, 60,
                   lambda: f"{BEFORE_KILL} records consumed, got {sum(len(m.values) for m in members)}")
        assert first.unflushed == 0 and not first.failed, first.failed[:3]

        coordinator = _coordinator(cluster, NODE_IDS[0], group)
        assert coordinator in NODE_IDS
        before = _described(cluster, coordinator, group)
        committed_before = _committed(cluster, coordinator, group, topic)
        assert before is not None and len(before[1]) == 2, before
        assert committed_before is not None and sum(committed_before.values()) == BEFORE_KILL, committed_before

        # The producer keeps writing across the kill.
        second = BackgroundProducer(cluster.bootstrap(), topic, BEFORE_KILL, AFTER_KILL, 0.02)
        producers.append(second)
        second.start()
        cluster.kill(coordinator)
        survivor = next(n for n in NODE_IDS if n != coordinator)
        assert wait_until(lambda: _coordinator(cluster, survivor, group) not in (None, coordinator), 30)
        new_coordinator = _coordinator(cluster, survivor, group)
        # The new coordinator loaded the group: the same members at the same epochs
        # (the consumers keep heartbeating meanwhile, so it is looked at at once),
        # and no committed offset went back.
        after = wait_until(lambda: _described(cluster, new_coordinator, group), 15)
        assert after is not None
        assert set(after[1]) == set(before[1]), (before, after)
        assert after[0] >= before[0]
        if after[0] == before[0]:
            assert after[1] == before[1], (before, after)
        committed_after = wait_until(lambda: _committed(cluster, new_coordinator, group, topic), 15)
        assert committed_after is not None
        assert all(committed_after[p] >= committed_before[p] for p in range(PARTITIONS)), (committed_before, committed_after)

        total = BEFORE_KILL + AFTER_KILL
        poll_until(lambda: not second.is_alive() and {v for m in members for v in m.values} >= set(first.acked + second.acked),
                   90, lambda: f"every acknowledged record consumed: {len({v for m in members for v in m.values})} of "
                               f"{len(first.acked) + len(second.acked)} (producer alive: {second.is_alive()})")
        assert second.unflushed == 0 and not second.failed, second.failed[:3]
        assert len(first.acked) + len(second.acked) == total
        # The group is still the two members, and neither had to rejoin under a new id.
        final = wait_until(lambda: _described(cluster, new_coordinator, group), 15)
        assert final is not None and set(final[1]) == set(before[1]), (before, final)

        # No record skipped: each partition was read from 0 with no gap; a record
        # read twice is one past the partition's committed offset at the kill.
        for partition in range(PARTITIONS):
            offsets = [o for m in members for o in m.consumed.get(partition, [])]
            assert set(offsets) == set(range(total // PARTITIONS)), (partition, sorted(set(offsets))[:5])
            twice = {o for o in offsets if offsets.count(o) > 1}
            assert all(o >= committed_before[partition] for o in twice), (partition, sorted(twice))

        # The last commits land at the new coordinator: every partition committed to its end.
        def all_committed():
            for member in members:
                member.poll()
            return _committed(cluster, new_coordinator, group, topic) == {p: total // PARTITIONS for p in range(PARTITIONS)}

        assert wait_until(all_committed, 30), _committed(cluster, new_coordinator, group, topic)
    finally:
        for producer in producers:
            producer.join(timeout=100)
        for member in members:
            try:
                member.consumer.close()
            except Exception:  # a consumer of a killed node: closing is best effort
                pass
        cluster.stop()
