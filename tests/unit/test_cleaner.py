"""The log cleaner (storage/cleaner.py) on real PartitionLogs.

Covers deduplication by key with offsets, timestamps and headers kept, reads
and timestamp lookups through PartitionLog afterwards, the untouched active
segment, min.compaction.lag.ms, the high watermark, tombstones and their
delete horizon (KIP-534), every codec cross-checked with kafka-python's
parser, producer batches kept as empty headers, segment grouping, the
cleaner checkpoint and dirty ratio, a full offset map, and crash safety at
each step of the segment swap.

Longer than ~700 lines on purpose: the cleaner's cases share the log-building
and cross-checking helpers at the top.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from protocol.compression import CompressionType
from protocol.records import (
    ControlType,
    build_batch,
    build_control_batch,
    decode_batch_records,
    iter_batches,
    validate_batch,
)
from storage.cleaner import CleanerError, clean_log, cleanable_range
from storage.handle_pool import FileHandlePool
from storage.log import LogConfig, PartitionLog

T0 = 1_700_000_000_000
DAY = 86_400_000
COMPACT = {"cleanup_policy": "compact", "segment_bytes": 1024, "index_interval_bytes": 128, "delete_retention_ms": DAY}


# --------------------------------------------------------------------------- helpers


class Logs:
    """Opens PartitionLogs, each with its own handle pool so a simulated crash
    (dropping a log without closing it) leaves no cached descriptor behind."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.opened: list[tuple[PartitionLog, FileHandlePool]] = []

    def open(self, config: LogConfig | None = None, **kwargs) -> PartitionLog:
        pool = FileHandlePool()
        plog = PartitionLog(self.directory, config or LogConfig(**COMPACT), pool=pool, **kwargs)
        self.opened.append((plog, pool))
        return plog

    def crash(self, plog: PartitionLog) -> None:
        """Forget ``plog`` without flushing anything, as a killed process would."""
        for entry in self.opened:
            if entry[0] is plog:
                entry[1].close_all()
                self.opened.remove(entry)
                return

    def close_all(self) -> None:
        for plog, pool in self.opened:
            plog.close()
            pool.close_all()


@pytest.fixture
def logs(tmp_path):
    opened = Logs(tmp_path / "compacted-0")
    yield opened
    opened.close_all()


def append(plog: PartitionLog, records, *, codec=CompressionType.NONE, **kwargs):
    """Append one batch of ``(key, value, timestamp[, headers])`` tuples (str keys/values for brevity)."""
    items = []
    for record in records:
        key, value, ts = record[:3]
        headers = record[3] if len(record) > 3 else []
        items.append((_b(key), _b(value), headers, ts))
    return plog.append(build_batch(items, codec=codec, **kwargs))


def _b(text):
    return text.encode() if isinstance(text, str) else text


def file_batches(plog: PartitionLog):
    """(header, records) of every batch of every segment file, in offset order."""
    out = []
    for segment in plog.segments:
        if not segment.log_path.exists():  # a freshly rolled active segment is created on first use
            continue
        data = segment.log_path.read_bytes()
        for pos, size, header in iter_batches(data):
            validate_batch(data, pos, size)
            _, records = decode_batch_records(data, pos)
            out.append((header, records))
    return out


def file_records(plog: PartitionLog):
    return [(r.offset, r.key, r.value, r.timestamp_ms) for _, records in file_batches(plog) for r in records]


def consume(plog: PartitionLog, start: int | None = None):
    """Every record from ``start`` on, read through PartitionLog.read as a consumer does
    (moving to each batch's next offset, since cleaned batches may hold no record)."""
    offset = plog.log_start_offset if start is None else start
    out = []
    while offset < plog.high_watermark:
        data = plog.read(offset, 1 << 20)
        assert data, f"no data at offset {offset} below the high watermark {plog.high_watermark}"
        for pos, _, header in iter_batches(data):
            _, records = decode_batch_records(data, pos)
            out.extend((r.offset, r.key, r.value, r.timestamp_ms) for r in records if r.offset >= offset)
            offset = max(offset, header.next_offset)
    return out


