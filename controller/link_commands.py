"""Cluster links and mirror topics as pure functions of the metadata image: (image, request) -> (answer, records).

The active controller plans every change here and writes the records
(broker/controller_node/quorum_controller.py); nothing here does IO. A mirror
topic's creation is planned from what the receiving broker learnt of the
source topic (its partition count and configs), which it asked the source for
before the request reached the controller.

Rules (docs/cluster-links.md tells the states):

- CreateClusterLinks: a link name is a legal topic-style name, unique
  (DUPLICATE_RESOURCE); its settings pass controller/link_configs.py
  (INVALID_CONFIG naming the key); the link gets a new random id.
- AlterClusterLinks: SET or DELETE per key (RESOURCE_NOT_FOUND for an unknown
  link); the result must pass the same checks; bootstrap.servers cannot be
  deleted. DeleteClusterLinks: refused (INVALID_REQUEST) while a mirror that
  follows the link is ACTIVE, PAUSED or PENDING_*, unless ``force``, which
  turns those mirrors FAILED with reason "link deleted".
- AlterMirrors: pause ACTIVE -> PAUSED; resume PAUSED -> ACTIVE; promote
  ACTIVE or PAUSED -> PENDING_PROMOTE and SOURCE_DELETED -> PENDING_FAILOVER
  (nothing is left to catch up with); failover from any state that is not
  writable or already failing over -> PENDING_FAILOVER. Anything else is
  INVALID_REQUEST naming the state; a topic that is not a mirror
  INVALID_REQUEST "not a mirror topic".
- MirrorPartitionsStopped (a partition leader): refused whole with
  STALE_BROKER_EPOCH unless the sender is registered at that epoch; each
  partition must belong to a PENDING_* mirror (a mirror already PROMOTED or
  FAILED_OVER is answered NONE: the report came late) and come from its
  current leader at its current leader epoch (else NOT_LEADER_OR_FOLLOWER /
  FENCED_LEADER_EPOCH), and one bad partition refuses the whole request
  (nothing is written). Marks are kept in the MirrorTopicRecord while pending;
  when every partition has one the mirror becomes PROMOTED or FAILED_OVER with
  them. The cluster's next producer id moves past the largest
  ``max_producer_id`` reported (only upward), at each report.
- UpdateMirrorTopic (a broker watching the source): applies only while the
  mirror's state is ``expected_state`` (else INVALID_UPDATE_VERSION naming the
  state); a state change may only stop a following mirror (SOURCE_DELETED or
  FAILED); a larger source partition count adds partitions as
  CreatePartitions places them; configs must be synced keys (INVALID_CONFIG).
- Failback (CreateMirrorTopics with ``failback``): an existing topic, not a
  mirror that still follows a source, with exactly the partitions the
  source's stopped mirror has marks for (INVALID_REQUEST otherwise), becomes
  ACTIVE over the link with those marks as cut points; each partition's
  leader epoch moves by one (a PartitionChangeRecord naming the same leader),
  so every replica starts a new leadership after cutting its log back
  (broker/links/failback.py). All in one metadata transaction.
- Users may not change a synced config of a mirror that still follows its
  source, nor add partitions to it (``mirror_config_refusal``,
  ``mirror_partitions_refusal``); deleting the topic removes the mirror.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from controller.link_configs import (
    MIRROR_SYNCED_TOPIC_CONFIGS,
    LinkConfigError,
    described_link_configs,
    validate_link_configs,
)
from controller.metadata.image import MetadataImage, MirrorTopic
from controller.metadata.records import (
    BEGIN_TRANSACTION_RECORD,
    CLUSTER_LINK_CONFIG,
    CLUSTER_LINK_RECORD,
    CONFIG_RECORD,
    END_TRANSACTION_RECORD,
    MIRROR_ACTIVE,
    MIRROR_FAILED,
    MIRROR_FAILED_OVER,
    MIRROR_PARTITION_MARK,
    MIRROR_PAUSED,
    MIRROR_PENDING_FAILOVER,
    MIRROR_PENDING_PROMOTE,
    MIRROR_PROMOTED,
    MIRROR_SOURCE_DELETED,
    MIRROR_STATE_NAMES,
    MIRROR_TOPIC_RECORD,
    MIRROR_WRITABLE_STATES,
    PARTITION_CHANGE_RECORD,
    PRODUCER_IDS_RECORD,
    REMOVE_CLUSTER_LINK_RECORD,
    RESOURCE_TOPIC,
)
from controller.producer_origins import origin_of
from controller.topic_commands import (
    ClusterDefaults,
    CreatePartitionsSpec,
    CreateTopicSpec,
    plan_create_partitions,
    plan_create_topic,
)
from protocol.errors import ErrorCode
from protocol.messages.cluster_links import (
    LINK_CONFIG_DELETE,
    LINK_CONFIG_SET,
    MIRROR_OP_FAILOVER,
    MIRROR_OP_NAMES,
    MIRROR_OP_PAUSE,
    MIRROR_OP_PROMOTE,
    MIRROR_OP_RESUME,
)
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes
from storage.topic_config import TopicConfigError, validate_topic_configs

_CREATE = struct_classes(APIS_BY_NAME["CreateClusterLinks"].response)
_DESCRIBE = struct_classes(APIS_BY_NAME["DescribeClusterLinks"].response)
_DELETE = struct_classes(APIS_BY_NAME["DeleteClusterLinks"].response)
_ALTER = struct_classes(APIS_BY_NAME["AlterClusterLinks"].response)
_MIRRORS = struct_classes(APIS_BY_NAME["AlterMirrors"].response)
_STOPPED = struct_classes(APIS_BY_NAME["MirrorPartitionsStopped"].response)
_UPDATE = struct_classes(APIS_BY_NAME["UpdateMirrorTopic"].response)

LINK_NAME_MAX_CHARS = 249
_LEGAL_LINK_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
# Mirrors that still follow their source: their link cannot simply go, and
# their synced configs and partition count are the source's.
FOLLOWING_STATES = frozenset({MIRROR_ACTIVE, MIRROR_PAUSED, MIRROR_PENDING_PROMOTE, MIRROR_PENDING_FAILOVER})
PENDING_STATES = frozenset({MIRROR_PENDING_PROMOTE, MIRROR_PENDING_FAILOVER})
FINAL_STATE_OF = {MIRROR_PENDING_PROMOTE: MIRROR_PROMOTED, MIRROR_PENDING_FAILOVER: MIRROR_FAILED_OVER}
# The states a broker may move a mirror to with UpdateMirrorTopic.
BROKER_SET_STATES = frozenset({MIRROR_SOURCE_DELETED, MIRROR_FAILED})
LINK_DELETED_REASON = "link deleted"


def state_name(state: int) -> str:
    return MIRROR_STATE_NAMES.get(state, str(state))


def link_name_error(name: str | None) -> str | None:
    if not name:
        return "link name is empty"
    if name in (".", ".."):
        return f"link name cannot be {name!r}"
    if len(name) > LINK_NAME_MAX_CHARS:
        return f"link name is longer than {LINK_NAME_MAX_CHARS} characters"
    if not _LEGAL_LINK_NAME.match(name):
        return f"link name {name!r} contains characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


def link_record(link_id: uuid.UUID, name: str, configs: Mapping[str, str]):
    return CLUSTER_LINK_RECORD(
        link_id=link_id,
        link_name=name,
        configs=[CLUSTER_LINK_CONFIG.cls(name=k, value=v) for k, v in sorted(configs.items())],
    )


def mirror_record(mirror: MirrorTopic, *, state: int | None = None, reason: str | None = None, marks=None):
    """The MirrorTopicRecord of ``mirror`` with a new state, reason and marks (kept when not given)."""
    marks = mirror.partition_marks if marks is None else marks
    return MIRROR_TOPIC_RECORD(
        topic_id=mirror.topic_id,
        link_id=mirror.link_id,
        source_topic=mirror.source_topic,
        state=mirror.state if state is None else state,
        reason=reason,
        partition_marks=[
            MIRROR_PARTITION_MARK.cls(partition_id=p, offset=offset, last_epoch=epoch)
            for p, (offset, epoch) in sorted(marks.items())
        ],
    )


def _mirrors_of_link(image: MetadataImage, link_id: uuid.UUID) -> list[tuple[str, MirrorTopic]]:
    found = []
    for topic_id, mirror in image.mirror_topics.items():
        name = image.topic_names_by_id.get(topic_id)
        if mirror.link_id == link_id and name is not None:
            found.append((name, mirror))
    return sorted(found, key=lambda item: item[0])


# ----------------------------------------------------------------------------- links


class LinkSettingsRefused(Exception):
    """A link's requested settings refused: the error code and message of its result."""

    def __init__(self, error_code: ErrorCode, message: str):
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def new_link_configs(requested) -> dict[str, str]:
    """The checked settings of a new link from CreateClusterLinks' ``configs``
    entries (``name``, ``value``); LinkSettingsRefused naming the key."""
    given: dict[str, str] = {}
    for c in requested:
        if c.name in given:
            raise LinkSettingsRefused(ErrorCode.INVALID_CONFIG, f"{c.name}: given more than once")
        given[c.name] = c.value
    try:
        return validate_link_configs(given)
    except LinkConfigError as exc:
        raise LinkSettingsRefused(ErrorCode.INVALID_CONFIG, str(exc)) from None


