"""The transaction coordinator's requests to other brokers.

- :class:`Peers`: one connection per broker, to its inter-broker listener
  (a new one when the broker's address changes), and the API versions that
  broker serves, asked with ApiVersions once per connection, so that every
  request uses the newest version both sides speak.
- :class:`MarkerChannel`: WriteTxnMarkers to one broker. Markers submitted
  while a request is out wait for it and then go together in the next one
  (Kafka batches per destination too), at most one per producer id, since
  the response is keyed by producer id.
- :func:`verify_remote`: AddPartitionsToTxn with ``verify_only`` (v4+) to a
  transaction coordinator on another broker (KIP-890 part 1), or without it
  (v5) to add the partitions to a transactions version 2 producer's
  transaction (KIP-890 part 2: Produce v12, TxnOffsetCommit v5).

Nothing here retries: the coordinator's marker loop and the Produce handler
decide what to do with a failure, which comes back as an error code
(NETWORK_EXCEPTION when the peer could not be reached or did not answer in time).
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker.net.node_client import ClientSecurity, KafkaClientConnection
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = APIS_BY_NAME["WriteTxnMarkers"]
ADD_PARTITIONS_TO_TXN = APIS_BY_NAME["AddPartitionsToTxn"]
API_VERSIONS = APIS_BY_NAME["ApiVersions"]
_MARKERS = struct_classes(WRITE_TXN_MARKERS.request)
_ADD = struct_classes(ADD_PARTITIONS_TO_TXN.request)
# AddPartitionsToTxn from v4 carries verify_only (sent by brokers).
VERIFY_MIN_VERSION = 4
# Kafka's request.timeout.ms (30 s).
REQUEST_TIMEOUT_MS = 30_000
# A remote leader may wait 30 s for its followers before it answers WriteTxnMarkers.
MARKER_REQUEST_TIMEOUT_MS = 40_000
# At most one line per this interval for each kind of repeated failure.
LOG_INTERVAL_S = 10.0

Key = tuple[str, int]


class RateLimitedLog:
    """Logs a repeated failure at most once per ``LOG_INTERVAL_S`` per key."""

    def __init__(self, logger: logging.Logger):
        self._logger = logger
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def __call__(self, level: int, key: str, message: str, *args, exc_info: bool = False) -> None:
        now_s = time.monotonic()
        last = self._last.get(key)
        if last is not None and now_s - last < LOG_INTERVAL_S:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        suppressed = self._suppressed.pop(key, 0)
        self._last[key] = now_s
        if suppressed:
            message += f" ({suppressed} more like it since the last report)"
        self._logger.log(level, message, *args, exc_info=exc_info)


class Peer:
    """One connection to another broker, and the API versions it serves."""

    def __init__(self, broker_id: int, host: str, port: int, client_id: str, security: ClientSecurity | None = None):
        self.broker_id = broker_id
        self.address = (host, port)
        # ``security``: the inter-broker listener's protocol (None: PLAINTEXT).
        self.connection = KafkaClientConnection(host, port, client_id, security=security)
        self._versions: dict[int, tuple[int, int]] | None = None

    async def version_for(self, api) -> int | None:
        """The newest version of ``api`` both sides speak, None if there is none."""
        if self._versions is None:
            response = await self.connection.request(API_VERSIONS, 0, API_VERSIONS.request.cls(), timeout_ms=REQUEST_TIMEOUT_MS)
            if response.error_code != ErrorCode.NONE:
                return None
            self._versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        theirs = self._versions.get(api.key)
        if theirs is None:
            return None
        low, high = max(api.versions.low, theirs[0]), min(api.versions.high, theirs[1])
        return high if high >= low else None

    def failed(self) -> None:
        """A request failed: the peer may have restarted with other versions."""
        self._versions = None

    def close(self) -> None:
        self.connection.close()


class Peers:
    def __init__(self, broker, client_id_prefix: str = "txn-coordinator"):
        self._broker = broker
        self._peers: dict[int, Peer] = {}
        self._client_id_prefix = client_id_prefix

    def get(self, broker_id: int) -> Peer | None:
        """The peer of ``broker_id``'s inter-broker listener; None while it has none."""
        registration = self._broker.image.brokers.get(broker_id)
        name = self._broker.config.inter_broker_listener_name
        endpoint = None if registration is None or name is None else registration.endpoint(name)
        if endpoint is None:
            return None
        peer = self._peers.get(broker_id)
        if peer is None or peer.address != (endpoint.host, endpoint.port):
            if peer is not None:
                peer.close()
            # The inter-broker listener's TLS/SASL (a broker double without node_security: PLAINTEXT).
            security = getattr(self._broker, "node_security", {}).get("broker")
            peer = self._peers[broker_id] = Peer(
                broker_id, endpoint.host, endpoint.port, f"{self._client_id_prefix}-{self._broker.node_id}", security
            )
        return peer

    def close(self) -> None:
        for peer in self._peers.values():
            peer.close()
        self._peers.clear()


