"""Human-readable dumps of a log directory's files: the engine of ``pybroker dump-log``.

A little over ~700 lines: one module per file kind would each repeat the
same header, verification and counting conventions that keep the output
lines comparable with Kafka's tool.

What Apache Kafka's ``kafka-dump-log.sh`` does, for the files of
storage/FORMAT.md: ``.log`` segments (one line per batch, optionally one per
record), ``.index`` and ``.timeindex`` files, and the text checkpoint files
(``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint``, ``cleaner-offset-checkpoint`` and a
partition's ``leader-epoch-checkpoint``), producer state ``.snapshot`` files
and aborted-transaction ``.txnindex`` files.

Every function here is a plain generator of output lines (no printing, no
asyncio), so tests and other tools can call them directly. Problems are
reported on lines starting with ``Mismatch`` or ``Corrupt`` and counted in a
:class:`DumpStats`; files that cannot be dumped at all (missing, unknown
type) are counted as errors.

This module must not know about the metadata log's record types (storage may
not import controller): a caller that does passes ``format_value``.
``__consumer_offsets`` records are decoded here with ``offsets_decoder``
(Kafka's ``--offsets-decoder``), their codec being in protocol.

Past 700 lines: one dumper (and verifier) per kind of file, each short, kept
together so that the tool's output stays uniform.
"""

from __future__ import annotations

import json
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path

from crc32c import crc32c

from protocol.compression import CompressionType
from protocol.consumer_offsets import describe_key, describe_value
from protocol.exceptions import ProtocolError
from protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_BYTES,
    BATCH_LENGTH_OFFSET,
    LOG_OVERHEAD_BYTES,
    MAGIC_OFFSET,
    MAGIC_V2,
    MIN_BATCH_LENGTH_BYTES,
    NO_SEQUENCE,
    BatchHeader,
    ControlType,
    DecodedRecord,
    TimestampType,
    decode_batch_records,
    parse_batch_header,
    validate_batch,
)
from storage.index import OFFSET_ENTRY, TIME_ENTRY
from storage.producer_snapshot import SNAPSHOT_SUFFIX, CorruptSnapshotError, decode_snapshot
from storage.txn_index import TXN_INDEX_SUFFIX, CorruptTxnIndexError, decode_entries

__all__ = [
    "LEADER_EPOCH_CHECKPOINT_NAME",
    "OFFSET_CHECKPOINT_NAMES",
    "DumpOptions",
    "DumpStats",
    "dump_checkpoint",
    "dump_file",
    "dump_files",
    "dump_log_segment",
    "dump_offset_index",
    "dump_producer_snapshot",
    "dump_time_index",
    "dump_txn_index",
    "file_kind",
    "parse_checkpoint",
]

# Checkpoint files holding "topic partition offset" lines.
OFFSET_CHECKPOINT_NAMES = frozenset(
    {
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
        "cleaner-offset-checkpoint",
    }
)
# A partition's checkpoint of "epoch startOffset" lines.
LEADER_EPOCH_CHECKPOINT_NAME = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0

_INT32 = struct.Struct(">i")
_INT32_MAX = 2**31 - 1

FormatValue = Callable[[bytes], str]


@dataclass(frozen=True)
class DumpOptions:
    """``deep``: a line per record too; ``print_data``: keys and values (implies deep).

    ``verify``: check instead of print (entries are printed only when ``deep``
    or ``print_data`` is also set) and end each file with a ``Verified`` line.
    ``format_value``: renders record values (e.g. metadata records); the
    default prints them as UTF-8 with replacement characters.
    ``offsets_decoder``: keys and values are ``__consumer_offsets`` records,
    printed decoded as JSON (implies print_data).
    """

    deep: bool = False
    print_data: bool = False
    verify: bool = False
    format_value: FormatValue | None = None
    offsets_decoder: bool = False

    @property
    def deep_iteration(self) -> bool:
        return self.deep or self.print_data or self.offsets_decoder

    @property
    def prints_data(self) -> bool:
        return self.print_data or self.offsets_decoder

    @property
    def print_entries(self) -> bool:
        return not self.verify or self.deep_iteration


