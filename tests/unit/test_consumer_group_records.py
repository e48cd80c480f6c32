"""KIP-848 ``__consumer_offsets`` records: the bytes Kafka's schemas give, and round trips."""

from __future__ import annotations

import uuid

import pytest

from protocol.consumer_group_records import (
    VALUE_CLASSES,
    ConsumerGroupRecord,
    CurrentTopicPartitions,
    RecordKind,
    decode_record,
    encode_record,
    is_consumer_group_key,
)
from protocol.consumer_offsets import group_key_bytes
from protocol.exceptions import ProtocolError


def test_group_metadata_bytes():
    key, value = encode_record(ConsumerGroupRecord(RecordKind.GROUP_METADATA, "g", None, VALUE_CLASSES[RecordKind.GROUP_METADATA](epoch=7)))
    # Key: version 3, then the group id as a non-compact string.
    assert key == b"\x00\x03" + b"\x00\x01g"
    # Value: version 0, flexible: the epoch, then an empty tagged-field section.
    assert value == b"\x00\x00" + b"\x00\x00\x00\x07" + b"\x00"


def test_member_key_bytes_and_tombstone():
    key, value = encode_record(ConsumerGroupRecord(RecordKind.CURRENT_MEMBER_ASSIGNMENT, "g", "m1", None))
    assert key == b"\x00\x08" + b"\x00\x01g" + b"\x00\x02m1" and value is None
    assert decode_record(key, None) == ConsumerGroupRecord(RecordKind.CURRENT_MEMBER_ASSIGNMENT, "g", "m1", None)


@pytest.mark.parametrize("kind", list(RecordKind))
def test_every_kind_round_trips(kind):
    topic_id = uuid.UUID(int=5)
    values = {
        RecordKind.GROUP_METADATA: {"epoch": 3},
        RecordKind.PARTITION_METADATA: {"topics": []},
        RecordKind.MEMBER_METADATA: {
            "instance_id": "i", "rack_id": None, "client_id": "c", "client_host": "/h", "subscribed_topic_names": ["a", "b"],
            "subscribed_topic_regex": None, "rebalance_timeout_ms": 300, "server_assignor": "range", "classic_member_metadata": None,
        },
        RecordKind.TARGET_ASSIGNMENT_METADATA: {"assignment_epoch": 4},
        RecordKind.TARGET_ASSIGNMENT_MEMBER: {"topic_partitions": []},
        RecordKind.CURRENT_MEMBER_ASSIGNMENT: {
            "member_epoch": 4, "previous_member_epoch": 3, "state": 2,
            "assigned_partitions": [CurrentTopicPartitions(topic_id=topic_id, partitions=[0, 2])],
            "partitions_pending_revocation": [CurrentTopicPartitions(topic_id=topic_id, partitions=[1])],
        },
        RecordKind.REGULAR_EXPRESSION: {"topics": ["ta", "tb"], "version": 10, "timestamp": 12345},
    }
    record = ConsumerGroupRecord(kind, "group", "member" if kind in (5, 7, 8) else None, VALUE_CLASSES[kind](**values[kind]),
                                 "t.*" if kind == RecordKind.REGULAR_EXPRESSION else None)
    key, value = encode_record(record)
    assert is_consumer_group_key(key)
    assert decode_record(key, value) == record


def test_a_regular_expression_record_has_kafkas_bytes():
    """Key version 16: the group id and the expression as int16-length strings;
    value version 0, flexible: compact strings, two int64s, no tagged fields."""
    value = VALUE_CLASSES[RecordKind.REGULAR_EXPRESSION](topics=["ab"], version=10, timestamp=12345)
    key, encoded = encode_record(ConsumerGroupRecord(RecordKind.REGULAR_EXPRESSION, "g", None, value, "a.*"))
    assert key == b"\x00\x10" + b"\x00\x01g" + b"\x00\x03a.*"
    assert encoded == b"\x00\x00" + b"\x02" + b"\x03ab" + (10).to_bytes(8, "big") + (12345).to_bytes(8, "big") + b"\x00"
    tombstone = decode_record(key, None)
    assert (tombstone.kind, tombstone.group_id, tombstone.regular_expression, tombstone.value) == (RecordKind.REGULAR_EXPRESSION, "g", "a.*", None)


def test_classic_keys_are_not_consumer_group_records():
    assert not is_consumer_group_key(group_key_bytes("g"))
    with pytest.raises(ProtocolError):
        decode_record(group_key_bytes("g"), None)
