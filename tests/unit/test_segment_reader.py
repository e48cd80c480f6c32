"""spark_jobs.segment_reader on hand-made segment files (no broker, no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

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
    earliest_offset,
    find_partitions,
    latest_offset,
    list_segments,
    read_piece,
    read_range,
    split_by_segment,
)
from storage.checkpoint import LOG_START_OFFSET_CHECKPOINT, write_offsets
from storage.index import OFFSET_ENTRY

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
