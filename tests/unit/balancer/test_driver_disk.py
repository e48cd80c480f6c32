"""The balancer's disk trigger and goal, ticked over a simulated cluster whose brokers report their disk use.

As in test_driver.py: the driver's records are applied, leaders bring caught-up
replicas into the ISR at a seeded pace. Each broker reports, every tick, a disk
use of what it holds (every replica it has, the ones being copied to it too)
plus a baseline of other files, and the sizes of its replicas.
"""

from __future__ import annotations

import random

import pytest

from controller.balancer.driver import BalancerDriver, BalancerSettings, BalancerState
from controller.balancer.load_reports import BrokerLoadReport
from controller.metadata.records import RESOURCE_BROKER
from tests.unit.balancer.test_driver import TICK_MS, apply, catch_up, cluster, no_throttles_left, settled

MAX_TICKS = 400


def reports(image, sizes, capacity, baseline, *, with_sizes=True, now_ms=0):
    """Per broker: what it holds on disk (its replicas, being copied or not) and, with_sizes, their sizes."""
    held = {b: {} for b in image.brokers}
    for name, topic in image.topics.items():
        for pid, p in topic.partitions.items():
            for b in {*p.replicas, *p.adding_replicas}:
                held[b][(name, pid)] = sizes[(name, pid)]
    return {
        b: BrokerLoadReport(
            disk_capacity_bytes=capacity[b],
            disk_used_bytes=baseline.get(b, 0) + sum(own.values()),
            partition_sizes=dict(own) if with_sizes else None,
            received_ms=now_ms,
            sizes_received_ms=now_ms if with_sizes else -1,
        )
        for b, own in held.items()
    }


def use_percent(report):
    return 100 * report.disk_used_bytes / report.disk_capacity_bytes


@pytest.mark.parametrize("seed", range(6))
def test_a_broker_above_the_disk_threshold_has_replicas_moved_off_before_it_fills(seed):
    rng = random.Random(seed)
    settings = BalancerSettings(max_moves_per_broker=2, throttle_bytes_per_second=1000, disk_threshold_percent=70)
    driver = BalancerDriver(settings)
    image = cluster([1, 2, 3, 4], partitions=rng.randint(6, 12), rf=2)
    sizes = {(n, p): rng.randint(100, 1000) for n, t in image.topics.items() for p in t.partitions}
    total = sum(sizes.values()) * 2
    small = rng.choice([1, 2, 3, 4])
    # The small broker holds about a quarter of the data, on a disk that takes a little more than that.
    capacity = {b: total * 2 for b in image.brokers}
    loads = reports(image, sizes, capacity, {})
    capacity[small] = int(loads[small].disk_used_bytes / 0.9)
    loads = reports(image, sizes, capacity, {})
    assert use_percent(loads[small]) > 70
    now_ms = 0
    peak = {b: 0.0 for b in image.brokers}
    seen_estimates = []
    for tick in range(MAX_TICKS):
        live = [b for b, r in image.brokers.items() if not r.fenced]
        image = apply(image, driver.tick(image, now_ms, live, loads))
        loads = reports(image, sizes, capacity, {}, now_ms=now_ms)
        for b, report in loads.items():
            peak[b] = max(peak[b], use_percent(report))
        status = driver.status()
        if status.moves_in_flight:
            seen_estimates.append((status.bytes_to_move, status.estimated_ms))
        image = catch_up(image, rng)
        now_ms += TICK_MS
        if settled(image, driver) and use_percent(loads[small]) <= 70:
            break
    assert tick < MAX_TICKS - 1, driver.status()
    assert peak[small] < 100  # moved off before it was full
    assert all(use_percent(r) <= 70 for r in loads.values()), {b: use_percent(r) for b, r in loads.items()}
    assert driver.status().trigger == "disk"
    no_throttles_left(image)
    # The status told the bytes and time of the moves while they ran, from the reported sizes.
    assert seen_estimates and all(bytes_ > 0 and ms >= 0 for bytes_, ms in seen_estimates), seen_estimates


