"""Records of ``__consumer_offsets``: committed offsets and group metadata.

A record's key and value each start with an int16 version. Keys 0 and 1 are
OffsetCommitKey (group, topic, partition), key 2 is GroupMetadataKey (group).
A record without a value is a tombstone: the offset or group is gone, and
compaction will drop the key. The versions written are those Kafka writes
today: key 1 for offsets, value 3 (value 1 when the commit carried an expiry
time), group metadata value 3.

Pure codec over the declarations in protocol/messages: the group coordinator
(broker/groups) writes and replays these records, and ``pybroker dump-log
--offsets-decoder`` (storage/dump.py, which may not import broker) prints them.
"""

from __future__ import annotations

import base64
import uuid
import struct
from dataclasses import dataclass

from protocol.codec import decode_struct, encode_struct
from protocol.exceptions import ProtocolError
from protocol.registry import DATA_MESSAGES
from protocol.schema import Array, Struct

_OFFSET_KEY = DATA_MESSAGES["OffsetCommitKey"]
_OFFSET_VALUE = DATA_MESSAGES["OffsetCommitValue"]
_GROUP_KEY = DATA_MESSAGES["GroupMetadataKey"]
_GROUP_VALUE = DATA_MESSAGES["GroupMetadataValue"]
_INT16 = struct.Struct(">h")

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3

GroupMember = _GROUP_VALUE.struct.fields[-1].type.item.cls


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1  # set only by OffsetCommit v2-v4 with a retention time


def _versioned(message, version: int, value) -> bytes:
    out = bytearray(_INT16.pack(version))
    encode_struct(message.struct, version, version in message.flexible, value, out)
    return bytes(out)


def _read_versioned(message, data: bytes):
    if len(data) < 2:
        raise ProtocolError(f"{message.name}: {len(data)} bytes, no version")
    version = _INT16.unpack_from(data)[0]
    if version not in message.versions:
        raise ProtocolError(f"{message.name}: unknown version {version}")
    value, _ = decode_struct(message.struct, version, version in message.flexible, data, 2)
    return version, value


def offset_key_bytes(key: OffsetKey) -> bytes:
    return _versioned(_OFFSET_KEY, OFFSET_KEY_VERSION, _OFFSET_KEY.struct.cls(group=key.group, topic=key.topic, partition=key.partition))


def group_key_bytes(group: str) -> bytes:
    return _versioned(_GROUP_KEY, GROUP_KEY_VERSION, _GROUP_KEY.struct.cls(group=group))


def offset_value_bytes(offset: OffsetAndMetadata) -> bytes:
    version = OFFSET_VALUE_VERSION if offset.expire_timestamp_ms < 0 else OFFSET_VALUE_VERSION_WITH_EXPIRY
    value = _OFFSET_VALUE.struct.cls(
        offset=offset.offset,
        leader_epoch=offset.leader_epoch,
        metadata=offset.metadata,
        commit_timestamp=offset.commit_timestamp_ms,
        expire_timestamp=offset.expire_timestamp_ms,
    )
    return _versioned(_OFFSET_VALUE, version, value)


def group_value_bytes(value) -> bytes:
    """``value`` is a GroupMetadataValue (``GROUP_VALUE_CLASS``)."""
    return _versioned(_GROUP_VALUE, GROUP_VALUE_VERSION, value)


GROUP_VALUE_CLASS = _GROUP_VALUE.struct.cls


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    if len(data) < 2:
        raise ProtocolError("__consumer_offsets key without a version")
    version = _INT16.unpack_from(data)[0]
    if version in (0, 1):
        _, key = _read_versioned(_OFFSET_KEY, data)
        return OffsetKey(key.group, key.topic, key.partition)
    if version == GROUP_KEY_VERSION:
        _, key = _read_versioned(_GROUP_KEY, data)
        return GroupKey(key.group)
    raise ProtocolError(f"__consumer_offsets key version {version} is not a classic group record")


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    _, value = _read_versioned(_OFFSET_VALUE, data)
    return OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp, value.expire_timestamp)


def decode_group_value(data: bytes):
    return _read_versioned(_GROUP_VALUE, data)[1]


