"""All partition logs of a broker, across its ``log.dirs``.

Partition logs are registered at start-up and, after a clean shutdown, opened
on first use, so a broker with many partitions starts without touching each
one (after a crash they are all recovered at start-up); their ``.log``
files share one bounded :class:`FileHandlePool`. Each log directory keeps the
offset checkpoints (recovery points, log start offsets, high watermarks) and a
clean-shutdown marker: when the marker is present the logs' files are trusted
as they are; when it is missing every log is recovered from its recovery
point when it is opened.

A log directory whose write or fsync failed goes offline (``mark_offline``,
Kafka's LogDirFailureChannel and KIP-112): its logs are let go without another
write, its partitions stay registered but ``get`` answers None for them
(``is_offline`` tells that apart from a partition not hosted), new partitions
go to the other directories, and no checkpoint or clean-shutdown marker is
written there again. It comes back only with a restart, which recovers its
logs as after a crash.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from storage.checkpoint import (
    CLEAN_SHUTDOWN_MARKER,
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    read_offsets,
    write_atomically,
    write_offsets,
)
from storage.cleaner import CleanerError, clean_log_steps, run_steps
from storage.deferred_io import (
    DeferredDirectoryDeleter,
    DeferredFileDeleter,
    file_system_sync_available,
    is_deleted_dir_name,
    sync_file_systems,
)
from storage.handle_pool import DEFAULT_MAX_OPEN_FILES, FileHandlePool
from storage.log import LogConfig, PartitionLog, partition_dir_name
from storage.log_loader import make_new_log_files

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms
# Closing many logs: fsyncs of different files overlap well on one device.
CLOSE_THREADS = 8
CLOSE_CHUNK_LOGS = 512
# From this many open logs a clean shutdown syncs whole file systems rather
# than each log's files (fewer logs: their fsyncs are quick, and a syncfs
# would also wait for unrelated writes of other programs).
FILE_SYSTEM_SYNC_MIN_LOGS = 1000
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
TopicPartition = tuple[str, int]


@dataclass
class _Registered:
    log_dir: Path  # the entry of log.dirs holding it
    dir_name: str  # its directory's name in there
    config: LogConfig

    @property
    def path(self) -> Path:
        # Made when asked: registering many partitions builds no Path objects.
        return self.log_dir / self.dir_name


class LogManager:
    def __init__(
        self,
        log_dirs: list[Path],
        *,
        clock_ms: Callable[[], int] | None = None,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ):
        self.log_dirs = [Path(d) for d in log_dirs]
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.pool = FileHandlePool(max_open_files)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self._registered: dict[TopicPartition, _Registered] = {}
        self._clean_dirs: set[Path] = set()
        self._recovery_points: dict[TopicPartition, int] = {}
        self._log_start_offsets: dict[TopicPartition, int] = {}
        self._high_watermarks: dict[TopicPartition, int] = {}
        self._cleaner_offsets: dict[TopicPartition, int] = {}
        self._partitions_per_dir: dict[Path, int] = {}
        # Checkpoint files may be written from a worker thread (see
        # high_watermark_checkpoint) while the owner writes the others.
        self._checkpoint_lock = threading.Lock()
        # Writers run on worker threads and may finish out of order: each takes a
        # number, and one never overwrites what a later-taken one wrote.
        self._checkpoints_taken = 0
        self._offsets_written = 0  # by checkpoint_writer (all four files)
        self._high_watermarks_written = 0  # replication-offset-checkpoint, by either writer
        # Files of deleted segments, unlinked by delete_pending_files (a worker's job).
        self.file_deleter = DeferredFileDeleter()
        # Directories of deleted partitions, removed by delete_pending_dirs (a worker's job).
        self.dir_deleter = DeferredDirectoryDeleter()
        # While True (a start-up registering the logs found on disk, see
        # sync_recovered_logs), recovered logs are not fsynced one by one.
        self.defer_recovery_syncs = False
        self._recovered_unsynced: list[PartitionLog] = []
        # New partitions whose files are not made yet (see next_creations), in
        # order: registered, never opened.
        self._to_create: dict[TopicPartition, None] = {}
        # Directories whose write or fsync failed (mark_offline), until the next start.
        self.offline_dirs: set[Path] = set()
        # Called with (directory, OSError) when a checkpoint write fails there,
        # possibly from a worker thread: the owner marks the directory offline.
        self.on_dir_failure: Callable[[Path, OSError], None] | None = None
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
            marker = directory / CLEAN_SHUTDOWN_MARKER
            if marker.exists():
                self._clean_dirs.add(directory)
            try:
                self._recovery_points.update(read_offsets(directory / RECOVERY_POINT_CHECKPOINT))
                self._log_start_offsets.update(read_offsets(directory / LOG_START_OFFSET_CHECKPOINT))
                self._high_watermarks.update(read_offsets(directory / REPLICATION_OFFSET_CHECKPOINT))
                self._cleaner_offsets.update(read_offsets(directory / CLEANER_OFFSET_CHECKPOINT))
            except CheckpointError as exc:
                # Without trustworthy checkpoints every log is recovered in full.
                log.warning("ignoring a corrupt checkpoint: %s", exc)
                self._clean_dirs.discard(directory)
            # From here on a crash must look unclean: the marker goes until the
            # next clean shutdown writes it again.
            marker.unlink(missing_ok=True)

    @property
    def all_dirs_clean(self) -> bool:
        """Every log dir was shut down cleanly: registering opens nothing."""
        return all(directory in self._clean_dirs for directory in self.log_dirs)

    # ----------------------------------------------------------------- registry

    def existing_partitions(self) -> dict[TopicPartition, Path]:
        """Partition directories found on disk (topic, partition) -> path. The
        directories of partitions deleted before a crash, still on disk under a
        ``-delete`` name, go to the directory deleter."""
        found = {}
        for directory in self.log_dirs:
            for child in directory.iterdir():
                match = _PARTITION_DIR.match(child.name)
                if match and child.is_dir():
                    found[(match.group(1), int(match.group(2)))] = child
                elif is_deleted_dir_name(child.name) and child.is_dir():
                    self.dir_deleter.defer_renamed(child)
        return found

    def _choose_dir(self) -> Path:
        # Counts kept as partitions come and go: choosing stays O(dirs), not O(partitions).
        # Never an offline directory (Kafka places new logs on the online ones).
        online = self.online_dirs or self.log_dirs
        return min(online, key=lambda d: self._partitions_per_dir.get(d, 0))

    @property
    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def is_offline(self, topic: str, partition: int) -> bool:
        """Whether a registered partition's log lives in an offline directory."""
        registered = self._registered.get((topic, partition))
        return registered is not None and registered.log_dir in self.offline_dirs

    def mark_offline(self, directory: Path) -> list[TopicPartition]:
        """Take ``directory`` offline: its open logs are let go without another
        write (``PartitionLog.abandon``), and its partitions stay registered
        but are no longer served. Returns the partitions it held (none when it
        was offline already)."""
        directory = Path(directory)
        if directory not in self.log_dirs or directory in self.offline_dirs:
            return []
        self.offline_dirs.add(directory)
        held = [key for key, registered in self._registered.items() if registered.log_dir == directory]
        for key in held:
            self._to_create.pop(key, None)
            plog = self.logs.pop(key, None)
            if plog is not None:
                plog.abandon()
        return held

    def _dir_failed(self, directory: Path, exc: OSError) -> None:
        log.error("writing the offset checkpoints of %s failed: %s", directory, exc)
        if self.on_dir_failure is not None:
            self.on_dir_failure(directory, exc)

    def _count(self, log_dir: Path, delta: int) -> None:
        self._partitions_per_dir[log_dir] = self._partitions_per_dir.get(log_dir, 0) + delta

    def register(self, topic: str, partition: int, config: LogConfig, existing: Path | None = None) -> None:
        """Make a partition known; an existing log is opened on first use, a new one now."""
        key = (topic, partition)
        if key in self._registered:
            return
        if existing is None:
            # A new partition's directory and files are made when it is first used
            # (opened), not here: a topic of many partitions is registered in one
            # metadata change, and creating their files there would hold the
            # caller (the event loop) for a long time.
            log_dir = self.log_dirs[0] if len(self.log_dirs) == 1 else self._choose_dir()
            registered = self._registered[key] = _Registered(log_dir, partition_dir_name(topic, partition), config)
            # A deleted partition of the same name whose directory is not removed yet: out of the way first.
            if self.dir_deleter.has_waiting:
                self.dir_deleter.reclaim(registered.path)
            self._count(log_dir, +1)
            self._to_create[key] = None
        else:
            self._registered[key] = _Registered(existing.parent, existing.name, config)
            self._count(existing.parent, +1)
            if existing.parent not in self._clean_dirs:
                # After a crash every log is recovered before anything is
                # served, and before a later clean shutdown could vouch for it.
                self._open(key)

    def get_or_create(self, topic: str, partition: int, config: LogConfig, existing: Path | None = None) -> PartitionLog:
        self.register(topic, partition, config, existing)
        return self.get(topic, partition)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        key = (topic, partition)
        plog = self.logs.get(key)
        if plog is None and key in self._registered:
            if self.offline_dirs and self._registered[key].log_dir in self.offline_dirs:
                return None
            plog = self._open(key)
        return plog

    def _open(self, key: TopicPartition) -> PartitionLog:
        registered = self._registered[key]
        plog = PartitionLog(
            registered.path,
            registered.config,
            clock_ms=self._clock_ms,
            pool=self.pool,
            recovery_point=self._recovery_points.get(key),
            log_start_offset=self._log_start_offsets.get(key),
            clean_shutdown=registered.log_dir in self._clean_dirs,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
            sync_after_recovery=not self.defer_recovery_syncs,
        )
        if plog.recovered_unsynced:
            self._recovered_unsynced.append(plog)
        self._to_create.pop(key, None)
        plog.file_deleter = self.file_deleter
        self.logs[key] = plog
        return plog

    def begin_deferred_recovery_syncs(self) -> bool:
        """From now on recovered logs are not fsynced one by one, where the
        kernel can sync a whole file system and report a failed write-back
        (Linux 5.8 or later); returns whether that is so. The owner calls
        ``recovered_logs_sync`` (on a worker thread) and ``end_deferred_recovery_syncs``
        after registering the logs found on disk, before serving them."""
        self.defer_recovery_syncs = file_system_sync_available()
        return self.defer_recovery_syncs

    def recovered_logs_sync(self) -> Callable[[], None]:
        """One syncfs per file system for the logs recovered since
        ``begin_deferred_recovery_syncs``, as a function for a worker thread;
        raises OSError on a failed write-back (nothing then counts as synced)."""
        directories = self.online_dirs
        return lambda: sync_file_systems(directories) if self._recovered_unsynced else None

    def end_deferred_recovery_syncs(self, synced: bool) -> int:
        """After ``recovered_logs_sync`` ran (``synced``): the recovered logs' data
        is durable, so their recovery points move to their ends, as a recovery's
        own fsync would have moved them. Logs opened from now on fsync their own
        recovery. Returns how many logs were recovered without their own fsync."""
        self.defer_recovery_syncs = False
        recovered, self._recovered_unsynced = self._recovered_unsynced, []
        for plog in recovered:
            plog.recovered_unsynced = False
            if synced and not plog.closed:
                plog.recovery_point = max(plog.recovery_point, plog.log_end_offset)
        return len(recovered)

    @property
    def open_count(self) -> int:
        """Partition logs open (the rest of the registered ones are opened on first use)."""
        return len(self.logs)

    @property
    def creations_pending(self) -> int:
        return len(self._to_create)

    def create_pending_steps(self) -> Iterator[int]:
        """Make the files of new partitions not used yet, one partition a step,
        so that a caller can pause between them: a topic of many partitions has
        its directories soon after its creation (as in Kafka), without holding
        the caller for the whole of it."""
        while self._to_create:
            key = next(iter(self._to_create))
            self.get(*key)  # opening a new log makes its directory and files
            self._to_create.pop(key, None)
            yield 1

    def next_creations(self, limit: int) -> list[tuple[TopicPartition, Path, int]]:
        """Up to ``limit`` new partitions whose files are not made yet, as
        (key, directory, index bytes) for ``make_log_files`` on a worker thread."""
        batch = []
        for key in self._to_create:
            registered = self._registered[key]
            batch.append((key, registered.path, registered.config.segment_index_bytes))
            if len(batch) >= limit:
                break
        return batch

    @staticmethod
    def make_log_files(batch: list[tuple[TopicPartition, Path, int]]) -> None:
        """The file work of opening new logs (see ``make_new_log_files``), from a
        worker thread: only files, no state of this manager."""
        for _, directory, index_bytes in batch:
            make_new_log_files(directory, index_bytes)

    def open_created_steps(self, batch: list[tuple[TopicPartition, Path, int]]) -> Iterator[int]:
        """After ``make_log_files``, open those logs, one a step (opening finds
        their files made). A partition deleted while its files were made may
        have got a directory again after the directory deleter took the old
        one: it goes to the deleter once more."""
        for key, directory, _ in batch:
            registered = self._registered.get(key)
            if registered is None or registered.path != directory:
                self.dir_deleter.defer(directory)
                continue
            if key in self._to_create:
                self.get(*key)
                self._to_create.pop(key, None)
                yield 1

    def checkpointed_high_watermark(self, topic: str, partition: int) -> int | None:
        """The high watermark ``replication-offset-checkpoint`` holds for a partition
        (as of the last checkpoint), or None when it has none."""
        return self._high_watermarks.get((topic, partition))

    def set_config(self, topic: str, partition: int, config: LogConfig) -> None:
        key = (topic, partition)
        if key in self._registered:
            self._registered[key].config = config
        if key in self.logs:
            self.logs[key].config = config

    def partitions(self) -> list[TopicPartition]:
        return list(self._registered)

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        """The entry of ``log.dirs`` holding a registered partition, or None."""
        registered = self._registered.get((topic, partition))
        return None if registered is None else registered.log_dir

    def size_bytes(self, topic: str, partition: int) -> int | None:
        """Bytes in a registered partition's segment files (Kafka's ``log.size``), or None.

        An open log answers from memory; a log not opened yet is measured by
        stat-ing its ``.log`` files, so describing many partitions opens none."""
        key = (topic, partition)
        plog = self.logs.get(key)
        if plog is not None:
            return plog.size_bytes
        registered = self._registered.get(key)
        if registered is None:
            return None
        total = 0
        try:
            with os.scandir(registered.path) as it:
                entries = list(it)
        except FileNotFoundError:
            return 0
        for entry in entries:
            if entry.name.endswith(".log"):
                try:
                    total += entry.stat().st_size
                except FileNotFoundError:  # deleted since the listing
                    pass
        return total

    def opened_logs(self) -> Iterator[tuple[TopicPartition, PartitionLog]]:
        return iter(list(self.logs.items()))

    def all_logs(self) -> Iterator[tuple[TopicPartition, PartitionLog]]:
        """Every registered log that has files, opening those not opened yet
        (a new partition never used has nothing to retain, clean or flush)."""
        for key in list(self._registered):
            if key in self._to_create:  # no files yet
                continue
            plog = self.get(*key)
            if plog is not None:
                yield key, plog

    def delete(self, topic: str, partition: int, path: Path | None = None) -> None:
        key = (topic, partition)
        self._to_create.pop(key, None)
        plog = self.logs.pop(key, None)
        registered = self._registered.pop(key, None)
        if plog is not None:
            for segment in plog.segments:
                self.pool.close(segment.log_path)
            path = plog.directory
        elif registered is not None:
            path = registered.path
        if registered is not None:
            self._count(registered.log_dir, -1)
        for table in (self._recovery_points, self._log_start_offsets, self._high_watermarks, self._cleaner_offsets):
            table.pop(key, None)
        if path is not None:
            # Removed by a worker (delete_pending_dirs): a topic of 20,000
            # partitions held the event loop for seconds when this was done here.
            self.dir_deleter.defer(path)
            self.file_deleter.forget(path)

    # ----------------------------------------------------------------- periodic work

    def remove_expired_producers(self, now_ms: int) -> int:
        """producer.id.expiration.ms over every open log; returns the producers dropped.
        Logs not opened yet leave expired producers out when they load their snapshot."""
        return sum(
            plog.remove_expired_producers(now_ms, self.producer_id_expiration_ms) for _, plog in self.opened_logs()
        )

    def due_for_flush_by_time(self, now_ms: int) -> list[PartitionLog]:
        """The open logs whose flush.ms has passed, for an owner that syncs them elsewhere."""
        return [plog for _, plog in self.opened_logs() if plog.flush_due_by_time(now_ms)]

    def apply_retention(self, now_ms: int) -> int:
        return sum(self.apply_retention_steps(now_ms))

    def apply_retention_steps(self, now_ms: int) -> Iterator[int]:
        """Retention one log at a time: yields the segments each log deleted, so a
        caller can pause between logs (a broker may have 100,000). The deleted
        segments' files are left to delete_pending_files."""
        for _, plog in self.all_logs():
            yield plog.apply_retention(now_ms)

    def delete_pending_dirs(self) -> int:
        """Remove the directories of deleted partitions (from a worker thread);
        returns how many."""
        return self.dir_deleter.run()

    def delete_pending_files(self) -> int:
        """Unlink the files of segments deleted so far (from a worker thread:
        this is the slow part of retention); returns how many."""
        return self.file_deleter.run()

    def clean_compacted(self, now_ms: int) -> int:
        """One log cleaner pass over every compacted log; returns the logs cleaned.

        A log whose segments fail their checks is skipped (and logged): the
        cleaner never rewrites what it cannot read."""
        return run_steps(self.clean_compacted_steps(now_ms))

    def clean_compacted_steps(self, now_ms: int):
        """``clean_compacted`` as a generator that yields after every batch the
        cleaner reads (see ``clean_log_steps``), so that an event loop can serve
        requests between steps; returns the logs cleaned."""
        cleaned = 0
        # From the registry: a log that does not compact is not opened for this.
        compacted = [key for key, registered in self._registered.items() if registered.config.compacts]
        for key in compacted:
            if key in self._to_create:  # no files yet
                continue
            plog = self.get(*key)
            if plog is None or plog.closed:
                continue
            try:
                result = yield from clean_log_steps(
                    plog,
                    now_ms,
                    first_dirty_offset=self._cleaner_offsets.get(key),
                    min_cleanable_ratio=plog.config.min_cleanable_ratio,
                )
            except CleanerError as exc:
                log.error("log cleaner skipped %s-%d: %s", key[0], key[1], exc)
                continue
            if self.logs.get(key) is plog:  # not deleted (or recreated) meanwhile
                self._cleaner_offsets[key] = result.first_dirty_offset
            if result.cleaned:
                cleaned += 1
                log.info(
                    "cleaned %s-%d: %d -> %d bytes, %d records removed",
                    key[0], key[1], result.bytes_before, result.bytes_after, result.records_removed,
                )
            yield
        return cleaned

    def checkpoint(self) -> None:
        """Write the offset checkpoints of every log directory."""
        for _ in self.take_checkpoint_steps():
            pass
        self.checkpoint_writer()()

    def take_checkpoint_steps(self) -> Iterator[int]:
        """Take the open logs' offsets into the checkpoint tables, a thousand
        logs a step, so that a caller can pause between steps (100,000 logs
        take some 100 ms). Each log's offsets are taken together; a log's may
        be a little older than another's, as they would be at any moment."""
        for count, (key, plog) in enumerate(self.opened_logs(), 1):
            self._recovery_points[key] = plog.recovery_point
            self._log_start_offsets[key] = plog.log_start_offset
            self._high_watermarks[key] = plog.high_watermark
            if count % 1000 == 0:
                yield 1000

    def checkpoint_writer(self) -> Callable[[], None]:
        """The writing of every log directory's offset checkpoints from the
        tables as they are now, as a function that may run on another thread:
        sorting, formatting and syncing 100,000 lines a file held the event
        loop for about a second. Only copies are taken here (C-level, quick);
        a partition deleted meanwhile may still be written once, which its
        next start ignores (no directory) as it ignores any stale line."""
        registered = dict(self._registered)
        tables = (
            (RECOVERY_POINT_CHECKPOINT, dict(self._recovery_points)),
            (LOG_START_OFFSET_CHECKPOINT, dict(self._log_start_offsets)),
            (REPLICATION_OFFSET_CHECKPOINT, dict(self._high_watermarks)),
            (CLEANER_OFFSET_CHECKPOINT, dict(self._cleaner_offsets)),
        )

        self._checkpoints_taken += 1
        taken = self._checkpoints_taken

        def write() -> None:
            with self._checkpoint_lock:
                if self._offsets_written > taken:
                    return
                # A partition deleted since the take (and maybe made again under
                # its name) is left out: its next start must not find the old
                # log's offsets, a recovery point above the new log's end above all.
                # (One dict lookup at a time: safe beside the owner's changes.)
                current = self._registered
                for directory in self.online_dirs:
                    keys = [k for k, r in registered.items() if r.log_dir == directory and current.get(k) is r]
                    try:
                        for name, table in tables:
                            if name != REPLICATION_OFFSET_CHECKPOINT or self._high_watermarks_written < taken:
                                write_offsets(directory / name, {k: table[k] for k in keys if k in table})
                    except OSError as exc:
                        self._dir_failed(directory, exc)
                self._offsets_written = taken
                self._high_watermarks_written = max(self._high_watermarks_written, taken)

        return write

    def take_high_watermark_steps(self, changed: list[bool]) -> Iterator[int]:
        """Take the high watermarks of the open logs into the checkpoint table, a
        thousand logs a step (a caller may pause between steps: every 5 s, the
        100,000 logs of a big broker held the event loop for 0.1 to 2 s);
        ``changed`` gets True when any moved."""
        table = self._high_watermarks
        moved = False
        for count, (key, plog) in enumerate(self.opened_logs(), 1):
            mark = plog.high_watermark
            if table.get(key) != mark:
                table[key] = mark
                moved = True
            if count % 1000 == 0:
                yield 1000
        changed.append(moved)

    def high_watermark_checkpoint(self) -> Callable[[], None] | None:
        """Take the high watermarks of the open logs now; return the writing of
        ``replication-offset-checkpoint`` as a function that may run on another
        thread (its fsyncs must not stall the caller), or None when nothing
        changed since the last checkpoint."""
        changed: list[bool] = []
        for _ in self.take_high_watermark_steps(changed):
            pass
        return self.high_watermark_writer() if changed[-1] else None

    def high_watermark_writer(self) -> Callable[[], None]:
        """The writing of ``replication-offset-checkpoint`` from the table as it is
        now (see :meth:`take_high_watermark_steps`), as a function that may run
        on another thread."""
        table = self._high_watermarks
        # Copies (C-level, quick); which key goes to which directory is worked out on the worker.
        registered = dict(self._registered)
        table = dict(table)

        self._checkpoints_taken += 1
        taken = self._checkpoints_taken

        def write() -> None:
            with self._checkpoint_lock:
                if self._high_watermarks_written > taken:
                    return
                for directory in self.online_dirs:
                    keys = [k for k, r in registered.items() if r.log_dir == directory]
                    try:
                        write_offsets(directory / REPLICATION_OFFSET_CHECKPOINT, {k: table[k] for k in keys if k in table})
                    except OSError as exc:
                        self._dir_failed(directory, exc)
                self._high_watermarks_written = taken

        return write

    def close(self) -> None:
        """Clean shutdown: flush, checkpoint, close, then mark every directory clean.

        The fsyncs and snapshot writes of the open logs run on CLOSE_THREADS
        worker threads, CLOSE_CHUNK_LOGS logs at a time: one after the other,
        100,000 partitions took minutes to stop, and a chunk bounds the
        descriptors the workers hold. With FILE_SYSTEM_SYNC_MIN_LOGS logs or
        more, and a kernel whose syncfs reports write-back errors, the workers
        only write and one syncfs per file system replaces the fsyncs. A failed
        sync raises before any directory is marked clean: the next start then
        recovers the logs."""
        self.dir_deleter.stop()
        self.file_deleter.run()
        opened = [plog for _, plog in self.opened_logs()]
        # Where the kernel can sync a whole file system and report a failed
        # write-back, the logs only write (no fsync each) and one syncfs per
        # file system makes it all durable before any log counts as flushed.
        whole_file_system = file_system_sync_available() and len(opened) >= FILE_SYSTEM_SYNC_MIN_LOGS
        finishes = []
        with ThreadPoolExecutor(max_workers=CLOSE_THREADS, thread_name_prefix="log close") as workers:
            for start in range(0, len(opened), CLOSE_CHUNK_LOGS):
                parts = [plog.close_in_parts(fsync=not whole_file_system) for plog in opened[start : start + CLOSE_CHUNK_LOGS]]
                for done in workers.map(lambda sync: sync(), [sync for sync, _ in parts if sync is not None]):
                    pass  # map re-raises a worker's error here
                if whole_file_system:
                    finishes.extend(finish for _, finish in parts)
                else:
                    for _, finish in parts:
                        finish()
        if whole_file_system:
            sync_file_systems(self.online_dirs)
            for finish in finishes:
                finish()
        self.checkpoint()
        self.logs.clear()
        self.pool.close_all()
        # An offline directory is not vouched for: its next start recovers it.
        for directory in self.online_dirs:
            write_atomically(directory / CLEAN_SHUTDOWN_MARKER, b"")
