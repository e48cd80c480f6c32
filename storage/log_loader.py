"""Opening a partition's log directory, and the producer snapshots that make it fast.

Kafka's LogLoader: what a crash left half done is finished or undone
(``.cleaned``, ``.swap``, ``.deleted`` files), the segments are listed, and
after an unclean shutdown every segment from the one holding the recovery
point is re-read with CRC checks and cut at the first bad batch, its indexes
and ``.txnindex`` rebuilt. After a clean shutdown only the active segment's
tail is read, and missing indexes are rebuilt.

The producer state (idempotence, open transactions) is rebuilt from the
newest valid producer snapshot (``<offset>.snapshot``, storage.producer_snapshot)
plus the batches after it. Snapshots are written when a segment rolls (at
its successor's base offset) and when the log closes (at the log end), and
are dropped with the batches they describe, so this file also keeps the set
of snapshot files while the log is open.

Separate from storage.log because opening runs once per log and reads files
in bulk, while storage.log serves appends and reads. It is a base class of
PartitionLog rather than an object of its own: opening builds exactly the
log's state (its segment list, recovery point and producer state), and a
truncation rebuilds the producer state the same way. The attributes it uses
are the log's, listed below.
"""

from __future__ import annotations

import logging
import os
import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable
from pathlib import Path

from protocol.records import iter_batches
from storage.checkpoint import fsync_dir
from storage.deferred_io import DeferredFileDeleter
from storage.producer_snapshot import (
    CorruptSnapshotError,
    read_snapshot,
    snapshot_file_name,
    snapshot_offset,
    write_snapshot,
)
from storage.index import OffsetIndex, TimeIndex
from storage.producer_state import ProducerStateManager
from storage.segment import LogSegment, segment_file_stem
from storage.txn_index import TXN_INDEX_SUFFIX, CorruptTxnIndexError

log = logging.getLogger(__name__)

# An empty producer state over fewer bytes of batches than this past the
# newest snapshot is replayed when the log is opened rather than snapshotted
# at a clean shutdown or after such a replay: reading 64 KiB of batch headers
# costs about what creating a snapshot file does.
SNAPSHOT_TAIL_MIN_BYTES = 64 << 10
# Suffixes of files left by an interrupted segment replacement or deletion.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", TXN_INDEX_SUFFIX)


def make_new_log_files(directory: Path, index_bytes: int) -> bool:
    """Make the directory and files a new log's first open makes (an empty
    ``.log`` at offset 0 and its two preallocated indexes), so that a worker
    thread can take this file work, slow on a busy disk, off the log's owner;
    the open then finds a new log (see ``_open_segments``) and only opens them.

    Only where the directory did not exist (returns whether it made it): what
    is there already belongs to a log opened meanwhile. Nothing is truncated or
    written, so an owner opening the same new log at the same time makes the
    same files with no harm."""
    try:
        directory.mkdir(parents=True)
    except FileExistsError:
        return False
    stem = segment_file_stem(0)
    os.close(os.open(directory / f"{stem}.log", os.O_WRONLY | os.O_CREAT, 0o644))
    OffsetIndex(directory / f"{stem}.index", 0, index_bytes).preallocate()
    TimeIndex(directory / f"{stem}.timeindex", 0, index_bytes).preallocate()
    return True


class LogLoader:
    """The opening half of :class:`storage.log.PartitionLog` (see the module
    docstring): ``_open_segments`` fills in a log being constructed, and the
    producer snapshot methods serve it while it is open."""

    # The log's attributes this class reads and sets (PartitionLog defines them).
    directory: Path
    segments: list[LogSegment]
    _segment_bases: list[int]
    _snapshots: list[int]  # offsets of this log's .snapshot files, ascending
    producer_state: ProducerStateManager
    producer_id_expiration_ms: int | None
    log_start_offset: int
    recovery_point: int
    sync_after_recovery: bool
    recovered_unsynced: bool
    file_deleter: DeferredFileDeleter | None
    _clock_ms: Callable[[], int]
    log_end_offset: int
    _new_segment: Callable[..., LogSegment]
    _new_empty_segment: Callable[[int], LogSegment]
    _segment_for: Callable[[int], int]
    _track_batch: Callable[..., None]
    flush: Callable[..., None]

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
                for suffix in SEGMENT_SUFFIXES:
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
        if not self._snapshots and not txn_indexes and (not sizes or sizes == {0: 0}):
            # A new log (or one whose every file is gone, or one with only the
            # empty first segment that make_new_log_files or an earlier open
            # made): nothing to recover or load, so none of the recovery's file
            # rewrites, which would make opening a new partition several times as slow.
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
        # An fsync each (milliseconds on a busy disk) made most of a start
        # after a crash with 100,000 logs; an owner recovering many logs may
        # instead sync the file systems once after them all (the recovery
        # point stays where it was until then).
        self.flush(fsync=self.sync_after_recovery)
        self.recovered_unsynced = not self.sync_after_recovery
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

