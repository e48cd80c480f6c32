"""``spark.read.format("pybroker")``: a Spark 4 Python data source over segment files.

Reads brokers' log dirs straight from disk (no broker needed, or brokers
that are running and appending), with the schema and options of Spark's
Kafka source (batch reads), and never past a partition's high watermark::

    spark.dataSource.register(PybrokerDataSource)
    df = (spark.read.format("pybroker")
          .option("path", "/data/b1/logs,/data/b2/logs")  # comma-separated log dirs, of one or more brokers
          .option("subscribe", "orders")                 # or subscribePattern / assign
          .option("startingOffsets", '{"orders":{"0":10,"1":-2}}')
          .option("kafka.bootstrap.servers", "b1:9092,b2:9092")  # optional: the live high watermarks
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
"latest", and any ending offset past it, is the partition's committed end
(below).

Replicas and the committed end (:mod:`spark_jobs.replicas`): ``path`` may
name the log dirs of several brokers; a partition found in more than one
is read from ONE of its replicas, never a mix: among those holding the
range's start, the one whose newest batch has the newest leader epoch, then
the one reaching furthest. A log, the leader's too, may end in batches no
in-sync replica holds yet (they may be truncated), so a read stops at the
partition's high watermark, found as ``highWatermark`` says:

* ``bootstrap`` (the default when ``kafka.bootstrap.servers`` is given, as
  in Spark's Kafka source): ask the cluster, Metadata then ListOffsets
  (latest, read_uncommitted) at each partition's leader, which answers its
  high watermark (:mod:`spark_jobs.kafka_offsets`);
  ``kafka.default.api.timeout.ms`` (default 60000) bounds the asking,
  retries through a leader failover included;
* ``checkpoint`` (the default otherwise, offline): the largest value any of
  the log dirs' ``replication-offset-checkpoint`` files holds for the
  partition. Brokers write it every
  ``replica.high.watermark.checkpoint.interval.ms`` (5 s), so on a live
  cluster it lags a little: the read ends at most that much short of the
  live high watermark, never past it. A partition that no checkpoint file
  names (a single broker that has not checkpointed yet) is read up to its
  last complete batch, as ``log`` does;
* ``log``: no high watermark, every complete batch on disk: right for a
  single broker, whose partitions have one replica each (RF=1) and so hold
  only committed records, not for a replicated cluster.

Either high watermark is capped by the chosen replica's own log end: a job
that sees only a lagging follower reads what that follower holds.

Timestamps, as in Spark: ``startingTimestamp``/``endingTimestamp`` (ms since
the epoch, for every partition) take precedence over
``startingOffsetsByTimestamp``/``endingOffsetsByTimestamp`` (JSON
``{"topic":{"0":1700000000000}}``), which take precedence over
``startingOffsets``/``endingOffsets`` (a partition left out of the JSON takes
the offsets option). A timestamp T stands for the earliest offset whose record
timestamp is >= T (Kafka's ListOffsets), found through the ``.timeindex``.
With no such record, an ending timestamp means latest and a starting one
follows ``startingOffsetsByTimestampStrategy``: ``error`` (default) fails the
query, ``latest`` starts at the latest offset (reads nothing).

``isolationLevel`` (or Spark's ``kafka.isolation.level``): ``read_uncommitted``
(default) or ``read_committed``, which leaves out the batches of aborted
transactions and stops before the first offset of the earliest transaction
still open (the last stable offset). Transaction markers are never returned.
Transactions are found at planning time (only when ``read_committed`` is
asked), from the earliest offset to the committed end, as the broker keeps
them: aborted ones from the segments' ``.txnindex`` files, open ones from the
newest producer snapshot and the batch headers after it
(:mod:`spark_jobs.txn_state`).

Splitting: ``maxBytesPerPartition`` (pybroker's own, default 128 MiB like
``spark.sql.files.maxPartitionBytes``) cuts a piece spanning more bytes of its
segment into offset ranges of about that size at ``.index`` entries;
``maxRecordsPerPartition`` cuts pieces into ranges of at most that many
offsets; ``minPartitions`` then cuts the largest pieces into equal offset
ranges until there are at least that many input partitions. A batch
straddling a cut is decoded by both neighbours, each keeping its own records.

Decoding keys and values by the schema registry (:mod:`spark_jobs.registry_decoder`):
``valueFormat`` / ``keyFormat`` ``registry`` (default ``binary``: the bytes
only) add one column per top-level field of the latest version of
``valueSubject`` / ``keySubject`` (default ``<topic>-value`` / ``<topic>-key``
when one topic is read, Confluent's TopicNameStrategy), each record decoded by
the schema its id names, read from the ``_schemas`` topic of the same log dirs
(:mod:`spark_jobs.schema_registry`), up to its high watermark found as for any
partition. Value fields are named as they are (``valueFieldsPrefix``, default
empty, goes in front), key fields get ``keyFieldsPrefix`` (default ``key_``);
a schema that is not a record gives one column, ``decodedValue`` /
``decodedKey``. ``mode`` as Spark's ``from_avro``: ``FAILFAST`` (default) fails
the query at the first key or value that is not framed, names an unknown id or
does not decode; ``PERMISSIVE`` gives null decoded columns and the reason in
``columnNameOfCorruptRecord`` (default ``_corrupt_record``, a column added in
that mode, null for a record decoded). The Kafka columns (``key``, ``value``,
...) stay as they are.

Not supported yet: streaming reads.

Offsets are resolved from the files (and the high watermarks) when the
query is planned, so a read while the broker appends returns a prefix of
whole, committed batches. Planning makes
one input partition per (topic, partition, segment) piece of the range, or
more when the splitting options cut pieces.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

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

from spark_jobs import kafka_offsets, registry_decoder, schema_registry, segment_reader, txn_state
from spark_jobs import replicas as replica_choice
from spark_jobs.registry_decoder import SideDecoder, SideOptions
from spark_jobs.replicas import ReplicaLog
from spark_jobs.segment_reader import SegmentPiece

if TYPE_CHECKING:
    import pyarrow as pa

EARLIEST = -2
LATEST = -1
ARROW_BATCH_RECORDS = 16384
DEFAULT_MAX_BYTES_PER_PARTITION = 128 << 20  # as spark.sql.files.maxPartitionBytes
OPEN_COST_BYTES = 4 << 20  # as spark.sql.files.openCostInBytes: what starting a piece is worth
_STRATEGIES = ("assign", "subscribe", "subscribepattern")
HIGH_WATERMARK_SOURCES = ("checkpoint", "bootstrap", "log")
DEFAULT_API_TIMEOUT_MS = 60_000  # Kafka's default.api.timeout.ms

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


def spark_schema(include_headers: bool) -> StructType:
    return StructType(BASE_SCHEMA.fields + [HEADERS_FIELD]) if include_headers else BASE_SCHEMA


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


def _positive_int_option(options: dict, name: str, default: int | None) -> int | None:
    value = options.get(name.lower())
    if value is None:
        return default
    try:
        number = int(value.strip())
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError(f"option {name} must be a positive integer, not {value!r}")
    return number


def _timestamp_option(options: dict, name: str) -> int | None:
    """A timestamp in ms since the epoch (one for every partition), or None when not given."""
    value = options.get(name.lower())
    if value is None:
        return None
    try:
        timestamp_ms = int(value.strip())
    except ValueError:
        timestamp_ms = -1
    if timestamp_ms < 0:
        raise ValueError(f"option {name} must be a timestamp in milliseconds since the epoch, not {value!r}")
    return timestamp_ms


def _timestamps_by_partition(options: dict, name: str) -> dict[tuple[str, int], int] | None:
    """``{"topic":{"0":1700000000000}}`` as {(topic, partition): timestamp_ms}, or None when not given."""
    value = options.get(name.lower())
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not all(isinstance(parts, dict) for parts in parsed.values()):
        raise ValueError(f'option {name}: expected JSON like {{"topic":{{"0":1700000000000}}}}, got {value!r}')
    timestamps = {}
    for topic, partitions in parsed.items():
        for partition, timestamp_ms in partitions.items():
            if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool) or timestamp_ms < 0:
                raise ValueError(f"option {name}: bad timestamp {timestamp_ms!r} for {topic}-{partition}")
            try:
                timestamps[(topic, int(partition))] = timestamp_ms
            except ValueError:
                raise ValueError(f"option {name}: bad partition {partition!r} of topic {topic!r}") from None
    return timestamps


def _choice_option(options: dict, names: tuple[str, ...], choices: tuple[str, ...], default: str) -> str:
    """One of ``choices`` (case-insensitive), given under any of ``names`` (which must agree)."""
    given = {name: options[name.lower()].strip().lower() for name in names if options.get(name.lower()) is not None}
    for name, value in given.items():
        if value not in choices:
            raise ValueError(f"option {name} must be one of {', '.join(choices)}, not {options[name.lower()]!r}")
    if len(set(given.values())) > 1:
        raise ValueError(f"options {' and '.join(given)} disagree: {given}")
    return next(iter(given.values()), default)


class PybrokerDataSource(DataSource):
    """Batch reads of a pybroker's log dirs with the Kafka source's schema."""

    @classmethod
    def name(cls) -> str:
        return "pybroker"

    def schema(self) -> StructType:
        reader = PybrokerReader(_lower_keys(self.options))
        # Kept with the data source, which Spark hands to reader() pickled: the
        # columns and the decoding then come from one replay of _schemas.
        self._decoders = reader.decoders()
        return reader.output_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        reader = PybrokerReader(_lower_keys(self.options), getattr(self, "_decoders", None))
        if reader.output_schema() != schema:
            raise ValueError(
                f"the schema {schema.simpleString()} is not the source's {reader.output_schema().simpleString()} "
                "(given with .schema()? or a new schema version was registered while the query was planned)"
            )
        return reader


def _lower_keys(options) -> dict[str, str]:
    # Spark hands options over case-insensitively already; lower-case to be sure.
    return {str(k).lower(): v for k, v in dict(options).items()}


class SegmentInputPartition(InputPartition):
    """Consecutive pieces of one topic-partition, read one after the other."""

    def __init__(self, pieces: tuple[SegmentPiece, ...]):
        super().__init__(pieces)
        self.pieces = pieces


def _registry_sides(options: dict, strategy: str, strategy_value: str) -> list[SideOptions]:
    """The sides (key, value) to decode by the schema registry, with their subjects and prefixes."""
    topics: list[str] = []
    if strategy == "subscribe":
        topics = sorted({t.strip() for t in strategy_value.split(",") if t.strip()})
    elif strategy == "assign":
        try:
            topics = sorted(json.loads(strategy_value))
        except (json.JSONDecodeError, TypeError):
            topics = []  # the assign option's own check says what is wrong
    sides = []
    for side, default_prefix in (("key", "key_"), ("value", "")):
        form = _choice_option(options, (f"{side}Format",), ("binary", "registry"), "binary")
        if form != "registry":
            continue
        subject = options.get(f"{side}subject")
        if subject is None or not subject.strip():
            if len(topics) != 1:
                raise ValueError(
                    f"option {side}Format=registry reads {'several topics' if topics else 'a topic pattern'}: "
                    f"name the subject whose latest schema gives the columns with the option {side}Subject"
                )
            subject = f"{topics[0]}-{side}"
        prefix = options.get(f"{side}fieldsprefix")
        sides.append(SideOptions(side, subject.strip(), default_prefix if prefix is None else prefix))
    return sides


class PybrokerReader(DataSourceReader):
    def __init__(self, options: dict[str, str], decoders: list[SideDecoder] | None = None):
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
        # Spark's precedence: xxxTimestamp, then xxxOffsetsByTimestamp, then xxxOffsets.
        self.starting_timestamp_ms = _timestamp_option(options, "startingTimestamp")
        self.ending_timestamp_ms = _timestamp_option(options, "endingTimestamp")
        self.starting_timestamps = _timestamps_by_partition(options, "startingOffsetsByTimestamp")
        self.ending_timestamps = _timestamps_by_partition(options, "endingOffsetsByTimestamp")
        # Like Spark, judge only the option that decides (a timestamp overrides the offsets).
        if self.starting_timestamp_ms is None and self.starting_timestamps is None:
            if self.starting == LATEST:
                raise ValueError("startingOffsets=latest is meaningless for a batch read (as in Spark's Kafka source)")
            if isinstance(self.starting, dict) and LATEST in self.starting.values():
                raise ValueError("startingOffsets: -1 (latest) is not allowed for a batch read")
        if self.ending_timestamp_ms is None and self.ending_timestamps is None:
            if self.ending == EARLIEST:
                raise ValueError("endingOffsets=earliest is meaningless for a batch read (as in Spark's Kafka source)")
            if isinstance(self.ending, dict) and EARLIEST in self.ending.values():
                raise ValueError("endingOffsets: -2 (earliest) is not allowed for a batch read")
        self.no_starting_match = _choice_option(
            options, ("startingOffsetsByTimestampStrategy",), ("error", "latest"), "error"
        )
        self.read_committed = (
            _choice_option(
                options,
                ("isolationLevel", "kafka.isolation.level"),
                ("read_uncommitted", "read_committed"),
                "read_uncommitted",
            )
            == "read_committed"
        )
        self.max_bytes_per_partition = _positive_int_option(
            options, "maxBytesPerPartition", DEFAULT_MAX_BYTES_PER_PARTITION
        )
        self.max_records_per_partition = _positive_int_option(options, "maxRecordsPerPartition", None)
        self.min_partitions = _positive_int_option(options, "minPartitions", None)
        servers = options.get("kafka.bootstrap.servers")
        self.bootstrap_servers = servers.strip() if servers and servers.strip() else None
        self.high_watermark_source = _choice_option(
            options, ("highWatermark",), HIGH_WATERMARK_SOURCES, "bootstrap" if self.bootstrap_servers else "checkpoint"
        )
        if self.high_watermark_source == "bootstrap" and self.bootstrap_servers is None:
            raise ValueError("option highWatermark=bootstrap needs the option kafka.bootstrap.servers (host:port,...)")
        if self.bootstrap_servers is not None:
            kafka_offsets.parse_bootstrap_servers(self.bootstrap_servers)  # a malformed list fails here
        self.api_timeout_ms = _positive_int_option(options, "kafka.default.api.timeout.ms", DEFAULT_API_TIMEOUT_MS)
        self.registry_sides = _registry_sides(options, self.strategy, self.strategy_value)
        mode = options.get("mode", registry_decoder.FAILFAST).strip().upper()
        if mode not in registry_decoder.MODES:
            raise ValueError(
                f"option mode must be FAILFAST or PERMISSIVE, not {options['mode']!r} (records that do not "
                "decode are never dropped: PERMISSIVE keeps them with the reason in columnNameOfCorruptRecord)"
            )
        self.permissive = mode == registry_decoder.PERMISSIVE
        corrupt = options.get("columnnameofcorruptrecord", registry_decoder.DEFAULT_CORRUPT_COLUMN)
        self.corrupt_column = corrupt.strip() or registry_decoder.DEFAULT_CORRUPT_COLUMN
        self._decoders = decoders

    # ------------------------------------------------------------------ decoding

    def decoders(self) -> list[SideDecoder]:
        """The key and value decoders the options ask for, from one replay of ``_schemas``."""
        if self._decoders is None:
            self._decoders = []
            if self.registry_sides:
                key = (schema_registry.SCHEMAS_TOPIC, 0)
                high_watermark = self._high_watermarks([key]).get(key)
                registered = schema_registry.read_registry(self.log_dirs, high_watermark)
                schemas = registered.by_id()
                for side in self.registry_sides:
                    latest = registered.latest(side.subject)
                    self._decoders.append(SideDecoder(side, schemas[latest.schema_id], schemas))
        return self._decoders

    def output_schema(self) -> StructType:
        """The Kafka source's columns, then the decoded key's and value's, then the corrupt-record column."""
        fields = list(spark_schema(self.include_headers).fields)
        decoders = self.decoders()
        for decoder in decoders:
            fields.extend(decoder.struct_fields())
        if decoders and self.permissive:
            fields.append(StructField(self.corrupt_column, StringType()))
        clashes = registry_decoder.column_name_clashes([field.name for field in fields])
        if clashes:
            raise ValueError(
                f"decoded columns named like other columns: {', '.join(clashes)}; set keyFieldsPrefix, "
                "valueFieldsPrefix or columnNameOfCorruptRecord"
            )
        return StructType(fields)

    def _with_decoded(self, batch: pa.RecordBatch, topic: str, partition: int) -> pa.RecordBatch:
        """``batch`` with the decoded columns (and the corrupt-record column) appended."""
        import pyarrow as pa

        arrays = list(batch.columns)
        names = list(batch.schema.names)
        reasons: list[str | None] = [None] * batch.num_rows
        for decoder in self.decoders():
            outputs, errors = decoder.decode(batch.column(decoder.options.side).to_pylist())
            for i, error in enumerate(errors):
                if error is None:
                    continue
                if not self.permissive:
                    offset = batch.column("offset")[i].as_py()
                    raise ValueError(
                        f"{topic}-{partition} offset {offset}: {error} (mode=FAILFAST; set the option "
                        "mode=PERMISSIVE to read it with null columns and the reason in "
                        f"{self.corrupt_column})"
                    )
                reasons[i] = error if reasons[i] is None else f"{reasons[i]}; {error}"
            arrays.extend(registry_decoder.arrow_arrays(decoder.columns, outputs))
            names.extend(column.name for column in decoder.columns)
        if self.permissive:
            arrays.append(pa.array(reasons, pa.string()))
            names.append(self.corrupt_column)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    # ------------------------------------------------------------------ planning

    def _selected(self) -> list[tuple[tuple[str, int], list[segment_reader.PartitionDir]]]:
        """The chosen partitions, each with its replicas' directories, by (topic, partition)."""
        found = segment_reader.find_replicas(self.log_dirs)
        if self.strategy == "subscribe":
            topics = {t.strip() for t in self.strategy_value.split(",") if t.strip()}
            chosen = [key for key in found if key[0] in topics]
        elif self.strategy == "subscribepattern":
            pattern = re.compile(self.strategy_value)
            chosen = [key for key in found if pattern.fullmatch(key[0])]
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
            chosen = list(wanted)
        return [(key, found[key]) for key in sorted(chosen)]

    def _high_watermarks(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The high watermark of each partition that has one: from the leaders, from the
        checkpoints, or none at all (``highWatermark=log``: every complete batch is read)."""
        if self.high_watermark_source == "log" or not keys:
            return {}
        if self.high_watermark_source == "checkpoint":
            return replica_choice.checkpointed_high_watermarks(self.log_dirs)
        return kafka_offsets.high_watermarks(self.bootstrap_servers, keys, self.api_timeout_ms)

    @staticmethod
    def _resolve(spec, pdir: segment_reader.PartitionDir, default: int, earliest: int, latest: int) -> int:
        offset = spec.get((pdir.topic, pdir.partition), default) if isinstance(spec, dict) else spec
        if offset == EARLIEST:
            return earliest
        if offset == LATEST:
            return latest
        return offset

    @staticmethod
    def _timestamp_for(pdir: segment_reader.PartitionDir, one_for_all: int | None, by_partition) -> int | None:
        if one_for_all is not None:
            return one_for_all
        if by_partition is not None:
            # A partition left out of the JSON takes the next preference (xxxOffsets).
            return by_partition.get((pdir.topic, pdir.partition))
        return None

    def _start(self, pdir: segment_reader.PartitionDir, earliest: int, latest: int) -> int:
        timestamp_ms = self._timestamp_for(pdir, self.starting_timestamp_ms, self.starting_timestamps)
        if timestamp_ms is None:
            return self._resolve(self.starting, pdir, EARLIEST, earliest, latest)
        offset = segment_reader.offset_for_timestamp(pdir, timestamp_ms, log_start_offset=earliest)
        if offset is not None:
            return min(offset, latest)
        if self.no_starting_match == "latest":
            return latest
        option = "startingTimestamp" if self.starting_timestamp_ms is not None else "startingOffsetsByTimestamp"
        raise ValueError(
            f"{pdir.topic}-{pdir.partition}: no record has a timestamp at or after {timestamp_ms} "
            f"(option {option}); set startingOffsetsByTimestampStrategy=latest to start at the latest offset"
        )

    def _end(self, pdir: segment_reader.PartitionDir, earliest: int, latest: int) -> int:
        timestamp_ms = self._timestamp_for(pdir, self.ending_timestamp_ms, self.ending_timestamps)
        if timestamp_ms is None:
            offset = self._resolve(self.ending, pdir, LATEST, earliest, latest)
        else:
            # As in Spark: an ending timestamp no record reaches means latest.
            offset = segment_reader.offset_for_timestamp(pdir, timestamp_ms, log_start_offset=earliest)
        # An ending offset past the committed end (the high watermark) reads up to it.
        return latest if offset is None else min(offset, latest)

    def _plan(self, replicas: list[ReplicaLog], high_watermark: int | None):
        """(replica, start, end, earliest, latest) of one partition: which replica to
        read and which offsets, ``latest`` being the committed end of that replica."""
        replica = replica_choice.preferred_replica(replicas)
        latest = replica_choice.committed_end(replica, high_watermark)
        earliest = min(replica.earliest, latest)
        # "earliest" and timestamps are resolved on the preferred replica;
        # an explicit offset below its first one may be held by another.
        start = self._start(replica.pdir, earliest, latest)
        if start < replica.earliest:
            holder = replica_choice.replica_for(replicas, start)
            if holder is not None:
                replica = holder
                latest = replica_choice.committed_end(replica, high_watermark)
                earliest = min(replica.earliest, latest)
        end = self._end(replica.pdir, earliest, latest)
        return replica, start, end, earliest, latest

    def partitions(self) -> list[InputPartition]:
        selected = self._selected()
        high_watermarks = self._high_watermarks([key for key, _pdirs in selected])
        ranges = []  # (partition dir, start, end, aborted, bytes per offset)
        for key, pdirs in selected:
            # Resolved once, from the files as they are now: a later append is not read.
            replica, start, end, earliest, latest = self._plan(
                replica_choice.replica_logs(pdirs), high_watermarks.get(key)
            )
            pdir = replica.pdir
            if start < earliest:
                if self.fail_on_data_loss:
                    raise ValueError(
                        f"{pdir.topic}-{pdir.partition}: starting offset {start} is below the earliest "
                        f"offset {earliest} (records were deleted); set failOnDataLoss=false to start there"
                    )
                start = earliest
            aborted = ()
            if self.read_committed:
                # From the earliest offset: a transaction begun before ``start`` and
                # still open must stop the read too.
                aborted, last_stable_offset = txn_state.transaction_state(pdir, earliest, latest)
                if last_stable_offset is not None:
                    end = min(end, last_stable_offset)  # nothing at or past an open transaction
            if end > start:
                density = segment_reader.bytes_per_offset(pdir, earliest, replica.end.offset)
                ranges.append((pdir, start, end, aborted, density))

        # Like Spark's file sources: a split holds at most maxBytesPerPartition,
        # less when that would leave cores idle (the total spread over
        # minPartitions, or this machine's cores), never less than OPEN_COST_BYTES.
        total_bytes = sum((end - start) * density for _pdir, start, end, _aborted, density in ranges)
        parallelism = self.min_partitions or os.cpu_count() or 1
        split_bytes = min(self.max_bytes_per_partition, max(OPEN_COST_BYTES, -(-int(total_bytes) // parallelism)))
        pieces = []
        densities = []
        for pdir, start, end, aborted, density in ranges:
            for piece in segment_reader.with_aborted(segment_reader.split_by_segment(pdir, start, end), aborted):
                for part in segment_reader.split_piece(piece, split_bytes, self.max_records_per_partition):
                    pieces.append(part)
                    densities.append(density)
        if self.min_partitions is not None:
            pieces = segment_reader.split_to_min_partitions(pieces, self.min_partitions)
            return [SegmentInputPartition((piece,)) for piece in pieces]
        return [
            SegmentInputPartition(group)
            for group in segment_reader.pack_pieces(pieces, densities, split_bytes, OPEN_COST_BYTES)
        ]

    # ------------------------------------------------------------------ reading

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark reads one placeholder InputPartition when partitions() found nothing.
        pieces = getattr(partition, "pieces", ())
        # Imported here, not at the top: planning runs in a Python process per
        # query and needs neither numpy nor pyarrow (~0.2 s of imports).
        from spark_jobs.arrow_decoder import decode_batches

        for piece in pieces:
            groups = segment_reader.iter_piece_batches(
                piece, ARROW_BATCH_RECORDS, missing_ok=not self.fail_on_data_loss
            )
            for group in groups:
                batch = decode_batches(
                    group, piece.topic, piece.partition, piece.start, piece.end, self.include_headers
                )
                if self.registry_sides:
                    batch = self._with_decoded(batch, piece.topic, piece.partition)
                yield batch


PyBrokerDataSource = PybrokerDataSource  # either spelling
