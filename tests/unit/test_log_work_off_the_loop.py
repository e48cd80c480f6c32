"""File work of new partitions and of offset checkpoints, taken off the event
loop: a worker thread makes new logs' files (storage.log_loader.make_new_log_files)
and writes checkpoints (LogManager.checkpoint_writer); the owner only opens and copies."""

from __future__ import annotations

import threading

from protocol.records import build_batch
from storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offsets,
)
from storage.log import LogConfig, PartitionLog
from storage.log_loader import make_new_log_files
from storage.manager import LogManager

BASE_MS = 1_700_000_000_000


def files_of(directory) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in directory.iterdir()}


def test_made_files_are_those_a_new_log_makes_and_open_as_a_new_log(tmp_path):
    index_bytes = 4096
    opened_new = PartitionLog(tmp_path / "plain-0", LogConfig(segment_index_bytes=index_bytes))
    assert make_new_log_files(tmp_path / "made-0", index_bytes)
    assert files_of(tmp_path / "made-0") == files_of(tmp_path / "plain-0")
    assert not make_new_log_files(tmp_path / "made-0", index_bytes)  # there already: left alone
    made = PartitionLog(tmp_path / "made-0", LogConfig(segment_index_bytes=index_bytes))
    assert (made.log_end_offset, made.log_start_offset, made.recovery_point) == (0, 0, 0)
    assert [s.base_offset for s in made.segments] == [0]
    made.append(build_batch([(None, b"v", [], BASE_MS)]))
    assert made.read(0, 1 << 20)
    for plog in (made, opened_new):
        plog.close()


def test_making_files_where_the_log_was_opened_meanwhile_loses_nothing(tmp_path):
    plog = PartitionLog(tmp_path / "busy-0", LogConfig())
    plog.append(build_batch([(None, b"kept", [], BASE_MS)]))
    before = files_of(tmp_path / "busy-0")
    assert not make_new_log_files(tmp_path / "busy-0", LogConfig().segment_index_bytes)
    assert files_of(tmp_path / "busy-0") == before
    assert plog.log_end_offset == 1
    plog.close()


def test_chunked_creation_serves_every_partition_and_survives_a_restart(tmp_path):
    manager = LogManager([tmp_path])
    try:
        for partition in range(10):
            manager.register("chunked", partition, LogConfig())
        manager.get("chunked", 7).append(build_batch([(None, b"early", [], BASE_MS)]))  # used before its turn
        opened = 0
        while manager.creations_pending:
            batch = manager.next_creations(4)
            assert 0 < len(batch) <= 4
            LogManager.make_log_files(batch)  # a worker thread's part
            opened += sum(manager.open_created_steps(batch))
        assert opened == 9 and manager.open_count == 10
        for partition in range(10):
            manager.get("chunked", partition).append(build_batch([(None, b"p%d" % partition, [], BASE_MS)]))
        assert manager.get("chunked", 7).log_end_offset == 2
    finally:
        manager.close()
    reopened = LogManager([tmp_path])
    try:
        found = reopened.existing_partitions()
        assert sorted(found) == [("chunked", p) for p in range(10)]
        for key, path in found.items():
            reopened.register(*key, LogConfig(), path)
        assert [reopened.get("chunked", p).log_end_offset for p in range(10)] == [1] * 7 + [2] + [1] * 2
    finally:
        reopened.close()


def test_a_partition_deleted_while_its_files_were_made_leaves_no_directory(tmp_path):
    manager = LogManager([tmp_path])
    try:
        for partition in range(3):
            manager.register("brief", partition, LogConfig())
        batch = manager.next_creations(10)
        manager.delete("brief", 1)  # on the loop, while the worker works
        assert manager.delete_pending_dirs() == 0  # nothing there yet to remove
        LogManager.make_log_files(batch)  # the worker made brief-1 after all
        assert sum(manager.open_created_steps(batch)) == 2
        assert manager.dir_deleter.waiting == 1  # handed back to the directory deleter
        assert manager.delete_pending_dirs() == 1
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["brief-0", "brief-2"]
    finally:
        manager.close()


