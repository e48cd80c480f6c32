"""JSON Schema: drafts, references, canonical texts, compatibility per rule and level, payload validation."""

from __future__ import annotations

import json

import pytest

from protocol.schema_formats.formats import SchemaInvalid, compatibility_errors, parse_schema, payload_error
from tests.schemas._compatibility import check_evolution, check_table_has_both_verdicts


def obj(properties, closed=False, **keywords) -> dict:
    document = {"type": "object", "properties": properties, **keywords}
    if closed:
        document["additionalProperties"] = False
    return document


def parse(document, references=None):
    return parse_schema("JSON", json.dumps(document), references)


INT = {"type": "integer"}
STR = {"type": "string"}

# (rule, old, new, BACKWARD compatible, FORWARD compatible, the rule name every incompatible verdict gives).
EVOLUTIONS = [
    # Confluent's content-model rules: adding a property is safe only where old data could not hold it.
    (
        "property added to an open model",
        obj({"a": INT}),
        obj({"a": INT, "b": STR}),
        False,
        True,
        "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
    ),
    (
        "property added to a closed model",
        obj({"a": INT}, closed=True),
        obj({"a": INT, "b": STR}, closed=True),
        True,
        False,
        "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
    ),
    (
        "property removed from an open model",
        obj({"a": INT, "b": STR}),
        obj({"a": INT}),
        True,
        False,
        "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
    ),
    (
        "property removed from a closed model",
        obj({"a": INT, "b": STR}, closed=True),
        obj({"a": INT}, closed=True),
        False,
        True,
        "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
    ),
    (
        "property added, covered by the partially open model",
        obj({"a": INT}, additionalProperties=STR),
        obj({"a": INT, "b": STR}, additionalProperties=STR),
        True,
        True,
        "",
    ),
    (
        "property added, not covered by the partially open model",
        obj({"a": INT}, additionalProperties=STR),
        obj({"a": INT, "b": INT}, additionalProperties=STR),
        False,
        False,
        "COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    ),
    (
        "property added, covered by a pattern property",
        obj({"a": INT}, patternProperties={"^x_": STR}, additionalProperties=False),
        obj({"a": INT, "x_b": STR}, patternProperties={"^x_": STR}, additionalProperties=False),
        True,
        True,
        "",
    ),
    (
        "additionalProperties closed",
        obj({"a": INT}),
        obj({"a": INT}, closed=True),
        False,
        True,
        "ADDITIONAL_PROPERTIES_REMOVED",
    ),
    (
        "additionalProperties narrowed",
        obj({"a": INT}, additionalProperties={"type": "number"}),
        obj({"a": INT}, additionalProperties=INT),
        False,
        True,
        "ADDITIONAL_PROPERTIES_NARROWED",
    ),
    ("type widened from integer to number", INT, {"type": "number"}, True, False, "TYPE_"),
    ("type extended with null", STR, {"type": ["string", "null"]}, True, False, "TYPE_NARROWED"),
    ("type changed", STR, INT, False, False, "TYPE_CHANGED"),
    ("type added where there was none", {}, STR, False, True, "TYPE_NARROWED"),
    (
        "required property added",
        obj({"a": INT, "b": STR}),
        obj({"a": INT, "b": STR}, required=["b"]),
        False,
        True,
        "REQUIRED_ATTRIBUTE_ADDED",
    ),
    (
        "required property added with a default",
        obj({"a": INT, "b": STR}),
        obj({"a": INT, "b": {"type": "string", "default": ""}}, required=["b"]),
        True,
        True,
        "",
    ),
    (
        "required property added to a closed model",
        obj({"a": INT}, closed=True),
        obj({"a": INT, "b": STR}, closed=True, required=["b"]),
        False,
        False,
        "_CONTENT_MODEL",
    ),
    ("enum extended", {"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}, True, False, "ENUM_ARRAY_NARROWED"),
    ("enum given a type its values have", {"enum": ["a", "b"]}, {"type": "string", "enum": ["a", "b"]}, True, True, ""),
    ("enum added", STR, {"type": "string", "enum": ["a"]}, False, True, "ENUM_ADDED"),
    ("const changed", {"const": "a"}, {"const": "b"}, False, False, "CONST_CHANGED"),
    (
        "maxLength increased",
        {"type": "string", "maxLength": 5},
        {"type": "string", "maxLength": 10},
        True,
        False,
        "MAX_LENGTH_DECREASED",
    ),
    ("maxLength added", STR, {"type": "string", "maxLength": 10}, False, True, "MAX_LENGTH_ADDED"),
    (
        "minLength decreased",
        {"type": "string", "minLength": 5},
        {"type": "string", "minLength": 1},
        True,
        False,
        "MIN_LENGTH_INCREASED",
    ),
    ("minLength added", STR, {"type": "string", "minLength": 1}, False, True, "MIN_LENGTH_ADDED"),
    (
        "maximum increased",
        {"type": "number", "maximum": 5},
        {"type": "number", "maximum": 10},
        True,
        False,
        "MAXIMUM_DECREASED",
    ),
    (
        "minimum increased",
        {"type": "number", "minimum": 0},
        {"type": "number", "minimum": 1},
        False,
        True,
        "MINIMUM_INCREASED",
    ),
    (
        "exclusiveMaximum increased",
        {"type": "number", "exclusiveMaximum": 5},
        {"type": "number", "exclusiveMaximum": 6},
        True,
        False,
        "EXCLUSIVE_MAXIMUM_DECREASED",
    ),
    (
        "maxItems increased",
        {"type": "array", "maxItems": 2},
        {"type": "array", "maxItems": 3},
        True,
        False,
        "MAX_ITEMS_DECREASED",
    ),
    ("minItems added", {"type": "array"}, {"type": "array", "minItems": 1}, False, True, "MIN_ITEMS_ADDED"),
    (
        "maxProperties decreased",
        {"type": "object", "maxProperties": 3},
        {"type": "object", "maxProperties": 2},
        False,
        True,
        "MAX_PROPERTIES_DECREASED",
    ),
    (
        "multipleOf made coarser",
        {"type": "number", "multipleOf": 2},
        {"type": "number", "multipleOf": 4},
        False,
        True,
        "MULTIPLE_OF_CHANGED",
    ),
    ("pattern added", STR, {"type": "string", "pattern": "^a"}, False, True, "PATTERN_ADDED"),
    (
        "uniqueItems turned on",
        {"type": "array"},
        {"type": "array", "uniqueItems": True},
        False,
        True,
        "UNIQUE_ITEMS_ADDED",
    ),
    (
        "items widened",
        {"type": "array", "items": INT},
        {"type": "array", "items": {"type": "number"}},
        True,
        False,
        "TYPE_",
    ),
    ("items changed", {"type": "array", "items": INT}, {"type": "array", "items": STR}, False, False, "TYPE_CHANGED"),
    (
        "tuple item changed (2020-12 prefixItems)",
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array", "prefixItems": [INT, STR]},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array", "prefixItems": [INT, INT]},
        False,
        False,
        "TYPE_CHANGED",
    ),
    (
        "tuple closed after its items",
        {"type": "array", "items": [INT]},
        {"type": "array", "items": [INT], "additionalItems": False},
        False,
        True,
        "ADDITIONAL_ITEMS_REMOVED",
    ),
    (
        "oneOf branch added",
        {"oneOf": [INT, STR]},
        {"oneOf": [INT, STR, {"type": "boolean"}]},
        True,
        False,
        "SUM_TYPE_NARROWED",
    ),
    ("schema made an anyOf holding it", STR, {"anyOf": [STR, INT]}, True, False, "SUM_TYPE_NARROWED"),
    (
        "oneOf branch narrowed",
        {"oneOf": [INT, STR]},
        {"oneOf": [INT, {"type": "string", "maxLength": 3}]},
        False,
        True,
        "SUM_TYPE_NARROWED",
    ),
    (
        "allOf constraint added",
        {"allOf": [STR]},
        {"allOf": [STR, {"maxLength": 3}]},
        False,
        True,
        "PRODUCT_TYPE_EXTENDED",
    ),
    ("not added", STR, {"type": "string", "not": {"const": ""}}, False, True, "NOT_TYPE_CHANGED"),
    (
        "nested property type widened",
        obj({"o": obj({"a": INT})}),
        obj({"o": obj({"a": {"type": "number"}})}),
        True,
        False,
        "#/properties/o/properties/a",
    ),
]


@pytest.mark.parametrize("rule, old, new, backward, forward, named", EVOLUTIONS, ids=[row[0] for row in EVOLUTIONS])
def test_each_rule_at_each_level(rule, old, new, backward, forward, named):
    check_evolution(parse(old), parse(new), backward, forward, named)


def test_the_table_has_a_compatible_and_an_incompatible_pair_per_level():
    check_table_has_both_verdicts(EVOLUTIONS)


def test_transitive_levels_look_at_every_earlier_version():
    # v2 was registered while the subject's level was NONE; v3 only extends v2.
    v1, v2, v3 = parse(STR), parse(INT), parse({"type": ["integer", "null"]})
    assert compatibility_errors(v3, [v1, v2], "BACKWARD") == []
    errors = compatibility_errors(v3, [v1, v2], "BACKWARD_TRANSITIVE")
    assert len(errors) == 1 and "earlier schema 1 of 2" in errors[0] and "TYPE_CHANGED" in errors[0]
    assert compatibility_errors(v2, [v1, v3], "FORWARD") == []
    assert compatibility_errors(v2, [v1, v3], "FORWARD_TRANSITIVE") != []
    closed_v1 = parse(obj({"a": INT}, closed=True))
    closed_v2 = parse(obj({"a": INT, "b": STR}, closed=True))
    assert compatibility_errors(closed_v2, [closed_v1, closed_v1], "FULL_TRANSITIVE") != []
    assert compatibility_errors(closed_v2, [closed_v1, closed_v1], "BACKWARD_TRANSITIVE") == []


@pytest.mark.parametrize(
    "dialect",
    [
        "http://json-schema.org/draft-04/schema#",
        "http://json-schema.org/draft-06/schema#",
        "http://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft/2019-09/schema",
        "https://json-schema.org/draft/2020-12/schema",
    ],
)
def test_confluents_drafts_are_read(dialect):
    schema = parse({"$schema": dialect, "type": "object", "properties": {"a": INT}, "required": ["a"]})
    assert payload_error(schema, b'{"a": 1}') is None
    assert payload_error(schema, b'{"a": "x"}') is not None


def test_draft4_boolean_exclusive_bounds():
    draft4 = "http://json-schema.org/draft-04/schema#"
    inclusive = parse({"$schema": draft4, "type": "number", "maximum": 5})
    exclusive = parse({"$schema": draft4, "type": "number", "maximum": 5, "exclusiveMaximum": True})
    assert payload_error(exclusive, b"5") is not None and payload_error(inclusive, b"5") is None
    assert "EXCLUSIVE_MAXIMUM_ADDED" in compatibility_errors(exclusive, [inclusive], "BACKWARD")[0]
    assert compatibility_errors(inclusive, [exclusive], "BACKWARD") == []


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1, 2]",
        json.dumps({"type": 5}),
        json.dumps({"type": "object", "required": "a"}),
        json.dumps({"$schema": "http://json-schema.org/draft-03/schema#", "type": "string"}),
        json.dumps({"$ref": "#/definitions/missing"}),
        json.dumps({"$ref": "other.json"}),
    ],
    ids=["not-json", "array", "bad-type", "bad-required", "draft-3", "dangling-ref", "missing-reference"],
)
def test_unreadable_schemas_are_refused(text):
    with pytest.raises(SchemaInvalid):
        parse_schema("JSON", text)


