"""KRaft metadata records: declarations and the frame they travel in.

A metadata record is the value of a record in the ``__cluster_metadata`` log:
``uvarint frame_version (1) | uvarint api_key | uvarint version | body``, the
body always in the flexible encoding. Keys are null.
"""

from __future__ import annotations

from protocol.codec import decode_struct, encode_struct
from protocol.exceptions import ProtocolError
from protocol.primitives import read_uvarint, write_uvarint
from protocol.schema import INT8, INT16, INT32, INT64, STRING, UUID, Array, F, Struct

FRAME_VERSION = 1


class MetadataRecordType:
    """A record type: its api key in the metadata log, its versions and declaration."""

    def __init__(self, api_key: int, max_version: int, struct: Struct):
        self.api_key = api_key
        self.max_version = max_version
        self.struct = struct

    def __call__(self, **values):
        return self.struct.cls(**values)


TOPIC_RECORD = MetadataRecordType(2, 0, Struct("TopicRecord", [
    F("name", STRING),
    F("topic_id", UUID),
]))

PARTITION_RECORD = MetadataRecordType(3, 2, Struct("PartitionRecord", [
    F("partition_id", INT32, default=-1),
    F("topic_id", UUID),
    F("replicas", Array(INT32)),
    F("isr", Array(INT32)),
    F("removing_replicas", Array(INT32)),
    F("adding_replicas", Array(INT32)),
    F("leader", INT32, default=-1),
    F("leader_recovery_state", INT8, tagged="0+", tag=0, default=0),
    F("leader_epoch", INT32, default=-1),
    F("partition_epoch", INT32, default=-1),
    F("directories", Array(UUID), "1+"),
    F("eligible_leader_replicas", Array(INT32), "2+", nullable="2+", tagged="2+", tag=1, default=None),
    F("last_known_elr", Array(INT32), "2+", nullable="2+", tagged="2+", tag=2, default=None),
]))

CONFIG_RECORD = MetadataRecordType(4, 0, Struct("ConfigRecord", [
    F("resource_type", INT8),
    F("resource_name", STRING),
    F("name", STRING),
    F("value", STRING, nullable="0+"),
]))

REMOVE_TOPIC_RECORD = MetadataRecordType(9, 0, Struct("RemoveTopicRecord", [
    F("topic_id", UUID),
]))

FEATURE_LEVEL_RECORD = MetadataRecordType(12, 0, Struct("FeatureLevelRecord", [
    F("name", STRING),
    F("feature_level", INT16),
]))

PRODUCER_IDS_RECORD = MetadataRecordType(15, 0, Struct("ProducerIdsRecord", [
    F("broker_id", INT32),
    F("broker_epoch", INT64, default=-1),
    F("next_producer_id", INT64),
]))

RECORD_TYPES = {t.api_key: t for t in (TOPIC_RECORD, PARTITION_RECORD, CONFIG_RECORD, REMOVE_TOPIC_RECORD, FEATURE_LEVEL_RECORD, PRODUCER_IDS_RECORD)}
_TYPE_BY_STRUCT = {id(t.struct): t for t in RECORD_TYPES.values()}

# ConfigRecord resource types (the same numbering as DescribeConfigs).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


def record_api_key(value) -> int:
    return _TYPE_BY_STRUCT[id(value.STRUCT)].api_key


def encode_record(value, version: int | None = None) -> bytes:
    record_type = _TYPE_BY_STRUCT[id(value.STRUCT)]
    if version is None:
        version = record_type.max_version
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    write_uvarint(out, record_type.api_key)
    write_uvarint(out, version)
    encode_struct(record_type.struct, version, True, value, out)
    return bytes(out)


def decode_record(data) -> tuple[int, object]:
    """Returns (api_key, value). Unknown record types raise ProtocolError."""
    try:
        frame_version, pos = read_uvarint(data, 0)
        api_key, pos = read_uvarint(data, pos)
        version, pos = read_uvarint(data, pos)
    except IndexError:
        raise ProtocolError("truncated metadata record frame") from None
    if frame_version != FRAME_VERSION:
        raise ProtocolError(f"unknown metadata frame version {frame_version}")
    record_type = RECORD_TYPES.get(api_key)
    if record_type is None or version > record_type.max_version:
        raise ProtocolError(f"unknown metadata record type {api_key} v{version}")
    value, _ = decode_struct(record_type.struct, version, True, data, pos)
    return api_key, value
