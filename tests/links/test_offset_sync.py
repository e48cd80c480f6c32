"""Cluster links end to end between two single-node pybroker clusters, A (the
source) and B (the destination): a link on B with consumer offset sync and a
mirror of A's topic.

- A group's committed offsets at A reach B's group (never past what B's mirror
  holds); a partition added at A appears on the mirror; the topic deleted at A
  leaves the mirror SOURCE_DELETED. The offset part does not need copied
  records: until the mirror holds them, B's offsets are the cap.
- With copied records: B's group holds A's offsets exactly, and a
  confluent-kafka consumer of the group on B resumes at the committed offset
  (the first record it reads is the one at that offset: no gap, no repeat).
- The cap: while the mirror is paused, an offset A's group commits past what
  the mirror holds is synced as the mirror's high watermark, and as A's
  offset once the mirror has caught up again.

These need the link and mirror admin APIs (CreateClusterLinks 16000,
CreateMirrorTopics 16004, AlterMirrors 16005) and, for the last two tests,
the mirror fetchers and DescribeMirrors (16006): each test is skipped, saying
which, while the broker does not offer them.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.structs import OffsetAndMetadata

from controller.metadata.records import MIRROR_ACTIVE, MIRROR_PAUSED, MIRROR_SOURCE_DELETED, MIRROR_STATE_NAMES
from protocol.errors import ErrorCode
from protocol.messages.cluster_links import MIRROR_OP_PAUSE, MIRROR_OP_RESUME
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.conftest import wait_until
from tests.interop._support import (
    Msg,
    RawConnection,
    confluent_consumer,
    create_topic,
    list_offset,
    produce,
    unique_topic,
)

TIMEOUT_S = 60
LINK = "from-a"
CREATE_LINKS_KEY = 16000
DESCRIBE_MIRRORS_KEY = 16006
API_VERSIONS = APIS_BY_NAME["ApiVersions"]


def _offered_keys(bootstrap: str) -> set[int]:
    with RawConnection(bootstrap) as conn:
        request = struct_classes(API_VERSIONS.request).ApiVersionsRequest(
            client_software_name="test", client_software_version="1"
        )
        return {k.api_key for k in conn.request(API_VERSIONS, 3, request).api_keys}


def _require(bootstrap: str, *, mirror_data: bool = False) -> None:
    keys = _offered_keys(bootstrap)
    if CREATE_LINKS_KEY not in keys:
        pytest.skip("the broker does not offer CreateClusterLinks (16000): the controller's cluster-link APIs are not built")
    if mirror_data and DESCRIBE_MIRRORS_KEY not in keys:
        pytest.skip("the broker does not offer DescribeMirrors (16006): the mirror fetchers are not built")


def _call(bootstrap: str, api_name: str, **fields):
    api = APIS_BY_NAME[api_name]
    with RawConnection(bootstrap, timeout_s=TIMEOUT_S) as conn:
        return conn.request(api, 0, api.request.cls(**fields))


def _link_and_mirror(a: str, b: str, topic: str, group: str) -> None:
    classes = struct_classes(APIS_BY_NAME["CreateClusterLinks"].request)
    filters = {"groupFilters": [{"name": group, "patternType": "LITERAL", "filterType": "INCLUDE"}]}
    configs = {
        "bootstrap.servers": a,
        "consumer.offset.sync.enable": "true",
        "consumer.offset.sync.ms": "1000",
        "consumer.offset.group.filters": json.dumps(filters),
        "topic.config.sync.ms": "1000",
    }
    response = _call(
        b, "CreateClusterLinks", validate_only=False, timeout_ms=30000,
        links=[classes.CreatableLink(
            link_name=LINK, configs=[classes.CreatableLinkConfig(name=k, value=v) for k, v in configs.items()]
        )],
    )  # fmt: skip
    (result,) = response.results
    assert result.error_code == ErrorCode.NONE, result.error_message
    classes = struct_classes(APIS_BY_NAME["CreateMirrorTopics"].request)
    response = _call(
        b, "CreateMirrorTopics", validate_only=False, timeout_ms=30000,
        topics=[classes.CreatableMirror(
            mirror_topic=topic, link_name=LINK, source_topic=None, replication_factor=1, configs=[]
        )],
    )  # fmt: skip
    (result,) = response.results
    assert result.error_code == ErrorCode.NONE, result.error_message


def _mirror_state(b: str, topic: str) -> int | None:
    response = _call(b, "DescribeMirrors", topics=[topic])
    for described in response.topics:
        if described.mirror_topic == topic and described.error_code == ErrorCode.NONE:
            return described.state
    return None


def _alter_mirror(b: str, topic: str, operation: int) -> None:
    response = _call(b, "AlterMirrors", operation=operation, topics=[topic], validate_only=False)
    (result,) = response.results
    assert result.error_code == ErrorCode.NONE, result.error_message


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({KTopicPartition(t, p): OffsetAndMetadata(o, None) for (t, p), o in offsets.items()})
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets (OffsetFetch through confluent-kafka's admin client)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=30).values()
    return {(tp.topic, tp.partition): tp.offset for tp in future.result(30).topic_partitions if tp.offset >= 0}


def _high_watermark(bootstrap: str, topic: str, partition: int) -> int | None:
    """The partition's high watermark (ListOffsets LATEST), None while it cannot be read (no leader yet)."""
    answer = list_offset(bootstrap, topic, partition, -1)
    return answer.offset if answer.error_code == ErrorCode.NONE else None