def latest_per_key(records, below: int):
    """Model: the latest record of each key among ``records`` with offset < ``below``, plus all later ones."""
    latest = {}
    for offset, key, value, ts in records:
        if offset < below:
            latest[key] = (offset, key, value, ts)
    kept = sorted(latest.values()) + [r for r in records if r[0] >= below]
    return kept


def fill(plog: PartitionLog, *, keys: int = 5, rounds: int = 20, start_ts: int = T0, per_batch: int = 1, codec=CompressionType.NONE):
    """``rounds`` overwrites of ``keys`` keys; returns the records as (offset, key, value, ts)."""
    written = []
    ts = start_ts
    for r in range(rounds):
        for k in range(0, keys, per_batch):
            batch = []
            for j in range(k, min(k + per_batch, keys)):
                batch.append((f"key-{j}", f"value-{j}-{r}", ts))
                ts += 1
            result = append(plog, batch, codec=codec)
            for i, (key, value, t) in enumerate(batch):
                written.append((result.base_offset + i, key.encode(), value.encode(), t))
    return written


# --------------------------------------------------------------------------- deduplication


def test_only_the_latest_value_of_each_key_remains(logs):
    plog = logs.open()
    written = fill(plog, keys=5, rounds=20)
    assert len(plog.segments) > 3
    active_base = plog.active_segment.base_offset
    before = plog.size_bytes

    result = clean_log(plog, T0 + DAY)

    assert result.cleaned
    assert result.first_uncleanable_offset == active_base
    assert result.first_dirty_offset == active_base
    expected = latest_per_key(written, active_base)
    assert file_records(plog) == expected
    assert consume(plog) == expected
    assert result.records_removed == len(written) - len(expected)
    assert result.bytes_before - result.bytes_after > 0
    assert plog.size_bytes < before
    assert plog.log_end_offset == len(written)
    assert plog.high_watermark == len(written)
    assert plog.log_start_offset == 0


def test_offsets_timestamps_and_headers_are_preserved(logs):
    plog = logs.open()
    headers = [("trace", b"abc"), ("empty", None)]
    append(plog, [("a", "a1", T0 + 5, headers), ("b", "b1", T0 + 3), ("a", "a2", T0 + 9, headers)])
    append(plog, [("c", "c1", T0 - 7), ("b", "b2", T0 + 1)])
    plog.roll()
    append(plog, [("z", "z", T0 + 100)])

    clean_log(plog, T0 + DAY)

    batches = file_batches(plog)
    kept = [(r.offset, r.key, r.value, r.timestamp_ms, r.headers) for _, records in batches for r in records]
    assert kept == [
        (2, b"a", b"a2", T0 + 9, headers),
        (3, b"c", b"c1", T0 - 7, []),
        (4, b"b", b"b2", T0 + 1, []),
        (5, b"z", b"z", T0 + 100, []),
    ]
    # Rewritten batches keep their base offset and last offset (Kafka's filterTo).
    first, second = batches[0][0], batches[1][0]
    assert (first.base_offset, first.last_offset, first.records_count) == (0, 2, 1)
    assert (second.base_offset, second.last_offset, second.records_count) == (3, 4, 2)
    assert first.max_timestamp_ms == T0 + 9
    assert not first.has_delete_horizon


def test_reads_from_every_offset_and_timestamp_lookups_after_cleaning(logs):
    plog = logs.open()
    written = fill(plog, keys=4, rounds=15, per_batch=2)
    clean_log(plog, T0 + DAY)
    kept = file_records(plog)
    for offset in range(plog.high_watermark):
        expected_first = next(r for r in kept if r[0] >= offset)
        got = consume(plog, offset)
        assert got[0] == expected_first, offset
        assert got == [r for r in kept if r[0] >= offset]
    for target in range(T0 - 1, written[-1][3] + 2):
        expected = next(((r[0], r[3]) for r in kept if r[3] >= target), None)
        assert plog.offset_for_timestamp(target) == expected, target
    assert plog.max_timestamp_offset() == (kept[-1][0], kept[-1][3])


