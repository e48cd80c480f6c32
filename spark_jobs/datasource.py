"""``spark.read.format("pybroker")``: a Spark 4 Python data source over segment files.

Reads a broker's log dirs straight from disk (no broker needed, or one that
is running and appending), with the schema and options of Spark's Kafka
source (batch reads)::

    spark.dataSource.register(PybrokerDataSource)
    df = (spark.read.format("pybroker")
          .option("path", "/var/lib/pybroker/logs")      # comma-separated log dirs
          .option("subscribe", "orders")                 # or subscribePattern / assign
          .option("startingOffsets", '{"orders":{"0":10,"1":-2}}')
          .load())

Options: ``path`` (required), exactly one of ``subscribe`` (comma-separated
topics), ``subscribePattern`` (a regex matched against the whole topic name)
or ``assign`` (JSON ``{"topic":[0,1]}``); ``startingOffsets`` (default
``earliest``) and ``endingOffsets`` (default ``latest``, exclusive), each
``earliest``/``latest`` or JSON ``{"topic":{"0":23,"1":-2}}`` with -2 for
earliest and -1 for latest (a partition left out of the JSON takes
earliest/latest; -2 is not allowed in endingOffsets, -1 not in
startingOffsets, as in Spark); ``includeHeaders`` (default false);
``failOnDataLoss`` (default true: a starting offset below the earliest one,
or a segment deleted between planning and reading, fails the query; false
starts at the earliest offset and reads a vanished segment as empty).
An ending offset past the log end reads up to the log end.

Not supported yet: ``startingTimestamp``/``endingTimestamp`` and the
``...OffsetsByTimestamp`` options, ``minPartitions``/``maxRecordsPerPartition``,
``kafka.isolation.level=read_committed`` (aborted transactions are returned),
streaming reads.

Offsets are resolved from the files when the query is planned, so a read
while the broker appends returns a prefix of whole batches. Planning makes
one input partition per (topic, partition, segment) piece of the range.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs import segment_reader
from spark_jobs.segment_reader import SegmentPiece

EARLIEST = -2
LATEST = -1
ARROW_BATCH_RECORDS = 65536
_STRATEGIES = ("assign", "subscribe", "subscribepattern")

HEADER_STRUCT = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
BASE_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
HEADERS_FIELD = StructField("headers", ArrayType(HEADER_STRUCT))

_ARROW_HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def spark_schema(include_headers: bool) -> StructType:
    return StructType(BASE_SCHEMA.fields + [HEADERS_FIELD]) if include_headers else BASE_SCHEMA


def arrow_schema(include_headers: bool) -> pa.Schema:
    """What Spark's ``to_arrow_schema(schema, timezone="UTC")`` gives; Spark checks equality."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", _ARROW_HEADERS))
    return pa.schema(fields)


def columns_to_arrow(columns: segment_reader.RecordColumns, include_headers: bool) -> pa.RecordBatch:
    timestamps_ms = pa.array(columns.timestamp_ms, pa.int64())
    arrays = [
        pa.array(columns.key, pa.binary()),
        pa.array(columns.value, pa.binary()),
        pa.array(columns.topic, pa.string()),
        pa.array(columns.partition, pa.int32()),
        pa.array(columns.offset, pa.int64()),
        pc.multiply(timestamps_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
        pa.array(columns.timestamp_type, pa.int32()),
    ]
    if include_headers:
        # Spark's Kafka source gives null, not an empty array, to a record without headers.
        arrays.append(pa.array([h or None for h in columns.headers], _ARROW_HEADERS))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


# --------------------------------------------------------------------------- options


def _bool_option(options: dict, name: str, default: bool) -> bool:
    value = options.get(name.lower())
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {value!r}")
    return value.strip().lower() == "true"


def _parse_offsets(options: dict, name: str, default: int) -> int | dict[tuple[str, int], int]:
    """``earliest``/``latest`` as -2/-1, or a {(topic, partition): offset} dict from JSON."""
    value = options.get(name.lower())
    if value is None:
        return default
    text = value.strip()
    if text.lower() == "earliest":
        return EARLIEST
    if text.lower() == "latest":
        return LATEST
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(
            f'option {name}: expected "earliest", "latest" or JSON like {{"topic":{{"0":23}}}}, got {value!r}'
        ) from None
    if not isinstance(parsed, dict):
        raise ValueError(f"option {name}: JSON must be an object of topics, got {value!r}")  # noqa: TRY004
    offsets = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"option {name}: topic {topic!r} must map partitions to offsets")  # noqa: TRY004
        for partition, offset in partitions.items():
            if not isinstance(offset, int) or offset < EARLIEST:
                raise ValueError(f"option {name}: bad offset {offset!r} for {topic}-{partition}")
            offsets[(topic, int(partition))] = offset
    return offsets


