"""Per-record produce errors (KIP-467) through real clients.

librdkafka's 0011_produce_batch (test_message_single_partition_record_fail)
produces 100 messages to a compacted topic, every tenth without a key. In one
batch, the broker refuses the whole batch and names the keyless records in
``record_errors``: librdkafka fails those with INVALID_RECORD and the 90
others with its local _INVALID_DIFFERENT_RECORD. One message per batch, the
keyless ones fail and the rest are written.
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, Producer

from protocol.errors import ErrorCode
from protocol.records import build_batch
from tests.interop._support import create_topic, list_offset, produce_raw, unique_topic

LATEST = -1
MESSAGE_COUNT = 100
KEYLESS_INDEXES = list(range(0, MESSAGE_COUNT, 10))


def produce_every_tenth_without_a_key(bootstrap: str, topic: str, extra: dict) -> list[tuple[int, int | None]]:
    """Deliver MESSAGE_COUNT messages to partition 0; returns (message number,
    error code or None) per delivery report, in message order."""
    reports: dict[int, int | None] = {}

    def delivered(err, message):
        number = int(message.value().decode().rsplit("#", 1)[1])
        reports[number] = None if err is None else err.code()

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, **extra})
    # The topic's metadata and a connection first: messages made before the client
    # knows the partition's leader wait apart and may go out in more than one batch
    # (a CI run once saw 0, then 1-2, then 3-99 sent separately).
    producer.list_topics(topic, timeout=10)
    for i in range(MESSAGE_COUNT):
        value = f"test_message_single_partition_record_fail #{i}".encode()
        key = None if i in KEYLESS_INDEXES else value
        producer.produce(topic, value=value, key=key, partition=0, on_delivery=delivered)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} messages were never reported"
    return [(i, reports.get(i)) for i in range(MESSAGE_COUNT)]


def test_keyless_records_fail_and_the_rest_of_their_batch_fails_with_them(shared_broker):
    """Variation 0 of the librdkafka test: all 100 messages in one batch."""
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("record-errors-one-batch")
    create_topic(bootstrap, topic, configs={"cleanup.policy": "compact"})
    # The lingering keeps the 100 messages in one batch (one partition, small messages):
    # far longer than making them takes on a loaded machine; the flush sends them.
    reports = produce_every_tenth_without_a_key(bootstrap, topic, {"linger.ms": 10_000, "batch.num.messages": 10_000})
    invalid = [i for i, code in reports if code == KafkaError.INVALID_RECORD]
    collateral = [i for i, code in reports if code == KafkaError._INVALID_DIFFERENT_RECORD]
    assert invalid == KEYLESS_INDEXES
    assert len(collateral) == MESSAGE_COUNT - len(KEYLESS_INDEXES), reports
    assert list_offset(bootstrap, topic, 0, LATEST).offset == 0, "nothing of the refused batch is written"


def test_one_message_per_batch_fails_only_the_keyless_ones(shared_broker):
    """Variation 1 of the librdkafka test: batch.size=1, one message per batch."""
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("record-errors-single")
    create_topic(bootstrap, topic, configs={"cleanup.policy": "compact"})
    reports = produce_every_tenth_without_a_key(bootstrap, topic, {"batch.size": 1})
    assert [i for i, code in reports if code == KafkaError.INVALID_RECORD] == KEYLESS_INDEXES
    assert [i for i, code in reports if code is None] == [i for i in range(MESSAGE_COUNT) if i not in KEYLESS_INDEXES]
    assert list_offset(bootstrap, topic, 0, LATEST).offset == MESSAGE_COUNT - len(KEYLESS_INDEXES)


def test_produce_response_fields_by_version(shared_broker):
    """v8+ carries record_errors (batch index and message) and error_message;
    v7 has neither field and answers the partition error alone."""
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("record-errors-raw")
    create_topic(bootstrap, topic, configs={"cleanup.policy": "compact"})
    now_ms = int(time.time() * 1000)
    batch = build_batch([(b"k", b"v0", [], now_ms), (None, b"v1", [], now_ms), (b"k", b"v2", [], now_ms), (None, b"v3", [], now_ms)])
    keyless = f"Compacted topic cannot accept message without key in topic partition {topic}-0."
    for version in (8, 9, 11):
        answer = produce_raw(bootstrap, topic, batch, version=version)
        assert answer.error_code == ErrorCode.INVALID_RECORD
        assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [(1, keyless), (3, keyless)]
        assert answer.error_message and keyless in answer.error_message
    old = produce_raw(bootstrap, topic, batch, version=7)
    assert old.error_code == ErrorCode.INVALID_RECORD
    assert old.record_errors == [] and old.error_message is None
    assert list_offset(bootstrap, topic, 0, LATEST).offset == 0