def test_reopen_after_cleaning_gives_the_same_log(logs):
    plog = logs.open()
    fill(plog, keys=3, rounds=12)
    clean_log(plog, T0 + DAY)
    expected = consume(plog)
    segments = [(s.base_offset, s.size_bytes) for s in plog.segments]
    plog.close()
    for clean_shutdown in (True, False):
        again = logs.open(recovery_point=None, clean_shutdown=clean_shutdown)
        assert consume(again) == expected
        assert [(s.base_offset, s.size_bytes) for s in again.segments] == segments
        assert again.log_end_offset == plog.log_end_offset
        again.close()


def test_the_active_segment_is_never_touched(logs):
    plog = logs.open()
    fill(plog, keys=3, rounds=10)
    active = plog.active_segment
    append(plog, [("key-0", "x", T0 + 500)])
    append(plog, [("key-0", "y", T0 + 501)])
    assert plog.active_segment is active
    data = active.log_path.read_bytes()

    clean_log(plog, T0 + DAY)

    assert plog.active_segment is active
    assert active.log_path.read_bytes() == data
    tail = [r for r in file_records(plog) if r[0] >= active.base_offset]
    assert [r[2] for r in tail][-2:] == [b"x", b"y"]


def test_a_log_of_one_segment_has_nothing_to_clean(logs):
    plog = logs.open()
    append(plog, [("a", "1", T0), ("a", "2", T0)])
    result = clean_log(plog, T0 + DAY, force=True)
    assert not result.cleaned
    assert result.skipped == "no cleanable offsets"
    assert len(file_records(plog)) == 2


def test_cleaning_stops_at_the_high_watermark(logs):
    plog = logs.open()
    written = fill(plog, keys=2, rounds=30)
    bases = [s.base_offset for s in plog.segments]
    plog.reset_high_watermark(bases[2])  # as a follower's unreplicated tail would leave it
    result = clean_log(plog, T0 + DAY)
    assert result.first_uncleanable_offset == bases[2]
    assert result.first_dirty_offset == bases[2]
    assert file_records(plog) == latest_per_key(written, bases[2])


def test_a_delete_only_topic_is_not_cleaned(logs):
    plog = logs.open(LogConfig(**{**COMPACT, "cleanup_policy": "delete"}))
    fill(plog, keys=2, rounds=20)
    result = clean_log(plog, T0 + DAY, force=True)
    assert not result.cleaned and "does not compact" in result.skipped


def test_compact_delete_policy_is_cleaned(logs):
    plog = logs.open(LogConfig(**{**COMPACT, "cleanup_policy": "compact,delete"}))
    written = fill(plog, keys=2, rounds=20)
    result = clean_log(plog, T0 + DAY)
    assert result.cleaned
    assert file_records(plog) == latest_per_key(written, plog.active_segment.base_offset)


# --------------------------------------------------------------------------- min.compaction.lag.ms


def test_min_compaction_lag_keeps_recent_segments_dirty(logs):
    lag = 60_000
    plog = logs.open(LogConfig(**{**COMPACT, "min_compaction_lag_ms": lag}))
    written = []
    # Old records, then records one minute newer, each batch in its own segment.
    for i in range(6):
        ts = T0 + i * 30_000
        r = append(plog, [("k", f"v{i}", ts)])
        written.append((r.base_offset, b"k", f"v{i}".encode(), ts))
        plog.roll()
    now = T0 + 2 * 30_000 + lag  # segments with max timestamp > now - lag (i >= 3) are too new
    rng = cleanable_range(plog, now)
    assert rng.first_uncleanable_offset == 3
    result = clean_log(plog, now)
    assert result.first_dirty_offset == 3
    # Only offsets 0-2 were compacted (keeping the latest of them: 2); 3-5 untouched.
    assert [r[0] for r in file_records(plog)] == [2, 3, 4, 5]

    later = T0 + 5 * 30_000 + lag
    result = clean_log(plog, later, first_dirty_offset=result.first_dirty_offset)
    assert result.cleaned
    assert [r[0] for r in file_records(plog)] == [5]
    assert file_records(plog) == [written[5]]


