"""AlterPartition (API key 56, versions 0-3): a partition leader asks the active
controller to change its ISR, planned as a pure function of the image (Kafka's
ReplicationControlManager.alterPartition, KIP-497, KIP-704, KIP-841, KIP-903).

The request as a whole is refused with STALE_BROKER_EPOCH unless its sender is
registered with the ``broker_epoch`` it gives. Then each partition is checked
in Kafka's order, and the first rule it breaks is its answer:

* unknown topic: UNKNOWN_TOPIC_OR_PARTITION (v0-1 name topics) or
  UNKNOWN_TOPIC_ID (v2+ use ids); unknown partition: UNKNOWN_TOPIC_OR_PARTITION;
* a leader or partition epoch *ahead* of the controller's: NOT_CONTROLLER (the
  sender has seen metadata this controller has not, so this controller is
  probably a deposed one and the sender should look for the new one);
* an older leader epoch: FENCED_LEADER_EPOCH; a sender that is not the leader:
  INVALID_REQUEST; an older partition epoch: INVALID_UPDATE_VERSION;
* a new ISR that is empty, repeats a broker, names a non-replica or leaves the
  leader out: INVALID_REQUEST; a leader recovery state that is unknown, is
  RECOVERING with more than one ISR member, or goes back from RECOVERED to
  RECOVERING: INVALID_REQUEST;
* an ISR member that is unregistered, fenced, in controlled shutdown, whose
  replica is in a log dir its broker reported offline (KIP-858), or (v3)
  registered under another broker epoch than the one the leader saw:
  INELIGIBLE_REPLICA (v2+; OPERATION_NOT_ATTEMPTED before, which older
  leaders understand). Kafka checks every member of the new ISR, not only
  the ones being added, and so does this.

A valid change becomes one PartitionChangeRecord carrying only what differs
(ISR, leader recovery state); a request that changes nothing writes nothing
and is answered with the partition as it is. If the new ISR completes a
reassignment, the replicas that were being removed leave, and when the leader
is one of them a new leader is elected: the record is still written, but the
sender is told NEW_LEADER_ELECTED (v2+; FENCED_LEADER_EPOCH before) so that it
waits for the metadata instead of acting as leader.

A successful answer carries the partition as it will be once the record is
replayed (``isr`` in every version, the partition epoch bumped by the record).
"""

from __future__ import annotations

import uuid

from controller.broker_lifecycle import LEADER_RECOVERY_STATE_RECOVERING, usable_broker_ids
from controller.directories import replica_offline
from controller.metadata.delta import merge_partition_change
from controller.metadata.image import MetadataImage, PartitionImage, TopicImage
from controller.metadata.records import NO_LEADER, NO_LEADER_CHANGE, PARTITION_CHANGE_RECORD
from controller.reassignment import assignment_fields, completed_reassignment
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY, APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes

ALTER_PARTITION_KEY = APIS_BY_NAME["AlterPartition"].key
_RESPONSE = struct_classes(APIS_BY_KEY[ALTER_PARTITION_KEY].response)

LEADER_RECOVERY_STATE_RECOVERED = 0
# A BrokerState epoch of -1 means the leader did not check that broker's epoch
# (and v0-2 requests carry no epochs at all).
UNKNOWN_BROKER_EPOCH = -1
# The first version that names topics by id and knows INELIGIBLE_REPLICA and
# NEW_LEADER_ELECTED (KIP-841).
TOPIC_IDS_VERSION = 2
ISR_WITH_EPOCHS_VERSION = 3


def alter_partition_error(error: ErrorCode):
    """A response refusing the whole request (no per-topic answers), as Kafka sends."""
    return _RESPONSE.AlterPartitionResponse(throttle_time_ms=0, error_code=error, topics=[])


