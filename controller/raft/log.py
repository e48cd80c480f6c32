"""The replicated log as the Raft core sees it, and an in-memory implementation.

Entries are *batches*: every batch has the epoch of the leader that created it
and one or more opaque records, each with its own offset (Kafka numbers
records, not batches). A batch is created once, by one leader, and is never
split: appends, reads, truncations and replication move whole batches, so the
fetch path does no per-record work and every offset the protocol exchanges
(log end, high watermark, truncation point, snapshot end) is a batch boundary.

The epoch cache maps each epoch present in the log to the offset where it
starts; it answers "where does epoch E end here?" (Kafka's
OffsetForLeaderEpoch), which is how a leader finds where a follower's log
diverges from its own.

Durability is explicit: ``append`` makes data visible, ``flush`` makes it
survive a crash. ``truncate_to``, ``delete_before`` and ``commit_snapshot``
are durable when they return (a file truncation / segment deletion / atomic
rename in a disk implementation). ``MemoryRaftLog.crash`` models a process
crash: everything appended but not flushed is gone, and so are snapshot chunks
not yet committed.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    offset: int
    epoch: int


UNDEFINED = OffsetAndEpoch(-1, -1)

# On disk and on the wire a control record needs Kafka's control key, (int16
# version 0, int16 type); the core's only control batches announce a leader,
# so they carry type 2 (LEADER_CHANGE).
LEADER_CHANGE_CONTROL_KEY = b"\x00\x00\x00\x02"


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """A snapshot holds the state after applying every record below ``end_offset``;
    ``epoch`` is the epoch of the record at ``end_offset - 1``."""

    end_offset: int
    epoch: int


class Batch:
    """Records ``base_offset .. base_offset + len(records) - 1``, all of one epoch."""

    __slots__ = ("base_offset", "control", "epoch", "records", "size_bytes")

    def __init__(self, base_offset: int, epoch: int, records: tuple[bytes, ...], control: bool = False):
        if not records:
            raise ValueError("a batch holds at least one record")
        self.base_offset = base_offset
        self.epoch = epoch
        self.records = records
        self.control = control
        # Record bytes plus a nominal per-record overhead, so fetch size limits
        # count empty records too; computed once per batch, never per fetch.
        self.size_bytes = sum(map(len, records)) + 16 * len(records)

    @property
    def end_offset(self) -> int:
        return self.base_offset + len(self.records)

    def rebased(self, base_offset: int) -> Batch:
        return Batch(base_offset, self.epoch, self.records, self.control)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Batch)
            and self.base_offset == other.base_offset
            and self.epoch == other.epoch
            and self.control == other.control
            and self.records == other.records
        )

    def __hash__(self) -> int:
        return hash((self.base_offset, self.epoch, self.control, self.records))

    def __repr__(self) -> str:
        kind = "control " if self.control else ""
        return f"Batch({kind}[{self.base_offset}, {self.end_offset}) epoch={self.epoch})"


def epoch_end_offset(
    epochs: list[int], starts: list[int], start_snapshot: SnapshotId | None, log_end_offset: int, epoch: int
) -> OffsetAndEpoch:
    """The answer of ``RaftLog.end_offset_for_epoch`` from a log's epoch cache:
    ``epochs``/``starts`` are the epochs its batches hold and where each starts,
    oldest first; ``start_snapshot`` is the snapshot the log starts at, if any."""
    if not epochs or epoch < epochs[0]:
        if start_snapshot is not None and start_snapshot.epoch <= epoch:
            return OffsetAndEpoch(start_snapshot.end_offset, start_snapshot.epoch)
        if not epochs and start_snapshot is None and log_end_offset == 0:
            return OffsetAndEpoch(0, 0) if epoch >= 0 else UNDEFINED
        return UNDEFINED
    index = bisect.bisect_right(epochs, epoch) - 1
    end = starts[index + 1] if index + 1 < len(starts) else log_end_offset
    return OffsetAndEpoch(end, epochs[index])


class RaftLog(Protocol):
    """What the Raft core needs from its log. All methods are synchronous."""

    @property
    def start_offset(self) -> int:
        """First offset held in the log (the latest snapshot's end once the prefix is deleted)."""

    @property
    def end_offset(self) -> int:
        """Log end offset: the last record's offset + 1."""

    @property
    def flushed_end_offset(self) -> int:
        """Everything below this offset survives a crash."""

    @property
    def last_epoch(self) -> int:
        """Epoch of the last entry, or of the snapshot the log starts at, or 0."""

    def append(self, batch: Batch) -> None:
        """Append a batch whose base offset is ``end_offset``; epochs never decrease."""

    def read(self, offset: int, max_bytes: int) -> list[Batch]:
        """Whole batches from the one holding ``offset``; at least one when any exists."""

    def epoch_at(self, offset: int) -> int:
        """Epoch of the record at ``offset`` (``start_offset - 1`` answers the snapshot's epoch)."""

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch <= ``epoch`` this log knows and the offset where it ends here;
        ``UNDEFINED`` when ``epoch`` is older than anything the log or its snapshot knows."""

    def truncate_to(self, offset: int) -> int:
        """Remove every batch ending above ``offset``; returns the new end offset."""

    def flush(self) -> None:
        """Make everything appended so far durable."""

    @property
    def latest_snapshot(self) -> SnapshotId | None: ...

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Store a snapshot the local state machine produced (durable on return)."""

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        """Drop the log prefix a snapshot covers; ``start_offset`` moves to its end."""

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> tuple[bytes, int] | None:
        """A chunk of a committed snapshot and the snapshot's total size; None if unknown."""

    def snapshot_data(self, snapshot_id: SnapshotId) -> bytes | None: ...

    def write_snapshot_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        """Write a chunk of a snapshot being fetched; chunks arrive in position order."""

    def commit_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Make a fully fetched snapshot current; the log restarts at its end if it is behind."""


class MemoryRaftLog:
    """A ``RaftLog`` in memory that tells flushed from unflushed data.

    Batches are kept in a list with a parallel list of base offsets, so lookups
    are a bisect and a log of a million records costs nothing per record.
    """

    SNAPSHOTS_KEPT = 2

    def __init__(self) -> None:
        self._batches: list[Batch] = []
        self._bases: list[int] = []
        self._start_offset = 0
        self._end_offset = 0
        self._flushed_end_offset = 0
        # (epoch, start offset) in increasing order; the first entry may start
        # below start_offset when a snapshot cut through the epoch.
        self._epoch_epochs: list[int] = []
        self._epoch_starts: list[int] = []
        self._snapshots: dict[SnapshotId, bytes] = {}
        self._partial_snapshots: dict[SnapshotId, bytearray] = {}
        self._start_snapshot: SnapshotId | None = None

    # -- reads -------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def end_offset(self) -> int:
        return self._end_offset

    @property
    def flushed_end_offset(self) -> int:
        return self._flushed_end_offset

    @property
    def last_epoch(self) -> int:
        if self._batches:
            return self._batches[-1].epoch
        if self._start_snapshot is not None:
            return self._start_snapshot.epoch
        return 0

    @property
    def batches(self) -> list[Batch]:
        """The batches held (read-only view for tests and drivers)."""
        return self._batches

    def _index_of(self, offset: int) -> int:
        return bisect.bisect_right(self._bases, offset) - 1

    def read(self, offset: int, max_bytes: int) -> list[Batch]:
        if offset >= self._end_offset or not self._batches:
            return []
        index = max(self._index_of(offset), 0)
        batches = self._batches
        out = [batches[index]]
        total = out[0].size_bytes
        # Index walk, not a slice: a slice would copy the rest of a long log.
        for i in range(index + 1, len(batches)):
            batch = batches[i]
            if total + batch.size_bytes > max_bytes:
                break
            out.append(batch)
            total += batch.size_bytes
        return out

    def epoch_at(self, offset: int) -> int:
        if offset < self._start_offset:
            if self._start_snapshot is not None and offset == self._start_offset - 1:
                return self._start_snapshot.epoch
            raise ValueError(f"offset {offset} is below the log start {self._start_offset}")
        if offset >= self._end_offset:
            raise ValueError(f"offset {offset} is at or past the log end {self._end_offset}")
        return self._batches[self._index_of(offset)].epoch

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return epoch_end_offset(self._epoch_epochs, self._epoch_starts, self._start_snapshot, self._end_offset, epoch)

    # -- writes ------------------------------------------------------------

    def append(self, batch: Batch) -> None:
        if batch.base_offset != self._end_offset:
            raise ValueError(f"append at {batch.base_offset}, log end is {self._end_offset}")
        if batch.epoch < self.last_epoch:
            raise ValueError(f"append of epoch {batch.epoch} after epoch {self.last_epoch}")
        self._batches.append(batch)
        self._bases.append(batch.base_offset)
        self._end_offset = batch.end_offset
        if not self._epoch_epochs or self._epoch_epochs[-1] < batch.epoch:
            self._epoch_epochs.append(batch.epoch)
            self._epoch_starts.append(batch.base_offset)

    def truncate_to(self, offset: int) -> int:
        if offset >= self._end_offset:
            return self._end_offset
        offset = max(offset, self._start_offset)
        # Whole batches only: keep those that end at or below the offset.
        index = bisect.bisect_left(self._bases, offset)
        # A batch straddling the offset goes too.
        while index > 0 and self._batches[index - 1].end_offset > offset:
            index -= 1
        del self._batches[index:]
        del self._bases[index:]
        self._end_offset = self._batches[-1].end_offset if self._batches else self._start_offset
        self._flushed_end_offset = min(self._flushed_end_offset, self._end_offset)
        cut = bisect.bisect_left(self._epoch_starts, self._end_offset) if self._batches else 0
        del self._epoch_epochs[cut:]
        del self._epoch_starts[cut:]
        return self._end_offset

    def flush(self) -> None:
        self._flushed_end_offset = self._end_offset

    def crash(self) -> None:
        """Lose everything a crash loses: unflushed batches and unfinished snapshot fetches."""
        self.truncate_to(self._flushed_end_offset)
        self._partial_snapshots.clear()

    # -- snapshots ---------------------------------------------------------

    @property
    def latest_snapshot(self) -> SnapshotId | None:
        return max(self._snapshots) if self._snapshots else None

    def snapshot_data(self, snapshot_id: SnapshotId) -> bytes | None:
        return self._snapshots.get(snapshot_id)

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        if snapshot_id.end_offset > self._end_offset:
            raise ValueError(f"snapshot {snapshot_id} is past the log end {self._end_offset}")
        self._snapshots[snapshot_id] = bytes(data)
        self._trim_snapshots()

    def _trim_snapshots(self) -> None:
        for old in sorted(self._snapshots)[: -self.SNAPSHOTS_KEPT]:
            del self._snapshots[old]

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"no snapshot {snapshot_id}")
        offset = snapshot_id.end_offset
        if offset <= self._start_offset:
            return
        if offset > self._end_offset:
            raise ValueError(f"snapshot {snapshot_id} is past the log end {self._end_offset}")
        index = bisect.bisect_left(self._bases, offset)
        if index < len(self._batches) and self._batches[index].base_offset != offset:
            raise ValueError(f"snapshot end {offset} is not a batch boundary")
        if index == len(self._batches) and self._batches and self._batches[-1].end_offset != offset:
            raise ValueError(f"snapshot end {offset} is not a batch boundary")
        del self._batches[:index]
        del self._bases[:index]
        self._start_offset = offset
        self._start_snapshot = snapshot_id
        # Keep the epoch entry that covers the new start; drop older ones.
        keep_from = max(bisect.bisect_right(self._epoch_starts, offset) - 1, 0)
        if not self._batches:
            keep_from = len(self._epoch_starts)
        del self._epoch_epochs[:keep_from]
        del self._epoch_starts[:keep_from]

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> tuple[bytes, int] | None:
        data = self._snapshots.get(snapshot_id)
        if data is None:
            return None
        return data[position : position + max_bytes], len(data)

    def write_snapshot_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        if position == 0:
            self._partial_snapshots[snapshot_id] = bytearray()  # a fetch that starts over
        buffer = self._partial_snapshots.setdefault(snapshot_id, bytearray())
        if position != len(buffer):
            raise ValueError(f"snapshot chunk at {position}, expected {len(buffer)}")
        buffer += data

    def commit_snapshot(self, snapshot_id: SnapshotId) -> None:
        data = self._partial_snapshots.pop(snapshot_id, None)
        if data is None:
            raise ValueError(f"no snapshot {snapshot_id} being written")
        self._snapshots[snapshot_id] = bytes(data)
        if snapshot_id.end_offset >= self._end_offset or not self._holds_boundary(snapshot_id):
            # The log is behind (or disagrees with) the snapshot: start over at its end.
            self._batches.clear()
            self._bases.clear()
            self._epoch_epochs.clear()
            self._epoch_starts.clear()
            self._start_offset = self._end_offset = self._flushed_end_offset = snapshot_id.end_offset
            self._start_snapshot = snapshot_id
        else:
            self.delete_before(snapshot_id)
        self._trim_snapshots()

    def _holds_boundary(self, snapshot_id: SnapshotId) -> bool:
        """True when this log has the snapshot's last record and a batch boundary at its end."""
        offset = snapshot_id.end_offset
        if offset - 1 < self._start_offset or self.epoch_at(offset - 1) != snapshot_id.epoch:
            return False
        index = bisect.bisect_left(self._bases, offset)
        return index < len(self._bases) and self._bases[index] == offset
