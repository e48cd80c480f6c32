"""Avro schemas: parsing by fastavro, reader/writer compatibility as Avro's specification resolves schemas.

Parsing (names, namespaces, defaults that must match their field's type)
is fastavro's ``parse_schema``; referenced schemas are parsed first into the
same ``named_schemas`` so the schema can name their types.

Texts of a schema:

- ``canonical``: the JSON as written, without insignificant whitespace. Two
  registrations that differ in layout share it; a changed default, doc or alias
  does not (Confluent's registry also compares the full schema text, not the
  Parsing Canonical Form, so that adding a default is a new version).
- ``normalized``: every name fully qualified (``namespace`` folded into the
  name), attributes in one order, custom properties sorted.
- ``AvroHandle.parsing_canonical_form``: the specification's Parsing Canonical
  Form (references inlined at their first use), for fingerprints.

Compatibility (``reader_errors``) follows the specification's "Schema
Resolution": a reader can read a writer's data when

- both are the same primitive, or the writer's is promoted: int to
  long/float/double, long to float/double, float to double, string to bytes
  and bytes to string (logical types are resolved on their underlying type);
- records: names match (the writer's full name is the reader's, or one of
  the reader's aliases); each reader field is found in the writer by its
  name or one of its aliases and resolves, or has a default;
- enums: names match; every writer symbol is a reader symbol unless the
  reader has a default symbol;
- fixed: names match and sizes are equal;
- arrays (items) and maps (values) resolve;
- a writer union: every branch resolves against the reader; a reader union
  (writer not a union): some branch resolves the writer.

Messages name the rule (Confluent's names where it has one), the path in the
reader schema and what differs.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import fastavro
import fastavro._read_py as fastavro_python_reader
from fastavro.schema import SchemaParseException, to_parsing_canonical_form
from fastavro.schema import parse_schema as fastavro_parse_schema

from protocol.schema_formats.parsed_schema import ParsedSchema, SchemaInvalid, SerializationError

PRIMITIVE_TYPES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
NAMED_TYPES = ("record", "error", "enum", "fixed")

# Writer type -> the reader types its values are promoted to (specification, "Schema Resolution").
PROMOTIONS = {
    "int": ("long", "float", "double"),
    "long": ("float", "double"),
    "float": ("double",),
    "string": ("bytes",),
    "bytes": ("string",),
}

# Attribute order of the normalized rendering; attributes not listed follow, sorted.
_ATTRIBUTE_ORDER = (
    "type",
    "name",
    "doc",
    "aliases",
    "fields",
    "symbols",
    "items",
    "values",
    "size",
    "logicalType",
    "precision",
    "scale",
    "default",
    "order",
)


# What fastavro raises for a schema it cannot read: its own SchemaParseException and UnknownType
# (a ValueError), and KeyError/TypeError for missing or mistyped attributes.
_PARSE_ERRORS = (SchemaParseException, ValueError, KeyError, TypeError, AttributeError, RecursionError)
# What decoding a payload raises: truncated data (EOFError), a union or enum index out of range
# (IndexError), invalid UTF-8 (a ValueError), lengths beyond the data.
_DECODE_ERRORS = (EOFError, IndexError, ValueError, KeyError, TypeError, OverflowError, MemoryError, RecursionError)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class AvroHandle:
    """fastavro's parsed schema, every named type it can name (its own and its references'),
    a self-contained copy for decoding, and the Parsing Canonical Form."""

    parsed: object
    named: Mapping[str, dict]
    reader_schema: object
    parsing_canonical_form: str
    recursive: bool = False


def parse(text: str, references: Mapping[str, str]) -> ParsedSchema:
    named: dict[str, dict] = {}
    _parse_references(references, named)
    document = _load_json(text, "schema")
    try:
        parsed = fastavro_parse_schema(document, named_schemas=named, _write_hint=False)
    except _PARSE_ERRORS as error:
        raise SchemaInvalid(f"Invalid Avro schema: {error}") from error
    _check_fields_present(document)
    _check_specification(parsed, named, set())
    standalone = _inline_references(parsed, named, set())
    try:
        reader_schema = fastavro_parse_schema(standalone)
        parsing_canonical_form = to_parsing_canonical_form(standalone)
    except _PARSE_ERRORS as error:
        raise SchemaInvalid(f"Invalid Avro schema: {error}") from error
    return ParsedSchema(
        schema_type="AVRO",
        text=text,
        canonical=json.dumps(document, separators=(",", ":"), ensure_ascii=False),
        normalized=json.dumps(_normalize(parsed), separators=(",", ":"), ensure_ascii=False),
        handle=AvroHandle(parsed, named, reader_schema, parsing_canonical_form, _is_recursive(parsed, named, [])),
    )


def reader_errors(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    checker = _ResolutionChecker(reader.handle.named, writer.handle.named)
    checker.check(writer.handle.parsed, reader.handle.parsed, "")
    return checker.errors


def payload_error(schema: ParsedSchema, payload: bytes) -> str | None:
    return payload_checker(schema)(payload)


def payload_checker(schema: ParsedSchema) -> Callable[[bytes], str | None]:
    """payload -> why it does not decode as ``schema`` (None when it does), the
    reader and its parsed schema chosen once for many payloads."""
    # fastavro's compiled reader recurses on the C stack without a bound: a payload nesting a
    # recursive type some thousand levels deep crashes the process. Recursive schemas are read
    # by fastavro's pure-Python reader instead, which stops at Python's recursion limit.
    read = fastavro_python_reader.schemaless_reader if schema.handle.recursive else fastavro.schemaless_reader
    reader_schema = schema.handle.reader_schema
    new_stream = io.BytesIO  # over bytes it shares their buffer: no copy of the payload
    decode_errors = _DECODE_ERRORS

    def check(payload: bytes) -> str | None:
        stream = new_stream(payload)
        try:
            read(stream, reader_schema)
        except decode_errors as error:  # RecursionError too: the pure-Python reader's bound
            return f"the payload does not decode as the Avro schema: {type(error).__name__}: {error}"
        # The reader stops where the schema ends: bytes after that are no part of a valid payload.
        decoded_bytes = stream.tell()
        if decoded_bytes != len(payload):
            return f"the Avro schema decodes {decoded_bytes} of the payload's {len(payload)} bytes"
        return None

    return check


def _load_json(text: str, what: str):
    try:
        return json.loads(text)
    except ValueError as error:
        raise SchemaInvalid(f"Invalid Avro {what}: not JSON: {error}") from error
    except RecursionError as error:
        raise SchemaInvalid(f"Invalid Avro {what}: nested too deeply") from error


def _parse_references(references: Mapping[str, str], named: dict[str, dict]) -> None:
    # A reference may name types of another reference listed after it: parse in passes,
    # each one taking the references whose names are known by now.
    pending = dict(references)
    while pending:
        progressed = False
        last_error: Exception | None = None
        for name, text in list(pending.items()):
            document = _load_json(text, f"reference {name!r}")
            attempt = dict(named)
            try:
                fastavro_parse_schema(document, named_schemas=attempt, _write_hint=False)
            except _PARSE_ERRORS as error:
                last_error = error
                continue
            named.update(attempt)
            del pending[name]
            progressed = True
        if not progressed:
            raise SchemaInvalid(f"Invalid Avro reference(s) {sorted(pending)}: {last_error}")


def _is_recursive(schema, named: Mapping[str, dict], open_names: list[str], acyclic: set[str] | None = None) -> bool:
    """Whether a named type of ``schema`` contains itself. ``acyclic``: names already found not to
    (each named type is walked once, so a type used many times costs no more)."""
    acyclic = set() if acyclic is None else acyclic
    if isinstance(schema, str):
        if schema in open_names:
            return True
        if schema in acyclic or schema not in named:
            return False
        return _is_recursive(named[schema], named, open_names, acyclic)
    if isinstance(schema, list):
        return any(_is_recursive(branch, named, open_names, acyclic) for branch in schema)
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if not isinstance(kind, str):
        return _is_recursive(kind, named, open_names, acyclic)
    if kind in ("record", "error"):
        if schema["name"] in acyclic:
            return False
        open_names.append(schema["name"])
        try:
            found = any(_is_recursive(field["type"], named, open_names, acyclic) for field in schema["fields"])
        finally:
            open_names.pop()
        if not found:
            acyclic.add(schema["name"])
        return found
    if kind == "array":
        return _is_recursive(schema["items"], named, open_names, acyclic)
    if kind == "map":
        return _is_recursive(schema["values"], named, open_names, acyclic)
    return kind not in PRIMITIVE_TYPES and kind not in NAMED_TYPES and _is_recursive(kind, named, open_names, acyclic)


def _check_fields_present(schema) -> None:
    # fastavro reads a record without "fields" as one with none; the specification requires them.
    # Only schema positions are walked (a default value may be any JSON).
    if isinstance(schema, list):
        for branch in schema:
            _check_fields_present(branch)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "error"):
            if "fields" not in schema:
                raise SchemaInvalid(f"Invalid Avro schema: record {schema.get('name')!r} has no fields attribute")
            for field in schema["fields"] if isinstance(schema["fields"], list) else ():
                if isinstance(field, dict):
                    _check_fields_present(field.get("type"))
        for key in ("type", "items", "values"):
            if isinstance(schema.get(key), (dict, list)):
                _check_fields_present(schema[key])


def _check_specification(schema, named: Mapping[str, dict], checked: set[str]) -> None:
    """What the specification requires and fastavro lets through: records with a list of uniquely
    named fields, valid names, an enum default among the symbols, a fixed size that is a count,
    unions without nested unions or two branches of one unnamed type."""
    if isinstance(schema, list):
        kinds = []
        for branch in schema:
            if isinstance(branch, list):
                raise SchemaInvalid("Invalid Avro schema: a union directly inside a union")
            resolved = named.get(branch, branch) if isinstance(branch, str) else branch
            kind = _type_name(resolved)
            key = resolved["name"] if kind in NAMED_TYPES else kind
            if key in kinds:
                raise SchemaInvalid(f"Invalid Avro schema: the union {schema} holds {key} twice")
            kinds.append(key)
            _check_specification(branch, named, checked)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if isinstance(kind, (dict, list)):
        _check_specification(kind, named, checked)
        return
    if kind in NAMED_TYPES:
        if schema["name"] in checked:
            return
        checked.add(schema["name"])
        if not all(_NAME.fullmatch(part) for part in schema["name"].split(".")):
            raise SchemaInvalid(f"Invalid Avro schema: {schema['name']!r} is not a valid name")
    if kind in ("record", "error"):
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise SchemaInvalid(f"Invalid Avro schema: record {schema['name']} has no list of fields")
        names = [field["name"] for field in fields]
        for name in names:
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise SchemaInvalid(f"Invalid Avro schema: field name {name!r} of {schema['name']} is not valid")
        if len(set(names)) != len(names):
            raise SchemaInvalid(f"Invalid Avro schema: record {schema['name']} names a field twice")
        for field in fields:
            _check_specification(field["type"], named, checked)
    elif kind == "enum":
        if "default" in schema and schema["default"] not in schema["symbols"]:
            raise SchemaInvalid(f"Invalid Avro schema: enum {schema['name']}'s default is not one of its symbols")
    elif kind == "fixed":
        size = schema.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise SchemaInvalid(f"Invalid Avro schema: fixed {schema['name']} has size {size!r}")
    elif kind == "array":
        _check_specification(schema["items"], named, checked)
    elif kind == "map":
        _check_specification(schema["values"], named, checked)


def _inline_references(schema, named: Mapping[str, dict], defined: set[str]):
    """``schema`` with each named type's definition at its first use (a self-contained schema)."""
    if isinstance(schema, str):
        if schema in PRIMITIVE_TYPES or schema in defined or schema not in named:
            return schema
        return _inline_references(named[schema], named, defined)
    if isinstance(schema, list):
        return [_inline_references(branch, named, defined) for branch in schema]
    schema_type = schema.get("type")
    copy = dict(schema)
    if schema_type in NAMED_TYPES:
        if schema["name"] in defined:
            return schema["name"]
        defined.add(schema["name"])
    if schema_type in ("record", "error"):
        copy["fields"] = [
            {**field, "type": _inline_references(field["type"], named, defined)} for field in schema["fields"]
        ]
    elif schema_type == "array":
        copy["items"] = _inline_references(schema["items"], named, defined)
    elif schema_type == "map":
        copy["values"] = _inline_references(schema["values"], named, defined)
    return copy


