"""Protobuf reader schemas as Spark columns, and framed Protobuf payloads decoded for them.

Part of :mod:`spark_jobs.registry_decoder` (which states the rules): the
columns are the reader schema's first message's fields; a payload's message
indexes (read by :mod:`protocol.schema_formats.protobuf_format`) must name
that message, whose descriptor then parses the bytes.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
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

from protocol.schema_formats.parsed_schema import ParsedSchema
from spark_jobs.registry_formats import ColumnsUnavailable, Convert, DecodeFailure


def _protobuf_descriptor_type(descriptor, open_messages: list[str]) -> tuple[DataType, Convert | None]:
    """The Spark type of a message, and how a parsed message becomes a dict of its fields."""
    if descriptor.full_name == "google.protobuf.Timestamp":

        def to_datetime(message):
            return None if message is None else message.ToDatetime(tzinfo=datetime.timezone.utc)

        return TimestampType(), to_datetime
    if descriptor.full_name in open_messages:
        raise ColumnsUnavailable(
            f"the Protobuf message {descriptor.full_name} contains itself: Spark has no type for it"
        )
    open_messages.append(descriptor.full_name)
    try:
        fields, readers = [], []
        for field in descriptor.fields:
            data_type, read = _protobuf_field(field, open_messages)
            fields.append(StructField(field.name, data_type, True))
            readers.append(read)
    finally:
        open_messages.pop()

    def convert(message):
        if message is None:
            return None
        return {field.name: read(message) for field, read in zip(fields, readers)}

    return StructType(fields), convert


def _protobuf_field(field, open_messages: list[str]) -> tuple[DataType, Callable]:
    from google.protobuf.descriptor import FieldDescriptor

    name = field.name
    repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == FieldDescriptor.LABEL_REPEATED
    message_type = field.message_type
    if repeated and message_type is not None and message_type.GetOptions().map_entry:
        key_type, key_convert = _protobuf_value_type(message_type.fields_by_name["key"], open_messages)
        value_type, value_convert = _protobuf_value_type(message_type.fields_by_name["value"], open_messages)

        def read_map(message):
            entries = getattr(message, name)
            return {
                (k if key_convert is None else key_convert(k)): (v if value_convert is None else value_convert(v))
                for k, v in entries.items()
            }

        return MapType(key_type, value_type, True), read_map
    value_type, value_convert = _protobuf_value_type(field, open_messages)
    if repeated:

        def read_list(message):
            items = getattr(message, name)
            return [x if value_convert is None else value_convert(x) for x in items]

        return ArrayType(value_type, True), read_list
    has_presence = field.has_presence

    def read_one(message):
        if has_presence and not message.HasField(name):
            return None
        value = getattr(message, name)
        return value if value_convert is None else value_convert(value)

    return value_type, read_one


def _protobuf_value_type(field, open_messages: list[str]) -> tuple[DataType, Convert | None]:
    from google.protobuf.descriptor import FieldDescriptor as F

    kind = field.type
    if kind == F.TYPE_MESSAGE:
        return _protobuf_descriptor_type(field.message_type, open_messages)
    if kind == F.TYPE_ENUM:
        by_number = {value.number: value.name for value in field.enum_type.values}
        return StringType(), lambda number: by_number.get(number, str(number))
    if kind in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32):
        return IntegerType(), None
    if kind in (F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64, F.TYPE_UINT32, F.TYPE_FIXED32):
        return LongType(), None
    if kind in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return DecimalType(20, 0), decimal.Decimal
    if kind == F.TYPE_FLOAT:
        return FloatType(), None
    if kind == F.TYPE_DOUBLE:
        return DoubleType(), None
    if kind == F.TYPE_BOOL:
        return BooleanType(), None
    if kind == F.TYPE_BYTES:
        return BinaryType(), None
    return StringType(), None


def _protobuf_message(reader: ParsedSchema):
    file_proto = reader.handle.file_proto
    if not file_proto.message_type:
        raise ColumnsUnavailable("the Protobuf schema declares no message")
    first = file_proto.message_type[0].name
    name = f"{file_proto.package}.{first}" if file_proto.package else first
    return reader.handle.pool.FindMessageTypeByName(name)


def protobuf_reader(reader: ParsedSchema):
    return _protobuf_descriptor_type(_protobuf_message(reader), [])


def protobuf_decoder(reader: ParsedSchema, writer: ParsedSchema) -> Callable[[bytes], object]:
    from google.protobuf import message_factory
    from google.protobuf.message import DecodeError

    from protocol.schema_formats.protobuf_format import payload_message

    if writer.schema_type != "PROTOBUF":
        raise DecodeFailure(f"written with a {writer.schema_type} schema, the columns are Protobuf's")
    descriptor = _protobuf_message(reader)
    message_class = message_factory.GetMessageClass(descriptor)

    def decode(payload: bytes):
        try:
            name, offset = payload_message(writer, payload)
        except ValueError as error:
            raise DecodeFailure(f"its Protobuf message indexes do not decode: {error}") from None
        if name != descriptor.full_name:
            raise DecodeFailure(f"is a {name} message, the columns are {descriptor.full_name}'s")
        message = message_class()
        try:
            message.ParseFromString(payload[offset:])
        except (DecodeError, RuntimeError, ValueError) as error:
            raise DecodeFailure(f"does not decode as {name}: {error}") from None
        return message

    return decode


__all__ = ["protobuf_decoder", "protobuf_reader"]
