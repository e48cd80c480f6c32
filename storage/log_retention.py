"""Removing whole segments from a partition's log: retention, DeleteRecords, the cleaner's swap.

cleanup.policy=delete drops the oldest segments past retention.ms or beyond
retention.bytes; DeleteRecords moves the log start offset and drops the
segments wholly below it; the log cleaner's output replaces the segments it
compacted, crash-safe (``.cleaned`` -> ``.swap`` -> final names, completed or
undone by storage.log_loader when a crash interrupts it). Producers whose
last batch is gone, and the producer snapshots below the first segment, go
with them; idle producers expire after producer.id.expiration.ms.

Separate from storage.log because none of it is on the append or read path:
it runs from the broker's periodic tasks, the admin API and the cleaner. Like
storage.log_loader it is a base class of PartitionLog, acting on the log's
segment list, log start offset and producer state.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from typing import Any

from protocol.errors import ErrorCode
from storage.append_checks import AppendError
from storage.checkpoint import fsync_dir
from storage.log_loader import CLEANED_SUFFIX, SEGMENT_SUFFIXES, SWAP_SUFFIX, LogLoader
from storage.segment import LogSegment

log = logging.getLogger(__name__)


class LogRetention(LogLoader):
    """The segment-removing part of :class:`storage.log.PartitionLog` (see the
    module docstring); it uses the log's attributes listed by LogLoader and these."""

    config: Any  # storage.log.LogConfig, which imports this module
    high_watermark: int
    active_segment: LogSegment
    size_bytes: int
    closed: bool

    def _on_log_start_moved(self) -> None:
        """Retention or DeleteRecords moved the log start (and maybe deleted
        segments): producers whose last batch is gone are dropped, and so are the
        snapshots below the first remaining segment."""
        self.producer_state.remove_below(self.log_start_offset)
        self._delete_snapshots_below(self.segments[0].base_offset)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """producer.id.expiration.ms: drop producers idle that long; returns how many."""
        return len(self.producer_state.remove_expired(now_ms, expiration_ms))

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
        for suffix in SEGMENT_SUFFIXES:
            cleaned = self.directory / f"{stem}{suffix}{CLEANED_SUFFIX}"
            if cleaned.exists():
                os.replace(cleaned, self.directory / f"{stem}{suffix}{SWAP_SUFFIX}")
        fsync_dir(self.directory)
        for segment in old:
            segment.delete()
        for suffix in SEGMENT_SUFFIXES:
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
