"""Topic creation, deletion and partition addition as pure functions: (image, command) -> (result, records).

Nothing here does IO. The controller writes the records to the metadata log
and only then applies them to its image, so a crash between the two replays
the same records at start-up.

Where replicas go: once any broker is registered in the image, new replicas
are placed over the usable brokers (registered, unfenced, not shutting down,
and heard from by the active controller when it passes
``ClusterDefaults.live_broker_ids``) by
:func:`controller.placement.place_replicas`, and manual assignments must name
registered brokers. An image without registered brokers (a node whose own
registration has not been committed yet) falls back to
``ClusterDefaults.broker_ids``.
"""

from __future__ import annotations

import random
import re
import uuid
from dataclasses import dataclass, field

from controller.metadata.image import MetadataImage
from controller.metadata.records import (
    CONFIG_RECORD,
    PARTITION_RECORD,
    REMOVE_TOPIC_RECORD,
    RESOURCE_TOPIC,
    TOPIC_RECORD,
)
from controller.placement import PlacementError, place_replicas, place_replicas_error, usable_brokers
from protocol.errors import ErrorCode
from storage.topic_config import TopicConfigError, validate_topic_configs

TOPIC_NAME_MAX_CHARS = 249
# The metadata log lives in a partition directory of this name: no topic may take it.
METADATA_TOPIC = "__cluster_metadata"
RESERVED_TOPICS = frozenset({METADATA_TOPIC})
# Topics the brokers create and own; clients may not create them.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_LEGAL_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


