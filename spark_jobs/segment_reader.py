"""Read records straight from a broker's segment files, column by column.

Pure (no Spark, no sockets, no event loop): the PySpark data source in
:mod:`spark_jobs.datasource` plans and reads with these functions, and any
other batch job can use them directly.

What is read, and how:

* ``<log.dir>/<topic>-<partition>/<base_offset:020d>.log`` files, in base
  offset order (see ``storage/FORMAT.md``); ``__cluster_metadata`` and
  directories with transient suffixes (``-delete``, ``-future``) are skipped.
* Whole batches, each CRC32C-checked and decompressed by
  :func:`protocol.records.decode_batch_records` (every codec), then cut to the
  requested ``[start, end)`` offset range. Control batches (transaction
  markers) are skipped; records of aborted transactions are *not* filtered
  (this is ``read_uncommitted``).
* The broker may be appending while we read: an incomplete batch at the end
  of a file is simply not read (``iter_batches(..., allow_truncated_tail=True)``),
  so a reader sees a prefix of the log made of whole batches. A complete batch
  that fails its CRC is corruption and raises :class:`ProtocolError`.
* Files are read with ``pread``-style reads, never mmapped: a segment the
  broker truncates or deletes meanwhile must not crash the reader (SIGBUS).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from protocol.exceptions import ProtocolError
from protocol.records import (
    BATCH_HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    decode_batch_records,
    iter_batches,
    parse_batch_header,
)
from storage.checkpoint import LOG_START_OFFSET_CHECKPOINT, CheckpointError, read_offsets
from storage.index import OffsetIndex

METADATA_TOPIC = "__cluster_metadata"
READ_CHUNK_BYTES = 4 << 20
_PARTITION_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)$")
_SEGMENT_LOG = re.compile(r"^(?P<base>\d{20})\.log$")


@dataclass(frozen=True, slots=True)
class PartitionDir:
    topic: str
    partition: int
    path: Path


@dataclass(frozen=True, slots=True)
class SegmentPiece:
    """Offsets ``[start, end)`` of one partition, all inside the segment at ``log_path``."""

    topic: str
    partition: int
    log_path: str
    segment_base_offset: int
    start: int
    end: int


@dataclass(slots=True)
class RecordColumns:
    """Records as parallel lists (one entry per record), ready for pyarrow."""

    key: list = field(default_factory=list)
    value: list = field(default_factory=list)
    topic: list = field(default_factory=list)
    partition: list = field(default_factory=list)
    offset: list = field(default_factory=list)
    timestamp_ms: list = field(default_factory=list)
    timestamp_type: list = field(default_factory=list)
    headers: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offset)

    def extend(self, other: RecordColumns) -> None:
        for name in self.__slots__:
            getattr(self, name).extend(getattr(other, name))


# --------------------------------------------------------------------------- discovery


def find_partitions(log_dirs) -> dict[tuple[str, int], PartitionDir]:
    """Every ``<topic>-<partition>`` directory under the log dirs, keyed by (topic, partition)."""
    found: dict[tuple[str, int], PartitionDir] = {}
    for log_dir in log_dirs:
        try:
            entries = list(os.scandir(log_dir))
        except FileNotFoundError:
            continue
        for entry in entries:
            match = _PARTITION_DIR.match(entry.name)
            if not match or not entry.is_dir():
                continue
            topic, partition = match.group("topic"), int(match.group("partition"))
            if topic == METADATA_TOPIC:
                continue
            key = (topic, partition)
            if key in found:
                raise ValueError(
                    f"partition {topic}-{partition} is in two log dirs: {found[key].path} and {entry.path}"
                )
            found[key] = PartitionDir(topic, partition, Path(entry.path))
    return found


def list_segments(partition_dir: Path) -> list[tuple[int, Path]]:
    """(base offset, ``.log`` path) of each segment, oldest first."""
    segments = []
    try:
        entries = list(os.scandir(partition_dir))
    except FileNotFoundError:
        return []
    for entry in entries:
        match = _SEGMENT_LOG.match(entry.name)
        if match:
            segments.append((int(match.group("base")), Path(entry.path)))
    segments.sort()
    return segments


# --------------------------------------------------------------------------- raw batch walking


def _iter_file_batches(path: Path, position: int = 0, chunk_bytes: int | None = None):
    """Yield ``(buffer, pos, size, header)`` for each complete batch from ``position`` on.

    Stops quietly at an incomplete batch at the end of the file (a write in
    progress, or a file that vanished: retention deleted it).
    """
    if chunk_bytes is None:
        chunk_bytes = READ_CHUNK_BYTES
    try:
        f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in finally, across yields
    except FileNotFoundError:
        return
    try:
        pending = b""
        offset_in_file = position
        want = chunk_bytes
        while True:
            data = os.pread(f.fileno(), want, offset_in_file)
            if not data:
                return  # EOF: whatever is pending is a torn tail
            offset_in_file += len(data)
            buf = pending + data if pending else data
            consumed = 0
            for pos, size, header in iter_batches(buf, allow_truncated_tail=True):
                yield buf, pos, size, header
                consumed = pos + size
            pending = buf[consumed:]
            # A batch larger than the chunk: read at least the whole of it next time.
            want = chunk_bytes
            if len(pending) >= LOG_OVERHEAD_BYTES:
                needed = int.from_bytes(pending[8:12], "big", signed=True) + LOG_OVERHEAD_BYTES
                want = max(chunk_bytes, needed - len(pending))
    finally:
        f.close()


def _start_position(log_path: Path, segment_base_offset: int, offset: int) -> int:
    """A batch start at or before the batch holding ``offset``, from the ``.index`` (a hint only)."""
    if offset <= segment_base_offset:
        return 0
    index = OffsetIndex(log_path.with_suffix(".index"), segment_base_offset, 1 << 30)
    try:
        position = index.lookup(offset - 1)  # entries map a batch's last offset to its start
    except (OSError, ValueError):  # a torn or odd index only costs a longer scan
        return 0
    if position <= 0:
        return 0
    try:
        with open(log_path, "rb", buffering=0) as f:
            head = os.pread(f.fileno(), BATCH_HEADER_BYTES, position)
        parse_batch_header(head)  # the hint must land on a batch header
    except (OSError, ProtocolError):
        return 0
    return position


# --------------------------------------------------------------------------- offsets


def _log_start_checkpoint(pdir: PartitionDir) -> int | None:
    try:
        return read_offsets(pdir.path.parent / LOG_START_OFFSET_CHECKPOINT).get((pdir.topic, pdir.partition))
    except (OSError, ValueError, CheckpointError):  # being rewritten, or unreadable: files decide
        return None


def earliest_offset(pdir: PartitionDir) -> int:
    """First offset still in the files: the first batch's base offset (at least the
    checkpointed log start offset, which DeleteRecords may have raised)."""
    segments = list_segments(pdir.path)
    if not segments:
        return 0
    first = None
    for base, path in segments:
        for _buf, _pos, _size, header in _iter_file_batches(path, 0, 1 << 16):
            first = max(base, header.base_offset)
            break
        if first is not None:
            break
    if first is None:  # no batch at all: the log starts (and ends) at the newest segment's base
        first = segments[-1][0]
    checkpoint = _log_start_checkpoint(pdir)
    if checkpoint is not None:
        first = min(max(first, checkpoint), latest_offset(pdir))
    return first


def _segment_next_offset(base_offset: int, path: Path) -> int | None:
    """Offset after the last complete batch of a segment (None when it holds none)."""
    last = None
    for _buf, _pos, _size, header in _iter_file_batches(path, _start_position(path, base_offset, 1 << 62)):
        last = header
    return None if last is None else last.next_offset


def latest_offset(pdir: PartitionDir) -> int:
    """The log end offset as the files show it now: after the newest complete batch."""
    segments = list_segments(pdir.path)
    for base, path in reversed(segments):
        next_offset = _segment_next_offset(base, path)
        if next_offset is not None:
            return max(next_offset, segments[-1][0])
    return segments[-1][0] if segments else 0


def split_by_segment(pdir: PartitionDir, start: int, end: int) -> list[SegmentPiece]:
    """Cut ``[start, end)`` into one piece per segment that may hold some of it."""
    if end <= start:
        return []
    segments = list_segments(pdir.path)
    pieces = []
    for i, (base, path) in enumerate(segments):
        next_base = segments[i + 1][0] if i + 1 < len(segments) else None
        piece_start = max(start, base)
        piece_end = end if next_base is None else min(end, next_base)
        if piece_start < piece_end:
            pieces.append(SegmentPiece(pdir.topic, pdir.partition, str(path), base, piece_start, piece_end))
    return pieces


# --------------------------------------------------------------------------- records


def read_piece(piece: SegmentPiece) -> RecordColumns:
    """Records of ``[piece.start, piece.end)`` in the piece's segment, as columns."""
    columns = RecordColumns()
    for chunk in iter_piece(piece):
        columns.extend(chunk)
    return columns


