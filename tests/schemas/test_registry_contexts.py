"""Schema contexts on a real broker's registry (Confluent's ``:.ctx:subject``, per-context
ids and settings, ``/contexts``, the ``/contexts/{ctx}/`` URL prefix) with HTTP and
confluent-kafka's SchemaRegistryClient and Avro serializers; and ids never reused
after a permanent delete, the log cleaner's compaction of ``_schemas`` and a restart."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.conftest import wait_until
from tests.interop.test_compaction import consume_all
from tests.schemas._registry import REGISTRY_LINE, USER_BAD, USER_V1, USER_V2, Registry, registry_port, serving_registry

@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with serving_registry(tmp_path_factory.mktemp("registry-contexts")) as registry:
        yield registry


def context() -> str:
    return f".c{uuid.uuid4().hex[:8]}"


def test_a_context_has_its_own_ids_subjects_and_listing(registry):
    ctx = context()
    plain_id = registry.register("ctx-orders-value", USER_V1)[1]["id"]
    status, body = registry.register(f":{ctx}:orders-value", USER_V2)
    # A new context's ids start at 1, whatever the default context has given out.
    assert (status, body) == (200, {"id": 1})
    assert registry.register(f":{ctx}:orders-value", USER_V2) == (200, {"id": 1})
    assert registry.get(f"/subjects/:{ctx}:orders-value/versions/1") == (
        200, {"subject": f":{ctx}:orders-value", "version": 1, "id": 1, "schema": json.dumps(USER_V2)},
    )  # fmt: skip
    # The id in the context, by a qualified subject, the context's empty subject or the URL prefix;
    # bare, the default context's id 1.
    assert registry.get(f"/schemas/ids/1?subject=:{ctx}:orders-value") == (200, {"schema": json.dumps(USER_V2)})
    assert registry.get(f"/schemas/ids/1?subject=:{ctx}:") == (200, {"schema": json.dumps(USER_V2)})
    assert registry.get(f"/contexts/{ctx}/schemas/ids/1") == (200, {"schema": json.dumps(USER_V2)})
    assert registry.get(f"/contexts/{ctx}/schemas/ids/1/versions") == (200, [{"subject": f":{ctx}:orders-value", "version": 1}])
    assert registry.get(f"/schemas/ids/{plain_id}") == (200, {"schema": json.dumps(USER_V1)})
    assert registry.get(f"/schemas/ids/1?subject=:{ctx}:nope-value")[1]["error_code"] == 40403

    assert ctx in registry.get("/contexts")[1] and registry.get("/contexts")[1][0] == "."
    assert registry.get(f"/subjects?subjectPrefix=:{ctx}:") == (200, [f":{ctx}:orders-value"])
    every = registry.get("/subjects")[1]
    assert f":{ctx}:orders-value" in every and "ctx-orders-value" in every
    assert f":{ctx}:orders-value" in registry.get("/subjects?subjectPrefix=:*:orders")[1]
    assert all(not s.startswith(":") for s in registry.get("/subjects?subjectPrefix=ctx-")[1])
    assert registry.get(f"/contexts/{ctx}/subjects") == (200, [f":{ctx}:orders-value"])
    assert [e["subject"] for e in registry.get(f"/schemas?subjectPrefix=:{ctx}:")[1]] == [f":{ctx}:orders-value"]


def test_the_url_prefix_scopes_every_subject_path(registry):
    ctx = context()
    base = f"/contexts/{ctx[1:]}"  # ".ctx" and "ctx" name the same context
    assert registry.post(f"{base}/subjects/orders-value/versions", {"schema": json.dumps(USER_V1)}) == (200, {"id": 1})
    assert registry.get(f"/subjects/:{ctx}:orders-value/versions") == (200, [1])
    assert registry.post(f"{base}/subjects/orders-value", {"schema": json.dumps(USER_V1)})[1]["id"] == 1
    assert registry.post(f"{base}/compatibility/subjects/orders-value/versions/latest", {"schema": json.dumps(USER_BAD)}) == (
        200, {"is_compatible": False},
    )  # fmt: skip
    # Config without a subject under the prefix is the context's own.
    assert registry.request("PUT", f"{base}/config", {"compatibility": "NONE"}) == (200, {"compatibility": "NONE"})
    assert registry.get(f"/config/:{ctx}:") == (200, {"compatibilityLevel": "NONE"})
    assert registry.post(f"{base}/subjects/orders-value/versions", {"schema": json.dumps(USER_BAD)}) == (200, {"id": 2})
    status, body = registry.get(f"/contexts/:{ctx}:x:/subjects")
    assert (status, body["error_code"]) == (400, 400)


def test_context_settings_fall_back_to_the_context_before_the_global_one(registry):
    ctx = context()
    registry.register(f":{ctx}:s-value", USER_V1)
    assert registry.request("PUT", f"/config/:{ctx}:", {"compatibility": "NONE"}) == (200, {"compatibility": "NONE"})
    # The subject has no level of its own; its context's NONE accepts what BACKWARD (global) refuses.
    assert registry.get(f"/config/:{ctx}:s-value?defaultToGlobal=true") == (200, {"compatibilityLevel": "NONE"})
    assert registry.get(f"/config/:{ctx}:s-value")[1]["error_code"] == 40408
    assert registry.get("/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert registry.register(f":{ctx}:s-value", USER_BAD)[0] == 200
    # A read-only context refuses registrations; the default context does not.
    other = context()
    assert registry.request("PUT", f"/mode/:{other}:", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    status, body = registry.register(f":{other}:s-value", USER_V1)
    assert (status, body["error_code"]) == (422, 42205)
    assert other not in registry.get("/contexts")[1]  # settings alone make no context
    assert registry.get(f"/mode/:{other}:s-value?defaultToGlobal=true") == (200, {"mode": "READONLY"})
    assert registry.request("DELETE", f"/mode/:{other}:") == (200, {"mode": "READONLY"})
    status, body = registry.register(f":{ctx}:", USER_V1)
    assert (status, body["error_code"]) == (422, 42208)


def test_a_context_is_deleted_once_empty(registry):
    ctx = context()
    registry.register(f":{ctx}:s-value", USER_V1)
    status, body = registry.request("DELETE", f"/contexts/{ctx}")
    assert (status, body["error_code"]) == (422, 42211)
    assert registry.request("DELETE", f"/subjects/:{ctx}:s-value")[0] == 200
    assert registry.request("DELETE", f"/contexts/{ctx}")[1]["error_code"] == 42211  # soft-deleted still counts
    assert registry.request("DELETE", f"/subjects/:{ctx}:s-value?permanent=true") == (200, [1])
    assert registry.request("DELETE", f"/contexts/{ctx}") == (204, None)
    assert ctx not in registry.get("/contexts")[1]
    # Registered again, the context's ids go on past the one it gave out before.
    assert registry.register(f":{ctx}:s-value", USER_V2) == (200, {"id": 2})


def test_confluent_kafka_clients_work_in_a_context(registry):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    ctx = context()
    topic = f"avro-{uuid.uuid4().hex[:8]}"
    client = SchemaRegistryClient({"url": registry.url})
    # A default-context schema first, so the ids of the two contexts overlap.
    client.register_schema(f"{topic}-value", Schema(json.dumps(USER_V1), "AVRO"))
    qualified = f":{ctx}:{topic}-value"
    schema_id = client.register_schema(qualified, Schema(json.dumps(USER_V2), "AVRO"))
    assert schema_id == 1
    assert client.get_latest_version(qualified).schema_id == 1
    assert client.get_subjects() and qualified in client.get_subjects()

    # Serializers: the subject strategy names a qualified subject; the client reads ids in the context
    # through the registry URL's context prefix, as Confluent documents for clients.
    scoped = SchemaRegistryClient({"url": f"{registry.url}/contexts/{ctx}"})
    serializer = AvroSerializer(scoped, json.dumps(USER_V2), conf={"auto.register.schemas": False, "use.latest.version": False})
    message = SerializationContext(topic, MessageField.VALUE)
    payload = serializer({"name": "ada", "age": 36}, message)
    assert int.from_bytes(payload[1:5], "big") == schema_id
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": f"{registry.url}/contexts/{ctx}"}))
    assert deserializer(payload, message) == {"name": "ada", "age": 36}
    # The same bytes read in the default context name the other schema: ids are per context.
    # (Every test here registers USER_V1 first in the default context, so its id 1 is USER_V1.)
    assert SchemaRegistryClient({"url": registry.url}).get_schema(1).schema_str == json.dumps(USER_V1)

    strategy_serializer = AvroSerializer(
        client, json.dumps({**USER_V1, "name": "Other"}), conf={"subject.name.strategy": lambda ctx_, name: f":{ctx}:{ctx_.topic}-other"}
    )
    strategy_serializer({"name": "x"}, message)
    assert registry.get(f"/subjects/:{ctx}:{topic}-other/versions") == (200, [1])


def schemas_records(broker) -> list:
    return consume_all(broker.bootstrap, "_schemas", limit_s=10.0)


def test_ids_are_not_reused_after_a_permanent_delete_compaction_and_a_restart(broker_factory, tmp_path):
    overrides = {
        "schema.registry.listener": "http://127.0.0.1:0",
        # _schemas in small segments, cleaned often, tombstones dropped on the next pass.
        "log.segment.bytes": "1024",
        "log.cleaner.backoff.ms": "200",
        "log.cleaner.min.cleanable.ratio": "0.01",
        "log.cleaner.delete.retention.ms": "0",
    }
    data_dir = tmp_path / "compacted"
    broker = broker_factory(overrides, data_dir=data_dir)
    assert wait_until(lambda: REGISTRY_LINE.search(broker.log_text()))
    registry = Registry(registry_port(broker))
    assert registry.register("keep-value", USER_V1) == (200, {"id": 1})
    assert registry.register("gone-value", {**USER_V1, "name": "Gone"}) == (200, {"id": 2})
    assert registry.request("DELETE", "/subjects/gone-value")[0] == 200
    assert registry.request("DELETE", "/subjects/gone-value?permanent=true") == (200, [1])

    padding = iter(range(10_000))

    def gone_compacted_away():
        # Config writes (no ids) fill segments so the cleaner passes over the tombstones again.
        for _ in range(5):
            assert registry.request("PUT", f"/config/pad-{next(padding)}", {"compatibility": "NONE"})[0] == 200
        keys = [json.loads(key) for _, key, _ in schemas_records(broker) if key is not None]
        subjects = {k.get("subject") for k in keys if k.get("keytype") == "SCHEMA"}
        # A whole read (keep-value's record and the floor are there) without gone-value's records.
        floor = {"keytype": "NOOP", "context": ".", "magic": 0}
        return "keep-value" in subjects and floor in keys and "gone-value" not in subjects

    assert wait_until(gone_compacted_away, timeout_s=60, interval_s=0.5), "the cleaner never removed the deleted subject's records"
    broker.stop()
    broker = broker_factory(overrides, data_dir=data_dir)
    assert wait_until(lambda: REGISTRY_LINE.search(broker.log_text()))
    registry = Registry(registry_port(broker))
    assert registry.get("/subjects/keep-value/versions") == (200, [1])
    # Replayed from the compacted log, the registry still knows id 2 was given out.
    assert registry.register("new-value", {**USER_V1, "name": "New"}) == (200, {"id": 3})
