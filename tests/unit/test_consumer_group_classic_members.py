"""Classic-protocol members in a KIP-848 consumer group: the online upgrade (pure core, no broker).

A Stable classic group is converted by a consumer-protocol member's join; its
members keep their partitions at the classic generation, then rejoin with the
classic protocol to move toward the server's target; their membership survives
a replay of the stored records; their sessions are their own.
"""

from __future__ import annotations

import uuid

from broker.coordinators.consumer_groups.classic_members import (
    ClassicGroupView,
    ClassicJoin,
    ClassicMemberView,
    upgrade_refusal,
)
from broker.coordinators.consumer_groups.coordinator import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    HeartbeatRequest,
)
from broker.coordinators.consumer_groups.model import MemberState, TopicInfo
from protocol.consumer_offsets import decode_assignment, encode_assignment
from protocol.errors import ErrorCode
from protocol.registry import DATA_MESSAGES
from protocol.codec import encode_struct

T = uuid.UUID(int=7)
SUBSCRIPTION = DATA_MESSAGES["ConsumerProtocolSubscription"]
CLASSIC_TOMBSTONE = (b"\x00\x02classic-group-key", None)


def subscription(topics=("t",), owned: dict[str, list[int]] | None = None) -> bytes:
    owned_cls = next(f.type.item for f in SUBSCRIPTION.struct.fields if f.name == "owned_partitions").cls
    value = SUBSCRIPTION.struct.cls(
        topics=list(topics), user_data=None,
        owned_partitions=[owned_cls(topic=t, partitions=ps) for t, ps in (owned or {}).items()], generation_id=-1, rack_id=None)
    out = bytearray(b"\x00\x01")
    encode_struct(SUBSCRIPTION.struct, 1, False, value, out)
    return bytes(out)


class Harness:
    def __init__(self):
        ids = iter(f"new-{i}" for i in range(1000))
        self.coordinator = ConsumerGroupCoordinator(ConsumerGroupConfig(session_timeout_ms=45_000), lambda: next(ids))
        self.coordinator.set_topics({"t": TopicInfo(T, "t", (frozenset(),) * 4)})
        self.log: list = []

    def carry_out(self, effects):
        for effect in effects:
            self.log.extend(effect.records)
            self.coordinator.store_done(effect.token, ErrorCode.NONE)

    def upgrade(self, view: ClassicGroupView, now_ms: int = 0):
        answers = []
        request = HeartbeatRequest("g", "", 0, rebalance_timeout_ms=10_000, subscribed_topic_names=("t",), owned=frozenset())
        self.carry_out(self.coordinator.heartbeat(now_ms, request, answers.append, view, CLASSIC_TOMBSTONE))
        return answers[0]

    def join(self, member_id: str, owned=None, now_ms: int = 0):
        answers = []
        self.carry_out(self.coordinator.classic_join(now_ms, ClassicJoin(
            "g", member_id, None, "client", "/host", 6000, 10_000, "consumer",
            (("range", subscription(owned=owned)),), True), answers.append))
        return answers[0]


def classic_view() -> ClassicGroupView:
    def member(member_id: str, partitions: list[int]) -> ClassicMemberView:
        return ClassicMemberView(member_id, None, "client", "/host", 6000, 10_000, (("range", subscription()),),
                                 encode_assignment({"t": partitions}))

    return ClassicGroupView("g", 3, "range", (member("a", [0, 1]), member("b", [2, 3])))


def test_conversion_keeps_the_classic_members_and_their_partitions_at_the_generation():
    harness = Harness()
    answer = harness.upgrade(classic_view())
    assert answer.error == ErrorCode.NONE and answer.member_epoch == 4  # the classic generation was 3
    assert harness.log[0] == CLASSIC_TOMBSTONE, "the classic group's tombstone is stored first"
    group = harness.coordinator.groups["g"]
    assert set(group.members) == {"a", "b", answer.member_id}
    a = group.members["a"]
    assert a.classic is not None and a.classic.session_timeout_ms == 6000
    # Untouched until it speaks: at the classic generation, with what its SyncGroup gave it.
    assert (a.member_epoch, a.state, a.assigned) == (3, MemberState.STABLE, frozenset({(T, 0), (T, 1)}))
    assert group.target["a"] | group.target["b"] | group.target[answer.member_id] == frozenset((T, p) for p in range(4))
    # The new member waits for partitions the classic members still hold.
    assert answer.assignment == frozenset()
    # Replay of the stored records (the classic tombstone is not a consumer group record) gives the same group.
    replayed = ConsumerGroupCoordinator(ConsumerGroupConfig())
    for key, value in harness.log[1:]:
        replayed.load_record(key, value)
    assert replayed.groups == harness.coordinator.groups