def _partition_count(bootstrap: str, topic: str) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    found = metadata.topics.get(topic)
    return 0 if found is None or found.error is not None else len(found.partitions)


def _setup(broker_factory, *, mirror_data: bool = False):
    a, b = broker_factory(), broker_factory()
    _require(b.bootstrap, mirror_data=mirror_data)
    topic, group = unique_topic("orders"), unique_topic("billing")
    create_topic(a.bootstrap, topic, partitions=2)
    produce("kafka-python", a.bootstrap, topic, [Msg(None, b"p0-%d" % i) for i in range(10)], partition=0)
    produce("kafka-python", a.bootstrap, topic, [Msg(None, b"p1-%d" % i) for i in range(6)], partition=1)
    offsets = {(topic, 0): 4, (topic, 1): 2}
    _commit(a.bootstrap, group, offsets)
    _link_and_mirror(a.bootstrap, b.bootstrap, topic, group)
    return a, b, topic, group, offsets


def test_offsets_sync_partitions_grow_and_a_deleted_source_stops_the_mirror(broker_factory):
    a, b, topic, group, offsets = _setup(broker_factory)

    def synced():
        # What B's mirror holds caps what B's group gets: read the caps after the offsets.
        committed = _committed(b.bootstrap, group)
        caps = {key: _high_watermark(b.bootstrap, *key) for key in offsets}
        return set(committed) == set(offsets) and all(
            caps[key] is not None and committed[key] == min(offset, caps[key]) for key, offset in offsets.items()
        )

    assert wait_until(synced, timeout_s=TIMEOUT_S, interval_s=0.5), _committed(b.bootstrap, group)

    admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
    admin_a.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    assert wait_until(lambda: _partition_count(b.bootstrap, topic) == 3, timeout_s=TIMEOUT_S, interval_s=0.5)

    admin_a.delete_topics([topic], operation_timeout=30)[topic].result(30)
    if DESCRIBE_MIRRORS_KEY not in _offered_keys(b.bootstrap):
        pytest.skip("the mirror's state is read with DescribeMirrors (16006), which the broker does not offer yet")
    assert wait_until(lambda: _mirror_state(b.bootstrap, topic) == MIRROR_SOURCE_DELETED, timeout_s=TIMEOUT_S, interval_s=0.5), (
        MIRROR_STATE_NAMES.get(_mirror_state(b.bootstrap, topic))
    )


def _wait_mirror_caught_up(a: str, b: str, topic: str, partitions: int = 2) -> None:
    def caught_up():
        return all(_high_watermark(b, topic, p) == _high_watermark(a, topic, p) for p in range(partitions))

    assert wait_until(caught_up, timeout_s=TIMEOUT_S, interval_s=0.5)


def test_a_consumer_moved_to_the_mirror_resumes_at_the_committed_offset(broker_factory):
    a, b, topic, group, offsets = _setup(broker_factory, mirror_data=True)
    _wait_mirror_caught_up(a.bootstrap, b.bootstrap, topic)
    assert wait_until(lambda: _committed(b.bootstrap, group) == offsets, timeout_s=TIMEOUT_S, interval_s=0.5), (
        _committed(b.bootstrap, group)
    )
    consumer = confluent_consumer(b.bootstrap, {"group.id": group, "auto.offset.reset": "earliest"})
    try:
        committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
        assert {(tp.topic, tp.partition): tp.offset for tp in committed} == offsets
        consumer.subscribe([topic])
        first: dict[int, tuple[int, bytes]] = {}
        deadline = time.monotonic() + TIMEOUT_S
        while len(first) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            first.setdefault(message.partition(), (message.offset(), message.value()))
    finally:
        consumer.close()
    # The first record of each partition is the one at the committed offset (A's record there).
    assert first == {0: (4, b"p0-4"), 1: (2, b"p1-2")}


def test_an_offset_past_the_mirror_is_capped_until_the_mirror_holds_it(broker_factory):
    a, b, topic, group, _ = _setup(broker_factory, mirror_data=True)
    _wait_mirror_caught_up(a.bootstrap, b.bootstrap, topic)
    _alter_mirror(b.bootstrap, topic, MIRROR_OP_PAUSE)
    assert wait_until(lambda: _mirror_state(b.bootstrap, topic) == MIRROR_PAUSED, timeout_s=TIMEOUT_S, interval_s=0.2)
    held = _high_watermark(b.bootstrap, topic, 0)
    assert held is not None
    produce("kafka-python", a.bootstrap, topic, [Msg(None, b"late-%d" % i) for i in range(5)], partition=0)
    past = _high_watermark(a.bootstrap, topic, 0)
    assert past > held
    _commit(a.bootstrap, group, {(topic, 0): past})
    # Paused: nothing more is copied, and B's group gets no further than the mirror holds.
    assert wait_until(lambda: _committed(b.bootstrap, group).get((topic, 0)) == held, timeout_s=TIMEOUT_S, interval_s=0.5)
    assert _high_watermark(b.bootstrap, topic, 0) == held
    _alter_mirror(b.bootstrap, topic, MIRROR_OP_RESUME)
    assert wait_until(lambda: _mirror_state(b.bootstrap, topic) == MIRROR_ACTIVE, timeout_s=TIMEOUT_S, interval_s=0.2)
    _wait_mirror_caught_up(a.bootstrap, b.bootstrap, topic)
    assert wait_until(lambda: _committed(b.bootstrap, group).get((topic, 0)) == past, timeout_s=TIMEOUT_S, interval_s=0.5)
