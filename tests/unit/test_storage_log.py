"""PartitionLog (storage/log.py) with real v2 batches from protocol.records.build_batch.

Covers offset assignment by patching, LogAppendTime stamping, reads (whole
batches, max_bytes, high watermark), segment rolling by size and by time,
timestamp lookups, reopen and torn-tail recovery, index rebuilds, append
errors, the on-disk file formats, and a byte-level cross-check of the .log
file with kafka-python's independent record batch parser.

Longer than ~700 lines on purpose: PartitionLog's append, read, truncation,
retention and recovery cases share its log fixtures.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from protocol.compression import CompressionType
from protocol.errors import ErrorCode
from protocol.records import (
    BATCH_HEADER_BYTES,
    CRC_OFFSET,
    TimestampType,
    build_batch,
    decode_batch_records,
    decode_records,
    iter_batches,
    parse_batch_header,
    validate_batch,
)
from storage.index import OFFSET_ENTRY, TIME_ENTRY
from storage.log import AppendError, LogConfig, PartitionLog

T0 = 1_700_000_000_000  # a plausible CreateTime base, in ms


# --------------------------------------------------------------------------- helpers


def make_batch(n: int, *, ts: int = T0, step: int = 1, tag: str = "r", codec: int = CompressionType.NONE, size: int = 8) -> bytes:
    """A producer-style batch of ``n`` records with timestamps ts, ts+step, ..."""
    return build_batch(
        [(f"{tag}-k{i}".encode(), (f"{tag}-v{i}-".encode() * size)[: max(size, 1)], [], ts + i * step) for i in range(n)],
        codec=codec,
    )


def keys_values(records) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in records]


def read_all(plog: PartitionLog, start: int = 0, max_bytes: int = 1 << 20, limit: int = 10_000):
    """Every record from ``start`` on, read the way a consumer does (offset by offset)."""
    out = []
    offset = start
    for _ in range(limit):
        if offset >= plog.high_watermark:
            break
        data = plog.read(offset, max_bytes)
        assert data, f"no data at offset {offset} below the high watermark {plog.high_watermark}"
        records = [r for r in decode_records(data) if r.offset >= offset]
        assert records, f"read({offset}) returned no record at or after {offset}"
        out.extend(records)
        offset = records[-1].offset + 1
    else:  # pragma: no cover - a bug would loop forever
        pytest.fail("read_all did not reach the high watermark")
    return out


def batch_headers(data: bytes):
    return [h for _, _, h in iter_batches(data)]


def log_files(directory: Path, suffix: str) -> list[Path]:
    return sorted(directory.glob(f"*{suffix}"))


class FakeClock:
    def __init__(self, now: int):
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "topic-0"


@pytest.fixture
def open_logs():
    opened: list[PartitionLog] = []
    yield opened
    for plog in opened:
        try:
            plog.close()
        except Exception:
            pass


@pytest.fixture
def new_log(log_dir, open_logs):
    def make(config: LogConfig | None = None, directory: Path | None = None, **kwargs) -> PartitionLog:
        plog = PartitionLog(directory or log_dir, config or LogConfig(), **kwargs)
        open_logs.append(plog)
        return plog

    return make


# --------------------------------------------------------------------------- append


def test_empty_log_starts_at_offset_zero(new_log, log_dir):
    plog = new_log()
    assert plog.log_start_offset == 0
    assert plog.log_end_offset == 0
    assert plog.high_watermark == 0
    assert plog.read(0, 1 << 20) == b""
    assert (log_dir / "00000000000000000000.log").exists()


def test_append_assigns_contiguous_offsets_by_patching(new_log):
    plog = new_log()
    results = []
    batches = [make_batch(3, tag="a"), make_batch(1, tag="b"), make_batch(5, tag="c")]
    for b in batches:
        results.append(plog.append(b))
    assert [(r.base_offset, r.last_offset) for r in results] == [(0, 2), (3, 3), (4, 8)]
    assert all(r.log_append_time_ms == -1 for r in results)
    assert plog.log_end_offset == 9
    assert plog.high_watermark == 9

    data = plog.read(0, 1 << 20)
    headers = batch_headers(data)
    assert [h.base_offset for h in headers] == [0, 3, 4]
    # Only base offset and partition leader epoch differ from what the producer sent:
    # the record bytes, and so the CRC, are untouched.
    pos = 0
    for original, header in zip(batches, headers):
        stored = data[pos : pos + header.size_bytes]
        assert stored[12:16] == struct.pack(">i", 0)  # default leader_epoch=0 stamped
        assert stored[16:] == original[16:]
        assert parse_batch_header(original).crc == header.crc
        validate_batch(stored)
        pos += header.size_bytes
    records = decode_records(data)
    assert [r.offset for r in records] == list(range(9))
    assert [r.key for r in records[:3]] == [b"a-k0", b"a-k1", b"a-k2"]
    assert records[3].key == b"b-k0"
    assert [r.key for r in records[4:]] == [f"c-k{i}".encode() for i in range(5)]


def test_append_leader_epoch_is_stamped(new_log):
    plog = new_log()
    plog.append(make_batch(2), leader_epoch=7)
    header = parse_batch_header(plog.read(0, 1 << 20))
    assert header.partition_leader_epoch == 7


def test_multi_batch_append(new_log):
    plog = new_log()
    plog.append(make_batch(2, tag="x"))
    payload = make_batch(3, tag="a") + make_batch(1, tag="b") + make_batch(2, tag="c", codec=CompressionType.GZIP)
    result = plog.append(payload)
    assert (result.base_offset, result.last_offset) == (2, 7)
    assert plog.log_end_offset == 8
    data = plog.read(2, 1 << 20)
    assert [h.base_offset for h in batch_headers(data)] == [2, 5, 6]
    assert [(r.offset, r.key) for r in decode_records(data)] == [
        (2, b"a-k0"), (3, b"a-k1"), (4, b"a-k2"), (5, b"b-k0"), (6, b"c-k0"), (7, b"c-k1"),
    ]


def test_producer_supplied_base_offset_is_ignored(new_log):
    plog = new_log()
    b = bytearray(make_batch(2))
    struct.pack_into(">q", b, 0, 12345)  # outside the CRC, a producer may send anything
    assert plog.append(bytes(b)).base_offset == 0
    assert parse_batch_header(plog.read(0, 1 << 20)).base_offset == 0


@pytest.mark.parametrize("codec", list(CompressionType))
def test_compressed_batches_round_trip(new_log, codec):
    plog = new_log()
    plog.append(make_batch(3, codec=codec, tag="z"))
    plog.append(make_batch(2, codec=codec, tag="y"))
    records = decode_records(plog.read(0, 1 << 20))
    assert [(r.offset, r.key) for r in records] == [(0, b"z-k0"), (1, b"z-k1"), (2, b"z-k2"), (3, b"y-k0"), (4, b"y-k1")]


def test_log_append_time_patches_timestamps_and_keeps_crc_valid(new_log):
    clock = FakeClock(T0 + 555_000)
    plog = new_log(LogConfig(message_timestamp_type="LogAppendTime"), clock_ms=clock)
    result = plog.append(make_batch(3, ts=T0, step=10))
    assert result.log_append_time_ms == clock.now
    clock.now += 1000
    result2 = plog.append(make_batch(1, ts=T0))
    assert result2.log_append_time_ms == clock.now

    data = plog.read(0, 1 << 20)
    headers = batch_headers(data)
    assert [h.timestamp_type for h in headers] == [TimestampType.LOG_APPEND_TIME] * 2
    assert [h.max_timestamp_ms for h in headers] == [T0 + 555_000, T0 + 556_000]
    pos = 0
    for h in headers:
        validate_batch(data, pos, h.size_bytes)  # our CRC check
        kp = DefaultRecordBatch(bytes(data[pos : pos + h.size_bytes]))
        assert kp.validate_crc()  # kafka-python's independent CRC32C
        assert kp.timestamp_type == 1
        pos += h.size_bytes
    records = decode_records(data)
    assert [r.timestamp_ms for r in records] == [T0 + 555_000] * 3 + [T0 + 556_000]
    assert all(r.timestamp_type == TimestampType.LOG_APPEND_TIME for r in records)
    # The time index follows the broker's stamps, not the producer's.
    assert plog.offset_for_timestamp(T0 + 555_500) == (3, T0 + 556_000)
    assert plog.offset_for_timestamp(T0 + 1) == (0, T0 + 555_000)


def test_create_time_keeps_producer_timestamps(new_log):
    plog = new_log(LogConfig(message_timestamp_type="CreateTime"), clock_ms=FakeClock(T0 + 10**9))
    plog.append(make_batch(2, ts=T0, step=7))
    header = parse_batch_header(plog.read(0, 1 << 20))
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert header.max_timestamp_ms == T0 + 7
    assert [r.timestamp_ms for r in decode_records(plog.read(0, 1 << 20))] == [T0, T0 + 7]


# --------------------------------------------------------------------------- append errors


def test_corrupt_crc_is_refused(new_log):
    plog = new_log()
    b = bytearray(make_batch(3))
    b[-1] ^= 0xFF  # flip a bit inside the CRC-covered records
    with pytest.raises(AppendError) as exc:
        plog.append(bytes(b))
    assert exc.value.error_code == ErrorCode.CORRUPT_MESSAGE
    b = bytearray(make_batch(3))
    b[CRC_OFFSET] ^= 0x01  # or in the stored CRC itself
    with pytest.raises(AppendError) as exc:
        plog.append(bytes(b))
    assert exc.value.error_code == ErrorCode.CORRUPT_MESSAGE
    assert plog.log_end_offset == 0
    assert plog.size_bytes == 0


def test_corrupt_batch_in_multi_batch_append_writes_nothing(new_log):
    plog = new_log()
    good = make_batch(2)
    bad = bytearray(make_batch(2))
    bad[-1] ^= 0x55
    with pytest.raises(AppendError) as exc:
        plog.append(good + bytes(bad))
    assert exc.value.error_code == ErrorCode.CORRUPT_MESSAGE
    assert plog.log_end_offset == 0 and plog.size_bytes == 0
    assert plog.append(good).base_offset == 0


def test_batch_larger_than_max_message_bytes(new_log):
    plog = new_log(LogConfig(max_message_bytes=200))
    small = make_batch(1, size=10)
    assert len(small) <= 200
    plog.append(small)
    big = make_batch(1, size=300)
    assert len(big) > 200
    with pytest.raises(AppendError) as exc:
        plog.append(big)
    assert exc.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert plog.log_end_offset == 1
    # The limit is per batch, not per request.
    assert plog.append(small + small).last_offset == 2


def test_batch_exactly_max_message_bytes_is_accepted(new_log):
    b = make_batch(1, size=50)
    plog = new_log(LogConfig(max_message_bytes=len(b)))
    assert plog.append(b).base_offset == 0
    plog2 = new_log(LogConfig(max_message_bytes=len(b) - 1), directory=plog.directory.parent / "other-0")
    with pytest.raises(AppendError) as exc:
        plog2.append(b)
    assert exc.value.error_code == ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize("cut", [1, 10, 30, BATCH_HEADER_BYTES])
def test_partial_trailing_batch_is_corrupt(new_log, cut):
    plog = new_log()
    whole = make_batch(2)
    with pytest.raises(AppendError) as exc:
        plog.append(whole + make_batch(3)[:cut])
    assert exc.value.error_code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(AppendError) as exc:
        plog.append(whole[:-1])
    assert exc.value.error_code == ErrorCode.CORRUPT_MESSAGE
    assert plog.log_end_offset == 0 and plog.size_bytes == 0


def test_empty_and_garbage_records_are_corrupt(new_log):
    plog = new_log()
    for payload in (b"", b"\x00" * 100, b"garbage that is not a record batch at all, not even close" * 3):
        with pytest.raises(AppendError) as exc:
            plog.append(payload)
        assert exc.value.error_code == ErrorCode.CORRUPT_MESSAGE, payload[:10]
    assert plog.log_end_offset == 0


# --------------------------------------------------------------------------- read


def _three_batches(plog: PartitionLog) -> list[int]:
    sizes = []
    for i, n in enumerate((3, 2, 4)):
        b = make_batch(n, tag=f"b{i}", size=20)
        sizes.append(len(b))
        plog.append(b)
    return sizes  # offsets 0-2, 3-4, 5-8


@pytest.mark.parametrize("offset, first_base", [(0, 0), (1, 0), (2, 0), (3, 3), (4, 3), (5, 5), (8, 5)])
def test_read_starts_with_the_batch_holding_the_offset(new_log, offset, first_base):
    plog = new_log()
    _three_batches(plog)
    data = plog.read(offset, 1 << 20)
    headers = batch_headers(data)
    assert headers[0].base_offset == first_base
    assert headers[-1].last_offset == 8
    assert len(data) == sum(h.size_bytes for h in headers)  # whole batches only


def test_read_at_or_past_the_end_is_empty(new_log):
    plog = new_log()
    _three_batches(plog)
    assert plog.read(9, 1 << 20) == b""
    assert plog.read(100, 1 << 20) == b""


def test_read_respects_max_bytes(new_log):
    plog = new_log()
    s0, s1, s2 = _three_batches(plog)
    assert [h.base_offset for h in batch_headers(plog.read(0, s0 + s1))] == [0, 3]
    assert [h.base_offset for h in batch_headers(plog.read(0, s0 + s1 + s2 - 1))] == [0, 3]
    assert [h.base_offset for h in batch_headers(plog.read(0, s0 + s1 + s2))] == [0, 3, 5]
    assert [h.base_offset for h in batch_headers(plog.read(3, s1 + s2))] == [3, 5]
    assert len(plog.read(0, s0 + s1 - 1)) == s0


def test_oversized_first_batch_is_returned_whole_unless_disabled(new_log):
    plog = new_log()
    s0, _, _ = _three_batches(plog)
    data = plog.read(0, 10)
    assert len(data) == s0
    assert [h.base_offset for h in batch_headers(data)] == [0]
    assert plog.read(0, 10, oversized_first_batch=False) == b""
    assert plog.read(1, s0 - 1, oversized_first_batch=False) == b""
    assert len(plog.read(0, s0, oversized_first_batch=False)) == s0


def test_read_never_returns_batches_at_or_past_the_high_watermark(new_log):
    plog = new_log()
    _three_batches(plog)
    plog.reset_high_watermark(5)  # batches [0-2], [3-4] committed; [5-8] not
    data = plog.read(0, 1 << 20)
    assert [h.base_offset for h in batch_headers(data)] == [0, 3]
    assert plog.read(5, 1 << 20) == b""
    assert plog.read(6, 1 << 20) == b""
    plog.reset_high_watermark(4)  # inside batch [3-4]: a batch *starting* below the HWM is returned
    assert [h.base_offset for h in batch_headers(plog.read(0, 1 << 20))] == [0, 3]
    plog.reset_high_watermark(3)
    assert [h.base_offset for h in batch_headers(plog.read(0, 1 << 20))] == [0]
    assert plog.read(3, 1 << 20) == b""
    # An explicit upper bound works the same way.
    plog.high_watermark = plog.log_end_offset
    assert [h.base_offset for h in batch_headers(plog.read(0, 1 << 20, upper_offset=3))] == [0]
    assert plog.read(3, 1 << 20, upper_offset=3) == b""


# --------------------------------------------------------------------------- segments


def test_roll_by_segment_bytes(new_log, log_dir):
    b = make_batch(2, size=40)
    plog = new_log(LogConfig(segment_bytes=len(b) * 3))
    for _ in range(7):
        plog.append(b)
    # 3 batches fit per segment: bases 0, 6, 12.
    assert [s.base_offset for s in plog.segments] == [0, 6, 12]
    assert [p.name for p in log_files(log_dir, ".log")] == [
        "00000000000000000000.log", "00000000000000000006.log", "00000000000000000012.log",
    ]
    assert all(s.size_bytes <= len(b) * 3 for s in plog.segments)
    assert plog.log_end_offset == 14
    assert [r.offset for r in read_all(plog)] == list(range(14))


def test_a_batch_bigger_than_segment_bytes_gets_its_own_segment(new_log):
    small = make_batch(1, size=10)
    big = make_batch(1, size=400)
    plog = new_log(LogConfig(segment_bytes=len(small) * 2))
    plog.append(small)
    plog.append(big)  # does not fit in the active segment: roll, then write anyway
    plog.append(small)
    assert [s.base_offset for s in plog.segments] == [0, 1, 2]
    assert [r.offset for r in read_all(plog)] == [0, 1, 2]


def test_roll_by_segment_ms_counts_record_time_from_the_first_batch(new_log):
    """Like Kafka, segment.ms compares an incoming batch's timestamp with the
    first batch's, so a restart does not reset a segment's age."""
    clock = FakeClock(T0)
    plog = new_log(LogConfig(segment_ms=60_000), clock_ms=clock)
    plog.append(make_batch(1, ts=T0))
    plog.append(make_batch(1, ts=T0 + 30_000))
    assert len(plog.segments) == 1, "rolled a segment younger than segment.ms"
    plog.append(make_batch(1, ts=T0 + 60_001))
    assert [s.base_offset for s in plog.segments] == [0, 2]
    plog.append(make_batch(1, ts=T0 + 60_002))
    assert [s.base_offset for s in plog.segments] == [0, 2], "the new segment counts from its own first batch"
    assert [r.offset for r in read_all(plog)] == [0, 1, 2, 3]


def test_segment_age_survives_reopen(new_log, tmp_path):
    clock = FakeClock(T0)
    plog = new_log(LogConfig(segment_ms=60_000), clock_ms=clock)
    plog.append(make_batch(1, ts=T0))
    directory = plog.directory
    plog.close()
    reopened = PartitionLog(directory, LogConfig(segment_ms=60_000), clock_ms=clock)
    reopened.append(make_batch(1, ts=T0 + 60_001))
    assert [s.base_offset for s in reopened.segments] == [0, 1]
    reopened.close()


def test_empty_active_segment_does_not_roll(new_log):
    clock = FakeClock(int(time.time() * 1000))
    plog = new_log(LogConfig(segment_ms=1000, segment_bytes=100), clock_ms=clock)
    clock.now += 10_000
    plog.append(make_batch(1, size=300))  # bigger than segment_bytes and older than segment_ms, but empty
    assert len(plog.segments) == 1


def test_explicit_roll_and_reading_across_segments(new_log):
    plog = new_log()
    expected = []
    for i in range(5):
        r = plog.append(make_batch(2, tag=f"s{i}"))
        expected += [(r.base_offset, f"s{i}-k0".encode()), (r.base_offset + 1, f"s{i}-k1".encode())]
        plog.roll()
    plog.append(make_batch(1, tag="last"))
    expected.append((10, b"last-k0"))
    assert [s.base_offset for s in plog.segments] == [0, 2, 4, 6, 8, 10]
    # A read from any offset lands in the right segment.
    for offset in range(11):
        data = plog.read(offset, 1 << 20)
        records = decode_records(data)
        assert records[0].offset <= offset <= records[-1].offset, offset
        assert batch_headers(data)[0].base_offset == offset - offset % 2
    # A consumer walking forward sees every record once, in order.
    assert [(r.offset, r.key) for r in read_all(plog)] == expected
    assert [(r.offset, r.key) for r in read_all(plog, max_bytes=1)] == expected


def test_rolling_an_empty_active_segment_creates_no_duplicate(new_log, log_dir):
    """Two rolls in a row must not leave two segments with the same base offset (one file)."""
    plog = new_log()
    plog.append(make_batch(1))
    plog.roll()
    plog.roll()
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) == len(set(bases)), f"duplicate segment base offsets {bases}"
    plog.append(make_batch(1))
    assert [r.offset for r in read_all(plog)] == [0, 1]


def test_read_at_an_empty_rolled_active_segment(new_log):
    plog = new_log()
    plog.append(make_batch(3))
    plog.roll()
    assert plog.log_end_offset == 3
    assert plog.read(3, 1 << 20) == b""
    assert [r.offset for r in decode_records(plog.read(2, 1 << 20))] == [0, 1, 2]


# --------------------------------------------------------------------------- timestamps


def test_offset_for_timestamp_finds_the_first_record_not_the_first_batch(new_log):
    plog = new_log()
    plog.append(make_batch(3, ts=T0, step=10))  # offsets 0-2, ts T0, +10, +20
    plog.append(make_batch(3, ts=T0 + 100, step=10))  # offsets 3-5, ts +100, +110, +120
    assert plog.offset_for_timestamp(T0 - 5) == (0, T0)
    assert plog.offset_for_timestamp(T0) == (0, T0)
    assert plog.offset_for_timestamp(T0 + 1) == (1, T0 + 10)  # inside the first batch
    assert plog.offset_for_timestamp(T0 + 20) == (2, T0 + 20)
    assert plog.offset_for_timestamp(T0 + 21) == (3, T0 + 100)
    assert plog.offset_for_timestamp(T0 + 111) == (5, T0 + 120)
    assert plog.offset_for_timestamp(T0 + 121) is None


def test_offset_for_timestamp_with_out_of_order_timestamps(new_log):
    plog = new_log()
    plog.append(build_batch([(b"a", b"1", [], T0 + 50), (b"b", b"2", [], T0 + 10), (b"c", b"3", [], T0 + 60)]))
    plog.append(build_batch([(b"d", b"4", [], T0 + 20), (b"e", b"5", [], T0 + 55)]))
    plog.append(build_batch([(b"f", b"6", [], T0 + 5)]))
    assert plog.offset_for_timestamp(T0) == (0, T0 + 50)
    assert plog.offset_for_timestamp(T0 + 51) == (2, T0 + 60)
    assert plog.offset_for_timestamp(T0 + 55) == (2, T0 + 60)
    assert plog.offset_for_timestamp(T0 + 61) is None


def test_offset_for_timestamp_across_segments(new_log):
    plog = new_log(LogConfig(index_interval_bytes=1))
    for i in range(4):
        plog.append(make_batch(3, ts=T0 + 1000 * i, step=100))  # segment i: offsets 3i..3i+2
        plog.roll()
    for i in range(4):
        for j in range(3):
            ts = T0 + 1000 * i + 100 * j
            assert plog.offset_for_timestamp(ts) == (3 * i + j, ts)
            assert plog.offset_for_timestamp(ts - 1) == (3 * i + j, ts)
    assert plog.offset_for_timestamp(T0 + 3201) is None
    # The answer must not change when the log is reopened.
    plog.close()
    reopened = PartitionLog(plog.directory, plog.config)
    try:
        assert reopened.offset_for_timestamp(T0 + 1150) == (5, T0 + 1200)
        assert reopened.offset_for_timestamp(T0 + 2001) == (7, T0 + 2100)
    finally:
        reopened.close()


def test_offset_for_timestamp_ignores_records_past_the_high_watermark(new_log):
    plog = new_log()
    plog.append(make_batch(2, ts=T0))
    plog.append(make_batch(2, ts=T0 + 100))
    plog.reset_high_watermark(2)
    assert plog.offset_for_timestamp(T0 + 50) is None
    assert plog.offset_for_timestamp(T0) == (0, T0)


def test_max_timestamp_offset(new_log):
    plog = new_log()
    assert plog.max_timestamp_offset() is None
    plog.append(build_batch([(b"a", b"1", [], T0 + 5), (b"b", b"2", [], T0 + 90), (b"c", b"3", [], T0 + 7)]))
    plog.roll()
    plog.append(build_batch([(b"d", b"4", [], T0 + 50)]))
    assert plog.max_timestamp_offset() == (1, T0 + 90)
    plog.append(build_batch([(b"e", b"5", [], T0 + 10), (b"f", b"6", [], T0 + 95)]))
    assert plog.max_timestamp_offset() == (5, T0 + 95)
    # A tie keeps the earliest record with the maximum timestamp.
    plog.append(build_batch([(b"g", b"7", [], T0 + 95)]))
    assert plog.max_timestamp_offset() == (5, T0 + 95)
    # Records past the high watermark are not visible.
    plog.append(build_batch([(b"h", b"8", [], T0 + 999)]))
    plog.reset_high_watermark(7)
    assert plog.max_timestamp_offset() == (5, T0 + 95)


# --------------------------------------------------------------------------- reopen and recovery


def _fill(plog: PartitionLog, batches: int = 6) -> list[tuple[int, bytes | None, bytes | None]]:
    for i in range(batches):
        plog.append(make_batch(1 + i % 3, ts=T0 + 10 * i, tag=f"f{i}", codec=i % 5))
    return keys_values(read_all(plog))


def test_reopen_gives_the_same_log(new_log, log_dir):
    plog = new_log(LogConfig(segment_bytes=300, index_interval_bytes=64))
    content = _fill(plog, 12)
    end = plog.log_end_offset
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) > 2
    raw = {p.name: p.read_bytes() for p in log_files(log_dir, ".log")}
    plog.close()
    reopened = new_log(LogConfig(segment_bytes=300, index_interval_bytes=64))
    assert reopened.log_end_offset == end
    assert reopened.high_watermark == end
    assert [s.base_offset for s in reopened.segments] == bases
    assert keys_values(read_all(reopened)) == content
    assert {p.name: p.read_bytes() for p in log_files(log_dir, ".log")} == raw
    # And appends carry on where the log left off.
    assert reopened.append(make_batch(2)).base_offset == end
    assert reopened.log_end_offset == end + 2


def test_reopen_without_close_after_flush(new_log, log_dir):
    plog = new_log()
    content = _fill(plog, 4)
    plog.flush(fsync=False)
    other = PartitionLog(log_dir, LogConfig())
    try:
        assert keys_values(read_all(other)) == content
    finally:
        other.close()


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b"\x00" * 7, id="zeros-short"),
        pytest.param(b"\x00" * 200, id="zeros-long"),
        pytest.param(b"\xde\xad\xbe\xef" * 40, id="garbage"),
        pytest.param(make_batch(3)[:10], id="truncated-10"),
        pytest.param(make_batch(3)[:BATCH_HEADER_BYTES], id="truncated-header"),
        pytest.param(make_batch(3)[:-1], id="truncated-minus-1"),
        pytest.param(b"WHOLE" + make_batch(3)[:40], id="whole-then-truncated"),
    ],
)
def test_torn_tail_is_cut_on_reopen(new_log, log_dir, tail):
    plog = new_log(LogConfig(index_interval_bytes=1))
    content = _fill(plog, 5)
    end = plog.log_end_offset
    complete_extra = 0
    if tail.startswith(b"WHOLE"):
        # A whole batch (as the broker would have written it, offsets assigned)
        # before the torn one survives recovery.
        whole = build_batch([(b"w0", b"v", [], T0), (b"w1", b"v", [], T0)], base_offset=end, partition_leader_epoch=0)
        complete_extra = len(whole)
        tail = whole + tail[len(b"WHOLE"):]
    plog.close()
    active = log_files(log_dir, ".log")[-1]
    good_size = active.stat().st_size
    with open(active, "ab") as f:
        f.write(tail)
    reopened = new_log(LogConfig(index_interval_bytes=1))
    assert active.stat().st_size == good_size + complete_extra
    assert reopened.log_end_offset == end + (2 if complete_extra else 0)
    assert keys_values(read_all(reopened))[: len(content)] == content
    r = reopened.append(make_batch(2, tag="after"))
    assert r.base_offset == reopened.log_end_offset - 2
    records = read_all(reopened)
    assert [rec.key for rec in records[-2:]] == [b"after-k0", b"after-k1"]
    assert [rec.offset for rec in records] == list(range(reopened.log_end_offset))
    reopened.close()
    # And the repaired log reopens cleanly again.
    again = new_log(LogConfig(index_interval_bytes=1))
    assert keys_values(read_all(again)) == keys_values(records)


def test_torn_tail_in_a_multi_segment_log(new_log, log_dir):
    plog = new_log(LogConfig(segment_bytes=250))
    content = _fill(plog, 10)
    assert len(plog.segments) > 2
    end = plog.log_end_offset
    plog.close()
    active = log_files(log_dir, ".log")[-1]
    with open(active, "ab") as f:
        f.write(make_batch(4)[:-3])
    reopened = new_log(LogConfig(segment_bytes=250))
    assert reopened.log_end_offset == end
    assert keys_values(read_all(reopened)) == content
    assert reopened.append(make_batch(1)).base_offset == end


def test_timestamps_after_a_torn_tail_with_a_newer_timestamp(new_log, log_dir):
    """The torn batch's time-index entry is dropped by recovery; the segment's
    maximum timestamp must drop with it, or later appends with older
    timestamps get no time-index entry and, once the segment is no longer the
    active one, a reopened log skips them in timestamp lookups."""
    config = LogConfig(index_interval_bytes=1)
    plog = new_log(config)
    plog.append(build_batch([(b"a", b"1", [], T0 + 10)]))
    plog.append(build_batch([(b"b", b"2", [], T0 + 20)]))
    plog.append(build_batch([(b"c", b"3", [], T0 + 100)]))  # its .timeindex entry reaches disk...
    plog.close()
    active = log_files(log_dir, ".log")[-1]
    active.write_bytes(active.read_bytes()[:-5])  # ...but its batch is torn
    plog = new_log(config)
    assert plog.log_end_offset == 2
    plog.append(build_batch([(b"d", b"4", [], T0 + 50)]))  # offset 2
    assert plog.offset_for_timestamp(T0 + 40) == (2, T0 + 50)
    plog.roll()
    plog.append(build_batch([(b"e", b"5", [], T0 + 60)]))  # offset 3, next segment
    assert plog.offset_for_timestamp(T0 + 40) == (2, T0 + 50)
    plog.close()
    reopened = new_log(config)
    assert reopened.offset_for_timestamp(T0 + 40) == (2, T0 + 50)
    assert reopened.max_timestamp_offset() == (3, T0 + 60)


def test_batch_with_a_torn_payload_is_cut_on_reopen(new_log, log_dir):
    """A crash can leave a tail whose length is right but whose bytes never reached disk.

    The file size is extended (metadata) before the data blocks are written,
    so the last batch reads back with a valid header and zeroed records.
    Kafka's recovery checks each batch's CRC and cuts from the first bad one;
    keeping it would hand consumers a batch that fails their CRC check.
    """
    plog = new_log()
    content = _fill(plog, 3)
    end = plog.log_end_offset
    plog.close()
    torn = bytearray(build_batch([(b"t0", b"v", [], T0), (b"t1", b"v", [], T0), (b"t2", b"v", [], T0)], base_offset=end))
    torn[BATCH_HEADER_BYTES:] = bytes(len(torn) - BATCH_HEADER_BYTES)
    active = log_files(log_dir, ".log")[-1]
    good_size = active.stat().st_size
    with open(active, "ab") as f:
        f.write(bytes(torn))
    reopened = new_log()
    assert reopened.log_end_offset == end, "a batch failing its CRC was kept by recovery"
    assert active.stat().st_size == good_size
    assert keys_values(read_all(reopened)) == content


def test_rebuilt_offset_index_gives_the_same_reads(new_log, log_dir):
    config = LogConfig(index_interval_bytes=100)
    plog = new_log(config)
    content = _fill(plog, 20)
    reads = {o: plog.read(o, 500) for o in range(plog.log_end_offset)}
    assert len(plog.active_segment.index) > 2
    entries = plog.active_segment.index.entries()
    plog.close()
    for p in log_files(log_dir, ".index"):
        p.unlink()
    reopened = new_log(config)
    assert len(reopened.active_segment.index) > 0
    assert {o: reopened.read(o, 500) for o in range(reopened.log_end_offset)} == reads
    assert keys_values(read_all(reopened)) == content
    # Recovery indexes the same batches the appends did.
    assert reopened.active_segment.index.entries() == entries


def _multi_segment_timestamped_log(new_log, config):
    plog = new_log(config)
    for i in range(12):
        plog.append(make_batch(2, ts=T0 + 1000 * i, step=100, tag=f"d{i}"))
    assert len(plog.segments) >= 3
    return plog


def test_deleted_offset_indexes_of_all_segments_keep_reads_right(new_log, log_dir):
    config = LogConfig(segment_bytes=400, index_interval_bytes=1)
    plog = _multi_segment_timestamped_log(new_log, config)
    content = keys_values(read_all(plog))
    reads = {o: plog.read(o, 1 << 20) for o in range(plog.log_end_offset)}
    small_reads = {o: plog.read(o, 1) for o in range(plog.log_end_offset)}
    plog.close()
    for p in log_files(log_dir, ".index"):
        p.unlink()
    reopened = new_log(config)
    assert keys_values(read_all(reopened)) == content
    assert {o: reopened.read(o, 1 << 20) for o in range(reopened.log_end_offset)} == reads
    assert {o: reopened.read(o, 1) for o in range(reopened.log_end_offset)} == small_reads


def test_deleted_time_indexes_of_all_segments_keep_timestamp_lookups_right(new_log, log_dir):
    """Kafka rebuilds a missing index of any segment at start-up, not only the active one's."""
    config = LogConfig(segment_bytes=400, index_interval_bytes=1)
    plog = _multi_segment_timestamped_log(new_log, config)
    lookups = {ts: plog.offset_for_timestamp(ts) for ts in range(T0 - 1, T0 + 12_000, 250)}
    assert lookups[T0 + 4999] == (10, T0 + 5000)
    max_ts = plog.max_timestamp_offset()
    plog.close()
    for p in log_files(log_dir, ".timeindex"):
        p.unlink()
    reopened = new_log(config)
    assert reopened.max_timestamp_offset() == max_ts
    wrong = {ts: (want, reopened.offset_for_timestamp(ts)) for ts, want in lookups.items() if reopened.offset_for_timestamp(ts) != want}
    assert not wrong, f"offset_for_timestamp differs after .timeindex files were deleted (ts: (expected, actual)): {dict(list(wrong.items())[:4])}"


