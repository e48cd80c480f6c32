"""Retention leaves the unlinking of deleted segments to a worker (storage.log.DeferredFileDeleter)."""

from __future__ import annotations

import threading
import time

from protocol.records import build_batch
from storage.deferred_io import DeferredFileDeleter
from storage.log import LogConfig, PartitionLog
from storage.manager import LogManager

BASE_MS = 1_700_000_000_000


def fill(plog: PartitionLog, count: int, value_bytes: int = 1000) -> None:
    for i in range(count):
        plog.append(build_batch([(None, b"x" * value_bytes, [], BASE_MS + i)]))


def segment_files(directory) -> set[str]:
    return {p.name for p in directory.iterdir() if p.suffix in (".log", ".index", ".timeindex", ".snapshot")}


def test_retention_unlinks_nothing_until_the_deleter_runs(tmp_path):
    plog = PartitionLog(tmp_path / "t-0", LogConfig(segment_bytes=4096))
    fill(plog, 40)
    plog.file_deleter = deleter = DeferredFileDeleter()
    before = segment_files(plog.directory)
    kept_bases = {s.base_offset for s in plog.segments}
    plog.config = LogConfig(segment_bytes=4096, retention_ms=1)

    deleted = plog.apply_retention(BASE_MS + 10_000_000)

    assert deleted == len(kept_bases) - 1 and len(plog.segments) == 1
    assert plog.log_start_offset == plog.segments[0].base_offset
    assert segment_files(plog.directory) == before  # nothing unlinked yet
    assert deleter.waiting > 0
    waiting = deleter.waiting
    assert deleter.run() == waiting
    assert deleter.run() == 0
    remaining = segment_files(plog.directory)
    stem = f"{plog.segments[0].base_offset:020d}"
    assert {name for name in remaining if name.endswith((".log", ".index", ".timeindex"))} == {
        f"{stem}.log", f"{stem}.index", f"{stem}.timeindex",
    }
    assert deleter.waiting == 0
    # The log still works: appends and reads after the deletion.
    result = plog.append(build_batch([(None, b"after", [], BASE_MS + 99)]))
    assert plog.read(result.base_offset, 1 << 20)
    plog.close()


def test_a_crash_before_the_unlink_brings_back_only_what_retention_drops_again(tmp_path):
    directory = tmp_path / "t-0"
    plog = PartitionLog(directory, LogConfig(segment_bytes=4096))
    fill(plog, 40)
    plog.flush()
    end = plog.log_end_offset
    plog.file_deleter = DeferredFileDeleter()
    plog.config = LogConfig(segment_bytes=4096, retention_ms=1)
    assert plog.apply_retention(BASE_MS + 10_000_000) > 0
    # "Crash": the files were never unlinked; reopen from disk as after kill -9.
    reopened = PartitionLog(directory, LogConfig(segment_bytes=4096, retention_ms=1), recovery_point=0)
    assert reopened.log_end_offset == end and len(reopened.segments) > 1
    segments_before = len(reopened.segments)
    assert reopened.apply_retention(BASE_MS + 10_000_000) == segments_before - 1
    assert len(reopened.segments) == 1 and reopened.log_end_offset == end
    reopened.close()


def test_a_file_waiting_to_be_unlinked_is_never_removed_after_its_name_is_reused(tmp_path):
    deleter = DeferredFileDeleter()
    directory = tmp_path / "t-0"
    directory.mkdir()
    stem = f"{0:020d}"
    (directory / f"{stem}.log").write_bytes(b"old")
    (directory / f"{stem}.index").write_bytes(b"old")
    deleter.defer(directory, [f"{stem}.log", f"{stem}.index"])
    # A new segment at the same base offset: reclaim unlinks the old files now...
    deleter.reclaim(directory, stem)
    assert not (directory / f"{stem}.log").exists()
    (directory / f"{stem}.log").write_bytes(b"new")
    # ...and the worker no longer knows them, so the new file survives it.
    assert deleter.run() == 0
    assert (directory / f"{stem}.log").read_bytes() == b"new"


def test_the_worker_and_the_owner_in_two_threads(tmp_path):
    """Segments deleted on one thread while another unlinks: every deleted file
    goes, every live file stays."""
    deleter = DeferredFileDeleter()
    directory = tmp_path / "d"
    directory.mkdir()
    names = [f"{i:020d}.log" for i in range(2000)]
    for name in names:
        (directory / name).write_bytes(b"")
    stop = threading.Event()
    unlinked = [0]

    def worker() -> None:
        deadline = time.monotonic() + 30
        while not stop.is_set() and time.monotonic() < deadline:
            unlinked[0] += deleter.run()
            time.sleep(0.001)
        unlinked[0] += deleter.run()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        for i in range(0, 2000, 2):  # every even one is deleted; odd ones stay
            deleter.defer(directory, [names[i]])
    finally:
        stop.set()
        thread.join(60)
    assert unlinked[0] == 1000
    assert sorted(p.name for p in directory.iterdir()) == names[1::2]


