"""The classic group coordinator as a pure state machine: explicit clock, fake store.

Its operations return the stores they need; :class:`DrivenCoordinator` carries
them out with the broker's own loop (each outcome reported at once) against a
fake log, as the group shell does.

Targeted cases of Kafka's rules first, then a seeded simulation of many
members joining, syncing, heartbeating, leaving and crashing, with invariants
checked after every step (replay a failure with its printed seed).
"""

from __future__ import annotations

import itertools
import random

import pytest

from broker.coordinators.effects import Store, carry_out_stores_at_once
from broker.coordinators.groups.coordinator import GroupConfig, GroupCoordinator, JoinRequest
from broker.coordinators.groups.group import GroupState
from protocol.consumer_offsets import OffsetAndMetadata, partition_for_group
from protocol.errors import ErrorCode

SESSION_MS = 10_000
REBALANCE_MS = 20_000


class FakeStore:
    def __init__(self):
        self.records: list[tuple[int, bytes, bytes | None]] = []
        self.fail_with: ErrorCode | None = None

    def write(self, store: Store) -> ErrorCode:
        assert store.producer_id == -1, "no transactional commits here"
        if self.fail_with is not None:
            return self.fail_with
        self.records.extend((store.partition, k, v) for k, v in store.records)
        return ErrorCode.NONE


class DrivenCoordinator:
    """A coordinator driven as the group shell drives it: each operation's stores
    carried out in order by ``write``, every outcome reported back at once, and
    the answer of an operation that replies once taken from its reply. Anything
    else is the coordinator's own attribute."""

    def __init__(self, coordinator: GroupCoordinator, write):
        self.coordinator = coordinator
        self._write = write

    def __getattr__(self, name):
        return getattr(self.coordinator, name)

    def _execute(self, effects) -> None:
        carry_out_stores_at_once(effects, self._write, self.coordinator.store_done)

    def _answer(self, operation, *args):
        answers = []
        self._execute(operation(*args, answers.append))
        assert len(answers) == 1, f"answered {len(answers)} times: {answers}"
        return answers[0]

    def join_group(self, *args) -> None:
        self._execute(self.coordinator.join_group(*args))

    def sync_group(self, *args) -> None:
        self._execute(self.coordinator.sync_group(*args))

    def tick(self, now_ms) -> None:
        self._execute(self.coordinator.tick(now_ms))

    def leave_group(self, *args):
        return self._answer(self.coordinator.leave_group, *args)

    def commit_offsets(self, *args):
        return self._answer(self.coordinator.commit_offsets, *args)

    def commit_transactional_offsets(self, *args):
        return self._answer(self.coordinator.commit_transactional_offsets, *args)

    def delete_offsets(self, *args):
        return self._answer(self.coordinator.delete_offsets, *args)

    def delete_groups(self, *args):
        return self._answer(self.coordinator.delete_groups, *args)

    def expire_offsets(self, *args):
        return self._answer(self.coordinator.expire_offsets, *args)

    def remove_offsets_of_topics(self, *args):
        return self._answer(self.coordinator.remove_offsets_of_topics, *args)

    def expire_consumer_group_offsets(self, *args):
        return self._answer(self.coordinator.expire_consumer_group_offsets, *args)

    def delete_consumer_group_offsets(self, *args):
        return self._answer(self.coordinator.delete_consumer_group_offsets, *args)

    def delete_all_offsets(self, *args):
        return self._answer(self.coordinator.delete_all_offsets, *args)


def make(delay_ms=0, **config):
    store = FakeStore()
    ids = itertools.count(1)
    coordinator = GroupCoordinator(
        GroupConfig(initial_rebalance_delay_ms=delay_ms, min_session_timeout_ms=1000, **config),
        lambda prefix: f"{prefix}-{next(ids)}",
    )
    return DrivenCoordinator(coordinator, store.write), store


class Replies:
    """Collects the answers of requests that may wait; each must come exactly once."""

    def __init__(self):
        self.answers: dict[str, list] = {}

    def __call__(self, name):
        self.answers.setdefault(name, [])

        def reply(result):
            self.answers[name].append(result)
            assert len(self.answers[name]) == 1, f"{name} answered twice: {self.answers[name]}"

        return reply

    def get(self, name):
        answers = self.answers.get(name, [])
        return answers[0] if answers else None