def _by_topic(partitions) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


async def write_markers_remote(peer: Peer | None, markers: list, log_limited: RateLimitedLog) -> dict[int, dict[Key, ErrorCode]]:
    """One WriteTxnMarkers request (markers with distinct producer ids); per
    producer id, per partition, the outcome."""

    def every(error: ErrorCode):
        return {m.producer_id: {key: error for key in m.partitions} for m in markers}

    if peer is None:
        return every(ErrorCode.NOT_LEADER_OR_FOLLOWER)  # unknown address: wait for the metadata
    body = _MARKERS.WriteTxnMarkersRequest(
        markers=[
            _MARKERS.WritableTxnMarker(
                producer_id=m.producer_id,
                producer_epoch=m.producer_epoch,
                transaction_result=m.commit,
                topics=[_MARKERS.WritableTxnMarkerTopic(name=t, partition_indexes=p) for t, p in _by_topic(m.partitions).items()],
                coordinator_epoch=m.coordinator_epoch,
            )
            for m in markers
        ]
    )
    try:
        version = await peer.version_for(WRITE_TXN_MARKERS)
        if version is None:
            log_limited(logging.WARNING, f"markers-version-{peer.broker_id}", "broker %d does not take WriteTxnMarkers", peer.broker_id)
            return every(ErrorCode.NETWORK_EXCEPTION)  # retried: it may be upgraded
        response = await peer.connection.request(WRITE_TXN_MARKERS, version, body, timeout_ms=MARKER_REQUEST_TIMEOUT_MS)
    except (OSError, TimeoutError, ProtocolError) as exc:
        peer.failed()
        log_limited(logging.INFO, f"markers-{peer.broker_id}", "WriteTxnMarkers to broker %d failed: %s", peer.broker_id, exc)
        return every(ErrorCode.NETWORK_EXCEPTION)
    results = every(ErrorCode.UNKNOWN_SERVER_ERROR)  # anything the answer leaves out
    for result in response.markers:
        outcome = results.get(result.producer_id)
        if outcome is None:
            continue
        for topic in result.topics:
            for partition in topic.partitions:
                key = (topic.name, partition.partition_index)
                if key in outcome:
                    outcome[key] = ErrorCode(partition.error_code)
    return results