def altered_link_configs(current: Mapping[str, str], changes) -> dict[str, str]:
    """A link's checked settings once AlterClusterLinks' ``changes`` (``name``,
    ``operation``, ``value``: SET or DELETE per key) apply to ``current``;
    LinkSettingsRefused naming the key. The receiving broker applies the same
    changes to check the result before the controller sees the request."""
    configs = dict(current)
    seen: set[str] = set()
    for op in changes:
        if op.name in seen:
            raise LinkSettingsRefused(ErrorCode.INVALID_REQUEST, f"{op.name}: altered more than once")
        seen.add(op.name)
        if op.operation == LINK_CONFIG_SET:
            if op.value is None:
                raise LinkSettingsRefused(ErrorCode.INVALID_CONFIG, f"{op.name}: a value is required")
            configs[op.name] = op.value
        elif op.operation == LINK_CONFIG_DELETE:
            if op.name == "bootstrap.servers":
                raise LinkSettingsRefused(
                    ErrorCode.INVALID_CONFIG, "bootstrap.servers: cannot be deleted (a link needs its source)"
                )
            configs.pop(op.name, None)
        else:
            raise LinkSettingsRefused(ErrorCode.INVALID_REQUEST, f"{op.name}: unknown operation {op.operation}")
    try:
        return validate_link_configs(configs)
    except LinkConfigError as exc:
        raise LinkSettingsRefused(ErrorCode.INVALID_CONFIG, str(exc)) from None


