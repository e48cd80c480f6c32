"""Spark column types of Avro and JSON Schema reader schemas, and decoders of framed payloads.

Part of :mod:`spark_jobs.registry_decoder`, whose docstring states the rules
(Protobuf's part is :mod:`spark_jobs.registry_protobuf`). Each format gives
``*_reader(reader) -> (Spark type, convert)``, where ``convert`` turns a
decoded value into what pyarrow takes for that type (None: as it is), and
``*_decoder(reader, writer) -> decode(payload)``, raising :class:`DecodeFailure`
for a payload that is malformed.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
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
    TimestampNTZType,
    TimestampType,
)

from protocol.schema_formats.parsed_schema import ParsedSchema
from spark_jobs.schema_registry import RegisteredSchema

MAX_SPARK_DECIMAL_PRECISION = 38
MAX_JSON_REF_DEPTH = 32

Convert = Callable[[object], object]  # a decoded value -> what pyarrow takes for the column's type


class DecodeFailure(ValueError):
    """One key or value that cannot be decoded (a malformed record)."""


class ColumnsUnavailable(ValueError):
    """A reader schema that gives no Spark columns (recursive, unreadable)."""


@dataclass(frozen=True)
class Column:
    name: str  # the column's name (with the prefix)
    field: str | None  # the top-level field it holds; None: the whole decoded key or value
    data_type: DataType


# --------------------------------------------------------------------------- Avro

_AVRO_PRIMITIVES = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}


def _micros_of_day(value: datetime.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def _struct_convert(names: list[str], converts: list[Convert | None]) -> Convert | None:
    if all(convert is None for convert in converts):
        return None
    pairs = list(zip(names, converts))

    def convert(record):
        if record is None:
            return None
        return {name: (record.get(name) if c is None else c(record.get(name))) for name, c in pairs}

    return convert


def _list_convert(item: Convert | None) -> Convert | None:
    if item is None:
        return None
    return lambda items: None if items is None else [item(x) for x in items]


def _map_convert(value: Convert | None) -> Convert | None:
    if value is None:
        return None
    return lambda entries: None if entries is None else {k: value(v) for k, v in entries.items()}


def _fits(value, data_type: DataType) -> bool:
    """Whether a decoded union value belongs to the branch of this Spark type."""
    if isinstance(data_type, BooleanType):
        return isinstance(value, bool)
    if isinstance(data_type, (IntegerType, LongType)):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(data_type, (FloatType, DoubleType)):
        return isinstance(value, float)
    if isinstance(data_type, StringType):
        return isinstance(value, str)
    if isinstance(data_type, BinaryType):
        return isinstance(value, (bytes, bytearray))
    if isinstance(data_type, (StructType, MapType)):
        return isinstance(value, dict)
    if isinstance(data_type, ArrayType):
        return isinstance(value, list)
    if isinstance(data_type, (TimestampType, TimestampNTZType)):
        return isinstance(value, datetime.datetime)
    if isinstance(data_type, DateType):
        return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
    if isinstance(data_type, DecimalType):
        return isinstance(value, decimal.Decimal)
    return False


def _avro_type(schema, named: dict, open_records: list[str]) -> tuple[DataType, Convert | None]:
    """The Spark type of a fastavro-parsed schema, and how decoded values become Arrow's."""
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema], None
        if schema == "null":
            return StringType(), None  # always null
        if schema in open_records:
            raise ColumnsUnavailable(f"the Avro record {schema} contains itself: Spark has no type for it")
        return _avro_type(named[schema], named, open_records)
    if isinstance(schema, list):
        return _avro_union(schema, named, open_records)
    kind = schema["type"]
    if isinstance(kind, (dict, list)):
        return _avro_type(kind, named, open_records)
    if kind in ("record", "error", "enum", "fixed"):
        named[schema["name"]] = schema
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = schema.get("precision", 0), schema.get("scale", 0)
        if 0 < precision <= MAX_SPARK_DECIMAL_PRECISION:
            return DecimalType(precision, scale), None
        return StringType(), lambda v: None if v is None else str(v)
    if logical == "date" and kind == "int":
        return DateType(), None
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return TimestampType(), None
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return TimestampNTZType(), None
    if logical == "uuid" and kind == "string":
        return StringType(), lambda v: None if v is None else str(v)
    if logical == "time-millis" and kind == "int":
        return IntegerType(), lambda v: v if not isinstance(v, datetime.time) else _micros_of_day(v) // 1000
    if logical == "time-micros" and kind == "long":
        return LongType(), lambda v: v if not isinstance(v, datetime.time) else _micros_of_day(v)
    if kind in ("record", "error"):
        open_records.append(schema["name"])
        try:
            fields, converts = [], []
            for field in schema["fields"]:
                data_type, convert = _avro_type(field["type"], named, open_records)
                fields.append(StructField(field["name"], data_type, True))
                converts.append(convert)
        finally:
            open_records.pop()
        return StructType(fields), _struct_convert([f.name for f in fields], converts)
    if kind == "enum":
        return StringType(), None
    if kind == "fixed":
        return BinaryType(), None
    if kind == "array":
        item, convert = _avro_type(schema["items"], named, open_records)
        return ArrayType(item, True), _list_convert(convert)
    if kind == "map":
        value, convert = _avro_type(schema["values"], named, open_records)
        return MapType(StringType(), value, True), _map_convert(convert)
    return _avro_type(kind, named, open_records)


