"""Produce and consume with kafka-python, confluent-kafka and aiokafka over every codec.

Each record set has keyed and null-keyed records, a tombstone (null value),
empty keys/values, repeated and (where the client allows) null header values,
binary data and explicit CreateTime timestamps (one going backwards). What is
consumed must match what was produced exactly: offset, key, value, headers,
timestamp and timestamp type, and the log must hold no extra record. The
batches stored by the broker must keep the producer's codec (Kafka's default
``compression.type=producer``).
"""

from __future__ import annotations

import pytest

from tests.interop._support import (
    CLIENTS,
    CODEC_IDS,
    CODECS,
    CREATE_TIME,
    Got,
    Msg,
    consume,
    list_offset,
    produce,
    read_all_batches,
    unique_topic,
)

BASE_TS = 1_700_000_000_000
LATEST = -1


def records_for(producer_client: str) -> list[Msg]:
    # kafka-python refuses None header values; the other two send them as null.
    null_header = b"" if producer_client == "kafka-python" else None
    return [
        Msg(b"key-0", b"value-0", (("h1", b"a"), ("h2", b"")), BASE_TS),
        Msg(None, b"null key", (), BASE_TS + 1),
        Msg(b"tombstone", None, (("h", b"x"),), BASE_TS + 2),
        Msg(b"", b"", (), BASE_TS + 3),
        Msg(b"dup-headers", b"v", (("h", b"1"), ("h", b"2"), ("nullable", null_header)), BASE_TS + 4),
        # A timestamp earlier than the previous record's is kept as sent.
        Msg(b"binary", bytes(range(256)) * 4, (("ключ-ü", b"\x00\xff"),), BASE_TS - 86_400_000),
        Msg(b"compressible", b"compressible text " * 2000, (), BASE_TS + 6),
    ]


def expected(msgs: list[Msg], partition: int = 0) -> list[Got]:
    return [Got(partition, i, m.key, m.value, tuple(m.headers), m.timestamp, CREATE_TIME) for i, m in enumerate(msgs)]


LINGER = {
    "kafka-python": {"linger_ms": 50},
    "confluent": {"linger.ms": 50},
    "aiokafka": {"linger_ms": 50},
}


def assert_log_end(bootstrap: str, topic: str, end: int) -> None:
    latest = list_offset(bootstrap, topic, 0, LATEST)
    assert latest.error_code == 0
    assert latest.offset == end, f"log end offset {latest.offset}, expected {end} (extra or missing records)"


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_round_trip_same_client(shared_broker, client, codec):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic(f"matrix-{client}-{codec}")
    msgs = records_for(client)

    offsets = produce(client, bootstrap, topic, msgs, codec=codec, acks=-1, extra=LINGER[client])
    assert offsets == list(range(len(msgs)))

    got = consume(client, bootstrap, topic, len(msgs))
    assert got == expected(msgs)
    assert_log_end(bootstrap, topic, len(msgs))

    batches = read_all_batches(bootstrap, topic)
    assert sum(len(records) for _, records in batches) == len(msgs)
    # Note: librdkafka compresses with lz4 only when the broker advertises
    # FindCoordinator (its LZ4 feature flag depends on it), else it silently
    # sends lz4 batches uncompressed. It also sends a batch uncompressed when
    # compression would not shrink it, which happens when a busy machine splits
    # the records into several small batches: the batch of the compressible
    # record must keep the codec, the others may be uncompressed.
    codecs = {header.codec for header, _ in batches}
    assert codecs <= {CODEC_IDS[codec], CODEC_IDS["none"]}, "the broker kept the producer's batches as they were"
    compressible = [header.codec for header, records in batches if any(r.key == b"compressible" for r in records)]
    assert compressible == [CODEC_IDS[codec]], "the producer's codec is kept in the log"


# What each client reports as the offset of a record sent with acks=0: no
# response, so no offset (confluent's Message.offset() is None for
# OFFSET_INVALID, aiokafka resolves the future with None). kafka-python 3.0.12
# synthesises a response with base offset 0 and adds the record's index, so its
# numbers mean nothing and are not checked.
ACKS0_UNKNOWN_OFFSET = {"aiokafka": None, "confluent": None}


@pytest.mark.parametrize("acks", [0, 1, -1], ids=["acks0", "acks1", "acksall"])
@pytest.mark.parametrize("client", CLIENTS)
def test_acks(shared_broker, client, acks):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic(f"acks-{client}-{acks}")
    msgs = [Msg(f"k{i}".encode(), f"v{i}".encode(), (("i", str(i).encode()),), BASE_TS + i) for i in range(5)]

    offsets = produce(client, bootstrap, topic, msgs, acks=acks)
    if acks == 0:
        if client in ACKS0_UNKNOWN_OFFSET:
            assert offsets == [ACKS0_UNKNOWN_OFFSET[client]] * len(msgs)
    else:
        assert offsets == [0, 1, 2, 3, 4]

    # With acks=0 nothing confirms the append: the records must still arrive.
    got = consume(client, bootstrap, topic, len(msgs))
    assert got == expected(msgs)
    assert_log_end(bootstrap, topic, len(msgs))


CROSS = [
    ("kafka-python", "confluent", "lz4"),
    ("kafka-python", "aiokafka", "zstd"),
    ("confluent", "kafka-python", "snappy"),
    ("confluent", "aiokafka", "gzip"),
    ("aiokafka", "kafka-python", "gzip"),
    ("aiokafka", "confluent", "zstd"),
    ("confluent", "kafka-python", "none"),
]