class SegmentGoneError(FileNotFoundError):
    """The segment of a planned piece is gone (retention or DeleteRecords removed it)."""


def iter_piece(piece: SegmentPiece, batch_records: int = 65536, *, missing_ok: bool = True):
    """Like :func:`read_piece`, yielding columns of about ``batch_records`` records at a time.

    A segment deleted since planning reads as empty, or raises
    :class:`SegmentGoneError` when ``missing_ok`` is false.
    """
    path = Path(piece.log_path)
    if not missing_ok and not path.exists():
        raise SegmentGoneError(
            f"{piece.topic}-{piece.partition}: segment {path.name} with offsets [{piece.start}, {piece.end}) "
            "was deleted (retention?) before it was read"
        )
    start, end = piece.start, piece.end
    topic, partition = piece.topic, piece.partition
    columns = RecordColumns()
    for buf, pos, _size, header in _iter_file_batches(path, _start_position(path, piece.segment_base_offset, start)):
        if header.next_offset <= start:
            continue
        if header.base_offset >= end:
            break
        if header.is_control:
            continue
        header, records = decode_batch_records(buf, pos)
        if not records:
            continue
        offsets, timestamps, keys, values, headers, timestamp_types, _control = zip(*records)
        if offsets[0] < start or offsets[-1] >= end:
            keep = [i for i, offset in enumerate(offsets) if start <= offset < end]
            if not keep:
                continue
            offsets, timestamps, keys, values, headers, timestamp_types = (
                [column[i] for i in keep] for column in (offsets, timestamps, keys, values, headers, timestamp_types)
            )
        n = len(offsets)
        columns.key.extend(keys)
        columns.value.extend(values)
        columns.topic.extend([topic] * n)
        columns.partition.extend([partition] * n)
        columns.offset.extend(offsets)
        columns.timestamp_ms.extend(timestamps)
        columns.timestamp_type.extend(timestamp_types)
        columns.headers.extend(headers)
        if len(columns.offset) >= batch_records:
            yield columns
            columns = RecordColumns()
    if columns.offset:
        yield columns


def read_range(pdir: PartitionDir, start: int, end: int) -> RecordColumns:
    """All records of a partition in ``[start, end)``, across segments."""
    columns = RecordColumns()
    for piece in split_by_segment(pdir, start, end):
        columns.extend(read_piece(piece))
    return columns


__all__ = [
    "PartitionDir",
    "ProtocolError",
    "RecordColumns",
    "SegmentGoneError",
    "SegmentPiece",
    "earliest_offset",
    "find_partitions",
    "iter_piece",
    "latest_offset",
    "list_segments",
    "read_piece",
    "read_range",
    "split_by_segment",
]
