"""An exclusive lock on each log directory, as Kafka's ``.lock`` file.

Two processes on one log dir (a port typo, a service started twice) would
append to the same segments and overwrite each other's checkpoints. The
first process to start holds an ``flock`` on ``<dir>/.lock`` until it exits,
and a second one is refused before it reads anything. The kernel drops the
lock with the process, so a kill -9 leaves nothing to clean up. The file
holds the holder's pid, for the refusal message only: the lock, not the
file, is what counts.

Each directory is also checked for being writable before anything is read
from it: a read-only mount or a directory this user may not write to would
otherwise only show at the first append, long after start-up said "started".
The refusals are one line each, naming the directory and what to do.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCK_FILE_NAME = ".lock"
# Made and removed at once to learn whether files can be created in a log dir:
# an existing .lock can still be opened where no new file may be made
# (an immutable directory).
WRITE_PROBE_PREFIX = ".write-probe-"
_DIR_KEYS = "log.dirs / metadata.log.dir"


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
    def acquire(cls, directory: Path) -> DirLock:
        """Lock ``directory`` (made if missing), or raise LogDirLocked at once;
        LogDirUnusable when it cannot be made or written."""
        directory = Path(directory)
        path = directory / LOCK_FILE_NAME
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LogDirUnusable(unusable_reason(directory, exc, making=True)) from None
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LogDirUnusable(unusable_reason(directory, exc)) from None
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
        lock = cls(directory, fd)
        try:
            # Probed only with the lock held: the holder's pid is not overwritten by a refused process.
            _probe_writable(directory)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            lock.release()
            raise LogDirUnusable(unusable_reason(directory, exc)) from None
        return lock

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        # A broker object dropped without stop() (a failed start in a test
        # process) must not keep its directories locked for the process's life.
        self.release()


def _probe_writable(directory: Path) -> None:
    path = directory / f"{WRITE_PROBE_PREFIX}{os.getpid()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.close(fd)
    os.unlink(path)


def _file_in_the_way(directory: Path) -> Path | None:
    """The nearest of ``directory`` and its ancestors that exists, when it is not a directory."""
    for candidate in (directory, *directory.parents):
        if candidate.is_symlink() or candidate.exists():
            return None if candidate.is_dir() else candidate
    return None


def unusable_reason(directory: Path, exc: OSError, *, making: bool = False) -> str:
    """One line: what is wrong with a log dir, and what to do about it."""
    code = exc.errno
    if code == errno.EROFS:
        return (
            f"log dir {directory} is on a read-only file system; remount it read-write "
            f"or point {_DIR_KEYS} at a writable directory"
        )
    if code in (errno.EACCES, errno.EPERM):
        what = "cannot be made" if making else "is not writable"
        return (
            f"log dir {directory} {what}: {exc.strerror} ({exc.filename or directory}) for user id {os.geteuid()}; "
            f"give this user write access (chown/chmod; chattr -i if it is immutable) or point {_DIR_KEYS} elsewhere"
        )
    if code in (errno.ENOTDIR, errno.EEXIST):
        in_the_way = _file_in_the_way(directory)
        if in_the_way is not None:
            return (
                f"log dir {directory} cannot be made: {in_the_way} is a file, not a directory; "
                f"point {_DIR_KEYS} at a directory path"
            )
    if code == errno.ENOSPC:
        return f"log dir {directory} has no space left on its device; free some or point {_DIR_KEYS} elsewhere"
    what = "cannot be made" if making else "cannot be used"
    return (
        f"log dir {directory} {what}: {exc.strerror or exc} ({exc.filename or directory}); "
        f"check {_DIR_KEYS} and the directory's permissions"
    )


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