class PybrokerDataSource(DataSource):
    """Batch reads of a pybroker's log dirs with the Kafka source's schema."""

    @classmethod
    def name(cls) -> str:
        return "pybroker"

    def schema(self) -> StructType:
        return spark_schema(_bool_option(_lower_keys(self.options), "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return PybrokerReader(_lower_keys(self.options))


def _lower_keys(options) -> dict[str, str]:
    # Spark hands options over case-insensitively already; lower-case to be sure.
    return {str(k).lower(): v for k, v in dict(options).items()}


class SegmentInputPartition(InputPartition):
    """One (topic, partition, segment) piece of the requested range."""

    def __init__(self, piece: SegmentPiece):
        super().__init__(piece)
        self.piece = piece


class PybrokerReader(DataSourceReader):
    def __init__(self, options: dict[str, str]):
        path = options.get("path")
        if not path or not path.strip():
            raise ValueError('option "path" is required: the comma-separated log dirs of a pybroker')
        self.log_dirs = [p.strip() for p in path.split(",") if p.strip()]
        given = [name for name in _STRATEGIES if options.get(name)]
        if len(given) != 1:
            raise ValueError(
                "Exactly one of the options 'assign', 'subscribe' or 'subscribePattern' must be specified "
                f"for the pybroker source, got {len(given)}" + (f" ({', '.join(given)})" if given else "")
            )
        self.strategy = given[0]
        self.strategy_value = options[self.strategy]
        self.include_headers = _bool_option(options, "includeHeaders", False)
        self.fail_on_data_loss = _bool_option(options, "failOnDataLoss", True)
        self.starting = _parse_offsets(options, "startingOffsets", EARLIEST)
        self.ending = _parse_offsets(options, "endingOffsets", LATEST)
        if self.starting == LATEST:
            raise ValueError("startingOffsets=latest is meaningless for a batch read (as in Spark's Kafka source)")
        if self.ending == EARLIEST:
            raise ValueError("endingOffsets=earliest is meaningless for a batch read (as in Spark's Kafka source)")
        if isinstance(self.starting, dict) and LATEST in self.starting.values():
            raise ValueError("startingOffsets: -1 (latest) is not allowed for a batch read")
        if isinstance(self.ending, dict) and EARLIEST in self.ending.values():
            raise ValueError("endingOffsets: -2 (earliest) is not allowed for a batch read")

    # ------------------------------------------------------------------ planning

    def _selected(self) -> list[segment_reader.PartitionDir]:
        found = segment_reader.find_partitions(self.log_dirs)
        if self.strategy == "subscribe":
            topics = {t.strip() for t in self.strategy_value.split(",") if t.strip()}
            chosen = [p for key, p in found.items() if key[0] in topics]
        elif self.strategy == "subscribepattern":
            pattern = re.compile(self.strategy_value)
            chosen = [p for key, p in found.items() if pattern.fullmatch(key[0])]
        else:
            try:
                assigned = json.loads(self.strategy_value)
                wanted = {(topic, int(p)) for topic, parts in assigned.items() for p in parts}
            except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
                raise ValueError(
                    f'option assign: expected JSON like {{"topic":[0,1]}}, got {self.strategy_value!r}'
                ) from None
            missing = sorted(wanted - found.keys())
            if missing:
                raise ValueError(f"option assign: no such partitions in {self.log_dirs}: {missing}")
            chosen = [found[key] for key in wanted]
        return sorted(chosen, key=lambda p: (p.topic, p.partition))

    @staticmethod
    def _resolve(spec, pdir: segment_reader.PartitionDir, default: int, earliest: int, latest: int) -> int:
        offset = spec.get((pdir.topic, pdir.partition), default) if isinstance(spec, dict) else spec
        if offset == EARLIEST:
            return earliest
        if offset == LATEST:
            return latest
        return offset

    def partitions(self) -> list[InputPartition]:
        pieces = []
        for pdir in self._selected():
            # Resolved once, from the files as they are now: a later append is not read.
            latest = segment_reader.latest_offset(pdir)
            earliest = min(segment_reader.earliest_offset(pdir), latest)
            start = self._resolve(self.starting, pdir, EARLIEST, earliest, latest)
            # An ending offset past the log end reads up to the end.
            end = min(self._resolve(self.ending, pdir, LATEST, earliest, latest), latest)
            if start < earliest:
                if self.fail_on_data_loss:
                    raise ValueError(
                        f"{pdir.topic}-{pdir.partition}: starting offset {start} is below the earliest "
                        f"offset {earliest} (records were deleted); set failOnDataLoss=false to start there"
                    )
                start = earliest
            pieces.extend(segment_reader.split_by_segment(pdir, start, end))
        return [SegmentInputPartition(piece) for piece in pieces]

    # ------------------------------------------------------------------ reading

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        piece = getattr(partition, "piece", None)
        if piece is None:
            return  # Spark reads one placeholder InputPartition when partitions() found nothing
        for columns in segment_reader.iter_piece(piece, ARROW_BATCH_RECORDS, missing_ok=not self.fail_on_data_loss):
            yield columns_to_arrow(columns, self.include_headers)


PyBrokerDataSource = PybrokerDataSource  # either spelling