def plan_create_links(image: MetadataImage, request, new_uuid: Callable[[], uuid.UUID]):
    """(CreateClusterLinksResponse, records)."""
    results, records = [], []
    counts: dict[str, int] = {}
    for link in request.links:
        counts[link.link_name] = counts.get(link.link_name, 0) + 1
    taken = set(image.cluster_links)
    for link in request.links:
        def result(code, message=None, link_id=ZERO_UUID, name=link.link_name):
            return _CREATE.CreatableLinkResult(link_name=name, link_id=link_id, error_code=code, error_message=message)

        problem = link_name_error(link.link_name)
        if problem:
            results.append(result(ErrorCode.INVALID_REQUEST, problem))
            continue
        if counts[link.link_name] > 1:
            results.append(result(ErrorCode.INVALID_REQUEST, f"link {link.link_name} is named more than once"))
            continue
        if link.link_name in taken:
            results.append(result(ErrorCode.DUPLICATE_RESOURCE, f"cluster link {link.link_name} already exists"))
            continue
        try:
            configs = new_link_configs(link.configs)
        except LinkSettingsRefused as exc:
            results.append(result(exc.error_code, exc.message))
            continue
        link_id = new_uuid()
        results.append(result(ErrorCode.NONE, None, link_id))
        if not request.validate_only:
            records.append(link_record(link_id, link.link_name, configs))
    return _CREATE.CreateClusterLinksResponse(throttle_time_ms=0, results=results), records


