"""spark_jobs.segment_reader on hand-made segment files (no broker, no Spark)."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.compression import CompressionType
from protocol.exceptions import ProtocolError
from protocol.records import (
    ControlType,
    TimestampType,
    build_batch,
    build_control_batch,
    iter_batches,
    patch_log_append_time,
)
from spark_jobs.segment_reader import (
    AbortedRange,
    aborted_by_producer,
    earliest_offset,
    find_partitions,
    latest_offset,
    list_segments,
    offset_for_timestamp,
    read_piece,
    read_range,
    skip_batch,
    split_by_segment,
    split_piece,
    split_to_min_partitions,
    with_aborted,
)
from spark_jobs.txn_state import transaction_state
from storage.checkpoint import LOG_START_OFFSET_CHECKPOINT, write_offsets
from storage.index import OFFSET_ENTRY, TIME_ENTRY

T0 = 1_700_000_000_000


def record(offset: int, headers=()):
    key = None if offset % 3 == 0 else b"k%d" % offset
    return (key, b"v%d" % offset, list(headers), T0 + offset)


def write_segment(pdir: Path, base: int, batches: list[tuple[int, int, int]], tail: bytes = b"", index=()) -> None:
    """``batches``: (base offset, record count, codec) written back to back."""
    pdir.mkdir(parents=True, exist_ok=True)
    data = bytearray()
    for first, count, codec in batches:
        data += build_batch(
            [record(o, [("h", b"%d" % o)] if o % 2 else []) for o in range(first, first + count)],
            base_offset=first,
            codec=codec,
        )
    (pdir / f"{base:020d}.log").write_bytes(bytes(data) + tail)
    (pdir / f"{base:020d}.index").write_bytes(b"".join(OFFSET_ENTRY.pack(r, p) for r, p in index) + bytes(16))


@pytest.fixture
def log_dir(tmp_path):
    """topic t-0: segments at 0 (offsets 0-9, two codecs), 10 (10-24), 25 (25-29 + a torn tail)."""
    pdir = tmp_path / "t-0"
    write_segment(pdir, 0, [(0, 4, CompressionType.NONE), (4, 6, CompressionType.GZIP)])
    write_segment(
        pdir, 10, [(10, 5, CompressionType.SNAPPY), (15, 5, CompressionType.LZ4), (20, 5, CompressionType.ZSTD)]
    )
    torn = build_batch([record(30)], base_offset=30)[:-7]
    write_segment(pdir, 25, [(25, 5, CompressionType.NONE)], tail=torn)
    (tmp_path / "t-1").mkdir()
    (tmp_path / "__cluster_metadata-0").mkdir()
    (tmp_path / "other-stuff").mkdir()
    return tmp_path


def test_find_partitions_skips_metadata_and_non_partition_dirs(log_dir):
    found = find_partitions([str(log_dir), str(log_dir / "missing")])
    assert sorted(found) == [("t", 0), ("t", 1)]
    assert [base for base, _ in list_segments(found[("t", 0)].path)] == [0, 10, 25]


def test_offsets_and_pieces(log_dir):
    pdir = find_partitions([log_dir])[("t", 0)]
    assert earliest_offset(pdir) == 0
    assert latest_offset(pdir) == 30  # the torn batch at 30 does not count
    pieces = split_by_segment(pdir, 3, 27)
    assert [(p.segment_base_offset, p.start, p.end) for p in pieces] == [(0, 3, 10), (10, 10, 25), (25, 25, 27)]
    assert split_by_segment(pdir, 5, 5) == []
    empty = find_partitions([log_dir])[("t", 1)]
    assert (earliest_offset(empty), latest_offset(empty)) == (0, 0)


def test_read_range_every_codec_cut_to_the_range(log_dir):
    pdir = find_partitions([log_dir])[("t", 0)]
    columns = read_range(pdir, 2, 28)
    assert columns.offset == list(range(2, 28))
    assert columns.key == [None if o % 3 == 0 else b"k%d" % o for o in range(2, 28)]
    assert columns.value == [b"v%d" % o for o in range(2, 28)]
    assert columns.timestamp_ms == [T0 + o for o in range(2, 28)]
    assert columns.timestamp_type == [TimestampType.CREATE_TIME] * 26
    assert columns.headers == [[("h", b"%d" % o)] if o % 2 else [] for o in range(2, 28)]
    assert set(columns.topic) == {"t"} and set(columns.partition) == {0}
    # past the torn tail: only whole batches
    assert read_range(pdir, 0, 100).offset == list(range(30))


def test_index_is_used_as_a_hint(tmp_path):
    pdir = tmp_path / "t-0"
    write_segment(pdir, 0, [(0, 5, 0), (5, 5, 0), (10, 5, 0)])
    positions = [pos for pos, _size, _header in iter_batches((pdir / f"{0:020d}.log").read_bytes())]
    # Kafka's entry: the batch whose last offset is 9 starts at positions[1].
    write_segment(pdir, 0, [(0, 5, 0), (5, 5, 0), (10, 5, 0)], index=[(9, positions[1])])
    part = find_partitions([tmp_path])[("t", 0)]
    assert read_range(part, 11, 15).offset == [11, 12, 13, 14]
    assert read_range(part, 7, 12).offset == [7, 8, 9, 10, 11]
    assert latest_offset(part) == 15
    # A hint that does not land on a batch header is ignored.
    write_segment(pdir, 0, [(0, 5, 0), (5, 5, 0), (10, 5, 0)], index=[(9, positions[1] + 3)])
    assert read_range(part, 11, 15).offset == [11, 12, 13, 14]


def test_control_batches_are_skipped(tmp_path):
    pdir = tmp_path / "t-0"
    pdir.mkdir()
    data = build_batch([record(0), record(1)], base_offset=0, producer_id=7, is_transactional=True)
    data += build_control_batch(
        ControlType.COMMIT, base_offset=2, producer_id=7, producer_epoch=0, coordinator_epoch=0, timestamp_ms=T0
    )
    data += build_batch([record(3)], base_offset=3)
    (pdir / f"{0:020d}.log").write_bytes(data)
    part = find_partitions([tmp_path])[("t", 0)]
    assert read_range(part, 0, 4).offset == [0, 1, 3]
    assert latest_offset(part) == 4


def test_log_append_time_batches_report_the_broker_time(tmp_path):
    pdir = tmp_path / "t-0"
    write_segment(pdir, 0, [])
    batch = bytearray(build_batch([record(0), record(1)], timestamp_type=TimestampType.LOG_APPEND_TIME))

    patch_log_append_time(batch, 0, 42)
    (pdir / f"{0:020d}.log").write_bytes(bytes(batch))
    columns = read_range(find_partitions([tmp_path])[("t", 0)], 0, 2)
    assert columns.timestamp_ms == [42, 42]
    assert columns.timestamp_type == [TimestampType.LOG_APPEND_TIME] * 2


def test_corrupt_batch_raises(tmp_path):
    pdir = tmp_path / "t-0"
    write_segment(pdir, 0, [(0, 3, 0)])
    path = pdir / f"{0:020d}.log"
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF
    path.write_bytes(bytes(data))
    part = find_partitions([tmp_path])[("t", 0)]
    with pytest.raises(ProtocolError, match="CRC"):
        read_piece(split_by_segment(part, 0, 3)[0])


def test_log_start_checkpoint_raises_earliest(log_dir):
    write_offsets(log_dir / LOG_START_OFFSET_CHECKPOINT, {("t", 0): 12})
    assert earliest_offset(find_partitions([log_dir])[("t", 0)]) == 12


def test_large_batches_across_read_chunks(tmp_path, monkeypatch):
    import spark_jobs.segment_reader as sr

    monkeypatch.setattr(sr, "READ_CHUNK_BYTES", 100)
    pdir = tmp_path / "t-0"
    pdir.mkdir()
    data = b"".join(build_batch([(None, bytes(300) + b"%d" % o)], base_offset=o) for o in range(5))
    (pdir / f"{0:020d}.log").write_bytes(data)
    part = sr.find_partitions([tmp_path])[("t", 0)]
    got = [c.value for c in sr.iter_piece(sr.split_by_segment(part, 0, 5)[0])]
    assert [v[-1:] for v in got[0]] == [b"0", b"1", b"2", b"3", b"4"]


def test_a_vanished_segment_reads_empty_or_raises(log_dir):
    from spark_jobs.segment_reader import SegmentGoneError, iter_piece

    piece = split_by_segment(find_partitions([log_dir])[("t", 0)], 0, 30)[0]
    Path(piece.log_path).unlink()
    assert list(iter_piece(piece)) == []
    with pytest.raises(SegmentGoneError, match="was deleted"):
        list(iter_piece(piece, missing_ok=False))


# --------------------------------------------------------------------------- offsets by timestamp


def write_timed_segment(pdir: Path, base: int, batches: list[list[int]], first_offsets: list[int]) -> list[tuple]:
    """Batches of records with the given timestamps; returns the ``.timeindex`` entries the
    broker would write: (largest timestamp so far, relative last offset) when a batch raises it."""
    pdir.mkdir(parents=True, exist_ok=True)
    data = bytearray()
    entries = []
    largest = -1
    for first, timestamps in zip(first_offsets, batches):
        data += build_batch([(None, b"v%d" % (first + i), [], t) for i, t in enumerate(timestamps)], base_offset=first)
        if max(timestamps) > largest:
            largest = max(timestamps)
            entries.append((largest, first + len(timestamps) - 1 - base))
    (pdir / f"{base:020d}.log").write_bytes(bytes(data))
    return entries


def write_time_index(pdir: Path, base: int, entries, zero_fill: int = 0) -> None:
    data = b"".join(TIME_ENTRY.pack(t, r) for t, r in entries) + bytes(zero_fill)
    (pdir / f"{base:020d}.timeindex").write_bytes(data)


@pytest.fixture
def timed_log(tmp_path):
    """t-0: timestamps that go up and down across batches, in three segments.

    Segment 0 (rolled, trimmed .timeindex), segment 8 (rolled, no .timeindex),
    segment 12 (active: preallocated .timeindex missing its newest entry).
    Returns (log dir, {offset: timestamp}, {base: timeindex entries}).
    """
    pdir = tmp_path / "t-0"
    layout = {
        0: ([[100, 101, 102], [90, 200, 95], [150, 150]], [0, 3, 6]),
        8: ([[50, 300], [250, 260]], [8, 10]),
        12: ([[400], [350, 500]], [12, 13]),
    }
    timestamps, index_entries = {}, {}
    for base, (batches, firsts) in layout.items():
        index_entries[base] = write_timed_segment(pdir, base, batches, firsts)
        for first, batch in zip(firsts, batches):
            timestamps.update({first + i: t for i, t in enumerate(batch)})
    write_time_index(pdir, 0, index_entries[0])
    write_time_index(pdir, 12, index_entries[12][:1], zero_fill=120)  # stale and preallocated
    return tmp_path, timestamps, index_entries


def brute_force_offset(timestamps: dict[int, int], target: int, floor: int = 0):
    return next((o for o in sorted(timestamps) if o >= floor and timestamps[o] >= target), None)


TARGETS = [0, 50, 90, 100, 101, 103, 150, 199, 200, 201, 250, 260, 261, 300, 301, 350, 400, 401, 450, 500, 501]


def test_offset_for_timestamp_is_the_first_offset_at_or_after_the_target(timed_log):
    log_dir, timestamps, _entries = timed_log
    pdir = find_partitions([log_dir])[("t", 0)]
    assert offset_for_timestamp(pdir, 103) == 4  # offset 3 (90) is older, 4 (200) is not
    assert offset_for_timestamp(pdir, 201) == 9  # segment 0 tops out at 200
    assert offset_for_timestamp(pdir, 450) == 14  # past the stale entry of the active segment
    assert offset_for_timestamp(pdir, 501) is None
    for target in TARGETS:
        assert offset_for_timestamp(pdir, target) == brute_force_offset(timestamps, target), target


@pytest.mark.parametrize("damage", ["missing", "torn", "bogus"])
def test_offset_for_timestamp_treats_the_time_index_as_a_hint(timed_log, damage):
    log_dir, timestamps, _entries = timed_log
    pdir = log_dir / "t-0"
    for base in (0, 12):
        path = pdir / f"{base:020d}.timeindex"
        if damage == "missing":
            path.unlink()
        elif damage == "torn":
            path.write_bytes(path.read_bytes()[: TIME_ENTRY.size + 5])
        else:  # entries that do not match the log (left over from before a truncation, say)
            write_time_index(pdir, base, [(95, 2), (120, 5)] if base == 0 else [(360, 0)])
    part = find_partitions([log_dir])[("t", 0)]
    for target in TARGETS:
        assert offset_for_timestamp(part, target) == brute_force_offset(timestamps, target), (damage, target)


def test_offset_for_timestamp_decodes_one_batch_and_skips_older_segments(timed_log, monkeypatch):
    import spark_jobs.segment_reader as sr

    log_dir, _timestamps, _entries = timed_log
    part = find_partitions([log_dir])[("t", 0)]
    decoded, headers_read = [], []
    real_decode, real_walk = sr.decode_batch_records, sr._iter_file_headers

    def counting_walk(path, position=0):
        for item in real_walk(path, position):
            headers_read.append(Path(path).stem)
            yield item

    monkeypatch.setattr(sr, "decode_batch_records", lambda buf, pos=0: decoded.append(1) or real_decode(buf, pos))
    monkeypatch.setattr(sr, "_iter_file_headers", counting_walk)
    assert offset_for_timestamp(part, 260) == 9
    assert len(decoded) == 1
    # Segment 0's trimmed .timeindex says it is all older than 260: only the batch
    # of its last entry is looked at (to check the entry), not its three batches.
    assert headers_read.count(f"{0:020d}") < 3


def test_offset_for_timestamp_ignores_records_below_the_log_start(timed_log):
    log_dir, timestamps, _entries = timed_log
    part = find_partitions([log_dir])[("t", 0)]
    assert offset_for_timestamp(part, 0, log_start_offset=5) == 5
    write_offsets(log_dir / LOG_START_OFFSET_CHECKPOINT, {("t", 0): 10})
    assert offset_for_timestamp(part, 250) == 10  # offset 9 (300) is below the log start
    assert offset_for_timestamp(part, 0) == brute_force_offset(timestamps, 0, floor=10)


# --------------------------------------------------------------------------- splitting


@pytest.fixture
def big_segment(tmp_path):
    """big-0: one segment of 40 batches of 5 records (offsets 0-199), an index entry per batch."""
    pdir = tmp_path / "big-0"
    pdir.mkdir()
    data = b"".join(
        build_batch([record(o) for o in range(first, first + 5)], base_offset=first) for first in range(0, 200, 5)
    )
    (pdir / f"{0:020d}.log").write_bytes(data)
    index = [(header.last_offset, pos) for pos, _size, header in iter_batches(data) if pos > 0]
    (pdir / f"{0:020d}.index").write_bytes(b"".join(OFFSET_ENTRY.pack(o, p) for o, p in index))
    return tmp_path, len(data), dict(index)


def read_pieces(pieces) -> list[int]:
    offsets = []
    for piece in pieces:
        offsets.extend(read_piece(piece).offset)
    return offsets


def assert_contiguous(pieces, start: int, end: int) -> None:
    assert pieces[0].start == start and pieces[-1].end == end
    assert all(a.end == b.start and a.start < a.end for a, b in pairwise(pieces))


def test_split_piece_by_bytes_cuts_at_index_entries(big_segment):
    from spark_jobs.segment_reader import _start_position

    log_dir, size_bytes, index = big_segment
    part = find_partitions([log_dir])[("big", 0)]
    (piece,) = split_by_segment(part, 0, 200)
    assert split_piece(piece, size_bytes) == [piece]
    pieces = split_piece(piece, size_bytes // 4)
    assert len(pieces) == 4
    assert_contiguous(pieces, 0, 200)
    for cut in pieces[1:]:
        assert cut.start - 1 in index  # just after an indexed batch: reading starts right there
        assert _start_position(Path(cut.log_path), 0, cut.start) == index[cut.start - 1]
    assert read_pieces(pieces) == list(range(200))
    # a piece that starts mid-segment and mid-batch
    (piece,) = split_by_segment(part, 23, 178)
    pieces = split_piece(piece, size_bytes // 5)
    assert len(pieces) >= 3
    assert_contiguous(pieces, 23, 178)
    assert read_pieces(pieces) == list(range(23, 178))


def test_split_piece_by_records_cuts_inside_batches(big_segment):
    log_dir, _size_bytes, _index = big_segment
    (piece,) = split_by_segment(find_partitions([log_dir])[("big", 0)], 3, 200)
    pieces = split_piece(piece, max_records_per_partition=7)
    assert [(p.start, p.end) for p in pieces[:3]] == [(3, 10), (10, 17), (17, 24)]
    assert_contiguous(pieces, 3, 200)
    assert all(p.end - p.start <= 7 for p in pieces)
    assert read_pieces(pieces) == list(range(3, 200))  # straddled batches: each record once


def test_split_to_min_partitions_cuts_the_largest_pieces(big_segment, log_dir):
    big_dir, _size_bytes, _index = big_segment
    big = split_by_segment(find_partitions([big_dir])[("big", 0)], 0, 200)
    small = split_by_segment(find_partitions([log_dir])[("t", 0)], 0, 30)  # 10, 15, 5 offsets
    pieces = split_to_min_partitions(big + small, 8)
    assert len(pieces) == 8
    big_parts = [p for p in pieces if p.log_path == big[0].log_path]
    assert len(big_parts) == 5 and all(p.end - p.start == 40 for p in big_parts)
    assert_contiguous(big_parts, 0, 200)
    assert read_pieces(pieces) == list(range(200)) + list(range(30))
    assert split_to_min_partitions(small, 2) == small
    one = split_by_segment(find_partitions([log_dir])[("t", 0)], 3, 5)
    assert [(p.start, p.end) for p in split_to_min_partitions(one, 10)] == [(3, 4), (4, 5)]


# --------------------------------------------------------------------------- transactions


def txn_batch(first: int, count: int, producer_id: int) -> bytes:
    return build_batch(
        [record(o) for o in range(first, first + count)],
        base_offset=first,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=first,
        is_transactional=True,
    )


def marker(offset: int, producer_id: int, control_type: int) -> bytes:
    return build_control_batch(
        control_type,
        base_offset=offset,
        producer_id=producer_id,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp_ms=T0,
    )


def write_transactional_log(log_dir: Path) -> None:
    """t-0 in two segments; producers 1 and 3 abort, 2 commits, 3 and 1 leave transactions open.

    0-1 P1 | 2 plain | 3-4 P2 | 5 ABORT P1 | 6 P2 | 7 COMMIT P2 || 8 P1 | 9 ABORT P1 |
    10 P3 | 11 plain | 12 P1 (P3 and P1 still open)
    """
    pdir = log_dir / "t-0"
    pdir.mkdir(parents=True)
    first = [
        txn_batch(0, 2, 1),
        build_batch([record(2)], base_offset=2),
        txn_batch(3, 2, 2),
        marker(5, 1, ControlType.ABORT),
        txn_batch(6, 1, 2),
        marker(7, 2, ControlType.COMMIT),
    ]
    second = [
        txn_batch(8, 1, 1),
        marker(9, 1, ControlType.ABORT),
        txn_batch(10, 1, 3),
        build_batch([record(11)], base_offset=11),
        txn_batch(12, 1, 1),
    ]
    (pdir / f"{0:020d}.log").write_bytes(b"".join(first))
    (pdir / f"{8:020d}.log").write_bytes(b"".join(second))


def test_transaction_state_finds_aborted_ranges_and_the_last_stable_offset(tmp_path):
    write_transactional_log(tmp_path)
    part = find_partitions([tmp_path])[("t", 0)]
    aborted, last_stable_offset = transaction_state(part, 0, latest_offset(part))
    assert aborted == (AbortedRange(1, 0, 5), AbortedRange(1, 8, 9))
    assert last_stable_offset == 10
    # from offset 3 on: producer 1's first transaction, begun before, ends at 5 (a log
    # without snapshots is walked from its first segment, so its first offset is known)
    assert transaction_state(part, 3, 13) == ((AbortedRange(1, 0, 5), AbortedRange(1, 8, 9)), 10)
    assert transaction_state(part, 6, 13) == ((AbortedRange(1, 8, 9),), 10)
    # markers after the planned log end do not count: producer 1 is still open at 9
    assert transaction_state(part, 0, 9) == ((AbortedRange(1, 0, 5),), 8)
    assert transaction_state(part, 0, 0) == ((), None)


def test_committed_reads_skip_aborted_batches_and_stop_at_the_last_stable_offset(tmp_path):
    write_transactional_log(tmp_path)
    part = find_partitions([tmp_path])[("t", 0)]
    assert read_range(part, 0, 13).offset == [0, 1, 2, 3, 4, 6, 8, 10, 11, 12]  # read_uncommitted
    aborted, last_stable_offset = transaction_state(part, 0, 13)
    pieces = with_aborted(split_by_segment(part, 0, last_stable_offset), aborted)
    assert [p.aborted for p in pieces] == [(AbortedRange(1, 0, 5),), (AbortedRange(1, 8, 9),)]
    assert read_pieces(pieces) == [2, 3, 4, 6]
    # cut pieces keep the ranges: the aborted batch inside is still skipped
    assert read_pieces([q for p in pieces for q in split_piece(p, max_records_per_partition=1)]) == [2, 3, 4, 6]


def test_skip_batch_decides_from_the_header():
    from protocol.records import parse_batch_header

    aborted = aborted_by_producer([AbortedRange(1, 0, 5), AbortedRange(1, 8, 9), AbortedRange(4, 0, 100)])
    header = parse_batch_header
    assert skip_batch(header(marker(5, 1, ControlType.COMMIT)))  # markers, whatever the mode
    assert skip_batch(header(txn_batch(3, 2, 1)), aborted)
    assert not skip_batch(header(txn_batch(3, 2, 1)))  # read_uncommitted
    assert not skip_batch(header(txn_batch(6, 1, 1)), aborted)  # between two aborted transactions
    assert not skip_batch(header(txn_batch(3, 2, 2)), aborted)  # another producer
    assert not skip_batch(header(build_batch([record(3)], base_offset=3, producer_id=4)), aborted)  # not transactional


# --------------------------------------------------------------------------- properties

_batches = st.lists(st.lists(st.integers(0, 60), min_size=1, max_size=4), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=_batches,
    segment_starts=st.sets(st.integers(1, 11), max_size=3),
    damage=st.sampled_from(["none", "missing", "torn", "stale"]),
    data=st.data(),
)
def test_offset_for_timestamp_and_splits_agree_with_a_plain_scan(
    tmp_path_factory, batches, segment_starts, damage, data
):
    log_dir = tmp_path_factory.mktemp("prop")
    pdir = log_dir / "t-0"
    firsts = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    cut_batches = sorted({0} | {i for i in segment_starts if i < len(batches)})
    timestamps = {}
    for i, j in pairwise([*cut_batches, len(batches)]):
        base = firsts[i]
        entries = write_timed_segment(pdir, base, batches[i:j], firsts[i:j])
        if damage == "torn":
            entries_bytes = b"".join(TIME_ENTRY.pack(t, r) for t, r in entries)
            (pdir / f"{base:020d}.timeindex").write_bytes(entries_bytes[:-3])
        elif damage == "stale":
            write_time_index(pdir, base, entries[:1], zero_fill=24)
        elif damage == "none":
            write_time_index(pdir, base, entries)
        for first, batch in zip(firsts[i:j], batches[i:j]):
            timestamps.update({first + k: t for k, t in enumerate(batch)})
    part = find_partitions([log_dir])[("t", 0)]
    for target in (0, 1, 30, 59, 60, 61, data.draw(st.integers(0, 61))):
        assert offset_for_timestamp(part, target) == brute_force_offset(timestamps, target), target
    end = len(timestamps)
    start = data.draw(st.integers(0, end))
    pieces = split_by_segment(part, start, end)
    cut = [q for p in pieces for q in split_piece(p, max_records_per_partition=data.draw(st.integers(1, 5)))]
    cut = split_to_min_partitions(cut, data.draw(st.integers(1, 20)))
    assert read_pieces(cut) == list(range(start, end))


def test_pack_pieces_groups_consecutive_pieces_of_one_partition():
    from spark_jobs.segment_reader import SegmentPiece, pack_pieces

    def piece(topic, partition, start, end):
        return SegmentPiece(topic, partition, f"{topic}-{partition}/{start:020d}.log", start, start, end)

    pieces = [
        piece("a", 0, 0, 10),
        piece("a", 0, 10, 20),
        piece("a", 0, 20, 30),
        piece("a", 1, 0, 10),  # another partition: never in the same split
        piece("b", 0, 0, 100),  # alone: larger than a split by itself
        piece("b", 0, 100, 105),
    ]
    # 1 byte per offset, 5 bytes of open cost: a split of 30 holds two 10-offset pieces.
    groups = pack_pieces(pieces, [1.0] * len(pieces), 30, 5)
    assert [[(p.topic, p.partition, p.start) for p in g] for g in groups] == [
        [("a", 0, 0), ("a", 0, 10)],
        [("a", 0, 20)],
        [("a", 1, 0)],
        [("b", 0, 0)],
        [("b", 0, 100)],
    ]
    # Every piece lands in exactly one split, in order.
    assert [p for g in groups for p in g] == pieces
    assert pack_pieces([], [], 30, 5) == []


def test_a_corrupt_batch_is_refused_naming_its_file_and_position(tmp_path):
    from spark_jobs.segment_reader import CorruptBatchError, iter_piece_batches

    pdir = tmp_path / "t-0"
    write_segment(pdir, 0, [(0, 3, 0), (3, 3, 0), (6, 3, 0)])
    path = pdir / f"{0:020d}.log"
    data = bytearray(path.read_bytes())
    second = [p for p, _, _ in iter_batches(data)][1]
    data[second + 70] ^= 0x10  # inside the second batch's records: only its CRC can tell
    path.write_bytes(bytes(data))
    piece = split_by_segment(find_partitions([tmp_path])[("t", 0)], 0, 9)[0]
    with pytest.raises(CorruptBatchError, match=rf"{path.name}: corrupt batch at file position {second}: .*CRC"):
        list(iter_piece_batches(piece))
    with pytest.raises(CorruptBatchError, match=f"file position {second}"):
        read_piece(piece)
