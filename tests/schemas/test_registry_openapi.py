"""Schemathesis against the schema registry's OpenAPI document (GET /openapi.json, shipped
as broker/http/schema_registry_openapi.json): every operation it lists, with generated
path parameters, query flags and bodies, never answers 5xx and answers what the document
says (status code, content type, JSON shape; errors in Confluent's {error_code, message}).

Stateless and bounded (EXAMPLES per operation and generation mode: valid requests, and
requests the document calls invalid, which must be refused with a documented 4xx). Half of
the generated subjects, versions, ids and schema texts are steered to ones that exist or
parse, so every operation's success path is taken too, not only its 404s and 422s."""

from __future__ import annotations

import hashlib
import http.client
import json
from importlib import resources

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from broker.http.schema_registry import OPENAPI_DOCUMENT
from tests.conftest import BrokerProcess, wait_until
from tests.schemas._registry import REGISTRY_LINE, Registry, registry_port

EXAMPLES = 15
SUBJECT = "openapi-value"
# DELETE operations are steered to subjects of their own, so the others keep SUBJECT.
DELETED_SUBJECT = "openapi-deleted-value"
DELETED_VERSIONS_SUBJECT = "openapi-deleted-versions-value"
# DELETE /config/{s} and /mode/{s} are steered to a subject with both set.
SETTINGS_SUBJECT = "openapi-settings-value"
# The paths under /contexts/{context}/ are steered to a context holding the same subjects
# (registered in it too); DELETE /contexts/{context} to one that is empty.
CONTEXT = "openapi"
EMPTY_CONTEXT = "openapi-empty"
CONTEXT_PREFIX = "/contexts/{context}"


JSON_SCHEMA = ("JSON", json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}))
PROTOBUF_SCHEMA = ("PROTOBUF", 'syntax = "proto3";\npackage contract;\n\nmessage Contract {\n  int32 n = 1;\n}\n')


