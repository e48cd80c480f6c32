"""What the watcher and the offset sync read of a real source broker: a topic's
existence, id, partitions and synced configs; the groups, their coordinators
and committed offsets. And the watcher's round: the UpdateMirrorTopic it
sends for a mirror this broker leads, given an image by hand."""

from __future__ import annotations

import asyncio
import uuid
from types import MappingProxyType, SimpleNamespace

from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from broker.links.offset_sync import fetch_source_offsets, find_source_coordinators, list_source_groups
from broker.links.source import SourceCluster
from broker.links.topic_watch import SourceTopicWatcher, look_at_source_topics
from broker.links.watch_rules import SourceLook
from controller.metadata.image import ClusterLink, MetadataImage, MirrorTopic, PartitionImage, TopicImage
from controller.metadata.records import MIRROR_ACTIVE, MIRROR_SOURCE_DELETED
from protocol.errors import ErrorCode
from protocol.schema import ZERO_UUID
from tests.interop._support import create_topic, unique_topic


def test_a_look_gives_partitions_id_and_synced_configs(shared_broker):
    topic = unique_topic("watched")
    create_topic(shared_broker.bootstrap, topic, partitions=3, configs={"retention.ms": "123456", "min.insync.replicas": "1"})
    missing = unique_topic("never")

    async def scenario():
        source = SourceCluster("east", {"bootstrap.servers": shared_broker.bootstrap}, client_id="test-link")
        try:
            return await look_at_source_topics(source, [topic, missing])
        finally:
            source.close()

    looks = asyncio.run(scenario())
    assert looks[missing] == SourceLook(missing=True)
    look = looks[topic]
    assert look.partition_count == 3 and look.topic_id != ZERO_UUID
    # Set on the topic: its value; a source default: None (remove the mirror's override).
    assert look.configs["retention.ms"] == "123456"
    assert look.configs["cleanup.policy"] is None and look.configs["segment.bytes"] is None
    assert "min.insync.replicas" not in look.configs


def test_groups_coordinators_and_committed_offsets_at_the_source(shared_broker):
    topic = unique_topic("grouped")
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    group = unique_topic("group")
    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "m0"), TopicPartition(topic, 1): OffsetAndMetadata(0, None)})
    finally:
        consumer.close()

    async def scenario():
        source = SourceCluster("east", {"bootstrap.servers": shared_broker.bootstrap}, client_id="test-link")
        try:
            groups = await list_source_groups(source)
            coordinators = await find_source_coordinators(source, [group])
            offsets = await fetch_source_offsets(source, coordinators)
            return groups, coordinators, offsets
        finally:
            source.close()

    groups, coordinators, offsets = asyncio.run(scenario())
    assert group in groups
    assert list(coordinators) == [group]
    committed = offsets[group]
    assert {key: value.offset for key, value in committed.items()} == {(topic, 0): 0, (topic, 1): 0}
    assert committed[(topic, 0)].metadata == "m0"


def _image_with_mirror(node_id: int, mirror_name: str, source_topic: str, bootstrap: str, partitions: int) -> tuple[MetadataImage, uuid.UUID]:
    topic_id = uuid.uuid4()
    link = ClusterLink(uuid.uuid4(), "east", MappingProxyType({"bootstrap.servers": bootstrap, "topic.config.sync.ms": "100"}))
    parts = {
        p: PartitionImage(partition_id=p, replicas=(node_id,), isr=(node_id,), leader=node_id, leader_epoch=0, partition_epoch=0)
        for p in range(partitions)
    }
    topic = TopicImage(name=mirror_name, topic_id=topic_id, partitions=MappingProxyType(parts))
    image = MetadataImage(
        topics=MappingProxyType({mirror_name: topic}),
        topic_names_by_id=MappingProxyType({topic_id: mirror_name}),
        cluster_links=MappingProxyType({"east": link}),
        mirror_topics=MappingProxyType({topic_id: MirrorTopic(topic_id, link.link_id, source_topic, MIRROR_ACTIVE)}),
    )
    return image, topic_id


def test_the_watcher_sends_partitions_configs_and_a_deleted_source(shared_broker):
    topic = unique_topic("grown")
    create_topic(shared_broker.bootstrap, topic, partitions=3, configs={"retention.ms": "7777"})
    gone = unique_topic("gone")
    image, topic_id = _image_with_mirror(1, "mirror-" + topic, topic, shared_broker.bootstrap, partitions=2)
    image_gone, gone_id = _image_with_mirror(1, "mirror-" + gone, gone, shared_broker.bootstrap, partitions=1)
    sent = []

    async def send(body):
        sent.append(body)
        return SimpleNamespace(error_code=ErrorCode.NONE, error_message=None)

    async def scenario():
        broker = SimpleNamespace(node_id=1, image=image)
        watcher = SourceTopicWatcher(broker, send)
        try:
            assert await watcher.look_once(0.0) == 1
            assert await watcher.look_once(0.05) == 0  # not due yet (topic.config.sync.ms=100)
            broker.image = image_gone
            assert await watcher.look_once(1.0) == 0  # one missing look
            assert await watcher.look_once(2.0) == 1  # two in a row
            # A broker that does not lead partition 0 does not watch.
            assert SourceTopicWatcher(SimpleNamespace(node_id=2, image=image), send).watched(image) == {}
        finally:
            await watcher.stop()

    asyncio.run(scenario())
    grow, deleted = sent
    assert (grow.topic_id, grow.expected_state, grow.state, grow.source_partition_count) == (topic_id, MIRROR_ACTIVE, -1, 3)
    assert {c.name: c.value for c in grow.configs}["retention.ms"] == "7777"
    assert (deleted.topic_id, deleted.state, deleted.expected_state) == (gone_id, MIRROR_SOURCE_DELETED, MIRROR_ACTIVE)