def test_checkpoints_are_taken_now_written_later_and_never_overwritten_by_an_older_take(tmp_path):
    manager = LogManager([tmp_path])
    try:
        manager.register("cp", 0, LogConfig())
        plog = manager.get("cp", 0)
        plog.append(build_batch([(None, b"a", [], BASE_MS)]))
        plog.flush()
        for _ in manager.take_checkpoint_steps():
            pass
        older = manager.checkpoint_writer()
        plog.append(build_batch([(None, b"b", [], BASE_MS)]))
        plog.flush()
        plog.high_watermark = 2
        for _ in manager.take_checkpoint_steps():
            pass
        newer = manager.checkpoint_writer()
        assert not (tmp_path / RECOVERY_POINT_CHECKPOINT).exists() or read_offsets(tmp_path / RECOVERY_POINT_CHECKPOINT) == {}
        writer = threading.Thread(target=newer)  # as from a worker thread
        writer.start()
        writer.join(30)
        older()  # finished last: writes nothing
        assert read_offsets(tmp_path / RECOVERY_POINT_CHECKPOINT) == {("cp", 0): 2}
        assert read_offsets(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {("cp", 0): 0}
        assert read_offsets(tmp_path / REPLICATION_OFFSET_CHECKPOINT) == {("cp", 0): 2}
        stale_high_watermarks = manager.high_watermark_checkpoint()  # nothing changed since: None
        assert stale_high_watermarks is None
    finally:
        manager.close()


def test_a_partition_deleted_between_a_take_and_its_write_is_not_written(tmp_path):
    # Made again under its name meanwhile, it must not find the old log's
    # offsets at its next start (a recovery point above its end above all).
    manager = LogManager([tmp_path])
    try:
        manager.register("gone", 0, LogConfig())
        manager.register("kept", 0, LogConfig())
        for key in (("gone", 0), ("kept", 0)):
            plog = manager.get(*key)
            plog.append(build_batch([(None, b"a", [], BASE_MS)] * 5))
            plog.flush()
        for _ in manager.take_checkpoint_steps():
            pass
        write = manager.checkpoint_writer()
        manager.delete("gone", 0)
        manager.register("gone", 0, LogConfig())
        write()
        assert read_offsets(tmp_path / RECOVERY_POINT_CHECKPOINT) == {("kept", 0): 5}
    finally:
        manager.close()


def test_a_start_after_a_crash_syncs_the_recovered_logs_once_then_moves_their_recovery_points(tmp_path):
    from storage import deferred_io

    manager = LogManager([tmp_path])
    for partition in range(3):
        manager.register("crash", partition, LogConfig())
        for _ in range(partition + 1):
            manager.get("crash", partition).append(build_batch([(None, b"v", [], BASE_MS)]))
    for plog in manager.logs.values():  # a kill -9: nothing closed, no clean-shutdown marker
        plog.flush(fsync=False)

    restarted = LogManager([tmp_path])
    try:
        assert not restarted.all_dirs_clean
        deferred = restarted.begin_deferred_recovery_syncs()
        assert deferred == deferred_io.file_system_sync_available()
        for key, path in restarted.existing_partitions().items():
            restarted.register(*key, LogConfig(), path)  # recovered here
        logs = [restarted.get("crash", p) for p in range(3)]
        assert [plog.log_end_offset for plog in logs] == [1, 2, 3]
        if deferred:
            assert [plog.recovery_point for plog in logs] == [0, 0, 0]  # nothing synced yet
        restarted.recovered_logs_sync()()
        assert restarted.end_deferred_recovery_syncs(synced=True) == (3 if deferred else 0)
        assert [plog.recovery_point for plog in logs] == [1, 2, 3]
        # From now on a log opened after a crash syncs its own recovery.
        assert not restarted.defer_recovery_syncs
    finally:
        restarted.close()


def test_a_failed_sync_after_recovery_moves_no_recovery_point(tmp_path):
    manager = LogManager([tmp_path])
    manager.register("unsynced", 0, LogConfig())
    manager.get("unsynced", 0).append(build_batch([(None, b"v", [], BASE_MS)]))
    manager.get("unsynced", 0).flush(fsync=False)

    restarted = LogManager([tmp_path])
    try:
        restarted.defer_recovery_syncs = True  # as begin_deferred_recovery_syncs where syncfs exists
        for key, path in restarted.existing_partitions().items():
            restarted.register(*key, LogConfig(), path)
        plog = restarted.get("unsynced", 0)
        assert plog.recovery_point == 0 and plog.log_end_offset == 1
        assert restarted.end_deferred_recovery_syncs(synced=False) == 1
        assert plog.recovery_point == 0
    finally:
        restarted.close()
