"""broker.coordinators.shell, what the group and transaction coordinators share:
following the leadership of their internal topic's partitions, the replay with
its guards (a batch that cannot be decoded, a read that makes no progress),
who coordinates, and writes refused unless the partition is loaded here."""

from __future__ import annotations

import asyncio
import logging
import uuid
from types import SimpleNamespace

import pytest

from broker.coordinators.shell import CoordinatorShell, InternalTopic
from controller.metadata.image import MetadataImage, PartitionImage, TopicImage
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import ControlType, build_batch, build_control_batch
from storage.log import LogConfig, PartitionLog

TOPIC = "__internal_state"
NODE = 1
OTHER = 2


class Owner:
    """A coordinator that records what the shell hands it."""

    def __init__(self):
        self.records: list[tuple[int, int, bytes, bytes | None]] = []
        self.markers: list[tuple[int, int, bool]] = []
        self.events: list[tuple[str, int, int]] = []

    def replay_record(self, partition, producer_id, key, value):
        if bytes(key) == b"unreadable":
            raise ProtocolError("no such record type")
        self.records.append((partition, producer_id, bytes(key), None if value is None else bytes(value)))

    def replay_marker(self, partition, producer_id, commit):
        self.markers.append((partition, producer_id, commit))

    def partition_loaded(self, partition, epoch, records):
        self.events.append(("loaded", partition, epoch))

    def partition_unloaded(self, partition, epoch):
        self.events.append(("unloaded", partition, epoch))


def image(leaders: dict[int, tuple[int, int]]) -> MetadataImage:
    """``leaders``: partition -> (leader, leader epoch)."""
    partitions = {p: PartitionImage(p, (NODE, OTHER), (NODE, OTHER), leader, epoch, epoch) for p, (leader, epoch) in leaders.items()}
    return MetadataImage(topics={TOPIC: TopicImage(TOPIC, uuid.uuid5(uuid.NAMESPACE_DNS, TOPIC), partitions)})


class Broker:
    def __init__(self, tmp_path, leaders):
        self.node_id = NODE
        self.image = image(leaders)
        self.logs = {p: PartitionLog(tmp_path / f"{TOPIC}-{p}", LogConfig()) for p in leaders}
        self.replicas = SimpleNamespace(may_lead=True, is_superseded=lambda key, epoch: False, leader_for=lambda topic, p: None)
        self.lease = True
        self.lifecycle = SimpleNamespace(may_serve_as_leader=lambda: self.lease)

    def partition_log(self, topic, partition):
        return self.logs.get(partition) if topic == TOPIC else None

    def close(self):
        for plog in self.logs.values():
            plog.close()


@pytest.fixture
def broker(tmp_path):
    broker = Broker(tmp_path, {0: (NODE, 3), 1: (OTHER, 4)})
    yield broker
    broker.close()


def shell_for(broker, owner) -> CoordinatorShell:
    topic = InternalTopic(TOPIC, num_partitions=2, replication_factor=2, replication_factor_config="internal.replication.factor")
    return CoordinatorShell(broker, topic, owner, logging.getLogger("test.coordinator_shell"))


def append(plog: PartitionLog, data_for_offset) -> None:
    plog.append_as_follower(data_for_offset(plog.log_end_offset))


def records_batch(*keys: bytes, producer_id: int = -1):
    return lambda offset: build_batch(
        [(k, b"v", [], 0) for k in keys], base_offset=offset, producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1, is_transactional=producer_id >= 0, partition_leader_epoch=0,
    )  # fmt: skip


