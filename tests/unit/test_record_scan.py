"""scan_keys_values (validation's record scan) against decode_batch_records, the full decoder.

On random batches of every codec (scanned after batch_records_data
decompressed them) the spans name exactly the keys and values the decoder
returns; on bytes garbled at random (cut short, a byte changed, bytes added
or dropped, a wrong record count) the scan refuses with ProtocolError exactly
when the decoder does, and agrees with it when both accept.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.compression import CompressionType
from protocol.exceptions import ProtocolError
from protocol.records import (
    BATCH_HEADER_BYTES,
    Record,
    _decode_v2_records,
    batch_records_data,
    build_batch,
    decode_batch_records,
    parse_batch_header,
    scan_keys_values,
)

# Up to 9000 bytes: lengths of one, two and three varint bytes.
optional_bytes = st.none() | st.binary(max_size=80) | st.binary(min_size=60, max_size=9000)
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3)
records = st.lists(st.tuples(optional_bytes, optional_bytes, headers), min_size=1, max_size=30)


@st.composite
def batches(draw, codecs=tuple(CompressionType)):
    """A batch of random records: offset deltas with holes, timestamp deltas
    of one to ten varint bytes, either sign."""
    items = draw(records)
    deltas = sorted(draw(st.sets(st.integers(0, 20_000), min_size=len(items), max_size=len(items))))
    timestamp_deltas = draw(
        st.lists(st.integers(-(1 << 62), 1 << 62) | st.integers(-70, 70), min_size=len(items), max_size=len(items))
    )
    return build_batch(
        [Record(d, t, k, v, list(h)) for d, t, (k, v, h) in zip(deltas, timestamp_deltas, items, strict=True)],
        codec=draw(st.sampled_from(codecs)),
        base_timestamp_ms=1_700_000_000_000,
    )


def spans_as_records(data: bytes, spans) -> list[tuple]:
    def field(position, length):
        return None if length < 0 else data[position : position + length]

    return [(field(kp, kl), field(vp, vl)) for kp, kl, vp, vl in spans]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_the_scan_finds_the_keys_and_values_the_decoder_returns(batch):
    header, data = batch_records_data(batch)
    spans = scan_keys_values(data, header.records_count)
    _, decoded = decode_batch_records(batch)
    assert spans_as_records(data, spans) == [(r.key, r.value) for r in decoded]


def outcome(function):
    try:
        return function()
    except ProtocolError:
        return ProtocolError


@st.composite
def garbled(draw):
    """(records bytes, record count) of an uncompressed batch, damaged one way or another."""
    batch = draw(batches(codecs=(CompressionType.NONE,)))
    data = bytearray(batch[BATCH_HEADER_BYTES:])
    count = parse_batch_header(batch).records_count
    how = draw(st.sampled_from(["cut", "change", "insert", "drop", "count"]))
    at = draw(st.integers(0, len(data) - 1))
    if how == "cut":
        del data[at:]
    elif how == "change":
        data[at] = draw(st.integers(0, 255).filter(lambda b: b != data[at]))
    elif how == "insert":
        data[at:at] = draw(st.binary(min_size=1, max_size=3))
    elif how == "drop":
        del data[at : at + draw(st.integers(1, 3))]
    else:
        count = draw(st.integers(0, count + 3).filter(lambda c: c != count))
    return bytes(data), count


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(garbled())
def test_garbled_records_are_refused_exactly_when_the_decoder_refuses_them(case):
    data, count = case
    header = parse_batch_header(build_batch([(b"k", b"v")]))._replace(records_count=count)
    decoded = outcome(lambda: _decode_v2_records(data, header))
    scanned = outcome(lambda: scan_keys_values(data, count))
    if decoded is ProtocolError:
        assert scanned is ProtocolError
    else:
        assert scanned is not ProtocolError
        assert spans_as_records(data, scanned) == [(r.key, r.value) for r in decoded]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_nulls_empties_and_headers_after_decompression(codec):
    items = [
        (None, b"\x00\x00\x00\x00\x01payload", [("trace", b"\x01"), ("none", None)]),
        (b"key", None, []),
        (b"", b"", [("", b"")]),
        (None, None, []),
        (b"k" * 200, b"v" * 9000, []),
    ]
    batch = build_batch(items, codec=codec)
    header, data = batch_records_data(batch)
    assert spans_as_records(data, scan_keys_values(data, header.records_count)) == [(k, v) for k, v, _ in items]


def test_the_named_kinds_of_bad_bytes_raise_protocol_error():
    batch = build_batch([(b"key", b"value", [("h", b"x")])])
    data = batch[BATCH_HEADER_BYTES:]
    good = scan_keys_values(data, 1)
    assert spans_as_records(data, good) == [(b"key", b"value")]
    bad_utf8_header = build_batch([(b"key", b"value", [("\u00e9", b"x")])])[BATCH_HEADER_BYTES:].replace(
        "\u00e9".encode(), b"\xff\xfe"
    )
    ten_byte_varint = bytes([0x20, 0]) + b"\xff" * 10 + b"\x01" * 30
    cases = {
        "cut inside a record": data[:-2],
        "bytes left over": data + b"\x00",
        "record length too small": bytes([10]) + data[1:],
        "header key not UTF-8": bad_utf8_header,
        "timestamp delta longer than ten bytes": ten_byte_varint,
    }
    for name, garbage in cases.items():
        with pytest.raises(ProtocolError):
            scan_keys_values(garbage, 1)
            pytest.fail(f"the scan took {name}")
        with pytest.raises(ProtocolError):
            _decode_v2_records(garbage, parse_batch_header(batch))
    with pytest.raises(ProtocolError, match="claims 1000 records"):
        scan_keys_values(data, 1000)
