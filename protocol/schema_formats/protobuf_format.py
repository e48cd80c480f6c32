"""Protobuf schemas: ``.proto`` text parsed by proto-schema-parser, checked and decoded by protobuf's descriptor pool.

Why proto-schema-parser rather than protoc (grpcio-tools): it is a small
pure-Python parser (an ANTLR grammar of the protobuf language) that parses a
text in memory, while protoc works on files on disk and brings a native
compiler and gRPC into the broker. The parse is made strict (any syntax error
refuses the schema), and the type checking protoc would do is done by
protobuf's own ``DescriptorPool``: the parse is turned into a
``FileDescriptorProto`` (names resolved by protobuf's scoping rules, maps as
map-entry messages, proto3 ``optional`` as synthetic oneofs) and added to a
fresh pool, which refuses duplicate numbers, unknown types and the like. The
same descriptors decode payloads (``message_factory``).

Imports are the schema's references, by import name; ``google/protobuf/*.proto``
(the well-known types) come from the protobuf runtime. Not supported (refused):
proto2 groups and editions. Extensions and services are kept in the texts but
left out of the descriptors (they carry no message data).

``canonical`` is the schema rendered again by the parser's generator, without
comments (layout and comments do not make a new schema); ``normalized`` also
writes every message and enum type by its full name (``.pkg.Outer.Inner``).

Compatibility (``reader_errors``) is Confluent's Protobuf diff, in
:mod:`protocol.schema_formats.protobuf_compatibility`, which lists its rules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from antlr4.error.ErrorListener import ErrorListener
from google.protobuf import (
    any_pb2,
    api_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    json_format,
    message_factory,
    source_context_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)
from google.protobuf.message import DecodeError
from proto_schema_parser import ast
from proto_schema_parser.generator import Generator
from proto_schema_parser.parser import Parser

from protocol.schema_formats import protobuf_compatibility
from protocol.schema_formats.parsed_schema import ParsedSchema, SchemaInvalid, SerializationError

FieldProto = descriptor_pb2.FieldDescriptorProto

SCALAR_TYPES = {
    "double": FieldProto.TYPE_DOUBLE,
    "float": FieldProto.TYPE_FLOAT,
    "int64": FieldProto.TYPE_INT64,
    "uint64": FieldProto.TYPE_UINT64,
    "int32": FieldProto.TYPE_INT32,
    "fixed64": FieldProto.TYPE_FIXED64,
    "fixed32": FieldProto.TYPE_FIXED32,
    "bool": FieldProto.TYPE_BOOL,
    "string": FieldProto.TYPE_STRING,
    "bytes": FieldProto.TYPE_BYTES,
    "uint32": FieldProto.TYPE_UINT32,
    "sfixed32": FieldProto.TYPE_SFIXED32,
    "sfixed64": FieldProto.TYPE_SFIXED64,
    "sint32": FieldProto.TYPE_SINT32,
    "sint64": FieldProto.TYPE_SINT64,
}

# The well-known types, imported by their file names without a reference.
_WELL_KNOWN_MODULES = (
    any_pb2,
    api_pb2,
    descriptor_pb2,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    source_context_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)
_WELL_KNOWN_FILES = {module.DESCRIPTOR.name: module.DESCRIPTOR for module in _WELL_KNOWN_MODULES}

# The file name the schema itself gets in its descriptor pool (references keep their import names).
ROOT_FILE_NAME = "__schema__.proto"
# Imports nest at most this deep (a guard against reference chains that never end).
MAX_IMPORT_DEPTH = 32


@dataclass(frozen=True)
class ProtobufHandle:
    """The schema's FileDescriptorProto, the pool holding it and its imports, and its file descriptor."""

    file_proto: descriptor_pb2.FileDescriptorProto
    pool: descriptor_pool.DescriptorPool
    file: object