@dataclass
class DumpStats:
    problems: int = 0  # Mismatch/Corrupt lines
    errors: int = 0  # files that could not be dumped at all

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        return 1 if self.problems else 0


# --------------------------------------------------------------------------- dispatch


def file_kind(path: Path) -> str | None:
    """'log', 'index', 'timeindex', 'txnindex', 'snapshot', 'offset-checkpoint',
    'leader-epoch-checkpoint' or None."""
    name = Path(path).name
    if name in OFFSET_CHECKPOINT_NAMES:
        return "offset-checkpoint"
    if name == LEADER_EPOCH_CHECKPOINT_NAME:
        return "leader-epoch-checkpoint"
    suffix = Path(path).suffix
    if suffix in (".log", ".index", ".timeindex", TXN_INDEX_SUFFIX, SNAPSHOT_SUFFIX):
        return suffix[1:]
    return None


def dump_files(
    paths: Iterable[str | Path],
    options: DumpOptions = DumpOptions(),
    stats: DumpStats | None = None,
    *,
    format_value_for: Callable[[Path], FormatValue | None] | None = None,
) -> Iterator[str]:
    """Dump each file in turn; ``format_value_for(path)`` may choose a value formatter per file."""
    stats = DumpStats() if stats is None else stats
    for path in paths:
        file_options = options
        if format_value_for is not None:
            formatter = format_value_for(Path(path))
            if formatter is not None:
                file_options = replace(options, format_value=formatter)
        yield from dump_file(path, file_options, stats)


def dump_file(path: str | Path, options: DumpOptions = DumpOptions(), stats: DumpStats | None = None) -> Iterator[str]:
    stats = DumpStats() if stats is None else stats
    yield f"Dumping {path}"
    path = Path(path)
    if not path.exists():
        # Checked first: "not a .log file" about a typo'd path misleads.
        stats.errors += 1
        yield f"Error: {path}: no such file"
        return
    kind = file_kind(path)
    if kind is None:
        stats.errors += 1
        yield (
            f"Error: {path} is not a .log, .index or .timeindex file, a .txnindex, a producer .snapshot or a checkpoint "
            f"({', '.join(sorted(OFFSET_CHECKPOINT_NAMES | {LEADER_EPOCH_CHECKPOINT_NAME}))})"
        )
        return
    if not path.is_file():
        stats.errors += 1
        yield f"Error: {path} is not a regular file"
        return
    dumper = {
        "log": dump_log_segment,
        "index": dump_offset_index,
        "timeindex": dump_time_index,
        "txnindex": dump_txn_index,
        "snapshot": dump_producer_snapshot,
        "offset-checkpoint": dump_checkpoint,
        "leader-epoch-checkpoint": dump_checkpoint,
    }[kind]
    try:
        yield from dumper(path, options, stats)
    except OSError as exc:
        stats.errors += 1
        yield f"Error: cannot read {path}: {exc}"


def _base_offset(path: Path) -> int | None:
    stem = path.name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


# --------------------------------------------------------------------------- .log


def _unreadable_reason(head: bytes, remaining: int) -> tuple[str, bool] | None:
    """Why the bytes at a batch position cannot be read as a batch, and whether
    they look like a torn (partially written) batch rather than garbage."""
    if remaining >= LOG_OVERHEAD_BYTES:
        (length,) = _INT32.unpack_from(head, BATCH_LENGTH_OFFSET)
        if length < MIN_BATCH_LENGTH_BYTES:
            return f"batchLength {length} is below the minimum {MIN_BATCH_LENGTH_BYTES}", False
    if remaining > MAGIC_OFFSET and head[MAGIC_OFFSET] != MAGIC_V2:
        magic = head[MAGIC_OFFSET]
        if magic in (0, 1):
            return f"a magic {magic} message set, which this tool does not read", False
        return f"magic {magic} is not a record batch", False
    if remaining < BATCH_HEADER_BYTES:
        return f"a partial batch header of {remaining} bytes", True
    size = length + LOG_OVERHEAD_BYTES
    if size > remaining:
        return f"a partial batch: {remaining} of its {size} bytes", True
    return None


