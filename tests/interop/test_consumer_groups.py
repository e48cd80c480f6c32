"""Consumer groups through real clients: membership, rebalancing, committed
offsets, static members, cooperative rebalancing and a broker restart.

Members run in threads (see ``_groups.GroupMember``): kafka-python's
KafkaConsumer, confluent-kafka's Consumer with each of its assignors, and
aiokafka's AIOKafkaConsumer (``asyncio.run`` in the member's thread). A member
that must die without a LeaveGroup runs in a child process and is SIGKILLed.

Heartbeats every 300 ms make members notice a rebalance quickly; the broker's
``group.min.session.timeout.ms`` is lowered so a killed member's session can
expire in 3 s.
"""

from __future__ import annotations

import time

import pytest

from tests.conftest import BrokerProcess
from tests.interop._groups import ChildMember, GroupMember, produce_values, wait_for
from tests.interop._support import create_topic, unique_topic

GROUP_OVERRIDES = {"group.min.session.timeout.ms": "1000"}
REBALANCE_WAIT_S = 45  # generous: a rebalance takes well under a second here, a loaded CI box is slower

# (client, assignor): every assignor of confluent-kafka, kafka-python's three, aiokafka's default.
MEMBER_CONFIGS = [
    pytest.param("kafka-python", None, id="kafka-python"),
    pytest.param("kafka-python", "roundrobin", id="kafka-python-roundrobin"),
    pytest.param("kafka-python", "cooperative-sticky", id="kafka-python-cooperative-sticky"),
    pytest.param("confluent", "range", id="confluent-range"),
    pytest.param("confluent", "roundrobin", id="confluent-roundrobin"),
    pytest.param("confluent", "cooperative-sticky", id="confluent-cooperative-sticky"),
    pytest.param("aiokafka", None, id="aiokafka"),
]
KINDS = ["kafka-python", "confluent", "aiokafka"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("groups-broker"), GROUP_OVERRIDES).start()
    yield broker
    broker.stop()


def close_all(members) -> None:
    """Close every member (also after a failure); report the first member error."""
    errors = []
    for member in members:
        try:
            member.close()
        except Exception as exc:  # noqa: BLE001 - keep closing the others; raised below
            errors.append(exc)
    for member in members:
        member.raise_error()
    if errors:
        raise errors[0]


def is_split(members, topic: str, partition_count: int) -> bool:
    """Every member has partitions, no partition twice, every partition once."""
    parts = [m.partitions(topic) for m in members]
    return (
        all(parts)
        and sum(len(p) for p in parts) == partition_count
        and set().union(*parts) == set(range(partition_count))
    )


