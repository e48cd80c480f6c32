"""A returning broker gets back the partitions that waited for it in proposals of
at most ELECTIONS_PER_PROPOSAL_MAX elections: the unfence's own, then the
active controller's, back to back, each committed before the next is planned
(a broker of 100,000 partitions was given them all in one batch, seconds of
event loop in one piece). Pure planning first, then through the QuorumController."""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest

from controller.broker_lifecycle import (
    LEADER_RECOVERY_STATE_RECOVERING,
    plan_broker_heartbeat,
    plan_fence_brokers,
    plan_register_broker,
    plan_unfinished_leadership,
)
from controller.metadata.records import PARTITION_RECORD, TOPIC_RECORD
from tests.unit.test_broker_lifecycle import apply, heartbeat, partition, registered, with_partition
from tests.unit.test_elect_leaders_controller import active_controller

TOPIC_ID = uuid.UUID(int=77)


def waiting_for(broker_id: int, count: int, *, others=(2,)):
    """``count`` partitions of topic "w" whose only in-sync replica, ``broker_id``,
    has been fenced: leaderless, waiting for it."""
    image = registered(broker_id, *others)
    replicas = [broker_id, *others]
    records = [TOPIC_RECORD(name="w", topic_id=TOPIC_ID)]
    records += [
        PARTITION_RECORD(partition_id=i, topic_id=TOPIC_ID, replicas=replicas, isr=[broker_id], leader=broker_id, leader_epoch=0, partition_epoch=0)
        for i in range(count)
    ]
    image = apply(image, records)
    return apply(image, plan_fence_brokers(image, [broker_id]))


def leaders(image) -> list[int]:
    return [p.leader for p in image.topics["w"].partitions.values()]


def test_an_unfence_elects_at_most_the_bound_and_says_some_are_left():
    image = waiting_for(1, 25)
    assert set(leaders(image)) == {-1}
    result, records = plan_broker_heartbeat(image, heartbeat(1, 10, 10**6), elections_max=10)
    assert not result.is_fenced and result.elections_left
    assert len(records) == 1 + 10  # UnfenceBrokerRecord and ten elections
    image = apply(image, records)
    assert leaders(image).count(1) == 10
    # The rest, ten at a time, until none is left.
    image, rounds = finish(image, 10)
    assert rounds == [10, 5]
    assert set(leaders(image)) == {1}
    assert plan_unfinished_leadership(image, 10) == (False, [])


def test_without_a_bound_the_unfence_elects_everything_at_once():
    image = waiting_for(1, 25)
    result, records = plan_broker_heartbeat(image, heartbeat(1, 10, 10**6))
    assert not result.elections_left
    assert set(leaders(apply(image, records))) == {1}


def test_exactly_the_bound_leaves_nothing_over():
    image = waiting_for(1, 10)
    result, records = plan_broker_heartbeat(image, heartbeat(1, 10, 10**6), elections_max=10)
    assert not result.elections_left and len(records) == 11


def test_leaderless_elections_take_the_first_usable_isr_member_in_replica_order():
    # Replicas (3, 1, 2), ISR (1, 3), no leader, every broker fenced; 1 and 3
    # come back: 3 comes first in replica order.
    image = with_partition(registered(1, 2, 3, unfenced=False), [3, 1, 2], [1, 3], -1)
    assert plan_unfinished_leadership(image, 10) == (False, [])  # nobody usable in the ISR yet
    for broker_id in (1, 3):
        _, records = plan_broker_heartbeat(image, heartbeat(broker_id, 10 * broker_id, 10**6), elections_max=0)
        image = apply(image, records)
    assert partition(image).leader == -1  # a bound of 0 elected nobody
    more, records = plan_unfinished_leadership(image, 10)
    assert not more
    p = partition(apply(image, records))
    assert (p.leader, p.isr) == (3, (1, 3))


