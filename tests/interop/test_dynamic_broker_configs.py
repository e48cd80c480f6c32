"""Dynamic broker configs on one broker, set with ``pybroker configs`` and seen
by confluent-kafka: a cluster-wide log.retention.ms drops old segments of a
topic without its own retention.ms (not of one with it), message.max.bytes
lowered refuses a larger record at once and raised accepts it again, a
per-broker value beats the cluster-wide one, DescribeConfigs sources and
synonyms, refused keys, and the values surviving a restart."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.conftest import PROJECT_ROOT, BrokerProcess, wait_until
from tests.interop._support import unique_topic

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

STATIC_MESSAGE_MAX_BYTES = "900000"


def pybroker(bootstrap: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "configs", "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )


def alter(bootstrap: str, *args) -> subprocess.CompletedProcess:
    return pybroker(bootstrap, "--alter", "--entity-type", "brokers", *args)


def describe(admin: AdminClient, kind: str, name: str) -> dict:
    resource = ConfigResource(kind, name)
    return admin.describe_configs([resource], request_timeout=30)[resource].result(30)


def describe_default(bootstrap: str) -> str:
    """``pybroker configs --describe`` of the cluster-wide default (confluent-kafka cannot name it)."""
    shown = pybroker(bootstrap, "--describe", "--entity-type", "brokers", "--entity-default")
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def produce_one(bootstrap: str, topic: str, value: bytes) -> KafkaError | None:
    """Produce one record (acks=all, no retries); the delivery error, or None."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "linger.ms": 0})
    outcome = []
    producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(30)
    assert outcome, "no delivery report"
    return outcome[0]


def log_start(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dyn-configs-probe"})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return low
    finally:
        consumer.close()


def start_broker(data_dir) -> BrokerProcess:
    return BrokerProcess(
        data_dir, {"log.retention.check.interval.ms": "200", "message.max.bytes": STATIC_MESSAGE_MAX_BYTES}
    ).start()


def test_dynamic_broker_configs(tmp_path):
    broker = start_broker(tmp_path)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        plain, own = unique_topic("dyn-plain"), unique_topic("dyn-own")
        futures = admin.create_topics([
            NewTopic(plain, 1, 1, config={"segment.bytes": "1024"}),
            NewTopic(own, 1, 1, config={"segment.bytes": "1024", "retention.ms": "3600000"}),
        ])
        for future in futures.values():
            future.result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for topic in (plain, own):
            for i in range(12):
                producer.produce(topic, b"x" * 400, partition=0)
                producer.flush(30)  # one batch each: several segments
        time.sleep(1.2)  # older than the retention set next
        assert log_start(broker.bootstrap, plain) == 0

        # Cluster-wide retention: the topic without its own drops old segments, the other keeps them.
        done = alter(broker.bootstrap, "--entity-default", "--add-config", "log.retention.ms=1000")
        assert (done.returncode, done.stdout) == (0, "Completed updating default config for brokers in the cluster.\n"), done.stderr
        wait_until(lambda: log_start(broker.bootstrap, plain) > 0, timeout_s=15)
        assert log_start(broker.bootstrap, own) == 0
        topic_entries = describe(admin, "topic", plain)
        retention = topic_entries["retention.ms"]
        assert (retention.value, retention.source) == ("1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert [(s.name, s.value, s.source) for s in retention.synonyms.values()][:1] == [
            ("log.retention.ms", "1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        ]
        assert describe(admin, "topic", own)["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

        # message.max.bytes lowered cluster-wide: a larger record is refused at once ...
        assert alter(broker.bootstrap, "--entity-default", "--add-config", "message.max.bytes=1000").returncode == 0
        error = produce_one(broker.bootstrap, own, b"y" * 5000)
        assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error
        # ... a per-broker value beats the cluster-wide one ...
        assert alter(broker.bootstrap, "--entity-name", "1", "--add-config", "message.max.bytes=100000").returncode == 0
        assert produce_one(broker.bootstrap, own, b"y" * 5000) is None
        entry = describe(admin, "broker", "1")["message.max.bytes"]
        assert (entry.value, entry.source, entry.is_read_only) == (
            "100000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False
        )
        assert alter(broker.bootstrap, "--entity-name", "1", "--delete-config", "message.max.bytes").returncode == 0
        error = produce_one(broker.bootstrap, own, b"y" * 5000)
        assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error

        # The tool shows what DescribeConfigs answers: sources and synonyms in Kafka's order.
        assert (
            "  message.max.bytes=1000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=1000, "
            f"STATIC_BROKER_CONFIG:message.max.bytes={STATIC_MESSAGE_MAX_BYTES}, DEFAULT_CONFIG:message.max.bytes=1048588}}"
        ) in describe_default(broker.bootstrap)
        assert alter(broker.bootstrap, "--entity-name", "1", "--add-config", "message.max.bytes=2000").returncode == 0
        mine = pybroker(broker.bootstrap, "--describe", "--entity-type", "brokers", "--entity-name", "1")
        assert (
            "  message.max.bytes=2000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=2000, "
            "DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=1000, "
            f"STATIC_BROKER_CONFIG:message.max.bytes={STATIC_MESSAGE_MAX_BYTES}, DEFAULT_CONFIG:message.max.bytes=1048588}}"
        ) in mine.stdout, mine.stdout
        # Raised again cluster-wide (and the broker's own value removed): accepted.
        assert alter(broker.bootstrap, "--entity-name", "1", "--delete-config", "message.max.bytes").returncode == 0
        assert alter(broker.bootstrap, "--entity-default", "--add-config", "message.max.bytes=10000").returncode == 0
        assert produce_one(broker.bootstrap, own, b"y" * 5000) is None

        # Refused keys: Kafka's read-only answer, and one Kafka makes dynamic that pybroker cannot apply.
        refused = alter(broker.bootstrap, "--entity-default", "--add-config", "log.dirs=/elsewhere")
        assert refused.returncode == 1
        assert "INVALID_REQUEST: Cannot update these configs dynamically: Set(log.dirs)" in refused.stderr
        refused = alter(broker.bootstrap, "--entity-name", "1", "--add-config", "compression.type=gzip")
        assert refused.returncode == 1
        assert "INVALID_REQUEST: compression.type cannot be updated dynamically by pybroker" in refused.stderr
        assert "compression.type" not in describe_default(broker.bootstrap)
    finally:
        broker.stop()

    # The values live in the metadata log: a restart keeps them.
    broker = start_broker(tmp_path)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert describe_default(broker.bootstrap) == (
            "Default configs for brokers in the cluster are:\n"
            "  log.retention.ms=1000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=1000, "
            "DEFAULT_CONFIG:log.retention.hours=168}\n"
            "  message.max.bytes=10000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=10000, "
            f"STATIC_BROKER_CONFIG:message.max.bytes={STATIC_MESSAGE_MAX_BYTES}, DEFAULT_CONFIG:message.max.bytes=1048588}}\n"
        )
        assert describe(admin, "topic", plain)["retention.ms"].value == "1000"
        error = produce_one(broker.bootstrap, own, b"z" * 20000)
        assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error
    finally:
        broker.stop()
