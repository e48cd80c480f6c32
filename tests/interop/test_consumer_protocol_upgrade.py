"""The online upgrade of a classic group to a KIP-848 consumer group, with
confluent-kafka: two members with ``group.protocol=classic`` are restarted one
by one with ``group.protocol=consumer`` (``group.consumer.migration.policy``
``upgrade``, the default here).

The first consumer-protocol member converts the classic group; the remaining
classic member stays in the consumer group, heartbeating and rejoining with
the classic protocol while the broker assigns for both. Records are produced
while the group is stable and each is committed before the next poll: every
record is consumed through all three phases (classic, mixed, consumer), and
none comes again unless its commit failed.

Every wait is bounded; every client is closed and the broker stopped.
"""

from __future__ import annotations

import time
import uuid

import pytest

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.interop._support import RawConnection, create_topic, unique_topic

confluent_kafka = pytest.importorskip("confluent_kafka")
if confluent_kafka.libversion()[1] < 0x020C0000:
    pytest.skip("group.protocol=consumer needs librdkafka 2.12+", allow_module_level=True)

PARTITIONS = 4
PER_PARTITION = 10
WAIT_S = 40
DESCRIBE = APIS_BY_NAME["ConsumerGroupDescribe"]
DESCRIBE_REQUEST = struct_classes(DESCRIBE.request)


