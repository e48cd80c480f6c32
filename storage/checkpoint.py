"""Checkpoint files in Kafka's text formats, written atomically.

Offset checkpoints (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint``), one per
log directory::

    0                 <- format version
    2                 <- number of entries
    orders 0 1234     <- topic partition offset
    orders 1 99

``leader-epoch-checkpoint``, one per partition directory, has the same header
and ``epoch start_offset`` entries.

Every write goes to a temporary file that is fsynced, renamed over the old
file and followed by an fsync of the directory, so a crash leaves either the
old or the new checkpoint, never a torn one.
"""

from __future__ import annotations

import os
from pathlib import Path

CHECKPOINT_VERSION = 0
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
# One per partition directory of a mirror topic that was failed back: the mark
# (``offset epoch``) this replica already cut its log back to, so the cut is
# made once per failback, never again on a restart.
MIRROR_CUT_CHECKPOINT = "mirror-cut-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"


class CheckpointError(ValueError):
    pass


def write_atomically(path: Path, data: bytes, *, fsync_directory: bool = True, fsync_file: bool = True) -> None:
    """Write to ``<path>.tmp``, fsync, rename over ``path``, then (unless told not
    to) fsync the directory so the rename itself survives a power loss. Without
    ``fsync_file`` the caller makes the file durable later (a whole-file-system
    sync): until then a crash may leave it empty or torn, so only files whose
    readers check them (a CRC) and can do without them are written so."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync_file:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync_directory:
        fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (creations, renames, deletions) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _format(entries: list[str]) -> bytes:
    return (f"{CHECKPOINT_VERSION}\n{len(entries)}\n" + "".join(e + "\n" for e in entries)).encode()


def _parse(path: Path, fields: int) -> list[list[str]]:
    lines = Path(path).read_text().splitlines()
    if len(lines) < 2:
        raise CheckpointError(f"{path}: missing header")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"{path}: unknown version {lines[0]!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{path}: bad entry count {lines[1]!r}") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if count != len(entries) or any(len(e) != fields for e in entries):
        raise CheckpointError(f"{path}: expected {count} entries of {fields} fields")
    return entries


def write_offsets(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    entries = [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    write_atomically(Path(path), _format(entries))


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """A missing file reads as empty; a malformed one raises CheckpointError."""
    if not Path(path).exists():
        return {}
    try:
        return {(t, int(p)): int(o) for t, p, o in _parse(path, 3)}
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def write_leader_epochs(path: Path, epochs: list[tuple[int, int]]) -> None:
    write_atomically(Path(path), _format([f"{epoch} {start}" for epoch, start in epochs]))


def write_mirror_cut(path: Path, mark: tuple[int, int]) -> None:
    write_atomically(Path(path), _format([f"{mark[0]} {mark[1]}"]))


def read_mirror_cut(path: Path) -> tuple[int, int] | None:
    """The mark this replica last cut back to (None: never)."""
    if not Path(path).exists():
        return None
    try:
        entries = [(int(o), int(e)) for o, e in _parse(path, 2)]
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    return entries[-1] if entries else None


def read_leader_epochs(path: Path) -> list[tuple[int, int]]:
    if not Path(path).exists():
        return []
    try:
        return [(int(e), int(s)) for e, s in _parse(path, 2)]
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