def parse(text: str, references: Mapping[str, str]) -> ParsedSchema:
    file_ast = _parse_text(text, "schema")
    built: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    symbols_by_file: dict[str, dict[str, str]] = {}
    order: list[str] = []
    file_proto = _build_file(ROOT_FILE_NAME, file_ast, references, built, symbols_by_file, order, 0)
    pool = descriptor_pool.DescriptorPool()
    try:
        for name in order:
            pool.Add(built[name])
        file_descriptor = pool.FindFileByName(ROOT_FILE_NAME)
    except Exception as error:  # the pool's checks: duplicate numbers or names, bad types, ...
        raise SchemaInvalid(f"Invalid Protobuf schema: {error}") from error
    symbols = _visible_symbols(ROOT_FILE_NAME, built, symbols_by_file)
    return ParsedSchema(
        schema_type="PROTOBUF",
        text=text,
        canonical=Generator().generate(_without_comments(file_ast)),
        normalized=Generator().generate(_qualified(_without_comments(file_ast), symbols)),
        handle=ProtobufHandle(file_proto, pool, file_descriptor),
    )


def reader_errors(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    return protobuf_compatibility.reader_errors(reader.handle.file_proto, writer.handle.file_proto)


def payload_error(schema: ParsedSchema, payload: bytes) -> str | None:
    try:
        indexes, offset = _message_indexes(payload)
    except ValueError as error:
        return f"the payload's message indexes do not decode: {error}"
    try:
        scope = _message_name(schema.handle.file_proto, indexes)
    except ValueError as error:
        return str(error)
    descriptor = schema.handle.pool.FindMessageTypeByName(scope)
    message = message_factory.GetMessageClass(descriptor)()
    try:
        message.ParseFromString(payload[offset:])
    except (DecodeError, RuntimeError, ValueError) as error:
        return f"the payload does not decode as {descriptor.full_name}: {error}"
    if not message.IsInitialized():  # proto2 required fields; parsing alone does not check them
        missing = ", ".join(message.FindInitializationErrors())
        return f"the payload does not decode as {descriptor.full_name}: required fields missing: {missing}"
    return None


def _message_name(file_proto, indexes: list[int]) -> str:
    """The full name of the message ``indexes`` name, walking the declaration
    order of the FileDescriptorProto (nested map entries included, as in protoc's)."""
    scope = file_proto.package
    messages = list(file_proto.message_type)
    message_proto = None
    for index in indexes:
        if index < 0 or index >= len(messages):
            where = "top-level messages" if message_proto is None else f"messages nested in {scope}"
            raise ValueError(f"the payload's message index {index} is out of range ({len(messages)} {where})")
        message_proto = messages[index]
        scope = f"{scope}.{message_proto.name}" if scope else message_proto.name
        messages = list(message_proto.nested_type)
    return scope


def record_name(schema: ParsedSchema, payload: bytes) -> str | None:
    """The full name of the message the payload's message indexes name; None when they do not decode."""
    try:
        indexes, _ = _message_indexes(payload)
        return _message_name(schema.handle.file_proto, indexes)
    except ValueError:
        return None


def _message_indexes(payload: bytes) -> tuple[list[int], int]:
    """Confluent's message indexes (a zigzag varint count, then that many zigzag varints; a count
    of 0 means [0]) and where the message starts."""
    count, offset = _zigzag_varint(payload, 0)
    if count == 0:
        return [0], offset
    if count < 0 or count > len(payload):
        raise ValueError(f"count {count} does not fit the payload")
    indexes = []
    for _ in range(count):
        index, offset = _zigzag_varint(payload, offset)
        indexes.append(index)
    return indexes, offset


def _zigzag_varint(data: bytes, offset: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 64, 7):
        if offset >= len(data):
            raise ValueError("truncated varint")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), offset
    raise ValueError("varint longer than 10 bytes")


