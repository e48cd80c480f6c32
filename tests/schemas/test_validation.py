"""Schema validation on produce, against a real broker with its registry
(topic configs confluent.value.schema.validation and the like), with
confluent-kafka's AvroSerializer, kafka-python and raw Produce requests:

- a record serialized with a schema registered under the topic's subject is
  taken; a tombstone is taken;
- a value without the framing, with an unregistered id, or with an id
  registered under another subject is refused with INVALID_RECORD, and Produce
  v8+ names the records at fault (KIP-467 ``record_errors``);
- RecordNameStrategy takes the record's full name as the subject;
- ``schema.validation.mode=full`` also refuses a payload that does not decode;
- an id registered through the registry a moment before is known at once.
"""

from __future__ import annotations

import json
import uuid

import pytest

from protocol.errors import ErrorCode
from protocol.records import build_batch
from tests.conftest import wait_until
from tests.interop._support import create_topic, produce_raw
from tests.schemas._registry import REGISTRY_LINE, Registry, registry_port

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("fastavro")
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

ORDER = {"type": "record", "name": "Order", "namespace": "com.acme", "fields": [{"name": "id", "type": "long"}]}
CUSTOMER = {"type": "record", "name": "Customer", "namespace": "com.acme", "fields": [{"name": "name", "type": "string"}]}
WAIT_S = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.conftest import BrokerProcess

    process = BrokerProcess(tmp_path_factory.mktemp("validation"), {"schema.registry.listener": "http://127.0.0.1:0", "metrics.listener": "http://127.0.0.1:0"}).start()
    try:
        assert wait_until(lambda: REGISTRY_LINE.search(process.log_text()))
        process.registry = Registry(registry_port(process))
        yield process
    finally:
        process.stop()


def topic_with(broker, configs: dict[str, str]) -> str:
    name = f"orders-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, name, partitions=1, configs=configs)
    return name


def framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def avro_value(broker, topic: str, value: dict, schema=ORDER) -> bytes:
    client = SchemaRegistryClient({"url": broker.registry.url})
    serializer = AvroSerializer(client, json.dumps(schema), conf={"auto.register.schemas": False, "use.latest.version": False})
    return serializer(value, SerializationContext(topic, MessageField.VALUE))


def test_ids_registered_under_the_topics_subject_are_taken_others_refused_with_record_errors(broker):
    topic = topic_with(broker, {"confluent.value.schema.validation": "true"})
    registry = broker.registry
    order_id = registry.register(f"{topic}-value", ORDER)[1]["id"]
    other_id = registry.register(f"other-{topic}-value", CUSTOMER)[1]["id"]
    good = avro_value(broker, topic, {"id": 7})
    assert good[1:5] == order_id.to_bytes(4, "big")

    # One batch, records 1, 2 and 3 at fault; record 4 a tombstone.
    batch = build_batch([(b"k0", good), (b"k1", b"plain text"), (b"k2", framed(999_999, b"\x02")), (b"k3", framed(other_id, b"\x02")), (b"k4", None)])
    answer = produce_raw(broker.bootstrap, topic, batch)
    assert answer.error_code == ErrorCode.INVALID_RECORD
    errors = {e.batch_index: e.batch_index_error_message for e in answer.record_errors}
    assert sorted(errors) == [1, 2, 3], errors
    assert "no schema id" in errors[1]
    assert "schema id 999999 is not registered" in errors[2]
    assert f"not registered under subject {topic}-value" in errors[3]
    assert answer.error_message == errors[1]

    # What is valid is taken: a serialized record and a tombstone, by confluent-kafka.
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "message.timeout.ms": WAIT_S * 1000})
    outcomes = []
    producer.produce(topic, key=b"a", value=good, on_delivery=lambda err, msg: outcomes.append(err))
    producer.produce(topic, key=b"b", value=None, on_delivery=lambda err, msg: outcomes.append(err))
    assert producer.flush(WAIT_S) == 0
    assert outcomes == [None, None], [str(e) for e in outcomes]
    # A record at fault fails its batch (here of one), with the broker's reason.
    producer.produce(topic, key=b"c", value=b"not framed", on_delivery=lambda err, msg: outcomes.append(err))
    assert producer.flush(WAIT_S) == 0
    assert outcomes[2] is not None and outcomes[2].code() == confluent_kafka.KafkaError.INVALID_RECORD, str(outcomes[2])
    # Counted per topic and side: three records of the raw batch and confluent-kafka's one.
    from tests.interop.test_metrics import metrics_port, scrape

    samples = scrape(metrics_port(broker))
    assert samples[("pybroker_schema_validation_refused_records_total", (("side", "value"), ("topic", topic)))] == 4


