"""The server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range`` (pure).

Both are deterministic (the same input gives the same assignment, whatever
the order of the mappings passed) and sticky: they start from each member's
current target assignment, so that a change in membership moves as few
partitions as it can.

``uniform`` (Kafka's default) balances the number of partitions per member:
with the same subscription for every member no two members differ by more
than one partition; with different subscriptions it stops when no single move
of a partition to a member subscribed to its topic would narrow the gap.
Where racks are known it gives a partition to a member in one of the
partition's replica racks when the balance allows it.

``range`` assigns each topic on its own, as Kafka's range assignor does: the
members subscribed to the topic, by member id, each get a range of its
partitions, the first ``partitions % members`` one more. Topics with the
same number of partitions and the same subscribers are thus co-partitioned:
partition ``p`` of each goes to the same member. Stickiness keeps a member's
current partitions of the topic within its share. It does not look at racks
(co-partitioning comes first).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.coordinators.consumer_groups.model import Partitions, TopicInfo, TopicPartition

UNIFORM = "uniform"
RANGE = "range"


@dataclass(frozen=True)
class AssignmentMember:
    """A member as an assignor sees it."""

    topic_ids: frozenset[uuid.UUID]  # the subscribed topics that exist
    rack_id: str | None
    current: Partitions  # its current target assignment


Assignor = Callable[[Mapping[str, AssignmentMember], Mapping[uuid.UUID, TopicInfo]], dict[str, Partitions]]


def _still_valid(tp: TopicPartition, member: AssignmentMember, topics: Mapping[uuid.UUID, TopicInfo]) -> bool:
    topic = topics.get(tp[0])
    return tp[0] in member.topic_ids and topic is not None and 0 <= tp[1] < topic.partition_count


def uniform_assign(members: Mapping[str, AssignmentMember], topics: Mapping[uuid.UUID, TopicInfo]) -> dict[str, Partitions]:
    order = sorted(members)
    held: dict[str, set[TopicPartition]] = {m: set() for m in order}
    subscribers = {tid: [m for m in order if tid in members[m].topic_ids] for tid in sorted(topics)}

    def in_rack(member_id: str, tp: TopicPartition) -> bool:
        rack = members[member_id].rack_id
        return rack is not None and rack in topics[tp[0]].partition_racks[tp[1]]

    # 1. Stickiness: everyone keeps what it had and may still have.
    taken: set[TopicPartition] = set()
    for member_id in order:
        for tp in sorted(members[member_id].current):
            if tp not in taken and _still_valid(tp, members[member_id], topics):
                held[member_id].add(tp)
                taken.add(tp)

    # 2. Free partitions to the least loaded subscriber; a member in the
    # partition's rack counts as one partition lighter, and step 3 evens out
    # whatever that preference unbalanced.
    for tid, subs in subscribers.items():
        if not subs:
            continue
        for partition in range(topics[tid].partition_count):
            tp = (tid, partition)
            if tp not in taken:
                best = min(subs, key=lambda m: (len(held[m]) - in_rack(m, tp), m))
                held[best].add(tp)
                taken.add(tp)

    # 3. Balance: move a partition from the most loaded member to a subscriber of
    # its topic holding at least two fewer, until no such move exists. Each move
    # lowers the sum of squared loads, so this ends; the budget is a safety bound.
    budget = len(taken) * max(1, len(order))
    while budget > 0:
        move = None
        for source in sorted(order, key=lambda m: (-len(held[m]), m)):
            floor = len(held[source]) - 2
            # Out-of-rack partitions leave first, then the highest: a member keeps
            # the first partitions of what it holds, as Kafka's uniform assignor
            # keeps the first of a member's partitions up to its quota (librdkafka's
            # tests expect the exact partitions).
            for tp in sorted(held[source], key=lambda tp: (not in_rack(source, tp), tp), reverse=True):
                targets = [m for m in subscribers[tp[0]] if len(held[m]) <= floor]
                if targets:
                    move = (source, min(targets, key=lambda m: (len(held[m]), not in_rack(m, tp), m)), tp)
                    break
            if move is not None:
                break
        if move is None:
            break
        source, target, tp = move
        held[source].discard(tp)
        held[target].add(tp)
        budget -= 1
    return {m: frozenset(ps) for m, ps in held.items()}


def range_assign(members: Mapping[str, AssignmentMember], topics: Mapping[uuid.UUID, TopicInfo]) -> dict[str, Partitions]:
    held: dict[str, set[TopicPartition]] = {m: set() for m in sorted(members)}
    for tid in sorted(topics):
        subs = [m for m in sorted(members) if tid in members[m].topic_ids]
        if not subs:
            continue
        count = topics[tid].partition_count
        base, extra = divmod(count, len(subs))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(subs)}
        given: dict[str, list[int]] = {m: [] for m in subs}
        taken: set[int] = set()
        for m in subs:
            mine = sorted(p for t, p in members[m].current if t == tid and 0 <= p < count)
            given[m] = mine[: quota[m]]
            taken.update(given[m])
        free = [p for p in range(count) if p not in taken]
        free.reverse()  # popped from the end: lowest partition first
        for m in subs:
            while len(given[m]) < quota[m]:
                given[m].append(free.pop())
        for m in subs:
            held[m].update((tid, p) for p in given[m])
    return {m: frozenset(ps) for m, ps in held.items()}


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform_assign, RANGE: range_assign}
