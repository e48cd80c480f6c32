"""confluent-kafka with ``group.protocol=consumer`` (KIP-848) against one broker.

The broker assigns: members only heartbeat (ConsumerGroupHeartbeat), commit
with their member epoch (OffsetCommit v9) and are described by
ConsumerGroupDescribe. Each test starts its own broker, with a short
``group.consumer.heartbeat.interval.ms`` so that changes are seen quickly.
Records are produced while a group is stable, and every record is committed
before the next poll, so the checks are exact: who consumes what, and after a
member leaves or a group resumes, that nothing committed is consumed again.

Every wait is bounded; every client is closed and every broker stopped.
"""

from __future__ import annotations

import time
import uuid

import pytest

from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.interop._support import RawConnection, create_topic, unique_topic
from tests.ports import free_port

confluent_kafka = pytest.importorskip("confluent_kafka")
if confluent_kafka.libversion()[1] < 0x020C0000:
    pytest.skip("group.protocol=consumer needs librdkafka 2.12+", allow_module_level=True)

BROKER_OVERRIDES = {"group.consumer.heartbeat.interval.ms": "300"}
WAIT_S = 40
DESCRIBE = APIS_BY_NAME["ConsumerGroupDescribe"]
DESCRIBE_REQUEST = struct_classes(DESCRIBE.request)


