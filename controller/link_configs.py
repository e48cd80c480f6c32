"""The settings a cluster link accepts, and the topic configs a mirror takes from its source.

A link's settings are those of a Kafka client of the source cluster (how to
reach it) plus the link's own, named as Confluent's Cluster Linking names
them. Every key something in pybroker reads is listed in ``LINK_CONFIGS``
with its type, default, whether it is a secret, and what reads it; a key not
listed is refused (INVALID_CONFIG naming it), so that a typo is never stored
and silently ignored, and a setting nothing honours is never accepted.

The code that uses a link reads its keys from here (``link_config_value``
gives the default for a key that was not set).

``MIRROR_SYNCED_TOPIC_CONFIGS`` are the topic configs a mirror topic copies
from its source topic (Cluster Linking's allow-list, as far as pybroker's
topics have them); users may not change them on a mirror that still follows
its source.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

# Value types.
STRING = "string"
LONG = "long"  # a non-negative integer
POSITIVE_LONG = "positive long"
BOOLEAN = "boolean"
LIST = "list"  # comma-separated
GROUP_FILTERS = "group filters"  # Cluster Linking's {"groupFilters": [...]} JSON


@dataclass(frozen=True)
class LinkConfigKey:
    name: str
    type: str
    default: str | None
    sensitive: bool
    # What reads the key, and what it means (one line).
    doc: str


_CLIENT = "the source client (broker/links/source.py)"
_KEYS = (
    LinkConfigKey("bootstrap.servers", LIST, None, False, f"{_CLIENT}: host:port of the source's brokers (required)"),
    LinkConfigKey("security.protocol", STRING, "PLAINTEXT", False, f"{_CLIENT}: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
    LinkConfigKey("sasl.mechanism", STRING, None, False, f"{_CLIENT}: the SASL mechanism (as a Kafka client names it)"),
    LinkConfigKey("sasl.jaas.config", STRING, None, True, f"{_CLIENT}: the login module line with the credentials"),
    LinkConfigKey("ssl.truststore.location", STRING, None, False, f"{_CLIENT}: a PEM file of trusted CAs"),
    LinkConfigKey("ssl.truststore.certificates", STRING, None, False, f"{_CLIENT}: trusted CAs as PEM text"),
    LinkConfigKey("ssl.truststore.type", STRING, None, False, f"{_CLIENT}: PEM (Java store types are refused)"),
    LinkConfigKey("ssl.truststore.password", STRING, None, True, f"{_CLIENT}: the trust store's password"),
    LinkConfigKey("ssl.keystore.location", STRING, None, False, f"{_CLIENT}: a PEM file of the client key and chain"),
    LinkConfigKey("ssl.keystore.certificate.chain", STRING, None, False, f"{_CLIENT}: the client chain as PEM text"),
    LinkConfigKey("ssl.keystore.key", STRING, None, True, f"{_CLIENT}: the client key as PEM text"),
    LinkConfigKey("ssl.keystore.type", STRING, None, False, f"{_CLIENT}: PEM (Java store types are refused)"),
    LinkConfigKey("ssl.keystore.password", STRING, None, True, f"{_CLIENT}: the key store's password"),
    LinkConfigKey("ssl.key.password", STRING, None, True, f"{_CLIENT}: the password of an encrypted client key"),
    LinkConfigKey(
        "ssl.endpoint.identification.algorithm", STRING, "https", False,
        f"{_CLIENT}: https checks the source's host name, empty does not",
    ),
    LinkConfigKey("ssl.enabled.protocols", LIST, None, False, f"{_CLIENT}: TLS versions allowed"),
    LinkConfigKey("ssl.protocol", STRING, None, False, f"{_CLIENT}: the TLS version to use"),
    LinkConfigKey("ssl.cipher.suites", LIST, None, False, f"{_CLIENT}: cipher suites allowed"),
    LinkConfigKey("request.timeout.ms", POSITIVE_LONG, "30000", False, f"{_CLIENT}: how long one request to the source may take"),
    LinkConfigKey(
        "socket.connection.setup.timeout.ms", POSITIVE_LONG, "10000", False,
        f"{_CLIENT}: how long a connection to a source broker may take",
    ),
    LinkConfigKey(
        "retry.backoff.ms", POSITIVE_LONG, "500", False,
        "mirror fetchers: how long a mirror partition waits before asking the source again after an error",
    ),
    LinkConfigKey(
        "topic.config.sync.ms", POSITIVE_LONG, "5000", False,
        "topic config sync: how often the synced configs and partition counts of the source topics are read",
    ),
    LinkConfigKey(
        "consumer.offset.sync.enable", BOOLEAN, "false", False,
        "consumer offset sync: copy the committed offsets of the selected groups from the source",
    ),
    LinkConfigKey(
        "consumer.offset.group.filters", GROUP_FILTERS, None, False,
        'consumer offset sync: which groups, as {"groupFilters": [{"name", "patternType", "filterType"}]}',
    ),
    LinkConfigKey(
        "consumer.offset.sync.ms", POSITIVE_LONG, "30000", False, "consumer offset sync: how often offsets are copied",
    ),
    LinkConfigKey(
        "multi.master.topics", LIST, None, False,
        "multi-master copy (broker/links/multi_master.py): topics written in both clusters, copied batch by batch",
    ),
)
LINK_CONFIGS: Mapping[str, LinkConfigKey] = {key.name: key for key in _KEYS}
REQUIRED_LINK_CONFIGS = frozenset({"bootstrap.servers"})
SENSITIVE_LINK_CONFIGS = frozenset(key.name for key in _KEYS if key.sensitive)

# Topic configs a mirror takes from its source topic and keeps in step with it.
MIRROR_SYNCED_TOPIC_CONFIGS = frozenset({
    "cleanup.policy",
    "compression.type",
    "max.message.bytes",
    "message.timestamp.type",
    # Kafka 4.0 removed message.timestamp.difference.max.ms for these two
    # (KIP-937); pybroker's topics have only these, so only these are synced.
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "segment.ms",
    "min.compaction.lag.ms",
    "delete.retention.ms",
    "min.cleanable.dirty.ratio",
})

# consumer.offset.group.filters, as Cluster Linking spells them.
GROUP_FILTER_PATTERN_TYPES = ("LITERAL", "PREFIXED")
GROUP_FILTER_TYPES = ("INCLUDE", "EXCLUDE")


class LinkConfigError(ValueError):
    """A link setting that is unknown or malformed; the message starts with the key."""


@dataclass(frozen=True)
class GroupFilter:
    name: str  # "*" with LITERAL: every group
    pattern_type: str
    filter_type: str

    def matches(self, group_id: str) -> bool:
        if self.pattern_type == "LITERAL":
            return self.name == "*" or self.name == group_id
        return group_id.startswith(self.name)


def parse_group_filters(text: str) -> list[GroupFilter]:
    """consumer.offset.group.filters as filters; LinkConfigError naming the key when malformed."""
    key = "consumer.offset.group.filters"
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise LinkConfigError(f"{key}: not JSON ({exc})") from None
    entries = document.get("groupFilters") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise LinkConfigError(f'{key}: expected {{"groupFilters": [...]}}')
    filters = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise LinkConfigError(f"{key}: each filter needs a non-empty \"name\", got {json.dumps(entry)}")
        unknown = sorted(set(entry) - {"name", "patternType", "filterType"})
        if unknown:
            raise LinkConfigError(f"{key}: unknown field(s) {', '.join(unknown)} in a filter")
        pattern_type = str(entry.get("patternType", "LITERAL")).upper()
        filter_type = str(entry.get("filterType", "INCLUDE")).upper()
        if pattern_type not in GROUP_FILTER_PATTERN_TYPES:
            raise LinkConfigError(f"{key}: patternType {entry.get('patternType')!r} is not LITERAL or PREFIXED")
        if filter_type not in GROUP_FILTER_TYPES:
            raise LinkConfigError(f"{key}: filterType {entry.get('filterType')!r} is not INCLUDE or EXCLUDE")
        filters.append(GroupFilter(entry["name"], pattern_type, filter_type))
    return filters


def group_selected(filters: list[GroupFilter], group_id: str) -> bool:
    """Cluster Linking's rule: a group is synced when an INCLUDE filter matches it and no EXCLUDE does."""
    included = any(f.matches(group_id) for f in filters if f.filter_type == "INCLUDE")
    return included and not any(f.matches(group_id) for f in filters if f.filter_type == "EXCLUDE")


