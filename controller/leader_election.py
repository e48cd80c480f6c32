"""Leader elections asked for by ElectLeaders and by the automatic leader rebalance,
as pure functions of the image (Kafka's ReplicationControlManager.electLeaders
and maybeBalancePartitionLeaders).

* PREFERRED (0): the first replica of the assignment leads again if it is in the
  ISR and usable (registered, unfenced, not shutting down);
  ELECTION_NOT_NEEDED when it already leads, PREFERRED_LEADER_NOT_AVAILABLE
  when it cannot.
* UNCLEAN (1): only for a partition without a leader: the first usable ISR
  member leads (a clean election), else the first usable replica, with the ISR
  restarting from it in the RECOVERING state (data may be lost, which is what
  the caller asked for); ELECTION_NOT_NEEDED when it has a leader,
  ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is usable.
* The automatic rebalance (``auto.leader.rebalance.enable``) makes preferred
  elections for the partitions whose preferred replica could lead but does not,
  of each broker whose share of such partitions (among those it is the
  preferred replica of) is above ``leader.imbalance.per.broker.percentage``.
* A preferred replica that comes back (its broker unfenced again, or the
  replica back in the ISR, caught up) is elected again soon after, without
  waiting for that rebalance: ``preferred_leaders_returned`` finds those
  partitions between two images, ``plan_preferred_elections`` elects the ones
  that still qualify. After a full restart the node that came up first would
  otherwise lead every partition until the next imbalance check (300 s by
  default); Kafka's controller also makes a replica that rejoins in sync its
  partition's leader again when it is the preferred one.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.broker_lifecycle import LEADER_RECOVERY_STATE_RECOVERING, usable_broker_ids
from controller.metadata.image import MetadataImage, PartitionImage, TopicImage
from controller.metadata.records import NO_LEADER, PARTITION_CHANGE_RECORD
from protocol.errors import ErrorCode

PREFERRED = 0
UNCLEAN = 1
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."

TopicPartition = tuple[str, int]


def _failed(topic: str, partition_id: int, strategy: str) -> str:
    return f"Failed to elect leader for partition {topic}-{partition_id} under strategy {strategy}"


def elect_one(
    topic: TopicImage, partition: PartitionImage, election_type: int, usable: set[int]
) -> tuple[ErrorCode, str | None, object | None]:
    """(error, message, PartitionChangeRecord or None) for one partition."""
    if election_type == PREFERRED:
        preferred = partition.replicas[0] if partition.replicas else NO_LEADER
        if partition.leader == preferred and preferred != NO_LEADER:
            return ErrorCode.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE, None
        if preferred in partition.isr and preferred in usable:
            record = PARTITION_CHANGE_RECORD(partition_id=partition.partition_id, topic_id=topic.topic_id, leader=preferred)
            return ErrorCode.NONE, None, record
        return (
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
            _failed(topic.name, partition.partition_id, "PreferredReplicaPartitionLeaderElectionStrategy"),
            None,
        )
    if partition.leader != NO_LEADER:
        return ErrorCode.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE, None
    clean = next((b for b in partition.isr if b in usable), None)
    if clean is not None:
        record = PARTITION_CHANGE_RECORD(partition_id=partition.partition_id, topic_id=topic.topic_id, leader=clean)
        return ErrorCode.NONE, None, record
    unclean = next((b for b in partition.replicas if b in usable), None)
    if unclean is not None:
        record = PARTITION_CHANGE_RECORD(
            partition_id=partition.partition_id,
            topic_id=topic.topic_id,
            leader=unclean,
            isr=[unclean],
            leader_recovery_state=LEADER_RECOVERY_STATE_RECOVERING,
        )
        return ErrorCode.NONE, None, record
    return (
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        _failed(topic.name, partition.partition_id, "UncleanLeaderElectionStrategy"),
        None,
    )


def plan_elect_leaders(
    image: MetadataImage, election_type: int, targets: Iterable[TopicPartition] | None
) -> tuple[dict[TopicPartition, tuple[ErrorCode, str | None]], list]:
    """ElectLeaders: a result per named partition (UNKNOWN_TOPIC_OR_PARTITION for
    unknown ones), or with ``targets`` None one per partition of the cluster where
    something other than ELECTION_NOT_NEEDED happened; and the records."""
    usable = set(usable_broker_ids(image))
    results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
    records = []
    if targets is None:
        pairs = [(t, p) for t in image.topics.values() for p in sorted(t.partitions.values(), key=lambda p: p.partition_id)]
        for topic, partition in pairs:
            error, message, record = elect_one(topic, partition, election_type, usable)
            if error != ErrorCode.ELECTION_NOT_NEEDED:
                results[(topic.name, partition.partition_id)] = (error, message)
            if record is not None:
                records.append(record)
        return results, records
    for name, partition_id in targets:
        topic = image.topics.get(name)
        if topic is None:
            results[(name, partition_id)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}")
            continue
        partition = topic.partitions.get(partition_id)
        if partition is None:
            results[(name, partition_id)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {name}-{partition_id}")
            continue
        if (name, partition_id) in results:
            continue  # named twice: elected once
        error, message, record = elect_one(topic, partition, election_type, usable)
        results[(name, partition_id)] = (error, message)
        if record is not None:
            records.append(record)
    return results, records


def plan_leader_rebalance(image: MetadataImage, max_elections: int = 1000, preferred_in: set[int] | None = None) -> list:
    """Preferred elections for partitions whose preferred replica is in the ISR and
    usable but does not lead (only those preferring a broker of ``preferred_in``
    when given; at most ``max_elections`` per round, so one round never becomes
    one huge metadata batch)."""
    usable = set(usable_broker_ids(image))
    records = []
    for topic in image.topics.values():
        for partition in topic.partitions.values():
            if not partition.replicas or partition.leader == partition.replicas[0]:
                continue
            if preferred_in is not None and partition.replicas[0] not in preferred_in:
                continue
            error, _, record = elect_one(topic, partition, PREFERRED, usable)
            if record is not None:
                records.append(record)
                if len(records) >= max_elections:
                    return records
    return records


def imbalanced_brokers(image: MetadataImage, percentage: int) -> set[int]:
    """Brokers whose leader imbalance ratio is above ``percentage`` (Kafka's rule):
    of the partitions a broker is the preferred replica of, the share it does not
    lead."""
    preferred_of: dict[int, int] = {}
    not_leading: dict[int, int] = {}
    for topic in image.topics.values():
        for partition in topic.partitions.values():
            if not partition.replicas:
                continue
            preferred = partition.replicas[0]
            preferred_of[preferred] = preferred_of.get(preferred, 0) + 1
            if partition.leader != preferred:
                not_leading[preferred] = not_leading.get(preferred, 0) + 1
    return {b for b, total in preferred_of.items() if not_leading.get(b, 0) * 100 > percentage * total}


def plan_auto_rebalance(image: MetadataImage, percentage: int, max_elections: int = 1000) -> list:
    """One round of the automatic rebalance: preferred elections (where the preferred
    replica could lead) for the partitions of the imbalanced brokers only."""
    over = imbalanced_brokers(image, percentage)
    return plan_leader_rebalance(image, max_elections, preferred_in=over) if over else []


def _preferred_could_lead(partition: PartitionImage | None, usable: set[int]) -> bool:
    """The preferred replica does not lead but could: in the ISR and usable."""
    if partition is None or not partition.replicas:
        return False
    preferred = partition.replicas[0]
    return partition.leader != preferred and preferred in partition.isr and preferred in usable


def preferred_leaders_returned(old: MetadataImage, new: MetadataImage) -> list[TopicPartition]:
    """Partitions whose preferred replica could lead in ``new`` but could not in
    ``old``: it came back into the ISR, or its broker became usable again.

    Called by the active controller on every committed change, so it only looks
    at what changed: images share unchanged topics and partitions (copy on
    write), and a partition whose object is the same only matters when its
    preferred broker became usable."""
    if old.topics is new.topics and old.brokers is new.brokers:
        return []
    usable_old = set(usable_broker_ids(old))
    usable_new = set(usable_broker_ids(new))
    back = usable_new - usable_old
    returned: list[TopicPartition] = []
    for name, topic in new.topics.items():
        old_topic = old.topics.get(name)
        if old_topic is topic and not back:
            continue
        same_topic = old_topic is not None and old_topic.topic_id == topic.topic_id
        old_partitions = old_topic.partitions if same_topic else {}
        for partition_id, partition in topic.partitions.items():
            old_partition = old_partitions.get(partition_id)
            if old_partition is partition and (not partition.replicas or partition.replicas[0] not in back):
                continue
            if _preferred_could_lead(partition, usable_new) and not _preferred_could_lead(old_partition, usable_old):
                returned.append((name, partition_id))
    return returned


def plan_preferred_elections(image: MetadataImage, targets: Iterable[TopicPartition], max_elections: int = 1000) -> list:
    """Preferred elections for those of ``targets`` whose preferred replica can
    still lead and does not (gone topics and partitions, and those that no
    longer qualify, are left alone); at most ``max_elections``."""
    usable = set(usable_broker_ids(image))
    records = []
    for name, partition_id in sorted(set(targets)):
        topic = image.topics.get(name)
        partition = topic.partitions.get(partition_id) if topic is not None else None
        if not _preferred_could_lead(partition, usable):
            continue
        _, _, record = elect_one(topic, partition, PREFERRED, usable)
        if record is not None:
            records.append(record)
            if len(records) >= max_elections:
                break
    return records
