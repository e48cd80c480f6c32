"""The balancing planner on the cases issue 34 names: a broker added, lost,
drained; a disk past its threshold; leader-only moves before data moves; bytes in and topic spread; the
cost bound; the reasons given for what cannot be done; the balance band."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from controller.balancer.goals import band, goal_distances, is_balanced
from controller.balancer.model import BrokerLoad, BrokerState, ClusterState, GoalConfig, MoveKind, PartitionLoad
from controller.balancer.planner import apply, plan
from tests.unit.balancer.cluster_builders import (
    CORDONED,
    DEAD,
    DRAINING,
    UNBOUNDED,
    even_cluster,
    leader_counts,
    replica_counts,
    touches_per_broker,
    with_disk_use,
)

ROOT = Path(__file__).resolve().parents[3]


def with_state(state: ClusterState, broker_id: int, broker_state: BrokerState) -> ClusterState:
    return replace(state, brokers=tuple(
        replace(b, state=broker_state) if b.broker_id == broker_id else b for b in state.brokers
    ))


def ratio(counts: dict[int, int]) -> float:
    return max(counts.values()) / min(counts.values())


def plan_until_done(state: ClusterState, config: GoalConfig, max_rounds: int):
    """Plan and apply until a plan has no moves; (final state, rounds, plans)."""
    plans = []
    for rounds in range(1, max_rounds + 1):
        result = plan(state, config)
        if not result.moves:
            return state, rounds, plans
        plans.append(result)
        state = apply(state, result)
    raise AssertionError(f"still moving after {max_rounds} rounds")


def test_a_fourth_broker_added_to_three_gets_its_share_of_replicas_and_leaders_within_bounded_rounds():
    state = even_cluster(3, 300, empty=1, size=10_000)
    config = GoalConfig(max_moves_per_broker=10)
    assert replica_counts(state)[3] == 0
    final, rounds, plans = plan_until_done(state, config, max_rounds=40)
    current = state
    for result in plans:
        assert max(touches_per_broker(current, result).values(), default=0) <= 10
        current = apply(current, result)
    assert ratio(replica_counts(final)) <= 1.1, replica_counts(final)
    assert ratio(leader_counts(final)) <= 1.1, leader_counts(final)
    # 225 of 900 replicas reach the new broker, at most 10 a plan.
    assert rounds <= 30
    assert all(p.replicas == p.isr and len(set(p.replicas)) == 3 for p in final.partitions)


def test_one_unbounded_plan_balances_the_added_broker_and_moves_no_more_than_it_needs():
    state = even_cluster(3, 300, empty=1)
    result = plan(state, UNBOUNDED)
    after = apply(state, result)
    assert ratio(replica_counts(after)) <= 1.1 and ratio(leader_counts(after)) <= 1.1
    data_moves = [m for m in result.moves if m.kind is MoveKind.REPLICA_MOVE]
    # Each data move gives the new broker one replica: no replica moves between the old brokers.
    assert all(m.added == (3,) for m in data_moves)
    assert len(data_moves) == replica_counts(after)[3]
    assert goal_distances(after, UNBOUNDED)["replica_count"] == 0


def test_a_dead_brokers_replicas_are_recreated_on_the_others_led_by_in_sync_survivors():
    state = with_state(even_cluster(5, 100, size=500), 2, DEAD)
    result = plan(state, UNBOUNDED)
    after = apply(state, result)
    assert not result.violations
    assert all(len(p.replicas) == 3 and 2 not in p.replicas for p in after.partitions)
    replacements = [s for s in result.steps if s.goal == "replica_placement"]
    assert len(replacements) == 60
    for step in replacements:
        before, after_step = step.replicas_before, step.replicas_after
        # One new broker; the survivors stay, in place but for the one that takes the lead.
        assert len(set(after_step) - set(before)) == 1 and set(before) - {2} < set(after_step)
        if before[0] == 2:
            assert after_step[0] in before[1:]
            j = before.index(after_step[0])
            assert [b for i, b in enumerate(after_step) if i not in (0, j)] == [
                b for i, b in enumerate(before) if i not in (0, j)]
        else:
            assert [a for a, b in zip(after_step, before) if b != 2] == [b for b in before if b != 2]
    assert ratio(replica_counts(after)) <= 1.1


def test_a_dead_preferred_leader_with_no_in_sync_survivor_but_itself_is_not_led_by_a_lagging_replica():
    brokers = (BrokerLoad(0, state=DEAD), BrokerLoad(1), BrokerLoad(2), BrokerLoad(3))
    # Broker 1 lags (not in the ISR); broker 2 is in sync.
    state = ClusterState(brokers, (PartitionLoad("t", 0, (0, 1, 2), -1, (0, 2)),))
    result = plan(state, UNBOUNDED)
    first = result.steps[0]
    assert first.goal == "replica_placement" and first.replicas_after[0] == 2


def test_a_draining_broker_ends_with_no_replicas():
    state = with_state(even_cluster(4, 60, size=100), 0, DRAINING)
    final, rounds, _ = plan_until_done(state, GoalConfig(max_moves_per_broker=8), max_rounds=30)
    assert all(0 not in p.replicas for p in final.partitions)
    assert rounds > 2  # the bound spread it over several plans


def test_a_cordoned_broker_keeps_its_replicas_and_takes_none():
    state = with_state(even_cluster(3, 30, empty=2), 1, CORDONED)
    result = plan(state, UNBOUNDED)
    assert all(1 not in m.added and 1 not in m.removed for m in result.moves)
    assert result.moves


def test_a_broker_over_its_disk_threshold_ends_below_it_largest_replicas_first():
    brokers = tuple(BrokerLoad(b, disk_capacity_bytes=100_000) for b in range(4))
    sizes = [40_000, 20_000, 10_000, 5_000, 5_000, 5_000, 5_000]  # 90 % of the capacity
    partitions = tuple(PartitionLoad("t", i, (0,), 0, (0,), size) for i, size in enumerate(sizes))
    partitions += (PartitionLoad("u", 0, (1,), 1, (1,), 1_000), PartitionLoad("u", 1, (2,), 2, (2,), 1_000),
                   PartitionLoad("u", 2, (3,), 3, (3,), 1_000))
    state = with_disk_use(ClusterState(brokers, partitions))
    assert goal_distances(state, UNBOUNDED)["disk_capacity"] > 0
    result = plan(state, GoalConfig(max_moves_per_broker=None))
    disk_steps = [s for s in result.steps if s.goal == "disk_capacity"]
    assert disk_steps[0].partition == 0  # the largest first
    after = apply(state, result)
    used = {b.broker_id: b.disk_used_bytes for b in after.brokers}
    assert all(u <= 80_000 for u in used.values()), used
    assert not result.violations


def test_leaders_are_balanced_by_reordering_before_any_data_moves():
    # Every broker holds the same replicas, but broker 0 is the preferred leader of all.
    brokers = tuple(BrokerLoad(b) for b in range(3))
    partitions = tuple(PartitionLoad("t", i, (0, 1, 2), 0, (0, 1, 2), 10_000) for i in range(30))
    result = plan(ClusterState(brokers, partitions), UNBOUNDED)
    assert result.moves and all(m.kind is MoveKind.LEADER_ONLY for m in result.moves)
    assert result.total_bytes == 0
    assert leader_counts(apply(ClusterState(brokers, partitions), result)) == {0: 10, 1: 10, 2: 10}


def test_leadership_goes_only_to_in_sync_replicas():
    brokers = tuple(BrokerLoad(b) for b in range(3))
    # Broker 2 lags on every partition: it cannot be made leader by reordering.
    partitions = tuple(PartitionLoad("t", i, (i % 2, 1 - i % 2, 2), i % 2, (0, 1), 0) for i in range(30))
    result = plan(ClusterState(brokers, partitions), UNBOUNDED)
    assert not [m for m in result.moves if m.kind is MoveKind.LEADER_ONLY and m.new_replicas[0] == 2]


def test_racks_are_covered_before_counts_are_balanced():
    brokers = (BrokerLoad(0, "a"), BrokerLoad(1, "a"), BrokerLoad(2, "b"), BrokerLoad(3, "b"))
    partitions = tuple(PartitionLoad("t", i, (0, 1), 0, (0, 1), 10) for i in range(4))
    result = plan(ClusterState(brokers, partitions), UNBOUNDED)
    after = apply(ClusterState(brokers, partitions), result)
    assert all({p.replicas[0] // 2, p.replicas[1] // 2} == {0, 1} for p in after.partitions)
    assert [s.goal for s in result.steps][:4] == ["rack_awareness"] * 4


def test_the_plan_bytes_bound_leaves_the_rest_for_the_next_plan():
    state = even_cluster(3, 60, empty=1, size=1_000)
    result = plan(state, GoalConfig(max_moves_per_broker=None, max_plan_bytes=5_000))
    assert result.total_bytes == 5_000 and result.cost_bound_reached
    assert dict(result.remaining_imbalance)["replica_count"] > 0
    assert not result.violations


def test_a_partition_larger_than_the_bytes_bound_still_moves_alone():
    brokers = (BrokerLoad(0), BrokerLoad(1, state=DRAINING))
    state = ClusterState(brokers, (PartitionLoad("t", 0, (1,), 1, (1,), 10_000), PartitionLoad("t", 1, (1,), 1, (1,), 10)))
    result = plan(state, GoalConfig(max_plan_bytes=100))
    assert [(m.partition, m.new_replicas) for m in result.moves] == [(0, (0,))]


def test_hard_goals_that_cannot_be_met_are_reported_with_their_reason():
    brokers = (BrokerLoad(0), BrokerLoad(1), BrokerLoad(2, state=DEAD), BrokerLoad(3, state=DEAD),
               BrokerLoad(4, disk_capacity_bytes=1_000, disk_used_bytes=5_000))
    partitions = (
        PartitionLoad("rf4", 0, (0, 1, 2, 4), 0, (0, 1, 2, 4)),  # 3 takers for RF 4
        PartitionLoad("lost", 0, (2, 3), 2, (2, 3)),  # no live in-sync replica
    )
    result = plan(ClusterState(brokers, partitions), UNBOUNDED)
    reasons = {(v.goal, v.topic, v.broker): v.reason for v in result.violations}
    assert reasons[("replica_placement", "rf4", 2)] == "only 3 broker(s) take replicas, for replication factor 4"
    assert "unclean leader election" in reasons[("replica_placement", "lost", 2)]
    assert "unclean leader election" in reasons[("replica_placement", "lost", 3)]
    assert "outside the partitions' replicas" in reasons[("disk_capacity", None, 4)]
    assert not [m for m in result.moves if m.topic == "lost"]


def test_the_estimate_is_the_busiest_brokers_copy_at_the_throttle():
    state = with_state(even_cluster(4, 8, size=1_000_000), 3, DRAINING)
    result = plan(state, UNBOUNDED)
    busiest = max(bytes_ for _, bytes_ in result.broker_copy_bytes)
    assert busiest >= result.total_bytes / 3
    assert result.estimated_seconds(1_000_000) == busiest / 1_000_000
    with pytest.raises(ValueError):
        result.estimated_seconds(0)


def test_the_plan_does_not_depend_on_the_hash_seed():
    code = (
        "from tests.unit.balancer.cluster_builders import even_cluster, DEAD\n"
        "from tests.unit.balancer.test_planner_cases import with_state\n"
        "from controller.balancer.planner import plan\n"
        "from controller.balancer.model import GoalConfig\n"
        "s = with_state(even_cluster(6, 60, racks=3, topics=7, rate=100), 4, DEAD)\n"
        "print(repr(plan(s, GoalConfig(max_moves_per_broker=3))))\n"
    )
    outputs = set()
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONHASHSEED": seed}, check=False)
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout)
    assert len(outputs) == 1


@pytest.mark.parametrize(
    ("total", "count", "expected"),
    [(900, 4, (215, 235)), (300, 4, (72, 78)), (10, 4, (2, 3)), (3, 20, (0, 1)), (0, 3, (0, 0)), (12, 4, (3, 3))],
)
def test_the_band_is_the_ratio_band_or_floor_to_ceil_of_the_mean(total, count, expected):
    assert band(total, count, 1.1) == expected


def test_balanced_means_max_over_min_within_the_ratio_where_arithmetic_permits():
    assert is_balanced([215, 235, 225, 225], 1.1) and 235 / 215 <= 1.1
    assert not is_balanced([214, 236, 225, 225], 1.1)
    # 5 over 2 brokers cannot do better than 3/2.
    assert is_balanced([2, 3], 1.1) and not is_balanced([1, 4], 1.1)
    for total in range(0, 2000, 37):
        for count in range(1, 21):
            low, high = band(total, count, 1.1)
            assert low <= total / count <= high
            assert low * count <= total <= high * count
            if low >= 10:
                assert high / low <= 1.1


def test_inputs_it_cannot_read_are_refused():
    broker = BrokerLoad(0)
    with pytest.raises(ValueError):
        plan(ClusterState((broker, broker), ()))
    with pytest.raises(ValueError):
        plan(ClusterState((broker,), (PartitionLoad("t", 0, (0, 0), 0, (0,)),)))
    with pytest.raises(ValueError):
        plan(ClusterState((broker,), (PartitionLoad("t", 0, (0,), 0, (0,)),) * 2))
    with pytest.raises(ValueError):
        GoalConfig(max_moves_per_broker=0)


def test_bytes_in_spread_over_brokers_without_unbalancing_replica_counts():
    # 100 single-replica partitions on each of 4 brokers; broker 0's are the busy ones.
    brokers = tuple(BrokerLoad(b) for b in range(4))
    partitions = tuple(
        PartitionLoad("t", i, (i % 4,), i % 4, (i % 4,), 0, 1_000 if i % 4 == 0 else 10) for i in range(400)
    )
    state = ClusterState(brokers, partitions)
    result = plan(state, UNBOUNDED)
    after = apply(state, result)
    before_distances, after_distances = goal_distances(state, UNBOUNDED), goal_distances(after, UNBOUNDED)
    assert after_distances["network"] < before_distances["network"]
    assert after_distances["replica_count"] == after_distances["leader_count"] == 0
    assert {s.goal for s in result.steps} == {"network"}
    rates = {b.broker_id: b.bytes_in_per_second for b in after.brokers}
    assert max(rates.values()) < 100_000 and min(rates.values()) > 1_000


def test_a_topics_replicas_spread_over_the_brokers():
    # Topic "a" only on brokers 0 and 1, topic "b" only on 2 and 3: 100 replicas each.
    brokers = tuple(BrokerLoad(b) for b in range(4))
    partitions = tuple(PartitionLoad("a", i, (i % 2,), i % 2, (i % 2,)) for i in range(200)) + tuple(
        PartitionLoad("b", i, (2 + i % 2,), 2 + i % 2, (2 + i % 2,)) for i in range(200))
    state = ClusterState(brokers, partitions)
    result = plan(state, UNBOUNDED)
    after = apply(state, result)
    assert goal_distances(state, UNBOUNDED)["topic_spread"] > 0
    assert {s.goal for s in result.steps} == {"topic_spread"}
    # Moves of "a" and "b" alternate, so every broker's count stays in its band (96 to 104).
    assert goal_distances(after, UNBOUNDED)["topic_spread"] == goal_distances(after, UNBOUNDED)["replica_count"] == 0
    assert all(48 <= n <= 52 for n in Counter((p.topic, p.replicas[0]) for p in after.partitions).values())
