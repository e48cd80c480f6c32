"""Decoding keys and values by the registry's schemas, without Spark: the ``_schemas``
replay, the Spark types each format's schemas give, and records decoded, resolved
or found malformed (spark_jobs/schema_registry.py, spark_jobs/registry_decoder.py)."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import pickle

import pytest

from protocol.schema_formats import formats
from protocol.schema_formats.framing import frame
from protocol.schema_formats.records import (
    ClearSubjectKey,
    DeleteSubjectKey,
    Reference,
    SchemaKey,
    SchemaValue,
    encode_clear_subject_value,
    encode_delete_subject_value,
    encode_key,
    encode_schema_value,
)
from spark_jobs.registry_decoder import ColumnsUnavailable, SideDecoder, SideOptions, arrow_arrays
from spark_jobs.schema_registry import RegistryUnavailable, replay

fastavro = pytest.importorskip("fastavro")
from pyspark.sql.types import (  # noqa: E402  (after the skip: pyspark may be missing)
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


def schema_record(subject, version, schema_id, schema, schema_type="AVRO", references=(), deleted=False):
    text = schema if isinstance(schema, str) else json.dumps(schema)
    value = SchemaValue(subject, version, schema_id, schema_type, text, tuple(references), deleted)
    return encode_key(SchemaKey(subject, version)), encode_schema_value(value)


def decoder_for(records, subject, side="value", prefix=""):
    registered = replay(records)
    schemas = registered.by_id()
    return SideDecoder(SideOptions(side, subject, prefix), schemas[registered.latest(subject).schema_id], schemas)


def avro_bytes(schema, record) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def types_of(decoder):
    return [(column.name, column.data_type) for column in decoder.columns]


# --------------------------------------------------------------------------- the _schemas replay

USER_V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
USER_V2 = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": -1}],
}


def test_replay_keeps_soft_deleted_ids_and_drops_permanently_deleted_ones():
    records = [
        schema_record("a-value", 1, 1, USER_V1),
        schema_record("a-value", 2, 2, USER_V2),
        schema_record("b-value", 1, 3, {"type": "string"}),
        (b'{"keytype":"NOOP","magic":0}', None),
        (b"not json", b"{}"),  # unreadable: skipped, as it says nothing about decoding
        # a-value version 2 soft-deleted: the latest is version 1 again, id 2 still decodes.
        (encode_key(DeleteSubjectKey("a-value")), encode_delete_subject_value("a-value", 2)),
        schema_record("a-value", 3, 1, USER_V1),
    ]
    registered = replay(records)
    assert registered.latest("a-value").version == 3
    assert sorted(registered.by_id()) == [1, 2, 3]
    # Permanent deletes: CLEAR_SUBJECT removes soft-deleted versions, a tombstone one version.
    registered.apply(encode_key(ClearSubjectKey("a-value")), encode_clear_subject_value("a-value"))
    registered.apply(encode_key(SchemaKey("b-value", 1)), None)
    assert sorted(registered.by_id()) == [1]
    with pytest.raises(RegistryUnavailable, match="b-value"):
        registered.latest("b-value")


def test_references_are_resolved_through_their_own_references():
    leaf = {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}
    middle = {"type": "record", "name": "Paint", "fields": [{"name": "colour", "type": "Colour"}]}
    top = {"type": "record", "name": "Order", "fields": [{"name": "paint", "type": "Paint"}]}
    records = [
        schema_record("colour", 1, 1, leaf),
        schema_record("paint", 1, 2, middle, references=[Reference("Colour", "colour", 1)]),
        schema_record("orders-value", 1, 3, top, references=[Reference("Paint", "paint", 1)]),
    ]
    decoder = decoder_for(records, "orders-value")
    assert dict(decoder.reader_entry.references) == {"Colour": json.dumps(leaf), "Paint": json.dumps(middle)}
    assert types_of(decoder) == [("paint", StructType([StructField("colour", StringType())]))]
    inlined = {**top, "fields": [{"name": "paint", "type": {**middle, "fields": [{"name": "colour", "type": leaf}]}}]}
    payload = frame(3, avro_bytes(inlined, {"paint": {"colour": "GREEN"}}))
    assert decoder.decode([payload]) == ([[{"colour": "GREEN"}]], [None])


# --------------------------------------------------------------------------- Avro

EVERYTHING = {
    "type": "record",
    "name": "Everything",
    "namespace": "test",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "raw", "type": "bytes"},
        {"name": "maybe", "type": ["null", "string"]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "suit", "type": {"type": "enum", "name": "Suit", "symbols": ["HEARTS", "SPADES"]}},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}},
        {"name": "again", "type": ["null", "Inner"]},
        {"name": "either", "type": ["null", "int", "string"]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    ],
}
EVERYTHING_RECORD = {
    "b": True,
    "i": 7,
    "l": 1 << 40,
    "f": 1.5,
    "d": 2.25,
    "s": "text",
    "raw": b"\x00\x01",
    "maybe": None,
    "tags": ["a", "b"],
    "counts": {"k": 3},
    "suit": "SPADES",
    "inner": {"x": 1},
    "again": {"x": 2},
    "either": "two",
    "day": datetime.date(2024, 2, 29),
    "at": datetime.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=datetime.timezone.utc),
    "price": decimal.Decimal("12.34"),
}


def test_avro_fields_become_spark_types_and_arrow_columns():
    decoder = decoder_for([schema_record("t-value", 1, 5, EVERYTHING)], "t-value")
    inner = StructType([StructField("x", IntegerType())])
    assert types_of(decoder) == [
        ("b", BooleanType()),
        ("i", IntegerType()),
        ("l", LongType()),
        ("f", FloatType()),
        ("d", DoubleType()),
        ("s", StringType()),
        ("raw", BinaryType()),
        ("maybe", StringType()),
        ("tags", ArrayType(StringType())),
        ("counts", MapType(StringType(), LongType())),
        ("suit", StringType()),
        ("inner", inner),
        ("again", inner),
        ("either", StructType([StructField("member0", IntegerType()), StructField("member1", StringType())])),
        ("day", DateType()),
        ("at", TimestampType()),
        ("price", DecimalType(9, 2)),
    ]
    outputs, errors = decoder.decode([frame(5, avro_bytes(EVERYTHING, EVERYTHING_RECORD)), None])
    assert errors == [None, None]
    arrays = arrow_arrays(decoder.columns, outputs)
    rows = {column.name: array.to_pylist() for column, array in zip(decoder.columns, arrays)}
    assert rows["either"] == [{"member0": None, "member1": "two"}, None]
    assert rows["counts"] == [[("k", 3)], None]
    assert rows["at"][0] == EVERYTHING_RECORD["at"] and rows["price"][0] == decimal.Decimal("12.34")
    assert {name: values[0] for name, values in rows.items() if name not in ("either", "counts")} == {
        name: value for name, value in EVERYTHING_RECORD.items() if name not in ("either", "counts")
    }
    assert all(values[1] is None for values in rows.values())  # a null value: null columns, not malformed


def test_avro_records_are_resolved_to_the_latest_version():
    decoder = decoder_for([schema_record("u-value", 1, 1, USER_V1), schema_record("u-value", 2, 2, USER_V2)], "u-value")
    assert types_of(decoder) == [("name", StringType()), ("age", IntegerType())]
    old = frame(1, avro_bytes(USER_V1, {"name": "ada"}))
    new = frame(2, avro_bytes(USER_V2, {"name": "bob", "age": 40}))
    assert decoder.decode([old, new]) == ([["ada", "bob"], [-1, 40]], [None, None])  # the reader's default
    # Sent to the tasks without its parsed schemas (which do not pickle), it parses them again there.
    copy = pickle.loads(pickle.dumps(decoder))
    assert copy._decoders == {} and copy.decode([old]) == ([["ada"], [-1]], [None])


def test_malformed_records_are_reported_not_dropped():
    decoder = decoder_for([schema_record("u-value", 1, 1, USER_V2)], "u-value")
    good = frame(1, avro_bytes(USER_V2, {"name": "ada", "age": 1}))
    outputs, errors = decoder.decode([b"plain text", frame(99, b"\x02a"), frame(1, b"\x09"), good])
    assert outputs == [[None, None, None, "ada"], [None, None, None, 1]]
    assert "not framed" in errors[0] and errors[0].startswith("value: ")
    assert "schema id 99 is not registered" in errors[1]
    assert "does not decode as Avro" in errors[2]
    assert errors[3] is None


def test_an_incompatible_writer_is_malformed_and_a_non_record_schema_gives_one_column():
    other = {"type": "record", "name": "Other", "fields": [{"name": "n", "type": "long"}]}
    decoder = decoder_for([schema_record("x", 1, 1, other), schema_record("u-value", 1, 2, USER_V1)], "u-value")
    _outputs, errors = decoder.decode([frame(1, avro_bytes(other, {"n": 1}))])
    assert "schema id 1" in errors[0]
    keys = decoder_for([schema_record("t-key", 1, 3, {"type": "string"})], "t-key", side="key", prefix="key_")
    assert types_of(keys) == [("decodedKey", StringType())]
    assert keys.decode([frame(3, avro_bytes("string", "k1"))]) == ([["k1"]], [None])


def test_a_recursive_schema_has_no_columns():
    linked = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    decoder = decoder_for([schema_record("l-value", 1, 1, linked)], "l-value")
    with pytest.raises(ColumnsUnavailable, match="contains itself"):
        decoder.columns


# --------------------------------------------------------------------------- JSON Schema

ORDER_JSON = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "price": {"type": "number"},
        "note": {"type": ["string", "null"]},
        "paid": {"type": "boolean"},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}},
        "attributes": {"type": "object", "additionalProperties": {"type": "string"}},
        "anything": {},
    },
    "$defs": {"line": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}},
}


def test_json_schema_properties_become_columns():
    decoder = decoder_for([schema_record("o-value", 1, 4, ORDER_JSON, "JSON")], "o-value", prefix="v_")
    line = StructType([StructField("sku", StringType()), StructField("qty", LongType())])
    assert types_of(decoder) == [
        ("v_id", LongType()),
        ("v_price", DoubleType()),
        ("v_note", StringType()),
        ("v_paid", BooleanType()),
        ("v_lines", ArrayType(line)),
        ("v_attributes", MapType(StringType(), StringType())),
        ("v_anything", StringType()),
    ]
    order = {
        "id": 1, "price": 2, "paid": True, "lines": [{"sku": "a", "qty": 2}], "attributes": {"k": "v"},
        "anything": [1, {"x": None}],
    }  # fmt: skip
    payloads = [frame(4, json.dumps(order).encode()), frame(4, b'{"id": "one"}'), frame(4, b"{nope")]
    outputs, errors = decoder.decode(payloads)
    assert errors[0] is None
    first = [column[0] for column in outputs]
    assert first == [1, 2.0, None, True, [{"sku": "a", "qty": 2}], {"k": "v"}, '[1,{"x":null}]']
    assert "expected an integer" in errors[1] and "is not JSON" in errors[2]
    arrow_arrays(decoder.columns, outputs)  # the types fit Arrow's


def test_json_columns_refuse_a_writer_of_another_format():
    records = [schema_record("s", 1, 1, USER_V1), schema_record("o-value", 1, 2, ORDER_JSON, "JSON")]
    decoder = decoder_for(records, "o-value")
    assert "written with a AVRO schema" in decoder.decode([frame(1, avro_bytes(USER_V1, {"name": "x"}))])[1][0]


# --------------------------------------------------------------------------- Protobuf

PROTO_V1 = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  string customer = 2;
  repeated string items = 3;
  map<string, int32> quantities = 4;
  Status status = 5;
  Address address = 6;
  google.protobuf.Timestamp placed = 7;
  uint64 total_cents = 8;
  optional int32 priority = 9;
  enum Status { NEW = 0; PAID = 1; }
  message Address { string city = 1; }
}
message Other { string x = 1; }
"""
PROTO_V2 = PROTO_V1.replace("uint64 total_cents = 8;", "uint64 total_cents = 8;\n  bool gift = 10;")


