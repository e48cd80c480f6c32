"""Property tests for the record batch layer.

The invariant under fuzzing: on any input, decoders return a result or raise
ProtocolError — never IndexError, struct.error, zlib.error or a codec
library's own exception.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from protocol.compression import XERIAL_MAGIC, CompressionType, compress, decompress
from protocol.exceptions import ProtocolError
from protocol.records import (
    BATCH_HEADER_BYTES,
    HEADER_STRUCT,
    LOG_OVERHEAD_BYTES,
    build_batch,
    build_control_batch,
    decode_batch_records,
    decode_records,
    iter_batches,
    parse_batch_header,
    split_complete_batches,
    update_crc,
    validate_batch,
)

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SMALL_MAX_OUTPUT_BYTES = 1 << 20
ALL_CODECS = list(CompressionType)


def exercise_decoders(buf) -> None:
    """Run every decoder entry point over ``buf``; only ProtocolError may escape."""
    calls = [
        lambda: parse_batch_header(buf),
        lambda: list(iter_batches(buf)),
        lambda: list(iter_batches(buf, allow_truncated_tail=True)),
        lambda: split_complete_batches(buf),
        lambda: validate_batch(buf),
        lambda: validate_batch(buf, 0, len(buf), require_contiguous_offsets=True),
        lambda: decode_batch_records(buf, max_output_bytes=SMALL_MAX_OUTPUT_BYTES),
        lambda: decode_batch_records(buf, verify_crc=False, max_output_bytes=SMALL_MAX_OUTPUT_BYTES),
        lambda: decode_records(buf, max_output_bytes=SMALL_MAX_OUTPUT_BYTES),
        lambda: decode_records(buf, verify_crc=False, allow_truncated_tail=True, max_output_bytes=SMALL_MAX_OUTPUT_BYTES),
    ]
    for call in calls:
        try:
            call()
        except ProtocolError:
            pass


def legacy_message_set(magic: int, codec: int) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for offset in range(3):
        builder.append(offset, timestamp=1_000 + offset, key=b"k%d" % offset, value=b"legacy " * 4)
    return bytes(builder.build())


SAMPLE_RECORDS = [
    (b"key", b"value", [("h", b"x"), ("n", None)], 1_000),
    (None, None, [], 1_002),
    (b"", b"v" * 150, [], 999),
]
VALID_BUFFERS = {
    **{f"v2-{c.name}": build_batch(SAMPLE_RECORDS, base_offset=5, codec=c) for c in ALL_CODECS},
    "control": build_control_batch(1, producer_id=1, producer_epoch=0, coordinator_epoch=3, timestamp_ms=7),
    **{f"legacy-v{m}-{c}": legacy_message_set(m, c) for m in (0, 1) for c in (0, 1, 2, 3)},
}
VALID_BUFFERS["two-batches"] = VALID_BUFFERS["v2-NONE"] + VALID_BUFFERS["v2-GZIP"]


# --------------------------------------------------------------------------- random input


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_only_raise_protocol_error(buf):
    exercise_decoders(buf)
    exercise_decoders(bytearray(buf))
    exercise_decoders(memoryview(buf))


@FUZZ
@given(st.sampled_from([0, 1, 2]), st.binary(max_size=300))
def test_random_entries_with_plausible_prefix(magic, tail):
    # A valid-looking length and magic push the decoders past the first checks.
    buf = struct.pack(">qiib", 0, len(tail) + 5, -1, magic) + tail
    exercise_decoders(buf)


@FUZZ
@given(
    codec=st.sampled_from(ALL_CODECS),
    records_count=st.integers(min_value=-2, max_value=50),
    attributes_high=st.sampled_from([0, 0x08, 0x10, 0x20, 0x30]),
    payload=st.binary(max_size=300),
    compress_payload=st.booleans(),
)
def test_random_records_inside_a_valid_header(codec, records_count, attributes_high, payload, compress_payload):
    """Correct header and CRC around random record bytes: reaches the record decoder."""
    body = compress(codec, payload) if compress_payload else payload
    buf = bytearray(BATCH_HEADER_BYTES) + body
    HEADER_STRUCT.pack_into(
        buf, 0, 0, len(buf) - LOG_OVERHEAD_BYTES, -1, 2, 0, codec | attributes_high, max(records_count - 1, 0),
        0, 0, -1, -1, -1, records_count,
    )
    update_crc(buf)
    exercise_decoders(buf)


@FUZZ
@given(
    codec=st.sampled_from(ALL_CODECS[1:] + [5]),
    prefix=st.sampled_from([b"", XERIAL_MAGIC + struct.pack(">ii", 1, 1), b"\x04\x22\x4d\x18", b"\x28\xb5\x2f\xfd", b"\x1f\x8b\x08\x00"]),
    tail=st.binary(max_size=300),
)
def test_decompress_random_bytes(codec, prefix, tail):
    try:
        decompress(codec, prefix + tail, max_output_bytes=SMALL_MAX_OUTPUT_BYTES)
    except ProtocolError:
        pass


# --------------------------------------------------------------------------- truncation and corruption


@pytest.mark.parametrize("name", sorted(VALID_BUFFERS))
def test_every_truncation_raises_protocol_error(name):
    buf = VALID_BUFFERS[name]
    full = decode_records(buf)
    # A cut between two log entries leaves a shorter but valid buffer.
    entry_boundaries = set()
    pos = 0
    while pos < len(buf):
        pos += LOG_OVERHEAD_BYTES + struct.unpack_from(">i", buf, pos + 8)[0]
        entry_boundaries.add(pos)
    for cut in range(len(buf)):
        prefix = buf[:cut]
        if cut in entry_boundaries:
            assert decode_records(prefix) == full[: len(decode_records(prefix))]
        elif cut:
            with pytest.raises(ProtocolError):
                decode_records(prefix)
            if name.startswith(("v2", "control")):
                with pytest.raises(ProtocolError):
                    decode_batch_records(prefix)
                with pytest.raises(ProtocolError):
                    validate_batch(prefix)
        # Tolerant readers see a prefix of the complete result, never garbage.
        partial = decode_records(prefix, allow_truncated_tail=True)
        assert partial == full[: len(partial)]
        exercise_decoders(prefix)


@FUZZ
@given(name=st.sampled_from(sorted(VALID_BUFFERS)), data=st.data())
def test_single_byte_corruption(name, data):
    buf = bytearray(VALID_BUFFERS[name])
    index = data.draw(st.integers(min_value=0, max_value=len(buf) - 1))
    buf[index] ^= data.draw(st.integers(min_value=1, max_value=255))
    exercise_decoders(buf)
    if name.startswith("v2"):
        # Re-sealing the CRC makes the record decoder itself face the damage.
        try:
            update_crc(buf)
        except ValueError:
            return
        exercise_decoders(buf)


# --------------------------------------------------------------------------- round trip


header_values = st.none() | st.binary(max_size=20)
records_strategy = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=200),
        st.lists(st.tuples(st.text(max_size=10), header_values), max_size=4),
        st.integers(min_value=-(2**40), max_value=2**42),
    ),
    min_size=1,
    max_size=30,
)


@FUZZ
@given(records=records_strategy, codec=st.sampled_from(ALL_CODECS), base_offset=st.integers(0, 2**62))
def test_round_trip_matches_input_and_kafka_python(records, codec, base_offset):
    buf = build_batch(records, base_offset=base_offset, codec=codec)
    header = validate_batch(buf, 0, len(buf), require_contiguous_offsets=True)
    assert header.max_timestamp_ms == max(r[3] for r in records)
    _, decoded = decode_batch_records(buf)
    expected = [(base_offset + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(records)]
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in decoded] == expected
    batch = DefaultRecordBatch(buf)
    assert batch.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch] == expected