# --------------------------------------------------------------------------- tombstones


def test_tombstones_get_a_delete_horizon_and_are_removed_after_it(logs):
    plog = logs.open()
    append(plog, [("a", "a1", T0), ("b", "b1", T0 + 1)])
    append(plog, [("a", None, T0 + 2), ("c", "c1", T0 + 3)])
    plog.roll()
    append(plog, [("d", "d1", T0 + 4)])
    plog.roll()

    now1 = T0 + 1000
    result = clean_log(plog, now1)
    assert result.delete_horizons_set == 1
    assert result.tombstones_removed == 0
    assert file_records(plog) == [
        (1, b"b", b"b1", T0 + 1),
        (2, b"a", None, T0 + 2),
        (3, b"c", b"c1", T0 + 3),
        (4, b"d", b"d1", T0 + 4),
    ]
    header = file_batches(plog)[1][0]
    assert header.has_delete_horizon
    assert header.attributes & 0x40
    assert header.base_timestamp_ms == now1 + DAY  # baseTimestamp holds the horizon
    assert header.max_timestamp_ms == T0 + 3
    horizon = header.base_timestamp_ms

    # Before the horizon the tombstone stays, and the horizon is not moved.
    result = clean_log(plog, horizon - 1, first_dirty_offset=None)
    assert result.cleaned and result.tombstones_removed == 0 and result.delete_horizons_set == 0
    assert (2, b"a", None, T0 + 2) in file_records(plog)
    assert file_batches(plog)[1][0].base_timestamp_ms == horizon

    # At the horizon it goes; the rest of its batch keeps the horizon flag.
    result = clean_log(plog, horizon, first_dirty_offset=None)
    assert result.tombstones_removed == 1
    assert file_records(plog) == [(1, b"b", b"b1", T0 + 1), (3, b"c", b"c1", T0 + 3), (4, b"d", b"d1", T0 + 4)]
    header = file_batches(plog)[1][0]
    assert header.has_delete_horizon and header.base_timestamp_ms == horizon
    assert consume(plog) == file_records(plog)


def test_a_tombstone_in_the_newest_cleaned_batch_keeps_an_empty_batch_when_removed(logs):
    plog = logs.open()
    append(plog, [("a", "a1", T0)])
    append(plog, [("a", None, T0 + 1)])
    plog.roll()
    append(plog, [("z", "z", T0 + 2)])
    result = clean_log(plog, T0)
    assert file_records(plog) == [(1, b"a", None, T0 + 1), (2, b"z", b"z", T0 + 2)]
    result = clean_log(plog, T0 + DAY, first_dirty_offset=None)
    assert result.tombstones_removed == 1
    assert file_records(plog) == [(2, b"z", b"z", T0 + 2)]
    # The batch ending at the first uncleanable offset stays as a bare header,
    # so the cleaned segment still ends at offset 1 (Kafka's upperBoundOffsetOfCleaningRound).
    header, records = file_batches(plog)[0]
    assert (header.base_offset, header.last_offset, header.records_count, records) == (1, 1, 0, [])
    assert plog.segments[0].next_offset == 2


def test_delete_horizon_is_capped_at_int64_max(logs):
    plog = logs.open(LogConfig(**{**COMPACT, "delete_retention_ms": 2**63 - 1}))
    append(plog, [("a", None, T0)])
    plog.roll()
    clean_log(plog, T0)
    assert file_batches(plog)[0][0].base_timestamp_ms == 2**63 - 1
    assert file_records(plog) == [(0, b"a", None, T0)]


