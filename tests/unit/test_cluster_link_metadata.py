"""Cluster links and mirror topics in the metadata image: the replay rules of
ClusterLinkRecord, RemoveClusterLinkRecord and MirrorTopicRecord, the leader
epoch move when a mirror becomes writable, and snapshots of both."""

from __future__ import annotations

import uuid

from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import (
    CLUSTER_LINK_CONFIG,
    CLUSTER_LINK_RECORD,
    MIRROR_ACTIVE,
    MIRROR_FAILED_OVER,
    MIRROR_PARTITION_MARK,
    MIRROR_PENDING_FAILOVER,
    MIRROR_PROMOTED,
    MIRROR_TOPIC_RECORD,
    PARTITION_RECORD,
    PRIVATE_RECORD_TYPE_MIN,
    RECORD_TYPES,
    REMOVE_CLUSTER_LINK_RECORD,
    REMOVE_TOPIC_RECORD,
    TOPIC_RECORD,
    record_api_key,
)
from controller.metadata.snapshot import image_from_snapshot_records, snapshot_records

LINK = uuid.UUID(int=7)
TOPIC = uuid.UUID(int=9)


def replay(image, records):
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset + len(records))


def link(name="east", servers="src:9092", link_id=LINK):
    return CLUSTER_LINK_RECORD(
        link_id=link_id, link_name=name, configs=[CLUSTER_LINK_CONFIG(name="bootstrap.servers", value=servers)]
    )


def topic(partitions=2, leader_epoch=3):
    records = [TOPIC_RECORD(name="orders", topic_id=TOPIC)]
    for p in range(partitions):
        records.append(
            PARTITION_RECORD(partition_id=p, topic_id=TOPIC, replicas=[1, 2], isr=[1, 2], leader=1,
                             leader_epoch=leader_epoch, partition_epoch=5)
        )
    return records


def mirror(state, marks=()):
    return MIRROR_TOPIC_RECORD(
        topic_id=TOPIC, link_id=LINK, source_topic="orders", state=state,
        partition_marks=[MIRROR_PARTITION_MARK(partition_id=p, offset=o, last_epoch=e) for p, o, e in marks],
    )


def test_private_record_types_stay_out_of_kafkas_range():
    private = [
        t for t in RECORD_TYPES.values()
        if t.name in ("ClusterLinkRecord", "RemoveClusterLinkRecord", "MirrorTopicRecord", "BrokerPlacementRecord",
                      "BalancerThrottleRecord")
    ]
    assert len(private) == 5
    assert all(t.api_key >= PRIVATE_RECORD_TYPE_MIN for t in private)
    assert all(t.api_key < PRIVATE_RECORD_TYPE_MIN for t in RECORD_TYPES.values() if t not in private)


def test_a_link_is_replaced_by_id_and_removed():
    image = replay(MetadataImage(), [link()])
    assert image.cluster_links["east"].configs == {"bootstrap.servers": "src:9092"}
    assert image.link_by_id(LINK).name == "east"
    image = replay(image, [link(servers="other:9092")])
    assert image.cluster_links["east"].configs["bootstrap.servers"] == "other:9092"
    image = replay(image, [REMOVE_CLUSTER_LINK_RECORD(link_id=uuid.UUID(int=99))])  # unknown: ignored
    assert "east" in image.cluster_links
    image = replay(image, [REMOVE_CLUSTER_LINK_RECORD(link_id=LINK)])
    assert image.cluster_links == {} and image.link_by_id(LINK) is None


def test_mirror_state_follows_its_topic():
    image = replay(MetadataImage(), [mirror(MIRROR_ACTIVE)])  # no such topic yet: ignored
    assert image.mirror_topics == {}
    image = replay(image, [link(), *topic(), mirror(MIRROR_ACTIVE)])
    state = image.mirror_of("orders")
    assert state.source_topic == "orders" and state.state_name == "ACTIVE" and not state.writable
    assert image.mirror_of("other") is None
    image = replay(image, [REMOVE_TOPIC_RECORD(topic_id=TOPIC)])
    assert image.mirror_topics == {} and image.mirror_of("orders") is None


def test_becoming_writable_moves_marked_leader_epochs_past_the_mirrored_ones():
    image = replay(MetadataImage(), [link(), *topic(leader_epoch=3), mirror(MIRROR_ACTIVE)])
    image = replay(image, [mirror(MIRROR_PENDING_FAILOVER)])
    assert image.topics["orders"].partitions[0].leader_epoch == 3
    # Partition 0 mirrored batches of source epoch 8, partition 1 of epoch 1.
    image = replay(image, [mirror(MIRROR_FAILED_OVER, [(0, 120, 8), (1, 40, 1)])])
    partitions = image.topics["orders"].partitions
    assert (partitions[0].leader_epoch, partitions[0].partition_epoch) == (9, 6)
    assert (partitions[1].leader_epoch, partitions[1].partition_epoch) == (4, 6)
    assert image.mirror_of("orders").partition_marks == {0: (120, 8), 1: (40, 1)}
    # Writable already: the same record again moves nothing.
    again = replay(image, [mirror(MIRROR_PROMOTED, [(0, 120, 8)])])
    assert again.topics["orders"].partitions[0].leader_epoch == 9


def test_snapshot_recreates_links_mirrors_and_moved_epochs():
    image = replay(MetadataImage(), [link(), link("west", link_id=uuid.UUID(int=8)), *topic(), mirror(MIRROR_ACTIVE)])
    image = replay(image, [mirror(MIRROR_PROMOTED, [(0, 10, 6)])])
    records = snapshot_records(image)
    assert image_from_snapshot_records(records, image.offset) == image
