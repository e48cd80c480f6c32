"""Read records straight from a broker's segment files, column by column.

A little over ~700 lines: planning (offsets, timestamps, pieces) and reading
share the segment and index conventions; which replica to read is already
apart (:mod:`spark_jobs.replicas`), as are Arrow decoding and the transaction
state of ``read_committed`` (:mod:`spark_jobs.txn_state`).

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
  markers) are never returned; batches of aborted transactions are skipped
  only when the piece carries aborted ranges (``read_committed``, found at
  planning time by :func:`spark_jobs.txn_state.transaction_state` from the
  ``.txnindex`` files and producer snapshots).
* Which batches to read is decided from their headers alone
  (:func:`skip_batch`), before any record is decoded.
* The broker may be appending while we read: an incomplete batch at the end
  of a file is simply not read (``iter_batches(..., allow_truncated_tail=True)``),
  so a reader sees a prefix of the log made of whole batches. A complete batch
  that fails its CRC is corruption and raises :class:`CorruptBatchError` (a
  ProtocolError) naming the file and the batch's position in it; there is no
  option to skip it (``failOnDataLoss`` is about offsets retention removed).
* Files are read with ``pread``-style reads, never mmapped: a segment the
  broker truncates or deletes meanwhile must not crash the reader (SIGBUS).
"""

from __future__ import annotations

import heapq
import os
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path

from protocol.exceptions import ProtocolError
from protocol.records import (
    BATCH_HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    decode_batch_records,
    iter_batches,
    parse_batch_header,
    validate_batch,
)
from storage.checkpoint import LOG_START_OFFSET_CHECKPOINT, CheckpointError, read_offsets
from storage.index import TIME_ENTRY, OffsetIndex, TimeIndex

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
class AbortedRange:
    """Offsets ``[first_offset, last_offset]`` of one producer's aborted transaction
    (``last_offset`` is its ABORT marker's, as in Kafka's aborted transaction index)."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class SegmentPiece:
    """Offsets ``[start, end)`` of one partition, all inside the segment at ``log_path``.

    ``aborted`` lists the aborted transactions overlapping the piece, whose
    transactional batches are skipped (empty for ``read_uncommitted``).
    """

    topic: str
    partition: int
    log_path: str
    segment_base_offset: int
    start: int
    end: int
    aborted: tuple[AbortedRange, ...] = ()


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


def find_replicas(log_dirs) -> dict[tuple[str, int], list[PartitionDir]]:
    """Every ``<topic>-<partition>`` directory under the log dirs, keyed by (topic, partition).

    A partition found in several log dirs has one replica in each (the log
    dirs of several brokers): the list holds them in the order of ``log_dirs``.
    A log dir named twice is read once.
    """
    found: dict[tuple[str, int], list[PartitionDir]] = {}
    seen_dirs = set()
    for log_dir in log_dirs:
        real_dir = os.path.realpath(log_dir)
        if real_dir in seen_dirs:
            continue
        seen_dirs.add(real_dir)
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
            found.setdefault((topic, partition), []).append(PartitionDir(topic, partition, Path(entry.path)))
    return found


def find_partitions(log_dirs) -> dict[tuple[str, int], PartitionDir]:
    """Every ``<topic>-<partition>`` directory under the log dirs of ONE broker,
    keyed by (topic, partition); a partition in two of them is an error (use
    :func:`find_replicas` for the log dirs of several brokers)."""
    found: dict[tuple[str, int], PartitionDir] = {}
    for key, replicas in find_replicas(log_dirs).items():
        if len(replicas) > 1:
            raise ValueError(
                f"partition {key[0]}-{key[1]} is in two log dirs: {replicas[0].path} and {replicas[1].path}"
            )
        found[key] = replicas[0]
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


class CorruptBatchError(ProtocolError):
    """A complete batch of a segment file fails its checks (CRC32C, framing):
    the file and the batch's position in it are in the message. Never
    skipped: a job that read on would silently miss the batch's records."""


