"""Kafka record batches (message format v2, "magic 2") plus read-only legacy message sets.

Longer than ~700 lines on purpose: the batch header layout, its patching on
the hot path, the full decoders and the validation scan must agree byte for
byte, and keeping them side by side is how they stay in agreement
(compression is apart).

Sans-IO: every function takes and returns bytes-like objects.

Two kinds of callers with different budgets use this module:

* The produce/fetch hot path only ever looks at batch headers:
  :func:`iter_batches`, :func:`validate_batch` and the ``patch_*`` functions
  touch the 61-byte header (plus one CRC32C pass) and never decode records,
  so the broker can store client bytes as they arrived.
* Tests, tools and readers (e.g. the Spark reader) need the records:
  :func:`decode_batch_records` and :func:`decode_records` fully decode,
  decompress and bound-check everything.
* Schema validation on produce needs only where each key and value lies:
  :func:`batch_records_data` then :func:`scan_keys_values` check the records'
  framing as the full decoder does but build no record objects, headers or
  timestamps (about a third of the full decode's cost per record).

Every decode failure raises :class:`~protocol.exceptions.ProtocolError`;
encoders raise ``ValueError``/``TypeError`` because bad arguments there are
our own bugs, not a peer's.

Batch layout (all big-endian; offsets in bytes from the start of the batch)::

     0 baseOffset            int64   \\ not counted by batchLength
     8 batchLength           int32   /
    12 partitionLeaderEpoch  int32   not covered by the CRC
    16 magic                 int8    = 2
    17 crc                   uint32  CRC32C of bytes [21, end)
    21 attributes            int16
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records (compressed as one blob when the codec is not NONE)
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from crc32c import crc32c

from protocol.compression import (
    DEFAULT_MAX_OUTPUT_BYTES,
    CompressionType,
    compress,
    decompress,
    repair_kafka08_lz4_header,
)
from protocol.exceptions import ProtocolError

BytesLike = bytes | bytearray | memoryview

__all__ = [
    # layout
    "BATCH_HEADER_BYTES",
    "LOG_OVERHEAD_BYTES",
    "MIN_BATCH_LENGTH_BYTES",
    "BASE_OFFSET_OFFSET",
    "BATCH_LENGTH_OFFSET",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "MAGIC_OFFSET",
    "CRC_OFFSET",
    "ATTRIBUTES_OFFSET",
    "LAST_OFFSET_DELTA_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "PRODUCER_ID_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORDS_OFFSET",
    "HEADER_STRUCT",
    # attributes and sentinels
    "CODEC_MASK",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "CONTROL_MASK",
    "DELETE_HORIZON_MASK",
    "MAGIC_V0",
    "MAGIC_V1",
    "MAGIC_V2",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_TIMESTAMP",
    "TimestampType",
    "ControlType",
    "CompressionType",
    # data types
    "BatchHeader",
    "Record",
    "DecodedRecord",
    "ControlRecord",
    # functions
    "parse_batch_header",
    "iter_batches",
    "split_complete_batches",
    "validate_batch",
    "update_crc",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "patch_log_append_time",
    "build_batch",
    "build_control_batch",
    "parse_control_record",
    "first_control_record",
    "decode_batch_records",
    "batch_records_data",
    "scan_keys_values",
    "decode_record_headers",
    "read_varint",
    "decode_records",
]

# --------------------------------------------------------------------------- layout

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_BYTES = HEADER_STRUCT.size  # 61
# baseOffset + batchLength: the part of every log entry that batchLength does
# not count (same in all three message formats).
LOG_OVERHEAD_BYTES = 12
MIN_BATCH_LENGTH_BYTES = BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES  # 49

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_INT32_MAX = 2**31 - 1
_INT32_MIN = -(2**31)
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)

# The smallest possible v2 record: length, attributes, timestampDelta,
# offsetDelta, keyLength, valueLength and headerCount, one byte each. Used to
# reject absurd recordsCount values before looping.
_MIN_RECORD_BYTES = 7

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")
_CONTROL_KEY = struct.Struct(">hh")
_TXN_MARKER_VALUE = struct.Struct(">hi")

# Legacy message headers including the log overhead (offset, messageSize).
_LEGACY_V0 = struct.Struct(">qiIbb")
_LEGACY_V1 = struct.Struct(">qiIbbq")
_LEGACY_CRC_OFFSET = 12
# Smallest messageSize per magic: crc, magic, attributes, [timestamp], keyLength, valueLength.
_LEGACY_MIN_MESSAGE_BYTES = (4 + 1 + 1 + 4 + 4, 4 + 1 + 1 + 8 + 4 + 4)


class TimestampType(IntEnum):
    NO_TIMESTAMP_TYPE = -1  # magic 0 messages carry no timestamp at all
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


# --------------------------------------------------------------------------- data types


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of a v2 record batch, field for field."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp_ms: int
    max_timestamp_ms: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        """Bytes the whole batch occupies on the wire / in the log."""
        return self.batch_length + LOG_OVERHEAD_BYTES

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last record; sequences wrap at int32 max like Java's."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        if self.base_sequence > _INT32_MAX - self.last_offset_delta:
            return self.last_offset_delta - (_INT32_MAX - self.base_sequence) - 1
        return self.base_sequence + self.last_offset_delta


@dataclass(slots=True)
class Record:
    """A v2 record as encoded: offset and timestamp relative to its batch."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    attributes: int = 0


