"""Producer state snapshots: ``<offset:020d>.snapshot`` files, in Kafka's format.

A snapshot at offset N holds the idempotent-producer state built from every
batch below N, so a log that opens replays only the batches from N on
instead of the whole log. The layout is Kafka's ``ProducerStateManager``
snapshot, version 1 (all integers big-endian)::

    version            int16   1
    crc                uint32  CRC32C of every byte after this field
    entry count        int32
    entries            46 bytes each:
      producer id      int64
      producer epoch   int16
      last sequence    int32   of the producer's last batch
      last offset      int64   of the producer's last batch (-1: no batch)
      offset delta     int32   last offset - first offset of that batch
      timestamp        int64   max timestamp of that batch
      coordinator epoch int32  of the last marker written for the producer (-1: none)
      txn first offset int64   first offset of its open transaction (-1: none)

Like Kafka, a snapshot keeps only each producer's *last* batch, not the
five-batch window: after a restart a retry of that batch is recognised as a
duplicate, while a retry of an older in-flight batch of the same producer
gets OUT_OF_ORDER_SEQUENCE_NUMBER (clients retry only their newest batches,
and the batches replayed from the log after the snapshot refill the window).
A producer's open transaction is restored from its entry; transactions that
were complete but not yet replicated are not kept (as in Kafka): after a
reload they count as stable.

Files are written to ``<name>.tmp``, fsynced and renamed into place, so a
crash leaves no torn snapshot under a final name; a snapshot whose size or
CRC is wrong is reported as :class:`CorruptSnapshotError` and the log falls
back to an older one.
"""

from __future__ import annotations

import struct
from collections import deque
from pathlib import Path

from crc32c import crc32c

from storage.checkpoint import write_atomically
from storage.producer_state import (
    BATCHES_REMEMBERED,
    NO_SEQUENCE,
    NO_TXN,
    BatchMetadata,
    ProducerEntry,
    first_sequence_of,
)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
NO_TXN_FIRST_OFFSET = NO_TXN

_VERSION_AND_CRC = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
HEADER_BYTES = _VERSION_AND_CRC.size + _COUNT.size  # 10
ENTRY_BYTES = _ENTRY.size  # 46
_CRC_COVERS_FROM = _VERSION_AND_CRC.size  # the entry count and the entries


class CorruptSnapshotError(ValueError):
    """A snapshot file that cannot be trusted (size, version or CRC)."""


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offset(name: str) -> int | None:
    """The offset in a snapshot file's name, or None if it is not a snapshot's name."""
    if name.endswith(SNAPSHOT_SUFFIX):
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if stem.isdigit():
            return int(stem)
    return None


def encode_snapshot(producers: dict[int, ProducerEntry]) -> bytes:
    """The bytes of a snapshot of ``producers`` (each one's last batch), by producer id."""
    body = bytearray(_COUNT.pack(len(producers)))
    for producer_id in sorted(producers):
        entry = producers[producer_id]
        if entry.batches:
            last = entry.batches[-1]
            last_sequence, last_offset, offset_delta = last.last_sequence, last.last_offset, last.last_offset - last.first_offset
        else:
            last_sequence, last_offset, offset_delta = -1, -1, 0
        body += _ENTRY.pack(
            producer_id,
            entry.epoch,
            last_sequence,
            last_offset,
            offset_delta,
            entry.last_timestamp_ms,
            entry.coordinator_epoch,
            entry.current_txn_first_offset if entry.current_txn_first_offset >= 0 else NO_TXN_FIRST_OFFSET,
        )
    return _VERSION_AND_CRC.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerEntry]:
    """The producer entries of a snapshot file's bytes; CorruptSnapshotError if they
    are not a whole, intact version-1 snapshot."""
    if len(data) < HEADER_BYTES:
        raise CorruptSnapshotError(f"{len(data)} bytes, shorter than the {HEADER_BYTES}-byte header")
    version, crc = _VERSION_AND_CRC.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    (count,) = _COUNT.unpack_from(data, _VERSION_AND_CRC.size)
    if count < 0 or len(data) != HEADER_BYTES + count * ENTRY_BYTES:
        raise CorruptSnapshotError(f"{len(data)} bytes do not hold {count} entries of {ENTRY_BYTES} bytes")
    computed = crc32c(memoryview(data)[_CRC_COVERS_FROM:])
    if computed != crc:
        raise CorruptSnapshotError(f"CRC mismatch: stored {crc}, computed {computed}")
    entries = []
    for position in range(HEADER_BYTES, len(data), ENTRY_BYTES):
        (producer_id, epoch, last_sequence, last_offset, offset_delta, timestamp_ms, coordinator_epoch,
         txn_first_offset) = _ENTRY.unpack_from(data, position)
        batches: deque = deque(maxlen=BATCHES_REMEMBERED)
        if last_offset >= 0:
            batches.append(
                BatchMetadata(
                    NO_SEQUENCE if last_sequence == NO_SEQUENCE else first_sequence_of(last_sequence, offset_delta),
                    last_sequence,
                    last_offset - offset_delta,
                    last_offset,
                    timestamp_ms,
                )
            )
        entries.append(
            ProducerEntry(
                producer_id,
                epoch,
                batches,
                timestamp_ms,
                coordinator_epoch,
                txn_first_offset if txn_first_offset >= 0 else NO_TXN,
            )
        )
    return entries


def read_snapshot(path: Path) -> list[ProducerEntry]:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise CorruptSnapshotError("the file is gone") from None
    return decode_snapshot(data)


def write_snapshot(directory: Path, offset: int, producers: dict[int, ProducerEntry], *, fsync: bool = True) -> Path:
    """Write the snapshot at ``offset`` atomically: ``.tmp``, fsync, rename.

    The directory is not fsynced: if a power loss undoes the rename, the
    log finds an older snapshot and replays more batches, which gives the
    same state (a snapshot is only written once the batches below its
    offset are durable). Without ``fsync`` (a clean shutdown syncs the whole
    file system afterwards) a crash before that sync may leave the file
    empty or torn: its CRC then fails, and the log ignores it and replays."""
    path = Path(directory) / snapshot_file_name(offset)
    write_atomically(path, encode_snapshot(producers), fsync_directory=False, fsync_file=fsync)
    return path
