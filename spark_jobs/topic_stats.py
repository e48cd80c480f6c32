"""topic_stats: records, bytes, distinct keys and timestamp range per topic-partition and per hour.

    python -m spark_jobs.topic_stats --path data/kafka-logs [--topics a,b | --pattern 'orders.*'] [--output DIR]

Bytes are the record's key plus value lengths (what the records carry, not the
batch framing or compression on disk). Prints both tables; with ``--output``
also writes them as Parquet (``per_partition/`` and ``per_hour/``).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file (spark-submit spark_jobs/<job>.py): import from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_jobs.session import job_arguments, read_topics, spark_session


def partition_stats(records):
    from pyspark.sql import functions as F

    size = F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
    return (
        records.groupBy("topic", "partition")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.sum(size).alias("bytes"),
            F.countDistinct("key").alias("keys"),
            F.min("timestamp").alias("min_timestamp"),
            F.max("timestamp").alias("max_timestamp"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
        )
        .orderBy("topic", "partition")
    )


def hourly_stats(records):
    from pyspark.sql import functions as F

    size = F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
    return (
        records.withColumn("hour", F.date_trunc("hour", "timestamp"))
        .groupBy("topic", "partition", "hour")
        .agg(F.count(F.lit(1)).alias("records"), F.sum(size).alias("bytes"), F.countDistinct("key").alias("keys"))
        .orderBy("topic", "partition", "hour")
    )


def main(argv: list[str] | None = None) -> int:
    parser = job_arguments(__doc__.splitlines()[0])
    parser.add_argument("--topics", help="comma-separated topics (default: every topic but internal ones)")
    parser.add_argument("--pattern", help="a regular expression of topic names")
    parser.add_argument("--output", help="write the two tables as Parquet below this directory")
    args = parser.parse_args(argv)
    spark = spark_session("pybroker-topic-stats", args.master)
    try:
        records = read_topics(spark, args.path, args.topics, args.pattern or "^(?!__).*")
        per_partition = partition_stats(records)
        per_hour = hourly_stats(records)
        per_partition.show(1000, truncate=False)
        per_hour.show(1000, truncate=False)
        if args.output:
            per_partition.write.mode("overwrite").parquet(f"{args.output}/per_partition")
            per_hour.write.mode("overwrite").parquet(f"{args.output}/per_hour")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