def test_protobuf_fields_become_columns_and_older_writers_decode():
    decoder = decoder_for(
        [schema_record("p-value", 1, 1, PROTO_V1, "PROTOBUF"), schema_record("p-value", 2, 2, PROTO_V2, "PROTOBUF")],
        "p-value",
    )
    assert types_of(decoder) == [
        ("id", LongType()),
        ("customer", StringType()),
        ("items", ArrayType(StringType())),
        ("quantities", MapType(StringType(), IntegerType())),
        ("status", StringType()),
        ("address", StructType([StructField("city", StringType())])),
        ("placed", TimestampType()),
        ("total_cents", DecimalType(20, 0)),
        ("gift", BooleanType()),
        ("priority", IntegerType()),
    ]
    v1 = formats.parse_schema("PROTOBUF", PROTO_V1)
    payload = formats.serialize(
        v1,
        {"id": "5", "customer": "ada", "items": ["a"], "quantities": {"a": 2}, "status": "PAID",
         "address": {"city": "Paris"}, "placed": "2024-01-02T03:04:05Z", "totalCents": "18446744073709551615"},
    )  # fmt: skip
    outputs, errors = decoder.decode([frame(1, payload)])
    assert errors == [None]
    assert [column[0] for column in outputs] == [
        5, "ada", ["a"], {"a": 2}, "PAID", {"city": "Paris"},
        datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        decimal.Decimal(18446744073709551615), False, None,
    ]  # fmt: skip
    arrow_arrays(decoder.columns, outputs)
    # Message indexes naming the second message: not the columns' message.
    other = frame(1, b"\x02\x02" + b"\x0a\x01x")
    assert "is a shop.Other message" in decoder.decode([other])[1][0]