def describe_links(image: MetadataImage, request):
    """DescribeClusterLinksResponse from the image; secrets come back as null values."""
    names = sorted(image.cluster_links) if request.link_names is None else list(dict.fromkeys(request.link_names))
    results = []
    for name in names:
        link = image.cluster_links.get(name)
        if link is None:
            results.append(_DESCRIBE.DescribedLink(
                link_name=name, link_id=ZERO_UUID, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message=f"cluster link {name} does not exist", configs=[], mirror_topics=[],
            ))
            continue
        results.append(_DESCRIBE.DescribedLink(
            link_name=name, link_id=link.link_id, error_code=ErrorCode.NONE, error_message=None,
            configs=[
                _DESCRIBE.DescribedLinkConfig(name=k, value=v, sensitive=s) for k, v, s in described_link_configs(link.configs)
            ],
            mirror_topics=[topic for topic, _ in _mirrors_of_link(image, link.link_id)],
        ))
    return _DESCRIBE.DescribeClusterLinksResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, results=results
    )


def plan_alter_links(image: MetadataImage, request):
    """(AlterClusterLinksResponse, records)."""
    results, records = [], []
    for altered in request.links:
        def result(code, message=None, name=altered.link_name):
            return _ALTER.AlterableLinkResult(link_name=name, error_code=code, error_message=message)

        link = image.cluster_links.get(altered.link_name)
        if link is None:
            results.append(result(ErrorCode.RESOURCE_NOT_FOUND, f"cluster link {altered.link_name} does not exist"))
            continue
        try:
            configs = altered_link_configs(link.configs, altered.configs)
        except LinkSettingsRefused as exc:
            results.append(result(exc.error_code, exc.message))
            continue
        results.append(result(ErrorCode.NONE))
        if configs != dict(link.configs) and not request.validate_only:
            records.append(link_record(link.link_id, link.name, configs))
    return _ALTER.AlterClusterLinksResponse(throttle_time_ms=0, results=results), records


def plan_delete_links(image: MetadataImage, request):
    """(DeleteClusterLinksResponse, records)."""
    results, records = [], []
    for name in dict.fromkeys(request.link_names):
        def result(code, message=None, name=name):
            return _DELETE.DeletedLinkResult(link_name=name, error_code=code, error_message=message)

        link = image.cluster_links.get(name)
        if link is None:
            results.append(result(ErrorCode.RESOURCE_NOT_FOUND, f"cluster link {name} does not exist"))
            continue
        following = [(topic, m) for topic, m in _mirrors_of_link(image, link.link_id) if m.state in FOLLOWING_STATES]
        if following and not request.force:
            listed = ", ".join(f"{topic} ({state_name(m.state)})" for topic, m in following)
            results.append(result(
                ErrorCode.INVALID_REQUEST,
                f"cluster link {name} has mirror topics that still follow it: {listed}; promote, fail over or "
                "delete them first, or delete the link with force (they become FAILED)",
            ))
            continue
        results.append(result(ErrorCode.NONE))
        if request.validate_only:
            continue
        for _, mirror in following:
            records.append(mirror_record(mirror, state=MIRROR_FAILED, reason=LINK_DELETED_REASON, marks={}))
        records.append(REMOVE_CLUSTER_LINK_RECORD(link_id=link.link_id))
    return _DELETE.DeleteClusterLinksResponse(throttle_time_ms=0, results=results), records


# ----------------------------------------------------------------------------- mirror topics


@dataclass
class MirrorSpec:
    """A mirror topic to create, with what the receiving broker read of its source topic."""

    mirror_topic: str
    link_name: str
    source_topic: str
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)  # the request's own (not synced) configs
    source_partitions: int = 0
    source_configs: dict[str, str] = field(default_factory=dict)  # every config the source reported


@dataclass
class MirrorResult:
    mirror_topic: str
    error_code: ErrorCode
    error_message: str | None = None
    topic_id: uuid.UUID = ZERO_UUID
    num_partitions: int = -1


