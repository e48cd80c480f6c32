"""TxnOffsetCommit against a real broker, with raw requests (KIP-98, KIP-447).

What does not need a transaction coordinator: the validation errors of
TxnOffsetCommit (each leaving the group's offsets as they were), offsets that
stay invisible to OffsetFetch (UNSTABLE_OFFSET_COMMIT with require_stable)
until a COMMIT marker for the producer reaches the group's
``__consumer_offsets`` partition, an ABORT marker that drops them, and a
broker restart in between. The markers are sent as a transaction coordinator
sends them (WriteTxnMarkers); the producer ids are made up, as the group
coordinator takes the request's. Expected codes are Apache Kafka's.
"""

from __future__ import annotations

import itertools

import pytest

from protocol.consumer_offsets import partition_for_group
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.conftest import BrokerProcess, wait_until
from tests.interop._support import RawConnection, create_topic, unique_topic

OFFSETS_PARTITIONS = 5
OVERRIDES = {
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "group.min.session.timeout.ms": "1000",
    "offset.metadata.max.bytes": "100",
}
API = {
    name: APIS_BY_NAME[name]
    for name in ("ApiVersions", "FindCoordinator", "JoinGroup", "SyncGroup", "OffsetCommit", "OffsetFetch", "TxnOffsetCommit", "WriteTxnMarkers")
}
Q = {name: struct_classes(api.request) for name, api in API.items()}
# Made-up producer ids, one per transaction a test opens (the partition's
# producer state remembers each).
_producer_ids = itertools.count(7_000_000)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("txn-offset-commit-broker"), OVERRIDES).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def topic(broker):
    name = unique_topic("txn-offsets")
    create_topic(broker.bootstrap, name, partitions=3)
    return name


def coordinator_ready(broker, group: str) -> None:
    """FindCoordinator creates __consumer_offsets; wait until the group's partition is loaded."""
    with RawConnection(broker) as conn:
        body = Q["FindCoordinator"].FindCoordinatorRequest(key=group, key_type=0)

        def ready():
            if conn.request(API["FindCoordinator"], 3, body).error_code != 0:
                return False
            return fetch(conn, group, None, version=7).error_code == 0

        assert wait_until(ready, 30), f"no coordinator for {group}"


def fetch(conn, group: str, partitions: dict[str, list[int]] | None, *, version: int = 7, require_stable: bool = False):
    R = Q["OffsetFetch"]
    if version >= 8:
        topics = None if partitions is None else [R.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in partitions.items()]
        body = R.OffsetFetchRequest(groups=[R.OffsetFetchRequestGroup(group_id=group, topics=topics)], require_stable=require_stable)
    else:
        topics = None if partitions is None else [R.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in partitions.items()]
        body = R.OffsetFetchRequest(group_id=group, topics=topics, require_stable=require_stable)
    return conn.request(API["OffsetFetch"], version, body)


def fetched(conn, group: str, topic: str, partitions: list[int], *, require_stable: bool = False) -> dict[int, tuple[int, int]]:
    """{partition: (offset, error)} from OffsetFetch v7."""
    response = fetch(conn, group, {topic: partitions}, require_stable=require_stable)
    assert response.error_code == 0, response
    return {p.partition_index: (p.committed_offset, p.error_code) for t in response.topics for p in t.partitions}


def txn_commit(
    conn, group: str, topic: str, offsets: dict[int, int], *, producer_id: int, epoch: int = 0, version: int = 3,
    generation: int = -1, member_id: str = "", instance_id: str | None = None, metadata: str = "", extra_topics=(),
) -> dict[tuple[str, int], int]:
    R = Q["TxnOffsetCommit"]
    partitions = [
        R.TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata=metadata)
        for p, o in offsets.items()
    ]
    topics = [R.TxnOffsetCommitRequestTopic(name=topic, partitions=partitions)]
    for name, parts in extra_topics:
        topics.append(R.TxnOffsetCommitRequestTopic(name=name, partitions=[
            R.TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=1, committed_leader_epoch=-1, committed_metadata="") for p in parts
        ]))
    body = R.TxnOffsetCommitRequest(
        transactional_id="txn-" + group,
        group_id=group,
        producer_id=producer_id,
        producer_epoch=epoch,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        topics=topics,
    )
    response = conn.request(API["TxnOffsetCommit"], version, body)
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


def plain_commit(conn, group: str, topic: str, offsets: dict[int, int]) -> None:
    R = Q["OffsetCommit"]
    body = R.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[R.OffsetCommitRequestTopic(name=topic, partitions=[
            R.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_metadata="") for p, o in offsets.items()
        ])],
    )
    response = conn.request(API["OffsetCommit"], 8, body)
    assert all(p.error_code == 0 for t in response.topics for p in t.partitions), response


