"""The server-side assignors' properties: every subscribed partition owned once,
balance, stickiness, determinism, co-partitioning (range), racks (uniform)."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.coordinators.consumer_groups.assignors import AssignmentMember, range_assign, uniform_assign
from broker.coordinators.consumer_groups.model import TopicInfo

TOPIC_IDS = [uuid.UUID(int=i + 1) for i in range(4)]


def topics_of(counts: list[int], racks: dict[int, frozenset[str]] | None = None) -> dict[uuid.UUID, TopicInfo]:
    return {
        TOPIC_IDS[i]: TopicInfo(TOPIC_IDS[i], f"t{i}", tuple((racks or {}).get(p, frozenset()) for p in range(count)))
        for i, count in enumerate(counts)
    }


def members_of(count: int, topic_ids, current=None, racks=None) -> dict[str, AssignmentMember]:
    return {
        f"m{i:02d}": AssignmentMember(frozenset(topic_ids), (racks or {}).get(i), (current or {}).get(f"m{i:02d}", frozenset()))
        for i in range(count)
    }


def all_partitions(topics) -> set:
    return {(tid, p) for tid, info in topics.items() for p in range(info.partition_count)}


def check_owned_once(assignment, members, topics) -> None:
    owned = [tp for ps in assignment.values() for tp in ps]
    assert len(owned) == len(set(owned))
    subscribed = {tid for m in members.values() for tid in m.topic_ids}
    assert set(owned) == {tp for tp in all_partitions(topics) if tp[0] in subscribed}
    for member_id, ps in assignment.items():
        assert all(tp[0] in members[member_id].topic_ids for tp in ps)


counts = st.lists(st.integers(0, 12), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(counts, st.integers(1, 9), st.sampled_from([uniform_assign, range_assign]))
def test_every_partition_is_owned_once_by_a_subscriber(partition_counts, member_count, assign):
    topics = topics_of(partition_counts)
    members = members_of(member_count, topics)
    check_owned_once(assign(members, topics), members, topics)


@settings(max_examples=150, deadline=None)
@given(counts, st.integers(1, 9), st.randoms(use_true_random=False))
def test_uniform_balances_within_one_and_is_sticky(partition_counts, member_count, rng):
    topics = topics_of(partition_counts)
    # Start from any valid assignment (some partitions maybe unowned, a departed member's).
    partitions = sorted(all_partitions(topics))
    current: dict[str, set] = {}
    for tp in partitions:
        current.setdefault(f"m{rng.randrange(member_count + 2):02d}", set()).add(tp)
    members = members_of(member_count, topics, {m: frozenset(ps) for m, ps in current.items()})
    result = uniform_assign(members, topics)
    check_owned_once(result, members, topics)
    loads = [len(ps) for ps in result.values()]
    assert max(loads) - min(loads) <= 1
    # Sticky: a member keeps as much of what it had as the balance lets it.
    quota_high = -(-len(partitions) // member_count)
    for member_id, member in members.items():
        assert len(result[member_id] & member.current) >= min(len(member.current), len(partitions) // member_count)
        assert len(result[member_id]) <= quota_high
    # Stable: assigning again from the result changes nothing.
    again = members_of(member_count, topics, result)
    assert uniform_assign(again, topics) == result


@settings(max_examples=100, deadline=None)
@given(counts, st.integers(1, 8))
def test_uniform_moves_only_what_a_joining_member_takes(partition_counts, member_count):
    topics = topics_of(partition_counts)
    before = uniform_assign(members_of(member_count, topics), topics)
    after = uniform_assign(members_of(member_count + 1, topics, before), topics)
    newcomer = f"m{member_count:02d}"
    moved = sum(len(before[m] - after[m]) for m in before)
    assert moved == len(after[newcomer])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(TOPIC_IDS[:3]), st.booleans()), min_size=2, max_size=6), st.lists(st.integers(1, 8), min_size=3, max_size=3))
def test_uniform_with_different_subscriptions_leaves_no_move_that_would_narrow_the_gap(subs, partition_counts):
    topics = topics_of(partition_counts)
    members = {
        f"m{i}": AssignmentMember(frozenset({tid} | ({TOPIC_IDS[0]} if both else set())), None, frozenset())
        for i, (tid, both) in enumerate(subs)
    }
    result = uniform_assign(members, topics)
    check_owned_once(result, members, topics)
    for ps in result.values():
        for tp in ps:
            for target, member in members.items():
                if tp[0] in member.topic_ids:
                    assert len(result[target]) >= len(ps) - 1


def test_assignors_are_deterministic_whatever_the_mapping_order():
    topics = topics_of([5, 3])
    members = members_of(3, topics)
    reversed_members = dict(reversed(list(members.items())))
    reversed_topics = dict(reversed(list(topics.items())))
    for assign in (uniform_assign, range_assign):
        assert assign(members, topics) == assign(reversed_members, reversed_topics)


def test_range_co_partitions_topics_of_the_same_size():
    topics = topics_of([7, 7])
    result = range_assign(members_of(3, topics), topics)
    for ps in result.values():
        by_topic = [{p for t, p in ps if t == tid} for tid in TOPIC_IDS[:2]]
        assert by_topic[0] == by_topic[1]
    assert sorted(p for t, p in result["m00"] if t == TOPIC_IDS[0]) == [0, 1, 2]
    assert sorted(p for t, p in result["m02"] if t == TOPIC_IDS[0]) == [5, 6]


def test_range_keeps_what_a_member_had_within_its_share():
    topics = topics_of([6])
    before = range_assign(members_of(2, topics), topics)
    after = range_assign(members_of(3, topics, before), topics)
    assert all(len(after[m] & before[m]) == 2 for m in before)


def test_uniform_prefers_a_member_in_the_partitions_rack():
    racks = {p: frozenset({"a" if p % 2 == 0 else "b"}) for p in range(8)}
    topics = topics_of([8], racks)
    members = members_of(2, topics, racks={0: "b", 1: "a"})
    result = uniform_assign(members, topics)
    assert {p for _, p in result["m00"]} == {1, 3, 5, 7}
    assert {p for _, p in result["m01"]} == {0, 2, 4, 6}


def test_uniform_members_keep_their_first_partitions_as_kafkas_do():
    """librdkafka's 0113 x_incremental_rebalances, consumer protocol: six
    partitions, members joining one at a time; the member ids sort either way."""
    topics = topics_of([6])
    (tid,) = topics
    for first, second, third in (("a", "b", "c"), ("z", "y", "x")):
        one = uniform_assign({first: AssignmentMember(frozenset(topics), None, frozenset())}, topics)
        assert one[first] == {(tid, p) for p in range(6)}
        two = uniform_assign({
            first: AssignmentMember(frozenset(topics), None, one[first]),
            second: AssignmentMember(frozenset(topics), None, frozenset()),
        }, topics)
        assert (two[first], two[second]) == ({(tid, p) for p in (0, 1, 2)}, {(tid, p) for p in (3, 4, 5)})
        three = uniform_assign({
            first: AssignmentMember(frozenset(topics), None, two[first]),
            second: AssignmentMember(frozenset(topics), None, two[second]),
            third: AssignmentMember(frozenset(topics), None, frozenset()),
        }, topics)
        assert [sorted(p for _, p in three[m]) for m in (first, second, third)] == [[0, 1], [3, 4], [2, 5]]
