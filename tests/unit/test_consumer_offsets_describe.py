"""The readable forms of ``__consumer_offsets`` records that
``dump-log --offsets-decoder`` prints: every field of the record's version and
no other, bytes as base64, topic ids as Kafka prints them, the consumer
protocol's payloads decoded, KIP-848 consumer group records (key versions 3-8 and 16) too."""

from __future__ import annotations

import struct
import uuid

import pytest

from protocol.codec import encode_struct
from protocol.consumer_group_records import VALUE_CLASSES, ConsumerGroupRecord, CurrentTopicPartitions, RecordKind, encode_record
from protocol.consumer_offsets import (
    GROUP_VALUE_CLASS,
    GroupMember,
    OffsetAndMetadata,
    OffsetKey,
    describe_key,
    describe_value,
    group_key_bytes,
    group_value_bytes,
    offset_key_bytes,
    offset_value_bytes,
)
from protocol.exceptions import ProtocolError
from protocol.registry import DATA_MESSAGES
from storage.dump import DumpOptions, _offsets_record_text


def versioned(name: str, version: int, **fields) -> bytes:
    message = DATA_MESSAGES[name]
    out = bytearray(struct.pack(">h", version))
    encode_struct(message.struct, version, version in message.flexible, message.struct.cls(**fields), out)
    return bytes(out)


def test_offset_commit_key_and_the_fields_of_each_value_version():
    key = offset_key_bytes(OffsetKey("g", "t", 3))
    assert describe_key(key) == {"type": "1", "data": {"group": "g", "topic": "t", "partition": 3}}
    assert describe_key(versioned("OffsetCommitKey", 0, group="g", topic="t", partition=3))["type"] == "0"
    current = describe_value(1, offset_value_bytes(OffsetAndMetadata(42, 7, "meta", 1000)))
    assert current == {"version": "3", "data": {"offset": 42, "leaderEpoch": 7, "metadata": "meta", "commitTimestamp": 1000}}
    # Version 1 carries an expiry time and no leader epoch.
    with_expiry = describe_value(1, offset_value_bytes(OffsetAndMetadata(42, -1, "", 1000, expire_timestamp_ms=5000)))
    assert with_expiry == {
        "version": "1", "data": {"offset": 42, "metadata": "", "commitTimestamp": 1000, "expireTimestamp": 5000}
    }


def test_group_metadata_of_another_protocol_keeps_its_payloads_as_base64():
    member = GroupMember(
        member_id="m-1", group_instance_id="static-1", client_id="c", client_host="/10.0.0.1",
        rebalance_timeout=300, session_timeout=100, subscription=b"\x01\x02", assignment=b"",
    )
    value = GROUP_VALUE_CLASS(
        protocol_type="connect", generation=4, protocol="sessioned", leader="m-1", current_state_timestamp=99, members=[member]
    )
    assert describe_key(group_key_bytes("g")) == {"type": "2", "data": {"group": "g"}}
    described = describe_value(2, group_value_bytes(value))
    assert described["version"] == "3"
    assert described["data"]["members"] == [
        {
            "memberId": "m-1", "groupInstanceId": "static-1", "clientId": "c", "clientHost": "/10.0.0.1",
            "rebalanceTimeout": 300, "sessionTimeout": 100, "subscription": "AQI=", "assignment": "",
        }
    ]


def test_a_consumer_groups_subscription_and_assignment_are_decoded():
    subscription = versioned("ConsumerProtocolSubscription", 0, topics=["a", "b"], user_data=None)
    assignment = versioned(
        "ConsumerProtocolAssignment", 0,
        assigned_partitions=[DATA_MESSAGES["ConsumerProtocolAssignment"].struct.fields[0].type.item.cls(topic="a", partitions=[0, 2])],
        user_data=b"\xff",
    )
    member = GroupMember(
        member_id="m", group_instance_id=None, client_id="c", client_host="h",
        rebalance_timeout=1, session_timeout=1, subscription=subscription, assignment=assignment,
    )
    value = GROUP_VALUE_CLASS(protocol_type="consumer", generation=1, protocol="range", leader="m", current_state_timestamp=5, members=[member])
    (shown,) = describe_value(2, group_value_bytes(value))["data"]["members"]
    assert shown["subscription"] == {"topics": ["a", "b"], "userData": None}
    assert shown["assignment"] == {"assignedPartitions": [{"topic": "a", "partitions": [0, 2]}], "userData": "/w=="}


def test_consumer_group_records_are_described_with_topic_ids_as_kafka_prints_them():
    topic_id = uuid.UUID(int=1)
    record = ConsumerGroupRecord(RecordKind.CURRENT_MEMBER_ASSIGNMENT, "g", "m-1", VALUE_CLASSES[RecordKind.CURRENT_MEMBER_ASSIGNMENT](
        member_epoch=4, previous_member_epoch=3, state=1,
        assigned_partitions=[CurrentTopicPartitions(topic_id=topic_id, partitions=[0, 2])], partitions_pending_revocation=[],
    ))
    key, value = encode_record(record)
    assert describe_key(key) == {"type": "8", "data": {"groupId": "g", "memberId": "m-1"}}
    described = describe_value(8, value)
    assert described["version"] == "0"
    assert described["data"]["memberEpoch"] == 4
    assert described["data"]["assignedPartitions"] == [{"topicId": "AAAAAAAAAAAAAAAAAAAAAQ", "partitions": [0, 2]}]
    epoch_key, epoch_value = encode_record(ConsumerGroupRecord(RecordKind.GROUP_METADATA, "g", None, VALUE_CLASSES[RecordKind.GROUP_METADATA](epoch=7)))
    assert describe_key(epoch_key) == {"type": "3", "data": {"groupId": "g"}}
    assert describe_value(3, epoch_value) == {"version": "0", "data": {"epoch": 7}}


def test_what_is_not_a_group_record_is_refused_with_the_reason():
    with pytest.raises(ProtocolError, match="key version 9"):
        describe_key(struct.pack(">h", 9) + b"anything")
    with pytest.raises(ProtocolError):
        describe_key(b"\x00")
    with pytest.raises(ProtocolError):
        describe_value(1, b"\x00\x03\x01")


def test_the_dump_line_shows_tombstones_and_undecodable_records_as_such():
    assert DumpOptions(offsets_decoder=True).prints_data and DumpOptions(offsets_decoder=True).deep_iteration
    key = offset_key_bytes(OffsetKey("g", "t", 0))
    assert _offsets_record_text(key, None) == 'key: {"type":"1","data":{"group":"g","topic":"t","partition":0}} payload: <DELETE>'
    odd = _offsets_record_text(struct.pack(">h", 9) + b"x", b"v")
    assert odd.startswith("key: <not a group record key: key version 9") and odd.endswith("payload: v")
    truncated = _offsets_record_text(struct.pack(">h", 5) + b"x", b"v")
    assert truncated.startswith("key: <not a group record key: cannot decode ConsumerGroupMemberMetadataKey")
    broken = _offsets_record_text(key, b"\x00\x03")
    assert "payload: <not decodable: " in broken
