"""Topic auto-creation (``auto.create.topics.enable``) as the clients see it.

With it on, a producer's metadata request for an unknown topic creates it with
``num.partitions`` partitions. With it off, or when the client's metadata
request does not allow it (Metadata v4+ ``allow_auto_topic_creation=false``:
librdkafka consumers by default), the topic stays unknown and the clients
report their unknown-topic errors.
"""

from __future__ import annotations

import time

import pytest

from tests.conftest import wait_until
from tests.interop._support import (
    Msg,
    confluent_consumer,
    consume,
    produce,
    topic_partition_dirs,
    unique_topic,
)

UNKNOWN_TOPIC_OR_PART = 3


@pytest.fixture(scope="module")
def auto_on(tmp_path_factory):
    from tests.conftest import BrokerProcess

    broker = BrokerProcess(tmp_path_factory.mktemp("auto-on"), {"num.partitions": "3"}).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def auto_off(tmp_path_factory):
    from tests.conftest import BrokerProcess

    broker = BrokerProcess(tmp_path_factory.mktemp("auto-off"), {"auto.create.topics.enable": "false", "num.partitions": "3"}).start()
    yield broker
    broker.stop()


def partitions_of(bootstrap: str, topic: str) -> list[int] | None:
    """Partition ids of ``topic``, or None when unknown (never auto-creates)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        [described] = admin.describe_topics([topic])
    finally:
        admin.close()
    if described["error_code"] == UNKNOWN_TOPIC_OR_PART:
        return None
    assert described["error_code"] == 0, described
    return sorted(p["partition_index"] for p in described["partitions"])


def assert_not_created(broker, topic: str) -> None:
    assert partitions_of(broker.bootstrap, topic) is None
    assert topic_partition_dirs(broker.data_dir / "logs", topic) == []


# --------------------------------------------------------------------------- enabled


@pytest.mark.parametrize("client", ["kafka-python", "confluent", "aiokafka"])
def test_producer_auto_creates_with_num_partitions(auto_on, client):
    topic = unique_topic(f"auto-{client}")
    assert partitions_of(auto_on.bootstrap, topic) is None
    offsets = produce(client, auto_on.bootstrap, topic, [Msg(b"k", b"v")], partition=2)
    assert offsets == [0]
    assert partitions_of(auto_on.bootstrap, topic) == [0, 1, 2]
    assert wait_until(lambda: len(topic_partition_dirs(auto_on.data_dir / "logs", topic)) == 3, 10)
    got = consume(client, auto_on.bootstrap, topic, 1, partitions=(0, 1, 2))
    assert [(g.partition, g.offset, g.value) for g in got] == [(2, 0, b"v")]


def metadata_for(bootstrap: str, topic: str, version: int, allow_auto_create: bool = True):
    from tests.interop._support import METADATA, REQ, RawConnection

    R = REQ[3]
    body = R.MetadataRequest(
        topics=[R.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=allow_auto_create,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    with RawConnection(bootstrap) as conn:
        response = conn.request(METADATA, version, body)
    [answer] = response.topics
    assert answer.name == topic
    return answer


def test_metadata_request_flag_controls_auto_create(auto_on):
    """Metadata v4+ carries allow_auto_topic_creation; older versions always allow."""
    refused = unique_topic("flag-false")
    answer = metadata_for(auto_on.bootstrap, refused, 12, allow_auto_create=False)
    assert (answer.error_code, answer.partitions) == (UNKNOWN_TOPIC_OR_PART, [])
    assert_not_created(auto_on, refused)

    for version, allow in ((12, True), (4, True), (3, False)):  # v3 has no flag: always allowed
        name = unique_topic(f"flag-v{version}")
        answer = metadata_for(auto_on.bootstrap, name, version, allow_auto_create=allow)
        assert answer.error_code == 0, version
        assert sorted(p.partition_index for p in answer.partitions) == [0, 1, 2], version
        assert partitions_of(auto_on.bootstrap, name) == [0, 1, 2]


def test_metadata_never_auto_creates_when_disabled(auto_off):
    for version in (3, 12):
        name = unique_topic(f"off-v{version}")
        answer = metadata_for(auto_off.bootstrap, name, version, allow_auto_create=True)
        assert answer.error_code == UNKNOWN_TOPIC_OR_PART, version
        assert_not_created(auto_off, name)


def test_auto_create_with_invalid_name_is_refused(auto_on):
    for name in ("bad/name", "a" * 250):
        answer = metadata_for(auto_on.bootstrap, name, 12, allow_auto_create=True)
        assert answer.error_code == 17, name  # INVALID_TOPIC_EXCEPTION


def test_confluent_consumer_does_not_auto_create(auto_on):
    """librdkafka consumers default to allow.auto.create.topics=false."""
    from confluent_kafka import TopicPartition

    topic = unique_topic("consumer-no-create")
    errors = []
    consumer = confluent_consumer(auto_on.bootstrap, {"error_cb": errors.append, "topic.metadata.propagation.max.ms": 1000})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not errors:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error():
                errors.append(msg.error())
    finally:
        consumer.close()
    assert [e.code() for e in errors][:1] == [UNKNOWN_TOPIC_OR_PART]
    assert_not_created(auto_on, topic)


# --------------------------------------------------------------------------- disabled


def test_kafka_python_producer_unknown_topic_times_out(auto_off):
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    topic = unique_topic("off-kp")
    producer = KafkaProducer(bootstrap_servers=auto_off.bootstrap, enable_idempotence=False, max_block_ms=3000)
    try:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            producer.send(topic, b"x").get(timeout=10)
        assert time.monotonic() - started < 10
        # A topic that exists is still served by the same producer.
        assert producer.send(existing_topic(auto_off), b"y").get(timeout=30).offset >= 0
    finally:
        producer.close(timeout=5)
    assert_not_created(auto_off, topic)


def existing_topic(broker) -> str:
    from tests.interop._support import create_topic

    topic = unique_topic("exists")
    create_topic(broker.bootstrap, topic)
    return topic


def test_confluent_producer_unknown_topic_fails_delivery(auto_off):
    from confluent_kafka import Producer

    topic = unique_topic("off-c")
    reports = []
    producer = Producer(
        {
            "bootstrap.servers": auto_off.bootstrap,
            "message.timeout.ms": 10000,
            # How long librdkafka waits for an unknown topic to appear before
            # failing its messages with UNKNOWN_TOPIC_OR_PART.
            "topic.metadata.propagation.max.ms": 1000,
        }
    )
    producer.produce(topic, b"x", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(20) == 0
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == UNKNOWN_TOPIC_OR_PART
    assert_not_created(auto_off, topic)


def test_aiokafka_producer_unknown_topic_fails(auto_off):
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import UnknownTopicOrPartitionError

    topic = unique_topic("off-aio")

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=auto_off.bootstrap, request_timeout_ms=3000)
        await producer.start()
        try:
            # aiokafka waits request_timeout_ms for the topic to appear in metadata.
            with pytest.raises(UnknownTopicOrPartitionError):
                await asyncio.wait_for(producer.send_and_wait(topic, b"x"), 20)
        finally:
            await producer.stop()

    asyncio.run(run())
    assert_not_created(auto_off, topic)


def test_confluent_consumer_unknown_topic_reports_error(auto_off):
    from confluent_kafka import TopicPartition

    topic = unique_topic("off-consumer")
    errors = []
    consumer = confluent_consumer(
        auto_off.bootstrap, {"error_cb": errors.append, "allow.auto.create.topics": True, "topic.metadata.propagation.max.ms": 1000}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not errors:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error():
                errors.append(msg.error())
    finally:
        consumer.close()
    assert errors, "the consumer saw no error for an unknown topic"
    assert errors[0].code() == UNKNOWN_TOPIC_OR_PART
    assert_not_created(auto_off, topic)


def test_explicit_create_still_works_when_auto_create_is_off(auto_off):
    from kafka import KafkaAdminClient

    topic = unique_topic("explicit")
    admin = KafkaAdminClient(bootstrap_servers=auto_off.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics({topic: {}})
    finally:
        admin.close()
    assert wait_until(lambda: partitions_of(auto_off.bootstrap, topic) == [0, 1, 2], 5)
    assert produce("kafka-python", auto_off.bootstrap, topic, [Msg(None, b"v")], partition=1) == [0]