def wait_split(members, topic: str, partition_count: int, timeout_s: float = REBALANCE_WAIT_S, stable_s: float = 0.5) -> list[set[int]]:
    """Wait for a disjoint, complete assignment over ``members`` that holds for ``stable_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        for member in members:
            member.raise_error()
        wait_for(lambda: is_split(members, topic, partition_count), max(deadline - time.monotonic(), 0.1), lambda: members)
        snapshot = [frozenset(m.partitions(topic)) for m in members]
        time.sleep(stable_s)
        if [frozenset(m.partitions(topic)) for m in members] == snapshot and is_split(members, topic, partition_count):
            return [set(s) for s in snapshot]
        assert time.monotonic() < deadline, f"assignment did not settle: {members}"


def check_each_consumes_its_partitions(members, topic, produced, timeout_s: float = 30) -> None:
    """Every produced value arrives at exactly one member, the one owning its partition."""
    expected = {v for values in produced.values() for v in values}
    wait_for(
        lambda: expected <= {v for m in members for v in m.values()},
        timeout_s,
        lambda: f"missing {len(expected - {v for m in members for v in m.values()})} of {len(expected)}; {members}",
    )
    seen: dict[bytes, str] = {}
    for member in members:
        own = member.partitions(topic)
        for t, partition, _offset, value in member.records:
            if value not in expected:
                continue
            assert t == topic and partition in own, f"{member.name} got {value!r} of partition {partition}, owns {sorted(own)}"
            assert value not in seen, f"{value!r} consumed by {seen[value]} and {member.name}"
            seen[value] = member.name


@pytest.mark.parametrize("kind,strategy", MEMBER_CONFIGS)
def test_members_split_partitions_and_take_over_after_leave(broker, kind, strategy):
    topic = unique_topic("grp-split")
    create_topic(broker.bootstrap, topic, 6)
    group = unique_topic("g-split")
    members = []
    try:
        for i in range(2):
            members.append(GroupMember(kind, broker.bootstrap, group, [topic], name=f"{kind}-{i}", strategy=strategy).start())
        wait_split(members, topic, 6)
        for m in members:
            m.clear_records()
        check_each_consumes_its_partitions(members, topic, produce_values(broker.bootstrap, topic, range(6), 3, "two"))

        members.append(GroupMember(kind, broker.bootstrap, group, [topic], name=f"{kind}-2", strategy=strategy).start())
        split = wait_split(members, topic, 6)
        assert sorted(len(p) for p in split) == [2, 2, 2]
        for m in members:
            m.clear_records()
        check_each_consumes_its_partitions(members, topic, produce_values(broker.bootstrap, topic, range(6), 3, "three"))

        leaving = members.pop(0)
        leaving.close()
        leaving.raise_error()
        split = wait_split(members, topic, 6)
        assert sorted(len(p) for p in split) == [3, 3]
        for m in members:
            m.clear_records()
        check_each_consumes_its_partitions(members, topic, produce_values(broker.bootstrap, topic, range(6), 3, "after-leave"))
    finally:
        close_all(members)


@pytest.mark.parametrize("kind", KINDS)
def test_killed_member_partitions_taken_over_after_session_timeout(broker, kind):
    """A member that dies sends no LeaveGroup: the others get its partitions once
    its session (3 s) expires, not before and not only at the rebalance timeout."""
    session_ms = 3000
    topic = unique_topic("grp-kill")
    create_topic(broker.bootstrap, topic, 6)
    group = unique_topic("g-kill")
    members = []
    child = None
    try:
        members = [
            GroupMember(kind, broker.bootstrap, group, [topic], name=f"{kind}-{i}", session_timeout_ms=session_ms).start()
            for i in range(2)
        ]
        wait_split(members, topic, 6)
        child = ChildMember(kind, broker.bootstrap, group, [topic], name=f"{kind}-child", session_timeout_ms=session_ms)
        wait_split(members + [child], topic, 6, stable_s=1.0)
        child_partitions = child.partitions(topic)

        killed_at = time.monotonic()
        child.kill()
        wait_split(members, topic, 6, stable_s=0)
        took_s = time.monotonic() - killed_at
        # Its last heartbeat was at most one interval before the kill.
        assert took_s >= session_ms / 1000 - 1.0, f"taken over after {took_s:.1f}s, before the session could expire"
        assert took_s <= session_ms / 1000 + 10, f"taken over only after {took_s:.1f}s"
        for m in members:
            m.clear_records()
        produced = produce_values(broker.bootstrap, topic, sorted(child_partitions), 3, "orphaned")
        check_each_consumes_its_partitions(members, topic, produced)
    finally:
        if child is not None:
            child.kill()
        close_all(members)


@pytest.mark.parametrize("kind", KINDS)
def test_restarted_consumer_resumes_at_committed_offsets(broker, kind):
    topic = unique_topic("grp-resume")
    create_topic(broker.bootstrap, topic, 3)
    group = unique_topic("g-resume")
    first = produce_values(broker.bootstrap, topic, range(3), 5, "before")
    member = GroupMember(kind, broker.bootstrap, group, [topic], name=f"{kind}-first").start()
    try:
        expected = {v for values in first.values() for v in values}
        wait_for(lambda: set(member.values()) >= expected, 30, lambda: member)
        assert len(member.values()) == 15
        member.commit()
    finally:
        close_all([member])

    second = produce_values(broker.bootstrap, topic, range(3), 4, "after")
    member = GroupMember(kind, broker.bootstrap, group, [topic], name=f"{kind}-second").start()
    try:
        expected = {v for values in second.values() for v in values}
        wait_for(lambda: set(member.values()) >= expected, 30, lambda: member)
        time.sleep(1.0)  # anything committed before would have arrived first
        values = member.values()
        assert sorted(values) == sorted(expected), f"consumed again or lost: {sorted(set(values) ^ expected)}"
        assert {(p, o) for _, p, o, _ in member.records} == {(p, o) for p in range(3) for o in range(5, 9)}
    finally:
        close_all([member])


def assigned_partitions(described_member: dict, topic: str) -> set[int]:
    """The partitions of ``topic`` in a member of kafka-python's describe_groups answer."""
    assignment = described_member["member_assignment"] or {"assigned_partitions": []}
    return {p for entry in assignment["assigned_partitions"] if entry["topic"] == topic for p in entry["partitions"]}