def test_truncated_index_file_tail_is_tolerated(new_log, log_dir):
    config = LogConfig(index_interval_bytes=50)
    plog = new_log(config)
    content = _fill(plog, 15)
    lookups = {ts: plog.offset_for_timestamp(ts) for ts in range(T0 - 1, T0 + 160, 3)}
    assert lookups[T0 + 38] == (7, T0 + 40)
    plog.close()
    index = log_files(log_dir, ".index")[-1]
    index.write_bytes(index.read_bytes()[:-3])  # a torn 8-byte entry
    timeindex = log_files(log_dir, ".timeindex")[-1]
    timeindex.write_bytes(timeindex.read_bytes() + b"\x00" * 12)  # a preallocated-looking zero entry
    reopened = new_log(config)
    assert keys_values(read_all(reopened)) == content
    assert {ts: reopened.offset_for_timestamp(ts) for ts in lookups} == lookups


# --------------------------------------------------------------------------- file formats


def test_segment_file_names_are_20_digit_base_offsets(new_log, log_dir):
    b = make_batch(1, size=20)
    plog = new_log(LogConfig(segment_bytes=len(b)))
    for _ in range(12):
        plog.append(b)
    plog.flush(fsync=False)
    names = sorted(p.name for p in log_dir.iterdir())
    bases = [s.base_offset for s in plog.segments]
    assert bases == list(range(12))
    for base in bases:
        stem = f"{base:020d}"
        assert len(stem) == 20
        assert f"{stem}.log" in names
    assert "00000000000000000010.log" in names
    for p in log_dir.glob("*.log"):
        assert len(p.stem) == 20 and p.stem.isdigit()