def test_log_append_time_batches_keep_their_timestamp(logs):
    plog = logs.open(LogConfig(**{**COMPACT, "message_timestamp_type": "LogAppendTime"}), clock_ms=lambda: T0 + 77)
    append(plog, [("a", "1", T0 - 5), ("a", None, T0 - 4), ("b", "2", T0 - 3)])
    plog.roll()
    clean_log(plog, T0 + 100)
    header, records = file_batches(plog)[0]
    assert header.timestamp_type == 1 and header.has_delete_horizon
    assert header.max_timestamp_ms == T0 + 77
    assert [(r.offset, r.value, r.timestamp_ms) for r in records] == [(1, None, T0 + 77), (2, b"2", T0 + 77)]


# --------------------------------------------------------------------------- codecs and kafka-python


@pytest.mark.parametrize("codec", list(CompressionType))
def test_compressed_batches_are_cleaned_and_kafka_python_reads_them(logs, codec):
    plog = logs.open()
    written = fill(plog, keys=6, rounds=6, per_batch=3, codec=codec)
    r = append(plog, [("key-0", None, T0 + 999), ("key-new", "n", T0 + 1000)], codec=codec)
    written += [(r.base_offset, b"key-0", None, T0 + 999), (r.base_offset + 1, b"key-new", b"n", T0 + 1000)]
    plog.roll()
    clean_log(plog, T0 + DAY)

    expected = latest_per_key(written, plog.active_segment.base_offset)
    assert file_records(plog) == expected
    assert all(header.codec == codec for header, _ in file_batches(plog))
    assert any(header.has_delete_horizon for header, _ in file_batches(plog))
    seen = []
    for segment in plog.segments:
        if not segment.log_path.exists():
            continue
        memory = MemoryRecords(segment.log_path.read_bytes())
        while memory.has_next():
            batch = memory.next_batch()
            assert batch.validate_crc()
            assert batch.compression_type == codec
            seen.extend((rec.offset, rec.key, rec.value, rec.timestamp) for rec in batch)
    assert seen == expected


# --------------------------------------------------------------------------- producers and control batches


def test_producer_fields_are_kept_and_the_last_batch_of_a_producer_stays_as_a_header(logs):
    plog = logs.open()
    append(plog, [("a", "1", T0), ("b", "1", T0)], producer_id=7, producer_epoch=2, base_sequence=0)
    append(plog, [("a", "2", T0), ("c", "1", T0)], producer_id=7, producer_epoch=2, base_sequence=2)
    append(plog, [("b", "2", T0), ("c", "2", T0)], producer_id=8, producer_epoch=0, base_sequence=0)
    plog.roll()
    append(plog, [("a", "3", T0)])
    append(plog, [("b", "3", T0), ("c", "3", T0)])
    plog.roll()

    clean_log(plog, T0 + DAY)

    batches = [(h.base_offset, h.last_offset, h.records_count, h.producer_id, h.producer_epoch, h.base_sequence)
               for h, _ in file_batches(plog)]
    # Producer 7's first batch is gone; its last one (offsets 2-3) and producer 8's
    # only one (4-5) stay as empty headers with their sequence fields.
    assert batches == [
        (2, 3, 0, 7, 2, 2),
        (4, 5, 0, 8, 0, 0),
        (6, 6, 1, -1, -1, -1),
        (7, 8, 2, -1, -1, -1),
    ]
    # A reopened log rebuilds the producer state from those headers: a retry of
    # producer 7's last batch is still recognised as a duplicate.
    plog.close()
    again = logs.open()
    retry = build_batch([(b"a", b"2", [], T0), (b"c", b"1", [], T0)], producer_id=7, producer_epoch=2, base_sequence=2)
    result = again.append(retry)
    assert result.duplicate and (result.base_offset, result.last_offset) == (2, 3)


