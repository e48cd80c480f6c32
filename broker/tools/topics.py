"""``pybroker topics``: create, list, describe, alter and delete topics, as kafka-topics.sh does.

- ``--create --topic T [--partitions N] [--replication-factor R | --replica-assignment
  0:1,1:2] [--config k=v ...] [--if-not-exists]``: CreateTopics; prints
  ``Created topic T.``. Without ``--partitions``/``--replication-factor`` the
  broker's defaults apply (-1 on the wire).
- ``--list [--topic REGEX] [--exclude-internal]``: one name a line, sorted.
- ``--describe [--topic REGEX | --topic-id ID] [--exclude-internal]`` and the
  partition filters ``--under-replicated-partitions`` (ISR smaller than the
  replicas), ``--unavailable-partitions`` (no leader, or a leader not among the
  live brokers), ``--under-min-isr-partitions`` / ``--at-min-isr-partitions``
  (ISR below / equal to the topic's ``min.insync.replicas``): Kafka's lines,
  a topic line ``Topic: t<TAB>TopicId: ...<TAB>PartitionCount: n<TAB>
  ReplicationFactor: r<TAB>Configs: k=v,...`` (configs whose source is not
  Kafka's default) then one ``<TAB>Topic: t<TAB>Partition: p<TAB>Leader: l<TAB>
  Replicas: a,b<TAB>Isr: a,b`` line per partition (``<TAB>Offline: ...`` when a
  replica is offline). With a partition filter only the matching partition
  lines are printed, as Kafka does. ``--topics-with-overrides``: only the topic
  line of topics that have a config not at Kafka's default (the ``Configs:``
  they show is not empty), no partition lines.
- ``--alter --topic REGEX --partitions N [--replica-assignment ...]``:
  CreatePartitions (the assignment lists every partition; the new ones are
  taken from its tail, as Kafka does).
- ``--delete --topic REGEX [--if-exists]``: DeleteTopics.

``--topic`` is a regular expression matched against the whole name for
list/describe/alter/delete (a comma separates alternatives, as Kafka's include
list); naming no existing topic is an error unless ``--if-exists``.
``--output json`` (list, describe) prints ``{"topics": [...]}``.
"""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass, field

from broker.tools.client import NotFound, Refused, ToolClient, ToolError
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

_METADATA = struct_classes(APIS_BY_NAME["Metadata"].request)
_CREATE = struct_classes(APIS_BY_NAME["CreateTopics"].request)
_PARTITIONS = struct_classes(APIS_BY_NAME["CreatePartitions"].request)
_DESCRIBE_CONFIGS = struct_classes(APIS_BY_NAME["DescribeConfigs"].request)
METADATA_VERSION = 12
CREATE_TOPICS_VERSION = 7
CREATE_PARTITIONS_VERSION = 3
DELETE_TOPICS_VERSION = 5
DESCRIBE_CONFIGS_VERSION = 4
RESOURCE_TOPIC = 2
CONFIG_SOURCE_DEFAULT = 5
REQUEST_TIMEOUT_MS = 30_000
ZERO_UUID = uuid.UUID(int=0)


def format_uuid(value: uuid.UUID | None) -> str:
    """Kafka's Uuid.toString: the 16 bytes in URL-safe base64 without padding."""
    return base64.urlsafe_b64encode((value or ZERO_UUID).bytes).decode().rstrip("=")


def parse_uuid(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise ToolError(f"--topic-id: {text!r} is not a topic id (22 characters of URL-safe base64)")
    return uuid.UUID(bytes=raw)


def error_text(code: int, message: str | None = None) -> str:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
    return f"{name}: {message}" if message else name


@dataclass
class PartitionInfo:
    partition: int
    leader: int  # -1: none
    replicas: list[int]
    isr: list[int]
    offline: list[int]


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: list[PartitionInfo]
    configs: dict[str, str] = field(default_factory=dict)
    min_isr: int = 1


@dataclass
class ClusterMetadata:
    brokers: dict[int, tuple[str, int]]
    topics: dict[str, TopicInfo]
    controller_id: int
    cluster_id: str | None


def fetch_metadata(client: ToolClient, names: list[str] | None = None, topic_id: uuid.UUID | None = None,
                   allow_auto_create: bool = False) -> ClusterMetadata:
    """Brokers and topics (None: every topic) as the bootstrap broker knows them.

    ``allow_auto_create``: ask the broker to create missing topics as a producer
    does (it does so only when its auto.create.topics.enable says so)."""
    if topic_id is not None:
        wanted = [_METADATA.MetadataRequestTopic(topic_id=topic_id, name=None)]
    elif names is None:
        wanted = None
    else:
        wanted = [_METADATA.MetadataRequestTopic(topic_id=ZERO_UUID, name=n) for n in names]
    response = client.bootstrap_connection().call(
        "Metadata", METADATA_VERSION, topics=wanted, allow_auto_topic_creation=allow_auto_create,
        include_topic_authorized_operations=False,
    )
    brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
    topics = {}
    for t in response.topics:
        if t.error_code != ErrorCode.NONE:
            if t.error_code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                                ErrorCode.LEADER_NOT_AVAILABLE):
                continue  # absent (or being created): the caller decides whether that is an error
            raise Refused(f"Metadata for topic {t.name or format_uuid(t.topic_id)}: {error_text(t.error_code)}")
        partitions = sorted(
            (PartitionInfo(p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes), list(p.offline_replicas))
             for p in t.partitions),
            key=lambda p: p.partition,
        )
        topics[t.name] = TopicInfo(t.name, t.topic_id, t.is_internal, partitions)
    return ClusterMetadata(brokers, topics, response.controller_id, response.cluster_id)