def test_index_file_formats(new_log, log_dir):
    config = LogConfig(segment_bytes=10_000, index_interval_bytes=1)
    plog = new_log(config)
    plog.append(make_batch(5, tag="pre", size=100))
    plog.roll()
    base = plog.log_end_offset
    assert base == 5
    positions = []
    for i in range(6):
        positions.append(plog.active_segment.size_bytes)
        plog.append(make_batch(2, ts=T0 + 100 * i, step=10, tag=f"i{i}"))
    stem = f"{base:020d}"
    # The active segment's index files are preallocated (sparse zeros past
    # the entries), like Kafka's; closing trims them to their entries.
    assert (log_dir / f"{stem}.index").stat().st_size == config.segment_index_bytes
    plog.close()
    index_bytes = (log_dir / f"{stem}.index").read_bytes()
    time_bytes = (log_dir / f"{stem}.timeindex").read_bytes()
    assert OFFSET_ENTRY.size == 8 and TIME_ENTRY.size == 12
    assert len(index_bytes) % 8 == 0 and len(time_bytes) % 12 == 0
    offsets = list(struct.iter_unpack(">ii", index_bytes))
    times = list(struct.iter_unpack(">qi", time_bytes))
    assert offsets, "no .index entries with index_interval_bytes=1"
    assert times
    # Entries are relative to the segment base offset and point at batch starts.
    data = (log_dir / f"{stem}.log").read_bytes()
    batch_starts = {pos: h for pos, _, h in iter_batches(data)}
    for rel, pos in offsets:
        assert pos in batch_starts
        header = batch_starts[pos]
        assert base + rel in (header.base_offset, header.last_offset)
        assert 0 <= rel < 12
    rels = [r for r, _ in offsets]
    assert rels == sorted(set(rels))
    for ts, rel in times:
        assert 0 <= rel < 12
        assert ts in {T0 + 100 * i + 10 for i in range(6)}
    assert [t for t, _ in times] == sorted({t for t, _ in times})
    # The last time-index entry holds the segment's max timestamp.
    assert times[-1] == (T0 + 510, 11)


