"""Partition reassignments: the pure planner (start, replace, cancel, errors,
completion at once), completion through AlterPartition, the listing, then the
QuorumController (answered after the commit) and both handlers on the wire."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from broker.controller_node.listener import build_controller_dispatcher
from broker.controller_node.quorum_controller import QuorumController
from controller.alter_partition import plan_alter_partition
from controller.broker_lifecycle import LEADER_RECOVERY_STATE_RECOVERING, plan_fence_brokers
from controller.metadata.delta import merge_partition_change
from controller.metadata.records import CONFIG_RECORD, NO_LEADER_CHANGE, RESOURCE_TOPIC, TOPIC_RECORD
from controller.raft.log import MemoryRaftLog
from controller.reassignment import (
    OngoingReassignment,
    PartitionResult,
    completed_reassignment,
    list_partition_reassignments,
    plan_alter_partition_reassignments,
)
from protocol.errors import ErrorCode
from protocol.framing import decode_response, encode_request
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.unit.test_alter_partition import TOPIC_ID, apply, brokers, partition_record
from tests.unit.test_alter_partition import part as alter_partition_data
from tests.unit.test_elect_leaders_controller import DEFAULTS, active_controller

ALTER = APIS_BY_NAME["AlterPartitionReassignments"]
LIST = APIS_BY_NAME["ListPartitionReassignments"]
AQ = struct_classes(ALTER.request)
LQ = struct_classes(LIST.request)
AP = struct_classes(APIS_BY_NAME["AlterPartition"].request)


def topic_t(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, *, broker_ids=(1, 2, 3, 4, 5), fenced=(), **extra):
    """Brokers (registered; unfenced unless in ``fenced``) and topic "t" with one
    partition at leader epoch 5, partition epoch 7."""
    image = brokers(*broker_ids)
    if fenced:
        image = apply(image, plan_fence_brokers(image, list(fenced)))
    return apply(image, [TOPIC_RECORD(name="t", topic_id=TOPIC_ID), partition_record(0, list(replicas), list(isr), leader, 5, 7, **extra)])


def reassigning(isr=(1, 2, 3), leader=1):
    """Moving t-0 from (1, 2, 3) to (2, 3, 4): 4 is being added, 1 removed."""
    return topic_t([2, 3, 4, 1], isr, leader, adding_replicas=[4], removing_replicas=[1])


def plan(image, target, *, allow_rf_change=True, topic="t", partition=0):
    results, records = plan_alter_partition_reassignments(
        image, [(topic, [(partition, target)])], allow_replication_factor_change=allow_rf_change
    )
    [(name, [result])] = results
    assert name == topic
    return result, records


def only_record(image, target, **kwargs):
    result, records = plan(image, target, **kwargs)
    assert result == PartitionResult(0, ErrorCode.NONE)
    [record] = records
    return record


def after(image, record):
    return merge_partition_change(image.topics["t"].partitions[0], record)


# --------------------------------------------------------------------------- starting


def test_a_move_adds_the_new_replicas_first_and_keeps_the_leaving_ones():
    image = topic_t()
    record = only_record(image, [2, 3, 4])
    assert (record.replicas, record.adding_replicas, record.removing_replicas) == ([2, 3, 4, 1], [4], [1])
    # Nothing leaves yet: same leader, same leader epoch, same ISR.
    assert (record.leader, record.isr) == (NO_LEADER_CHANGE, None)
    partition = after(image, record)
    assert (partition.leader, partition.leader_epoch, partition.partition_epoch) == (1, 5, 8)
    assert partition.isr == (1, 2, 3)


def test_the_move_completes_when_the_added_replica_joins_the_isr_and_the_leader_moves_off_the_removed_one():
    image = apply(topic_t(), [only_record(topic_t(), [2, 3, 4])])
    # Leader 1 proposes 4 into the ISR: the reassignment is over.
    request = AP.AlterPartitionRequest(
        broker_id=1, broker_epoch=image.brokers[1].epoch, topics=[AP.TopicData(topic_id=TOPIC_ID, partitions=[alter_partition_data(image, 0, [1, 2, 3, 4])])]
    )
    response, [record] = plan_alter_partition(image, request, 3)
    assert response.topics[0].partitions[0].error_code == ErrorCode.NEW_LEADER_ELECTED
    partition = merge_partition_change(image.topics["t"].partitions[0], record)
    assert (partition.replicas, partition.isr, partition.leader) == ((2, 3, 4), (2, 3, 4), 2)
    assert (partition.adding_replicas, partition.removing_replicas) == ((), ())
    assert list_partition_reassignments(apply(image, [record]), None) == []


def test_a_reorder_completes_at_once_and_keeps_the_leader_and_its_epoch():
    image = topic_t()
    record = only_record(image, [3, 2, 1])
    assert record.replicas == [3, 2, 1]
    # Already complete: no replica is adding or removing, nobody leaves.
    assert (record.adding_replicas, record.removing_replicas, record.leader, record.isr) == (None, None, NO_LEADER_CHANGE, None)
    assert after(image, record).leader_epoch == 5


def test_removing_a_follower_whose_peers_are_in_sync_completes_at_once_with_a_leader_epoch_bump():
    image = topic_t()
    record = only_record(image, [1, 2])
    assert (record.replicas, record.isr, record.adding_replicas, record.removing_replicas) == ([1, 2], [1, 2], None, None)
    # The same leader named again: a new leader epoch fences replica 3's fetches.
    assert record.leader == 1
    partition = after(image, record)
    assert (partition.leader, partition.leader_epoch, partition.replicas) == (1, 6, (1, 2))


def test_removing_the_leader_completes_at_once_and_elects_the_first_in_sync_target_replica():
    image = topic_t()
    record = only_record(image, [3, 2])
    assert (record.replicas, record.isr, record.leader) == ([3, 2], [2, 3], 3)


def test_the_new_leader_must_be_usable():
    # 3 is in the ISR the partition record gives, but fenced: 2 leads.
    image = topic_t(fenced=[3])
    record = only_record(image, [3, 2])
    assert (record.replicas, record.leader) == ([3, 2], 2)


def test_a_removal_waits_while_a_staying_replica_is_out_of_the_isr():
    image = topic_t(isr=(1, 2))
    record = only_record(image, [2, 3])
    assert (record.replicas, record.adding_replicas, record.removing_replicas) == ([2, 3, 1], None, [1])
    assert (record.leader, record.isr) == (NO_LEADER_CHANGE, None)


def test_the_current_assignment_as_target_writes_nothing():
    result, records = plan(topic_t(), [1, 2, 3])
    assert (result, records) == (PartitionResult(0, ErrorCode.NONE), [])


def test_a_fenced_but_registered_broker_may_be_a_target():
    image = topic_t()
    image = apply(image, plan_fence_brokers(image, [4]))
    record = only_record(image, [2, 3, 4])
    assert record.adding_replicas == [4]


def test_the_replication_factor_may_grow_unless_the_request_forbids_it():
    image = topic_t()
    record = only_record(image, [1, 2, 3, 4])
    assert (record.replicas, record.adding_replicas, record.removing_replicas) == ([1, 2, 3, 4], [4], None)
    result, records = plan(image, [1, 2, 3, 4], allow_rf_change=False)
    assert (result.error, records) == (ErrorCode.INVALID_REPLICATION_FACTOR, [])
    assert "from 3 to 4" in result.message
    # The same size is a move, allowed either way.
    assert plan(image, [2, 3, 4], allow_rf_change=False)[0].error == ErrorCode.NONE


def test_the_replication_factor_check_counts_the_original_replicas_of_a_running_move():
    image = reassigning()
    # Four replicas listed, three original ones.
    assert plan(image, [3, 4, 5], allow_rf_change=False)[0].error == ErrorCode.NONE
    assert plan(image, [3, 4], allow_rf_change=False)[0].error == ErrorCode.INVALID_REPLICATION_FACTOR


# --------------------------------------------------------------------------- replacing a running move


def test_the_same_target_again_changes_nothing():
    result, records = plan(reassigning(), [2, 3, 4])
    assert (result.error, records) == (ErrorCode.NONE, [])


def test_a_new_target_replaces_the_running_move_measured_from_the_original_replicas():
    image = reassigning()
    record = only_record(image, [2, 3, 5])
    # Original (1, 2, 3) to (2, 3, 5): 5 added, 1 still removed (unchanged, so
    # not in the record); 4, added by the replaced move, leaves at once, with a
    # leader epoch bump.
    assert (record.replicas, record.adding_replicas, record.removing_replicas) == ([2, 3, 5, 1], [5], None)
    assert record.leader == 1
    assert list_partition_reassignments(apply(image, [record]), None) == [
        ("t", [OngoingReassignment(0, (2, 3, 5, 1), (5,), (1,))])
    ]


def test_a_replaced_move_drops_its_added_replica_from_the_isr_and_leadership():
    image = reassigning(isr=(1, 2, 3, 4), leader=4)
    record = only_record(image, [2, 3, 5])
    assert (record.replicas, record.isr) == ([2, 3, 5, 1], [1, 2, 3])
    # 4 led; the first in-sync replica of the new list takes over.
    assert record.leader == 2


def test_going_back_to_the_original_replicas_completes_at_once():
    image = reassigning()
    record = only_record(image, [1, 2, 3])
    assert (record.replicas, record.isr, record.adding_replicas, record.removing_replicas) == ([1, 2, 3], None, [], [])
    assert record.leader == 1  # 4 left: new leader epoch


def test_a_replacement_that_would_leave_no_in_sync_replica_is_refused():
    image = reassigning(isr=(4,), leader=4)
    result, records = plan(image, [2, 3, 5])
    assert (result.error, records) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, [])


# --------------------------------------------------------------------------- cancelling


def test_cancelling_goes_back_to_the_original_replicas():
    image = reassigning(isr=(1, 2, 3, 4))
    record = only_record(image, None)
    assert (record.replicas, record.isr, record.adding_replicas, record.removing_replicas) == ([2, 3, 1], [1, 2, 3], [], [])
    # 4 leaves: same leader, new leader epoch.
    assert record.leader == 1
    assert list_partition_reassignments(apply(image, [record]), None) == []


def test_cancelling_moves_the_leadership_off_a_replica_being_added():
    image = reassigning(isr=(2, 4), leader=4)
    record = only_record(image, None)
    assert (record.replicas, record.isr, record.leader) == ([2, 3, 1], [2], 2)


def test_cancelling_without_a_running_move_is_refused():
    result, records = plan(topic_t(), None)
    assert (result.error, records) == (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, [])


def test_a_cancel_needing_an_unclean_election_is_refused_unless_the_topic_allows_it():
    image = reassigning(isr=(4,), leader=4)
    result, records = plan(image, None)
    assert (result.error, records) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, [])
    assert "unclean" in result.message
    allowing = apply(image, [CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name="t", name="unclean.leader.election.enable", value="true")])
    record = only_record(allowing, None)
    # The first original replica (in the list's order) restarts the ISR and leads, recovering.
    assert (record.replicas, record.isr, record.leader) == ([2, 3, 1], [2], 2)
    assert record.leader_recovery_state == LEADER_RECOVERY_STATE_RECOVERING


def test_start_then_cancel_in_one_request():
    image = topic_t()
    results, records = plan_alter_partition_reassignments(image, [("t", [(0, [2, 3, 4]), (0, None)])])
    assert [r.error for r in results[0][1]] == [ErrorCode.NONE, ErrorCode.NONE]
    # The cancel sees the move the first entry started.
    assert [(r.replicas, r.adding_replicas, r.removing_replicas) for r in records] == [([2, 3, 4, 1], [4], [1]), ([2, 3, 1], [], [])]


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "topic,partition,target,error,words",
    [
        ("gone", 0, [1, 2], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as gone"),
        ("t", 7, [1, 2], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-7"),
        ("gone", 0, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic"),
        ("t", 0, [], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "empty"),
        ("t", 0, [2, 3, 2], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "broker 2 more than once"),
        ("t", 0, [2, 99], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "broker 99, but no such broker is registered"),
        ("t", 0, [-1, 2], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "broker -1"),
    ],
)
def test_refusals(topic, partition, target, error, words):
    image = topic_t()
    result, records = plan(image, target, topic=topic, partition=partition)
    assert (result.partition_id, result.error, records) == (partition, error, [])
    assert words in result.message


def test_a_refused_partition_does_not_stop_the_others():
    image = topic_t()
    results, records = plan_alter_partition_reassignments(image, [("t", [(0, [9]), (0, [2, 3, 4])]), ("gone", [(1, None)])])
    assert [(name, [r.error for r in rs]) for name, rs in results] == [
        ("t", [ErrorCode.INVALID_REPLICA_ASSIGNMENT, ErrorCode.NONE]),
        ("gone", [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]),
    ]
    assert len(records) == 1


# --------------------------------------------------------------------------- completion rule, listing


def test_completion_rule():
    assert completed_reassignment([1, 2, 3], [], [], [1, 2, 3]) is None  # nothing runs
    assert completed_reassignment([2, 3, 4, 1], [1], [4], [1, 2, 3]) is None  # 4 not in sync
    assert completed_reassignment([2, 3, 4, 1], [1], [4], [1, 2, 3, 4]) == ([2, 3, 4], [2, 3, 4])
    assert completed_reassignment([2, 3, 4, 1], [1], [4], [1]) is None  # nobody in sync would stay


def test_listing_every_move_or_the_named_partitions():
    image = topic_t(replicas=(2, 3, 4, 1), adding_replicas=[4], removing_replicas=[1])
    other = uuid.UUID(int=77)
    image = apply(image, [
        TOPIC_RECORD(name="a", topic_id=other),
        partition_record(0, [1, 2], [1, 2], 1, 0, 0, topic_id=other),
        partition_record(1, [3, 1, 2], [1, 2], 1, 0, 0, topic_id=other, adding_replicas=[3]),
    ])
    ongoing_t = OngoingReassignment(0, (2, 3, 4, 1), (4,), (1,))
    ongoing_a = OngoingReassignment(1, (3, 1, 2), (3,), ())
    assert list_partition_reassignments(image, None) == [("a", [ongoing_a]), ("t", [ongoing_t])]
    # Named: in request order; unknown topics and partitions and partitions not
    # being reassigned are left out, and so is a topic left with none.
    assert list_partition_reassignments(image, [("t", [0, 5]), ("gone", [0]), ("a", [0, 1])]) == [
        ("t", [ongoing_t]), ("a", [ongoing_a])
    ]
    assert list_partition_reassignments(image, [("a", [0])]) == []


# --------------------------------------------------------------------------- through the controller and on the wire


def ask(controller, api, version, body):
    dispatcher = build_controller_dispatcher(SimpleNamespace(controller=controller, authorizer=None))
    frame = encode_request(api, version, 9, "test", body)
    answer = asyncio.run(dispatcher.handle_frame(frame[4:], SimpleNamespace(peer="test")))
    correlation_id, response = decode_response(api, version, bytes(answer[4:]))
    assert correlation_id == 9
    return response


def test_the_controller_answers_after_the_commit_and_lists_from_the_committed_image():
    async def scenario():
        controller, driver = await active_controller(topic_t())
        try:
            results = await controller.alter_partition_reassignments([("t", [(0, [2, 3, 4])]), ("gone", [(0, None)])])
            # Answered once committed: the committed image already has it.
            assert controller.image.topics["t"].partitions[0].adding_replicas == (4,)
            listed = await controller.list_partition_reassignments(None)
            again = await controller.alter_partition_reassignments([("t", [(0, [2, 3, 4])])])
            return results, listed, again, driver.proposals
        finally:
            controller.close()

    results, listed, again, proposals = asyncio.run(scenario())
    assert results == [("t", [PartitionResult(0, ErrorCode.NONE)]), ("gone", [PartitionResult(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as gone")])]
    assert listed == [("t", [OngoingReassignment(0, (2, 3, 4, 1), (4,), (1,))])]
    # The same target again: nothing to write.
    assert again == [("t", [PartitionResult(0, ErrorCode.NONE)])]
    assert proposals == 1


@pytest.mark.parametrize("version", [0, 1])
def test_alter_on_the_wire(version):
    async def scenario():
        controller, _ = await active_controller(topic_t())
        return controller

    controller = asyncio.run(scenario())
    try:
        fields = {"allow_replication_factor_change": False} if version >= 1 else {}
        body = AQ.AlterPartitionReassignmentsRequest(
            timeout_ms=5000,
            topics=[AQ.ReassignableTopic(name="t", partitions=[
                AQ.ReassignablePartition(partition_index=0, replicas=[1, 2, 3, 4]),
                AQ.ReassignablePartition(partition_index=1, replicas=None),
            ])],
            **fields,
        )
        response = ask(controller, ALTER, version, body)
    finally:
        controller.close()
    assert (response.error_code, response.error_message) == (0, None)
    [topic] = response.responses
    codes = [(p.partition_index, p.error_code) for p in topic.partitions]
    if version >= 1:
        assert response.allow_replication_factor_change is False
        assert codes == [(0, ErrorCode.INVALID_REPLICATION_FACTOR), (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    else:
        assert codes == [(0, ErrorCode.NONE), (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]


def test_without_an_active_controller_both_apis_answer_not_controller():
    controller = QuorumController(MemoryRaftLog(), DEFAULTS)
    body = AQ.AlterPartitionReassignmentsRequest(
        timeout_ms=1000, topics=[AQ.ReassignableTopic(name="t", partitions=[AQ.ReassignablePartition(partition_index=0, replicas=[1])])]
    )
    response = ask(controller, ALTER, 1, body)
    assert response.error_code == ErrorCode.NOT_CONTROLLER
    assert [p.error_code for p in response.responses[0].partitions] == [ErrorCode.NOT_CONTROLLER]
    listed = ask(controller, LIST, 0, LQ.ListPartitionReassignmentsRequest(timeout_ms=1000, topics=None))
    assert (listed.error_code, listed.topics) == (ErrorCode.NOT_CONTROLLER, [])


def test_list_on_the_wire():
    async def scenario():
        controller, _ = await active_controller(reassigning())
        return controller

    controller = asyncio.run(scenario())
    try:
        every = ask(controller, LIST, 0, LQ.ListPartitionReassignmentsRequest(timeout_ms=1000, topics=None))
        named = ask(
            controller, LIST, 0,
            LQ.ListPartitionReassignmentsRequest(timeout_ms=1000, topics=[LQ.ListPartitionReassignmentsTopics(name="gone", partition_indexes=[0])]),
        )
    finally:
        controller.close()
    assert every.error_code == 0
    [topic] = every.topics
    [p] = topic.partitions
    assert (topic.name, p.partition_index, p.replicas, p.adding_replicas, p.removing_replicas) == ("t", 0, [2, 3, 4, 1], [4], [1])
    assert (named.error_code, named.topics) == (0, [])


# --------------------------------------------------------------------------- the leader's side


def test_a_leader_tracks_a_replica_added_within_its_epoch_and_proposes_it_once_caught_up():
    from replication.partition import LeaderPartition

    leader = LeaderPartition(
        local_id=1, replicas=(1, 2, 3), isr=(1, 2, 3), leader_epoch=5, partition_epoch=7,
        log_end_offset=10, high_watermark=10, now_ms=0, lag_max_ms=1000, min_insync_replicas=2,
    )
    leader.set_replicas((2, 3, 4, 1))
    assert leader.is_replica(4)
    # Behind: it holds back no high watermark and is not proposed.
    leader.leader_appended(20, now_ms=1)
    for follower in (2, 3):
        leader.follower_fetched(follower, 20, now_ms=2)
    leader.follower_fetched(4, 5, now_ms=2)
    assert leader.high_watermark == 20
    assert leader.proposed_expansion() is None
    # Caught up: proposed, in the order of the replica list.
    leader.follower_fetched(4, 20, now_ms=3)
    assert leader.proposed_expansion() == (2, 3, 4, 1)
    leader.change_failed()
    leader.set_replicas((1, 2, 3))
    assert not leader.is_replica(4)


def test_a_single_replica_given_a_follower_by_a_reassignment_stops_committing_on_append(tmp_path):
    from broker.replica.manager import ReplicaManager
    from controller.metadata.image import MetadataImage, PartitionImage, TopicImage
    from tests.unit.test_replica_manager_roles import fake_broker

    topic_id = uuid.UUID(int=5)

    def image(partition):
        topic = TopicImage("t", topic_id, {0: partition})
        return MetadataImage(topics={"t": topic}, topic_names_by_id={topic_id: "t"})

    alone = image(PartitionImage(0, (1,), (1,), 1, 3, 3))
    broker, plog = fake_broker(tmp_path, alone)
    replicas = ReplicaManager(broker)
    replicas.may_lead = True
    try:
        replicas.apply_image(MetadataImage(), alone)
        leader = replicas.leader_for("t", 0)  # made on first use, as a Produce would
        assert leader is not None and plog.replicated is False
        # Replica 2 added (same leader epoch, next partition epoch).
        moving = image(PartitionImage(0, (1, 2), (1,), 1, 3, 4, adding_replicas=(2,)))
        broker.image = moving
        replicas.apply_image(alone, moving)
        assert replicas.leader_for("t", 0) is leader and leader.is_replica(2)
        assert leader.partition_epoch == 4
        # From now on the high watermark is the ISR's to move, not the append's.
        assert plog.replicated is True
    finally:
        plog.close()
