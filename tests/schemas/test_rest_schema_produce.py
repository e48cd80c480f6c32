"""The REST proxy's v3 produce with a schema (broker/http/rest/schema_payloads.py):
AVRO, JSONSCHEMA and PROTOBUF keys and values serialized by the registry
inside the broker, read back by confluent-kafka's deserializers; the schema
by the subject's latest version, by id, by version and by its text; what
cannot be serialized answered 400 and not written; a topic that validates
its values takes what the proxy serialized."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.conftest import wait_until
from tests.interop._rest import Rest, rest_port
from tests.interop._support import create_topic
from tests.schemas._registry import REGISTRY_LINE, Registry, registry_port

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("fastavro")
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

PAYMENT = {"type": "record", "name": "Payment", "namespace": "acme", "fields": [{"name": "amount", "type": "long"}]}
PAYMENT_V2 = {**PAYMENT, "fields": [*PAYMENT["fields"], {"name": "currency", "type": "string", "default": "EUR"}]}
KEY_SCHEMA = {"type": "object", "properties": {"account": {"type": "string"}}, "required": ["account"]}
PROTO = 'syntax = "proto3";\npackage acme;\nmessage Refund { int64 amount = 1; string reason = 2; }\n'


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.conftest import BrokerProcess

    process = BrokerProcess(
        tmp_path_factory.mktemp("rest-schemas"),
        {"schema.registry.listener": "http://127.0.0.1:0", "rest.listener": "http://127.0.0.1:0"},
    ).start()
    try:
        assert wait_until(lambda: REGISTRY_LINE.search(process.log_text()))
        process.registry = Registry(registry_port(process))
        process.rest = Rest(rest_port(process))
        process.cluster_id = process.rest.cluster_id()
        yield process
    finally:
        process.stop()


def post(broker, topic: str, record: dict):
    status, body, _ = broker.rest.request("POST", f"/v3/clusters/{broker.cluster_id}/topics/{topic}/records", record)
    return status, body


def read_all(broker, topic: str, count: int) -> list:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    try:
        for _ in range(100):
            message = consumer.poll(0.3)
            if message is not None and message.error() is None:
                got.append(message)
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


def test_avro_and_json_schema_records_round_trip_through_the_deserializers(broker):
    topic = f"payments-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=1, configs={"confluent.value.schema.validation": "true"})
    registry = broker.registry
    v1 = registry.register(f"{topic}-value", PAYMENT)[1]["id"]
    v2 = registry.register(f"{topic}-value", PAYMENT_V2)[1]["id"]
    key_id = registry.register(f"{topic}-key", KEY_SCHEMA, schemaType="JSON")[1]["id"]

    # The latest version of <topic>-value, and a JSON schema key.
    status, body = post(broker, topic, {"key": {"type": "JSONSCHEMA", "data": {"account": "a-1"}}, "value": {"type": "AVRO", "data": {"amount": 5, "currency": "USD"}}})
    assert status == 200, body
    assert body["value"]["type"] == "AVRO" and body["key"]["type"] == "JSONSCHEMA"
    # By id, by version, by the schema's text.
    assert post(broker, topic, {"value": {"schema_id": v1, "data": {"amount": 6}}})[0] == 200
    assert post(broker, topic, {"value": {"type": "AVRO", "schema_version": 1, "data": {"amount": 7}}})[0] == 200
    assert post(broker, topic, {"value": {"type": "AVRO", "schema": json.dumps(PAYMENT_V2), "data": {"amount": 8, "currency": "CHF"}}})[0] == 200
    # What cannot be: 400, nothing written.
    status, body = post(broker, topic, {"value": {"type": "AVRO", "data": {"amount": "lots"}}})
    assert status == 400 and "cannot be serialized" in body["message"], body
    status, body = post(broker, topic, {"value": {"type": "AVRO", "schema_id": 999_999, "data": {"amount": 1}}})
    assert status == 400 and "40403" in body["message"], body
    status, body = post(broker, topic, {"value": {"type": "PROTOBUF", "schema_id": v1, "data": {"amount": 1}}})
    assert status == 400 and "is AVRO" in body["message"], body

    client = SchemaRegistryClient({"url": registry.url})
    values = AvroDeserializer(client)
    keys = JSONDeserializer(json.dumps(KEY_SCHEMA), schema_registry_client=client)
    messages = read_all(broker, topic, 4)
    assert len(messages) == 4
    read = [values(m.value(), SerializationContext(topic, MessageField.VALUE)) for m in messages]
    assert read == [{"amount": 5, "currency": "USD"}, {"amount": 6}, {"amount": 7}, {"amount": 8, "currency": "CHF"}]
    assert [int.from_bytes(m.value()[1:5], "big") for m in messages] == [v2, v1, v1, v2]
    assert keys(messages[0].key(), SerializationContext(topic, MessageField.KEY)) == {"account": "a-1"}
    assert int.from_bytes(messages[0].key()[1:5], "big") == key_id


def test_protobuf_values_are_written_with_message_indexes(broker):
    topic = f"refunds-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=1)
    schema_id = broker.registry.register(f"{topic}-value", PROTO, schemaType="PROTOBUF")[1]["id"]
    status, body = post(broker, topic, {"value": {"type": "PROTOBUF", "data": {"amount": "12", "reason": "late"}}})
    assert status == 200, body
    [message] = read_all(broker, topic, 1)
    from google.protobuf import message_factory

    value = message.value()
    assert value[:5] == b"\x00" + schema_id.to_bytes(4, "big") and value[5:6] == b"\x00"  # message indexes [0]
    # Decoded by a message class built from the same .proto text (protobuf's own parser path is the broker's).
    from protocol.schema_formats import formats

    parsed = formats.parse_schema("PROTOBUF", PROTO, {})
    refund = message_factory.GetMessageClass(parsed.handle.pool.FindMessageTypeByName("acme.Refund"))()
    refund.ParseFromString(value[6:])
    assert (refund.amount, refund.reason) == (12, "late")