def _check_value(key: LinkConfigKey, value: str) -> str:
    if key.type in (LONG, POSITIVE_LONG):
        try:
            number = int(value.strip())
        except ValueError:
            raise LinkConfigError(f"{key.name}: expected a whole number, got {value!r}") from None
        if number < 0 or (key.type == POSITIVE_LONG and number == 0):
            raise LinkConfigError(f"{key.name}: must be {'positive' if key.type == POSITIVE_LONG else 'at least 0'}, got {number}")
        return str(number)
    if key.type == BOOLEAN:
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise LinkConfigError(f"{key.name}: expected true or false, got {value!r}")
        return lowered
    if key.type == GROUP_FILTERS:
        parse_group_filters(value)
        return value
    if key.name == "multi.master.topics":
        return ",".join(parse_multi_master_topics(value))
    if key.name == "bootstrap.servers":
        _check_bootstrap(value)
        return value.strip()
    return value


def parse_multi_master_topics(value: str | None) -> list[str]:
    """multi.master.topics as topic names (the same name in both clusters), in
    the order given; LinkConfigError naming the key for a name no topic may have."""
    names = [item.strip() for item in (value or "").split(",") if item.strip()]
    for name in names:
        if len(name) > 249 or name in (".", "..") or not all(c.isascii() and (c.isalnum() or c in "._-") for c in name):
            raise LinkConfigError(f"multi.master.topics: {name!r} is not a valid topic name")
        if name.startswith("__"):
            raise LinkConfigError(f"multi.master.topics: {name} is an internal topic")
    if len(set(names)) != len(names):
        raise LinkConfigError("multi.master.topics: a topic is named twice")
    return names


