"""ReplicaManager takes no leadership before the controller has seen this process
caught up with its own registration (it unfences it then)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from broker.replica_manager import ReplicaManager
from controller.metadata.image import MetadataImage, PartitionImage, TopicImage
from storage.log import LogConfig, PartitionLog


def fake_broker(tmp_path, image):
    plog = PartitionLog(tmp_path / "t-0", LogConfig())
    return SimpleNamespace(
        config={"replica.lag.time.max.ms": 30_000, "num.replica.fetchers": 1},
        node_id=1,
        image=image,
        partition_log=lambda topic, partition: plog if (topic, partition) == ("t", 0) else None,
        logs=SimpleNamespace(logs={("t", 0): plog}, checkpointed_high_watermark=lambda topic, partition: None),
        topic_config=lambda topic: {},
        partition_watch=SimpleNamespace(notify=lambda key: None),
    ), plog


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