class Member:
    """A consumer-protocol consumer polled from the test's thread; every record it
    gets is committed (synchronously) before it is polled again."""

    def __init__(self, bootstrap: str, group: str, *, topics=None, pattern=None, instance_id: str | None = None):
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
        if instance_id is not None:
            config["group.instance.id"] = instance_id
        self.consumer = confluent_kafka.Consumer(config)
        self.consumer.subscribe([pattern] if pattern else list(topics))
        self.values: list[bytes] = []
        self.errors: list[str] = []
        self.closed = False

    def poll(self, timeout_s: float = 0.05) -> None:
        message = self.consumer.poll(timeout_s)
        if message is None:
            return
        if message.error():
            self.errors.append(str(message.error()))
            return
        self.values.append(message.value())
        self.consumer.commit(message=message, asynchronous=False)

    def partitions(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


@pytest.fixture
def members():
    """Members made with ``members.append(Member(...))`` are closed at teardown."""
    made: list[Member] = []
    yield made
    for member in made:
        try:
            member.close()
        except Exception:  # a consumer of a killed broker: closing is best effort
            pass


def poll_until(active: list[Member], done, describe, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for member in active:
            member.poll()
        if done():
            return
    errors = [e for m in active for e in m.errors]
    pytest.fail(f"timed out after {timeout_s}s waiting for {describe()}; client errors: {errors[:5]}")


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> dict[int, list[bytes]]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    values: dict[int, list[bytes]] = {}
    for p in range(partitions):
        values[p] = [f"{tag}-{p}-{i}".encode() for i in range(per_partition)]
        for value in values[p]:
            producer.produce(topic, value, partition=p)
    assert producer.flush(30) == 0
    return values


def of_partitions(values: dict[int, list[bytes]], partitions) -> set[bytes]:
    return {v for p in partitions for v in values[p]}


def describe_group(bootstrap: str, group: str):
    with RawConnection(bootstrap) as conn:
        response = conn.request(
            DESCRIBE, 0, DESCRIBE_REQUEST.ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
        )
    (described,) = response.groups
    return described


def test_two_members_share_then_one_takes_all_and_a_new_one_resumes(broker_factory, members):
    broker = broker_factory(BROKER_OVERRIDES)
    topic, group = unique_topic("kip848-share"), f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 4)
    first = Member(broker.bootstrap, group, topics=[topic])
    second = Member(broker.bootstrap, group, topics=[topic])
    members += [first, second]
    poll_until(
        [first, second],
        lambda: len(first.partitions()) == 2 and len(second.partitions()) == 2,
        lambda: f"2 partitions each, got {first.partitions()} and {second.partitions()}",
    )
    assert first.partitions().isdisjoint(second.partitions())
    first_parts = {p for _, p in first.partitions()}
    second_parts = {p for _, p in second.partitions()}

    # Produced while the group is stable: each member consumes exactly its partitions' records.
    values = produce(broker.bootstrap, topic, 4, 10, "a")
    poll_until(
        [first, second],
        lambda: len(first.values) + len(second.values) >= 40,
        lambda: f"40 records, got {len(first.values)} + {len(second.values)}",
    )
    assert sorted(first.values) == sorted(of_partitions(values, first_parts))
    assert sorted(second.values) == sorted(of_partitions(values, second_parts))

    # The second leaves: the first gets all four partitions and, resuming at the
    # second's committed offsets, only the records produced since.
    second.close()
    poll_until([first], lambda: len(first.partitions()) == 4, lambda: f"4 partitions, got {first.partitions()}")
    first.values.clear()
    more = produce(broker.bootstrap, topic, 4, 5, "b")
    poll_until([first], lambda: len(first.values) >= 20, lambda: f"20 records, got {len(first.values)}")
    time.sleep(0.5)
    first.poll(0.5)
    assert sorted(first.values) == sorted(of_partitions(more, range(4)))

    # Commit and resume: a new member of the emptied group starts at the committed offsets.
    first.close()
    last = produce(broker.bootstrap, topic, 4, 2, "c")
    third = Member(broker.bootstrap, group, topics=[topic])
    members.append(third)
    poll_until([third], lambda: len(third.values) >= 8, lambda: f"8 records, got {len(third.values)}")
    time.sleep(0.5)
    third.poll(0.5)
    assert sorted(third.values) == sorted(of_partitions(last, range(4)))
    described = describe_group(broker.bootstrap, group)
    assert (described.error_code, described.group_state, len(described.members)) == (0, "Stable", 1), described
    assert described.assignor_name == "uniform"


def test_regex_subscription_picks_up_a_topic_created_later(broker_factory, members):
    broker = broker_factory(BROKER_OVERRIDES)
    prefix = f"kip848-rx-{uuid.uuid4().hex[:8]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, f"{prefix}-a", 2)
    create_topic(broker.bootstrap, f"other-{prefix}", 1)  # not matched: the expression must match the whole name
    member = Member(broker.bootstrap, group, pattern=f"^{prefix}-.*")
    members.append(member)
    poll_until([member], lambda: len(member.partitions()) == 2, lambda: f"{prefix}-a's 2 partitions, got {member.partitions()}")
    create_topic(broker.bootstrap, f"{prefix}-b", 3)
    poll_until([member], lambda: len(member.partitions()) == 5, lambda: f"5 partitions, got {member.partitions()}")
    assert {t for t, _ in member.partitions()} == {f"{prefix}-a", f"{prefix}-b"}
    values = produce(broker.bootstrap, f"{prefix}-b", 3, 2, "b")
    poll_until([member], lambda: len(member.values) >= 6, lambda: f"6 records, got {len(member.values)}")
    assert sorted(member.values) == sorted(of_partitions(values, range(3)))
    described = describe_group(broker.bootstrap, group)
    (only,) = described.members
    # librdkafka sends its expressions joined as one alternation: "(^prefix-.*)".
    assert f"^{prefix}-.*" in only.subscribed_topic_regex


def test_static_member_restarts_and_keeps_its_partitions(broker_factory, members):
    broker = broker_factory(BROKER_OVERRIDES)
    topic, group = unique_topic("kip848-static"), f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 4)
    first = Member(broker.bootstrap, group, topics=[topic], instance_id="instance-a")
    second = Member(broker.bootstrap, group, topics=[topic], instance_id="instance-b")
    members += [first, second]
    poll_until(
        [first, second],
        lambda: len(first.partitions()) == 2 and len(second.partitions()) == 2,
        lambda: f"2 partitions each, got {first.partitions()} and {second.partitions()}",
    )
    kept, others = first.partitions(), second.partitions()
    before = {m.instance_id: m for m in describe_group(broker.bootstrap, group).members}
    first.close()  # a static member leaves for a while (epoch -2): nobody takes its partitions
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        second.poll()
        assert second.partitions() == others
    back = Member(broker.bootstrap, group, topics=[topic], instance_id="instance-a")
    members.append(back)
    poll_until([back, second], lambda: back.partitions() == kept, lambda: f"{kept} back, got {back.partitions()}")
    assert second.partitions() == others
    after = {m.instance_id: m for m in describe_group(broker.bootstrap, group).members}
    assert set(after) == {"instance-a", "instance-b"}
    assert after["instance-b"].member_id == before["instance-b"].member_id


