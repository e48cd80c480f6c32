"""consumer_lag: per group and partition, the committed offset, the log end offset and the lag.

    python -m spark_jobs.consumer_lag --path data/kafka-logs [--group G] [--output DIR]

Reads ``__consumer_offsets`` through the ``pybroker`` data source, decodes its
offset-commit records (Kafka's OffsetCommitKey/OffsetCommitValue), keeps the
latest record per (group, topic, partition) unless it is a tombstone, and
joins the log end offsets of the partitions as a consumer sees them (Kafka's
LOG-END-OFFSET is the high watermark): the checkpointed high watermark, or
the last complete batch where no checkpoint names the partition, of the
replica :mod:`spark_jobs.replicas` prefers when ``--path`` names the log dirs
of several brokers.
Group metadata records are ignored; what the broker has not yet compacted is
resolved by taking the record with the highest offset per key.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file (spark-submit spark_jobs/<job>.py): import from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from protocol.codec import decode_struct
from protocol.exceptions import ProtocolError
from protocol.registry import DATA_MESSAGES
from spark_jobs import replicas, segment_reader
from spark_jobs.session import job_arguments, read_topics, spark_session

OFFSETS_TOPIC = "__consumer_offsets"
_OFFSET_KEY = DATA_MESSAGES["OffsetCommitKey"]
_OFFSET_VALUE = DATA_MESSAGES["OffsetCommitValue"]
_INT16 = struct.Struct(">h")


def decode_commit(key: bytes | None, value: bytes | None) -> tuple[str, str, int, int | None] | None:
    """(group, topic, partition, committed offset or None for a tombstone) of an
    offset-commit record; None for group metadata and anything unreadable."""
    if key is None or len(key) < 2:
        return None
    key_version = _INT16.unpack_from(key)[0]
    if key_version not in (0, 1):
        return None
    try:
        decoded_key, _ = decode_struct(_OFFSET_KEY.struct, key_version, False, key, 2)
        if value is None:
            return decoded_key.group, decoded_key.topic, decoded_key.partition, None
        value_version = _INT16.unpack_from(value)[0]
        if value_version not in _OFFSET_VALUE.versions:
            return None
        decoded_value, _ = decode_struct(
            _OFFSET_VALUE.struct, value_version, value_version in _OFFSET_VALUE.flexible, value, 2
        )
    except (ProtocolError, struct.error):
        return None
    return decoded_key.group, decoded_key.topic, decoded_key.partition, decoded_value.offset


def _unsigned(column, start, length):
    """An unsigned big-endian integer from ``length`` bytes of a binary column (1-based start)."""
    from pyspark.sql import functions as F

    return F.conv(F.hex(F.substring(column, start, length)), 16, 10).cast("bigint")


def committed_offsets(spark, path: str):
    """The latest committed offset per (group, topic, partition), tombstones applied.

    The records are decoded with Spark's own column functions (no Python per
    record): an OffsetCommitKey is int16 version, int16-prefixed group and topic,
    int32 partition; every OffsetCommitValue version starts with the int16
    version and the int64 offset. :func:`decode_commit` is the same in Python."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    records = read_topics(spark, path, OFFSETS_TOPIC).select("key", "value", "offset")
    key = F.col("key")
    group_bytes = _unsigned(key, 3, 2).cast("int")
    topic_at = group_bytes + 5
    topic_bytes = _unsigned(key, topic_at, F.lit(2)).cast("int")
    commits = (
        records.where(key.isNotNull() & (_unsigned(key, 1, 2) <= 1))
        .withColumn("group", F.substring(key, F.lit(5), group_bytes).cast("string"))
        .withColumn("topic", F.substring(key, topic_at + 2, topic_bytes).cast("string"))
        .withColumn("partition", _unsigned(key, topic_at + 2 + topic_bytes, F.lit(4)).cast("int"))
        .withColumn(
            "committed_offset", F.when(F.col("value").isNull(), None).otherwise(_unsigned(F.col("value"), 3, 8))
        )
        .withColumnRenamed("offset", "record_offset")
    )
    latest = Window.partitionBy("group", "topic", "partition").orderBy(F.col("record_offset").desc())
    return (
        commits.withColumn("rank", F.row_number().over(latest))
        .where((F.col("rank") == 1) & F.col("committed_offset").isNotNull())
        .select("group", "topic", "partition", "committed_offset")
    )


def log_end_offsets(spark, path: str):
    log_dirs = [d.strip() for d in path.split(",") if d.strip()]
    high_watermarks = replicas.checkpointed_high_watermarks(log_dirs)
    rows = []
    for (topic, partition), pdirs in segment_reader.find_replicas(log_dirs).items():
        if topic == OFFSETS_TOPIC:
            continue
        replica = replicas.preferred_replica(replicas.replica_logs(pdirs))
        rows.append((topic, partition, replicas.committed_end(replica, high_watermarks.get((topic, partition)))))
    return spark.createDataFrame(rows, "topic string, partition int, log_end_offset bigint")


def consumer_lag(spark, path: str, group: str | None = None):
    from pyspark.sql import functions as F

    committed = committed_offsets(spark, path)
    if group is not None:
        committed = committed.where(F.col("group") == group)
    return (
        committed.join(log_end_offsets(spark, path), ["topic", "partition"], "left")
        .withColumn("lag", F.greatest(F.col("log_end_offset") - F.col("committed_offset"), F.lit(0)))
        .select("group", "topic", "partition", "committed_offset", "log_end_offset", "lag")
        .orderBy("group", "topic", "partition")
    )


def main(argv: list[str] | None = None) -> int:
    parser = job_arguments(__doc__.splitlines()[0])
    parser.add_argument("--group", help="only this group")
    parser.add_argument("--output", help="also write the table as Parquet to this directory")
    args = parser.parse_args(argv)
    spark = spark_session("pybroker-consumer-lag", args.master)
    try:
        table = consumer_lag(spark, args.path, args.group)
        table.show(10000, truncate=False)
        if args.output:
            table.write.mode("overwrite").parquet(args.output)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
