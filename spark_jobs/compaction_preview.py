"""compaction_preview: the latest value per key and how much log compaction would reclaim, per topic-partition.

    python -m spark_jobs.compaction_preview --path data/kafka-logs [--topics a,b | --pattern 'orders.*'] [--output DIR]

What a full cleaning of each partition would leave: of the records with a key,
only the one with the highest offset per key survives; every older record of
that key is removable. A tombstone (null value) that is the latest record of
its key survives too, until its delete horizon (``delete.retention.ms``) has
passed; ``tombstones`` counts them and ``removable_after_tombstones_expire``
adds them to the removable records. The preview ignores what a real cleaner
also takes into account (the active segment is never cleaned,
``min.compaction.lag.ms``, ``min.cleanable.dirty.ratio``): it shows the
ceiling.

Records with a null key are left out of the compaction arithmetic (Kafka
refuses them on a compacted topic, so they only occur on topics that are not
compacted): they are counted as ``keyless_records`` and take no part in the
key, removable and byte columns. Bytes are the key plus value lengths (what
the records carry, not batch framing or compression on disk), of the keyed
records only: ``bytes_now`` before, ``bytes_after_compaction`` after (a kept
tombstone counts its key), ``reclaimable_bytes`` the difference and
``reclaimable_ratio`` that share of ``bytes_now``.

Prints the table; with ``--output`` also writes the latest record per key
(:func:`latest_per_key`) as Parquet to that directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file (spark-submit spark_jobs/<job>.py): import from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_jobs.session import job_arguments, read_topics, spark_session


def key_summary(records):
    """One row per (topic, partition, key): ``key_records``, ``key_bytes`` and ``latest``,
    the struct (offset, value, timestamp) of the key's record with the highest offset.
    Null keys form one row per partition too (the preview counts them as keyless)."""
    from pyspark.sql import functions as F

    size = F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
    return records.groupBy("topic", "partition", "key").agg(
        F.count(F.lit(1)).alias("key_records"),
        F.sum(size).alias("key_bytes"),
        F.max_by(F.struct("offset", "value", "timestamp"), "offset").alias("latest"),
    )


def latest_from_summary(summary):
    from pyspark.sql import functions as F

    return summary.where(F.col("key").isNotNull()).select(
        "topic", "partition", "key", "latest.offset", "latest.value", "latest.timestamp"
    )


def preview_from_summary(summary):
    from pyspark.sql import functions as F

    keyed = F.col("key").isNotNull()
    latest_size = F.length("key") + F.coalesce(F.length("latest.value"), F.lit(0))
    return (
        summary.groupBy("topic", "partition")
        .agg(
            F.sum("key_records").alias("records"),
            F.sum(F.when(~keyed, F.col("key_records")).otherwise(0)).alias("keyless_records"),
            F.sum(F.when(keyed, F.col("key_records")).otherwise(0)).alias("keyed_records"),
            F.count("key").alias("distinct_keys"),
            F.count(F.when(keyed & F.col("latest.value").isNull(), 1)).alias("tombstones"),
            F.sum(F.when(keyed, F.col("key_bytes")).otherwise(0)).alias("bytes_now"),
            F.sum(F.when(keyed, latest_size).otherwise(0)).alias("bytes_after_compaction"),
        )
        .withColumn("removable_records", F.col("keyed_records") - F.col("distinct_keys"))
        .withColumn("removable_after_tombstones_expire", F.col("removable_records") + F.col("tombstones"))
        .withColumn("reclaimable_bytes", F.col("bytes_now") - F.col("bytes_after_compaction"))
        .withColumn(
            "reclaimable_ratio",
            F.when(F.col("bytes_now") > 0, F.col("reclaimable_bytes") / F.col("bytes_now")),
        )
        .select(
            "topic",
            "partition",
            "records",
            "keyless_records",
            "keyed_records",
            "distinct_keys",
            "removable_records",
            "tombstones",
            "removable_after_tombstones_expire",
            "bytes_now",
            "bytes_after_compaction",
            "reclaimable_bytes",
            "reclaimable_ratio",
        )
        .orderBy("topic", "partition")
    )


def latest_per_key(records):
    """The latest record of every non-null key per topic-partition: topic, partition, key,
    offset, value, timestamp. A key whose latest record is a tombstone has a null value
    (filter on ``value IS NOT NULL`` for the live keys)."""
    return latest_from_summary(key_summary(records))


def compaction_preview(records):
    """Per topic-partition: the counts and bytes described in the module docstring."""
    return preview_from_summary(key_summary(records))


def main(argv: list[str] | None = None) -> int:
    parser = job_arguments(__doc__.splitlines()[0])
    parser.add_argument("--topics", help="comma-separated topics (default: every topic but internal ones)")
    parser.add_argument("--pattern", help="a regular expression of topic names")
    parser.add_argument("--output", help="write the latest record per key as Parquet to this directory")
    args = parser.parse_args(argv)
    spark = spark_session("pybroker-compaction-preview", args.master)
    try:
        records = read_topics(spark, args.path, args.topics, args.pattern or "^(?!__).*")
        # Both outputs come from one aggregation; kept so the segments are read once.
        summary = key_summary(records).persist() if args.output else key_summary(records)
        preview_from_summary(summary).show(10000, truncate=False)
        if args.output:
            latest_from_summary(summary).write.mode("overwrite").parquet(args.output)
            summary.unpersist()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
