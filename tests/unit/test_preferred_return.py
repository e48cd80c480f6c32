"""A preferred replica that comes back (its broker unfenced, or back in the ISR)
leads its partition again soon, not at the next imbalance check: the decision
between two images (checked against a brute-force reading over seeded random
histories), the planning, and the active controller's short delay, which
auto.leader.rebalance.enable=false turns off."""

from __future__ import annotations

import asyncio
import os
import random
import uuid

from broker.controller_node import quorum_controller
from controller.broker_lifecycle import usable_broker_ids
from controller.leader_election import plan_preferred_elections, preferred_leaders_returned
from controller.metadata.records import (
    FENCE_BROKER_RECORD,
    PARTITION_CHANGE_RECORD,
    PARTITION_RECORD,
    TOPIC_RECORD,
    UNFENCE_BROKER_RECORD,
)
from tests.unit.test_broker_lifecycle import apply, partition, registered, with_partition
from tests.unit.test_elect_leaders_controller import active_controller

BROKERS = (1, 2, 3)


def isr_change(image, isr, leader=None, name="t", partition_id=0):
    topic = image.topics[name]
    fields = {"isr": list(isr)}
    if leader is not None:
        fields["leader"] = leader
    return apply(image, [PARTITION_CHANGE_RECORD(partition_id=partition_id, topic_id=topic.topic_id, **fields)])


def fence(image, broker_id):
    return apply(image, [FENCE_BROKER_RECORD(id=broker_id, epoch=image.brokers[broker_id].epoch)])


def unfence(image, broker_id):
    return apply(image, [UNFENCE_BROKER_RECORD(id=broker_id, epoch=image.brokers[broker_id].epoch)])


# --------------------------------------------------------------------------- the decision


def test_back_in_the_isr_counts_and_a_preferred_leader_or_an_unchanged_partition_does_not():
    away = with_partition(registered(1, 2, 3), [1, 2, 3], [2, 3], 2)  # 1 caught up yet? not in the ISR
    back = isr_change(away, [2, 3, 1])
    assert preferred_leaders_returned(away, back) == [("t", 0)]
    assert preferred_leaders_returned(back, back) == []
    assert preferred_leaders_returned(back, isr_change(back, [2, 1, 3])) == []  # already could lead
    leads = isr_change(back, [2, 3, 1], leader=1)
    assert preferred_leaders_returned(back, leads) == []
    # The preferred broker is in the ISR but fenced: not back yet.
    fenced = fence(away, 1)
    assert preferred_leaders_returned(fenced, isr_change(fenced, [2, 3, 1])) == []


def test_an_unfenced_broker_is_back_for_the_partitions_whose_isr_kept_it():
    image = with_partition(registered(1, 2, 3), [1, 2, 3], [1, 2, 3], 2)
    fenced = fence(image, 1)
    assert partition(fenced).isr == (1, 2, 3)  # the record alone leaves the ISR as it was
    assert preferred_leaders_returned(fenced, unfence(fenced, 1)) == [("t", 0)]
    assert preferred_leaders_returned(image, fence(image, 1)) == []


def test_planning_elects_only_what_still_qualifies():
    away = with_partition(registered(1, 2, 3), [1, 2, 3], [2, 3, 1], 2)
    [record] = plan_preferred_elections(away, [("t", 0), ("t", 0), ("gone", 0), ("t", 9)])
    assert (record.partition_id, record.leader) == (0, 1)
    assert plan_preferred_elections(isr_change(away, [2, 3]), [("t", 0)]) == []  # left the ISR again
    assert plan_preferred_elections(fence(away, 1), [("t", 0)]) == []
    assert plan_preferred_elections(isr_change(away, [2, 3, 1], leader=1), [("t", 0)]) == []


def _could_lead(image, name, partition_id):
    topic = image.topics.get(name)
    p = topic.partitions.get(partition_id) if topic else None
    if p is None or not p.replicas:
        return False
    usable = set(usable_broker_ids(image))
    return p.leader != p.replicas[0] and p.replicas[0] in p.isr and p.replicas[0] in usable


def _random_step(rng, image):
    """Fence or unfence a broker, or change one partition's ISR and leader."""
    if rng.random() < 0.25:
        broker_id = rng.choice(BROKERS)
        return fence(image, broker_id) if not image.brokers[broker_id].fenced else unfence(image, broker_id)
    name = rng.choice(sorted(image.topics))
    topic = image.topics[name]
    partition_id = rng.choice(sorted(topic.partitions))
    replicas = topic.partitions[partition_id].replicas
    isr = [b for b in replicas if rng.random() < 0.7] or [replicas[rng.randrange(3)]]
    return isr_change(image, isr, leader=rng.choice(isr), name=name, partition_id=partition_id)


