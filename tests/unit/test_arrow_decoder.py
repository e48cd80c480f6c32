"""The vectorized decoder against protocol.records' per-record decoder, on random batches."""

from __future__ import annotations

import pytest

pytest.importorskip("numpy", reason="the vectorized decoder needs numpy (pip install -e '.[spark]')")
pytest.importorskip("pyarrow", reason="the vectorized decoder needs pyarrow (pip install -e '.[spark]')")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.compression import CompressionType
from protocol.exceptions import ProtocolError
from protocol.records import (
    Record,
    TimestampType,
    build_batch,
    decode_batch_records,
    iter_batches,
)
from spark_jobs.arrow_decoder import decode_batches

CODECS = [
    CompressionType.NONE,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
    CompressionType.LZ4,
    CompressionType.ZSTD,
]

optional_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3)
# Timestamps around "now" and far from it, so deltas need long varints.
timestamps = st.integers(min_value=-1, max_value=1 << 45)
records = st.lists(st.tuples(optional_bytes, optional_bytes, headers, timestamps), min_size=1, max_size=40)


@st.composite
def logs(draw):
    """Several batches of random records, offsets contiguous or with gaps."""
    out = []
    offset = draw(st.integers(min_value=0, max_value=1 << 40))
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        items = draw(records)
        codec = draw(st.sampled_from(CODECS))
        timestamp_type = draw(st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]))
        if draw(st.booleans()):
            batch = build_batch(items, base_offset=offset, codec=codec, timestamp_type=timestamp_type)
        else:  # compacted: offset deltas with holes
            deltas = sorted(draw(st.sets(st.integers(0, 10_000), min_size=len(items), max_size=len(items))))
            batch = build_batch(
                [Record(d, 7 * d, k, v, list(h)) for d, (k, v, h, _ts) in zip(deltas, items, strict=True)],
                base_offset=offset,
                codec=codec,
                timestamp_type=timestamp_type,
                base_timestamp_ms=draw(timestamps),
            )
        out.append(batch)
        offset += 20_000
    return b"".join(out)


def expected_rows(buf: bytes, start: int, end: int):
    rows = []
    for pos, _size, _header in iter_batches(buf):
        _header, decoded = decode_batch_records(buf, pos)
        for r in decoded:
            if start <= r.offset < end:
                rows.append((r.key, r.value, r.offset, r.timestamp_ms, r.timestamp_type, r.headers or None))
    return rows


def decoded_rows(buf: bytes, start: int, end: int, include_headers: bool = True):
    batches = [(buf, pos, header) for pos, _size, header in iter_batches(buf)]
    table = decode_batches(batches, "orders", 3, start, end, include_headers).to_pydict()
    assert set(table["topic"]) <= {"orders"} and set(table["partition"]) <= {3}
    return [
        (
            key,
            value,
            offset,
            int(timestamp.timestamp() * 1000) if hasattr(timestamp, "timestamp") else timestamp,
            timestamp_type,
            [(h["key"], h["value"]) for h in hs] if hs is not None else None,
        )
        for key, value, offset, timestamp, timestamp_type, hs in zip(
            table["key"],
            table["value"],
            table["offset"],
            table["timestamp"],
            table["timestampType"],
            table["headers"],
            strict=True,
        )
    ]