def test_log_file_is_plain_concatenated_batches(new_log, log_dir):
    plog = new_log()
    sent = [make_batch(2, tag="p"), make_batch(1, tag="q", codec=CompressionType.LZ4)]
    for b in sent:
        plog.append(b)
    plog.flush(fsync=False)
    data = (log_dir / "00000000000000000000.log").read_bytes()
    assert data == plog.read(0, 1 << 20)
    assert len(data) == sum(len(b) for b in sent)


# --------------------------------------------------------------------------- kafka-python cross-check


def test_log_file_decodes_with_kafka_python(new_log, log_dir):
    plog = new_log(LogConfig(segment_bytes=600))
    expected = []
    for i in range(8):
        codec = (CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD)[i % 5]
        n = 1 + i % 4
        records = [(f"key-{i}-{j}".encode(), f"value-{i}-{j}".encode() * 3, [("h", b"x")], T0 + 10 * i + j) for j in range(n)]
        if i == 2:
            records[0] = (None, b"null-key", [], T0 + 20)
        r = plog.append(build_batch(records, codec=codec))
        expected += [(r.base_offset + j, rec[0], rec[1], rec[3]) for j, rec in enumerate(records)]
    plog.flush(fsync=False)
    files = log_files(log_dir, ".log")
    assert len(files) > 1
    seen = []
    for path in files:
        memory = MemoryRecords(path.read_bytes())
        batches = 0
        while memory.has_next():
            batch = memory.next_batch()
            assert batch is not None
            batches += 1
            assert batch.validate_crc()
            for record in batch:
                seen.append((record.offset, record.key, record.value, record.timestamp))
        assert batches > 0
        assert not memory.has_next()
        # kafka-python's DefaultRecordBatch on the first batch, independently of MemoryRecords.
        first = path.read_bytes()
        (length,) = struct.unpack_from(">i", first, 8)
        kp = DefaultRecordBatch(first[: length + 12])
        assert kp.base_offset == int(path.stem)
    assert seen == expected


