"""The group coordinator's error paths, driven with raw requests over TCP.

Each simulated member has its own connection, so a JoinGroup that waits for a
rebalance does not hold up the others (a broker answers one connection's
requests in order). Expected codes are Apache Kafka's.
"""

from __future__ import annotations

import struct

import pytest

from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.conftest import BrokerProcess, wait_until
from tests.interop._support import RawConnection, create_topic, unique_topic

NONE = 0
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82

API = {name: APIS_BY_NAME[name] for name in ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch", "DescribeGroups")}
Q = {name: struct_classes(api.request) for name, api in API.items()}


def subscription(topics) -> bytes:
    """ConsumerProtocolSubscription v0."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def assignment(partitions: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    out = struct.pack(">hi", 0, len(partitions))
    for topic, parts in partitions.items():
        out += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    return out + struct.pack(">i", -1)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    overrides = {"group.min.session.timeout.ms": "1000", "group.max.session.timeout.ms": "60000"}
    broker = BrokerProcess(tmp_path_factory.mktemp("group-protocol-broker"), overrides).start()
    yield broker
    broker.stop()


class Member:
    """One simulated group member on its own connection."""

    def __init__(self, broker, group: str, *, instance_id: str | None = None, topics=("t",), protocols=None, protocol_type="consumer"):
        self.conn = RawConnection(broker)
        self.group = group
        self.instance_id = instance_id
        self.protocols = protocols if protocols is not None else [("range", subscription(list(topics)))]
        self.protocol_type = protocol_type
        self.member_id = ""
        self.generation = -1
        self.leader = ""
        self.members = []

    def close(self) -> None:
        self.conn.close()

    def join_request(self, session_ms=10000, rebalance_ms=10000):
        return API["JoinGroup"].request.cls(
            group_id=self.group,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            protocol_type=self.protocol_type,
            protocols=[Q["JoinGroup"].JoinGroupRequestProtocol(name=n, metadata=m) for n, m in self.protocols],
        )

    def send_join(self, version: int = 9, **kwargs) -> int:
        return self.conn.send(API["JoinGroup"], version, self.join_request(**kwargs))

    def read_join(self, version: int = 9):
        _, response = self.conn.read_response(API["JoinGroup"], version)
        if response.member_id:
            self.member_id = response.member_id
        if response.error_code == NONE:
            self.generation, self.leader, self.members = response.generation_id, response.leader, response.members
        return response

    def join(self, version: int = 9, **kwargs):
        """JoinGroup, answering MEMBER_ID_REQUIRED once; returns the final response."""
        self.send_join(version, **kwargs)
        response = self.read_join(version)
        if response.error_code == MEMBER_ID_REQUIRED:
            self.send_join(version, **kwargs)
            response = self.read_join(version)
        return response

    def sync(self, assignments: dict[str, bytes] | None = None, *, generation: int | None = None, version: int = 5, protocol_name="range"):
        body = API["SyncGroup"].request.cls(
            group_id=self.group,
            generation_id=self.generation if generation is None else generation,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            protocol_type=self.protocol_type,
            protocol_name=protocol_name,
            assignments=[Q["SyncGroup"].SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in (assignments or {}).items()],
        )
        return self.conn.request(API["SyncGroup"], version, body)

    def heartbeat(self, *, generation: int | None = None, member_id: str | None = None, version: int = 4) -> int:
        body = API["Heartbeat"].request.cls(
            group_id=self.group,
            generation_id=self.generation if generation is None else generation,
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance_id,
        )
        return self.conn.request(API["Heartbeat"], version, body).error_code

    def commit(self, topic: str, offsets: dict[int, int], *, generation: int | None = None, version: int = 8) -> dict[int, int]:
        C = Q["OffsetCommit"]
        body = API["OffsetCommit"].request.cls(
            group_id=self.group,
            generation_id_or_member_epoch=self.generation if generation is None else generation,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            topics=[
                C.OffsetCommitRequestTopic(
                    name=topic,
                    partitions=[C.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_metadata="") for p, o in offsets.items()],
                )
            ],
        )
        response = self.conn.request(API["OffsetCommit"], version, body)
        return {p.partition_index: p.error_code for p in response.topics[0].partitions}


def describe(broker, group: str):
    with RawConnection(broker) as conn:
        return conn.request(API["DescribeGroups"], 5, API["DescribeGroups"].request.cls(groups=[group])).groups[0]


def wait_state(broker, group: str, state: str, timeout_s: float = 10) -> None:
    """Wait for the group's state (a request on another connection may still be on its way)."""
    assert wait_until(lambda: describe(broker, group).group_state == state, timeout_s), describe(broker, group)


def stable_group(broker, group: str, topic: str, **kwargs) -> Member:
    """A one-member group, joined and synced (Stable, generation 1)."""
    member = Member(broker, group, topics=[topic], **kwargs)
    response = member.join()
    assert (response.error_code, response.generation_id, response.leader) == (NONE, 1, member.member_id), response
    synced = member.sync({member.member_id: assignment({topic: [0]})})
    assert synced.error_code == NONE, synced
    return member


def test_member_id_required_then_join(broker):
    group = unique_topic("raw-mir")
    member = Member(broker, group)
    try:
        member.send_join(9)
        first = member.read_join(9)
        assert (first.error_code, first.generation_id, first.members) == (MEMBER_ID_REQUIRED, -1, [])
        assert first.member_id
        assert describe(broker, group).group_state in ("Empty", "Dead")  # not a member yet
        member.send_join(9)
        second = member.read_join(9)
        assert (second.error_code, second.member_id, second.generation_id) == (NONE, first.member_id, 1)
        assert (second.leader, second.protocol_type, second.protocol_name, second.skip_assignment) == (first.member_id, "consumer", "range", False)
        assert [(m.member_id, m.metadata) for m in second.members] == [(first.member_id, member.protocols[0][1])]
        # A member id the group never handed out.
        stranger = Member(broker, group)
        stranger.member_id = "made-up-id"
        try:
            assert stranger.join().error_code == UNKNOWN_MEMBER_ID
        finally:
            stranger.close()
    finally:
        member.close()


def test_pending_member_id_stays_valid_after_a_rebalance_completes(broker):
    """A member id handed out with MEMBER_ID_REQUIRED stays valid after a rebalance
    that completed without it (Kafka keeps pending members until they join or expire)."""
    group = unique_topic("raw-pending")
    a, b = Member(broker, group), Member(broker, group)
    try:
        a.send_join()
        assert a.read_join().error_code == MEMBER_ID_REQUIRED
        b.send_join()
        assert b.read_join().error_code == MEMBER_ID_REQUIRED
        a.send_join()
        # The first rebalance of a new group ends after the (zero) initial delay, without b.
        assert (a.read_join().error_code, a.generation) == (NONE, 1)
        assert a.sync({a.member_id: b""}).error_code == NONE
        b.send_join()  # waits for the rebalance its join starts
        wait_state(broker, group, "PreparingRebalance")
        assert a.heartbeat() == REBALANCE_IN_PROGRESS
        a.send_join()
        joined_a, joined_b = a.read_join(), b.read_join()
        assert (joined_a.error_code, joined_b.error_code) == (NONE, NONE), (joined_a, joined_b)
        assert joined_a.generation_id == joined_b.generation_id == 2
        assert {m.member_id for m in (joined_a.members or joined_b.members)} == {a.member_id, b.member_id}
    finally:
        a.close()
        b.close()


def test_invalid_session_timeout_and_group_id(broker):
    group = unique_topic("raw-session")
    member = Member(broker, group)
    try:
        for session_ms in (999, 60001):
            response = member.join(session_ms=session_ms)
            assert (response.error_code, response.member_id) == (INVALID_SESSION_TIMEOUT, ""), session_ms
        assert describe(broker, group).group_state == "Dead"  # nothing was created
        member.group = ""
        assert member.join().error_code == INVALID_GROUP_ID
    finally:
        member.close()


def test_inconsistent_group_protocol(broker):
    topic = unique_topic("raw-proto")
    group = unique_topic("raw-proto")
    first = stable_group(broker, group, topic)
    others = [
        Member(broker, group, protocols=[("roundrobin", subscription([topic]))]),  # no protocol in common
        Member(broker, group, protocol_type="connect"),  # another protocol type
        Member(broker, group, protocols=[]),  # no protocols at all
    ]
    try:
        for other in others:
            assert other.join().error_code == INCONSISTENT_GROUP_PROTOCOL
        assert describe(broker, group).group_state == "Stable"
        # An empty protocol list is refused for a new group too.
        lonely = Member(broker, unique_topic("raw-proto-new"), protocols=[])
        try:
            assert lonely.join().error_code == INCONSISTENT_GROUP_PROTOCOL
        finally:
            lonely.close()
        # SyncGroup v5 checks the protocol name against the group's.
        assert first.sync(protocol_name="roundrobin").error_code == INCONSISTENT_GROUP_PROTOCOL
    finally:
        first.close()
        for other in others:
            other.close()


def test_heartbeat_errors(broker):
    topic = unique_topic("raw-hb")
    member = stable_group(broker, unique_topic("raw-hb"), topic)
    try:
        assert member.heartbeat() == NONE
        assert member.heartbeat(generation=member.generation - 1) == ILLEGAL_GENERATION
        assert member.heartbeat(generation=member.generation + 1) == ILLEGAL_GENERATION
        assert member.heartbeat(member_id="not-a-member") == UNKNOWN_MEMBER_ID
        for version in range(5):
            assert member.heartbeat(version=version) == NONE
    finally:
        member.close()


def test_sync_heartbeat_and_commit_across_a_rebalance(broker):
    topic = unique_topic("raw-rebalance")
    create_topic(broker.bootstrap, topic, 2)
    group = unique_topic("raw-rebalance")
    a = stable_group(broker, group, topic)
    b = Member(broker, group, topics=[topic])
    try:
        b.send_join()
        assert b.read_join().error_code == MEMBER_ID_REQUIRED
        b.send_join()  # waits: the group is rebalancing, a has not rejoined
        wait_state(broker, group, "PreparingRebalance")
        assert a.heartbeat() == REBALANCE_IN_PROGRESS
        assert a.sync({a.member_id: b""}).error_code == REBALANCE_IN_PROGRESS
        # Until it rejoins, a may still commit what it consumed in its generation.
        assert a.commit(topic, {0: 1}) == {0: NONE}
        old_generation = a.generation
        a.send_join()
        joined_a, joined_b = a.read_join(), b.read_join()
        assert joined_a.error_code == joined_b.error_code == NONE
        assert a.generation == b.generation == old_generation + 1
        leader = a if a.leader == a.member_id else b
        follower = b if leader is a else a
        # CompletingRebalance: commits wait for the assignment, old generations are gone.
        assert a.commit(topic, {0: 2}) == {0: REBALANCE_IN_PROGRESS}
        assert a.commit(topic, {0: 2}, generation=old_generation) == {0: ILLEGAL_GENERATION}
        assert follower.sync(generation=old_generation).error_code == ILLEGAL_GENERATION
        unknown = Member(broker, group, topics=[topic])
        unknown.member_id, unknown.generation = "not-a-member", a.generation
        try:
            assert unknown.sync().error_code == UNKNOWN_MEMBER_ID
            assert unknown.commit(topic, {0: 2}) == {0: UNKNOWN_MEMBER_ID}
        finally:
            unknown.close()
        plan = {a.member_id: assignment({topic: [0]}), b.member_id: assignment({topic: [1]})}
        assert leader.sync(plan).assignment == plan[leader.member_id]
        assert follower.sync().assignment == plan[follower.member_id]
        assert describe(broker, group).group_state == "Stable"
        assert a.commit(topic, {0: 2}) == {0: NONE}
        assert b.commit(topic, {1: 5}, generation=old_generation) == {1: ILLEGAL_GENERATION}
        # A member must commit with its generation; a commit without membership
        # (no member id, generation -1) is refused while the group has members.
        assert a.commit(topic, {0: 3}, generation=-1) == {0: ILLEGAL_GENERATION}
        outsider = Member(broker, group, topics=[topic])
        try:
            assert outsider.commit(topic, {0: 3}) == {0: UNKNOWN_MEMBER_ID}
        finally:
            outsider.close()
    finally:
        a.close()
        b.close()


def test_offset_commit_to_unknown_group_with_a_generation(broker):
    """Kafka answers ILLEGAL_GENERATION before OffsetCommit v9, GROUP_ID_NOT_FOUND from v9."""
    topic = unique_topic("raw-commit-unknown")
    create_topic(broker.bootstrap, topic, 1)
    member = Member(broker, unique_topic("raw-commit-unknown"))
    member.member_id, member.generation = "ghost", 3
    try:
        assert member.commit(topic, {0: 1}, version=8) == {0: ILLEGAL_GENERATION}
        assert member.commit(topic, {0: 1}, version=9) == {0: GROUP_ID_NOT_FOUND}
        assert describe(broker, member.group).group_state == "Dead"
    finally:
        member.close()


def test_static_member_replacement_fences_the_old_id(broker):
    topic = unique_topic("raw-static")
    group = unique_topic("raw-static")
    first = Member(broker, group, instance_id="inst", topics=[topic])
    try:
        first.send_join()
        joined = first.read_join()  # static members need no MEMBER_ID_REQUIRED round
        assert (joined.error_code, joined.generation_id, joined.leader) == (NONE, 1, first.member_id)
        assert first.sync({first.member_id: assignment({topic: [0]})}).error_code == NONE

        # v9: the restarted static leader keeps the generation and is told to skip the assignment.
        second = Member(broker, group, instance_id="inst", topics=[topic])
        rejoined = second.join(9)
        assert (rejoined.error_code, rejoined.generation_id, rejoined.skip_assignment) == (NONE, 1, True)
        assert rejoined.member_id not in ("", first.member_id) and rejoined.leader == rejoined.member_id
        assert [m.member_id for m in rejoined.members] == [rejoined.member_id]
        assert second.sync().assignment == assignment({topic: [0]})
        assert first.heartbeat() == FENCED_INSTANCE_ID
        assert first.sync().error_code == FENCED_INSTANCE_ID
        assert first.join().error_code == FENCED_INSTANCE_ID
        assert second.heartbeat() == NONE

        # v5-8: it is answered with the leader id it replaced and no members, so it does not assign.
        third = Member(broker, group, instance_id="inst", topics=[topic])
        rejoined = third.join(8)
        assert (rejoined.error_code, rejoined.generation_id, rejoined.members) == (NONE, 1, [])
        assert rejoined.leader == second.member_id != rejoined.member_id
        assert third.sync(version=3).assignment == assignment({topic: [0]})
        assert second.heartbeat() == FENCED_INSTANCE_ID
        assert describe(broker, group).group_state == "Stable"

        # LeaveGroup v3+: a member id that does not own the instance id is fenced; the instance id alone leaves.
        M = Q["LeaveGroup"]
        with RawConnection(broker) as conn:
            body = API["LeaveGroup"].request.cls(
                group_id=group,
                members=[
                    M.MemberIdentity(member_id=second.member_id, group_instance_id="inst"),
                    M.MemberIdentity(member_id="", group_instance_id="other-inst"),
                ],
            )
            response = conn.request(API["LeaveGroup"], 5, body)
            assert response.error_code == NONE
            assert [(m.group_instance_id, m.error_code) for m in response.members] == [("inst", FENCED_INSTANCE_ID), ("other-inst", UNKNOWN_MEMBER_ID)]
            body = API["LeaveGroup"].request.cls(group_id=group, members=[M.MemberIdentity(member_id="", group_instance_id="inst")])
            response = conn.request(API["LeaveGroup"], 4, body)
            assert [(m.member_id, m.error_code) for m in response.members] == [("", NONE)]
        assert describe(broker, group).group_state == "Empty"
        second.close()
        third.close()
    finally:
        first.close()


def test_offset_fetch_v8_several_groups(broker):
    t1, t2 = unique_topic("raw-fetch-a"), unique_topic("raw-fetch-b")
    create_topic(broker.bootstrap, t1, 2)
    create_topic(broker.bootstrap, t2, 2)
    g1, g2, g3, g4 = (unique_topic(f"raw-fetch-{i}") for i in range(4))
    for group, topic, offsets in ((g1, t1, {0: 3, 1: 4}), (g1, t2, {1: 8}), (g2, t2, {0: 9})):
        committer = Member(broker, group)
        try:
            assert committer.commit(topic, offsets) == {p: NONE for p in offsets}
        finally:
            committer.close()
    F = Q["OffsetFetch"]
    for version in (8, 9):
        body = API["OffsetFetch"].request.cls(
            groups=[
                F.OffsetFetchRequestGroup(group_id=g1, topics=None),  # every committed offset
                F.OffsetFetchRequestGroup(group_id=g2, topics=[F.OffsetFetchRequestTopics(name=t2, partition_indexes=[0, 1])]),
                F.OffsetFetchRequestGroup(group_id=g3, topics=[F.OffsetFetchRequestTopics(name=t1, partition_indexes=[0])]),
                F.OffsetFetchRequestGroup(group_id=g4, topics=None),
            ],
            require_stable=True,
        )
        with RawConnection(broker) as conn:
            response = conn.request(API["OffsetFetch"], version, body)
        got = {
            g.group_id: (g.error_code, {(t.name, p.partition_index): (p.committed_offset, p.error_code) for t in g.topics for p in t.partitions})
            for g in response.groups
        }
        assert got == {
            g1: (NONE, {(t1, 0): (3, NONE), (t1, 1): (4, NONE), (t2, 1): (8, NONE)}),
            g2: (NONE, {(t2, 0): (9, NONE), (t2, 1): (-1, NONE)}),
            g3: (NONE, {(t1, 0): (-1, NONE)}),  # an unknown group: no offsets, no error
            g4: (NONE, {}),
        }, version
        assert [g.group_id for g in response.groups] == [g1, g2, g3, g4]
