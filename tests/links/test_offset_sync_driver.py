"""The consumer offset sync's round (broker/links/offset_sync.py) between a real
source broker (a process) and a real destination broker (in this process),
whose image is given a link and a mirror by hand: the offsets of the selected
group reach the destination through its group coordinator, capped at the
mirror partitions' high watermarks; a group with members there, or a mirror
that became writable, is left alone."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import uuid
from types import MappingProxyType

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from broker.app import Broker
from broker.config import load_config
from broker.links.offset_sync import ConsumerOffsetSync
from broker.net.in_process_client import InProcessClient
from controller.metadata.image import ClusterLink, MirrorTopic
from controller.metadata.records import MIRROR_ACTIVE, MIRROR_PROMOTED
from tests.conftest import wait_until
from tests.interop._support import Msg, create_topic, produce, unique_topic

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def destination(tmp_path_factory):
    config = load_config(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path_factory.mktemp("offset-sync-destination") / "logs"),
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
        },
        warn=lambda _: None,
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def call(coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(60)

    async def make():
        broker = Broker(config)
        await broker.start()
        return broker

    broker = call(make())
    broker.call = call
    broker.bootstrap = f"127.0.0.1:{broker.bound_ports['PLAINTEXT']}"
    try:
        yield broker
    finally:
        try:
            call(broker.stop())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)


class _WithLink:
    """The destination broker, with a link and a mirror added to its image."""

    def __init__(self, broker, link: ClusterLink, mirror_name: str, source_topic: str):
        self._broker = broker
        self.link = link
        self.mirror_name = mirror_name
        self.source_topic = source_topic
        self.state = MIRROR_ACTIVE

    def __getattr__(self, name):
        return getattr(self._broker, name)

    @property
    def image(self):
        real = self._broker.image
        topic_id = real.topics[self.mirror_name].topic_id
        return dataclasses.replace(
            real,
            cluster_links=MappingProxyType({self.link.name: self.link}),
            mirror_topics=MappingProxyType({topic_id: MirrorTopic(topic_id, self.link.link_id, self.source_topic, self.state)}),
        )


def _commit(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({tp: OffsetAndMetadata(offset, "from-source") for tp, offset in offsets.items()})
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, as confluent-kafka's admin client reads them (OffsetFetch)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S).values()
    return {(tp.topic, tp.partition): tp.offset for tp in future.result(TIMEOUT_S).topic_partitions if tp.offset >= 0}


def test_a_sync_round_commits_capped_offsets_and_respects_members_and_promotion(broker_factory, destination):
    source = broker_factory()
    source_topic = unique_topic("orders")
    mirror = unique_topic("orders-mirror")
    group = unique_topic("billing")
    create_topic(source.bootstrap, source_topic, partitions=2)
    create_topic(destination.bootstrap, mirror, partitions=2)
    # The destination "mirror" holds 10 records in partition 0 and 3 in partition 1.
    produce("kafka-python", destination.bootstrap, mirror, [Msg(None, b"%d" % i) for i in range(10)], partition=0)
    produce("kafka-python", destination.bootstrap, mirror, [Msg(None, b"%d" % i) for i in range(3)], partition=1)
    _commit(source.bootstrap, group, {TopicPartition(source_topic, 0): 4, TopicPartition(source_topic, 1): 9})
    filters = {"groupFilters": [{"name": "billing-", "patternType": "PREFIXED", "filterType": "INCLUDE"}]}
    link = ClusterLink(uuid.uuid4(), "from-source", MappingProxyType({
        "bootstrap.servers": source.bootstrap,
        "consumer.offset.sync.enable": "true",
        "consumer.offset.sync.ms": "100",
        "consumer.offset.group.filters": json.dumps(filters),
    }))
    view = _WithLink(destination, link, mirror, source_topic)
    sync = ConsumerOffsetSync(view, InProcessClient(destination, "test-offset-sync"), "User:ANONYMOUS")
    clock = [0.0]

    def one_round() -> int:
        clock[0] += 1.0
        return destination.call(sync.sync_due(clock[0]))

    try:
        # The first rounds may only create __consumer_offsets and wait for its leaders.
        assert wait_until(lambda: one_round() > 0, timeout_s=TIMEOUT_S, interval_s=0.1)
        # Partition 1 is capped at the mirror's high watermark (3), not the source's 9.
        assert _committed(destination.bootstrap, group) == {(mirror, 0): 4, (mirror, 1): 3}
        assert one_round() == 0  # nothing new: nothing written

        # A consumer of the group on the destination: the group is its own now.
        member = KafkaConsumer(mirror, bootstrap_servers=destination.bootstrap, group_id=group, enable_auto_commit=False,
                               auto_offset_reset="earliest")
        try:
            assert wait_until(lambda: member.poll(timeout_ms=200) or member.assignment(), timeout_s=TIMEOUT_S)
            _commit(source.bootstrap, group, {TopicPartition(source_topic, 0): 6})
            assert one_round() == 0
            assert _committed(destination.bootstrap, group)[(mirror, 0)] == 4
        finally:
            member.close()
        # Gone again: the source's offset follows.
        assert wait_until(lambda: one_round() > 0, timeout_s=TIMEOUT_S, interval_s=0.2)
        assert _committed(destination.bootstrap, group)[(mirror, 0)] == 6

        # Promoted: the destination's commits are its own; the source's never move them.
        view.state = MIRROR_PROMOTED
        _commit(destination.bootstrap, group, {TopicPartition(mirror, 0): 8})
        _commit(source.bootstrap, group, {TopicPartition(source_topic, 0): 2})
        assert one_round() == 0
        assert _committed(destination.bootstrap, group)[(mirror, 0)] == 8
    finally:
        destination.call(sync.stop())
