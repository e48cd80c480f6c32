"""Broker configuration: Kafka's ``server.properties`` keys, types and defaults.

Unknown keys warn (a typo should not stop a broker, but it should be seen);
a value that does not parse or is out of range fails start-up with a message
naming the key. Keys that Kafka has but pybroker does not act on yet are listed
in ``NOT_YET_SUPPORTED`` and warn as such, instead of being silently accepted.

Past 700 lines on purpose: the start-up checks that read several keys together
(roles and quorum, listeners and their security, the authorizer's needs) stay
next to the keys they read; DescribeConfigs' texts are in config_info.py.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# DescribeConfigs' type names and descriptions of the keys, re-exported from here.
from broker.config_info import BROKER_CONFIG_INFO  # noqa: F401
from broker.net.limits import LimitSettings, limit_settings
from controller.authorizer import parse_super_users
from controller.raft.node import RaftConfig
from controller.raft.quorum_config import (
    TIMING_KEYS,
    QuorumConfigError,
    VoterAddress,
    check_node_in_quorum,
    parse_bootstrap_servers,
    parse_voters,
    raft_config,
)

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A configuration value is missing, malformed or out of range."""


# --------------------------------------------------------------------------- properties files


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text: ``key=value``, ``key: value`` or ``key value``,
    ``#``/``!`` comments and backslash line continuations."""
    result: dict[str, str] = {}
    logical: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        # A line ending in an odd number of backslashes continues on the next line.
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        logical.append(line)
    for line in logical:
        match = re.match(r"((?:\\.|[^=:\s\\])+)\s*[=:\s]?\s*(.*)$", line)
        if not match:
            continue
        key = _unescape(match.group(1))
        result[key] = _unescape(match.group(2).rstrip())
    return result


def _unescape(text: str) -> str:
    def repl(m: re.Match) -> str:
        if m.group(1):
            return chr(int(m.group(1), 16))
        c = m.group(2)
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c)

    # \uXXXX, \t \n \r \f, any other escaped character as itself, and a lone
    # trailing backslash dropped, as java.util.Properties reads them.
    return re.sub(r"\\(?:u([0-9a-fA-F]{4})|(.)|$)", lambda m: repl(m) if (m.group(1) or m.group(2)) else "", text)


# --------------------------------------------------------------------------- value types


