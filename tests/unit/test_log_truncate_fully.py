"""PartitionLog.truncate_fully_and_start_at: the log restarts, empty, at an offset."""

from __future__ import annotations

from protocol.records import build_batch, iter_batches
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, read_leader_epochs
from storage.log import LogConfig, PartitionLog

T0 = 1_700_000_000_000


def batch(count: int) -> bytes:
    return build_batch([(None, b"v" * 30, [], T0) for _ in range(count)])


def test_truncate_fully_drops_everything_and_restarts_at_the_offset(tmp_path):
    config = LogConfig(segment_bytes=200)
    log = PartitionLog(tmp_path, config, clock_ms=lambda: T0)
    for epoch in (1, 1, 2, 2, 3):
        log.append(batch(2), leader_epoch=epoch)
    assert len(log.segments) > 1
    log.truncate_fully_and_start_at(57)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (57, 57, 57)
    assert log.read(0, 1 << 20, upper_offset=100) == b""
    assert log.leader_epochs == []
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [f"{57:020d}.log"]
    assert read_leader_epochs(tmp_path / LEADER_EPOCH_CHECKPOINT) == []

    # Appends go on from the offset, with their epoch recorded afresh.
    result = log.append(batch(3), leader_epoch=4)
    assert (result.base_offset, result.last_offset) == (57, 59)
    assert log.leader_epochs == [(4, 57)]
    log.close()

    again = PartitionLog(tmp_path, config, clock_ms=lambda: T0)
    assert (again.log_start_offset, again.log_end_offset) == (57, 60)
    headers = [h for _, _, h in iter_batches(again.read(57, 1 << 20))]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(57, 4)]
    again.close()


def test_an_empty_restarted_log_reopens_at_the_offset(tmp_path):
    log = PartitionLog(tmp_path, LogConfig(), clock_ms=lambda: T0)
    log.append(batch(5), leader_epoch=1)
    log.truncate_fully_and_start_at(3)  # below the old end: still nothing kept
    log.close()
    again = PartitionLog(tmp_path, LogConfig(), clock_ms=lambda: T0)
    assert (again.log_start_offset, again.log_end_offset) == (3, 3)
    again.close()
