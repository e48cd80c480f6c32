"""Retention by time with an injected clock, leader-epoch checkpoints, several log.dirs."""

from __future__ import annotations

from pathlib import Path

from protocol.records import build_batch
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, read_leader_epochs
from storage.log import LogConfig, PartitionLog
from storage.manager import LogManager

T0 = 1_700_000_000_000


class Clock:
    def __init__(self, now_ms: int):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def batch(ts: int, n: int = 3) -> bytes:
    return build_batch([(b"k", b"v" * 50, [], ts + i) for i in range(n)])


def test_retention_by_time_deletes_only_expired_closed_segments(tmp_path):
    clock = Clock(T0)
    config = LogConfig(segment_bytes=400, retention_ms=60_000)
    plog = PartitionLog(tmp_path / "t-0", config, clock_ms=clock)
    for i in range(12):
        clock.now_ms = T0 + i * 10_000
        plog.append(batch(clock.now_ms))
    bases_before = [s.base_offset for s in plog.segments]
    assert len(bases_before) >= 4
    # Nothing is older than 60 s yet relative to "now" at the last append.
    assert plog.apply_retention(T0 + 60_000) == 0
    deleted = plog.apply_retention(T0 + 100_000)
    assert deleted >= 1
    remaining = plog.segments
    assert all(T0 + 100_000 - s.max_timestamp_ms <= 60_000 for s in remaining[:-1])
    assert plog.log_start_offset == remaining[0].base_offset
    for base in bases_before[:deleted]:
        assert not (tmp_path / "t-0" / f"{base:020d}.log").exists()
    # Far in the future everything closed expires, never the active segment.
    plog.apply_retention(T0 + 10**9)
    assert len(plog.segments) == 1 and plog.segments[0].base_offset == bases_before[-1]
    assert plog.log_end_offset == 36
    plog.close()


def test_retention_disabled_with_minus_one(tmp_path):
    plog = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=400, retention_ms=-1))
    for i in range(10):
        plog.append(batch(T0 + i))
    segments = len(plog.segments)
    assert plog.apply_retention(T0 + 10**12) == 0
    assert len(plog.segments) == segments
    plog.close()


def test_compact_only_topics_are_not_deleted_by_time(tmp_path):
    plog = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=400, retention_ms=1, cleanup_policy="compact"))
    for i in range(10):
        plog.append(batch(T0 + i))
    assert plog.apply_retention(T0 + 10**9) == 0
    plog.close()


def test_leader_epoch_checkpoint_records_each_epoch_start(tmp_path):
    plog = PartitionLog(tmp_path / "t-0", LogConfig())
    plog.append(batch(T0), leader_epoch=0)
    plog.append(batch(T0), leader_epoch=0)
    plog.append(batch(T0), leader_epoch=3)
    path = tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT
    assert path.read_text() == "0\n2\n0 0\n3 6\n"
    assert read_leader_epochs(path) == [(0, 0), (3, 6)]
    assert plog.end_offset_for_epoch(0) == (0, 6)
    assert plog.end_offset_for_epoch(2) == (0, 6)
    assert plog.end_offset_for_epoch(3) == (3, 9)
    assert plog.end_offset_for_epoch(-1) == (-1, -1)
    plog.truncate_to(6)
    assert read_leader_epochs(path) == [(0, 0)]
    plog.close()
    reopened = PartitionLog(tmp_path / "t-0", LogConfig())
    assert reopened.leader_epochs == [(0, 0)]
    reopened.close()


def test_new_partitions_spread_over_several_log_dirs(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    manager = LogManager(dirs)
    for p in range(9):
        manager.get_or_create("spread", p, LogConfig()).append(batch(T0))
    counts = {d.name: len(list(d.glob("spread-*"))) for d in dirs}
    assert counts == {"a": 3, "b": 3, "c": 3}
    manager.close()
    reopened = LogManager(dirs)
    found = reopened.existing_partitions()
    assert sorted(p for (_, p) in found) == list(range(9))
    for (topic, p), path in found.items():
        reopened.register(topic, p, LogConfig(), path)
        assert reopened.get(topic, p).log_end_offset == 3
    # Each directory checkpoints its own partitions.
    for d in dirs:
        text = Path(d / "recovery-point-offset-checkpoint").read_text().splitlines()
        assert text[:2] == ["0", "3"]
    reopened.close()
