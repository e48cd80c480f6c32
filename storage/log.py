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

This file is longer than most: appending, reading, transactions, truncation,
retention and crash recovery all act on the same segment list, producer state
and index files, and splitting them would spread one set of invariants over
several modules.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import (
    MAGIC_OFFSET,
    ControlType,
    build_control_batch,
    decode_batch_records,
    first_control_record,
    iter_batches,
    parse_batch_header,
    patch_base_offset,
    patch_log_append_time,
    patch_partition_leader_epoch,
    validate_batch,
)
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, fsync_dir, read_leader_epochs, write_leader_epochs
from storage.deferred_io import DeferredFileDeleter, PendingFlush
from storage.file_slice import FileSlice
from storage.handle_pool import FileHandlePool
from storage.producer_snapshot import (
    CorruptSnapshotError,
    read_snapshot,
    snapshot_file_name,
    snapshot_offset,
    write_snapshot,
)
from storage.producer_state import (
    ProducerStateError,
    ProducerStateManager,
    VerificationGuard,
    last_sequence_of,
    next_sequence,
)
from storage.segment import LogSegment, segment_file_stem
from storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, CorruptTxnIndexError

log = logging.getLogger(__name__)

_INT32 = struct.Struct(">i")
_LEGACY_MESSAGE_MIN_BYTES = 14  # crc + magic + attributes + key and value lengths (magic 0)


class RecordError(NamedTuple):
    """One record that made its batch be refused (KIP-467)."""

    batch_index: int  # the record's position among the appended records, 0-based
    message: str


class AppendError(Exception):
    """A produce request's records were refused; carries Kafka's error code.

    ``record_errors`` names the records at fault, ascending by index, when the
    refusal comes from checks of single records (keys, timestamps): Produce
    v8+ returns them so that a client fails those records with the error and
    the rest of the batch as collateral. Empty for batch-level refusals.
    """

    def __init__(self, error_code: ErrorCode, message: str, record_errors: tuple[RecordError, ...] = ()):
        super().__init__(message)
        self.error_code = error_code
        self.record_errors = record_errors


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


