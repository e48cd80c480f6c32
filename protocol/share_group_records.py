"""Records of KIP-932 share groups in ``__consumer_offsets``: codec (pure).

Key versions 10 to 14 (declared in protocol/messages/group_coordinator_records.py):
the key's version names the record's kind, the key holds the group id and,
for per-member kinds, the member id. A record without a value is a tombstone.
Values are the declared structs at version 0.
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


class ShareGroupRecordKind(enum.IntEnum):
    MEMBER_METADATA = 10
    GROUP_METADATA = 11
    TARGET_ASSIGNMENT_METADATA = 12
    TARGET_ASSIGNMENT_MEMBER = 13
    CURRENT_MEMBER_ASSIGNMENT = 14


_NAMES = {
    ShareGroupRecordKind.MEMBER_METADATA: "ShareGroupMemberMetadata",
    ShareGroupRecordKind.GROUP_METADATA: "ShareGroupMetadata",
    ShareGroupRecordKind.TARGET_ASSIGNMENT_METADATA: "ShareGroupTargetAssignmentMetadata",
    ShareGroupRecordKind.TARGET_ASSIGNMENT_MEMBER: "ShareGroupTargetAssignmentMember",
    ShareGroupRecordKind.CURRENT_MEMBER_ASSIGNMENT: "ShareGroupCurrentMemberAssignment",
}
_KEYS = {kind: DATA_MESSAGES[name + "Key"] for kind, name in _NAMES.items()}
_VALUES = {kind: DATA_MESSAGES[name + "Value"] for kind, name in _NAMES.items()}
VALUE_CLASSES = {kind: message.struct.cls for kind, message in _VALUES.items()}
PER_MEMBER_KINDS = frozenset({
    ShareGroupRecordKind.MEMBER_METADATA,
    ShareGroupRecordKind.TARGET_ASSIGNMENT_MEMBER,
    ShareGroupRecordKind.CURRENT_MEMBER_ASSIGNMENT,
})


def _item_class(kind: ShareGroupRecordKind, field_name: str):
    field_type = next(f.type for f in _VALUES[kind].struct.fields if f.name == field_name)
    return field_type.item.cls


TargetTopicPartitions = _item_class(ShareGroupRecordKind.TARGET_ASSIGNMENT_MEMBER, "topic_partitions")
CurrentTopicPartitions = _item_class(ShareGroupRecordKind.CURRENT_MEMBER_ASSIGNMENT, "assigned_partitions")


@dataclass(frozen=True)
class ShareGroupRecord:
    kind: ShareGroupRecordKind
    group_id: str
    member_id: str | None  # None for the group-wide kinds
    value: object | None  # None: a tombstone


def is_share_group_key(key: bytes) -> bool:
    return len(key) >= 2 and _INT16.unpack_from(key)[0] in ShareGroupRecordKind._value2member_map_


def encode_record(record: ShareGroupRecord) -> tuple[bytes, bytes | None]:
    kind = record.kind
    key_struct = _KEYS[kind].struct
    if kind in PER_MEMBER_KINDS:
        key_value = key_struct.cls(group_id=record.group_id, member_id=record.member_id)
    else:
        key_value = key_struct.cls(group_id=record.group_id)
    key = bytearray(_INT16.pack(int(kind)))
    encode_struct(key_struct, int(kind), False, key_value, key)
    if record.value is None:
        return bytes(key), None
    value = bytearray(_INT16.pack(VALUE_VERSION))
    encode_struct(_VALUES[kind].struct, VALUE_VERSION, True, record.value, value)
    return bytes(key), bytes(value)


def decode_record(key: bytes, value: bytes | None) -> ShareGroupRecord:
    """ProtocolError when ``key`` is not one of a share group's records."""
    if not is_share_group_key(key):
        raise ProtocolError("not a share group record (key versions 10 to 14)")
    kind = ShareGroupRecordKind(_INT16.unpack_from(key)[0])
    key_value, _ = decode_struct(_KEYS[kind].struct, int(kind), False, key, 2)
    member_id = key_value.member_id if kind in PER_MEMBER_KINDS else None
    if value is None:
        return ShareGroupRecord(kind, key_value.group_id, member_id, None)
    if len(value) < 2 or _INT16.unpack_from(value)[0] < 0:
        raise ProtocolError(f"{_NAMES[kind]}Value: no version")
    decoded, _ = decode_struct(_VALUES[kind].struct, VALUE_VERSION, True, value, 2, exact=False)
    return ShareGroupRecord(kind, key_value.group_id, member_id, decoded)