ADDRESS_V1 = {"type": "object", "properties": {"street": STR}, "additionalProperties": False}
ADDRESS_V2 = {"type": "object", "properties": {"street": STR, "zip": STR}, "additionalProperties": False}


def test_references_resolve_by_name_in_validation_and_compatibility():
    customer = obj(
        {"name": STR, "home": {"$ref": "address.json"}, "work": {"$ref": "address.json#"}}, required=["home"]
    )
    v1 = parse(customer, {"address.json": json.dumps(ADDRESS_V1)})
    v2 = parse(customer, {"address.json": json.dumps(ADDRESS_V2)})
    assert payload_error(v1, b'{"home": {"street": "a"}}') is None
    assert "$.home" in payload_error(v1, b'{"home": {"street": 1}}')
    assert payload_error(v1, b'{"home": {"street": "a", "zip": "1"}}') is not None
    # $ref is followed, not refused: the referenced schema's change decides.
    assert compatibility_errors(v2, [v1], "BACKWARD") == []
    forward = compatibility_errors(v2, [v1], "FORWARD")
    assert forward and all("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL" in error for error in forward)


def test_internal_and_recursive_references():
    tree = {
        "definitions": {
            "node": {
                "type": "object",
                "properties": {"value": INT, "children": {"type": "array", "items": {"$ref": "#/definitions/node"}}},
            }
        },
        "$ref": "#/definitions/node",
    }
    schema = parse(tree)
    assert payload_error(schema, b'{"value": 1, "children": [{"value": 2, "children": []}]}') is None
    assert payload_error(schema, b'{"value": 1, "children": [{"value": "x"}]}') is not None
    assert compatibility_errors(schema, [schema], "FULL_TRANSITIVE") == []
    widened = json.loads(json.dumps(tree))
    widened["definitions"]["node"]["properties"]["value"] = {"type": "number"}
    assert compatibility_errors(parse(widened), [schema], "BACKWARD") == []
    assert compatibility_errors(parse(widened), [schema], "FORWARD") != []