class _RaiseOnSyntaxError(ErrorListener):
    """The parser recovers from syntax errors by default; a schema with one is refused instead."""

    def __init__(self, what: str) -> None:
        self.what = what

    def syntaxError(self, recognizer, offendingSymbol, line, column, msg, e):  # ANTLR's method name
        raise SchemaInvalid(f"Invalid Protobuf {self.what}: line {line}:{column}: {msg}")


def _parse_text(text: str, what: str) -> ast.File:
    listener = _RaiseOnSyntaxError(what)

    def strict(recognizer) -> None:
        recognizer.removeErrorListeners()
        recognizer.addErrorListener(listener)

    try:
        file_ast = Parser(setup_lexer=strict, setup_parser=strict).parse(text)
    except SchemaInvalid:
        raise
    except Exception as error:  # the AST builder's own failures (a bad number, ...)
        raise SchemaInvalid(f"Invalid Protobuf {what}: {error}") from error
    if file_ast.edition is not None:
        raise SchemaInvalid(f"Invalid Protobuf {what}: editions are not supported, only proto2 and proto3")
    if file_ast.syntax not in (None, "proto2", "proto3"):
        raise SchemaInvalid(f"Invalid Protobuf {what}: unknown syntax {file_ast.syntax!r}")
    return file_ast


def _build_file(
    name: str,
    file_ast: ast.File,
    references: Mapping[str, str],
    built: dict[str, descriptor_pb2.FileDescriptorProto],
    symbols_by_file: dict[str, dict[str, str]],
    order: list[str],
    depth: int,
) -> descriptor_pb2.FileDescriptorProto:
    """``file_ast`` as a FileDescriptorProto named ``name``, its imports built first (into ``built``, in ``order``)."""
    if depth > MAX_IMPORT_DEPTH:
        raise SchemaInvalid(f"Invalid Protobuf schema: imports nest deeper than {MAX_IMPORT_DEPTH}")
    built[name] = None  # marks the file as in progress: an import cycle is refused below
    imports = [element for element in file_ast.file_elements if isinstance(element, ast.Import)]
    for imported in imports:
        if imported.name in built:
            if built[imported.name] is None:
                raise SchemaInvalid(f"Invalid Protobuf schema: import cycle through {imported.name!r}")
            continue
        if imported.name in references:
            imported_ast = _parse_text(references[imported.name], f"reference {imported.name!r}")
            _build_file(imported.name, imported_ast, references, built, symbols_by_file, order, depth + 1)
        elif imported.name in _WELL_KNOWN_FILES:
            _add_well_known(imported.name, built, symbols_by_file, order)
        else:
            raise SchemaInvalid(f"Invalid Protobuf schema: import {imported.name!r} is not among the references")
    package = next((element.name for element in file_ast.file_elements if isinstance(element, ast.Package)), "")
    symbols_by_file[name] = _declared_symbols(file_ast, package)
    builder = _FileBuilder(package, _visible_symbols(name, built, symbols_by_file, [i.name for i in imports]))
    file_proto = descriptor_pb2.FileDescriptorProto(name=name, package=package or None)
    file_proto.syntax = file_ast.syntax or "proto2"
    file_proto.dependency.extend(imported.name for imported in imports)
    for index, imported in enumerate(imports):
        if imported.public:
            file_proto.public_dependency.append(index)
        if imported.weak:
            file_proto.weak_dependency.append(index)
    proto3 = file_proto.syntax == "proto3"
    for element in file_ast.file_elements:
        if isinstance(element, ast.Message):
            builder.message(element, f".{package}" if package else "", file_proto.message_type.add(), proto3)
        elif isinstance(element, ast.Enum):
            builder.enum(element, file_proto.enum_type.add())
    built[name] = file_proto
    order.append(name)
    return file_proto


