"""Pure helpers behind the cluster admin handlers: the epoch end offsets
OffsetForLeaderEpoch answers (Kafka's LeaderEpochFileCache.endOffsetFor), the
partition sizes DescribeLogDirs reports without opening logs, and the
authorized-operations bitfields.
"""

from __future__ import annotations

import pytest

from broker.security.authorized_operations import CLUSTER_OPERATIONS, TOPIC_OPERATIONS, bitfield
from protocol.records import build_batch
from storage.log import LogConfig, epoch_end_offset
from storage.manager import LogManager


def end_offset(epochs, requested, *, current, start=0, end):
    return epoch_end_offset(epochs, requested, current_epoch=current, log_start_offset=start, log_end_offset=end)


@pytest.mark.parametrize(
    "requested, expected",
    [
        (-1, (-1, -1)),  # undefined
        (0, (0, 6)),  # ends where epoch 3 starts
        (2, (0, 6)),  # never written: the largest epoch below it, ending at the next one
        (3, (3, 9)),  # the latest epoch ends at the log end
        (4, (-1, -1)),  # newer than any known epoch
    ],
)
def test_epoch_end_offsets(requested, expected):
    assert end_offset([(0, 0), (3, 6)], requested, current=3, end=9) == expected


def test_the_current_epoch_is_known_before_it_writes():
    # A leader records its epoch at the log end when it takes over (Kafka's Partition.makeLeader).
    assert end_offset([], 0, current=0, end=0) == (0, 0)
    assert end_offset([(0, 0)], 2, current=2, end=7) == (2, 7)
    assert end_offset([(0, 0)], 0, current=2, end=7) == (0, 7)
    assert end_offset([(0, 0)], 1, current=2, end=7) == (0, 7)


def test_an_epoch_below_every_known_one_answers_itself_with_the_first_start():
    assert end_offset([(2, 5), (4, 9)], 1, current=4, start=5, end=12) == (1, 5)


def test_epochs_below_the_log_start_start_at_it():
    epochs = [(0, 0), (1, 4), (2, 8)]
    # The log start moved to 6: epoch 1 now starts there, epoch 0 is gone.
    assert end_offset(epochs, 0, current=2, start=6, end=10) == (0, 6)
    assert end_offset(epochs, 1, current=2, start=6, end=10) == (1, 8)
    assert end_offset(epochs, 2, current=2, start=6, end=10) == (2, 10)


def test_sizes_and_directories_without_opening_logs(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs)
    for partition in range(4):
        manager.register("t", partition, LogConfig())
        manager.get("t", partition)  # a new partition's files are made on first use
    plog = manager.get("t", 1)
    for i in range(3):
        plog.append(build_batch([(None, b"x" * 200, [], 1_700_000_000_000 + i)]))
    size = plog.size_bytes
    assert size > 600 and manager.size_bytes("t", 1) == size and manager.size_bytes("t", 0) == 0
    placed = {p: manager.log_dir_of("t", p) for p in range(4)}
    assert set(placed.values()) == set(dirs)
    manager.close()

    reopened = LogManager(dirs)  # after a clean shutdown logs are opened on first use
    try:
        for (topic, partition), path in reopened.existing_partitions().items():
            reopened.register(topic, partition, LogConfig(), path)
        assert reopened.size_bytes("t", 1) == size
        assert reopened.size_bytes("t", 2) == 0
        assert {p: reopened.log_dir_of("t", p) for p in range(4)} == placed
        assert reopened.logs == {}  # measured by stat: nothing was opened
        assert reopened.size_bytes("t", 9) is None and reopened.log_dir_of("other", 0) is None
    finally:
        reopened.close()


def test_authorized_operations_bitfields():
    assert bitfield([]) == 0 and bitfield([3, 3]) == 8
    # CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
    assert CLUSTER_OPERATIONS == 0b1_1111_1010_0000
    # READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11.
    assert TOPIC_OPERATIONS == 0b1101_1111_1000


def test_a_new_partition_gets_its_files_on_first_use(tmp_path):
    manager = LogManager([tmp_path])
    try:
        manager.register("fresh", 0, LogConfig())
        directory = tmp_path / "fresh-0"
        assert not directory.exists() and manager.logs == {}
        assert manager.size_bytes("fresh", 0) == 0 and manager.log_dir_of("fresh", 0) == tmp_path
        assert list(manager.all_logs()) == []  # retention and the cleaner have nothing to open
        plog = manager.get("fresh", 0)
        assert directory.is_dir() and plog.log_end_offset == 0 and plog.recovery_point == 0
        assert sorted(p.name for p in directory.iterdir()) == [
            "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
        ]
        plog.append(build_batch([(None, b"v", [], 1_700_000_000_000)]))
        assert [key for key, _ in manager.all_logs()] == [("fresh", 0)]
    finally:
        manager.close()
    reopened = LogManager([tmp_path])
    try:
        reopened.register("fresh", 0, LogConfig(), tmp_path / "fresh-0")
        assert reopened.get("fresh", 0).log_end_offset == 1
    finally:
        reopened.close()


def test_new_partitions_get_their_files_in_steps(tmp_path):
    manager = LogManager([tmp_path])
    try:
        for partition in range(5):
            manager.register("steps", partition, LogConfig())
        manager.get("steps", 3)  # used first: made at once
        manager.delete("steps", 4)  # deleted before its turn: never made
        assert manager.creations_pending == 3
        steps = manager.create_pending_steps()
        assert next(steps) == 1 and (tmp_path / "steps-0").is_dir() and not (tmp_path / "steps-1").exists()
        assert sum(steps) == 2
        assert manager.creations_pending == 0
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("steps")) == [f"steps-{p}" for p in range(4)]
    finally:
        manager.close()
