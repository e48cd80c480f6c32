"""Config changes as pure functions: (image, change) -> (result, records).

Like controller.topic_commands, nothing here does IO: the controller writes
the ConfigRecords to the metadata log and only then applies them to its image.

Two request styles share one planner:

- IncrementalAlterConfigs: each entry is SET, DELETE, APPEND or SUBTRACT of
  one key; keys not named keep their value. APPEND/SUBTRACT only apply to
  LIST-typed configs (``cleanup.policy``) and start from the key's default when
  the topic has no override.
- AlterConfigs (legacy): the entries are the resource's new complete set of
  overrides; every override not named is deleted.

Checks, in Kafka's order: duplicate keys and null values (INVALID_REQUEST),
the resource type and name, APPEND/SUBTRACT on a non-LIST key (INVALID_CONFIG),
the resulting overrides (INVALID_CONFIG), and last that the topic exists
(UNKNOWN_TOPIC_OR_PARTITION). A resource that fails changes nothing; one
record is written per key whose stored value changes (value None deletes).

BROKER resources (one broker's id, or "" for the cluster-wide default) accept
only the dynamic broker configs pybroker acts on at run time
(controller.dynamic_broker_configs: the topic-config defaults such as
``log.retention.ms`` and ``message.max.bytes``, ``unclean.leader.election.enable``
cluster-wide, the replication throttle rates); any other key, and any value
that does not parse, is refused with INVALID_REQUEST (Kafka's answer for broker
configs) rather than stored and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.dynamic_broker_configs import (
    THROTTLE_RATE_CONFIGS,
    DynamicConfigRefused,
    check_names,
    is_list_broker_config,
    is_listener_tls_config,
    list_default,
    validate_value,
)
from controller.link_commands import mirror_config_refusal
from controller.metadata.image import MetadataImage
from controller.metadata.records import CONFIG_RECORD, RESOURCE_BROKER, RESOURCE_TOPIC
from controller.topic_commands import topic_name_error
from protocol.errors import ErrorCode
from storage.topic_config import TOPIC_CONFIG_KEYS, TopicConfigError, is_list_config, validate_topic_configs

OP_SET = 0
OP_DELETE = 1
OP_APPEND = 2
OP_SUBTRACT = 3
OP_NAMES = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}

# ConfigResource types (Kafka's ConfigResource.Type ids) besides TOPIC and BROKER.
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32
_UNSUPPORTED_KNOWN_TYPES = {RESOURCE_CLIENT_METRICS: "CLIENT_METRICS", RESOURCE_GROUP: "GROUP"}

# The dynamic-only broker configs (no server.properties key): the replication
# throttle rates (bytes/s, Kafka's LONG with Long.MAX_VALUE meaning no limit).
DYNAMIC_BROKER_CONFIGS = THROTTLE_RATE_CONFIGS


@dataclass(frozen=True)
class ConfigOp:
    name: str
    op: int  # OP_SET .. OP_SUBTRACT; legacy AlterConfigs entries are OP_SET
    value: str | None


@dataclass
class ConfigChange:
    """One resource of an (Incremental)AlterConfigs request."""

    resource_type: int
    resource_name: str
    ops: list[ConfigOp] = field(default_factory=list)


@dataclass
class AlterConfigsResult:
    resource_type: int
    resource_name: str
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _check_resource(change: ConfigChange, *, incremental: bool, local_node_id: int | None) -> None:
    kind, name = change.resource_type, change.resource_name
    if kind == RESOURCE_TOPIC:
        if not name:
            raise _Refused(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
        problem = topic_name_error(name)
        if problem:
            raise _Refused(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        return
    if kind == RESOURCE_BROKER:
        if name:
            try:
                node_id = int(name)
            except ValueError:
                raise _Refused(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}") from None
            # None: the request was forwarded by the broker it named, which checked.
            if local_node_id is not None and node_id != local_node_id:
                raise _Refused(
                    ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {local_node_id}, but received {name}"
                )
        # Deletes are not checked: Kafka validates only the values that remain.
        set_names = [op.name for op in change.ops if not (incremental and op.op == OP_DELETE)]
        try:
            check_names(set_names, cluster_wide=not name)
        except DynamicConfigRefused as exc:
            raise _Refused(ErrorCode.INVALID_REQUEST, str(exc)) from None
        return
    if kind == RESOURCE_BROKER_LOGGER and incremental:
        raise _Refused(
            ErrorCode.INVALID_REQUEST,
            "Changing broker log levels (BROKER_LOGGER resources) is not supported by pybroker.",
        )
    if kind in _UNSUPPORTED_KNOWN_TYPES:
        raise _Refused(
            ErrorCode.INVALID_REQUEST, f"{_UNSUPPORTED_KNOWN_TYPES[kind]} configs are not supported by pybroker."
        )
    # Legacy AlterConfigs never supported BROKER_LOGGER: Kafka answers it as unknown too.
    raise _Refused(ErrorCode.INVALID_REQUEST, f"Unknown resource type {kind}")


def _list_parts(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _apply_ops(
    current: dict[str, str], ops: list[ConfigOp], *, incremental: bool, broker: bool = False
) -> dict[str, str | None]:
    """The overrides after the request (values not yet validated)."""
    if not incremental:
        return {op.name: op.value for op in ops}
    new: dict[str, str | None] = dict(current)
    for op in ops:
        if op.op == OP_SET:
            new[op.name] = op.value
        elif op.op == OP_DELETE:
            new.pop(op.name, None)
        else:  # APPEND / SUBTRACT
            if not (is_list_broker_config(op.name) if broker else is_list_config(op.name)):
                raise _Refused(
                    ErrorCode.INVALID_CONFIG, f"Can't {OP_NAMES[op.op]} to key {op.name} because its type is not LIST."
                )
            start = new.get(op.name)
            if start is None:
                start = list_default(op.name) if broker else TOPIC_CONFIG_KEYS[op.name].default
            parts = _list_parts(start)
            for item in _list_parts(op.value):
                if op.op == OP_APPEND and item not in parts:
                    parts.append(item)
                elif op.op == OP_SUBTRACT and item in parts:
                    parts.remove(item)
            new[op.name] = ",".join(parts)
    return new


def plan_alter_configs(image: MetadataImage, change: ConfigChange, *, incremental: bool, local_node_id: int | None):
    """Validate one resource's change; returns (result, records). Records are empty on error
    and when nothing changes."""
    result = AlterConfigsResult(change.resource_type, change.resource_name)
    try:
        names = [op.name for op in change.ops]
        if len(set(names)) != len(names):
            raise _Refused(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        nulls = [op.name for op in change.ops if op.value is None and not (incremental and op.op == OP_DELETE)]
        if nulls:
            raise _Refused(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
        unknown_ops = sorted({op.op for op in change.ops if op.op not in OP_NAMES})
        if incremental and unknown_ops:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Unknown operation type {unknown_ops[0]}")
        _check_resource(change, incremental=incremental, local_node_id=local_node_id)
        if change.resource_type == RESOURCE_BROKER:
            return _plan_broker_configs(image, change, result, incremental=incremental)
        topic = image.topics.get(change.resource_name)
        current = dict(topic.configs) if topic is not None else {}
        wanted = _apply_ops(current, change.ops, incremental=incremental)
        # A mirror's synced configs are its source's (AlterConfigs replaces
        # every config, so a synced one it leaves out or changes counts too).
        touched = {name for name in set(current) | set(wanted) if current.get(name) != wanted.get(name)}
        mirror_problem = mirror_config_refusal(image, change.resource_name, touched)
        if mirror_problem is not None:
            raise _Refused(ErrorCode.INVALID_CONFIG, mirror_problem)
        try:
            validated = validate_topic_configs(wanted)
        except TopicConfigError as exc:
            raise _Refused(ErrorCode.INVALID_CONFIG, str(exc)) from None
        if topic is None:
            raise _Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{change.resource_name}' does not exist.")
    except _Refused as refused:
        result.error_code, result.error_message = refused.code, refused.message
        return result, []
    return result, _config_records(RESOURCE_TOPIC, change.resource_name, current, validated)


def _plan_broker_configs(image: MetadataImage, change: ConfigChange, result, *, incremental: bool):
    current = dict(image.configs_of(RESOURCE_BROKER, change.resource_name))
    try:
        wanted = _apply_ops(current, change.ops, incremental=incremental, broker=True)
        changed = {op.name for op in change.ops}
        validated = {}
        for name, raw in wanted.items():
            if name not in changed:
                validated[name] = raw  # stored before: kept as it is
                continue
            try:
                validated[name] = validate_value(name, str(raw))
            except DynamicConfigRefused as exc:
                raise _Refused(ErrorCode.INVALID_REQUEST, str(exc)) from None
    except _Refused as refused:
        result.error_code, result.error_message = refused.code, refused.message
        return result, []
    # A listener TLS key SET again is written again: its broker re-reads the files (rotated at the same path).
    again = {op.name for op in change.ops if op.op != OP_DELETE and is_listener_tls_config(op.name)}
    return result, _config_records(RESOURCE_BROKER, change.resource_name, current, validated, again)


def _config_records(
    resource_type: int, resource_name: str, current: dict[str, str], wanted: dict[str, str], again: set[str] = frozenset()
) -> list:
    """One ConfigRecord per key whose stored value changes (value None deletes it), and per key of ``again``."""
    return [
        CONFIG_RECORD(resource_type=resource_type, resource_name=resource_name, name=name, value=wanted.get(name))
        for name in sorted(set(current) | set(wanted))
        if current.get(name) != wanted.get(name) or (name in again and name in wanted)
    ]
