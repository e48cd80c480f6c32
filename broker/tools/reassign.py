"""``pybroker reassign``: move partitions to other brokers, as kafka-reassign-partitions.sh does.

The reassignment file is Kafka's JSON::

    {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3, 4]}]}

(``log_dirs`` may be given, as Kafka's tool writes it, but only with every
entry ``"any"``: moving replicas between a broker's log dirs is not
supported.)

* ``--execute`` prints the partitions' current assignment in the same JSON
  (save it to roll back), then asks the active controller, through the
  bootstrap broker, to start the moves (AlterPartitionReassignments). Like
  Kafka's tool it refuses while any reassignment is running in the cluster,
  unless ``--additional`` is given.
* ``--verify`` reports per partition whether its move is completed or still
  in progress (ListPartitionReassignments, then Metadata for the replica
  list); exit code 0 only when every one is completed.
* ``--cancel`` cancels the running moves of the file's partitions (a partition
  whose move already ended is left alone): they go back to their original
  replicas.

``--throttle BYTES_PER_SECOND`` (with ``--execute``) throttles the moves as
Kafka's tool does: the moved partitions' current replicas are listed in their
topic's ``leader.replication.throttled.replicas`` and the replicas being added
in ``follower.replication.throttled.replicas``, and the cluster-wide broker
configs ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate``
are set to the limit. ``--verify`` removes those settings once every move of
the file is completed.

It is a Kafka client like any other (the blocking connection of
broker/tools/client.py), so it works against Kafka brokers too.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from broker.tools.client import KafkaConnection, ToolError, parse_bootstrap
from controller.config_commands import OP_DELETE, OP_SET
from controller.metadata.records import RESOURCE_BROKER, RESOURCE_TOPIC
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from replication.throttle import (
    FOLLOWER_THROTTLED_RATE,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_RATE,
    LEADER_THROTTLED_REPLICAS,
)

_ALTER = struct_classes(APIS_BY_NAME["AlterPartitionReassignments"].request)
_LIST = struct_classes(APIS_BY_NAME["ListPartitionReassignments"].request)
_METADATA = struct_classes(APIS_BY_NAME["Metadata"].request)
_CONFIGS = struct_classes(APIS_BY_NAME["IncrementalAlterConfigs"].request)
THROTTLE_RATES = (LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE)
METADATA_VERSION = 9
SUPPORTED_FILE_VERSION = 1
# AlterPartitionReassignments v1 carries allow_replication_factor_change (KIP-860).
ALLOW_RF_CHANGE_VERSION = 1
REQUEST_TIMEOUT_MS = 30_000
# How long a request answered NOT_CONTROLLER (a controller failover) is retried.
NOT_CONTROLLER_RETRY_S = 0.5
ANY_LOG_DIR = "any"

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Move:
    topic: str
    partition: int
    replicas: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def parse_reassignment_json(text: str) -> list[Move]:
    """The moves of a reassignment file; ToolError naming the first problem."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolError(f"the reassignment file is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ToolError('the reassignment file must be a JSON object with a "partitions" list')
    version = document.get("version", SUPPORTED_FILE_VERSION)
    if version != SUPPORTED_FILE_VERSION:
        raise ToolError(f'the reassignment file has "version": {json.dumps(version)}; only version 1 is supported')
    partitions = document.get("partitions")
    if not isinstance(partitions, list):
        raise ToolError('the reassignment file has no "partitions" list')
    if not partitions:
        raise ToolError("the reassignment file lists no partitions")
    moves: list[Move] = []
    seen: set[TopicPartition] = set()
    for index, entry in enumerate(partitions):
        where = f"partitions[{index}]"
        if not isinstance(entry, dict):
            raise ToolError(f"{where} is not an object")
        topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise ToolError(f'{where} has no "topic" name')
        if not _is_int(partition) or partition < 0:
            raise ToolError(f'{where} ({topic}) has no valid "partition" number')
        name = f"{topic}-{partition}"
        if not isinstance(replicas, list) or not replicas or not all(_is_int(b) for b in replicas):
            raise ToolError(f'{name}: "replicas" must be a non-empty list of broker ids')
        if len(set(replicas)) != len(replicas):
            raise ToolError(f"{name}: the replicas {replicas} name a broker more than once")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None:
            if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
                raise ToolError(f'{name}: "log_dirs" must list one directory per replica')
            if any(d != ANY_LOG_DIR for d in log_dirs):
                raise ToolError(
                    f"{name}: moving replicas between log directories is not supported; "
                    'every "log_dirs" entry must be "any"'
                )
        if (topic, partition) in seen:
            raise ToolError(f"{name} is listed more than once")
        seen.add((topic, partition))
        moves.append(Move(topic, partition, tuple(replicas)))
    return moves


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def assignment_json(assignment: dict[TopicPartition, tuple[int, ...]]) -> str:
    """Partitions and replicas as a reassignment file (Kafka's layout, compact)."""
    document = {
        "version": SUPPORTED_FILE_VERSION,
        "partitions": [
            {
                "topic": topic,
                "partition": partition,
                "replicas": list(replicas),
                "log_dirs": [ANY_LOG_DIR] * len(replicas),
            }
            for (topic, partition), replicas in sorted(assignment.items())
        ],
    }
    return json.dumps(document, separators=(",", ":"))


