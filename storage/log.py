"""One partition's log: a directory ``<topic>-<partition>/`` of segments.

Appends take the bytes of one or more v2 record batches as the producer sent
them, check each batch at the batch level (size, magic, CRC32C), and assign
offsets by patching each batch's base offset in place: records are never
re-encoded. Reads return whole batches starting with the one that holds the
requested offset. A follower replica appends its leader's batches unchanged
(:meth:`PartitionLog.append_as_follower`), offsets and epochs included.

Transactions, as Kafka's log keeps them: transactional batches open a
transaction of their producer on the partition, and the COMMIT or ABORT
marker that the transaction coordinator has the leader write
(:meth:`PartitionLog.append_marker`; followers copy it like any batch)
closes it. The last stable offset (LSO) is the high watermark, or the first
offset of the oldest transaction still open or whose marker is not yet below
the high watermark when that is lower: read_committed consumers read up to
it. Each abort adds an entry to the ``.txnindex`` of the segment the marker
lands in (storage.txn_index), from which
:meth:`PartitionLog.aborted_transactions` answers read_committed fetches.
The index files are truncated, deleted and swapped with their segments, and
rebuilt from the markers when a segment is recovered after a crash.

Opening a log directory (crash recovery, index rebuilds, producer state from
snapshots) is storage.log_loader, and removing whole segments (retention,
DeleteRecords, the cleaner's swap) is storage.log_retention: base classes of
PartitionLog that act on its state. The checks a produce request's batches
pass before anything is written are the pure functions of
storage.append_checks. AppendError and AppendResult are re-exported here, as
most callers of the log use them with it.

Past 700 lines: what is left here (appends, reads, the high watermark, the
transactions' state and truncation) works on one segment list and its
offsets under one set of invariants; opening, retention and the batch checks
have already moved out as above.

This file is still longer than most: the leader's, the coordinator's and the
follower's appends, rolling, reads, flushes, truncation and closing all move
the segment list, the log end, the recovery point and the leader epochs in
step, and are kept together so that those invariants can be read in one place.
"""

from __future__ import annotations

import logging
import os
import time
from bisect import bisect_right, insort
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import (
    ControlType,
    build_control_batch,
    decode_batch_records,
    first_control_record,
    parse_batch_header,
    patch_base_offset,
    patch_log_append_time,
    patch_partition_leader_epoch,
)
from storage.append_checks import (
    AppendError,
    AppendResult,
    check_follower_batches,
    check_produced_batches,
    check_producer,
    check_producers,
    check_records,
    check_transactions,
)
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, fsync_dir, read_leader_epochs, write_leader_epochs
from storage.deferred_io import DeferredFileDeleter, PendingFlush
from storage.file_slice import FileSlice
from storage.handle_pool import FileHandlePool
from storage.log_retention import LogRetention
from storage.producer_snapshot import write_snapshot
from storage.producer_state import ProducerStateManager, VerificationGuard
from storage.segment import LogSegment, segment_file_stem
from storage.txn_index import AbortedTxn