def test_classic_members_rejoin_to_give_up_partitions_then_the_new_member_gets_them():
    harness = Harness()
    new = harness.upgrade(classic_view())
    group = harness.coordinator.groups["g"]
    # The classic members are behind the group epoch: their heartbeats ask them to rejoin.
    assert harness.coordinator.classic_heartbeat(100, "g", 3, "a") == ErrorCode.REBALANCE_IN_PROGRESS
    assert harness.coordinator.classic_heartbeat(100, "g", 2, "a") == ErrorCode.ILLEGAL_GENERATION
    assert harness.coordinator.classic_heartbeat(100, "g", 3, new.member_id) == ErrorCode.UNKNOWN_MEMBER_ID
    # Eager members revoke everything before rejoining (they own nothing).
    for member_id in ("a", "b"):
        joined = harness.join(member_id, now_ms=200)
        assert joined.error == ErrorCode.NONE and joined.generation_id == group.assignment_epoch
        error, name, assignment = harness.coordinator.classic_sync(200, "g", joined.generation_id, member_id, "consumer", "range")
        assert (error, name) == (ErrorCode.NONE, "range")
        kept = {p for entry in decode_assignment(assignment) for p in entry.partitions}
        assert kept == {p for _, p in group.members[member_id].assigned}
    assert all(group.members[m].assigned == group.target[m] for m in ("a", "b"))
    # The consumer-protocol member now gets its share, released by the classic members.
    answers = []
    harness.carry_out(harness.coordinator.heartbeat(300, HeartbeatRequest(
        "g", new.member_id, new.member_epoch, owned=frozenset()), answers.append))
    assert answers[0].error == ErrorCode.NONE
    assert group.members[new.member_id].assigned == group.target[new.member_id] != frozenset()
    holders = [tp for m in group.members.values() for tp in m.assigned]
    assert len(holders) == len(set(holders)) == 4, "each partition held by exactly one member"
    for member_id in ("a", "b"):
        member = group.members[member_id]
        assert harness.coordinator.classic_heartbeat(400, "g", member.member_epoch, member_id) == ErrorCode.NONE


def test_a_cooperative_member_keeps_partitions_until_it_says_it_gave_them_up():
    harness = Harness()
    harness.upgrade(classic_view())
    group = harness.coordinator.groups["g"]
    a = group.members["a"]
    to_revoke = a.assigned - group.target["a"]
    still = {"t": sorted(p for _, p in a.assigned)}
    joined = harness.join("a", owned=still)
    if to_revoke:
        assert group.members["a"].state == MemberState.UNREVOKED_PARTITIONS
        assert joined.generation_id == 3, "its epoch moves only once it has revoked"
        assert harness.coordinator.classic_heartbeat(0, "g", 3, "a") == ErrorCode.REBALANCE_IN_PROGRESS
        joined = harness.join("a", owned={"t": sorted(p for _, p in group.members["a"].assigned)})
    assert group.members["a"].state in (MemberState.STABLE, MemberState.UNRELEASED_PARTITIONS)
    assert joined.generation_id == group.assignment_epoch


def test_classic_sessions_expire_on_their_own_timeout_and_leave_removes():
    harness = Harness()
    new = harness.upgrade(classic_view(), now_ms=0)
    harness.carry_out(harness.coordinator.tick(5_999))
    assert {"a", "b"} <= set(harness.coordinator.groups["g"].members)
    harness.carry_out(harness.coordinator.heartbeat(5_000, HeartbeatRequest("g", new.member_id, new.member_epoch), lambda r: None))
    answers = []
    harness.carry_out(harness.coordinator.classic_leave(5_000, "g", [("b", None), ("nobody", None)], answers.append))
    assert answers == [(ErrorCode.NONE, [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID])]
    harness.carry_out(harness.coordinator.tick(6_000))  # a's classic session (6 s) ended; the consumer member's (45 s) did not
    assert set(harness.coordinator.groups["g"].members) == {new.member_id}


def test_what_is_not_converted_or_taken_in():
    view = classic_view()
    assert upgrade_refusal(view, max_size=1) is not None
    static = ClassicGroupView("g", 3, "range", (ClassicMemberView("a", "instance", "c", "/h", 6000, 10_000,
                                                                   (("range", subscription()),), b""),))
    assert "static" in upgrade_refusal(static, max_size=10)
    garbled = ClassicGroupView("g", 3, "range", (ClassicMemberView("a", None, "c", "/h", 6000, 10_000, (("range", b"?"),), b""),))
    assert upgrade_refusal(garbled, max_size=10) is not None
    assert upgrade_refusal(view, max_size=10) is None
    harness = Harness()
    new = harness.upgrade(view)
    answers = []
    harness.carry_out(harness.coordinator.classic_join(0, ClassicJoin("g", "", "static-1", "c", "/h", 6000, 10_000, "consumer",
                                                                      (("range", subscription()),), True), answers.append))
    assert answers[0].error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert harness.join("").error == ErrorCode.MEMBER_ID_REQUIRED
    assert harness.join(new.member_id).error == ErrorCode.UNKNOWN_MEMBER_ID, "a consumer-protocol member's id"
    # A consumer-protocol heartbeat naming a classic member is not that member's.
    answers = []
    harness.carry_out(harness.coordinator.heartbeat(0, HeartbeatRequest("g", "a", 3), answers.append))
    assert answers[0].error == ErrorCode.UNKNOWN_MEMBER_ID
