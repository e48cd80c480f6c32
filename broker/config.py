"""Broker configuration: Kafka's ``server.properties`` keys, types and defaults.

Unknown keys warn (a typo should not stop a broker, but it should be seen);
a value that does not parse or is out of range fails start-up with a message
naming the key. Keys that Kafka has but pybroker does not act on yet are listed
in ``NOT_YET_SUPPORTED`` and warn as such, instead of being silently accepted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


# --------------------------------------------------------------------------- the keys

INT32_MAX = 2**31 - 1


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
    ConfigKey("listener.security.protocol.map", _string, "PLAINTEXT:PLAINTEXT"),
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
    # KIP-392: unset means consumers read from leaders; Kafka's rack-aware
    # selector is the one implementation pybroker has.
    ConfigKey("replica.selector.class", _choice_parser(RACK_AWARE_REPLICA_SELECTOR), None),
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
    }
)


# DescribeConfigs metadata for the broker keys: Kafka's ConfigDef type name and a
# short description in pybroker's words. None of them can be changed at run
# time (pybroker has no dynamic broker configs), so all are reported read-only.
BROKER_CONFIG_INFO: dict[str, tuple[str, str]] = {
    "node.id": ("INT", "The id of this node in the cluster."),
    "process.roles": ("LIST", "The roles this node plays: broker, controller, or both (combined)."),
    "listeners": ("STRING", "The NAME://host:port addresses the broker accepts connections on."),
    "advertised.listeners": ("STRING", "The addresses clients are told to connect to; unset means the listeners themselves."),
    "listener.security.protocol.map": ("STRING", "Listener name to security protocol; pybroker speaks PLAINTEXT only."),
    "log.dirs": ("LIST", "Directories that hold the partition logs and the metadata log."),
    "num.partitions": ("INT", "Partition count of topics created without an explicit one (and of auto-created topics)."),
    "default.replication.factor": ("INT", "Replication factor of topics created without an explicit one."),
    "auto.create.topics.enable": ("BOOLEAN", "Whether Metadata requests for unknown topics create them."),
    "delete.topic.enable": ("BOOLEAN", "Whether DeleteTopics may delete topics."),
    "log.segment.bytes": ("INT", "Default segment.bytes of topics: the size at which a segment is rolled."),
    "log.index.interval.bytes": ("INT", "Default index.interval.bytes of topics: bytes between two index entries."),
    "log.roll.hours": ("INT", "Default segment.ms of topics, in hours; log.roll.ms wins when set."),
    "log.roll.ms": ("LONG", "Default segment.ms of topics, in milliseconds."),
    "message.max.bytes": ("INT", "Default max.message.bytes of topics: the largest record batch accepted."),
    "socket.request.max.bytes": ("INT", "Largest request frame the broker reads; bigger frames close the connection."),
    "connections.max.idle.ms": ("LONG", "Connections with nothing received or answered for this long are closed."),
    "log.message.timestamp.type": ("STRING", "Default message.timestamp.type of topics: CreateTime or LogAppendTime."),
    "replica.fetch.max.bytes": ("INT", "Bytes a follower asks for per partition when it fetches from a leader (a larger first batch still comes whole)."),
    "fetch.max.bytes": ("INT", "Broker-wide cap on the bytes of one Fetch response (not applied by pybroker yet)."),
    "queued.max.requests": ("INT", "Requests queued before the network threads stop reading (pybroker bounds each connection instead)."),
    "queued.max.request.bytes": ("LONG", "Request bytes received and not yet answered before connections stop reading; -1 means no limit."),
    "log.index.size.max.bytes": ("INT", "Default segment.index.bytes of topics: the largest size of a segment's index files."),
    "log.flush.interval.messages": ("LONG", "Default flush.messages of topics: fsync after this many messages."),
    "log.flush.interval.ms": ("LONG", "Default flush.ms of topics; log.flush.scheduler.interval.ms applies when unset."),
    "log.flush.scheduler.interval.ms": ("LONG", "How often the broker checks whether a log is due for a time-based flush."),
    "log.flush.offset.checkpoint.interval.ms": ("INT", "How often the recovery-point checkpoint files are written."),
    "log.retention.hours": ("INT", "Default retention.ms of topics, in hours; log.retention.minutes and log.retention.ms win."),
    "log.retention.minutes": ("INT", "Default retention.ms of topics, in minutes; log.retention.ms wins."),
    "log.retention.ms": ("LONG", "Default retention.ms of topics, in milliseconds; -1 keeps data forever."),
    "log.retention.bytes": ("LONG", "Default retention.bytes of topics: the size a partition may grow to; -1 means no limit."),
    "log.retention.check.interval.ms": ("LONG", "How often the broker looks for segments that retention allows deleting."),
    "log.cleanup.policy": ("LIST", "Default cleanup.policy of topics: delete, compact or both."),
    "log.cleaner.delete.retention.ms": ("LONG", "Default delete.retention.ms of topics: how long tombstones stay readable."),
    "log.cleaner.enable": ("BOOLEAN", "Whether the log cleaner compacts topics with cleanup.policy=compact."),
    "log.cleaner.backoff.ms": ("LONG", "Pause between log cleaner passes over the compacted logs."),
    "log.cleaner.min.cleanable.ratio": ("DOUBLE", "Default min.cleanable.dirty.ratio: the share of a log that must be uncleaned before it is compacted."),
    "log.cleaner.min.compaction.lag.ms": ("LONG", "Default min.compaction.lag.ms: how long a record stays uncompacted at least."),
    "producer.id.expiration.ms": ("INT", "How long a partition keeps an idle producer id's state (measured from the max timestamp of its last batch); a producer whose state expired may continue at any sequence."),
    "producer.id.expiration.check.interval.ms": ("INT", "How often expired producer ids are removed."),
    "log.open.files.max": ("INT", "pybroker's own: how many segment files may be open at once."),
    "offsets.topic.num.partitions": ("INT", "Partitions of __consumer_offsets, fixed when it is created; a group's partition is chosen by a hash of its id."),
    "offsets.topic.replication.factor": ("SHORT", "Replicas of __consumer_offsets; it is not created (groups wait) until this many brokers are registered."),
    "offsets.commit.timeout.ms": ("INT", "How long an offset commit or group write waits for every in-sync replica of its __consumer_offsets partition."),
    "offsets.topic.segment.bytes": ("INT", "segment.bytes of __consumer_offsets: small segments let compaction keep it short."),
    "offsets.retention.minutes": ("INT", "How long committed offsets outlive their group becoming empty (or, without a group, their commit)."),
    "offsets.retention.check.interval.ms": ("LONG", "How often expired committed offsets are looked for."),
    "offset.metadata.max.bytes": ("INT", "Largest metadata string an offset commit may carry."),
    "transaction.state.log.num.partitions": ("INT", "Partitions of __transaction_state, fixed when it is created; a transactional id's partition is chosen by a hash of the id."),
    "transaction.state.log.replication.factor": ("SHORT", "Replicas of __transaction_state; it is not created (transactional producers wait) until this many brokers are registered."),
    "transaction.state.log.min.isr": ("INT", "min.insync.replicas of __transaction_state: in-sync replicas a transaction state change needs."),
    "transaction.state.log.segment.bytes": ("INT", "segment.bytes of __transaction_state: small segments let compaction keep it short."),
    "transaction.max.timeout.ms": ("INT", "The largest transaction timeout a producer may ask for (INVALID_TRANSACTION_TIMEOUT above it)."),
    "transactional.id.expiration.ms": ("INT", "How long a transactional id with no transaction open is kept after its last update."),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": ("INT", "How often transactions older than their timeout are looked for and aborted."),
    "transaction.remove.expired.transaction.cleanup.interval.ms": ("INT", "How often expired transactional ids are looked for and removed."),
    "group.initial.rebalance.delay.ms": ("INT", "How long the first rebalance of an empty group waits for more members to join."),
    "group.min.session.timeout.ms": ("INT", "Smallest session timeout a group member may ask for."),
    "group.max.session.timeout.ms": ("INT", "Largest session timeout a group member may ask for."),
    "group.max.size": ("INT", "Most members a group may have."),
    "cluster.id": ("STRING", "The cluster id written to meta.properties; generated when unset."),
    "broker.rack": ("STRING", "The rack of this broker, reported in Metadata."),
    "max.request.partition.size.limit": ("INT", "The most partitions one DescribeTopicPartitions response answers."),
    "controller.quorum.voters": ("LIST", "The voters of the metadata quorum as id@host:port; empty on a single combined node, which is a quorum of one."),
    "controller.quorum.bootstrap.servers": ("LIST", "host:port of controllers a broker-only node may ask for the quorum's leader; pybroker's controllers need controller.quorum.voters (no dynamic quorums)."),
    "controller.listener.names": ("LIST", "The listeners that serve the controller APIs (Raft, registration, DescribeQuorum); a broker connects to the controllers on the first."),
    "controller.quorum.election.timeout.ms": ("INT", "How long a voter waits without a leader before it stands for election (plus up to as much again at random)."),
    "controller.quorum.fetch.timeout.ms": ("INT", "How long a follower goes without a successful fetch before it stands for election."),
    "controller.quorum.election.backoff.max.ms": ("INT", "The cap of the random backoff after a lost election."),
    "controller.quorum.request.timeout.ms": ("INT", "How long a quorum request may go unanswered before it is sent again."),
    "controller.quorum.retry.backoff.ms": ("INT", "How often unanswered vote requests are resent during an election."),
    "broker.session.timeout.ms": (
        "INT",
        (
            "How long the active controller waits for a broker's heartbeat before it fences the broker. A broker uses it too:"
            " after this long without an answered heartbeat it stops answering as a group coordinator (give every node the same value)."
        ),
    ),
    "broker.heartbeat.interval.ms": ("INT", "How often a broker heartbeats to the active controller."),
    "metadata.log.dir": ("STRING", "Where __cluster_metadata-0 lives; the first log dir when unset."),
    "metadata.log.max.record.bytes.between.snapshots": ("LONG", "How many bytes of records the metadata log takes between two snapshots."),
    "metadata.log.max.snapshot.interval.ms": ("LONG", "The longest time between two metadata snapshots while new records arrive; 0 turns time-based snapshots off."),
    "metadata.log.segment.bytes": ("INT", "The size at which a segment of the metadata log is rolled."),
    "initial.broker.registration.timeout.ms": ("INT", "How long a starting broker tries to register with the controller quorum before it gives up."),
    "inter.broker.listener.name": ("STRING", "The listener followers fetch from leaders on; the first broker listener when unset."),
    "min.insync.replicas": ("INT", "Default min.insync.replicas of topics: in-sync replicas an acks=all produce needs."),
    "replica.lag.time.max.ms": ("LONG", "How long a follower may go without catching up to the leader's log end before it leaves the ISR."),
    "replica.fetch.min.bytes": ("INT", "Bytes a follower's fetch waits for before the leader answers."),
    "replica.fetch.wait.max.ms": ("INT", "How long a follower's fetch may wait at the leader for data."),
    "replica.fetch.response.max.bytes": ("INT", "Bytes a follower asks for in one fetch over all its partitions."),
    "replica.fetch.backoff.ms": ("INT", "How long a follower waits after a failed fetch before it tries again."),
    "replica.socket.timeout.ms": ("INT", "How long a follower waits for its leader to answer a fetch (beyond the fetch's own wait)."),
    "max.incremental.fetch.session.cache.slots": ("INT", "How many incremental fetch sessions (KIP-227) the broker keeps; 0 turns them off."),
    "num.replica.fetchers": ("INT", "Fetcher tasks per source broker; partitions are spread over them."),
    "replica.high.watermark.checkpoint.interval.ms": ("LONG", "How often the high watermarks are written to replication-offset-checkpoint."),
    "auto.leader.rebalance.enable": ("BOOLEAN", "Whether the active controller moves leaderships back to preferred replicas on its own."),
    "unclean.leader.election.enable": ("BOOLEAN", "Whether a replica outside the ISR may become leader when no in-sync one is left, losing what it lacks (topics may override it)."),
    "leader.imbalance.check.interval.seconds": ("LONG", "How often the active controller checks the leader imbalance."),
    "leader.imbalance.per.broker.percentage": ("INT", "The share of a broker's preferred partitions it may not lead before a rebalance moves them back."),
    "replica.selector.class": ("STRING", "Which replica a consumer that names its rack should read from (KIP-392); only Kafka's RackAwareReplicaSelector is known."),
}


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
        """The listener followers fetch from leaders on (Kafka's default: the first)."""
        configured = self["inter.broker.listener.name"]
        if configured is not None:
            return configured
        listeners = self.advertised_listeners
        return listeners[0].name if listeners else None

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
    for raw_key, raw_value in overrides.items():
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
    return BrokerConfig(values, explicit)


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