def test_log_append_time_file_decodes_with_kafka_python(new_log, log_dir):
    clock = FakeClock(T0 + 42)
    plog = new_log(LogConfig(message_timestamp_type="LogAppendTime"), clock_ms=clock)
    plog.append(make_batch(3, ts=T0 - 10_000, codec=CompressionType.GZIP))
    plog.flush(fsync=False)
    memory = MemoryRecords((log_dir / "00000000000000000000.log").read_bytes())
    batch = memory.next_batch()
    assert batch.validate_crc()
    assert batch.timestamp_type == 1
    assert [(r.offset, r.timestamp) for r in batch] == [(0, T0 + 42), (1, T0 + 42), (2, T0 + 42)]


def test_decode_batch_records_matches_our_read(new_log):
    plog = new_log()
    plog.append(make_batch(4, codec=CompressionType.ZSTD))
    data = plog.read(0, 1 << 20)
    header, records = decode_batch_records(data)
    assert header.records_count == 4 and [r.offset for r in records] == [0, 1, 2, 3]


def test_compacted_topic_refuses_records_without_a_key(new_log):
    plog = new_log(LogConfig(cleanup_policy="compact"))
    with pytest.raises(AppendError) as exc:
        plog.append(build_batch([(b"k", b"v", [], T0), (None, b"v", [], T0)]))
    assert exc.value.error_code == ErrorCode.INVALID_RECORD
    assert plog.log_end_offset == 0
    plog.append(build_batch([(b"k", b"v", [], T0)]))
    assert plog.log_end_offset == 1