# Re-exported: the names most callers of the log import with it.
__all__ = ["AppendError", "AppendResult", "LogConfig", "PartitionLog", "epoch_end_offset", "partition_dir_name"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogConfig:
    """The per-partition settings the log acts on (topic overrides applied)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 7 * 24 * 3_600_000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    # How far a CreateTime record's timestamp may lie before/after the broker's clock.
    timestamp_before_max_ms: int = 2**63 - 1
    timestamp_after_max_ms: int = 3_600_000
    # Flush (fsync) after this many messages / this long; Kafka's defaults
    # leave durability to replication and the page cache.
    flush_messages: int = 2**63 - 1
    flush_ms: int = 2**63 - 1
    cleanup_policy: str = "delete"
    retention_ms: int = 7 * 24 * 3_600_000
    retention_bytes: int = -1
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    min_cleanable_ratio: float = 0.5

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compacts(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


EPOCH_UNDEFINED = (-1, -1)


def epoch_end_offset(
    epochs: list[tuple[int, int]], requested: int, *, current_epoch: int, log_start_offset: int, log_end_offset: int
) -> tuple[int, int]:
    """(epoch, end offset) answering ``requested`` from the ``(epoch, start offset)``
    entries of a leader's log, as Kafka's LeaderEpochFileCache.endOffsetFor: the
    largest epoch at or below ``requested`` and the start of the first later
    epoch (the log end for the latest); (-1, -1) for -1 or an epoch above every
    known one; an epoch below every known one answers itself with the first
    known epoch's start. The current epoch counts as known from the log end even
    before it writes (a leader records its epoch when it takes over), and epochs
    wholly below the log start offset count as starting at it."""
    if requested == -1:
        return EPOCH_UNDEFINED
    entries = sorted(epochs)
    if not entries or entries[-1][0] < current_epoch:
        # A Kafka leader records its epoch at the log end when it takes over.
        entries.append((current_epoch, log_end_offset))
    # Kafka truncates the epoch cache from the start as the log start moves: the
    # last epoch starting at or below the log start offset now starts there.
    below = [e for e in entries if e[1] <= log_start_offset]
    if below:
        entries = [(below[-1][0], log_start_offset)] + [e for e in entries if e[1] > log_start_offset]
    if entries[-1][0] == requested:
        return requested, log_end_offset
    higher = next((e for e in entries if e[0] > requested), None)
    if higher is None:
        return EPOCH_UNDEFINED
    floor = [e for e in entries if e[0] <= requested]
    if not floor:
        return requested, higher[1]
    return floor[-1][0], higher[1]


class PartitionLog(LogRetention):
    """One partition's log.

    Opening (storage.log_loader): with ``clean_shutdown`` the files are trusted and only the tail
    of the active segment is read; otherwise every segment from the one
    holding ``recovery_point`` (all of them when it is unknown) is re-read
    with CRC checks and cut at the first bad batch.

    Idempotent-producer state comes from the newest valid producer snapshot
    (``<offset>.snapshot``, see storage.producer_snapshot) at or below the
    log end (clean) or the recovery point (crash), plus the batches after it;
    from the log start when no snapshot is valid. Snapshots are written when
    a segment rolls (at its successor's base offset) and when the log closes
    (at the log end), so a clean open reads no batch for it.
    ``producer_id_expiration_ms``, when given, leaves expired producers out
    of a loaded snapshot.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        clock_ms: Callable[[], int] | None = None,
        pool: FileHandlePool | None = None,
        recovery_point: int | None = None,
        log_start_offset: int | None = None,
        clean_shutdown: bool = False,
        producer_id_expiration_ms: int | None = None,
        sync_after_recovery: bool = True,
    ):
        self.directory = Path(directory)
        self.config = config
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._pool = pool
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segments: list[LogSegment] = []
        self._segment_bases: list[int] = []
        self.producer_state = ProducerStateManager()
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._snapshots: list[int] = []  # offsets of this log's .snapshot files, ascending
        # Provisional until the segments are known: loading producer state needs it.
        self.log_start_offset = log_start_offset or 0
        self.recovery_point = 0
        # (epoch, start offset) of each leader epoch that wrote to this log.
        self.leader_epochs: list[tuple[int, int]] = read_leader_epochs(self.directory / LEADER_EPOCH_CHECKPOINT)
        self._unflushed_messages = 0
        self._last_flush_ms = self._clock_ms()
        # Set by an owner that unlinks the files of deleted segments on a worker
        # thread (a retention pass may delete thousands); None: unlinked at once.
        self.file_deleter: DeferredFileDeleter | None = None
        # For work on this log cut into slices (the log cleaner): whether the
        # log was truncated, closed or deleted while that work paused.
        self.truncations = 0
        self.closed = False
        # False: a recovery leaves its fsync (and the recovery point at the
        # start) to an owner that syncs whole file systems after recovering
        # many logs (LogManager.sync_recovered_logs).
        self.sync_after_recovery = sync_after_recovery
        self.recovered_unsynced = False
        self._open_segments(recovery_point, clean_shutdown)
        self._remove_stray_snapshots()
        first_base = self.segments[0].base_offset
        self.log_start_offset = max(first_base, log_start_offset or 0)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        # A single broker acknowledges what it wrote. A replicated partition's
        # high watermark is moved by the replication layer, which sets
        # ``replicated``; appends then leave it alone. Either way it lives here
        # only (see the ``high_watermark`` property).
        self._high_watermark = self.log_end_offset
        self.replicated = False

    def _new_segment(self, base: int, size_bytes: int | None = None, txn_index_exists: bool | None = None) -> LogSegment:
        if self.file_deleter is not None:
            # A truncation can bring back a base offset whose old files still wait to be unlinked.
            self.file_deleter.reclaim(self.directory, segment_file_stem(base))
        return LogSegment(
            self.directory,
            base,
            self.config.index_interval_bytes,
            created_ms=self._clock_ms(),
            pool=self._pool,
            index_bytes=self.config.segment_index_bytes,
            size_bytes=size_bytes,
            txn_index_exists=txn_index_exists,
        )

    def _new_empty_segment(self, base: int) -> LogSegment:
        """A new active segment: its indexes are known empty (never read back
        from their preallocated files, ten megabytes of zeros by default)."""
        segment = self._new_segment(base, 0, txn_index_exists=False)
        segment.next_offset = base
        for index in (segment.index, segment.time_index):
            index.start_empty()
            index.preallocate()
        return segment

    def _track_batch(self, header, data=None, position: int = 0, index_into: LogSegment | None = None) -> None:
        """Feed a batch that is in the log to the producer state. A marker's record
        is read from ``data`` at ``position``; when it closes an aborted transaction,
        the entry goes to ``index_into``'s ``.txnindex`` (None: the index already
        has it, as when replaying batches of trusted segments)."""
        producer_id = header.producer_id
        if producer_id < 0:
            return
        if not header.is_control:
            self.producer_state.update(
                producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.last_offset_delta,
                header.base_offset,
                header.max_timestamp_ms,
                transactional=header.is_transactional,
            )
            return
        try:
            control = first_control_record(data, position)
        except ProtocolError as exc:  # not a marker this broker can read: it changes no producer state
            log.warning("%s: unreadable control batch at offset %d: %s", self.directory.name, header.base_offset, exc)
            return
        # No record: the cleaner emptied it once its transaction's data was gone.
        if control is None or control.control_type not in (ControlType.ABORT, ControlType.COMMIT):
            return
        completed = self.producer_state.apply_marker(
            producer_id,
            header.producer_epoch,
            control.coordinator_epoch,
            header.base_offset,
            header.max_timestamp_ms,
            commit=control.is_commit,
        )
        if completed is not None and completed.aborted and index_into is not None:
            index_into.txn_index.append(
                AbortedTxn(producer_id, completed.first_offset, completed.last_offset, completed.last_stable_offset)
            )

    # ----------------------------------------------------------------- state

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def high_watermark(self) -> int:
        """The partition's high watermark (everything below is committed). This is
        its one home: a replicated partition's leader state
        (replication/partition.py) and follower moves it here. It only moves
        forward and never past the log end; a truncation lowers it with the log
        end, and ``reset_high_watermark`` sets it when a replica takes the log
        over from a checkpoint."""
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        if not self._high_watermark <= offset <= self.log_end_offset:
            raise AssertionError(
                f"{self.directory.name}: high watermark {self._high_watermark} moved to {offset} "
                f"(log end {self.log_end_offset}): it only moves forward, up to the log end"
            )
        self._high_watermark = offset

    def reset_high_watermark(self, offset: int) -> None:
        """Start the high watermark over at ``offset`` (at most the log end): a replica
        taking the log over (the checkpointed value, which may be below what
        opening the log assumed), not a move of committed data."""
        if not 0 <= offset <= self.log_end_offset:
            raise AssertionError(f"{self.directory.name}: high watermark reset to {offset}, the log ends at {self.log_end_offset}")
        self._high_watermark = offset

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    # ----------------------------------------------------------------- append

    def append(
        self,
        records,
        *,
        leader_epoch: int = 0,
        defer_flush: bool = False,
        from_coordinator: bool = False,
        verification_guard: object | None = None,
    ) -> AppendResult:
        """Validate and append the batches in ``records`` (bytes from a Produce request).

        Transactional batches need a producer id (else INVALID_RECORD); markers
        come only through :meth:`append_marker` (INVALID_RECORD here). A producer
        inside a transaction may write only transactional batches
        (INVALID_TXN_STATE). ``verification_guard`` (KIP-890): when given, a
        transactional batch that would open a transaction is appended only if it
        is still the producer's guard (see :meth:`verification_guard_for`), else
        INVALID_TXN_STATE. ``from_coordinator``: the batches are a coordinator's
        (the group coordinator's transactional offset commits, without sequence
        numbers): only their producer epoch is checked, not their sequences."""
        if not records:
            raise AppendError(ErrorCode.CORRUPT_MESSAGE, "empty records")
        # Offsets and epochs are patched into the batches in place: a writable view
        # of the request's own buffer is used as it is, anything else is copied.
        data = records if isinstance(records, memoryview) and not records.readonly else bytearray(records)
        batches = check_produced_batches(data, self.config.max_message_bytes)

        idempotent = [h for _, _, h in batches if h.producer_id >= 0]
        if idempotent:
            if from_coordinator:
                for h in idempotent:
                    check_producer(self.producer_state.check_epoch, h.producer_id, h.producer_epoch)
            else:
                duplicate = check_producers(self.producer_state, idempotent)
                if duplicate is not None:
                    return duplicate
            check_transactions(self.producer_state, idempotent, verification_guard)

        log_append_time = self.config.message_timestamp_type == "LogAppendTime"
        now_ms = self._clock_ms()
        config = self.config
        check_records(
            data, batches, now_ms, check_timestamps=not log_append_time, compacted=config.compacts,
            timestamp_after_max_ms=config.timestamp_after_max_ms, timestamp_before_max_ms=config.timestamp_before_max_ms,
            partition_name=self.directory.name,
        )
        next_offset = self.log_end_offset
        base_offset = next_offset
        if not self.leader_epochs or self.leader_epochs[-1][0] < leader_epoch:
            self._assign_leader_epoch(leader_epoch, base_offset)
        positions = []
        producer_updates = []
        for position, size, header in batches:
            patch_base_offset(data, position, next_offset)
            patch_partition_leader_epoch(data, position, leader_epoch)
            max_timestamp = header.max_timestamp_ms
            if log_append_time:
                patch_log_append_time(data, position, now_ms)
                max_timestamp = now_ms
            last_offset = next_offset + header.last_offset_delta
            positions.append((position, last_offset, max_timestamp))
            if header.producer_id >= 0:
                producer_updates.append(
                    (header.producer_id, header.producer_epoch, header.base_sequence,
                     header.last_offset_delta, next_offset, max_timestamp, header.is_transactional)
                )
            next_offset = last_offset + 1

        # A roll snapshots the producer state at the log end, so this
        # request's batches enter the state only once they are written.
        self._maybe_roll(len(data), max(p[2] for p in positions))
        self.active_segment.append(data, next_offset - 1, positions)
        for *update, transactional in producer_updates:
            self.producer_state.update(*update, transactional=transactional)
        if not self.replicated:
            self._high_watermark = self.log_end_offset
        self._unflushed_messages += next_offset - base_offset
        flush_due = self._unflushed_messages >= self.config.flush_messages
        if flush_due and not defer_flush:
            self.flush(fsync=True)
        return AppendResult(base_offset, next_offset - 1, now_ms if log_append_time else -1, flush_due=flush_due and defer_flush)

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        *,
        leader_epoch: int,
        defer_flush: bool = False,
    ) -> AppendResult:
        """Write a COMMIT or ABORT marker for ``producer_id`` at the log end (what a
        WriteTxnMarkers request asks of a partition leader), stamped with
        ``leader_epoch``. It closes the producer's transaction here, if one is open
        (an abort is added to the ``.txnindex``); a marker for a producer without
        one is written all the same, as Kafka does. AppendError, with nothing
        written: TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older than
        the producer's last marker's, INVALID_PRODUCER_EPOCH for a producer epoch
        older than the producer's (a newer one is the coordinator's bump, and
        becomes the producer's epoch). ``defer_flush`` as for :meth:`append`."""
        check_producer(self.producer_state.check_marker, producer_id, producer_epoch, coordinator_epoch)
        now_ms = self._clock_ms()
        data = bytearray(
            build_control_batch(
                ControlType.COMMIT if commit else ControlType.ABORT,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                timestamp_ms=now_ms,
            )
        )
        log_append_time = self.config.message_timestamp_type == "LogAppendTime"
        if log_append_time:
            patch_log_append_time(data, 0, now_ms)
        self._maybe_roll(len(data), now_ms)
        offset = self.log_end_offset
        if not self.leader_epochs or self.leader_epochs[-1][0] < leader_epoch:
            self._assign_leader_epoch(leader_epoch, offset)
        patch_base_offset(data, 0, offset)
        patch_partition_leader_epoch(data, 0, leader_epoch)
        segment = self.active_segment
        segment.append(data, offset, [(0, offset, now_ms)])
        self._track_batch(parse_batch_header(data), data, 0, segment)
        if not self.replicated:
            self._high_watermark = self.log_end_offset
        self._unflushed_messages += 1
        flush_due = self._unflushed_messages >= self.config.flush_messages
        if flush_due and not defer_flush:
            self.flush(fsync=True)
        return AppendResult(offset, offset, now_ms if log_append_time else -1, flush_due=flush_due and defer_flush)

    def append_as_follower(self, records) -> int:
        """Append batches fetched from the partition's leader exactly as they are:
        offsets, leader epochs, timestamps and producer fields are the leader's,
        so every replica holds the same bytes at the same offsets. Each batch is
        CRC-checked and must start at or after the log end (a compacted leader
        may leave gaps); a trailing partial batch is left for the next fetch.
        The leader epoch cache gains each new epoch the batches carry. Returns
        the number of bytes appended; raises AppendError (CORRUPT_MESSAGE) and
        appends nothing when any batch is bad."""
        if not records:
            return 0
        # A view is read and written as it is (a replica fetch's records are a
        # view of the response frame they arrived in).
        data = records if isinstance(records, (bytes, bytearray, memoryview)) else bytes(records)
        batches, consumed, next_offset = check_follower_batches(data, self.log_end_offset)
        if not batches:
            return 0
        if consumed != len(data):
            data = data[:consumed]
        epoch_starts = []
        latest_epoch = self.leader_epochs[-1][0] if self.leader_epochs else -1
        positions = []
        for position, _, header in batches:
            last_offset = header.base_offset + header.last_offset_delta
            positions.append((position, last_offset, header.max_timestamp_ms))
            if header.partition_leader_epoch > latest_epoch:
                latest_epoch = header.partition_leader_epoch
                epoch_starts.append((latest_epoch, header.base_offset))
        # One write into one segment: a batch run that must roll midway is
        # appended in two steps so that each segment's index stays its own.
        start = 0
        for index, (position, size, header) in enumerate(batches):
            if index > start and self._would_roll(position - batches[start][0] + size, header.max_timestamp_ms):
                self._append_run(data, batches[start:index], positions[start:index], epoch_starts)
                start = index
        self._append_run(data, batches[start:], positions[start:], epoch_starts)
        self._unflushed_messages += next_offset - batches[0][2].base_offset
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush(fsync=True)
        return consumed

    def _would_roll(self, incoming_bytes: int, incoming_timestamp_ms: int) -> bool:
        active = self.active_segment
        if active.size_bytes == 0:
            return False
        return (
            active.size_bytes + incoming_bytes > self.config.segment_bytes
            or active.time_waited_for_roll_ms(self._clock_ms(), incoming_timestamp_ms) > self.config.segment_ms
            or active.index_full
        )

    def _append_run(self, data, batches, positions, epoch_starts) -> None:
        """Write a run of the leader's batches that belongs in one segment."""
        first = batches[0][0]
        last_position, last_size, last_header = batches[-1]
        run = memoryview(data)[first : last_position + last_size]
        self._maybe_roll(len(run), max(p[2] for p in positions))
        if self.active_segment.size_bytes == 0 and self.active_segment.base_offset != batches[0][2].base_offset:
            self._rebase_empty_active_segment(batches[0][2].base_offset)
        for epoch, start_offset in epoch_starts:
            if batches[0][2].base_offset <= start_offset <= batches[-1][2].base_offset and (
                not self.leader_epochs or self.leader_epochs[-1][0] < epoch
            ):
                self._assign_leader_epoch(epoch, start_offset)
        self.active_segment.append(
            run, positions[-1][1], [(position - first, last, ts) for (position, _, _), (_, last, ts) in zip(batches, positions)]
        )
        segment = self.active_segment
        for position, _, header in batches:
            self._track_batch(header, data, position, segment)

    def _rebase_empty_active_segment(self, offset: int) -> None:
        """The empty active segment is renamed for ``offset`` when the leader's next
        batch starts past it (offsets a compacted leader no longer has), so that a
        segment's name stays its first batch's offset."""
        old = self.segments.pop()
        self._segment_bases.pop()
        old.delete()
        new = self._new_empty_segment(offset)
        self.segments.append(new)
        self._segment_bases.append(offset)
        if len(self.segments) == 1:
            self.log_start_offset = max(self.log_start_offset, offset)

    def _assign_leader_epoch(self, epoch: int, start_offset: int) -> None:
        """A new leader epoch starts writing here: record it in
        ``leader-epoch-checkpoint`` before the first batch of the epoch lands."""
        self.leader_epochs.append((epoch, start_offset))
        write_leader_epochs(self.directory / LEADER_EPOCH_CHECKPOINT, self.leader_epochs)

    def end_offset_for_epoch(self, epoch: int, current_epoch: int = -1) -> tuple[int, int]:
        """What OffsetForLeaderEpoch answers for ``epoch`` (see :func:`epoch_end_offset`);
        ``current_epoch`` is the partition's leader epoch now."""
        return epoch_end_offset(
            self.leader_epochs, epoch, current_epoch=current_epoch,
            log_start_offset=self.log_start_offset, log_end_offset=self.log_end_offset,
        )

    def _maybe_roll(self, incoming_bytes: int, incoming_timestamp_ms: int) -> None:
        active = self.active_segment
        if active.size_bytes == 0:
            return
        too_big = active.size_bytes + incoming_bytes > self.config.segment_bytes
        too_old = active.time_waited_for_roll_ms(self._clock_ms(), incoming_timestamp_ms) > self.config.segment_ms
        if too_big or too_old or active.index_full:
            self.roll()

    def roll(self) -> LogSegment:
        old = self.active_segment
        if old.size_bytes == 0:
            return old  # an empty segment already starts at the log end
        # Kafka flushes a rolled segment and moves the recovery point past it, so
        # a crash re-reads only the active segment; one fsync per segment.
        old.flush(fsync=True)
        old.index.trim()
        old.time_index.trim()
        self.recovery_point = max(self.recovery_point, self.log_end_offset)
        new = self._new_empty_segment(self.log_end_offset)
        self.segments.append(new)
        self._segment_bases.append(new.base_offset)
        # As Kafka does: the state of every batch below the new segment, so that
        # recovering the new segment starts from a snapshot, not the log start.
        self._write_snapshot(new.base_offset)
        return new

    # ----------------------------------------------------------------- transactions

    def verification_guard_for(self, producer_id: int) -> VerificationGuard:
        """The producer's verification guard (made now if it has none), for a
        transactional append that must be verified with the transaction
        coordinator first: pass it to :meth:`append` as ``verification_guard``.
        A marker for the producer, a newer producer epoch or the producer's
        removal replaces it, and an append with the old one is refused."""
        return self.producer_state.verification_guard_for(producer_id, self._clock_ms())

    def has_ongoing_transaction(self, producer_id: int, epoch: int | None = None) -> bool:
        return self.producer_state.has_ongoing_transaction(producer_id, epoch)

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction (DescribeProducers'
        current_txn_start_offset)."""
        return self.producer_state.ongoing_transactions()

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest transaction still open or whose marker is at or
        above the high watermark (never below the log start); None when there is none."""
        first = self.producer_state.first_unstable_offset(self.high_watermark)
        return None if first is None else max(first, self.log_start_offset)

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed consumers stop: the high watermark, or the first
        unstable offset when that is lower."""
        first = self.first_unstable_offset
        high_watermark = self.high_watermark
        return high_watermark if first is None or first >= high_watermark else first

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions that overlap
        ``[fetch_offset, upper_offset)`` (what a read_committed fetch answers)."""
        return [(txn.producer_id, txn.first_offset) for txn in self.aborted_transaction_entries(fetch_offset, upper_offset)]

    def aborted_transaction_entries(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The ``.txnindex`` entries of the aborted transactions that overlap
        ``[fetch_offset, upper_offset)``: from the segment holding ``fetch_offset``
        on, up to the first segment whose entries say that no later one can
        matter (storage.txn_index), as Kafka's collectAbortedTransactions."""
        found: list[AbortedTxn] = []
        for segment in self.segments[self._segment_for(fetch_offset) :]:
            entries, complete = segment.txn_index.collect(fetch_offset, upper_offset)
            found += entries
            if complete:
                break
        return found

    # ----------------------------------------------------------------- read

    def _segment_for(self, offset: int) -> int:
        return max(bisect_right(self._segment_bases, offset) - 1, 0)

    def read(self, offset: int, max_bytes: int, *, upper_offset: int | None = None, oversized_first_batch: bool = True) -> bytes:
        """Whole batches starting with the one holding ``offset``, as bytes (see :meth:`read_slice`)."""
        file_slice = self.read_slice(offset, max_bytes, upper_offset=upper_offset, oversized_first_batch=oversized_first_batch)
        if file_slice is None:
            return b""
        try:
            return file_slice.read_all()
        finally:
            file_slice.close()

    def read_slice(
        self, offset: int, max_bytes: int, *, upper_offset: int | None = None, oversized_first_batch: bool = True
    ) -> FileSlice | None:
        """The file range of whole batches starting with the one holding ``offset``.

        At most ``max_bytes``, except that with ``oversized_first_batch`` a
        first batch larger than that is returned whole (so a consumer can
        always make progress); no batch that starts at or past
        ``upper_offset`` (default: the high watermark). Reads stay within one
        segment, as Kafka's do. The caller closes the slice.
        """
        upper = self.high_watermark if upper_offset is None else upper_offset
        if offset >= upper:
            return None
        index = self._segment_for(offset)
        while index < len(self.segments):
            segment = self.segments[index]
            found = segment.find_batch_position(offset)
            if found is not None:
                start = found[0]
                # The batches up to the last indexed one that starts within
                # max_bytes and ends below upper are all taken: no need to read
                # their headers. The walk goes on from there.
                walk_from = segment.index.last_batch_start(start + max_bytes, upper)
                length = max(walk_from - start, 0)
                next_offset = -1
                for _, size, header in segment.headers_from(start + length):
                    if header.base_offset >= upper:
                        break
                    if length + size > max_bytes and (length or not oversized_first_batch):
                        if length and next_offset < 0:
                            # Stopped at the first batch walked: the slice ends where
                            # it starts (Kafka's fetch upper bound is that batch's base offset too).
                            next_offset = header.base_offset
                        break
                    length += size
                    next_offset = header.base_offset + header.last_offset_delta + 1
                return FileSlice(segment.dup_fd(), start, length, next_offset) if length else None
            index += 1
            if index < len(self.segments):
                offset = self.segments[index].base_offset
        return None

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp_ms``."""
        for segment in self.segments:
            if segment.max_timestamp_ms < timestamp_ms:
                continue
            start_offset = max(segment.time_index.lookup(timestamp_ms), self.log_start_offset)
            found = segment.find_batch_position(start_offset)
            if found is None:
                continue
            for position, size, header in segment.headers_from(found[0]):
                if header.base_offset >= self.high_watermark:
                    return None
                if header.max_timestamp_ms < timestamp_ms:
                    continue
                # Only this batch needs its records: the answer is a record, not a batch.
                _, records = decode_batch_records(segment.read(position, size))
                for record in records:
                    if record.offset >= self.log_start_offset and record.timestamp_ms >= timestamp_ms:
                        return record.offset, record.timestamp_ms
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
        best: tuple[int, int] | None = None
        for segment in self.segments:
            for position, size, header in segment.headers_from(0):
                if header.base_offset >= self.high_watermark:
                    break
                if header.base_offset + header.last_offset_delta < self.log_start_offset:
                    continue
                if best is None or header.max_timestamp_ms > best[1]:
                    _, records = decode_batch_records(segment.read(position, size))
                    for record in records:
                        if record.offset >= self.log_start_offset and (best is None or record.timestamp_ms > best[1]):
                            best = (record.offset, record.timestamp_ms)
        return best

    # ----------------------------------------------------------------- lifecycle

    def flush(self, fsync: bool = True) -> None:
        """Write out index entries; with ``fsync`` also make everything appended
        so far durable and move the recovery point to the log end."""
        for segment in self.segments[-2:]:  # a roll leaves the previous segment unsynced
            segment.flush(fsync)
        if fsync:
            self.recovery_point = self.log_end_offset
            self._unflushed_messages = 0
            self._last_flush_ms = self._clock_ms()

    def begin_flush(self) -> PendingFlush | None:
        """The first half of a flush whose fsyncs run elsewhere: index entries are
        written now, and what must be synced is handed out; None when nothing was
        appended since the last flush. The caller syncs it, then calls end_flush."""
        log_fds, index_paths = [], []
        for segment in self.segments[-2:]:  # a roll leaves the previous segment unsynced
            segment.index.flush(False)
            segment.time_index.flush(False)
            if segment.take_unflushed():
                log_fds.append(os.dup(segment.file_descriptor()))
                index_paths += [segment.index.path, segment.time_index.path]
                # A .txnindex entry comes with the marker appended to the .log.
                if segment.txn_index.take_unsynced():
                    index_paths.append(segment.txn_index.path)
        self._unflushed_messages = 0
        if not log_fds:
            # Nothing unsynced (a roll synced it): not asked again until the next append.
            self._last_flush_ms = self._clock_ms()
            return None
        return PendingFlush(log_fds, index_paths, self.log_end_offset)

    def end_flush(self, pending: PendingFlush) -> None:
        """Everything below ``pending.end_offset`` is durable: the recovery point
        moves there (never past the log end: a truncation may have come between)."""
        self.recovery_point = min(max(self.recovery_point, pending.end_offset), self.log_end_offset)
        self._last_flush_ms = self._clock_ms()

    def flush_due_by_time(self, now_ms: int) -> bool:
        """flush.ms: whether the oldest unflushed message is that old."""
        return bool(self._unflushed_messages) and now_ms - self._last_flush_ms >= self.config.flush_ms

    def truncate_to(self, offset: int) -> int:
        """Remove everything at or after ``offset`` (a follower cutting a divergent
        tail). A batch holding ``offset`` goes whole, as in Kafka, so the new log
        end may be below ``offset``. Returns the new log end offset."""
        if offset >= self.log_end_offset:
            return self.log_end_offset
        self.truncations += 1
        offset = max(offset, self.log_start_offset)
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
        segment = self.segments[-1]
        found = segment.find_batch_position(offset)
        if found is not None:
            position = found[0]
            header = segment._read_header(position)
            segment.truncate_to_position(position, header.base_offset)
        self._segment_bases = [s.base_offset for s in self.segments]
        kept = [(e, start) for e, start in self.leader_epochs if start < self.log_end_offset]
        if kept != self.leader_epochs:
            self.leader_epochs = kept
            write_leader_epochs(self.directory / LEADER_EPOCH_CHECKPOINT, kept)
        self._high_watermark = min(self._high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.flush(fsync=True)
        # As Kafka's truncateAndReload: from the newest snapshot at or below the new
        # end, so transactions that started past the cut are gone and those whose
        # marker was cut are open again. The cut segment's .txnindex lost its
        # entries past the cut with it (LogSegment.truncate_to_position).
        self.producer_state.clear()
        self._load_producer_state()
        self._remove_stray_snapshots()
        return self.log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every batch and restart the log, empty, at ``offset`` (Kafka's
        truncateFullyAndStartAt). A Raft follower does this when it installs a
        snapshot its log is behind or disagrees with. Durable on return.

        Segments go newest first with a directory fsync after each, so a crash
        part-way leaves a prefix of the old log, never one with a hole; the new
        empty segment named for ``offset`` is what makes the next open start
        there. The leader epochs are cleared first, so that no crash point
        leaves epoch entries describing batches that are gone; a caller that
        crashes part-way must redo the call after reopening (the Raft log does,
        as its newest snapshot is still ahead of the log).
        """
        self.truncations += 1
        self.leader_epochs = []
        write_leader_epochs(self.directory / LEADER_EPOCH_CHECKPOINT, [])
        for segment in reversed(self.segments):
            segment.delete()
            fsync_dir(self.directory)
        for offset_of_snapshot in list(self._snapshots):
            self._delete_snapshot(offset_of_snapshot)  # producer state of batches that are gone
        self.producer_state.clear()
        new = self._new_empty_segment(offset)
        self.segments = [new]
        self._segment_bases = [offset]
        self.log_start_offset = self.recovery_point = self._high_watermark = offset
        self._unflushed_messages = 0
        fsync_dir(self.directory)

    # ----------------------------------------------------------------- lifecycle

    def close(self) -> None:
        sync, finish = self.close_in_parts()
        if sync is not None:
            sync()
        finish()

    def close_in_parts(self, *, fsync: bool = True) -> tuple[Callable[[], None] | None, Callable[[], None]]:
        """Closing as two calls, so an owner of many logs can run the slow first
        one (the fsyncs and the snapshot write) for many logs at once on worker
        threads: ``sync`` touches only files and data taken here, never this
        object; ``finish`` (on the owner's thread, after ``sync``) closes it.
        Without ``fsync``, ``sync`` only writes: the owner makes the whole file
        system durable (``sync_file_systems``) before calling ``finish``.
        ``sync`` is None when there is nothing for it to do."""
        # Without fsync the whole file system is synced afterwards: nothing to
        # hand out, and the segments close now, so that the sync covers their
        # index writes and trims too.
        pending = self.begin_flush() if fsync else None
        if not fsync:
            for segment in self.segments:
                segment.close()
        end = self.log_end_offset
        # The next open after this clean shutdown loads this snapshot and reads no batch.
        snapshot_offset_due = self._snapshot_offset_for_close()
        if snapshot_offset_due is not None and self.file_deleter is not None:
            self.file_deleter.reclaim(self.directory, segment_file_stem(end))
        producers = dict(self.producer_state.producers) if snapshot_offset_due is not None else None
        directory = self.directory

        def sync() -> None:
            if pending is not None:
                pending.sync()
            if snapshot_offset_due is not None:
                write_snapshot(directory, snapshot_offset_due, producers, fsync=fsync)

        def finish() -> None:
            self.closed = True
            # Everything is durable now: older segments were synced when they rolled.
            self.recovery_point = self.log_end_offset
            self._unflushed_messages = 0
            if snapshot_offset_due is not None:
                insort(self._snapshots, snapshot_offset_due)
                self._remove_stray_snapshots()
            if fsync:
                for segment in self.segments:
                    segment.close()

        return (sync if pending is not None or snapshot_offset_due is not None else None), finish

    def abandon(self) -> None:
        """Let go of the log without writing anything: its directory failed (a
        write or fsync there raised), so nothing more is flushed, trimmed or
        snapshotted. The next start recovers it from disk, as after a crash."""
        self.closed = True
        for segment in self.segments:
            segment.close_files()

    def delete(self) -> None:
        self.closed = True
        for segment in self.segments:
            segment.delete()
        for leftover in self.directory.iterdir():
            leftover.unlink()
        self.directory.rmdir()


