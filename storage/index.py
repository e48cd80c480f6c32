"""Sparse offset and time indexes in Kafka's file formats.

``.index``: 8-byte entries ``(relative_offset: int32, position: int32)``, big
endian, relative to the segment's base offset. Each entry maps the *last*
offset of a batch to the file position where that batch starts, as Kafka
writes it, so a lookup lands on a batch at or before the one holding the
target offset.

``.timeindex``: 12-byte entries ``(timestamp_ms: int64, relative_offset: int32)``;
timestamps only grow: an entry is written only when a batch raises the
segment's maximum timestamp.

Like Kafka's, the index files of the active segment are preallocated to
``segment.index.bytes`` (sparse, so the zeros cost no disk) and trimmed to
their entries when the segment is rolled or closed; a full index rolls the
segment. The entries live in memory as arrays, loaded on first use, so a
broker with many partitions does not read every index at start-up. Writes go
straight to the file with ``pwrite``; no file handle is kept open between
operations (the open-file budget belongs to the ``.log`` files).
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class _SparseIndex:
    """Shared file handling of the two index kinds."""

    ENTRY: struct.Struct

    __slots__ = ("path", "base_offset", "max_entries", "_keys", "_values", "_loaded", "_unwritten", "_file_entries")

    def __init__(self, path: Path, base_offset: int, max_bytes: int):
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_entries = max(max_bytes // self.ENTRY.size, 1)
        self._loaded = False
        self._keys = None
        self._values = None
        self._unwritten = 0  # entries appended in memory but not yet written
        self._file_entries = 0  # entries known to be on disk

    # --------------------------------------------------------------- loading

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        self._keys, self._values = self._new_arrays()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        usable = len(data) - len(data) % self.ENTRY.size
        for first, second in self.ENTRY.iter_unpack(data[:usable]):
            if not self._accept(first, second):
                break  # preallocated zeros, or a torn entry: the index ends here
            self._keys.append(self._key(first, second))
            self._values.append(self._value(first, second))
        self._file_entries = len(self._keys)
        self._loaded = True

    def start_empty(self) -> None:
        """A new segment's index: known empty, so never read back from its
        (preallocated, all zeros) file."""
        self._keys, self._values = self._new_arrays()
        self._loaded = True
        self._unwritten = 0
        self._file_entries = 0

    def __len__(self) -> int:
        self._ensure_loaded()
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    # --------------------------------------------------------------- writing

    def _append(self, key: int, value: int) -> None:
        self._keys.append(key)
        self._values.append(value)
        self._unwritten += 1

    def flush(self, fsync: bool = False) -> None:
        if not self._loaded or not self._unwritten:
            return
        start = len(self._keys) - self._unwritten
        data = b"".join(self._pack(i) for i in range(start, len(self._keys)))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, start * self.ENTRY.size)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._unwritten = 0
        self._file_entries = len(self._keys)

    def preallocate(self) -> None:
        """Size the file for ``max_entries`` (sparse) so appends never grow it."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < self.max_entries * self.ENTRY.size:
                os.ftruncate(fd, self.max_entries * self.ENTRY.size)
        finally:
            os.close(fd)

    def trim(self) -> None:
        """Write what is unwritten and cut the file to exactly its entries (on
        roll and on close), with one open: a shutdown does this for 200,000
        index files."""
        if not self._loaded:
            return  # never loaded: the file was already trimmed when it was written
        try:
            fd = os.open(self.path, os.O_WRONLY | (os.O_CREAT if self._unwritten else 0), 0o644)
        except FileNotFoundError:
            return  # a new segment's index, never written: nothing to cut
        try:
            if self._unwritten:
                start = len(self._keys) - self._unwritten
                os.pwrite(fd, b"".join(self._pack(i) for i in range(start, len(self._keys))), start * self.ENTRY.size)
                self._unwritten = 0
                self._file_entries = len(self._keys)
            os.ftruncate(fd, len(self._keys) * self.ENTRY.size)
        finally:
            os.close(fd)

    def rewrite(self) -> None:
        """Replace the file with the in-memory entries (after a truncation)."""
        data = b"".join(self._pack(i) for i in range(len(self._keys)))
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)
        self._unwritten = 0
        self._file_entries = len(self._keys)

    def reset(self) -> None:
        """Forget every entry (the index is about to be rebuilt from the log)."""
        self._keys, self._values = self._new_arrays()
        self._loaded = True
        self._unwritten = 0
        self.rewrite()

    def delete(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def close(self) -> None:
        self.trim()


class OffsetIndex(_SparseIndex):
    ENTRY = OFFSET_ENTRY
    __slots__ = ()

    @staticmethod
    def _new_arrays():
        return array("i"), array("i")  # relative offsets, positions

    def _accept(self, rel: int, position: int) -> bool:
        if not self._keys:
            # Position 0 needs no entry (a lookup starts there anyway), so an
            # entry at 0 is the zero fill of a preallocated file.
            return rel >= 0 and position > 0
        return rel > self._keys[-1] and position > self._values[-1]

    @staticmethod
    def _key(rel, position):
        return rel

    @staticmethod
    def _value(rel, position):
        return position

    def _pack(self, i: int) -> bytes:
        return OFFSET_ENTRY.pack(self._keys[i], self._values[i])

    def append(self, offset: int, position: int) -> None:
        self._ensure_loaded()
        rel = offset - self.base_offset
        if position <= 0 or (self._keys and (rel <= self._keys[-1] or position <= self._values[-1])):
            return
        self._append(rel, position)

    def lookup(self, offset: int) -> int:
        """File position of the last indexed batch whose last offset is <= ``offset`` (0 if none)."""
        self._ensure_loaded()
        i = bisect_right(self._keys, offset - self.base_offset)
        return self._values[i - 1] if i else 0

    def last_batch_start(self, position_max: int, offset_below: int) -> int:
        """File position of the last indexed batch that starts at or before
        ``position_max`` and ends below ``offset_below`` (0 if none): every batch
        before it lies wholly before ``position_max`` and below ``offset_below``."""
        self._ensure_loaded()
        count = min(bisect_right(self._values, position_max), bisect_left(self._keys, offset_below - self.base_offset))
        return self._values[count - 1] if count > 0 else 0

    def last_position(self) -> int:
        self._ensure_loaded()
        return self._values[-1] if self._values else 0

    def entries(self) -> list[tuple[int, int]]:
        """(absolute offset, position) pairs."""
        self._ensure_loaded()
        return [(self.base_offset + r, p) for r, p in zip(self._keys, self._values)]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past ``position`` (the log was cut there)."""
        self._ensure_loaded()
        keep = bisect_right(self._values, position - 1)
        if keep < len(self._values):
            del self._values[keep:]
            del self._keys[keep:]
            self.rewrite()


class TimeIndex(_SparseIndex):
    ENTRY = TIME_ENTRY
    __slots__ = ()

    @staticmethod
    def _new_arrays():
        return array("q"), array("i")  # timestamps, relative offsets

    def _accept(self, timestamp_ms: int, rel: int) -> bool:
        if not self._keys:
            return not (timestamp_ms == 0 and rel == 0)
        return timestamp_ms > self._keys[-1] and rel >= self._values[-1]

    @staticmethod
    def _key(timestamp_ms, rel):
        return timestamp_ms

    @staticmethod
    def _value(timestamp_ms, rel):
        return rel

    def _pack(self, i: int) -> bytes:
        return TIME_ENTRY.pack(self._keys[i], self._values[i])

    @property
    def max_timestamp(self) -> int:
        self._ensure_loaded()
        return self._keys[-1] if self._keys else -1

    def maybe_append(self, timestamp_ms: int, offset: int) -> None:
        self._ensure_loaded()
        if self._keys and timestamp_ms <= self._keys[-1]:
            return
        self._append(timestamp_ms, offset - self.base_offset)

    def lookup(self, timestamp_ms: int) -> int:
        """An offset from which to scan for the first record with timestamp >= ``timestamp_ms``:
        the last offset of the newest indexed batch whose maximum timestamp is still
        below the target (every record before it is older), or the segment's base."""
        self._ensure_loaded()
        i = bisect_right(self._keys, timestamp_ms - 1)
        if i == 0:
            return self.base_offset
        return self.base_offset + self._values[i - 1]

    def entries(self) -> list[tuple[int, int]]:
        """(timestamp, absolute offset) pairs."""
        self._ensure_loaded()
        return [(t, self.base_offset + r) for t, r in zip(self._keys, self._values)]

    def truncate_to_offset(self, offset: int) -> None:
        self._ensure_loaded()
        rel = offset - self.base_offset
        keep = 0
        while keep < len(self._values) and self._values[keep] < rel:
            keep += 1
        if keep < len(self._values):
            del self._keys[keep:]
            del self._values[keep:]
            self.rewrite()
