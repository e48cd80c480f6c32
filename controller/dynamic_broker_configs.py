"""Dynamic broker configs (Kafka's KIP-226): which broker keys may change at run
time, and the checks a change passes before its ConfigRecords are written.

A BROKER config resource is one broker (its id) or the whole cluster (the
empty name, ``<default>`` in kafka-configs.sh). Their values live in the
metadata log, so every node follows them and they survive restarts; per key,
Kafka's precedence holds: this broker's dynamic value, else the cluster-wide
dynamic value, else server.properties, else the default.

pybroker accepts only the keys it really acts on at run time (``HONOURED``, and
the listener TLS keys of ``is_listener_tls_config``):

- the broker-level defaults of topic configs whose topic config the logs and
  replicas act on (``log.retention.ms`` for ``retention.ms``, ``message.max.bytes``
  for ``max.message.bytes``, ...): every broker applies a change to the logs of
  topics without their own override as soon as its image has it
  (``storage.topic_config.topic_defaults_from`` resolves them);
- ``unclean.leader.election.enable``, cluster-wide only: the active controller
  reads it (topic override, else this value, else its server.properties) when
  it elects leaders. Kafka would also read the active controller's own
  per-broker value; pybroker refuses a per-broker value rather than store one
  that only counts while that node leads;
- the replication throttle rates (bytes/s, Long.MAX_VALUE for none);
- the TLS files of this broker's SSL and SASL_SSL listeners, per broker and
  with the listener prefix only, as Kafka takes them:
  ``listener.name.<listener>.ssl.keystore.location`` (or
  ``.ssl.keystore.certificate.chain`` with ``.ssl.keystore.key``),
  ``.ssl.key.password``, ``.ssl.truststore.location`` (or
  ``.ssl.truststore.certificates``) and ``.ssl.client.auth``. The controller
  checks only what needs no file (a listener name, a non-empty value, PEM
  text, none/requested/required); the broker they name loads the files when
  its image has them and keeps serving the old certificate, with one logged
  line, when they cannot be loaded (broker/net/security_setup.py). A SET of one
  of these keys is written even when the value is unchanged: that is how a
  file rotated at the same path is re-read. The unprefixed ``ssl.*`` forms
  answer Kafka's "These security configs can be dynamically updated only
  per-listener using the listener prefix", the prefixed ones cluster-wide
  "Cannot update these configs at default cluster level, broker id must be
  specified".

Everything else answers INVALID_REQUEST, as Kafka's broker answers every
broker config it cannot apply, and nothing is written:

- keys Kafka itself never changes at run time (``listeners``, ``log.dirs``,
  ``node.id``, ``log.retention.hours``, ...) and unknown keys: Kafka's
  "Cannot update these configs dynamically: Set(...)";
- keys Kafka makes dynamic that pybroker does not act on at run time
  (``compression.type``, thread counts, listener SASL settings, connection
  limits, ...): a message naming them and saying so;
- a value that does not parse: "Invalid value V for configuration K: why".

DELETE of any key is allowed (Kafka validates only the values that remain).
"""

from __future__ import annotations

from storage.topic_config import TOPIC_CONFIG_KEYS, TOPIC_CONFIG_TYPES, TopicConfigError

LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
THROTTLE_RATE_CONFIGS = (LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE)
UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"

# Broker key -> the topic config it supplies the default of, for the keys
# Kafka makes dynamic and pybroker's logs or replicas act on. (Kafka makes only
# the first synonym dynamic: log.retention.ms, not .minutes or .hours.)
TOPIC_DEFAULT_CONFIGS: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.retention.bytes": "retention.bytes",
    "log.retention.ms": "retention.ms",
    "message.max.bytes": "max.message.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.message.timestamp.type": "message.timestamp.type",
    "min.insync.replicas": "min.insync.replicas",
    UNCLEAN_LEADER_ELECTION: "unclean.leader.election.enable",
}

