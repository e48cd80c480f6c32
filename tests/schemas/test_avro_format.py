"""Avro: parsing, canonical texts, reader/writer compatibility per rule and level, payloads written by fastavro."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from protocol.schema_formats.formats import SchemaInvalid, compatibility_errors, parse_schema, payload_error
from tests.schemas._compatibility import check_evolution, check_table_has_both_verdicts


def record(fields, name="Event", **attributes) -> dict:
    return {"type": "record", "name": name, "namespace": "shop", **attributes, "fields": fields}


def parse(document, references=None):
    return parse_schema("AVRO", json.dumps(document), references)


INT_A = {"name": "a", "type": "int"}

# (rule, old schema, new schema, BACKWARD compatible, FORWARD compatible, a text every incompatible verdict names).
# BACKWARD: the new schema reads data written with the old; FORWARD: the old reads the new.
EVOLUTIONS = [
    # Confluent's table: BACKWARD allows deleting fields and adding optional ones, FORWARD adding fields
    # and deleting optional ones, FULL only adding and deleting optional fields.
    (
        "field added with a default",
        record([INT_A]),
        record([INT_A, {"name": "b", "type": "string", "default": ""}]),
        True,
        True,
        "",
    ),
    (
        "field added without a default",
        record([INT_A]),
        record([INT_A, {"name": "b", "type": "string"}]),
        False,
        True,
        "READER_FIELD_MISSING_DEFAULT_VALUE",
    ),
    (
        "field deleted that had no default",
        record([INT_A, {"name": "b", "type": "string"}]),
        record([INT_A]),
        True,
        False,
        "READER_FIELD_MISSING_DEFAULT_VALUE",
    ),
    (
        "field deleted that had a default",
        record([INT_A, {"name": "b", "type": "string", "default": ""}]),
        record([INT_A]),
        True,
        True,
        "",
    ),
    ("int promoted to long", record([INT_A]), record([{"name": "a", "type": "long"}]), True, False, "TYPE_MISMATCH"),
    (
        "int promoted to double",
        record([INT_A]),
        record([{"name": "a", "type": "double"}]),
        True,
        False,
        "TYPE_MISMATCH",
    ),
    (
        "long promoted to float",
        record([{"name": "a", "type": "long"}]),
        record([{"name": "a", "type": "float"}]),
        True,
        False,
        "TYPE_MISMATCH",
    ),
    (
        "float promoted to double",
        record([{"name": "a", "type": "float"}]),
        record([{"name": "a", "type": "double"}]),
        True,
        False,
        "TYPE_MISMATCH",
    ),
    (
        "string and bytes read each other",
        record([{"name": "a", "type": "string"}]),
        record([{"name": "a", "type": "bytes"}]),
        True,
        True,
        "",
    ),
    (
        "int to string is no promotion",
        record([INT_A]),
        record([{"name": "a", "type": "string"}]),
        False,
        False,
        "TYPE_MISMATCH",
    ),
    (
        "logical type on the same underlying type",
        record([INT_A]),
        record([{"name": "a", "type": {"type": "int", "logicalType": "date"}}]),
        True,
        True,
        "",
    ),
    (
        "field renamed with the old name as an alias",
        record([INT_A]),
        record([{"name": "renamed", "type": "int", "aliases": ["a"]}]),
        True,
        False,
        "READER_FIELD_MISSING_DEFAULT_VALUE",
    ),
    (
        "record renamed with the old name as an alias",
        record([INT_A]),
        record([INT_A], name="Renamed", aliases=["Event"]),
        True,
        False,
        "NAME_MISMATCH",
    ),
    (
        "record renamed without an alias",
        record([INT_A]),
        record([INT_A], name="Renamed"),
        False,
        False,
        "NAME_MISMATCH",
    ),
    (
        "enum symbol added",
        record([{"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED"]}}]),
        record([{"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}}]),
        True,
        False,
        "MISSING_ENUM_SYMBOLS",
    ),
    (
        "enum symbol added, the old reader has a default symbol",
        record([{"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED"], "default": "RED"}}]),
        record(
            [{"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"], "default": "RED"}}]
        ),
        True,
        True,
        "",
    ),
    (
        "enum symbol removed",
        record([{"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}}]),
        record([{"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED"]}}]),
        False,
        True,
        "MISSING_ENUM_SYMBOLS",
    ),
    (
        "fixed size changed",
        record([{"name": "f", "type": {"type": "fixed", "name": "Hash", "size": 16}}]),
        record([{"name": "f", "type": {"type": "fixed", "name": "Hash", "size": 32}}]),
        False,
        False,
        "FIXED_SIZE_MISMATCH",
    ),
    (
        "fixed renamed with an alias",
        record([{"name": "f", "type": {"type": "fixed", "name": "Hash", "size": 16}}]),
        record([{"name": "f", "type": {"type": "fixed", "name": "Digest", "size": 16, "aliases": ["Hash"]}}]),
        True,
        False,
        "NAME_MISMATCH",
    ),
    (
        "union branch added",
        record([{"name": "u", "type": ["null", "string"]}]),
        record([{"name": "u", "type": ["null", "string", "int"]}]),
        True,
        False,
        "MISSING_UNION_BRANCH",
    ),
    (
        "type made a union holding it",
        record([{"name": "u", "type": "string"}]),
        record([{"name": "u", "type": ["null", "string"]}]),
        True,
        False,
        "TYPE_MISMATCH",
    ),
    (
        "union branch read by promotion",
        record([{"name": "u", "type": ["null", "int"]}]),
        record([{"name": "u", "type": ["null", "long"]}]),
        True,
        False,
        "MISSING_UNION_BRANCH",
    ),
    (
        "array items promoted",
        record([{"name": "xs", "type": {"type": "array", "items": "int"}}]),
        record([{"name": "xs", "type": {"type": "array", "items": "long"}}]),
        True,
        False,
        "/items",
    ),
    (
        "map values changed",
        record([{"name": "m", "type": {"type": "map", "values": "int"}}]),
        record([{"name": "m", "type": {"type": "map", "values": "string"}}]),
        False,
        False,
        "/values",
    ),
    (
        "nested record field added without a default",
        record([{"name": "inner", "type": record([INT_A], name="Inner")}]),
        record([{"name": "inner", "type": record([INT_A, {"name": "b", "type": "int"}], name="Inner")}]),
        False,
        True,
        "/fields/0/fields/1",
    ),
]


@pytest.mark.parametrize("rule, old, new, backward, forward, named", EVOLUTIONS, ids=[row[0] for row in EVOLUTIONS])
def test_each_rule_at_each_level(rule, old, new, backward, forward, named):
    check_evolution(parse(old), parse(new), backward, forward, named)


def test_the_table_has_a_compatible_and_an_incompatible_pair_per_level():
    check_table_has_both_verdicts(EVOLUTIONS)


def test_recursive_records_compare_without_looping():
    linked = record([INT_A, {"name": "next", "type": ["null", "shop.Event"], "default": None}])
    grown = record(
        [INT_A, {"name": "next", "type": ["null", "shop.Event"], "default": None}, {"name": "b", "type": "long"}]
    )
    assert compatibility_errors(parse(linked), [parse(linked)], "FULL") == []
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in compatibility_errors(parse(grown), [parse(linked)], "BACKWARD")[0]


def test_transitive_levels_look_at_every_earlier_version():
    # A default is no promise across versions: v2 gives `b` a default, v3 drops it. v3 reads v2's data
    # (it has b) but not v1's (no b, no default).
    v1 = parse(record([INT_A]))
    v2 = parse(record([INT_A, {"name": "b", "type": "string", "default": "x"}]))
    v3 = parse(record([INT_A, {"name": "b", "type": "string"}]))
    assert compatibility_errors(v3, [v1, v2], "BACKWARD") == []
    errors = compatibility_errors(v3, [v1, v2], "BACKWARD_TRANSITIVE")
    assert (
        len(errors) == 1 and "earlier schema 1 of 2" in errors[0] and "READER_FIELD_MISSING_DEFAULT_VALUE" in errors[0]
    )
    assert compatibility_errors(v3, [v1, v2], "FULL") == []
    assert compatibility_errors(v3, [v1, v2], "FULL_TRANSITIVE") != []
    # FORWARD: v1's reader has b as a string (with a default); v2 drops b; v3 brings it back as an int.
    w1 = parse(record([INT_A, {"name": "b", "type": "string", "default": "x"}]))
    w2 = parse(record([INT_A]))
    w3 = parse(record([INT_A, {"name": "b", "type": "int"}]))
    assert compatibility_errors(w3, [w1, w2], "FORWARD") == []
    assert "TYPE_MISMATCH" in compatibility_errors(w3, [w1, w2], "FORWARD_TRANSITIVE")[0]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}),
        json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]}),
        json.dumps({"type": "enum", "name": "E", "symbols": ["A", "A"]}),
        json.dumps({"type": "fixed", "name": "F"}),
        json.dumps({"type": "unknown"}),
        json.dumps({"type": "record", "name": "R"}),
        json.dumps(
            {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "a", "type": "long"}]}
        ),
        json.dumps({"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}),
        json.dumps({"type": "fixed", "name": "F", "size": "16"}),
        json.dumps({"type": "record", "name": "my-record", "fields": []}),
        json.dumps(["null", ["int", "string"]]),
        json.dumps(["string", "null", "string"]),
    ],
    ids=[
        "not-json",
        "unknown-type",
        "default-of-wrong-type",
        "duplicate-symbol",
        "fixed-without-size",
        "bad-type",
        "record-without-fields",
        "field-named-twice",
        "enum-default-not-a-symbol",
        "fixed-size-not-a-count",
        "bad-name",
        "union-in-union",
        "union-with-two-strings",
    ],
)
def test_unreadable_schemas_are_refused(text):
    with pytest.raises(SchemaInvalid):
        parse_schema("AVRO", text)


def test_named_references_are_types_the_schema_can_use():
    address = record([{"name": "street", "type": "string"}], name="Address", namespace="common")
    country = {"type": "enum", "name": "Country", "namespace": "common", "symbols": ["NL", "DE"]}
    # The first reference names a type of the second: references may come in any order.
    located = record(
        [{"name": "address", "type": "common.Address"}, {"name": "country", "type": "common.Country"}],
        name="Located",
        namespace="common",
    )
    schema = parse(
        record([{"name": "where", "type": "common.Located"}]),
        {"located.avsc": json.dumps(located), "address.avsc": json.dumps(address), "country.avsc": json.dumps(country)},
    )
    assert '"name":"common.Address"' in schema.handle.parsing_canonical_form
    with pytest.raises(SchemaInvalid):
        parse(record([{"name": "where", "type": "common.Located"}]))
    with pytest.raises(SchemaInvalid):
        parse(record([INT_A]), {"broken.avsc": "{"})
    # A change inside a referenced type is a change of the schema.
    narrowed = parse(
        record([{"name": "where", "type": "common.Located"}]),
        {
            "located.avsc": json.dumps(located),
            "address.avsc": json.dumps(
                record(
                    [{"name": "street", "type": "string"}, {"name": "zip", "type": "string"}],
                    name="Address",
                    namespace="common",
                )
            ),
            "country.avsc": json.dumps(country),
        },
    )
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in compatibility_errors(narrowed, [schema], "BACKWARD")[0]


def test_layout_does_not_change_the_canonical_text_but_content_does():
    document = record([INT_A, {"name": "b", "type": "string", "default": "x"}])
    compact = parse_schema("AVRO", json.dumps(document))
    spaced = parse_schema("AVRO", json.dumps(document, indent=4))
    assert compact.canonical == spaced.canonical
    other_default = parse(record([INT_A, {"name": "b", "type": "string", "default": "y"}]))
    assert other_default.canonical != compact.canonical
    # Only the Parsing Canonical Form drops the default.
    assert other_default.handle.parsing_canonical_form == compact.handle.parsing_canonical_form


def test_normalized_text_folds_namespaces_and_orders_attributes():
    with_namespace = parse({"fields": [INT_A], "namespace": "shop", "name": "Event", "type": "record"})
    full_name = parse({"type": "record", "name": "shop.Event", "fields": [INT_A]})
    assert with_namespace.canonical != full_name.canonical
    assert with_namespace.normalized == full_name.normalized
    assert json.loads(with_namespace.normalized) == {"type": "record", "name": "shop.Event", "fields": [INT_A]}
    assert parse({"type": "string"}).normalized == '"string"'


def _written(schema, datum) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema.handle.reader_schema, datum)
    return out.getvalue()


def test_payloads_written_by_fastavro_decode_and_others_do_not():
    schema = parse(record([INT_A, {"name": "name", "type": "string"}, {"name": "tag", "type": ["null", "string"]}]))
    payload = _written(schema, {"a": 7, "name": "kettle", "tag": None})
    assert payload_error(schema, payload) is None
    assert "decodes" in payload_error(schema, payload + b"\x00")  # bytes left over
    assert "does not decode" in payload_error(schema, payload[:-2])  # truncated
    assert "does not decode" in payload_error(schema, b"")
    bad_union_index = b"\x0e\x0ckettle\x08"  # a=7, name, union branch 4 of 2
    assert "does not decode" in payload_error(schema, bad_union_index)
    bad_utf8 = b"\x0e\x04\xff\xfe\x00"
    assert "does not decode" in payload_error(schema, bad_utf8)


def test_payloads_of_a_schema_with_references():
    address = record([{"name": "street", "type": "string"}], name="Address", namespace="common")
    schema = parse(
        record([{"name": "home", "type": "common.Address"}, {"name": "work", "type": "common.Address"}]),
        {"a.avsc": json.dumps(address)},
    )
    assert payload_error(schema, _written(schema, {"home": {"street": "a"}, "work": {"street": "b"}})) is None


def test_a_deeply_nested_payload_of_a_recursive_schema_is_refused_not_fatal():
    linked = parse(record([{"name": "next", "type": ["null", "shop.Event"]}]))
    assert linked.handle.recursive and not parse(record([INT_A])).handle.recursive
    assert payload_error(linked, b"\x02" * 50 + b"\x00") is None
    # Each level is one union index byte: 100 000 levels would overflow the compiled reader's C stack.
    assert "does not decode" in payload_error(linked, b"\x02" * 100_000 + b"\x00")