def test_coordinator_restart_keeps_the_group(broker_factory, members, tmp_path):
    port = free_port()
    overrides = {**BROKER_OVERRIDES, "listeners": f"PLAINTEXT://127.0.0.1:{port}"}
    data_dir = tmp_path / "restarted"
    broker = broker_factory(overrides, data_dir=data_dir)
    topic, group = unique_topic("kip848-restart"), f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 4)
    member = Member(broker.bootstrap, group, topics=[topic])
    members.append(member)
    poll_until([member], lambda: len(member.partitions()) == 4, lambda: f"4 partitions, got {member.partitions()}")
    before = describe_group(broker.bootstrap, group)
    (old,) = before.members
    assert old.member_epoch == before.group_epoch >= 1

    broker.kill()
    broker = broker_factory(overrides, data_dir=data_dir)

    def kept() -> bool:
        described = describe_group(broker.bootstrap, group)
        return described.error_code == 0 and [m.member_id for m in described.members] == [old.member_id]

    poll_until([member], kept, lambda: f"member {old.member_id} described after the restart")
    after = describe_group(broker.bootstrap, group)
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert after.members[0].member_epoch == old.member_epoch
    # The epochs go on from there: a new member bumps the group epoch by one.
    joining = Member(broker.bootstrap, group, topics=[topic])
    members.append(joining)
    poll_until(
        [member, joining],
        lambda: len(member.partitions()) == 2 and len(joining.partitions()) == 2,
        lambda: f"2 partitions each, got {member.partitions()} and {joining.partitions()}",
    )
    described = describe_group(broker.bootstrap, group)
    assert described.group_epoch == before.group_epoch + 1
    assert {m.member_id for m in described.members} >= {old.member_id}


def _call(bootstrap: str, name: str, version: int, **fields):
    api = APIS_BY_NAME[name]
    with RawConnection(bootstrap) as conn:
        return conn.request(api, version, api.request.cls(**fields))


