"""The Raft log on disk: the ``__cluster_metadata-0`` directory.

Layout (Kafka's own, so ``pybroker dump-log`` and Kafka's tools read it):

* the log is a :class:`storage.log.PartitionLog`: segments of v2 record
  batches. One Raft :class:`~controller.raft.log.Batch` is one record batch:
  its base offset is the batch's, its partition leader epoch is the Raft
  epoch, the control attribute marks control batches, and the record values
  are the batch's records (keys are null, but a control record carries
  Kafka's control key, LEADER_CHANGE);
* snapshots are files ``<end offset, 20 digits>-<epoch, 10 digits>.checkpoint``
  next to the segments. A local one is written atomically (temp file, fsync,
  rename, directory fsync); a fetched one is written chunk by chunk to
  ``.checkpoint.part`` and renamed when complete. The newest
  ``SNAPSHOTS_KEPT`` are kept;
* the ``quorum-state`` file (see ``quorum_state_store``) lives here too.

Nothing else is persisted; in particular the log start offset is not stored.
It is recovered at open as the end of the newest snapshot whenever that is
above the first offset the segments hold. This gives back the start the log
had before the restart because the log only ever drops a prefix that a
snapshot covers, and the Raft core drops it as soon as a snapshot exists
(``snapshot_created`` calls ``delete_before`` at once; ``commit_snapshot``
does it itself). The only states where the newest snapshot is above the start
are the windows a crash can cut (snapshot file renamed, prefix not yet
dropped), and then the open finishes the job: dropping the prefix, or, when the
log is behind or disagrees with the snapshot, restarting the log empty at the
snapshot's end. Either is safe, as a snapshot only ever covers committed
records. The snapshot whose end is the start is the "start snapshot" that
answers ``epoch_at(start - 1)`` and ``end_offset_for_epoch`` below the log.

Durability:

* ``append`` writes to the page cache; ``flush`` fsyncs (PartitionLog.flush)
  and only then moves ``flushed_end_offset``. Everything the segments hold
  after a restart (PartitionLog's recovery cuts a torn tail) counts as
  flushed: it is on disk now, whatever happened before.
* ``truncate_to`` is durable on return (PartitionLog.truncate_to fsyncs).
* Prefix deletion removes whole segments below the start; batches of the
  segment that holds the start stay on disk, unread, until that segment goes.
  A crash before the deletion is redone by the open rule above.
* A snapshot is durable before the log is cut for it, so no crash point leaves
  a log start without the snapshot that explains it. ``.part`` files found at
  open are fetches a crash interrupted and are deleted, as are snapshots
  beyond the newest ``SNAPSHOTS_KEPT`` (a crash between a rename and the
  deletion of the oldest).

In memory the log keeps one (base offset, epoch) entry per batch, in two
parallel lists, plus the epoch cache (each epoch and the offset it starts at):
a log of a million records in 100k batches costs two 100k-entry lists and no
per-record work. Both are built at open from the batch headers alone; a
batch's records are decoded only when it is read.
"""

from __future__ import annotations

import bisect
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from controller.raft.log import LEADER_CHANGE_CONTROL_KEY, Batch, OffsetAndEpoch, SnapshotId, epoch_end_offset
from protocol.records import build_batch, decode_batch_records, iter_batches
from storage.checkpoint import fsync_dir, write_atomically
from storage.log import LogConfig, PartitionLog

SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def partial_snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{PARTIAL_SUFFIX}"


