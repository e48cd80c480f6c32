"""Records of KIP-848 consumer groups in ``__consumer_offsets``: codec.

Key versions 3 to 8 and 16 (see protocol/messages/group_coordinator_records.py):
the key's version names the record's kind, the key holds the group id and, for
per-member kinds, the member id (for a regular expression's, the expression). A record without a value is a tombstone.
Values are the declared structs at version 0; the consumer group coordinator
(broker/coordinators/consumer_groups) turns them into its model and back.

Pure codec; the classic codec of key versions 0 to 2 is protocol/consumer_offsets.py.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from protocol.codec import decode_struct, encode_struct
from protocol.exceptions import ProtocolError
from protocol.registry import DATA_MESSAGES

_INT16 = struct.Struct(">h")
VALUE_VERSION = 0


class RecordKind(enum.IntEnum):
    """A record's kind is its key's version."""

    GROUP_METADATA = 3
    PARTITION_METADATA = 4
    MEMBER_METADATA = 5
    TARGET_ASSIGNMENT_METADATA = 6
    TARGET_ASSIGNMENT_MEMBER = 7
    CURRENT_MEMBER_ASSIGNMENT = 8
    REGULAR_EXPRESSION = 16


_MESSAGE_NAMES = {
    RecordKind.GROUP_METADATA: "ConsumerGroupMetadata",
    RecordKind.PARTITION_METADATA: "ConsumerGroupPartitionMetadata",
    RecordKind.MEMBER_METADATA: "ConsumerGroupMemberMetadata",
    RecordKind.TARGET_ASSIGNMENT_METADATA: "ConsumerGroupTargetAssignmentMetadata",
    RecordKind.TARGET_ASSIGNMENT_MEMBER: "ConsumerGroupTargetAssignmentMember",
    RecordKind.CURRENT_MEMBER_ASSIGNMENT: "ConsumerGroupCurrentMemberAssignment",
    RecordKind.REGULAR_EXPRESSION: "ConsumerGroupRegularExpression",
}
_KEYS = {kind: DATA_MESSAGES[name + "Key"] for kind, name in _MESSAGE_NAMES.items()}
_VALUES = {kind: DATA_MESSAGES[name + "Value"] for kind, name in _MESSAGE_NAMES.items()}
# The value class of each kind, to build values with (``VALUE_CLASSES[kind](epoch=3)``).
VALUE_CLASSES = {kind: message.struct.cls for kind, message in _VALUES.items()}
PER_MEMBER_KINDS = frozenset({
    RecordKind.MEMBER_METADATA,
    RecordKind.TARGET_ASSIGNMENT_MEMBER,
    RecordKind.CURRENT_MEMBER_ASSIGNMENT,
})


def _nested_class(kind: RecordKind, *path: str):
    struct_type = _VALUES[kind].struct
    for name in path:
        field_type = next(f.type for f in struct_type.fields if f.name == name)
        while hasattr(field_type, "item"):
            field_type = field_type.item
        struct_type = field_type
    return struct_type.cls


# The nested value classes the coordinator builds records with.
TopicMetadata = _nested_class(RecordKind.PARTITION_METADATA, "topics")
PartitionRacks = _nested_class(RecordKind.PARTITION_METADATA, "topics", "partition_metadata")
TargetTopicPartitions = _nested_class(RecordKind.TARGET_ASSIGNMENT_MEMBER, "topic_partitions")
CurrentTopicPartitions = _nested_class(RecordKind.CURRENT_MEMBER_ASSIGNMENT, "assigned_partitions")
ClassicMemberMetadata = _nested_class(RecordKind.MEMBER_METADATA, "classic_member_metadata")
ClassicProtocol = _nested_class(RecordKind.MEMBER_METADATA, "classic_member_metadata", "supported_protocols")


@dataclass(frozen=True)
class ConsumerGroupRecord:
    kind: RecordKind
    group_id: str
    member_id: str | None  # None for the group-wide kinds
    value: object | None  # None: a tombstone
    regular_expression: str | None = None  # REGULAR_EXPRESSION's key


def is_consumer_group_key(key: bytes) -> bool:
    return len(key) >= 2 and _INT16.unpack_from(key)[0] in RecordKind._value2member_map_


def encode_record(record: ConsumerGroupRecord) -> tuple[bytes, bytes | None]:
    kind = record.kind
    key_message = _KEYS[kind]
    if kind in PER_MEMBER_KINDS:
        key_value = key_message.struct.cls(group_id=record.group_id, member_id=record.member_id)
    elif kind == RecordKind.REGULAR_EXPRESSION:
        key_value = key_message.struct.cls(group_id=record.group_id, regular_expression=record.regular_expression)
    else:
        key_value = key_message.struct.cls(group_id=record.group_id)
    key = bytearray(_INT16.pack(int(kind)))
    encode_struct(key_message.struct, int(kind), False, key_value, key)
    if record.value is None:
        return bytes(key), None
    value = bytearray(_INT16.pack(VALUE_VERSION))
    encode_struct(_VALUES[kind].struct, VALUE_VERSION, True, record.value, value)
    return bytes(key), bytes(value)


def decode_record(key: bytes, value: bytes | None) -> ConsumerGroupRecord:
    """ProtocolError when ``key`` is not one of a consumer group's records."""
    if len(key) < 2:
        raise ProtocolError("__consumer_offsets key without a version")
    version = _INT16.unpack_from(key)[0]
    if version not in RecordKind._value2member_map_:
        raise ProtocolError(f"key version {version} is not a consumer group record (3 to 8, 16)")
    kind = RecordKind(version)
    key_value, _ = decode_struct(_KEYS[kind].struct, version, False, key, 2)
    member_id = key_value.member_id if kind in PER_MEMBER_KINDS else None
    regex = key_value.regular_expression if kind == RecordKind.REGULAR_EXPRESSION else None
    if value is None:
        return ConsumerGroupRecord(kind, key_value.group_id, member_id, None, regex)
    if len(value) < 2:
        raise ProtocolError(f"{_MESSAGE_NAMES[kind]}Value: no version")
    value_version = _INT16.unpack_from(value)[0]
    # A newer value version keeps the fields we know in front (flexible, tagged
    # additions), as Kafka reads it.
    if value_version < 0:
        raise ProtocolError(f"{_MESSAGE_NAMES[kind]}Value: negative version")
    decoded, _ = decode_struct(_VALUES[kind].struct, VALUE_VERSION, True, value, 2, exact=False)
    return ConsumerGroupRecord(kind, key_value.group_id, member_id, decoded, regex)
