"""File work a log's owner runs later or on another thread: deferred unlinks and
the fsyncs of a flush.

Both exist so that the event loop does not wait for the file system: unlinking
costs tens of microseconds a file (a retention pass may delete thousands of
segments) and an fsync milliseconds.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from pathlib import Path


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
