"""Record batch layer: round trips, golden bytes, kafka-python cross-checks, patching."""

from __future__ import annotations

import struct
import zlib

import pytest
from kafka.codec import lz4_encode_old_kafka, snappy_encode
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from protocol.compression import (
    XERIAL_BLOCK_BYTES,
    XERIAL_MAGIC,
    CompressionType,
    compress,
    decompress,
    repair_kafka08_lz4_header,
)
from protocol.exceptions import ProtocolError
from protocol.records import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    BATCH_HEADER_BYTES,
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    HEADER_STRUCT,
    LAST_OFFSET_DELTA_OFFSET,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    ControlType,
    DecodedRecord,
    Record,
    TimestampType,
    build_batch,
    build_control_batch,
    decode_batch_records,
    decode_records,
    iter_batches,
    parse_batch_header,
    patch_base_offset,
    patch_log_append_time,
    patch_partition_leader_epoch,
    split_complete_batches,
    update_crc,
    validate_batch,
)

ALL_CODECS = list(CompressionType)
TS_MS = 1_700_000_000_000


def crc32c_bitwise(data: bytes) -> int:
    """Reference CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), one bit at a time."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def sample_records() -> list[tuple]:
    return [
        (b"key-0", b"value-0", [], TS_MS),
        (None, b"null key", [("h1", b"v1")], TS_MS + 5),
        (b"null value", None, [("h-null", None)], TS_MS + 3),
        (b"empty value", b"", [("a", b""), ("\u00e9t\u00e9", b"\x00\xff")], TS_MS + 100),
        (None, None, [], TS_MS - 7),
        (b"", b"x" * 300, [], TS_MS + 1),  # 300 forces multi-byte length varints
    ]


def as_tuples(records: list[DecodedRecord]) -> list[tuple]:
    return [(r.offset, r.timestamp_ms, r.key, r.value, list(r.headers)) for r in records]


def expected_tuples(records: list[tuple], base_offset: int) -> list[tuple]:
    return [(base_offset + i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(records)]


def kafka_python_tuples(buf: bytes) -> list[tuple]:
    out = []
    memory = MemoryRecords(bytes(buf))
    while memory.has_next():
        batch = memory.next_batch()
        if hasattr(batch, "validate_crc"):
            assert batch.validate_crc()
        for record in batch:
            out.append((record.offset, record.timestamp, record.key, record.value, list(record.headers)))
    return out


# --------------------------------------------------------------------------- layout / golden


def test_header_layout_constants():
    assert BATCH_HEADER_BYTES == HEADER_STRUCT.size == RECORDS_OFFSET == 61
    prefix_formats = [
        (BASE_OFFSET_OFFSET, ""),
        (BATCH_LENGTH_OFFSET, "q"),
        (PARTITION_LEADER_EPOCH_OFFSET, "qi"),
        (MAGIC_OFFSET, "qii"),
        (CRC_OFFSET, "qiib"),
        (ATTRIBUTES_OFFSET, "qiibI"),
        (LAST_OFFSET_DELTA_OFFSET, "qiibIh"),
        (BASE_TIMESTAMP_OFFSET, "qiibIhi"),
        (MAX_TIMESTAMP_OFFSET, "qiibIhiq"),
        (PRODUCER_ID_OFFSET, "qiibIhiqq"),
        (PRODUCER_EPOCH_OFFSET, "qiibIhiqqq"),
        (BASE_SEQUENCE_OFFSET, "qiibIhiqqqh"),
        (RECORDS_COUNT_OFFSET, "qiibIhiqqqhi"),
    ]
    for offset, fmt in prefix_formats:
        assert offset == struct.calcsize(">" + fmt)


def test_crc32c_reference_check_value():
    # The standard CRC-32C check value; proves the reference implementation below is right.
    assert crc32c_bitwise(b"123456789") == 0xE3069283


# One record, key=None, value=b"a", timestamp 1_700_000_000_000 (0x18BCFE56800), derived by hand:
#   record body = attributes 00, timestampDelta 00, offsetDelta 00, keyLength zigzag(-1)=01,
#                 valueLength zigzag(1)=02, value 61, headerCount 00       -> 7 bytes
#   record      = length zigzag(7)=0e + body                              -> 8 bytes
#   batchLength = 61 - 12 + 8 = 57 = 0x39
GOLDEN_BATCH = bytes.fromhex(
    "0000000000000000"  # baseOffset 0
    "00000039"  # batchLength 57
    "ffffffff"  # partitionLeaderEpoch -1
    "02"  # magic
    "965a94b1"  # crc (checked against the bitwise reference below)
    "0000"  # attributes: no codec, CreateTime
    "00000000"  # lastOffsetDelta
    "0000018bcfe56800"  # baseTimestamp
    "0000018bcfe56800"  # maxTimestamp
    "ffffffffffffffff"  # producerId -1
    "ffff"  # producerEpoch -1
    "ffffffff"  # baseSequence -1
    "00000001"  # recordsCount
    "0e00000001026100"  # the record
)


def test_golden_batch_bytes():
    assert crc32c_bitwise(GOLDEN_BATCH[ATTRIBUTES_OFFSET:]) == 0x965A94B1
    assert build_batch([(None, b"a", [], TS_MS)]) == GOLDEN_BATCH
    header, records = decode_batch_records(GOLDEN_BATCH)
    assert header.crc == 0x965A94B1
    assert header.size_bytes == len(GOLDEN_BATCH)
    assert records == [DecodedRecord(0, TS_MS, None, b"a", [], TimestampType.CREATE_TIME, None)]
    assert kafka_python_tuples(GOLDEN_BATCH) == [(0, TS_MS, None, b"a", [])]


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_round_trip_every_codec(codec):
    records = sample_records()
    buf = build_batch(records, base_offset=42, codec=codec)
    header, decoded = decode_batch_records(buf)
    assert header.codec == codec
    assert header.base_offset == 42
    assert header.records_count == len(records)
    assert header.last_offset_delta == len(records) - 1
    assert header.base_timestamp_ms == TS_MS
    assert header.max_timestamp_ms == TS_MS + 100
    assert as_tuples(decoded) == expected_tuples(records, 42)
    assert all(r.timestamp_type == TimestampType.CREATE_TIME and r.control is None for r in decoded)
    assert decode_records(buf) == decoded


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_round_trip_many_records(codec):
    records = [(str(i).encode(), bytes([i % 251]) * (i % 70), [("n", str(i).encode())], TS_MS + i) for i in range(2000)]
    buf = build_batch(records, codec=codec)
    header, decoded = decode_batch_records(buf)
    assert header.last_offset_delta == 1999
    assert as_tuples(decoded) == expected_tuples(records, 0)
    if codec != CompressionType.NONE:
        assert len(buf) < len(build_batch(records))


def test_record_objects_with_offset_gaps_and_negative_timestamp_delta():
    records = [
        Record(0, 0, b"a", b"1", []),
        Record(3, -10, None, b"2", [("k", None)]),
        Record(9, 25, b"c", None),
    ]
    buf = build_batch(records, base_offset=100, base_timestamp_ms=5000)
    header, decoded = decode_batch_records(buf)
    assert header.last_offset_delta == 9
    assert header.records_count == 3
    assert header.max_timestamp_ms == 5025
    assert as_tuples(decoded) == [
        (100, 5000, b"a", b"1", []),
        (103, 4990, None, b"2", [("k", None)]),
        (109, 5025, b"c", None, []),
    ]
    assert kafka_python_tuples(buf) == as_tuples(decoded)


def test_tuples_without_timestamp_use_no_timestamp():
    buf = build_batch([(b"k", b"v")])
    header, decoded = decode_batch_records(buf)
    assert header.base_timestamp_ms == header.max_timestamp_ms == -1
    assert decoded[0].timestamp_ms == -1


def test_producer_fields_and_flags():
    buf = build_batch(
        [(b"k", b"v", [], TS_MS)] * 3,
        producer_id=77,
        producer_epoch=3,
        base_sequence=2**31 - 2,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    header = validate_batch(buf, 0, len(buf), require_contiguous_offsets=True)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 2**31 - 2)
    assert header.partition_leader_epoch == 9
    assert header.is_transactional and not header.is_control
    assert header.last_offset == 2 and header.next_offset == 3
    assert header.last_sequence == 0  # sequences wrap past int32 max
    batch = DefaultRecordBatch(buf)
    assert batch.is_transactional and batch.producer_id == 77 and batch.last_sequence == 0


def test_build_rejects_bad_input():
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError):
        build_batch([Record(1, 0, None, b""), Record(1, 0, None, b"")])
    with pytest.raises(TypeError):
        build_batch([("str key", b"v")])
    with pytest.raises(TypeError):
        build_batch([(b"k", b"v", [(b"bytes header key", b"")])])


# --------------------------------------------------------------------------- kafka-python cross-checks


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_our_batches_decode_with_kafka_python(codec):
    records = sample_records()
    buf = build_batch(records, base_offset=7, codec=codec)
    batch = DefaultRecordBatch(buf)
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert kafka_python_tuples(buf) == expected_tuples(records, 7)


def build_with_kafka_python(codec, records):
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for offset, (key, value, headers, ts) in enumerate(records):
        assert builder.append(offset, timestamp=ts, key=key, value=value, headers=headers) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_kafka_python_batches_decode_with_ours(codec):
    # Compressible values, so kafka-python does not fall back to no compression.
    records = sample_records() + [(b"k%d" % i, b"payload " * 20, [("i", b"%d" % i)], TS_MS + i) for i in range(50)]
    buf = build_with_kafka_python(codec, records)
    header = validate_batch(buf, 0, len(buf), require_contiguous_offsets=True)
    assert header.codec == codec
    _, decoded = decode_batch_records(buf)
    assert as_tuples(decoded) == expected_tuples(records, 0)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_kafka_python_legacy_message_sets_decode_with_ours(magic, codec):
    entries = [(b"key-%d" % i, b"legacy value " * 5 + b"%d" % i) for i in range(10)]
    entries += [(None, b"null key"), (b"null value", None), (b"", b"")]
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for offset, (key, value) in enumerate(entries):
        assert builder.append(offset, timestamp=TS_MS + offset, key=key, value=value) is not None
    buf = bytearray(builder.build())
    last_offset = 500 + len(entries) - 1
    if codec and magic == 1:
        # A broker gives the v1 wrapper the absolute offset of its last inner message.
        struct.pack_into(">q", buf, 0, last_offset)
    decoded = decode_records(bytes(buf))
    if codec and magic == 1:
        expected_offsets = list(range(500, 500 + len(entries)))
    else:
        expected_offsets = list(range(len(entries)))  # v0 inner offsets are absolute
    assert [r.offset for r in decoded] == expected_offsets
    assert [(r.key, r.value) for r in decoded] == entries
    assert all(r.headers == [] for r in decoded)
    if magic == 0:
        assert all(r.timestamp_ms == -1 and r.timestamp_type == TimestampType.NO_TIMESTAMP_TYPE for r in decoded)
    else:
        assert [r.timestamp_ms for r in decoded] == [TS_MS + i for i in range(len(entries))]
        assert all(r.timestamp_type == TimestampType.CREATE_TIME for r in decoded)


def test_legacy_v1_log_append_time_wrapper_sets_inner_timestamps():
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 30)
    for offset in range(3):
        builder.append(offset, timestamp=TS_MS + offset, key=None, value=b"v" * 50)
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, 12)
    buf[17] |= 0x08  # LogAppendTime on the wrapper
    struct.pack_into(">q", buf, 18, 99_999)
    struct.pack_into(">I", buf, 12, zlib.crc32(buf[16:]))
    decoded = decode_records(bytes(buf))
    assert [(r.offset, r.timestamp_ms, r.timestamp_type) for r in decoded] == [(10, 99_999, 1), (11, 99_999, 1), (12, 99_999, 1)]


def test_mixed_legacy_and_v2_buffer():
    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 30)
    legacy.append(0, timestamp=TS_MS, key=b"old", value=b"message")
    v2 = build_batch([(b"new", b"batch", [("h", b"1")], TS_MS + 1)], base_offset=1, codec=CompressionType.ZSTD)
    decoded = decode_records(bytes(legacy.build()) + v2)
    assert as_tuples(decoded) == [(0, TS_MS, b"old", b"message", []), (1, TS_MS + 1, b"new", b"batch", [("h", b"1")])]


# --------------------------------------------------------------------------- control batches


@pytest.mark.parametrize("control_type", [ControlType.ABORT, ControlType.COMMIT])
def test_control_batch(control_type):
    buf = build_control_batch(
        control_type, producer_id=5, producer_epoch=2, coordinator_epoch=11, timestamp_ms=TS_MS, base_offset=30
    )
    header, decoded = decode_batch_records(buf)
    assert header.is_control and header.is_transactional
    assert header.base_sequence == -1 and header.records_count == 1
    (record,) = decoded
    assert record.offset == 30
    assert record.key == struct.pack(">hh", 0, control_type)
    assert record.value == struct.pack(">hi", 0, 11)
    assert record.control.control_type == control_type
    assert record.control.coordinator_epoch == 11
    assert record.control.is_commit == (control_type == ControlType.COMMIT)
    (kp_record,) = list(DefaultRecordBatch(buf))
    assert kp_record.type == control_type


def test_control_batch_with_malformed_key_is_rejected():
    buf = build_batch([(b"\x00", b"")], is_control=True, is_transactional=True)
    with pytest.raises(ProtocolError):
        decode_batch_records(buf)


# --------------------------------------------------------------------------- iteration and validation


def three_batches() -> list[bytes]:
    return [
        build_batch([(b"a", b"1", [], TS_MS)], base_offset=0),
        build_batch([(b"b", b"2", [], TS_MS), (b"c", b"3", [], TS_MS)], base_offset=1, codec=CompressionType.GZIP),
        build_batch([(None, b"4" * 100, [], TS_MS)], base_offset=3, codec=CompressionType.LZ4),
    ]


def test_iter_batches_walks_headers():
    batches = three_batches()
    buf = b"".join(batches)
    walked = list(iter_batches(buf))
    assert [(pos, size) for pos, size, _ in walked] == [
        (0, len(batches[0])),
        (len(batches[0]), len(batches[1])),
        (len(batches[0]) + len(batches[1]), len(batches[2])),
    ]
    assert [h.base_offset for _, _, h in walked] == [0, 1, 3]
    for pos, size, header in walked:
        assert validate_batch(buf, pos, size) == header
        assert parse_batch_header(buf, pos) == header
    assert list(iter_batches(b"")) == []
    assert split_complete_batches(buf) == (len(buf), False)


def test_iter_batches_truncated_tail():
    batches = three_batches()
    complete = batches[0] + batches[1]
    for cut in (1, 11, 12, 20, 60, 61, len(batches[2]) - 1):
        buf = complete + batches[2][:cut]
        with pytest.raises(ProtocolError):
            list(iter_batches(buf))
        assert [pos for pos, _, _ in iter_batches(buf, allow_truncated_tail=True)] == [0, len(batches[0])]
        assert split_complete_batches(buf) == (len(complete), True)
        assert len(decode_records(buf, allow_truncated_tail=True)) == 3
        with pytest.raises(ProtocolError):
            decode_records(buf)


def test_iter_batches_rejects_corrupt_headers_even_in_tail():
    batch = bytearray(three_batches()[0])
    bad_magic = bytearray(batch)
    bad_magic[MAGIC_OFFSET] = 1
    with pytest.raises(ProtocolError, match="magic"):
        list(iter_batches(bad_magic))
    with pytest.raises(ProtocolError, match="magic"):
        split_complete_batches(bytes(bad_magic[:30]))
    short_length = bytearray(batch)
    struct.pack_into(">i", short_length, BATCH_LENGTH_OFFSET, 10)
    with pytest.raises(ProtocolError):
        list(iter_batches(short_length, allow_truncated_tail=True))


def corrupt_and_recrc(buf: bytes, offset: int, fmt: str, value: int) -> bytearray:
    out = bytearray(buf)
    struct.pack_into(fmt, out, offset, value)
    update_crc(out, 0)
    return out


def test_validate_batch_errors():
    buf = build_batch([(b"k", b"v", [], TS_MS), (b"k2", b"v2", [], TS_MS)])
    assert validate_batch(buf).records_count == 2

    flipped = bytearray(buf)
    flipped[-1] ^= 0x01
    with pytest.raises(ProtocolError, match="CRC"):
        validate_batch(flipped)
    with pytest.raises(ProtocolError, match="declares"):
        validate_batch(buf, 0, len(buf) - 1)
    with pytest.raises(ProtocolError, match="truncated"):
        validate_batch(buf[:-1])
    with pytest.raises(ProtocolError, match="header"):
        validate_batch(buf[:60])
    bad_magic = bytearray(buf)
    bad_magic[MAGIC_OFFSET] = 3
    with pytest.raises(ProtocolError, match="magic"):
        validate_batch(bad_magic)
    with pytest.raises(ProtocolError, match="lastOffsetDelta"):
        validate_batch(corrupt_and_recrc(buf, LAST_OFFSET_DELTA_OFFSET, ">i", -1))
    with pytest.raises(ProtocolError, match="recordsCount"):
        validate_batch(corrupt_and_recrc(buf, RECORDS_COUNT_OFFSET, ">i", -1))
    with pytest.raises(ProtocolError, match="claims"):
        validate_batch(corrupt_and_recrc(buf, RECORDS_COUNT_OFFSET, ">i", 1000))
    with pytest.raises(ProtocolError, match="codec"):
        validate_batch(corrupt_and_recrc(buf, ATTRIBUTES_OFFSET, ">h", 5))
    gap = corrupt_and_recrc(buf, LAST_OFFSET_DELTA_OFFSET, ">i", 5)
    validate_batch(gap)  # compacted batches legitimately have gaps
    with pytest.raises(ProtocolError, match="recordsCount"):
        validate_batch(gap, require_contiguous_offsets=True)


def test_decode_checks_record_count_and_lengths():
    buf = build_batch([(b"k", b"v", [], TS_MS), (b"k2", b"v2", [], TS_MS)])
    with pytest.raises(ProtocolError, match="left over"):
        decode_batch_records(corrupt_and_recrc(buf, RECORDS_COUNT_OFFSET, ">i", 1))
    with pytest.raises(ProtocolError):
        decode_batch_records(corrupt_and_recrc(buf, RECORDS_COUNT_OFFSET, ">i", 3))
    bad_length = bytearray(buf)
    bad_length[RECORDS_OFFSET] += 2  # first record claims one more byte (zigzag)
    update_crc(bad_length)
    with pytest.raises(ProtocolError):
        decode_batch_records(bad_length)
    corrupted = bytearray(buf)
    corrupted[-1] ^= 0xFF
    with pytest.raises(ProtocolError, match="CRC"):
        decode_batch_records(corrupted)


def test_decode_rejects_invalid_utf8_header_key():
    buf = bytearray(build_batch([(None, b"v", [("ab", b"")], TS_MS)]))
    index = buf.rindex(b"ab")
    buf[index] = 0xFF
    update_crc(buf)
    with pytest.raises(ProtocolError, match="UTF-8"):
        decode_batch_records(buf)


# --------------------------------------------------------------------------- patching


def changed_positions(before: bytes, after: bytes) -> set[int]:
    return {i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b}


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.SNAPPY])
def test_patch_base_offset(codec):
    records = sample_records()
    original = build_batch(records, codec=codec)
    buf = bytearray(original)
    patch_base_offset(buf, 0, 0x0102030405060708)
    assert changed_positions(original, buf) <= set(range(BASE_OFFSET_OFFSET, BASE_OFFSET_OFFSET + 8))
    header = validate_batch(buf)
    assert header.base_offset == 0x0102030405060708
    assert kafka_python_tuples(buf) == expected_tuples(records, 0x0102030405060708)


def test_patch_base_offset_inside_a_larger_buffer():
    batches = three_batches()
    buf = bytearray(b"".join(batches))
    next_offset = 1000
    for pos, _, header in list(iter_batches(buf)):
        patch_base_offset(buf, pos, next_offset)
        next_offset += header.last_offset_delta + 1
    assert [r.offset for r in decode_records(buf)] == [1000, 1001, 1002, 1003]
    assert [r[0] for r in kafka_python_tuples(buf)] == [1000, 1001, 1002, 1003]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_patch_log_append_time(codec):
    records = sample_records()
    original = build_batch(records, codec=codec)
    buf = bytearray(original)
    append_time_ms = TS_MS + 10_000
    patch_log_append_time(buf, 0, append_time_ms)
    allowed = (
        set(range(CRC_OFFSET, CRC_OFFSET + 4))
        | set(range(ATTRIBUTES_OFFSET, ATTRIBUTES_OFFSET + 2))
        | set(range(MAX_TIMESTAMP_OFFSET, MAX_TIMESTAMP_OFFSET + 8))
    )
    assert changed_positions(original, buf) <= allowed
    header = validate_batch(buf)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.codec == codec
    assert header.max_timestamp_ms == append_time_ms
    assert header.base_timestamp_ms == TS_MS
    _, decoded = decode_batch_records(buf)
    assert all(r.timestamp_ms == append_time_ms and r.timestamp_type == 1 for r in decoded)
    assert [r[1] for r in kafka_python_tuples(buf)] == [append_time_ms] * len(records)
    assert DefaultRecordBatch(buf).timestamp_type == 1
    before = bytes(buf)
    patch_log_append_time(buf, 0, append_time_ms)
    assert bytes(buf) == before


def test_patch_partition_leader_epoch():
    original = build_batch(sample_records(), codec=CompressionType.ZSTD)
    buf = bytearray(original)
    patch_partition_leader_epoch(buf, 0, 12345)
    assert changed_positions(original, buf) <= set(range(PARTITION_LEADER_EPOCH_OFFSET, PARTITION_LEADER_EPOCH_OFFSET + 4))
    assert validate_batch(buf).partition_leader_epoch == 12345
    assert DefaultRecordBatch(buf).validate_crc()


def test_patch_rejects_positions_without_a_batch():
    buf = bytearray(build_batch([(None, b"v")]))
    with pytest.raises(ValueError):
        patch_base_offset(buf, 10, 1)
    with pytest.raises(ValueError):
        patch_log_append_time(buf[:-1], 0, 1)


# --------------------------------------------------------------------------- compression


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("size_bytes", [0, 1, 1000, 3 * XERIAL_BLOCK_BYTES + 17])
def test_compression_round_trip(codec, size_bytes):
    data = bytes((i * 7) % 256 for i in range(size_bytes))
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, data))) == data


def test_xerial_snappy_framing_layout():
    data = b"abc" * (XERIAL_BLOCK_BYTES // 2)  # 1.5 blocks of input
    framed = compress(CompressionType.SNAPPY, data)
    assert framed[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    pos = 16
    blocks = 0
    while pos < len(framed):
        (length,) = struct.unpack_from(">i", framed, pos)
        pos += 4 + length
        blocks += 1
    assert pos == len(framed) and blocks == 2
    assert framed == snappy_encode(data)  # kafka-python writes the same framing


def test_snappy_accepts_raw_blocks_as_librdkafka_sends():
    import snappy

    data = b"raw snappy " * 100
    assert decompress(CompressionType.SNAPPY, snappy.compress(data)) == data


def test_lz4_frame_flags_match_kafka():
    frame = compress(CompressionType.LZ4, b"x" * 1000)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flags = frame[4]
    assert flags & 0x20  # independent blocks: Kafka's reader refuses linked blocks
    assert not flags & 0x08  # no content size


def test_legacy_kafka08_lz4_header_repair():
    data = b"old kafka lz4 " * 100
    broken = lz4_encode_old_kafka(data)
    with pytest.raises(ProtocolError):
        decompress(CompressionType.LZ4, broken)
    assert decompress(CompressionType.LZ4, repair_kafka08_lz4_header(broken)) == data


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c != CompressionType.NONE])
def test_decompression_bomb_is_bounded(codec):
    bomb = compress(codec, bytes(4 * 1024 * 1024))
    assert len(decompress(codec, bomb, max_output_bytes=4 * 1024 * 1024)) == 4 * 1024 * 1024
    with pytest.raises(ProtocolError, match="beyond|limit"):
        decompress(codec, bomb, max_output_bytes=1024 * 1024)


def test_decompression_bomb_inside_a_batch_is_bounded():
    buf = build_batch([(None, bytes(2 * 1024 * 1024))], codec=CompressionType.ZSTD)
    assert len(buf) < 2000
    with pytest.raises(ProtocolError):
        decode_batch_records(buf, max_output_bytes=1024 * 1024)


@pytest.mark.parametrize("codec", ALL_CODECS[1:] + [5, 7])
@pytest.mark.parametrize("garbage", [b"", b"\x00", b"garbage" * 10, XERIAL_MAGIC + b"\x00" * 8 + b"\x00\x00\x00\x09abc"])
def test_decompress_garbage_raises_protocol_error(codec, garbage):
    try:
        decompress(codec, garbage)
    except ProtocolError:
        pass


@pytest.mark.parametrize("codec", ALL_CODECS[1:])
def test_decompress_truncated_payloads_raise(codec):
    payload = compress(codec, bytes(range(256)) * 50)
    # xerial snappy has no end marker, so a cut at a block boundary is a
    # shorter valid stream; record decoding catches that via recordsCount.
    for cut in range(1, len(payload)):
        try:
            out = decompress(codec, payload[:cut])
        except ProtocolError:
            continue
        assert codec == CompressionType.SNAPPY, cut
        assert len(out) % XERIAL_BLOCK_BYTES == 0


def test_unknown_codec():
    with pytest.raises(ProtocolError, match="unknown"):
        decompress(6, b"abc")
    with pytest.raises(ValueError):
        compress(6, b"abc")