# Everything pybroker takes as a dynamic broker config.
HONOURED: frozenset[str] = frozenset(TOPIC_DEFAULT_CONFIGS) | frozenset(THROTTLE_RATE_CONFIGS)
# Of those, the ones only the cluster-wide default may set.
CLUSTER_WIDE_ONLY = {
    UNCLEAN_LEADER_ELECTION: "the active controller decides elections from the topic's value, else the "
    "cluster-wide one (--entity-default), and pybroker does not read a controller's own per-broker value",
}

# Keys Kafka makes dynamic (KIP-226 and later) that pybroker does not act on
# at run time, with what to do instead.
_NOT_HONOURED: dict[str, str] = {}
for _names, _why in (
    (
        ("log.roll.jitter.ms", "log.cleaner.max.compaction.lag.ms", "log.segment.delete.delay.ms", "log.preallocate",
         "log.message.timestamp.before.max.ms", "log.message.timestamp.after.max.ms",
         "log.message.timestamp.difference.max.ms", "log.local.retention.ms", "log.local.retention.bytes"),
        "pybroker has no broker-level default for it; set the topic config on each topic instead",
    ),
    (
        ("compression.type", "compression.gzip.level", "compression.lz4.level", "compression.zstd.level"),
        "pybroker stores batches as producers compressed them and does not recompress",
    ),
    (
        ("log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
         "log.cleaner.io.buffer.size", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
         "num.io.threads", "num.network.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
         "background.threads", "metric.reporters", "producer.id.expiration.ms",
         "transaction.partition.verification.enable", "replica.alter.log.dirs.io.max.bytes.per.second"),
        "pybroker reads it at start only; set it in server.properties and restart the broker",
    ),
    (
        ("listeners", "advertised.listeners", "listener.security.protocol.map", "principal.builder.class",
         "max.connections", "max.connection.creation.rate", "max.connections.per.ip",
         "max.connections.per.ip.overrides", "sasl.enabled.mechanisms", "sasl.jaas.config",
         "sasl.mechanism.inter.broker.protocol", "ssl.keystore.location", "ssl.keystore.password",
         "ssl.key.password", "ssl.keystore.type", "ssl.truststore.location", "ssl.truststore.password",
         "ssl.truststore.type", "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.certificates",
         "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.protocol", "ssl.client.auth"),
        "pybroker sets up its listeners at start only; set it in server.properties and restart the broker",
    ),
):
    for _name in _names:
        _NOT_HONOURED[_name] = _why

# listener.name.<listener>.<key>: Kafka's per-listener dynamic configs (TLS files, JAAS entries).
_LISTENER_PREFIX = "listener.name."
# The per-listener TLS keys pybroker applies at run time (with the listener prefix, per broker).
LISTENER_TLS_KEYS = frozenset(
    {
        "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.key.password",
        "ssl.truststore.location", "ssl.truststore.certificates", "ssl.client.auth",
    }
)
# Kafka's reconfigurable security keys: refused without the listener prefix (SslConfigs.RECONFIGURABLE_CONFIGS).
_SECURITY_KEYS_NEED_PREFIX = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.truststore.certificates",
)


def listener_tls_key(name: str) -> tuple[str, str] | None:
    """(listener name as given, ssl key) of an honoured ``listener.name.<l>.ssl.*`` key, else None."""
    if not name.startswith(_LISTENER_PREFIX):
        return None
    listener, _, key = name[len(_LISTENER_PREFIX):].partition(".")
    if not listener or key not in LISTENER_TLS_KEYS:
        return None
    return listener, key


def is_listener_tls_config(name: str) -> bool:
    return listener_tls_key(name) is not None


class DynamicConfigRefused(ValueError):
    """A change no broker resource may take (INVALID_REQUEST, as Kafka's broker answers)."""