@pytest.mark.parametrize("producer_client,consumer_client,codec", CROSS)
def test_cross_client(shared_broker, producer_client, consumer_client, codec):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic(f"cross-{producer_client}-{consumer_client}")
    msgs = records_for(producer_client)

    offsets = produce(producer_client, bootstrap, topic, msgs, codec=codec, acks=1, extra=LINGER[producer_client])
    assert offsets == list(range(len(msgs)))

    got = consume(consumer_client, bootstrap, topic, len(msgs))
    assert got == expected(msgs)
    assert_log_end(bootstrap, topic, len(msgs))


def test_consume_from_the_middle_of_a_compressed_batch(shared_broker):
    """A fetch from an offset inside a compressed batch returns the whole batch;
    every client must skip the records before the requested offset."""
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("mid-batch")
    msgs = [Msg(b"k", f"v{i}".encode(), (), BASE_TS + i) for i in range(10)]
    produce("confluent", bootstrap, topic, msgs, codec="lz4", extra={"linger.ms": 100})
    batches = read_all_batches(bootstrap, topic)
    assert len(batches) < len(msgs), "precondition: several records share a batch"
    for client in CLIENTS:
        got = consume(client, bootstrap, topic, 4, start_offset=6)
        assert got == expected(msgs)[6:], client


def test_kafka_python_default_producer_is_idempotent(shared_broker):
    """kafka-python (like the Java client since Kafka 3.0) enables idempotence by
    default: it asks InitProducerId for a producer id and stamps its batches
    with that id and sequence numbers; the records come back once, in order."""
    from kafka import KafkaProducer

    bootstrap = shared_broker.bootstrap
    topic = unique_topic("idempotent-default")
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        futures = [producer.send(topic, key=b"k", value=f"m{i}".encode(), partition=0) for i in range(10)]
        producer.flush(timeout=30)
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(10))

    got = consume("kafka-python", bootstrap, topic, 10, settle_s=0.5)
    assert [(g.offset, g.key, g.value) for g in got] == [(i, b"k", f"m{i}".encode()) for i in range(10)]
    assert_log_end(bootstrap, topic, 10)

    batches = read_all_batches(bootstrap, topic)
    producer_ids = {header.producer_id for header, _ in batches}
    assert len(producer_ids) == 1 and min(producer_ids) >= 0, f"batches carry producer ids {producer_ids}"
    next_sequence = 0
    for header, records in batches:
        assert header.base_sequence == next_sequence, "sequences are contiguous from 0"
        next_sequence += len(records)
    assert next_sequence == 10


# --------------------------------------------------------------------------- timestamps


def now_ms() -> int:
    import time

    return int(time.time() * 1000)


@pytest.mark.parametrize("client", CLIENTS)
def test_log_append_time_topic(shared_broker, client):
    """message.timestamp.type=LogAppendTime: the broker stamps the batches with
    its clock; consumers see that time and timestamp type LogAppendTime."""
    from tests.interop._support import LOG_APPEND_TIME, create_topic

    bootstrap = shared_broker.bootstrap
    topic = unique_topic(f"append-time-{client}")
    create_topic(bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"})
    msgs = [Msg(b"k", f"v{i}".encode(), (), BASE_TS + i) for i in range(3)]
    before = now_ms()
    assert produce(client, bootstrap, topic, msgs) == [0, 1, 2]
    after = now_ms()
    got = consume(client, bootstrap, topic, 3)
    assert [(g.offset, g.value) for g in got] == [(i, m.value) for i, m in enumerate(msgs)]
    for g in got:
        assert g.timestamp_type == LOG_APPEND_TIME
        assert before - 5 <= g.timestamp <= after + 5, "the broker's append time replaces the producer's timestamp"


def test_timestamp_before_max_ms_is_enforced(shared_broker):
    """A topic's message.timestamp.before.max.ms bounds how old a CreateTime
    timestamp may be; a batch with an older record is refused whole with
    INVALID_TIMESTAMP (32)."""
    from protocol.records import build_batch
    from tests.interop._support import create_topic, produce_raw

    bootstrap = shared_broker.bootstrap
    topic = unique_topic("ts-before")
    create_topic(bootstrap, topic, configs={"message.timestamp.before.max.ms": "3600000"})
    now = now_ms()
    old = produce_raw(bootstrap, topic, build_batch([(None, b"fresh", [], now), (None, b"stale", [], now - 2 * 3_600_000)]))
    assert old.error_code == 32
    assert list_offset(bootstrap, topic, 0, LATEST).offset == 0, "nothing of the refused batch is appended"
    ok = produce_raw(bootstrap, topic, build_batch([(None, b"fresh", [], now - 60_000)]))
    assert (ok.error_code, ok.base_offset) == (0, 0)


def test_far_future_timestamp_is_refused_by_default(shared_broker):
    """Kafka 4.0 (KIP-1030) defaults log.message.timestamp.after.max.ms to one
    hour: a CreateTime timestamp more than an hour ahead of the broker's clock
    is refused with INVALID_TIMESTAMP."""
    from kafka import KafkaProducer
    from kafka.errors import InvalidTimestampError

    from tests.interop._support import create_topic

    bootstrap = shared_broker.bootstrap
    topic = unique_topic("ts-after")
    create_topic(bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, retries=0)
    try:
        with pytest.raises(InvalidTimestampError):
            producer.send(topic, b"future", partition=0, timestamp_ms=now_ms() + 2 * 3_600_000).get(timeout=30)
        assert producer.send(topic, b"soon", partition=0, timestamp_ms=now_ms() + 600_000).get(timeout=30).offset == 0
    finally:
        producer.close(timeout=10)