# --------------------------------------------------------------------------- record errors (KIP-467)

KEYLESS = "Compacted topic cannot accept message without key in topic partition topic-0."


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4], ids=["none", "lz4"])
def test_compacted_topic_names_every_record_without_a_key(new_log, codec):
    """librdkafka's 0011_produce_batch: 100 records, every tenth without a key.
    The whole batch is refused and each keyless record is named by its index
    in the batch, so the client fails the other 90 as collateral."""
    plog = new_log(LogConfig(cleanup_policy="compact"), clock_ms=FakeClock(T0))
    records = [(None if i % 10 == 0 else f"k{i}".encode(), f"v{i}".encode(), [], T0) for i in range(100)]
    with pytest.raises(AppendError) as exc:
        plog.append(build_batch(records, codec=codec))
    assert exc.value.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in exc.value.record_errors] == list(range(0, 100, 10))
    assert {e.message for e in exc.value.record_errors} == {KEYLESS}
    assert str(exc.value).startswith("10 records were refused, the first at batch index 0: Compacted topic")
    assert plog.log_end_offset == 0, "nothing of the batch is appended"


def test_one_record_without_a_key_is_the_error_message(new_log):
    plog = new_log(LogConfig(cleanup_policy="compact"))
    with pytest.raises(AppendError) as exc:
        plog.append(build_batch([(b"k", b"v", [], T0), (None, b"v", [], T0), (b"k", b"v", [], T0)]))
    assert [tuple(e) for e in exc.value.record_errors] == [(1, KEYLESS)]
    assert str(exc.value) == KEYLESS