def mirror_request_error(image: MetadataImage, mirror_topic: str, link_name: str, configs: Mapping[str, str]):
    """What can be said of a mirror creation before the source is asked: (code, message) or None."""
    if link_name not in image.cluster_links:
        return ErrorCode.RESOURCE_NOT_FOUND, f"cluster link {link_name} does not exist"
    if mirror_topic in image.topics:
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{mirror_topic}' already exists."
    synced = sorted(set(configs) & MIRROR_SYNCED_TOPIC_CONFIGS)
    if synced:
        return ErrorCode.INVALID_CONFIG, f"{synced[0]}: synced from the source topic; a mirror cannot set it"
    return None


def synced_configs(source_configs: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in source_configs.items() if k in MIRROR_SYNCED_TOPIC_CONFIGS and v is not None}


def plan_create_mirror(image: MetadataImage, spec: MirrorSpec, defaults: ClusterDefaults, new_topic_id: uuid.UUID):
    """(MirrorResult, records): the topic, its configs and its MirrorTopicRecord (ACTIVE),
    as one metadata transaction."""
    problem = mirror_request_error(image, spec.mirror_topic, spec.link_name, spec.configs)
    if problem is not None:
        return MirrorResult(spec.mirror_topic, *problem), []
    if spec.source_partitions < 1:
        return MirrorResult(
            spec.mirror_topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"source topic {spec.source_topic} has no partitions"
        ), []
    link = image.cluster_links[spec.link_name]
    topic_spec = CreateTopicSpec(
        name=spec.mirror_topic,
        num_partitions=spec.source_partitions,
        replication_factor=spec.replication_factor,
        configs={**synced_configs(spec.source_configs), **spec.configs},
    )
    created, topic_records = plan_create_topic(image, topic_spec, defaults, new_topic_id)
    if created.error_code != ErrorCode.NONE:
        return MirrorResult(spec.mirror_topic, created.error_code, created.error_message), []
    mirror = MirrorTopic(new_topic_id, link.link_id, spec.source_topic, MIRROR_ACTIVE)
    records = [
        BEGIN_TRANSACTION_RECORD(name=f"create mirror topic {spec.mirror_topic}"),
        *topic_records,
        mirror_record(mirror, marks={}),
        END_TRANSACTION_RECORD(),
    ]
    return MirrorResult(spec.mirror_topic, ErrorCode.NONE, None, new_topic_id, spec.source_partitions), records


@dataclass
class FailbackSpec:
    """An existing topic to make a mirror of ``source_topic`` again, with the
    marks (offset, epoch) by partition that the source's stopped mirror reported."""

    mirror_topic: str
    link_name: str
    source_topic: str
    marks: dict[int, tuple[int, int]] = field(default_factory=dict)


def failback_error(image: MetadataImage, mirror_topic: str, link_name: str):
    """What can be said of a failback before the source is asked: (code, message) or None."""
    if link_name not in image.cluster_links:
        return ErrorCode.RESOURCE_NOT_FOUND, f"cluster link {link_name} does not exist"
    if mirror_topic not in image.topics:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {mirror_topic} does not exist"
    mirror = image.mirror_of(mirror_topic)
    if mirror is not None and mirror.state in FOLLOWING_STATES:
        return ErrorCode.INVALID_REQUEST, (
            f"{mirror_topic} is already a mirror topic ({state_name(mirror.state)}); failback needs a writable topic"
        )
    return None


