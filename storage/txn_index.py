"""The aborted-transaction index of a segment: ``<base offset:020d>.txnindex``.

Kafka's format: a plain concatenation of 34-byte big-endian entries, one per
transaction aborted by an ABORT marker that lies in the segment, in the order
the markers were written (ascending last offset)::

    version             int16   0
    producer id         int64
    first offset        int64   of the transaction's first batch in this partition
    last offset         int64   of its ABORT marker
    last stable offset  int64   the partition's LSO once the abort was written:
                                the first offset of the oldest *other* transaction
                                still open then, else last offset + 1

A read_committed fetch at offset F up to U walks the indexes of the segments
from the one holding F (:meth:`TransactionIndex.collect`) and lists the
aborted transactions that overlap ``[F, U)``; the walk stops at the first
segment holding an entry whose last stable offset reaches U: a marker written
after that entry ends a transaction that was open when the entry was written,
so started at or after the entry's LSO, or one that started later still; either
way not below U.

The file is made on the first entry (most segments never have one) and each
entry is written when it is appended (markers are rare next to data); the
entries are kept in memory too, loaded from the file on first use. A file
whose size is not a multiple of 34 bytes or that holds an entry of another
version is corrupt (:class:`CorruptTxnIndexError`): the log rebuilds it from
the segment's markers. No file handle is kept open between operations.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

TXN_INDEX_SUFFIX = ".txnindex"
TXN_INDEX_VERSION = 0
ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = ENTRY.size  # 34


class CorruptTxnIndexError(ValueError):
    """A ``.txnindex`` file that cannot be read as whole version-0 entries."""


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int


def encode_entry(txn: AbortedTxn) -> bytes:
    return ENTRY.pack(TXN_INDEX_VERSION, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file's bytes; CorruptTxnIndexError if they
    are not whole version-0 entries."""
    if len(data) % ENTRY_BYTES:
        raise CorruptTxnIndexError(f"{len(data)} bytes are not a whole number of {ENTRY_BYTES}-byte entries")
    entries = []
    for position in range(0, len(data), ENTRY_BYTES):
        version, producer_id, first_offset, last_offset, last_stable_offset = ENTRY.unpack_from(data, position)
        if version != TXN_INDEX_VERSION:
            raise CorruptTxnIndexError(f"entry {position // ENTRY_BYTES} has version {version}, not {TXN_INDEX_VERSION}")
        entries.append(AbortedTxn(producer_id, first_offset, last_offset, last_stable_offset))
    return entries


class TransactionIndex:
    """One segment's aborted transactions, in memory and in its ``.txnindex`` file."""

    __slots__ = ("_entries", "_file_exists", "_unsynced", "path")

    def __init__(self, path: Path, *, file_exists: bool | None = None):
        self.path = Path(path)
        self._entries: list[AbortedTxn] | None = None  # None: not loaded yet
        # Whether the file is there, when the caller knows (a directory listing);
        # None: look when needed.
        self._file_exists = file_exists
        self._unsynced = False

    @classmethod
    def empty(cls, path: Path) -> TransactionIndex:
        """A new segment's index: known to have no file and no entry."""
        index = cls(path, file_exists=False)
        index._entries = []
        return index

    @property
    def file_exists(self) -> bool:
        if self._file_exists is None:
            self._file_exists = self.path.exists()
        return self._file_exists

    def load(self) -> list[AbortedTxn]:
        """The entries, read from the file the first time; CorruptTxnIndexError
        (and nothing kept) when the file is damaged."""
        if self._entries is None:
            if not self.file_exists:
                self._entries = []
            else:
                try:
                    data = self.path.read_bytes()
                except FileNotFoundError:
                    data = b""
                    self._file_exists = False
                self._entries = decode_entries(data)
        return self._entries

    @property
    def entries(self) -> list[AbortedTxn]:
        return self.load()

    def __len__(self) -> int:
        return len(self.load())

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry (written to the file now, synced by :meth:`flush`). Markers
        are appended in offset order, so last offsets must increase."""
        entries = self.load()
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"{self.path.name}: aborted transaction ending at {txn.last_offset} is not after"
                f" the last one, ending at {entries[-1].last_offset}"
            )
        # The first entry replaces whatever a stale file of the same name held.
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if entries else os.O_TRUNC)
        fd = os.open(self.path, flags, 0o644)
        try:
            os.write(fd, encode_entry(txn))
        finally:
            os.close(fd)
        entries.append(txn)
        self._file_exists = True
        self._unsynced = True

    def collect(self, fetch_offset: int, upper_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The entries overlapping ``[fetch_offset, upper_offset)``, in file order,
        and whether the search is complete: an entry's last stable offset reaches
        ``upper_offset``, so no later entry or segment can hold a relevant one."""
        found = []
        for txn in self.load():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (the log was cut there)."""
        entries = self.load()
        kept = [txn for txn in entries if txn.last_offset < offset]
        if len(kept) == len(entries):
            return
        self._rewrite(kept)

    def reset(self) -> None:
        """Forget every entry and remove the file (before rebuilding it from the segment)."""
        self._entries = []
        self.path.unlink(missing_ok=True)  # also a stale file this object never knew of
        self._file_exists = False
        self._unsynced = False

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        if not entries:
            self.reset()
            return
        data = b"".join(encode_entry(txn) for txn in entries)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self._entries = list(entries)
        self._file_exists = True
        self._unsynced = True

    def take_unsynced(self) -> bool:
        """Whether entries were written since the last sync; the caller now syncs the file."""
        unsynced, self._unsynced = self._unsynced, False
        return unsynced

    def flush(self, fsync: bool = True) -> None:
        """Entries are written as they come; with ``fsync`` they are made durable."""
        if fsync and self._unsynced and self.file_exists:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if fsync:
            self._unsynced = False

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._file_exists = False
        self._entries = []
        self._unsynced = False


__all__ = [
    "ENTRY_BYTES",
    "TXN_INDEX_SUFFIX",
    "TXN_INDEX_VERSION",
    "AbortedTxn",
    "CorruptTxnIndexError",
    "TransactionIndex",
    "decode_entries",
    "encode_entry",
]