def write_marker(conn, group: str, producer_id: int, commit: bool, epoch: int = 0) -> int:
    """A transaction coordinator's WriteTxnMarkers for the group's offsets partition; its error."""
    R = Q["WriteTxnMarkers"]
    partition = partition_for_group(group, OFFSETS_PARTITIONS)
    body = R.WriteTxnMarkersRequest(markers=[R.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=epoch, transaction_result=commit,
        topics=[R.WritableTxnMarkerTopic(name="__consumer_offsets", partition_indexes=[partition])], coordinator_epoch=0,
    )])
    response = conn.request(API["WriteTxnMarkers"], 1, body)
    (marker,) = response.markers
    (topic,) = marker.topics
    (result,) = topic.partitions
    return result.error_code


class Member:
    """One group member over its own connection (JoinGroup v5, SyncGroup v3)."""

    def __init__(self, broker, group: str, instance_id: str | None = None):
        self.conn = RawConnection(broker)
        self.group = group
        self.instance_id = instance_id
        self.member_id = ""
        self.generation = -1

    def join_and_sync(self) -> None:
        J = Q["JoinGroup"]
        for _ in range(2):  # the second time with the member id the broker asked for
            body = J.JoinGroupRequest(
                group_id=self.group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id=self.member_id,
                group_instance_id=self.instance_id, protocol_type="consumer",
                protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")],
            )
            response = self.conn.request(API["JoinGroup"], 5, body)
            self.member_id = response.member_id
            if response.error_code == 0:
                break
            assert response.error_code == ErrorCode.MEMBER_ID_REQUIRED, response
        assert response.error_code == 0, response
        self.generation = response.generation_id
        S = Q["SyncGroup"]
        synced = self.conn.request(API["SyncGroup"], 3, S.SyncGroupRequest(
            group_id=self.group, generation_id=self.generation, member_id=self.member_id, group_instance_id=self.instance_id,
            assignments=[S.SyncGroupRequestAssignment(member_id=self.member_id, assignment=b"")],
        ))
        assert synced.error_code == 0, synced

    def close(self) -> None:
        self.conn.close()


# --------------------------------------------------------------------------- tests