def plan_alter_partition(image: MetadataImage, request, api_version: int) -> tuple[object, list]:
    """(AlterPartitionResponse, PartitionChangeRecords) for a decoded request of ``api_version``."""
    sender = image.brokers.get(request.broker_id)
    if sender is None or sender.epoch != request.broker_epoch:
        return alter_partition_error(ErrorCode.STALE_BROKER_EPOCH), []
    usable = set(usable_broker_ids(image))
    by_ids = api_version >= TOPIC_IDS_VERSION
    # Partitions already changed by this request: a partition named twice is
    # checked against its first change, as two requests in a row would be.
    changed: dict[tuple[uuid.UUID, int], PartitionImage] = {}
    records: list = []
    topic_answers = []
    for topic_data in request.topics:
        topic = _find_topic(image, topic_data, by_ids)
        answers = []
        topic_answers.append(
            _RESPONSE.TopicData(topic_name=topic_data.topic_name, topic_id=topic_data.topic_id, partitions=answers)
        )
        if topic is None:
            error = ErrorCode.UNKNOWN_TOPIC_ID if by_ids else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            answers.extend(_refused(p.partition_index, error) for p in topic_data.partitions)
            continue
        for data in topic_data.partitions:
            key = (topic.topic_id, data.partition_index)
            partition = changed.get(key) or topic.partitions.get(data.partition_index)
            error, record, after = _alter_one(image, usable, topic, partition, request.broker_id, data, api_version)
            if record is not None:
                records.append(record)
                changed[key] = after
            answers.append(_refused(data.partition_index, error) if error != ErrorCode.NONE else _answer(after))
    response = _RESPONSE.AlterPartitionResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, topics=topic_answers)
    return response, records


def _find_topic(image: MetadataImage, topic_data, by_ids: bool) -> TopicImage | None:
    if by_ids:
        return None if topic_data.topic_id == ZERO_UUID else image.topic_by_id(topic_data.topic_id)
    return image.topics.get(topic_data.topic_name)


def _refused(partition_index: int, error: ErrorCode):
    # Every other field keeps its default: the sender reads nothing but the error.
    return _RESPONSE.PartitionData(partition_index=partition_index, error_code=error)


def _answer(partition: PartitionImage):
    return _RESPONSE.PartitionData(
        partition_index=partition.partition_id,
        error_code=ErrorCode.NONE,
        leader_id=partition.leader,
        leader_epoch=partition.leader_epoch,
        isr=list(partition.isr),
        leader_recovery_state=partition.leader_recovery_state,
        partition_epoch=partition.partition_epoch,
    )


def _new_isr(data, api_version: int) -> list[tuple[int, int]]:
    """The requested ISR as (broker id, broker epoch) pairs, whatever the version."""
    if api_version >= ISR_WITH_EPOCHS_VERSION:
        return [(state.broker_id, state.broker_epoch) for state in data.new_isr_with_epochs]
    return [(broker_id, UNKNOWN_BROKER_EPOCH) for broker_id in data.new_isr]


def _alter_one(
    image: MetadataImage,
    usable: set[int],
    topic: TopicImage,
    partition: PartitionImage | None,
    sender_id: int,
    data,
    api_version: int,
) -> tuple[ErrorCode, object | None, PartitionImage | None]:
    """(error, record or None, the partition after the record) for one partition."""
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, None
    new_isr_with_epochs = _new_isr(data, api_version)
    error = _validate(image, usable, partition, sender_id, data, new_isr_with_epochs, api_version)
    if error != ErrorCode.NONE:
        return error, None, None
    new_isr = [broker_id for broker_id, _ in new_isr_with_epochs]
    record = _change_record(topic.topic_id, partition, new_isr, data.leader_recovery_state, usable)
    if record is None:
        return ErrorCode.NONE, None, partition
    after = merge_partition_change(partition, record)
    if record.leader not in (NO_LEADER_CHANGE, sender_id):
        # Completing a reassignment moved the leadership: the change stands,
        # but the sender must learn its new role from the metadata.
        moved = ErrorCode.NEW_LEADER_ELECTED if api_version >= TOPIC_IDS_VERSION else ErrorCode.FENCED_LEADER_EPOCH
        return moved, record, after
    return ErrorCode.NONE, record, after


