"""An exclusive lock on each log directory, as Kafka's ``.lock`` file.

Two processes on one log dir (a port typo, a service started twice) would
append to the same segments and overwrite each other's checkpoints. The
first process to start holds an ``flock`` on ``<dir>/.lock`` until it exits,
and a second one is refused before it reads anything. The kernel drops the
lock with the process, so a kill -9 leaves nothing to clean up. The file
holds the holder's pid, for the refusal message only: the lock, not the
file, is what counts.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCK_FILE_NAME = ".lock"


class LogDirLocked(RuntimeError):
    """Another process holds the lock of a log directory."""


class LogDirUnusable(RuntimeError):
    """A log directory cannot be made or written (a file in the way, no
    permission, a read-only file system)."""


class DirLock:
    def __init__(self, directory: Path, fd: int):
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path) -> "DirLock":
        """Lock ``directory`` (made if missing), or raise LogDirLocked at once."""
        directory = Path(directory)
        path = directory / LOCK_FILE_NAME
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LogDirUnusable(
                f"log dir {directory} cannot be used: {exc.strerror or exc} ({exc.filename or path}); "
                "check log.dirs / metadata.log.dir and the directory's permissions"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            who = f"process {holder}" if holder else "another process"
            raise LogDirLocked(
                f"log dir {directory} is in use by {who} ({path} is locked): "
                "another pybroker runs on this data; stop it or give this one other log.dirs"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(directory, fd)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        # A broker object dropped without stop() (a failed start in a test
        # process) must not keep its directories locked for the process's life.
        self.release()


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""


def lock_dirs(directories) -> list[DirLock]:
    """Lock every directory (each once), all or none."""
    locks: list[DirLock] = []
    try:
        for directory in dict.fromkeys(Path(d) for d in directories):
            locks.append(DirLock.acquire(directory))
    except BaseException:
        for lock in locks:
            lock.release()
        raise
    return locks