def join_request(group="g", member_id="", instance=None, protocols=(("range", b"m"),), session_ms=SESSION_MS, client="c"):
    return JoinRequest(
        group_id=group,
        member_id=member_id,
        group_instance_id=instance,
        client_id=client,
        client_host="/127.0.0.1",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=REBALANCE_MS,
        protocol_type="consumer",
        protocols=list(protocols),
    )


def join_new_member(coordinator, replies, now, name, **kwargs):
    """MEMBER_ID_REQUIRED, then the real join; returns the member id."""
    coordinator.join_group(now, join_request(**kwargs), replies(name + "-first"))
    first = replies.get(name + "-first")
    assert first.error == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    coordinator.join_group(now, join_request(member_id=first.member_id, **kwargs), replies(name))
    return first.member_id


def sync(coordinator, replies, now, name, member_id, generation, assignments=None, group="g"):
    coordinator.sync_group(now, group, generation, member_id, None, "consumer", None, assignments or {}, replies(name))
    return replies.get(name)


# --------------------------------------------------------------------------- membership


def test_first_member_joins_syncs_and_is_stable():
    coordinator, store = make()
    replies = Replies()
    member = join_new_member(coordinator, replies, 0, "a")
    joined = replies.get("a")
    assert joined.error == ErrorCode.NONE and joined.generation_id == 1 and joined.leader == member
    assert joined.protocol_name == "range" and [m[0] for m in joined.members] == [member]
    result = sync(coordinator, replies, 1, "a-sync", member, 1, {member: b"assignment"})
    assert result.error == ErrorCode.NONE and result.assignment == b"assignment"
    assert coordinator.groups["g"].state is GroupState.STABLE
    assert coordinator.heartbeat(2, "g", 1, member, None) == ErrorCode.NONE
    assert store.records, "the assignment was stored before it was handed out"


def test_second_member_triggers_rebalance_and_both_get_the_leaders_assignment():
    coordinator, _ = make()
    replies = Replies()
    a = join_new_member(coordinator, replies, 0, "a")
    sync(coordinator, replies, 0, "a-sync1", a, 1, {a: b"all"})
    b = join_new_member(coordinator, replies, 10, "b")
    assert replies.get("b") is None, "b waits for a to rejoin"
    assert coordinator.heartbeat(20, "g", 1, a, None) == ErrorCode.REBALANCE_IN_PROGRESS
    coordinator.join_group(30, join_request(member_id=a), replies("a2"))
    ja, jb = replies.get("a2"), replies.get("b")
    assert ja.generation_id == jb.generation_id == 2
    assert ja.leader == jb.leader == a
    assert {m[0] for m in ja.members} == {a, b} and jb.members == []
    assert sync(coordinator, replies, 40, "b-sync", b, 2) is None, "a follower waits for the leader"
    sync(coordinator, replies, 50, "a-sync2", a, 2, {a: b"half-a", b: b"half-b"})
    assert replies.get("b-sync").assignment == b"half-b"
    assert replies.get("a-sync2").assignment == b"half-a"


def test_initial_rebalance_delay_waits_and_extends_for_new_members():
    coordinator, _ = make(delay_ms=3000)
    replies = Replies()
    a = join_new_member(coordinator, replies, 0, "a")
    coordinator.tick(2000)
    b = join_new_member(coordinator, replies, 2000, "b")
    coordinator.tick(3000)
    assert replies.get("a") is None, "a new member arrived during the delay: it is extended"
    coordinator.tick(5999)
    assert replies.get("a") is None
    coordinator.tick(6000)
    assert replies.get("a").generation_id == replies.get("b").generation_id == 1
    assert {m[0] for m in replies.get("a").members} == {a, b}


def test_member_that_misses_its_session_is_removed():
    coordinator, _ = make()
    replies = Replies()
    a = join_new_member(coordinator, replies, 0, "a")
    sync(coordinator, replies, 0, "a-s", a, 1, {a: b"x"})
    b = join_new_member(coordinator, replies, 100, "b")
    coordinator.join_group(100, join_request(member_id=a), replies("a2"))
    sync(coordinator, replies, 100, "a-s2", a, 2, {a: b"1", b: b"2"})
    sync(coordinator, replies, 100, "b-s2", b, 2)
    # b keeps heartbeating, a goes silent.
    for now in range(1000, SESSION_MS + 1000, 1000):
        assert coordinator.heartbeat(now, "g", 2, b, None) == ErrorCode.NONE
        coordinator.tick(now)
    coordinator.tick(SESSION_MS + 200)
    assert a not in coordinator.groups["g"].members
    assert coordinator.heartbeat(SESSION_MS + 300, "g", 2, b, None) == ErrorCode.REBALANCE_IN_PROGRESS
    coordinator.join_group(SESSION_MS + 400, join_request(member_id=b), replies("b3"))
    assert replies.get("b3").generation_id == 3 and replies.get("b3").leader == b


