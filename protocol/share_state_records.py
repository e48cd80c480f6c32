"""Records of ``__share_group_state``: codec (pure).

Key version 0 is a ShareSnapshot, 1 a ShareUpdate (declared in
protocol/messages/share_coordinator_records.py). Both are keyed by (group id,
topic id, partition), so compaction keeps the latest of each kind per
share-partition; a reader applies the latest snapshot, then the updates
written after it. A record without a value is a tombstone (the
share-partition's state was deleted).

The values here are plain tuples so that the layers above need not know the
declared classes: a state batch is ``(first_offset, last_offset,
delivery_state, delivery_count)``.
"""

from __future__ import annotations

import enum
import struct
import uuid
from dataclasses import dataclass

from protocol.codec import decode_struct, encode_struct
from protocol.exceptions import ProtocolError
from protocol.registry import DATA_MESSAGES

_INT16 = struct.Struct(">h")
VALUE_VERSION = 0

StateBatch = tuple[int, int, int, int]


class ShareRecordKind(enum.IntEnum):
    SNAPSHOT = 0
    UPDATE = 1


_NAMES = {ShareRecordKind.SNAPSHOT: "ShareSnapshot", ShareRecordKind.UPDATE: "ShareUpdate"}
_KEYS = {kind: DATA_MESSAGES[name + "Key"] for kind, name in _NAMES.items()}
_VALUES = {kind: DATA_MESSAGES[name + "Value"] for kind, name in _NAMES.items()}
_BATCH_CLASS = next(f.type.item for f in _VALUES[ShareRecordKind.SNAPSHOT].struct.fields if f.name == "state_batches").cls


@dataclass(frozen=True)
class ShareStateRecord:
    kind: ShareRecordKind
    group_id: str
    topic_id: uuid.UUID
    partition: int
    # None: a tombstone.
    start_offset: int | None = None
    state_batches: tuple[StateBatch, ...] = ()
    snapshot_epoch: int = 0
    state_epoch: int = 0  # snapshots only
    leader_epoch: int = -1
    write_timestamp_ms: int = -1  # snapshots only

    @property
    def is_tombstone(self) -> bool:
        return self.start_offset is None


def encode_record(record: ShareStateRecord) -> tuple[bytes, bytes | None]:
    kind = record.kind
    key_struct = _KEYS[kind].struct
    key = bytearray(_INT16.pack(int(kind)))
    encode_struct(key_struct, int(kind), False,
                  key_struct.cls(group_id=record.group_id, topic_id=record.topic_id, partition=record.partition), key)
    if record.is_tombstone:
        return bytes(key), None
    batches = [_BATCH_CLASS(first_offset=f, last_offset=l, delivery_state=s, delivery_count=c) for f, l, s, c in record.state_batches]
    value_struct = _VALUES[kind].struct
    if kind == ShareRecordKind.SNAPSHOT:
        value = value_struct.cls(
            snapshot_epoch=record.snapshot_epoch, state_epoch=record.state_epoch, leader_epoch=record.leader_epoch,
            start_offset=record.start_offset, create_timestamp=record.write_timestamp_ms,
            write_timestamp=record.write_timestamp_ms, state_batches=batches,
        )
    else:
        value = value_struct.cls(
            snapshot_epoch=record.snapshot_epoch, leader_epoch=record.leader_epoch,
            start_offset=record.start_offset, state_batches=batches,
        )
    out = bytearray(_INT16.pack(VALUE_VERSION))
    encode_struct(value_struct, VALUE_VERSION, True, value, out)
    return bytes(key), bytes(out)


def is_share_state_key(key: bytes) -> bool:
    return len(key) >= 2 and _INT16.unpack_from(key)[0] in ShareRecordKind._value2member_map_


def decode_record(key: bytes, value: bytes | None) -> ShareStateRecord:
    """ProtocolError when ``key``/``value`` are not a share state record."""
    if not is_share_state_key(key):
        raise ProtocolError("not a __share_group_state key (versions 0 and 1)")
    kind = ShareRecordKind(_INT16.unpack_from(key)[0])
    k, _ = decode_struct(_KEYS[kind].struct, int(kind), False, key, 2)
    if value is None:
        return ShareStateRecord(kind, k.group_id, k.topic_id, k.partition)
    if len(value) < 2 or _INT16.unpack_from(value)[0] < 0:
        raise ProtocolError(f"{_NAMES[kind]}Value: no version")
    # A newer value version keeps the fields we know in front (tagged additions).
    v, _ = decode_struct(_VALUES[kind].struct, VALUE_VERSION, True, value, 2, exact=False)
    batches = tuple((b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in v.state_batches)
    if kind == ShareRecordKind.SNAPSHOT:
        return ShareStateRecord(kind, k.group_id, k.topic_id, k.partition, v.start_offset, batches,
                                v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.write_timestamp)
    return ShareStateRecord(kind, k.group_id, k.topic_id, k.partition, v.start_offset, batches,
                            v.snapshot_epoch, 0, v.leader_epoch)