class _LogWalk:
    """Reads a segment batch by batch; afterwards ``end``, ``tail_bytes`` and
    ``tail_reason`` describe where and why the walk stopped."""

    def __init__(self, path: Path, *, headers_only: bool = False):
        self.path = path
        self.headers_only = headers_only
        self.end = 0
        self.tail_bytes = 0
        self.tail_reason: str | None = None
        self.tail_torn = False

    def __iter__(self) -> Iterator[tuple[int, int, BatchHeader, bytes | None]]:
        """Yield (position, size, header, batch bytes or None when headers_only)."""
        with open(self.path, "rb") as f:
            file_size = f.seek(0, 2)
            position = 0
            while position < file_size:
                f.seek(position)
                remaining = file_size - position
                head = f.read(min(BATCH_HEADER_BYTES, remaining))
                problem = _unreadable_reason(head, remaining)
                if problem is not None:
                    self.tail_reason, self.tail_torn = problem
                    break
                header = parse_batch_header(head, 0)
                size = header.batch_length + LOG_OVERHEAD_BYTES
                batch = None
                if not self.headers_only:
                    rest = f.read(size - BATCH_HEADER_BYTES)
                    if len(rest) < size - BATCH_HEADER_BYTES:  # the file shrank under us
                        self.tail_reason, self.tail_torn = "a batch cut short while reading", True
                        break
                    batch = head + rest
                yield position, size, header, batch
                position += size
            self.end = position
            self.tail_bytes = file_size - position


def _codec_name(codec: int) -> str:
    try:
        return CompressionType(codec).name
    except ValueError:
        return f"UNKNOWN({codec})"


def _timestamp_type_name(timestamp_type: int) -> str:
    return "LogAppendTime" if timestamp_type == TimestampType.LOG_APPEND_TIME else "CreateTime"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _batch_line(position: int, header: BatchHeader, crc_ok: bool) -> str:
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.records_count} "
        f"baseSequence: {header.base_sequence} lastSequence: {header.last_sequence} "
        f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_bool(header.is_transactional)} isControl: {_bool(header.is_control)} "
        f"position: {position} {_timestamp_type_name(header.timestamp_type)}: {header.max_timestamp_ms} "
        f"size: {header.size_bytes} magic: {header.magic} compresscodec: {_codec_name(header.codec)} "
        f"crc: {header.crc} isvalid: {_bool(crc_ok)}"
    )


def _record_sequence(header: BatchHeader, offset: int) -> int:
    """A record's sequence number: the batch's base sequence plus its offset delta, wrapping like Java's."""
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    sequence = header.base_sequence + (offset - header.base_offset)
    return sequence - 2**31 if sequence > _INT32_MAX else sequence


def _text(data: bytes) -> str:
    return bytes(data).decode("utf-8", "replace")


def _record_line(header: BatchHeader, record: DecodedRecord, options: DumpOptions) -> str:
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    header_keys = ",".join(key for key, _ in record.headers)
    line = (
        f"| offset: {record.offset} {_timestamp_type_name(header.timestamp_type)}: {record.timestamp_ms} "
        f"keySize: {key_size} valueSize: {value_size} sequence: {_record_sequence(header, record.offset)} "
        f"headerKeys: [{header_keys}]"
    )
    if not options.prints_data:
        return line
    control = record.control
    if control is not None:
        if control.control_type in (ControlType.ABORT, ControlType.COMMIT):
            marker = ControlType(control.control_type).name
            return f"{line} endTxnMarker: {marker} coordinatorEpoch: {control.coordinator_epoch}"
        return f"{line} controlType: {control.control_type}"
    if options.offsets_decoder:
        return f"{line} {_offsets_record_text(record.key, record.value)}"
    if record.key is not None:
        line += f" key: {_text(record.key)}"
    if record.value is not None:
        formatter = options.format_value or _text
        line += f" payload: {formatter(record.value)}"
    return line