def record(fields: int) -> dict:
    return {"type": "record", "name": "Contract", "fields": [{"name": f"f{i}", "type": "int", "default": 0} for i in range(fields)]}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("registry-openapi"), {"schema.registry.listener": "http://127.0.0.1:0"}).start()
    try:
        assert wait_until(lambda: REGISTRY_LINE.search(broker.log_text()))
        registry = Registry(registry_port(broker))
        ids = []
        # The default context, then CONTEXT, given the same subjects (and so the same ids).
        for qualifier in ("", f":.{CONTEXT}:"):
            for subject, fields in ((SUBJECT, 1), (SUBJECT, 2), (DELETED_SUBJECT, 1), (DELETED_SUBJECT, 2), (DELETED_VERSIONS_SUBJECT, 1)):
                status, body = registry.register(qualifier + subject, record(fields))
                assert status == 200, body
                ids.append(body["id"])
            for subject, (schema_type, text) in (("openapi-json-value", JSON_SCHEMA), ("openapi-proto-value", PROTOBUF_SCHEMA)):
                status, body = registry.register(qualifier + subject, text, schemaType=schema_type)
                assert status == 200, body
                ids.append(body["id"])
            assert registry.request("PUT", f"/config/{qualifier}{SETTINGS_SUBJECT}", {"compatibility": "FULL"})[0] == 200
            assert registry.request("PUT", f"/mode/{qualifier}{SETTINGS_SUBJECT}", {"mode": "READWRITE"})[0] == 200
        assert ids[: len(ids) // 2] == ids[len(ids) // 2 :]
        # The context's own level and mode, read and deleted by GET and DELETE under /contexts/{context}/.
        assert registry.request("PUT", f"/config/:.{CONTEXT}:", {"compatibility": "BACKWARD"})[0] == 200
        assert registry.request("PUT", f"/mode/:.{CONTEXT}:", {"mode": "READWRITE"})[0] == 200
        yield registry, ids[: len(ids) // 2]
    finally:
        broker.stop()


def _steered(value, real):
    """Half of the generated values (by their hash, so reruns agree) become ``real``."""
    return real if hashlib.sha256(repr(value).encode()).digest()[0] % 2 else value


def test_every_operation_conforms_to_the_served_document(served):
    registry, ids = served
    schema = schemathesis.openapi.from_url(registry.url + "/openapi.json")

    @schema.hook
    def map_path_parameters(context, path_parameters):
        if path_parameters is None:
            return path_parameters
        path_parameters = dict(path_parameters)
        subject = SUBJECT
        path = context.operation.path
        bare = path[len(CONTEXT_PREFIX) :] if path.startswith(CONTEXT_PREFIX + "/") else path
        if context.operation.method.upper() == "DELETE":
            if bare.startswith(("/config", "/mode")):
                subject = SETTINGS_SUBJECT
            else:
                subject = DELETED_VERSIONS_SUBJECT if "version" in path_parameters else DELETED_SUBJECT
        steer = {
            "subject": subject, "version": "1", "id": ids[len(str(path_parameters)) % len(ids)],
            "context": EMPTY_CONTEXT if path == CONTEXT_PREFIX else CONTEXT,
        }  # fmt: skip
        for name, real in steer.items():
            if name in path_parameters:
                path_parameters[name] = _steered(path_parameters[name], real)
        return path_parameters

    @schema.hook
    def map_body(context, body):
        # A registration's text: half the time one that parses, mostly an Avro record (a
        # new field count is compatible with SUBJECT's versions; the same one is known).
        if isinstance(body, dict) and isinstance(body.get("schema"), str) and _steered(body["schema"], None) is None:
            pick = len(body["schema"]) % 6
            if pick == 4:
                return {"schemaType": JSON_SCHEMA[0], "schema": JSON_SCHEMA[1]}
            if pick == 5:
                return {"schemaType": PROTOBUF_SCHEMA[0], "schema": PROTOBUF_SCHEMA[1]}
            return {"schema": json.dumps(record(pick + 1))}
        return body

    operations = [result.ok() for result in schema.get_all_operations()]
    # Every operation of the document, but the document itself (schemathesis leaves out the one it was loaded from).
    with resources.files("broker.http").joinpath(OPENAPI_DOCUMENT).open() as shipped:
        document = json.load(shipped)
    labels = {f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item}
    assert {o.label for o in operations} == labels - {"GET /openapi.json"}
    assert registry.get("/openapi.json") == (200, document) and registry.last_content_type.startswith("application/json")
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    answered: dict[str, set[int]] = {}
    for operation, mode in [(o, m) for o in operations for m in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        def run(case):
            try:
                response = case.call_and_validate(base_url=registry.url, checks=checks)
                answered.setdefault(f"{case.method.upper()} {case.path}", set()).add(response.status_code)
            finally:
                if case.method.upper() == "PUT" and case.path.startswith(("/mode", CONTEXT_PREFIX + "/mode")):
                    # READONLY or IMPORT would leave later operations only their refusals.
                    registry.request("PUT", "/mode?force=true", {"mode": "READWRITE"})
                    registry.request("DELETE", f"/mode/{SUBJECT}")
                    registry.request("PUT", f"/mode/:.{CONTEXT}:", {"mode": "READWRITE"})
                    registry.request("DELETE", f"/mode/:.{CONTEXT}:{SUBJECT}")

        try:
            run()
        except Unsatisfiable:
            # An operation without a body may have no invalid request to make
            # (a path parameter's only invalid string, the empty one, makes no path), so none is made.
            assert mode is GenerationMode.NEGATIVE and not operation.body, operation.label
    # Every operation's success path was taken at least once, not only its refusals.
    assert not [label for label in labels - {"GET /openapi.json"} if not any(200 <= s < 300 for s in answered.get(label, ()))], answered
    # The steering worked: SUBJECT kept its versions.
    status, versions = registry.get(f"/subjects/{SUBJECT}/versions")
    assert status == 200 and versions[:2] == [1, 2], versions


# Regressions found by the fuzzing above, each pinned by a plain request.


def test_a_protobuf_schema_text_is_answered_as_plain_text_not_json(served):
    """``.../schema`` of a Protobuf schema once answered its .proto text as application/json."""
    registry, _ids = served
    schema_id = registry.get("/subjects/openapi-proto-value/versions/1")[1]["id"]
    for path in (f"/schemas/ids/{schema_id}/schema", "/subjects/openapi-proto-value/versions/1/schema"):
        connection = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=30)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            assert response.status == 200 and response.getheader("Content-Type").startswith("text/plain"), path
            assert response.read().decode() == PROTOBUF_SCHEMA[1], path
        finally:
            connection.close()
    # An Avro text stays JSON.
    assert registry.get(f"/subjects/{SUBJECT}/versions/1/schema") == (200, record(1))
    assert registry.last_content_type.startswith("application/json")
