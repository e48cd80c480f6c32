"""DescribeMirrors (broker/handlers/describe_mirrors.py) over a fake broker: the
image's mirror topics, the partitions led here with the mirror fetcher's
status, stop offsets of stopped mirrors, errors and authorization."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from broker.handlers import describe_mirrors
from controller.metadata.image import ClusterLink, MetadataImage, MirrorTopic, PartitionImage, TopicImage
from controller.metadata.records import MIRROR_ACTIVE, MIRROR_PROMOTED
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from replication.mirror_core import MirrorPartition

API = APIS_BY_NAME["DescribeMirrors"]
Q = struct_classes(API.request)
NODE = 1
LINK = ClusterLink(uuid.uuid4(), "east", {"bootstrap.servers": "src:9092"})
ACTIVE_ID, PROMOTED_ID, PLAIN_ID = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


def partitions(count: int, leader_of) -> dict:
    return {p: PartitionImage(p, (1, 2), (1, 2), leader_of(p), 3, 3) for p in range(count)}


IMAGE = MetadataImage(
    topics={
        "orders": TopicImage("orders", ACTIVE_ID, partitions(2, lambda p: 1 if p == 0 else 2)),
        "payments": TopicImage("payments", PROMOTED_ID, partitions(1, lambda p: 1)),
        "plain": TopicImage("plain", PLAIN_ID, partitions(1, lambda p: 1)),
    },
    topic_names_by_id={ACTIVE_ID: "orders", PROMOTED_ID: "payments", PLAIN_ID: "plain"},
    cluster_links={"east": LINK},
    mirror_topics={
        ACTIVE_ID: MirrorTopic(ACTIVE_ID, LINK.link_id, "orders", MIRROR_ACTIVE),
        PROMOTED_ID: MirrorTopic(PROMOTED_ID, LINK.link_id, "pay", MIRROR_PROMOTED, None, {0: (120, 4)}),
    },
)


class Authorizer:
    def __init__(self, allowed_topics):
        self.allowed_topics = allowed_topics

    def authorize(self, principal, host, operation, resource_type, name):
        return name in self.allowed_topics


def handler(authorizer=None):
    core = MirrorPartition("orders", 0, started_ms=0, source_high_watermark=50, last_fetch_ms=1234, caught_up_ms=0)
    logs = {
        ("orders", 0): SimpleNamespace(log_end_offset=40, high_watermark=38),
        ("payments", 0): SimpleNamespace(log_end_offset=130, high_watermark=130),
    }
    broker = SimpleNamespace(
        node_id=NODE,
        image=IMAGE,
        authorizer=authorizer,
        partition_log=lambda topic, partition: logs.get((topic, partition)),
        mirrors=SimpleNamespace(status=lambda key: (core, None) if key == ("orders", 0) else None),
    )
    registered = {}
    dispatcher = SimpleNamespace(register=lambda key, low, high, handle, **kw: registered.update({key: (low, high, handle)}))
    describe_mirrors.register(dispatcher, broker)
    low, high, handle = registered[API.key]
    assert (low, high) == (0, 0)
    ctx = SimpleNamespace(principal="User:alice", host="127.0.0.1")
    return lambda topics: handle(ctx, Q.DescribeMirrorsRequest(topics=topics))


def test_every_mirror_with_the_partitions_led_here():
    response = handler()(None)
    assert [t.mirror_topic for t in response.topics] == ["orders", "payments"]
    orders, payments = response.topics
    assert (orders.link_name, orders.source_topic, orders.state, orders.error_code) == ("east", "orders", MIRROR_ACTIVE, 0)
    [p] = orders.partitions  # partition 1 is led by broker 2
    assert (p.partition_index, p.leader_id, p.local_log_end_offset, p.local_high_watermark) == (0, NODE, 40, 38)
    assert (p.source_high_watermark, p.lag_records, p.last_fetch_ms, p.stop_offset) == (50, 10, 1234, -1)
    assert p.lag_ms > 0
    [q] = payments.partitions
    assert (payments.source_topic, payments.state) == ("pay", MIRROR_PROMOTED)
    assert (q.stop_offset, q.local_log_end_offset, q.lag_records) == (120, 130, -1)


def test_named_topics_that_are_not_mirrors_or_do_not_exist():
    response = handler()(["plain", "nope", "orders"])
    assert [(t.mirror_topic, t.error_code) for t in response.topics] == [
        ("plain", ErrorCode.RESOURCE_NOT_FOUND),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("orders", ErrorCode.NONE),
    ]


def test_describe_on_each_topic_is_needed():
    ask = handler(Authorizer({"orders"}))
    assert [t.mirror_topic for t in ask(None).topics] == ["orders"]
    named = ask(["payments", "orders"]).topics
    assert [(t.mirror_topic, t.error_code) for t in named] == [
        ("payments", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("orders", ErrorCode.NONE),
    ]
