"""The schema registry's HTTP API on a real broker process (schema.registry.listener):
Confluent's paths, JSON shapes, error codes and content type, and confluent-kafka's
SchemaRegistryClient with AvroSerializer/AvroDeserializer round-tripping records."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.schemas._registry import MEDIA_TYPE, USER_BAD, USER_V1, USER_V2, serving_registry

@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with serving_registry(tmp_path_factory.mktemp("registry")) as registry:
        yield registry


def subject() -> str:
    return f"s-{uuid.uuid4().hex[:8]}-value"


def test_register_is_idempotent_and_reads_answer_confluents_shapes(registry):
    s = subject()
    status, body = registry.register(s, USER_V1)
    assert status == 200 and set(body) == {"id"}, body
    assert registry.last_content_type.startswith(MEDIA_TYPE)
    first = body["id"]
    assert registry.register(s, USER_V1) == (200, {"id": first})
    status, v2 = registry.register(s, USER_V2)
    assert status == 200 and v2["id"] > first

    assert registry.get(f"/subjects/{s}/versions") == (200, [1, 2])
    assert s in registry.get("/subjects")[1]
    assert registry.get(f"/schemas/ids/{first}") == (200, {"schema": json.dumps(USER_V1)})
    assert registry.get(f"/schemas/ids/{first}/subjects") == (200, [s])
    assert registry.get(f"/schemas/ids/{first}/versions") == (200, [{"subject": s, "version": 1}])
    assert registry.get(f"/subjects/{s}/versions/latest") == (
        200, {"subject": s, "version": 2, "id": v2["id"], "schema": json.dumps(USER_V2)},
    )  # fmt: skip
    assert registry.get(f"/subjects/{s}/versions/1/schema") == (200, USER_V1)
    # Lookup by content.
    assert registry.post(f"/subjects/{s}", {"schema": json.dumps(USER_V1)})[1]["version"] == 1
    assert registry.post(f"/subjects/{s}", {"schema": json.dumps(USER_BAD)})[1]["error_code"] == 40403
    assert s in {entry["subject"] for entry in registry.get("/schemas?subjectPrefix=s-")[1]}
    assert "AVRO" in registry.get("/schemas/types")[1]


def test_errors_have_confluents_codes(registry):
    s = subject()
    registry.register(s, USER_V1)
    assert registry.get("/subjects/nope-value/versions")[1]["error_code"] == 40401
    assert registry.get(f"/subjects/{s}/versions/9")[1]["error_code"] == 40402
    assert registry.get(f"/subjects/{s}/versions/0") == (
        422, {"error_code": 42202, "message": "The specified version '0' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""},
    )  # fmt: skip
    assert registry.get("/schemas/ids/999999")[1]["error_code"] == 40403
    status, body = registry.post(f"/subjects/{s}/versions", {"schema": "{not avro"})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = registry.register(s, USER_BAD)
    assert (status, body["error_code"]) == (409, 409)
    # An unbuilt path answers 404 in the same shape.
    status, body = registry.get("/exporters")
    assert status == 404 and body["error_code"] == 404


def test_compatibility_check_with_verbose_messages(registry):
    s = subject()
    registry.register(s, USER_V1)
    path = f"/compatibility/subjects/{s}/versions/latest"
    assert registry.post(path, {"schema": json.dumps(USER_V2)}) == (200, {"is_compatible": True})
    status, body = registry.post(path + "?verbose=true", {"schema": json.dumps(USER_BAD)})
    assert status == 200 and body["is_compatible"] is False and body["messages"], body


def test_config_per_subject_and_global(registry):
    s = subject()
    registry.register(s, USER_V1)
    assert registry.get("/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert registry.get(f"/config/{s}")[1]["error_code"] == 40408
    assert registry.get(f"/config/{s}?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})
    assert registry.request("PUT", f"/config/{s}", {"compatibility": "NONE"}) == (200, {"compatibility": "NONE"})
    assert registry.get(f"/config/{s}") == (200, {"compatibilityLevel": "NONE"})
    assert registry.register(s, USER_BAD)[0] == 200  # NONE lets it through
    status, body = registry.request("PUT", f"/config/{s}", {"compatibility": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42203)


def test_soft_and_permanent_deletes(registry):
    s = subject()
    # A schema of its own: the same schema under another subject would keep its id alive.
    namespace = s.replace("-", "_")
    first = registry.register(s, {**USER_V1, "namespace": namespace})[1]["id"]
    assert registry.register(s, {**USER_V2, "namespace": namespace})[0] == 200
    assert registry.request("DELETE", f"/subjects/{s}/versions/2?permanent=true")[1]["error_code"] == 40407
    assert registry.request("DELETE", f"/subjects/{s}/versions/2") == (200, 2)
    assert registry.get(f"/subjects/{s}/versions") == (200, [1])
    assert registry.get(f"/subjects/{s}/versions?deleted=true") == (200, [1, 2])
    assert registry.request("DELETE", f"/subjects/{s}?permanent=true")[1]["error_code"] == 40405
    assert registry.request("DELETE", f"/subjects/{s}") == (200, [1])
    assert registry.request("DELETE", f"/subjects/{s}")[1]["error_code"] == 40404
    assert s not in registry.get("/subjects")[1] and s in registry.get("/subjects?deleted=true")[1]
    assert registry.get(f"/schemas/ids/{first}")[0] == 200  # soft-deleted schemas stay readable by id
    assert registry.request("DELETE", f"/subjects/{s}?permanent=true") == (200, [1, 2])
    assert registry.get(f"/schemas/ids/{first}")[1]["error_code"] == 40403
    assert s not in registry.get("/subjects?deleted=true")[1]


def test_the_records_are_in_the_schemas_topic_in_confluents_format(registry):
    from confluent_kafka import Consumer, TopicPartition

    s = subject()
    schema_id = registry.register(s, USER_V1)[1]["id"]
    consumer = Consumer({"bootstrap.servers": registry.broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("_schemas", 0, 0)])
        found = None
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is not None and not message.error() and json.loads(message.key()).get("subject") == s:
                found = message
                break
        assert found is not None
        assert json.loads(found.key()) == {"keytype": "SCHEMA", "subject": s, "version": 1, "magic": 1}
        assert json.loads(found.value()) == {
            "subject": s, "version": 1, "id": schema_id, "schema": json.dumps(USER_V1), "references": [], "deleted": False,
        }  # fmt: skip
    finally:
        consumer.close()


def test_confluent_kafka_avro_serializer_round_trip(registry):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = f"avro-{uuid.uuid4().hex[:8]}"
    client = SchemaRegistryClient({"url": registry.url})
    serializer = AvroSerializer(client, json.dumps(USER_V2))
    context = SerializationContext(topic, MessageField.VALUE)
    payload = serializer({"name": "ada", "age": 36}, context)
    assert payload[0] == 0  # Confluent's magic byte, then the schema id
    schema_id = int.from_bytes(payload[1:5], "big")
    assert registry.get(f"/subjects/{topic}-value/versions/latest")[1]["id"] == schema_id
    # A fresh client (no cache) reads the schema by id to decode.
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry.url}))
    assert deserializer(payload, context) == {"name": "ada", "age": 36}
    assert client.get_latest_version(f"{topic}-value").schema_id == schema_id
    assert client.lookup_schema(f"{topic}-value", client.get_schema(schema_id)).version == 1


def test_import_mode_keeps_the_given_ids_and_new_ids_go_past_them(registry):
    s = subject()
    assert registry.request("PUT", f"/mode/{s}", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    assert registry.get(f"/mode/{s}") == (200, {"mode": "IMPORT"})
    assert registry.get("/mode") == (200, {"mode": "READWRITE"})
    imported = {**USER_V1, "namespace": s.replace("-", "_")}
    assert registry.register(s, imported, id=900_000, version=4) == (200, {"id": 900_000})
    assert registry.get(f"/subjects/{s}/versions/4")[1]["id"] == 900_000
    # Without an id, IMPORT refuses; back in READWRITE the next new schema's id is past the imported one.
    assert registry.register(s, USER_V2)[1]["error_code"] == 42205
    assert registry.request("PUT", f"/mode/{s}", {"mode": "READWRITE"}) == (200, {"mode": "READWRITE"})
    status, body = registry.register(subject(), {**USER_V1, "name": "AfterImport"})
    assert status == 200 and body["id"] > 900_000
    status, body = registry.request("PUT", "/mode", {"mode": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42204)


def test_read_only_mode_refuses_registrations(registry):
    s = subject()
    registry.register(s, USER_V1)
    assert registry.request("PUT", f"/mode/{s}", {"mode": "READONLY"})[0] == 200
    status, body = registry.register(s, USER_V2)
    assert (status, body["error_code"]) == (422, 42205)
    assert registry.register(s, USER_V1)[0] == 200  # an existing schema's id is still answered
    assert registry.request("DELETE", f"/mode/{s}") == (200, {"mode": "READONLY"})
    assert registry.register(s, USER_V2)[0] == 200


def test_references_resolve_and_protect_what_they_name(registry):
    address_subject, customer_subject = subject(), subject()
    namespace = address_subject.replace("-", "_")
    address = {"type": "record", "name": "Address", "namespace": namespace, "fields": [{"name": "city", "type": "string"}]}
    registry.register(address_subject, address)
    customer = {"type": "record", "name": "Customer", "namespace": namespace, "fields": [{"name": "home", "type": f"{namespace}.Address"}]}
    references = [{"name": f"{namespace}.Address", "subject": address_subject, "version": 1}]
    status, body = registry.register(customer_subject, customer, references=references)
    assert status == 200, body
    customer_id = body["id"]
    assert registry.get(f"/schemas/ids/{customer_id}")[1]["references"] == references
    assert registry.get(f"/subjects/{address_subject}/versions/1/referencedby") == (200, [customer_id])
    # Without its reference the schema cannot be read.
    assert registry.register(subject(), customer)[1]["error_code"] == 42201
    # What a live schema references cannot be deleted.
    status, body = registry.request("DELETE", f"/subjects/{address_subject}/versions/1")
    assert (status, body["error_code"]) == (422, 42206)


def test_lookups_and_listings_of_deleted_versions(registry):
    s = subject()
    own = {**USER_V1, "namespace": s.replace("-", "_")}
    registry.register(s, own)
    registry.register(s, {**USER_V2, "namespace": s.replace("-", "_")})
    registry.request("DELETE", f"/subjects/{s}/versions/1")
    assert registry.post(f"/subjects/{s}", {"schema": json.dumps(own)})[1]["error_code"] == 40403
    assert registry.post(f"/subjects/{s}?deleted=true", {"schema": json.dumps(own)})[1]["version"] == 1
    assert registry.get(f"/subjects/{s}/versions/1")[1]["error_code"] == 40402
    assert registry.get(f"/subjects/{s}/versions/1?deleted=true")[1]["version"] == 1
    listed = [e["version"] for e in registry.get(f"/schemas?subjectPrefix={s}")[1]]
    assert listed == [2]
    assert [e["version"] for e in registry.get(f"/schemas?subjectPrefix={s}&deleted=true")[1]] == [1, 2]
    assert [e["version"] for e in registry.get(f"/schemas?subjectPrefix={s}&deleted=true&latestOnly=true")[1]] == [2]


def test_malformed_bodies_answer_in_the_error_shape(registry):
    s = subject()
    assert registry.register(s, USER_V1, id="seven")[1]["error_code"] == 42201
    assert registry.register(s, USER_V1, version=-5)[1]["error_code"] == 42202
    status, body = registry.post(f"/subjects/{s}/versions", {"schemaType": "AVRO"})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = registry.request("PATCH", "/subjects")
    assert (status, body["error_code"]) == (405, 405)


def test_the_default_context(registry):
    s = subject()
    schema_id = registry.register(f":.:{s}", USER_V1)[1]["id"]
    assert registry.get("/contexts") == (200, ["."])
    assert registry.get(f"/subjects/{s}/versions/1")[1]["id"] == schema_id
    assert registry.get(f"/subjects/:.:{s}/versions") == (200, [1])
