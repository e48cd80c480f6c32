"""Fetch semantics as clients rely on them: long polls, min_bytes, out-of-range
offsets and offset reset, large records, many partitions, segment rolling, and
data surviving broker restarts (clean and SIGKILL).
"""

from __future__ import annotations

import os
import re
import threading
import time

import pytest

from protocol.records import build_batch, iter_batches
from tests.conftest import wait_until
from tests.interop._support import (
    FETCH,
    PRODUCE,
    Msg,
    RawConnection,
    consume,
    create_topic,
    fetch_partition,
    fetch_request,
    list_offset,
    produce,
    produce_raw,
    produce_request,
    unique_topic,
)

T = 1_700_000_000_000
OFFSET_OUT_OF_RANGE = 1
MESSAGE_TOO_LARGE = 10


def decoded_values(records: bytes) -> list[bytes]:
    from protocol.records import decode_records

    return [r.value for r in decode_records(records or b"")]


def produce_later(bootstrap: str, topic: str, delay_s: float, value: bytes, partition: int = 0) -> threading.Thread:
    """Append one record ``delay_s`` from now, from another connection."""

    def run():
        time.sleep(delay_s)
        assert produce_raw(bootstrap, topic, build_batch([(None, value, [], T)]), partition).error_code == 0

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------- long poll