def topic_filter(pattern: str | None):
    """Kafka's include list: a regex over the whole name; commas separate alternatives."""
    if pattern is None:
        return lambda name: True
    try:
        compiled = re.compile(pattern.replace(",", "|"))
    except re.error as exc:
        raise ToolError(f"--topic: {pattern!r} is not a regular expression: {exc}") from None
    return lambda name: compiled.fullmatch(name) is not None


def parse_replica_assignment(text: str) -> list[list[int]]:
    """``0:1:2,1:2:0``: per partition, its replicas' broker ids."""
    assignment = []
    for number, part in enumerate(text.split(",")):
        try:
            replicas = [int(b) for b in part.split(":")]
        except ValueError:
            raise ToolError(f"--replica-assignment: partition {number}: {part!r} is not broker ids separated by ':'") from None
        if len(set(replicas)) != len(replicas):
            raise ToolError(f"--replica-assignment: partition {number} names a broker twice: {part}")
        assignment.append(replicas)
    if len({len(r) for r in assignment}) != 1:
        raise ToolError("--replica-assignment: every partition needs the same number of replicas")
    return assignment


def parse_configs(pairs: list[str] | None) -> dict[str, str]:
    configs = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ToolError(f"--config expects key=value, got {pair!r}")
        configs[key.strip()] = value.strip()
    return configs


