"""DiskRaftLog keeps MemoryRaftLog's contract, and its state survives a restart."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.raft.disk_log import DiskRaftLog, snapshot_file_name
from controller.raft.log import Batch, MemoryRaftLog, SnapshotId
from protocol.records import iter_batches
from storage.log import LogConfig, PartitionLog

records_strategy = st.lists(st.binary(max_size=12), min_size=1, max_size=4).map(tuple)

operation = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), records_strategy, st.booleans()),
    st.tuples(st.just("read"), st.integers(-1, 40), st.integers(1, 200)),
    st.tuples(st.just("truncate"), st.integers(0, 40)),
    st.tuples(st.just("flush")),
    st.tuples(st.just("snapshot"), st.integers(0, 40)),
    st.tuples(st.just("install"), st.integers(1, 60), st.integers(0, 3)),
    st.tuples(st.just("reopen")),
)


def observe(log) -> dict:
    end = log.end_offset
    start = log.start_offset
    epochs = {}
    for offset in range(start, end):
        epochs[offset] = log.epoch_at(offset)
    if log.latest_snapshot is not None and start > 0 and log.latest_snapshot.end_offset == start:
        epochs[start - 1] = log.epoch_at(start - 1)
    return {
        "start": start,
        "end": end,
        "last_epoch": log.last_epoch,
        "epochs": epochs,
        "for_epoch": [log.end_offset_for_epoch(e) for e in range(-1, 8)],
        "latest_snapshot": log.latest_snapshot,
        "snapshot": None if log.latest_snapshot is None else log.snapshot_data(log.latest_snapshot),
        "batches": log.read(start, 1 << 30),
    }


def batch_boundaries(log) -> list[int]:
    return [b.end_offset for b in log.read(log.start_offset, 1 << 30)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=25))
def test_disk_log_keeps_the_memory_log_contract(operations):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "__cluster_metadata-0"
        memory = MemoryRaftLog()
        disk = DiskRaftLog(path, segment_bytes=300)
        try:
            epoch = 1
            for op in operations:
                kind = op[0]
                if kind == "append":
                    epoch += op[1]
                    for log in (memory, disk):
                        log.append(Batch(log.end_offset, epoch, op[2], control=op[3]))
                elif kind == "read":
                    offset = max(op[1], memory.start_offset)
                    assert disk.read(offset, op[2]) == memory.read(offset, op[2])
                elif kind == "truncate":
                    assert disk.truncate_to(op[1]) == memory.truncate_to(op[1])
                elif kind == "flush":
                    memory.flush()
                    disk.flush()
                    assert disk.flushed_end_offset == memory.flushed_end_offset
                elif kind == "snapshot":
                    boundaries = [b for b in batch_boundaries(memory) if b <= op[1]]
                    if not boundaries:
                        continue
                    end = boundaries[-1]
                    snapshot_id = SnapshotId(end, memory.epoch_at(end - 1))
                    data = f"state@{end}".encode()
                    for log in (memory, disk):
                        log.create_snapshot(snapshot_id, data)
                        log.delete_before(snapshot_id)
                elif kind == "install":
                    if op[1] <= memory.start_offset:
                        # The core fetches only a snapshot that ends past its own log.
                        continue
                    snapshot_id = SnapshotId(op[1], max(epoch, memory.last_epoch) + op[2])
                    epoch = snapshot_id.epoch
                    for log in (memory, disk):
                        log.write_snapshot_chunk(snapshot_id, 0, b"ab")
                        log.write_snapshot_chunk(snapshot_id, 2, b"cd")
                        log.commit_snapshot(snapshot_id)
                elif kind == "reopen":
                    memory.flush()
                    disk.flush()
                    disk.close()
                    disk = DiskRaftLog(path, segment_bytes=300)
                    assert disk.flushed_end_offset == disk.end_offset
                assert observe(disk) == observe(memory), op
        finally:
            disk.close()


def test_restart_keeps_the_start_offset_and_the_snapshot(tmp_path):
    log = DiskRaftLog(tmp_path, segment_bytes=200)
    for i in range(10):
        log.append(Batch(log.end_offset, 1 + i // 5, (b"x" * 20, b"y")))
    log.flush()
    snapshot_id = SnapshotId(8, 1)
    log.create_snapshot(snapshot_id, b"state")
    log.delete_before(snapshot_id)
    log.close()
    again = DiskRaftLog(tmp_path, segment_bytes=200)
    assert (again.start_offset, again.end_offset, again.latest_snapshot) == (8, 20, snapshot_id)
    assert again.epoch_at(7) == 1
    assert again.read(0, 1 << 20)[0].base_offset == 8
    assert (tmp_path / snapshot_file_name(snapshot_id)).read_bytes() == b"state"
    assert snapshot_file_name(snapshot_id) == "00000000000000000008-0000000001.checkpoint"
    again.close()


def test_an_unfinished_snapshot_fetch_is_removed_at_open(tmp_path):
    log = DiskRaftLog(tmp_path)
    log.write_snapshot_chunk(SnapshotId(5, 2), 0, b"half")
    assert list(tmp_path.glob("*.part"))
    log.close()
    again = DiskRaftLog(tmp_path)
    assert not list(tmp_path.glob("*.part"))
    assert again.latest_snapshot is None
    again.close()


def test_batches_are_kafka_record_batches_with_the_raft_epoch(tmp_path):
    log = DiskRaftLog(tmp_path)
    log.append(Batch(0, 3, (b"leader",), control=True))
    log.append(Batch(1, 3, (b"a", b"b")))
    log.close()
    plain = PartitionLog(tmp_path, LogConfig())
    data = plain.read(0, 1 << 20)
    headers = [header for _, _, header in iter_batches(data)]
    plain.close()
    assert [(h.base_offset, h.partition_leader_epoch, h.is_control) for h in headers] == [(0, 3, True), (1, 3, False)]
