"""ElectLeaders and the automatic leader rebalance, planned on images."""

from __future__ import annotations

from controller.broker_lifecycle import LEADER_RECOVERY_STATE_RECOVERING, plan_fence_brokers
from controller.leader_election import (
    PREFERRED,
    UNCLEAN,
    imbalanced_brokers,
    plan_auto_rebalance,
    plan_elect_leaders,
    plan_leader_rebalance,
)
from protocol.errors import ErrorCode
from tests.unit.test_broker_lifecycle import apply, partition, registered, with_partition


def test_preferred_election_moves_leadership_back_to_the_first_replica():
    image = with_partition(registered(1, 2, 3), [1, 2, 3], [1, 2, 3], 2)
    results, records = plan_elect_leaders(image, PREFERRED, [("t", 0)])
    assert results == {("t", 0): (ErrorCode.NONE, None)}
    after = apply(image, records)
    assert partition(after).leader == 1
    assert partition(after).leader_epoch == partition(image).leader_epoch + 1
    # Asked again: nothing to do.
    results, records = plan_elect_leaders(after, PREFERRED, [("t", 0)])
    assert results[("t", 0)][0] == ErrorCode.ELECTION_NOT_NEEDED and records == []


def test_preferred_replica_outside_the_isr_or_fenced_cannot_lead():
    out_of_sync = with_partition(registered(1, 2, 3), [1, 2, 3], [2, 3], 2)
    assert plan_elect_leaders(out_of_sync, PREFERRED, [("t", 0)])[0][("t", 0)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    image = with_partition(registered(1, 2, 3), [1, 2, 3], [1, 2, 3], 2)
    fenced = apply(image, plan_fence_brokers(image, [1]))
    assert plan_elect_leaders(fenced, PREFERRED, [("t", 0)])[0][("t", 0)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


def test_unknown_partitions():
    image = with_partition(registered(1), [1], [1], 1)
    results, _ = plan_elect_leaders(image, PREFERRED, [("t", 5), ("nope", 0)])
    assert results[("t", 5)][0] == results[("nope", 0)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_unclean_election_only_without_a_leader():
    image = with_partition(registered(1, 2, 3), [1, 2, 3], [1, 2, 3], 1)
    assert plan_elect_leaders(image, UNCLEAN, [("t", 0)])[0][("t", 0)][0] == ErrorCode.ELECTION_NOT_NEEDED
    # The only in-sync replica is fenced: an unclean election picks a live replica.
    leaderless = with_partition(registered(1, 2, 3), [1, 2, 3], [1], -1)
    leaderless = apply(leaderless, plan_fence_brokers(leaderless, [1]))
    results, records = plan_elect_leaders(leaderless, UNCLEAN, [("t", 0)])
    assert results[("t", 0)] == (ErrorCode.NONE, None)
    after = partition(apply(leaderless, records))
    assert (after.leader, after.isr, after.leader_recovery_state) == (2, (2,), LEADER_RECOVERY_STATE_RECOVERING)
    nobody = apply(leaderless, plan_fence_brokers(leaderless, [2, 3]))
    assert plan_elect_leaders(nobody, UNCLEAN, [("t", 0)])[0][("t", 0)][0] == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_all_partitions_reports_only_what_happened():
    image = with_partition(registered(1, 2, 3), [1, 2, 3], [1, 2, 3], 1)
    assert plan_elect_leaders(image, PREFERRED, None) == ({}, [])
    moved = with_partition(registered(1, 2, 3), [1, 2, 3], [1, 2, 3], 3)
    results, records = plan_elect_leaders(moved, PREFERRED, None)
    assert results == {("t", 0): (ErrorCode.NONE, None)} and len(records) == 1


def test_rebalance_elects_preferred_leaders_that_can_lead():
    moved = with_partition(registered(1, 2, 3), [1, 2, 3], [1, 2, 3], 3)
    assert partition(apply(moved, plan_leader_rebalance(moved))).leader == 1
    out_of_sync = with_partition(registered(1, 2, 3), [1, 2, 3], [2, 3], 3)
    assert plan_leader_rebalance(out_of_sync) == []


def many_partitions(leaders_by_preferred: list[tuple[int, int]]):
    """One topic; partition i has replicas (preferred, the other two) led by the given leader."""
    import uuid

    from controller.metadata.records import PARTITION_RECORD, TOPIC_RECORD

    topic_id = uuid.uuid4()
    image = registered(1, 2, 3)
    records = [TOPIC_RECORD(name="m", topic_id=topic_id)]
    for i, (preferred, leader) in enumerate(leaders_by_preferred):
        replicas = [preferred] + [b for b in (1, 2, 3) if b != preferred]
        records.append(
            PARTITION_RECORD(partition_id=i, topic_id=topic_id, replicas=replicas, isr=replicas, leader=leader, leader_epoch=0, partition_epoch=0)
        )
    return apply(image, records)


def test_imbalance_ratio_per_broker_is_kafkas():
    # Broker 1 prefers 10 partitions and leads 9 of them: 10 % imbalance, not above 10.
    image = many_partitions([(1, 1)] * 9 + [(1, 2)] + [(2, 2)] * 4 + [(2, 3)])
    assert imbalanced_brokers(image, 10) == {2}  # 1 of 5 = 20 %
    assert imbalanced_brokers(image, 25) == set()
    assert imbalanced_brokers(image, 0) == {1, 2}
    # Only the imbalanced broker's partitions move.
    after = apply(image, plan_auto_rebalance(image, 10))
    leaders = {p.partition_id: p.leader for p in after.topics["m"].partitions.values()}
    assert leaders[9] == 2 and leaders[14] == 2
    assert plan_auto_rebalance(after, 10) == []
