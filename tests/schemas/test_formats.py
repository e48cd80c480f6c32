"""The formats interface: levels, schema types and the dispatch to each format."""

from __future__ import annotations

import json

import pytest

from protocol.schema_formats.formats import (
    COMPATIBILITY_LEVELS,
    SCHEMA_TYPES,
    ParsedSchema,
    SchemaInvalid,
    compatibility_errors,
    parse_schema,
    payload_checker,
    payload_error,
)

# One schema per type, and an evolution of it that no level accepts.
SCHEMAS = {
    "AVRO": (
        json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}),
        json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}),
    ),
    "JSON": (json.dumps({"type": "string"}), json.dumps({"type": "integer"})),
    "PROTOBUF": (
        'syntax = "proto3";\nmessage R { int32 a = 1; }\n',
        'syntax = "proto3";\nmessage R { string a = 1; }\n',
    ),
}


@pytest.mark.parametrize("schema_type", SCHEMA_TYPES)
def test_every_level_of_every_type(schema_type):
    old_text, changed_text = SCHEMAS[schema_type]
    old, changed = parse_schema(schema_type, old_text), parse_schema(schema_type, changed_text)
    assert isinstance(old, ParsedSchema) and old.schema_type == schema_type
    for level in COMPATIBILITY_LEVELS:
        assert compatibility_errors(old, [old], level) == []
        assert compatibility_errors(changed, [], level) == []
        assert (compatibility_errors(changed, [old], level) == []) == (level == "NONE")


def test_non_transitive_levels_look_only_at_the_latest():
    old_text, changed_text = SCHEMAS["JSON"]
    old, changed = parse_schema("JSON", old_text), parse_schema("JSON", changed_text)
    assert compatibility_errors(changed, [old, changed], "FULL") == []
    assert compatibility_errors(changed, [old, changed], "FULL_TRANSITIVE") != []


def test_a_schema_type_change_is_incompatible():
    avro = parse_schema("AVRO", '"string"')
    json_schema = parse_schema("JSON", '{"type": "string"}')
    assert "schema type changed from AVRO to JSON" in compatibility_errors(json_schema, [avro], "BACKWARD")[0]
    assert compatibility_errors(json_schema, [avro], "NONE") == []


def test_unknown_types_and_levels_are_refused():
    with pytest.raises(SchemaInvalid):
        parse_schema("XML", "<a/>")
    with pytest.raises(ValueError):
        compatibility_errors(parse_schema("JSON", "{}"), [], "SIDEWAYS")


def test_payload_checks_dispatch_by_type():
    assert payload_error(parse_schema("JSON", '{"type": "string"}'), b'"x"') is None
    assert payload_error(parse_schema("AVRO", '"int"'), b"\x02") is None
    assert payload_error(parse_schema("PROTOBUF", SCHEMAS["PROTOBUF"][0]), b"\x00\x08\x01") is None


@pytest.mark.parametrize(
    "schema_type, text, payloads",
    [
        ("JSON", '{"type": "string"}', [b'"x"', b"1", b"not json", b""]),
        ("AVRO", '"int"', [b"\x02", b"\x02\x00", b"\x80", b""]),
        ("AVRO", SCHEMAS["AVRO"][0], [b"\x02", b"", b"\xff" * 11]),
        ("PROTOBUF", SCHEMAS["PROTOBUF"][0], [b"\x00\x08\x01", b"\x00\x08", b"\x07", b""]),
    ],
)
def test_a_payload_checker_answers_as_payload_error(schema_type, text, payloads):
    schema = parse_schema(schema_type, text)
    check = payload_checker(schema)
    answers = [check(payload) for payload in payloads]
    assert answers == [payload_error(schema, payload) for payload in payloads]
    assert answers[0] is None and all(answer is not None for answer in answers[1:])
