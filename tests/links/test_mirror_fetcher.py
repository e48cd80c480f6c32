"""The mirror fetcher (broker/links/mirror_fetcher.py) against a real source.

The source is a pybroker process written by confluent-kafka (an idempotent
producer, one committed and one aborted transaction); the destination is the
fetcher with real partition logs and the replica manager's mirror append
reduced to what it does for a single replica (append as the source wrote it,
high watermark at the log end). What goes to the controller is recorded.
These run without the admin APIs that create links and mirrors (the metadata
image is built here); tests/links/test_mirror_topics.py is the end-to-end test
through them.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from types import SimpleNamespace

import pytest

from broker.links.mirrors import MirrorManager
from controller.metadata.image import ClusterLink, MetadataImage, MirrorTopic, PartitionImage, TopicImage
from controller.metadata.records import (
    MIRROR_ACTIVE,
    MIRROR_FAILED,
    MIRROR_FAILED_OVER,
    MIRROR_PENDING_FAILOVER,
    MIRROR_PENDING_PROMOTE,
)
from protocol.errors import ErrorCode
from protocol.records import iter_batches
from storage.log import LogConfig, PartitionLog
from tests.interop._support import create_topic, unique_topic
from tests.links._mirror_support import PARTITIONS, produce_source, raw_log

NODE = 1
WAIT_S = 30


def local_log(plog: PartitionLog) -> bytes:
    out = bytearray()
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20, upper_offset=plog.log_end_offset)
        for position, size, header in iter_batches(data, allow_truncated_tail=True):
            out += data[position : position + size]
            offset = header.base_offset + header.last_offset_delta + 1
    return bytes(out)


class Destination:
    """What the mirror fetcher reads and calls of a broker, with real logs."""

    def __init__(self, tmp_path, topic: str, source_topic: str, bootstrap: str, state: int = MIRROR_ACTIVE):
        self.node_id = NODE
        self.config = {"replica.fetch.max.bytes": 1 << 20, "replica.fetch.response.max.bytes": 10 << 20}
        self.topic = topic
        self.topic_id = uuid.uuid4()
        self.link = ClusterLink(uuid.uuid4(), "east", {"bootstrap.servers": bootstrap, "retry.backoff.ms": "100"})
        self.logs = {
            (topic, p): PartitionLog(tmp_path / f"{topic}-{p}", LogConfig()) for p in range(PARTITIONS)
        }
        self.sent: list[tuple[str, object]] = []
        self.notified: list = []
        self.partition_watch = SimpleNamespace(notify=self.notified.append)
        self.replicas = SimpleNamespace(
            leader_for=lambda topic, partition: object(),
            mirror_appended=self._mirror_appended,
            throttled=lambda *args: False,
        )
        self.controller_channel = SimpleNamespace(to_active_controller=self._send)
        self.raft = SimpleNamespace(is_leader=False)  # the active controller is another node
        self.image = MetadataImage()
        self.set_state(state, source_topic)

    def set_state(self, state: int, source_topic: str | None = None, marks=None) -> None:
        old = self.image
        source_topic = source_topic or self.image.mirror_topics[self.topic_id].source_topic
        partitions = {p: PartitionImage(p, (NODE,), (NODE,), NODE, 0, 0) for p in range(PARTITIONS)}
        self.image = MetadataImage(
            topics={self.topic: TopicImage(self.topic, self.topic_id, partitions)},
            topic_names_by_id={self.topic_id: self.topic},
            cluster_links={"east": self.link},
            mirror_topics={self.topic_id: MirrorTopic(self.topic_id, self.link.link_id, source_topic, state, None, marks or {})},
        )
        return old

    def partition_log(self, topic, partition):
        return self.logs.get((topic, partition))

    def _mirror_appended(self, key, records) -> int:
        plog = self.logs[key]
        appended = plog.append_as_follower(records)
        plog.high_watermark = plog.log_end_offset
        return appended

    async def _send(self, api, version, body, **kwargs):
        self.sent.append((api.name, body))
        return SimpleNamespace(error_code=ErrorCode.NONE, error_message=None)

    def close(self) -> None:
        for plog in self.logs.values():
            plog.close()


async def wait_for(predicate, timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return bool(predicate())


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 120))


@pytest.fixture
def source(broker_factory):
    broker = broker_factory()
    topic = unique_topic("mirror-src")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    produce_source(broker.bootstrap, topic)
    return broker, topic


@pytest.mark.parametrize("fetch_version_max", [None, 12, 6])
def test_the_fetcher_copies_every_partition_byte_for_byte_and_promotes(source, tmp_path, monkeypatch, fetch_version_max):
    """None: the newest Fetch both speak (topic ids, sessions); 12: by topic
    name, as an older source; 6: no fetch sessions either."""
    fetch_versions = set()
    if fetch_version_max is not None:
        from broker.links import source as source_client

        agreed = source_client._agreed

        def capped(api, offered):
            version = agreed(api, offered)
            if api.name == "Fetch" and version is not None:
                version = min(version, fetch_version_max)
                fetch_versions.add(version)
            return version

        monkeypatch.setattr(source_client, "_agreed", capped)
    broker, source_topic = source
    expected = {p: raw_log(broker.bootstrap, source_topic, p) for p in range(PARTITIONS)}
    assert all(hw > 0 for _, hw in expected.values())
    destination = Destination(tmp_path, "mirror", source_topic, broker.bootstrap)

    async def scenario():
        manager = MirrorManager(destination)
        manager.apply_image(MetadataImage(), destination.image)
        manager.start()
        try:
            caught_up = await wait_for(
                lambda: all(destination.logs[("mirror", p)].log_end_offset == expected[p][1] for p in range(PARTITIONS))
            )
            assert caught_up, {p: destination.logs[("mirror", p)].log_end_offset for p in range(PARTITIONS)}
            # The status DescribeMirrors and the metrics read.
            for p in range(PARTITIONS):
                core, link_error = manager.status(("mirror", p))
                plog = destination.logs[("mirror", p)]
                assert link_error is None and core.error == ErrorCode.NONE
                assert core.source_high_watermark == expected[p][1]
                assert core.lag_records(plog.log_end_offset) == 0
                assert core.lag_ms(plog.log_end_offset, int(time.time() * 1000)) == 0
                assert core.last_fetch_ms > 0
            # A promote: every partition is caught up, so each stops and is reported once.
            old = destination.set_state(MIRROR_PENDING_PROMOTE)
            manager.apply_image(old, destination.image)
            assert await wait_for(lambda: any(name == "MirrorPartitionsStopped" for name, _ in destination.sent))
            reported = {}
            for name, body in destination.sent:
                if name == "MirrorPartitionsStopped":
                    assert body.broker_id == NODE
                    for t in body.topics:
                        assert t.topic_id == destination.topic_id
                        for p in t.partitions:
                            reported[p.partition_index] = p
            assert await wait_for(lambda: len(reported) == PARTITIONS or _collect(destination, reported))
            for p, stopped in reported.items():
                plog = destination.logs[("mirror", p)]
                assert stopped.offset == plog.log_end_offset == expected[p][1]
                assert stopped.last_epoch == plog.leader_epochs[-1][0]
                assert stopped.max_producer_id == max(plog.producer_state.producers)
        finally:
            await manager.stop()

    run(scenario())
    for p in range(PARTITIONS):
        assert local_log(destination.logs[("mirror", p)]) == expected[p][0], f"partition {p} differs"
    destination.close()
    if fetch_version_max is not None:
        assert fetch_versions == {fetch_version_max}


def _collect(destination, reported) -> bool:
    for name, body in destination.sent:
        if name == "MirrorPartitionsStopped":
            for t in body.topics:
                for p in t.partitions:
                    reported[p.partition_index] = p
    return len(reported) == PARTITIONS


def test_a_source_that_goes_away_shows_in_the_status_and_a_failover_stops_without_it(source, tmp_path):
    broker, source_topic = source
    hws = {p: raw_log(broker.bootstrap, source_topic, p)[1] for p in range(PARTITIONS)}
    destination = Destination(tmp_path, "mirror", source_topic, broker.bootstrap)

    async def scenario():
        manager = MirrorManager(destination)
        manager.apply_image(MetadataImage(), destination.image)
        manager.start()
        try:
            assert await wait_for(
                lambda: all(destination.logs[("mirror", p)].log_end_offset == hws[p] for p in range(PARTITIONS))
            )
            await asyncio.get_running_loop().run_in_executor(None, broker.stop)
            assert await wait_for(lambda: all(manager.status(("mirror", p))[0].error != ErrorCode.NONE for p in range(PARTITIONS)))
            core = manager.status(("mirror", 0))[0]
            assert "no source broker answered" in core.error_message or "source broker" in core.error_message
            old = destination.set_state(MIRROR_PENDING_FAILOVER)
            manager.apply_image(old, destination.image)
            assert await wait_for(lambda: _collect(destination, {}))
            reported = {}
            _collect(destination, reported)
            assert {p: r.offset for p, r in reported.items()} == hws
            # Failed over: open transactions the source left are aborted (none here), and the fetcher is gone.
            old = destination.set_state(MIRROR_FAILED_OVER, marks={p: (hws[p], 0) for p in range(PARTITIONS)})
            manager.apply_image(old, destination.image)
            assert manager.fetchers == {}
        finally:
            await manager.stop()

    run(scenario())
    destination.close()


def test_a_source_that_lost_copied_records_fails_the_mirror(broker_factory, tmp_path):
    """The source topic is deleted and made again with other records: the
    destination's log (epoch 0 up to its end) is no longer the source's."""
    broker = broker_factory()
    source_topic = unique_topic("mirror-src")
    create_topic(broker.bootstrap, source_topic, partitions=PARTITIONS)
    produce_source(broker.bootstrap, source_topic)
    destination = Destination(tmp_path, "mirror", source_topic, broker.bootstrap)
    # The destination holds more than the source will: 200 records of epoch 5 in partition 0.
    from protocol.records import build_batch

    destination.logs[("mirror", 0)].append_as_follower(
        build_batch([(None, b"x")] * 200, base_offset=0, partition_leader_epoch=5)
    )

    async def scenario():
        manager = MirrorManager(destination)
        manager.apply_image(MetadataImage(), destination.image)
        manager.start()
        try:
            sent = await wait_for(lambda: any(name == "UpdateMirrorTopic" for name, _ in destination.sent))
            assert sent, manager.status(("mirror", 0))
            body = next(body for name, body in destination.sent if name == "UpdateMirrorTopic")
            assert body.state == MIRROR_FAILED and body.expected_state == MIRROR_ACTIVE
            assert "partition 0" in body.reason and "200" in body.reason
        finally:
            await manager.stop()

    run(scenario())
    assert destination.logs[("mirror", 0)].log_end_offset == 200  # nothing appended after the divergence
    destination.close()


def test_a_failover_does_not_wait_for_a_source_gone_silent(source, tmp_path):
    """The source stops answering without closing its connections (SIGSTOP, as
    a network cut looks): a fetch is out for up to the request timeout (30 s),
    and the failover still stops every partition within seconds."""
    broker, source_topic = source
    hws = {p: raw_log(broker.bootstrap, source_topic, p)[1] for p in range(PARTITIONS)}
    destination = Destination(tmp_path, "mirror", source_topic, broker.bootstrap)

    async def scenario():
        manager = MirrorManager(destination)
        manager.apply_image(MetadataImage(), destination.image)
        manager.start()
        try:
            assert await wait_for(
                lambda: all(destination.logs[("mirror", p)].log_end_offset == hws[p] for p in range(PARTITIONS))
            )
            broker.process.send_signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(1.0)  # the next long poll is out and will get no answer
                old = destination.set_state(MIRROR_PENDING_FAILOVER)
                manager.apply_image(old, destination.image)
                started = time.monotonic()
                assert await wait_for(lambda: _collect(destination, {}), timeout_s=10)
                assert time.monotonic() - started < 5
            finally:
                broker.process.send_signal(signal.SIGCONT)
            reported = {}
            _collect(destination, reported)
            assert {p: r.offset for p, r in reported.items()} == hws
        finally:
            await manager.stop()

    run(scenario())
    destination.close()


def test_a_mirror_that_becomes_writable_aborts_the_transactions_the_source_left_open(tmp_path):
    """No source needed: the destination's logs hold an open transaction from the
    source (before the stop mark) and one of its own producers (after it)."""
    from protocol.records import build_batch, first_control_record

    destination = Destination(tmp_path, "mirror", "src", "127.0.0.1:1", state=MIRROR_PENDING_FAILOVER)
    leader = SimpleNamespace(leader_epoch=11)
    destination.replicas.leader_for = lambda topic, partition: leader
    destination.replicas.leader_appended = lambda key, leader, plog: None
    destination.flusher = SimpleNamespace(flush=lambda plog: None)
    destination.log_dir_failed = lambda plog, exc: None
    plog = destination.logs[("mirror", 1)]
    plog.append_as_follower(
        build_batch([(None, b"open")], base_offset=0, producer_id=7, producer_epoch=2, base_sequence=0,
                    is_transactional=True, partition_leader_epoch=4)
    )
    mark = plog.log_end_offset
    # A producer of this cluster began a transaction after the stop (as if already writable).
    plog.append_as_follower(
        build_batch([(None, b"ours")], base_offset=mark, producer_id=5000, producer_epoch=0, base_sequence=0,
                    is_transactional=True, partition_leader_epoch=10)
    )
    plog.high_watermark = plog.log_end_offset
    manager = MirrorManager(destination)
    old = destination.image
    destination.set_state(MIRROR_FAILED_OVER, marks={p: (mark if p == 1 else 0, 4) for p in range(PARTITIONS)})
    manager.apply_image(old, destination.image)
    assert plog.ongoing_transactions() == {5000: mark}
    marker = first_control_record(plog.read(plog.log_end_offset - 1, 1 << 20, upper_offset=plog.log_end_offset))
    assert marker is not None and marker.control_type == 0  # ABORT
    assert plog.leader_epochs[-1] == (11, plog.log_end_offset - 1)  # the leader's own epoch
    # Looked at again (as after a restart): the source's transaction is closed already, ours is left alone.
    manager.apply_image(MetadataImage(), destination.image)
    assert plog.log_end_offset == mark + 2 and plog.ongoing_transactions() == {5000: mark}
    destination.close()


def test_a_link_setting_that_cannot_be_used_shows_in_the_status(tmp_path):
    destination = Destination(tmp_path, "mirror", "src", "127.0.0.1:1")
    destination.link = ClusterLink(destination.link.link_id, "east", {"bootstrap.servers": "127.0.0.1:1", "retry.backoff.ms": "soon"})
    destination.set_state(MIRROR_ACTIVE)

    async def scenario():
        manager = MirrorManager(destination)
        manager.apply_image(MetadataImage(), destination.image)
        manager.start()
        try:
            assert await wait_for(lambda: manager.status(("mirror", 0))[0].error_message is not None, 10)
            core, link_error = manager.status(("mirror", 0))
            assert link_error == "link east: retry.backoff.ms: expected a number of milliseconds, got 'soon'"
            assert core.error_message == link_error
        finally:
            await manager.stop()

    run(scenario())
    destination.close()
