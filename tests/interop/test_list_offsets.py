"""ListOffsets through the clients: earliest/latest offsets and lookups by timestamp.

A lookup by timestamp answers the first *record* (in offset order) whose
timestamp is >= the target, with that record's timestamp, not the first offset
of the batch holding it; a target after every record answers nothing
(kafka-python: None, confluent: offset -1, the protocol: offset -1).
"""

from __future__ import annotations

import pytest

from protocol.records import build_batch
from tests.interop._support import (
    confluent_consumer,
    create_topic,
    list_offset,
    produce_raw,
    unique_topic,
)

T = 1_700_000_000_000

# (timestamps of one batch, codec); offsets run on across batches.
BATCHES = [
    ([T + 100, T + 200, T + 300, T + 400], 0),
    ([T + 1000, T + 1100, T + 1200], 1),  # gzip: the lookup has to look inside
    ([T + 3000, T + 2500, T + 3500], 0),  # timestamps out of order within the batch
    ([T + 5000], 4),  # zstd
]
TIMESTAMPS = [ts for batch, _ in BATCHES for ts in batch]
END = len(TIMESTAMPS)

# target -> (offset, timestamp) of the first record with timestamp >= target
LOOKUPS = [
    (0, (0, T + 100)),
    (T, (0, T + 100)),
    (T + 100, (0, T + 100)),
    (T + 101, (1, T + 200)),
    (T + 250, (2, T + 300)),
    (T + 400, (3, T + 400)),
    (T + 401, (4, T + 1000)),
    (T + 1150, (6, T + 1200)),
    (T + 1201, (7, T + 3000)),
    (T + 2400, (7, T + 3000)),
    (T + 3001, (9, T + 3500)),
    (T + 3501, (10, T + 5000)),
    (T + 5000, (10, T + 5000)),
    (T + 5001, None),
    (T + 10**9, None),
]


@pytest.fixture(scope="module")
def timed_topic(shared_broker):
    """A one-partition topic laid out as BATCHES, written batch by batch."""
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("timed")
    create_topic(bootstrap, topic)
    offset = 0
    for timestamps, codec in BATCHES:
        batch = build_batch([(b"k", f"v{offset + i}".encode(), [], ts) for i, ts in enumerate(timestamps)], codec=codec)
        response = produce_raw(bootstrap, topic, batch)
        assert response.error_code == 0 and response.base_offset == offset
        offset += len(timestamps)
    assert offset == END
    return topic


def kafka_python_consumer(bootstrap):
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, request_timeout_ms=30000)


def test_kafka_python_offsets_for_times(shared_broker, timed_topic):
    from kafka import TopicPartition

    tp = TopicPartition(timed_topic, 0)
    consumer = kafka_python_consumer(shared_broker.bootstrap)
    try:
        for target, want in LOOKUPS:
            found = consumer.offsets_for_times({tp: target}, timeout_ms=30000)[tp]
            got = None if found is None else (found.offset, found.timestamp)
            assert got == want, f"target {target - T:+d} ms"
            if found is not None:
                assert found.leader_epoch == 0
    finally:
        consumer.close()


def test_confluent_offsets_for_times(shared_broker, timed_topic):
    from confluent_kafka import TopicPartition

    consumer = confluent_consumer(shared_broker.bootstrap)
    try:
        for target, want in LOOKUPS:
            [found] = consumer.offsets_for_times([TopicPartition(timed_topic, 0, target)], timeout=30)
            assert found.error is None
            assert found.offset == (want[0] if want else -1), f"target {target - T:+d} ms"
    finally:
        consumer.close()


def test_protocol_offsets_for_times_report_the_record_timestamp(shared_broker, timed_topic):
    for target, want in LOOKUPS:
        response = list_offset(shared_broker.bootstrap, timed_topic, 0, target)
        assert response.error_code == 0
        assert (response.offset, response.timestamp) == (want if want else (-1, -1)), f"target {target - T:+d} ms"
        assert response.leader_epoch == (0 if want else -1)


