"""The bytes of a metadata snapshot file: Kafka record batches, like a log segment.

Layout (Kafka's ``<end_offset>-<epoch>.checkpoint`` files use the same one):

1. a control batch with one SnapshotHeaderRecord (control type 3);
2. data batches of at most ``RECORDS_PER_BATCH`` metadata records each, in the
   order :func:`controller.metadata.snapshot.iter_snapshot_records` gives;
3. a control batch with one SnapshotFooterRecord (control type 4).

Offsets inside the file count from 0; they are positions within the snapshot,
not log offsets. A file without its footer is incomplete and is rejected, so a
torn snapshot can never pass for an empty cluster.
"""

from __future__ import annotations

import struct

from controller.metadata.delta import MetadataDelta, MetadataLogError
from controller.metadata.image import MetadataImage
from controller.metadata.records import decode_record, encode_record
from controller.metadata.snapshot import iter_snapshot_records
from protocol.codec import decode_struct, encode_struct
from protocol.exceptions import ProtocolError
from protocol.records import build_batch, decode_batch_records, iter_batches
from protocol.registry import DATA_MESSAGES

SNAPSHOT_HEADER_CONTROL_TYPE = 3
SNAPSHOT_FOOTER_CONTROL_TYPE = 4
RECORDS_PER_BATCH = 2000
_CONTROL_KEY = struct.Struct(">hh")  # (key version, control type)

_HEADER = DATA_MESSAGES["SnapshotHeaderRecord"]
_FOOTER = DATA_MESSAGES["SnapshotFooterRecord"]


def _data_message_bytes(message, **fields) -> bytes:
    return bytes(encode_struct(message.struct, 0, True, message.struct.cls(**fields)))


def encode_snapshot_file(image: MetadataImage, last_contained_timestamp_ms: int, now_ms: int) -> bytes:
    return encode_record_file(iter_snapshot_records(image), last_contained_timestamp_ms, now_ms)


def encode_record_file(records, last_contained_timestamp_ms: int, now_ms: int) -> bytes:
    """Metadata records in the snapshot file layout (also that of Kafka's bootstrap.checkpoint)."""
    out = bytearray()
    offset = 0
    header = _data_message_bytes(_HEADER, version=0, last_contained_log_timestamp=last_contained_timestamp_ms)
    out += build_batch(
        [(_CONTROL_KEY.pack(0, SNAPSHOT_HEADER_CONTROL_TYPE), header, [], now_ms)], base_offset=offset, is_control=True
    )
    offset += 1
    chunk: list[tuple] = []
    for record in records:
        chunk.append((None, encode_record(record), [], now_ms))
        if len(chunk) == RECORDS_PER_BATCH:
            out += build_batch(chunk, base_offset=offset)
            offset += len(chunk)
            chunk = []
    if chunk:
        out += build_batch(chunk, base_offset=offset)
        offset += len(chunk)
    footer = _data_message_bytes(_FOOTER, version=0)
    out += build_batch(
        [(_CONTROL_KEY.pack(0, SNAPSHOT_FOOTER_CONTROL_TYPE), footer, [], now_ms)], base_offset=offset, is_control=True
    )
    return bytes(out)


def decode_snapshot_file(data: bytes, last_offset: int) -> MetadataImage:
    """The image a snapshot file holds, at ``last_offset`` (the snapshot's end offset - 1).
    Bad or incomplete bytes raise ProtocolError."""
    delta = MetadataDelta(MetadataImage())
    for records in iter_record_file(data):
        delta.replay_all(records)
    if delta.in_transaction:
        raise MetadataLogError("a snapshot ends inside a metadata transaction")
    return delta.apply(last_offset)


def iter_record_file(data: bytes):
    """The decoded (api key, record) lists of a snapshot-layout file, one per data
    batch. Bad bytes or a missing header raise ProtocolError as they are met, a
    missing footer only at the end: consume it all before acting on any list."""
    saw_header = saw_footer = False
    for position, size, header in iter_batches(data):
        if saw_footer:
            raise ProtocolError("snapshot file has batches after its footer")
        _, records = decode_batch_records(data[position : position + size])
        if header.is_control:
            for record in records:
                if record.key is None or len(record.key) < 4:
                    raise ProtocolError("snapshot control record without a key")
                _, control_type = _CONTROL_KEY.unpack_from(record.key)
                if control_type == SNAPSHOT_HEADER_CONTROL_TYPE:
                    decode_struct(_HEADER.struct, 0, True, record.value)
                    saw_header = True
                elif control_type == SNAPSHOT_FOOTER_CONTROL_TYPE:
                    saw_footer = True
            continue
        if not saw_header:
            raise ProtocolError("snapshot file does not start with a header")
        yield [decode_record(record.value) for record in records]
    if not (saw_header and saw_footer):
        raise ProtocolError("snapshot file is incomplete")
