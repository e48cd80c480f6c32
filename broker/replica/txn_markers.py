"""Transaction markers written on this broker as partition leader.

A transaction ends when its coordinator has a COMMIT or ABORT control batch
(a marker) appended to every partition the transaction wrote to. The
coordinator reaches each partition's leader: itself through
:func:`write_markers_here`, other brokers with WriteTxnMarkers, whose handler
calls the same function. Each marker is appended by the leader like an
acks=all produce: refused with NOT_ENOUGH_REPLICAS when the ISR is below
``min.insync.replicas``, answered once every in-sync replica holds it, so a
completed transaction survives the loss of the leader. The log checks the
coordinator epoch (TRANSACTION_COORDINATOR_FENCED for a marker from a deposed
coordinator) and the producer epoch (INVALID_PRODUCER_EPOCH) and changes
nothing when it refuses.

A marker in a ``__consumer_offsets`` partition also completes the producer's
pending transactional offset commits in the group coordinator, once it is
replicated: before, a new leader might not hold it, and the commit would be
visible here and lost there.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from broker.replica.leader_append import append_as_leader
from protocol.errors import ErrorCode

OFFSETS_TOPIC = "__consumer_offsets"
# How long a marker waits for the in-sync replicas (Kafka uses the broker's
# request timeout, 30 s by default); the coordinator retries after that.
MARKER_REPLICATION_TIMEOUT_MS = 30_000


@dataclass(frozen=True)
class TxnMarker:
    """One WritableTxnMarker: the end of one producer's transaction on some partitions."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]


async def write_markers_here(broker, marker: TxnMarker) -> dict[tuple[str, int], ErrorCode]:
    """Append ``marker`` to each of its partitions this broker leads and wait for
    the in-sync replicas; the outcome per partition. The appends happen before the
    first await, in the order of ``marker.partitions``."""
    results: dict[tuple[str, int], ErrorCode] = {}
    waits: list[tuple[tuple[str, int], asyncio.Future | None, ErrorCode]] = []
    flushes = []
    for key in marker.partitions:
        topic = broker.image.topics.get(key[0])
        if topic is None or key[1] not in topic.partitions:
            results[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        # The leader's errors go back to the coordinator as they are: it retries
        # or stops on them (broker.coordinators.transactions.service).
        written = append_as_leader(broker, key, marker=marker, timeout_ms=MARKER_REPLICATION_TIMEOUT_MS, defer_flush=True)
        if written.error != ErrorCode.NONE:
            results[key] = written.error
            continue
        if written.flush is not None:
            flushes.append(written.flush)
        waits.append((key, written.acks_future, written.acks_error))
    if flushes:
        await asyncio.gather(*flushes)
    for key, future, outcome in waits:
        error = await future if future is not None else outcome
        results[key] = error
        if error == ErrorCode.NONE and key[0] == OFFSETS_TOPIC:
            broker.groups.complete_transaction(key[1], marker.producer_id, marker.commit)
    return results
