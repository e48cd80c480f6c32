"""Protobuf compatibility (pure): Confluent's Protobuf diff over two FileDescriptorProtos.

The descriptors are those :mod:`protocol.schema_formats.protobuf_format` builds
(names resolved, maps as map-entry messages, proto3 ``optional`` as
synthetic oneofs). ``reader_errors`` is a diff from the writer's schema to the
reader's, as Confluent's registry checks Protobuf: messages matched by name
within the package, fields by number, in every message and nested message.
Incompatible:

- PACKAGE_CHANGED: the package differs.
- MESSAGE_REMOVED: a message of the writer is missing from the reader. So
  adding a message is BACKWARD compatible but not FORWARD (as in Confluent's
  registry); reordering messages is compatible.
- FIELD_SCALAR_KIND_CHANGED: a field changes between scalar kinds outside one
  wire-compatible group: {int32, uint32, int64, uint64, bool, any enum},
  {sint32, sint64}, {fixed32, sfixed32}, {fixed64, sfixed64}, {string, bytes},
  {float}, {double}.
- FIELD_KIND_CHANGED: between scalar (or enum), message and map.
- FIELD_NAMED_TYPE_CHANGED: a message field names another message
  (qualifying the same name differently is no change). Map keys and values
  are compared by the rules above.
- FIELD_NUMERIC_LABEL_CHANGED: singular to repeated or back for a field that
  is not string, bytes or a message (the encodings differ). Stricter than
  Confluent's registry, which compares labels only when both are written out
  (so it lets proto3 ``int32 a`` become ``repeated int32 a``).
- REQUIRED_FIELD_ADDED / REQUIRED_FIELD_REMOVED (proto2), including a field
  becoming required or no longer required (also stricter than Confluent's
  registry, which lets an optional string or bytes field become required).
- ONEOF_FIELD_REMOVED: a field leaves a oneof that is still there (removed,
  or moved out of it); MULTIPLE_FIELDS_MOVED_TO_ONEOF: more than one existing
  field moves into a oneof; FIELD_MOVED_TO_EXISTING_ONEOF: an existing field
  moves into a oneof that already held fields.

Compatible: fields added or removed (also by changing a number), renamed
fields, an enum field changing its enum type, messages reordered, enums
added or removed, enum constants added, removed or renamed, one field moved
into a new oneof, fields added to a oneof, a whole oneof removed, proto3
``optional`` added or dropped. Not compared: options, reserved ranges,
services, extensions, the syntax line.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import descriptor_pb2

FieldProto = descriptor_pb2.FieldDescriptorProto

# TYPE_INT32 -> "int32", ..., TYPE_ENUM -> "enum", TYPE_MESSAGE -> "message".
_TYPE_NAMES = {number: name.removeprefix("TYPE_").lower() for name, number in FieldProto.Type.items()}
# Kinds whose values are read one as another (Confluent's groups; an enum is read as an integer).
_COMPATIBLE_KIND_GROUPS = (
    {"int32", "uint32", "int64", "uint64", "bool", "enum"},
    {"sint32", "sint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
    {"string", "bytes"},
)
_LENGTH_DELIMITED_KINDS = {"string", "bytes", "message"}


def reader_errors(reader: descriptor_pb2.FileDescriptorProto, writer: descriptor_pb2.FileDescriptorProto) -> list[str]:
    """Why a consumer using ``reader`` cannot read what was written with ``writer`` ([] when it can)."""
    return _Diff(writer, reader).errors()


@dataclass
class _FieldView:
    number: int
    name: str
    kind: str  # a scalar type name, "enum", "message" or "map"
    type_name: str  # messages: the name within the package
    label: int
    oneof: str | None  # a real oneof's name (not proto3 optional's synthetic one)
    map_key: _FieldView | None = None
    map_value: _FieldView | None = None


class _Diff:
    """Differences from the writer's file to the reader's, as Confluent names them; only incompatible ones."""

    def __init__(self, writer: descriptor_pb2.FileDescriptorProto, reader: descriptor_pb2.FileDescriptorProto) -> None:
        self.writer = writer
        self.reader = reader

    def errors(self) -> list[str]:
        errors = []
        if self.writer.package != self.reader.package:
            errors.append(f"PACKAGE_CHANGED: package '{self.writer.package}' -> '{self.reader.package}'")
        writer_messages = self._messages(self.writer)
        reader_messages = self._messages(self.reader)
        for name, message in writer_messages.items():
            if name not in reader_messages:
                errors.append(f"MESSAGE_REMOVED: message {name}")
                continue
            errors.extend(self._message_errors(name, message, reader_messages[name]))
        return errors

    @staticmethod
    def _messages(file_proto) -> dict[str, descriptor_pb2.DescriptorProto]:
        found: dict[str, descriptor_pb2.DescriptorProto] = {}

        def collect(messages, scope: str) -> None:
            for message in messages:
                if message.options.map_entry:
                    continue  # compared through its map field
                name = f"{scope}{message.name}"
                found[name] = message
                collect(message.nested_type, f"{name}.")

        collect(file_proto.message_type, "")
        return found

    def _fields(self, file_proto, message) -> dict[int, _FieldView]:
        prefix = f".{file_proto.package}." if file_proto.package else "."
        entries = {f"{nested.name}": nested for nested in message.nested_type if nested.options.map_entry}

        def relative(type_name: str) -> str:
            return type_name.removeprefix(prefix)

        def view(field, oneof: str | None) -> _FieldView:
            kind, type_name, key, value = _TYPE_NAMES[field.type], "", None, None
            if field.type == FieldProto.TYPE_MESSAGE:
                entry = entries.get(field.type_name.rpartition(".")[2])
                if (
                    entry is not None
                    and field.label == FieldProto.LABEL_REPEATED
                    and field.type_name.endswith(f"{message.name}.{entry.name}")
                ):
                    kind = "map"
                    key_field, value_field = sorted(entry.field, key=lambda f: f.number)
                    key, value = view(key_field, None), view(value_field, None)
                else:
                    type_name = relative(field.type_name)
            return _FieldView(field.number, field.name, kind, type_name, field.label, oneof, key, value)

        views = {}
        for field in message.field:
            real_oneof = field.HasField("oneof_index") and not field.proto3_optional
            views[field.number] = view(field, message.oneof_decl[field.oneof_index].name if real_oneof else None)
        return views

    def _message_errors(self, name: str, writer_message, reader_message) -> list[str]:
        errors = []
        writer_fields = self._fields(self.writer, writer_message)
        reader_fields = self._fields(self.reader, reader_message)
        reader_oneofs = {field.oneof for field in reader_fields.values() if field.oneof}
        for number, written in writer_fields.items():
            where = f"{name}.{written.name} (field {number})"
            read = reader_fields.get(number)
            if written.oneof in reader_oneofs and (read is None or read.oneof != written.oneof):
                # The oneof is still there without this field (a oneof removed as a whole is compatible).
                errors.append(f"ONEOF_FIELD_REMOVED: {where} is no longer in oneof {written.oneof}")
            if read is None:
                if written.label == FieldProto.LABEL_REQUIRED:
                    errors.append(f"REQUIRED_FIELD_REMOVED: {where}")
                continue
            errors.extend(self._field_errors(where, written, read))
        for number, read in reader_fields.items():
            if number not in writer_fields and read.label == FieldProto.LABEL_REQUIRED:
                errors.append(f"REQUIRED_FIELD_ADDED: {name}.{read.name} (field {number})")
        # Fields moving into a oneof: one into a new oneof is compatible, more or into an existing one are not.
        for oneof in sorted(reader_oneofs):
            members = [field for field in reader_fields.values() if field.oneof == oneof]
            moved = [f for f in members if f.number in writer_fields and writer_fields[f.number].oneof is None]
            existing = [f for f in members if f.number in writer_fields and writer_fields[f.number].oneof is not None]
            if len(moved) > 1:
                names = ", ".join(field.name for field in moved)
                errors.append(f"MULTIPLE_FIELDS_MOVED_TO_ONEOF: {name} fields {names} moved into oneof {oneof}")
            elif moved and existing:
                errors.append(
                    f"FIELD_MOVED_TO_EXISTING_ONEOF: {name}.{moved[0].name} (field {moved[0].number}) "
                    f"moved into oneof {oneof}, which already held fields"
                )
        return errors

    @classmethod
    def _field_errors(cls, where: str, written: _FieldView, read: _FieldView) -> list[str]:
        errors = cls._type_errors(where, written, read)
        repeated = (written.label == FieldProto.LABEL_REPEATED, read.label == FieldProto.LABEL_REPEATED)
        if (
            repeated[0] != repeated[1]
            and "map" not in (written.kind, read.kind)
            and not {written.kind, read.kind} <= _LENGTH_DELIMITED_KINDS
        ):
            errors.append(f"FIELD_NUMERIC_LABEL_CHANGED: {where} singular <-> repeated on a numeric field")
        required = (written.label == FieldProto.LABEL_REQUIRED, read.label == FieldProto.LABEL_REQUIRED)
        if required == (False, True):
            errors.append(f"REQUIRED_FIELD_ADDED: {where} became required")
        elif required == (True, False):
            errors.append(f"REQUIRED_FIELD_REMOVED: {where} is no longer required")
        return errors

    @classmethod
    def _type_errors(cls, where: str, written: _FieldView, read: _FieldView) -> list[str]:
        if written.kind != read.kind:
            if "map" in (written.kind, read.kind) or "message" in (written.kind, read.kind):
                return [f"FIELD_KIND_CHANGED: {where} {written.kind} -> {read.kind}"]
            if not any({written.kind, read.kind} <= group for group in _COMPATIBLE_KIND_GROUPS):
                return [f"FIELD_SCALAR_KIND_CHANGED: {where} {written.kind} -> {read.kind}"]
            return []
        if written.kind == "message" and written.type_name != read.type_name:
            return [f"FIELD_NAMED_TYPE_CHANGED: {where} {written.type_name} -> {read.type_name}"]
        if written.kind == "map":
            return [
                *cls._type_errors(f"{where} map key", written.map_key, read.map_key),
                *cls._type_errors(f"{where} map value", written.map_value, read.map_value),
            ]
        return []