def test_record_indexes_run_across_the_batches_of_one_append(new_log):
    # Produce sends one batch per partition; the log's own callers may send more.
    plog = new_log(LogConfig(cleanup_policy="compact"))
    first = build_batch([(b"a", b"v", [], T0), (b"b", b"v", [], T0)])
    second = build_batch([(b"c", b"v", [], T0), (None, b"v", [], T0)])
    with pytest.raises(AppendError) as exc:
        plog.append(first + second)
    assert [e.batch_index for e in exc.value.record_errors] == [3]


def test_batch_level_refusals_name_no_record(new_log):
    plog = new_log(LogConfig(max_message_bytes=100))
    with pytest.raises(AppendError) as exc:
        plog.append(make_batch(20))
    assert exc.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert exc.value.record_errors == ()


def test_timestamps_out_of_range_are_named_per_record(new_log):
    hour_ms = 3_600_000
    plog = new_log(LogConfig(timestamp_before_max_ms=hour_ms, timestamp_after_max_ms=hour_ms), clock_ms=FakeClock(T0))
    timestamps = [T0, T0 - 2 * hour_ms, T0 + 1000, T0 + 2 * hour_ms, T0 - hour_ms]
    with pytest.raises(AppendError) as exc:
        plog.append(build_batch([(b"k", b"v", [], ts) for ts in timestamps]))
    assert exc.value.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in exc.value.record_errors] == [1, 3]
    assert "before the broker's time" in exc.value.record_errors[0].message
    assert "after the broker's time" in exc.value.record_errors[1].message
    assert plog.log_end_offset == 0


