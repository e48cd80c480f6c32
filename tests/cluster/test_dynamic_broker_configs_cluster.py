"""Dynamic broker configs on three combined nodes: a cluster-wide change made
through one node (``pybroker configs --entity-default``) is in the metadata
log, so every node applies it: each describes it, each leader refuses a
record over the new message.max.bytes, every replica drops the segments past
the new log.retention.ms, and leaders enforce a new min.insync.replicas on
the next acks=all produce."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import ConfigResource, ConfigSource

from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until
from tests.conftest import PROJECT_ROOT


def configs_tool(bootstrap: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "configs", "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )


def set_default(cluster: ReplicatedCluster, via: int, setting: str, nodes=NODE_IDS) -> None:
    """Sets a cluster-wide default through node ``via`` and waits until each of ``nodes`` applied it.

    The alter is answered once the controller committed the change; every broker
    replays it a moment later (as in Kafka), so a check made at once could see the
    old value.
    """
    done = configs_tool(cluster.bootstrap([via]), "--alter", "--entity-type", "brokers", "--entity-default", "--add-config", setting)
    assert done.returncode == 0, done.stderr
    key, _, value = setting.partition("=")

    def applied(node: int) -> bool:
        resource, admin = ConfigResource("broker", str(node)), cluster.admin([node])  # kept: a dropped client cancels its futures
        entry = admin.describe_configs([resource])[resource].result(timeout=20).get(key)
        return entry is not None and entry.value == value

    for node in nodes:
        assert wait_until(lambda: applied(node), 20), (node, setting)


def produce_error(bootstrap: str, topic: str, partition: int, size_bytes: int) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "linger.ms": 0})
    outcome = []
    producer.produce(topic, b"v" * size_bytes, partition=partition, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(30)
    assert outcome, "no delivery report"
    return outcome[0]


def segment_count(cluster: ReplicatedCluster, node: int, topic: str) -> int:
    return len(list(cluster.partition_dir(node, topic, 0).glob("*.log")))


def test_a_cluster_wide_change_through_one_node_applies_on_all(tmp_path):
    cluster = ReplicatedCluster(tmp_path, extra={"log.retention.check.interval.ms": "200"})
    cluster.start()
    try:
        topic = f"dyn-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, partitions=3, config={"segment.bytes": "1024"})
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "linger.ms": 0})
        for _ in range(10):
            producer.produce(topic, b"x" * 400, partition=0)
            producer.flush(30)  # one batch each: several segments on every replica
        assert wait_until(lambda: all(segment_count(cluster, n, topic) >= 3 for n in NODE_IDS), 15)
        time.sleep(1.2)

        set_default(cluster, 2, "message.max.bytes=1000")
        set_default(cluster, 2, "log.retention.ms=1000")
        for node in NODE_IDS:  # every node describes what node 2 was told
            resource, admin = ConfigResource("topic", topic), cluster.admin([node])
            entry = admin.describe_configs([resource])[resource].result(timeout=20)["max.message.bytes"]
            assert (entry.value, entry.source) == ("1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value), node
            resource = ConfigResource("broker", str(node))  # answered by that node itself
            entry = admin.describe_configs([resource])[resource].result(timeout=20)["message.max.bytes"]
            assert (entry.value, entry.source, entry.is_read_only) == (
                "1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False
            ), node
        for partition in range(3):  # each leader refuses a record over the new limit at once
            error = produce_error(cluster.bootstrap(), topic, partition, 5000)
            assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, (partition, error)
        # Retention ran on every replica, leader or follower.
        assert wait_until(lambda: all(segment_count(cluster, n, topic) == 1 for n in NODE_IDS), 15), [
            segment_count(cluster, n, topic) for n in NODE_IDS
        ]

        # min.insync.replicas raised cluster-wide reaches the partitions' current leaders.
        set_default(cluster, 3, "min.insync.replicas=3")
        leader = cluster.leader_of(topic, 0)
        victim = next(n for n in NODE_IDS if n != leader)
        cluster.kill(victim)
        survivors = [n for n in NODE_IDS if n != victim]
        assert cluster.wait_for_isr(topic, 0, sorted(survivors), 20) is not None
        error = produce_error(cluster.bootstrap([leader]), topic, 0, 10)
        assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS, error
        set_default(cluster, leader, "min.insync.replicas=2", nodes=survivors)
        assert produce_error(cluster.bootstrap([leader]), topic, 0, 10) is None
    finally:
        cluster.stop()