def _offsets_record_text(key: bytes | None, value: bytes | None) -> str:
    """``key: ... payload: ...`` of a ``__consumer_offsets`` record: each as JSON,
    ``<DELETE>`` for a tombstone's payload, and what could not be decoded as
    text with the reason."""
    if key is None:
        return f"key: <none> payload: {'<DELETE>' if value is None else _text(value)}"
    try:
        described_key = describe_key(bytes(key))
    except ProtocolError as exc:
        payload = "<DELETE>" if value is None else _text(value)
        return f"key: <not a group record key: {exc}> {_text(key)} payload: {payload}"
    text = f"key: {json.dumps(described_key, separators=(',', ':'), ensure_ascii=False)}"
    if value is None:
        return f"{text} payload: <DELETE>"
    try:
        described = describe_value(int(described_key["type"]), bytes(value))
        return f"{text} payload: {json.dumps(described, separators=(',', ':'), ensure_ascii=False)}"
    except ProtocolError as exc:
        return f"{text} payload: <not decodable: {exc}> {_text(value)}"


def dump_log_segment(path: Path, options: DumpOptions = DumpOptions(), stats: DumpStats | None = None) -> Iterator[str]:
    """Batch lines (and record lines when deep) of a ``.log`` segment; ``--verify``
    checks CRCs, batch structure, increasing offsets and the final batch boundary."""
    stats = DumpStats() if stats is None else stats
    path = Path(path)
    base = _base_offset(path)
    verify = options.verify
    show = options.print_entries
    if base is not None and show:
        yield f"Log starting offset: {base}"
    problems_before = stats.problems
    previous_last: int | None = None
    batches = 0
    walk = _LogWalk(path)
    for position, size, header, batch in walk:
        batches += 1
        crc_ok = crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]) == header.crc
        if show:
            yield _batch_line(position, header, crc_ok)
        if verify:
            try:
                validate_batch(batch, 0, size)
            except ProtocolError as exc:
                stats.problems += 1
                yield f"Corrupt batch at position {position} of {path}: {exc}"
            if base is not None and header.base_offset < base:
                stats.problems += 1
                yield (
                    f"Corrupt batch at position {position} of {path}: baseOffset {header.base_offset} "
                    f"is below the segment's base offset {base}"
                )
            if previous_last is not None and header.base_offset <= previous_last:
                stats.problems += 1
                yield (
                    f"Corrupt batch at position {position} of {path}: offsets do not increase "
                    f"(baseOffset {header.base_offset} after lastOffset {previous_last})"
                )
        previous_last = header.last_offset
        if options.deep_iteration:
            try:
                _, records = decode_batch_records(batch, 0, verify_crc=False)
            except ProtocolError as exc:
                stats.problems += 1
                yield f"Corrupt records in the batch at position {position} of {path}: {exc}"
                continue
            if show:
                for record in records:
                    yield _record_line(header, record, options)
    if walk.tail_bytes:
        yield f"Found {walk.tail_bytes} invalid bytes at the end of {path.name}"
        if verify:
            stats.problems += 1
            kind = "a torn tail" if walk.tail_torn else "unreadable"
            yield (
                f"Corrupt {path}: the log does not end on a batch boundary; the {walk.tail_bytes} bytes "
                f"from position {walk.end} are {kind}: {walk.tail_reason}"
            )
    if verify:
        yield _verified_line(path, batches, "batches", stats.problems - problems_before)


def _verified_line(path: Path, count: int, what: str, problems: int) -> str:
    found = "no problems" if problems == 0 else f"{problems} problem{'s' if problems != 1 else ''}"
    return f"Verified {path}: {count} {what}, {found}"


# --------------------------------------------------------------------------- .index / .timeindex