def test_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout():
    coordinator, _ = make()
    replies = Replies()
    a = join_new_member(coordinator, replies, 0, "a")
    sync(coordinator, replies, 0, "a-s", a, 1, {a: b"x"})
    b = join_new_member(coordinator, replies, 0, "b")
    for now in range(1000, REBALANCE_MS, 1000):
        coordinator.heartbeat(now, "g", 1, a, None)  # alive, but never rejoins
        coordinator.tick(now)
    assert replies.get("b") is None
    coordinator.tick(REBALANCE_MS)
    assert replies.get("b").error == ErrorCode.NONE and replies.get("b").leader == b
    assert list(coordinator.groups["g"].members) == [b]


def test_leave_group_rebalances_and_answers_unknown_members():
    coordinator, _ = make()
    replies = Replies()
    a = join_new_member(coordinator, replies, 0, "a")
    sync(coordinator, replies, 0, "a-s", a, 1, {a: b"x"})
    error, members = coordinator.leave_group(10, "g", [(a, None), ("ghost", None)])
    assert error == ErrorCode.NONE and members == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
    group = coordinator.groups["g"]
    assert group.state is GroupState.EMPTY and group.generation_id == 2
    assert coordinator.leave_group(10, "nope", [("x", None)]) == (ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID])


def test_static_member_rejoins_stable_group_without_rebalance_and_fences_its_old_id():
    coordinator, _ = make()
    replies = Replies()
    coordinator.join_group(0, join_request(instance="i-1"), replies("a"))
    a = replies.get("a").member_id
    assert replies.get("a").error == ErrorCode.NONE, "static members need no MEMBER_ID_REQUIRED round"
    b = join_new_member(coordinator, replies, 0, "b")
    coordinator.join_group(0, join_request(member_id=a, instance="i-1"), replies("a2"))
    generation = replies.get("b").generation_id
    leader = replies.get("b").leader
    assignments = {a: b"for-a", b: b"for-b"}
    sync(coordinator, replies, 1, "s-lead", leader, generation, assignments)
    sync(coordinator, replies, 1, "s-other", b if leader == a else a, generation)
    # The static member restarts: it joins with no member id but the same instance id.
    coordinator.join_group(100, join_request(instance="i-1"), replies("a-restart"))
    restarted = replies.get("a-restart")
    assert restarted.error == ErrorCode.NONE and restarted.member_id != a
    assert restarted.generation_id == generation, "no rebalance"
    assert coordinator.groups["g"].state is GroupState.STABLE
    assert sync(coordinator, replies, 101, "s-new", restarted.member_id, generation).assignment == b"for-a"
    assert coordinator.heartbeat(102, "g", generation, a, "i-1") == ErrorCode.FENCED_INSTANCE_ID
    assert coordinator.heartbeat(102, "g", generation, b, None) == ErrorCode.NONE


def test_join_errors():
    coordinator, _ = make()
    replies = Replies()
    coordinator.join_group(0, join_request(group=""), replies("empty-id"))
    assert replies.get("empty-id").error == ErrorCode.INVALID_GROUP_ID
    coordinator.join_group(0, join_request(session_ms=10), replies("short"))
    assert replies.get("short").error == ErrorCode.INVALID_SESSION_TIMEOUT
    coordinator.join_group(0, join_request(member_id="who"), replies("unknown"))
    assert replies.get("unknown").error == ErrorCode.UNKNOWN_MEMBER_ID
    assert "g" not in coordinator.groups, "failed joins leave no group behind"
    join_new_member(coordinator, replies, 0, "a")
    coordinator.join_group(0, join_request(protocols=(("other", b""),)), replies("mismatch"))
    assert replies.get("mismatch").error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_chosen_by_votes_among_common_protocols():
    coordinator, _ = make()
    replies = Replies()
    join_new_member(coordinator, replies, 0, "a", protocols=(("roundrobin", b""), ("range", b"")))
    group = coordinator.groups["g"]
    assert group.protocol_name == "roundrobin"
    join_new_member(coordinator, replies, 1, "b", protocols=(("range", b""), ("roundrobin", b"")))
    join_new_member(coordinator, replies, 1, "c", protocols=(("range", b""),))
    a = replies.get("a-first").member_id
    coordinator.join_group(2, join_request(member_id=a, protocols=(("roundrobin", b""), ("range", b""))), replies("a2"))
    assert replies.get("a2").protocol_name == "range", "only range is common to all"


