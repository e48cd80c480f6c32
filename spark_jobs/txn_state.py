"""Aborted transactions and the last stable offset of a partition, from its files.

What ``read_committed`` needs at planning time, found the way the broker
keeps it (see ``storage/FORMAT.md``) rather than by reading the whole log:

* **Aborted transactions** of the offsets ``[start, end)`` come from the
  ``.txnindex`` files of the segments that hold them: each entry is one
  aborted transaction (producer id, first offset, offset of its ABORT marker),
  and those whose marker lies in ``[start, end)`` are kept. A marker at or
  after ``end`` is not counted: its transaction is still open as far as the
  range goes, so the last stable offset stops the read before its batches.
* **Open transactions** come from the newest valid producer snapshot
  (``<offset>.snapshot``) at or below ``end``: each producer's
  ``currentTxnFirstOffset``. The batches after the snapshot's offset are then
  walked by their headers only: a transactional batch opens its producer's
  transaction, a marker closes it. The last stable offset is the first offset
  of the earliest transaction still open at ``end``, never below ``start`` (a
  transaction that began before ``start`` and is still open stops the read at
  ``start``, as Kafka's LSO never falls below the log start offset); None when
  none is open.
* The walk after the snapshot also decodes the markers that close a
  transaction (one small read each): the broker writes a marker to the
  ``.log`` before its ``.txnindex`` entry, so a reader running alongside it
  may see a marker whose entry is not written yet. Below the snapshot this
  cannot happen: every entry there was written before the snapshot was.
* Without a valid snapshot at or below ``end`` (a log never rolled nor closed
  cleanly: one segment, as a rule) the walk starts at the first segment with
  nothing open, so that a transaction begun before ``start`` is known too.
  The reader walked that way, from ``start``, before the broker wrote
  ``.txnindex`` files (:func:`walked_transaction_state`, kept as the reference
  the tests compare with).

Files are read with ``pread``-style reads, never mmapped, and may change or
vanish while they are read: a ``.txnindex`` that is gone holds no entry (as
the broker, which makes the file on a segment's first abort, also reads it);
a partial entry at its end is one being appended and is left for the next
plan; one that is not made of version-0 entries, or whose entries cannot
belong to its segment, is corrupt, and that segment's aborted transactions
come from a walk of its batches instead (from the newest valid snapshot at or
below its base offset, or from the first segment without one). A snapshot that is
gone, torn or fails its CRC is passed over for the next older one.

Pure: no Spark, no sockets; imports only ``storage``, ``protocol`` and
:mod:`spark_jobs.segment_reader`.
"""

from __future__ import annotations

import os
from pathlib import Path

from spark_jobs.segment_reader import (
    AbortedRange,
    PartitionDir,
    _decode_batch_at,
    _iter_file_headers,
    _start_position,
    list_segments,
)
from storage.producer_snapshot import CorruptSnapshotError, read_snapshot, snapshot_file_name, snapshot_offset
from storage.txn_index import ENTRY_BYTES, TXN_INDEX_SUFFIX, AbortedTxn, CorruptTxnIndexError, decode_entries

# A .txnindex larger than this is not one this reader trusts (a segment of 1 GiB
# of one-record transactions, all aborted, would need about 1.1 GiB): corrupt.
MAX_TXN_INDEX_BYTES = 1 << 31

Segments = list[tuple[int, Path]]


# --------------------------------------------------------------------------- the files


def read_txn_index(path: Path, base_offset: int, next_base_offset: int | None) -> list[AbortedTxn] | None:
    """The entries of the ``.txnindex`` at ``path`` of the segment ``[base_offset,
    next_base_offset)`` (None: the active segment), in file order.

    ``[]`` when the file is missing; a partial entry at the end is left out;
    None when the file is corrupt: not whole version-0 entries, or entries whose
    markers are not in the segment, in increasing order, after their first offsets.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return []
    except OSError:
        return None  # unreadable (permissions, a directory in the way): walk the segment instead
    try:
        size_bytes = os.fstat(fd).st_size
        if size_bytes > MAX_TXN_INDEX_BYTES:
            return None
        whole_bytes = size_bytes - size_bytes % ENTRY_BYTES  # an entry being appended is not read
        chunks = []
        position = 0
        while position < whole_bytes:
            chunk = os.pread(fd, whole_bytes - position, position)
            if not chunk:
                break  # truncated meanwhile: what was read is still whole entries up to here
            chunks.append(chunk)
            position += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    data = data[: len(data) - len(data) % ENTRY_BYTES]
    try:
        entries = decode_entries(data)
    except CorruptTxnIndexError:
        return None
    previous_last_offset = -1
    for txn in entries:
        in_segment = base_offset <= txn.last_offset and (next_base_offset is None or txn.last_offset < next_base_offset)
        if not in_segment or not 0 <= txn.first_offset <= txn.last_offset or txn.last_offset <= previous_last_offset:
            return None
        previous_last_offset = txn.last_offset
    return entries


def snapshot_offsets(partition_dir: Path) -> list[int]:
    """Offsets of the partition's producer snapshot files, ascending."""
    try:
        entries = list(os.scandir(partition_dir))
    except FileNotFoundError:
        return []
    return sorted(offset for entry in entries if (offset := snapshot_offset(entry.name)) is not None)


def open_transactions_at(partition_dir: Path, offsets: list[int], upper: int) -> tuple[int, dict[int, int]] | None:
    """``(snapshot offset, {producer id: first offset of its open transaction})``
    from the newest valid snapshot at or below ``upper`` (``offsets`` from
    :func:`snapshot_offsets`), or None when there is none."""
    for offset in reversed([o for o in offsets if o <= upper]):
        try:
            entries = read_snapshot(partition_dir / snapshot_file_name(offset))
        except (CorruptSnapshotError, OSError):
            continue  # torn, damaged or deleted meanwhile: an older one will do
        return offset, {e.producer_id: e.current_txn_first_offset for e in entries if e.in_transaction}
    return None


