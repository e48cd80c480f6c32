"""A clean shutdown of many logs syncs whole file systems: the logs only write
(their producer snapshots, index pages) and one syncfs per file system makes it
durable before any log counts as flushed and before a directory is marked
clean. A failed sync leaves the directories unclean, so the next start
recovers. Fewer logs, or a kernel without syncfs error reports: fsync per log."""

from __future__ import annotations

import time

import pytest

import storage.manager as manager_module
from protocol.records import build_batch
from storage.checkpoint import CLEAN_SHUTDOWN_MARKER
from storage.deferred_io import PendingFlush, file_system_sync_available
from storage.log import LogConfig
from storage.manager import LogManager
from storage.producer_snapshot import SNAPSHOT_SUFFIX

LOGS = 6


def batch(pid: int, seq: int):
    # Timestamped now: producers older than transactional.id.expiration.ms are not loaded.
    now_ms = int(time.time() * 1000)
    return build_batch([(b"k", b"v%d" % seq, [], now_ms)], producer_id=pid, producer_epoch=0, base_sequence=seq)


def filled_manager(log_dir):
    manager = LogManager([log_dir])
    for p in range(LOGS):
        plog = manager.get_or_create("t", p, LogConfig())
        plog.append(batch(100 + p, 0))
        plog.append(batch(100 + p, 1))
    return manager


@pytest.fixture
def whole_file_system(monkeypatch):
    if not file_system_sync_available():
        pytest.skip("this kernel's syncfs does not report write-back errors (Linux 5.8+): logs are fsynced one by one")
    monkeypatch.setattr(manager_module, "FILE_SYSTEM_SYNC_MIN_LOGS", 1)
    calls = []
    real = manager_module.sync_file_systems

    def recording(directories):
        log_dir = directories[0]
        calls.append(
            {
                "snapshots": len(list(log_dir.glob(f"*/*{SNAPSHOT_SUFFIX}"))),
                "marked_clean": (log_dir / CLEAN_SHUTDOWN_MARKER).exists(),
            }
        )
        real(directories)

    monkeypatch.setattr(manager_module, "sync_file_systems", recording)

    def no_fsync_per_log(self):
        raise AssertionError("a log was fsynced on its own")

    monkeypatch.setattr(PendingFlush, "sync", no_fsync_per_log)
    return calls


def fail_the_next_sync(monkeypatch):
    real = manager_module.sync_file_systems

    def failing(directories):
        monkeypatch.setattr(manager_module, "sync_file_systems", real)  # this time only
        raise OSError(5, "syncfs: Input/output error")

    monkeypatch.setattr(manager_module, "sync_file_systems", failing)


def test_one_sync_after_the_writes_and_before_the_clean_mark(tmp_path, whole_file_system):
    log_dir = tmp_path / "logs"
    manager = filled_manager(log_dir)
    manager.close()
    assert whole_file_system == [{"snapshots": LOGS, "marked_clean": False}]
    assert (log_dir / CLEAN_SHUTDOWN_MARKER).exists()
    reopened = LogManager([log_dir])
    assert reopened.all_dirs_clean
    for p in range(LOGS):
        plog = reopened.get_or_create("t", p, LogConfig())
        assert plog.log_end_offset == 2
        assert plog.recovery_point == 2
        assert 100 + p in plog.producer_state.producers  # from the snapshot, not a replay
    reopened.close()


def test_a_failed_sync_marks_nothing_clean_and_the_next_start_recovers(tmp_path, whole_file_system, monkeypatch):
    log_dir = tmp_path / "logs"
    manager = filled_manager(log_dir)

    fail_the_next_sync(monkeypatch)
    with pytest.raises(OSError):
        manager.close()
    assert not (log_dir / CLEAN_SHUTDOWN_MARKER).exists()
    reopened = LogManager([log_dir])
    assert not reopened.all_dirs_clean
    for p in range(LOGS):
        plog = reopened.get_or_create("t", p, LogConfig())
        assert plog.log_end_offset == 2
        assert 100 + p in plog.producer_state.producers
    reopened.close()


def test_a_torn_snapshot_from_an_unsynced_shutdown_is_ignored(tmp_path, whole_file_system, monkeypatch):
    # A crash between the unsynced snapshot write and the sync may leave the
    # file empty: the log ignores it and replays its batches.
    log_dir = tmp_path / "logs"
    manager = filled_manager(log_dir)
    fail_the_next_sync(monkeypatch)
    with pytest.raises(OSError):
        manager.close()
    for snapshot in log_dir.glob(f"*/*{SNAPSHOT_SUFFIX}"):
        snapshot.write_bytes(b"")
    reopened = LogManager([log_dir])
    for p in range(LOGS):
        plog = reopened.get_or_create("t", p, LogConfig())
        assert 100 + p in plog.producer_state.producers
        assert plog.producer_state.producers[100 + p].batches[-1].last_sequence == 1
    reopened.close()


def test_few_logs_are_fsynced_one_by_one(tmp_path, monkeypatch):
    def not_expected(directories):
        raise AssertionError("a file system sync for a handful of logs")

    monkeypatch.setattr(manager_module, "sync_file_systems", not_expected)
    log_dir = tmp_path / "logs"
    filled_manager(log_dir).close()
    assert (log_dir / CLEAN_SHUTDOWN_MARKER).exists()


def plain_batch(size: int = 10):
    return build_batch([(b"k", b"p" * size, [], int(time.time() * 1000))])


def test_no_snapshot_for_a_small_log_without_producers(tmp_path):
    # Empty producer state over a few plain batches: the next open replays them
    # (cheaper than creating a file per partition at every shutdown).
    from storage.log import PartitionLog

    log_dir = tmp_path / "plain-0"
    plog = PartitionLog(log_dir, LogConfig())
    for _ in range(5):
        plog.append(plain_batch())
    plog.close()
    assert list(log_dir.glob(f"*{SNAPSHOT_SUFFIX}")) == []
    reopened = PartitionLog(log_dir, LogConfig(), recovery_point=5, clean_shutdown=True)
    assert reopened.log_end_offset == 5 and len(reopened.producer_state) == 0
    reopened.append(build_batch([(b"k", b"v", [], int(time.time() * 1000))], producer_id=7, producer_epoch=0, base_sequence=0))
    reopened.close()  # now there is producer state to keep
    assert [p.name for p in log_dir.glob(f"*{SNAPSHOT_SUFFIX}")] == [f"{6:020d}{SNAPSHOT_SUFFIX}"]
    last = PartitionLog(log_dir, LogConfig(), recovery_point=6, clean_shutdown=True)
    assert list(last.producer_state.producers) == [7]
    last.close()


def test_a_snapshot_for_a_long_tail_even_without_producers(tmp_path):
    from storage.log import PartitionLog
    from storage.log_loader import SNAPSHOT_TAIL_MIN_BYTES

    log_dir = tmp_path / "plain-0"
    plog = PartitionLog(log_dir, LogConfig())
    count = SNAPSHOT_TAIL_MIN_BYTES // 1000 + 1
    for _ in range(count):
        plog.append(plain_batch(1000))
    plog.close()
    assert [p.name for p in log_dir.glob(f"*{SNAPSHOT_SUFFIX}")] == [f"{count:020d}{SNAPSHOT_SUFFIX}"]