def test_sync_group_errors():
    coordinator, _ = make()
    replies = Replies()
    a = join_new_member(coordinator, replies, 0, "a")
    assert sync(coordinator, replies, 0, "stale", a, 7).error == ErrorCode.ILLEGAL_GENERATION
    assert sync(coordinator, replies, 0, "ghost", "ghost", 1).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert sync(coordinator, replies, 0, "nogroup", a, 1, group="other").error == ErrorCode.UNKNOWN_MEMBER_ID
    join_new_member(coordinator, replies, 0, "b")  # a rebalance starts before a syncs
    assert sync(coordinator, replies, 0, "late", a, 1).error == ErrorCode.REBALANCE_IN_PROGRESS


def test_the_assignment_is_a_store_the_members_are_answered_after():
    driven, _ = make()
    replies = Replies()
    a = join_new_member(driven, replies, 0, "a")
    coordinator = driven.coordinator
    (store,) = coordinator.sync_group(0, "g", 1, a, None, "consumer", "range", {a: b"x"}, replies("s"))
    assert store.partition == partition_for_group("g", 50) and store.token is not None and store.producer_id == -1
    assert replies.get("s") is None, "answered before the assignment was stored"
    assert coordinator.store_done(store.token, ErrorCode.NONE) == []
    assert replies.get("s").assignment == b"x" and coordinator.groups["g"].state is GroupState.STABLE


def test_store_failure_fails_the_sync_and_restarts_the_rebalance():
    coordinator, store = make()
    replies = Replies()
    a = join_new_member(coordinator, replies, 0, "a")
    store.fail_with = ErrorCode.NOT_COORDINATOR
    assert sync(coordinator, replies, 0, "s", a, 1, {a: b"x"}).error == ErrorCode.NOT_COORDINATOR
    assert coordinator.groups["g"].state is GroupState.PREPARING_REBALANCE


# --------------------------------------------------------------------------- offsets


def offset(value, metadata="", now=0):
    return OffsetAndMetadata(value, -1, metadata, now)


def test_simple_consumer_commits_without_a_group_and_fetches():
    coordinator, store = make()
    errors = coordinator.commit_offsets(5, "simple", -1, "", None, {("t", 0): offset(42, "m")})
    assert errors == {("t", 0): ErrorCode.NONE}
    assert coordinator.fetch_offsets("simple", [("t", 0), ("t", 1)]) == [("t", 0, offset(42, "m")), ("t", 1, None)]
    assert coordinator.fetch_offsets("simple", None) == [("t", 0, offset(42, "m"))]
    assert coordinator.fetch_offsets("unknown", [("t", 0)]) == [("t", 0, None)]
    assert [g.group_id for g in coordinator.list_groups()] == ["simple"]
    assert store.records[-1][0] == partition_for_group("simple", 50)


def test_commit_checks_membership_and_generation():
    coordinator, _ = make()
    replies = Replies()
    a = join_new_member(coordinator, replies, 0, "a")
    tp = ("t", 0)
    assert coordinator.commit_offsets(1, "g", 1, a, None, {tp: offset(1)}) == {tp: ErrorCode.REBALANCE_IN_PROGRESS}
    sync(coordinator, replies, 1, "s", a, 1, {a: b""})
    assert coordinator.commit_offsets(2, "g", 1, a, None, {tp: offset(1)}) == {tp: ErrorCode.NONE}
    assert coordinator.commit_offsets(2, "g", 0, a, None, {tp: offset(1)}) == {tp: ErrorCode.ILLEGAL_GENERATION}
    assert coordinator.commit_offsets(2, "g", 1, "ghost", None, {tp: offset(1)}) == {tp: ErrorCode.UNKNOWN_MEMBER_ID}
    assert coordinator.commit_offsets(2, "g", -1, "", None, {tp: offset(1)}) == {tp: ErrorCode.UNKNOWN_MEMBER_ID}
    assert coordinator.commit_offsets(2, "nogroup", 3, "x", None, {tp: offset(1)}) == {tp: ErrorCode.ILLEGAL_GENERATION}
    assert coordinator.commit_offsets(2, "g", 1, a, None, {tp: offset(1, "x" * 5000)}) == {tp: ErrorCode.OFFSET_METADATA_TOO_LARGE}


