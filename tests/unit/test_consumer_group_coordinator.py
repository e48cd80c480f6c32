"""The KIP-848 consumer group coordinator's rules, one test per rule (pure core, no broker)."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from broker.coordinators.consumer_groups.coordinator import (
    REGEX_REFRESH_MIN_INTERVAL_MS,
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    HeartbeatRequest,
    HeartbeatResponse,
)
from broker.coordinators.consumer_groups.model import MemberState, ResolvedRegex, TopicInfo
from protocol.consumer_group_records import RecordKind, decode_record
from protocol.errors import ErrorCode

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
REBALANCE_TIMEOUT_MS = 10_000
SESSION_TIMEOUT_MS = 45_000


def topic(topic_id: uuid.UUID, name: str, partitions: int, racks: tuple[frozenset[str], ...] | None = None) -> TopicInfo:
    return TopicInfo(topic_id, name, racks if racks is not None else (frozenset(),) * partitions)


class Harness:
    """A coordinator whose stores land in an in-memory log (or fail, when told to)."""

    def __init__(self, **config):
        self.ids = iter(f"member-{i}" for i in range(1000))
        self.coordinator = ConsumerGroupCoordinator(ConsumerGroupConfig(**config), lambda: next(self.ids))
        self.coordinator.set_topics({"t1": topic(T1, "t1", 4)})
        self.log: list[tuple[bytes, bytes | None]] = []
        self.fail_stores = ErrorCode.NONE

    def _carry_out(self, effects) -> None:
        for effect in effects:
            if self.fail_stores == ErrorCode.NONE:
                self.log.extend(effect.records)
            self.coordinator.store_done(effect.token, self.fail_stores)

    def hb(self, now_ms: int = 0, group_id: str = "g", **fields) -> HeartbeatResponse:
        answers: list[HeartbeatResponse] = []
        self._carry_out(self.coordinator.heartbeat(now_ms, HeartbeatRequest(group_id, **fields), answers.append))
        assert len(answers) == 1
        return answers[0]

    def join(self, now_ms: int = 0, member_id: str = "", topics=("t1",), **fields) -> HeartbeatResponse:
        fields.setdefault("rebalance_timeout_ms", REBALANCE_TIMEOUT_MS)
        return self.hb(now_ms, member_id=member_id, member_epoch=0, subscribed_topic_names=tuple(topics), owned=frozenset(), **fields)

    def tick(self, now_ms: int) -> None:
        self._carry_out(self.coordinator.tick(now_ms))

    def group(self, group_id: str = "g"):
        return self.coordinator.groups[group_id]

    def member(self, member_id: str, group_id: str = "g"):
        return self.group(group_id).members[member_id]


def parts(*partitions: int, topic_id: uuid.UUID = T1) -> frozenset:
    return frozenset((topic_id, p) for p in partitions)


def settle(h: Harness, responses: dict[str, HeartbeatResponse], now_ms: int = 0, rounds: int = 10) -> dict[str, tuple[int, frozenset]]:
    """Members heartbeat, each reporting what it owns (its last assignment), until
    no epoch or assignment moves; each member's (epoch, owned partitions) then."""
    owned = {m: r.assignment for m, r in responses.items()}
    for _ in range(rounds):
        moved = False
        for member_id, last in list(responses.items()):
            r = h.hb(now_ms, member_id=member_id, member_epoch=last.member_epoch, owned=owned[member_id])
            assert r.error == ErrorCode.NONE, r
            if r.assignment is not None:
                owned[member_id] = r.assignment
            moved |= r.member_epoch != last.member_epoch or r.assignment is not None
            responses[member_id] = r
        if not moved:
            return {m: (r.member_epoch, owned[m]) for m, r in responses.items()}
    raise AssertionError("the group did not settle")


