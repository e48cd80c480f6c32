"""Cordoning and removing brokers: the records, what is refused, and that placement and the balancer honour them."""

from __future__ import annotations

import random
import uuid

from controller.balancer.driver import BalancerDriver, BalancerSettings, BalancerState, placement_summary
from controller.balancer.placement_commands import plan_alter_broker_placements
from controller.features import BALANCER_VERSION
from controller.metadata.records import FEATURE_LEVEL_RECORD
from controller.metadata.records import BROKER_PLACEMENT_RECORD, PARTITION_CHANGE_RECORD, PLACEMENT_CORDONED, PLACEMENT_DRAINING
from controller.topic_commands import ClusterDefaults, CreateTopicSpec, plan_create_topic
from protocol.errors import ErrorCode
from tests.unit.balancer.test_driver import MAX_TICKS, cluster, no_throttles_left, replica_counts, run, settled
from tests.unit.test_broker_lifecycle import apply

DEFAULTS = ClusterDefaults(broker_ids=(0,), num_partitions=1, replication_factor=1)


def placed(image, changes, balancer_on=True):
    results, records = plan_alter_broker_placements(image, changes, balancer_on=balancer_on)
    return [(r.broker_id, r.error, r.message) for r in results], records


def test_states_are_written_once_and_normal_removes_them():
    image = cluster([1, 2, 3, 4], partitions=2, topics=("a",))
    results, records = placed(image, [(4, "draining"), (3, "cordoned")])
    assert [r[1] for r in results] == [ErrorCode.NONE, ErrorCode.NONE]
    assert records == [BROKER_PLACEMENT_RECORD(broker_id=4, state=PLACEMENT_DRAINING),
                       BROKER_PLACEMENT_RECORD(broker_id=3, state=PLACEMENT_CORDONED)]
    image = apply(image, records)
    assert dict(image.broker_placement) == {4: PLACEMENT_DRAINING, 3: PLACEMENT_CORDONED}
    # The same again writes nothing; normal removes the entry.
    assert placed(image, [(4, "draining")])[1] == []
    results, records = placed(image, [(3, "normal")])
    assert results == [(3, ErrorCode.NONE, None)]
    assert dict(apply(image, records).broker_placement) == {4: PLACEMENT_DRAINING}


def test_what_is_refused():
    image = cluster([1, 2, 3], partitions=2, topics=("a",))
    results, records = placed(image, [(9, "cordoned"), (1, "asleep"), (1, "draining")])
    assert records == []
    assert results[0][:2] == (9, ErrorCode.BROKER_ID_NOT_REGISTERED)
    assert results[1][:2] == (1, ErrorCode.INVALID_REQUEST) and "asleep" in results[1][2]
    # RF 3 over 3 brokers: removing one leaves nowhere for its replicas.
    assert results[2][:2] == (1, ErrorCode.INVALID_REQUEST) and "replication factor of 3" in results[2][2]
    image = cluster([1, 2, 3, 4], partitions=2, topics=("a",))
    results, _ = placed(image, [(4, "draining")], balancer_on=False)
    assert results[0][1] == ErrorCode.INVALID_REQUEST and "balancer.mode is off" in results[0][2]
    # A cordoned broker counts as taking nothing: draining another then leaves too few.
    results, _ = placed(image, [(3, "cordoned"), (4, "draining")])
    assert [r[1] for r in results] == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST]


def test_nothing_is_written_before_balancer_version_1_is_finalized():
    # A cluster formatted by an older pybroker: its nodes may not read BrokerPlacementRecords.
    image = cluster([1, 2, 3, 4], partitions=2, topics=("a",), balancer_version=0)
    results, records = placed(image, [(4, "draining"), (3, "cordoned"), (9, "cordoned")])
    assert records == []
    assert [r[1] for r in results] == [ErrorCode.UNSUPPORTED_VERSION] * 3
    assert "balancer.version=1" in results[0][2]
    image = apply(image, [FEATURE_LEVEL_RECORD(name=BALANCER_VERSION, feature_level=1)])
    results, records = placed(image, [(3, "cordoned")])
    assert results == [(3, ErrorCode.NONE, None)] and len(records) == 1