def test_a_marker_of_an_empty_transaction_gets_a_delete_horizon(logs):
    plog = logs.open()
    append(plog, [("a", "1", T0)])
    # A commit marker at offset 1 with no transaction data before it, put
    # straight into the segment.
    marker = bytearray(build_control_batch(ControlType.COMMIT, producer_id=9, producer_epoch=0, coordinator_epoch=1, timestamp_ms=T0))
    struct.pack_into(">q", marker, 0, 1)
    plog.active_segment.append(bytes(marker), 1, [(0, 1, T0)])
    plog.high_watermark = plog.log_end_offset
    append(plog, [("a", "2", T0)])
    plog.roll()

    clean_log(plog, T0 + DAY)

    data = plog.segments[0].log_path.read_bytes()
    batches = list(iter_batches(data))
    assert len(batches) == 2
    _, _, header = batches[0]
    # Kafka's rule: a marker whose transaction holds no data left is kept
    # until its delete horizon passes, and gets one on this cleaning.
    assert header.is_control and header.has_delete_horizon
    assert file_records(plog)[-1] == (2, b"a", b"2", T0)


def test_keyless_records_are_removed_like_kafka_does(logs):
    # A compacted topic refuses records without a key, so they can only come from
    # before the topic was switched to compaction.
    plog = logs.open(LogConfig(**{**COMPACT, "cleanup_policy": "delete"}))
    append(plog, [(None, "orphan", T0), ("a", "1", T0)])
    plog.roll()
    append(plog, [(None, "new orphan", T0)])
    plog.config = LogConfig(**COMPACT)
    result = clean_log(plog, T0 + DAY)
    assert result.keyless_removed == 1
    assert file_records(plog) == [(1, b"a", b"1", T0), (2, None, b"new orphan", T0)]


# --------------------------------------------------------------------------- grouping


def test_small_cleaned_segments_are_merged_up_to_segment_bytes(logs):
    config = LogConfig(**{**COMPACT, "segment_bytes": 4096})
    plog = logs.open(config)
    written = []
    for i in range(30):
        r = append(plog, [(f"k{i % 3}", f"v{i}" * 10, T0 + i)])
        written.append((r.base_offset, f"k{i % 3}".encode(), (f"v{i}" * 10).encode(), T0 + i))
        plog.roll()
    assert len(plog.segments) == 31
    sizes = [s.size_bytes for s in plog.segments[:-1]]
    # Groups are bounded by the sum of the *source* sizes, as in Kafka.
    groups = [[]]
    for size in sizes:
        if groups[-1] and sum(groups[-1]) + size > 4096:
            groups.append([])
        groups[-1].append(size)
    result = clean_log(plog, T0 + DAY)
    assert result.segments_cleaned == 30
    assert result.segments_written == len(groups) == len(plog.segments) - 1
    assert len(groups) < 30
    assert all(s.size_bytes <= 4096 for s in plog.segments)
    assert file_records(plog) == latest_per_key(written, 30)
    assert consume(plog) == latest_per_key(written, 30)
    assert plog.segments[0].base_offset == 0


def test_a_big_log_needs_several_groups(logs):
    plog = logs.open(LogConfig(**{**COMPACT, "segment_bytes": 2048}))
    written = fill(plog, keys=200, rounds=1)  # all distinct: nothing to remove...
    written += fill(plog, keys=1, rounds=1, start_ts=T0 + 10_000)  # ...but the first key
    plog.roll()
    before = [(s.base_offset, s.log_path.read_bytes()) for s in plog.segments[:-1]]
    result = clean_log(plog, T0 + DAY)
    assert result.records_removed == 1  # the old key-0
    assert all(s.size_bytes <= 2048 for s in plog.segments)
    # Unchanged single segments are not rewritten at all.
    after = {s.base_offset: s.log_path.read_bytes() for s in plog.segments if s.log_path.exists()}
    unchanged = [base for base, data in before if after.get(base) == data]
    assert unchanged
    assert file_records(plog) == latest_per_key(written, plog.active_segment.base_offset)


# --------------------------------------------------------------------------- checkpoint, dirty ratio, map size


