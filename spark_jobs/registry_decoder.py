"""Keys and values framed by Confluent's serializers, decoded into columns by the registry's schemas.

Needs no Spark session (pyspark's type classes and pyarrow only): the data
source (:mod:`spark_jobs.datasource`) asks :class:`SideDecoder` for the
columns when the query is planned and hands it each Arrow batch's key or
value column when it reads.

The columns come from the READER schema: the latest version of the subject
(``<topic>-value`` or ``<topic>-key`` by default, Confluent's
TopicNameStrategy) when the query is planned; a record schema (Avro record,
JSON Schema object with ``properties``, Protobuf message) gives one column per
top-level field, any other schema one column. Each record is decoded by the
schema its id names (the WRITER schema, parsed once per task), then:

- Avro: resolved to the reader schema by Avro's schema resolution (fastavro's
  ``reader_schema``): fields the writer lacks take the reader's defaults,
  fields the reader lacks are dropped; data the resolution refuses is malformed;
- JSON Schema: the writer must be a JSON schema; the payload is ``json.loads``'d
  and each column takes its property, checked against the column's type;
- Protobuf: the payload's message indexes must name the message the columns
  come from (the reader schema's first message, by full name); the bytes are
  parsed by the reader's descriptor (Protobuf's own field-number evolution).

A record that is not framed, names an unknown id or does not decode is
malformed: :data:`FAILFAST` fails the query, :data:`PERMISSIVE` gives nulls in
the decoded columns and the reason in the corrupt-record column (Spark's
``mode`` and ``columnNameOfCorruptRecord``). A null key or value (a tombstone)
is not malformed: its columns are null.

Column types (Spark's ``from_avro``/``from_protobuf`` where they have one):
Avro boolean, int, long, float, double, string, bytes/fixed -> the same;
enum -> string; array, map, record -> ArrayType, MapType(string, ...),
StructType; ``["null", X]`` -> nullable X; other unions -> a struct of
``member0``, ``member1``, ... (``[int, long]`` -> long, ``[float, double]`` ->
double); logical types date, timestamp-millis/micros, local-timestamp-*,
decimal (precision <= 38), uuid, time-millis/micros -> DateType, TimestampType,
TimestampNTZType, DecimalType, string, int/long. JSON Schema ``integer``,
``number``, ``string``, ``boolean`` -> long, double, string, boolean; ``array``
of typed items -> ArrayType; ``object`` with ``properties`` -> StructType, with
only ``additionalProperties`` -> MapType(string, ...); anything else (no or
several types, ``oneOf``, ...) -> the value as JSON text. Protobuf int32/sint32/
sfixed32 -> int; int64/sint64/sfixed64, uint32, fixed32 -> long;
uint64/fixed64 -> decimal(20,0); float, double, bool, string, bytes -> the
same; enum -> its value's name; message -> StructType (``google.protobuf.Timestamp``
-> TimestampType); repeated -> ArrayType; map -> MapType. Recursive types
have no Spark type: the query fails when planned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql.types import StructField, StructType

from protocol.schema_formats import formats
from protocol.schema_formats.framing import FramingError, split_framing
from protocol.schema_formats.parsed_schema import ParsedSchema, SchemaInvalid
from spark_jobs import registry_formats
from spark_jobs.registry_formats import Column, ColumnsUnavailable, Convert, DecodeFailure
from spark_jobs.schema_registry import RegisteredSchema

FAILFAST, PERMISSIVE = "FAILFAST", "PERMISSIVE"
MODES = (FAILFAST, PERMISSIVE)
DEFAULT_CORRUPT_COLUMN = "_corrupt_record"  # Spark's spark.sql.columnNameOfCorruptRecord


# --------------------------------------------------------------------------- one side


def _protobuf_reader(reader: ParsedSchema):
    # Imported on first use, as the format modules are: a read of Avro values never loads protobuf.
    from spark_jobs import registry_protobuf

    return registry_protobuf.protobuf_reader(reader)


def _protobuf_decoder(reader: ParsedSchema, writer: ParsedSchema):
    from spark_jobs import registry_protobuf

    return registry_protobuf.protobuf_decoder(reader, writer)


_READERS = {"AVRO": registry_formats.avro_reader, "JSON": registry_formats.json_reader, "PROTOBUF": _protobuf_reader}


def parse_registered(entry: RegisteredSchema) -> ParsedSchema:
    return formats.parse_schema(entry.schema_type, entry.text, dict(entry.references))


def reader_columns(reader: ParsedSchema, prefix: str, single_name: str) -> tuple[list[Column], Convert | None]:
    """The columns a reader schema gives: one per top-level field of a record
    (``prefix`` + its name), or one named ``single_name`` for any other schema;
    and how a decoded record becomes the values of those columns."""
    try:
        data_type, convert = _READERS[reader.schema_type](reader)
    except RecursionError:
        raise ColumnsUnavailable("the schema is nested too deeply for Spark columns") from None
    if isinstance(data_type, StructType) and data_type.fields:
        return [Column(prefix + field.name, field.name, field.dataType) for field in data_type.fields], convert
    return [Column(single_name, None, data_type)], convert


@dataclass(frozen=True)
class SideOptions:
    """How the data source decodes one side of the records ("key" or "value")."""

    side: str
    subject: str
    prefix: str


class SideDecoder:
    """The decoded columns of keys or values: built from the latest version of a subject,
    each record decoded by its own schema id (parsed once per instance, i.e. per task)."""

    def __init__(self, options: SideOptions, reader: RegisteredSchema, schemas: dict[int, RegisteredSchema]):
        self.options = options
        self.reader_entry = reader
        self.schemas = schemas
        self._reader: ParsedSchema | None = None
        self._columns: list[Column] | None = None
        self._convert: Convert | None = None
        self._decoders: dict[int, Callable[[bytes], object] | str] = {}

    @property
    def reader(self) -> ParsedSchema:
        if self._reader is None:
            try:
                self._reader = parse_registered(self.reader_entry)
            except SchemaInvalid as error:
                raise ColumnsUnavailable(
                    f"the latest schema of {self.options.subject} (id {self.reader_entry.schema_id}) "
                    f"cannot be read: {error}"
                ) from None
        return self._reader

    @property
    def columns(self) -> list[Column]:
        if self._columns is None:
            single = "decodedKey" if self.options.side == "key" else "decodedValue"
            try:
                self._columns, self._convert = reader_columns(self.reader, self.options.prefix, single)
            except ColumnsUnavailable as error:
                raise ColumnsUnavailable(f"{self.options.subject}: {error}") from None
        return self._columns

    def __getstate__(self):
        # Sent to the executors without what it parsed (descriptor pools and fastavro's
        # closures do not pickle): each task parses the schemas it meets once.
        return {"options": self.options, "reader_entry": self.reader_entry, "schemas": self.schemas}

    def __setstate__(self, state):
        self.__init__(state["options"], state["reader_entry"], state["schemas"])

    def struct_fields(self) -> list[StructField]:
        return [StructField(column.name, column.data_type, True) for column in self.columns]

    def _decoder(self, schema_id: int):
        decoder = self._decoders.get(schema_id)
        if decoder is None:
            decoder = self._decoders[schema_id] = self._build_decoder(schema_id)
        return decoder

    def _build_decoder(self, schema_id: int):
        """A function from payload to decoded record, or the reason none can be built."""
        entry = self.schemas.get(schema_id)
        if entry is None:
            return f"schema id {schema_id} is not registered in _schemas"
        reader = self.reader
        try:
            if reader.schema_type == "JSON":
                return registry_formats.json_decoder(reader, entry)
            writer = reader if schema_id == self.reader_entry.schema_id else parse_registered(entry)
            if reader.schema_type == "AVRO":
                return registry_formats.avro_decoder(reader, writer)
            return _protobuf_decoder(reader, writer)
        except (SchemaInvalid, DecodeFailure) as error:
            return f"schema id {schema_id} cannot decode it: {error}"

    def decode_one(self, data: bytes) -> object:
        """The decoded record of one framed key or value; DecodeFailure when it is malformed."""
        try:
            schema_id, payload = split_framing(data)
        except FramingError as error:
            raise DecodeFailure(f"not framed by a schema registry serializer: {error}") from None
        decoder = self._decoder(schema_id)
        if isinstance(decoder, str):
            raise DecodeFailure(decoder)
        try:
            return decoder(payload)
        except DecodeFailure as error:
            raise DecodeFailure(f"schema id {schema_id}: {error}") from None
        except RecursionError:
            raise DecodeFailure(f"schema id {schema_id}: nested too deeply") from None

    def decode(self, values: list[bytes | None]) -> tuple[list[list], list[str | None]]:
        """The decoded columns of a batch's keys or values (null for a null key or value
        and for a malformed one), and per record the reason it is malformed, or None."""
        columns = self.columns
        convert = self._convert
        fields = [column.field for column in columns]
        whole = fields == [None]
        outputs: list[list] = [[] for _ in columns]
        errors: list[str | None] = []
        for data in values:
            row = None
            error = None
            if data is not None:
                try:
                    record = self.decode_one(data)
                    if convert is not None:
                        record = convert(record)
                    if whole:
                        row = [record]
                    elif isinstance(record, dict):
                        row = [record.get(field) for field in fields]
                    else:
                        raise DecodeFailure(f"decodes to {type(record).__name__}, not a record of the columns' fields")
                except DecodeFailure as failure:
                    error = f"{self.options.side}: {failure}"
            errors.append(error)
            if row is None:
                for output in outputs:
                    output.append(None)
            else:
                for output, cell in zip(outputs, row):
                    output.append(cell)
        return outputs, errors


def arrow_arrays(columns: list[Column], outputs: list[list]) -> list:
    """The decoded columns as Arrow arrays of the types Spark expects for them."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    return [
        pa.array(output, to_arrow_type(column.data_type, timezone="UTC")) for column, output in zip(columns, outputs)
    ]


def column_name_clashes(names: list[str]) -> list[str]:
    seen, clashes = set(), []
    for name in names:
        if name in seen and name not in clashes:
            clashes.append(name)
        seen.add(name)
    return clashes


__all__ = [
    "DEFAULT_CORRUPT_COLUMN",
    "FAILFAST",
    "MODES",
    "PERMISSIVE",
    "Column",
    "ColumnsUnavailable",
    "DecodeFailure",
    "SideDecoder",
    "SideOptions",
    "arrow_arrays",
    "column_name_clashes",
    "parse_registered",
    "reader_columns",
]
