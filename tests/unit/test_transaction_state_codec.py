"""``__transaction_state`` records: round trips, the versions written, bad bytes,
hand-checked bytes, and Kafka's placement of a transactional id."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.exceptions import ProtocolError
from protocol.transaction_state import (
    TransactionValue,
    TxnState,
    decode_key,
    decode_value,
    java_string_hash,
    key_bytes,
    partition_for,
    value_bytes,
)

names = st.text(min_size=0, max_size=20)
partitions = st.frozensets(st.tuples(st.text(min_size=1, max_size=10), st.integers(0, 2**31 - 1)), max_size=6)


@st.composite
def values(draw):
    state = draw(st.sampled_from(list(TxnState)))
    return TransactionValue(
        producer_id=draw(st.integers(-1, 2**63 - 1)),
        producer_epoch=draw(st.integers(-1, 32767)),
        timeout_ms=draw(st.integers(1, 2**31 - 1)),
        state=state,
        partitions=frozenset() if state == TxnState.EMPTY else draw(partitions),
        last_update_ms=draw(st.integers(-1, 2**62)),
        start_ms=draw(st.integers(-1, 2**62)),
        previous_producer_id=draw(st.sampled_from([-1, 0, 12345])),
        next_producer_id=draw(st.sampled_from([-1, 7])),
        client_transaction_version=draw(st.sampled_from([0, 2])),
    )


@given(values())
@settings(max_examples=200, deadline=None)
def test_value_round_trip(value):
    data = value_bytes(value)
    assert decode_value(data) == value
    tagged = (value.previous_producer_id, value.next_producer_id, value.client_transaction_version) != (-1, -1, 0)
    assert struct.unpack_from(">h", data)[0] == (1 if tagged else 0)


@given(names)
def test_key_round_trip(transactional_id):
    data = key_bytes(transactional_id)
    assert data[:2] == b"\x00\x00"
    assert decode_key(data) == transactional_id


def test_hand_checked_value_bytes():
    value = TransactionValue(5, 3, 60000, TxnState.ONGOING, frozenset({("t", 1), ("t", 0)}), 100, 90)
    expected = (
        "0000"  # version 0
        "0000000000000005"  # producer id
        "0003"  # epoch
        "0000ea60"  # timeout 60000
        "01"  # Ongoing
        "00000001" "0001" "74" "00000002" "00000000" "00000001"  # [("t", [0, 1])]
        "0000000000000064"  # last update 100
        "000000000000005a"  # start 90
    )
    assert value_bytes(value).hex() == expected
    assert key_bytes("ab").hex() == "0000" "0002" "6162"


def test_empty_state_writes_no_partitions_and_ignores_any():
    value = TransactionValue(1, 0, 1000, TxnState.EMPTY, frozenset({("t", 0)}), 5, -1)
    data = value_bytes(value)
    # The partitions array is null (-1) in Empty, as Kafka writes it.
    assert data[2 + 8 + 2 + 4 + 1 : 2 + 8 + 2 + 4 + 1 + 4] == b"\xff\xff\xff\xff"
    assert decode_value(data).partitions == frozenset()


def test_version_1_carries_the_tagged_fields():
    value = TransactionValue(1, 0, 1000, TxnState.COMPLETE_COMMIT, frozenset(), 5, 4, previous_producer_id=9)
    data = value_bytes(value)
    assert data[:2] == b"\x00\x01"
    assert decode_value(data).previous_producer_id == 9


def test_tombstone():
    assert decode_value(None) is None


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00", b"\x00\x02" + b"\x00" * 40, b"\xff\xff", b"\x00\x00\x00"],
)
def test_bad_values_raise_protocol_error(data):
    with pytest.raises(ProtocolError):
        decode_value(data)


def test_unknown_state_is_a_protocol_error():
    data = bytearray(value_bytes(TransactionValue(1, 0, 1000, TxnState.ONGOING, frozenset(), 5, 4)))
    data[2 + 8 + 2 + 4] = 9
    with pytest.raises(ProtocolError):
        decode_value(bytes(data))


def test_every_truncation_raises_protocol_error():
    data = value_bytes(TransactionValue(1, 0, 1000, TxnState.ONGOING, frozenset({("topic", 3)}), 5, 4, previous_producer_id=2))
    for end in range(len(data)):
        with pytest.raises(ProtocolError):
            decode_value(data[:end])
    key = key_bytes("abc")
    for end in range(len(key)):
        with pytest.raises(ProtocolError):
            decode_key(key[:end])


@given(st.binary(max_size=80))
@settings(max_examples=300, deadline=None)
def test_garbage_raises_protocol_error_or_decodes(data):
    for decode in (decode_value, decode_key):
        try:
            decode(data)
        except ProtocolError:
            pass


def test_java_string_hash_matches_java():
    # Values of String.hashCode() in Java.
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00  # a surrogate pair: two UTF-16 units


def test_partition_for_uses_kafkas_abs():
    # Utils.abs: Integer.MIN_VALUE -> 0, otherwise Math.abs (negation, not masking the sign bit).
    assert partition_for("polygenelubricants", 50) == 0
    negative = "my-group"
    h = java_string_hash(negative)
    assert h < 0
    assert partition_for(negative, 50) == (-h) % 50 == 12
    assert partition_for("hello", 50) == 99162322 % 50


def test_state_names_are_kafkas():
    assert [s.display_name for s in TxnState] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence",
    ]
    assert TxnState.from_display_name("PrepareEpochFence") == TxnState.PREPARE_EPOCH_FENCE
    assert TxnState.from_display_name("ongoing") is None