# --------------------------------------------------------------------------- the options


def test_options_name_the_subjects_and_refuse_what_they_cannot_do():
    from spark_jobs.datasource import PybrokerReader
    from spark_jobs.export import registry_options

    reader = PybrokerReader({"path": "logs", "subscribe": "users", "valueformat": "registry", "keyformat": "REGISTRY"})
    assert [(s.side, s.subject, s.prefix) for s in reader.registry_sides] == [
        ("key", "users-key", "key_"),
        ("value", "users-value", ""),
    ]
    assert not reader.permissive and reader.corrupt_column == "_corrupt_record"
    with pytest.raises(ValueError, match="valueSubject"):
        PybrokerReader({"path": "logs", "subscribepattern": "u.*", "valueformat": "registry"})
    with pytest.raises(ValueError, match="never dropped"):
        PybrokerReader({"path": "logs", "subscribe": "users", "valueformat": "registry", "mode": "DROPMALFORMED"})
    with pytest.raises(ValueError, match="valueFormat must be one of binary, registry"):
        PybrokerReader({"path": "logs", "subscribe": "users", "valueformat": "avro"})

    # A value field named like a Kafka column: refused, a prefix settles it.
    record = {"type": "record", "name": "R", "fields": [{"name": "offset", "type": "long"}]}
    clash = [schema_record("t-value", 1, 1, record)]
    options = {"path": "logs", "subscribe": "t", "valueformat": "registry", "mode": "permissive"}
    with pytest.raises(ValueError, match="offset"):
        PybrokerReader(options, [decoder_for(clash, "t-value")]).output_schema()
    prefixed = PybrokerReader({**options, "valuefieldsprefix": "v_"}, [decoder_for(clash, "t-value", prefix="v_")])
    assert prefixed.output_schema().fieldNames()[-2:] == ["v_offset", "_corrupt_record"]

    args = type("Args", (), {"value_format": "registry", "value_subject": None, "key_format": "binary",
                             "key_subject": "k", "decode_mode": "PERMISSIVE"})()  # fmt: skip
    assert registry_options(args) == {"valueFormat": "registry", "mode": "PERMISSIVE"}
