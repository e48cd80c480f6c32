"""broker.replica.leader_append, the one leader write path, against a real partition log
and a real LeaderPartition; the replica manager is reduced to what the path
asks of it (the leader lookup, the high watermark move, the acks=all wait)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from broker.replica.leader_append import append_as_leader, replication_outcome
from controller.metadata.image import ClusterLink, MetadataImage, MirrorTopic, TopicImage
from controller.metadata.records import (
    MIRROR_ACTIVE,
    MIRROR_FAILED_OVER,
    MIRROR_PAUSED,
    MIRROR_PENDING_PROMOTE,
    MIRROR_PROMOTED,
    MIRROR_SOURCE_DELETED,
)
from protocol.errors import ErrorCode
from protocol.records import build_batch
from replication.partition import LeaderPartition
from storage.log import LogConfig, PartitionLog

KEY = ("t", 0)
NODE = 1
FOLLOWER = 2


class Replicas:
    def __init__(self, leader: LeaderPartition | None):
        self.leader = leader
        self.appended: list[int] = []  # log end offsets the leader was told of
        self.waits: list[tuple[int, asyncio.Future]] = []

    def leader_for(self, topic, partition):
        return self.leader if (topic, partition) == KEY else None

    def leader_appended(self, key, leader, plog):
        self.appended.append(plog.log_end_offset)
        leader.leader_appended(plog.log_end_offset, 0)

    def wait_for_acks(self, key, leader, required_offset, timeout_ms):
        future = asyncio.get_running_loop().create_future()
        self.waits.append((required_offset, future))
        return future


def leader(isr=(NODE,), min_insync_replicas=1, leader_epoch=5) -> LeaderPartition:
    return LeaderPartition(
        local_id=NODE, replicas=(NODE, FOLLOWER), isr=isr, leader_epoch=leader_epoch, partition_epoch=1,
        log_end_offset=0, high_watermark=0, now_ms=0, lag_max_ms=30_000, min_insync_replicas=min_insync_replicas,
    )  # fmt: skip


@pytest.fixture
def plog(tmp_path):
    log = PartitionLog(tmp_path / "t-0", LogConfig())
    log.replicated = True  # the high watermark is the replicas' business, as on a leader
    yield log
    log.close()


def make_broker(plog, partition_leader, image=None):
    notified = []
    broker = SimpleNamespace(
        image=image or MetadataImage(),
        replicas=Replicas(partition_leader),
        partition_log=lambda topic, partition: plog if (topic, partition) == KEY else None,
        # Which fetches an append wakes is partition_watch's to decide (tested there).
        partition_watch=SimpleNamespace(notify=notified.append, notify_log_end=notified.append),
        log_dir_failed=lambda plog, exc: None,
        flusher=SimpleNamespace(flush=lambda plog: None),
    )
    return broker, notified


def batch(*values: bytes, **kwargs) -> bytes:
    return build_batch([(b"k", v, [], 1_000) for v in values], **kwargs)


def test_an_append_is_offset_stamped_and_tells_the_waiting_fetches(plog):
    broker, notified = make_broker(plog, leader())
    written = append_as_leader(broker, KEY, batch(b"a", b"b"), acks=1)
    assert (written.error, written.base_offset, written.last_offset, written.log_start_offset) == (ErrorCode.NONE, 0, 1, 0)
    assert (written.acks_error, written.acks_future, written.flush) == (ErrorCode.NONE, None, None)
    assert broker.replicas.appended == [2] and notified == [KEY]
    assert plog.log_end_offset == 2


def test_acks_all_is_answered_at_once_when_the_isr_is_this_broker_alone(plog):
    broker, _ = make_broker(plog, leader())
    written = append_as_leader(broker, KEY, batch(b"a"), timeout_ms=1_000)
    assert (written.error, written.acks_error, written.acks_future) == (ErrorCode.NONE, ErrorCode.NONE, None)


def test_acks_all_waits_for_the_followers_in_sync(plog):
    async def scenario():
        broker, _ = make_broker(plog, leader(isr=(NODE, FOLLOWER)))
        written = append_as_leader(broker, KEY, batch(b"a", b"b", b"c"), timeout_ms=1_000)
        assert written.error == ErrorCode.NONE and written.acks_future is not None
        assert [required for required, _ in broker.replicas.waits] == [3]
        # Without a timeout the caller waits later, for everything up to an offset.
        later = append_as_leader(broker, KEY, batch(b"d"))
        assert later.acks_future is None and len(broker.replicas.waits) == 1
        waiting = asyncio.ensure_future(replication_outcome(broker.replicas, KEY, broker.replicas.leader, 4, 1_000))
        await asyncio.sleep(0)
        broker.replicas.waits[-1][1].set_result(ErrorCode.REQUEST_TIMED_OUT)
        assert await waiting == ErrorCode.REQUEST_TIMED_OUT

    asyncio.run(scenario())


def test_too_few_in_sync_replicas_write_nothing(plog):
    broker, notified = make_broker(plog, leader(min_insync_replicas=2))
    written = append_as_leader(broker, KEY, batch(b"a"), timeout_ms=1_000)
    assert written.error == ErrorCode.NOT_ENOUGH_REPLICAS and not written.refused_by_log
    assert "min.isr requirement of 2 for partition t-0" in written.message
    # acks=1 does not ask.
    assert append_as_leader(broker, KEY, batch(b"a"), acks=1).error == ErrorCode.NONE
    assert plog.log_end_offset == 1 and notified == [KEY]


def test_not_the_leader_or_not_at_the_expected_epoch(plog):
    broker, notified = make_broker(plog, None)
    assert append_as_leader(broker, KEY, batch(b"a")).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    broker, notified = make_broker(plog, leader(leader_epoch=5))
    assert append_as_leader(broker, KEY, batch(b"a"), leader_epoch=4).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert append_as_leader(broker, KEY, batch(b"a"), leader_epoch=5).error == ErrorCode.NONE
    assert plog.log_end_offset == 1 and notified == [KEY]


def test_the_logs_refusal_is_told_apart_with_its_records_at_fault(plog):
    broker, notified = make_broker(plog, leader())
    plog.config = LogConfig(cleanup_policy="compact")
    keyless = build_batch([(None, b"v", [], 1_000), (b"k", b"v", [], 1_000)])
    written = append_as_leader(broker, KEY, keyless)
    assert written.error == ErrorCode.INVALID_RECORD and written.refused_by_log
    assert [e.batch_index for e in written.record_errors] == [0]
    assert notified == [] and plog.log_end_offset == 0


def test_a_retried_idempotent_batch_moves_nothing(plog):
    broker, notified = make_broker(plog, leader())
    idempotent = batch(b"a", producer_id=7, producer_epoch=0, base_sequence=0)
    first = append_as_leader(broker, KEY, idempotent, acks=1)
    again = append_as_leader(broker, KEY, batch(b"a", producer_id=7, producer_epoch=0, base_sequence=0), acks=1)
    assert (again.error, again.duplicate, again.base_offset) == (ErrorCode.NONE, True, first.base_offset)
    assert notified == [KEY] and broker.replicas.appended == [1]


def test_a_marker_is_appended_as_a_control_batch(plog):
    broker, notified = make_broker(plog, leader())
    append_as_leader(broker, KEY, batch(b"a", producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True), acks=1)
    marker = SimpleNamespace(producer_id=7, producer_epoch=0, coordinator_epoch=3, commit=True)
    written = append_as_leader(broker, KEY, marker=marker, timeout_ms=1_000)
    assert (written.error, written.base_offset, written.last_offset) == (ErrorCode.NONE, 1, 1)
    assert notified == [KEY, KEY]
    stale = SimpleNamespace(producer_id=7, producer_epoch=0, coordinator_epoch=2, commit=False)
    refused = append_as_leader(broker, KEY, marker=stale)
    assert refused.error == ErrorCode.TRANSACTION_COORDINATOR_FENCED and refused.refused_by_log


def test_a_failed_disk_halts_the_broker_before_anything_is_acknowledged(plog):
    broker, notified = make_broker(plog, leader())
    failures = []
    broker.log_dir_failed = lambda failed, exc: failures.append((failed, exc))

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    plog.append = fail
    written = append_as_leader(broker, KEY, batch(b"a"))
    assert written.error == ErrorCode.KAFKA_STORAGE_ERROR and not written.refused_by_log
    assert [failed for failed, _ in failures] == [plog] and notified == []


# --------------------------------------------------------------------------- read-only mirrors

TOPIC_ID = uuid.uuid4()
LINK_ID = uuid.uuid4()


def mirror_image(state: int) -> MetadataImage:
    return MetadataImage(
        topics={"t": TopicImage("t", TOPIC_ID)},
        topic_names_by_id={TOPIC_ID: "t"},
        cluster_links={"east": ClusterLink(LINK_ID, "east")},
        mirror_topics={TOPIC_ID: MirrorTopic(TOPIC_ID, LINK_ID, "t", state)},
    )


@pytest.mark.parametrize("state", [MIRROR_ACTIVE, MIRROR_PAUSED, MIRROR_PENDING_PROMOTE, MIRROR_SOURCE_DELETED])
def test_a_mirror_that_is_not_writable_refuses_data_and_markers_with_a_message(plog, state):
    broker, notified = make_broker(plog, leader(), mirror_image(state))
    for written in (
        append_as_leader(broker, KEY, batch(b"a"), acks=1),
        append_as_leader(broker, KEY, marker=SimpleNamespace(producer_id=1, producer_epoch=0, coordinator_epoch=0, commit=False), acks=1),
    ):
        assert written.error == ErrorCode.INVALID_REQUEST and not written.refused_by_log
        assert written.message.startswith("topic t is a read-only mirror (link east, state ")
        assert written.message.endswith("): promote or fail it over before writing")
    assert plog.log_end_offset == 0 and notified == []


@pytest.mark.parametrize("state", [MIRROR_PROMOTED, MIRROR_FAILED_OVER])
def test_a_promoted_or_failed_over_mirror_takes_writes(plog, state):
    broker, _ = make_broker(plog, leader(), mirror_image(state))
    written = append_as_leader(broker, KEY, batch(b"a"), acks=1)
    assert written.error == ErrorCode.NONE and plog.log_end_offset == 1