def test_a_reference_named_by_url_and_a_schema_with_an_id():
    reference = "https://example.com/schemas/address.json"
    schema = parse(
        {
            "$id": "https://example.com/schemas/customer.json",
            "type": "object",
            "properties": {"home": {"$ref": "address.json"}},
        },
        {reference: json.dumps(ADDRESS_V1)},
    )
    assert payload_error(schema, b'{"home": {"street": 5}}') is not None


def test_layout_does_not_change_the_canonical_text():
    document = obj({"b": STR, "a": INT}, required=["a"])
    compact, spaced = parse_schema("JSON", json.dumps(document)), parse_schema("JSON", json.dumps(document, indent=2))
    assert compact.canonical == spaced.canonical
    reordered = parse({"required": ["a"], "properties": {"a": INT, "b": STR}, "type": "object"})
    assert reordered.canonical != compact.canonical
    assert reordered.normalized == compact.normalized


def test_payload_checks():
    schema = parse(obj({"a": INT}, required=["a"]))
    assert payload_error(schema, b'{"a": 3}') is None
    assert "not JSON" in payload_error(schema, b'{"a": ')
    assert "not JSON" in payload_error(schema, b'"\xff"')
    assert "required" in payload_error(schema, b"{}")
    assert payload_error(parse(True), b"[1]") is None
    assert payload_error(parse(False), b"[1]") is not None
