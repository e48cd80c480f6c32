"""export: write a range of topics' records to Parquet, partitioned by the records' UTC date.

    python -m spark_jobs.export --path data/kafka-logs --output DIR [--topics a,b | --pattern 'orders.*']
        [--starting-offsets earliest|JSON] [--ending-offsets latest|JSON] [--include-headers]
        [--mode overwrite|append|errorifexists|ignore]
        [--value-format binary|registry] [--value-subject S] [--key-format binary|registry] [--key-subject S]
        [--decode-mode FAILFAST|PERMISSIVE]

The columns are the data source's (key, value, topic, partition, offset,
timestamp, timestampType, and headers with ``--include-headers``) plus
``date``, the UTC calendar date of the record timestamp, whatever the Spark
session's time zone; ``date`` is the Parquet partition column
(``DIR/date=YYYY-MM-DD/``). ``--starting-offsets``/``--ending-offsets`` are the
source's ``startingOffsets``/``endingOffsets`` (``earliest``/``latest`` or JSON
``{"topic":{"0":23,"1":-2}}``, the ending offset exclusive). ``--mode`` is
Spark's save mode; ``overwrite`` (the default) replaces the whole output
directory (Spark's static partition overwrite). Timestamps are written as
Parquet TIMESTAMP_MICROS rather than Spark's legacy INT96 so that other readers
see them as timestamps. ``--value-format registry`` (``--key-format``) adds the
values' (keys') fields as columns, decoded by the schema registry's schemas:
the source's ``valueFormat``, ``valueSubject``, ``keyFormat``, ``keySubject``
and, as ``--decode-mode``, ``mode``. Prints the records written per date.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file (spark-submit spark_jobs/<job>.py): import from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_jobs.session import job_arguments, read_topics, spark_session

SAVE_MODES = ("overwrite", "append", "errorifexists", "error", "ignore")
MICROS_PER_DAY = 86_400_000_000


def utc_date(timestamp_column: str = "timestamp"):
    """The UTC calendar date of a timestamp column, independent of spark.sql.session.timeZone.

    ``to_date`` of a timestamp takes the date in the session time zone, so the
    date is computed from the epoch instead: whole days of microseconds since
    1970-01-01 UTC, rounded down (``pmod`` keeps it right before 1970), in
    integers so no rounding can move a record across midnight."""
    from pyspark.sql import functions as F

    micros = F.unix_micros(F.col(timestamp_column))
    days = ((micros - F.pmod(micros, F.lit(MICROS_PER_DAY))) / F.lit(MICROS_PER_DAY)).cast("int")
    return F.date_from_unix_date(days)


def with_date(records):
    return records.withColumn("date", utc_date("timestamp"))


def _output_exists(spark, output: str) -> bool:
    """Whether ``output`` exists, asked through Hadoop's filesystem API as Spark's writer does
    (the output may be on HDFS or S3, not a local path)."""
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(output)
    return hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).exists(hadoop_path)


def _records_per_date(spark, output: str, schema) -> dict:
    """{date: records} of the Parquet under ``output``. Spark answers a count grouped by the
    partition column from the directory names and the files' footers, without reading rows."""
    from pyspark.sql import functions as F

    # The schema is given so that an output without any record file reads as empty.
    table = spark.read.schema(schema).parquet(output)
    return {
        row["date"]: row["records"] for row in table.groupBy("date").agg(F.count(F.lit(1)).alias("records")).collect()
    }


def export_records(
    spark,
    path: str,
    output: str,
    topics: str | None = None,
    pattern: str | None = None,
    starting_offsets: str = "earliest",
    ending_offsets: str = "latest",
    include_headers: bool = False,
    mode: str = "overwrite",
    source_options: dict[str, str] | None = None,
) -> list[tuple[object, int]] | None:
    """Write the range as Parquet partitioned by ``date``; returns [(date, records written)]
    in date order, or None when ``mode`` is ``ignore`` and ``output`` exists (nothing written).

    The counts come from the written output rather than from a second read of the
    segments: with ``append`` they are what the output holds after the write minus
    what it held before (so another writer appending at the same time skews them)."""
    if mode not in SAVE_MODES:
        raise ValueError(f"mode must be one of {', '.join(SAVE_MODES)}, not {mode!r}")
    if mode == "ignore" and _output_exists(spark, output):
        return None
    records = read_topics(
        spark,
        path,
        topics,
        pattern or "^(?!__).*",
        startingOffsets=starting_offsets,
        endingOffsets=ending_offsets,
        includeHeaders=str(include_headers).lower(),
        **(source_options or {}),
    )
    dated = with_date(records)
    before = (
        _records_per_date(spark, output, dated.schema) if mode == "append" and _output_exists(spark, output) else {}
    )
    dated.write.mode(mode).partitionBy("date").parquet(output)
    after = _records_per_date(spark, output, dated.schema)
    written = {day: count - before.get(day, 0) for day, count in after.items()}
    return sorted((day, count) for day, count in written.items() if count > 0)


def registry_options(args) -> dict[str, str]:
    """The data source's options for decoding keys and values by the schema registry."""
    options = {}
    for side in ("key", "value"):
        if getattr(args, f"{side}_format") == "registry":
            options[f"{side}Format"] = "registry"
            subject = getattr(args, f"{side}_subject")
            if subject:
                options[f"{side}Subject"] = subject
    if options:
        options["mode"] = args.decode_mode
    return options


def main(argv: list[str] | None = None) -> int:
    parser = job_arguments(__doc__.splitlines()[0])
    parser.add_argument("--topics", help="comma-separated topics (default: every topic but internal ones)")
    parser.add_argument("--pattern", help="a regular expression of topic names")
    parser.add_argument("--output", required=True, help="the Parquet output directory")
    parser.add_argument("--starting-offsets", default="earliest", help="earliest (default) or JSON per partition")
    parser.add_argument("--ending-offsets", default="latest", help="latest (default) or JSON per partition, exclusive")
    parser.add_argument("--include-headers", action="store_true", help="add the headers column")
    parser.add_argument("--mode", default="overwrite", choices=SAVE_MODES, help="Spark's save mode (default overwrite)")
    for side in ("value", "key"):
        parser.add_argument(
            f"--{side}-format",
            default="binary",
            choices=("binary", "registry"),
            help=f"registry: the {side}s' fields as columns, decoded by the schema registry's schemas",
        )
        parser.add_argument(f"--{side}-subject", help=f"the subject giving the {side} columns (default <topic>-{side})")
    parser.add_argument(
        "--decode-mode",
        default="FAILFAST",
        choices=("FAILFAST", "PERMISSIVE"),
        help="FAILFAST (default) fails at a record that does not decode; PERMISSIVE adds _corrupt_record",
    )
    args = parser.parse_args(argv)
    spark = spark_session("pybroker-export", args.master)
    try:
        # A session conf, so set on the job's own session rather than in spark_session().
        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        per_date = export_records(
            spark,
            args.path,
            args.output,
            args.topics,
            args.pattern,
            args.starting_offsets,
            args.ending_offsets,
            args.include_headers,
            args.mode,
            registry_options(args),
        )
    finally:
        spark.stop()
    if per_date is None:
        print(f"{args.output} exists; nothing written (mode ignore)")
        return 0
    for date, count in per_date:
        print(f"{date.isoformat()}\t{count}")
    print(f"{sum(count for _, count in per_date)} records written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