def test_delete_groups_and_offsets():
    coordinator, _ = make()
    replies = Replies()
    a = join_new_member(coordinator, replies, 0, "a")
    sync(coordinator, replies, 0, "s", a, 1, {a: b""})
    coordinator.commit_offsets(1, "g", 1, a, None, {("t", 0): offset(3)})
    assert coordinator.delete_groups(2, ["g", "missing"]) == {"g": ErrorCode.NON_EMPTY_GROUP, "missing": ErrorCode.GROUP_ID_NOT_FOUND}
    coordinator.leave_group(3, "g", [(a, None)])
    assert coordinator.delete_groups(4, ["g"]) == {"g": ErrorCode.NONE}
    assert coordinator.fetch_offsets("g", None) == []
    assert coordinator.describe_group("g").state == "Dead"


def test_offsets_of_an_empty_group_expire_after_retention():
    coordinator, _ = make(offsets_retention_ms=1000)
    coordinator.commit_offsets(0, "g", -1, "", None, {("t", 0): offset(1, now=0)})
    assert coordinator.expire_offsets(999) == 0
    assert coordinator.expire_offsets(1000) == 1
    assert "g" not in coordinator.groups, "an empty group without offsets is removed"


def make_with_consumer_group(consumer_group="cg", **config):
    """A classic coordinator that keeps the offsets of a KIP-848 consumer group (no classic group of it)."""
    store = FakeStore()
    coordinator = GroupCoordinator(GroupConfig(min_session_timeout_ms=1000, **config), lambda prefix: prefix,
                                   is_consumer_group=lambda group_id: group_id == consumer_group)
    return DrivenCoordinator(coordinator, store.write), store


def test_offsets_of_a_consumer_group_expire_unless_subscribed():
    """Kafka's rule for consumer groups: an offset of a topic the group does not
    subscribe to expires retention after its commit, whatever the group's state."""
    coordinator, _ = make_with_consumer_group(offsets_retention_ms=1000)
    answers = []
    coordinator._execute(coordinator.coordinator.commit_consumer_group_offsets(
        0, "cg", {("t", 0): offset(1, now=0), ("u", 0): offset(2, now=0)}, answers.append))
    assert answers == [{("t", 0): ErrorCode.NONE, ("u", 0): ErrorCode.NONE}]
    assert "cg" not in coordinator.groups
    assert coordinator.expire_offsets(5000) == 0, "no classic rule for a consumer group's offsets"
    assert coordinator.expire_consumer_group_offsets(999, {"cg": {"t"}}) == 0
    assert coordinator.expire_consumer_group_offsets(1000, {"cg": {"t"}}) == 1  # u is not subscribed
    assert coordinator.fetch_offsets("cg", None) == [("t", 0, offset(1, now=0))]
    assert coordinator.has_offsets("cg")
    assert coordinator.expire_consumer_group_offsets(1000, {"cg": set()}) == 1  # empty: nothing subscribed
    assert not coordinator.has_offsets("cg") and "cg" not in coordinator.groups


def test_offset_delete_and_delete_all_offsets_of_a_consumer_group():
    coordinator, store = make_with_consumer_group()
    answers = []
    coordinator._execute(coordinator.coordinator.commit_consumer_group_offsets(
        0, "cg", {("t", 0): offset(1), ("u", 0): offset(2), ("v", 0): offset(3)}, answers.append))
    error, results = coordinator.delete_consumer_group_offsets("cg", [("t", 0), ("u", 0)], {"t"})
    assert (error, results) == (ErrorCode.NONE, {("t", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): ErrorCode.NONE})
    assert [(t, p) for t, p, _ in coordinator.fetch_offsets("cg", None)] == [("t", 0), ("v", 0)]
    # Without the consumer group's topics the id is no classic group here.
    assert coordinator.delete_offsets("cg", [("t", 0)]) == (ErrorCode.GROUP_ID_NOT_FOUND, {})
    written = len(store.records)
    assert coordinator.delete_all_offsets("cg") == ErrorCode.NONE
    assert len(store.records) == written + 2 and all(value is None for _, _, value in store.records[written:])
    assert coordinator.fetch_offsets("cg", None) == [] and not coordinator.has_offsets("cg")
    assert coordinator.delete_all_offsets("cg") == ErrorCode.NONE  # nothing left: nothing written
    assert len(store.records) == written + 2


