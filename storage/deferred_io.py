"""File work a log's owner runs later or on another thread: deferred unlinks,
the removal of deleted partitions' directories and the fsyncs of a flush.

They exist so that the event loop does not wait for the file system: unlinking
costs tens of microseconds a file (a retention pass may delete thousands of
segments, a topic deletion thousands of directories) and an fsync milliseconds.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import re
import shutil
import threading
import uuid
from pathlib import Path

log = logging.getLogger(__name__)


class PendingFlush:
    """One deferred flush of a log: taken by ``PartitionLog.begin_flush`` on the
    owner's thread, made durable by ``sync`` on a worker thread (the fsyncs, which
    can take milliseconds each), finished by ``PartitionLog.end_flush``."""

    __slots__ = ("end_offset", "index_paths", "log_fds")

    def __init__(self, log_fds: list[int], index_paths: list[Path], end_offset: int):
        self.log_fds = log_fds  # duplicates: the handle pool may close its own meanwhile
        self.index_paths = index_paths
        self.end_offset = end_offset

    def sync(self) -> None:
        try:
            for fd in self.log_fds:
                os.fsync(fd)
            for path in self.index_paths:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:  # its segment was deleted meanwhile
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        finally:
            self.close()

    def close(self) -> None:
        fds, self.log_fds = self.log_fds, []
        for fd in fds:
            os.close(fd)


def _load_syncfs():
    """libc's syncfs where it reports write-back errors (Linux 5.8 and later;
    before, a failed write-back went unreported), else None."""
    try:
        release = os.uname().release
        major, minor = (int(part) for part in release.split(".")[:2])
    except (AttributeError, ValueError):
        return None
    if os.uname().sysname != "Linux" or (major, minor) < (5, 8):
        return None
    try:
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    syncfs.argtypes, syncfs.restype = [ctypes.c_int], ctypes.c_int
    return syncfs


_syncfs = _load_syncfs()


def file_system_sync_available() -> bool:
    return _syncfs is not None


def sync_file_systems(directories: list[Path]) -> None:
    """Make everything written to the file systems holding ``directories``
    durable: one syncfs per file system instead of an fsync per file (a clean
    shutdown of 100,000 logs would otherwise make some 400,000 fsyncs). Raises
    OSError when the kernel reports a failed write-back."""
    if _syncfs is None:
        raise OSError(errno.ENOSYS, "syncfs with write-back error reports is not available")
    seen: set[int] = set()
    for directory in directories:
        fd = os.open(directory, os.O_RDONLY)
        try:
            device = os.fstat(fd).st_dev
            if device in seen:
                continue
            seen.add(device)
            if _syncfs(fd) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"syncfs of {directory}: {os.strerror(code)}")
        finally:
            os.close(fd)


class DeferredFileDeleter:
    """Unlinks the files of deleted segments and snapshots later, on a worker
    thread, for all the logs of an owner: unlinking costs tens of microseconds a
    file, and a retention pass may delete thousands of segments.

    A file waiting here may be needed again under the same name (a truncation
    below a deleted segment's base, then a new segment there): ``reclaim``
    unlinks such files at once, and the worker skips any file no longer waiting,
    under one lock, so it never removes a file made after the deletion."""

    def __init__(self):
        self._lock = threading.Lock()
        self._waiting: dict[Path, set[str]] = {}  # directory -> names of files to unlink

    def defer(self, directory: Path, names: list[str]) -> None:
        with self._lock:
            waiting = self._waiting.get(directory)
            if waiting is None:
                waiting = self._waiting[directory] = set()
            waiting.update(names)

    def reclaim(self, directory: Path, stem: str) -> None:
        """Unlink now the waiting files of ``directory`` whose names start with ``stem``."""
        if directory not in self._waiting:  # a dict lookup: the common case costs nothing more
            return
        with self._lock:
            names = self._waiting.get(directory, set())
            for name in [n for n in names if n.startswith(stem + ".")]:
                (directory / name).unlink(missing_ok=True)
                names.discard(name)
            if not names:
                self._waiting.pop(directory, None)

    def forget(self, directory: Path) -> None:
        """A deleted log's directory is gone with its files."""
        with self._lock:
            self._waiting.pop(directory, None)

    @property
    def waiting(self) -> int:
        return sum(len(names) for names in self._waiting.values())

    def run(self) -> int:
        """Unlink every waiting file (call from a worker thread); returns how many."""
        done = 0
        while True:
            with self._lock:
                if not self._waiting:
                    return done
                directory = next(iter(self._waiting))
                names = self._waiting[directory]
                if not names:
                    del self._waiting[directory]
                    continue
                # One file per lock hold: reclaim, on the event loop, waits for one unlink at most.
                name = names.pop()
                (directory / name).unlink(missing_ok=True)
                done += 1


# A deleted partition's directory is renamed to ``<name>.<32 hex digits>-delete``
# (Kafka's suffix) before it is removed; no partition directory ends so (theirs
# end in ``-<partition>``), so a start-up never takes one for a log.
DELETED_DIR_SUFFIX = "-delete"
_DELETED_DIR = re.compile(r"^.+\.[0-9a-f]{32}" + re.escape(DELETED_DIR_SUFFIX) + "$")


def is_deleted_dir_name(name: str) -> bool:
    return _DELETED_DIR.match(name) is not None


class DeferredDirectoryDeleter:
    """Removes the directories of deleted partitions later, on a worker thread:
    removing one costs a few syscalls a file (a partition holds at least four
    files), and deleting a topic of 20,000 partitions did it 20,000 times on the
    event loop (12 s on this project's test machine).

    The worker first renames a directory to a ``-delete`` name, then removes
    that. A partition of the same name may come back before the worker got to
    it (the topic is created again): ``reclaim`` renames the old directory out of
    the way at once, and the worker renames only what is still waiting, under
    one lock, so it never touches a directory made after the deletion. A crash
    leaves either the old name (the image no longer has the partition: start-up
    deletes it again) or a ``-delete`` name (start-up hands it back here)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._waiting: dict[Path, None] = {}  # directories still under their partition's name, in order
        self._renamed: list[Path] = []  # renamed, to be removed
        self._stopped = False

    def defer(self, directory: Path) -> None:
        with self._lock:
            self._waiting[directory] = None

    def defer_renamed(self, directory: Path) -> None:
        """A ``-delete`` directory left by an earlier run."""
        with self._lock:
            self._renamed.append(directory)

    def reclaim(self, directory: Path) -> None:
        """``directory`` is about to be made again: if its old self is still waiting,
        rename that out of the way now (one rename, on the caller's thread)."""
        if directory not in self._waiting:  # a dict lookup: the common case costs nothing more
            return
        with self._lock:
            if self._waiting.pop(directory, 0) is None:
                self._rename(directory)

    @property
    def waiting(self) -> int:
        return len(self._waiting) + len(self._renamed)

    @property
    def has_waiting(self) -> bool:
        """Some directory still waits under its partition's name (one test, for hot callers)."""
        return bool(self._waiting)

    def stop(self) -> None:
        """A running ``run`` returns after its current directory: a shutdown does
        not wait for them all (what is left is found again at the next start)."""
        self._stopped = True

    def _rename(self, directory: Path) -> None:
        # Under the lock. A directory that is gone (never made: a partition
        # deleted before its files were) needs nothing.
        target = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETED_DIR_SUFFIX}")
        try:
            os.rename(directory, target)
        except FileNotFoundError:
            return
        self._renamed.append(target)

    def run(self) -> int:
        """Remove every waiting directory (call from a worker thread); returns how many.
        One rename per lock hold: ``reclaim`` on the event loop waits for one at most."""
        done = 0
        while True:
            with self._lock:
                if self._stopped:
                    return done
                if self._waiting:
                    directory = next(iter(self._waiting))
                    del self._waiting[directory]
                    self._rename(directory)
                    continue
                if not self._renamed:
                    return done
                target = self._renamed.pop()
            try:
                shutil.rmtree(target)
            except OSError as exc:  # left for the next start-up, which hands it back here
                log.warning("cannot remove the directory of a deleted partition: %s", exc)
            done += 1