def _index_entries(data: bytes, entry: struct.Struct) -> list[tuple[int, int]]:
    """The entries of an index file up to its zero-filled tail.

    The active segment's indexes are preallocated (sparse zeros) and trimmed
    on roll and close, so trailing all-zero slots are empty, not entries. A
    lone all-zero first slot of an offset index would be a legal entry (base
    offset at position 0), but no writer indexes the first batch, so it is
    taken as empty too.
    """
    usable = len(data) - len(data) % entry.size
    used = len(data[:usable].rstrip(b"\0"))
    count = -(-used // entry.size)
    return list(entry.iter_unpack(data[: count * entry.size]))


def _sibling_log(path: Path) -> Path:
    return path.with_suffix(".log")


def dump_offset_index(
    path: Path, options: DumpOptions = DumpOptions(), stats: DumpStats | None = None
) -> Iterator[str]:
    """``offset: N position: P`` per entry; ``--verify`` checks each entry against the sibling ``.log``."""
    stats = DumpStats() if stats is None else stats
    path = Path(path)
    base = _base_offset(path)
    if base is None:
        stats.errors += 1
        yield f"Error: {path}: the file name does not give the segment's base offset"
        return
    data = path.read_bytes()
    entries = _index_entries(data, OFFSET_ENTRY)
    verify = options.verify
    problems_before = stats.problems
    batches: dict[int, BatchHeader] | None = None
    if verify:
        log_path = _sibling_log(path)
        if log_path.is_file():
            batches = {position: header for position, _, header, _ in _LogWalk(log_path, headers_only=True)}
        else:
            stats.problems += 1
            yield f"Mismatch in {path}: no log file {log_path.name} to check the index against"
    previous: tuple[int, int] | None = None
    for relative, position in entries:
        offset = base + relative
        if options.print_entries:
            yield f"offset: {offset} position: {position}"
        if not verify:
            continue
        if relative < 0 or (previous is not None and relative <= previous[0]):
            stats.problems += 1
            after = f" after {base + previous[0]}" if previous is not None else ""
            yield f"Corrupt {path}: index offsets do not increase (offset {offset}{after})"
        if position < 0 or (previous is not None and position <= previous[1]):
            stats.problems += 1
            yield f"Corrupt {path}: index positions do not increase (position {position} for offset {offset})"
        previous = (relative, position)
        if batches is None:
            continue
        header = batches.get(position)
        if header is None:
            stats.problems += 1
            yield (
                f"Mismatch in {path}: index offset {offset} points at position {position}, "
                "which is not the start of a batch"
            )
        elif header.last_offset != offset:
            stats.problems += 1
            yield (
                f"Mismatch in {path}: index offset {offset} points at position {position}, "
                f"where the batch's last offset is {header.last_offset}"
            )
    yield from _index_tail(path, data, OFFSET_ENTRY, verify, stats)
    if verify:
        yield _verified_line(path, len(entries), "entries", stats.problems - problems_before)


def _index_tail(path: Path, data: bytes, entry: struct.Struct, verify: bool, stats: DumpStats) -> Iterator[str]:
    leftover = len(data) % entry.size
    if leftover:
        yield f"Found {leftover} invalid bytes at the end of {path.name}"
        if verify:
            stats.problems += 1
            yield f"Corrupt {path}: {leftover} trailing bytes are not a whole {entry.size}-byte entry"


def dump_time_index(path: Path, options: DumpOptions = DumpOptions(), stats: DumpStats | None = None) -> Iterator[str]:
    """``timestamp: T offset: N`` per entry; ``--verify`` checks each entry against the sibling ``.log``."""
    stats = DumpStats() if stats is None else stats
    path = Path(path)
    base = _base_offset(path)
    if base is None:
        stats.errors += 1
        yield f"Error: {path}: the file name does not give the segment's base offset"
        return
    data = path.read_bytes()
    entries = _index_entries(data, TIME_ENTRY)
    verify = options.verify
    problems_before = stats.problems
    # (base offset, last offset, max timestamp) of each batch, in file order.
    batches: list[tuple[int, int, int]] | None = None
    if verify:
        log_path = _sibling_log(path)
        if log_path.is_file():
            batches = [
                (h.base_offset, h.last_offset, h.max_timestamp_ms)
                for _, _, h, _ in _LogWalk(log_path, headers_only=True)
            ]
        else:
            stats.problems += 1
            yield f"Mismatch in {path}: no log file {log_path.name} to check the time index against"
    batch_starts = [b[0] for b in batches] if batches else []
    previous: tuple[int, int] | None = None
    for timestamp, relative in entries:
        offset = base + relative
        if options.print_entries:
            yield f"timestamp: {timestamp} offset: {offset}"
        if not verify:
            continue
        if previous is not None and timestamp <= previous[0]:
            stats.problems += 1
            yield f"Corrupt {path}: timestamps do not increase ({timestamp} after {previous[0]})"
        if relative < 0 or (previous is not None and relative < previous[1]):
            stats.problems += 1
            yield f"Corrupt {path}: offsets decrease (offset {offset} for timestamp {timestamp})"
        previous = (timestamp, relative)
        if batches is None:
            continue
        last_offset = batches[-1][1] if batches else None
        if last_offset is None or not base <= offset <= last_offset:
            span = f"[{base}, {last_offset}]" if last_offset is not None else "(none: the log is empty)"
            stats.problems += 1
            yield (
                f"Mismatch in {path}: timestamp {timestamp} maps to offset {offset}, "
                f"outside the segment's offsets {span}"
            )
            continue
        i = bisect_right(batch_starts, offset) - 1
        if i < 0 or batches[i][1] < offset:
            stats.problems += 1
            yield f"Mismatch in {path}: timestamp {timestamp} maps to offset {offset}, which no batch holds"
        elif batches[i][2] != timestamp:
            stats.problems += 1
            yield (
                f"Mismatch in {path}: timestamp {timestamp} maps to offset {offset}, "
                f"whose batch has maxTimestamp {batches[i][2]}"
            )
    yield from _index_tail(path, data, TIME_ENTRY, verify, stats)
    if verify:
        yield _verified_line(path, len(entries), "entries", stats.problems - problems_before)


# --------------------------------------------------------------------------- .snapshot


def dump_producer_snapshot(path: Path, options: DumpOptions = DumpOptions(), stats: DumpStats | None = None) -> Iterator[str]:
    """One line per producer, as kafka-dump-log.sh prints a producer snapshot;
    a bad size, version or CRC is a ``Corrupt`` line."""
    stats = DumpStats() if stats is None else stats
    path = Path(path)
    problems_before = stats.problems
    try:
        entries = decode_snapshot(path.read_bytes())
    except CorruptSnapshotError as exc:
        stats.problems += 1
        entries = []
        yield f"Corrupt {path}: {exc}"
    if options.print_entries:
        for entry in entries:
            line = (
                f"producerId: {entry.producer_id} producerEpoch: {entry.epoch} "
                f"coordinatorEpoch: {entry.coordinator_epoch} "
                f"currentTxnFirstOffset: {entry.current_txn_first_offset} lastTimestamp: {entry.last_timestamp_ms}"
            )
            if entry.batches:
                batch = entry.batches[-1]
                line += (
                    f" firstSequence: {batch.first_sequence} lastSequence: {batch.last_sequence} "
                    f"lastOffset: {batch.last_offset} offsetDelta: {batch.last_offset - batch.first_offset} "
                    f"timestamp: {batch.timestamp_ms}"
                )
            yield line
    if options.verify:
        yield _verified_line(path, len(entries), "producers", stats.problems - problems_before)


# --------------------------------------------------------------------------- .txnindex


def dump_txn_index(path: Path, options: DumpOptions = DumpOptions(), stats: DumpStats | None = None) -> Iterator[str]:
    """One line per aborted transaction, as kafka-dump-log.sh prints a
    ``.txnindex``. A size that is not a whole number of entries or an entry of
    another version is a ``Corrupt`` line; ``--verify`` also checks that each
    entry follows the one before it and lies in the segment (its offsets at or
    above the file's base offset, first offset <= last < last stable offset)."""
    stats = DumpStats() if stats is None else stats
    path = Path(path)
    problems_before = stats.problems
    try:
        entries = decode_entries(path.read_bytes())
    except CorruptTxnIndexError as exc:
        stats.problems += 1
        entries = []
        yield f"Corrupt {path}: {exc}"
    base = _base_offset(path)
    previous_last = None
    for txn in entries:
        if options.print_entries:
            yield (
                f"version: 0 producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
                f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}"
            )
        if options.verify:
            problem = None
            if previous_last is not None and txn.last_offset <= previous_last:
                problem = f"lastOffset {txn.last_offset} does not follow the previous entry's {previous_last}"
            elif txn.first_offset > txn.last_offset:
                problem = f"firstOffset {txn.first_offset} is after lastOffset {txn.last_offset}"
            elif txn.last_stable_offset > txn.last_offset + 1:
                problem = f"lastStableOffset {txn.last_stable_offset} is past lastOffset {txn.last_offset} + 1"
            elif base is not None and txn.last_offset < base:
                problem = f"lastOffset {txn.last_offset} is below the segment's base offset {base}"
            if problem is not None:
                stats.problems += 1
                yield f"Corrupt {path}: producerId {txn.producer_id}: {problem}"
        previous_last = txn.last_offset
    if options.verify:
        yield _verified_line(path, len(entries), "aborted transactions", stats.problems - problems_before)