@dataclass(frozen=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    duplicate: bool = False  # a retried idempotent batch: nothing was written
    # flush.messages was reached by an append that left the flush to its caller
    # (``defer_flush``): the batch is durable only after begin/end_flush.
    flush_due: bool = False


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


# Suffixes of files left by an interrupted segment replacement or deletion.
# An empty producer state over fewer bytes of batches than this past the
# newest snapshot is replayed when the log is opened rather than snapshotted
# at a clean shutdown or after such a replay: reading 64 KiB of batch headers
# costs about what creating a snapshot file does.
SNAPSHOT_TAIL_MIN_BYTES = 64 << 10
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
_SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", TXN_INDEX_SUFFIX)


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


class PartitionLog:
    """One partition's log.

    Opening: with ``clean_shutdown`` the files are trusted and only the tail
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

    def _complete_interrupted_operations(self) -> None:
        """Finish or undo what a crash interrupted, the way Kafka's log loader does:
        ``.cleaned`` files are an unfinished cleaning (dropped), ``.swap`` files a
        finished one that was being swapped in (completed), ``.deleted`` files a
        deletion (finished)."""
        swaps = []
        for path in self.directory.iterdir():
            name = path.name
            if name.endswith((CLEANED_SUFFIX, DELETED_SUFFIX, ".tmp")):
                path.unlink()
            elif name.endswith(SWAP_SUFFIX):
                swaps.append(path)
        # Segment .log swaps first: completing one removes the files it replaces,
        # which must not include the index swaps that belong to it.
        for path in sorted(swaps, key=lambda p: (not p.name.endswith(".log" + SWAP_SUFFIX), p.name)):
            final = path.with_name(path.name[: -len(SWAP_SUFFIX)])
            if final.suffix == ".log":
                # The swapped-in segment replaces every older segment it covers;
                # those were renamed to .deleted (and removed above) or still
                # exist if the crash came first: remove them by offset range.
                self._remove_segments_covered_by(path, int(final.stem))
            os.replace(path, final)

    def _remove_segments_covered_by(self, swap_log: Path, base: int) -> None:
        """Delete the segments a swap file replaces: those from ``base`` up to its last offset."""
        last_offset = base
        with open(swap_log, "rb") as f:
            data = f.read()
        for _, _, header in iter_batches(data, allow_truncated_tail=True):
            last_offset = header.base_offset + header.last_offset_delta
        for path in list(self.directory.glob("*.log")):
            if path.stem.isdigit() and base <= int(path.stem) <= last_offset:
                for suffix in _SEGMENT_SUFFIXES:
                    path.with_suffix(suffix).unlink(missing_ok=True)

    def _open_segments(self, recovery_point: int | None, clean_shutdown: bool) -> None:
        self._complete_interrupted_operations()
        sizes = {}
        txn_indexes = set()  # base offsets of the segments with a .txnindex
        with os.scandir(self.directory) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith(".log") and name[:-4].isdigit():
                    sizes[int(name[:-4])] = entry.stat().st_size
                elif name.endswith(TXN_INDEX_SUFFIX) and name[: -len(TXN_INDEX_SUFFIX)].isdigit():
                    txn_indexes.add(int(name[: -len(TXN_INDEX_SUFFIX)]))
                else:
                    offset = snapshot_offset(name)
                    if offset is not None:
                        self._snapshots.append(offset)
        self._snapshots.sort()
        if not sizes and not self._snapshots:
            # A new log (or one whose every file is gone): nothing to recover or
            # load, so none of the recovery's file rewrites, which would make
            # opening a new partition several times as slow.
            start = 0
            active = self._new_empty_segment(start)
            self.segments = [active]
            self._segment_bases = [start]
            self.recovery_point = start
            return
        if not sizes:
            sizes = {0: None}
        for orphan in txn_indexes.difference(sizes):  # its segment is gone: nothing to index
            (self.directory / f"{segment_file_stem(orphan)}{TXN_INDEX_SUFFIX}").unlink(missing_ok=True)
        for base in sorted(sizes):
            self.segments.append(self._new_segment(base, sizes[base], base in txn_indexes))
        self._segment_bases = [s.base_offset for s in self.segments]
        for older, newer in zip(self.segments, self.segments[1:]):
            older.next_offset = newer.base_offset
        damaged = self._first_damaged_txn_index(txn_indexes)
        if damaged is not None:
            # Rebuilt from the markers by recovering from that segment on.
            clean_shutdown = False
            recovery_point = damaged if recovery_point is None else min(recovery_point, damaged)
        active = self.segments[-1]
        if clean_shutdown and recovery_point is not None and recovery_point >= active.base_offset:
            for older in self.segments[:-1]:
                if older.indexes_missing:
                    log.info("%s: rebuilding the indexes of %s", self.directory.name, older.log_path.name)
                    older.recover(verify_crc=False)
            active.load_after_clean_shutdown()
            active.index.preallocate()
            active.time_index.preallocate()
            self.recovery_point = active.next_offset
            self._load_producer_state()
            return
        self._recover(recovery_point)

    def _first_damaged_txn_index(self, bases: set[int]) -> int | None:
        """Base offset of the first segment whose ``.txnindex`` cannot be read (its
        size or an entry's version is wrong), or None. The files are read now: only
        segments where a transaction aborted have one, and they are small."""
        for segment in self.segments:
            if segment.base_offset in bases:
                try:
                    segment.txn_index.load()
                except CorruptTxnIndexError as exc:
                    log.warning("%s: rebuilding %s: %s", self.directory.name, segment.txn_index.path.name, exc)
                    return segment.base_offset
        return None

    def _recover(self, recovery_point: int | None) -> None:
        """Re-read every segment that may hold unflushed data, cut at the first bad batch."""
        if recovery_point is None:
            first = 0
        else:
            first = max(bisect_right(self._segment_bases, recovery_point) - 1, 0)
        for older in self.segments[:first]:
            if older.indexes_missing:
                older.recover(verify_crc=False)
        # Producer state: the newest valid snapshot at or below the first segment
        # re-read (everything below it is durable), then the batches after it; the
        # segments re-read below feed it as they are checked, and their aborted
        # transaction indexes are rebuilt from it, so it must describe exactly the
        # batches below each of them (as Kafka's recoverSegment rebuilds it).
        recovered_from = self.segments[first].base_offset
        loaded = self._load_snapshot(recovered_from)
        replay_from = loaded if loaded is not None else self.segments[0].base_offset
        if replay_from < recovered_from:
            # Batches below the recovery point are trusted: headers only, no CRC.
            self._replay_producers(replay_from, recovered_from)
            self._write_snapshot(recovered_from)
            replay_from = recovered_from
        floor = self._first_offset()
        segment = self.segments[first]  # rebound by the loop below: on_batch indexes into the one being read

        def on_batch(header, data, position) -> None:
            if header.base_offset >= replay_from and header.base_offset + header.last_offset_delta >= floor:
                self._track_batch(header, data, position, segment)

        total_bytes = sum(s.size_bytes for s in self.segments[first:])
        done_bytes = 0
        started = time.monotonic()
        index = first
        while index < len(self.segments):
            segment = self.segments[index]
            segment.txn_index.reset()  # rebuilt from the segment's markers
            truncated = segment.recover(on_batch=on_batch)
            done_bytes += segment.size_bytes + truncated
            if total_bytes > 64 << 20:
                log.info(
                    "%s: recovered %s (%d of %d MB, %.1f s)",
                    self.directory.name, segment.log_path.name, done_bytes >> 20, total_bytes >> 20, time.monotonic() - started,
                )
            if truncated:
                log.warning("%s: cut %d bytes of a torn or corrupt tail from %s", self.directory.name, truncated, segment.log_path.name)
                # Nothing after a corrupt batch can be trusted, later segments included.
                for later in self.segments[index + 1 :]:
                    log.warning("%s: deleting %s, which follows a corrupt batch", self.directory.name, later.log_path.name)
                    later.delete()
                del self.segments[index + 1 :]
                self._segment_bases = [s.base_offset for s in self.segments]
                break
            if index + 1 < len(self.segments) and segment.next_offset > self.segments[index + 1].base_offset:
                raise RuntimeError(f"{self.directory}: segment {segment.log_path.name} overlaps the next one")
            index += 1
        active = self.segments[-1]
        active.index.preallocate()
        active.time_index.preallocate()
        self.flush(fsync=True)
        if loaded is not None and loaded > self.log_end_offset:
            # Recovery cut batches the loaded snapshot had seen (fsynced data
            # was damaged): rebuild from a snapshot at or below the new end.
            self.producer_state.clear()
            self._load_producer_state()
        else:
            self._delete_snapshots_above(self.log_end_offset)

    # ----------------------------------------------------------------- producer state

    def _first_offset(self) -> int:
        """The log start offset as far as it is known while opening."""
        return max(self.segments[0].base_offset, self.log_start_offset)

    def _load_producer_state(self) -> None:
        """Producer state at the log end: the newest valid snapshot at or below it,
        then the batches after it (from the log start when there is none). A
        replay of SNAPSHOT_TAIL_MIN_BYTES or more is followed by a snapshot at
        the log end, so the next open is fast."""
        end = self.log_end_offset
        self._delete_snapshots_above(end)
        loaded = self._load_snapshot(end)
        start = loaded if loaded is not None else self.segments[0].base_offset
        if start < end:
            self._replay_producers(start, end)
            if not self._cheap_to_replay(start):
                self._write_snapshot(end)

    def _cheap_to_replay(self, start: int) -> bool:
        """Whether a snapshot at the log end may be left out: no producer state
        to keep, and fewer than SNAPSHOT_TAIL_MIN_BYTES of segments from the one
        holding ``start`` (the newest snapshot, or the log start) to the end,
        which the next open replays faster than a snapshot file is written."""
        if self.producer_state.producers:
            return False
        tail_bytes = 0
        for segment in self.segments[self._segment_for(start) :]:
            tail_bytes += segment.size_bytes
            if tail_bytes >= SNAPSHOT_TAIL_MIN_BYTES:
                return False
        return True

    def _snapshot_offset_for_close(self) -> int | None:
        """Where a clean shutdown writes a snapshot: the log end, as Kafka does,
        unless one is there already or the log is ``_cheap_to_replay`` from its
        newest snapshot (100,000 partitions of a few plain records each spent
        most of their shutdown creating empty snapshot files)."""
        end = self.log_end_offset
        if end <= 0 or end in self._snapshots:
            return None
        older = [o for o in self._snapshots if o <= end]
        if self._cheap_to_replay(older[-1] if older else self.segments[0].base_offset):
            return None
        return end

    def _load_snapshot(self, upper: int) -> int | None:
        """Load the newest valid snapshot at or below ``upper`` into the (empty)
        producer state; a corrupt one is deleted and the next older one tried.
        Returns the loaded snapshot's offset, or None."""
        for offset in reversed([o for o in self._snapshots if o <= upper]):
            try:
                entries = read_snapshot(self.directory / snapshot_file_name(offset))
            except CorruptSnapshotError as exc:
                log.warning("%s: ignoring producer snapshot %s: %s", self.directory.name, snapshot_file_name(offset), exc)
                self._delete_snapshot(offset)
                continue
            now_ms = self._clock_ms()
            expiration_ms = self.producer_id_expiration_ms
            floor = self._first_offset()
            for entry in entries:
                if (
                    expiration_ms is not None
                    and not entry.in_transaction
                    and now_ms - entry.last_timestamp_ms >= expiration_ms
                ):
                    continue
                if entry.batches and entry.batches[-1].last_offset < floor:
                    continue
                self.producer_state.load_entry(entry)
            return offset
        return None

    def _replay_producers(self, start: int, end: int) -> None:
        """Feed the headers of the batches in [start, end) to the producer state,
        except those wholly below the log start (``start`` is a batch boundary:
        a snapshot's offset or the first segment's base offset)."""
        floor = self._first_offset()
        index = self._segment_for(start)
        for segment in self.segments[index:]:
            if segment.base_offset >= end:
                return
            found = segment.find_batch_position(max(start, segment.base_offset))
            if found is None:
                continue
            for position, size, header in segment.headers_from(found[0]):
                if header.base_offset >= end:
                    return
                if header.base_offset >= start and header.base_offset + header.last_offset_delta >= floor:
                    if header.is_control and header.producer_id >= 0:
                        # A marker: its type is in its record. The index files are trusted.
                        self._track_batch(header, segment.read(position, size), 0, None)
                    else:
                        self._track_batch(header)

    def _write_snapshot(self, offset: int) -> None:
        """Snapshot the producer state, which must describe exactly the batches below ``offset``."""
        if self.file_deleter is not None:
            self.file_deleter.reclaim(self.directory, segment_file_stem(offset))
        write_snapshot(self.directory, offset, self.producer_state.producers)
        if offset not in self._snapshots:
            insort(self._snapshots, offset)

    def _delete_snapshot(self, offset: int, *, deferred: bool = False) -> None:
        if deferred and self.file_deleter is not None:
            # Only for snapshots below the log start: one left by a crash is
            # below the first segment and removed as a stray at the next open.
            self.file_deleter.defer(self.directory, [snapshot_file_name(offset)])
        else:
            (self.directory / snapshot_file_name(offset)).unlink(missing_ok=True)
        if offset in self._snapshots:
            self._snapshots.remove(offset)

    def _delete_snapshots_above(self, end: int) -> None:
        """Snapshots past the log end describe batches that are gone. Their removal
        is made durable (directory fsync): if one came back after a power loss
        once the log had grown past it again, it would describe other batches."""
        above = [o for o in self._snapshots if o > end]
        for offset in above:
            self._delete_snapshot(offset)
        if above:
            fsync_dir(self.directory)

    def _delete_snapshots_below(self, offset: int) -> None:
        count = bisect_left(self._snapshots, offset)  # ascending: a prefix goes
        below, self._snapshots = self._snapshots[:count], self._snapshots[count:]
        for old in below:
            self._delete_snapshot(old, deferred=True)

    def _remove_stray_snapshots(self) -> None:
        """Keep a snapshot per segment base offset and the newest other one if it is
        above the last segment's base (the one a clean shutdown wrote), as Kafka's
        ``removeStraySnapshots`` does: at most one snapshot more than segments."""
        bases = set(self._segment_bases)
        strays = [o for o in self._snapshots if o not in bases]
        if strays and strays[-1] > self._segment_bases[-1]:
            strays.pop()
        for offset in strays:
            self._delete_snapshot(offset)

    def _on_log_start_moved(self) -> None:
        """Retention or DeleteRecords moved the log start (and maybe deleted
        segments): producers whose last batch is gone are dropped, and so are the
        snapshots below the first remaining segment."""
        self.producer_state.remove_below(self.log_start_offset)
        self._delete_snapshots_below(self.segments[0].base_offset)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """producer.id.expiration.ms: drop producers idle that long; returns how many."""
        return len(self.producer_state.remove_expired(now_ms, expiration_ms))

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
        if len(data) > MAGIC_OFFSET and data[MAGIC_OFFSET] in (0, 1) and _INT32.unpack_from(data, 8)[0] >= _LEGACY_MESSAGE_MIN_BYTES:
            # Produce v3+ may only carry v2 batches (Kafka answers INVALID_RECORD).
            raise AppendError(ErrorCode.INVALID_RECORD, f"magic {data[MAGIC_OFFSET]} message sets are not accepted")
        batches = []
        consumed = 0
        try:
            for position, size, header in iter_batches(data):
                if header.is_control and (header.is_transactional or header.producer_id >= 0):
                    raise AppendError(ErrorCode.INVALID_RECORD, "transaction markers are written by the broker only")
                if header.is_transactional and header.producer_id < 0:
                    raise AppendError(ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id")
                if size > self.config.max_message_bytes:
                    raise AppendError(
                        ErrorCode.MESSAGE_TOO_LARGE,
                        f"batch of {size} bytes exceeds max.message.bytes={self.config.max_message_bytes}",
                    )
                validate_batch(data, position, size)
                batches.append((position, size, header))
                consumed = position + size
        except ProtocolError as exc:
            raise AppendError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
        if consumed != len(data) or not batches:
            raise AppendError(ErrorCode.CORRUPT_MESSAGE, "records end with a partial batch")

        idempotent = [h for _, _, h in batches if h.producer_id >= 0]
        if idempotent:
            if from_coordinator:
                for h in idempotent:
                    self._producer_check(self.producer_state.check_epoch, h.producer_id, h.producer_epoch)
            else:
                duplicate = self._check_producers(idempotent)
                if duplicate is not None:
                    return duplicate
            self._check_transactions(idempotent, verification_guard)

        log_append_time = self.config.message_timestamp_type == "LogAppendTime"
        now_ms = self._clock_ms()
        self._check_records(data, batches, now_ms, check_timestamps=not log_append_time)
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
        self._producer_check(self.producer_state.check_marker, producer_id, producer_epoch, coordinator_epoch)
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
        data = records if isinstance(records, (bytes, bytearray)) else bytes(records)
        batches = []
        next_offset = self.log_end_offset
        consumed = 0
        try:
            for position, size, header in iter_batches(data, allow_truncated_tail=True):
                if header.magic != 2:
                    raise AppendError(ErrorCode.CORRUPT_MESSAGE, f"batch of magic {header.magic} from the leader")
                validate_batch(data, position, size)
                if header.base_offset < next_offset:
                    raise AppendError(
                        ErrorCode.CORRUPT_MESSAGE,
                        f"batch at offset {header.base_offset} is below the log end offset {next_offset}",
                    )
                batches.append((position, size, header))
                next_offset = header.base_offset + header.last_offset_delta + 1
                consumed = position + size
        except ProtocolError as exc:
            raise AppendError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
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

    def _check_records(self, data, batches, now_ms: int, *, check_timestamps: bool) -> None:
        """The checks of single records, all or nothing: a compacted topic refuses
        records without a key (compaction keeps the latest record per key), and
        CreateTime timestamps must lie within message.timestamp.before.max.ms /
        after.max.ms of the broker's clock. Every bad record is reported in
        AppendError.record_errors, once (a record without a key for its key);
        the error is INVALID_TIMESTAMP when any timestamp is bad, else
        INVALID_RECORD, as Kafka answers. Indexes count the records of all
        ``batches`` (Produce v3+ sends one batch: its record positions).

        Records are decoded only where a check needs them: for compacted topics,
        when a batch header's max timestamp is too new, and when before.max.ms
        is set (the oldest record may be anywhere in a batch). Other topics stay
        on the batch-level path."""
        compacted = self.config.compacts
        after_max = self.config.timestamp_after_max_ms
        before_max = self.config.timestamp_before_max_ms
        before_limited = check_timestamps and before_max < 2**63 - 1
        record_errors: list[RecordError] = []
        any_bad_timestamp = False
        first_index = 0  # of the batch's first record among all appended records
        for position, _, header in batches:
            check_keys = compacted and not header.is_control
            too_new = check_timestamps and header.max_timestamp_ms - now_ms > after_max
            if check_keys or too_new or before_limited:
                try:
                    # validate_batch checked the CRC already.
                    _, records = decode_batch_records(data, position, verify_crc=False)
                except ProtocolError as exc:
                    raise AppendError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
                too_new_record_seen = False
                for index, record in enumerate(records, first_index):
                    timestamp_problem = None
                    if check_timestamps:
                        if record.timestamp_ms - now_ms > after_max:
                            too_new_record_seen = True
                            timestamp_problem = (
                                f"timestamp {record.timestamp_ms} is more than {after_max} ms"
                                f" after the broker's time {now_ms}"
                            )
                        elif now_ms - record.timestamp_ms > before_max:
                            timestamp_problem = (
                                f"timestamp {record.timestamp_ms} is more than {before_max} ms"
                                f" before the broker's time {now_ms}"
                            )
                    # One error per record; a missing key is named first, as Kafka does.
                    if check_keys and record.key is None:
                        # The directory is named <topic>-<partition>, as Kafka names a partition.
                        record_errors.append(RecordError(
                            index,
                            "Compacted topic cannot accept message without key"
                            f" in topic partition {self.directory.name}.",
                        ))
                    elif timestamp_problem is not None:
                        any_bad_timestamp = True
                        record_errors.append(RecordError(index, timestamp_problem))
                if too_new and not too_new_record_seen:
                    # The header's max timestamp is what the log and its time
                    # index keep, so a header newer than all of its records is
                    # refused too, for the batch as a whole.
                    raise AppendError(
                        ErrorCode.INVALID_TIMESTAMP,
                        f"timestamp {header.max_timestamp_ms} is more than {after_max} ms"
                        f" after the broker's time {now_ms}",
                    )
            first_index += header.records_count
        if not record_errors:
            return
        error_code = ErrorCode.INVALID_TIMESTAMP if any_bad_timestamp else ErrorCode.INVALID_RECORD
        first = record_errors[0]
        if len(record_errors) == 1:
            summary = first.message
        else:
            summary = (
                f"{len(record_errors)} records were refused,"
                f" the first at batch index {first.batch_index}: {first.message}"
            )
        raise AppendError(error_code, summary, tuple(record_errors))

    def _check_producers(self, headers) -> AppendResult | None:
        """Sequence checks for idempotent batches; a retried batch returns its first result."""
        if len(headers) == 1:
            h = headers[0]
            try:
                duplicate = self.producer_state.check(h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta)
            except ProducerStateError as exc:
                raise AppendError(exc.error_code, str(exc)) from None
            if duplicate is not None:
                return AppendResult(duplicate.first_offset, duplicate.last_offset, -1, duplicate=True)
            return None
        # Several batches of one request: each must follow the one before it.
        seen: dict[int, tuple[int, int]] = {}
        for h in headers:
            previous = seen.get(h.producer_id)
            try:
                if previous is None:
                    duplicate = self.producer_state.check(h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta)
                    if duplicate is not None:
                        raise AppendError(ErrorCode.DUPLICATE_SEQUENCE_NUMBER, "a retried batch inside a multi-batch request")
                elif h.producer_epoch != previous[0] or h.base_sequence != previous[1]:
                    raise AppendError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "batches of one request are not consecutive")
            except ProducerStateError as exc:
                raise AppendError(exc.error_code, str(exc)) from None
            seen[h.producer_id] = (h.producer_epoch, next_sequence(last_sequence_of(h.base_sequence, h.last_offset_delta)))
        return None

    @staticmethod
    def _producer_check(check, *args) -> None:
        """Run a producer state check, its refusal as an AppendError."""
        try:
            check(*args)
        except ProducerStateError as exc:
            raise AppendError(exc.error_code, str(exc)) from None

    def _check_transactions(self, headers, verification_guard: object | None) -> None:
        """The transaction rules of the producers' batches (see :meth:`append`); a
        request's later batches of a producer count the transaction its earlier
        ones open."""
        open_after: dict[int, bool] = {}  # producer id -> in a transaction after its batches so far
        for h in headers:
            producer_id = h.producer_id
            if producer_id in open_after:
                if open_after[producer_id] and not h.is_transactional:
                    raise AppendError(ErrorCode.INVALID_TXN_STATE, f"producer {producer_id} mixed batches inside a transaction")
                open_after[producer_id] = open_after[producer_id] or h.is_transactional
                continue
            self._producer_check(
                self.producer_state.check_transaction, producer_id, h.producer_epoch, h.is_transactional, verification_guard
            )
            open_after[producer_id] = h.is_transactional or self.producer_state.has_ongoing_transaction(producer_id)

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

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        return self.producer_state.has_ongoing_transaction(producer_id)

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
                length = 0
                next_offset = -1
                for _, size, header in segment.headers_from(start):
                    if header.base_offset >= upper:
                        break
                    if length + size > max_bytes and (length or not oversized_first_batch):
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

    # ----------------------------------------------------------------- retention

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (-1: the high
        watermark); whole segments below it are deleted. Returns the new log start."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise AppendError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is outside [0, {self.high_watermark}]")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._delete_segments_below_log_start()
            self._on_log_start_moved()
        return self.log_start_offset

    def _delete_segments_below_log_start(self) -> int:
        deleted = 0
        # The active segment stays even when everything in it is below the start.
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._delete_segment(self.segments.pop(0))
            deleted += 1
        self._segment_bases = [s.base_offset for s in self.segments]
        if deleted:
            log.info("%s: deleted %d segments below the log start offset %d", self.directory.name, deleted, self.log_start_offset)
        return deleted

    def _delete_segment(self, segment: LogSegment) -> None:
        """Drop a segment below the log start. With a ``file_deleter`` its files
        are handed over to be unlinked later (off the caller's thread): if a
        crash comes first they reappear below the log start and the next
        retention pass drops them again."""
        if self.file_deleter is None:
            segment.delete()
            return
        segment.close_files()
        self.file_deleter.defer(self.directory, segment.file_names())

    def apply_retention(self, now_ms: int) -> int:
        """cleanup.policy=delete: drop the oldest segments past retention.ms or
        beyond retention.bytes; never the active segment. Returns segments deleted."""
        if not self.config.deletes:
            deleted = self._delete_segments_below_log_start()
            if deleted:
                self._on_log_start_moved()
            return deleted
        deleted = 0
        retention_ms = self.config.retention_ms
        retention_bytes = self.config.retention_bytes
        size = self.size_bytes
        while len(self.segments) > 1:
            oldest = self.segments[0]
            expired = retention_ms >= 0 and now_ms - oldest.max_timestamp_ms > retention_ms
            oversize = retention_bytes >= 0 and size - oldest.size_bytes >= retention_bytes
            below_start = self.segments[1].base_offset <= self.log_start_offset
            if not (expired or oversize or below_start):
                break
            self.segments.pop(0)
            size -= oldest.size_bytes
            self._delete_segment(oldest)
            deleted += 1
        if deleted:
            log.info(
                "%s: retention deleted %d segments, the log now starts at offset %d",
                self.directory.name, deleted, self.segments[0].base_offset,
            )
            self._segment_bases = [s.base_offset for s in self.segments]
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            self._on_log_start_moved()
        return deleted

    def holds_consecutive(self, segments: list[LogSegment]) -> bool:
        """Whether ``segments`` are still consecutive non-active segments of this log."""
        if not segments or segments[-1] is self.active_segment or self.closed:
            return False
        first = bisect_right(self._segment_bases, segments[0].base_offset) - 1
        return first >= 0 and self.segments[first : first + len(segments)] == segments

    def replace_segments(self, old: list[LogSegment], cleaned_base: int) -> LogSegment:
        """Swap ``old`` (consecutive, not the active one) for the segment whose files
        were written as ``<cleaned_base>.{log,index,timeindex}.cleaned``.

        Crash-safe in Kafka's way: .cleaned -> .swap (the new files are complete),
        old segments deleted, .swap -> final names. Opening a log completes or
        drops an interrupted swap (see _complete_interrupted_operations).
        """
        if not self.holds_consecutive(old):
            raise ValueError("replace_segments needs consecutive non-active segments")
        first = self.segments.index(old[0])
        next_base = self.segments[first + len(old)].base_offset
        stem = f"{cleaned_base:020d}"
        for suffix in _SEGMENT_SUFFIXES:
            cleaned = self.directory / f"{stem}{suffix}{CLEANED_SUFFIX}"
            if cleaned.exists():
                os.replace(cleaned, self.directory / f"{stem}{suffix}{SWAP_SUFFIX}")
        fsync_dir(self.directory)
        for segment in old:
            segment.delete()
        for suffix in _SEGMENT_SUFFIXES:
            swap = self.directory / f"{stem}{suffix}{SWAP_SUFFIX}"
            if swap.exists():
                os.replace(swap, self.directory / f"{stem}{suffix}")
        fsync_dir(self.directory)
        new = self._new_segment(cleaned_base)
        if new.indexes_missing:
            new.recover(verify_crc=False)
        else:
            new.load_after_clean_shutdown()
        new.next_offset = next_base
        self.segments[first : first + len(old)] = [new]
        self._segment_bases = [s.base_offset for s in self.segments]
        self._remove_stray_snapshots()  # those of the segments merged into this one
        return new

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

    def delete(self) -> None:
        self.closed = True
        for segment in self.segments:
            segment.delete()
        for leftover in self.directory.iterdir():
            leftover.unlink()
        self.directory.rmdir()


