"""DiskRaftLog keeps MemoryRaftLog's contract, and its state survives a restart.

The contract test drives both logs with the same random operations and
compares every observable after each one; a reopen of the disk log is matched
by ``crash()`` of the memory log (after a flush, or without one: the disk side
then cuts its unflushed tail first, which is what a crash loses).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.raft.disk_log import DiskRaftLog, partial_snapshot_file_name, snapshot_file_name
from controller.raft.log import Batch, MemoryRaftLog, OffsetAndEpoch, SnapshotId
from protocol.records import iter_batches
from storage.dump import DumpOptions, dump_file
from storage.log import LogConfig, PartitionLog

SEGMENT_BYTES = 200  # one to three batches per segment, so prefix deletion removes files

records_strategy = st.lists(st.binary(max_size=12), min_size=1, max_size=4).map(tuple)
# Offsets are drawn as plain numbers and mapped onto the log's current range by the test.
number = st.integers(0, 10_000)

append_op = st.tuples(st.just("append"), st.integers(0, 2), records_strategy, st.booleans())
operation = st.one_of(
    # Appends three times as often as anything else, so logs grow to several segments.
    append_op,
    append_op,
    append_op,
    st.tuples(st.just("read"), number, st.integers(1, 200)),
    st.tuples(st.just("truncate"), number),
    st.tuples(st.just("flush")),
    # A local snapshot at a batch boundary, with the prefix dropped at once
    # (what the core does) or left for the next open to drop.
    st.tuples(st.just("snapshot"), number, st.booleans()),
    # A fetched snapshot ending past the log end.
    st.tuples(st.just("install_ahead"), st.integers(0, 5), st.integers(0, 2), st.booleans()),
    # A fetched snapshot ending inside the log: agreeing with it or not, at a boundary or not.
    st.tuples(st.just("install_inside"), number, st.booleans()),
    st.tuples(st.just("reopen"), st.booleans()),
    st.tuples(st.just("bad_append"), st.integers(-2, 2)),
)


def outcome(call):
    """The result of ``call()``, or the exception type it raised (both logs must agree on either)."""
    try:
        return call()
    except ValueError:
        return ValueError


def observe(log, max_epoch: int) -> dict:
    start = log.start_offset
    end = log.end_offset
    snapshots = sorted(log._snapshots)
    return {
        "start": start,
        "end": end,
        # The memory log may report a flushed end below its start after a crash
        # (a snapshot covers that prefix); what survives a crash is the same.
        "flushed": max(log.flushed_end_offset, start),
        "last_epoch": log.last_epoch,
        # start - 1 answers the snapshot's epoch when the log starts at one, and raises otherwise.
        "epochs": [outcome(lambda o=o: log.epoch_at(o)) for o in range(max(start - 2, 0), end + 1)],
        "for_epoch": [log.end_offset_for_epoch(e) for e in range(-1, max_epoch + 2)],
        "latest_snapshot": log.latest_snapshot,
        "snapshots": [(s, log.snapshot_data(s), log.read_snapshot(s, 1, 2)) for s in snapshots],
        "unknown_snapshot": (log.snapshot_data(SnapshotId(10**6, 0)), log.read_snapshot(SnapshotId(10**6, 0), 0, 9)),
        "batches": log.read(start, 1 << 30),
    }


def batch_ends(log) -> list[int]:
    return [b.end_offset for b in log.read(log.start_offset, 1 << 30)]


def fetchable(memory: MemoryRaftLog, snapshot_id: SnapshotId) -> bool:
    """A leader's snapshot holds committed records only: it never ends at or below
    one this node already has (which would disagree on committed records or be older)."""
    latest = memory.latest_snapshot
    return snapshot_id.end_offset > memory.start_offset and (latest is None or snapshot_id.end_offset > latest.end_offset)


def install(log, snapshot_id: SnapshotId) -> None:
    log.write_snapshot_chunk(snapshot_id, 0, b"xyz")
    log.write_snapshot_chunk(snapshot_id, 0, b"ab")  # a fetch that starts over
    log.write_snapshot_chunk(snapshot_id, 2, b"cd")
    log.commit_snapshot(snapshot_id)


@settings(max_examples=int(os.environ.get("RAFT_DISK_LOG_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, min_size=15, max_size=60))
def test_disk_log_keeps_the_memory_log_contract(operations):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "__cluster_metadata-0"
        memory = MemoryRaftLog()
        disk = DiskRaftLog(path, segment_bytes=SEGMENT_BYTES)
        max_epoch = 1
        try:
            for op in operations:
                kind = op[0]
                start, end = memory.start_offset, memory.end_offset
                if kind == "append":
                    epoch = max(memory.last_epoch, 1) + op[1]
                    max_epoch = max(max_epoch, epoch)
                    for log in (memory, disk):
                        log.append(Batch(log.end_offset, epoch, op[2], control=op[3]))
                elif kind == "bad_append":
                    # A base offset other than the log end, or an epoch going back, is refused by both.
                    shift = op[1]
                    epoch = memory.last_epoch - (1 if shift == 0 else 0)
                    for log in (memory, disk):
                        with pytest.raises(ValueError):
                            log.append(Batch(log.end_offset + shift, epoch, (b"z",)))
                elif kind == "read":
                    offset = start + op[1] % (end - start + 2)
                    assert disk.read(offset, op[2]) == memory.read(offset, op[2])
                elif kind == "truncate":
                    # Raft never truncates committed records, and a snapshot holds only committed ones.
                    floor = memory.latest_snapshot.end_offset if memory.latest_snapshot else 0
                    offset = floor + op[1] % (end - floor + 2)
                    assert disk.truncate_to(offset) == memory.truncate_to(offset)
                elif kind == "flush":
                    memory.flush()
                    disk.flush()
                    assert disk.flushed_end_offset == memory.flushed_end_offset == memory.end_offset
                elif kind == "snapshot":
                    # The state machine applies (and snapshots) only committed, hence flushed, records.
                    ends = [e for e in batch_ends(memory) if e <= memory.flushed_end_offset]
                    if not ends:
                        continue
                    snapshot_end = ends[op[1] % len(ends)]
                    snapshot_id = SnapshotId(snapshot_end, memory.epoch_at(snapshot_end - 1))
                    if memory.latest_snapshot is not None and snapshot_id <= memory.latest_snapshot:
                        continue  # the state machine only snapshots forward
                    for log in (memory, disk):
                        log.create_snapshot(snapshot_id, f"state@{snapshot_end}".encode())
                        if op[2]:
                            log.delete_before(snapshot_id)
                elif kind == "install_ahead":
                    snapshot_end = end + op[1]
                    snapshot_id = SnapshotId(snapshot_end, memory.last_epoch + op[2])
                    if not fetchable(memory, snapshot_id):
                        continue
                    max_epoch = max(max_epoch, snapshot_id.epoch)
                    for log in (memory, disk):
                        install(log, snapshot_id)
                elif kind == "install_inside":
                    if end - start < 2:
                        continue
                    snapshot_end = start + 1 + op[1] % (end - start - 1)
                    epoch = memory.epoch_at(snapshot_end - 1) + (0 if op[2] else 1)
                    if epoch > memory.last_epoch:
                        continue  # epochs never go back: a later append could not follow
                    snapshot_id = SnapshotId(snapshot_end, epoch)
                    if not fetchable(memory, snapshot_id):
                        continue
                    for log in (memory, disk):
                        install(log, snapshot_id)
                elif kind == "reopen":
                    if op[1]:
                        memory.flush()
                        disk.flush()
                    # What a crash loses; a fetch in progress is lost too.
                    disk.truncate_to(disk.flushed_end_offset)
                    for log in (memory, disk):
                        log.write_snapshot_chunk(SnapshotId(end + 7, 99), 0, b"half")
                    memory.crash()
                    disk.close()
                    disk = DiskRaftLog(path, segment_bytes=SEGMENT_BYTES)
                    # A snapshot whose prefix was not dropped yet: the open drops it.
                    latest = memory.latest_snapshot
                    if latest is not None and latest.end_offset > memory.start_offset:
                        memory.delete_before(latest)
                    assert not list(path.glob("*.part"))
                assert observe(disk, max_epoch) == observe(memory, max_epoch), op
        finally:
            disk.close()


# -- directed tests ----------------------------------------------------------


def fill(log: DiskRaftLog, batches: int, epoch_every: int = 5) -> None:
    for i in range(batches):
        log.append(Batch(log.end_offset, 1 + i // epoch_every, (b"x" * 20, b"y")))


def test_restart_keeps_the_start_offset_and_the_snapshot(tmp_path):
    log = DiskRaftLog(tmp_path, segment_bytes=200)
    fill(log, 10)
    log.flush()
    snapshot_id = SnapshotId(8, 1)
    log.create_snapshot(snapshot_id, b"state")
    log.delete_before(snapshot_id)
    assert not (tmp_path / f"{0:020d}.log").exists()  # whole segments below the start are gone
    log.close()
    again = DiskRaftLog(tmp_path, segment_bytes=200)
    assert (again.start_offset, again.end_offset, again.flushed_end_offset) == (8, 20, 20)
    assert again.latest_snapshot == snapshot_id
    assert again.epoch_at(7) == 1
    assert again.end_offset_for_epoch(1) == OffsetAndEpoch(10, 1)
    assert again.end_offset_for_epoch(0) == UNDEFINED_ANSWER
    assert again.read(0, 1 << 20)[0].base_offset == 8
    assert again.snapshot_data(snapshot_id) == b"state"
    again.close()


UNDEFINED_ANSWER = OffsetAndEpoch(-1, -1)


def test_files_are_named_as_kafka_names_them(tmp_path):
    snapshot_id = SnapshotId(8, 1)
    assert snapshot_file_name(snapshot_id) == "00000000000000000008-0000000001.checkpoint"
    assert partial_snapshot_file_name(snapshot_id) == "00000000000000000008-0000000001.checkpoint.part"
    log = DiskRaftLog(tmp_path)
    fill(log, 4)
    log.create_snapshot(snapshot_id, b"state")
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "00000000000000000008-0000000001.checkpoint" in names
    assert "00000000000000000000.log" in names


def test_an_unfinished_snapshot_fetch_is_removed_at_open(tmp_path):
    log = DiskRaftLog(tmp_path)
    log.write_snapshot_chunk(SnapshotId(5, 2), 0, b"half")
    assert [p.name for p in tmp_path.glob("*.part")] == [partial_snapshot_file_name(SnapshotId(5, 2))]
    log.close()
    again = DiskRaftLog(tmp_path)
    assert not list(tmp_path.glob("*.part"))
    assert again.latest_snapshot is None
    with pytest.raises(ValueError):
        again.commit_snapshot(SnapshotId(5, 2))
    again.close()


def test_only_the_newest_snapshots_are_kept(tmp_path):
    log = DiskRaftLog(tmp_path)
    fill(log, 6)
    for end in (2, 4, 6):
        log.create_snapshot(SnapshotId(end, 1), b"s")
    assert sorted(p.name for p in tmp_path.glob("*.checkpoint")) == [
        snapshot_file_name(SnapshotId(4, 1)),
        snapshot_file_name(SnapshotId(6, 1)),
    ]
    log.close()
    # A crash between a rename and the deletion of the oldest file: the open trims.
    (tmp_path / snapshot_file_name(SnapshotId(2, 1))).write_bytes(b"s")
    again = DiskRaftLog(tmp_path)
    assert not (tmp_path / snapshot_file_name(SnapshotId(2, 1))).exists()
    assert again.snapshot_data(SnapshotId(2, 1)) is None
    again.close()


def test_an_install_interrupted_before_the_log_was_cut_is_finished_at_open(tmp_path):
    log = DiskRaftLog(tmp_path, segment_bytes=200)
    fill(log, 10)  # 20 records, epochs 1 and 2
    log.close()
    # The fetched snapshot was renamed into place, then the process died.
    (tmp_path / snapshot_file_name(SnapshotId(30, 3))).write_bytes(b"ahead")
    again = DiskRaftLog(tmp_path, segment_bytes=200)
    assert (again.start_offset, again.end_offset, again.last_epoch) == (30, 30, 3)
    assert again.read(0, 1 << 20) == []
    assert again.epoch_at(29) == 3
    again.append(Batch(30, 3, (b"next",)))
    again.close()
    third = DiskRaftLog(tmp_path, segment_bytes=200)
    assert (third.start_offset, third.end_offset) == (30, 31)
    assert [b.records for b in third.read(30, 1 << 20)] == [(b"next",)]
    third.close()


def test_a_snapshot_inside_the_log_drops_the_prefix_at_open(tmp_path):
    log = DiskRaftLog(tmp_path, segment_bytes=200)
    fill(log, 10)
    log.create_snapshot(SnapshotId(12, 2), b"s")  # crash before delete_before
    log.close()
    again = DiskRaftLog(tmp_path, segment_bytes=200)
    assert (again.start_offset, again.end_offset) == (12, 20)
    assert again.read(0, 1 << 20)[0].base_offset == 12
    again.close()


def test_commit_snapshot_that_disagrees_restarts_the_log(tmp_path):
    log = DiskRaftLog(tmp_path, segment_bytes=200)
    fill(log, 10)
    snapshot_id = SnapshotId(12, 3)  # the log has epoch 2 at offset 11
    log.write_snapshot_chunk(snapshot_id, 0, b"abc")
    log.commit_snapshot(snapshot_id)
    assert (log.start_offset, log.end_offset, log.flushed_end_offset, log.last_epoch) == (12, 12, 12, 3)
    assert log.read_snapshot(snapshot_id, 1, 10) == (b"bc", 3)
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [f"{12:020d}.log"]
    log.close()


def test_batches_are_kafka_record_batches_with_the_raft_epoch(tmp_path):
    log = DiskRaftLog(tmp_path, clock_ms=lambda: 1_700_000_000_000)
    log.append(Batch(0, 3, (b"leader",), control=True))
    log.append(Batch(1, 3, (b"a", b"b")))
    log.append(Batch(3, 5, (b"",)))
    log.close()
    plain = PartitionLog(tmp_path, LogConfig())
    data = plain.read(0, 1 << 20)
    plain.close()
    headers = [header for _, _, header in iter_batches(data)]
    assert [(h.base_offset, h.partition_leader_epoch, h.is_control, h.max_timestamp_ms) for h in headers] == [
        (0, 3, True, 1_700_000_000_000),
        (1, 3, False, 1_700_000_000_000),
        (3, 5, False, 1_700_000_000_000),
    ]
    lines = list(dump_file(tmp_path / f"{0:020d}.log", DumpOptions()))
    assert sum("partitionLeaderEpoch: 3" in line for line in lines) == 2
    assert sum("partitionLeaderEpoch: 5" in line for line in lines) == 1


def test_a_large_log_is_indexed_per_batch(tmp_path):
    log = DiskRaftLog(tmp_path, segment_bytes=1 << 16)
    for i in range(2000):
        log.append(Batch(log.end_offset, 1 + i // 500, tuple(b"r%d" % j for j in range(10))))
    log.close()
    again = DiskRaftLog(tmp_path, segment_bytes=1 << 16)
    assert again.end_offset == 20_000
    assert len(again._bases) == 2000
    assert again._epoch_epochs == [1, 2, 3, 4]
    assert again._epoch_starts == [0, 5000, 10000, 15000]
    assert again.epoch_at(12_345) == 3
    assert again.end_offset_for_epoch(2) == OffsetAndEpoch(10_000, 2)
    batches = again.read(12_345, 100)
    assert [b.base_offset for b in batches] == [12_340]
    again.close()