class ControlRecord(NamedTuple):
    """Parsed key (and, for transaction markers, value) of a control record.

    ``coordinator_epoch``/``marker_version`` are None for control types other
    than ABORT/COMMIT (KRaft uses further types whose value is not a marker).
    """

    key_version: int
    control_type: int
    marker_version: int | None
    coordinator_epoch: int | None

    @property
    def is_commit(self) -> bool:
        return self.control_type == ControlType.COMMIT

    @property
    def is_abort(self) -> bool:
        return self.control_type == ControlType.ABORT


class DecodedRecord(NamedTuple):
    """A record with absolute offset and timestamp, whatever format it came from.

    ``timestamp_type`` is -1 for magic-0 messages (which have no timestamp;
    ``timestamp_ms`` is then -1 too). ``control`` is set only for records of
    control batches.
    """

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_type: int = TimestampType.CREATE_TIME
    control: ControlRecord | None = None


_new_tuple = tuple.__new__

# --------------------------------------------------------------------------- header parsing

_header_unpack = HEADER_STRUCT.unpack_from
_int32_unpack = _INT32.unpack_from


def parse_batch_header(buf: BytesLike, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte v2 header at ``pos`` (magic and batchLength sanity-checked)."""
    if pos < 0 or len(buf) - pos < BATCH_HEADER_BYTES:
        raise ProtocolError(
            f"record batch header needs {BATCH_HEADER_BYTES} bytes, "
            f"{max(0, len(buf) - pos)} available at position {pos}"
        )
    fields = _header_unpack(buf, pos)
    if fields[3] != MAGIC_V2:
        raise ProtocolError(f"record batch at position {pos} has magic {fields[3]}, expected 2")
    if fields[1] < MIN_BATCH_LENGTH_BYTES:
        raise ProtocolError(
            f"record batch at position {pos} has batchLength {fields[1]}, below the minimum {MIN_BATCH_LENGTH_BYTES}"
        )
    return _new_tuple(BatchHeader, fields)


def _truncated_tail_or_corrupt(buf: BytesLike, pos: int, allowed_magics: tuple[int, ...], min_length: int) -> None:
    """Raise if an incomplete trailing entry already shows it is not a valid prefix.

    A fetch response legitimately ends in a partial batch when the broker cut
    it at max_bytes, so only positive evidence of corruption is an error.
    """
    remaining = len(buf) - pos
    if remaining >= LOG_OVERHEAD_BYTES:
        (length,) = _int32_unpack(buf, pos + BATCH_LENGTH_OFFSET)
        if length < min_length:
            raise ProtocolError(f"entry at position {pos} has impossible length {length}")
    if remaining > MAGIC_OFFSET:
        magic = buf[pos + MAGIC_OFFSET]
        if magic not in allowed_magics:
            raise ProtocolError(f"entry at position {pos} has unsupported magic {magic}")


def iter_batches(buf: BytesLike, *, allow_truncated_tail: bool = False) -> Iterator[tuple[int, int, BatchHeader]]:
    """Walk concatenated v2 batches by their headers; yield ``(position, size_bytes, header)``.

    Records are neither decoded nor CRC-checked (see :func:`validate_batch`).
    A trailing incomplete batch raises ProtocolError unless
    ``allow_truncated_tail`` is set, in which case iteration just stops before
    it — the behaviour a consumer wants for fetch responses cut at max_bytes.
    Batches yielded before the error are already valid headers.
    """
    end = len(buf)
    pos = 0
    unpack = _header_unpack
    make = _new_tuple
    header_cls = BatchHeader
    min_length = MIN_BATCH_LENGTH_BYTES
    while pos < end:
        if end - pos < BATCH_HEADER_BYTES:
            _truncated_tail_or_corrupt(buf, pos, (MAGIC_V2,), min_length)
            if allow_truncated_tail:
                return
            raise ProtocolError(f"truncated record batch header at position {pos}")
        fields = unpack(buf, pos)
        length = fields[1]
        if length < min_length:
            raise ProtocolError(f"record batch at position {pos} has batchLength {length}, below {min_length}")
        if fields[3] != MAGIC_V2:
            raise ProtocolError(f"record batch at position {pos} has magic {fields[3]}, expected 2")
        size = length + LOG_OVERHEAD_BYTES
        if size > end - pos:
            if allow_truncated_tail:
                return
            raise ProtocolError(f"truncated record batch at position {pos}: needs {size} bytes, {end - pos} available")
        yield pos, size, make(header_cls, fields)
        pos += size


def split_complete_batches(buf: BytesLike) -> tuple[int, bool]:
    """Return ``(complete_bytes, truncated)`` for a buffer of v2 batches.

    ``complete_bytes`` is the length of the prefix made of whole batches;
    ``truncated`` says whether incomplete bytes follow it. Corruption that is
    visible in the headers still raises ProtocolError.
    """
    complete_bytes = 0
    for pos, size, _ in iter_batches(buf, allow_truncated_tail=True):
        complete_bytes = pos + size
    return complete_bytes, complete_bytes < len(buf)


def _check_batch(
    buf: BytesLike, pos: int, size: int | None, verify_crc: bool, require_contiguous_offsets: bool
) -> BatchHeader:
    header = parse_batch_header(buf, pos)
    declared_bytes = header[1] + LOG_OVERHEAD_BYTES
    if size is None:
        size = declared_bytes
    elif size != declared_bytes:
        raise ProtocolError(f"record batch at position {pos} declares {declared_bytes} bytes but occupies {size}")
    if size > len(buf) - pos:
        raise ProtocolError(f"truncated record batch at position {pos}: needs {size} bytes, {len(buf) - pos} available")
    attributes = header[5]
    if attributes & CODEC_MASK > CompressionType.ZSTD:
        raise ProtocolError(f"record batch at position {pos} uses unknown compression codec {attributes & CODEC_MASK}")
    last_offset_delta = header[6]
    records_count = header[12]
    if last_offset_delta < 0:
        raise ProtocolError(f"record batch at position {pos} has negative lastOffsetDelta {last_offset_delta}")
    if records_count < 0:
        raise ProtocolError(f"record batch at position {pos} has negative recordsCount {records_count}")
    if not attributes & CODEC_MASK and records_count * _MIN_RECORD_BYTES > size - BATCH_HEADER_BYTES:
        raise ProtocolError(
            f"record batch at position {pos} claims {records_count} records in {size - BATCH_HEADER_BYTES} bytes"
        )
    if require_contiguous_offsets and (records_count == 0 or records_count != last_offset_delta + 1):
        raise ProtocolError(
            f"record batch at position {pos} has recordsCount {records_count} but lastOffsetDelta {last_offset_delta}"
        )
    if verify_crc:
        actual_crc = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])
        if actual_crc != header[4]:
            raise ProtocolError(
                f"record batch at position {pos} fails its CRC32C check "
                f"(stored {header[4]:#010x}, computed {actual_crc:#010x})"
            )
    return header


def validate_batch(
    buf: BytesLike,
    pos: int = 0,
    size: int | None = None,
    *,
    require_contiguous_offsets: bool = False,
) -> BatchHeader:
    """Batch-level validation for the produce path; returns the parsed header.

    Checks magic, that batchLength agrees with ``size`` (when given) and fits
    in ``buf``, a known codec, non-negative lastOffsetDelta and recordsCount, a
    plausible recordsCount for uncompressed batches, and the CRC32C. Records
    are not decoded. ``require_contiguous_offsets`` additionally demands
    ``recordsCount == lastOffsetDelta + 1 > 0``, which Kafka requires of
    batches fresh from a producer (compaction later breaks it legitimately).
    """
    return _check_batch(buf, pos, size, True, require_contiguous_offsets)


# --------------------------------------------------------------------------- in-place patching


def _batch_end(buf, pos: int) -> int:
    if pos < 0 or len(buf) - pos < BATCH_HEADER_BYTES:
        raise ValueError(f"no record batch header at position {pos}")
    (length,) = _int32_unpack(buf, pos + BATCH_LENGTH_OFFSET)
    end = pos + LOG_OVERHEAD_BYTES + length
    if length < MIN_BATCH_LENGTH_BYTES or end > len(buf):
        raise ValueError(f"record batch at position {pos} does not fit in the buffer")
    return end


def update_crc(buf: bytearray, pos: int = 0) -> int:
    """Recompute and store the CRC of the batch at ``pos``; return it."""
    end = _batch_end(buf, pos)
    crc = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end])
    _UINT32.pack_into(buf, pos + CRC_OFFSET, crc)
    return crc


def patch_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Assign the batch's baseOffset in place (outside the CRC, so nothing else changes)."""
    _batch_end(buf, pos)
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def patch_partition_leader_epoch(buf: bytearray, pos: int, partition_leader_epoch: int) -> None:
    """Stamp the leader epoch in place; Kafka keeps it outside the CRC precisely for this."""
    _batch_end(buf, pos)
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def patch_log_append_time(buf: bytearray, pos: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` as maxTimestamp, and fix the CRC.

    Readers take every record's timestamp from maxTimestamp in such batches,
    so no record needs rewriting. A no-op when already stamped identically.
    """
    end = _batch_end(buf, pos)
    (attributes,) = _INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    (max_timestamp_ms,) = _INT64.unpack_from(buf, pos + MAX_TIMESTAMP_OFFSET)
    if attributes & TIMESTAMP_TYPE_MASK and max_timestamp_ms == timestamp_ms:
        return
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]))


# --------------------------------------------------------------------------- encoding


def _write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a zigzag varint (valid for both varint and varlong fields)."""
    zigzag = (value << 1) ^ (value >> 63)
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def _write_nullable_bytes(out: bytearray, data) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
    else:
        _write_varint(out, len(data))
        out += data


def _encode_record(
    out: bytearray,
    attributes: int,
    timestamp_delta: int,
    offset_delta: int,
    key,
    value,
    headers,
) -> None:
    body = bytearray()
    body.append(attributes & 0xFF)
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    _write_nullable_bytes(body, key)
    _write_nullable_bytes(body, value)
    _write_varint(body, len(headers))
    for header_key, header_value in headers:
        if not isinstance(header_key, str):
            raise TypeError(f"header key must be str, not {type(header_key).__name__}")
        encoded_key = header_key.encode("utf-8")
        _write_varint(body, len(encoded_key))
        body += encoded_key
        _write_nullable_bytes(body, header_value)
    _write_varint(out, len(body))
    out += body


def _check_bytes(name: str, data) -> None:
    if data is not None and not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"record {name} must be bytes or None, not {type(data).__name__}")


def build_batch(
    records: Iterable[Record | tuple],
    *,
    base_offset: int = 0,
    codec: int = CompressionType.NONE,
    timestamp_type: int = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    base_timestamp_ms: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode one v2 record batch.

    ``records`` items are :class:`Record` objects (offset/timestamp already
    relative) or tuples ``(key, value[, headers[, timestamp_ms]])`` whose
    offset delta is their index in ``records`` and whose absolute timestamp
    (missing or None = NO_TIMESTAMP, -1) is made relative to the base.

    ``base_timestamp_ms`` defaults to the first tuple's timestamp (as Java's
    producer does), or 0 if only Record objects are given. lastOffsetDelta,
    maxTimestamp, recordsCount, batchLength and the CRC are computed.
    Offset deltas must strictly increase. At least one record is required.
    """
    items = list(records)
    if not items:
        raise ValueError("a record batch needs at least one record")
    if base_timestamp_ms is None:
        base_timestamp_ms = 0
        for item in items:
            if not isinstance(item, Record):
                base_timestamp_ms = item[3] if len(item) > 3 and item[3] is not None else NO_TIMESTAMP
                break

    body = bytearray()
    last_offset_delta = -1
    max_timestamp_ms = None
    for index, item in enumerate(items):
        if isinstance(item, Record):
            offset_delta = item.offset_delta
            timestamp_delta = item.timestamp_delta
            key, value, headers, attributes = item.key, item.value, item.headers, item.attributes
            timestamp_ms = base_timestamp_ms + timestamp_delta
        else:
            if not 2 <= len(item) <= 4:
                raise ValueError("record tuples are (key, value[, headers[, timestamp_ms]])")
            key, value = item[0], item[1]
            headers = item[2] if len(item) > 2 and item[2] is not None else ()
            timestamp_ms = item[3] if len(item) > 3 and item[3] is not None else NO_TIMESTAMP
            offset_delta = index
            timestamp_delta = timestamp_ms - base_timestamp_ms
            attributes = 0
        _check_bytes("key", key)
        _check_bytes("value", value)
        if offset_delta <= last_offset_delta or offset_delta > _INT32_MAX:
            raise ValueError(f"offset deltas must strictly increase within int32, got {offset_delta}")
        if not _INT64_MIN <= timestamp_delta <= _INT64_MAX:
            raise ValueError(f"timestamp delta {timestamp_delta} does not fit in int64")
        last_offset_delta = offset_delta
        if max_timestamp_ms is None or timestamp_ms > max_timestamp_ms:
            max_timestamp_ms = timestamp_ms
        _encode_record(body, attributes, timestamp_delta, offset_delta, key, value, headers)

    if codec != CompressionType.NONE:
        body = compress(codec, body, level=compression_level)
    attributes = (
        (codec & CODEC_MASK)
        | (TIMESTAMP_TYPE_MASK if timestamp_type == TimestampType.LOG_APPEND_TIME else 0)
        | (TRANSACTIONAL_MASK if is_transactional else 0)
        | (CONTROL_MASK if is_control else 0)
    )
    out = bytearray(BATCH_HEADER_BYTES)
    out += body
    HEADER_STRUCT.pack_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD_BYTES,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp_ms,
        max_timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence,
        len(items),
    )
    _UINT32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_control_batch(
    control_type: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    key_version: int = 0,
    marker_version: int = 0,
) -> bytes:
    """Encode a transaction marker batch (one ABORT or COMMIT control record).

    Markers are transactional control batches without a sequence, as the
    transaction coordinator writes them.
    """
    record = Record(
        offset_delta=0,
        timestamp_delta=0,
        key=_CONTROL_KEY.pack(key_version, control_type),
        value=_TXN_MARKER_VALUE.pack(marker_version, coordinator_epoch),
        headers=[],
    )
    return build_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
        base_timestamp_ms=timestamp_ms,
    )


def parse_control_record(key: bytes | None, value: bytes | None) -> ControlRecord:
    """Interpret a control record's key (version, type) and, for markers, its value."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise ProtocolError("control record key must hold int16 version and int16 type")
    key_version, control_type = _CONTROL_KEY.unpack_from(key)
    if key_version < 0:
        raise ProtocolError(f"control record key has negative version {key_version}")
    if control_type not in (ControlType.ABORT, ControlType.COMMIT):
        return ControlRecord(key_version, control_type, None, None)
    if value is None or len(value) < _TXN_MARKER_VALUE.size:
        raise ProtocolError("transaction marker value must hold int16 version and int32 coordinator epoch")
    marker_version, coordinator_epoch = _TXN_MARKER_VALUE.unpack_from(value)
    if marker_version < 0:
        raise ProtocolError(f"transaction marker has negative version {marker_version}")
    return ControlRecord(key_version, control_type, marker_version, coordinator_epoch)


def first_control_record(buf: BytesLike, pos: int = 0) -> ControlRecord | None:
    """The first record of the control batch at ``pos``, parsed (a transaction
    marker's type and coordinator epoch); None when the batch holds no record
    (the log cleaner leaves such headers). An uncompressed batch (markers always
    are) is read in place without decoding the rest; a compressed one is
    decoded. The CRC is not checked: callers have checked it or trust the log."""
    header = parse_batch_header(buf, pos)
    if not header.is_control:
        raise ProtocolError(f"batch at offset {header.base_offset} is not a control batch")
    if header.records_count == 0:
        return None
    end = pos + header.batch_length + LOG_OVERHEAD_BYTES
    if len(buf) < end:
        raise ProtocolError(f"control batch at offset {header.base_offset} is truncated")
    if header.codec != CompressionType.NONE:
        _, records = decode_batch_records(buf, pos, verify_crc=False)
        return records[0].control if records else None
    try:
        at = pos + BATCH_HEADER_BYTES
        _, at = read_varint(buf, at)  # record length
        at += 1  # attributes
        _, at = read_varint(buf, at)  # timestamp delta
        _, at = read_varint(buf, at)  # offset delta
        key_length, at = read_varint(buf, at)
        key = None
        if key_length >= 0:
            key = bytes(buf[at : at + key_length])
            at += key_length
        value_length, at = read_varint(buf, at)
        value = None
        if value_length >= 0:
            value = bytes(buf[at : at + value_length])
            at += value_length
    except IndexError:
        raise ProtocolError(f"control batch at offset {header.base_offset} ends inside its first record") from None
    if at > end:
        raise ProtocolError(f"the first record of control batch at offset {header.base_offset} runs past the batch")
    return parse_control_record(key, value)


# --------------------------------------------------------------------------- v2 decoding


def read_varint(data: BytesLike, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``: (value, position after it). Hot loops inline the one-byte case."""
    result = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift >= 70:
            raise ProtocolError("varint longer than 10 bytes")


def decode_record_headers(
    data: BytesLike, pos: int, record_end: int, header_count: int
) -> tuple[list[tuple[str, bytes | None]], int]:
    """The ``header_count`` headers of a v2 record starting at ``pos``, and the
    position after them; none may run past ``record_end``."""
    # Each header takes at least two bytes (two length varints).
    if header_count < 0 or header_count * 2 > record_end - pos:
        raise ProtocolError(f"invalid record header count {header_count}")
    headers = []
    for _ in range(header_count):
        header_key_length, pos = read_varint(data, pos)
        field_end = pos + header_key_length
        if header_key_length < 0 or field_end > record_end:
            raise ProtocolError(f"invalid record header key length {header_key_length}")
        header_key = bytes(data[pos:field_end]).decode("utf-8")
        pos = field_end
        header_value_length, pos = read_varint(data, pos)
        if header_value_length >= 0:
            field_end = pos + header_value_length
            if field_end > record_end:
                raise ProtocolError("record header value runs past the end of its record")
            header_value = bytes(data[pos:field_end])
            pos = field_end
        elif header_value_length == -1:
            header_value = None
        else:
            raise ProtocolError(f"invalid record header value length {header_value_length}")
        headers.append((header_key, header_value))
    return headers, pos


def _decode_v2_records(data: bytes, header: BatchHeader) -> list[DecodedRecord]:
    count = header[12]
    end = len(data)
    if count * _MIN_RECORD_BYTES > end:
        raise ProtocolError(f"record batch claims {count} records in {end} bytes of record data")
    base_offset = header[0]
    base_timestamp_ms = header[7]
    timestamp_type = (header[5] & TIMESTAMP_TYPE_MASK) >> 3
    # LogAppendTime batches report the broker's stamp for every record.
    fixed_timestamp_ms = header[8] if timestamp_type else None
    new = _new_tuple
    record_cls = DecodedRecord
    records = []
    append = records.append
    pos = 0
    # The one-byte varint case is inlined everywhere below: it is by far the
    # common one and avoids a function call per field.
    try:
        for _ in range(count):
            byte = data[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                length, pos = read_varint(data, pos)
            record_end = pos + length
            if length < 6 or record_end > end:
                raise ProtocolError(f"record length {length} at position {pos} does not fit the batch")
            pos += 1  # record attributes: unused by every Kafka version so far

            byte = data[pos]
            if byte < 0x80:
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                timestamp_delta, pos = read_varint(data, pos)

            byte = data[pos]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                offset_delta, pos = read_varint(data, pos)

            byte = data[pos]
            if byte < 0x80:
                key_length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                key_length, pos = read_varint(data, pos)
            if key_length >= 0:
                field_end = pos + key_length
                if field_end > record_end:
                    raise ProtocolError("record key runs past the end of its record")
                key = data[pos:field_end]
                pos = field_end
            elif key_length == -1:
                key = None
            else:
                raise ProtocolError(f"invalid record key length {key_length}")

            byte = data[pos]
            if byte < 0x80:
                value_length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                value_length, pos = read_varint(data, pos)
            if value_length >= 0:
                field_end = pos + value_length
                if field_end > record_end:
                    raise ProtocolError("record value runs past the end of its record")
                value = data[pos:field_end]
                pos = field_end
            elif value_length == -1:
                value = None
            else:
                raise ProtocolError(f"invalid record value length {value_length}")

            byte = data[pos]
            if byte < 0x80:
                header_count = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                header_count, pos = read_varint(data, pos)
            if header_count:
                headers, pos = decode_record_headers(data, pos, record_end, header_count)
            else:
                headers = []

            if pos != record_end:
                raise ProtocolError(f"record declares {length} bytes but its fields take {length + pos - record_end}")
            append(
                new(
                    record_cls,
                    (
                        base_offset + offset_delta,
                        base_timestamp_ms + timestamp_delta if fixed_timestamp_ms is None else fixed_timestamp_ms,
                        key,
                        value,
                        headers,
                        timestamp_type,
                        None,
                    ),
                )
            )
    except IndexError:
        raise ProtocolError("record runs past the end of the batch") from None
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"record header key is not valid UTF-8: {exc}") from None
    if pos != end:
        raise ProtocolError(f"{end - pos} bytes left over after the batch's {count} records")
    return records


def decode_batch_records(
    buf: BytesLike,
    pos: int = 0,
    *,
    verify_crc: bool = True,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
) -> tuple[BatchHeader, list[DecodedRecord]]:
    """Fully decode the v2 batch at ``pos``: header, decompression, every record.

    Offsets and timestamps in the result are absolute. Records of control
    batches carry a parsed :class:`ControlRecord` in ``control``. The batch
    must be complete; its recordsCount must match the records present and each
    record's length its fields. ``max_output_bytes`` bounds decompression.
    """
    header, data = batch_records_data(buf, pos, verify_crc=verify_crc, max_output_bytes=max_output_bytes)
    records = _decode_v2_records(data, header)
    if header[5] & CONTROL_MASK:
        records = [record._replace(control=parse_control_record(record.key, record.value)) for record in records]
    return header, records


def batch_records_data(
    buf: BytesLike,
    pos: int = 0,
    *,
    verify_crc: bool = True,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
) -> tuple[BatchHeader, bytes]:
    """The checked header of the v2 batch at ``pos`` and its records' bytes,
    decompressed (``max_output_bytes`` bounds that), not yet decoded."""
    header = _check_batch(buf, pos, None, verify_crc, False)
    start = pos + BATCH_HEADER_BYTES
    end = pos + header[1] + LOG_OVERHEAD_BYTES
    codec = header[5] & CODEC_MASK
    if codec == CompressionType.NONE:
        return header, bytes(memoryview(buf)[start:end])
    return header, decompress(codec, memoryview(buf)[start:end], max_output_bytes=max_output_bytes)


def _skip_long_varint(data: bytes, pos: int) -> int:
    """The position after the varint at ``pos`` that the scan's inlined cases did not cover."""
    return read_varint(data, pos)[1]


def scan_keys_values(data: bytes, count: int) -> list[tuple[int, int, int, int]]:
    """Where the key and value of each of the ``count`` records in ``data``
    (a batch's records, decompressed: :func:`batch_records_data`) lie:
    ``(key_position, key_length, value_position, value_length)`` per record,
    in order, a length of -1 for a null key or value.

    Accepts and refuses exactly the bytes :func:`decode_batch_records` does
    (ProtocolError) but decodes nothing else: timestamp and offset deltas are
    skipped and headers only checked. The one- and two-byte varints of
    records up to 8 KiB are inlined (a call per field would double the cost).
    """
    end = len(data)
    if count * _MIN_RECORD_BYTES > end:
        raise ProtocolError(f"record batch claims {count} records in {end} bytes of record data")
    spans = []
    append = spans.append
    skip_varint = _skip_long_varint
    pos = 0
    try:
        for _ in range(count):
            byte = data[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = read_varint(data, pos)
            record_end = pos + length
            if length < 6 or record_end > end:
                raise ProtocolError(f"record length {length} at position {pos} does not fit the batch")
            # Attributes (one byte), then the timestamp and offset deltas, skipped.
            pos += 1
            if data[pos] < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                pos += 2
            else:
                pos = skip_varint(data, pos)
            if data[pos] < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                pos += 2
            else:
                pos = skip_varint(data, pos)

            byte = data[pos]
            if byte < 0x80:
                key_length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                key_length, pos = read_varint(data, pos)
            key_position = pos
            if key_length >= 0:
                pos += key_length
                if pos > record_end:
                    raise ProtocolError("record key runs past the end of its record")
            elif key_length != -1:
                raise ProtocolError(f"invalid record key length {key_length}")

            byte = data[pos]
            if byte < 0x80:
                value_length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (byte & 0x7F) | (data[pos + 1] << 7)
                value_length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                value_length, pos = read_varint(data, pos)
            value_position = pos
            if value_length >= 0:
                pos += value_length
                if pos > record_end:
                    raise ProtocolError("record value runs past the end of its record")
            elif value_length != -1:
                raise ProtocolError(f"invalid record value length {value_length}")

            if data[pos] == 0:  # no headers: the zigzag varint 0
                pos += 1
            else:
                header_count, pos = read_varint(data, pos)
                # Checked as the full decoder checks them (UTF-8 keys included), then dropped.
                pos = decode_record_headers(data, pos, record_end, header_count)[1]
            if pos != record_end:
                raise ProtocolError(f"record declares {length} bytes but its fields take {length + pos - record_end}")
            append((key_position, key_length, value_position, value_length))
    except IndexError:
        raise ProtocolError("record runs past the end of the batch") from None
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"record header key is not valid UTF-8: {exc}") from None
    if pos != end:
        raise ProtocolError(f"{end - pos} bytes left over after the batch's {count} records")
    return spans


# --------------------------------------------------------------------------- legacy decoding


def _parse_legacy_message(buf: BytesLike, pos: int, size: int, verify_crc: bool):
    """Parse one magic 0/1 log entry spanning ``[pos, pos + size)``.

    Returns ``(offset, magic, attributes, timestamp_ms, key, value)``.
    """
    end = pos + size
    magic = buf[pos + MAGIC_OFFSET]
    if size - LOG_OVERHEAD_BYTES < _LEGACY_MIN_MESSAGE_BYTES[magic]:
        raise ProtocolError(f"magic {magic} message at position {pos} is too short ({size} bytes)")
    if magic == MAGIC_V0:
        offset, _, stored_crc, _, attributes = _LEGACY_V0.unpack_from(buf, pos)
        timestamp_ms = NO_TIMESTAMP
        field_pos = pos + _LEGACY_V0.size
    else:
        offset, _, stored_crc, _, attributes, timestamp_ms = _LEGACY_V1.unpack_from(buf, pos)
        field_pos = pos + _LEGACY_V1.size
    (key_length,) = _int32_unpack(buf, field_pos)
    field_pos += 4
    if key_length == -1:
        key = None
    elif 0 <= key_length <= end - field_pos - 4:
        key = bytes(buf[field_pos : field_pos + key_length])
        field_pos += key_length
    else:
        raise ProtocolError(f"message at position {pos} has invalid key length {key_length}")
    (value_length,) = _int32_unpack(buf, field_pos)
    field_pos += 4
    if value_length == -1:
        value = None
    elif 0 <= value_length <= end - field_pos:
        value = bytes(buf[field_pos : field_pos + value_length])
        field_pos += value_length
    else:
        raise ProtocolError(f"message at position {pos} has invalid value length {value_length}")
    if field_pos != end:
        raise ProtocolError(f"message at position {pos} has {end - field_pos} unexpected trailing bytes")
    if verify_crc:
        actual_crc = zlib.crc32(memoryview(buf)[pos + MAGIC_OFFSET : end])
        if actual_crc != stored_crc:
            raise ProtocolError(
                f"message at position {pos} fails its CRC32 check "
                f"(stored {stored_crc:#010x}, computed {actual_crc:#010x})"
            )
    return offset, magic, attributes, timestamp_ms, key, value


def _decode_legacy_entry(
    buf: BytesLike, pos: int, size: int, verify_crc: bool, max_output_bytes: int, out: list
) -> None:
    offset, magic, attributes, timestamp_ms, key, value = _parse_legacy_message(buf, pos, size, verify_crc)
    timestamp_type = (attributes & TIMESTAMP_TYPE_MASK) >> 3 if magic else TimestampType.NO_TIMESTAMP_TYPE
    codec = attributes & CODEC_MASK
    if not codec:
        out.append(_new_tuple(DecodedRecord, (offset, timestamp_ms, key, value, [], timestamp_type, None)))
        return
    if codec > CompressionType.LZ4:
        raise ProtocolError(f"magic {magic} message at position {pos} uses unsupported codec {codec}")
    if value is None:
        raise ProtocolError(f"compressed message at position {pos} has a null value")
    if magic == MAGIC_V0 and codec == CompressionType.LZ4:
        value = repair_kafka08_lz4_header(value)
    inner = decompress(codec, value, max_output_bytes=max_output_bytes)

    inner_messages = []
    inner_pos = 0
    inner_end = len(inner)
    while inner_pos < inner_end:
        if inner_end - inner_pos < LOG_OVERHEAD_BYTES + 5:
            raise ProtocolError("truncated message inside a compressed wrapper")
        (length,) = _int32_unpack(inner, inner_pos + BATCH_LENGTH_OFFSET)
        inner_size = length + LOG_OVERHEAD_BYTES
        if length < 0 or inner_size > inner_end - inner_pos:
            raise ProtocolError("truncated message inside a compressed wrapper")
        if inner[inner_pos + MAGIC_OFFSET] != magic:
            raise ProtocolError(
                f"inner message magic {inner[inner_pos + MAGIC_OFFSET]} differs from wrapper magic {magic}"
            )
        message = _parse_legacy_message(inner, inner_pos, inner_size, verify_crc)
        if message[2] & CODEC_MASK:
            raise ProtocolError("nested compression inside a compressed message")
        inner_messages.append(message)
        inner_pos += inner_size
    if not inner_messages:
        raise ProtocolError(f"compressed message at position {pos} wraps no messages")

    # v1 wrappers carry the absolute offset of their last inner message and
    # the inner offsets are relative; v0 inner offsets are already absolute.
    offset_shift = offset - inner_messages[-1][0] if magic == MAGIC_V1 else 0
    use_wrapper_time = magic == MAGIC_V1 and timestamp_type == TimestampType.LOG_APPEND_TIME
    for inner_offset, _, _, inner_timestamp_ms, inner_key, inner_value in inner_messages:
        out.append(
            _new_tuple(
                DecodedRecord,
                (
                    inner_offset + offset_shift,
                    timestamp_ms if use_wrapper_time else inner_timestamp_ms,
                    inner_key,
                    inner_value,
                    [],
                    timestamp_type,
                    None,
                ),
            )
        )


def decode_records(
    buf: BytesLike,
    *,
    verify_crc: bool = True,
    allow_truncated_tail: bool = False,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
) -> list[DecodedRecord]:
    """Decode every record in a buffer of v2 batches and/or legacy message sets.

    Control records are included (with ``control`` set) so callers decide
    whether to filter them. A truncated trailing entry raises unless
    ``allow_truncated_tail`` is set, in which case it is ignored.
    ``max_output_bytes`` bounds each decompression separately.
    """
    out: list[DecodedRecord] = []
    end = len(buf)
    pos = 0
    while pos < end:
        remaining = end - pos
        if remaining <= MAGIC_OFFSET:
            _truncated_tail_or_corrupt(buf, pos, (MAGIC_V0, MAGIC_V1, MAGIC_V2), _LEGACY_MIN_MESSAGE_BYTES[0])
            if allow_truncated_tail:
                break
            raise ProtocolError(f"truncated entry at position {pos}")
        (length,) = _int32_unpack(buf, pos + BATCH_LENGTH_OFFSET)
        magic = buf[pos + MAGIC_OFFSET]
        if magic > MAGIC_V2:
            raise ProtocolError(f"entry at position {pos} has unsupported magic {magic}")
        minimum_length = MIN_BATCH_LENGTH_BYTES if magic == MAGIC_V2 else _LEGACY_MIN_MESSAGE_BYTES[magic]
        if length < minimum_length:
            raise ProtocolError(f"magic {magic} entry at position {pos} has impossible length {length}")
        size = length + LOG_OVERHEAD_BYTES
        if size > remaining:
            if allow_truncated_tail:
                break
            raise ProtocolError(f"truncated entry at position {pos}: needs {size} bytes, {remaining} available")
        if magic == MAGIC_V2:
            _, records = decode_batch_records(buf, pos, verify_crc=verify_crc, max_output_bytes=max_output_bytes)
            out.extend(records)
        else:
            _decode_legacy_entry(buf, pos, size, verify_crc, max_output_bytes, out)
        pos += size
    return out