def _avro_union(branches: list, named: dict, open_records: list[str]) -> tuple[DataType, Convert | None]:
    real = [b for b in branches if b != "null" and not (isinstance(b, dict) and b.get("type") == "null")]
    if not real:
        return StringType(), None
    if len(real) == 1:
        return _avro_type(real[0], named, open_records)
    simple = {b if isinstance(b, str) else None for b in real}
    # Spark's from_avro widens these two unions to one type.
    if simple == {"int", "long"}:
        return LongType(), None
    if simple == {"float", "double"}:
        return DoubleType(), None
    members = [_avro_type(b, named, open_records) for b in real]
    names = [f"member{i}" for i in range(len(members))]
    data_type = StructType([StructField(n, t, True) for n, (t, _c) in zip(names, members)])

    def convert(value):
        if value is None:
            return None
        for name, (member_type, member_convert) in zip(names, members):
            if _fits(value, member_type):
                return {name: value if member_convert is None else member_convert(value)}
        return {names[0]: None}

    return data_type, convert


def avro_reader(reader: ParsedSchema):
    root = reader.handle.reader_schema
    data_type, convert = _avro_type(root, {}, [])
    return data_type, convert


def avro_decoder(reader: ParsedSchema, writer: ParsedSchema) -> Callable[[bytes], object]:
    import fastavro
    import fastavro._read_py as fastavro_python_reader

    if writer.schema_type != "AVRO":
        raise DecodeFailure(f"written with a {writer.schema_type} schema, the columns are Avro")
    writer_schema = writer.handle.reader_schema
    reader_schema = None if writer.canonical == reader.canonical else reader.handle.reader_schema
    # fastavro's compiled reader recurses without bound on a recursive writer schema's data.
    read = fastavro_python_reader.schemaless_reader if writer.handle.recursive else fastavro.schemaless_reader

    def decode(payload: bytes):
        try:
            return read(io.BytesIO(payload), writer_schema, reader_schema)
        except Exception as error:  # truncated data, bad unions, a resolution fastavro refuses
            raise DecodeFailure(f"does not decode as Avro: {type(error).__name__}: {error}") from None

    return decode


# --------------------------------------------------------------------------- JSON Schema


def _json_text(value):
    return None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json_checked(kind: str, accepts: Callable[[object], bool], cast: Callable = lambda v: v) -> Convert:
    def convert(value):
        if value is None:
            return None
        if not accepts(value):
            raise DecodeFailure(f"expected {kind}, got {json.dumps(value)[:80]}")
        return cast(value)

    return convert