def test_checkpoint_and_dirty_ratio(logs):
    plog = logs.open()
    written = fill(plog, keys=40, rounds=2)
    result = clean_log(plog, T0 + DAY)
    checkpoint = result.first_dirty_offset
    assert checkpoint == plog.active_segment.base_offset

    # Nothing new: nothing to do.
    result = clean_log(plog, T0 + DAY, first_dirty_offset=checkpoint, force=True)
    assert result.skipped == "no cleanable offsets" and result.first_dirty_offset == checkpoint

    # A little new data: below the ratio, skipped unless forced.
    for i in range(3):
        append(plog, [(f"key-{i}", "new", T0 + 5000 + i)])
    plog.roll()
    rng = cleanable_range(plog, T0 + DAY, checkpoint)
    assert rng.first_dirty_offset == checkpoint
    assert 0 < rng.dirty_ratio < 0.5
    result = clean_log(plog, T0 + DAY, first_dirty_offset=checkpoint)
    assert not result.cleaned and "dirty ratio" in result.skipped
    assert result.first_dirty_offset == checkpoint
    result = clean_log(plog, T0 + DAY, first_dirty_offset=checkpoint, force=True)
    assert result.cleaned
    assert result.first_dirty_offset == plog.active_segment.base_offset
    values = {key: value for _, key, value, _ in file_records(plog) if _ < checkpoint or value == b"new"}
    expected = {key: value for _, key, value, _ in written if _ < checkpoint}
    expected.update({f"key-{i}".encode(): b"new" for i in range(3)})
    assert values == expected
    keys = [key for offset, key, _, _ in file_records(plog) if offset < result.first_dirty_offset]
    assert len(keys) == len(set(keys))


def test_an_out_of_range_checkpoint_falls_back_to_the_log_start(logs):
    plog = logs.open()
    fill(plog, keys=2, rounds=10)
    for bad in (-5, plog.log_end_offset + 10):
        assert cleanable_range(plog, T0, bad).first_dirty_offset == plog.log_start_offset


def test_a_full_offset_map_cleans_a_prefix_and_resumes(logs):
    plog = logs.open()
    written = fill(plog, keys=10, rounds=4)
    end = plog.active_segment.base_offset
    checkpoint = None
    passes = 0
    while True:
        result = clean_log(plog, T0 + DAY, first_dirty_offset=checkpoint, max_map_entries=3, force=True)
        if not result.cleaned:
            break
        passes += 1
        assert result.map_entries <= 3
        assert checkpoint is None or result.first_dirty_offset > checkpoint
        checkpoint = result.first_dirty_offset
        assert passes < 50
    assert passes > 1
    assert checkpoint == end
    # Every key's latest value is there and nothing is duplicated.
    records = file_records(plog)
    assert [r[0] for r in records] == sorted({r[0] for r in records})
    latest = {key: (offset, value) for offset, key, value, _ in written}
    present = {key: (offset, value) for offset, key, value, _ in records}
    assert present == latest
    # A final pass with a big enough map leaves one record per key.
    clean_log(plog, T0 + DAY, first_dirty_offset=None)
    assert file_records(plog) == latest_per_key(written, end)


def test_max_map_entries_must_be_positive(logs):
    plog = logs.open()
    with pytest.raises(ValueError):
        clean_log(plog, T0, max_map_entries=0)


@pytest.mark.parametrize("segment_index", [0, 1])
@pytest.mark.parametrize("where", [16, -1])  # the magic byte of the first batch; the last byte of the file
def test_a_corrupt_segment_aborts_the_cleaning_without_changes(logs, segment_index, where):
    plog = logs.open()
    fill(plog, keys=2, rounds=30)
    assert len(plog.segments) > 2
    victim = plog.segments[segment_index].log_path
    data = bytearray(victim.read_bytes())
    data[where] ^= 0x05
    victim.write_bytes(bytes(data))
    files = {p.name: p.read_bytes() for p in plog.directory.iterdir()}
    with pytest.raises(CleanerError):
        clean_log(plog, T0 + DAY)
    assert {p.name: p.read_bytes() for p in plog.directory.iterdir()} == files


# --------------------------------------------------------------------------- crash safety


