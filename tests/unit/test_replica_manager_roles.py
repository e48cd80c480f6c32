"""ReplicaManager takes no leadership before the controller has seen this process
caught up with its own registration (it unfences it then)."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

from broker.replica.corruption import CorruptionHandler
from broker.replica.manager import HostedPartitions, ReplicaManager
from broker.replica.partition_watch import PartitionWatch
from controller.metadata.image import MetadataImage, PartitionImage, TopicImage
from storage.log import LogConfig, PartitionLog


def fake_broker(tmp_path, image):
    plog = PartitionLog(tmp_path / "t-0", LogConfig())
    broker = SimpleNamespace(
        config={
            "replica.lag.time.max.ms": 30_000,
            "num.replica.fetchers": 1,
            # What a follower's fetcher reads when it is made (it is not started here).
            "replica.fetch.wait.max.ms": 500,
            "replica.fetch.min.bytes": 1,
            "replica.fetch.response.max.bytes": 10 << 20,
            "replica.fetch.max.bytes": 1 << 20,
            "replica.fetch.backoff.ms": 1000,
            "replica.socket.timeout.ms": 30_000,
        },
        node_id=1,
        image=image,
        partition_log=lambda topic, partition: plog if (topic, partition) == ("t", 0) else None,
        logs=SimpleNamespace(logs={("t", 0): plog}, checkpointed_high_watermark=lambda topic, partition: None),
        topic_config=lambda topic: {},
        partition_watch=PartitionWatch(),
    )
    broker.corruption = CorruptionHandler(broker, halt=lambda: broker.halts.append(time.monotonic()))
    broker.halts = []
    return broker, plog


def image_led_by(node_id: int) -> MetadataImage:
    partition = PartitionImage(0, (node_id,), (node_id,), node_id, 3, 3)
    topic = TopicImage("t", uuid.uuid4(), {0: partition})
    return MetadataImage(topics={"t": topic}, topic_names_by_id={topic.topic_id: "t"})


def test_no_leadership_before_the_registration_is_caught_up(tmp_path):
    broker, plog = fake_broker(tmp_path, image_led_by(1))
    replicas = ReplicaManager(broker)
    replicas.apply_image(MetadataImage(), broker.image)
    assert replicas.leader_for("t", 0) is None  # a Produce gets NOT_LEADER_OR_FOLLOWER and retries
    replicas.registration_caught_up()
    leader = replicas.leader_for("t", 0)
    assert leader is not None and leader.leader_epoch == 3
    replicas.registration_caught_up()  # once only
    assert replicas.leader_for("t", 0) is leader
    plog.close()


def replicated_image(leader: int, leader_epoch: int, topic_id=None) -> MetadataImage:
    partition = PartitionImage(0, (1, 2, 3), (1, 2, 3), leader, leader_epoch, leader_epoch)
    topic = TopicImage("t", topic_id or uuid.UUID(int=7), {0: partition})
    return MetadataImage(topics={"t": topic}, topic_names_by_id={topic.topic_id: "t"})


def test_a_leader_the_controller_fenced_stops_leading_until_the_metadata_catches_up(tmp_path):
    """Found by the fault suite: a leader cut off by the network was replaced,
    and after the network healed it went on answering (as group coordinator,
    stale committed offsets) for seconds before its metadata caught up. An
    AlterPartition refused with FENCED_LEADER_EPOCH proves it was replaced."""
    from protocol.errors import ErrorCode

    image = replicated_image(leader=1, leader_epoch=3)
    broker, plog = fake_broker(tmp_path, image)
    lost = []
    broker.leadership_lost = lost.append
    replicas = ReplicaManager(broker)
    replicas.registration_caught_up()
    leader = replicas.leader_for("t", 0)
    assert leader is not None and leader.leader_epoch == 3
    refused = SimpleNamespace(topics=[SimpleNamespace(
        topic_id=uuid.UUID(int=7),
        partitions=[SimpleNamespace(partition_index=0, error_code=ErrorCode.FENCED_LEADER_EPOCH)],
    )])
    replicas._apply_alter_response({("t", 0): (leader, None)}, refused, 0)
    assert lost == [("t", 0)]
    # The image still says epoch 3 is ours; it is not believed any more.
    assert replicas.leader_for("t", 0) is None
    replicas.apply_image(MetadataImage(), image)
    assert replicas.leader_for("t", 0) is None
    # The metadata catches up: another broker leads at epoch 4 ...
    newer = replicated_image(leader=2, leader_epoch=4)
    broker.image = newer
    replicas.apply_image(image, newer)
    assert replicas.leader_for("t", 0) is None and replicas.is_follower("t", 0)
    assert replicas.superseded == {}
    # ... and a later election may give it back, at a newer epoch.
    again = replicated_image(leader=1, leader_epoch=5)
    broker.image = again
    replicas.apply_image(newer, again)
    assert replicas.leader_for("t", 0).leader_epoch == 5
    plog.close()


def test_other_stale_refusals_keep_the_leadership(tmp_path):
    from protocol.errors import ErrorCode

    image = replicated_image(leader=1, leader_epoch=3)
    broker, plog = fake_broker(tmp_path, image)
    broker.leadership_lost = lambda key: None
    replicas = ReplicaManager(broker)
    replicas.registration_caught_up()
    leader = replicas.leader_for("t", 0)
    refused = SimpleNamespace(topics=[SimpleNamespace(
        topic_id=uuid.UUID(int=7),
        partitions=[SimpleNamespace(partition_index=0, error_code=ErrorCode.INVALID_UPDATE_VERSION)],
    )])
    replicas._apply_alter_response({("t", 0): (leader, None)}, refused, 0)
    assert replicas.leader_for("t", 0) is leader
    plog.close()


def test_hosted_counts_partitions_from_the_metadata_whether_or_not_their_logs_are_open(tmp_path):
    """After a restart a single-replica log opens on first use; until then the broker
    still hosts it and, once it may lead, leads it (Kafka's PartitionCount, LeaderCount)."""
    led_here = PartitionImage(0, (1,), (1,), 1, 3, 3)
    led_here_short = PartitionImage(1, (1,), (1,), 1, 3, 3)
    followed = PartitionImage(2, (2, 1), (2, 1), 2, 1, 1)
    offline = PartitionImage(3, (1, 2), (2,), -1, 1, 1)
    elsewhere = PartitionImage(4, (2,), (2,), 2, 1, 1)
    under = PartitionImage(0, (1, 2), (1,), 1, 2, 2)
    topics = {
        "t": TopicImage("t", uuid.UUID(int=1), {p.partition_id: p for p in (led_here, led_here_short, followed, offline, elsewhere)}),
        "u": TopicImage("u", uuid.UUID(int=2), {0: under}),
    }
    image = MetadataImage(topics=topics, topic_names_by_id={t.topic_id: n for n, t in topics.items()})
    broker, plog = fake_broker(tmp_path, image)
    broker.topic_config = lambda topic: {"min.insync.replicas": "2"} if topic.name == "t" else {}
    replicas = ReplicaManager(broker)
    # Not unfenced yet: hosted, led by nobody here.
    assert replicas.hosted() == HostedPartitions(count=5, leaders=0, under_replicated=0, under_min_isr=0)
    replicas.may_lead = True
    # No leader state was made (no log opened): t-0, t-1 and u-0 are led all the same;
    # u-0's ISR lacks a replica, t's single replicas are below min.insync.replicas=2.
    assert replicas.leaders == {}
    assert replicas.hosted() == HostedPartitions(count=5, leaders=3, under_replicated=1, under_min_isr=2)
    # A leadership taken up counts once, with its own state.
    assert replicas.leader_for("t", 0) is not None
    assert replicas.hosted().leaders == 3
    # A leader epoch the controller said is over is not led here.
    replicas.superseded[("t", 1)] = 3
    assert replicas.hosted().leaders == 2
    plog.close()
