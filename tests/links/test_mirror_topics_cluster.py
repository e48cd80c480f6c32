"""A mirror with three replicas on a three-node destination cluster: its leader
is killed while the source is written, another destination broker takes over
the copying, and the mirror still holds the source byte for byte: no gap, no
duplicate, the same offsets; the followers hold the leader's bytes.

Skips, saying so, while the destination does not advertise CreateClusterLinks
(API key 16000), as tests/links/test_mirror_topics.py does.
"""

from __future__ import annotations

import threading

import pytest

from tests.cluster.replication_harness import ReplicatedCluster
from tests.interop._support import RawConnection, create_topic, unique_topic
from tests.links._mirror_support import PARTITIONS, produce_source, raw_log
from tests.links.test_mirror_topics import (
    _CM,
    CREATE_MIRRORS,
    advertises_cluster_links,
    create_link,
    high_watermarks,
    wait_until,
)

confluent_kafka = pytest.importorskip("confluent_kafka")

CATCH_UP_S = 60


@pytest.fixture
def destination(tmp_path):
    cluster = ReplicatedCluster(tmp_path / "destination")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        cluster.save_output()


class SourceWriter:
    """An idempotent producer writing to every partition of the source until stopped."""

    def __init__(self, bootstrap: str, topic: str):
        self.producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        self.topic = topic
        self.sent = 0
        self.errors: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, error, message):
        if error is not None:
            self.errors.append(error)

    def _run(self) -> None:
        while not self._stop.is_set() and self.sent < 100_000:
            self.producer.produce(self.topic, value=f"live-{self.sent}".encode(), partition=self.sent % PARTITIONS, on_delivery=self._report)
            self.sent += 1
            self.producer.poll(0.002)

    def start(self) -> SourceWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(30) == 0
        assert not self.errors, self.errors[:3]


def test_another_destination_broker_takes_over_the_copying(broker_factory, destination):
    node = destination.active_controller()
    admin_bootstrap = destination.bootstrap([node])
    if not advertises_cluster_links(admin_bootstrap):
        pytest.skip("the broker does not offer CreateClusterLinks (API key 16000) yet: the admin side of cluster links is not built")
    source = broker_factory()
    topic = unique_topic("mirrored-rf3")
    create_topic(source.bootstrap, topic, partitions=PARTITIONS)
    produce_source(source.bootstrap, topic)
    create_link(admin_bootstrap, "from-a", source.bootstrap)
    body = _CM.CreateMirrorTopicsRequest(
        topics=[_CM.CreatableMirror(mirror_topic=topic, link_name="from-a", source_topic=None, replication_factor=3, configs=[])],
        validate_only=False,
        timeout_ms=30000,
    )
    with RawConnection(admin_bootstrap) as conn:
        [result] = conn.request(CREATE_MIRRORS, 0, body).results
    assert result.error_code == 0, (result.error_code, result.error_message)

    writer = SourceWriter(source.bootstrap, topic).start()
    try:
        leader = destination.leader_of(topic, 0)
        assert leader is not None
        # Copying while written: some records are there before the leader goes.
        assert wait_until(lambda: destination.watermarks(topic, 0)[1] > 100, CATCH_UP_S)
        destination.kill(leader)
        new_leader = destination.leader_of(topic, 0, timeout_s=30, exclude=(leader,))
        assert new_leader is not None and new_leader != leader
    finally:
        writer.stop()
    expected = high_watermarks(source.bootstrap, topic)
    assert wait_until(lambda: {p: destination.watermarks(topic, p)[1] for p in range(PARTITIONS)} == expected, CATCH_UP_S), (
        {p: destination.watermarks(topic, p)[1] for p in range(PARTITIONS)}, expected,
    )
    for p in range(PARTITIONS):
        leader_of_p = destination.leader_of(topic, p)
        mirrored = raw_log(destination.bootstrap([leader_of_p]), topic, p)
        assert mirrored == raw_log(source.bootstrap, topic, p), f"partition {p}: the mirror is not the source's log"
        # The surviving replicas hold the leader's bytes too.
        alive = tuple(destination.alive())
        same, detail = destination.segments_identical(topic, p, expected[p], nodes=alive)
        assert same, detail
