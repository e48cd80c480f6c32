"""Sparse offset and time indexes in Kafka's file formats.

``.index``: 8-byte entries ``(relative_offset: int32, position: int32)``, big
endian, relative to the segment's base offset. Each entry maps the *last*
offset of a batch to the file position where that batch starts, as Kafka
writes it, so a lookup lands on a batch at or before the one holding the
target offset.

``.timeindex``: 12-byte entries ``(timestamp_ms: int64, relative_offset: int32)``;
timestamps only grow: an entry is written only when a batch raises the
segment's maximum timestamp.

Both are held in memory as arrays (an index costs 8 or 12 bytes per
``log.index.interval.bytes`` of log) and appended to their files as entries
are added; ``flush`` makes the file match.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class OffsetIndex:
    __slots__ = ("path", "base_offset", "relative_offsets", "positions", "_file", "_unflushed")

    def __init__(self, path: Path, base_offset: int):
        self.path = Path(path)
        self.base_offset = base_offset
        self.relative_offsets = array("i")
        self.positions = array("i")
        self._unflushed = bytearray()
        self._file = None
        if self.path.exists():
            data = self.path.read_bytes()
            usable = len(data) - len(data) % OFFSET_ENTRY.size
            last = -1
            for rel, pos in OFFSET_ENTRY.iter_unpack(data[:usable]):
                # A preallocated (zero-filled) tail or a torn entry ends the index.
                if rel <= last and not (rel == 0 and last == -1):
                    break
                self.relative_offsets.append(rel)
                self.positions.append(pos)
                last = rel

    def __len__(self) -> int:
        return len(self.positions)

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self.relative_offsets and rel <= self.relative_offsets[-1]:
            return
        self.relative_offsets.append(rel)
        self.positions.append(position)
        self._unflushed += OFFSET_ENTRY.pack(rel, position)

    def lookup(self, offset: int) -> int:
        """File position of the last indexed batch whose last offset is <= ``offset`` (0 if none)."""
        i = bisect_right(self.relative_offsets, offset - self.base_offset)
        return self.positions[i - 1] if i else 0

    def last_position(self) -> int:
        return self.positions[-1] if self.positions else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past ``position`` (the log was cut there)."""
        keep = bisect_right(self.positions, position - 1)
        if keep < len(self.positions):
            del self.positions[keep:]
            del self.relative_offsets[keep:]
            self.rewrite()

    def rewrite(self) -> None:
        self.close()
        data = b"".join(OFFSET_ENTRY.pack(r, p) for r, p in zip(self.relative_offsets, self.positions))
        _write_file(self.path, data)
        self._unflushed.clear()

    def flush(self, fsync: bool = False) -> None:
        if self._unflushed:
            if self._file is None:
                self._file = open(self.path, "ab")
            self._file.write(self._unflushed)
            self._unflushed.clear()
            self._file.flush()
        if fsync and self._file is not None:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None


class TimeIndex:
    __slots__ = ("path", "base_offset", "timestamps", "relative_offsets", "_file", "_unflushed")

    def __init__(self, path: Path, base_offset: int):
        self.path = Path(path)
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.relative_offsets = array("i")
        self._unflushed = bytearray()
        self._file = None
        if self.path.exists():
            data = self.path.read_bytes()
            usable = len(data) - len(data) % TIME_ENTRY.size
            for ts, rel in TIME_ENTRY.iter_unpack(data[:usable]):
                if self.timestamps and (ts <= self.timestamps[-1] or rel < self.relative_offsets[-1]):
                    break
                self.timestamps.append(ts)
                self.relative_offsets.append(rel)

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def max_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp_ms: int, offset: int) -> None:
        if self.timestamps and timestamp_ms <= self.timestamps[-1]:
            return
        rel = offset - self.base_offset
        self.timestamps.append(timestamp_ms)
        self.relative_offsets.append(rel)
        self._unflushed += TIME_ENTRY.pack(timestamp_ms, rel)

    def lookup(self, timestamp_ms: int) -> int:
        """An offset from which to scan for the first record with timestamp >= ``timestamp_ms``.

        The entry with the largest timestamp below the target maps to the last
        offset of a batch whose records are all older... or not: its batch may
        still hold newer records, so the scan starts at that entry's offset.
        """
        i = bisect_right(self.timestamps, timestamp_ms - 1)
        if i == 0:
            return self.base_offset
        return self.base_offset + self.relative_offsets[i - 1]

    def truncate_to_offset(self, offset: int) -> None:
        rel = offset - self.base_offset
        keep = 0
        while keep < len(self.relative_offsets) and self.relative_offsets[keep] < rel:
            keep += 1
        if keep < len(self.relative_offsets):
            del self.timestamps[keep:]
            del self.relative_offsets[keep:]
            self.rewrite()

    def rewrite(self) -> None:
        self.close()
        data = b"".join(TIME_ENTRY.pack(t, r) for t, r in zip(self.timestamps, self.relative_offsets))
        _write_file(self.path, data)
        self._unflushed.clear()

    def flush(self, fsync: bool = False) -> None:
        if self._unflushed:
            if self._file is None:
                self._file = open(self.path, "ab")
            self._file.write(self._unflushed)
            self._unflushed.clear()
            self._file.flush()
        if fsync and self._file is not None:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None


def _write_file(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
