"""Group admin on KIP-848 consumer groups, over the wire against one broker.

DeleteGroups (NON_EMPTY_GROUP while it has members; then the offsets' and the
group's tombstones, so a restarted broker has neither), OffsetDelete
(GROUP_SUBSCRIBED_TO_TOPIC for a topic the members subscribe to), and a
classic JoinGroup taking over an empty consumer group's id (Kafka converts an
empty group whatever ``group.consumer.migration.policy`` says). Offset expiry
is the pure coordinators' (tests/unit/test_group_coordinator.py and the
simulation in tests/sim/test_consumer_group_simulation.py): its shortest
retention is a minute.

Every wait is bounded; the broker is stopped by the fixture.
"""

from __future__ import annotations

import time
import uuid

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.interop._support import RawConnection, create_topic, unique_topic
from tests.ports import free_port

OC = struct_classes(APIS_BY_NAME["OffsetCommit"].request)
OF = struct_classes(APIS_BY_NAME["OffsetFetch"].request)
OD = struct_classes(APIS_BY_NAME["OffsetDelete"].request)
JG = struct_classes(APIS_BY_NAME["JoinGroup"].request)
RETRIABLE = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}


def _call(bootstrap: str, name: str, version: int, **fields):
    api = APIS_BY_NAME[name]
    with RawConnection(bootstrap) as conn:
        return conn.request(api, version, api.request.cls(**fields))


