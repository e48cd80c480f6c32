"""The log cleaner through a real broker: a compacted topic keeps the latest value per key."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import wait_until


def consume_all(bootstrap: str, topic: str, limit_s: float = 20.0):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-check", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        out = []
        import time

        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                if out and out[-1][0] >= high - 1:
                    break
                continue
            if message.error():
                continue
            out.append((message.offset(), message.key(), message.value()))
            if message.offset() >= high - 1:
                break
        return out
    finally:
        consumer.close()


def test_compacted_topic_keeps_latest_value_per_key(broker_factory):
    broker = broker_factory({"log.cleaner.backoff.ms": "200", "log.retention.check.interval.ms": "200"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics(
        [NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"})]
    )
    futures["compacted"].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for round_number in range(40):
        for key in range(5):
            producer.produce("compacted", key=f"k{key}".encode(), value=f"v{round_number}".encode())
        producer.flush(10)
    producer.produce("compacted", key=b"k0", value=None)  # a tombstone, kept for delete.retention.ms
    producer.flush(10)
    total = 40 * 5 + 1

    def compacted():
        records = consume_all(broker.bootstrap, "compacted")
        return records if len(records) < total else None

    records = wait_until(compacted, timeout_s=30, interval_s=0.5)
    assert records, "the cleaner never compacted the topic"
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, key, value in records:
        latest[key] = (offset, value)
    # Every key's last write survives with its original offset.
    assert latest[b"k0"] == (total - 1, None)
    for key in range(1, 5):
        assert latest[f"k{key}".encode()][1] == b"v39"
    assert broker.process.poll() is None