class Member:
    """A consumer polled from the test's thread; each record is committed
    (synchronously) before the next poll."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str, strategy: str):
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        if protocol == "classic":
            config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "partition.assignment.strategy": strategy})
        self.consumer = confluent_kafka.Consumer(config)
        self.consumer.subscribe([topic])
        self.values: list[bytes] = []
        self.errors: list[str] = []
        self.uncommitted_partitions: set[int] = set()  # where a commit failed
        self.closed = False

    def poll(self) -> None:
        message = self.consumer.poll(0.05)
        if message is None:
            return
        if message.error():
            self.errors.append(str(message.error()))
            return
        self.values.append(message.value())
        # A commit refused while the group moves (its epoch changed under it) leaves
        # the record past the committed offset: it may come again, and only it.
        try:
            committed = self.consumer.commit(message=message, asynchronous=False) or []
            failed = any(tp.error is not None for tp in committed)
        except confluent_kafka.KafkaException:
            failed = True
        if failed:
            self.uncommitted_partitions.add(message.partition())

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def poll_until(active: list[Member], done, describe, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for member in active:
            member.poll()
        if done():
            return
    errors = [e for m in active for e in m.errors]
    pytest.fail(f"timed out after {timeout_s}s waiting for {describe()}; client errors: {errors[:5]}")


def assert_once_past_commits(consumed: list[bytes], produced: set[bytes], members: list[Member]) -> None:
    """Every record consumed, none lost; a record comes twice only on a partition
    where a commit failed (its record stayed past the committed offset)."""
    assert set(consumed) == produced, f"lost: {sorted(produced - set(consumed))[:5]}"
    uncommitted = set().union(*(m.uncommitted_partitions for m in members))
    seen: set[bytes] = set()
    twice = []
    for value in consumed:
        if value in seen and int(value.split(b"-")[1]) not in uncommitted:
            twice.append(value)
        seen.add(value)
    assert not twice, f"consumed again past a successful commit: {twice[:10]}"


def produce(bootstrap: str, topic: str, tag: str) -> set[bytes]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    values = set()
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            value = f"{tag}-{p}-{i}".encode()
            values.add(value)
            producer.produce(topic, value, partition=p)
    assert producer.flush(30) == 0
    return values


def described(bootstrap: str, group: str):
    with RawConnection(bootstrap) as conn:
        response = conn.request(
            DESCRIBE, 0, DESCRIBE_REQUEST.ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
        )
    (group_described,) = response.groups
    return group_described


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_classic_members_restarted_one_by_one_with_the_consumer_protocol(broker_factory, strategy):
    broker = broker_factory({"group.consumer.heartbeat.interval.ms": "300", "group.initial.rebalance.delay.ms": "0"})
    bootstrap = broker.bootstrap
    topic, group = unique_topic("kip848-upgrade"), f"g-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    members: list[Member] = []
    consumed: list[bytes] = []
    produced: set[bytes] = set()

    def start(protocol: str) -> Member:
        member = Member(bootstrap, group, topic, protocol, strategy)
        members.append(member)
        return member

    def stop(member: Member) -> None:
        member.close()
        consumed.extend(member.values)

    def halves(a: Member, b: Member) -> bool:
        return len(a.partitions()) == len(b.partitions()) == PARTITIONS // 2 and not a.partitions() & b.partitions()

    def stable_pair() -> bool:
        group_described = described(bootstrap, group)
        return group_described.error_code == 0 and len(group_described.members) == 2 and group_described.group_state == "Stable"

    def consume_batch(active: list[Member], tag: str) -> None:
        produced.update(produce(bootstrap, topic, tag))
        poll_until(active, lambda: {v for m in members for v in m.values} >= produced,
                   lambda: f"batch {tag}: {len({v for m in members for v in m.values} & produced)} of {len(produced)}")

    try:
        a, b = start("classic"), start("classic")
        poll_until([a, b], lambda: halves(a, b), lambda: f"halves, got {a.partitions()} and {b.partitions()}")
        assert described(bootstrap, group).error_code == ErrorCode.GROUP_ID_NOT_FOUND  # a classic group
        consume_batch([a, b], "classic")

        # a restarts with the consumer protocol: the group is converted, b stays in it as a classic member.
        b_id = b.consumer.memberid()
        stop(a)
        a2 = start("consumer")
        poll_until([a2, b], lambda: halves(a2, b), lambda: f"halves, got {a2.partitions()} and {b.partitions()}")
        # A member whose partitions did not move learns the new epoch at its next heartbeat: Stable soon after.
        poll_until([a2, b], lambda: stable_pair(), lambda: f"a Stable group of two, got {described(bootstrap, group)}")
        assert b_id in {m.member_id for m in described(bootstrap, group).members}, "b is the converted group's member"
        consume_batch([a2, b], "mixed")

        # b restarts with the consumer protocol too.
        stop(b)
        b2 = start("consumer")
        poll_until([a2, b2], lambda: halves(a2, b2), lambda: f"halves, got {a2.partitions()} and {b2.partitions()}")
        consume_batch([a2, b2], "consumer")
        poll_until([a2, b2], lambda: stable_pair(), lambda: f"a Stable group of two, got {described(bootstrap, group)}")

        for member in (a2, b2):
            consumed.extend(member.values)
        assert_once_past_commits(consumed, produced, members)
        assert not [e for m in members for e in m.errors], [e for m in members for e in m.errors][:5]
    finally:
        for member in members:
            try:
                member.close()
            except Exception:  # closing is best effort at teardown
                pass


def test_a_mixed_group_survives_a_restart_of_its_coordinator(broker_factory, tmp_path):
    """The classic member's membership (its session timeout and protocols, Kafka's
    classicMemberMetadata) is in the group's records: a restarted broker has the
    same mixed group, and both members carry on."""
    from tests.ports import free_port

    overrides = {"group.consumer.heartbeat.interval.ms": "300", "group.initial.rebalance.delay.ms": "0",
                 "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}"}
    data_dir = tmp_path / "mixed"
    broker = broker_factory(overrides, data_dir=data_dir)
    bootstrap = broker.bootstrap
    topic, group = unique_topic("kip848-mixed-restart"), f"g-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    members: list[Member] = []
    try:
        a = Member(bootstrap, group, topic, "classic", "range")
        b = Member(bootstrap, group, topic, "classic", "range")
        members += [a, b]
        poll_until([a, b], lambda: len(a.partitions()) == len(b.partitions()) == 2, lambda: "two classic members with two partitions each")
        a.close()
        a2 = Member(bootstrap, group, topic, "consumer", "range")
        members.append(a2)

        def stable_halves() -> bool:
            group_described = described(bootstrap, group)
            return (len(a2.partitions()) == len(b.partitions()) == 2 and group_described.error_code == 0
                    and group_described.group_state == "Stable" and len(group_described.members) == 2)

        poll_until([a2, b], stable_halves, lambda: f"a Stable mixed group, got {described(bootstrap, group)}")
        before = described(bootstrap, group)

        broker.kill()
        broker = broker_factory(overrides, data_dir=data_dir)

        def kept() -> bool:
            after = described(bootstrap, group)
            return after.error_code == 0 and {m.member_id for m in after.members} == {m.member_id for m in before.members}

        poll_until([a2, b], kept, lambda: f"the same two members after the restart, got {described(bootstrap, group)}")
        after = described(bootstrap, group)
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
        produced = produce(bootstrap, topic, "after-restart")
        poll_until([a2, b], lambda: {v for m in (a2, b) for v in m.values} >= produced,
                   lambda: f"{len({v for m in (a2, b) for v in m.values} & produced)} of {len(produced)} consumed")
        assert_once_past_commits([v for m in (a2, b) for v in m.values], produced, members)
        assert len(a2.partitions()) == len(b.partitions()) == 2 and not a2.partitions() & b.partitions()
    finally:
        for member in members:
            try:
                member.close()
            except Exception:  # closing is best effort at teardown
                pass


def listed_type(bootstrap: str, group: str) -> str | None:
    api = APIS_BY_NAME["ListGroups"]
    with RawConnection(bootstrap) as conn:
        response = conn.request(api, 5, api.request.cls(states_filter=[], types_filter=[]))
    return next((g.group_type for g in response.groups if g.group_id == group), None)


@pytest.mark.parametrize("policy", ["disabled"])
def test_a_policy_without_the_upgrade_keeps_a_classic_group_with_members(broker_factory, policy):
    """As Kafka's validateOnlineUpgrade: GROUP_ID_NOT_FOUND, the classic group untouched."""
    broker = broker_factory({"group.initial.rebalance.delay.ms": "0", "group.consumer.migration.policy": policy})
    bootstrap = broker.bootstrap
    topic, group = unique_topic("kip848-no-upgrade"), f"g-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 2)
    member = Member(bootstrap, group, topic, "classic", "range")
    try:
        poll_until([member], lambda: len(member.partitions()) == 2, lambda: "a classic member with both partitions")
        api = APIS_BY_NAME["ConsumerGroupHeartbeat"]
        with RawConnection(bootstrap) as conn:
            refused = conn.request(api, 0, api.request.cls(group_id=group, member_id="", member_epoch=0, rebalance_timeout_ms=30000,
                                                           subscribed_topic_names=[topic], topic_partitions=[]))
        assert (refused.error_code, refused.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} is not a consumer group.")
        assert listed_type(bootstrap, group) == "classic"
        poll_until([member], lambda: len(member.partitions()) == 2 and not member.errors, lambda: "the classic member unaffected",
                   timeout_s=3)
    finally:
        member.close()