def _interrupted_clean(logs, stage: str):
    """Clean a log but stop its segment swap at ``stage``, then reopen it from disk.

    Returns (records before, records a finished cleaning gives, reopened log)."""
    plog = logs.open(LogConfig(**{**COMPACT, "segment_bytes": 1 << 20}))
    written = []
    for i in range(36):
        r = append(plog, [(f"key-{i % 3}", f"value-{i}", T0 + i)])
        written.append((r.base_offset, f"key-{i % 3}".encode(), f"value-{i}".encode(), T0 + i))
        if i % 4 == 3:
            plog.roll()  # small segments, all cleaned into one
    plog.flush()
    before = file_records(plog)
    expected = latest_per_key(written, plog.active_segment.base_offset)

    class Crash(Exception):
        pass

    def crashing_replace(old, cleaned_base):
        stem = f"{cleaned_base:020d}"
        cleaned = plog.directory / f"{stem}.log.cleaned"
        assert cleaned.exists()
        assert len(old) > 2
        if stage == "cleaned":
            raise Crash
        os.replace(cleaned, plog.directory / f"{stem}.log.swap")
        if stage == "swap":
            raise Crash
        for segment in old[: len(old) // 2 + 1]:
            segment.delete()
        if stage == "partly-deleted":
            raise Crash
        for segment in old[len(old) // 2 + 1 :]:
            segment.delete()
        raise Crash  # "deleted": every old segment gone, the swap not renamed yet

    plog.replace_segments = crashing_replace
    with pytest.raises(Crash):
        clean_log(plog, T0 + DAY)
    logs.crash(plog)
    return before, expected, logs.open()


@pytest.mark.parametrize("stage", ["cleaned", "swap", "partly-deleted", "deleted"])
def test_an_interrupted_swap_leaves_old_or_new_content(logs, stage):
    before, expected, plog = _interrupted_clean(logs, stage)
    records = file_records(plog)
    assert records == (before if stage == "cleaned" else expected)
    assert consume(plog) == records
    assert not [p for p in plog.directory.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
    # Whatever happened, a new cleaning finishes the job (up to the reopened log's
    # active segment: the empty one rolled before the crash was never created).
    clean_log(plog, T0 + DAY)
    assert file_records(plog) == latest_per_key(records, plog.active_segment.base_offset)
    latest = {key: (offset, value) for offset, key, value, _ in expected}
    assert {key: (offset, value) for offset, key, value, _ in file_records(plog)} == latest


def test_a_leftover_cleaned_file_is_dropped_on_reopen(logs):
    plog = logs.open()
    written = fill(plog, keys=2, rounds=10)
    plog.close()
    stem = f"{0:020d}"
    (plog.directory / f"{stem}.log.cleaned").write_bytes(b"garbage that must never be read")
    (plog.directory / f"{stem}.index.cleaned").write_bytes(b"\0" * 8)
    again = logs.open()
    assert file_records(again) == written
    assert not list(again.directory.glob("*.cleaned"))


def test_a_leftover_swap_file_is_completed_on_reopen(logs):
    """A hand-made swap: the cleaned first two segments, written as the cleaner would."""
    plog = logs.open()
    written = fill(plog, keys=2, rounds=10)
    second = plog.segments[1]
    kept = {}
    for offset, key, value, ts in written:
        if offset < second.next_offset:
            kept[key] = (offset, key, value, ts)
    later = {key for offset, key, _, _ in written if offset >= second.next_offset}
    survivors = sorted(r for key, r in kept.items() if key not in later)
    # Keep the last batch of the cleaned range as the cleaner does, so the swap covers both segments.
    last = max(r[0] for r in written if r[0] < second.next_offset)
    swap = b"".join(
        build_batch([(key, value, [], ts)], base_offset=offset) for offset, key, value, ts in survivors if offset != last
    )
    swap += build_batch([(written[last][1], written[last][2], [], written[last][3])], base_offset=last)
    plog.close()
    (plog.directory / f"{0:020d}.log.swap").write_bytes(swap)
    again = logs.open()
    records = file_records(again)
    assert again.segments[0].base_offset == 0
    assert second.base_offset not in [s.base_offset for s in again.segments]
    expected = [r for r in survivors if r[0] != last] + [written[last]] + [r for r in written if r[0] >= second.next_offset]
    assert records == expected
    assert consume(again) == expected