class DiskRaftLog:
    """A ``RaftLog`` in one directory, with ``MemoryRaftLog``'s observable behaviour."""

    SNAPSHOTS_KEPT = 2
    # How much of a segment one PartitionLog.read returns while scanning or
    # reading batches (a larger batch still comes back whole).
    READ_CHUNK_BYTES = 1 << 20

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes: int = 64 << 20,
        clock_ms: Callable[[], int] | None = None,
    ):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        # The leader already checked what it wrote and a follower must take it
        # as it is: no size or timestamp limits of a produce path here.
        self._log_config = LogConfig(
            segment_bytes=segment_bytes,
            max_message_bytes=2**31 - 1,
            timestamp_after_max_ms=2**63 - 1,
        )
        for name in os.listdir(self.directory):
            if name.endswith(PARTIAL_SUFFIX):
                os.unlink(self.directory / name)  # a snapshot fetch a crash interrupted
        self._snapshots: list[SnapshotId] = sorted(self._scan_snapshots())
        self._trim_snapshots()
        self._log = PartitionLog(self.directory, self._log_config, clock_ms=self._clock_ms)
        # One entry per batch: its base offset and epoch.
        self._bases: list[int] = []
        self._epochs: list[int] = []
        # The epoch cache: each epoch present and where it starts, oldest first.
        # The first entry may start below start_offset when the start cuts
        # through an epoch (after a reopen it starts at the first segment's
        # base rather than where the epoch began; only the starts of later
        # epochs are ever used as an epoch's end, so answers do not change).
        self._epoch_epochs: list[int] = []
        self._epoch_starts: list[int] = []
        self._load_batch_index()
        self._start_offset = self._log.log_start_offset
        self._start_snapshot: SnapshotId | None = None
        latest = self.latest_snapshot
        if latest is not None and latest.end_offset > self._start_offset:
            # A crash came between storing the snapshot and cutting the log for it.
            if self._holds_boundary(latest):
                self._drop_prefix(latest)
            else:
                self._restart_at(latest)
        else:
            self._start_snapshot = next((s for s in self._snapshots if s.end_offset == self._start_offset), None)
        self._flushed_end_offset = self.end_offset

    # -- opening -----------------------------------------------------------

    def _scan_snapshots(self):
        for name in os.listdir(self.directory):
            match = _SNAPSHOT_NAME.match(name)
            if match:
                yield SnapshotId(int(match.group(1)), int(match.group(2)))

    def _load_batch_index(self) -> None:
        """One (base offset, epoch) per batch and the epoch cache, from the batch headers only."""
        offset = self._log.log_start_offset
        end = self._log.log_end_offset
        while offset < end:
            data = self._log.read(offset, self.READ_CHUNK_BYTES, upper_offset=end)
            if not data:
                break
            for _, _, header in iter_batches(data):
                self._add_to_index(header.base_offset, header.partition_leader_epoch)
                offset = header.base_offset + header.last_offset_delta + 1

    def _add_to_index(self, base_offset: int, epoch: int) -> None:
        self._bases.append(base_offset)
        self._epochs.append(epoch)
        if not self._epoch_epochs or self._epoch_epochs[-1] < epoch:
            self._epoch_epochs.append(epoch)
            self._epoch_starts.append(base_offset)

    # -- reads -------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def flushed_end_offset(self) -> int:
        return self._flushed_end_offset

    @property
    def last_epoch(self) -> int:
        if self._epochs:
            return self._epochs[-1]
        if self._start_snapshot is not None:
            return self._start_snapshot.epoch
        return 0

    def _index_of(self, offset: int) -> int:
        return bisect.bisect_right(self._bases, offset) - 1

    def read(self, offset: int, max_bytes: int) -> list[Batch]:
        end = self.end_offset
        if offset >= end or not self._bases:
            return []
        # Never below the start: the segment holding the start may still hold
        # batches of the deleted prefix.
        position = self._bases[max(self._index_of(offset), 0)]
        out: list[Batch] = []
        total_bytes = 0
        while position < end:
            data = self._log.read(position, self.READ_CHUNK_BYTES, upper_offset=end)
            if not data:
                break
            for start, size, header in iter_batches(data):
                _, records = decode_batch_records(data[start : start + size])
                batch = Batch(
                    header.base_offset,
                    header.partition_leader_epoch,
                    tuple(b"" if r.value is None else bytes(r.value) for r in records),
                    header.is_control,
                )
                if out and total_bytes + batch.size_bytes > max_bytes:
                    return out
                out.append(batch)
                total_bytes += batch.size_bytes
                position = batch.end_offset
        return out

    def epoch_at(self, offset: int) -> int:
        if offset < self._start_offset:
            if self._start_snapshot is not None and offset == self._start_offset - 1:
                return self._start_snapshot.epoch
            raise ValueError(f"offset {offset} is below the log start {self._start_offset}")
        if offset >= self.end_offset:
            raise ValueError(f"offset {offset} is at or past the log end {self.end_offset}")
        return self._epochs[self._index_of(offset)]

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return epoch_end_offset(self._epoch_epochs, self._epoch_starts, self._start_snapshot, self.end_offset, epoch)

    # -- writes ------------------------------------------------------------

    def append(self, batch: Batch) -> None:
        if batch.base_offset != self.end_offset:
            raise ValueError(f"append at {batch.base_offset}, log end is {self.end_offset}")
        if batch.epoch < self.last_epoch:
            raise ValueError(f"append of epoch {batch.epoch} after epoch {self.last_epoch}")
        now_ms = self._clock_ms()
        key = LEADER_CHANGE_CONTROL_KEY if batch.control else None
        data = build_batch(
            [(key, record, (), now_ms) for record in batch.records],
            base_offset=batch.base_offset,
            is_control=batch.control,
            partition_leader_epoch=batch.epoch,
        )
        # PartitionLog patches the base offset (its log end) and the leader
        # epoch into the batch, and records the epoch in its own epoch cache.
        result = self._log.append(data, leader_epoch=batch.epoch)
        if result.base_offset != batch.base_offset:  # cannot happen: checked against the same log end
            raise RuntimeError(f"batch {batch} landed at {result.base_offset}")
        self._add_to_index(batch.base_offset, batch.epoch)

    def truncate_to(self, offset: int) -> int:
        if offset >= self.end_offset:
            return self.end_offset
        offset = max(offset, self._start_offset)
        # Whole batches only: a batch that straddles the offset goes too.
        index = bisect.bisect_left(self._bases, offset)
        while index > 0 and self._batch_end(index - 1) > offset:
            index -= 1
        cut = self._bases[index] if index < len(self._bases) else self.end_offset
        self._log.truncate_to(cut)  # fsyncs before returning
        del self._bases[index:]
        del self._epochs[index:]
        end = self.end_offset
        self._flushed_end_offset = min(self._flushed_end_offset, end)
        cut_epochs = bisect.bisect_left(self._epoch_starts, end) if self._bases else 0
        del self._epoch_epochs[cut_epochs:]
        del self._epoch_starts[cut_epochs:]
        return end

    def _batch_end(self, index: int) -> int:
        return self._bases[index + 1] if index + 1 < len(self._bases) else self.end_offset

    def flush(self) -> None:
        self._log.flush(fsync=True)
        self._flushed_end_offset = self.end_offset

    # -- snapshots ---------------------------------------------------------

    @property
    def latest_snapshot(self) -> SnapshotId | None:
        return self._snapshots[-1] if self._snapshots else None

    def _snapshot_path(self, snapshot_id: SnapshotId) -> Path:
        return self.directory / snapshot_file_name(snapshot_id)

    def _partial_path(self, snapshot_id: SnapshotId) -> Path:
        return self.directory / partial_snapshot_file_name(snapshot_id)

    def snapshot_data(self, snapshot_id: SnapshotId) -> bytes | None:
        if snapshot_id not in self._snapshots:
            return None
        return self._snapshot_path(snapshot_id).read_bytes()

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        if snapshot_id.end_offset > self.end_offset:
            raise ValueError(f"snapshot {snapshot_id} is past the log end {self.end_offset}")
        write_atomically(self._snapshot_path(snapshot_id), bytes(data))
        self._add_snapshot(snapshot_id)

    def _add_snapshot(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            bisect.insort(self._snapshots, snapshot_id)
        self._trim_snapshots()

    def _trim_snapshots(self) -> None:
        # Oldest first: a crash part-way leaves the newest ones, which the open relies on.
        while len(self._snapshots) > self.SNAPSHOTS_KEPT:
            self._snapshot_path(self._snapshots.pop(0)).unlink(missing_ok=True)

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"no snapshot {snapshot_id}")
        offset = snapshot_id.end_offset
        if offset <= self._start_offset:
            return
        end = self.end_offset
        if offset > end:
            raise ValueError(f"snapshot {snapshot_id} is past the log end {end}")
        index = bisect.bisect_left(self._bases, offset)
        if index < len(self._bases) and self._bases[index] != offset:
            raise ValueError(f"snapshot end {offset} is not a batch boundary")
        if index == len(self._bases) and self._bases and offset != end:
            raise ValueError(f"snapshot end {offset} is not a batch boundary")
        self._drop_prefix(snapshot_id)

    def _drop_prefix(self, snapshot_id: SnapshotId) -> None:
        offset = snapshot_id.end_offset
        index = bisect.bisect_left(self._bases, offset)
        # Segments wholly below the start go; the rest of the prefix stays on
        # disk until its segment does, but is never read again.
        self._log.delete_records(offset)
        del self._bases[:index]
        del self._epochs[:index]
        self._start_offset = offset
        self._start_snapshot = snapshot_id
        # Keep the epoch entry that covers the new start; drop older ones.
        keep_from = max(bisect.bisect_right(self._epoch_starts, offset) - 1, 0) if self._bases else len(self._epoch_starts)
        del self._epoch_epochs[:keep_from]
        del self._epoch_starts[:keep_from]

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> tuple[bytes, int] | None:
        if snapshot_id not in self._snapshots:
            return None
        with open(self._snapshot_path(snapshot_id), "rb") as file:
            size_bytes = os.fstat(file.fileno()).st_size
            file.seek(position)
            return file.read(max_bytes), size_bytes

    def write_snapshot_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        path = self._partial_path(snapshot_id)
        if position == 0:
            mode = "wb"  # a fetch that starts over
        else:
            size_bytes = path.stat().st_size if path.exists() else 0
            if position != size_bytes:
                raise ValueError(f"snapshot chunk at {position}, expected {size_bytes}")
            mode = "ab"
        # Not fsynced per chunk: a crash loses the whole fetch anyway (the .part
        # file is deleted at open), and commit_snapshot fsyncs once.
        with open(path, mode) as file:
            file.write(data)

    def commit_snapshot(self, snapshot_id: SnapshotId) -> None:
        partial = self._partial_path(snapshot_id)
        if not partial.exists():
            raise ValueError(f"no snapshot {snapshot_id} being written")
        fd = os.open(partial, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, self._snapshot_path(snapshot_id))
        fsync_dir(self.directory)
        # The snapshot is durable before the log is cut for it (see the module docstring).
        self._add_snapshot(snapshot_id)
        if snapshot_id.end_offset >= self.end_offset or not self._holds_boundary(snapshot_id):
            self._restart_at(snapshot_id)
        else:
            self.delete_before(snapshot_id)

    def _holds_boundary(self, snapshot_id: SnapshotId) -> bool:
        """True when this log has the snapshot's last record, of the snapshot's
        epoch, and a batch boundary at its end."""
        offset = snapshot_id.end_offset
        if offset - 1 < self._start_offset or offset > self.end_offset:
            return False
        if self.epoch_at(offset - 1) != snapshot_id.epoch:
            return False
        if offset == self.end_offset:
            return True
        index = bisect.bisect_left(self._bases, offset)
        return index < len(self._bases) and self._bases[index] == offset

    def _restart_at(self, snapshot_id: SnapshotId) -> None:
        """Empty the log and start it again at the snapshot's end (the log is behind it or disagrees)."""
        offset = snapshot_id.end_offset
        self._log.truncate_fully_and_start_at(offset)
        self._bases.clear()
        self._epochs.clear()
        self._epoch_epochs.clear()
        self._epoch_starts.clear()
        self._start_offset = offset
        self._start_snapshot = snapshot_id
        self._flushed_end_offset = offset

    def close(self) -> None:
        self._log.close()  # flushes (PartitionLog fsyncs on close)
