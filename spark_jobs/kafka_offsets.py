"""Partitions' high watermarks from a running cluster, asked at planning time.

A small blocking Kafka client over :mod:`protocol` (a socket per broker, one
request at a time), used by the data source when ``kafka.bootstrap.servers``
is given. For a READ_UNCOMMITTED ListOffsets, "latest" (timestamp -1) is the
partition's high watermark as its leader knows it: the end of what every
in-sync replica holds, so nothing below it can be truncated later.

Metadata (v9) from the first bootstrap server that answers gives each
partition's leader and leader epoch; ListOffsets (v7, served by Kafka 2.5 on
and by pybroker) goes to each leader with that epoch as
``current_leader_epoch``, so a broker that lost the leadership meanwhile
answers an error rather than its own (older) view. Errors Kafka marks
retriable (no leader during a failover, a leader that moved, a broker that
does not answer) refresh the metadata and ask again, ``retry.backoff.ms``
apart, until ``timeout_ms`` has passed. A topic the cluster does not know
fails at once: its directory in the log dirs is a leftover (a deleted topic).
"""

from __future__ import annotations

import socket
import time

from protocol.client import ClientConnectionState
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.leader_offsets import (
    LATEST_TIMESTAMP,
    LIST_OFFSETS,
    LIST_OFFSETS_VERSION,
    group_by_leader,
    list_offsets_answers,
    list_offsets_request,
)
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

METADATA = APIS_BY_NAME["Metadata"]
METADATA_VERSION = 9
_MD = struct_classes(METADATA.request)
NO_LEADER = -1
CLIENT_ID = "pybroker-spark"
REQUEST_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms
RETRY_BACKOFF_MS = 100  # Kafka's retry.backoff.ms
READ_CHUNK_BYTES = 256 << 10  # bytes asked of the socket per read

Key = tuple[str, int]


class HighWatermarkError(RuntimeError):
    """The cluster could not tell the high watermarks in time, or does not know a partition."""


class _Retry(Exception):
    """Something Kafka would retry: ask the metadata again and retry."""