def plan_failback(image: MetadataImage, spec: FailbackSpec):
    """(MirrorResult, records): ``spec.mirror_topic`` becomes an ACTIVE mirror with the marks."""
    problem = failback_error(image, spec.mirror_topic, spec.link_name)
    if problem is not None:
        return MirrorResult(spec.mirror_topic, *problem), []
    topic = image.topics[spec.mirror_topic]
    if set(topic.partitions) != set(spec.marks):
        return MirrorResult(
            spec.mirror_topic, ErrorCode.INVALID_REQUEST,
            f"{spec.mirror_topic} has {len(topic.partitions)} partitions here and the source topic "
            f"{spec.source_topic} has {len(spec.marks)}: failback needs the same partitions",
        ), []
    link = image.cluster_links[spec.link_name]
    mirror = MirrorTopic(topic.topic_id, link.link_id, spec.source_topic, MIRROR_ACTIVE)
    records = [
        BEGIN_TRANSACTION_RECORD(name=f"failback of {spec.mirror_topic}"),
        mirror_record(mirror, reason=None, marks=spec.marks),
        *(
            PARTITION_CHANGE_RECORD(partition_id=p.partition_id, topic_id=topic.topic_id, leader=p.leader)
            for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id)
        ),
        END_TRANSACTION_RECORD(),
    ]
    return MirrorResult(spec.mirror_topic, ErrorCode.NONE, None, topic.topic_id, len(topic.partitions)), records


def _transition(mirror: MirrorTopic, operation: int) -> tuple[int | None, str | None]:
    """(new state, None) or (None, why not)."""
    state = mirror.state
    target = None
    if operation == MIRROR_OP_PAUSE and state == MIRROR_ACTIVE:
        target = MIRROR_PAUSED
    elif operation == MIRROR_OP_RESUME and state == MIRROR_PAUSED:
        target = MIRROR_ACTIVE
    elif operation == MIRROR_OP_PROMOTE and state in (MIRROR_ACTIVE, MIRROR_PAUSED):
        target = MIRROR_PENDING_PROMOTE
    elif operation == MIRROR_OP_PROMOTE and state == MIRROR_SOURCE_DELETED:
        target = MIRROR_PENDING_FAILOVER  # nothing left to catch up with
    elif operation == MIRROR_OP_FAILOVER and state not in MIRROR_WRITABLE_STATES | {MIRROR_PENDING_FAILOVER}:
        target = MIRROR_PENDING_FAILOVER
    if target is None:
        name = MIRROR_OP_NAMES.get(operation)
        if name is None:
            return None, f"unknown mirror operation {operation}"
        return None, f"cannot {name} a mirror topic in state {state_name(state)}"
    return target, None