def test_replaying_the_stored_records_restores_groups_and_offsets():
    coordinator, store = make()
    replies = Replies()
    a = join_new_member(coordinator, replies, 0, "a", instance=None)
    sync(coordinator, replies, 0, "s", a, 1, {a: b"assigned"})
    coordinator.commit_offsets(1, "g", 1, a, None, {("t", 0): offset(7), ("t", 1): offset(9)})
    coordinator.commit_offsets(2, "simple", -1, "", None, {("u", 0): offset(5)})
    coordinator.commit_offsets(3, "gone", -1, "", None, {("u", 0): offset(5)})
    coordinator.delete_groups(4, ["gone"])
    restored, _ = make()
    for _, key, value in store.records:
        restored.load_record(key, value)
    restored.finish_loading(100)
    assert set(restored.groups) == {"g", "simple"}
    group = restored.groups["g"]
    assert group.state is GroupState.STABLE and group.generation_id == 1 and group.leader_id == a
    assert group.members[a].assignment == b"assigned"
    assert restored.fetch_offsets("g", None) == coordinator.fetch_offsets("g", None)
    # The member carries on with its old id and generation after the restart.
    assert restored.heartbeat(200, "g", 1, a, None) == ErrorCode.NONE


def test_unloading_a_partition_drops_its_groups_and_answers_waiting_members():
    coordinator, store = make(offsets_partitions=4, delay_ms=5000)
    replies = Replies()
    groups = [f"g{i}" for i in range(12)]
    lost = partition_for_group("g0", 4)
    for g in groups:
        coordinator.commit_offsets(0, g, -1, "", None, {("t", 0): offset(1)})
    # A member waits in the join phase of a group kept in the partition to be lost.
    busy = next(f"busy{i}" for i in range(1000) if partition_for_group(f"busy{i}", 4) == lost)
    member = join_new_member(coordinator, replies, 0, "m", group=busy)
    assert replies.get("m") is None, "waits for the initial rebalance delay"
    kept = {g for g in groups if partition_for_group(g, 4) != lost}
    assert coordinator.unload_partition(lost) == len(groups) - len(kept) + 1
    assert replies.get("m").error == ErrorCode.NOT_COORDINATOR and replies.get("m").member_id == member
    assert set(coordinator.groups) == kept and set(coordinator.offsets) == kept
    # Loading the partition again (this broker leads it again) restores what it stored.
    for partition, key, value in store.records:
        if partition == lost:
            coordinator.load_record(key, value)
    coordinator.finish_loading(10)
    assert set(coordinator.offsets) == set(groups)


# --------------------------------------------------------------------------- simulation


class SimMember:
    def __init__(self, name: str, static: bool):
        self.name = name
        self.instance = name if static else None
        self.member_id = ""
        self.generation = -1
        self.waiting: str | None = None  # "join" | "sync"
        self.assignment: bytes | None = None
        self.alive = True


PARTITIONS = 12


def assign(member_ids: list[str]) -> dict[str, bytes]:
    ordered = sorted(member_ids)
    return {m: bytes(p for p in range(PARTITIONS) if p % len(ordered) == i) for i, m in enumerate(ordered)}