def _add_well_known(name: str, built, symbols_by_file, order) -> None:
    descriptor = _WELL_KNOWN_FILES[name]
    for dependency in descriptor.dependencies:
        if dependency.name not in built:
            _add_well_known(dependency.name, built, symbols_by_file, order)
    file_proto = descriptor_pb2.FileDescriptorProto()
    descriptor.CopyToProto(file_proto)
    built[name] = file_proto
    symbols: dict[str, str] = {}

    def collect(messages, scope: str) -> None:
        for message in messages:
            symbols[f"{scope}.{message.name}"] = "message"
            collect(message.nested_type, f"{scope}.{message.name}")
            for enum in message.enum_type:
                symbols[f"{scope}.{message.name}.{enum.name}"] = "enum"

    collect(file_proto.message_type, f".{file_proto.package}")
    for enum in file_proto.enum_type:
        symbols[f".{file_proto.package}.{enum.name}"] = "enum"
    symbols_by_file[name] = symbols
    order.append(name)


def _declared_symbols(file_ast: ast.File, package: str) -> dict[str, str]:
    """Full name (with a leading dot) -> "message" or "enum", of every type ``file_ast`` declares."""
    symbols: dict[str, str] = {}

    def collect(elements, scope: str) -> None:
        for element in elements:
            if isinstance(element, ast.Message):
                symbols[f"{scope}.{element.name}"] = "message"
                collect(element.elements, f"{scope}.{element.name}")
            elif isinstance(element, ast.Enum):
                symbols[f"{scope}.{element.name}"] = "enum"
            elif isinstance(element, ast.Group):
                raise SchemaInvalid(f"Invalid Protobuf schema: groups are not supported (group {element.name!r})")

    collect(file_ast.file_elements, f".{package}" if package else "")
    return symbols


def _visible_symbols(name: str, built, symbols_by_file, imports=None) -> dict[str, str]:
    # The file's own types and those of every file it imports, directly or not (protoc limits
    # this to direct and public imports; reading a schema, the wider view refuses nothing valid).
    visible: dict[str, str] = dict(symbols_by_file.get(name, {}))
    pending = list(imports if imports is not None else (built[name].dependency if built.get(name) else ()))
    seen: set[str] = set()
    while pending:
        dependency = pending.pop()
        if dependency in seen:
            continue
        seen.add(dependency)
        visible.update(symbols_by_file.get(dependency, {}))
        if built.get(dependency) is not None:
            pending.extend(built[dependency].dependency)
    return visible


def _resolve(type_name: str, scope: str, symbols: Mapping[str, str]) -> str | None:
    """The full name ``type_name`` means in ``scope`` (protobuf's rule: the innermost scope
    holding its first component), or None."""
    if type_name.startswith("."):
        return type_name if type_name in symbols else None
    first = type_name.split(".", 1)[0]
    while True:
        candidate = f"{scope}.{first}"
        if candidate in symbols or any(symbol.startswith(candidate + ".") for symbol in symbols):
            full = f"{scope}.{type_name}"
            return full if full in symbols else None
        if not scope:
            return None
        scope = scope.rpartition(".")[0]


def _camel_case(name: str) -> str:
    # protoc's map entry name: each "_x" becomes "X", the first letter upper-cased.
    parts = name.split("_")
    return "".join(part[:1].upper() + part[1:] for part in parts)


def _parse_range(text: str, maximum: int) -> tuple[int, int]:
    """A reserved or extension range as (first, last), both inclusive."""
    start, _, end = (part.strip() for part in text.partition(" to "))
    first = int(start, 0)
    return first, (maximum if end == "max" else int(end, 0) if end else first)


