"""confluent-kafka's ShareConsumer (KIP-932 share groups) against one broker.

Share groups are served once the cluster finalizes ``share.version`` 1, which
a new cluster does at formation (one test takes it away with ``pybroker
features disable`` and sees the APIs go). Each test
starts its own broker with a short heartbeat interval, ``share.auto.offset.reset``
earliest and, where a test waits for a lock to end, a short lock.

Every wait is bounded; every consumer is closed and every broker stopped.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

from protocol.records import iter_batches
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.conftest import PROJECT_ROOT, wait_until
from tests.interop._support import RawConnection, create_topic, unique_topic

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("this confluent-kafka has no ShareConsumer", allow_module_level=True)

from confluent_kafka import AcknowledgeType, ShareConsumer  # noqa: E402

BROKER_OVERRIDES = {"group.share.heartbeat.interval.ms": "300", "share.auto.offset.reset": "earliest"}
WAIT_S = 40
SHARE_API_KEYS = {76, 77, 78, 79}
API_VERSIONS = APIS_BY_NAME["ApiVersions"]
UPDATE_FEATURES = APIS_BY_NAME["UpdateFeatures"]
DESCRIBE = APIS_BY_NAME["ShareGroupDescribe"]


def _listed_keys(bootstrap: str) -> set[int]:
    with RawConnection(bootstrap) as connection:
        answer = connection.request(API_VERSIONS, 3, struct_classes(API_VERSIONS.request).ApiVersionsRequest(
            client_software_name="share-test", client_software_version="1"))
    return {entry.api_key for entry in answer.api_keys}


def enable_share_groups(bootstrap: str) -> None:
    """A new cluster finalizes share.version 1: wait until the share APIs are listed."""
    deadline = time.monotonic() + WAIT_S
    while not SHARE_API_KEYS <= _listed_keys(bootstrap):
        assert time.monotonic() < deadline, "share.version finalized but the share APIs are not listed"
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0


class Member:
    def __init__(self, bootstrap: str, group: str, topic: str, *, explicit: bool = False, max_records: int = 500):
        self.consumer = ShareConsumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit" if explicit else "implicit",
            "max.poll.records": max_records,
        })
        self.consumer.subscribe([topic])
        self.got: list[tuple[bytes, int]] = []  # (value, delivery count)
        self.closed = False

    def poll(self, timeout_s: float = 0.2) -> list:
        messages = [m for m in self.consumer.poll(timeout_s) if m.error() is None]
        self.got += [(m.value(), m.delivery_count()) for m in messages]
        return messages

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


@pytest.fixture
def members():
    made: list[Member] = []
    yield made
    for member in made:
        try:
            member.close()
        except Exception:  # a consumer of a stopped broker: closing is best effort
            pass


def poll_until(active: list[Member], done, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        for member in active:
            member.poll(0.05)


def describe(bootstrap: str, group: str):
    R = struct_classes(DESCRIBE.request)
    with RawConnection(bootstrap) as connection:
        answer = connection.request(DESCRIBE, 1, R.ShareGroupDescribeRequest(group_ids=[group], include_authorized_operations=False))
    (described,) = answer.groups
    return described


def wait_for_members(bootstrap: str, group: str, active: list[Member], timeout_s: float = WAIT_S) -> None:
    """Poll ``active`` until the group describes every one of them with an assignment.

    A member joins when its client has found the coordinator; on a new broker the
    first lookups may answer COORDINATOR_NOT_AVAILABLE while ``__consumer_offsets``
    is created, and librdkafka asks again only a second later, so one member can
    join well after the others (Kafka answers the same while it creates the topic)."""
    def joined() -> bool:
        described = describe(bootstrap, group)
        return described.error_code == 0 and len(described.members) == len(active) and all(
            m.assignment.topic_partitions for m in described.members)
    poll_until(active, joined, timeout_s)


def share_groups_tool(broker, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "share-groups", "--bootstrap-server", broker.bootstrap, *args],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )


def test_share_apis_are_not_offered_before_share_version_is_finalized(broker_factory):
    broker = broker_factory(BROKER_OVERRIDES)
    # A new cluster finalizes share.version 1: take it away as an operator would.
    assert SHARE_API_KEYS <= _listed_keys(broker.bootstrap)
    disabled = subprocess.run(
        [sys.executable, "-m", "broker", "features", "--bootstrap-server", broker.bootstrap, "disable", "--feature", "share.version"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )
    assert disabled.returncode == 0, disabled.stderr
    assert wait_until(lambda: not SHARE_API_KEYS & _listed_keys(broker.bootstrap), 10)
    heartbeat = APIS_BY_NAME["ShareGroupHeartbeat"]
    R = struct_classes(heartbeat.request)
    with RawConnection(broker.bootstrap) as connection:
        answer = connection.request(heartbeat, 1, R.ShareGroupHeartbeatRequest(
            group_id="g", member_id="m", member_epoch=0, rack_id=None, subscribed_topic_names=["t"]))
    assert answer.error_code == 35  # UNSUPPORTED_VERSION
    assert answer.member_epoch == -1


def test_consumers_on_one_partition_get_distinct_records(broker_factory, members):
    broker = broker_factory(BROKER_OVERRIDES)
    enable_share_groups(broker.bootstrap)
    topic, group = unique_topic("share"), f"g-{uuid.uuid4()}"
    create_topic(broker.bootstrap, topic, 1)
    for _ in range(3):
        members.append(Member(broker.bootstrap, group, topic, max_records=5))
    # All three must share the partition before there is anything to share: a
    # member that joined late would neither compete for the records nor be described.
    wait_for_members(broker.bootstrap, group, members)
    values = [f"v{i}".encode() for i in range(150)]
    produce(broker.bootstrap, topic, values)
    poll_until(members, lambda: sum(len(m.got) for m in members) >= len(values))
    got = [value for m in members for value, _ in m.got]
    assert sorted(got) == sorted(values), "every record delivered exactly once"
    described = describe(broker.bootstrap, group)
    assert described.error_code == 0 and described.group_state == "Stable" and len(described.members) == 3
    assert all([tp.partitions for tp in m.assignment.topic_partitions] == [[0]] for m in described.members)
    # The tool shows the same, as kafka-share-groups.sh does.
    listed = share_groups_tool(broker, "--list")
    assert listed.returncode == 0 and group in listed.stdout.split()
    members = share_groups_tool(broker, "--describe", "--group", group, "--members")
    assert members.returncode == 0, members.stderr
    rows = [line.split() for line in members.stdout.splitlines()[2:]]
    assert len(rows) == 3 and all(row[0] == group and row[-1] == f"{topic}:0" for row in rows)
    state = share_groups_tool(broker, "--describe", "--group", group, "--state")
    assert state.returncode == 0 and state.stdout.splitlines()[2].split()[-4:] == ["Stable", str(described.group_epoch), str(described.assignment_epoch), "3"]
    assert share_groups_tool(broker, "--describe", "--group", "nope").returncode == 1


def test_unacknowledged_record_is_redelivered_after_its_lock(broker_factory, members):
    broker = broker_factory({**BROKER_OVERRIDES, "group.share.record.lock.duration.ms": "1500"})
    enable_share_groups(broker.bootstrap)
    topic, group = unique_topic("share-lock"), f"g-{uuid.uuid4()}"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [b"only"])
    holder = Member(broker.bootstrap, group, topic, explicit=True)
    members.append(holder)
    poll_until([holder], lambda: holder.got)
    assert holder.got == [(b"only", 1)]
    # The holder never acknowledges (nor polls again): its lock ends, another member gets it.
    other = Member(broker.bootstrap, group, topic)
    members.append(other)
    started = time.monotonic()
    poll_until([other], lambda: other.got)
    assert other.got == [(b"only", 2)]
    assert time.monotonic() - started >= 0.5  # not before the lock could have ended


def test_delivery_limit_archives_the_record(broker_factory, members):
    broker = broker_factory({**BROKER_OVERRIDES, "group.share.delivery.count.limit": "2"})
    enable_share_groups(broker.bootstrap)
    topic, group = unique_topic("share-limit"), f"g-{uuid.uuid4()}"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [b"poison"])
    member = Member(broker.bootstrap, group, topic, explicit=True)
    members.append(member)
    deliveries = 0
    deadline = time.monotonic() + WAIT_S
    while deliveries < 2:
        assert time.monotonic() < deadline
        for message in member.poll(0.1):
            deliveries += 1
            member.consumer.acknowledge(message, AcknowledgeType.RELEASE)
        member.consumer.commit_sync(10)
    assert member.got == [(b"poison", 1), (b"poison", 2)]
    # Released twice, at the limit: archived. A later record comes; the poison one never again.
    produce(broker.bootstrap, topic, [b"next"])
    deadline = time.monotonic() + WAIT_S
    while len(member.got) < 3:
        assert time.monotonic() < deadline
        for message in member.poll(0.1):
            member.consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        member.consumer.commit_sync(10)
    assert member.got[2] == (b"next", 1)
    end = time.monotonic() + 2
    while time.monotonic() < end:
        assert not member.poll(0.1)


def test_acknowledgements_survive_a_broker_restart(broker_factory, members):
    broker = broker_factory(BROKER_OVERRIDES)
    enable_share_groups(broker.bootstrap)
    topic, group = unique_topic("share-restart"), f"g-{uuid.uuid4()}"
    create_topic(broker.bootstrap, topic, 1)
    values = [f"r{i}".encode() for i in range(10)]
    produce(broker.bootstrap, topic, values)
    messages_by_value = {}
    second = Member(broker.bootstrap, group, topic, explicit=True, max_records=10)
    members.append(second)
    deadline = time.monotonic() + WAIT_S
    # Accept the even ones, release the odd ones (the broker may hand a released
    # one back at once: released again, far below the delivery limit).
    while len({v for v, _ in second.got}) < 10:
        assert time.monotonic() < deadline
        for message in second.poll(0.1):
            messages_by_value[message.value()] = message
            kind = AcknowledgeType.ACCEPT if int(message.value()[1:]) % 2 == 0 else AcknowledgeType.RELEASE
            second.consumer.acknowledge(message, kind)
        second.consumer.commit_sync(10)
    assert {v for v, _ in second.got} == set(values)
    second.close()
    data_dir = broker.data_dir
    broker.stop()
    restarted = broker_factory(BROKER_OVERRIDES, data_dir=data_dir)
    third = Member(restarted.bootstrap, group, topic, max_records=10)
    members.append(third)
    poll_until([third], lambda: len(third.got) >= 5)
    end = time.monotonic() + 2
    while time.monotonic() < end:
        third.poll(0.1)
    # Only the released (odd) ones come again; no accepted one does.
    assert sorted(v for v, _ in third.got) == sorted(v for v in values if int(v[1:]) % 2 == 1)


def test_share_sessions_and_acknowledgements_on_the_wire(broker_factory):
    broker = broker_factory(BROKER_OVERRIDES)
    enable_share_groups(broker.bootstrap)
    topic, group = unique_topic("share-wire"), f"g-{uuid.uuid4()}"
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [b"a", b"b", b"c"])
    metadata = APIS_BY_NAME["Metadata"]
    fetch, ack = APIS_BY_NAME["ShareFetch"], APIS_BY_NAME["ShareAcknowledge"]
    heartbeat = APIS_BY_NAME["ShareGroupHeartbeat"]
    F, A, H = struct_classes(fetch.request), struct_classes(ack.request), struct_classes(heartbeat.request)
    M = struct_classes(metadata.request)
    with RawConnection(broker.bootstrap) as connection:
        topic_id = connection.request(metadata, 12, M.MetadataRequest(
            topics=[M.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic)], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)).topics[0].topic_id
        joined = connection.request(heartbeat, 1, H.ShareGroupHeartbeatRequest(
            group_id=group, member_id="member-a", member_epoch=0, rack_id=None, subscribed_topic_names=[topic]))
        assert (joined.error_code, joined.member_epoch) == (0, 1)

        def share_fetch(member: str, epoch: int, acks=(), max_wait_ms: int = 2000):
            batches = [F.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=t) for f, l, t in acks]
            return connection.request(fetch, 1, F.ShareFetchRequest(
                group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=max_wait_ms, min_bytes=1,
                max_bytes=1 << 20, max_records=2, batch_size=2,
                topics=[F.FetchTopic(topic_id=topic_id, partitions=[F.FetchPartition(partition_index=0, acknowledgement_batches=batches)])],
                forgotten_topics_data=[]))

        def share_ack(member: str, epoch: int, acks):
            batches = [A.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=t) for f, l, t in acks]
            return connection.request(ack, 1, A.ShareAcknowledgeRequest(
                group_id=group, member_id=member, share_session_epoch=epoch,
                topics=[A.AcknowledgeTopic(topic_id=topic_id, partitions=[A.AcknowledgePartition(partition_index=0, acknowledgement_batches=batches)])]))

        assert share_fetch("member-a", 5).error_code == 122  # SHARE_SESSION_NOT_FOUND
        assert share_ack("member-a", 0, [(0, 0, [1])]).error_code == 123  # INVALID_SHARE_SESSION_EPOCH
        first = share_fetch("member-a", 0)
        assert first.error_code == 0 and first.acquisition_lock_timeout_ms == 30000
        (partition,) = first.responses[0].partitions
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in partition.acquired_records] == [(0, 1, 1)]
        assert partition.records
        assert share_fetch("member-a", 7).error_code == 123  # the next epoch is 1
        # Another member cannot settle a's records; a can, piggy-backed on its next fetch.
        other = share_fetch("member-b", 0, max_wait_ms=0)
        assert [(r.first_offset, r.last_offset) for r in other.responses[0].partitions[0].acquired_records] == [(2, 2)]
        assert share_ack("member-b", 1, [(0, 0, [1])]).responses[0].partitions[0].error_code == 121  # INVALID_RECORD_STATE
        second = share_fetch("member-a", 1, acks=[(0, 1, [1, 2])], max_wait_ms=0)  # accept 0, release 1
        (partition,) = second.responses[0].partitions
        assert partition.acknowledge_error_code == 0
        assert [(r.first_offset, r.last_offset, r.delivery_count) for r in partition.acquired_records] == [(1, 1, 2)]
        closed = share_ack("member-a", -1, [(1, 1, [3])])  # reject 1, then close the session
        assert closed.error_code == 0 and closed.responses[0].partitions[0].error_code == 0
        assert share_fetch("member-a", 2).error_code == 122
        unknown = connection.request(DESCRIBE, 1, struct_classes(DESCRIBE.request).ShareGroupDescribeRequest(
            group_ids=["no-such-group"], include_authorized_operations=False)).groups[0]
        assert unknown.error_code == 69  # GROUP_ID_NOT_FOUND


def test_a_share_fetch_answers_with_the_batches_of_the_acquired_records_only(broker_factory):
    """max_records, not max_bytes, bounds what a share fetch reads and sends:
    records beyond the acquired ones would be sent for nothing (and read and
    copied, a fetch's 50 MB by default, at every fetch)."""
    broker = broker_factory(BROKER_OVERRIDES)
    enable_share_groups(broker.bootstrap)
    topic, group = unique_topic("share-slice"), f"g-{uuid.uuid4()}"
    create_topic(broker.bootstrap, topic, 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(20):  # one batch each
        producer.produce(topic, value=b"v%d" % i, partition=0)
        assert producer.flush(30) == 0
    metadata, fetch, heartbeat = APIS_BY_NAME["Metadata"], APIS_BY_NAME["ShareFetch"], APIS_BY_NAME["ShareGroupHeartbeat"]
    F, H, M = struct_classes(fetch.request), struct_classes(heartbeat.request), struct_classes(metadata.request)
    with RawConnection(broker.bootstrap) as connection:
        topic_id = connection.request(metadata, 12, M.MetadataRequest(
            topics=[M.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic)], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)).topics[0].topic_id
        connection.request(heartbeat, 1, H.ShareGroupHeartbeatRequest(
            group_id=group, member_id="member-a", member_epoch=0, rack_id=None, subscribed_topic_names=[topic]))
        answer = connection.request(fetch, 1, F.ShareFetchRequest(
            group_id=group, member_id="member-a", share_session_epoch=0, max_wait_ms=2000, min_bytes=1,
            max_bytes=50 << 20, max_records=3, batch_size=3,
            topics=[F.FetchTopic(topic_id=topic_id, partitions=[F.FetchPartition(partition_index=0, acknowledgement_batches=[])])],
            forgotten_topics_data=[]))
    (partition,) = answer.responses[0].partitions
    assert [(r.first_offset, r.last_offset) for r in partition.acquired_records] == [(0, 2)]
    assert [header.base_offset for _, _, header in iter_batches(partition.records)] == [0, 1, 2]