@pytest.mark.parametrize("seed", range(30))
def test_simulated_members_always_agree_on_a_disjoint_assignment(seed):
    rng = random.Random(seed)
    coordinator, store = make(delay_ms=rng.choice([0, 500]))
    members = [SimMember(f"m{i}", static=rng.random() < 0.3) for i in range(rng.randint(2, 5))]
    answered: dict[int, int] = {}
    request_ids = itertools.count()
    now = 0
    generations_seen = [0]

    def on_join(member, rid):
        def reply(result):
            answered[rid] = answered.get(rid, 0) + 1
            assert answered[rid] == 1, f"seed {seed}: a JoinGroup answered twice"
            if not member.alive or member.waiting != "join":
                return
            member.waiting = None
            if result.error == ErrorCode.MEMBER_ID_REQUIRED:
                member.member_id = result.member_id
            elif result.error == ErrorCode.NONE:
                member.member_id = result.member_id
                member.generation = result.generation_id
                assignments = assign([m[0] for m in result.members]) if result.members else {}
                if result.skip_assignment:
                    assignments = {}
                member.waiting = "sync"
                rid2 = next(request_ids)
                coordinator.sync_group(now, "g", member.generation, member.member_id, member.instance, "consumer", None, assignments, on_sync(member, rid2))
            else:
                member.member_id = "" if result.error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID) else member.member_id

        return reply

    def on_sync(member, rid):
        def reply(result):
            answered[rid] = answered.get(rid, 0) + 1
            assert answered[rid] == 1, f"seed {seed}: a SyncGroup answered twice"
            if not member.alive or member.waiting != "sync":
                return
            member.waiting = None
            if result.error == ErrorCode.NONE:
                member.assignment = result.assignment
            else:
                member.assignment = None
                if result.error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                    member.member_id = ""

        return reply

    def join(member):
        member.waiting = "join"
        member.assignment = None
        coordinator.join_group(
            now,
            JoinRequest("g", member.member_id, member.instance, member.name, "/127.0.0.1", 3000, 6000, "consumer", [("range", b"")]),
            on_join(member, next(request_ids)),
        )

    for step in range(600):
        now += rng.choice([10, 50, 200, 700])
        member = rng.choice(members)
        action = rng.random()
        if not member.alive:
            if action < 0.2:
                member.alive = True
                member.waiting = None
                if member.instance is None:
                    member.member_id = ""
                join(member)
        elif action < 0.03:
            member.alive = False  # crash: no LeaveGroup
        elif action < 0.06 and member.member_id and member.waiting is None:
            coordinator.leave_group(now, "g", [(member.member_id, member.instance)])
            member.member_id = "" if member.instance is None else member.member_id
            member.assignment = None
            member.alive = False
        elif member.waiting is None:
            if member.assignment is None:
                join(member)
            else:
                error = coordinator.heartbeat(now, "g", member.generation, member.member_id, member.instance)
                if error != ErrorCode.NONE:
                    member.assignment = None
                    if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                        member.member_id = ""
        coordinator.tick(now)
        group = coordinator.groups.get("g")
        if group is None:
            continue
        assert group.generation_id >= generations_seen[-1], f"seed {seed}: generation went back"
        generations_seen.append(group.generation_id)
        if group.leader_id is not None and group.members:
            assert group.leader_id in group.members, f"seed {seed} step {step}: leader is not a member"
        # Members that believe they own partitions in the current generation own disjoint sets.
        owned: dict[int, str] = {}
        for m in members:
            if m.alive and m.assignment is not None and m.generation == group.generation_id and group.is_(GroupState.STABLE):
                for p in m.assignment:
                    assert p not in owned, f"seed {seed} step {step}: partition {p} owned by {owned[p]} and {m.name}"
                    owned[p] = m.name
    # Let every timer run out: every request is answered exactly once.
    for extra in range(0, 30_000, 500):
        coordinator.tick(now + extra)
    assert all(count == 1 for count in answered.values())
    missing = [rid for rid in range(next(request_ids)) if rid not in answered]
    # Requests still waiting belong to members that are in a join or sync phase now.
    group = coordinator.groups.get("g")
    waiting = 0 if group is None else sum(1 for m in group.members.values() if m.join_reply or m.sync_reply)
    assert len(missing) <= waiting + 1, f"seed {seed}: {len(missing)} unanswered requests"
    # What was stored replays into the same offsets and group generation.
    restored, _ = make()
    for _, key, value in store.records:
        restored.load_record(key, value)
    restored.finish_loading(now)
    if group is not None and group.is_(GroupState.STABLE):
        assert restored.groups["g"].generation_id == group.generation_id


def test_offsets_of_deleted_topics_are_removed():
    coordinator, store = make()
    coordinator.commit_offsets(0, "only-t", -1, "", None, {("t", 0): offset(1)})
    coordinator.commit_offsets(0, "both", -1, "", None, {("t", 0): offset(1), ("u", 0): offset(2)})
    assert coordinator.remove_offsets_of_topics(1, {"t"}) == 2
    assert "only-t" not in coordinator.groups
    assert coordinator.fetch_offsets("both", None) == [("u", 0, offset(2))]
    restored, _ = make()
    for _, key, value in store.records:
        restored.load_record(key, value)
    restored.finish_loading(2)
    assert set(restored.groups) == {"both"}