def is_list_broker_config(name: str) -> bool:
    topic_name = TOPIC_DEFAULT_CONFIGS.get(name)
    return topic_name is not None and TOPIC_CONFIG_TYPES.get(topic_name) == "LIST"


def list_default(name: str) -> str:
    """Where APPEND/SUBTRACT start when the resource has no value for LIST key ``name`` (Kafka: the key's default)."""
    return TOPIC_CONFIG_KEYS[TOPIC_DEFAULT_CONFIGS[name]].default


def check_names(names: list[str], *, cluster_wide: bool) -> None:
    """Refuse names that are not honoured dynamic broker configs, in Kafka's order:
    read-only (and unknown) keys first, then those pybroker does not apply."""
    read_only = [n for n in names if n not in HONOURED and n not in _NOT_HONOURED and not n.startswith(_LISTENER_PREFIX)]
    if read_only:
        raise DynamicConfigRefused(f"Cannot update these configs dynamically: Set({', '.join(read_only)})")
    unprefixed = [n for n in names if n in _SECURITY_KEYS_NEED_PREFIX]
    if unprefixed:
        raise DynamicConfigRefused(
            "These security configs can be dynamically updated only per-listener using the listener prefix: "
            f"Set({', '.join(unprefixed)})"
        )
    if cluster_wide:
        per_broker = [n for n in names if is_listener_tls_config(n)]
        if per_broker:
            raise DynamicConfigRefused(
                "Cannot update these configs at default cluster level, broker id must be specified: "
                f"Set({', '.join(per_broker)})"
            )
    for name in names:
        if is_listener_tls_config(name):
            continue
        if name.startswith(_LISTENER_PREFIX):
            raise DynamicConfigRefused(
                f"{name}: per-listener configs cannot be updated dynamically by pybroker: it sets up its listeners "
                "at start only; set it in server.properties and restart the broker"
            )
        if name in _NOT_HONOURED:
            raise DynamicConfigRefused(f"{name} cannot be updated dynamically by pybroker: {_NOT_HONOURED[name]}")
        if not cluster_wide and name in CLUSTER_WIDE_ONLY:
            raise DynamicConfigRefused(f"{name} can only be set cluster-wide in pybroker: {CLUSTER_WIDE_ONLY[name]}")


def validate_value(name: str, raw: str) -> str:
    """The normalised value of honoured key ``name``; raises DynamicConfigRefused."""
    tls = listener_tls_key(name)
    if tls is not None:
        return _validate_tls_value(name, tls[1], raw)
    if name in THROTTLE_RATE_CONFIGS:
        try:
            rate = int(raw.strip())
        except ValueError:
            rate = -1
        if rate < 0:
            raise DynamicConfigRefused(f"Invalid value {raw} for configuration {name}: must be a number of bytes/s >= 0")
        return str(rate)
    key = TOPIC_CONFIG_KEYS[TOPIC_DEFAULT_CONFIGS[name]]
    try:
        value = key.parse(raw)
    except TopicConfigError as exc:
        raise DynamicConfigRefused(f"Invalid value {raw} for configuration {name}: {exc}") from None
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else raw.strip()


def _validate_tls_value(name: str, key: str, raw: str) -> str:
    """What can be checked of a listener TLS value without its files (only the
    broker that serves the listener can read those)."""
    if key == "ssl.key.password":
        return raw  # any text, kept as given
    value = raw.strip()
    if key == "ssl.client.auth":
        if value.lower() not in ("none", "requested", "required"):
            raise DynamicConfigRefused(f"Invalid value {raw} for configuration {name}: expected none, requested or required")
        return value.lower()
    if not value:
        raise DynamicConfigRefused(f"Invalid value for configuration {name}: must not be empty (DELETE the key instead)")
    if key in ("ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates") and "-----BEGIN " not in value:
        # Never quote the value: it may be a private key.
        raise DynamicConfigRefused(f"Invalid value for configuration {name}: expected PEM text (-----BEGIN ...)")
    return value