def plan_alter_mirrors(image: MetadataImage, request):
    """(AlterMirrorsResponse, records)."""
    results, records = [], []
    for topic in dict.fromkeys(request.topics):
        def result(code, message=None, topic=topic):
            return _MIRRORS.AlterMirrorResult(mirror_topic=topic, error_code=code, error_message=message)

        if topic not in image.topics:
            results.append(result(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic} does not exist"))
            continue
        mirror = image.mirror_of(topic)
        if mirror is None:
            results.append(result(ErrorCode.INVALID_REQUEST, f"{topic} is not a mirror topic"))
            continue
        target, problem = _transition(mirror, request.operation)
        if problem is not None:
            results.append(result(ErrorCode.INVALID_REQUEST, f"{topic}: {problem}"))
            continue
        results.append(result(ErrorCode.NONE))
        if not request.validate_only:
            # Entering PENDING_* from a following state starts with no marks; a
            # failover of a pending promote keeps what partitions already reported.
            keep = mirror.state in PENDING_STATES
            records.append(mirror_record(mirror, state=target, reason=mirror.reason, marks=None if keep else {}))
    return _MIRRORS.AlterMirrorsResponse(throttle_time_ms=0, results=results), records


def _stopped_error(code: ErrorCode, message: str):
    return _STOPPED.MirrorPartitionsStoppedResponse(throttle_time_ms=0, error_code=code, error_message=message), []


def plan_mirror_partitions_stopped(image: MetadataImage, request, origin_id: int = 0):
    """(MirrorPartitionsStoppedResponse, records) for a partition leader's report.
    ``origin_id``: the active controller's cluster.link.origin.id; producer ids
    of another origin never meet the ids this cluster hands out, so only its
    own origin's move the next producer id."""
    sender = image.brokers.get(request.broker_id)
    if sender is None or sender.epoch != request.broker_epoch:
        return _stopped_error(ErrorCode.STALE_BROKER_EPOCH, f"broker {request.broker_id} is not registered at epoch {request.broker_epoch}")
    updates: dict[uuid.UUID, dict[int, tuple[int, int]]] = {}
    max_producer_id = -1
    for reported in request.topics:
        name = image.topic_names_by_id.get(reported.topic_id)
        mirror = image.mirror_topics.get(reported.topic_id)
        if name is None:
            return _stopped_error(ErrorCode.UNKNOWN_TOPIC_ID, f"topic id {reported.topic_id} does not exist")
        if mirror is None:
            return _stopped_error(ErrorCode.INVALID_REQUEST, f"{name} is not a mirror topic")
        if mirror.state in MIRROR_WRITABLE_STATES:
            continue  # already stopped everywhere: a late report
        if mirror.state not in PENDING_STATES:
            return _stopped_error(
                ErrorCode.INVALID_REQUEST, f"{name}: mirror is {state_name(mirror.state)}, not stopping (PENDING_*)"
            )
        partitions = image.topics[name].partitions
        marks = updates.setdefault(reported.topic_id, dict(mirror.partition_marks))
        for p in reported.partitions:
            partition = partitions.get(p.partition_index)
            where = f"{name}-{p.partition_index}"
            if partition is None:
                return _stopped_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{where} does not exist")
            if partition.leader != request.broker_id:
                return _stopped_error(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{where}: broker {request.broker_id} is not its leader ({partition.leader})"
                )
            if p.leader_epoch != partition.leader_epoch:
                code = ErrorCode.FENCED_LEADER_EPOCH if p.leader_epoch < partition.leader_epoch else ErrorCode.NOT_CONTROLLER
                return _stopped_error(code, f"{where}: leader epoch {p.leader_epoch}, the controller has {partition.leader_epoch}")
            if p.offset < 0:
                return _stopped_error(ErrorCode.INVALID_REQUEST, f"{where}: offset {p.offset} is negative")
            marks[p.partition_index] = (p.offset, p.last_epoch)
            max_producer_id = max(max_producer_id, p.max_producer_id)
    records = []
    for topic_id, marks in updates.items():
        mirror = image.mirror_topics[topic_id]
        partition_ids = set(image.topic_by_id(topic_id).partitions)
        if partition_ids <= set(marks):
            records.append(mirror_record(mirror, state=FINAL_STATE_OF[mirror.state], reason=mirror.reason, marks=marks))
        elif marks != dict(mirror.partition_marks):
            records.append(mirror_record(mirror, reason=mirror.reason, marks=marks))
    if max_producer_id >= image.next_producer_id and origin_of(max_producer_id) == origin_id:
        records.append(PRODUCER_IDS_RECORD(
            broker_id=request.broker_id, broker_epoch=request.broker_epoch, next_producer_id=max_producer_id + 1
        ))
    return _STOPPED.MirrorPartitionsStoppedResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None), records


def _update_error(code: ErrorCode, message: str):
    return _UPDATE.UpdateMirrorTopicResponse(throttle_time_ms=0, error_code=code, error_message=message), []