def test_a_partition_being_moved_counts_with_its_replication_factor_not_its_replica_list():
    """A reassignment in flight lists old and new replicas together (RF 3 moving
    from 3 to 4 lists four): removing a broker must not be refused as if RF were 4."""
    image = cluster([1, 2, 3, 4], partitions=1, topics=("a",))
    partition = image.topics["a"].partitions[0]
    moving_from = next(b for b in partition.replicas if b != 4)
    target = [b for b in partition.replicas if b != moving_from] + [b for b in (1, 2, 3, 4) if b not in partition.replicas]
    image = apply(image, [PARTITION_CHANGE_RECORD(
        partition_id=0, topic_id=image.topics["a"].topic_id,
        replicas=[*partition.replicas, *[b for b in target if b not in partition.replicas]],
        removing_replicas=[moving_from], adding_replicas=[b for b in target if b not in partition.replicas],
    )])
    moved = image.topics["a"].partitions[0]
    assert len(moved.replicas) == 4 and moved.removing_replicas == (moving_from,)
    results, records = placed(image, [(4, "draining")])
    assert results == [(4, ErrorCode.NONE, None)] and records
    # With RF 4 (nothing removing) the same drain is refused.
    image = cluster([1, 2, 3, 4], partitions=1, rf=4, topics=("a",))
    results, _ = placed(image, [(4, "draining")])
    assert results[0][1] == ErrorCode.INVALID_REQUEST and "replication factor of 4" in results[0][2]


def test_new_topics_go_around_cordoned_and_draining_brokers_and_say_so_when_they_cannot():
    image = cluster([1, 2, 3, 4], partitions=1, rf=2, topics=("a",))
    results, records = placed(image, [(2, "cordoned"), (4, "draining")])
    assert [r[1] for r in results] == [ErrorCode.NONE, ErrorCode.NONE]
    image = apply(image, records)
    result, records = plan_create_topic(image, CreateTopicSpec("new", 6, 2), DEFAULTS, uuid.UUID(int=50))
    assert result.error_code == ErrorCode.NONE
    assert {b for r in records[1:] for b in r.replicas} == {1, 3}
    result, _ = plan_create_topic(image, CreateTopicSpec("wide", 1, 3), DEFAULTS, uuid.UUID(int=51))
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "Broker(s) [2, 4] take no new replicas" in result.error_message
    # Named by hand, a cordoned broker is the operator's choice, and in sync from the start.
    spec = CreateTopicSpec("manual", assignments={0: [2, 1]})
    result, records = plan_create_topic(image, spec, DEFAULTS, uuid.UUID(int=52))
    assert result.error_code == ErrorCode.NONE and records[1].isr == [2, 1]


def test_a_draining_broker_is_emptied_and_a_cordoned_one_is_not_filled():
    rng = random.Random(5)
    image = cluster([1, 2, 3, 4], empty=[5], partitions=8)
    image = apply(image, placed(image, [(4, "draining"), (5, "cordoned")])[1])
    driver = BalancerDriver(BalancerSettings(max_moves_per_broker=3))
    image, _, used = run(driver, image, brokers=[1, 2, 3, 4, 5], rng=rng, until=settled)
    assert used < MAX_TICKS, driver.status()
    counts = replica_counts(image, [1, 2, 3, 4, 5])
    assert counts[4] == 0 and counts[5] == 0, counts
    assert max(counts[b] for b in (1, 2, 3)) - min(counts[b] for b in (1, 2, 3)) <= 1, counts
    assert all(len(p.replicas) == 3 for t in image.topics.values() for p in t.partitions.values())
    assert driver.status().trigger == "remove_broker" and driver.status().state is BalancerState.READY
    assert placement_summary(image) == ((4, "draining", 0), (5, "cordoned", 0))
    no_throttles_left(image)


def test_placement_summary_counts_what_they_still_hold():
    image = cluster([1, 2, 3, 4], partitions=4, topics=("a",))
    image = apply(image, placed(image, [(4, "draining")])[1])
    # Round-robin RF 3 over 4 brokers: broker 4 holds 3 of the 4 partitions.
    assert placement_summary(image) == ((4, "draining", 3),)
