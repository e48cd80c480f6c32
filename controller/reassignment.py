"""Partition reassignments (KIP-455) as pure functions of the image: what
AlterPartitionReassignments (key 45) writes and what ListPartitionReassignments
(key 46) reports (Kafka's ReplicationControlManager.alterPartitionReassignments
and listPartitionReassignments).

A partition is being reassigned while its ``adding_replicas`` or
``removing_replicas`` is not empty. Its ``replicas`` then hold the target
followed by the replicas that are leaving, so the partition keeps every copy
of its data until the new replicas have caught up; its *original* replicas are
``replicas`` without ``adding_replicas``.

Starting (``replicas`` = a target list), per partition, first rule broken wins:

* unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION;
* an empty target, a broker named twice or a broker that is not registered:
  INVALID_REPLICA_ASSIGNMENT (fenced brokers may be named: they catch up once
  they return, as in Kafka);
* (v1) ``allow_replication_factor_change`` false and a target whose size is not
  the original replica count: INVALID_REPLICATION_FACTOR.

A new reassignment of a partition that is already being reassigned replaces
it, measured from the original replicas (KIP-455): adding = target - original,
removing = original - target (both in id order, as Kafka lists them),
replicas = target + removing. A replica the
replaced reassignment was adding and the new one does not want leaves at once
(it was never needed for the data); if that would leave no in-sync replica
the request is refused with INVALID_REPLICA_ASSIGNMENT. (Kafka's KRaft
controller measures from the current replica list instead, which makes such a
replica one to remove and later loses the original replicas on a cancel.)

The change is one PartitionChangeRecord. When nothing needs adding and the ISR
already holds every replica of the target (a reorder, or only removals of
replicas whose peers are in sync), the reassignment completes in that same
record: replicas = target, ISR without the leaving replicas, nothing adding or
removing. Otherwise it completes later, when AlterPartition (the leader's ISR
expansion, controller/alter_partition.py) brings every added replica into the
ISR. A target equal to the current assignment with nothing running writes
nothing.

Cancelling (``replicas`` null): NO_REASSIGNMENT_IN_PROGRESS when none runs;
else the replicas go back to the original ones, the ISR loses the replicas
being added, and adding/removing are cleared. If only replicas being added
were in sync, going back needs an unclean election: refused with
INVALID_REPLICA_ASSIGNMENT unless ``unclean.leader.election.enable`` holds for
the topic, and then the first original replica restarts the ISR and leads
(Kafka's PartitionReassignmentRevert; the first usable original replica if it
cannot), with the partition marked RECOVERING since its log may lack
acknowledged records.

Leaders follow Kafka's PartitionChangeBuilder: the leader stays while it is in
the new ISR and usable (registered, unfenced, not shutting down); otherwise the
first replica that is both leads, or none. Whenever a replica leaves the
replica list the leader epoch is bumped (the same leader is named again), so
the leaving replica's fetches are fenced.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller.broker_lifecycle import LEADER_RECOVERY_STATE_RECOVERING, unclean_election_enabled, usable_broker_ids
from controller.metadata.delta import merge_partition_change
from controller.metadata.image import MetadataImage, PartitionImage, TopicImage
from controller.metadata.records import NO_LEADER, PARTITION_CHANGE_RECORD
from protocol.errors import ErrorCode
from protocol.schema import ZERO_UUID

# (topic name, [(partition id, target replicas or None to cancel)]) in request order.
ReassignmentRequest = Sequence[tuple[str, Sequence[tuple[int, Sequence[int] | None]]]]


@dataclass(frozen=True)
class PartitionResult:
    partition_id: int
    error: ErrorCode
    message: str | None = None


@dataclass(frozen=True)
class OngoingReassignment:
    """A partition being reassigned, as ListPartitionReassignments reports it."""

    partition_id: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str):
        super().__init__(message)
        self.error = error
        self.message = message


def is_reassigning(partition: PartitionImage) -> bool:
    return bool(partition.adding_replicas or partition.removing_replicas)


def original_replicas(partition: PartitionImage) -> list[int]:
    """The replicas before the running reassignment (all of them when none runs)."""
    adding = set(partition.adding_replicas)
    return [b for b in partition.replicas if b not in adding]


def completed_reassignment(
    replicas: Sequence[int], removing: Sequence[int], adding: Sequence[int], isr: Sequence[int]
) -> tuple[list[int], list[int]] | None:
    """(replicas, ISR) once a reassignment is over, or None while it is not (or none runs).

    It is over when the ISR, without the replicas being removed, still has
    someone and holds every replica that stays (the added ones have caught up).
    """
    if not removing and not adding:
        return None
    leaving = set(removing)
    staying_isr = [b for b in isr if b not in leaving]
    staying = [b for b in replicas if b not in leaving]
    if not staying_isr or not staying or not set(staying_isr).issuperset(staying):
        return None
    return staying, staying_isr


def assignment_fields(
    partition: PartitionImage, replicas: Sequence[int], removing: Sequence[int], adding: Sequence[int]
) -> dict:
    """The PartitionChangeRecord fields for a new replica list and reassignment
    state: only what differs from ``partition``."""
    fields: dict = {}
    if tuple(replicas) != partition.replicas:
        fields["replicas"] = list(replicas)
        if partition.directories:
            # Keep each remaining replica's log dir (the merge would forget them
            # all); a new replica's is not known yet.
            directory_of = dict(zip(partition.replicas, partition.directories, strict=False))
            fields["directories"] = [directory_of.get(b, ZERO_UUID) for b in replicas]
    if tuple(removing) != partition.removing_replicas:
        fields["removing_replicas"] = list(removing)
    if tuple(adding) != partition.adding_replicas:
        fields["adding_replicas"] = list(adding)
    return fields


# --------------------------------------------------------------------------- AlterPartitionReassignments


def plan_alter_partition_reassignments(
    image: MetadataImage, topics: ReassignmentRequest, *, allow_replication_factor_change: bool = True
) -> tuple[list[tuple[str, list[PartitionResult]]], list]:
    """(per topic in request order, a result per named partition; the PartitionChangeRecords).

    A partition named twice is planned the second time against its first
    change, as two requests in a row would be.
    """
    usable = set(usable_broker_ids(image))
    changed: dict[tuple[uuid.UUID, int], PartitionImage] = {}
    records: list = []
    results: list[tuple[str, list[PartitionResult]]] = []
    for name, partitions in topics:
        answers: list[PartitionResult] = []
        results.append((name, answers))
        topic = image.topics.get(name)
        for partition_id, target in partitions:
            if topic is None:
                answers.append(
                    PartitionResult(partition_id, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}")
                )
                continue
            key = (topic.topic_id, partition_id)
            partition = changed.get(key) or topic.partitions.get(partition_id)
            if partition is None:
                message = f"No such partition as {name}-{partition_id}"
                answers.append(PartitionResult(partition_id, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message))
                continue
            try:
                if target is None:
                    record = _cancel(image, usable, topic, partition)
                else:
                    record = _start(image, usable, topic, partition, list(target), allow_replication_factor_change)
            except _Refused as refused:
                answers.append(PartitionResult(partition_id, refused.error, refused.message))
                continue
            if record is not None:
                records.append(record)
                changed[key] = merge_partition_change(partition, record)
            answers.append(PartitionResult(partition_id, ErrorCode.NONE))
    return results, records


def _validate_target(image: MetadataImage, target: list[int]) -> None:
    if not target:
        raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The target replica list is empty.")
    previous = None
    # In id order, as Kafka checks, so the same list always gets the same complaint.
    for broker_id in sorted(target):
        if broker_id not in image.brokers:
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The target replicas include broker {broker_id}, but no such broker is registered.",
            )
        if broker_id == previous:
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The target replicas include broker {broker_id} more than once."
            )
        previous = broker_id


def _start(
    image: MetadataImage,
    usable: set[int],
    topic: TopicImage,
    partition: PartitionImage,
    target: list[int],
    allow_rf_change: bool,
):
    _validate_target(image, target)
    original = original_replicas(partition)
    if not allow_rf_change and len(target) != len(original):
        raise _Refused(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"The replication factor would change from {len(original)} to {len(target)}.",
        )
    wanted = set(target)
    # In id order, as Kafka lists them.
    removing = sorted(set(original) - wanted)
    adding = sorted(wanted - set(original))
    replicas = target + removing
    staying = set(replicas)
    isr = [b for b in partition.isr if b in staying]
    if not isr:
        # Only replicas of the replaced reassignment, which this one drops, are in sync.
        raise _Refused(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"The target would leave {topic.name}-{partition.partition_id} without an in-sync replica.",
        )
    return _change_record(topic.topic_id, partition, usable, replicas, isr, removing, adding)


def _cancel(image: MetadataImage, usable: set[int], topic: TopicImage, partition: PartitionImage):
    if not is_reassigning(partition):
        raise _Refused(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")
    replicas = original_replicas(partition)
    if not replicas:
        # Only reachable from a damaged log: a partition cannot have started without replicas.
        raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Every replica of the partition is one being added.")
    adding = set(partition.adding_replicas)
    isr = [b for b in partition.isr if b not in adding]
    unclean = False
    if not isr:
        if not unclean_election_enabled(image, topic):
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Unable to revert the reassignment of {topic.name}-{partition.partition_id}: only replicas being "
                "added are in sync, so it would need an unclean leader election.",
            )
        # The first original replica restarts the ISR; whatever it lacks is lost.
        isr = [replicas[0]]
        unclean = True
    return _change_record(topic.topic_id, partition, usable, replicas, isr, [], [], unclean=unclean)


def _elect(
    partition: PartitionImage, replicas: list[int], isr: list[int], usable: set[int], unclean: bool
) -> tuple[int, list[int]]:
    """(leader, ISR): the leader stays while it is in the ISR and usable, else the
    first replica that is both leads; with ``unclean``, failing that, the first
    usable replica leads and restarts the ISR alone."""
    if partition.leader in isr and partition.leader in usable:
        return partition.leader, isr
    clean = next((b for b in replicas if b in isr and b in usable), None)
    if clean is not None:
        return clean, isr
    if unclean:
        outsider = next((b for b in replicas if b in usable), None)
        if outsider is not None:
            return outsider, [outsider]
    return NO_LEADER, isr


def _change_record(
    topic_id: uuid.UUID,
    partition: PartitionImage,
    usable: set[int],
    replicas: list[int],
    isr: list[int],
    removing: list[int],
    adding: list[int],
    *,
    unclean: bool = False,
):
    """The PartitionChangeRecord taking ``partition`` to these targets, or None when
    nothing changes; completes the reassignment at once when it already can."""
    completed = completed_reassignment(replicas, removing, adding, isr)
    if completed is not None:
        replicas, isr = completed
        removing, adding = [], []
    leader, isr = _elect(partition, replicas, isr, usable, unclean)
    fields: dict = {}
    if leader != partition.leader:
        fields["leader"] = leader
    elif not set(replicas).issuperset(partition.replicas):
        # A replica leaves: naming the same leader bumps the leader epoch, so the
        # leaving replica's fetches are fenced.
        fields["leader"] = partition.leader
    if isr and tuple(isr) != partition.isr:
        fields["isr"] = isr
    from_outside = unclean and leader != NO_LEADER and leader not in partition.isr
    if from_outside and partition.leader_recovery_state != LEADER_RECOVERY_STATE_RECOVERING:
        # The new leader was not in sync, so its log may lack acknowledged
        # records: the partition is marked as recovering, as after an unclean
        # election. (Kafka's revert marks it only when the leader is not the
        # first original replica; pybroker says what happened either way.)
        fields["leader_recovery_state"] = LEADER_RECOVERY_STATE_RECOVERING
    fields.update(assignment_fields(partition, replicas, removing, adding))
    if not fields:
        return None
    return PARTITION_CHANGE_RECORD(partition_id=partition.partition_id, topic_id=topic_id, **fields)


# --------------------------------------------------------------------------- ListPartitionReassignments


def list_partition_reassignments(
    image: MetadataImage, topics: Iterable[tuple[str, Iterable[int]]] | None
) -> list[tuple[str, list[OngoingReassignment]]]:
    """The running reassignments: of every partition (``topics`` None; topics by
    name, partitions by id), or of the named ones in request order. Unknown
    topics and partitions, and partitions not being reassigned, are left out,
    as are topics left with nothing to report (Kafka's answer)."""
    if topics is None:
        named = [
            (name, sorted(p for p, partition in image.topics[name].partitions.items() if is_reassigning(partition)))
            for name in sorted(image.topics)
        ]
    else:
        named = [(name, list(partition_ids)) for name, partition_ids in topics]
    answer = []
    for name, partition_ids in named:
        topic = image.topics.get(name)
        if topic is None:
            continue
        ongoing = []
        for partition_id in partition_ids:
            partition = topic.partitions.get(partition_id)
            if partition is not None and is_reassigning(partition):
                ongoing.append(
                    OngoingReassignment(
                        partition_id, partition.replicas, partition.adding_replicas, partition.removing_replicas
                    )
                )
        if ongoing:
            answer.append((name, ongoing))
    return answer