def _iter_file_batches(path: Path, position: int = 0, chunk_bytes: int | None = None, *, check_crc: bool = False):
    """Yield ``(buffer, pos, size, header)`` for each complete batch from ``position`` on.

    Stops quietly at an incomplete batch at the end of the file (a write in
    progress, or a file that vanished: retention deleted it). With
    ``check_crc`` each batch is checked first (:class:`CorruptBatchError`).
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
            buf_at = offset_in_file - len(buf)  # the file position of buf[0]
            consumed = 0
            try:
                for pos, size, header in iter_batches(buf, allow_truncated_tail=True):
                    if check_crc:
                        validate_batch(buf, pos, size)
                    yield buf, pos, size, header
                    consumed = pos + size
            except CorruptBatchError:
                raise
            except ProtocolError as exc:
                raise CorruptBatchError(f"{path}: corrupt batch at file position {buf_at + consumed}: {exc}") from None
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


def _iter_file_headers(path: Path, position: int = 0):
    """Yield ``(pos, header)`` of each complete batch from ``position`` on, reading
    only the 61-byte headers (one ``pread`` each), never the records.

    The file's size is taken once: batches appended meanwhile are not seen, and
    an incomplete batch at the end (a torn tail) ends the walk quietly.
    """
    try:
        f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in finally, across yields
    except FileNotFoundError:
        return
    try:
        size_bytes = os.fstat(f.fileno()).st_size
        while size_bytes - position >= BATCH_HEADER_BYTES:
            head = os.pread(f.fileno(), BATCH_HEADER_BYTES, position)
            if len(head) < BATCH_HEADER_BYTES:
                return  # truncated meanwhile
            header = parse_batch_header(head)
            if position + header.size_bytes > size_bytes:
                return
            yield position, header
            position += header.size_bytes
    finally:
        f.close()


def _decode_batch_at(path: Path, position: int, size_bytes: int):
    """Decode the one batch at ``position`` of ``path``: (header, records), or None if it is gone."""
    try:
        with open(path, "rb", buffering=0) as f:
            data = os.pread(f.fileno(), size_bytes, position)
    except FileNotFoundError:
        return None
    if len(data) < size_bytes:
        return None
    return decode_batch_records(data, 0)


# --------------------------------------------------------------------------- batch-level decisions


def aborted_by_producer(aborted) -> dict[int, tuple[list[int], list[int]]]:
    """``{producer_id: (first offsets, last offsets)}``, each sorted, for :func:`skip_batch`."""
    by_producer: dict[int, list[AbortedRange]] = {}
    for txn in aborted:
        by_producer.setdefault(txn.producer_id, []).append(txn)
    result = {}
    for producer_id, txns in by_producer.items():
        txns.sort(key=lambda txn: txn.first_offset)
        result[producer_id] = ([txn.first_offset for txn in txns], [txn.last_offset for txn in txns])
    return result


def skip_batch(header, aborted: dict[int, tuple[list[int], list[int]]] | None = None) -> bool:
    """Whether a whole batch is left out, decided from its header alone.

    Control batches (transaction markers) never reach the reader; a
    transactional batch is left out when it lies inside one of its producer's
    aborted transactions (``aborted`` from :func:`aborted_by_producer`).
    """
    if header.is_control:
        return True
    if not aborted or not header.is_transactional:
        return False
    ranges = aborted.get(header.producer_id)
    if ranges is None:
        return False
    first_offsets, last_offsets = ranges
    i = bisect_right(first_offsets, header.base_offset) - 1
    return i >= 0 and header.base_offset <= last_offsets[i]


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


def _segment_last_header(base_offset: int, path: Path):
    """Header of the last complete batch of a segment (None when it holds none)."""
    last = None
    for _buf, _pos, _size, header in _iter_file_batches(path, _start_position(path, base_offset, 1 << 62)):
        last = header
    return last


@dataclass(frozen=True, slots=True)
class LogEnd:
    """Where a partition's files end now: the log end offset (after the newest
    complete batch) and that batch's partition leader epoch (-1 without a batch)."""

    offset: int
    leader_epoch: int


def log_end(pdir: PartitionDir) -> LogEnd:
    """The log end offset and the leader epoch of the newest complete batch, as the files show them now."""
    segments = list_segments(pdir.path)
    for base, path in reversed(segments):
        last = _segment_last_header(base, path)
        if last is not None:
            return LogEnd(max(last.next_offset, segments[-1][0]), last.partition_leader_epoch)
    return LogEnd(segments[-1][0] if segments else 0, -1)


def latest_offset(pdir: PartitionDir) -> int:
    """The log end offset as the files show it now: after the newest complete batch."""
    return log_end(pdir).offset


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


# --------------------------------------------------------------------------- offsets by timestamp