def test_a_partition_led_here_is_replayed_and_loaded_and_unloaded_when_leadership_moves(broker):
    owner = Owner()
    plog = broker.logs[0]
    append(plog, records_batch(b"a", b"b"))
    append(plog, records_batch(b"c", producer_id=9))
    append(plog, lambda offset: build_control_batch(ControlType.COMMIT, producer_id=9, producer_epoch=0, coordinator_epoch=0, timestamp_ms=0, base_offset=offset, partition_leader_epoch=0))  # fmt: skip
    shell = shell_for(broker, owner)
    assert shell.not_coordinator(0) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    shell.follow_leadership()
    assert owner.records == [(0, -1, b"a", b"v"), (0, -1, b"b", b"v"), (0, 9, b"c", b"v")]
    assert owner.markers == [(0, 9, True)]
    assert owner.events == [("loaded", 0, 3)] and shell.loaded == {0: 3}
    assert shell.not_coordinator(0) is None
    assert shell.not_coordinator(1) == ErrorCode.NOT_COORDINATOR
    broker.lease = False
    assert shell.not_coordinator(0) == ErrorCode.NOT_COORDINATOR
    # A new leader epoch here: unloaded and loaded again; then led elsewhere: unloaded.
    broker.image = image({0: (NODE, 5), 1: (OTHER, 4)})
    shell.follow_leadership()
    assert owner.events[1:] == [("unloaded", 0, 3), ("loaded", 0, 5)]
    broker.image = image({0: (OTHER, 6), 1: (OTHER, 4)})
    shell.follow_leadership()
    assert owner.events[3:] == [("unloaded", 0, 5)] and shell.loaded == {}
    broker.image = image({0: (-1, 7), 1: (OTHER, 4)})
    assert shell.leader_of(0) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)


def test_a_batch_that_cannot_be_decoded_is_skipped_and_the_rest_replayed(broker):
    plog = broker.logs[0]
    append(plog, records_batch(b"before"))
    append(plog, records_batch(b"damaged-1", b"damaged-2"))
    append(plog, records_batch(b"after"))
    plog.flush(fsync=False)
    # Flip the last byte of the middle batch (its last record's value) on disk: its CRC no longer matches.
    [segment_file] = sorted(plog.directory.glob("*.log"))
    contents = bytearray(segment_file.read_bytes())
    first = len(records_batch(b"before")(0))
    middle = len(records_batch(b"damaged-1", b"damaged-2")(1))
    contents[first + middle - 1] ^= 0xFF
    segment_file.write_bytes(bytes(contents))
    owner = Owner()
    count = shell_for(broker, owner).replay(0, plog)
    assert [key for _, _, key, _ in owner.records] == [b"before", b"after"]
    assert count == 2


def test_a_record_the_coordinator_cannot_read_is_skipped(broker):
    plog = broker.logs[0]
    append(plog, records_batch(b"a", b"unreadable", b"b"))
    owner = Owner()
    assert shell_for(broker, owner).replay(0, plog) == 3
    assert [key for _, _, key, _ in owner.records] == [b"a", b"b"]


class StuckLog:
    """A log whose end lies past what its reads return: every read yields the same
    first batch again (a log end ahead of the readable data)."""

    log_start_offset = 0
    log_end_offset = 10

    def __init__(self):
        self.reads = 0

    def read(self, offset, max_bytes, upper_offset=None):
        self.reads += 1
        if self.reads > 3:
            raise AssertionError("the replay keeps reading without progress")
        return records_batch(b"a", b"b")(0)


def test_a_replay_that_makes_no_progress_ends(broker):
    owner = Owner()
    stuck = StuckLog()
    assert shell_for(broker, owner).replay(0, stuck) == 2
    assert stuck.reads == 2 and [key for _, _, key, _ in owner.records] == [b"a", b"b"]


def test_writes_need_the_partition_loaded_at_the_callers_epoch(broker):
    owner = Owner()
    shell = shell_for(broker, owner)
    batch = build_batch([(b"k", b"v", [], 0)])
    assert shell.write(0, batch).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    shell.follow_leadership()
    assert shell.write(0, batch, leader_epoch=2).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # Loaded at the epoch: the leader write path decides (here: no leader state, not led).
    assert shell.write(0, batch, leader_epoch=3).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert broker.logs[0].log_end_offset == 0


def test_the_topic_is_created_once_with_the_coordinators_configs(broker):
    created = []

    async def create_topics(specs, internal=False):
        assert internal
        created.extend(specs)
        return [SimpleNamespace(error_code=ErrorCode.NONE, error_message=None) for _ in specs]

    broker.controller = SimpleNamespace(create_topics=create_topics)
    broker.image = MetadataImage()
    topic = InternalTopic(TOPIC, 3, 2, "internal.replication.factor", {"cleanup.policy": "compact"})
    shell = CoordinatorShell(broker, topic, Owner(), logging.getLogger("test"))
    assert asyncio.run(shell.ensure_topic()) == ErrorCode.NONE
    [spec] = created
    assert (spec.name, spec.num_partitions, spec.replication_factor, spec.configs) == (TOPIC, 3, 2, {"cleanup.policy": "compact"})
