"""The leader's write: the one path by which this broker appends to a partition it leads.

Kafka's ``ReplicaManager.appendRecords``. Produce, the transaction markers
(broker.replica.txn_markers), the group coordinator's writes to ``__consumer_offsets``
and the transaction coordinator's to ``__transaction_state`` all append through
:func:`append_as_leader`, which does, in this order:

1. the leader lookup: NOT_LEADER_OR_FOLLOWER when this broker does not lead the
   partition (or leads it at another epoch than the caller expects);
2. a mirror topic that is not writable (cluster links: read-only until
   promoted or failed over) refuses with INVALID_REQUEST and a message;
3. for acks=all, ``min.insync.replicas`` before anything is written
   (NOT_ENOUGH_REPLICAS);
4. the append, data or marker; the log's refusal (``AppendError``) is returned
   with its message and the records at fault, a failed disk write takes the
   log dir offline (or halts the broker: ``Broker.log_dir_failed``) and answers
   KAFKA_STORAGE_ERROR;
5. the high watermark and the waiting fetches told (``leader_appended``, then
   ``partition_watch.notify``), unless a retried idempotent batch wrote nothing;
   an append that leaves the high watermark where it was (a replicated
   partition's, until its followers fetch it) wakes only the followers'
   fetches: a consumer reads up to the high watermark and would find nothing;
6. for acks=all with a timeout, the replication outcome now, or a future from
   the purgatory that resolves with it.

The answer is a :class:`LeaderAppend`, which each caller maps to its own API's
errors in one place (coordinators, for example, tell their clients
NOT_COORDINATOR where Produce says NOT_LEADER_OR_FOLLOWER).
"""

from __future__ import annotations

import asyncio

from protocol.errors import ErrorCode
from storage.append_checks import AppendError, RecordError

ACKS_ALL = -1
_NONE = ErrorCode.NONE
_NO_RECORD_ERRORS: tuple[RecordError, ...] = ()


class LeaderAppend:
    """What one leader append did. ``error`` is NONE when the records are in the
    log (then the offsets are set); otherwise nothing was written, and
    ``refused_by_log`` tells the log's own refusals (``AppendError``: bad
    records, producer state) from the leader's (not the leader, too few
    in-sync replicas, a failed disk)."""

    __slots__ = (
        "acks_error",
        "acks_future",
        "base_offset",
        "duplicate",
        "error",
        "flush",
        "last_offset",
        "log_append_time_ms",
        "log_start_offset",
        "message",
        "record_errors",
        "refused_by_log",
    )

    def __init__(
        self,
        error: ErrorCode,
        message: str | None = None,
        refused_by_log: bool = False,
        record_errors: tuple[RecordError, ...] = _NO_RECORD_ERRORS,
        base_offset: int = -1,
        last_offset: int = -1,
        log_append_time_ms: int = -1,
        log_start_offset: int = -1,
        duplicate: bool = False,
        flush: asyncio.Future | None = None,
        acks_error: ErrorCode = _NONE,
        acks_future: asyncio.Future | None = None,
    ):
        self.error = error
        self.message = message
        self.refused_by_log = refused_by_log
        self.record_errors = record_errors
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.log_append_time_ms = log_append_time_ms
        self.log_start_offset = log_start_offset
        self.duplicate = duplicate
        # flush.messages was reached (with ``defer_flush``): durable once this resolves.
        self.flush = flush
        # acks=all: the replication outcome when it is known at once (NONE also
        # when it was not asked for), else ``acks_future`` resolves with it.
        self.acks_error = acks_error
        self.acks_future = acks_future


def read_only_mirror_message(image, topic: str) -> str | None:
    """Why ``topic`` takes no writes, or None when it does: a mirror topic is
    read-only (its records come from the link's source only) until it is
    promoted or failed over. Mirrored batches never come through here
    (``ReplicaManager.mirror_appended``)."""
    mirror = image.mirror_of(topic)
    if mirror is None or mirror.writable:
        return None
    link = image.link_by_id(mirror.link_id)
    link_name = link.name if link is not None else str(mirror.link_id)
    return (
        f"topic {topic} is a read-only mirror (link {link_name}, state {mirror.state_name}): "
        "promote or fail it over before writing"
    )