def topic_name_error(name: str | None) -> str | None:
    """Why ``name`` is not a legal topic name, or None when it is."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > TOPIC_NAME_MAX_CHARS:
        return f"topic name is longer than {TOPIC_NAME_MAX_CHARS} characters"
    if not _LEGAL_TOPIC_NAME.match(name):
        return f"topic name {name!r} contains characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


@dataclass
class CreateTopicSpec:
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    assignments: dict[int, list[int]] = field(default_factory=dict)
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass
class CreateTopicResult:
    name: str
    error_code: ErrorCode
    error_message: str | None = None
    topic_id: uuid.UUID = uuid.UUID(int=0)
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterDefaults:
    broker_ids: tuple[int, ...]
    num_partitions: int
    replication_factor: int
    # The order replicas are dealt out in when the image has no registered
    # brokers (rack-alternating, see controller.broker_lifecycle.rack_alternating_order);
    # by id when unset.
    placement_order: tuple[int, ...] | None = None
    # The brokers the active controller has heard from within their session
    # (BrokerHeartbeatTracker.live_brokers): the only ones new replicas and
    # first leaders may go to. None: every usable broker counts.
    live_broker_ids: frozenset[int] | None = None

    def placement(self) -> list[int]:
        return list(self.placement_order) if self.placement_order else sorted(self.broker_ids)


def _placement_rng(topic_name: str, rng: random.Random | None) -> random.Random:
    # Seeded from the name, so replaying a plan gives the same placement and the
    # partitions a topic gains later continue its leader rotation.
    return rng if rng is not None else random.Random(topic_name)


def _first_partitions(image: MetadataImage, assignments: dict[int, list[int]], live: frozenset[int] | None = None):
    """(isr, leader) for each new partition, or an error message (Kafka's rules).

    Without registered brokers every replica counts as in sync. With them, the
    ISR is the replicas that are usable (placed replicas all are; a manual list
    may name fenced brokers, or brokers not in ``live``) and the leader its
    first member; a partition with no usable replica is refused. A replica left
    out joins the ISR once it has caught up, as any follower does.
    """
    if not image.brokers:
        return {p: (list(replicas), replicas[0]) for p, replicas in assignments.items()}, None
    usable = {broker_id for broker_id, _ in usable_brokers(image, live, cordoned_too=True)}
    firsts = {}
    for p, replicas in assignments.items():
        isr = [b for b in replicas if b in usable]
        if not isr:
            unheard = "" if live is None else ", or not heard from by the active controller within their session"
            return None, (
                f"All brokers specified in the manual partition assignment for partition {p} are fenced or in "
                f"controlled shutdown{unheard}."
            )
        firsts[p] = (isr, isr[0])
    return firsts, None


def _partition_record(topic_id: uuid.UUID, partition: int, replicas: list[int], isr: list[int], leader: int):
    return PARTITION_RECORD(
        partition_id=partition,
        topic_id=topic_id,
        replicas=replicas,
        isr=isr,
        leader=leader,
        leader_epoch=0,
        partition_epoch=0,
    )


def plan_create_topic(
    image: MetadataImage,
    spec: CreateTopicSpec,
    defaults: ClusterDefaults,
    new_topic_id: uuid.UUID,
    *,
    internal: bool = False,
    rng: random.Random | None = None,
):
    """Validate one topic creation; returns (result, records). Records are empty on error.
    ``internal`` is the broker itself creating one of its internal topics; ``rng``
    drives replica placement (default: seeded from the topic name)."""

    def fail(code: ErrorCode, message: str):
        return CreateTopicResult(spec.name, code, message), []

    problem = topic_name_error(spec.name)
    if problem:
        return fail(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    if spec.name in RESERVED_TOPICS or (spec.name in INTERNAL_TOPICS and not internal):
        return fail(ErrorCode.INVALID_REQUEST, f"Creation of internal topic {spec.name} is prohibited.")
    if spec.name in image.topics:
        return fail(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{spec.name}' already exists.")
    # '.' and '_' collide in metric names, so Kafka refuses topics differing only there.
    collision_key = spec.name.replace(".", "_")
    for existing in image.topics:
        if existing.replace(".", "_") == collision_key:
            return fail(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{spec.name}' collides with existing topic: {existing}")
    if spec.assignments:
        if spec.num_partitions != -1 or spec.replication_factor != -1:
            return fail(ErrorCode.INVALID_REQUEST, "replica assignments and num_partitions/replication_factor are exclusive")
        if sorted(spec.assignments) != list(range(len(spec.assignments))):
            return fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be numbered 0..n-1")
        sizes = {len(r) for r in spec.assignments.values()}
        if len(sizes) != 1 or 0 in sizes:
            return fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "every partition needs the same, non-zero number of replicas")
        known_broker_ids = image.brokers if image.brokers else defaults.broker_ids
        for replicas in spec.assignments.values():
            if len(set(replicas)) != len(replicas):
                return fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "a partition lists a broker twice")
            unknown = [b for b in replicas if b not in known_broker_ids]
            if unknown:
                return fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"unknown broker(s) {unknown}")
        assignments = {p: list(r) for p, r in spec.assignments.items()}
        replication_factor = sizes.pop()
    else:
        num_partitions = defaults.num_partitions if spec.num_partitions == -1 else spec.num_partitions
        replication_factor = defaults.replication_factor if spec.replication_factor == -1 else spec.replication_factor
        if num_partitions < 1:
            return fail(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if replication_factor < 1:
            return fail(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        placed = _place(image, defaults, spec.name, num_partitions, replication_factor, 0, rng)
        if isinstance(placed, str):
            return fail(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): {placed}",
            )
        assignments = dict(enumerate(placed))
    try:
        configs = validate_topic_configs(spec.configs)
    except TopicConfigError as exc:
        return fail(ErrorCode.INVALID_CONFIG, str(exc))

    firsts, problem = _first_partitions(image, assignments, defaults.live_broker_ids)
    if problem:
        return fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)

    records = [TOPIC_RECORD(name=spec.name, topic_id=new_topic_id)]
    for name, value in sorted(configs.items()):
        records.append(CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name=spec.name, name=name, value=value))
    for partition, replicas in sorted(assignments.items()):
        isr, leader = firsts[partition]
        records.append(_partition_record(new_topic_id, partition, replicas, isr, leader))
    result = CreateTopicResult(
        spec.name,
        ErrorCode.NONE,
        None,
        new_topic_id,
        len(assignments),
        replication_factor,
        configs,
    )
    return result, records


@dataclass
class CreatePartitionsSpec:
    name: str
    count: int  # the new total number of partitions
    assignments: list[list[int]] | None = None  # one replica list per new partition; None: placed here


@dataclass
class CreatePartitionsResult:
    name: str
    error_code: ErrorCode
    error_message: str | None = None


def _manual_assignment_error(replicas: list[int], broker_ids, replication_factor: int) -> str | None:
    """Why a manual replica list is unacceptable (Kafka's ReplicationControlManager wording)."""
    seen: set[int] = set()
    for broker_id in replicas:
        if broker_id in seen:
            return f"The manual partition assignment includes the broker {broker_id} more than once."
        seen.add(broker_id)
        if broker_id not in broker_ids:
            return f"The manual partition assignment includes broker {broker_id}, but no such broker is registered."
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    if len(replicas) != replication_factor:
        return (
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this is "
            f"not consistent with previous partitions, which have {replication_factor} replica(s)."
        )
    return None


def _place(
    image: MetadataImage,
    defaults: ClusterDefaults,
    topic_name: str,
    num_partitions: int,
    replication_factor: int,
    start_partition: int,
    rng: random.Random | None,
) -> list[list[int]] | str:
    """Replica lists for new partitions, or why they cannot be placed."""
    if image.brokers:
        live = usable_brokers(image, defaults.live_broker_ids)
        try:
            return place_replicas(
                live,
                num_partitions,
                replication_factor,
                start_partition=start_partition,
                rng=_placement_rng(topic_name, rng),
            )
        except PlacementError as exc:
            usable = usable_brokers(image)
            if len(live) < replication_factor <= len(usable):
                unheard = sorted({b for b, _ in usable} - {b for b, _ in live})
                return (
                    f"The target replication factor of {replication_factor} cannot be reached because only "
                    f"{len(live)} of the {len(usable)} unfenced broker(s) have heartbeated to the active "
                    f"controller within their session; not heard from: {unheard}."
                )
            if replication_factor > len(usable) > len(live):
                # Counted over the usable brokers, not only those heard from.
                return place_replicas_error(len(usable), replication_factor)
            cordoned = sorted(b for b, _ in usable_brokers(image, cordoned_too=True) if b in image.broker_placement)
            if cordoned:
                return f"{exc} Broker(s) {cordoned} take no new replicas (cordoned or being removed)."
            return str(exc)
    brokers = defaults.placement()
    if replication_factor > len(brokers):
        return place_replicas_error(len(brokers), replication_factor)
    # Round-robin over the placement order: with racks, consecutive brokers
    # are in different racks, so a partition's replicas spread over racks.
    return [
        [brokers[(p + r) % len(brokers)] for r in range(replication_factor)]
        for p in range(start_partition, start_partition + num_partitions)
    ]


def plan_create_partitions(
    image: MetadataImage, spec: CreatePartitionsSpec, defaults: ClusterDefaults, *, rng: random.Random | None = None
):
    """Validate adding partitions to a topic; returns (result, records). Records are
    empty on error. New partitions take the ids after the existing ones and the
    replication factor of the topic's existing partitions; each starts with its
    usable replicas as ISR (all of them when placed here), led by the first of
    them at leader epoch 0. ``rng`` as for :func:`plan_create_topic`."""

    def fail(code: ErrorCode, message: str | None):
        return CreatePartitionsResult(spec.name, code, message), []

    topic = image.topics.get(spec.name)
    if topic is None:
        return fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    current = len(topic.partitions)
    if spec.count == current:
        return fail(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if spec.count < current:
        return fail(
            ErrorCode.INVALID_PARTITIONS,
            f"The topic {spec.name} currently has {current} partition(s); {spec.count} would not be an increase.",
        )
    additional = spec.count - current
    if not topic.partitions:
        return fail(ErrorCode.UNKNOWN_SERVER_ERROR, f"Invalid state: topic {spec.name} appears to have no partitions.")
    replication_factor = len(next(iter(topic.partitions.values())).replicas)
    if spec.assignments is not None:
        if len(spec.assignments) != additional:
            return fail(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {additional} additional partition(s), but only {len(spec.assignments)} "
                "assignment(s) were specified.",
            )
        known_broker_ids = image.brokers if image.brokers else defaults.broker_ids
        for replicas in spec.assignments:
            problem = _manual_assignment_error(list(replicas), known_broker_ids, replication_factor)
            if problem:
                return fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
        assignments = [list(replicas) for replicas in spec.assignments]
    else:
        # The same placement as topic creation, continued past the existing ids.
        placed = _place(image, defaults, spec.name, additional, replication_factor, current, rng)
        if isinstance(placed, str):
            return fail(ErrorCode.INVALID_REPLICATION_FACTOR, placed)
        assignments = placed
    # Partition ids are 0..n-1, so the new ones start at the current count (as in Kafka).
    firsts, problem = _first_partitions(
        image, {current + i: replicas for i, replicas in enumerate(assignments)}, defaults.live_broker_ids
    )
    if problem:
        return fail(ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
    records = [
        _partition_record(topic.topic_id, partition, replicas, *firsts[partition])
        for partition, replicas in zip(range(current, spec.count), assignments)
    ]
    return CreatePartitionsResult(spec.name, ErrorCode.NONE, None), records


def plan_delete_topic(image: MetadataImage, name: str | None, topic_id: uuid.UUID | None):
    """Returns (error_code, message, name, topic_id, records)."""
    if name is not None and name != "":
        topic = image.topics.get(name)
    elif topic_id is not None and topic_id.int != 0:
        topic = image.topic_by_id(topic_id)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_ID, "unknown topic id", None, topic_id, []
    else:
        return ErrorCode.INVALID_REQUEST, "neither a topic name nor a topic id", name, topic_id, []
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.", name, topic_id, []
    return ErrorCode.NONE, None, topic.name, topic.topic_id, [REMOVE_TOPIC_RECORD(topic_id=topic.topic_id)]