def describe_group(bootstrap: str, group: str) -> dict:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        return admin.describe_groups([group])[group]
    finally:
        admin.close()


@pytest.mark.parametrize(
    "kind,strategy",
    [
        pytest.param("kafka-python", None, id="kafka-python"),
        pytest.param("confluent", None, id="confluent"),
        # A restarted cooperative member's subscription differs (it owns nothing yet).
        pytest.param("confluent", "cooperative-sticky", id="confluent-cooperative-sticky"),
        pytest.param("aiokafka", None, id="aiokafka"),
    ],
)
def test_static_member_restart_keeps_its_partitions_without_rebalance(broker, kind, strategy):
    """A static member that comes back within its session timeout takes its old
    place: same partitions, and the other member sees no rebalance at all. Both
    members restart in turn, so the group leader is one of them."""
    topic = unique_topic("grp-static")
    create_topic(broker.bootstrap, topic, 4)
    group = unique_topic("g-static")
    session_ms = 20000

    def start(instance: str, name: str) -> GroupMember:
        return GroupMember(
            kind, broker.bootstrap, group, [topic], name=name, instance_id=instance, strategy=strategy, session_timeout_ms=session_ms
        ).start()

    members = {}
    try:
        members = {"instance-a": start("instance-a", f"{kind}-a"), "instance-b": start("instance-b", f"{kind}-b")}
        wait_split(list(members.values()), topic, 4, stable_s=1.0)
        partitions = {instance: m.partitions(topic) for instance, m in members.items()}
        before = describe_group(broker.bootstrap, group)
        assert before["group_state"] == "Stable"
        assert {m["group_instance_id"] for m in before["members"]} == set(members)
        for restarting, staying in (("instance-a", "instance-b"), ("instance-b", "instance-a")):
            other = members[staying]
            other_events, other_generation = other.events, other.generation()
            old_member_id = members[restarting].generation()[1]

            members[restarting].close()  # a static member does not leave the group when it closes
            members[restarting].raise_error()
            during = describe_group(broker.bootstrap, group)
            assert during["group_state"] == "Stable" and len(during["members"]) == 2, during

            back = members[restarting] = start(restarting, f"{kind}-{restarting}-again")
            wanted = partitions[restarting]
            wait_for(lambda m=back, wanted=wanted: m.partitions(topic) == wanted, REBALANCE_WAIT_S, lambda m=back: (m, partitions))
            time.sleep(1.5)  # several heartbeats of the other member: a rebalance would show now
            assert other.events == other_events, f"{staying} saw a rebalance: {other.events[len(other_events):]}"
            assert other.generation() == other_generation
            assert {i: m.partitions(topic) for i, m in members.items()} == partitions
            after = describe_group(broker.bootstrap, group)
            assert after["group_state"] == "Stable"
            by_instance = {m["group_instance_id"]: m for m in after["members"]}
            assert set(by_instance) == set(members)
            assert by_instance[restarting]["member_id"] not in ("", old_member_id)
            assert by_instance[restarting]["member_id"] == back.generation()[1]
            assert by_instance[staying]["member_id"] == other_generation[1]
            for instance in members:
                assert assigned_partitions(by_instance[instance], topic) == partitions[instance]
    finally:
        close_all(list(members.values()))