def test_wire_errors_between_classic_and_consumer_groups(broker_factory):
    """What the clients above never hit: a classic member and a consumer group
    (and the reverse), commits and fetches with a wrong member epoch, the listing."""
    broker = broker_factory(BROKER_OVERRIDES)
    bootstrap = broker.bootstrap
    topic = unique_topic("kip848-wire")
    create_topic(bootstrap, topic, 2)
    versions = {k.api_key: (k.min_version, k.max_version) for k in _call(bootstrap, "ApiVersions", 3,
                client_software_name="t", client_software_version="1").api_keys}
    assert (versions[68], versions[69]) == ((0, 1), (0, 0))

    consumer_group, classic_group = f"c-{uuid.uuid4().hex[:8]}", f"k-{uuid.uuid4().hex[:8]}"
    joined = _call(bootstrap, "ConsumerGroupHeartbeat", 1, group_id=consumer_group, member_id="", member_epoch=0,
                   rebalance_timeout_ms=30000, subscribed_topic_names=[topic], topic_partitions=[])
    for _ in range(20):  # COORDINATOR_LOAD_IN_PROGRESS while __consumer_offsets is made (bounded)
        if joined.error_code not in (14, 15):
            break
        time.sleep(0.25)
        joined = _call(bootstrap, "ConsumerGroupHeartbeat", 1, group_id=consumer_group, member_id="", member_epoch=0,
                       rebalance_timeout_ms=30000, subscribed_topic_names=[topic], topic_partitions=[])
    assert joined.error_code == 0, joined
    member_id, epoch = joined.member_id, joined.member_epoch
    assert epoch >= 1 and sum(len(t.partitions) for t in joined.assignment.topic_partitions) == 2

    # A classic member cannot join a consumer group; a consumer-protocol member cannot join a classic group with members.
    join = dict(group_id=consumer_group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                group_instance_id=None, protocol_type="consumer", protocols=[])
    JG = struct_classes(APIS_BY_NAME["JoinGroup"].request)
    join["protocols"] = [JG.JoinGroupRequestProtocol(name="range", metadata=b"")]
    assert _call(bootstrap, "JoinGroup", 5, **join).error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
    join["group_id"] = classic_group
    required = _call(bootstrap, "JoinGroup", 5, **join)
    assert required.error_code == 79  # MEMBER_ID_REQUIRED
    assert _call(bootstrap, "JoinGroup", 5, **{**join, "member_id": required.member_id}).error_code == 0
    refused = _call(bootstrap, "ConsumerGroupHeartbeat", 0, group_id=classic_group, member_id="", member_epoch=0,
                    rebalance_timeout_ms=30000, subscribed_topic_names=[topic], topic_partitions=[])
    assert refused.error_code == 69  # GROUP_ID_NOT_FOUND
    described = describe_group(bootstrap, classic_group)
    assert described.error_code == 69 and "not a consumer group" in described.error_message

    # OffsetCommit v9 with the member epoch: Kafka's checks.
    OC = struct_classes(APIS_BY_NAME["OffsetCommit"].request)

    def commit(version: int, member: str, member_epoch: int) -> int:
        partition = OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                                    commit_timestamp=-1, committed_metadata="")
        response = _call(bootstrap, "OffsetCommit", version, group_id=consumer_group, generation_id_or_member_epoch=member_epoch,
                         member_id=member, group_instance_id=None, retention_time_ms=-1,
                         topics=[OC.OffsetCommitRequestTopic(name=topic, partitions=[partition])])
        return response.topics[0].partitions[0].error_code

    assert commit(9, member_id, epoch) == 0
    assert commit(9, member_id, epoch - 1) == 113  # STALE_MEMBER_EPOCH
    assert commit(9, member_id, epoch + 1) == 110  # FENCED_MEMBER_EPOCH
    assert commit(9, "someone-else", epoch) == 25  # UNKNOWN_MEMBER_ID
    assert commit(8, member_id, epoch) == 35  # UNSUPPORTED_VERSION: consumer-protocol members commit with v9+
    assert commit(9, "", -1) == 25  # epoch -1 only while the group has no members

    # TxnOffsetCommit (v3+) names the member with its epoch as the generation: the same checks, refused before anything is written.
    TC = struct_classes(APIS_BY_NAME["TxnOffsetCommit"].request)

    def txn_commit(member: str, member_epoch: int) -> int:
        partition = TC.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")
        response = _call(bootstrap, "TxnOffsetCommit", 3, transactional_id="t", group_id=consumer_group, producer_id=1,
                         producer_epoch=0, generation_id=member_epoch, member_id=member, group_instance_id=None,
                         topics=[TC.TxnOffsetCommitRequestTopic(name=topic, partitions=[partition])])
        return response.topics[0].partitions[0].error_code

    assert txn_commit(member_id, epoch - 1) == 113
    assert txn_commit("someone-else", epoch) == 25

    OF = struct_classes(APIS_BY_NAME["OffsetFetch"].request)

    def fetch(member: str | None, member_epoch: int):
        group = OF.OffsetFetchRequestGroup(group_id=consumer_group, member_id=member, member_epoch=member_epoch,
                                           topics=[OF.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])
        (answer,) = _call(bootstrap, "OffsetFetch", 9, groups=[group], require_stable=False).groups
        return answer

    fetched = fetch(member_id, epoch)
    assert (fetched.error_code, fetched.topics[0].partitions[0].committed_offset) == (0, 1)
    assert fetch(member_id, epoch - 1).error_code == 113
    assert fetch(None, -1).error_code == 0  # an admin client

    listed = _call(bootstrap, "ListGroups", 5, states_filter=[], types_filter=["consumer"]).groups
    assert [(g.group_id, g.protocol_type, g.group_type) for g in listed] == [(consumer_group, "consumer", "consumer")]
    (dead,) = _call(bootstrap, "DescribeGroups", 5, groups=[consumer_group], include_authorized_operations=False).groups
    assert (dead.error_code, dead.group_state) == (0, "Dead")  # before v6 Kafka describes a non-classic group so

    left = _call(bootstrap, "ConsumerGroupHeartbeat", 0, group_id=consumer_group, member_id=member_id, member_epoch=-1)
    assert (left.error_code, left.member_epoch) == (0, -1)
    assert commit(9, "", -1) == 0  # the group is empty now
    assert describe_group(bootstrap, consumer_group).group_state == "Empty"