def _normalize(schema):
    if isinstance(schema, list):
        return [_normalize(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("type") in PRIMITIVE_TYPES and set(schema) == {"type"}:
        return schema["type"]
    namespace = schema["name"].rpartition(".")[0] if schema.get("type") in NAMED_TYPES else ""
    rendered = {}
    for key in [*[k for k in _ATTRIBUTE_ORDER if k in schema], *sorted(k for k in schema if k not in _ATTRIBUTE_ORDER)]:
        if key.startswith("__fastavro"):
            continue
        value = schema[key]
        if key == "fields":
            value = [_normalize_field(field) for field in value]
        elif key in ("items", "values"):
            value = _normalize(value)
        elif key == "aliases":
            value = [_full_name(alias, namespace) for alias in value]
        elif key == "type" and not isinstance(value, str):
            value = _normalize(value)
        rendered[key] = value
    return rendered


def _normalize_field(field: dict) -> dict:
    rendered = {"name": field["name"], "type": _normalize(field["type"])}
    for key in ("doc", "aliases", "default", "order"):
        if key in field:
            rendered[key] = field[key]
    for key in sorted(k for k in field if k not in rendered):
        rendered[key] = field[key]
    return rendered


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _type_name(schema) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return schema["type"] if isinstance(schema["type"], str) else _type_name(schema["type"])
    return schema


def _describe(schema) -> str:
    if isinstance(schema, dict) and schema.get("type") in NAMED_TYPES:
        return f"{schema['type']} {schema['name']}"
    if isinstance(schema, list):
        return "union [" + ", ".join(_describe(branch) for branch in schema) + "]"
    return _type_name(schema)


class _ResolutionChecker:
    """Walks a writer schema and a reader schema together, collecting why the reader cannot read."""

    def __init__(self, reader_named: Mapping[str, dict], writer_named: Mapping[str, dict]) -> None:
        self.reader_named = reader_named
        self.writer_named = writer_named
        self.errors: list[str] = []
        # Record pairs being (or already) compared: recursive types compare once.
        self._visited: set[tuple[str, str]] = set()

    def check(self, writer, reader, path: str) -> None:
        self.errors.extend(self._errors(writer, reader, path))

    def _resolve(self, schema, named: Mapping[str, dict]):
        if isinstance(schema, str) and schema not in PRIMITIVE_TYPES:
            return named.get(schema, schema)
        if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
            return self._resolve(schema["type"], named)
        if isinstance(schema, dict) and schema.get("type") not in (*NAMED_TYPES, "array", "map"):
            if isinstance(schema.get("type"), str) and schema["type"] not in PRIMITIVE_TYPES:
                return named.get(schema["type"], schema["type"])
            return schema["type"]  # a primitive with a logical type or other properties
        return schema

    def _errors(self, writer, reader, path: str) -> list[str]:
        writer = self._resolve(writer, self.writer_named)
        reader = self._resolve(reader, self.reader_named)
        writer_type, reader_type = _type_name(writer), _type_name(reader)
        if writer_type == "union":
            errors = []
            for index, branch in enumerate(writer):
                errors.extend(self._errors(branch, reader, path))
            return errors
        if reader_type == "union":
            for branch in reader:
                if not self._errors(writer, branch, path):
                    return []
            return [
                (
                    f"MISSING_UNION_BRANCH at '{path or '/'}': the reader's {_describe(reader)} "
                    f"has no branch that reads the writer's {_describe(writer)}"
                )
            ]
        if writer_type in PRIMITIVE_TYPES or reader_type in PRIMITIVE_TYPES:
            if writer_type == reader_type or reader_type in PROMOTIONS.get(writer_type, ()):
                return []
            return [self._type_mismatch(writer, reader, path)]
        if writer_type != reader_type and not {writer_type, reader_type} <= {"record", "error"}:
            return [self._type_mismatch(writer, reader, path)]
        if writer_type in ("record", "error"):
            return self._record_errors(writer, reader, path)
        if writer_type == "enum":
            return self._enum_errors(writer, reader, path)
        if writer_type == "fixed":
            errors = self._name_errors(writer, reader, path)
            if writer["size"] != reader["size"]:
                errors.append(
                    f"FIXED_SIZE_MISMATCH at '{path or '/'}': the reader's fixed {reader['name']} has size "
                    f"{reader['size']}, the writer's {writer['size']}"
                )
            return errors
        if writer_type == "array":
            return self._errors(writer["items"], reader["items"], f"{path}/items")
        if writer_type == "map":
            return self._errors(writer["values"], reader["values"], f"{path}/values")
        return [self._type_mismatch(writer, reader, path)]

    @staticmethod
    def _type_mismatch(writer, reader, path: str) -> str:
        return (
            f"TYPE_MISMATCH at '{path or '/'}': the reader's {_describe(reader)} cannot read "
            f"the writer's {_describe(writer)}"
        )

    @staticmethod
    def _name_errors(writer: dict, reader: dict, path: str) -> list[str]:
        namespace = reader["name"].rpartition(".")[0]
        accepted = {reader["name"], *(_full_name(alias, namespace) for alias in reader.get("aliases", ()))}
        if writer["name"] in accepted:
            return []
        return [
            (
                f"NAME_MISMATCH at '{path or '/'}': the reader's {reader['type']} {reader['name']} "
                f"does not match the writer's {writer['name']} (by name or alias)"
            )
        ]

    def _record_errors(self, writer: dict, reader: dict, path: str) -> list[str]:
        errors = self._name_errors(writer, reader, path)
        if errors:
            return errors
        pair = (writer["name"], reader["name"])
        if pair in self._visited:
            return []
        self._visited.add(pair)
        writer_fields = {field["name"]: field for field in writer["fields"]}
        for index, field in enumerate(reader["fields"]):
            field_path = f"{path}/fields/{index}"
            found = next(
                (writer_fields[name] for name in (field["name"], *field.get("aliases", ())) if name in writer_fields),
                None,
            )
            if found is not None:
                errors.extend(self._errors(found["type"], field["type"], field_path))
            elif "default" not in field:
                errors.append(
                    f"READER_FIELD_MISSING_DEFAULT_VALUE at '{field_path}': the reader's field "
                    f"'{field['name']}' of {reader['name']} has no default and the writer has no such field"
                )
        return errors

    def _enum_errors(self, writer: dict, reader: dict, path: str) -> list[str]:
        errors = self._name_errors(writer, reader, path)
        if errors or "default" in reader:
            return errors
        missing = [symbol for symbol in writer["symbols"] if symbol not in reader["symbols"]]
        if missing:
            errors.append(
                f"MISSING_ENUM_SYMBOLS at '{path or '/'}': the reader's enum {reader['name']} lacks the "
                f"writer's symbols {missing} and has no default"
            )
        return errors


def record_name(schema: ParsedSchema, payload: bytes) -> str | None:
    """The full name of a named type (record, enum, fixed); None for a primitive, array, map or union."""
    parsed = schema.handle.parsed
    if isinstance(parsed, dict) and parsed.get("type") in ("record", "error", "enum", "fixed"):
        name = parsed.get("name")
        return name if isinstance(name, str) else None
    return None


def serialize(schema: ParsedSchema, data) -> bytes:
    """``data`` (Avro's JSON-like Python value) as Avro binary; SerializationError when it does not fit."""
    stream = io.BytesIO()
    try:
        fastavro.schemaless_writer(stream, schema.handle.reader_schema, data)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as error:
        raise SerializationError(f"the data does not fit the Avro schema: {type(error).__name__}: {error}") from error
    return stream.getvalue()
