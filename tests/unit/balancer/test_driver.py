"""The balancer's driver, ticked over a simulated cluster as the active controller ticks it.

The simulation applies the driver's records to the image, and between ticks
lets partition leaders bring caught-up replicas into the ISR through
AlterPartition (which completes reassignments), at a seeded random pace, and
fences brokers that die. Everything the driver writes goes through the same
pure planners the controller uses, so these runs are the controller's runs
without the clock and the network.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest

from controller.alter_partition import plan_alter_partition
from controller.balancer.driver import (
    FOLLOWER_THROTTLED_RATE,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_RATE,
    LEADER_THROTTLED_REPLICAS,
    BalancerDriver,
    BalancerSettings,
    BalancerState,
    distribution,
)
from controller.broker_lifecycle import plan_fence_brokers
from controller.features import BALANCER_VERSION
from controller.metadata.records import (
    CONFIG_RECORD,
    FEATURE_LEVEL_RECORD,
    PARTITION_RECORD,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    TOPIC_RECORD,
)
from controller.reassignment import is_reassigning, plan_alter_partition_reassignments
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.unit.test_broker_lifecycle import apply, registered

AP = struct_classes(APIS_BY_NAME["AlterPartition"].request)
TICK_MS = 1000
MAX_TICKS = 500


def cluster(brokers, empty=(), partitions=12, rf=3, topics=("a", "b"), balancer_version=1):
    """``partitions`` per topic placed round-robin over ``brokers``; ``empty`` brokers registered with
    nothing; ``balancer_version`` finalized (as a new cluster has it; 0: not written)."""
    image = registered(*sorted([*brokers, *empty]))
    records = [FEATURE_LEVEL_RECORD(name=BALANCER_VERSION, feature_level=balancer_version)] if balancer_version else []
    for t, name in enumerate(topics):
        topic_id = uuid.UUID(int=100 + t)
        records.append(TOPIC_RECORD(name=name, topic_id=topic_id))
        for p in range(partitions):
            replicas = [brokers[(p + t + k) % len(brokers)] for k in range(rf)]
            records.append(PARTITION_RECORD(partition_id=p, topic_id=topic_id, replicas=replicas, isr=replicas,
                                            leader=replicas[0], leader_epoch=0, partition_epoch=0))
    return apply(image, records)


def replica_counts(image, brokers):
    counts = Counter({b: 0 for b in brokers})
    for topic in image.topics.values():
        for p in topic.partitions.values():
            counts.update(p.replicas)
    return counts


def catch_up(image, rng, dead=(), pace=0.5):
    """Leaders bring some replicas that are not in their ISR (and alive) in."""
    for name in sorted(image.topics):
        topic = image.topics[name]
        for pid in sorted(topic.partitions):
            p = image.topics[name].partitions[pid]
            if p.leader < 0 or p.leader in dead:
                continue
            missing = [b for b in p.replicas if b not in p.isr and b not in dead and not image.brokers[b].fenced]
            if not missing or rng.random() > pace:
                continue
            new_isr = [*p.isr, *missing]
            data = AP.PartitionData(
                partition_index=pid, leader_epoch=p.leader_epoch, leader_recovery_state=0, partition_epoch=p.partition_epoch,
                new_isr_with_epochs=[AP.BrokerState(broker_id=b, broker_epoch=image.brokers[b].epoch) for b in new_isr],
            )
            request = AP.AlterPartitionRequest(
                broker_id=p.leader, broker_epoch=image.brokers[p.leader].epoch,
                topics=[AP.TopicData(topic_id=topic.topic_id, partitions=[data])],
            )
            _, records = plan_alter_partition(image, request, 3)
            image = apply(image, records)
    return image


def run(driver, image, *, brokers, rng, now_ms=0, dead=(), until=None, ticks=MAX_TICKS, watch=None):
    """Tick until ``until(image, driver)`` holds (or the driver is ready with nothing
    moving); returns (image, now_ms, ticks used)."""
    for n in range(ticks):
        live = [b for b, r in image.brokers.items() if not r.fenced and b not in dead]
        image = apply(image, driver.tick(image, now_ms, live))
        if watch is not None:
            watch(image, driver)
        image = catch_up(image, rng, dead)
        now_ms += TICK_MS
        if until is not None and until(image, driver):
            return image, now_ms, n
    return image, now_ms, ticks


def settled(image, driver):
    return driver.status().state is BalancerState.READY and not any(
        is_reassigning(p) for t in image.topics.values() for p in t.partitions.values()
    ) and not image.balancer_throttles


def no_throttles_left(image):
    for topic in image.topics.values():
        assert LEADER_THROTTLED_REPLICAS not in topic.configs and FOLLOWER_THROTTLED_REPLICAS not in topic.configs, topic.name
    for (kind, name), configs in image.resource_configs.items():
        if kind == RESOURCE_BROKER:
            assert LEADER_THROTTLED_RATE not in configs and FOLLOWER_THROTTLED_RATE not in configs, name


@pytest.mark.parametrize("seed", range(8))
def test_a_broker_that_joins_empty_is_filled_within_the_bound_per_broker(seed):
    rng = random.Random(seed)
    settings = BalancerSettings(max_moves_per_broker=2, throttle_bytes_per_second=1000)
    driver = BalancerDriver(settings)
    image = cluster([1, 2, 3], empty=[4], partitions=rng.randint(10, 25))
    most_moves = Counter()

    def watch(image, driver):
        # Never more than the bound of running moves touching one broker.
        touching = Counter()
        for t in image.topics.values():
            for p in t.partitions.values():
                touching.update({*p.adding_replicas, *p.removing_replicas})
        for b, n in touching.items():
            most_moves[b] = max(most_moves[b], n)
        assert all(n <= settings.max_moves_per_broker for n in touching.values()), touching
        # Throttled while data moves, on the brokers concerned.
        for t in image.topics.values():
            for pid, p in t.partitions.items():
                if p.adding_replicas:
                    for b in p.adding_replicas:
                        assert f"{pid}:{b}" in t.configs[FOLLOWER_THROTTLED_REPLICAS].split(",")
                        assert image.configs_of(RESOURCE_BROKER, str(b))[FOLLOWER_THROTTLED_RATE] == "1000"

    image, _, used = run(driver, image, brokers=[1, 2, 3, 4], rng=rng, until=settled, watch=watch)
    assert used < MAX_TICKS, driver.status()
    counts = replica_counts(image, [1, 2, 3, 4])
    assert max(counts.values()) / min(counts.values()) <= 1.1 or max(counts.values()) - min(counts.values()) <= 1, counts
    assert most_moves[4] == settings.max_moves_per_broker  # the bound was used, and held
    no_throttles_left(image)
    status = driver.status()
    assert (status.state, status.trigger, status.moves_in_flight) == (BalancerState.READY, "node_add", 0)
    assert status.balanced_since_ms is not None
    # Every partition is led by its preferred replica once done, and keeps its RF.
    for t in image.topics.values():
        for p in t.partitions.values():
            assert len(p.replicas) == 3 and p.leader == p.replicas[0] and set(p.isr) == set(p.replicas)


@pytest.mark.parametrize("seed", range(6))
def test_a_broker_fenced_past_the_threshold_has_its_replicas_recreated_on_the_others(seed):
    rng = random.Random(seed)
    threshold_ms = 30_000
    driver = BalancerDriver(BalancerSettings(broker_failure_threshold_ms=threshold_ms, max_moves_per_broker=3))
    image = cluster([1, 2, 3, 4], partitions=rng.randint(6, 15))
    image, now_ms, _ = run(driver, image, brokers=[1, 2, 3, 4], rng=rng, ticks=3)
    dead = rng.choice([1, 2, 3, 4])
    image = apply(image, plan_fence_brokers(image, [dead]))
    fenced_at_ms = now_ms
    moved_early = []

    def watch(image, driver):
        if now_ms_box[0] - fenced_at_ms < threshold_ms - TICK_MS:
            moved_early.extend(p for t in image.topics.values() for p in t.partitions.values() if is_reassigning(p))
        now_ms_box[0] += TICK_MS

    now_ms_box = [now_ms]

    def restored(image, driver):
        return settled(image, driver) and all(
            dead not in p.replicas and len(p.replicas) == 3 and len(p.isr) == 3
            for t in image.topics.values() for p in t.partitions.values()
        )

    image, _, used = run(driver, image, brokers=[1, 2, 3, 4], rng=rng, now_ms=now_ms, dead=[dead], until=restored, watch=watch)
    assert used < MAX_TICKS, (driver.status(), dead)
    assert not moved_early  # nothing moved before the threshold
    assert driver.status().failed_brokers == ()  # it holds nothing any more
    no_throttles_left(image)
    survivors = [b for b in (1, 2, 3, 4) if b != dead]
    counts = replica_counts(image, survivors)
    assert max(counts.values()) - min(counts.values()) <= 1, counts


def test_a_move_to_a_broker_that_dies_is_cancelled_and_planned_again_without_it():
    rng = random.Random(3)
    driver = BalancerDriver(BalancerSettings(max_moves_per_broker=4))
    image = cluster([1, 2, 3], empty=[4, 5], partitions=10)
    image = apply(image, driver.tick(image, 0, [1, 2, 3, 4, 5]))
    moving_to_5 = [(n, pid) for n, t in image.topics.items() for pid, p in t.partitions.items() if 5 in p.adding_replicas]
    assert moving_to_5 and driver.status().state is BalancerState.IN_PROGRESS
    image = apply(image, plan_fence_brokers(image, [5]))
    driver.take_events()
    records = driver.tick(image, 1000, [1, 2, 3, 4])
    image = apply(image, records)
    events = driver.take_events()
    assert ("info", f"cancelling the move of {moving_to_5[0][0]}-{moving_to_5[0][1]}: broker(s) [5] it copies to are down") in events
    assert driver.take_events() == []
    for name, pid in moving_to_5:
        assert 5 not in image.topics[name].partitions[pid].replicas  # cancelled: back to the original replicas
    image, _, used = run(driver, image, brokers=[1, 2, 3, 4], rng=rng, now_ms=2000, dead=[5], until=settled)
    assert used < MAX_TICKS
    assert all(5 not in p.replicas for t in image.topics.values() for p in t.partitions.values())
    assert replica_counts(image, [1, 2, 3, 4])[4] > 0
    no_throttles_left(image)


def test_an_operators_reassignment_stalls_the_balancer_until_it_ends():
    driver = BalancerDriver(BalancerSettings())
    image = cluster([1, 2, 3], empty=[4], partitions=6)
    _, records = plan_alter_partition_reassignments(image, [("a", [(0, [2, 3, 1])])])
    # A reorder completes at once; a real move stays running.
    _, records = plan_alter_partition_reassignments(image, [("a", [(0, [1, 2, 4])])])
    image = apply(image, records)
    assert driver.tick(image, 0, [1, 2, 3, 4]) == []
    status = driver.status()
    assert status.state is BalancerState.STALLED and "did not start" in status.reason


def test_an_operators_throttles_are_kept_and_not_removed():
    rng = random.Random(1)
    driver = BalancerDriver(BalancerSettings(throttle_bytes_per_second=1000))
    image = cluster([1, 2, 3], empty=[4], partitions=6)
    image = apply(image, [
        CONFIG_RECORD(resource_type=RESOURCE_BROKER, resource_name="4", name=FOLLOWER_THROTTLED_RATE, value="777"),
        CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name="a", name=LEADER_THROTTLED_REPLICAS, value="*"),
    ])
    image, _, used = run(driver, image, brokers=[1, 2, 3, 4], rng=rng, until=settled)
    assert used < MAX_TICKS
    assert image.configs_of(RESOURCE_BROKER, "4") == {FOLLOWER_THROTTLED_RATE: "777"}
    assert image.topics["a"].configs == {LEADER_THROTTLED_REPLICAS: "*"}
    assert replica_counts(image, [4])[4] > 0


def test_fewer_brokers_than_the_replication_factor_is_stalled_with_the_reason():
    driver = BalancerDriver(BalancerSettings(broker_failure_threshold_ms=0))
    image = cluster([1, 2, 3], partitions=2, topics=("a",))
    image = apply(image, plan_fence_brokers(image, [3]))
    assert driver.tick(image, 0, [1, 2]) == []
    status = driver.status()
    assert status.state is BalancerState.STALLED and status.failed_brokers == (3,)
    assert "replica_placement" in status.reason and "replication factor 3" in status.reason


def test_off_does_nothing_and_says_so():
    driver = BalancerDriver(BalancerSettings(mode="off"))
    image = cluster([1, 2, 3], empty=[4])
    assert driver.tick(image, 0, [1, 2, 3, 4]) == []
    assert driver.status().state is BalancerState.OFF


def test_before_balancer_version_1_it_moves_nothing_and_says_why_then_fills_the_new_broker():
    # A cluster formatted by an older pybroker: no node may meet a BalancerThrottleRecord
    # until every node runs a build that reads it and the level is raised.
    driver = BalancerDriver(BalancerSettings())
    image = cluster([1, 2, 3], empty=[4], balancer_version=0)
    for now_ms in range(0, 5 * TICK_MS, TICK_MS):
        assert driver.tick(image, now_ms, [1, 2, 3, 4]) == []
    status = driver.status()
    assert status.state is BalancerState.STALLED and "balancer.version" in status.reason
    image = apply(image, [FEATURE_LEVEL_RECORD(name=BALANCER_VERSION, feature_level=1)])
    records = driver.tick(image, 5 * TICK_MS, [1, 2, 3, 4])
    assert records and driver.status().state is BalancerState.IN_PROGRESS
    assert driver.status().trigger == "node_add"


def test_node_add_leaves_an_uneven_cluster_alone_and_continuous_evens_it_out():
    image = cluster([1, 2, 3], partitions=12, rf=1)
    # Skew: every partition of topic b on broker 1.
    _, records = plan_alter_partition_reassignments(image, [("b", [(p, [1]) for p in range(12)])])
    image = apply(image, records)
    image = catch_up(image, random.Random(0), pace=1.0)
    assert replica_counts(image, [1, 2, 3])[1] >= 12
    node_add = BalancerDriver(BalancerSettings())
    assert node_add.tick(image, 0, [1, 2, 3]) == [] and node_add.status().state is BalancerState.READY
    continuous = BalancerDriver(BalancerSettings(mode="continuous", imbalance_threshold_percent=20))
    image, _, used = run(continuous, image, brokers=[1, 2, 3], rng=random.Random(0), until=settled)
    assert used < MAX_TICKS and continuous.status().trigger == "imbalance"
    counts = replica_counts(image, [1, 2, 3])
    assert max(counts.values()) - min(counts.values()) <= 1, counts


def test_settings_refuse_what_they_cannot_honour():
    for bad in (dict(mode="sometimes"), dict(throttle_bytes_per_second=0), dict(max_moves_per_broker=0),
                dict(broker_failure_threshold_ms=-1), dict(imbalance_threshold_percent=-5)):
        with pytest.raises(ValueError):
            BalancerSettings(**bad)


def test_a_move_of_a_partition_left_without_a_leader_is_cancelled():
    driver = BalancerDriver(BalancerSettings(max_moves_per_broker=4))
    image = cluster([1, 2, 3], empty=[4], partitions=6, rf=1, topics=("a",))
    image = apply(image, driver.tick(image, 0, [1, 2, 3, 4]))
    parts = image.topics["a"].partitions
    source = next(p.removing_replicas[0] for p in parts.values() if p.removing_replicas)
    from_source = [pid for pid, p in parts.items() if p.removing_replicas == (source,)]
    others = [pid for pid, p in parts.items() if is_reassigning(p) and pid not in from_source]
    image = apply(image, plan_fence_brokers(image, [source]))  # RF 1: its partitions have no leader now
    image = apply(image, driver.tick(image, 1000, [b for b in (1, 2, 3, 4) if b != source]))
    parts = image.topics["a"].partitions
    assert all(not is_reassigning(parts[pid]) and parts[pid].replicas == (source,) for pid in from_source)
    assert all(is_reassigning(parts[pid]) for pid in others)  # led, so still copying


def test_an_idle_balancer_does_not_look_again_until_something_changes():
    driver = BalancerDriver(BalancerSettings())
    image = cluster([1, 2, 3], partitions=4)
    calls = []
    real = driver._maybe_plan

    def counted(*args):
        calls.append(args[1])
        return real(*args)

    driver._maybe_plan = counted
    for now_ms in range(0, 5000, 1000):
        assert driver.tick(image, now_ms, [1, 2, 3]) == []
    assert calls == [0]
    # A new broker, in the image and heard from: looked at again, and it is filled.
    fuller = cluster([1, 2, 3], empty=[4], partitions=4)
    assert driver.tick(fuller, 6000, [1, 2, 3, 4]) != []
    assert calls == [0, 6000]


def test_a_new_controller_finishes_filling_a_broker_its_predecessor_started_on_and_removes_its_throttles():
    rng = random.Random(2)
    first = BalancerDriver(BalancerSettings(max_moves_per_broker=2))
    image = cluster([1, 2, 3], empty=[4], partitions=20)

    def copying(image, driver):
        return replica_counts(image, [4])[4] >= 4 and any(is_reassigning(p) for t in image.topics.values() for p in t.partitions.values())

    image, now_ms, _ = run(first, image, brokers=[1, 2, 3, 4], rng=rng, until=copying)
    assert copying(image, first) and image.balancer_throttles
    # The first controller is gone mid-move. The second waits for those moves
    # (someone else's to it), throttles kept on while they copy.
    second = BalancerDriver(BalancerSettings(max_moves_per_broker=2))
    assert second.tick(image, now_ms, [1, 2, 3, 4]) == []
    assert second.status().state is BalancerState.STALLED and image.balancer_throttles
    image = catch_up(image, rng, pace=1.0)
    assert 0 < replica_counts(image, [4])[4] < 10
    # Then it removes the predecessor's throttles, and fills broker 4 on.
    records = second.tick(image, now_ms + 1000, [1, 2, 3, 4])
    image = apply(image, records)
    assert not image.balancer_throttles
    no_throttles_left(image)
    image, _, used = run(second, image, brokers=[1, 2, 3, 4], rng=rng, now_ms=now_ms + 2000, until=settled)
    assert used < MAX_TICKS and second.status().trigger == "node_add"
    counts = replica_counts(image, [1, 2, 3, 4])
    assert max(counts.values()) - min(counts.values()) <= 1, counts


def test_the_distribution_a_run_started_from_is_kept_through_its_plans_and_after():
    rng = random.Random(7)
    driver = BalancerDriver(BalancerSettings(max_moves_per_broker=2))
    image = cluster([1, 2, 3], empty=[4], partitions=12)
    start = distribution(image)
    assert start == ((1, 24, 8), (2, 24, 8), (3, 24, 8), (4, 0, 0))
    assert (driver.status().distribution_before, driver.status().distribution_before_ms) == ((), None)
    seen = set()

    def watch(image, driver):
        seen.add((driver.status().distribution_before, driver.status().distribution_before_ms))

    # The bound of 2 moves per broker makes the run several plans: they all keep the run's start.
    image, _, used = run(driver, image, brokers=[1, 2, 3, 4], rng=rng, until=settled, watch=watch)
    assert used < MAX_TICKS, driver.status()
    assert seen == {(start, 0)}
    status = driver.status()
    assert (status.state, status.distribution_before, status.distribution_before_ms) == (BalancerState.READY, start, 0)
    now = distribution(image)
    assert now != start and sum(r for _, r, _ in now) == sum(r for _, r, _ in start) and now[3][1] > 0
