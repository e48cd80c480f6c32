"""The analysis jobs against values computed here, independently, from what was produced."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime

from tests.conftest import PROJECT_ROOT
from tests.interop._support import create_topic, unique_topic
from tests.spark._support import stopped_log_dir

HOUR_MS = 3_600_000
BASE_MS = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS  # an hour boundary


def produce_known_records(bootstrap: str, topic: str, partitions: int = 2):
    """Records over three hours with repeated keys and some null keys; returns them
    as (partition, key, value, timestamp_ms)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    produced = []
    for i in range(120):
        partition = i % partitions
        key = None if i % 10 == 0 else b"k%d" % (i % 7)
        value = b"v" * (i % 13)
        timestamp_ms = BASE_MS + (i % 3) * HOUR_MS + i
        producer.produce(topic, key=key, value=value, partition=partition, timestamp=timestamp_ms)
        produced.append((partition, key, value, timestamp_ms))
    assert producer.flush(30) == 0
    return produced


def test_topic_stats_per_partition_and_per_hour(spark, broker_factory):
    from spark_jobs.session import read_topics
    from spark_jobs.topic_stats import hourly_stats, partition_stats

    broker = broker_factory({"log.segment.bytes": "2048"})
    topic = unique_topic("stats")
    create_topic(broker.bootstrap, topic, partitions=2)
    produced = produce_known_records(broker.bootstrap, topic)
    records = read_topics(spark, str(stopped_log_dir(broker)), topic)

    expected = defaultdict(lambda: {"records": 0, "bytes": 0, "keys": set(), "ts": []})
    expected_hourly = defaultdict(lambda: {"records": 0, "bytes": 0, "keys": set()})
    for partition, key, value, ts in produced:
        size = len(key or b"") + len(value)
        for bucket in (expected[partition], expected_hourly[(partition, ts - ts % HOUR_MS)]):
            bucket["records"] += 1
            bucket["bytes"] += size
            if key is not None:
                bucket["keys"].add(key)
        expected[partition]["ts"].append(ts)

    rows = partition_stats(records).collect()
    assert [r.partition for r in rows] == [0, 1]
    for row in rows:
        e = expected[row.partition]
        assert (row.topic, row.records, row.bytes, row.keys) == (topic, e["records"], e["bytes"], len(e["keys"]))
        assert row.min_timestamp == datetime.fromtimestamp(min(e["ts"]) / 1000, UTC).replace(tzinfo=None)
        assert row.max_timestamp == datetime.fromtimestamp(max(e["ts"]) / 1000, UTC).replace(tzinfo=None)
        assert (row.first_offset, row.last_offset) == (0, e["records"] - 1)

    hourly = {
        (r.partition, int(r.hour.replace(tzinfo=UTC).timestamp() * 1000)): r
        for r in hourly_stats(records).collect()
    }
    assert set(hourly) == set(expected_hourly)
    for bucket, e in expected_hourly.items():
        row = hourly[bucket]
        assert (row.records, row.bytes, row.keys) == (e["records"], e["bytes"], len(e["keys"]))


def test_topic_stats_runs_as_a_module_and_writes_parquet(broker_factory, tmp_path):
    import pyarrow.parquet as pq

    broker = broker_factory()
    topic = unique_topic("stats-cli")
    create_topic(broker.bootstrap, topic, partitions=2)
    produced = produce_known_records(broker.bootstrap, topic)
    log_dir = stopped_log_dir(broker)
    output = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_jobs.topic_stats",
            "--path",
            str(log_dir),
            "--topics",
            topic,
            "--output",
            str(output),
            "--master",
            "local[2]",
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = pq.read_table(output / "per_partition").to_pydict()
    assert sorted(zip(table["partition"], table["records"])) == [(0, 60), (1, 60)]
    assert sum(table["records"]) == len(produced)


def test_consumer_lag_from_consumer_offsets(spark, broker_factory):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    from spark_jobs.consumer_lag import consumer_lag

    broker = broker_factory({"log.segment.bytes": "4096"})
    topic = unique_topic("lag")
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_known_records(broker.bootstrap, topic)  # 60 records per partition

    def commit(group: str, offsets: dict[int, int]) -> None:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        finally:
            consumer.close()

    commit("lag-a", {0: 10, 1: 20})
    commit("lag-a", {0: 15})  # a later commit of the same partition wins
    commit("lag-b", {1: 60})
    commit("lag-gone", {0: 1})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until its future resolves
    admin.delete_consumer_groups(["lag-gone"])["lag-gone"].result(30)

    log_dir = str(stopped_log_dir(broker))
    rows = [tuple(r) for r in consumer_lag(spark, log_dir).collect()]
    assert rows == [
        ("lag-a", topic, 0, 15, 60, 45),
        ("lag-a", topic, 1, 20, 60, 40),
        ("lag-b", topic, 1, 60, 60, 0),
    ]
    only_b = [tuple(r) for r in consumer_lag(spark, log_dir, "lag-b").collect()]
    assert only_b == [("lag-b", topic, 1, 60, 60, 0)]


def test_decode_commit_reads_what_the_coordinator_writes():
    from protocol.consumer_offsets import (
        OffsetAndMetadata,
        OffsetKey,
        group_key_bytes,
        offset_key_bytes,
        offset_value_bytes,
    )
    from spark_jobs.consumer_lag import decode_commit

    key = offset_key_bytes(OffsetKey("g", "orders", 3))
    assert decode_commit(key, offset_value_bytes(OffsetAndMetadata(42, 1, "m", 7))) == ("g", "orders", 3, 42)
    assert decode_commit(key, offset_value_bytes(OffsetAndMetadata(43, -1, "", 7, expire_timestamp_ms=9))) == ("g", "orders", 3, 43)
    assert decode_commit(key, None) == ("g", "orders", 3, None)
    assert decode_commit(group_key_bytes("g"), b"\x00\x03") is None
    assert decode_commit(b"\x00", None) is None