def test_leaderless_elections_go_outside_the_isr_only_with_unclean_election():
    for unclean, expected in (("true", (2, (2,), LEADER_RECOVERY_STATE_RECOVERING)), ("false", (-1, (1,), 0))):
        image = with_partition(registered(1, 2), [1, 2], [1], 1, configs={"unclean.leader.election.enable": unclean})
        image = apply(image, plan_fence_brokers(image, [1, 2]))
        _, records = plan_broker_heartbeat(image, heartbeat(2, 20, 10**6), elections_max=0)
        image = apply(image, records)
        _, records = plan_unfinished_leadership(image, 10)
        p = partition(apply(image, records))
        assert (p.leader, p.isr, p.leader_recovery_state) == expected


async def heartbeat_until_unfenced(controller, broker_id: int, attempts_max: int = 200):
    """Heartbeat as a caught-up broker does until unfenced (bounded); each time
    it is let in, no partition may still name it as leader from before."""
    for _ in range(attempts_max):
        named = broker_id in leaders(controller.image)
        result = await controller.broker_heartbeat(heartbeat(broker_id, controller.image.brokers[broker_id].epoch, 10**6))
        if not result.is_fenced:
            assert not named, "unfenced while a partition still named it leader"
            return result
        await asyncio.sleep(0)
    raise AssertionError(f"broker {broker_id} not unfenced after {attempts_max} heartbeats")


def test_through_the_controller_the_unfence_is_followed_by_bounded_proposals(monkeypatch):
    import broker.controller_node.quorum_controller as quorum_controller

    monkeypatch.setattr(quorum_controller, "ELECTIONS_PER_PROPOSAL_MAX", 10)

    async def scenario():
        controller, driver = await active_controller(waiting_for(1, 25))
        try:
            result = await heartbeat_until_unfenced(controller, 1)
            assert result.elections_left
            assert leaders(controller.image).count(1) >= 10
            before = driver.proposals - 1  # the unfence's own
            for _ in range(200):  # bounded: a few loop turns per committed proposal
                if set(leaders(controller.image)) == {1}:
                    break
                await asyncio.sleep(0)
            assert set(leaders(controller.image)) == {1}
            assert driver.proposals - before == 3  # 1 + 10, then 10, then 5
        finally:
            controller.raft_leadership(False, 2, None)

    asyncio.run(scenario())


def test_a_newly_active_controller_finishes_what_its_predecessor_left():
    async def scenario():
        image = waiting_for(1, 5)
        _, records = plan_broker_heartbeat(image, heartbeat(1, 10, 10**6), elections_max=2)
        image = apply(image, records)  # the predecessor committed the unfence and two elections
        assert leaders(image).count(-1) == 3
        controller, _ = await active_controller(image)
        try:
            for _ in range(200):
                if set(leaders(controller.image)) == {1}:
                    break
                await asyncio.sleep(0)
            assert set(leaders(controller.image)) == {1}
        finally:
            controller.raft_leadership(False, 2, None)

    asyncio.run(scenario())


# --------------------------------------------------------------------------- bounded leaves


def led_by(broker_id: int, count: int, isr=(1, 2)):
    """``count`` partitions of topic "w" led by ``broker_id``, replicas and ISR ``isr``."""
    image = registered(*sorted(set(isr) | {broker_id}))
    records = [TOPIC_RECORD(name="w", topic_id=TOPIC_ID)]
    records += [
        PARTITION_RECORD(partition_id=i, topic_id=TOPIC_ID, replicas=list(isr), isr=list(isr), leader=broker_id, leader_epoch=0, partition_epoch=0)
        for i in range(count)
    ]
    return apply(image, records)


def finish(image, limit: int, rounds_max: int = 50):
    """plan_unfinished_leadership until nothing is left; the image and each round's size."""
    sizes = []
    for _ in range(rounds_max):
        more, records = plan_unfinished_leadership(image, limit)
        image = apply(image, records)
        sizes.append(len(records))
        if not more:
            return image, sizes
    raise AssertionError(f"not finished in {rounds_max} rounds: {sizes}")