def test_join_gets_an_id_the_first_epoch_and_every_partition():
    h = Harness()
    r = h.join()
    assert (r.error, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (ErrorCode.NONE, "member-0", 1, 5000)
    assert r.assignment == parts(0, 1, 2, 3)
    assert h.group().group_epoch == h.group().assignment_epoch == 1
    assert h.group().state == "Stable"


def test_a_client_chosen_member_id_is_kept():
    h = Harness()
    assert h.join(member_id="mine").member_id == "mine"


@pytest.mark.parametrize("fields, message", [
    ({"group_id": "", "member_id": "", "member_epoch": 0, "rebalance_timeout_ms": 1, "subscribed_topic_names": ("t1",), "owned": frozenset()}, "GroupId"),
    ({"member_id": "", "member_epoch": 0, "subscribed_topic_names": ("t1",), "owned": frozenset()}, "RebalanceTimeoutMs"),
    ({"member_id": "", "member_epoch": 0, "rebalance_timeout_ms": 1, "subscribed_topic_names": ("t1",)}, "TopicPartitions"),
    ({"member_id": "", "member_epoch": 0, "rebalance_timeout_ms": 1, "subscribed_topic_names": ("t1",), "owned": parts(0)}, "TopicPartitions"),
    ({"member_id": "", "member_epoch": 0, "rebalance_timeout_ms": 1, "owned": frozenset()}, "SubscribedTopic"),
    ({"member_id": "m", "member_epoch": -3}, "MemberEpoch"),
    ({"member_id": "", "member_epoch": 1}, "MemberId"),
    ({"member_id": "m", "member_epoch": -2}, "InstanceId"),
    ({"member_id": "m", "member_epoch": 1, "instance_id": ""}, "InstanceId"),
    ({"member_id": "m", "member_epoch": 1, "rack_id": ""}, "RackId"),
])
def test_invalid_requests(fields, message):
    h = Harness()
    group_id = fields.pop("group_id", "g")
    r = h.hb(group_id=group_id, **fields)
    assert r.error == ErrorCode.INVALID_REQUEST and message in r.error_message
    assert h.coordinator.groups == {} and h.log == []


def test_an_unknown_assignor_is_refused():
    assert Harness().join(server_assignor="sticky").error == ErrorCode.UNSUPPORTED_ASSIGNOR


def test_an_invalid_regular_expression_is_refused():
    r = Harness().hb(member_id="", member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_regex="t(", owned=frozenset())
    assert r.error == ErrorCode.INVALID_REGULAR_EXPRESSION


def test_a_regular_expression_is_resolved_after_the_heartbeat_to_the_topics_it_matches_whole():
    h = Harness()
    h.coordinator.set_topics({"t1": topic(T1, "t1", 2), "t2": topic(T2, "t2", 1), "xt1": topic(uuid.UUID(int=3), "xt1", 1)})
    r = h.hb(5, member_id="", member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_regex="t.", owned=frozenset())
    # Answered at once with what it subscribes to by name: nothing yet.
    assert r.assignment == frozenset() and h.group().resolved_regexes == {}
    assert h.coordinator.next_deadline_ms() == 0  # the resolution is due now
    epoch = h.group().group_epoch
    h.tick(10)
    assert h.group().resolved_regexes == {"t.": ResolvedRegex(frozenset({"t1", "t2"}), -1, 10)}
    assert h.group().group_epoch == epoch + 1
    r = h.hb(20, member_id=r.member_id, member_epoch=r.member_epoch)
    assert r.assignment == parts(0, 1) | parts(0, topic_id=T2)


def test_topics_by_name_come_first_and_those_of_the_regular_expression_at_a_later_heartbeat():
    h = Harness()
    h.coordinator.set_topics({"t1": topic(T1, "t1", 2), "a": topic(T2, "a", 1)})
    r = h.hb(0, member_id="", member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_names=("a",),
             subscribed_topic_regex="t.*", owned=frozenset())
    assert r.assignment == parts(0, topic_id=T2)
    h.tick(0)
    r = h.hb(0, member_id=r.member_id, member_epoch=r.member_epoch, owned=r.assignment)
    assert r.assignment == parts(0, topic_id=T2) | parts(0, 1)


def test_new_matching_topics_are_resolved_again_at_most_once_every_refresh_interval():
    h = Harness()
    h.coordinator.set_topics({"t1": topic(T1, "t1", 1)})
    r = h.hb(0, member_id="", member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_regex="t.*", owned=frozenset())
    h.tick(0)
    r = h.hb(0, member_id=r.member_id, member_epoch=r.member_epoch)
    assert r.assignment == parts(0)
    assert h.coordinator.next_deadline_ms() == SESSION_TIMEOUT_MS  # nothing to resolve
    h.coordinator.set_topics({"t1": topic(T1, "t1", 1), "t2": topic(T2, "t2", 1)})
    assert h.coordinator.next_deadline_ms() == REGEX_REFRESH_MIN_INTERVAL_MS
    h.tick(REGEX_REFRESH_MIN_INTERVAL_MS - 1)
    assert h.group().resolved_regexes["t.*"].topics == {"t1"}
    h.tick(REGEX_REFRESH_MIN_INTERVAL_MS)
    assert h.group().resolved_regexes["t.*"].topics == {"t1", "t2"}
    r = h.hb(REGEX_REFRESH_MIN_INTERVAL_MS, member_id=r.member_id, member_epoch=r.member_epoch, owned=r.assignment)
    assert r.assignment == parts(0) | parts(0, topic_id=T2)
    # A change of partitions, not of names, needs no resolution: the next heartbeat sees it.
    h.coordinator.set_topics({"t1": topic(T1, "t1", 2), "t2": topic(T2, "t2", 1)})
    assert h.coordinator.next_deadline_ms() == REGEX_REFRESH_MIN_INTERVAL_MS + SESSION_TIMEOUT_MS


def test_a_regular_expression_no_member_uses_is_tombstoned():
    h = Harness()
    r = h.hb(0, member_id="", member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_regex="t.*", owned=frozenset())
    h.join(0, topics=("t1",))
    h.tick(0)
    assert set(h.group().resolved_regexes) == {"t.*"}
    h.hb(0, member_id=r.member_id, member_epoch=-1)
    assert h.group().resolved_regexes == {}
    tombstones = [decode_record(k, v) for k, v in h.log if v is None]
    assert any(t.kind == RecordKind.REGULAR_EXPRESSION and t.regular_expression == "t.*" for t in tombstones)
    assert h.coordinator.next_deadline_ms() == SESSION_TIMEOUT_MS


def test_unknown_group_or_member():
    h = Harness()
    assert h.hb(member_id="m", member_epoch=1).error == ErrorCode.UNKNOWN_MEMBER_ID
    h.join()
    assert h.hb(member_id="other", member_epoch=1).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.hb(member_id="other", member_epoch=-1).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_an_epoch_ahead_or_behind_is_fenced_but_the_previous_one_with_its_partitions_is_not():
    h = Harness()
    first = h.join()
    assert h.hb(member_id="member-0", member_epoch=2).error == ErrorCode.FENCED_MEMBER_EPOCH
    second = h.join()  # member-1: the group goes to epoch 2
    kept = h.hb(member_id="member-0", member_epoch=1, owned=first.assignment).assignment
    assert h.member("member-0").state == MemberState.UNREVOKED_PARTITIONS
    r = h.hb(member_id="member-0", member_epoch=1, owned=kept)  # revoked
    assert r.member_epoch == 2 and h.member("member-0").previous_member_epoch == 1
    # The answer was lost: the previous epoch with partitions it was assigned is accepted...
    assert h.hb(member_id="member-0", member_epoch=1, owned=kept).error == ErrorCode.NONE
    # ...but not with partitions it no longer has, nor without saying what it owns.
    assert h.hb(member_id="member-0", member_epoch=1, owned=first.assignment).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.hb(member_id="member-0", member_epoch=1).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert second.error == ErrorCode.NONE


def test_another_members_instance_id_is_fenced():
    h = Harness()
    h.join(instance_id="a")
    h.join(instance_id="b")
    assert h.hb(member_id="member-0", member_epoch=1, instance_id="b").error == ErrorCode.FENCED_INSTANCE_ID
    assert h.hb(member_id="member-0", member_epoch=-1, instance_id="b").error == ErrorCode.FENCED_INSTANCE_ID


def test_an_instance_id_in_use_is_unreleased():
    h = Harness()
    h.join(instance_id="a")
    r = h.join(instance_id="a")
    assert r.error == ErrorCode.UNRELEASED_INSTANCE_ID
    assert list(h.group().members) == ["member-0"]


def test_a_full_group_refuses_new_members_but_not_its_own():
    h = Harness(max_size=1)
    h.join()
    assert h.join().error == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert h.join(member_id="member-0").error == ErrorCode.NONE


def test_the_group_epoch_moves_only_when_the_assignment_may_change():
    h = Harness()
    r = h.join()
    assert h.group().group_epoch == 1
    h.hb(member_id="member-0", member_epoch=1)
    assert h.group().group_epoch == 1  # a plain heartbeat
    h.hb(member_id="member-0", member_epoch=1, subscribed_topic_names=("t1",))
    assert h.group().group_epoch == 1  # the same subscription
    h.coordinator.set_topics({"t1": topic(T1, "t1", 6)})
    r = h.hb(member_id="member-0", member_epoch=1)
    assert h.group().group_epoch == 2 and r.member_epoch == 2 and r.assignment == parts(*range(6))
    h.coordinator.set_topics({"t1": topic(T1, "t1", 6), "t2": topic(T2, "t2", 1)})
    r = h.hb(member_id="member-0", member_epoch=2, subscribed_topic_names=("t1", "t2"))
    assert h.group().group_epoch == 3 and r.assignment == parts(*range(6)) | parts(0, topic_id=T2)
    r = h.hb(member_id="member-0", member_epoch=3, rack_id="r1")
    assert h.group().group_epoch == 4
    h.join()
    assert h.group().group_epoch == 5
    h.hb(member_id="member-1", member_epoch=-1)
    assert h.group().group_epoch == 6


def test_a_partition_goes_to_its_new_owner_only_after_the_old_one_revoked_it():
    h = Harness()
    first = h.join()
    second = h.join()
    assert second.member_epoch == 2 and second.assignment == frozenset()
    assert h.member("member-1").state == MemberState.UNRELEASED_PARTITIONS
    # member-0 is told to keep half: its epoch stays until it has revoked the rest.
    r0 = h.hb(member_id="member-0", member_epoch=1, owned=first.assignment)
    assert r0.member_epoch == 1 and len(r0.assignment) == 2
    revoking = first.assignment - r0.assignment
    assert h.member("member-0").pending_revocation == revoking
    # member-1 still waits: member-0 has not said it revoked.
    assert h.hb(member_id="member-1", member_epoch=2, owned=frozenset()).assignment is None
    r0 = h.hb(member_id="member-0", member_epoch=1, owned=r0.assignment)
    assert r0.member_epoch == 2 and h.member("member-0").state == MemberState.STABLE
    r1 = h.hb(member_id="member-1", member_epoch=2, owned=frozenset())
    assert r1.assignment == revoking and h.member("member-1").state == MemberState.STABLE
    assert h.group().state == "Stable"


def test_a_member_that_does_not_revoke_in_time_is_removed():
    h = Harness()
    first = h.join()
    h.join()
    h.hb(1000, member_id="member-0", member_epoch=1, owned=first.assignment)  # told to revoke at 1000
    h.hb(1000 + REBALANCE_TIMEOUT_MS - 1, member_id="member-0", member_epoch=1, owned=first.assignment)
    h.hb(1000 + REBALANCE_TIMEOUT_MS - 1, member_id="member-1", member_epoch=2)
    h.tick(1000 + REBALANCE_TIMEOUT_MS - 1)
    assert "member-0" in h.group().members
    h.tick(1000 + REBALANCE_TIMEOUT_MS)
    assert list(h.group().members) == ["member-1"] and h.group().group_epoch == 3
    r = h.hb(1000 + REBALANCE_TIMEOUT_MS, member_id="member-1", member_epoch=2)
    assert r.member_epoch == 3 and r.assignment == parts(0, 1, 2, 3)
    assert h.hb(member_id="member-0", member_epoch=1).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_silent_member_is_removed_at_the_end_of_its_session():
    h = Harness()
    h.join(0)
    h.join(0)
    h.hb(SESSION_TIMEOUT_MS - 1, member_id="member-1", member_epoch=2)
    h.tick(SESSION_TIMEOUT_MS)
    assert list(h.group().members) == ["member-1"]
    h.tick(2 * SESSION_TIMEOUT_MS - 1)
    assert list(h.group().members) == []
    assert h.group().state == "Empty"


def test_a_static_member_leaves_for_a_while_and_comes_back_with_its_partitions():
    h = Harness()
    a = h.join(instance_id="a")
    b = h.join(instance_id="b")
    settled = settle(h, {"member-0": a, "member-1": b})
    epoch = h.group().group_epoch
    r = h.hb(100, member_id="member-0", member_epoch=-2, instance_id="a")
    assert (r.error, r.member_epoch) == (ErrorCode.NONE, -2)
    assert h.group().group_epoch == epoch and h.member("member-0").assigned == settled["member-0"][1]
    # Its partitions stay its own: the other member does not get them.
    assert h.hb(200, member_id="member-1", member_epoch=epoch).assignment is None
    back = h.join(300, instance_id="a")
    assert back.member_id == "member-2" and back.assignment == settled["member-0"][1]
    assert back.member_epoch == epoch and h.group().group_epoch == epoch
    assert "member-0" not in h.group().members
    assert h.hb(member_id="member-0", member_epoch=epoch).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_static_member_away_too_long_is_removed():
    h = Harness()
    h.join(0, instance_id="a")
    h.hb(0, member_id="member-0", member_epoch=-2, instance_id="a")
    h.tick(SESSION_TIMEOUT_MS)
    assert h.group().members == {} and h.group().group_epoch == 2
    assert h.join(SESSION_TIMEOUT_MS, instance_id="a").member_epoch == 3


def test_leaving_frees_the_partitions_for_the_others():
    h = Harness()
    a, b = h.join(), h.join()
    settled = settle(h, {"member-0": a, "member-1": b})
    assert h.hb(member_id="member-0", member_epoch=-1).member_epoch == -1
    r = h.hb(member_id="member-1", member_epoch=settled["member-1"][0])
    assert r.assignment == parts(0, 1, 2, 3)


def test_the_range_assignor_when_members_ask_for_it():
    h = Harness()
    h.coordinator.set_topics({"t1": topic(T1, "t1", 3), "t2": topic(T2, "t2", 3)})
    a = h.join(topics=("t1", "t2"), server_assignor="range")
    b = h.join(topics=("t1", "t2"), server_assignor="range")
    settled = settle(h, {"member-0": a, "member-1": b})
    assert settled["member-0"][1] == parts(0, 1) | parts(0, 1, topic_id=T2)
    assert settled["member-1"][1] == parts(2) | parts(2, topic_id=T2)
    assert settled["member-1"][0] == h.group().assignment_epoch


def test_a_failed_store_changes_nothing():
    h = Harness()
    h.join()
    before = h.group().copy()
    h.fail_stores = ErrorCode.NOT_COORDINATOR
    assert h.join().error == ErrorCode.NOT_COORDINATOR
    assert h.group() == before
    assert h.hb(group_id="new", member_id="", member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_names=("t1",), owned=frozenset()).error == ErrorCode.NOT_COORDINATOR
    assert "new" not in h.coordinator.groups


def test_replay_of_the_stored_records_rebuilds_the_groups():
    h = Harness()
    h.coordinator.set_topics({"t1": topic(T1, "t1", 5, (frozenset({"r1"}),) * 5), "t2": topic(T2, "t2", 2)})
    a = h.join(instance_id="a", rack_id="r1", topics=("t1", "t2"))
    b = h.join(topics=("t1",))
    h.hb(group_id="other", member_id="", member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_regex="t.*", owned=frozenset())
    h.hb(member_id="member-0", member_epoch=a.member_epoch, owned=a.assignment)  # member-0 is mid-revocation
    h.tick(0)  # "other" resolves its regular expression
    assert b.error == ErrorCode.NONE and h.coordinator.groups["other"].resolved_regexes["t.*"].topics == {"t1", "t2"}
    loaded = ConsumerGroupCoordinator(ConsumerGroupConfig())
    for key, value in h.log:
        loaded.load_record(key, value)
    loaded.finish_loading(0)
    assert loaded.groups == h.coordinator.groups
    # The loaded expressions are checked once against this broker's topics: unchanged, nothing is stored.
    assert loaded.next_deadline_ms() == 0
    loaded.set_topics(h.coordinator.topics)
    assert loaded.tick(0) == []
    # Timers start afresh at load: member-0 has its rebalance timeout to revoke in.
    assert loaded.groups["g"].members["member-0"].state == MemberState.UNREVOKED_PARTITIONS
    assert loaded.next_deadline_ms() == REBALANCE_TIMEOUT_MS


def test_a_failed_store_puts_the_timers_back_too():
    h = Harness()
    h.join(0)
    h.fail_stores = ErrorCode.NOT_COORDINATOR
    assert h.hb(100, member_id="member-0", member_epoch=-1).error == ErrorCode.NOT_COORDINATOR
    h.tick(SESSION_TIMEOUT_MS)  # the removal fails too: the member stays, its deadline passed
    assert "member-0" in h.group().members
    h.fail_stores = ErrorCode.NONE
    h.tick(SESSION_TIMEOUT_MS + 1)  # the next tick tries again
    assert h.group().members == {}


def test_a_static_member_coming_back_subscribes_as_its_join_says():
    h = Harness()
    h.coordinator.set_topics({"t1": topic(T1, "t1", 2), "t2": topic(T2, "t2", 1)})
    h.hb(member_id="", member_epoch=0, rebalance_timeout_ms=1, subscribed_topic_regex="t.", instance_id="a", rack_id="r", owned=frozenset())
    h.hb(member_id="member-0", member_epoch=-2, instance_id="a")
    back = h.join(instance_id="a", topics=("t2",))
    member = h.member(back.member_id)
    assert (member.subscribed_topic_names, member.subscribed_topic_regex, member.rack_id) == (("t2",), None, None)
    r = h.hb(member_id=back.member_id, member_epoch=back.member_epoch, owned=back.assignment)
    assert h.member(back.member_id).assigned == parts(0, topic_id=T2) and r.error == ErrorCode.NONE


def test_each_new_revocation_restarts_the_rebalance_timeout():
    h = Harness()
    first = h.join(0)
    h.join(0)
    kept = h.hb(1000, member_id="member-0", member_epoch=1, owned=first.assignment).assignment  # revoking from 1000
    h.join(5000)  # a third member: member-0 has more to revoke once it has revoked this
    r = h.hb(5000, member_id="member-0", member_epoch=1, owned=kept)
    assert h.member("member-0").state == MemberState.UNREVOKED_PARTITIONS and r.member_epoch == 1
    h.tick(1000 + REBALANCE_TIMEOUT_MS)
    assert "member-0" in h.group().members  # its timeout started again at 5000
    h.tick(5000 + REBALANCE_TIMEOUT_MS)
    assert "member-0" not in h.group().members


def test_the_assignor_most_members_ask_for_is_used():
    h = Harness()
    h.coordinator.set_topics({"t1": topic(T1, "t1", 2), "t2": topic(T2, "t2", 2)})
    h.join(topics=("t1", "t2"), server_assignor="range")
    h.join(topics=("t1", "t2"), server_assignor="range")
    h.join(topics=("t1", "t2"), server_assignor="uniform")
    group = h.group()
    # range: per topic, member-0 and member-1 get partition 0 and 1 of each topic.
    assert group.target["member-0"] == parts(0) | parts(0, topic_id=T2)
    assert group.target["member-2"] == frozenset()


def test_a_member_that_says_it_no_longer_owns_what_it_must_revoke_moves_on_at_once():
    h = Harness()
    first = h.join()
    h.join()
    kept_target = h.group().target["member-0"]
    # It reports owning only what it keeps (it lost the rest meanwhile): no revocation round.
    r = h.hb(member_id="member-0", member_epoch=1, owned=first.assignment & kept_target)
    assert r.member_epoch == 2 and r.assignment == kept_target
    assert h.member("member-0").state == MemberState.STABLE


def test_a_member_in_an_unknown_state_is_fenced_unless_it_owns_nothing():
    h = Harness()
    first = h.join()
    h.coordinator.groups["g"].set_member(replace(h.member("member-0"), state=MemberState.UNKNOWN))
    assert h.hb(member_id="member-0", member_epoch=1, owned=first.assignment).error == ErrorCode.FENCED_MEMBER_EPOCH
    r = h.hb(member_id="member-0", member_epoch=1, owned=frozenset())
    assert (r.error, r.member_epoch) == (ErrorCode.NONE, 1) and h.member("member-0").state == MemberState.STABLE