def micros_to_ms_rows(buf, start, end):
    """Like decoded_rows but reading the raw int64 microseconds (exact, no datetime rounding)."""
    batches = [(buf, pos, header) for pos, _size, header in iter_batches(buf)]
    batch = decode_batches(batches, "orders", 3, start, end, True)
    micros = batch.column("timestamp").cast("int64").to_pylist()
    return [m // 1000 for m in micros]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.data())
def test_same_records_as_the_per_record_decoder(buf, data):
    first = next(iter_batches(buf))[2].base_offset
    start = data.draw(st.integers(min_value=first - 5, max_value=first + 60_000))
    end = data.draw(st.integers(min_value=start, max_value=first + 120_000))
    expected = expected_rows(buf, start, end)
    got = decoded_rows(buf, start, end)
    assert [row[:3] + row[4:] for row in got] == [row[:3] + row[4:] for row in expected]
    assert micros_to_ms_rows(buf, start, end) == [row[3] for row in expected]


def test_without_headers_column():
    buf = build_batch([(b"k", b"v", [("h", b"x")], 5), (None, None, [], 6)], base_offset=10)
    batches = [(buf, pos, header) for pos, _size, header in iter_batches(buf)]
    batch = decode_batches(batches, "t", 0, 0, 100, False)
    assert batch.schema.names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert batch.column("key").to_pylist() == [b"k", None]
    assert batch.column("value").to_pylist() == [b"v", None]
    assert batch.column("offset").to_pylist() == [10, 11]


def test_empty_keys_and_values_are_not_null():
    buf = build_batch([(b"", b"", [], 5), (b"", None, [], 6)])
    batches = [(buf, pos, header) for pos, _size, header in iter_batches(buf)]
    batch = decode_batches(batches, "t", 0, 0, 100, False)
    assert batch.column("key").to_pylist() == [b"", b""]
    assert batch.column("value").to_pylist() == [b"", None]


def _corrupt_variants():
    """Single-byte corruptions of an uncompressed batch (CRC recomputed, so only
    the record structure is wrong)."""
    from crc32c import crc32c

    from protocol.records import ATTRIBUTES_OFFSET, BATCH_HEADER_BYTES

    good = build_batch([(b"key", b"value" * 20, [("h", b"v")], 1), (None, b"x" * 200, [], 2)])
    for position in range(BATCH_HEADER_BYTES, len(good)):
        for replacement in (0x00, 0x7F, 0x80, 0xFF, 0x01):
            bad = bytearray(good)
            if bad[position] == replacement:
                continue
            bad[position] = replacement
            bad[17:21] = crc32c(bytes(bad[ATTRIBUTES_OFFSET:])).to_bytes(4, "big")
            yield bytes(bad)


def test_malformed_records_fail_like_the_per_record_decoder():
    """Either both decoders accept the bytes (and agree), or both raise ProtocolError."""
    disagreements = []
    for bad in _corrupt_variants():
        try:
            expected = expected_rows(bad, 0, 1 << 62)
        except ProtocolError:
            expected = ProtocolError
        try:
            got = decoded_rows(bad, 0, 1 << 62)
            got = [row[:3] + row[4:] for row in got]
            if expected is not ProtocolError:
                expected = [row[:3] + row[4:] for row in expected]
        except ProtocolError:
            got = ProtocolError
        if got != expected:
            disagreements.append((bad.hex(), expected, got))
    assert not disagreements, disagreements[:3]


def test_crc_mismatch_raises():
    buf = bytearray(build_batch([(b"k", b"v", [], 5)]))
    buf[-1] ^= 0xFF
    batches = [(bytes(buf), pos, header) for pos, _size, header in iter_batches(bytes(buf))]
    with pytest.raises(ProtocolError, match="CRC32C"):
        decode_batches(batches, "t", 0, 0, 100, False)


def test_batches_from_several_buffers_are_joined():
    """Uncompressed batches of one buffer are decoded in place; batches from two
    read chunks (or compressed ones) go through a joined copy: same records."""
    first = build_batch([(b"a", b"1", [], 5), (b"b", b"2", [], 6)], base_offset=0)
    second = build_batch([(b"c", b"3", [], 7)], base_offset=2)
    together = first + second
    one_buffer = [(together, pos, header) for pos, _size, header in iter_batches(together)]
    two_buffers = [(first, 0, one_buffer[0][2]), (second, 0, one_buffer[1][2])]
    expected = decode_batches(one_buffer, "t", 0, 0, 100, False)
    assert decode_batches(two_buffers, "t", 0, 0, 100, False).equals(expected)
    assert expected.column("value").to_pylist() == [b"1", b"2", b"3"]
