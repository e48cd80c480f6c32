"""Replication throttles on three combined nodes: a follower catching up on a
partition listed in follower.replication.throttled.replicas is held to
follower.replication.throttled.rate (a dynamic broker config, set through
IncrementalAlterConfigs on the broker, like kafka-configs.sh does), and catches up at full
speed once the throttle is removed."""

from __future__ import annotations

import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType  # noqa: E402

from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until  # noqa: E402

RATE_BYTES_PER_S = 400_000
PAYLOAD_BYTES = 4_000_000
FETCH_BYTES = 100_000


def alter(admin, resource: ConfigResource) -> None:
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=20)


def replica_bytes(cluster: ReplicatedCluster, node: int, topic: str) -> int:
    return sum(p.stat().st_size for p in cluster.partition_dir(node, topic, 0).glob("*.log"))


def test_a_throttled_follower_catches_up_no_faster_than_the_rate(tmp_path):
    # Small fetches, so the rate is held closely rather than in 1 MB bursts.
    cluster = ReplicatedCluster(tmp_path, replica_lag_time_max_ms=60_000, extra={"replica.fetch.max.bytes": str(FETCH_BYTES)})
    cluster.start()
    try:
        topic = f"throttled-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, config={"min.insync.replicas": "1"})
        leader = cluster.leader_of(topic)
        follower = next(n for n in NODE_IDS if n != leader)
        admin = cluster.admin()
        topic_resource = ConfigResource(
            ResourceType.TOPIC, topic,
            incremental_configs=[ConfigEntry("follower.replication.throttled.replicas", "*", incremental_operation=AlterConfigOpType.SET)],
        )
        alter(admin, topic_resource)
        rate = ConfigResource(
            ResourceType.BROKER, str(follower),
            incremental_configs=[ConfigEntry("follower.replication.throttled.rate", str(RATE_BYTES_PER_S), incremental_operation=AlterConfigOpType.SET)],
        )
        follower_admin = cluster.admin([follower])
        alter(follower_admin, rate)
        shown = ConfigResource(ResourceType.BROKER, str(follower))

        def rate_shown():
            entry = follower_admin.describe_configs([shown])[shown].result(timeout=20)["follower.replication.throttled.rate"]
            return entry.value, entry.source

        # The alter returns once the controller committed it; the follower shows it once
        # it has replayed that record (as in Kafka, a moment later).
        expected = (str(RATE_BYTES_PER_S), ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert wait_until(lambda: rate_shown() == expected, 20), rate_shown()

        cluster.kill(follower)
        # Fenced (out of the ISR) before the records: else the high watermark stays
        # at the dead follower's end, the returning follower is not behind it, and
        # a follower not behind the high watermark is not throttled (Kafka's
        # isReplicaInSync). A fast produce used to beat the session timeout now and then.
        others = [n for n in NODE_IDS if n != follower]
        assert cluster.wait_for_isr(topic, 0, others, 20) is not None, cluster.partition(topic, 0)
        producer = Producer({"bootstrap.servers": cluster.bootstrap([leader]), "acks": "1", "linger.ms": 5, "batch.size": 16384})
        for _ in range(PAYLOAD_BYTES // 1000):
            producer.produce(topic, b"x" * 1000)
            producer.poll(0)
        assert producer.flush(30) == 0
        target = replica_bytes(cluster, leader, topic)
        cluster.restart(follower)
        started = time.monotonic()
        assert wait_until(lambda: replica_bytes(cluster, follower, topic) > 0, 30)
        # Held to the rate: after 3 s it holds at most about 5 s' worth (the rate
        # is measured from the start of whole one-second windows, the first
        # bytes were copied before the 3 s began, and one fetch of
        # replica.fetch.max.bytes may overshoot). Unthrottled, all 4 MB take
        # well under a second.
        time.sleep(max(0.0, 3.0 - (time.monotonic() - started)))
        copied = replica_bytes(cluster, follower, topic)
        assert copied < target, f"caught up {copied} of {target} bytes within 3 s despite the throttle"
        assert copied <= FETCH_BYTES + 5.5 * RATE_BYTES_PER_S, copied
        # Removing the throttle lets it finish at once.
        rate.incremental_configs = [ConfigEntry("follower.replication.throttled.rate", None, incremental_operation=AlterConfigOpType.DELETE)]
        alter(cluster.admin([follower]), rate)
        assert wait_until(lambda: replica_bytes(cluster, follower, topic) >= target, 20), (
            replica_bytes(cluster, follower, topic), target
        )
    finally:
        cluster.stop()
