"""Topic-level configs: Kafka's names, types, defaults and validation.

Each topic config has a broker-level default (``log.segment.bytes`` for
``segment.bytes`` and so on); a topic override wins over it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

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
    ]
}


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Check names and values; returns the normalised string values. Raises TopicConfigError."""
    result = {}
    for name, raw in configs.items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            raise TopicConfigError(f"unknown topic config {name}")
        if raw is None:
            raise TopicConfigError(f"{name}: null value")
        try:
            value = key.parse(raw)
        except TopicConfigError as exc:
            raise TopicConfigError(f"{name}: {exc}") from None
        result[name] = raw.strip() if not isinstance(value, str) else value
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
    )
