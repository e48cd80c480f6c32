"""Log compaction (``cleanup.policy=compact``): Kafka's log cleaner, one partition at a time.

A little over ~700 lines: the transaction rules (aborted data removed, marker
delete horizons, the first unstable offset as a bound) decide batch by batch
in the same pass as key compaction, over the same offset map.

Pure and synchronous: :func:`clean_log` reads the partition's non-active
segments, writes cleaned copies next to them and swaps them in with
:meth:`PartitionLog.replace_segments`; :func:`clean_log_steps` does the same
in steps (a generator), for a caller that serves requests between them and
so may change the log meanwhile. The caller decides when to run it
(Kafka's ``LogCleanerManager``), stores the returned ``first_dirty_offset``
(Kafka's ``cleaner-offset-checkpoint``) and passes it back next time.

What one cleaning does, as Kafka's ``Cleaner.doClean`` does it:

1. The cleanable range is ``[first_dirty_offset, first_uncleanable_offset)``:
   it starts at the checkpoint (the log start offset when there is none or it
   is out of range) and stops at the smallest of the last stable offset (the
   high watermark, or the first offset of a transaction still open or not
   replicated to its marker), the
   active segment's base offset and, when ``min.compaction.lag.ms > 0``, the
   base offset of the first segment at or after the checkpoint whose largest
   timestamp is newer than ``now - min.compaction.lag.ms``.
   Nothing happens when the range is empty or, unless ``force``, when its
   share of the log (the dirty ratio) is below ``min_cleanable_ratio``.
2. An offset map ``key -> latest offset`` is built over the dirty range only
   (control batches and batches of aborted transactions skipped). It holds
   at most ``max_map_entries`` keys; when it is full, the cleaning covers only the prefix of the dirty range that
   was mapped, and the returned checkpoint says where the next one resumes.
   ``latest_offset`` is the last offset the map covers.
3. Every segment from the start of the log whose base offset is at or below
   ``latest_offset`` is recopied (the already clean part too, so that keys
   rewritten in the dirty part disappear from it). Consecutive segments are
   merged into one output segment while their total size stays within
   ``segment.bytes`` (and their indexes within ``segment.index.bytes``, and
   their offset span within an int32), as ``groupSegmentsBySize`` does.
4. A record is kept when its offset is past ``latest_offset``, or when it has
   a key, no later offset for that key is in the map, and it is not a
   tombstone whose delete horizon has passed. Records without a key are
   dropped (Kafka counts them as invalid: the produce path refuses them on
   compacted topics, so only older data can hold any).
5. Tombstones (null values) follow KIP-534: the first cleaning that keeps a
   tombstone rewrites its batch with the *delete horizon* set (attribute bit
   6; the batch's baseTimestamp is the horizon ``now + delete.retention.ms``
   and every record's timestampDelta is relative to it, so record timestamps
   are unchanged); a later cleaning at or after the horizon removes the
   tombstones of that batch.
6. Batches are rewritten record by record only when something changed (a
   record removed, or a horizon to set); otherwise their bytes are copied.
   A rewritten batch keeps the source batch's baseOffset, lastOffsetDelta,
   codec, timestamp type, producer id/epoch/base sequence, transactional flag
   and partition leader epoch (``MemoryRecords.buildRetainedRecordsInto``);
   kept records keep their offsets and timestamps, so offset deltas may have
   gaps.
7. Transactions, as Kafka's cleaner treats them: the aborted transactions of
   the recopied range come from the ``.txnindex`` files
   (``PartitionLog.aborted_transaction_entries``), and every transactional
   batch of such a transaction's producer between its first offset and its
   ABORT marker is removed whole. A marker stays while this cleaning saw data
   of its transaction (the cleaned segment's ``.txnindex`` keeps the abort's
   entry then); a marker whose transaction has no data left (an ABORT whose
   batches are gone, a COMMIT with no batch of its transaction since the log
   start) is removable like a tombstone: the first cleaning sets its
   batch's delete horizon, a cleaning at or after the horizon empties it.
   Markers at or past the high watermark, and the batches of the
   transactions they end, are left alone (a leader change may lose them).
8. A batch with nothing left disappears, except that (``RETAIN_EMPTY``) a
   header with recordsCount 0 is kept, with the same offsets and producer
   fields, for the last batch of each producer id the partition knows
   (so idempotent producer state survives a reopen; for a producer that
   only has markers, its marker of the current epoch) and for the batch that
   ends at the first uncleanable offset (so the last offset is not lost).
9. Each output segment is written as ``<base>.log.cleaned`` (with
   ``<base>.txnindex.cleaned`` when it keeps aborted transactions), fsynced
   and swapped in; its indexes are rebuilt from it by ``replace_segments``. A
   crash leaves either ``.cleaned`` files (dropped on reopen: old content)
   or ``.swap`` files (completed on reopen: new content).

Memory: the map holds keys shorter than 16 bytes as they are and longer ones
as a 16-byte BLAKE2b digest (Kafka keeps an MD5 of every key), so an entry
costs about 120 bytes of Python objects whatever the key size.

The module is past 700 lines because the steps above share one set of
decisions (which batch, record and marker a cleaning keeps) that only make
sense read together.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

from protocol.exceptions import ProtocolError
from protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_BYTES,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    HEADER_STRUCT,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD_BYTES,
    MAGIC_V2,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    ControlType,
    Record,
    build_batch,
    decode_batch_records,
    first_control_record,
    iter_batches,
    parse_batch_header,
    update_crc,
)
from storage.index import OFFSET_ENTRY, TIME_ENTRY
from storage.log import PartitionLog
from storage.log_loader import CLEANED_SUFFIX
from storage.segment import LogSegment, segment_file_stem
from storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, encode_entry

log = logging.getLogger(__name__)

DEFAULT_MIN_CLEANABLE_RATIO = 0.5  # min.cleanable.dirty.ratio
DEFAULT_MAX_MAP_ENTRIES = 1 << 20
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_READ_CHUNK_BYTES = 1 << 20
_HASHED_KEY_BYTES = 16
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class CleanerError(Exception):
    """A segment could not be read as whole v2 batches; nothing was changed."""


@dataclass(frozen=True)
class CleanableRange:
    """What a cleaning would cover now (Kafka's ``LogToClean``)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int  # segments below the first dirty offset
    cleanable_bytes: int  # segments from the first dirty offset to the first uncleanable one

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def empty(self) -> bool:
        return self.first_dirty_offset >= self.first_uncleanable_offset


@dataclass
class CleanResult:
    """What a cleaning did. Store ``first_dirty_offset`` as the checkpoint."""

    first_dirty_offset: int  # where the next cleaning starts (unchanged when skipped)
    first_uncleanable_offset: int
    dirty_ratio: float
    skipped: str | None = None  # why nothing was cleaned, or None
    segments_cleaned: int = 0  # source segments replaced
    segments_written: int = 0  # cleaned segments swapped in
    bytes_before: int = 0  # size of the replaced segments
    bytes_after: int = 0  # size of the segments that replaced them
    batches_read: int = 0
    batches_removed: int = 0
    records_read: int = 0
    records_removed: int = 0  # every record dropped, for whatever reason
    tombstones_removed: int = 0  # of which: latest tombstones past their delete horizon
    keyless_removed: int = 0  # of which: records without a key
    delete_horizons_set: int = 0  # batches stamped with a delete horizon
    empty_batches_kept: int = 0  # batches kept as a bare header (RETAIN_EMPTY)
    aborted_batches_removed: int = 0  # batches of aborted transactions removed (also in batches_removed when gone)
    markers_removed: int = 0  # transaction markers emptied past their delete horizon
    map_entries: int = 0
    map_full: bool = False  # only a prefix of the dirty range was cleaned
    first_dirty_offset_before: int = -1  # the checkpoint this cleaning started from

    @property
    def cleaned(self) -> bool:
        return self.skipped is None


# --------------------------------------------------------------------------- range


def _floor_index(segments: list[LogSegment], offset: int) -> int:
    """Index of the segment that holds ``offset`` (the first one if ``offset`` is below all)."""
    return max(bisect_right([s.base_offset for s in segments], offset) - 1, 0)


def _segments_overlapping(segments: list[LogSegment], start: int, end: int) -> list[LogSegment]:
    """Kafka's ``logSegments(from, to)``: the segment holding ``start`` and those below ``end``."""
    if start >= end:
        return []
    first = _floor_index(segments, start)
    return [s for s in segments[first:] if s.base_offset < end]


def cleanable_range(plog: PartitionLog, now_ms: int, first_dirty_offset: int | None = None) -> CleanableRange:
    """The range a cleaning at ``now_ms`` would cover, and the dirty ratio that gates it
    (Kafka's ``LogCleanerManager.cleanableOffsets`` and ``LogToClean``)."""
    log_start = plog.log_start_offset
    if first_dirty_offset is None or not log_start <= first_dirty_offset <= plog.log_end_offset:
        first_dirty = log_start
    else:
        first_dirty = first_dirty_offset
    segments = plog.segments
    uncleanable = min(plog.last_stable_offset, plog.active_segment.base_offset)
    lag_ms = max(plog.config.min_compaction_lag_ms, 0)
    if lag_ms > 0:
        for segment in segments[_floor_index(segments, first_dirty) : -1]:
            if segment.max_timestamp_ms > now_ms - lag_ms:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    clean_bytes = sum(s.size_bytes for s in segments if s.base_offset < first_dirty)
    cleanable_bytes = sum(
        s.size_bytes for s in _segments_overlapping(segments, min(first_dirty, uncleanable), uncleanable)
    )
    return CleanableRange(first_dirty, uncleanable, clean_bytes, cleanable_bytes)


# --------------------------------------------------------------------------- reading


def _segment_batches(segment: LogSegment, position: int = 0):
    """Yield ``(header, bytes)`` of every batch of ``segment`` from ``position``, reading in chunks."""
    end = segment.size_bytes
    while position < end:
        data = segment.read(position, min(_READ_CHUNK_BYTES, end - position))
        consumed = 0
        try:
            for pos, size, header in iter_batches(data, allow_truncated_tail=True):
                yield header, data[pos : pos + size]
                consumed = pos + size
            if consumed == 0:
                # One batch larger than the chunk.
                size = parse_batch_header(data, 0).batch_length + LOG_OVERHEAD_BYTES
                if size > end - position:
                    raise CleanerError(f"{segment.log_path}: batch at position {position} runs past the end")
                data = segment.read(position, size)
                yield parse_batch_header(data, 0), data
                consumed = size
        except CleanerError:
            raise
        except Exception as exc:  # ProtocolError from a header that is not a v2 batch
            raise CleanerError(f"{segment.log_path}: unreadable batch near position {position}: {exc}") from exc
        position += consumed


def _decode(segment: LogSegment, header: BatchHeader, data: bytes) -> list:
    """The records of one batch (CRC checked), or CleanerError."""
    try:
        return decode_batch_records(data)[1]
    except Exception as exc:
        raise CleanerError(f"{segment.log_path}: batch at offset {header.base_offset} is corrupt: {exc}") from exc


def _map_key(key: bytes) -> bytes:
    """The offset map's key: the key itself when short, else a digest (disjoint by length)."""
    if len(key) < _HASHED_KEY_BYTES:
        return bytes(key)
    return hashlib.blake2b(key, digest_size=_HASHED_KEY_BYTES).digest()


class _TransactionTracker:
    """Which batches of a cleaned range belong to aborted transactions, and which
    markers may go (Kafka's ``CleanedTransactionMetadata``): fed every batch of
    the range in order, with the aborted transactions that overlap it."""

    def __init__(self, aborted: list[AbortedTxn], high_watermark: int):
        # Markers at or past the high watermark may still be lost with a leader
        # change: their transactions' batches and the markers themselves are
        # left alone (a cleaned segment may reach past the last stable offset).
        self._replicated_end = high_watermark
        aborted = [txn for txn in aborted if txn.last_offset < high_watermark]
        self._pending = deque(sorted(aborted, key=lambda txn: txn.first_offset))
        # producer id -> [its aborted transaction under way, whether a batch of it was seen]
        self._aborted: dict[int, list] = {}
        self._committing: set[int] = set()  # producers with transactional batches seen, not aborted

    def _reach(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0].first_offset <= offset:
            txn = pending.popleft()
            self._aborted.setdefault(txn.producer_id, [txn, False])

    def data_batch(self, header: BatchHeader) -> bool:
        """Whether the batch belongs to an aborted transaction (and goes)."""
        self._reach(header.base_offset + header.last_offset_delta)
        if not header.is_transactional:
            return False
        aborted = self._aborted.get(header.producer_id)
        if aborted is not None:
            aborted[1] = True
            return True
        self._committing.add(header.producer_id)
        return False

    def marker(self, header: BatchHeader, data: bytes) -> tuple[bool, AbortedTxn | None]:
        """(whether the marker may be removed, the aborted transaction whose entry
        the cleaned segment's ``.txnindex`` keeps because the marker stays for it)."""
        if header.base_offset >= self._replicated_end:
            return False, None
        self._reach(header.base_offset + header.last_offset_delta)
        try:
            control = first_control_record(data)
        except ProtocolError:  # not a marker this cleaner understands: kept
            return False, None
        producer_id = header.producer_id
        if control is None:  # emptied by an earlier cleaning
            aborted = self._aborted.get(producer_id)
            if aborted is not None and aborted[0].last_offset == header.base_offset:
                del self._aborted[producer_id]
            return True, None
        if control.control_type == ControlType.ABORT:
            aborted = self._aborted.pop(producer_id, None)
            if aborted is not None and aborted[1]:
                return False, aborted[0]  # its batches go now: the marker stays until they are gone for good
            if producer_id in self._committing:
                # Batches the index did not name as aborted: the marker stays with them.
                self._committing.discard(producer_id)
                return False, None
            return True, None
        if control.control_type == ControlType.COMMIT:
            if producer_id in self._committing:
                self._committing.discard(producer_id)
                return False, None
            return True, None
        return False, None


def _build_offset_map(plog: PartitionLog, start: int, end: int, max_entries: int):
    """``key -> latest offset`` over the dirty range ``[start, end)``; a generator
    that yields after each batch (see :func:`clean_log_steps`).

    Returns ``(map, latest_offset, full)``: ``latest_offset`` is the last offset the
    map accounts for (``end - 1`` unless the map filled up first, ``full``)."""
    offsets: dict[bytes, int] = {}
    latest = start - 1
    segments = _segments_overlapping(plog.segments, start, end)
    transactions = _TransactionTracker(plog.aborted_transaction_entries(start, end), plog.high_watermark)
    for i, segment in enumerate(segments):
        segment_end = min(segments[i + 1].base_offset if i + 1 < len(segments) else end, end)
        position = segment.index.lookup(start) if segment.base_offset < start else 0
        for header, data in _segment_batches(segment, position):
            if header.base_offset >= end:
                break
            last_offset = header.base_offset + header.last_offset_delta
            if last_offset < start:
                continue
            if header.attributes & CONTROL_MASK:
                transactions.marker(header, data)
            elif not transactions.data_batch(header):
                for record in _decode(segment, header, data):
                    if record.key is None or not start <= record.offset < end:
                        continue
                    key = _map_key(record.key)
                    if key not in offsets and len(offsets) >= max_entries:
                        return offsets, latest, True
                    offsets[key] = record.offset
                    latest = max(latest, record.offset)
            latest = max(latest, min(last_offset, end - 1))
            yield
        # Offsets missing at the end of a segment (removed earlier) are covered too.
        latest = max(latest, segment_end - 1)
    return offsets, latest, False


# --------------------------------------------------------------------------- writing


def _group_segments(segments: list[LogSegment], max_bytes: int, max_index_bytes: int, first_uncleanable: int) -> list[list[LogSegment]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose logs fit in
    ``segment.bytes``, whose indexes fit in ``segment.index.bytes`` and whose
    offsets fit in an int32 relative to the group's base offset."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        first = segments[i]
        group = [first]
        log_bytes = first.size_bytes
        index_bytes = len(first.index) * OFFSET_ENTRY.size
        time_index_bytes = len(first.time_index) * TIME_ENTRY.size
        i += 1
        while i < len(segments):
            candidate = segments[i]
            last_offset = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable - 1
            candidate_index = len(candidate.index) * OFFSET_ENTRY.size
            candidate_time_index = len(candidate.time_index) * TIME_ENTRY.size
            if not (
                log_bytes + candidate.size_bytes <= max_bytes
                and index_bytes + candidate_index <= max_index_bytes
                and time_index_bytes + candidate_time_index <= max_index_bytes
                and (candidate.size_bytes == 0 or last_offset - first.base_offset <= INT32_MAX)
            ):
                break
            group.append(candidate)
            log_bytes += candidate.size_bytes
            index_bytes += candidate_index
            time_index_bytes += candidate_time_index
            i += 1
        groups.append(group)
    return groups


def _rebuilt_batch(header: BatchHeader, kept: list, delete_horizon_ms: int | None) -> bytes:
    """The kept records of ``header``'s batch as a new batch with the same offsets
    range, producer fields, codec, timestamp type and control flag
    (``buildRetainedRecordsInto``)."""
    base_timestamp = delete_horizon_ms if delete_horizon_ms is not None else kept[0].timestamp_ms
    base_offset = header.base_offset
    records = [
        Record(r.offset - base_offset, r.timestamp_ms - base_timestamp, r.key, r.value, r.headers)
        for r in kept
    ]
    out = bytearray(
        build_batch(
            records,
            base_offset=base_offset,
            codec=header.codec,
            timestamp_type=header.timestamp_type,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            is_transactional=header.is_transactional,
            is_control=header.is_control,
            partition_leader_epoch=header.partition_leader_epoch,
            base_timestamp_ms=base_timestamp,
        )
    )
    # The batch keeps its last offset (so its last sequence stays right), and the
    # horizon flag says baseTimestamp is the delete horizon.
    _INT32.pack_into(out, LAST_OFFSET_DELTA_OFFSET, header.last_offset_delta)
    if delete_horizon_ms is not None:
        (attributes,) = _INT16.unpack_from(out, ATTRIBUTES_OFFSET)
        _INT16.pack_into(out, ATTRIBUTES_OFFSET, attributes | DELETE_HORIZON_MASK)
    update_crc(out)
    return bytes(out)


def _empty_batch(header: BatchHeader) -> bytes:
    """A header with no records covering the same offsets (Kafka's ``writeEmptyHeader``)."""
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    out = bytearray(BATCH_HEADER_BYTES)
    HEADER_STRUCT.pack_into(
        out,
        0,
        header.base_offset,
        BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES,
        header.partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        header.last_offset_delta,
        NO_TIMESTAMP,
        header.max_timestamp_ms,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    update_crc(out)
    return bytes(out)


class _GroupCleaner:
    """Filters the batches of one cleaning; shared by its segment groups (so that a
    transaction's batches in one group count for its marker in a later one)."""

    def __init__(
        self,
        plog: PartitionLog,
        offsets: dict[bytes, int],
        latest_offset: int,
        upper_bound: int,
        now_ms: int,
        result: CleanResult,
        transactions: _TransactionTracker,
    ):
        self.offsets = offsets
        self.latest_offset = latest_offset
        self.upper_bound = upper_bound
        self.now_ms = now_ms
        self.new_horizon_ms = min(now_ms + max(plog.config.delete_retention_ms, 0), INT64_MAX)
        self.result = result
        self.transactions = transactions
        # Per producer the partition knows: (last offset of its last data batch or
        # None, its epoch), for RETAIN_EMPTY (Kafka's lastRecordsOfActiveProducers).
        self.producer_last_records = {
            pid: (entry.batches[-1].last_offset if entry.batches else None, entry.epoch)
            for pid, entry in plog.producer_state.producers.items()
        }
        self.txn_entries: list[AbortedTxn] = []  # of the group being written

    def _last_of_producer(self, header: BatchHeader) -> bool:
        last = self.producer_last_records.get(header.producer_id) if header.producer_id >= 0 else None
        if last is None:
            return False
        last_data_offset, epoch = last
        if last_data_offset is None:
            return header.is_control and header.producer_epoch == epoch
        return header.base_offset + header.last_offset_delta == last_data_offset

    def _emptied(self, header: BatchHeader, data: bytes) -> bytes | None:
        """A batch none of whose records stays: gone, or kept as a bare header
        (RETAIN_EMPTY) for a producer's last batch or the end of the cleanable range."""
        last_offset = header.base_offset + header.last_offset_delta
        if self._last_of_producer(header) or last_offset + 1 == self.upper_bound:
            self.result.empty_batches_kept += 1
            return data if header.records_count == 0 else _empty_batch(header)
        self.result.batches_removed += 1
        return None

    def _filter_marker(self, segment: LogSegment, header: BatchHeader, data: bytes) -> bytes | None:
        removable, kept_txn = self.transactions.marker(header, data)
        if kept_txn is not None:
            self.txn_entries.append(kept_txn)
        if not removable:
            return data
        if header.records_count == 0:
            return self._emptied(header, data)
        horizon = header.base_timestamp_ms if header.has_delete_horizon else None
        if horizon is None:
            # Kept until delete.retention.ms from now, as a tombstone would be.
            self.result.delete_horizons_set += 1
            return _rebuilt_batch(header, _decode(segment, header, data), self.new_horizon_ms)
        if self.now_ms < horizon:
            return data
        self.result.markers_removed += 1
        self.result.records_removed += header.records_count
        return self._emptied(header, data)

    def filter_batch(self, segment: LogSegment, header: BatchHeader, data: bytes) -> bytes | None:
        """The batch to write for this source batch (``data`` itself when unchanged), or None."""
        result = self.result
        result.batches_read += 1
        result.records_read += header.records_count
        if header.is_control:
            if header.producer_id < 0:
                return data  # not a transaction marker
            return self._filter_marker(segment, header, data)
        if self.transactions.data_batch(header):
            result.aborted_batches_removed += 1
            result.records_removed += header.records_count
            return self._emptied(header, data)
        horizon = header.base_timestamp_ms if header.has_delete_horizon else None
        records = _decode(segment, header, data)
        kept = []
        has_tombstone = False
        for record in records:
            if record.offset > self.latest_offset:
                keep = True
            elif record.key is None:
                keep = False
                result.keyless_removed += 1
            elif record.offset < self.offsets.get(_map_key(record.key), -1):
                keep = False
            elif record.value is None and horizon is not None and self.now_ms >= horizon:
                keep = False
                result.tombstones_removed += 1
            else:
                keep = True
            if keep:
                kept.append(record)
                if record.value is None:
                    has_tombstone = True
        result.records_removed += len(records) - len(kept)
        if kept:
            needs_horizon = has_tombstone and horizon is None
            if len(kept) == len(records) and not needs_horizon:
                return data
            if needs_horizon:
                result.delete_horizons_set += 1
                horizon = self.new_horizon_ms
            return _rebuilt_batch(header, kept, horizon)
        return self._emptied(header, data)

    def clean_group(self, plog: PartitionLog, group: list[LogSegment]):
        """Write the group's cleaned copy and swap it in; a generator that yields
        after each batch (see :func:`clean_log_steps`)."""
        base = group[0].base_offset
        stem = segment_file_stem(base)
        path = plog.directory / f"{stem}.log{CLEANED_SUFFIX}"
        txn_path = plog.directory / f"{stem}{TXN_INDEX_SUFFIX}{CLEANED_SUFFIX}"
        changed = len(group) > 1
        written = 0
        self.txn_entries = []
        try:
            with open(path, "wb", buffering=_READ_CHUNK_BYTES) as out:
                for segment in group:
                    for header, data in _segment_batches(segment):
                        kept = self.filter_batch(segment, header, data)
                        if kept is not data:
                            changed = True
                        if kept is not None:
                            out.write(kept)
                            written += len(kept)
                        yield
                out.flush()
                os.fsync(out.fileno())
            if changed and self.txn_entries:
                # The aborted transactions whose markers the cleaned segment keeps.
                with open(txn_path, "wb") as out:
                    out.write(b"".join(encode_entry(txn) for txn in self.txn_entries))
                    out.flush()
                    os.fsync(out.fileno())
        except BaseException:
            path.unlink(missing_ok=True)
            txn_path.unlink(missing_ok=True)
            raise
        if not changed:
            path.unlink()  # one segment, every batch copied as it was: nothing to swap
            return
        if not plog.holds_consecutive(group):
            # Only a cleaning in slices gets here: retention or DeleteRecords
            # removed some of these segments while it was paused.
            path.unlink()
            txn_path.unlink(missing_ok=True)
            raise _LogChanged("segments being cleaned were deleted meanwhile")
        before = sum(s.size_bytes for s in group)
        log.info(
            "%s: swapping in cleaned segment %s for %d segment(s) (%d -> %d bytes)",
            plog.directory.name, path.name, len(group), before, written,
        )
        plog.replace_segments(group, base)
        self.result.segments_cleaned += len(group)
        self.result.segments_written += 1
        self.result.bytes_before += before
        self.result.bytes_after += written


# --------------------------------------------------------------------------- entry point


def clean_log(
    plog: PartitionLog,
    now_ms: int,
    *,
    first_dirty_offset: int | None = None,
    min_cleanable_ratio: float = DEFAULT_MIN_CLEANABLE_RATIO,
    force: bool = False,
    max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
) -> CleanResult:
    """Compact ``plog`` as Kafka's log cleaner would at time ``now_ms``.

    ``first_dirty_offset`` is the stored checkpoint (None: the log start).
    Returns what was done; its ``first_dirty_offset`` is the checkpoint to store.
    Raises :class:`CleanerError` (with the log unchanged) on an unreadable segment.
    """
    return run_steps(_clean(plog, now_ms, first_dirty_offset, min_cleanable_ratio, force, max_map_entries))


def run_steps(steps):
    """Run a generator of steps to its end in one piece; what it returns."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def clean_log_steps(
    plog: PartitionLog,
    now_ms: int,
    *,
    first_dirty_offset: int | None = None,
    min_cleanable_ratio: float = DEFAULT_MIN_CLEANABLE_RATIO,
    force: bool = False,
    max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
):
    """:func:`clean_log` cut into steps, for an owner that must keep serving
    meanwhile (the broker's event loop): a generator that yields after each
    batch read and returns the :class:`CleanResult`. Between steps the log may
    take appends (the cleaner never reads the active segment); if it is
    truncated, closed or deleted, or retention removes segments being cleaned,
    the cleaning stops with nothing swapped in that was not already, and the
    result says so in ``skipped`` (the checkpoint unchanged)."""
    truncations = plog.truncations
    result_box: list[CleanResult] = []
    steps = _clean(plog, now_ms, first_dirty_offset, min_cleanable_ratio, force, max_map_entries, result_box)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        except _LogChanged as exc:
            return _abandoned(result_box[0], str(exc))
        yield
        if plog.closed or plog.truncations != truncations:
            steps.close()  # a cleaned copy being written is removed
            return _abandoned(result_box[0], "the log was truncated, closed or deleted meanwhile")


class _LogChanged(Exception):
    """A cleaning in slices found its segments changed while it was paused."""


def _abandoned(result: CleanResult, why: str) -> CleanResult:
    log.info("log cleaner: stopped cleaning a log: %s", why)
    result.skipped = why
    result.first_dirty_offset = result.first_dirty_offset_before
    return result


def _clean(plog, now_ms, first_dirty_offset, min_cleanable_ratio, force, max_map_entries, result_box=None):
    if max_map_entries < 1:
        raise ValueError("max_map_entries must be at least 1")
    cleanable = cleanable_range(plog, now_ms, first_dirty_offset)
    result = CleanResult(cleanable.first_dirty_offset, cleanable.first_uncleanable_offset, cleanable.dirty_ratio)
    result.first_dirty_offset_before = cleanable.first_dirty_offset
    if result_box is not None:
        result_box.append(result)
    if not plog.config.compacts:
        result.skipped = f"cleanup.policy={plog.config.cleanup_policy} does not compact"
        return result
    if cleanable.empty:
        result.skipped = "no cleanable offsets"
        return result
    if not force and cleanable.dirty_ratio < min_cleanable_ratio:
        result.skipped = f"dirty ratio {cleanable.dirty_ratio:.3f} is below {min_cleanable_ratio}"
        return result

    offsets, latest_offset, full = yield from _build_offset_map(
        plog, cleanable.first_dirty_offset, cleanable.first_uncleanable_offset, max_map_entries
    )
    result.map_entries = len(offsets)
    result.map_full = full
    end_offset = latest_offset + 1
    to_clean = [s for s in plog.segments[:-1] if s.base_offset < end_offset]
    groups = _group_segments(
        to_clean, plog.config.segment_bytes, plog.config.segment_index_bytes, cleanable.first_uncleanable_offset
    )
    transactions = _TransactionTracker(
        plog.aborted_transaction_entries(to_clean[0].base_offset, plog.segments[len(to_clean)].base_offset) if to_clean else [],
        plog.high_watermark,
    )
    cleaner = _GroupCleaner(
        plog, offsets, latest_offset, cleanable.first_uncleanable_offset, now_ms, result, transactions
    )
    for group in groups:
        yield from cleaner.clean_group(plog, group)
    result.first_dirty_offset = end_offset
    log.info(
        "%s: cleaned [%d, %d): %d segments into %d, %d -> %d bytes, %d of %d records removed (%d tombstones)",
        plog.directory.name, cleanable.first_dirty_offset, end_offset, result.segments_cleaned,
        result.segments_written, result.bytes_before, result.bytes_after, result.records_removed,
        result.records_read, result.tombstones_removed,
    )
    return result


__all__ = [
    "DEFAULT_MAX_MAP_ENTRIES",
    "DEFAULT_MIN_CLEANABLE_RATIO",
    "CleanResult",
    "CleanableRange",
    "CleanerError",
    "clean_log",
    "clean_log_steps",
    "run_steps",
    "cleanable_range",
]