def append_as_leader(
    broker,
    key: tuple[str, int],
    records=None,
    *,
    plog=None,
    marker=None,
    acks: int = ACKS_ALL,
    timeout_ms: int | None = None,
    leader_epoch: int = -1,
    defer_flush: bool = False,
    from_coordinator: bool = False,
    verification_guard: object | None = None,
) -> LeaderAppend:
    """Append ``records`` (one Produce partition's bytes) or ``marker`` (anything
    with ``producer_id``, ``producer_epoch``, ``coordinator_epoch`` and
    ``commit``: a COMMIT/ABORT control batch) to ``key`` as its leader.

    ``plog``: the partition's log when the caller has it already.
    ``acks``: ACKS_ALL checks the in-sync replicas first and, when
    ``timeout_ms`` is given, waits for them (``acks_error``/``acks_future``);
    without ``timeout_ms`` the caller waits later with :func:`replication_outcome`.
    ``leader_epoch``: the epoch the caller loaded the partition at (-1: any).
    ``defer_flush``: a due fsync is left to ``broker.replica.flusher`` (``flush``)
    rather than done on the event loop. ``from_coordinator`` and
    ``verification_guard`` go to ``PartitionLog.append``."""
    replicas = broker.replicas
    leader = replicas.leader_for(key[0], key[1])
    if plog is None:
        plog = broker.partition_log(key[0], key[1])
    if leader is None or plog is None or (leader_epoch != -1 and leader.leader_epoch != leader_epoch):
        return LeaderAppend(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    read_only = read_only_mirror_message(broker.image, key[0])
    if read_only is not None:
        return LeaderAppend(ErrorCode.INVALID_REQUEST, read_only)
    if acks == ACKS_ALL and (enough := leader.check_enough_replicas()) != _NONE:
        return LeaderAppend(
            enough,
            f"The size of the current ISR {list(leader.isr)} is insufficient to satisfy "
            f"the min.isr requirement of {leader.min_insync_replicas} for partition {key[0]}-{key[1]}",
        )
    high_watermark = plog.high_watermark
    try:
        if marker is None:
            result = plog.append(
                records,
                leader_epoch=leader.leader_epoch,
                defer_flush=defer_flush,
                from_coordinator=from_coordinator,
                verification_guard=verification_guard,
            )
        else:
            result = plog.append_marker(
                marker.producer_id,
                marker.producer_epoch,
                marker.coordinator_epoch,
                marker.commit,
                leader_epoch=leader.leader_epoch,
                defer_flush=defer_flush,
            )
    except AppendError as exc:
        return LeaderAppend(exc.error_code, str(exc), True, exc.record_errors)
    except OSError as exc:
        # The dir goes offline (or the broker halts): nothing written to a failed log dir may be acknowledged.
        broker.log_dir_failed(plog, exc)
        return LeaderAppend(ErrorCode.KAFKA_STORAGE_ERROR, str(exc))
    flush = broker.flusher.flush(plog) if result.flush_due else None
    duplicate = result.duplicate
    if not duplicate:
        replicas.leader_appended(key, leader, plog)
        if plog.high_watermark != high_watermark:
            broker.partition_watch.notify(key)
        else:
            broker.partition_watch.notify_log_end(key)
    acks_error = _NONE
    acks_future = None
    if acks == ACKS_ALL and timeout_ms is not None:
        required_offset = result.last_offset + 1
        acks_error = leader.produce_outcome(required_offset)
        if acks_error is None:
            acks_error = _NONE
            acks_future = replicas.wait_for_acks(key, leader, required_offset, timeout_ms)
    return LeaderAppend(
        _NONE,
        None,
        False,
        _NO_RECORD_ERRORS,
        result.base_offset,
        result.last_offset,
        result.log_append_time_ms,
        plog.log_start_offset,
        duplicate,
        flush,
        acks_error,
        acks_future,
    )


async def replication_outcome(replicas, key: tuple[str, int], leader, required_offset: int, timeout_ms: int) -> ErrorCode:
    """The acks=all outcome of everything before ``required_offset``: at once when
    the high watermark is there already, else once the purgatory decides
    (NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER)."""
    outcome = leader.produce_outcome(required_offset)
    if outcome is None:
        outcome = await replicas.wait_for_acks(key, leader, required_offset, timeout_ms)
    return outcome