def test_a_bounded_fencing_moves_the_rest_of_the_leaderships_in_later_proposals():
    image = led_by(1, 25)
    records = plan_fence_brokers(image, [1], changes_max=10)
    assert len(records) == 1 + 10
    image = apply(image, records)
    assert image.brokers[1].fenced and leaders(image).count(2) == 10
    image, sizes = finish(image, 10)
    assert sizes[:2] == [10, 5] and sum(sizes) == 15
    assert set(leaders(image)) == {2}
    assert {p.isr for p in image.topics["w"].partitions.values()} == {(2,)}


def test_a_reregistered_broker_is_not_unfenced_while_a_partition_still_names_it():
    from tests.unit.test_broker_lifecycle import registration

    image = led_by(1, 25)
    # Broker 1 restarts after a crash, its session not seen alive: a new incarnation.
    result, records = plan_register_broker(
        image, registration(1, incarnation=uuid.UUID(int=101)), cluster_id="c1", broker_epoch=500, session_alive=False, changes_max=10
    )
    assert result.error.name == "NONE" and len(records) == 1 + 10
    image = apply(image, records)
    assert leaders(image).count(1) == 15
    # Caught up, it asks to be let in while the controller says its leave is pending: it stays fenced.
    result, records = plan_broker_heartbeat(image, heartbeat(1, 500, 10**6), elections_max=10, leave_pending=True)
    assert result.is_fenced and result.is_caught_up and records == []
    image, sizes = finish(image, 10)
    assert sizes[:2] == [10, 5]
    assert 1 not in leaders(image)
    assert {p.isr for p in image.topics["w"].partitions.values()} == {(2,)}
    # Now nothing names it: the next heartbeat unfences it.
    result, records = plan_broker_heartbeat(image, heartbeat(1, 500, 10**6), elections_max=10)
    assert not result.is_fenced and not result.elections_left
    assert not apply(image, records).brokers[1].fenced


def test_a_single_broker_restarted_after_a_crash_gets_every_partition_back_in_slices():
    from tests.unit.test_broker_lifecycle import registration

    image = led_by(1, 25, isr=(1,))
    epochs_before = {p.leader_epoch for p in image.topics["w"].partitions.values()}
    result, records = plan_register_broker(
        image, registration(1, incarnation=uuid.UUID(int=101)), cluster_id="c1", broker_epoch=500, session_alive=False, changes_max=10
    )
    image = apply(image, records)
    pending = len(records) > 10
    for _ in range(10):  # heartbeats until unfenced, the controller finishing in between
        named_before = 1 in leaders(image)
        result, records = plan_broker_heartbeat(image, heartbeat(1, 500, 10**6), elections_max=10, leave_pending=pending)
        image = apply(image, records)
        if not result.is_fenced:
            assert not named_before  # never let in while still named leader at a pre-crash epoch
            break
        image, _ = finish(image, 10)
        pending = False
    assert not image.brokers[1].fenced
    image, _ = finish(image, 10)
    assert set(leaders(image)) == {1}
    # Each partition was left (leader -1) and then elected: two epochs later than before the crash.
    assert {p.leader_epoch for p in image.topics["w"].partitions.values()} == {max(epochs_before) + 2}


def test_through_the_controller_a_reregistration_is_finished_before_the_unfence(monkeypatch):
    import broker.controller_node.quorum_controller as quorum_controller
    from tests.unit.test_broker_lifecycle import registration

    monkeypatch.setattr(quorum_controller, "ELECTIONS_PER_PROPOSAL_MAX", 10)

    async def scenario():
        controller, driver = await active_controller(led_by(1, 25))
        controller.cluster_id = "c1"
        try:
            result = await controller.register_broker(registration(1, incarnation=uuid.UUID(int=101)))
            assert result.error.name == "NONE"
            for _ in range(200):
                if 1 not in leaders(controller.image):
                    break
                await asyncio.sleep(0)
            assert 1 not in leaders(controller.image)
            await heartbeat_until_unfenced(controller, 1)
        finally:
            controller.raft_leadership(False, 2, None)

    asyncio.run(scenario())