def test_kafka_python_beginning_and_end_offsets(shared_broker, timed_topic):
    from kafka import TopicPartition

    bootstrap = shared_broker.bootstrap
    empty = unique_topic("empty")
    multi = unique_topic("multi")
    create_topic(bootstrap, empty)
    create_topic(bootstrap, multi, partitions=3)
    for partition, n in ((1, 2), (2, 5)):
        produce_raw(bootstrap, multi, build_batch([(None, b"x", [], T + i) for i in range(n)]), partition)

    tps = [TopicPartition(timed_topic, 0), TopicPartition(empty, 0)] + [TopicPartition(multi, p) for p in range(3)]
    consumer = kafka_python_consumer(bootstrap)
    try:
        assert consumer.beginning_offsets(tps, timeout_ms=30000) == {tp: 0 for tp in tps}
        assert consumer.end_offsets(tps, timeout_ms=30000) == {
            TopicPartition(timed_topic, 0): END,
            TopicPartition(empty, 0): 0,
            TopicPartition(multi, 0): 0,
            TopicPartition(multi, 1): 2,
            TopicPartition(multi, 2): 5,
        }
        # offsets_for_times on an empty partition: nothing.
        assert consumer.offsets_for_times({TopicPartition(empty, 0): 0}, timeout_ms=30000) == {TopicPartition(empty, 0): None}
    finally:
        consumer.close()


def test_confluent_watermarks(shared_broker, timed_topic):
    from confluent_kafka import TopicPartition

    bootstrap = shared_broker.bootstrap
    empty = unique_topic("empty-c")
    create_topic(bootstrap, empty)
    consumer = confluent_consumer(bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(timed_topic, 0), timeout=30) == (0, END)
        assert consumer.get_watermark_offsets(TopicPartition(empty, 0), timeout=30) == (0, 0)
    finally:
        consumer.close()


def test_latest_moves_with_appends(shared_broker):
    from kafka import TopicPartition

    bootstrap = shared_broker.bootstrap
    topic = unique_topic("latest-moves")
    create_topic(bootstrap, topic)
    tp = TopicPartition(topic, 0)
    consumer = kafka_python_consumer(bootstrap)
    try:
        for expected_end in (3, 4, 9):
            n = expected_end - consumer.end_offsets([tp], timeout_ms=30000)[tp]
            assert produce_raw(bootstrap, topic, build_batch([(None, b"x", [], T)] * n)).error_code == 0
            assert consumer.end_offsets([tp], timeout_ms=30000)[tp] == expected_end
            assert consumer.beginning_offsets([tp], timeout_ms=30000)[tp] == 0
    finally:
        consumer.close()


def test_special_timestamps(shared_broker):
    """-2 earliest, -1 latest (timestamp -1), -3 (v7+) the record with the largest
    timestamp and its own offset, -4 (v8+) earliest local, -5 (v9+) nothing tiered."""
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("special-ts")
    create_topic(bootstrap, topic)

    empty_latest = list_offset(bootstrap, topic, 0, -1)
    assert (empty_latest.error_code, empty_latest.offset, empty_latest.timestamp) == (0, 0, -1)
    empty_max = list_offset(bootstrap, topic, 0, -3, version=7)
    assert (empty_max.error_code, empty_max.offset, empty_max.timestamp) == (0, -1, -1)

    # The largest timestamp sits in the middle of the first batch.
    assert produce_raw(bootstrap, topic, build_batch([(None, b"a", [], T + 1), (None, b"b", [], T + 9000), (None, b"c", [], T + 2)])).error_code == 0
    assert produce_raw(bootstrap, topic, build_batch([(None, b"d", [], T + 3), (None, b"e", [], T + 4)], codec=1)).error_code == 0

    cases = [(-2, 7, (0, -1)), (-1, 7, (5, -1)), (-3, 7, (1, T + 9000)), (-4, 8, (0, -1)), (-5, 9, (-1, -1))]
    for timestamp, version, want in cases:
        response = list_offset(bootstrap, topic, 0, timestamp, version=version)
        assert response.error_code == 0, timestamp
        assert (response.offset, response.timestamp) == want, timestamp


def test_unknown_partition_and_topic(shared_broker, timed_topic):
    bootstrap = shared_broker.bootstrap
    assert list_offset(bootstrap, timed_topic, 5, -1).error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert list_offset(bootstrap, unique_topic("never-created"), 0, -1).error_code == 3