def _check_bootstrap(value: str) -> None:
    if not value.strip():
        raise LinkConfigError("bootstrap.servers: required (host:port of the source cluster's brokers)")
    for item in value.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise LinkConfigError(f"bootstrap.servers: expected host:port, got {item.strip()!r}")


def validate_link_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """A link's whole settings, checked: unknown keys, bad values and a missing
    bootstrap.servers are LinkConfigError (the first one found, by key)."""
    for name in sorted(configs):
        if name not in LINK_CONFIGS:
            raise LinkConfigError(f"{name}: not a cluster link setting (known: {', '.join(sorted(LINK_CONFIGS))})")
    checked = {}
    for name in sorted(configs):
        value = configs[name]
        if value is None:
            raise LinkConfigError(f"{name}: a value is required")
        checked[name] = _check_value(LINK_CONFIGS[name], value)
    for name in sorted(REQUIRED_LINK_CONFIGS - set(checked)):
        raise LinkConfigError(f"{name}: required")
    if checked.get("consumer.offset.sync.enable") == "true" and "consumer.offset.group.filters" not in checked:
        # Cluster Linking syncs no group without a filter: say so rather than sync nothing quietly.
        raise LinkConfigError("consumer.offset.group.filters: required when consumer.offset.sync.enable is true")
    return checked


def link_config_value(configs: Mapping[str, str], name: str) -> str | None:
    """The value of ``name`` for a link with ``configs``: its own or the default."""
    value = configs.get(name)
    return LINK_CONFIGS[name].default if value is None else value


def link_setting_ms(configs: Mapping[str, str], name: str) -> int:
    """A link's milliseconds setting ``name`` as a positive number: its value, or
    the declared default when unset (or unusable: the controller refuses those,
    so only a record older than a check would carry one)."""
    default = int(LINK_CONFIGS[name].default)
    try:
        value = int(configs.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


def link_setting_enabled(configs: Mapping[str, str], name: str) -> bool:
    """A link's boolean setting ``name`` (its declared default when unset)."""
    return str(link_config_value(configs, name)).strip().lower() == "true"


def described_link_configs(configs: Mapping[str, str]) -> list[tuple[str, str | None, bool]]:
    """(name, value, sensitive) for each setting of a link, secrets as None, sorted by name."""
    return [
        (name, None if name in SENSITIVE_LINK_CONFIGS else value, name in SENSITIVE_LINK_CONFIGS)
        for name, value in sorted(configs.items())
    ]