def parse_bootstrap_servers(text: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` (``[::1]:9092`` for IPv6) as (host, port) pairs."""
    servers = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"option kafka.bootstrap.servers: expected host:port[,host:port...], got {text!r}")
        servers.append((host.strip("[]"), int(port)))
    return servers


class _Connection:
    """One blocking connection; a request waits for its response."""

    def __init__(self, address: tuple[str, int], timeout_s: float):
        try:
            self._sock = socket.create_connection(address, timeout=timeout_s)
        except OSError as exc:
            raise _Retry(f"cannot connect to {address[0]}:{address[1]}: {exc}") from None
        self.address = address
        self._state = ClientConnectionState(CLIENT_ID)

    def call(self, api, version: int, body, timeout_s: float):
        state = self._state
        try:
            self._sock.settimeout(timeout_s)
            self._sock.sendall(state.send(api, version, body)[1])
            while (response := state.next_response()) is None:
                chunk = self._sock.recv(READ_CHUNK_BYTES)
                if not chunk:
                    raise ConnectionError("the broker closed the connection")
                state.receive_data(chunk)
        except (OSError, ProtocolError) as exc:
            raise _Retry(f"{api.name} to {self.address[0]}:{self.address[1]} failed: {exc}") from None
        return response.body

    def close(self) -> None:
        self._sock.close()


class _Cluster:
    """Connections by address, each dropped when it fails (a broker may come back elsewhere)."""

    def __init__(self, bootstrap: list[tuple[str, int]], deadline: float):
        self.bootstrap = bootstrap
        self.deadline = deadline
        self._connections: dict[tuple[str, int], _Connection] = {}

    def remaining_s(self) -> float:
        return max(0.001, min(REQUEST_TIMEOUT_MS / 1000, self.deadline - time.monotonic()))

    def call(self, address: tuple[str, int], api, version: int, body):
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = _Connection(address, self.remaining_s())
        try:
            return connection.call(api, version, body, self.remaining_s())
        except _Retry:
            self._connections.pop(address).close()
            raise

    def metadata(self, topics: list[str]):
        problems = []
        for address in self.bootstrap:
            try:
                body = _MD.MetadataRequest(
                    topics=[_MD.MetadataRequestTopic(name=topic) for topic in topics],
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
                return self.call(address, METADATA, METADATA_VERSION, body)
            except _Retry as exc:
                problems.append(str(exc))
        raise _Retry("; ".join(problems))

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _is_retriable(code: int) -> bool:
    try:
        return ErrorCode(code).retriable
    except ValueError:
        return False


def _leaders(metadata, wanted: set[Key]) -> tuple[dict[Key, tuple[tuple[str, int], int]], list[str]]:
    """(leader address, leader epoch) of each wanted partition that has a live leader,
    and why the others have none now.

    Raises :class:`HighWatermarkError` for a topic or partition the cluster does not know.
    """
    brokers = {b.node_id: (b.host, b.port) for b in metadata.brokers}
    topics = {t.name: t for t in metadata.topics}
    leaders = {}
    waiting = []
    for key in sorted(wanted):
        topic = topics.get(key[0])
        if topic is None or topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise HighWatermarkError(
                f"the cluster has no topic {key[0]!r}: its directories in the log dirs are left over (deleted?)"
            )
        if topic.error_code != ErrorCode.NONE:
            waiting.append(f"{key[0]}: {_error_name(topic.error_code)}")
            continue
        partition = next((p for p in topic.partitions if p.partition_index == key[1]), None)
        if partition is None:
            raise HighWatermarkError(f"the cluster's topic {key[0]!r} has no partition {key[1]}")
        if partition.leader_id == NO_LEADER or partition.leader_id not in brokers:
            waiting.append(f"{key[0]}-{key[1]}: no live leader")
            continue
        leaders[key] = (brokers[partition.leader_id], partition.leader_epoch)
    return leaders, waiting


def high_watermarks(bootstrap_servers: str, partitions, timeout_ms: int) -> dict[Key, int]:
    """Each partition's high watermark, from its leader (ListOffsets, latest, read_uncommitted).

    Raises :class:`HighWatermarkError` when some partition's leader has not
    answered within ``timeout_ms`` (naming the last problem), or at once for a
    topic or partition the cluster does not know.
    """
    wanted = set(partitions)
    found: dict[Key, int] = {}
    cluster = _Cluster(parse_bootstrap_servers(bootstrap_servers), time.monotonic() + timeout_ms / 1000)
    problem = ""
    try:
        while wanted - found.keys():
            try:
                problem = _ask_leaders(cluster, wanted - found.keys(), found) or problem
            except _Retry as exc:
                problem = str(exc)
            if not wanted - found.keys():
                break
            if time.monotonic() + RETRY_BACKOFF_MS / 1000 >= cluster.deadline:
                missing = ", ".join(f"{t}-{p}" for t, p in sorted(wanted - found.keys()))
                raise HighWatermarkError(
                    f"no high watermark within {timeout_ms} ms for {missing} (last problem: {problem}); "
                    "kafka.default.api.timeout.ms sets how long to try"
                )
            time.sleep(RETRY_BACKOFF_MS / 1000)
    finally:
        cluster.close()
    return found


def _ask_leaders(cluster: _Cluster, pending: set[Key], found: dict[Key, int]) -> str:
    """One round: metadata, then ListOffsets at each leader; answers go into ``found``.
    Returns the last retriable problem seen ("" when none)."""
    metadata = cluster.metadata(sorted({topic for topic, _ in pending}))
    leaders, waiting = _leaders(metadata, pending)
    problem = ", ".join(waiting)
    by_leader, _ = group_by_leader(leaders, lambda key: leaders[key][0])
    epochs = {key: epoch for key, (_, epoch) in leaders.items()}
    for address, keys in by_leader.items():
        body = list_offsets_request(keys, LATEST_TIMESTAMP, leader_epochs=epochs)
        try:
            response = cluster.call(address, LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        except _Retry as exc:
            problem = str(exc)
            continue
        for key, answer in list_offsets_answers(response).items():
            if key not in pending:
                continue
            where = f"ListOffsets of {key[0]}-{key[1]} at {address[0]}:{address[1]}"
            if answer.error_code != ErrorCode.NONE:
                if not _is_retriable(answer.error_code):
                    raise HighWatermarkError(f"{where}: {_error_name(answer.error_code)}")
                problem = f"{where}: {_error_name(answer.error_code)}"
            elif answer.offset < 0:
                problem = f"{where}: no offset"
            else:
                found[key] = answer.offset
    return problem