# --------------------------------------------------------------------------- checkpoints


def parse_checkpoint(text: str, leader_epoch: bool) -> tuple[list[tuple], list[str]]:
    """Parse Kafka's checkpoint text format: version line (0), entry count line, entries.

    Entries are ``(topic, partition, offset)`` or, for ``leader_epoch``,
    ``(epoch, start_offset)``. Returns (entries, problems); lines that do not
    parse are reported and skipped. An empty file has no entries.
    """
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        return [], []
    problems: list[str] = []
    version = lines[0].strip()
    if version != str(CHECKPOINT_VERSION):
        problems.append(f"line 1: unsupported version {version!r} (expected {CHECKPOINT_VERSION})")
        return [], problems
    if len(lines) < 2 or not lines[1].strip().isdigit():
        problems.append(
            f"line 2: expected the number of entries, got {lines[1].strip() if len(lines) > 1 else 'nothing'!r}"
        )
        return [], problems
    declared = int(lines[1])
    entries: list[tuple] = []
    width = 2 if leader_epoch else 3
    for number, line in enumerate(lines[2:], start=3):
        fields = line.split()
        try:
            if len(fields) != width:
                raise ValueError
            if leader_epoch:
                entries.append((int(fields[0]), int(fields[1])))
            else:
                entries.append((fields[0], int(fields[1]), int(fields[2])))
        except ValueError:
            expected = "'epoch startOffset'" if leader_epoch else "'topic partition offset'"
            problems.append(f"line {number}: expected {expected}, got {line!r}")
    if len(lines) - 2 != declared:
        problems.append(f"declares {declared} entries but has {len(lines) - 2}")
    return entries, problems