@pytest.mark.parametrize("kind", ["confluent", "kafka-python"])
def test_cooperative_sticky_join_revokes_incrementally(broker, kind):
    """With cooperative-sticky a joining member takes partitions from the first
    one incrementally: the first member never has its whole assignment revoked."""
    topic = unique_topic("grp-coop")
    create_topic(broker.bootstrap, topic, 6)
    group = unique_topic("g-coop")
    members = []
    try:
        first = GroupMember(kind, broker.bootstrap, group, [topic], name="coop-1", strategy="cooperative-sticky").start()
        members.append(first)
        wait_split([first], topic, 6)
        produce_values(broker.bootstrap, topic, range(6), 2, "before")
        second = GroupMember(kind, broker.bootstrap, group, [topic], name="coop-2", strategy="cooperative-sticky").start()
        members.append(second)
        split = wait_split(members, topic, 6, stable_s=1.0)
        assert sorted(len(p) for p in split) == [3, 3]

        full = frozenset((topic, p) for p in range(6))
        history = first.history
        start = history.index(full)
        assert all(assignment for assignment in history[start:]), f"first member lost every partition: {history}"
        revokes = [tps for kind, tps in first.events if kind == "revoked"]
        assert revokes, first.events
        assert all(tps and tps != full for tps in revokes), f"not incremental: {first.events}"
        assert not [e for e in first.events if e[0] == "lost"], first.events
        # The partitions the first member kept never moved.
        assert first.partitions(topic) < set(range(6))
        assert not [e for e in second.events if e[0] == "revoked" and e[1]], second.events
        for m in members:
            m.clear_records()
        check_each_consumes_its_partitions(members, topic, produce_values(broker.bootstrap, topic, range(6), 3, "after"))
    finally:
        close_all(members)


def test_two_groups_each_get_every_message(broker):
    """Groups are independent: one group per client on the same topic, each gets everything once."""
    topic = unique_topic("grp-fanout")
    create_topic(broker.bootstrap, topic, 4)
    produced = produce_values(broker.bootstrap, topic, range(4), 5, "fanout")
    expected = sorted(v for values in produced.values() for v in values)
    members = []
    try:
        for kind in KINDS:
            members.append(GroupMember(kind, broker.bootstrap, unique_topic(f"g-fanout-{kind}"), [topic], name=f"fanout-{kind}").start())
        wait_for(lambda: all(len(m.values()) >= len(expected) for m in members), 30, lambda: members)
        time.sleep(0.5)
        for m in members:
            assert sorted(m.values()) == expected, m
    finally:
        close_all(members)


