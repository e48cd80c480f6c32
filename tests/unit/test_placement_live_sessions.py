"""New replicas go only to brokers the active controller has heard from.

A newly active controller grants every unfenced broker a session (it cannot
know who heartbeated to its predecessor), so a broker that died just before
the failover stays unfenced for a whole session timeout. Placement must not
count it: only brokers that heartbeated to this controller within their
session take new replicas, and a topic that needs more of them than there are
fails with INVALID_REPLICATION_FACTOR. Right after a failover the controller
waits (bounded) for the first heartbeats of brokers it has not heard from yet
when only they could make a creation possible.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from broker.controller_node import quorum_controller
from controller.broker_lifecycle import BrokerHeartbeatTracker, plan_fence_brokers
from controller.topic_commands import (
    ClusterDefaults,
    CreatePartitionsSpec,
    CreateTopicSpec,
    plan_create_partitions,
    plan_create_topic,
)
from protocol.errors import ErrorCode
from tests.quorum_harness import SingleVoterController
from tests.unit.test_alter_partition import join
from tests.unit.test_broker_lifecycle import apply, heartbeat, registered

SESSION_MS = 1000
DEFAULTS = ClusterDefaults(broker_ids=(0,), num_partitions=1, replication_factor=1)


def heard_only(*broker_ids) -> ClusterDefaults:
    return ClusterDefaults(broker_ids=(0,), num_partitions=1, replication_factor=1, live_broker_ids=frozenset(broker_ids))


# --------------------------------------------------------------------------- the tracker


def test_a_new_controller_has_heard_from_nobody_until_heartbeats_arrive():
    image = registered(1, 2, 3)
    tracker = BrokerHeartbeatTracker(SESSION_MS)
    tracker.activate(image, 100)
    # Fresh sessions (nobody is fenced for the failover) but no evidence of life.
    assert tracker.expired(image, 1099) == []
    assert tracker.live_brokers(image, 200) == frozenset()
    assert tracker.awaited_brokers(image, 200) == {1: 1100, 2: 1100, 3: 1100}
    tracker.touch(2, 300)
    tracker.touch(3, 400)
    assert tracker.live_brokers(image, 500) == {2, 3}
    assert tracker.awaited_brokers(image, 500) == {1: 1100}
    # Broker 1's granted session runs out: nothing is awaited any more (it is fenced next).
    assert tracker.awaited_brokers(image, 1100) == {}
    assert tracker.expired(image, 1100) == [1]
    # A live broker that stops heartbeating drops out with its session.
    assert tracker.live_brokers(image, 1300) == {3}


def test_sessions_granted_after_activation_keep_what_was_heard():
    image = registered(1, 2)
    tracker = BrokerHeartbeatTracker(SESSION_MS)
    tracker.activate(registered(1), 0)
    tracker.touch(1, 50)
    # Broker 2 was registered by the predecessor's last records, applied after activation.
    tracker.grant_missing(image, 60)
    assert tracker.live_brokers(image, 100) == {1}
    assert tracker.awaited_brokers(image, 100) == {2: 1060}
    assert tracker.expired(image, 1049) == [] and tracker.expired(image, 1059) == [1]
    assert tracker.expired(image, 1060) == [1, 2]


def test_fenced_and_shutting_down_brokers_are_neither_live_nor_awaited():
    image = registered(1, 2, 3)
    tracker = BrokerHeartbeatTracker(SESSION_MS)
    tracker.activate(image, 0)
    tracker.touch(1, 10)
    fenced = apply(image, plan_fence_brokers(image, [1, 2]))
    assert tracker.live_brokers(fenced, 20) == frozenset()
    assert tracker.awaited_brokers(fenced, 20) == {3: 1000}
    from controller.broker_lifecycle import plan_broker_heartbeat

    _, records = plan_broker_heartbeat(image, heartbeat(3, 30, 30, want_shut_down=True))
    shutting = apply(image, records)
    assert 3 not in tracker.awaited_brokers(shutting, 20)


# --------------------------------------------------------------------------- placement


def test_replicas_go_only_to_brokers_heard_from():
    image = registered(1, 2, 3)
    result, records = plan_create_topic(
        image, CreateTopicSpec("t", num_partitions=6, replication_factor=2), heard_only(2, 3), uuid.UUID(int=1)
    )
    assert result.error_code == ErrorCode.NONE
    partitions = [r for r in records if type(r).__name__ == "PartitionRecord"]
    assert len(partitions) == 6
    assert all(set(p.replicas) == {2, 3} and p.leader in (2, 3) and set(p.isr) == {2, 3} for p in partitions)
    # Without the controller's view every unfenced broker counts, as before.
    _, records = plan_create_topic(image, CreateTopicSpec("t", num_partitions=6, replication_factor=2), DEFAULTS, uuid.UUID(int=1))
    assert {b for r in records if type(r).__name__ == "PartitionRecord" for b in r.replicas} == {1, 2, 3}


def test_too_few_brokers_heard_from_is_invalid_replication_factor_naming_the_silent_ones():
    image = registered(1, 2, 3)
    result, records = plan_create_topic(
        image, CreateTopicSpec("t", num_partitions=1, replication_factor=3), heard_only(2, 3), uuid.UUID(int=1)
    )
    assert (result.error_code, records) == (ErrorCode.INVALID_REPLICATION_FACTOR, [])
    assert "only 2 of the 3 unfenced broker(s) have heartbeated" in result.error_message
    assert "not heard from: [1]" in result.error_message
    # More than are registered at all: the usual message.
    result, _ = plan_create_topic(image, CreateTopicSpec("u", num_partitions=1, replication_factor=4), heard_only(2, 3), uuid.UUID(int=1))
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR and "only 3 broker(s) are registered" in result.error_message


def test_a_manual_assignment_leads_and_starts_in_sync_only_on_brokers_heard_from():
    image = registered(1, 2, 3)
    spec = CreateTopicSpec("t", assignments={0: [1, 2], 1: [3, 1]})
    result, records = plan_create_topic(image, spec, heard_only(2, 3), uuid.UUID(int=1))
    assert result.error_code == ErrorCode.NONE
    first, second = [r for r in records if type(r).__name__ == "PartitionRecord"]
    assert (first.replicas, first.isr, first.leader) == ([1, 2], [2], 2)
    assert (second.replicas, second.isr, second.leader) == ([3, 1], [3], 3)
    result, records = plan_create_topic(image, CreateTopicSpec("u", assignments={0: [1]}), heard_only(2, 3), uuid.UUID(int=2))
    assert (result.error_code, records) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, [])
    assert "not heard from by the active controller" in result.error_message


def test_added_partitions_follow_the_same_rule():
    image = registered(1, 2, 3)
    _, records = plan_create_topic(image, CreateTopicSpec("t", num_partitions=1, replication_factor=2), DEFAULTS, uuid.UUID(int=1))
    image = apply(image, records)
    result, records = plan_create_partitions(image, CreatePartitionsSpec("t", 5), heard_only(1, 3))
    assert result.error_code == ErrorCode.NONE
    assert all(set(r.replicas) == {1, 3} for r in records)
    result, records = plan_create_partitions(image, CreatePartitionsSpec("t", 5), heard_only(3))
    assert (result.error_code, records) == (ErrorCode.INVALID_REPLICATION_FACTOR, [])


# --------------------------------------------------------------------------- the active controller


@pytest.fixture
def restarted(tmp_path):
    """Brokers 1, 2, 3 registered and unfenced, then the controller restarted: a
    newly active controller that has heard from none of them."""
    first = SingleVoterController(tmp_path, DEFAULTS)
    epochs = join(first, 1, 2, 3)
    first.close()
    harness = SingleVoterController(tmp_path, DEFAULTS)
    assert all(not b.fenced for b in harness.image.brokers.values())
    yield harness, epochs
    harness.close()


def beat(harness, broker_id, epoch):
    return harness.controller.broker_heartbeat(heartbeat(broker_id, epoch, 10**9))


def test_after_a_failover_creation_waits_for_the_heartbeats_it_needs_and_skips_a_silent_broker(restarted):
    harness, epochs = restarted

    async def create_while_two_brokers_heartbeat():
        creation = asyncio.ensure_future(
            harness.controller.create_topics([CreateTopicSpec("t", num_partitions=4, replication_factor=2)])
        )
        await asyncio.sleep(0.2)
        assert not creation.done()  # nobody heard from yet: RF 2 would fail, so it waits
        await beat(harness, 2, epochs[2])
        await beat(harness, 3, epochs[3])
        return await asyncio.wait_for(creation, 10)

    (result,) = harness.run(create_while_two_brokers_heartbeat())
    assert result.error_code == ErrorCode.NONE
    partitions = harness.image.topics["t"].partitions.values()
    # Broker 1 never heartbeated to this controller: it got nothing.
    assert all(set(p.replicas) == {2, 3} for p in partitions)


def test_after_a_failover_creation_that_the_silent_brokers_cannot_help_does_not_wait(restarted, monkeypatch):
    harness, epochs = restarted
    harness.run(beat(harness, 2, epochs[2]))
    # RF 1 is placeable on broker 2 at once; RF 4 is impossible whoever is alive.
    loop = harness.loop
    started = loop.time()
    (one,) = harness.create_topics([CreateTopicSpec("one", num_partitions=3, replication_factor=1)])
    (four,) = harness.create_topics([CreateTopicSpec("four", num_partitions=1, replication_factor=4)])
    assert loop.time() - started < 1.0
    assert one.error_code == ErrorCode.NONE
    assert all(p.replicas == (2,) for p in harness.image.topics["one"].partitions.values())
    assert four.error_code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_after_a_failover_the_wait_for_silent_brokers_is_bounded(restarted, monkeypatch):
    harness, epochs = restarted
    monkeypatch.setattr(quorum_controller, "PLACEMENT_HEARTBEAT_WAIT_MS", 300)
    harness.run(beat(harness, 2, epochs[2]))
    started = harness.loop.time()
    (result,) = harness.create_topics([CreateTopicSpec("t", num_partitions=1, replication_factor=2)])
    took_s = harness.loop.time() - started
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "not heard from: [1, 3]" in result.error_message
    assert 0.25 <= took_s < 2.0