def test_a_too_new_record_is_found_with_the_default_limits(new_log):
    # Only after.max.ms is set by default: the batch header's max timestamp
    # says whether the records need a look.
    plog = new_log(LogConfig(), clock_ms=FakeClock(T0))
    with pytest.raises(AppendError) as exc:
        plog.append(build_batch([(b"k", b"v", [], T0), (b"k", b"v", [], T0 + 2 * 3_600_000), (b"k", b"v", [], T0)]))
    assert exc.value.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in exc.value.record_errors] == [1]


def test_any_bad_timestamp_makes_the_error_invalid_timestamp(new_log):
    # As Kafka answers: both kinds listed, one error per record (the missing key first).
    plog = new_log(LogConfig(cleanup_policy="compact"), clock_ms=FakeClock(T0))
    far = T0 + 2 * 3_600_000
    with pytest.raises(AppendError) as exc:
        plog.append(build_batch([(None, b"v", [], T0), (b"k", b"v", [], far), (None, b"v", [], far)]))
    assert exc.value.error_code == ErrorCode.INVALID_TIMESTAMP
    listed = [(e.batch_index, e.message == KEYLESS) for e in exc.value.record_errors]
    assert listed == [(0, True), (1, False), (2, True)]


def test_log_append_time_topics_do_not_check_timestamps(new_log):
    plog = new_log(LogConfig(message_timestamp_type="LogAppendTime", cleanup_policy="compact"), clock_ms=FakeClock(T0))
    plog.append(build_batch([(b"k", b"v", [], T0 + 10 * 3_600_000)]))
    assert plog.log_end_offset == 1
