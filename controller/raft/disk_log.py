"""The Raft log on disk: the ``__cluster_metadata-0`` directory.

Layout (Kafka's own, so ``pybroker dump-log`` and Kafka's tools read it):

* the log is a :class:`storage.log.PartitionLog`: segments of v2 record
  batches. One Raft :class:`~controller.raft.log.Batch` is one record batch:
  its base offset is the batch's, its partition leader epoch is the Raft
  epoch, the control attribute marks control batches, and the record values
  are the batch's records (keys are null, but a control record carries
  Kafka's control key, LEADER_CHANGE);
* snapshots are files ``<end offset, 20 digits>-<epoch, 10 digits>.checkpoint``
  next to the segments, written to ``.checkpoint.part`` first and renamed when
  complete (a fetched snapshot) or written atomically (a local one);
* the ``quorum-state`` file (see ``quorum_state_store``) lives here too.

Nothing else is persisted. The log start offset is not stored: it is the end
of the newest snapshot when that is above the first offset the segments hold,
because the log only ever drops a prefix that a snapshot covers. A crash in
the middle of installing a fetched snapshot (renamed, but the log not yet cut)
is finished at the next open by the same rule.

Durability: ``flush`` fsyncs; everything the segments hold after a restart
(recovery cuts a torn tail) counts as flushed. ``truncate_to`` and prefix
deletion are durable when they return, as the Raft core requires.

In memory the log keeps one entry per batch (base offset, epoch), not per
record, for ``epoch_at`` and the epoch cache; a batch's records are decoded
only when it is read.
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
# Segment files a PartitionLog keeps in its directory (removed when the log restarts at a snapshot).
_SEGMENT_FILE = re.compile(r"^\d{20}\.(log|index|timeindex|snapshot)$")


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


class DiskRaftLog:
    SNAPSHOTS_KEPT = 2
    READ_CHUNK_BYTES = 1 << 20

    def __init__(self, directory: Path, *, segment_bytes: int = 64 << 20, clock_ms: Callable[[], int] | None = None):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        # The leader already checked what it wrote; the log must take it as it is.
        self._log_config = LogConfig(
            segment_bytes=segment_bytes,
            max_message_bytes=2**31 - 1,
            timestamp_after_max_ms=2**63 - 1,
        )
        for name in os.listdir(self.directory):
            if name.endswith(PARTIAL_SUFFIX):
                os.unlink(self.directory / name)  # a snapshot fetch a crash interrupted
        self._snapshots: list[SnapshotId] = sorted(self._scan_snapshots())
        self._log = PartitionLog(self.directory, self._log_config, clock_ms=self._clock_ms)
        self._bases: list[int] = []
        self._epochs: list[int] = []
        self._load_batch_index()
        self._start_offset = self._log.log_start_offset
        self._start_snapshot: SnapshotId | None = None
        latest = self.latest_snapshot
        if latest is not None and latest.end_offset > self._start_offset:
            if not self._holds_boundary(latest):
                self._restart_at(latest)  # an install a crash interrupted
            else:
                self._drop_prefix(latest)
        elif latest is not None and latest.end_offset == self._start_offset:
            self._start_snapshot = latest
        self._flushed_end_offset = self.end_offset

    # -- opening -----------------------------------------------------------

    def _scan_snapshots(self):
        for name in os.listdir(self.directory):
            match = _SNAPSHOT_NAME.match(name)
            if match:
                yield SnapshotId(int(match.group(1)), int(match.group(2)))

    def _load_batch_index(self) -> None:
        """One (base offset, epoch) per batch, from the batch headers only."""
        self._bases.clear()
        self._epochs.clear()
        offset = self._log.log_start_offset
        end = self._log.log_end_offset
        while offset < end:
            data = self._log.read(offset, self.READ_CHUNK_BYTES, upper_offset=end)
            if not data:
                break
            for _, _, header in iter_batches(data):
                self._bases.append(header.base_offset)
                self._epochs.append(header.partition_leader_epoch)
                offset = header.base_offset + header.last_offset_delta + 1

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
        index = max(self._index_of(offset), 0)
        position = self._bases[index]
        out: list[Batch] = []
        total = 0
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
                if out and total + batch.size_bytes > max_bytes:
                    return out
                out.append(batch)
                total += batch.size_bytes
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

    def _epoch_starts(self) -> tuple[list[int], list[int]]:
        """(epochs, start offsets) of the epochs the batches hold, oldest first."""
        epochs: list[int] = []
        starts: list[int] = []
        for base, epoch in zip(self._bases, self._epochs):
            if not epochs or epochs[-1] < epoch:
                epochs.append(epoch)
                starts.append(base)
        return epochs, starts

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        epochs, starts = self._epoch_starts()
        return epoch_end_offset(epochs, starts, self._start_snapshot, self.end_offset, epoch)

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
        self._log.append(data, leader_epoch=batch.epoch)
        self._bases.append(batch.base_offset)
        self._epochs.append(batch.epoch)

    def truncate_to(self, offset: int) -> int:
        if offset >= self.end_offset:
            return self.end_offset
        offset = max(offset, self._start_offset)
        # Whole batches only: a batch that straddles the offset goes too.
        index = bisect.bisect_left(self._bases, offset)
        while index > 0 and self._batch_end(index - 1) > offset:
            index -= 1
        cut = self._bases[index] if index < len(self._bases) else self.end_offset
        self._log.truncate_to(cut)  # fsyncs
        del self._bases[index:]
        del self._epochs[index:]
        self._flushed_end_offset = min(self._flushed_end_offset, self.end_offset)
        return self.end_offset

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
        while len(self._snapshots) > self.SNAPSHOTS_KEPT:
            old = self._snapshots.pop(0)
            try:
                os.unlink(self._snapshot_path(old))
            except FileNotFoundError:
                pass

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"no snapshot {snapshot_id}")
        offset = snapshot_id.end_offset
        if offset <= self._start_offset:
            return
        if offset > self.end_offset:
            raise ValueError(f"snapshot {snapshot_id} is past the log end {self.end_offset}")
        index = bisect.bisect_left(self._bases, offset)
        if index < len(self._bases) and self._bases[index] != offset:
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

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> tuple[bytes, int] | None:
        if snapshot_id not in self._snapshots:
            return None
        path = self._snapshot_path(snapshot_id)
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            file.seek(position)
            return file.read(max_bytes), size

    def write_snapshot_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        path = self.directory / (snapshot_file_name(snapshot_id)[: -len(SNAPSHOT_SUFFIX)] + PARTIAL_SUFFIX)
        if position == 0:
            mode = "wb"  # a fetch that starts over
        else:
            size = path.stat().st_size if path.exists() else 0
            if position != size:
                raise ValueError(f"snapshot chunk at {position}, expected {size}")
            mode = "ab"
        with open(path, mode) as file:
            file.write(data)

    def commit_snapshot(self, snapshot_id: SnapshotId) -> None:
        partial = self.directory / (snapshot_file_name(snapshot_id)[: -len(SNAPSHOT_SUFFIX)] + PARTIAL_SUFFIX)
        if not partial.exists():
            raise ValueError(f"no snapshot {snapshot_id} being written")
        fd = os.open(partial, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, self._snapshot_path(snapshot_id))
        fsync_dir(self.directory)
        self._add_snapshot(snapshot_id)
        if snapshot_id.end_offset >= self.end_offset or not self._holds_boundary(snapshot_id):
            self._restart_at(snapshot_id)
        else:
            self.delete_before(snapshot_id)

    def _holds_boundary(self, snapshot_id: SnapshotId) -> bool:
        """True when this log has the snapshot's last record and a batch boundary at its end."""
        offset = snapshot_id.end_offset
        if offset - 1 < self._start_offset or offset > self.end_offset:
            return False
        if self.epoch_at(offset - 1) != snapshot_id.epoch:
            return False
        index = bisect.bisect_left(self._bases, offset)
        return (index < len(self._bases) and self._bases[index] == offset) or offset == self.end_offset

    def _restart_at(self, snapshot_id: SnapshotId) -> None:
        """Empty the log and start it again at the snapshot's end (the log is behind it or disagrees)."""
        self._log.close()
        for name in os.listdir(self.directory):
            if _SEGMENT_FILE.match(name) or name == "leader-epoch-checkpoint":
                os.unlink(self.directory / name)
        offset = snapshot_id.end_offset
        # An empty segment named for the offset makes the reopened log start there.
        (self.directory / f"{offset:020d}.log").touch()
        fsync_dir(self.directory)
        self._log = PartitionLog(self.directory, self._log_config, clock_ms=self._clock_ms, log_start_offset=offset)
        self._bases.clear()
        self._epochs.clear()
        self._start_offset = offset
        self._start_snapshot = snapshot_id
        self._flushed_end_offset = offset

    def close(self) -> None:
        self._log.flush(fsync=True)
        self._log.close()