class _FileBuilder:
    """Fills DescriptorProtos from the AST, resolving type names against the visible symbols."""

    def __init__(self, package: str, symbols: Mapping[str, str]) -> None:
        self.package = package
        self.symbols = symbols

    def message(self, message: ast.Message, scope: str, proto: descriptor_pb2.DescriptorProto, proto3: bool) -> None:
        proto.name = message.name
        full_name = f"{scope}.{message.name}"
        synthetic_oneofs: list[tuple[str, descriptor_pb2.FieldDescriptorProto]] = []
        for element in message.elements:
            if isinstance(element, ast.Field):
                field = self.field(element, full_name, proto.field.add(), proto3)
                if proto3 and element.cardinality == ast.FieldCardinality.OPTIONAL:
                    synthetic_oneofs.append((f"_{element.name}", field))
            elif isinstance(element, ast.MapField):
                self.map_field(element, full_name, proto, proto3)
            elif isinstance(element, ast.OneOf):
                oneof_index = len(proto.oneof_decl)
                proto.oneof_decl.add(name=element.name)
                for member in element.elements:
                    if isinstance(member, ast.Field):
                        field = self.field(member, full_name, proto.field.add(), proto3)
                        field.label = FieldProto.LABEL_OPTIONAL
                        field.oneof_index = oneof_index
                    elif isinstance(member, ast.Group):
                        raise SchemaInvalid(f"Invalid Protobuf schema: groups are not supported ({member.name!r})")
            elif isinstance(element, ast.Message):
                self.message(element, full_name, proto.nested_type.add(), proto3)
            elif isinstance(element, ast.Enum):
                self.enum(element, proto.enum_type.add())
            elif isinstance(element, ast.Reserved):
                for text in element.ranges:
                    first, last = _parse_range(text, 536870911)
                    proto.reserved_range.add(start=first, end=last + 1)
                proto.reserved_name.extend(element.names)
            elif isinstance(element, ast.ExtensionRange):
                for text in element.ranges:
                    first, last = _parse_range(text, 536870911)
                    proto.extension_range.add(start=first, end=last + 1)
            elif isinstance(element, ast.Group):
                raise SchemaInvalid(f"Invalid Protobuf schema: groups are not supported ({element.name!r})")
        # proto3 `optional`: a oneof of its own, declared after the real oneofs (protoc's layout).
        for name, field in synthetic_oneofs:
            field.proto3_optional = True
            field.oneof_index = len(proto.oneof_decl)
            proto.oneof_decl.add(name=name)

    def field(self, element: ast.Field, scope: str, proto: descriptor_pb2.FieldDescriptorProto, proto3: bool):
        proto.name = element.name
        proto.number = element.number
        proto.json_name = _json_name(element.name)
        if element.cardinality == ast.FieldCardinality.REPEATED:
            proto.label = FieldProto.LABEL_REPEATED
        elif element.cardinality == ast.FieldCardinality.REQUIRED:
            if proto3:
                raise SchemaInvalid(f"Invalid Protobuf schema: required field {element.name!r} in proto3")
            proto.label = FieldProto.LABEL_REQUIRED
        else:
            proto.label = FieldProto.LABEL_OPTIONAL
        self._set_type(element.type, scope, proto, element.name)
        return proto

    def map_field(self, element: ast.MapField, scope: str, message: descriptor_pb2.DescriptorProto, proto3: bool):
        entry_name = f"{_camel_case(element.name)}Entry"
        entry = message.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        key = entry.field.add(name="key", number=1, label=FieldProto.LABEL_OPTIONAL, json_name="key")
        if element.key_type not in SCALAR_TYPES or element.key_type in ("double", "float", "bytes"):
            raise SchemaInvalid(f"Invalid Protobuf schema: map key type {element.key_type!r} of {element.name!r}")
        key.type = SCALAR_TYPES[element.key_type]
        value = entry.field.add(name="value", number=2, label=FieldProto.LABEL_OPTIONAL, json_name="value")
        self._set_type(element.value_type, scope, value, element.name)
        field = message.field.add(
            name=element.name,
            number=element.number,
            label=FieldProto.LABEL_REPEATED,
            type=FieldProto.TYPE_MESSAGE,
            type_name=f"{scope}.{entry_name}",
            json_name=_json_name(element.name),
        )
        return field

    def _set_type(self, type_name: str, scope: str, proto: descriptor_pb2.FieldDescriptorProto, field: str) -> None:
        if type_name in SCALAR_TYPES:
            proto.type = SCALAR_TYPES[type_name]
            return
        full = _resolve(type_name, scope, self.symbols)
        if full is None:
            raise SchemaInvalid(f"Invalid Protobuf schema: type {type_name!r} of field {field!r} is not defined")
        proto.type = FieldProto.TYPE_ENUM if self.symbols[full] == "enum" else FieldProto.TYPE_MESSAGE
        proto.type_name = full

    @staticmethod
    def enum(enum: ast.Enum, proto: descriptor_pb2.EnumDescriptorProto) -> None:
        proto.name = enum.name
        for element in enum.elements:
            if isinstance(element, ast.EnumValue):
                proto.value.add(name=element.name, number=element.number)
            elif isinstance(element, ast.EnumReserved):
                for text in element.ranges:
                    first, last = _parse_range(text, 2147483647)
                    proto.reserved_range.add(start=first, end=last)
                proto.reserved_name.extend(element.names)
            elif isinstance(element, ast.Option) and element.name == "allow_alias":
                proto.options.allow_alias = bool(element.value)