def test_txn_offset_commit_is_advertised(broker):
    with RawConnection(broker) as conn:
        response = conn.request(API["ApiVersions"], 3, Q["ApiVersions"].ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    entries = [(k.min_version, k.max_version) for k in response.api_keys if k.api_key == 28]
    assert entries == [(0, 5)], "TxnOffsetCommit must be registered in broker/handlers/__init__.py"


def test_validation_errors_change_nothing(broker, topic):
    group = unique_topic("txn-bad")
    coordinator_ready(broker, group)
    with RawConnection(broker) as conn:
        pid = next(_producer_ids)
        plain_commit(conn, group, topic, {0: 3})
        assert txn_commit(conn, group, topic, {0: 9, 99: 9}, producer_id=pid, extra_topics=[("no-such-topic", [0])]) == {
            (topic, 0): 0,
            (topic, 99): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        # That one opened a transaction; the refusals below must not touch any partition.
        other = unique_topic("txn-bad")
        coordinator_ready(broker, other)
        cases = [
            ({}, "", ErrorCode.INVALID_GROUP_ID),
            ({"generation": 4, "member_id": "m"}, other, ErrorCode.ILLEGAL_GENERATION),
            ({"producer_id": -1}, other, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
            ({"metadata": "x" * 101}, other, ErrorCode.OFFSET_METADATA_TOO_LARGE),
        ]
        for kwargs, group_id, error in cases:
            kwargs.setdefault("producer_id", next(_producer_ids))
            assert txn_commit(conn, group_id, topic, {1: 5}, **kwargs) == {(topic, 1): error}, kwargs
        assert fetched(conn, other, topic, [0, 1], require_stable=True) == {0: (-1, 0), 1: (-1, 0)}
        assert fetch(conn, other, None).topics == []
        # The first group: the committed offset is shown, the transaction's stays pending.
        assert fetched(conn, group, topic, [0]) == {0: (3, 0)}
        assert fetched(conn, group, topic, [0], require_stable=True) == {0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}
        assert write_marker(conn, group, pid, commit=False) == 0


def test_membership_is_checked_for_v3(broker, topic):
    group = unique_topic("txn-member")
    coordinator_ready(broker, group)
    member = Member(broker, group, instance_id="instance-1")
    try:
        member.join_and_sync()
        conn = member.conn
        cases = [
            ({"generation": member.generation, "member_id": "ghost"}, ErrorCode.UNKNOWN_MEMBER_ID),
            ({"generation": member.generation + 1, "member_id": member.member_id, "instance_id": "instance-1"}, ErrorCode.ILLEGAL_GENERATION),
            ({"generation": member.generation, "member_id": "other-id", "instance_id": "instance-1"}, ErrorCode.FENCED_INSTANCE_ID),
        ]
        for kwargs, error in cases:
            assert txn_commit(conn, group, topic, {0: 5}, producer_id=next(_producer_ids), **kwargs) == {(topic, 0): error}, kwargs
        assert fetched(conn, group, topic, [0], require_stable=True) == {0: (-1, 0)}
        pid = next(_producer_ids)
        ok = txn_commit(conn, group, topic, {0: 5}, producer_id=pid, generation=member.generation, member_id=member.member_id, instance_id="instance-1")
        assert ok == {(topic, 0): 0}
        # Without membership (as v0-2 always are) a commit is accepted while the group has members.
        assert txn_commit(conn, group, topic, {1: 6}, producer_id=pid, version=2) == {(topic, 1): 0}
        assert fetched(conn, group, topic, [0, 1], require_stable=True) == {
            0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
            1: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
        }
        assert write_marker(conn, group, pid, commit=True) == 0
        assert fetched(conn, group, topic, [0, 1], require_stable=True) == {0: (5, 0), 1: (6, 0)}
    finally:
        member.close()


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_offsets_take_effect_only_with_the_commit_marker(broker, topic, version):
    group = unique_topic(f"txn-v{version}")
    coordinator_ready(broker, group)
    pid = next(_producer_ids)
    with RawConnection(broker) as conn:
        plain_commit(conn, group, topic, {0: 3})
        assert txn_commit(conn, group, topic, {0: 10, 2: 20}, producer_id=pid, version=version) == {(topic, 0): 0, (topic, 2): 0}
        # Read uncommitted or not, the transaction's offsets are not shown before its end.
        assert fetched(conn, group, topic, [0, 2]) == {0: (3, 0), 2: (-1, 0)}
        assert fetched(conn, group, topic, [0, 2], require_stable=True) == {
            0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
            2: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
        }
        # v8: the same per partition; the group's error stays NONE, as in Kafka.
        (answer,) = fetch(conn, group, {topic: [0, 2]}, version=8, require_stable=True).groups
        assert answer.error_code == 0
        assert [(p.partition_index, p.committed_offset, p.error_code) for t in answer.topics for p in t.partitions] == [
            (0, -1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
            (2, -1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
        ]
        # All offsets of the group: only the committed partition, unstable.
        everything = fetch(conn, group, None, require_stable=True)
        assert [(p.partition_index, p.error_code) for t in everything.topics for p in t.partitions] == [(0, ErrorCode.UNSTABLE_OFFSET_COMMIT)]

        assert write_marker(conn, group, pid, commit=True) == 0
        assert fetched(conn, group, topic, [0, 2], require_stable=True) == {0: (10, 0), 2: (20, 0)}
        # A repeated marker (the coordinator retrying) changes nothing.
        assert write_marker(conn, group, pid, commit=True) == 0
        assert fetched(conn, group, topic, [0, 2]) == {0: (10, 0), 2: (20, 0)}


def test_an_abort_marker_drops_the_offsets(broker, topic):
    group = unique_topic("txn-abort")
    coordinator_ready(broker, group)
    pid = next(_producer_ids)
    with RawConnection(broker) as conn:
        plain_commit(conn, group, topic, {0: 3})
        assert txn_commit(conn, group, topic, {0: 10}, producer_id=pid) == {(topic, 0): 0}
        assert write_marker(conn, group, pid, commit=False) == 0
        assert fetched(conn, group, topic, [0], require_stable=True) == {0: (3, 0)}


def test_pending_offsets_survive_a_restart_until_their_marker(broker_factory, tmp_path):
    data_dir = tmp_path / "restarted"
    first = broker_factory(OVERRIDES, data_dir=data_dir)
    name = unique_topic("txn-restart")
    create_topic(first.bootstrap, name, partitions=1)
    committed_group, open_group = unique_topic("txn-done"), unique_topic("txn-open")
    done_pid, open_pid = next(_producer_ids), next(_producer_ids)
    for group in (committed_group, open_group):
        coordinator_ready(first, group)
    with RawConnection(first) as conn:
        assert txn_commit(conn, committed_group, name, {0: 11}, producer_id=done_pid) == {(name, 0): 0}
        assert write_marker(conn, committed_group, done_pid, commit=True) == 0
        assert txn_commit(conn, open_group, name, {0: 22}, producer_id=open_pid) == {(name, 0): 0}
    first.stop()

    second = broker_factory(OVERRIDES, data_dir=data_dir)
    for group in (committed_group, open_group):
        coordinator_ready(second, group)
    with RawConnection(second) as conn:
        assert fetched(conn, committed_group, name, [0], require_stable=True) == {0: (11, 0)}
        assert fetched(conn, open_group, name, [0], require_stable=True) == {0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}
        assert fetched(conn, open_group, name, [0]) == {0: (-1, 0)}
        assert write_marker(conn, open_group, open_pid, commit=True) == 0
        assert fetched(conn, open_group, name, [0], require_stable=True) == {0: (22, 0)}


def test_a_stale_producer_epoch_is_refused_by_the_log(broker, topic):
    group = unique_topic("txn-epoch")
    coordinator_ready(broker, group)
    pid = next(_producer_ids)
    with RawConnection(broker) as conn:
        assert txn_commit(conn, group, topic, {0: 10}, producer_id=pid, epoch=3) == {(topic, 0): 0}
        assert write_marker(conn, group, pid, commit=True, epoch=3) == 0
        # A zombie of the producer, with the epoch before the last one.
        assert txn_commit(conn, group, topic, {0: 99}, producer_id=pid, epoch=2) == {(topic, 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        assert fetched(conn, group, topic, [0], require_stable=True) == {0: (10, 0)}