def _parse_bool(key: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigError(f"{key}: expected true or false, got {raw!r}")


def _int_parser(low: int | None = None, high: int | None = None) -> Callable[[str, str], int]:
    def parse(key: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {raw!r}") from None
        if low is not None and value < low:
            raise ConfigError(f"{key}: {value} is below the minimum {low}")
        if high is not None and value > high:
            raise ConfigError(f"{key}: {value} is above the maximum {high}")
        return value

    return parse


def _float_parser(low: float, high: float) -> Callable[[str, str], float]:
    def parse(key: str, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ConfigError(f"{key}: expected a number, got {raw!r}") from None
        if not low <= value <= high:
            raise ConfigError(f"{key}: {value} is outside [{low}, {high}]")
        return value

    return parse


def _choice_parser(*choices: str) -> Callable[[str, str], str]:
    def parse(key: str, raw: str) -> str:
        value = raw.strip()
        if value not in choices:
            raise ConfigError(f"{key}: expected one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def _string(key: str, raw: str) -> str:
    return raw.strip()


def _voters(key: str, raw: str) -> tuple[VoterAddress, ...]:
    try:
        return parse_voters(raw, key)
    except QuorumConfigError as exc:
        raise ConfigError(str(exc)) from None


def _bootstrap_servers(key: str, raw: str) -> tuple[tuple[str, int], ...]:
    try:
        return parse_bootstrap_servers(raw, key)
    except QuorumConfigError as exc:
        raise ConfigError(str(exc)) from None


def _list(key: str, raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


def _migration_policy(key: str, raw: str) -> str:
    # Kafka reads the policy case-insensitively. This broker serves the online
    # upgrade (classic to consumer), not the downgrade: the policies that need
    # it are refused by name rather than accepted and ignored.
    value = raw.strip().lower()
    if value in ("bidirectional", "downgrade"):
        raise ConfigError(
            f"{key}: {value} is not served: no online downgrade of a consumer group with members to the classic "
            "protocol; upgrade or disabled"
        )
    if value not in ("upgrade", "disabled"):
        raise ConfigError(f"{key}: expected upgrade or disabled (Kafka's bidirectional and downgrade are not served), got {raw!r}")
    return value


def _assignors(key: str, raw: str) -> tuple[str, ...]:
    names = tuple(_list(key, raw))
    unknown = [n for n in names if n not in ("uniform", "range")]
    if not names or unknown:
        raise ConfigError(f"{key}: the server-side assignors are uniform and range, not {', '.join(unknown) or 'none'}")
    return names


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(key: str, raw: str) -> list[Listener]:
    listeners = []
    for entry in _list(key, raw):
        match = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(-?\d+)", entry)
        if not match:
            raise ConfigError(f"{key}: {entry!r} is not NAME://host:port")
        host = match.group(2).strip("[]")
        port = int(match.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"{key}: port {port} out of range")
        listeners.append(Listener(match.group(1).upper(), host, port))
    if not listeners:
        raise ConfigError(f"{key}: at least one listener is required")
    names = [l.name for l in listeners]
    if len(set(names)) != len(names):
        raise ConfigError(f"{key}: listener names must be unique")
    return listeners


@dataclass(frozen=True)
class MetricsListener:
    """``metrics.listener`` (broker/http/metrics.py): where Prometheus scrapes; empty host: every interface."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def parse_metrics_listener(key: str, raw: str) -> MetricsListener | None:
    """``http://HOST:PORT``, an empty value: off. Plain HTTP only: Prometheus scrapes
    from the cluster's own network, and TLS here would need keys of its own."""
    raw = raw.strip()
    if not raw:
        return None
    match = re.fullmatch(r"http://(\[[^\]]*\]|[^:/\[\]]*):(\d+)/?", raw)
    if match is None:
        raise ConfigError(f"{key}: {raw!r} is not http://host:port (for example http://127.0.0.1:9404)")
    port = int(match.group(2))
    if port > 65535:
        raise ConfigError(f"{key}: port {port} out of range")
    return MetricsListener(match.group(1).strip("[]"), port)


# --------------------------------------------------------------------------- the keys

INT32_MAX = 2**31 - 1


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's default: a listener named after a protocol speaks it.
DEFAULT_SECURITY_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
# Kafka's TLS keys, read by broker/net/tls.py. They are kept apart from the other
# keys (BrokerConfig.ssl), so that DescribeConfigs never sees key material.
SSL_KEYS = frozenset(
    {
        "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.certificate.chain",
        "ssl.keystore.key", "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location",
        "ssl.truststore.password", "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
        "ssl.protocol", "ssl.cipher.suites", "ssl.endpoint.identification.algorithm", "ssl.principal.mapping.rules",
        "ssl.provider", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.secure.random.implementation",
        "ssl.engine.factory.class",
    }
)
_LISTENER_SSL_KEY = re.compile(r"listener\.name\.([^.]+)\.(ssl\..+)")
# A SASL listener's own keys, read by broker/net/sasl_listener.py: its mechanisms,
# and per mechanism its JAAS entry (PLAIN passwords: kept out of
# DescribeConfigs with the TLS keys) and session lifetime.
_LISTENER_SASL_KEY = re.compile(
    r"listener\.name\.([^.]+)\.(sasl\.enabled\.mechanisms|[^.]+\.sasl\.jaas\.config|[^.]+\.connections\.max\.reauth\.ms"
    r"|[^.]+\.sasl\.server\.callback\.handler\.class)"
)
# A listener's own connection limits (broker/net/limits.py).
_LISTENER_LIMIT_KEY = re.compile(r"listener\.name\.[^.]+\.max\.(connections|connection\.creation\.rate)")


@dataclass(frozen=True)
class ConfigKey:
    name: str
    parse: Callable[[str, str], Any]
    default: Any
    synonyms: tuple[str, ...] = ()


RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

_KEYS = [
    ConfigKey("node.id", _int_parser(0, INT32_MAX), 1, synonyms=("broker.id",)),
    ConfigKey("process.roles", _list, ["broker", "controller"]),
    ConfigKey("listeners", parse_listeners, "PLAINTEXT://127.0.0.1:9092"),
    ConfigKey("advertised.listeners", parse_listeners, None),
    ConfigKey("listener.security.protocol.map", _string, DEFAULT_SECURITY_PROTOCOL_MAP),
    ConfigKey("log.dirs", _list, None, synonyms=("log.dir",)),
    ConfigKey("num.partitions", _int_parser(1), 1),
    ConfigKey("default.replication.factor", _int_parser(1, 32767), 1),
    ConfigKey("auto.create.topics.enable", _parse_bool, True),
    ConfigKey("delete.topic.enable", _parse_bool, True),
    ConfigKey("log.segment.bytes", _int_parser(14, INT32_MAX), 1073741824),
    ConfigKey("log.index.interval.bytes", _int_parser(0, INT32_MAX), 4096),
    ConfigKey("log.roll.hours", _int_parser(1, INT32_MAX), 168),
    ConfigKey("log.roll.ms", _int_parser(1), None),
    ConfigKey("message.max.bytes", _int_parser(0, INT32_MAX), 1048588),
    ConfigKey("socket.request.max.bytes", _int_parser(1, INT32_MAX), 104857600),
    # Kafka's default: a connection with nothing received or answered for 10
    # minutes is closed (clients reconnect when they need to); <= 0: never.
    ConfigKey("connections.max.idle.ms", _int_parser(), 600_000),
    ConfigKey("log.message.timestamp.type", _choice_parser("CreateTime", "LogAppendTime"), "CreateTime"),
    ConfigKey("replica.fetch.max.bytes", _int_parser(0, INT32_MAX), 1048576),
    ConfigKey("fetch.max.bytes", _int_parser(1024, INT32_MAX), 57671680),
    ConfigKey("queued.max.requests", _int_parser(1, INT32_MAX), 500),
    # Kafka's default -1 (any value <= 0): no bound on the request bytes
    # received and not yet answered; otherwise at least socket.request.max.bytes.
    ConfigKey("queued.max.request.bytes", _int_parser(), -1),
    # Connection limits (broker/net/limits.py), Kafka's names and defaults (no limit);
    # listener.name.<l>.max.connections and .max.connection.creation.rate too.
    ConfigKey("max.connections", _int_parser(0, INT32_MAX), INT32_MAX),
    ConfigKey("max.connections.per.ip", _int_parser(0, INT32_MAX), INT32_MAX),
    ConfigKey("max.connections.per.ip.overrides", _string, ""),
    ConfigKey("max.connection.creation.rate", _int_parser(0, INT32_MAX), INT32_MAX),
    ConfigKey("log.index.size.max.bytes", _int_parser(4, INT32_MAX), 10485760),
    ConfigKey("log.flush.interval.messages", _int_parser(1), 2**63 - 1),
    ConfigKey("log.flush.interval.ms", _int_parser(0), None),
    ConfigKey("log.flush.scheduler.interval.ms", _int_parser(0), 2**63 - 1),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", _int_parser(0, INT32_MAX), 60000),
    ConfigKey("log.retention.hours", _int_parser(-1, INT32_MAX), 168),
    ConfigKey("log.retention.minutes", _int_parser(-1, INT32_MAX), None),
    ConfigKey("log.retention.ms", _int_parser(-1), None),
    ConfigKey("log.retention.bytes", _int_parser(-1), -1),
    ConfigKey("log.retention.check.interval.ms", _int_parser(1), 300000),
    ConfigKey("log.cleanup.policy", _string, "delete"),
    ConfigKey("log.cleaner.delete.retention.ms", _int_parser(0), 86400000),
    ConfigKey("log.cleaner.enable", _parse_bool, True),
    ConfigKey("log.cleaner.backoff.ms", _int_parser(0), 15000),
    ConfigKey("log.cleaner.min.cleanable.ratio", _float_parser(0.0, 1.0), 0.5),
    ConfigKey("log.cleaner.min.compaction.lag.ms", _int_parser(0), 0),
    ConfigKey("producer.id.expiration.ms", _int_parser(1, INT32_MAX), 86400000),
    ConfigKey("producer.id.expiration.check.interval.ms", _int_parser(1, INT32_MAX), 600000),
    # pybroker's own: how many segment files may be open at once (see storage.handle_pool);
    # unless set, also capped at half of the process's open-file limit.
    ConfigKey("log.open.files.max", _int_parser(16, INT32_MAX), 1024),
    # pybroker's own: the background scrubber that re-reads every segment and
    # checks its batches' CRCs (broker/replica/corruption.py): how many bytes
    # a second it reads at most (0: no scrubber), and how long a pass waits
    # after the one before started. An hour: a pass costs a thread hand-off per
    # segment, seconds of CPU on a broker of 100,000 partitions, and a batch a
    # follower will read again is checked when it is sent anyway.
    ConfigKey("log.scrub.bytes.per.second", _int_parser(0), 4 * 1024 * 1024),
    ConfigKey("log.scrub.interval.ms", _int_parser(1), 3_600_000),
    ConfigKey("offsets.topic.num.partitions", _int_parser(1, INT32_MAX), 50),
    ConfigKey("offsets.topic.segment.bytes", _int_parser(1, INT32_MAX), 104857600),
    ConfigKey("offsets.topic.replication.factor", _int_parser(1, 32767), 3),
    ConfigKey("offsets.commit.timeout.ms", _int_parser(1, INT32_MAX), 5000),
    ConfigKey("offsets.retention.minutes", _int_parser(1, INT32_MAX), 10080),
    ConfigKey("offsets.retention.check.interval.ms", _int_parser(1), 600000),
    ConfigKey("offset.metadata.max.bytes", _int_parser(0, INT32_MAX), 4096),
    # The transaction coordinator (Kafka's names and defaults).
    ConfigKey("transaction.state.log.num.partitions", _int_parser(1, INT32_MAX), 50),
    ConfigKey("transaction.state.log.replication.factor", _int_parser(1, 32767), 3),
    ConfigKey("transaction.state.log.min.isr", _int_parser(1, INT32_MAX), 2),
    ConfigKey("transaction.state.log.segment.bytes", _int_parser(1, INT32_MAX), 104857600),
    ConfigKey("transaction.max.timeout.ms", _int_parser(1, INT32_MAX), 900000),
    ConfigKey("transactional.id.expiration.ms", _int_parser(1, INT32_MAX), 604800000),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", _int_parser(1, INT32_MAX), 10000),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", _int_parser(1, INT32_MAX), 3600000),
    ConfigKey("group.initial.rebalance.delay.ms", _int_parser(0, INT32_MAX), 3000),
    ConfigKey("group.min.session.timeout.ms", _int_parser(0, INT32_MAX), 6000),
    ConfigKey("group.max.session.timeout.ms", _int_parser(0, INT32_MAX), 1800000),
    ConfigKey("group.max.size", _int_parser(1, INT32_MAX), INT32_MAX),
    # KIP-848 consumer groups (Kafka's names and defaults; assignors by their short names).
    ConfigKey("group.consumer.session.timeout.ms", _int_parser(1, INT32_MAX), 45000),
    ConfigKey("group.consumer.heartbeat.interval.ms", _int_parser(1, INT32_MAX), 5000),
    ConfigKey("group.consumer.max.size", _int_parser(1, INT32_MAX), INT32_MAX),
    ConfigKey("group.consumer.assignors", _assignors, ("uniform", "range")),
    ConfigKey("group.consumer.migration.policy", _migration_policy, "upgrade"),
    # KIP-932 share groups (Kafka's names and defaults). share.auto.offset.reset
    # is a group config in Kafka; without group configs it is set here for all.
    ConfigKey("group.share.session.timeout.ms", _int_parser(1, INT32_MAX), 45000),
    ConfigKey("group.share.heartbeat.interval.ms", _int_parser(1, INT32_MAX), 5000),
    ConfigKey("group.share.max.size", _int_parser(1, 1000), 200),
    ConfigKey("group.share.record.lock.duration.ms", _int_parser(1000, 3600000), 30000),
    ConfigKey("group.share.delivery.count.limit", _int_parser(2, 10), 5),
    ConfigKey("group.share.partition.max.record.locks", _int_parser(100, 10000), 2000),
    ConfigKey("share.auto.offset.reset", _choice_parser("latest", "earliest"), "latest"),
    ConfigKey("share.coordinator.state.topic.num.partitions", _int_parser(1, INT32_MAX), 50),
    ConfigKey("share.coordinator.state.topic.replication.factor", _int_parser(1, 32767), 3),
    ConfigKey("share.coordinator.state.topic.min.isr", _int_parser(1, INT32_MAX), 2),
    ConfigKey("share.coordinator.state.topic.segment.bytes", _int_parser(1, INT32_MAX), 104857600),
    ConfigKey("share.coordinator.snapshot.update.records.per.snapshot", _int_parser(0, 500), 500),
    ConfigKey("cluster.id", _string, None),
    ConfigKey("broker.rack", _string, None),
    ConfigKey("max.request.partition.size.limit", _int_parser(1, INT32_MAX), 2000),
    # KRaft: the static voter set, the controller listener and the Raft timings.
    ConfigKey("controller.quorum.voters", _voters, ()),
    ConfigKey("controller.quorum.bootstrap.servers", _bootstrap_servers, ()),
    ConfigKey("controller.listener.names", _list, None),
    ConfigKey("controller.quorum.election.timeout.ms", _int_parser(1, INT32_MAX), 1000),
    ConfigKey("controller.quorum.fetch.timeout.ms", _int_parser(1, INT32_MAX), 2000),
    ConfigKey("controller.quorum.election.backoff.max.ms", _int_parser(1, INT32_MAX), 1000),
    ConfigKey("controller.quorum.request.timeout.ms", _int_parser(1, INT32_MAX), 2000),
    ConfigKey("controller.quorum.retry.backoff.ms", _int_parser(1, INT32_MAX), 20),
    ConfigKey("broker.session.timeout.ms", _int_parser(1, INT32_MAX), 9000),
    ConfigKey("broker.heartbeat.interval.ms", _int_parser(1, INT32_MAX), 2000),
    ConfigKey("metadata.log.dir", _string, None),
    ConfigKey("metadata.log.max.record.bytes.between.snapshots", _int_parser(1), 20971520),
    ConfigKey("metadata.log.max.snapshot.interval.ms", _int_parser(0), 3600000),
    # Kafka's lower bound is a record batch's log overhead (offset and length), 12 bytes.
    ConfigKey("metadata.log.segment.bytes", _int_parser(12, INT32_MAX), 1073741824),
    ConfigKey("initial.broker.registration.timeout.ms", _int_parser(1, INT32_MAX), 60000),
    # Replication (Kafka's names and defaults).
    ConfigKey("inter.broker.listener.name", _string, None),
    # Kafka's older way to name it: the listener called after this protocol
    # (Kafka's default PLAINTEXT is not applied: unset, the first advertised listener is used).
    ConfigKey("security.inter.broker.protocol", _choice_parser(*SECURITY_PROTOCOLS), None),
    ConfigKey("min.insync.replicas", _int_parser(1, INT32_MAX), 1),
    ConfigKey("replica.lag.time.max.ms", _int_parser(1), 30000),
    ConfigKey("replica.fetch.min.bytes", _int_parser(1, INT32_MAX), 1),
    ConfigKey("replica.fetch.wait.max.ms", _int_parser(0, INT32_MAX), 500),
    ConfigKey("replica.fetch.response.max.bytes", _int_parser(0, INT32_MAX), 10485760),
    ConfigKey("replica.fetch.backoff.ms", _int_parser(0, INT32_MAX), 1000),
    ConfigKey("replica.socket.timeout.ms", _int_parser(1, INT32_MAX), 30000),
    ConfigKey("num.replica.fetchers", _int_parser(1, INT32_MAX), 1),
    ConfigKey("max.incremental.fetch.session.cache.slots", _int_parser(0, INT32_MAX), 1000),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", _int_parser(1), 5000),
    ConfigKey("auto.leader.rebalance.enable", _parse_bool, True),
    # The cluster-wide default a topic's own unclean.leader.election.enable
    # overrides; the active controller's static value, unless set dynamically.
    ConfigKey("unclean.leader.election.enable", _parse_bool, False),
    ConfigKey("leader.imbalance.check.interval.seconds", _int_parser(1), 300),
    ConfigKey("leader.imbalance.per.broker.percentage", _int_parser(0, 100), 10),
    # The balancer in the active controller (controller/balancer/driver.py, docs/clusters.md):
    # node_add fills brokers that joined empty and re-creates the replicas of brokers
    # fenced for longer than the failure threshold; continuous also evens out imbalance.
    # Defaults are Confluent Self-Balancing's (an hour before a broker is given up on,
    # 10 MiB/s) and Cruise Control's 5 concurrent moves per broker.
    ConfigKey("balancer.mode", _choice_parser("off", "node_add", "continuous"), "node_add"),
    ConfigKey("balancer.broker.failure.threshold.ms", _int_parser(0, 2**63 - 1), 3_600_000),
    ConfigKey("balancer.throttle.bytes.per.second", _int_parser(1, 2**63 - 1), 10_485_760),
    ConfigKey("balancer.max.moves.per.broker", _int_parser(1, INT32_MAX), 5),
    ConfigKey("balancer.imbalance.threshold.percent", _int_parser(0, 1000), 10),
    # A broker whose log dirs' file systems are fuller than this gets replicas moved off (every mode but off).
    ConfigKey("balancer.disk.threshold.percent", _int_parser(1, 100), 80),
    # pybroker's own (cluster links, multi-master topics): this cluster's origin
    # number. The active controller hands out producer ids only in
    # [origin << 48, (origin + 1) << 48), so a batch's producer id names the
    # cluster it was first written in (controller/metadata_commands.py).
    # Static, read by the controllers; every controller of a cluster must agree.
    ConfigKey("cluster.link.origin.id", _int_parser(0, 1023), 0),
    # KIP-392: unset means consumers read from leaders; Kafka's rack-aware
    # selector is the one implementation pybroker has.
    ConfigKey("replica.selector.class", _choice_parser(RACK_AWARE_REPLICA_SELECTOR), None),
    # SASL listeners (broker/net/sasl_listener.py), Kafka's names and defaults.
    # GSSAPI, Kafka's default mechanism, is not served: a SASL listener must name its mechanisms.
    ConfigKey("sasl.enabled.mechanisms", _list, ["GSSAPI"]),
    ConfigKey("connections.max.reauth.ms", _int_parser(0), 0),
    ConfigKey("sasl.server.max.receive.size", _int_parser(1, INT32_MAX), 524288),
    ConfigKey("connection.failed.authentication.delay.ms", _int_parser(0, INT32_MAX), 100),
    # The mechanism a node authenticates with to the inter-broker and controller
    # listeners of other nodes when they speak SASL; Kafka's default, GSSAPI, is
    # refused then (see _check_node_sasl).
    ConfigKey("sasl.mechanism.inter.broker.protocol", _string, "GSSAPI"),
    ConfigKey("sasl.mechanism.controller.protocol", _string, "GSSAPI"),
    # OAUTHBEARER's JWKS-verified validator (broker/security/jwks.py), used by a listener whose
    # listener.name.<l>.oauthbearer.sasl.server.callback.handler.class names Kafka's validator.
    ConfigKey("sasl.oauthbearer.jwks.endpoint.url", _string, None),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.refresh.ms", _int_parser(1), 3_600_000),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", _int_parser(0), 100),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", _int_parser(0), 10_000),
    ConfigKey("sasl.oauthbearer.expected.audience", _list, []),
    ConfigKey("sasl.oauthbearer.expected.issuer", _string, None),
    ConfigKey("sasl.oauthbearer.scope.claim.name", _string, "scope"),
    ConfigKey("sasl.oauthbearer.sub.claim.name", _string, "sub"),
    ConfigKey("sasl.oauthbearer.clock.skew.seconds", _int_parser(0, INT32_MAX), 30),
    # Prometheus metrics (broker/http/metrics.py): off unless metrics.listener is set; the
    # series caps bound what a scrape returns, however many topics and groups there are.
    ConfigKey("metrics.listener", parse_metrics_listener, None),
    ConfigKey("metrics.topic.series.max", _int_parser(0, INT32_MAX), 1000),
    ConfigKey("metrics.group.series.max", _int_parser(0, INT32_MAX), 10000),
    # The web console (broker/http/console/): off unless console.listener is set; read-only
    # refuses every form that changes the cluster; the lag graphs keep this much history.
    ConfigKey("console.listener", parse_metrics_listener, None),
    ConfigKey("console.read.only", _parse_bool, False),
    ConfigKey("console.lag.history.ms", _int_parser(10_000, 86_400_000), 900_000),
    # The REST proxy (broker/http/rest/): off unless rest.listener is set. BASIC checks HTTP
    # basic credentials against the PLAIN users of rest.authentication.listener's JAAS config.
    ConfigKey("rest.listener", parse_metrics_listener, None),
    ConfigKey("rest.authentication.method", _choice_parser("NONE", "BASIC"), "NONE"),
    ConfigKey("rest.authentication.listener", _string, None),
    # The schema registry (broker/schemas/, broker/http/schema_registry.py): off unless
    # schema.registry.listener is set; its _schemas topic's replicas (Confluent's
    # kafkastore.topic.replication.factor), the single-node profile's 1.
    ConfigKey("schema.registry.listener", parse_metrics_listener, None),
    ConfigKey("schema.registry.topic.replication.factor", _int_parser(1, 32767), 3),
    # A v2 consumer instance not used for this long is closed (Confluent's consumer.instance.timeout.ms).
    ConfigKey("rest.consumer.instance.timeout.ms", _int_parser(1000, INT32_MAX), 300_000),
    # Authorization (Kafka's names and defaults); see _check_authorizer.
    ConfigKey("authorizer.class.name", _string, None),
    ConfigKey("super.users", _string, None),
    ConfigKey("allow.everyone.if.no.acl.found", _parse_bool, False),
    # Client quotas (broker/net/quotas.py): rates are measured over this many samples of this many seconds.
    ConfigKey("quota.window.num", _int_parser(1, INT32_MAX), 11),
    ConfigKey("quota.window.size.seconds", _int_parser(1, INT32_MAX), 1),
    # controller_mutation_rate: a token bucket whose burst is the quota over this many samples of this length.
    ConfigKey("controller.quota.window.num", _int_parser(1, INT32_MAX), 11),
    ConfigKey("controller.quota.window.size.seconds", _int_parser(1, INT32_MAX), 1),
]

KEYS: dict[str, ConfigKey] = {}
for _key in _KEYS:
    KEYS[_key.name] = _key
    for _syn in _key.synonyms:
        KEYS[_syn] = _key

# Kafka keys a user may well carry over from a real server.properties; we
# recognise them so the warning says "not supported yet" rather than "unknown".
NOT_YET_SUPPORTED = frozenset(
    {
        "num.network.threads",
        "num.io.threads",
        "num.recovery.threads.per.data.dir",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "compression.type",
        # KIP-1066's log dir cordon: pybroker cordons whole brokers only
        # (pybroker cluster cordon), not single log dirs.
        "cordoned.log.dirs",
    }
)


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def format_broker_value(value: Any) -> str | None:
    """A parsed broker config value as DescribeConfigs reports it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        # A (host, port) pair is one controller.quorum.bootstrap.servers entry.
        return ",".join(_host_port(*v) if isinstance(v, tuple) else str(v) for v in value)
    return str(value)


@dataclass
class BrokerConfig:
    values: dict[str, Any]
    explicit: dict[str, str] = field(default_factory=dict)
    # The ssl.* and listener.name.<name>.ssl.* keys as given (broker/net/tls.py reads them).
    ssl: dict[str, str] = field(default_factory=dict)
    # Listener name -> security protocol (listener.security.protocol.map with Kafka's defaults).
    security_protocols: dict[str, str] = field(default_factory=dict)
    # The listener.name.<name>.sasl.enabled.mechanisms and .<mechanism>.sasl.jaas.config
    # / .connections.max.reauth.ms keys as given (broker/net/sasl_listener.py reads them).
    sasl: dict[str, str] = field(default_factory=dict)
    # max.connections* and the creation rates, with the listener.name.<l>.* forms (load_config).
    connection_limits: LimitSettings = field(default_factory=LimitSettings)

    def ssl_settings(self, listener_name: str) -> dict[str, str]:
        """A listener's ssl.* keys: the global ones, each overridden by its
        listener.name.<lowercase name>.ssl.* form, as Kafka does."""
        merged = {k: v for k, v in self.ssl.items() if k.startswith("ssl.")}
        prefix = f"listener.name.{listener_name.lower()}."
        merged.update({k[len(prefix):]: v for k, v in self.ssl.items() if k.startswith(prefix)})
        return merged

    def security_protocol(self, listener_name: str) -> str:
        return self.security_protocols.get(listener_name, "PLAINTEXT")

    def __getitem__(self, key: str) -> Any:
        return self.values[KEYS[key].name]

    @property
    def node_id(self) -> int:
        return self["node.id"]

    @property
    def listeners(self) -> list[Listener]:
        return self["listeners"]

    @property
    def advertised_listeners(self) -> list[Listener]:
        advertised = self["advertised.listeners"]
        if advertised:
            return advertised
        # Kafka advertises the bind address; 0.0.0.0 cannot be dialled, so
        # fall back to loopback as the most useful single-node answer.
        return [
            Listener(l.name, l.host if l.host not in ("", "0.0.0.0", "::") else "127.0.0.1", l.port)
            for l in self.broker_listeners
        ]

    @property
    def inter_broker_listener_name(self) -> str | None:
        """The listener brokers reach each other on (replica fetches, transaction
        markers): inter.broker.listener.name, else the listener named after
        security.inter.broker.protocol, else the first advertised one."""
        return _inter_broker_listener(self.values)

    @property
    def node_listener_names(self) -> dict[str, str]:
        """The listeners this node reaches other nodes on, by the key of their SASL
        mechanism: sasl.mechanism.inter.broker.protocol -> the inter-broker
        listener (brokers), sasl.mechanism.controller.protocol -> the first of
        controller.listener.names; empty for a quorum of one."""
        return _node_listeners(self.values)

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(self["process.roles"])

    @property
    def controller_listener_names(self) -> list[str]:
        return self["controller.listener.names"] or []

    @property
    def controller_listeners(self) -> list[Listener]:
        names = self.controller_listener_names
        return [l for l in self.listeners if l.name in names]

    @property
    def broker_listeners(self) -> list[Listener]:
        """The listeners clients use (none on a controller-only node)."""
        if "broker" not in self.roles:
            return []
        names = self.controller_listener_names
        return [l for l in self.listeners if l.name not in names]

    @property
    def single_node_quorum(self) -> bool:
        """The convenience default: a combined node with no voters, no bootstrap
        servers and no controller listener is a quorum of one, run in-process."""
        return self.roles == {"broker", "controller"} and not self["controller.quorum.voters"] and not self.quorum_bootstrap_servers

    @property
    def quorum_voters(self) -> dict[int, tuple[str, int] | None]:
        """Voter id -> (host, port) of its controller listener, in the configured order.

        The single-node quorum is ``{node_id: None}``: its one voter is this
        process, which nobody dials. A broker-only node configured with
        bootstrap servers only gets ``{}`` and learns the leader from them."""
        voters = self["controller.quorum.voters"]
        if not voters and self.single_node_quorum:
            return {self.node_id: None}
        return {v.node_id: (v.host, v.port) for v in voters}

    @property
    def quorum_bootstrap_servers(self) -> list[tuple[str, int]]:
        """controller.quorum.bootstrap.servers as (host, port) pairs."""
        return list(self["controller.quorum.bootstrap.servers"])

    @property
    def raft_config(self) -> RaftConfig:
        return raft_config({key: self[key] for key in TIMING_KEYS})

    @property
    def metadata_log_dir(self) -> Path:
        configured = self["metadata.log.dir"]
        return Path(configured) if configured else self.log_dirs[0]

    @property
    def log_dirs(self) -> list[Path]:
        return [Path(d) for d in self["log.dirs"]]

    @property
    def log_roll_ms(self) -> int:
        return self["log.roll.ms"] or self["log.roll.hours"] * 3_600_000

    @property
    def log_retention_ms(self) -> int:
        """log.retention.ms, else minutes, else hours; -1 keeps data forever."""
        if self["log.retention.ms"] is not None:
            return self["log.retention.ms"]
        if self["log.retention.minutes"] is not None:
            return self["log.retention.minutes"] * 60_000
        hours = self["log.retention.hours"]
        return -1 if hours < 0 else hours * 3_600_000

    @property
    def log_flush_interval_ms(self) -> int:
        value = self["log.flush.interval.ms"]
        return self["log.flush.scheduler.interval.ms"] if value is None else value


def load_config(overrides: dict[str, str], *, base_dir: Path | None = None, warn: Callable[[str], None] | None = None) -> BrokerConfig:
    """Build a validated config from raw string values (file contents plus overrides)."""
    warn = warn or log.warning
    values: dict[str, Any] = {}
    explicit: dict[str, str] = {}
    ssl_values: dict[str, str] = {}
    sasl_values: dict[str, str] = {}
    limit_values: dict[str, str] = {}
    for raw_key, raw_value in overrides.items():
        if _LISTENER_LIMIT_KEY.fullmatch(raw_key):
            limit_values[raw_key] = raw_value
            continue
        listener_key = _LISTENER_SSL_KEY.fullmatch(raw_key)
        if raw_key in SSL_KEYS or (listener_key and listener_key.group(2) in SSL_KEYS):
            ssl_values[raw_key] = raw_value
            continue
        if _LISTENER_SASL_KEY.fullmatch(raw_key):
            sasl_values[raw_key] = raw_value
            continue
        if raw_key == "sasl.jaas.config":
            warn(
                "config key sasl.jaas.config: a broker reads JAAS entries per listener and mechanism, "
                "as listener.name.<listener>.<mechanism>.sasl.jaas.config; ignored"
            )
            continue
        key = KEYS.get(raw_key)
        if key is None:
            if raw_key in NOT_YET_SUPPORTED:
                warn(f"config key {raw_key} is not supported by pybroker yet; ignored")
            else:
                warn(f"unknown config key {raw_key}; ignored")
            continue
        if key.name in explicit and raw_key != key.name:
            continue  # the canonical name wins over a legacy synonym
        if raw_value.strip() == "" and key.default is None:
            values[key.name] = None  # an empty optional key means "not set"
        else:
            values[key.name] = key.parse(raw_key, raw_value)
        explicit[key.name] = raw_value
    for key in _KEYS:
        values.setdefault(key.name, key.default)
    if values["log.dirs"] is None:
        values["log.dirs"] = ["/tmp/pybroker-logs"]
    if base_dir is not None:
        values["log.dirs"] = [str(d if Path(d).is_absolute() else (base_dir / d)) for d in values["log.dirs"]]
        if values["metadata.log.dir"] and not Path(values["metadata.log.dir"]).is_absolute():
            values["metadata.log.dir"] = str(base_dir / values["metadata.log.dir"])
    if isinstance(values["listeners"], str):
        values["listeners"] = parse_listeners("listeners", values["listeners"])
    _check_roles(values)
    security_protocols = _security_protocols(values, "listener.security.protocol.map" in explicit)
    _check_node_sasl(values, security_protocols, sasl_values)
    _check_authorizer(values, security_protocols, ssl_values)
    _check_console(values)
    for raw_key in [*ssl_values, *sasl_values]:
        listener_key = _LISTENER_SSL_KEY.fullmatch(raw_key) or _LISTENER_SASL_KEY.fullmatch(raw_key)
        if listener_key and listener_key.group(1).upper() not in security_protocols:
            warn(f"config key {raw_key} names no listener (the name is the listener's, lower-cased); ignored")
    advertised = values["advertised.listeners"]
    if advertised:
        names = {l.name for l in values["listeners"]}
        for listener in advertised:
            if listener.name not in names:
                raise ConfigError(f"advertised.listeners: {listener.name} is not one of listeners")
    if 0 < values["queued.max.request.bytes"] < values["socket.request.max.bytes"]:
        # Kafka's rule: the budget is never smaller than the largest request.
        raise ConfigError("queued.max.request.bytes must be -1 (no limit) or at least socket.request.max.bytes")
    if values["message.max.bytes"] > values["socket.request.max.bytes"]:
        warn("message.max.bytes is larger than socket.request.max.bytes; requests that large are refused")
    if "queued.max.requests" in explicit:
        # Accepted (Kafka's files set it) but not honoured as Kafka's broker-wide count:
        # each connection queues at most 64 requests, and queued.max.request.bytes bounds memory.
        warn(
            "queued.max.requests is not honoured: pybroker queues at most 64 requests per connection; "
            "bound request memory with queued.max.request.bytes"
        )
    limits = _connection_limits(values, limit_values, warn)
    return BrokerConfig(values, explicit, ssl_values, security_protocols, sasl_values, connection_limits=limits)


def _connection_limits(values: dict[str, Any], limit_values: dict[str, str], warn: Callable[[str], None]) -> LimitSettings:
    """The connection limits, by Kafka's rules (broker/net/limits.limit_settings)."""
    try:
        return limit_settings(
            values, limit_values, [l.name for l in values["listeners"]], _inter_broker_listener(values), warn, _resolve_host
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _resolve_host(host: str) -> list[str]:
    """Every address a host name in max.connections.per.ip.overrides names, resolved once
    as the configuration is read (as Kafka does); none when it does not resolve."""
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})
    except OSError:
        return []


def _security_protocols(values: dict[str, Any], explicit: bool) -> dict[str, str]:
    """listener.security.protocol.map checked against the listeners, by Kafka's
    rules: with the default map a listener named after a protocol speaks it and,
    in KRaft, controller listeners speak PLAINTEXT unless some listener is SSL or
    SASL; a listener the map does not name is an error."""
    key = "listener.security.protocol.map"
    mapping: dict[str, str] = {}
    for entry in _list(key, values[key]):
        name, _, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not name or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"{key}: {entry!r} is not NAME:PROTOCOL with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        mapping[name] = protocol
    names = list(dict.fromkeys([l.name for l in values["listeners"]] + (values["controller.listener.names"] or [])))
    if not explicit and not any(n in ("SSL", "SASL_SSL", "SASL_PLAINTEXT") for n in names):
        for name in values["controller.listener.names"] or []:
            mapping.setdefault(name, "PLAINTEXT")
    result = {}
    for name in names:
        protocol = mapping.get(name)
        if protocol is None:
            raise ConfigError(f"{key}: listener {name} has no security protocol; add {name}:PLAINTEXT or {name}:SSL")
        result[name] = protocol
    return result


# Kafka's KRaft authorizer, the one authorizer.class.name pybroker accepts.
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# The principal of every connection without TLS client certificates or SASL.
ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"
INTER_BROKER_MECHANISM_KEY = "sasl.mechanism.inter.broker.protocol"
CONTROLLER_MECHANISM_KEY = "sasl.mechanism.controller.protocol"
# What a node can authenticate to another with (broker/security/sasl_client.py).
NODE_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _single_node_quorum(values: dict[str, Any]) -> bool:
    return (
        set(values["process.roles"]) == {"broker", "controller"}
        and not values["controller.quorum.voters"]
        and not values["controller.quorum.bootstrap.servers"]
    )


def _inter_broker_listener(values: dict[str, Any]) -> str | None:
    """See BrokerConfig.inter_broker_listener_name."""
    configured = values["inter.broker.listener.name"] or values["security.inter.broker.protocol"]
    if configured is not None:
        return configured
    if "broker" not in values["process.roles"]:
        return None
    controllers = set(values["controller.listener.names"] or [])
    advertised = values["advertised.listeners"] or [l for l in values["listeners"] if l.name not in controllers]
    return advertised[0].name if advertised else None


def _node_listeners(values: dict[str, Any]) -> dict[str, str]:
    """See BrokerConfig.node_listener_names."""
    if _single_node_quorum(values):
        return {}
    listeners = {}
    inter_broker = _inter_broker_listener(values) if "broker" in values["process.roles"] else None
    if inter_broker is not None:
        listeners[INTER_BROKER_MECHANISM_KEY] = inter_broker
    controller_names = values["controller.listener.names"] or []
    if controller_names:
        listeners[CONTROLLER_MECHANISM_KEY] = controller_names[0]
    return listeners


def _check_node_sasl(values: dict[str, Any], security_protocols: dict[str, str], sasl_values: dict[str, str]) -> None:
    """A node whose inter-broker or controller listener speaks SASL authenticates
    to the other nodes with sasl.mechanism.inter.broker.protocol /
    sasl.mechanism.controller.protocol: GSSAPI (Kafka's default; pybroker has
    no Kerberos) and OAUTHBEARER (no token source between nodes) are refused,
    and where this node serves that listener its enabled mechanisms must
    include the one the other nodes use, as Kafka requires. The credentials
    (the listener's JAAS entry) are checked with the TLS files at start
    (broker/kafka_client.node_client_security)."""
    for key, listener in _node_listeners(values).items():
        if security_protocols.get(listener) not in ("SASL_PLAINTEXT", "SASL_SSL"):
            continue
        mechanism = values[key]
        what = "the inter-broker" if key == INTER_BROKER_MECHANISM_KEY else "the controller"
        if mechanism not in NODE_SASL_MECHANISMS:
            shown = "GSSAPI (Kerberos, Kafka's default)" if mechanism == "GSSAPI" else repr(mechanism)
            raise ConfigError(
                f"{key}: {what} listener {listener} is {security_protocols[listener]}, and nodes cannot authenticate "
                f"to each other with {shown}; set it to one of {', '.join(NODE_SASL_MECHANISMS)}"
            )
        serves = "broker" in values["process.roles"] if key == INTER_BROKER_MECHANISM_KEY else "controller" in values["process.roles"]
        if not serves:
            continue
        other_voters = [v for v in values["controller.quorum.voters"] or [] if v.node_id != values["node.id"]]
        if key == CONTROLLER_MECHANISM_KEY and mechanism.startswith("SCRAM-") and other_voters:
            # SCRAM credentials live in the metadata log, which the voters can only
            # replicate once they reach each other (Kafka has the same limit, KAFKA-15513).
            raise ConfigError(
                f"{key}: the controllers of a quorum of several voters cannot authenticate to each other with "
                f"{mechanism}: its credentials are in the metadata log they have yet to form; use PLAIN (or SSL "
                "client certificates) between controllers, SCRAM on the inter-broker listener"
            )
        own_key = f"listener.name.{listener.lower()}.sasl.enabled.mechanisms"
        enabled = _list(own_key, sasl_values[own_key]) if own_key in sasl_values else values["sasl.enabled.mechanisms"]
        if mechanism not in enabled:
            raise ConfigError(
                f"{key}: {mechanism} must be among the mechanisms {what} listener {listener} enables "
                f"({own_key if own_key in sasl_values else 'sasl.enabled.mechanisms'}: {', '.join(enabled)}), "
                "since the other nodes authenticate with it"
            )


def _anonymous_node_listeners(values: dict[str, Any], security_protocols: dict[str, str], ssl_values: dict[str, str]) -> list[str]:
    """The listeners other nodes reach this one on, or it reaches them on, without
    authenticating: PLAINTEXT, or SSL without ssl.client.auth=required."""
    anonymous = []
    for listener in dict.fromkeys(_node_listeners(values).values()):
        protocol = security_protocols.get(listener, "PLAINTEXT")
        if protocol == "SSL":
            client_auth = ssl_values.get(f"listener.name.{listener.lower()}.ssl.client.auth", ssl_values.get("ssl.client.auth", "none"))
            if client_auth.strip().lower() == "required":
                continue
        if protocol in ("PLAINTEXT", "SSL"):
            anonymous.append(listener)
    return anonymous


def _check_console(values: dict[str, Any]) -> None:
    """The web console has no login: its pages read the broker's state directly, so
    on a broker with an authorizer it would show every topic to whoever reaches its
    port, whatever the ACLs. Refused there rather than left as a hole."""
    if values["console.listener"] is not None and values["authorizer.class.name"]:
        raise ConfigError(
            "console.listener: the web console has no login yet and would show every topic's records to anyone "
            "who reaches it, whatever the ACLs; leave it unset on a broker with authorizer.class.name"
        )


def _check_authorizer(values: dict[str, Any], security_protocols: dict[str, str], ssl_values: dict[str, str]) -> None:
    """``super.users`` must be "Type:name" principals; ``authorizer.class.name`` may only
    name Kafka's StandardAuthorizer (the ZooKeeper-era AclAuthorizer and any other class
    are refused).

    With an authorizer, Kafka's checks on the requests nodes send each other
    (CLUSTER_ACTION for the Raft, registration, heartbeat, AlterPartition, replica
    Fetch and WriteTxnMarkers requests; the forwarded admin requests) need the
    connecting node's principal among ``super.users``. Over SASL, or SSL with
    ssl.client.auth=required, that is the node's own user or certificate principal,
    which the operator lists (as in Kafka; nothing to check here). Over PLAINTEXT,
    or SSL without client certificates, nodes connect as User:ANONYMOUS, so a node
    that is not a cluster of one by itself must list it when its inter-broker or
    controller listener is such a listener."""
    try:
        super_users = parse_super_users(values["super.users"])
    except ValueError as exc:
        raise ConfigError(f"super.users: {exc}") from None
    name = values["authorizer.class.name"]
    if not name:
        return
    if name != STANDARD_AUTHORIZER:
        raise ConfigError(f"authorizer.class.name: {name} is not supported (only {STANDARD_AUTHORIZER})")
    roles = set(values["process.roles"])
    voters = values["controller.quorum.voters"]
    alone = roles == {"broker", "controller"} and all(v.node_id == values["node.id"] for v in voters)
    anonymous = [] if alone else _anonymous_node_listeners(values, security_protocols, ssl_values)
    if anonymous and ANONYMOUS_PRINCIPAL not in super_users:
        raise ConfigError(
            f"super.users: must include {ANONYMOUS_PRINCIPAL} when authorizer.class.name is set on a node of a "
            f"cluster of several nodes whose node-to-node listeners ({', '.join(anonymous)}) do not authenticate: "
            f"nodes connect to each other there as {ANONYMOUS_PRINCIPAL} and need CLUSTER_ACTION on each other "
            "(every client on such a listener is then a super user too: give the inter-broker and controller "
            "listeners SASL, or SSL with ssl.client.auth=required, and list the nodes' principal in super.users instead)"
        )


def _check_roles(values: dict[str, Any]) -> None:
    """Kafka's KRaft start-up rules for process.roles, the quorum and the controller listener.

    Every message names the key to change. The one departure from Kafka is the
    single-node default: a combined node with none of the quorum keys set is a
    one-voter quorum of itself, run in-process without a controller listener,
    so that a bare ``listeners=...`` config starts a working broker."""
    roles = values["process.roles"]
    for role in roles:
        if role not in ("broker", "controller"):
            raise ConfigError(f"process.roles: unknown role {role!r} (only broker and controller are roles)")
    if not roles:
        raise ConfigError("process.roles: name at least one of broker and controller")
    if len(set(roles)) != len(roles):
        raise ConfigError("process.roles: name each of broker and controller at most once")
    voters = values["controller.quorum.voters"]
    bootstrap_servers = values["controller.quorum.bootstrap.servers"]
    names = [name.upper() for name in values["controller.listener.names"] or []]
    if values["controller.listener.names"] is not None:
        values["controller.listener.names"] = names
    listener_names = [listener.name for listener in values["listeners"]]
    is_controller = "controller" in roles
    if is_controller and "broker" in roles and not voters and not bootstrap_servers and not names:
        return  # one node, one voter: the quorum runs in-process
    if is_controller:
        if not voters:
            if bootstrap_servers:
                raise ConfigError(
                    "controller.quorum.voters: required on a node with the controller role; pybroker has no "
                    "dynamic quorums, so controller.quorum.bootstrap.servers alone is not enough"
                )
            raise ConfigError(
                f"controller.quorum.voters: required when process.roles is {','.join(roles)} or "
                "controller.listener.names is set (only a combined node with neither is a quorum of one by itself)"
            )
        if not names:
            raise ConfigError("controller.listener.names: required on a node with the controller role when controller.quorum.voters is set")
    else:
        if not names:
            raise ConfigError(
                "controller.listener.names: required when process.roles is broker: it names the listener "
                "(and so the security protocol) the broker reaches the controllers on"
            )
        if not voters:
            # An observer must know the voter set to find the leader; with only
            # bootstrap servers it would need KIP-853's dynamic quorum discovery.
            raise ConfigError(
                "controller.quorum.voters: a broker-only node needs the voters to find the controllers "
                "(controller.quorum.bootstrap.servers alone is not supported: pybroker has no dynamic quorums)"
            )
    if voters:
        try:
            check_node_in_quorum(values["node.id"], frozenset(roles), voters)
        except QuorumConfigError as exc:
            raise ConfigError(str(exc)) from None
    controller_listeners = [name for name in listener_names if name in names]
    broker_listeners = [name for name in listener_names if name not in names]
    if not is_controller:
        # A broker-only node dials the controllers' listener; it must not open one itself.
        if controller_listeners:
            raise ConfigError(
                f"listeners: a broker-only node must not list a controller listener ({', '.join(controller_listeners)}) "
                "from controller.listener.names"
            )
    else:
        if not controller_listeners:
            raise ConfigError(f"controller.listener.names: none of {', '.join(names)} is one of listeners")
        if "broker" in roles and not broker_listeners:
            raise ConfigError("listeners: a broker needs a listener that is not in controller.listener.names")
        if "broker" not in roles and broker_listeners:
            raise ConfigError(
                f"listeners: a controller-only node may only have controller listeners, not {', '.join(broker_listeners)}"
            )
    inter_broker = values["inter.broker.listener.name"]
    if inter_broker is not None and values["security.inter.broker.protocol"] is not None:
        raise ConfigError(
            "inter.broker.listener.name and security.inter.broker.protocol: set only one of them "
            "(inter.broker.listener.name names the listener, security.inter.broker.protocol the listener named after a protocol)"
        )
    if inter_broker is None and values["security.inter.broker.protocol"] is not None:
        inter_broker = values["security.inter.broker.protocol"]
        if "broker" in roles and inter_broker not in broker_listeners:
            raise ConfigError(
                f"security.inter.broker.protocol: there is no broker listener named {inter_broker} "
                f"({', '.join(broker_listeners)}); name the listener with inter.broker.listener.name instead"
            )
    if inter_broker is not None and "broker" in roles and inter_broker not in broker_listeners:
        raise ConfigError(f"inter.broker.listener.name: {inter_broker} is not one of the broker listeners ({', '.join(broker_listeners)})")
    # Clients only ever talk to brokers, so a controller listener is never advertised to them.
    for listener in values["advertised.listeners"] or []:
        if listener.name in names:
            raise ConfigError(f"advertised.listeners: {listener.name} is a controller listener and is not advertised")


def load_config_file(path: Path, overrides: dict[str, str] | None = None, warn: Callable[[str], None] | None = None) -> BrokerConfig:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    raw = parse_properties(text)
    raw.update(overrides or {})
    return load_config(raw, base_dir=Path.cwd(), warn=warn)