def test_groups_and_offsets_survive_broker_restart(broker_factory):
    """Committed offsets and group metadata are in ``__consumer_offsets``: after a
    restart the admin APIs see them and a consumer resumes where the group was."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient, TopicPartition

    first = broker_factory(GROUP_OVERRIDES)
    topic = unique_topic("grp-restart")
    create_topic(first.bootstrap, topic, 3)
    group = unique_topic("g-restart")
    produce_values(first.bootstrap, topic, range(3), 5, "before")
    member = GroupMember("confluent", first.bootstrap, group, [topic], name="restart-1").start()
    try:
        wait_for(lambda: len(member.values()) >= 15, 30, lambda: member)
        member.commit()
    finally:
        close_all([member])
    # An offsets-only group (no members ever): committed by the admin API.
    admin_group = unique_topic("g-restart-admin")
    kadmin = KafkaAdminClient(bootstrap_servers=first.bootstrap, request_timeout_ms=30000)
    try:
        errors = kadmin.alter_group_offsets(admin_group, {TopicPartition(topic, 1): _oam(2, "kept")})
        assert all(e.errno == 0 for e in errors.values()), errors
    finally:
        kadmin.close()
    assert first.stop() == 0

    second = broker_factory(GROUP_OVERRIDES, data_dir=first.data_dir)
    kadmin = KafkaAdminClient(bootstrap_servers=second.bootstrap, request_timeout_ms=30000)
    try:
        listed = {g["group_id"]: g for g in kadmin.list_groups()}
        assert listed[group]["protocol_type"] == "consumer" and listed[group]["group_state"] == "Empty", listed
        assert listed[admin_group]["protocol_type"] == "" and listed[admin_group]["group_state"] == "Empty", listed
        described = kadmin.describe_groups([group])[group]
        assert (described["group_state"], described["protocol_type"], described["members"]) == ("Empty", "consumer", [])
        offsets = kadmin.list_group_offsets({group: None, admin_group: None})
        assert {tp.partition: o.offset for tp, o in offsets[group].items()} == {0: 5, 1: 5, 2: 5}
        assert {(tp.partition, o.offset, o.metadata) for tp, o in offsets[admin_group].items()} == {(1, 2, "kept")}
    finally:
        kadmin.close()
    cadmin = AdminClient({"bootstrap.servers": second.bootstrap})
    futures = cadmin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [CTopicPartition(topic, p) for p in range(3)])])
    result = futures[group].result(30)
    assert {tp.partition: tp.offset for tp in result.topic_partitions} == {0: 5, 1: 5, 2: 5}

    produced = produce_values(second.bootstrap, topic, range(3), 2, "after")
    expected = {v for values in produced.values() for v in values}
    member = GroupMember("kafka-python", second.bootstrap, group, [topic], name="restart-2").start()
    try:
        wait_for(lambda: set(member.values()) >= expected, 30, lambda: member)
        time.sleep(1.0)
        assert sorted(member.values()) == sorted(expected)
    finally:
        close_all([member])


def _oam(offset: int, metadata: str = ""):
    from kafka.structs import OffsetAndMetadata

    return OffsetAndMetadata(offset, metadata, -1)


def test_groups_wait_until_enough_brokers_for_the_offsets_topic(broker_factory):
    """offsets.topic.replication.factor=3 on a lone broker: as in Kafka,
    __consumer_offsets is not created and FindCoordinator answers the retriable
    COORDINATOR_NOT_AVAILABLE; nothing is created with fewer replicas. The log
    says so once per interval, not once per request, and, as this node is its
    own quorum (no other broker can ever join), what to set."""
    from protocol.errors import ErrorCode
    from protocol.registry import APIS_BY_NAME
    from protocol.schema import struct_classes
    from tests.interop._support import RawConnection

    broker = broker_factory({"offsets.topic.replication.factor": "3"})
    find_coordinator = APIS_BY_NAME["FindCoordinator"]
    metadata = APIS_BY_NAME["Metadata"]
    with RawConnection(broker.bootstrap) as connection:
        for _ in range(5):
            body = struct_classes(find_coordinator.request).FindCoordinatorRequest(key="g", key_type=0)
            assert connection.request(find_coordinator, 3, body).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        M = struct_classes(metadata.request)
        response = connection.request(metadata, 12, M.MetadataRequest(topics=None, allow_auto_topic_creation=False))
        assert "__consumer_offsets" not in {t.name for t in response.topics}
    # The broker logged before it answered, but the test's reader thread may not
    # have taken the line off the pipe yet: wait for it (bounded), then a little
    # longer for a second one, had the broker logged twice.
    deadline = time.monotonic() + 10
    while "cannot create __consumer_offsets" not in broker.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    lines = [line for line in broker.log_text().splitlines() if "cannot create __consumer_offsets" in line]
    assert len(lines) == 1, lines
    assert "offsets.topic.replication.factor=3" in lines[0] and lines[0].endswith("set offsets.topic.replication.factor=1")