# --------------------------------------------------------------------------- seeded runs


@pytest.mark.parametrize("seed", range(40))
def test_seeded_crashes_fencings_and_returns_keep_the_leadership_rules(seed):
    """Three brokers, 30 partitions of RF 2 or 3, bounds of 4 changes a proposal:
    seeded crashes (re-registration as a new incarnation), session expiries and
    heartbeats, with the controller's finishing rounds interleaved at random
    (and sometimes not run at all, as after a failover). At every step: no ISR
    is empty, and no broker is unfenced while a partition still names it as
    leader. At the end, once every broker heartbeats and the rounds are done:
    no fenced broker leads or shares an ISR, and every partition with an
    unfenced ISR member has a leader."""
    from tests.unit.test_broker_lifecycle import registration

    rng = random.Random(seed)
    limit = 4
    image = registered(1, 2, 3)
    records = [TOPIC_RECORD(name="w", topic_id=TOPIC_ID)]
    for i in range(30):
        replicas = rng.sample([1, 2, 3], rng.choice([2, 3]))
        records.append(
            PARTITION_RECORD(partition_id=i, topic_id=TOPIC_ID, replicas=replicas, isr=replicas, leader=replicas[0], leader_epoch=0, partition_epoch=0)
        )
    image = apply(image, records)
    incarnations = {b: 0 for b in (1, 2, 3)}
    pending: set[int] = set()  # the controller's memory of bounded leaves not yet finished

    def check(image):
        for p in image.topics["w"].partitions.values():
            assert p.isr, p

    for _ in range(60):
        broker_id = rng.choice([1, 2, 3])
        action = rng.random()
        if action < 0.2:  # crash and restart: a new incarnation registers
            incarnations[broker_id] += 1
            epoch = image.offset + 1
            _, records = plan_register_broker(
                image, registration(broker_id, incarnation=uuid.UUID(int=1000 * broker_id + incarnations[broker_id])),
                cluster_id="c1", broker_epoch=epoch, session_alive=False, changes_max=limit,
            )
            if len(records) > limit:
                pending.add(broker_id)
            image = apply(image, records)
        elif action < 0.4:  # its session ran out
            records = plan_fence_brokers(image, [broker_id], changes_max=limit)
            if len(records) >= limit:
                pending.add(broker_id)
            image = apply(image, records)
        elif action < 0.8:  # a heartbeat, caught up
            named = broker_id in {p.leader for p in image.topics["w"].partitions.values()}
            was_fenced = image.brokers[broker_id].fenced
            result, records = plan_broker_heartbeat(
                image, heartbeat(broker_id, image.brokers[broker_id].epoch, 10**9), elections_max=limit,
                leave_pending=broker_id in pending,
            )
            if was_fenced and not result.is_fenced:
                assert not named, f"broker {broker_id} unfenced while still named leader"
            image = apply(image, records)
        else:  # the controller's finishing round
            more, records = plan_unfinished_leadership(image, limit)
            image = apply(image, records)
            if not more:
                pending.clear()
        check(image)

    for _ in range(40):  # everybody back and heartbeating, the rounds run
        for broker_id in (1, 2, 3):
            _, records = plan_broker_heartbeat(
                image, heartbeat(broker_id, image.brokers[broker_id].epoch, 10**9), elections_max=limit,
                leave_pending=broker_id in pending,
            )
            image = apply(image, records)
        more, records = plan_unfinished_leadership(image, limit)
        image = apply(image, records)
        if not more:
            pending.clear()
        if not more and all(not b.fenced for b in image.brokers.values()):
            break
    check(image)
    fenced = {b for b, broker in image.brokers.items() if broker.fenced}
    assert not fenced
    for p in image.topics["w"].partitions.values():
        assert p.leader in p.isr, p