def _json_name(name: str) -> str:
    parts = name.split("_")
    return parts[0] + "".join(part[:1].upper() + part[1:] for part in parts[1:])


def _without_comments(node):
    if isinstance(node, list):
        return [_without_comments(item) for item in node if not isinstance(item, ast.Comment)]
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        changes = {
            field.name: _without_comments(getattr(node, field.name))
            for field in dataclasses.fields(node)
            if isinstance(getattr(node, field.name), list)
        }
        return dataclasses.replace(node, **changes)
    return node


def _qualified(file_ast: ast.File, symbols: Mapping[str, str]) -> ast.File:
    """``file_ast`` with every message and enum type written by its full name."""
    package = next((element.name for element in file_ast.file_elements if isinstance(element, ast.Package)), "")

    def full(type_name: str, scope: str) -> str:
        if type_name in SCALAR_TYPES:
            return type_name
        return _resolve(type_name, scope, symbols) or type_name

    def rewrite(elements, scope: str):
        rewritten = []
        for element in elements:
            if isinstance(element, ast.Field):
                element = dataclasses.replace(element, type=full(element.type, scope))
            elif isinstance(element, ast.MapField):
                element = dataclasses.replace(element, value_type=full(element.value_type, scope))
            elif isinstance(element, ast.OneOf):
                element = dataclasses.replace(element, elements=rewrite(element.elements, scope))
            elif isinstance(element, ast.Message):
                element = dataclasses.replace(element, elements=rewrite(element.elements, f"{scope}.{element.name}"))
            rewritten.append(element)
        return rewritten

    return dataclasses.replace(
        file_ast, file_elements=rewrite(file_ast.file_elements, f".{package}" if package else "")
    )


def serialize(schema: ParsedSchema, data) -> bytes:
    """``data`` (the message as JSON, protobuf's JSON mapping) as the schema's first
    message: Confluent's message indexes for it (a single 0) and the message's bytes."""
    file_proto = schema.handle.file_proto
    if not file_proto.message_type:
        raise SerializationError("the Protobuf schema declares no message")
    name = _message_name(file_proto, [0])
    message = message_factory.GetMessageClass(schema.handle.pool.FindMessageTypeByName(name))()
    try:
        json_format.ParseDict(data, message)
    except (json_format.ParseError, TypeError, ValueError) as error:
        raise SerializationError(f"the data does not fit {name}: {error}") from error
    return b"\x00" + message.SerializeToString()


def payload_message(schema: ParsedSchema, payload: bytes) -> tuple[str, int]:
    """The full name of the message a framed payload's message indexes name, and where
    the message's bytes start (for readers that decode it themselves, as the Spark
    data source does); ValueError when the indexes do not decode or name no message."""
    indexes, offset = _message_indexes(payload)
    return _message_name(schema.handle.file_proto, indexes), offset