def _time_index_entries(log_path: Path, segment_base_offset: int) -> tuple[list[tuple[int, int]], bool]:
    """The ``.timeindex`` entries (timestamp, absolute offset) and whether the file
    holds exactly them (trimmed, as a rolled segment's is; not torn, not zero-filled)."""
    index = TimeIndex(log_path.with_suffix(".timeindex"), segment_base_offset, 1 << 30)
    try:
        entries = index.entries()
        size_bytes = os.stat(index.path).st_size
    except (OSError, ValueError):  # missing or unreadable: no hint
        return [], False
    return entries, size_bytes == len(entries) * TIME_ENTRY.size


def _batch_ending_at(log_path: Path, segment_base_offset: int, last_offset: int):
    """Header of the batch whose last offset is ``last_offset``, or None if there is none."""
    for _pos, header in _iter_file_headers(log_path, _start_position(log_path, segment_base_offset, last_offset)):
        if header.last_offset >= last_offset:
            return header if header.last_offset == last_offset else None
    return None


def _time_entry_matches_log(log_path: Path, segment_base_offset: int, entry: tuple[int, int]) -> bool:
    # An entry is written when a batch raises the segment's largest timestamp,
    # so that batch's maxTimestamp is the entry's timestamp.
    timestamp_ms, offset = entry
    header = _batch_ending_at(log_path, segment_base_offset, offset)
    return header is not None and header.max_timestamp_ms == timestamp_ms


def _first_offset_at_or_after(log_path: Path, position: int, timestamp_ms: int, min_offset: int) -> int | None:
    """Scan batch headers from ``position``; decode only a batch whose maxTimestamp
    reaches the target, for the first of its records (at or above ``min_offset``) that does."""
    for pos, header in _iter_file_headers(log_path, position):
        if header.next_offset <= min_offset or header.max_timestamp_ms < timestamp_ms:
            continue
        decoded = _decode_batch_at(log_path, pos, header.size_bytes)
        if decoded is None:
            return None
        for record in decoded[1]:
            if record.offset >= min_offset and record.timestamp_ms >= timestamp_ms:
                return record.offset
    return None


def offset_for_timestamp(pdir: PartitionDir, timestamp_ms: int, *, log_start_offset: int | None = None) -> int | None:
    """The earliest offset whose record timestamp is >= ``timestamp_ms`` (Kafka's
    ListOffsets), or None when no record is that recent.

    Records below the log start offset (default: the checkpointed one) do not
    count. Timestamps need not grow with offsets: the answer is the first such
    offset in log order. Each segment's ``.timeindex`` is a hint, checked
    against the log before it is believed: a rolled segment whose trimmed
    index says its largest timestamp is below the target is skipped unread,
    and within a segment the scan starts after the last batch the index shows
    to be older than the target. A missing, torn or stale index (the active
    segment's) only costs a longer header scan. Only the batch holding the
    answer is decoded.
    """
    if log_start_offset is None:
        log_start_offset = _log_start_checkpoint(pdir) or 0
    segments = list_segments(pdir.path)
    for i, (base, path) in enumerate(segments):
        next_base = segments[i + 1][0] if i + 1 < len(segments) else None
        if next_base is not None and next_base <= log_start_offset:
            continue
        entries, trimmed = _time_index_entries(path, base)
        older = bisect_left([timestamp for timestamp, _offset in entries], timestamp_ms)  # entries[:older] < target
        if older and not _time_entry_matches_log(path, base, entries[older - 1]):
            entries, trimmed, older = [], False, 0  # the index disagrees with the log: scan it all
        if next_base is not None and trimmed and entries and older == len(entries):
            continue  # a rolled segment whose largest timestamp is below the target
        min_offset = log_start_offset
        position = 0
        if older:
            # Every record up to that entry's batch is older than the target.
            min_offset = max(min_offset, entries[older - 1][1] + 1)
            position = _start_position(path, base, min_offset)
        found = _first_offset_at_or_after(path, position, timestamp_ms, min_offset)
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------- transactions


def with_aborted(pieces: list[SegmentPiece], aborted) -> list[SegmentPiece]:
    """The pieces, each carrying the aborted transactions that overlap it."""
    if not aborted:
        return pieces
    return [
        replace(
            piece,
            aborted=tuple(txn for txn in aborted if txn.first_offset < piece.end and txn.last_offset >= piece.start),
        )
        for piece in pieces
    ]


# --------------------------------------------------------------------------- splitting