def test_seeded_histories_agree_with_a_brute_force_reading():
    """The function looks only at what changed between the images; over random
    histories it must find exactly the partitions a full scan finds.
    PREFERRED_RETURN_SEEDS=N runs more seeds."""
    for seed in range(int(os.environ.get("PREFERRED_RETURN_SEEDS", "40"))):
        rng = random.Random(seed)
        image = registered(*BROKERS)
        records = []
        for name in ("a", "b", "c"):
            topic_id = uuid.UUID(int=rng.getrandbits(64) + 1)
            records.append(TOPIC_RECORD(name=name, topic_id=topic_id))
            for partition_id in range(4):
                replicas = rng.sample(BROKERS, 3)
                records.append(PARTITION_RECORD(
                    partition_id=partition_id, topic_id=topic_id, replicas=replicas, isr=replicas,
                    leader=replicas[0], leader_epoch=0, partition_epoch=0,
                ))
        image = apply(image, records)
        for step in range(60):
            new = _random_step(rng, image)
            expected = sorted(
                (name, p) for name, topic in new.topics.items() for p in topic.partitions
                if _could_lead(new, name, p) and not _could_lead(image, name, p)
            )
            assert sorted(preferred_leaders_returned(image, new)) == expected, (seed, step)
            elected = apply(new, plan_preferred_elections(new, expected))
            for name, p in expected:
                assert elected.topics[name].partitions[p].leader == elected.topics[name].partitions[p].replicas[0]
            image = new


# --------------------------------------------------------------------------- on the active controller


def test_the_active_controller_elects_a_returned_preferred_replica_after_the_short_delay(monkeypatch):
    monkeypatch.setattr(quorum_controller, "PREFERRED_RETURN_DELAY_MS", 20)

    async def scenario():
        away = with_partition(registered(1, 2, 3), [1, 2, 3], [2, 3], 2)
        # The imbalance check is far away (Kafka's 300 s default).
        controller, _ = await active_controller(away, leader_rebalance_interval_ms=300_000)
        try:
            await controller._submit(lambda image: (None, [
                PARTITION_CHANGE_RECORD(partition_id=0, topic_id=image.topics["t"].topic_id, isr=[2, 3, 1])
            ]))
            assert partition(controller.image).leader == 2
            for _ in range(300):
                if partition(controller.image).leader == 1:
                    break
                await asyncio.sleep(0.01)
            assert partition(controller.image).leader == 1
            assert controller._preferred_due == set()
        finally:
            controller.close()

    asyncio.run(scenario())


def test_auto_leader_rebalance_disabled_leaves_the_leader_where_it_is(monkeypatch):
    monkeypatch.setattr(quorum_controller, "PREFERRED_RETURN_DELAY_MS", 20)

    async def scenario():
        away = with_partition(registered(1, 2, 3), [1, 2, 3], [2, 3], 2)
        controller, driver = await active_controller(away)  # auto.leader.rebalance.enable=false
        try:
            await controller._submit(lambda image: (None, [
                PARTITION_CHANGE_RECORD(partition_id=0, topic_id=image.topics["t"].topic_id, isr=[2, 3, 1])
            ]))
            proposals = driver.proposals
            await asyncio.sleep(0.2)
            assert controller._preferred_task is None and driver.proposals == proposals
            assert partition(controller.image).leader == 2
        finally:
            controller.close()

    asyncio.run(scenario())


def test_losing_the_leadership_drops_what_was_due(monkeypatch):
    monkeypatch.setattr(quorum_controller, "PREFERRED_RETURN_DELAY_MS", 10_000)

    async def scenario():
        away = with_partition(registered(1, 2, 3), [1, 2, 3], [2, 3], 2)
        controller, _ = await active_controller(away, leader_rebalance_interval_ms=300_000)
        try:
            await controller._submit(lambda image: (None, [
                PARTITION_CHANGE_RECORD(partition_id=0, topic_id=image.topics["t"].topic_id, isr=[2, 3, 1])
            ]))
            task = controller._preferred_task
            assert controller._preferred_due == {("t", 0)} and task is not None
            controller.raft_leadership(False, 2, 2)
            await asyncio.sleep(0)
            assert task.cancelled() and controller._preferred_due == set()
        finally:
            controller.close()

    asyncio.run(scenario())