# --------------------------------------------------------------------------- walking batch headers


def _walk(
    segments: Segments,
    walk_from: int,
    walk_to: int,
    open_first_offsets: dict[int, int],
    decode_markers_from: int,
) -> list[AbortedRange]:
    """Walk the headers of the batches in ``[walk_from, walk_to)``, keeping
    ``open_first_offsets`` (producer id -> first offset of its open transaction,
    updated in place) up to date. Returns the transactions aborted by the
    markers at or after ``decode_markers_from`` (only those are decoded; the
    ones before merely close their producer's transaction)."""
    aborted: list[AbortedRange] = []
    if walk_to <= walk_from:
        return aborted
    for i, (base, path) in enumerate(segments):
        next_base = segments[i + 1][0] if i + 1 < len(segments) else None
        if next_base is not None and next_base <= walk_from:
            continue
        if base >= walk_to:
            break
        for position, header in _iter_file_headers(path, _start_position(path, base, walk_from)):
            if header.next_offset <= walk_from:
                continue
            if header.base_offset >= walk_to:
                break
            if header.is_control:
                first_offset = open_first_offsets.pop(header.producer_id, None)
                if first_offset is None or header.base_offset < decode_markers_from:
                    continue
                decoded = _decode_batch_at(path, position, header.size_bytes)
                records = decoded[1] if decoded else []
                # No record: the cleaner emptied the marker once its transaction's data was gone.
                if records and records[0].control is not None and records[0].control.is_abort:
                    aborted.append(AbortedRange(header.producer_id, first_offset, header.base_offset))
            elif header.is_transactional:
                open_first_offsets.setdefault(header.producer_id, header.base_offset)
    return aborted


def walked_transaction_state(pdir: PartitionDir, start: int, end: int) -> tuple[tuple[AbortedRange, ...], int | None]:
    """:func:`transaction_state` by a walk of every batch header in ``[start, end)``
    and a decode of each marker that closes a transaction, with nothing known
    before ``start`` (the reader's way before ``.txnindex`` files; kept as the
    reference the tests compare with).

    A producer's transactional batches belong to the transaction its next
    marker ends; the first offset of a range is the base offset of the first
    such batch that reaches ``start``. The last stable offset is the first
    offset seen of the earliest transaction with no marker before ``end`` (None
    when there is none).
    """
    open_first_offsets: dict[int, int] = {}
    aborted = _walk(list_segments(pdir.path), start, end, open_first_offsets, start)
    return tuple(aborted), min(open_first_offsets.values()) if open_first_offsets else None


# --------------------------------------------------------------------------- the answer


def _walk_segment_aborts(
    pdir: PartitionDir, segments: Segments, snapshots: list[int], index: int, start: int, upper: int
) -> list[AbortedRange]:
    """The transactions aborted by the markers of segment ``index`` that lie in
    ``[start, upper)``, from a walk of its batches (its ``.txnindex`` is corrupt):
    from the newest valid snapshot at or below its base, else from the first segment."""
    base = segments[index][0]
    next_base = segments[index + 1][0] if index + 1 < len(segments) else None
    walk_to = upper if next_base is None else min(upper, next_base)
    decode_from = max(base, start)
    found = open_transactions_at(pdir.path, snapshots, base)
    walk_from, open_first_offsets = found if found is not None else (segments[0][0], {})
    return _walk(segments, walk_from, walk_to, open_first_offsets, decode_from)


def transaction_state(pdir: PartitionDir, start: int, end: int) -> tuple[tuple[AbortedRange, ...], int | None]:
    """Aborted transactions whose ABORT marker lies in ``[start, end)``, in marker
    order, and the last stable offset of the range, for ``read_committed``.

    The last stable offset is the first offset of the earliest transaction still
    open at ``end`` (no marker below it), raised to ``start`` if it began
    before; None when no transaction is open. A committed read of ``[start, end)``
    stops there and skips the transactional batches of the aborted ranges.
    See the module docstring for where each part comes from.
    """
    if end <= start:
        return (), None
    segments = list_segments(pdir.path)
    snapshots = snapshot_offsets(pdir.path)
    found = open_transactions_at(pdir.path, snapshots, end)
    if found is not None:
        walk_from, open_first_offsets = found
    else:
        walk_from, open_first_offsets = (segments[0][0] if segments else start), {}
    indexed_to = min(end, walk_from)  # markers below here come from the indexes, the rest from the walk

    aborted: list[AbortedRange] = []
    for i, (base, path) in enumerate(segments):
        next_base = segments[i + 1][0] if i + 1 < len(segments) else None
        if next_base is not None and next_base <= start:
            continue
        if base >= indexed_to or indexed_to <= start:
            break
        entries = read_txn_index(path.with_suffix(TXN_INDEX_SUFFIX), base, next_base)
        if entries is None:
            ranges = _walk_segment_aborts(pdir, segments, snapshots, i, start, indexed_to)
        else:
            ranges = [AbortedRange(txn.producer_id, txn.first_offset, txn.last_offset) for txn in entries]
        aborted.extend(txn for txn in ranges if start <= txn.last_offset < indexed_to)
    aborted.extend(_walk(segments, walk_from, end, open_first_offsets, max(start, walk_from)))

    last_stable_offset = max(start, min(open_first_offsets.values())) if open_first_offsets else None
    return tuple(aborted), last_stable_offset


__all__ = [
    "MAX_TXN_INDEX_BYTES",
    "open_transactions_at",
    "read_txn_index",
    "snapshot_offsets",
    "transaction_state",
    "walked_transaction_state",
]