def _byte_cuts(piece: SegmentPiece, max_bytes: int) -> list[int]:
    """Offsets at which to cut a piece spanning more than ``max_bytes`` of its segment.

    An ``.index`` entry (last offset o, position p) says a batch boundary lies
    just after o, at about p: cutting at o + 1 lets the next piece start
    reading at p. The index only sizes the chunks; any cut offset reads correctly.
    """
    log_path = Path(piece.log_path)
    try:
        file_bytes = os.stat(log_path).st_size
        if file_bytes <= max_bytes:
            return []  # the usual case: no need to read the index
        entries = OffsetIndex(log_path.with_suffix(".index"), piece.segment_base_offset, 1 << 30).entries()
    except (OSError, ValueError):
        return []
    boundaries = [(offset + 1, position) for offset, position in entries if position < file_bytes]
    start_position = max((p for o, p in boundaries if o <= piece.start), default=0)
    end_position = min((p for o, p in boundaries if o >= piece.end), default=file_bytes)
    inside = [(o, p) for o, p in boundaries if piece.start < o < piece.end]
    span_bytes = end_position - start_position
    if span_bytes <= max_bytes or not inside:
        return []
    chunks = -(-span_bytes // max_bytes)
    positions = [p for _o, p in inside]
    cuts = set()
    for k in range(1, chunks):
        target = start_position + span_bytes * k // chunks
        j = bisect_left(positions, target)
        nearest = min((i for i in (j - 1, j) if 0 <= i < len(inside)), key=lambda i: abs(positions[i] - target))
        cuts.add(inside[nearest][0])
    return sorted(cuts)


def split_piece(
    piece: SegmentPiece, max_bytes_per_partition: int | None = None, max_records_per_partition: int | None = None
) -> list[SegmentPiece]:
    """Cut a piece into offset ranges of about ``max_bytes_per_partition`` bytes of
    its segment (at ``.index`` entries) and at most ``max_records_per_partition`` offsets.

    Each record still belongs to exactly one piece: a batch straddling a cut is
    decoded by both neighbours, each keeping its own ``[start, end)`` records.
    """
    cuts: set[int] = set()
    if max_records_per_partition:
        cuts.update(range(piece.start + max_records_per_partition, piece.end, max_records_per_partition))
    if max_bytes_per_partition:
        cuts.update(_byte_cuts(piece, max_bytes_per_partition))
    if not cuts:
        return [piece]
    bounds = [piece.start, *sorted(cuts), piece.end]
    return [replace(piece, start=a, end=b) for a, b in pairwise(bounds)]


def bytes_per_offset(pdir: PartitionDir, earliest: int, latest: int) -> float:
    """The partition's segment bytes per offset: sizes pieces for planning, no more."""
    total_bytes = 0
    for _base, path in list_segments(pdir.path):
        try:
            total_bytes += os.stat(path).st_size
        except FileNotFoundError:
            continue
    return total_bytes / max(1, latest - earliest)


def pack_pieces(
    pieces: list[SegmentPiece], bytes_per_offset: list[float], split_bytes: int, open_cost_bytes: int
) -> list[tuple[SegmentPiece, ...]]:
    """Group consecutive pieces of one topic-partition into splits of at most
    ``split_bytes``, each piece counting its estimated bytes plus ``open_cost_bytes``
    (Spark's file sources pack small files the same way: fewer, fuller tasks,
    since each task costs a Python worker round trip)."""
    groups: list[tuple[SegmentPiece, ...]] = []
    group: list[SegmentPiece] = []
    group_bytes = 0.0
    for piece, density in zip(pieces, bytes_per_offset, strict=True):
        cost = (piece.end - piece.start) * density + open_cost_bytes
        same_partition = group and (group[-1].topic, group[-1].partition) == (piece.topic, piece.partition)
        if group and (not same_partition or group_bytes + cost > split_bytes):
            groups.append(tuple(group))
            group, group_bytes = [], 0.0
        group.append(piece)
        group_bytes += cost
    if group:
        groups.append(tuple(group))
    return groups


def split_to_min_partitions(pieces: list[SegmentPiece], min_partitions: int) -> list[SegmentPiece]:
    """Cut the largest pieces (by offsets) into equal offset ranges until there are
    at least ``min_partitions`` pieces, or none can be cut (one offset each)."""
    if len(pieces) >= min_partitions:
        return pieces
    parts = [1] * len(pieces)
    largest_first = [(-(piece.end - piece.start), i) for i, piece in enumerate(pieces)]
    heapq.heapify(largest_first)
    total = len(pieces)
    while total < min_partitions and largest_first:
        _size, i = heapq.heappop(largest_first)
        offsets = pieces[i].end - pieces[i].start
        if parts[i] >= offsets:
            continue  # one offset per part already
        parts[i] += 1
        total += 1
        heapq.heappush(largest_first, (-offsets / parts[i], i))
    result = []
    for piece, n in zip(pieces, parts):
        offsets = piece.end - piece.start
        bounds = [piece.start + offsets * k // n for k in range(n + 1)]
        result.extend(replace(piece, start=a, end=b) for a, b in pairwise(bounds))
    return result


# --------------------------------------------------------------------------- records


def read_piece(piece: SegmentPiece) -> RecordColumns:
    """Records of ``[piece.start, piece.end)`` in the piece's segment, as columns."""
    columns = RecordColumns()
    for chunk in iter_piece(piece):
        columns.extend(chunk)
    return columns


class SegmentGoneError(FileNotFoundError):
    """The segment of a planned piece is gone (retention or DeleteRecords removed it)."""


def iter_piece_batches(piece: SegmentPiece, group_records: int = 65536, *, missing_ok: bool = True):
    """The piece's data batches, undecoded, in groups of about ``group_records`` records.

    Yields lists of ``(buffer, position, header)``: the complete batches that
    overlap ``[piece.start, piece.end)`` and that :func:`skip_batch` keeps
    (no control batches, no batches of the piece's aborted transactions).
    Batches at the edges may hold records outside the range: the decoder cuts
    them. A segment deleted since planning reads as empty, or raises
    :class:`SegmentGoneError` when ``missing_ok`` is false.
    """
    path = Path(piece.log_path)
    if not missing_ok and not path.exists():
        raise SegmentGoneError(
            f"{piece.topic}-{piece.partition}: segment {path.name} with offsets [{piece.start}, {piece.end}) "
            "was deleted (retention?) before it was read"
        )
    start, end = piece.start, piece.end
    aborted = aborted_by_producer(piece.aborted)
    group = []
    records_in_group = 0
    batches = _iter_file_batches(path, _start_position(path, piece.segment_base_offset, start), check_crc=True)
    for buf, pos, _size, header in batches:
        if header.next_offset <= start:
            continue
        if header.base_offset >= end:
            break
        if skip_batch(header, aborted):
            continue
        group.append((buf, pos, header))
        records_in_group += header.records_count
        if records_in_group >= group_records:
            yield group
            group = []
            records_in_group = 0
    if group:
        yield group


def iter_piece(piece: SegmentPiece, batch_records: int = 65536, *, missing_ok: bool = True):
    """Like :func:`read_piece`, yielding columns of about ``batch_records`` records at a time.

    Records are decoded one by one by :mod:`protocol.records` (the reference
    the data source's vectorized decoder is tested against).
    """
    start, end = piece.start, piece.end
    topic, partition = piece.topic, piece.partition
    for group in iter_piece_batches(piece, batch_records, missing_ok=missing_ok):
        columns = RecordColumns()
        for buf, pos, _header in group:
            _header, records = decode_batch_records(buf, pos)
            if not records:
                continue
            offsets, timestamps, keys, values, headers, timestamp_types, _control = zip(*records)
            if offsets[0] < start or offsets[-1] >= end:
                keep = [i for i, offset in enumerate(offsets) if start <= offset < end]
                if not keep:
                    continue
                offsets, timestamps, keys, values, headers, timestamp_types = (
                    [column[i] for i in keep]
                    for column in (offsets, timestamps, keys, values, headers, timestamp_types)
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
        if columns.offset:
            yield columns


def read_range(pdir: PartitionDir, start: int, end: int) -> RecordColumns:
    """All records of a partition in ``[start, end)``, across segments."""
    columns = RecordColumns()
    for piece in split_by_segment(pdir, start, end):
        columns.extend(read_piece(piece))
    return columns


__all__ = [
    "AbortedRange",
    "CorruptBatchError",
    "LogEnd",
    "PartitionDir",
    "ProtocolError",
    "RecordColumns",
    "SegmentGoneError",
    "SegmentPiece",
    "bytes_per_offset",
    "earliest_offset",
    "find_partitions",
    "find_replicas",
    "iter_piece",
    "iter_piece_batches",
    "latest_offset",
    "list_segments",
    "log_end",
    "offset_for_timestamp",
    "pack_pieces",
    "read_piece",
    "read_range",
    "skip_batch",
    "split_by_segment",
    "split_piece",
    "split_to_min_partitions",
    "with_aborted",
]