def _validate(
    image: MetadataImage,
    usable: set[int],
    partition: PartitionImage,
    sender_id: int,
    data,
    new_isr_with_epochs: list[tuple[int, int]],
    api_version: int,
) -> ErrorCode:
    if data.leader_epoch > partition.leader_epoch or data.partition_epoch > partition.partition_epoch:
        return ErrorCode.NOT_CONTROLLER
    if data.leader_epoch < partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if sender_id != partition.leader:
        return ErrorCode.INVALID_REQUEST
    if data.partition_epoch < partition.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    new_isr = [broker_id for broker_id, _ in new_isr_with_epochs]
    replicas = set(partition.replicas)
    if len(set(new_isr)) != len(new_isr) or not replicas.issuperset(new_isr) or partition.leader not in new_isr:
        return ErrorCode.INVALID_REQUEST
    recovery = data.leader_recovery_state
    if recovery not in (LEADER_RECOVERY_STATE_RECOVERED, LEADER_RECOVERY_STATE_RECOVERING):
        return ErrorCode.INVALID_REQUEST
    if recovery == LEADER_RECOVERY_STATE_RECOVERING and len(new_isr) > 1:
        # A recovering leader may not take followers before its log is whole again.
        return ErrorCode.INVALID_REQUEST
    was_recovered = partition.leader_recovery_state == LEADER_RECOVERY_STATE_RECOVERED
    if recovery == LEADER_RECOVERY_STATE_RECOVERING and was_recovered:
        # Recovery only ever ends: a recovered log never goes back to recovering.
        return ErrorCode.INVALID_REQUEST
    for broker_id, broker_epoch in new_isr_with_epochs:
        broker = image.brokers.get(broker_id)
        stale = broker is not None and broker_epoch != UNKNOWN_BROKER_EPOCH and broker.epoch != broker_epoch
        # A replica in a log dir its broker reported offline (JBOD, KIP-858) has
        # no log: a leader that still sees it "caught up" (its fetch session
        # keeps the partition) must not take it back.
        if broker_id not in usable or stale or replica_offline(image, partition, broker_id):
            if api_version >= TOPIC_IDS_VERSION:
                return ErrorCode.INELIGIBLE_REPLICA
            # Older senders do not know INELIGIBLE_REPLICA; this one they retry.
            return ErrorCode.OPERATION_NOT_ATTEMPTED
    return ErrorCode.NONE


def _change_record(
    topic_id: uuid.UUID, partition: PartitionImage, target_isr: list[int], recovery: int, usable: set[int]
):
    """The PartitionChangeRecord for a validated request, or None when nothing changes.

    Every member of ``target_isr`` is usable (validation saw to it), so the
    leader stays unless a completed reassignment removes it, and then another
    member of the ISR can always take over.
    """
    replicas = list(partition.replicas)
    removing = list(partition.removing_replicas)
    adding = list(partition.adding_replicas)
    completed = completed_reassignment(replicas, removing, adding, target_isr)
    if completed is not None:
        replicas, target_isr = completed
        removing, adding = [], []
    fields: dict = {}
    if partition.leader not in target_isr:
        fields["leader"] = next((b for b in replicas if b in target_isr and b in usable), NO_LEADER)
    elif not set(replicas).issuperset(partition.replicas):
        # A replica left the assignment: naming the same leader bumps the leader
        # epoch, so the removed replica's fetches are fenced.
        fields["leader"] = partition.leader
    if tuple(target_isr) != partition.isr:
        fields["isr"] = target_isr
    fields.update(assignment_fields(partition, replicas, removing, adding))
    if recovery != partition.leader_recovery_state:
        fields["leader_recovery_state"] = recovery
    if not fields:
        return None
    return PARTITION_CHANGE_RECORD(partition_id=partition.partition_id, topic_id=topic_id, **fields)