def test_the_plan_estimates_bytes_from_reported_sizes_and_time_from_the_busiest_broker():
    driver = BalancerDriver(BalancerSettings(throttle_bytes_per_second=100, disk_threshold_percent=50))
    image = cluster([1, 2, 3], empty=[4], partitions=6, topics=("a",))
    sizes = {("a", p): 1000 * (p + 1) for p in range(6)}
    capacity = dict.fromkeys(image.brokers, 10**9)
    driver.tick(image, 0, [1, 2, 3, 4], reports(image, sizes, capacity, {}))
    plan = driver.plan(image)
    copying = [m for m in plan.moves if m.added]
    assert copying and all(m.bytes_to_move == sizes[(m.topic, m.partition)] for m in copying)
    total, estimated_ms = driver.estimates(plan)
    assert total == sum(m.bytes_to_move for m in plan.moves)
    into_4 = sum(m.bytes_to_move for m in copying if 4 in m.added)
    # Broker 4 receives every copy here, so it is the busiest: its bytes at 100 B/s.
    assert estimated_ms == into_4 * 1000 // 100
    # Without sizes, nothing is claimed.
    fresh = BalancerDriver(BalancerSettings())
    fresh.tick(image, 0, [1, 2, 3, 4], reports(image, sizes, capacity, {}, with_sizes=False))
    assert fresh.estimates(fresh.plan(image)) == (-1, -1)


def test_it_waits_for_the_sizes_of_a_broker_above_the_threshold_and_says_so():
    driver = BalancerDriver(BalancerSettings(disk_threshold_percent=60))
    image = cluster([1, 2, 3, 4], partitions=8, rf=2)
    sizes = {(n, p): 500 for n, t in image.topics.items() for p in t.partitions}
    capacity = dict.fromkeys(image.brokers, 10**9)
    capacity[2] = 4000  # holds 8 replicas of 500: 100% of it
    loads = reports(image, sizes, capacity, {}, with_sizes=False)
    assert driver.tick(image, 0, [1, 2, 3, 4], loads) == []
    status = driver.status()
    assert status.state is BalancerState.READY and "replica sizes of broker(s) [2]" in status.reason
    records = driver.tick(image, TICK_MS, [1, 2, 3, 4], reports(image, sizes, capacity, {}))
    assert records and driver.status().state is BalancerState.IN_PROGRESS and driver.status().trigger == "disk"


def test_a_disk_full_of_other_files_sheds_what_it_can_then_stalls_with_the_reason_without_churning():
    rng = random.Random(5)
    driver = BalancerDriver(BalancerSettings(disk_threshold_percent=80))
    image = cluster([1, 2, 3, 4], partitions=8, rf=2)
    sizes = {(n, p): 10 for n, t in image.topics.items() for p in t.partitions}
    capacity = dict.fromkeys(image.brokers, 10**9)
    capacity[3] = 10_000
    baseline = {3: 9_500}  # 95% of it is not the broker's replicas: no move brings it under 80%
    now_ms = 0
    for _ in range(MAX_TICKS):
        loads = reports(image, sizes, capacity, baseline, now_ms=0)  # sizes as of one report: no new ones
        image = apply(image, driver.tick(image, now_ms, [1, 2, 3, 4], loads))
        image = catch_up(image, rng)
        now_ms += TICK_MS
        if driver.status().state is BalancerState.STALLED:
            break
    status = driver.status()
    assert status.state is BalancerState.STALLED and "disk_capacity" in status.reason and "broker 3" in status.reason, status
    # It shed the replicas it could: broker 3 holds none.
    assert not any(3 in p.replicas for t in image.topics.values() for p in t.partitions.values())
    # And then waits: the same measurements make no new plan, and it stays stalled.
    for _ in range(5):
        loads = reports(image, sizes, capacity, baseline, now_ms=0)
        records = driver.tick(image, now_ms, [1, 2, 3, 4], loads)
        assert not [r for r in records if type(r).__name__ == "PartitionChangeRecord"], records
        now_ms += TICK_MS
        assert driver.status().state is BalancerState.STALLED


def test_disk_use_growing_under_an_idle_balancer_is_noticed_and_off_mode_ignores_it():
    image = cluster([1, 2, 3], partitions=6, rf=2, topics=("a",))
    sizes = {("a", p): 100 for p in range(6)}
    capacity = dict.fromkeys(image.brokers, 10**6)
    capacity[1] = 1000  # 4 replicas of 100: 40%
    for mode, acts in (("node_add", True), ("off", False)):
        driver = BalancerDriver(BalancerSettings(mode=mode, disk_threshold_percent=50))
        quiet = reports(image, sizes, capacity, {})
        for tick in range(3):
            assert driver.tick(image, tick * TICK_MS, [1, 2, 3], quiet) == []
        # The same image: broker 1's disk filled (other files) past 50%.
        full = reports(image, sizes, capacity, {1: 300})
        records = driver.tick(image, 3 * TICK_MS, [1, 2, 3], full)
        assert bool(records) is acts, mode
        if acts:
            assert driver.status().trigger == "disk"
            assert any(getattr(r, "resource_type", None) == RESOURCE_BROKER for r in records)  # throttled