def test_long_poll_answers_as_soon_as_data_arrives(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("longpoll")
    create_topic(bootstrap, topic)
    with RawConnection(bootstrap, timeout_s=30) as conn:
        started = time.monotonic()
        writer = produce_later(bootstrap, topic, 1.0, b"late")
        response = conn.request(FETCH, 12, fetch_request(topic, 0, 0, max_wait_ms=20000, min_bytes=1))
        elapsed = time.monotonic() - started
    writer.join(10)
    data = response.responses[0].partitions[0]
    assert data.error_code == 0
    assert decoded_values(data.records) == [b"late"]
    assert 0.8 <= elapsed < 5, f"answered after {elapsed:.2f}s (record appended after 1s, max_wait 20s)"


def test_empty_long_poll_returns_after_max_wait(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("emptypoll")
    create_topic(bootstrap, topic)
    with RawConnection(bootstrap, timeout_s=30) as conn:
        started = time.monotonic()
        response = conn.request(FETCH, 12, fetch_request(topic, 0, 0, max_wait_ms=1500, min_bytes=1))
        elapsed = time.monotonic() - started
    data = response.responses[0].partitions[0]
    assert (data.error_code, data.high_watermark, data.records or b"") == (0, 0, b"")
    assert 1.4 <= elapsed < 4, f"empty fetch with max_wait 1.5s answered after {elapsed:.2f}s"

    # max_wait 0 answers at once.
    with RawConnection(bootstrap) as conn:
        started = time.monotonic()
        conn.request(FETCH, 12, fetch_request(topic, 0, 0, max_wait_ms=0, min_bytes=1))
        assert time.monotonic() - started < 0.5


def test_min_bytes_waits_until_enough_data(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("minbytes")
    create_topic(bootstrap, topic)
    first = build_batch([(None, b"first", [], T)])
    assert produce_raw(bootstrap, topic, first).error_code == 0

    # Enough data already: immediate.
    with RawConnection(bootstrap) as conn:
        started = time.monotonic()
        response = conn.request(FETCH, 12, fetch_request(topic, 0, 0, max_wait_ms=10000, min_bytes=1))
        assert time.monotonic() - started < 1
    assert decoded_values(response.responses[0].partitions[0].records) == [b"first"]

    # Not enough: waits for the second append, then returns both.
    with RawConnection(bootstrap, timeout_s=30) as conn:
        started = time.monotonic()
        writer = produce_later(bootstrap, topic, 1.0, b"second")
        response = conn.request(FETCH, 12, fetch_request(topic, 0, 0, max_wait_ms=20000, min_bytes=len(first) + 10))
        elapsed = time.monotonic() - started
    writer.join(10)
    assert decoded_values(response.responses[0].partitions[0].records) == [b"first", b"second"]
    assert 0.8 <= elapsed < 5, elapsed

    # Never enough: returns what there is after max_wait.
    with RawConnection(bootstrap, timeout_s=30) as conn:
        started = time.monotonic()
        response = conn.request(FETCH, 12, fetch_request(topic, 0, 0, max_wait_ms=1000, min_bytes=10**6))
        elapsed = time.monotonic() - started
    assert decoded_values(response.responses[0].partitions[0].records) == [b"first", b"second"]
    assert 0.9 <= elapsed < 4, elapsed


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_consumer_long_poll_delivers_promptly(shared_broker, client):
    """A consumer whose fetches wait up to 10 s gets a record produced 1 s after
    it started waiting well before those 10 s are up."""
    bootstrap = shared_broker.bootstrap
    topic = unique_topic(f"consumer-longpoll-{client}")
    create_topic(bootstrap, topic)
    extra = {"fetch_max_wait_ms": 10000} if client == "kafka-python" else {"fetch.wait.max.ms": 10000}
    produced_at = []

    def writer():
        time.sleep(1.5)
        produced_at.append(time.monotonic())
        produce_raw(bootstrap, topic, build_batch([(None, b"wake", [], T)]))

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    got = consume(client, bootstrap, topic, 1, extra=extra, timeout_s=30)
    received_at = time.monotonic()
    thread.join(10)
    assert [g.value for g in got] == [b"wake"]
    assert received_at - produced_at[0] < 4, f"record arrived {received_at - produced_at[0]:.2f}s after it was produced"


# --------------------------------------------------------------------------- out of range


@pytest.fixture(scope="module")
def five_messages(shared_broker):
    topic = unique_topic("five")
    create_topic(shared_broker.bootstrap, topic)
    batch = build_batch([(f"k{i}".encode(), f"v{i}".encode(), [], T + i) for i in range(5)])
    assert produce_raw(shared_broker.bootstrap, topic, batch).error_code == 0
    return topic


def test_fetch_out_of_range(shared_broker, five_messages):
    bootstrap = shared_broker.bootstrap
    for offset in (1000, 6, -1):
        data = fetch_partition(bootstrap, five_messages, 0, offset)
        assert data.error_code == OFFSET_OUT_OF_RANGE, offset
        assert data.high_watermark == 5
        assert not data.records
    at_end = fetch_partition(bootstrap, five_messages, 0, 5)
    assert (at_end.error_code, at_end.high_watermark, at_end.records or b"") == (0, 5, b"")
    assert decoded_values(fetch_partition(bootstrap, five_messages, 0, 0).records) == [f"v{i}".encode() for i in range(5)]


@pytest.mark.parametrize("client", ["kafka-python", "confluent", "aiokafka"])
def test_out_of_range_resets_to_earliest(shared_broker, five_messages, client):
    got = consume(client, shared_broker.bootstrap, five_messages, 5, start_offset=1000, settle_s=0.3)
    assert [(g.offset, g.value) for g in got] == [(i, f"v{i}".encode()) for i in range(5)]


def test_out_of_range_resets_to_latest(shared_broker):
    from kafka import KafkaConsumer, TopicPartition

    bootstrap = shared_broker.bootstrap
    topic = unique_topic("reset-latest")
    create_topic(bootstrap, topic)
    produce_raw(bootstrap, topic, build_batch([(None, f"old{i}".encode(), [], T) for i in range(3)]))
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="latest")
    try:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        got = []
        deadline = time.monotonic() + 30
        while consumer.position(tp, timeout_ms=1000) != 3 and time.monotonic() < deadline:
            got += consumer.poll(timeout_ms=200).get(tp, [])
        assert consumer.position(tp, timeout_ms=1000) == 3
        produce_raw(bootstrap, topic, build_batch([(None, b"new", [], T)]))
        while len(got) < 1 and time.monotonic() < deadline:
            got += consumer.poll(timeout_ms=200).get(tp, [])
    finally:
        consumer.close()
    assert [(r.offset, r.value) for r in got] == [(3, b"new")]


# --------------------------------------------------------------------------- large records


def test_large_messages_round_trip(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("large")
    values = [os.urandom(900 * 1024) for _ in range(3)]
    offsets = produce("kafka-python", bootstrap, topic, [Msg(f"k{i}".encode(), v) for i, v in enumerate(values)])
    assert offsets == [0, 1, 2]
    for client in ("kafka-python", "confluent", "aiokafka"):
        got = consume(client, bootstrap, topic, 3)
        assert [g.offset for g in got] == [0, 1, 2], client
        assert [g.value for g in got] == values, client


def test_first_batch_returned_even_when_larger_than_fetch_limits(shared_broker):
    """KIP-74: max_bytes / partition_max_bytes never stop a consumer on a big batch."""
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("kip74")
    big = os.urandom(300 * 1024)
    create_topic(bootstrap, topic)
    assert produce_raw(bootstrap, topic, build_batch([(None, big, [], T)])).error_code == 0
    assert produce_raw(bootstrap, topic, build_batch([(None, b"small", [], T)])).error_code == 0

    data = fetch_partition(bootstrap, topic, 0, 0, max_bytes=1024, partition_max_bytes=1024)
    assert data.error_code == 0
    assert decoded_values(data.records) == [big], "the oversized first batch comes alone and whole"

    got = consume("kafka-python", bootstrap, topic, 2, extra={"max_partition_fetch_bytes": 1024, "fetch_max_bytes": 1024})
    assert [g.value for g in got] == [big, b"small"]


def test_message_larger_than_message_max_bytes_is_refused(shared_broker):
    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError

    bootstrap = shared_broker.bootstrap
    topic = unique_topic("too-large")
    create_topic(bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, max_request_size=5 * 2**20, retries=0)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            producer.send(topic, os.urandom(1_200_000), partition=0).get(timeout=30)
        assert producer.send(topic, b"fits", partition=0).get(timeout=30).offset == 0
    finally:
        producer.close(timeout=10)
    raw = produce_raw(bootstrap, topic, build_batch([(None, os.urandom(1_100_000), [], T)]))
    assert raw.error_code == MESSAGE_TOO_LARGE
    assert list_offset(bootstrap, topic, 0, -1).offset == 1


# --------------------------------------------------------------------------- partitions


def test_eight_partitions(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("eight")
    create_topic(bootstrap, topic, partitions=8)
    per_partition = 25
    for p in range(8):
        msgs = [Msg(f"p{p}".encode(), f"p{p}-{i}".encode(), (), T + i) for i in range(per_partition)]
        client = ("kafka-python", "confluent", "aiokafka")[p % 3]
        assert produce(client, bootstrap, topic, msgs, partition=p) == list(range(per_partition))

    for client in ("kafka-python", "confluent", "aiokafka"):
        got = consume(client, bootstrap, topic, 8 * per_partition, partitions=range(8), settle_s=0.3)
        assert len(got) == 8 * per_partition, client
        by_partition = {}
        for g in got:
            by_partition.setdefault(g.partition, []).append((g.offset, g.value))
        assert by_partition == {p: [(i, f"p{p}-{i}".encode()) for i in range(per_partition)] for p in range(8)}, client


def test_keyed_records_stay_in_order_per_partition(shared_broker):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("keyed")
    create_topic(bootstrap, topic, partitions=8)
    keys = [f"key-{k}".encode() for k in range(12)]
    msgs = [Msg(keys[i % 12], f"{i}".encode(), (), T + i) for i in range(120)]
    produce("kafka-python", bootstrap, topic, msgs, partition=None)
    got = consume("confluent", bootstrap, topic, 120, partitions=range(8), settle_s=0.3)
    assert len(got) == 120
    partition_of = {}
    for g in got:
        assert partition_of.setdefault(g.key, g.partition) == g.partition, "a key maps to one partition"
    assert len(set(partition_of.values())) > 1, "12 keys spread over several partitions"
    for key in keys:
        values = [int(g.value) for g in got if g.key == key]
        assert values == sorted(values) and len(values) == 10


# --------------------------------------------------------------------------- segments


def segment_files(log_dir, topic: str, partition: int = 0) -> list:
    return sorted((log_dir / f"{topic}-{partition}").glob("*.log"))


def test_small_segments_roll_and_read_back(shared_broker):
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    bootstrap = shared_broker.bootstrap
    topic = unique_topic("segments")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1, "configs": {"segment.bytes": "1024"}}})
    finally:
        admin.close()

    count = 200
    with RawConnection(bootstrap) as conn:
        for i in range(count):
            batch = build_batch([(f"k{i}".encode(), f"value-{i:04d}-".encode() + b"x" * 80, [], T + i)])
            response = conn.request(PRODUCE, 9, produce_request(topic, {0: batch}))
            partition = response.responses[0].partition_responses[0]
            assert (partition.error_code, partition.base_offset) == (0, i)

    files = segment_files(shared_broker.data_dir / "logs", topic)
    assert len(files) >= 10, f"{len(files)} segments for ~{count * 170} bytes at segment.bytes=1024"
    next_offset = 0
    for path in files:
        assert re.fullmatch(r"\d{20}\.log", path.name)
        data = path.read_bytes()
        assert 0 < len(data) <= 1024, f"{path.name} holds {len(data)} bytes"
        headers = [h for _, _, h in iter_batches(data)]
        assert int(path.stem) == headers[0].base_offset == next_offset, "a segment is named after its first offset"
        next_offset = headers[-1].last_offset + 1
    assert next_offset == count

    expected = [(i, f"value-{i:04d}-".encode() + b"x" * 80) for i in range(count)]
    for client in ("kafka-python", "confluent"):
        got = consume(client, bootstrap, topic, count, settle_s=0.3)
        assert [(g.offset, g.value) for g in got] == expected, client
    got = consume("aiokafka", bootstrap, topic, count - 137, start_offset=137)
    assert [(g.offset, g.value) for g in got] == expected[137:]

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        for target in (0, 57, 123, 199):
            found = consumer.offsets_for_times({tp: T + target}, timeout_ms=30000)[tp]
            assert (found.offset, found.timestamp) == (target, T + target)
        assert consumer.offsets_for_times({tp: T + count}, timeout_ms=30000)[tp] is None
        assert consumer.beginning_offsets([tp], timeout_ms=30000)[tp] == 0
        assert consumer.end_offsets([tp], timeout_ms=30000)[tp] == count
    finally:
        consumer.close()


# --------------------------------------------------------------------------- restart


def topic_id_of(bootstrap: str, topic: str):
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        [described] = admin.describe_topics([topic])
    finally:
        admin.close()
    assert described["error_code"] == 0, described
    return described["topic_id"], sorted(p["partition_index"] for p in described["partitions"])


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restart_keeps_topics_and_messages(broker_factory, how):
    broker = broker_factory({"num.partitions": "2"})
    bootstrap = broker.bootstrap
    topic = "survivor"
    auto_created = "auto-survivor"
    create_topic(bootstrap, topic, partitions=2, configs={"segment.bytes": "2048"})
    first = [Msg(f"k{i}".encode(), f"v{i}-".encode() * 100, (("h", b"1"),), T + i) for i in range(10)]
    # One record per batch (batch_size below the record size), ~5 batches per segment.
    one_per_batch = {"batch_size": 300}
    assert produce("kafka-python", bootstrap, topic, first, partition=0, extra=one_per_batch) == list(range(10))
    assert produce("confluent", bootstrap, topic, [Msg(None, b"p1")], partition=1) == [0]
    assert produce("kafka-python", bootstrap, auto_created, [Msg(None, b"auto")], partition=0) == [0]
    ids_before = topic_id_of(bootstrap, topic)
    segments_before = len(segment_files(broker.data_dir / "logs", topic))
    assert segments_before > 1

    if how == "sigterm":
        assert broker.stop() == 0, broker.log_text()[-2000:]
    else:
        broker.kill()
    restarted = broker_factory({"num.partitions": "2"}, data_dir=broker.data_dir)
    bootstrap = restarted.bootstrap

    assert topic_id_of(bootstrap, topic) == ids_before
    assert topic_id_of(bootstrap, auto_created)[1] == [0, 1]
    got = consume("kafka-python", bootstrap, topic, 10)
    assert [(g.offset, g.key, g.value, g.headers, g.timestamp) for g in got] == [
        (i, m.key, m.value, m.headers, m.timestamp) for i, m in enumerate(first)
    ]
    assert [g.value for g in consume("confluent", bootstrap, topic, 1, partitions=(1,))] == [b"p1"]

    more = [Msg(None, f"after-{i}-".encode() * 50) for i in range(5)]
    assert produce("kafka-python", bootstrap, topic, more, partition=0, extra=one_per_batch) == [10, 11, 12, 13, 14]
    assert produce("aiokafka", bootstrap, auto_created, [Msg(None, b"auto-2")], partition=0) == [1]
    assert list_offset(bootstrap, topic, 0, -1).offset == 15
    # The topic's segment.bytes override survived too: segments keep rolling.
    assert wait_until(lambda: len(segment_files(restarted.data_dir / "logs", topic)) > segments_before, 5)
    got = consume("aiokafka", bootstrap, topic, 15)
    assert [g.offset for g in got] == list(range(15))


def test_topic_max_message_bytes_override(shared_broker):
    """max.message.bytes per topic: larger than the broker's message.max.bytes
    admits bigger batches, smaller refuses them with MESSAGE_TOO_LARGE."""
    bootstrap = shared_broker.bootstrap
    roomy, tight = unique_topic("roomy"), unique_topic("tight")
    create_topic(bootstrap, roomy, configs={"max.message.bytes": "3000000"})
    create_topic(bootstrap, tight, configs={"max.message.bytes": "1000"})
    big = os.urandom(1_500_000)
    assert produce_raw(bootstrap, roomy, build_batch([(None, big, [], T)])).error_code == 0
    assert produce_raw(bootstrap, tight, build_batch([(None, os.urandom(2000), [], T)])).error_code == MESSAGE_TOO_LARGE
    assert produce_raw(bootstrap, tight, build_batch([(None, b"small", [], T)])).error_code == 0
    got = consume("kafka-python", bootstrap, roomy, 1, extra={"max_partition_fetch_bytes": 1024})
    assert [g.value for g in got] == [big]


def test_deleting_a_topic_ends_a_waiting_fetch(shared_broker):
    """A long poll on a partition whose topic is deleted meanwhile is answered
    at once with UNKNOWN_TOPIC_OR_PARTITION, not after max_wait."""
    from kafka import KafkaAdminClient

    bootstrap = shared_broker.bootstrap
    topic = unique_topic("deleted-while-polled")
    create_topic(bootstrap, topic)

    def delete_later():
        time.sleep(1.0)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            admin.delete_topics([topic])
        finally:
            admin.close()

    thread = threading.Thread(target=delete_later, daemon=True)
    with RawConnection(bootstrap, timeout_s=40) as conn:
        started = time.monotonic()
        thread.start()
        response = conn.request(FETCH, 12, fetch_request(topic, 0, 0, max_wait_ms=20000, min_bytes=1))
        elapsed = time.monotonic() - started
    thread.join(30)
    assert response.responses[0].partitions[0].error_code == 3
    assert elapsed < 6, f"answered after {elapsed:.2f}s"