def test_kafka_python_is_refused_with_invalid_record(broker):
    kafka = pytest.importorskip("kafka")
    topic = topic_with(broker, {"redpanda.value.schema.id.validation": "true"})
    order_id = broker.registry.register(f"{topic}-value", ORDER)[1]["id"]
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0, request_timeout_ms=WAIT_S * 1000)
    try:
        producer.send(topic, value=framed(order_id, b"\x0e")).get(timeout=WAIT_S)
        with pytest.raises(kafka.errors.InvalidRecordError):
            producer.send(topic, value=b"{}").get(timeout=WAIT_S)
    finally:
        producer.close(timeout=10)


def test_record_name_strategy_and_full_mode(broker):
    topic = topic_with(broker, {
        "confluent.value.schema.validation": "true",
        "confluent.value.subject.name.strategy": "io.confluent.kafka.serializers.subject.RecordNameStrategy",
        "schema.validation.mode": "full",
    })
    registry = broker.registry
    order_id = registry.register("com.acme.Order", ORDER)[1]["id"]
    customer_id = registry.register(f"{topic}-value", CUSTOMER)[1]["id"]
    batch = build_batch([
        (None, framed(order_id, b"\x0e")),  # id 7: a long, zigzag
        (None, framed(order_id, b"\x80")),  # a varint that never ends
        (None, framed(customer_id, b"\x02a")),  # the topic's subject, not com.acme.Customer's
    ])
    answer = produce_raw(broker.bootstrap, topic, batch)
    errors = {e.batch_index: e.batch_index_error_message for e in answer.record_errors}
    assert sorted(errors) == [1, 2], errors
    assert f"does not match schema id {order_id}" in errors[1]
    assert "not registered under subject com.acme.Customer (RecordNameStrategy)" in errors[2]
    assert produce_raw(broker.bootstrap, topic, build_batch([(None, framed(order_id, b"\x0e"))])).error_code == ErrorCode.NONE


def test_keys_are_validated_when_asked_and_values_then_are_not(broker):
    topic = topic_with(broker, {"confluent.key.schema.validation": "true"})
    key_id = broker.registry.register(f"{topic}-key", {"type": "string"})[1]["id"]
    assert produce_raw(broker.bootstrap, topic, build_batch([(framed(key_id, b"\x02a"), b"anything")])).error_code == ErrorCode.NONE
    answer = produce_raw(broker.bootstrap, topic, build_batch([(b"plain", b"anything")]))
    assert answer.error_code == ErrorCode.INVALID_RECORD and "key has no schema id" in answer.error_message


def test_a_batch_whose_records_cannot_be_read_is_refused_not_stored_unchecked(broker):
    from protocol.records import BATCH_HEADER_BYTES, update_crc

    topic = topic_with(broker, {"confluent.value.schema.validation": "true"})
    # The first record's length grows by one: the records no longer fill the
    # batch. The CRC is made right again, so only reading the records shows it.
    garbled = bytearray(build_batch([(None, b"no framing at all")]))
    garbled[BATCH_HEADER_BYTES] += 2
    update_crc(garbled)
    answer = produce_raw(broker.bootstrap, topic, bytes(garbled))
    assert answer.error_code == ErrorCode.INVALID_RECORD, answer
    assert "records cannot be read" in answer.error_message and answer.record_errors == []
    # Nothing was stored: the next record takes offset 0.
    answer = produce_raw(broker.bootstrap, topic, build_batch([(None, None)]))
    assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 0)


def test_a_topic_config_of_another_kind_is_refused(broker):
    from tests.interop._support import create_topics_raw

    [result] = create_topics_raw(broker.bootstrap, [(f"bad-{uuid.uuid4().hex[:6]}", 1, 1, {"confluent.value.subject.name.strategy": "Nope"})])
    assert result.error_code == ErrorCode.INVALID_CONFIG
