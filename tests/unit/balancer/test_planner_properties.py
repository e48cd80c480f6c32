"""The balancing planner's properties over random clusters (seeded, bounded examples).

Hard goals hold after a plan wherever they can, and ``violations`` names
every place they do not; plans converge; the same input gives the same plan
whatever order it comes in; each step lowers its own goal without raising an
earlier one; a plan keeps to its cost bound, and repeated bounded plans reach
what one unbounded plan reaches.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.balancer.goals import measure, static_view
from controller.balancer.model import GOAL_NAMES, ClusterState, GoalConfig, MoveKind
from controller.balancer.planner import apply, plan
from tests.unit.balancer.cluster_builders import (
    UNBOUNDED,
    clusters,
    has_live_in_sync_replica,
    misplaced,
    over_disk_threshold,
    racks_short,
    takers,
    touches_per_broker,
)

PROPERTY = settings(max_examples=120, deadline=None, derandomize=True)


@PROPERTY
@given(clusters())
def test_hard_goals_hold_where_they_can_and_violations_say_where_not(state):
    result = plan(state, UNBOUNDED)
    after = apply(state, result)
    by_key = {(p.topic, p.partition): p for p in state.partitions}
    alive_takers = set(takers(state))
    reported = {(v.goal, v.topic, v.partition, v.broker) for v in result.violations}
    for move in result.moves:
        assert len(set(move.new_replicas)) == len(move.new_replicas)
        assert len(move.new_replicas) == len(move.old_replicas)
        assert set(move.added) <= alive_takers, move
        assert (move.kind is MoveKind.LEADER_ONLY) == (not move.added)
    for partition in after.partitions:
        before = by_key[(partition.topic, partition.partition)]
        stuck = misplaced(after, partition)
        if has_live_in_sync_replica(state, before) and len(alive_takers) >= len(partition.replicas):
            assert not stuck, (partition, result.violations)
        for b in stuck:
            assert ("replica_placement", partition.topic, partition.partition, b) in reported
        if not stuck:
            # Always possible once every replica sits on a live broker that may keep it.
            assert racks_short(after, partition) == 0, (partition, result.violations)
    for b in over_disk_threshold(after, UNBOUNDED):
        assert ("disk_capacity", None, None, b) in reported
    # Nothing is reported that is not so.
    after_by_key = {(p.topic, p.partition): p for p in after.partitions}
    for v in result.violations:
        if v.goal == "replica_placement":
            assert v.broker in misplaced(after, after_by_key[(v.topic, v.partition)])
        elif v.goal == "rack_awareness":
            assert racks_short(after, after_by_key[(v.topic, v.partition)]) > 0
        else:
            assert v.broker in over_disk_threshold(after, UNBOUNDED)
    assert not result.cost_bound_reached


@PROPERTY
@given(clusters())
def test_applying_a_plan_then_planning_again_moves_nothing(state):
    result = plan(state, UNBOUNDED)
    again = plan(apply(state, result), UNBOUNDED)
    assert again.moves == (), again.steps[:5]
    assert [g.after for g in again.goals] == [g.after for g in result.goals]


@PROPERTY
@given(clusters(), st.randoms(use_true_random=False))
def test_the_same_input_in_any_order_gives_the_same_plan(state, rng: random.Random):
    first = plan(state, UNBOUNDED)
    assert plan(state, UNBOUNDED) == first
    brokers, partitions = list(state.brokers), list(state.partitions)
    rng.shuffle(brokers)
    rng.shuffle(partitions)
    assert plan(ClusterState(tuple(brokers), tuple(partitions)), UNBOUNDED) == first


@settings(max_examples=60, deadline=None, derandomize=True)
@given(clusters(max_partitions=20))
def test_every_step_lowers_its_goal_and_raises_no_earlier_one(state):
    """Replayed step by step and measured from scratch: a step for goal k lowers
    goal k's distance and leaves every goal before k no worse."""
    result = plan(state, UNBOUNDED)
    view = static_view(state, UNBOUNDED)
    index = {(p.topic, p.partition): i for i, p in enumerate(state.partitions)}
    assignment = [list(p.replicas) for p in state.partitions]
    distances, _ = measure(state, UNBOUNDED, view, assignment)
    for step in result.steps:
        i = index[(step.topic, step.partition)]
        assert assignment[i] == list(step.replicas_before)
        assignment[i] = list(step.replicas_after)
        new_distances, _ = measure(state, UNBOUNDED, view, assignment)
        goal = GOAL_NAMES.index(step.goal)
        assert new_distances[goal] < distances[goal], step
        assert all(new_distances[j] <= distances[j] for j in range(goal)), (step, distances, new_distances)
        distances = new_distances
    assert distances == [g.after for g in result.goals]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(clusters(), st.integers(1, 3), st.sampled_from([None, 0, 2_000, 10_000]))
def test_plans_keep_to_the_cost_bound_and_repeated_plans_converge(state, per_broker, plan_bytes):
    config = GoalConfig(max_moves_per_broker=per_broker, max_plan_bytes=plan_bytes)
    current = state
    for _ in range(300):
        result = plan(current, config)
        if not result.moves:
            break
        assert max(touches_per_broker(current, result).values(), default=0) <= per_broker
        if plan_bytes is not None and result.total_bytes > plan_bytes:
            # Only a plan's first copy may pass the bound, and then it is its only one.
            assert sum(1 for m in result.moves if m.bytes_to_move) == 1, result.moves
        current = apply(current, result)
    else:
        raise AssertionError("bounded plans did not converge in 300 rounds")
    # Where the bounded plans end, the unbounded planner has nothing to add for the hard goals.
    final = plan(current, UNBOUNDED)
    assert not [s for s in final.steps if s.goal in ("replica_placement", "rack_awareness", "disk_capacity")]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(clusters())
def test_unmovable_partitions_and_those_without_a_live_in_sync_replica_never_move(state):
    state = replace(state, partitions=tuple(
        replace(p, movable=False) if i % 2 else p for i, p in enumerate(state.partitions)
    ))
    moved = {(m.topic, m.partition) for m in plan(state, UNBOUNDED).moves}
    for p in state.partitions:
        if not p.movable or not has_live_in_sync_replica(state, p):
            assert (p.topic, p.partition) not in moved