class TopicsTool(ToolClient):

    def create(self, name: str, partitions: int | None, replication_factor: int | None,
               assignment: list[list[int]] | None, configs: dict[str, str], if_not_exists: bool) -> bool:
        """True when created; False when it existed and ``if_not_exists``."""
        if assignment is not None and (partitions is not None or replication_factor is not None):
            raise ToolError("--replica-assignment goes without --partitions and --replication-factor")
        topic = _CREATE.CreatableTopic(
            name=name,
            num_partitions=-1 if assignment is not None else (partitions if partitions is not None else -1),
            replication_factor=-1 if assignment is not None else (replication_factor if replication_factor is not None else -1),
            assignments=[
                _CREATE.CreatableReplicaAssignment(partition_index=i, broker_ids=replicas)
                for i, replicas in enumerate(assignment or [])
            ],
            configs=[_CREATE.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
        )
        response = self.bootstrap_connection().call(
            "CreateTopics", CREATE_TOPICS_VERSION, topics=[topic], timeout_ms=REQUEST_TIMEOUT_MS, validate_only=False
        )
        result = response.topics[0]
        if result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and if_not_exists:
            return False
        if result.error_code != ErrorCode.NONE:
            raise Refused(f"cannot create topic {name!r}: {error_text(result.error_code, result.error_message)}")
        return True

    def matching(self, pattern: str | None, exclude_internal: bool, if_exists: bool,
                 topic_id: uuid.UUID | None = None, listing: bool = False) -> ClusterMetadata:
        """The cluster metadata with only the topics ``pattern`` (or ``topic_id``) names.

        Naming nothing that exists is NotFound unless ``if_exists`` or a plain listing."""
        metadata = fetch_metadata(self, topic_id=topic_id)
        accept = topic_filter(pattern)
        metadata.topics = {
            n: t for n, t in sorted(metadata.topics.items())
            if accept(n) and not (exclude_internal and t.internal)
        }
        if not metadata.topics and not if_exists and not listing and (pattern is not None or topic_id is not None):
            named = f"Topic '{pattern}'" if topic_id is None else f"Topic id '{format_uuid(topic_id)}'"
            raise NotFound(f"{named} does not exist as expected")
        return metadata

    def load_configs(self, topics: list[TopicInfo]) -> None:
        """Fill each topic's non-default configs and its min.insync.replicas (DescribeConfigs)."""
        if not topics:
            return
        response = self.bootstrap_connection().call(
            "DescribeConfigs", DESCRIBE_CONFIGS_VERSION,
            resources=[
                _DESCRIBE_CONFIGS.DescribeConfigsResource(resource_type=RESOURCE_TOPIC, resource_name=t.name, configuration_keys=None)
                for t in topics
            ],
            include_synonyms=False, include_documentation=False,
        )
        by_name = {t.name: t for t in topics}
        for result in response.results:
            topic = by_name.get(result.resource_name)
            if topic is None:
                continue
            if result.error_code != ErrorCode.NONE:
                raise Refused(f"DescribeConfigs of topic {topic.name!r}: {error_text(result.error_code, result.error_message)}")
            for entry in result.configs:
                if entry.name == "min.insync.replicas" and entry.value is not None and entry.value.isdigit():
                    topic.min_isr = int(entry.value)
                if entry.config_source != CONFIG_SOURCE_DEFAULT:
                    topic.configs[entry.name] = "" if entry.value is None else entry.value
            topic.configs = dict(sorted(topic.configs.items()))

    def alter_partitions(self, metadata: ClusterMetadata, count: int, assignment: list[list[int]] | None) -> None:
        requests = []
        for topic in metadata.topics.values():
            existing = len(topic.partitions)
            if count <= existing:
                raise Refused(f"topic {topic.name!r} has {existing} partitions: --partitions must be more than that")
            new = None
            if assignment is not None:
                if len(assignment) < count:
                    raise ToolError(f"--replica-assignment lists {len(assignment)} partitions, --partitions wants {count}")
                new = [_PARTITIONS.CreatePartitionsAssignment(broker_ids=r) for r in assignment[existing:count]]
            requests.append(_PARTITIONS.CreatePartitionsTopic(name=topic.name, count=count, assignments=new))
        response = self.bootstrap_connection().call(
            "CreatePartitions", CREATE_PARTITIONS_VERSION, topics=requests, timeout_ms=REQUEST_TIMEOUT_MS, validate_only=False
        )
        failed = [f"{r.name}: {error_text(r.error_code, r.error_message)}" for r in response.results if r.error_code != ErrorCode.NONE]
        if failed:
            raise Refused("cannot add partitions: " + "; ".join(failed))

    def delete(self, names: list[str]) -> None:
        response = self.bootstrap_connection().call(
            "DeleteTopics", DELETE_TOPICS_VERSION, topic_names=names, timeout_ms=REQUEST_TIMEOUT_MS
        )
        failed = [f"{r.name}: {error_text(r.error_code, r.error_message)}" for r in response.responses if r.error_code != ErrorCode.NONE]
        if failed:
            raise Refused("cannot delete topic " + "; ".join(failed))


# ---------------------------------------------------------------------- output

PARTITION_FILTERS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions", "at_min_isr_partitions")


def partition_selected(p: PartitionInfo, topic: TopicInfo, live: set[int], wanted: set[str]) -> bool:
    """Whether one partition passes the --*-partitions filters given (none given: all pass)."""
    if not wanted:
        return True
    has_leader = p.leader >= 0
    checks = {
        "under_replicated_partitions": has_leader and len(p.isr) < len(p.replicas),
        "unavailable_partitions": not has_leader or p.leader not in live,
        "under_min_isr_partitions": has_leader and len(p.isr) < topic.min_isr,
        "at_min_isr_partitions": has_leader and len(p.isr) == topic.min_isr,
    }
    return any(checks[name] for name in wanted)


def _ids(values: list[int]) -> str:
    return ",".join(str(v) for v in values)


def describe_lines(metadata: ClusterMetadata, wanted: set[str], overrides_only: bool = False) -> list[str]:
    """Kafka's describe lines. ``overrides_only`` (--topics-with-overrides): only the topic line of
    topics with a config whose source is not the default, no partition lines, as Kafka prints."""
    live = set(metadata.brokers)
    lines = []
    for topic in metadata.topics.values():
        if overrides_only and not topic.configs:
            continue
        if not wanted:
            factor = len(topic.partitions[0].replicas) if topic.partitions else 0
            configs = ",".join(f"{k}={v}" for k, v in topic.configs.items())
            lines.append(
                f"Topic: {topic.name}\tTopicId: {format_uuid(topic.topic_id)}\tPartitionCount: {len(topic.partitions)}"
                f"\tReplicationFactor: {factor}\tConfigs: {configs}"
            )
        for p in topic.partitions:
            if overrides_only or not partition_selected(p, topic, live, wanted):
                continue
            leader = str(p.leader) if p.leader >= 0 else "none"
            line = f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {leader}\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
            if p.offline:
                line += f"\tOffline: {_ids(p.offline)}"
            lines.append(line)
    return lines


def describe_json(metadata: ClusterMetadata, wanted: set[str], overrides_only: bool = False) -> dict:
    live = set(metadata.brokers)
    return {
        "topics": [
            {
                "name": t.name,
                "topic_id": format_uuid(t.topic_id),
                "partitions": [
                    {"partition": p.partition, "leader": p.leader if p.leader >= 0 else None,
                     "replicas": p.replicas, "isr": p.isr}
                    for p in t.partitions
                    if partition_selected(p, t, live, wanted)
                ],
                "configs": t.configs,
            }
            for t in metadata.topics.values()
            if t.configs or not overrides_only
        ]
    }


def list_json(metadata: ClusterMetadata) -> dict:
    return {"topics": [{"name": t.name, "topic_id": format_uuid(t.topic_id), "internal": t.internal} for t in metadata.topics.values()]}