def test_the_manager_deletes_pending_files_at_close_and_forgets_deleted_logs(tmp_path):
    manager = LogManager([tmp_path])
    manager.register("t", 0, LogConfig(segment_bytes=4096))
    manager.register("u", 0, LogConfig(segment_bytes=4096))
    for topic in ("t", "u"):
        fill(manager.get(topic, 0), 40)
        manager.set_config(topic, 0, LogConfig(segment_bytes=4096, retention_ms=1))
    assert manager.apply_retention(BASE_MS + 10_000_000) > 0
    assert manager.file_deleter.waiting > 0
    manager.delete("u", 0)  # its directory goes with its files, by the directory deleter
    assert manager.delete_pending_dirs() == 1
    assert not (tmp_path / "u-0").exists()
    manager.close()
    assert manager.file_deleter.waiting == 0
    logs = [p for p in (tmp_path / "t-0").iterdir() if p.suffix == ".log"]
    assert len(logs) == 1


def partition_names(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_dir())


def test_a_deleted_partition_directory_is_removed_by_the_worker_not_at_the_delete(tmp_path):
    manager = LogManager([tmp_path])
    try:
        for partition in range(3):
            manager.register("gone", partition, LogConfig())
            fill(manager.get("gone", partition), 3)
        manager.register("never-made", 0, LogConfig())  # deleted before its files were made
        for partition in range(3):
            manager.delete("gone", partition)
        manager.delete("never-made", 0)
        assert manager.partitions() == [] and manager.get("gone", 0) is None
        assert partition_names(tmp_path) == ["gone-0", "gone-1", "gone-2"]  # still there: nothing removed yet
        assert manager.dir_deleter.waiting == 4
        assert manager.delete_pending_dirs() == 3
        assert partition_names(tmp_path) == [] and manager.dir_deleter.waiting == 0
    finally:
        manager.close()


def test_a_partition_made_again_before_the_worker_ran_starts_empty_and_keeps_its_directory(tmp_path):
    manager = LogManager([tmp_path])
    try:
        manager.register("again", 0, LogConfig())
        fill(manager.get("again", 0), 5)
        manager.delete("again", 0)
        manager.register("again", 0, LogConfig())  # the topic is created again
        renamed = [name for name in partition_names(tmp_path) if name != "again-0"]
        assert len(renamed) == 1 and renamed[0].startswith("again-0.") and renamed[0].endswith("-delete")
        new = manager.get("again", 0)
        assert new.log_end_offset == 0  # nothing of the deleted partition
        new.append(build_batch([(None, b"new", [], BASE_MS)]))
        assert manager.delete_pending_dirs() == 1  # the renamed old one only
        assert partition_names(tmp_path) == ["again-0"]
        assert manager.get("again", 0).log_end_offset == 1
    finally:
        manager.close()
    reopened = LogManager([tmp_path])
    try:
        found = reopened.existing_partitions()
        assert list(found) == [("again", 0)]
        reopened.register("again", 0, LogConfig(), found[("again", 0)])
        assert reopened.get("again", 0).log_end_offset == 1
    finally:
        reopened.close()


def test_directories_left_renamed_by_a_crash_are_removed_after_the_next_start(tmp_path):
    manager = LogManager([tmp_path])
    manager.register("crashed", 0, LogConfig())
    fill(manager.get("crashed", 0), 3)
    manager.register("crashed", 1, LogConfig())
    fill(manager.get("crashed", 1), 3)
    manager.delete("crashed", 0)
    manager.delete("crashed", 1)
    # The worker renamed one directory, then the process died (no close).
    manager.dir_deleter.reclaim(tmp_path / "crashed-0")
    for plog in manager.logs.values():
        plog.close()
    names = partition_names(tmp_path)
    assert "crashed-1" in names and any(name.endswith("-delete") for name in names)

    restarted = LogManager([tmp_path])
    try:
        # The renamed one is no partition; the other is still under its name,
        # and a start-up deletes it as a partition the metadata no longer has.
        found = restarted.existing_partitions()
        assert list(found) == [("crashed", 1)]
        restarted.delete("crashed", 1, found[("crashed", 1)])
        assert restarted.delete_pending_dirs() == 2
        assert partition_names(tmp_path) == []
    finally:
        restarted.close()


def test_the_worker_and_a_reclaim_never_remove_a_directory_made_after_the_deletion(tmp_path):
    manager = LogManager([tmp_path])
    stop = threading.Event()
    removed = [0]

    def worker() -> None:
        while not stop.is_set():
            removed[0] += manager.delete_pending_dirs()
            time.sleep(0.0005)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        for round_index in range(200):
            manager.register("race", 0, LogConfig())
            plog = manager.get("race", 0)
            plog.append(build_batch([(None, b"r%d" % round_index, [], BASE_MS)]))
            assert plog.directory.is_dir()
            manager.delete("race", 0)
        manager.register("race", 0, LogConfig())
        kept = manager.get("race", 0)
        kept.append(build_batch([(None, b"kept", [], BASE_MS)]))
    finally:
        stop.set()
        thread.join(60)
    removed[0] += manager.delete_pending_dirs()
    assert removed[0] == 200
    assert partition_names(tmp_path) == ["race-0"]
    assert kept.log_end_offset == 1 and kept.read(0, 1 << 20)
    manager.close()