def dump_checkpoint(path: Path, options: DumpOptions = DumpOptions(), stats: DumpStats | None = None) -> Iterator[str]:
    """``topic-partition: offset`` or ``epoch: E startOffset: O`` per entry."""
    stats = DumpStats() if stats is None else stats
    path = Path(path)
    leader_epoch = path.name == LEADER_EPOCH_CHECKPOINT_NAME
    entries, parse_problems = parse_checkpoint(path.read_text(encoding="utf-8", errors="replace"), leader_epoch)
    problems_before = stats.problems
    for problem in parse_problems:
        stats.problems += 1
        yield f"Corrupt {path}: {problem}"
    if options.print_entries:
        for entry in entries:
            if leader_epoch:
                yield f"epoch: {entry[0]} startOffset: {entry[1]}"
            else:
                yield f"{entry[0]}-{entry[1]}: {entry[2]}"
    if not options.verify:
        return
    if leader_epoch:
        for (epoch, start), (next_epoch, next_start) in pairwise(entries):
            if next_epoch <= epoch or next_start < start:
                stats.problems += 1
                yield (
                    f"Corrupt {path}: epoch {next_epoch} at startOffset {next_start} does not follow "
                    f"epoch {epoch} at startOffset {start}"
                )
        negative = [e for e in entries if e[0] < 0 or e[1] < 0]
    else:
        seen: set[tuple[str, int]] = set()
        for topic, partition, _ in entries:
            if (topic, partition) in seen:
                stats.problems += 1
                yield f"Corrupt {path}: {topic}-{partition} appears more than once"
            seen.add((topic, partition))
        negative = [e for e in entries if e[1] < 0 or e[2] < 0]
    for entry in negative:
        stats.problems += 1
        yield f"Corrupt {path}: negative number in entry {' '.join(map(str, entry))}"
    yield _verified_line(path, len(entries), "entries", stats.problems - problems_before)