def _until_served(call, error_of, timeout_s: float = 20.0):
    """``call()`` again while the coordinator is loading or being made (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = call()
        if error_of(answer) not in RETRIABLE or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def _join(bootstrap: str, group: str, topics: list[str]):
    joined = _until_served(
        lambda: _call(bootstrap, "ConsumerGroupHeartbeat", 0, group_id=group, member_id="", member_epoch=0,
                      rebalance_timeout_ms=30000, subscribed_topic_names=topics, topic_partitions=[]),
        lambda r: r.error_code,
    )
    assert joined.error_code == 0, joined
    return joined.member_id, joined.member_epoch


def _leave(bootstrap: str, group: str, member_id: str) -> None:
    left = _call(bootstrap, "ConsumerGroupHeartbeat", 0, group_id=group, member_id=member_id, member_epoch=-1)
    assert left.error_code == 0, left


def _commit(bootstrap: str, group: str, member_id: str, epoch: int, offsets: dict[tuple[str, int], int]) -> None:
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(OC.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata=""))
    response = _call(bootstrap, "OffsetCommit", 9, group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
                     group_instance_id=None, retention_time_ms=-1,
                     topics=[OC.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
    assert all(p.error_code == 0 for t in response.topics for p in t.partitions), response


def _committed(bootstrap: str, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    request = OF.OffsetFetchRequestGroup(group_id=group, member_id=None, member_epoch=-1, topics=[
        OF.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in topics.items()])
    answer = _until_served(lambda: _call(bootstrap, "OffsetFetch", 9, groups=[request], require_stable=False).groups[0],
                           lambda g: g.error_code)
    assert answer.error_code == 0, answer
    return {(t.name, p.partition_index): p.committed_offset for t in answer.topics for p in t.partitions}


def _offset_delete(bootstrap: str, group: str, partitions: list[tuple[str, int]]):
    topics: dict[str, list] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(OD.OffsetDeleteRequestPartition(partition_index=partition))
    response = _call(bootstrap, "OffsetDelete", 0, group_id=group,
                     topics=[OD.OffsetDeleteRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])
    return response.error_code, {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


def _delete_group(bootstrap: str, group: str) -> int:
    (result,) = _call(bootstrap, "DeleteGroups", 2, groups_names=[group]).results
    return result.error_code


def _described_error(bootstrap: str, group: str) -> int:
    described = _until_served(
        lambda: _call(bootstrap, "ConsumerGroupDescribe", 0, group_ids=[group], include_authorized_operations=False).groups[0],
        lambda g: g.error_code,
    )
    return described.error_code


def _listed(bootstrap: str, group: str):
    return [(g.group_type, g.group_state) for g in _call(bootstrap, "ListGroups", 5, states_filter=[], types_filter=[]).groups
            if g.group_id == group]


def test_delete_groups_and_offset_delete_on_a_consumer_group_survive_a_restart(broker_factory, tmp_path):
    port = free_port()
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "group.consumer.heartbeat.interval.ms": "300"}
    data_dir = tmp_path / "admin"
    broker = broker_factory(overrides, data_dir=data_dir)
    bootstrap = broker.bootstrap
    subscribed, other = unique_topic("cg-admin-sub"), unique_topic("cg-admin-other")
    create_topic(bootstrap, subscribed, 2)
    create_topic(bootstrap, other, 1)
    group = f"cg-{uuid.uuid4().hex[:8]}"
    member_id, epoch = _join(bootstrap, group, [subscribed])
    _commit(bootstrap, group, member_id, epoch, {(subscribed, 0): 5, (other, 0): 7})

    assert _delete_group(bootstrap, group) == ErrorCode.NON_EMPTY_GROUP
    error, results = _offset_delete(bootstrap, group, [(subscribed, 0), (other, 0)])
    assert (error, results) == (0, {(subscribed, 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, (other, 0): 0})
    assert _committed(bootstrap, group, [(subscribed, 0), (other, 0)]) == {(subscribed, 0): 5, (other, 0): -1}

    # Once empty the group subscribes to nothing: every offset may be deleted.
    _leave(bootstrap, group, member_id)
    assert _listed(bootstrap, group) == [("consumer", "Empty")]
    assert _offset_delete(bootstrap, group, [(subscribed, 0)]) == (0, {(subscribed, 0): 0})
    _commit(bootstrap, group, "", -1, {(subscribed, 1): 9})  # an admin's commit to an empty group
    assert _delete_group(bootstrap, group) == 0
    assert _delete_group(bootstrap, group) == ErrorCode.GROUP_ID_NOT_FOUND
    assert _described_error(bootstrap, group) == ErrorCode.GROUP_ID_NOT_FOUND
    assert _listed(bootstrap, group) == []
    assert _committed(bootstrap, group, [(subscribed, 0), (subscribed, 1)]) == {(subscribed, 0): -1, (subscribed, 1): -1}

    # The tombstones were stored: a restarted broker replays neither the group nor its offsets.
    broker.kill()
    broker = broker_factory(overrides, data_dir=data_dir)
    bootstrap = broker.bootstrap
    assert _described_error(bootstrap, group) == ErrorCode.GROUP_ID_NOT_FOUND
    assert _committed(bootstrap, group, [(subscribed, 0), (subscribed, 1), (other, 0)]) == {
        (subscribed, 0): -1, (subscribed, 1): -1, (other, 0): -1}
    assert _listed(bootstrap, group) == []


def test_a_classic_member_takes_over_an_empty_consumer_group(broker_factory):
    broker = broker_factory({"group.consumer.heartbeat.interval.ms": "300", "group.initial.rebalance.delay.ms": "0"})
    bootstrap = broker.bootstrap
    topic = unique_topic("cg-downgrade")
    create_topic(bootstrap, topic, 1)
    group = f"cg-{uuid.uuid4().hex[:8]}"
    member_id, epoch = _join(bootstrap, group, [topic])
    _commit(bootstrap, group, member_id, epoch, {(topic, 0): 3})
    join = dict(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="", group_instance_id=None,
                protocol_type="consumer", protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=b"")])
    # With a member in it the consumer group takes a classic member only with a readable
    # ``consumer`` protocol subscription (this one's metadata is empty).
    assert _call(bootstrap, "JoinGroup", 5, **join).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    _leave(bootstrap, group, member_id)

    required = _call(bootstrap, "JoinGroup", 5, **join)
    assert required.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = _call(bootstrap, "JoinGroup", 5, **{**join, "member_id": required.member_id})
    assert joined.error_code == 0, joined
    assert _described_error(bootstrap, group) == ErrorCode.GROUP_ID_NOT_FOUND
    assert [t for t, _ in _listed(bootstrap, group)] == ["classic"]
    assert _committed(bootstrap, group, [(topic, 0)]) == {(topic, 0): 3}, "the offsets stay with the id"