class MarkerChannel:
    """WriteTxnMarkers to one broker, batched."""

    def __init__(self, peers: Peers, broker_id: int, log_limited: RateLimitedLog):
        self._peers = peers
        self.broker_id = broker_id
        self._log_limited = log_limited
        self._queue: list[tuple[object, asyncio.Future]] = []
        self._sender: asyncio.Task | None = None

    async def send(self, marker) -> dict[Key, ErrorCode]:
        future = asyncio.get_running_loop().create_future()
        self._queue.append((marker, future))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_all(), name=f"txn markers to {self.broker_id}")
        return await future

    async def _send_all(self) -> None:
        # Ends when the queue is empty; every round sends one request or drops
        # the cancelled waiters, so the queue shrinks or waits on the network.
        while self._queue:
            batch, rest, seen = [], [], set()
            for item in self._queue:
                if item[1].done():
                    continue  # its waiter was cancelled
                (rest if item[0].producer_id in seen else batch).append(item)
                seen.add(item[0].producer_id)
            self._queue = rest
            if not batch:
                continue
            try:
                results = await write_markers_remote(self._peers.get(self.broker_id), [m for m, _ in batch], self._log_limited)
            except Exception:  # a bug of ours: the waiters retry
                log.exception("sending transaction markers to broker %d failed", self.broker_id)
                results = {}
            for marker, future in batch:
                if not future.done():
                    future.set_result(results.get(marker.producer_id, {key: ErrorCode.NETWORK_EXCEPTION for key in marker.partitions}))

    def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
        for _, future in self._queue:
            if not future.done():
                future.cancel()
        self._queue.clear()


async def verify_remote(
    peer: Peer | None, transactional_id: str, producer_id: int, producer_epoch: int, keys: list[Key], log_limited: RateLimitedLog,
    *, verify_only: bool = True,
) -> dict[Key, ErrorCode]:
    """Ask the coordinator on ``peer`` whether ``keys`` are in the producer's
    ongoing transaction; NONE or INVALID_TXN_STATE per partition, or its error.
    With ``verify_only`` false the coordinator adds them instead (NONE once added)."""
    if peer is None:
        return {key: ErrorCode.COORDINATOR_NOT_AVAILABLE for key in keys}
    transaction = _ADD.AddPartitionsToTxnTransaction(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        verify_only=verify_only,
        topics=[_ADD.AddPartitionsToTxnTopic(name=t, partitions=p) for t, p in _by_topic(keys).items()],
    )
    try:
        version = await peer.version_for(ADD_PARTITIONS_TO_TXN)
        if version is None or version < VERIFY_MIN_VERSION:
            log_limited(logging.WARNING, f"verify-version-{peer.broker_id}", "broker %d cannot verify transactions (AddPartitionsToTxn v4+)", peer.broker_id)
            return {key: ErrorCode.COORDINATOR_NOT_AVAILABLE for key in keys}
        response = await peer.connection.request(
            ADD_PARTITIONS_TO_TXN, version, _ADD.AddPartitionsToTxnRequest(transactions=[transaction]), timeout_ms=REQUEST_TIMEOUT_MS
        )
    except (OSError, TimeoutError, ProtocolError) as exc:
        peer.failed()
        log_limited(logging.INFO, f"verify-{peer.broker_id}", "asking transaction coordinator %d to verify failed: %s", peer.broker_id, exc)
        return {key: ErrorCode.NETWORK_EXCEPTION for key in keys}
    if response.error_code != ErrorCode.NONE:
        error = ErrorCode(response.error_code)
        # Kafka's leaders never pass an authorization failure of their own request on.
        return {key: ErrorCode.INVALID_TXN_STATE if error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED else error for key in keys}
    outcome = {key: ErrorCode.UNKNOWN_SERVER_ERROR for key in keys}
    for result in response.results_by_transaction:
        if result.transactional_id != transactional_id:
            continue
        for topic in result.topic_results:
            for partition in topic.results_by_partition:
                key = (topic.name, partition.partition_index)
                if key in outcome:
                    error = ErrorCode(partition.partition_error_code)
                    # v5 calls a partition missing from the transaction
                    # TRANSACTION_ABORTABLE; callers of this expect INVALID_TXN_STATE.
                    outcome[key] = ErrorCode.INVALID_TXN_STATE if error == ErrorCode.TRANSACTION_ABORTABLE else error
    return outcome