def partition_for_group(group_id: str, partition_count: int) -> int:
    """Kafka's placement: Java's String.hashCode of the id, sign bit cleared, modulo the count."""
    h = 0
    encoded = group_id.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(encoded), 2):
        h = (31 * h + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % partition_count


_SUBSCRIPTION = DATA_MESSAGES["ConsumerProtocolSubscription"]


def decode_subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ``consumer`` protocol member's subscription, None if it does not parse."""
    try:
        _, value = _read_versioned_lenient(_SUBSCRIPTION, metadata)
    except ProtocolError:
        return None
    return set(value.topics)


def decode_subscription(metadata: bytes):
    """A ``consumer`` protocol member's whole subscription (topics, owned
    partitions from v1, rack from v3; absent fields at their defaults), None if
    it does not parse."""
    try:
        _, value = _read_versioned_lenient(_SUBSCRIPTION, metadata)
    except ProtocolError:
        return None
    return value


def decode_assignment(assignment: bytes):
    """A ``consumer`` protocol assignment's (topic, partitions) entries; an empty
    assignment (a member not yet synced) has none; None if it does not parse."""
    if not assignment:
        return []
    try:
        _, value = _read_versioned_lenient(_ASSIGNMENT, assignment)
    except ProtocolError:
        return None
    return list(value.assigned_partitions)


def encode_assignment(partitions: dict[str, list[int]]) -> bytes:
    """A ``consumer`` protocol assignment (version 0: every client reads it)."""
    cls = _ASSIGNMENT.struct.cls
    topic_cls = _ASSIGNED_TOPIC_CLASS
    value = cls(assigned_partitions=[topic_cls(topic=t, partitions=sorted(ps)) for t, ps in sorted(partitions.items())],
                user_data=None)
    out = bytearray(_INT16.pack(0))
    encode_struct(_ASSIGNMENT.struct, 0, False, value, out)
    return bytes(out)


def _read_versioned_lenient(message, data: bytes):
    # Newer clients may send a higher subscription version than we know: its
    # leading fields are the same, so read it as our highest version, as Kafka does.
    if len(data) < 2:
        raise ProtocolError(f"{message.name}: no version")
    version = min(_INT16.unpack_from(data)[0], message.versions.high)
    if version < 0:
        raise ProtocolError(f"{message.name}: negative version")
    value, _ = decode_struct(message.struct, version, False, data, 2, exact=False)
    return version, value


# --------------------------------------------------------------------------- readable forms

_ASSIGNMENT = DATA_MESSAGES["ConsumerProtocolAssignment"]
_ASSIGNED_TOPIC_CLASS = next(f.type.item for f in _ASSIGNMENT.struct.fields if f.name == "assigned_partitions").cls
CONSUMER_PROTOCOL_TYPE = "consumer"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _plain(field_type, version: int, value):
    if value is None:
        return None
    if isinstance(field_type, Struct):
        return _fields_as_dict(field_type, version, value)
    if isinstance(field_type, Array):
        return [_plain(field_type.item, version, item) for item in value]
    if isinstance(value, uuid.UUID):
        # As Kafka's Uuid prints: URL-safe base64 of the 16 bytes, unpadded.
        return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")
    if isinstance(value, (bytes, bytearray, memoryview)):
        # Bytes as base64, as Kafka's JSON forms of these messages write them.
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def _fields_as_dict(struct, version: int, value) -> dict:
    """The fields ``version`` has, by their camelCase names, in declaration order."""
    return {
        _camel(field.name): _plain(field.type, version, getattr(value, field.name))
        for field in struct.fields
        if version in field.versions
    }


# KIP-848 consumer group records, by key version (3 to 8): the key and value messages.
_CONSUMER_GROUP_MESSAGES = {
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    16: "ConsumerGroupRegularExpression",
}


def describe_key(data: bytes) -> dict:
    """A key as {"type": key version, "data": its fields}; ProtocolError when it is
    not one of the group records (offset commit, group metadata, or a KIP-848
    consumer group's records, key versions 3 to 8 and 16)."""
    if len(data) < 2:
        raise ProtocolError("__consumer_offsets key without a version")
    version = _INT16.unpack_from(data)[0]
    if version in (0, 1):
        message = _OFFSET_KEY
    elif version == GROUP_KEY_VERSION:
        message = _GROUP_KEY
    elif version in _CONSUMER_GROUP_MESSAGES:
        message = DATA_MESSAGES[_CONSUMER_GROUP_MESSAGES[version] + "Key"]
        key, _ = decode_struct(message.struct, version, False, data, 2)
        return {"type": str(version), "data": _fields_as_dict(message.struct, version, key)}
    else:
        raise ProtocolError(f"key version {version} is not an offset commit (0, 1), group metadata (2) or consumer group (3-8, 16) key")
    _, key = _read_versioned(message, data)
    return {"type": str(version), "data": _fields_as_dict(message.struct, version, key)}


def describe_value(key_version: int, data: bytes) -> dict:
    """A value as {"version": its version, "data": its fields}: an offset commit's
    for key versions 0 and 1, a group's metadata for 2. A member's subscription
    and assignment are decoded too when the group's protocol type is
    ``consumer``; other protocols' bytes stay base64. Key versions 3 to 8 and 16: the
    consumer group record's value (flexible, as Kafka writes them)."""
    if key_version in _CONSUMER_GROUP_MESSAGES:
        message = DATA_MESSAGES[_CONSUMER_GROUP_MESSAGES[key_version] + "Value"]
        if len(data) < 2:
            raise ProtocolError(f"{message.name}: no version")
        version = _INT16.unpack_from(data)[0]
        if version not in message.versions:
            raise ProtocolError(f"{message.name}: unknown version {version}")
        value, _ = decode_struct(message.struct, version, version in message.flexible, data, 2)
        return {"version": str(version), "data": _fields_as_dict(message.struct, version, value)}
    message = _OFFSET_VALUE if key_version in (0, 1) else _GROUP_VALUE
    version, value = _read_versioned(message, data)
    fields = _fields_as_dict(message.struct, version, value)
    if message is _GROUP_VALUE and value.protocol_type == CONSUMER_PROTOCOL_TYPE:
        for member, shown in zip(value.members, fields["members"]):
            shown["subscription"] = _consumer_payload(_SUBSCRIPTION, member.subscription, shown["subscription"])
            shown["assignment"] = _consumer_payload(_ASSIGNMENT, member.assignment, shown["assignment"])
    return {"version": str(version), "data": fields}


def _consumer_payload(message, data, undecoded):
    if not data:
        return undecoded
    try:
        version, value = _read_versioned_lenient(message, bytes(data))
    except ProtocolError:
        return undecoded
    return _fields_as_dict(message.struct, version, value)
