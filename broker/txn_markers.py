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

from protocol.errors import ErrorCode
from storage.append_checks import AppendError

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
    waits: list[tuple[tuple[str, int], asyncio.Future | None, object]] = []
    flushes = []
    replicas = broker.replicas
    for key in marker.partitions:
        topic_name, partition_id = key
        topic = broker.image.topics.get(topic_name)
        if topic is None or partition_id not in topic.partitions:
            results[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        leader = replicas.leader_for(topic_name, partition_id)
        plog = broker.partition_log(topic_name, partition_id)
        if leader is None or plog is None:
            results[key] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            continue
        enough = leader.check_enough_replicas()
        if enough != ErrorCode.NONE:
            results[key] = enough
            continue
        try:
            result = plog.append_marker(
                marker.producer_id,
                marker.producer_epoch,
                marker.coordinator_epoch,
                marker.commit,
                leader_epoch=leader.leader_epoch,
                defer_flush=True,
            )
        except AppendError as exc:
            results[key] = exc.error_code
            continue
        except OSError as exc:
            broker.log_dir_failed(plog, exc)
            results[key] = ErrorCode.KAFKA_STORAGE_ERROR
            continue
        if result.flush_due:
            flushes.append(broker.flusher.flush(plog))
        replicas.leader_appended(key, leader, plog)
        broker.partition_watch.notify(key)
        outcome = leader.produce_outcome(result.last_offset + 1)
        if outcome is None:
            waits.append((key, replicas.wait_for_acks(key, leader, result.last_offset + 1, MARKER_REPLICATION_TIMEOUT_MS), plog))
        else:
            waits.append((key, None, outcome))
    if flushes:
        await asyncio.gather(*flushes)
    for key, future, outcome in waits:
        error = await future if future is not None else outcome
        results[key] = error
        if error == ErrorCode.NONE and key[0] == OFFSETS_TOPIC:
            broker.groups.complete_transaction(key[1], marker.producer_id, marker.commit)
    return results
