"""Topic-level configs: Kafka's names, types, defaults and validation.

Each topic config has a broker-level default (``log.segment.bytes`` for
``segment.bytes`` and so on); a topic override wins over it. The broker-level
value itself comes, per key, from the broker's dynamic config, else the
cluster-wide dynamic one, else server.properties (``topic_defaults_from``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from storage.log import LogConfig

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class TopicConfigError(ValueError):
    pass


def _int(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except (ValueError, AttributeError):
            raise TopicConfigError(f"expected an integer, got {raw!r}") from None
        if not low <= value <= high:
            raise TopicConfigError(f"{value} is outside [{low}, {high}]")
        return value

    return parse


def _float(low: float, high: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except (ValueError, AttributeError):
            raise TopicConfigError(f"expected a number, got {raw!r}") from None
        if not low <= value <= high:
            raise TopicConfigError(f"{value} is outside [{low}, {high}]")
        return value

    return parse


def _bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise TopicConfigError(f"expected true or false, got {raw!r}")
    return lowered == "true"


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip()
        if value not in choices:
            raise TopicConfigError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def _cleanup_policy(raw: str) -> str:
    parts = sorted({p.strip() for p in raw.split(",") if p.strip()})
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise TopicConfigError(f"cleanup.policy must be delete, compact or both, got {raw!r}")
    return ",".join(parts)


def _throttled_replicas(raw: str) -> str:
    """``*.replication.throttled.replicas``: "", "*" or ``partition:broker`` pairs."""
    value = raw.strip()
    if value in ("", "*"):
        return value
    pairs = []
    for item in value.split(","):
        partition, sep, broker = item.strip().partition(":")
        if not sep or not partition.strip().isdigit() or not broker.strip().isdigit():
            raise TopicConfigError(f"{raw!r} must be * or a list of partition:broker pairs, e.g. 0:101,0:102,1:101")
        pairs.append(f"{int(partition)}:{int(broker)}")
    return ",".join(pairs)


# Schema validation on produce: the topic configs Confluent Server and Redpanda
# name it by (the rules are broker/schemas/validation_rules.py's).
SCHEMA_VALIDATION_FLAGS = (
    "confluent.key.schema.validation",
    "confluent.value.schema.validation",
    "redpanda.key.schema.id.validation",
    "redpanda.value.schema.id.validation",
)
SUBJECT_NAME_STRATEGY_CONFIGS = (
    "confluent.key.subject.name.strategy",
    "confluent.value.subject.name.strategy",
    "redpanda.key.subject.name.strategy",
    "redpanda.value.subject.name.strategy",
)
SUBJECT_NAME_STRATEGY_PACKAGE = "io.confluent.kafka.serializers.subject."
SUBJECT_NAME_STRATEGIES = tuple(
    name
    for short in ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
    for name in (SUBJECT_NAME_STRATEGY_PACKAGE + short, short)
)
DEFAULT_SUBJECT_NAME_STRATEGY = SUBJECT_NAME_STRATEGY_PACKAGE + "TopicNameStrategy"
# Topic configs that are not Apache Kafka's (the schema validation ones above).
NON_KAFKA_TOPIC_CONFIGS = frozenset((*SCHEMA_VALIDATION_FLAGS, *SUBJECT_NAME_STRATEGY_CONFIGS, "schema.validation.mode"))


@dataclass(frozen=True)
class TopicConfigKey:
    name: str
    parse: Callable[[str], Any]
    default: str
    broker_key: str | None  # the server.properties key that supplies the default


TOPIC_CONFIG_KEYS: dict[str, TopicConfigKey] = {
    k.name: k
    for k in [
        TopicConfigKey("cleanup.policy", _cleanup_policy, "delete", "log.cleanup.policy"),
        TopicConfigKey("compression.type", _choice("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), "producer", "compression.type"),
        TopicConfigKey("delete.retention.ms", _int(0, INT64_MAX), "86400000", "log.cleaner.delete.retention.ms"),
        TopicConfigKey("file.delete.delay.ms", _int(0, INT64_MAX), "60000", "log.segment.delete.delay.ms"),
        TopicConfigKey("flush.messages", _int(1, INT64_MAX), str(INT64_MAX), "log.flush.interval.messages"),
        TopicConfigKey("flush.ms", _int(0, INT64_MAX), str(INT64_MAX), "log.flush.interval.ms"),
        TopicConfigKey("index.interval.bytes", _int(0, INT32_MAX), "4096", "log.index.interval.bytes"),
        TopicConfigKey("leader.replication.throttled.replicas", _throttled_replicas, "", None),
        TopicConfigKey("follower.replication.throttled.replicas", _throttled_replicas, "", None),
        TopicConfigKey("max.compaction.lag.ms", _int(1, INT64_MAX), str(INT64_MAX), "log.cleaner.max.compaction.lag.ms"),
        TopicConfigKey("max.message.bytes", _int(0, INT32_MAX), "1048588", "message.max.bytes"),
        TopicConfigKey("message.timestamp.type", _choice("CreateTime", "LogAppendTime"), "CreateTime", "log.message.timestamp.type"),
        TopicConfigKey("message.timestamp.before.max.ms", _int(0, INT64_MAX), str(INT64_MAX), "log.message.timestamp.before.max.ms"),
        # Kafka 4.0 (KIP-1030) refuses records more than an hour in the future by default.
        TopicConfigKey("message.timestamp.after.max.ms", _int(0, INT64_MAX), "3600000", "log.message.timestamp.after.max.ms"),
        TopicConfigKey("min.cleanable.dirty.ratio", _float(0.0, 1.0), "0.5", "log.cleaner.min.cleanable.ratio"),
        TopicConfigKey("min.compaction.lag.ms", _int(0, INT64_MAX), "0", "log.cleaner.min.compaction.lag.ms"),
        TopicConfigKey("min.insync.replicas", _int(1, INT32_MAX), "1", "min.insync.replicas"),
        TopicConfigKey("preallocate", _bool, "false", "log.preallocate"),
        TopicConfigKey("retention.bytes", _int(-1, INT64_MAX), "-1", "log.retention.bytes"),
        TopicConfigKey("retention.ms", _int(-1, INT64_MAX), "604800000", "log.retention.ms"),
        TopicConfigKey("segment.bytes", _int(14, INT32_MAX), "1073741824", "log.segment.bytes"),
        TopicConfigKey("segment.index.bytes", _int(4, INT32_MAX), "10485760", "log.index.size.max.bytes"),
        TopicConfigKey("segment.jitter.ms", _int(0, INT64_MAX), "0", "log.roll.jitter.ms"),
        TopicConfigKey("segment.ms", _int(1, INT64_MAX), "604800000", "log.roll.ms"),
        TopicConfigKey("unclean.leader.election.enable", _bool, "false", "unclean.leader.election.enable"),
        # Schema validation on produce (broker/schemas/validation_rules.py): Confluent
        # Server's names, Redpanda's, and pybroker's own mode. No broker default.
        *(TopicConfigKey(name, _bool, "false", None) for name in SCHEMA_VALIDATION_FLAGS),
        *(TopicConfigKey(name, _choice(*SUBJECT_NAME_STRATEGIES), DEFAULT_SUBJECT_NAME_STRATEGY, None) for name in SUBJECT_NAME_STRATEGY_CONFIGS),
        TopicConfigKey("schema.validation.mode", _choice("id", "full"), "id", None),
    ]
}


# --------------------------------------------------------------------------- DescribeConfigs metadata

# Kafka's ConfigDef type of each topic config (DescribeConfigs v3+ reports it
# as an id, see CONFIG_TYPE_IDS). No topic config is a PASSWORD, so none is
# sensitive.
TOPIC_CONFIG_TYPES: dict[str, str] = {
    "cleanup.policy": "LIST",
    "compression.type": "STRING",
    "delete.retention.ms": "LONG",
    "file.delete.delay.ms": "LONG",
    "flush.messages": "LONG",
    "flush.ms": "LONG",
    "index.interval.bytes": "INT",
    "leader.replication.throttled.replicas": "LIST",
    "follower.replication.throttled.replicas": "LIST",
    "max.compaction.lag.ms": "LONG",
    "max.message.bytes": "INT",
    "message.timestamp.type": "STRING",
    "message.timestamp.before.max.ms": "LONG",
    "message.timestamp.after.max.ms": "LONG",
    "min.cleanable.dirty.ratio": "DOUBLE",
    "min.compaction.lag.ms": "LONG",
    "min.insync.replicas": "INT",
    "preallocate": "BOOLEAN",
    "retention.bytes": "LONG",
    "retention.ms": "LONG",
    "segment.bytes": "INT",
    "segment.index.bytes": "INT",
    "segment.jitter.ms": "LONG",
    "segment.ms": "LONG",
    "unclean.leader.election.enable": "BOOLEAN",
    **dict.fromkeys(SCHEMA_VALIDATION_FLAGS, "BOOLEAN"),
    **dict.fromkeys(SUBJECT_NAME_STRATEGY_CONFIGS, "STRING"),
    "schema.validation.mode": "STRING",
}

# DescribeConfigs' ConfigType ids (DescribeConfigsResponse.ConfigType in Kafka).
CONFIG_TYPE_IDS: dict[str, int] = {
    "UNKNOWN": 0,
    "BOOLEAN": 1,
    "STRING": 2,
    "INT": 3,
    "SHORT": 4,
    "LONG": 5,
    "DOUBLE": 6,
    "LIST": 7,
    "CLASS": 8,
    "PASSWORD": 9,
}

# One or two sentences per config, in pybroker's words (DescribeConfigs v3+).
TOPIC_CONFIG_DOCS: dict[str, str] = {
    "cleanup.policy": "How old data is disposed of: 'delete' removes whole segments by age or size, "
    "'compact' keeps the latest record of each key; both may be listed.",
    "compression.type": "The codec batches are stored with; 'producer' keeps the one the producer chose.",
    "delete.retention.ms": "How long delete markers (tombstones) stay readable in a compacted topic.",
    "file.delete.delay.ms": "How long a removed segment file lingers before it is deleted from disk.",
    "flush.messages": "Force an fsync of the log after this many messages.",
    "flush.ms": "Force an fsync of the log when this much time has passed since the last one.",
    "leader.replication.throttled.replicas": "Replicas (partition:broker, or *) throttled on the leader side: a leader named here holds followers out of the ISR to leader.replication.throttled.rate.",
    "follower.replication.throttled.replicas": "Replicas (partition:broker, or *) throttled on the follower side: a follower named here, while not caught up, fetches at most follower.replication.throttled.rate.",
    "index.interval.bytes": "Bytes of log between two entries of the offset and time indexes; "
    "a change applies to segments created afterwards.",
    "max.compaction.lag.ms": "Longest time a record may remain ineligible for compaction.",
    "max.message.bytes": "Largest record batch (after compression) the topic accepts; bigger produces fail with MESSAGE_TOO_LARGE.",
    "message.timestamp.type": "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with the broker's clock.",
    "message.timestamp.before.max.ms": "How far in the past a CreateTime timestamp may lie, relative to the broker's clock, "
    "before the batch is refused with INVALID_TIMESTAMP.",
    "message.timestamp.after.max.ms": "How far in the future a CreateTime timestamp may lie, relative to the broker's clock, "
    "before the batch is refused with INVALID_TIMESTAMP.",
    "min.cleanable.dirty.ratio": "Share of a log that must be uncompacted before the cleaner compacts it.",
    "min.compaction.lag.ms": "Shortest time a record stays uncompacted.",
    "min.insync.replicas": "Replicas that must hold a write before an acks=all produce succeeds.",
    "preallocate": "Whether segment files are preallocated when they are created.",
    "retention.bytes": "Size a partition may grow to before its oldest segments are deleted; -1 means no limit.",
    "retention.ms": "Age after which old segments are deleted; -1 means forever.",
    "segment.bytes": "Size at which the active segment file is closed and a new one started.",
    "segment.index.bytes": "Largest size of a segment's offset and time index files.",
    "segment.jitter.ms": "Random amount subtracted from segment.ms to spread segment rolls over time.",
    "segment.ms": "Age at which the active segment is rolled even when it is not full.",
    "unclean.leader.election.enable": "Whether a replica outside the ISR may become leader, at the cost of losing data.",
    "confluent.key.schema.validation": "Whether every record key must carry the id of a schema registered under its subject "
    "(Confluent's framing); others are refused with INVALID_RECORD.",
    "confluent.value.schema.validation": "Whether every record value must carry the id of a schema registered under its subject "
    "(Confluent's framing); others are refused with INVALID_RECORD.",
    "redpanda.key.schema.id.validation": "Redpanda's name for confluent.key.schema.validation.",
    "redpanda.value.schema.id.validation": "Redpanda's name for confluent.value.schema.validation.",
    "confluent.key.subject.name.strategy": "How a validated key's subject is named: TopicNameStrategy, RecordNameStrategy "
    "or TopicRecordNameStrategy.",
    "confluent.value.subject.name.strategy": "How a validated value's subject is named: TopicNameStrategy, RecordNameStrategy "
    "or TopicRecordNameStrategy.",
    "redpanda.key.subject.name.strategy": "The subject name strategy for redpanda.key.schema.id.validation.",
    "redpanda.value.subject.name.strategy": "The subject name strategy for redpanda.value.schema.id.validation.",
    "schema.validation.mode": "id checks that a validated key or value names a schema registered under its subject; "
    "full also decodes the payload by that schema (pybroker's own).",
}

# The broker-level keys that supply a topic config's default, in Kafka's order of
# precedence, each with Kafka's default for that broker key (None: no default).
# A key that is not listed here has exactly one: (TopicConfigKey.broker_key, TopicConfigKey.default).
_MULTI_NAME_BROKER_SYNONYMS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "segment.ms": (("log.roll.ms", None), ("log.roll.hours", "168")),
    "segment.jitter.ms": (("log.roll.jitter.ms", None), ("log.roll.jitter.hours", "0")),
    "retention.ms": (("log.retention.ms", None), ("log.retention.minutes", None), ("log.retention.hours", "168")),
    "flush.ms": (("log.flush.interval.ms", None), ("log.flush.scheduler.interval.ms", str(2**63 - 1))),
}


def broker_synonyms(name: str) -> tuple[tuple[str, str | None], ...]:
    """``(broker key, Kafka's default for it)`` pairs that supply topic config ``name``'s default."""
    if name in _MULTI_NAME_BROKER_SYNONYMS:
        return _MULTI_NAME_BROKER_SYNONYMS[name]
    key = TOPIC_CONFIG_KEYS[name]
    return ((key.broker_key, key.default),) if key.broker_key else ()


def is_list_config(name: str) -> bool:
    """APPEND and SUBTRACT (IncrementalAlterConfigs) apply only to LIST configs."""
    return TOPIC_CONFIG_TYPES.get(name) == "LIST"


def is_sensitive_config(name: str) -> bool:
    return TOPIC_CONFIG_TYPES.get(name) == "PASSWORD"


def format_config_value(type_name: str, value: Any) -> str | None:
    """A parsed config value as Kafka writes it in DescribeConfigs (booleans in lower case)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


# Topic configs Kafka 4.0 removed: refused as unknown there too (INVALID_CONFIG),
# with the reason in our message since clients written for Kafka 3 still send them.
REMOVED_TOPIC_CONFIGS = {
    "message.format.version": "removed in Kafka 4.0 with message formats v0 and v1 (KIP-724); every batch is v2",
}


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Check names and values; returns the normalised string values. Raises TopicConfigError."""
    result = {}
    for name, raw in configs.items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            if name in REMOVED_TOPIC_CONFIGS:
                raise TopicConfigError(f"unknown topic config {name}: {REMOVED_TOPIC_CONFIGS[name]}")
            raise TopicConfigError(f"unknown topic config {name}")
        if raw is None:
            raise TopicConfigError(f"{name}: null value")
        try:
            value = key.parse(raw)
        except TopicConfigError as exc:
            raise TopicConfigError(f"{name}: {exc}") from None
        result[name] = raw.strip() if not isinstance(value, str) else value
    return result


# Broker keys in a unit other than the topic config's milliseconds (Kafka's ConfigSynonym converters).
_BROKER_KEY_MS_FACTORS = {
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
    "log.retention.hours": 3_600_000,
    "log.retention.minutes": 60_000,
}


def _topic_value_of(broker_key: str, raw: str) -> str:
    """A broker key's value in its topic config's unit; a negative retention time is -1 (forever)."""
    factor = _BROKER_KEY_MS_FACTORS.get(broker_key)
    if factor is None:
        return raw
    value = int(raw.strip()) * factor
    return "-1" if value < 0 else str(value)


def topic_defaults_from(layers: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The topic config defaults that broker-level keys supply (topic config name -> value).

    ``layers`` map broker keys to values, in precedence order (Kafka's: this
    broker's dynamic configs, the cluster-wide dynamic ones, server.properties):
    each broker key takes its value from the first layer that has it, and a
    topic config takes the first of its broker synonyms (``broker_synonyms``:
    ``log.retention.ms``, then ``.minutes``, then ``.hours``) that has a value.
    A value that does not parse is skipped (the controller refuses them; an
    older log might still hold one)."""
    result = {}
    for name, key in TOPIC_CONFIG_KEYS.items():
        for broker_key, _ in broker_synonyms(name):
            raw = next((layer[broker_key] for layer in layers if layer.get(broker_key) is not None), None)
            if raw is None:
                continue
            try:
                value = _topic_value_of(broker_key, raw)
                key.parse(value)
            except (TopicConfigError, ValueError):
                continue
            result[name] = value.strip()
            break
    return result


def effective_topic_config(broker_defaults: dict[str, str], overrides: dict[str, str]) -> dict[str, Any]:
    """Every topic config's parsed value: topic override, else broker default, else Kafka's default."""
    values = {}
    for name, key in TOPIC_CONFIG_KEYS.items():
        raw = overrides.get(name)
        if raw is None:
            raw = broker_defaults.get(name, key.default)
        values[name] = key.parse(raw)
    return values


def log_config_from(values: dict[str, Any]) -> LogConfig:
    return LogConfig(
        segment_bytes=values["segment.bytes"],
        segment_ms=values["segment.ms"],
        index_interval_bytes=values["index.interval.bytes"],
        max_message_bytes=values["max.message.bytes"],
        message_timestamp_type=values["message.timestamp.type"],
        timestamp_before_max_ms=values["message.timestamp.before.max.ms"],
        timestamp_after_max_ms=values["message.timestamp.after.max.ms"],
        segment_index_bytes=values["segment.index.bytes"],
        flush_messages=values["flush.messages"],
        flush_ms=values["flush.ms"],
        cleanup_policy=values["cleanup.policy"],
        retention_ms=values["retention.ms"],
        retention_bytes=values["retention.bytes"],
        delete_retention_ms=values["delete.retention.ms"],
        min_compaction_lag_ms=values["min.compaction.lag.ms"],
        min_cleanable_ratio=values["min.cleanable.dirty.ratio"],
    )