def plan_update_mirror_topic(image: MetadataImage, request, defaults: ClusterDefaults):
    """(UpdateMirrorTopicResponse, records) for what a broker saw of a mirror's source topic."""
    sender = image.brokers.get(request.broker_id)
    if sender is None or sender.epoch != request.broker_epoch:
        return _update_error(ErrorCode.STALE_BROKER_EPOCH, f"broker {request.broker_id} is not registered at epoch {request.broker_epoch}")
    name = image.topic_names_by_id.get(request.topic_id)
    if name is None:
        return _update_error(ErrorCode.UNKNOWN_TOPIC_ID, f"topic id {request.topic_id} does not exist")
    mirror = image.mirror_topics.get(request.topic_id)
    if mirror is None:
        return _update_error(ErrorCode.INVALID_REQUEST, f"{name} is not a mirror topic")
    if mirror.state != request.expected_state:
        return _update_error(
            ErrorCode.INVALID_UPDATE_VERSION,
            f"{name}: mirror is {state_name(mirror.state)}, not {state_name(request.expected_state)}",
        )
    records = []
    if request.state != -1 and request.state != mirror.state:
        if request.state not in BROKER_SET_STATES or mirror.state not in FOLLOWING_STATES:
            return _update_error(
                ErrorCode.INVALID_REQUEST,
                f"{name}: a broker cannot move a mirror from {state_name(mirror.state)} to {state_name(request.state)}",
            )
        records.append(mirror_record(mirror, state=request.state, reason=request.reason))
    topic = image.topics[name]
    if request.source_partition_count > len(topic.partitions):
        added, partition_records = plan_create_partitions(
            image, CreatePartitionsSpec(name, request.source_partition_count), defaults
        )
        if added.error_code != ErrorCode.NONE:
            return _update_error(added.error_code, added.error_message or added.error_code.name)
        records.extend(partition_records)
    if request.configs:
        not_synced = sorted({c.name for c in request.configs} - MIRROR_SYNCED_TOPIC_CONFIGS)
        if not_synced:
            return _update_error(ErrorCode.INVALID_CONFIG, f"{not_synced[0]}: not a synced topic config")
        current = dict(topic.configs)
        wanted = dict(current)
        for c in request.configs:
            if c.value is None:
                wanted.pop(c.name, None)
            else:
                wanted[c.name] = c.value
        try:
            wanted = validate_topic_configs(wanted)
        except TopicConfigError as exc:
            return _update_error(ErrorCode.INVALID_CONFIG, str(exc))
        records.extend(
            CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name=name, name=k, value=wanted.get(k))
            for k in sorted(set(current) | set(wanted))
            if current.get(k) != wanted.get(k)
        )
    response = _UPDATE.UpdateMirrorTopicResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None)
    if len(records) > 1:
        records = [BEGIN_TRANSACTION_RECORD(name=f"update mirror topic {name}"), *records, END_TRANSACTION_RECORD()]
    return response, records


# ----------------------------------------------------------------------------- what users may not do to a mirror


def mirror_config_refusal(image: MetadataImage, topic_name: str, config_names) -> str | None:
    """Why a user may not change these configs of ``topic_name`` (None: they may)."""
    mirror = image.mirror_of(topic_name)
    if mirror is None or mirror.state not in FOLLOWING_STATES:
        return None
    synced = sorted(set(config_names) & MIRROR_SYNCED_TOPIC_CONFIGS)
    if not synced:
        return None
    return (
        f"{synced[0]}: synced from the source topic of mirror topic {topic_name} "
        f"({state_name(mirror.state)}); it changes on the source, or here once the mirror is promoted or failed over"
    )


def mirror_partitions_refusal(image: MetadataImage, topic_name: str) -> str | None:
    """Why a user may not add partitions to ``topic_name`` (None: they may)."""
    mirror = image.mirror_of(topic_name)
    if mirror is None or mirror.state not in FOLLOWING_STATES:
        return None
    return (
        f"{topic_name} is a mirror topic ({state_name(mirror.state)}): its partitions follow the source topic's; "
        "add them on the source"
    )


def plan_create_mirrors(
    image: MetadataImage,
    specs: list[MirrorSpec],
    defaults: ClusterDefaults,
    new_uuid: Callable[[], uuid.UUID],
    *,
    validate_only: bool = False,
):
    """([MirrorResult], records): each mirror planned against the image the earlier
    ones leave; a topic named twice is INVALID_REQUEST (none of its copies is made)."""
    from controller.metadata.delta import apply_records
    from controller.metadata.records import record_api_key

    results, records = [], []
    planned = image
    counts: dict[str, int] = {}
    for spec in specs:
        counts[spec.mirror_topic] = counts.get(spec.mirror_topic, 0) + 1
    answered: set[str] = set()
    for spec in specs:
        if counts[spec.mirror_topic] > 1:
            if spec.mirror_topic not in answered:
                answered.add(spec.mirror_topic)
                results.append(MirrorResult(spec.mirror_topic, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
            continue
        result, mirror_records = plan_create_mirror(planned, spec, defaults, new_uuid())
        results.append(result)
        if mirror_records and not validate_only:
            records.extend(mirror_records)
            planned = apply_records(planned, [(record_api_key(r), r) for r in mirror_records], planned.offset)
    return results, records