def _names(moves) -> str:
    return ",".join(m.name for m in sorted(moves, key=lambda m: (m.topic, m.partition)))


class ReassignTool:
    def __init__(self, bootstrap: str, timeout_s: float = 30.0, settings=None):
        self._timeout_s = timeout_s
        host, port = parse_bootstrap(bootstrap)
        # settings: the --command-config ClientSettings (TLS, SASL), or None for plaintext.
        self._connection = KafkaConnection(host, port, timeout_s, settings)
        self._alter_version: int | None = None

    def close(self) -> None:
        self._connection.close()

    # -------------------------------------------------------------- requests

    def _negotiate(self) -> int:
        """The AlterPartitionReassignments version to use (the newest both know)."""
        if self._alter_version is None:
            response = self._connection.call("ApiVersions", 0)
            if response.error_code != ErrorCode.NONE:
                raise ToolError(f"ApiVersions failed: {_error_name(response.error_code)}")
            ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            wanted = APIS_BY_NAME["AlterPartitionReassignments"]
            supported = ranges.get(wanted.key)
            if supported is None or supported[0] > wanted.versions.high:
                raise ToolError("the broker does not support partition reassignment (AlterPartitionReassignments)")
            self._alter_version = min(supported[1], wanted.versions.high)
        return self._alter_version

    def _call_controller(self, api_name: str, version: int, **fields):
        """A request the active controller answers, asked again (bounded by the
        tool's timeout) while it answers NOT_CONTROLLER (a failover)."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            response = self._connection.call(api_name, version, **fields)
            if response.error_code != ErrorCode.NOT_CONTROLLER or time.monotonic() >= deadline:
                break
            time.sleep(NOT_CONTROLLER_RETRY_S)
        if response.error_code != ErrorCode.NONE:
            detail = f": {response.error_message}" if response.error_message else ""
            raise ToolError(f"{api_name} failed: {_error_name(response.error_code)}{detail}")
        return response

    def current_assignment(self, partitions: list[TopicPartition]) -> dict[TopicPartition, tuple[int, ...]]:
        """Each partition's replica list as the bootstrap broker's Metadata shows it;
        ToolError for an unknown topic or partition."""
        topics = sorted({t for t, _ in partitions})
        metadata = self._connection.call(
            "Metadata", METADATA_VERSION, topics=[_METADATA.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        )
        known: dict[TopicPartition, tuple[int, ...]] = {}
        for topic in metadata.topics:
            if topic.error_code != ErrorCode.NONE:
                raise ToolError(f"topic {topic.name}: {_error_name(topic.error_code)}")
            for p in topic.partitions:
                known[(topic.name, p.partition_index)] = tuple(p.replica_nodes)
        missing = [f"{t}-{p}" for t, p in partitions if (t, p) not in known]
        if missing:
            raise ToolError(f"no such partition: {', '.join(missing)}")
        return {tp: known[tp] for tp in partitions}

    def ongoing(self, partitions: list[TopicPartition] | None) -> dict[TopicPartition, tuple]:
        """{partition: (replicas, adding, removing)} of the running reassignments
        (of every partition when ``partitions`` is None)."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            topics = [
                _LIST.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()
            ]
        response = self._call_controller("ListPartitionReassignments", 0, timeout_ms=REQUEST_TIMEOUT_MS, topics=topics)
        return {
            (t.name, p.partition_index): (tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
            for t in response.topics
            for p in t.partitions
        }

    def alter(
        self, targets: dict[TopicPartition, tuple[int, ...] | None], *, allow_replication_factor_change: bool = True
    ):
        """AlterPartitionReassignments; {partition: (error name, message)} of the refused ones."""
        version = self._negotiate()
        if not allow_replication_factor_change and version < ALLOW_RF_CHANGE_VERSION:
            raise ToolError(
                "the broker cannot refuse replication factor changes (it lacks AlterPartitionReassignments v1)"
            )
        by_topic: dict[str, list] = {}
        for (topic, partition), replicas in sorted(targets.items()):
            target = None if replicas is None else list(replicas)
            entry = _ALTER.ReassignablePartition(partition_index=partition, replicas=target)
            by_topic.setdefault(topic, []).append(entry)
        fields = {}
        if version >= ALLOW_RF_CHANGE_VERSION:
            fields["allow_replication_factor_change"] = allow_replication_factor_change
        response = self._call_controller(
            "AlterPartitionReassignments",
            version,
            timeout_ms=REQUEST_TIMEOUT_MS,
            topics=[_ALTER.ReassignableTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
            **fields,
        )
        return {
            (t.name, p.partition_index): (_error_name(p.error_code), p.error_message)
            for t in response.responses
            for p in t.partitions
            if p.error_code != ErrorCode.NONE
        }

    def alter_configs(self, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]]) -> None:
        """IncrementalAlterConfigs of (resource type, name, [(key, op, value)]);
        ToolError naming the first resource refused."""
        response = self._connection.call(
            "IncrementalAlterConfigs", 1,
            resources=[
                _CONFIGS.AlterConfigsResource(
                    resource_type=kind, resource_name=name,
                    configs=[_CONFIGS.AlterableConfig(name=key, config_operation=op, value=value) for key, op, value in ops],
                )
                for kind, name, ops in resources
            ],
            validate_only=False,
        )
        for result in response.responses:
            if result.error_code != ErrorCode.NONE:
                what = "topic" if result.resource_type == RESOURCE_TOPIC else "broker"
                detail = f": {result.error_message}" if result.error_message else ""
                raise ToolError(
                    f"setting the throttle on {what} {result.resource_name or '(cluster default)'} failed: "
                    f"{_error_name(result.error_code)}{detail}"
                )

    def set_throttle(self, moves: list[Move], current: dict[TopicPartition, tuple[int, ...]], rate_bytes_per_s: int) -> None:
        leaders: dict[str, list[str]] = {}
        followers: dict[str, list[str]] = {}
        for move in moves:
            existing = current[(move.topic, move.partition)]
            leaders.setdefault(move.topic, []).extend(f"{move.partition}:{b}" for b in existing)
            followers.setdefault(move.topic, []).extend(f"{move.partition}:{b}" for b in move.replicas if b not in existing)
        resources = [(RESOURCE_BROKER, "", [(key, OP_SET, str(rate_bytes_per_s)) for key in THROTTLE_RATES])]
        for topic in sorted(leaders):
            ops = [(LEADER_THROTTLED_REPLICAS, OP_SET, ",".join(leaders[topic]))]
            if followers[topic]:
                ops.append((FOLLOWER_THROTTLED_REPLICAS, OP_SET, ",".join(followers[topic])))
            resources.append((RESOURCE_TOPIC, topic, ops))
        self.alter_configs(resources)

    def remove_throttle(self, moves: list[Move]) -> None:
        resources = [(RESOURCE_BROKER, "", [(key, OP_DELETE, None) for key in THROTTLE_RATES])]
        for topic in sorted({m.topic for m in moves}):
            resources.append(
                (RESOURCE_TOPIC, topic, [(LEADER_THROTTLED_REPLICAS, OP_DELETE, None), (FOLLOWER_THROTTLED_REPLICAS, OP_DELETE, None)])
            )
        self.alter_configs(resources)

    # -------------------------------------------------------------- commands

    def execute(
        self, moves: list[Move], out, *, additional: bool, allow_replication_factor_change: bool = True,
        throttle_bytes_per_s: int | None = None,
    ) -> None:
        """Start the moves, printing with ``out`` as it goes (the current assignment
        first, so it is there to roll back with even when the start fails);
        ToolError when anything is refused."""
        current = self.current_assignment([(m.topic, m.partition) for m in moves])
        if not additional and self.ongoing(None):
            raise ToolError(
                "cannot execute because there is an existing partition reassignment; use --additional to start "
                "this one as well (partitions of the running one are then reassigned anew)"
            )
        for line in (
            "Current partition replica assignment",
            "",
            assignment_json(current),
            "",
            "Save this to use as the --reassignment-json-file option during rollback",
        ):
            out(line)
        if throttle_bytes_per_s is not None:
            # Before the moves start, so no byte of them goes unthrottled.
            self.set_throttle(moves, current, throttle_bytes_per_s)
            out(
                "Warning: You must run --verify periodically, until the reassignment completes, "
                "to ensure the throttle is removed."
            )
            out(f"The inter-broker throttle limit was set to {throttle_bytes_per_s} B/s")
        targets = {(m.topic, m.partition): m.replicas for m in moves}
        refused = self.alter(targets, allow_replication_factor_change=allow_replication_factor_change)
        if refused:
            raise ToolError(_refusals(refused))
        out(f"Successfully started partition reassignments for {_names(moves)}")

    def verify(self, moves: list[Move]) -> tuple[list[str], bool]:
        """(the lines to print, whether every move is completed)."""
        partitions = [(m.topic, m.partition) for m in moves]
        running = self.ongoing(partitions)
        current = self.current_assignment(partitions)
        lines = ["Status of partition reassignment:"]
        done = True
        for move in moves:
            key = (move.topic, move.partition)
            if key in running:
                lines.append(f"Reassignment of partition {move.name} is still in progress.")
                done = False
            elif current[key] == move.replicas:
                lines.append(f"Reassignment of partition {move.name} is completed.")
            else:
                lines.append(
                    f"There is no active reassignment of partition {move.name}, but replica set is "
                    f"{list(current[key])} rather than {list(move.replicas)}."
                )
                done = False
        if done:
            # Kafka's tool clears the throttles once the moves it set them for are over.
            self.remove_throttle(moves)
            lines.append("Clearing broker-level throttles")
            lines.append("Clearing topic-level throttles")
        return lines, done

    def cancel(self, moves: list[Move]) -> list[str]:
        partitions = [(m.topic, m.partition) for m in moves]
        running = self.ongoing(partitions)
        active = [m for m in moves if (m.topic, m.partition) in running]
        if not active:
            return ["None of the specified partition reassignments are active."]
        refused = self.alter({(m.topic, m.partition): None for m in active})
        if refused:
            raise ToolError(_refusals(refused))
        return [f"Successfully cancelled partition reassignments for: {_names(active)}"]


def _refusals(refused: dict[TopicPartition, tuple[str, str | None]]) -> str:
    return "; ".join(
        f"{topic}-{partition}: {error}" + (f": {message}" if message else "")
        for (topic, partition), (error, message) in sorted(refused.items())
    )


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
