"""A log dir taken offline after a failed write (KIP-112): its logs are let go
without another write and no longer served, the other dir goes on, new
partitions avoid it, no checkpoint or clean-shutdown marker is written there,
and the next start recovers it as after a crash."""

from __future__ import annotations

from protocol.records import build_batch
from storage.checkpoint import CLEAN_SHUTDOWN_MARKER, RECOVERY_POINT_CHECKPOINT
from storage.log import LogConfig
from storage.manager import LogManager


def two_dir_manager(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    return dirs, LogManager(dirs)


def test_offline_dir_is_not_served_and_the_other_goes_on(tmp_path):
    (a, b), manager = two_dir_manager(tmp_path)
    for p in range(4):
        manager.get_or_create("t", p, LogConfig()).append(build_batch([(None, b"v%d" % p)]))
    in_a = [p for p in range(4) if manager.log_dir_of("t", p) == a]
    in_b = [p for p in range(4) if manager.log_dir_of("t", p) == b]
    assert in_a and in_b
    plogs = {p: manager.get("t", p) for p in in_a}
    assert sorted(manager.mark_offline(a)) == [("t", p) for p in in_a]
    assert manager.mark_offline(a) == []  # once only
    for p in in_a:
        assert manager.get("t", p) is None and manager.is_offline("t", p)
        assert plogs[p].closed
    for p in in_b:
        assert not manager.is_offline("t", p)
        manager.get("t", p).append(build_batch([(None, b"more")]))
    # A new partition goes to the online dir, whatever the counts say.
    for p in range(10, 14):
        manager.register("t", p, LogConfig())
        assert manager.log_dir_of("t", p) == b
    before = (a / RECOVERY_POINT_CHECKPOINT).read_bytes() if (a / RECOVERY_POINT_CHECKPOINT).exists() else None
    manager.close()
    assert (b / CLEAN_SHUTDOWN_MARKER).exists()
    assert not (a / CLEAN_SHUTDOWN_MARKER).exists()
    after = (a / RECOVERY_POINT_CHECKPOINT).read_bytes() if (a / RECOVERY_POINT_CHECKPOINT).exists() else None
    assert before == after  # nothing written to the offline dir


def test_the_next_start_recovers_the_offline_dir(tmp_path):
    (a, b), manager = two_dir_manager(tmp_path)
    for p in range(4):
        manager.get_or_create("t", p, LogConfig()).append(build_batch([(None, b"v%d" % p)]))
    in_a = [p for p in range(4) if manager.log_dir_of("t", p) == a]
    manager.mark_offline(a)
    manager.close()
    reopened = LogManager([a, b])
    assert not reopened.all_dirs_clean
    found = reopened.existing_partitions()
    for p in in_a:
        reopened.register("t", p, LogConfig(), found[("t", p)])
        plog = reopened.get("t", p)
        assert plog is not None and plog.log_end_offset == 1


def test_a_failed_checkpoint_write_reports_its_dir(tmp_path, monkeypatch):
    import storage.manager as manager_module

    (a, b), manager = two_dir_manager(tmp_path)
    for p in range(2):
        manager.get_or_create("t", p, LogConfig())
    failed = []
    manager.on_dir_failure = lambda directory, exc: failed.append(directory)
    real = manager_module.write_offsets

    def failing(path, offsets):
        if path.parent == a:
            raise OSError(5, "Input/output error")
        return real(path, offsets)

    monkeypatch.setattr(manager_module, "write_offsets", failing)
    manager.checkpoint()
    assert failed == [a]
    assert (b / RECOVERY_POINT_CHECKPOINT).exists()