def _is_integer(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return isinstance(value, int) and -(1 << 63) <= value < (1 << 63)  # a Spark long


_JSON_SCALARS = {
    "integer": (LongType(), _json_checked("an integer", _is_integer, int)),
    "number": (
        DoubleType(),
        _json_checked("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), float),
    ),
    "string": (StringType(), _json_checked("a string", lambda v: isinstance(v, str))),
    "boolean": (BooleanType(), _json_checked("a boolean", lambda v: isinstance(v, bool))),
}


def _json_type(schema, resolver, depth: int) -> tuple[DataType, Convert]:
    if not isinstance(schema, dict) or depth > MAX_JSON_REF_DEPTH:
        return StringType(), _json_text
    if isinstance(schema.get("$ref"), str):
        try:
            resolved = resolver.lookup(schema["$ref"])
        except Exception:  # referencing's Unresolvable: the registry checked, but a reader may not
            return StringType(), _json_text
        merged = {**{k: v for k, v in schema.items() if k != "$ref"}, **resolved.contents} if isinstance(
            resolved.contents, dict
        ) else resolved.contents
        return _json_type(merged, resolved.resolver, depth + 1)
    declared = schema.get("type")
    kinds = [declared] if isinstance(declared, str) else list(declared) if isinstance(declared, list) else []
    kinds = [kind for kind in kinds if kind != "null"]
    if len(kinds) != 1 or any(key in schema for key in ("oneOf", "anyOf", "allOf", "not", "if")):
        return StringType(), _json_text
    kind = kinds[0]
    if kind in _JSON_SCALARS:
        return _JSON_SCALARS[kind]
    if kind == "array":
        if not isinstance(schema.get("items"), dict):
            return StringType(), _json_text
        item, item_convert = _json_type(schema["items"], resolver, depth + 1)

        def convert_array(value):
            if value is None:
                return None
            if not isinstance(value, list):
                raise DecodeFailure(f"expected an array, got {json.dumps(value)[:80]}")
            return [item_convert(x) for x in value]

        return ArrayType(item, True), convert_array
    if kind == "object":
        properties = schema.get("properties")
        if isinstance(properties, dict) and properties:
            fields, converts = [], []
            for name, subschema in properties.items():
                data_type, convert = _json_type(subschema, resolver, depth + 1)
                fields.append(StructField(name, data_type, True))
                converts.append(convert)
            pairs = list(zip(properties, converts))

            def convert_object(value):
                if value is None:
                    return None
                if not isinstance(value, dict):
                    raise DecodeFailure(f"expected an object, got {json.dumps(value)[:80]}")
                return {name: c(value.get(name)) for name, c in pairs}

            return StructType(fields), convert_object
        if isinstance(schema.get("additionalProperties"), dict):
            value_type, value_convert = _json_type(schema["additionalProperties"], resolver, depth + 1)

            def convert_map(value):
                if value is None:
                    return None
                if not isinstance(value, dict):
                    raise DecodeFailure(f"expected an object, got {json.dumps(value)[:80]}")
                return {k: value_convert(v) for k, v in value.items()}

            return MapType(StringType(), value_type, True), convert_map
    return StringType(), _json_text


def json_reader(reader: ParsedSchema):
    return _json_type(reader.handle.document, reader.handle.resolver, 0)


def json_decoder(reader: ParsedSchema, writer: RegisteredSchema) -> Callable[[bytes], object]:
    if writer.schema_type != "JSON":
        raise DecodeFailure(f"written with a {writer.schema_type} schema, the columns are JSON Schema's")

    def decode(payload: bytes):
        try:
            return json.loads(payload)
        except (ValueError, RecursionError) as error:  # ValueError includes invalid UTF-8
            raise DecodeFailure(f"is not JSON: {error}") from None

    return decode


__all__ = [
    "Column",
    "ColumnsUnavailable",
    "Convert",
    "DecodeFailure",
    "avro_decoder",
    "avro_reader",
    "json_decoder",
    "json_reader",
]
