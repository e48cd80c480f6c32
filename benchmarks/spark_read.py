"""Rows/s of ``spark.read.format("pybroker")`` next to a confluent-kafka consumer.

    python benchmarks/spark_read.py [--records 1000000] [--value-bytes 100] [--codec none]
                                    [--partitions 2] [--master local[2]] [--source broker|files]

``--source broker`` (default) starts a pybroker on 127.0.0.1, produces the
records with confluent-kafka, then reads the topic twice: with Spark from the
broker's log dir (while it runs), and with a confluent-kafka consumer assigned
to every partition, in this one Python process. ``--source files`` writes the
segments directly instead (batches of ``--batch-records``, rolled every
``--segment-mb``) and runs only the Spark queries. Each Spark query runs
``--repeat`` times; the first run includes starting Spark's Python workers.
Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from produce_consume import start_broker

from protocol.compression import CompressionType
from protocol.records import build_batch

CODECS = {
    "none": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}
TOPIC = "bench"
BASE_TIMESTAMP_MS = 1_700_000_000_000


def record_value(i: int, value_bytes: int) -> bytes:
    return (b"%d-" % i).ljust(value_bytes, b"v")


def write_partition(pdir: Path, records: int, value_bytes: int, batch_records: int, segment_bytes: int, codec: int):
    pdir.mkdir(parents=True)
    offset = 0
    segment_base = 0
    out = open(pdir / f"{segment_base:020d}.log", "wb")  # noqa: SIM115
    size = 0
    while offset < records:
        n = min(batch_records, records - offset)
        batch = build_batch(
            [
                (b"key-%d" % (offset + i), record_value(offset + i, value_bytes), [], BASE_TIMESTAMP_MS + offset + i)
                for i in range(n)
            ],
            base_offset=offset,
            codec=codec,
        )
        if size and size + len(batch) > segment_bytes:
            out.close()
            segment_base = offset
            out = open(pdir / f"{segment_base:020d}.log", "wb")  # noqa: SIM115
            size = 0
        out.write(batch)
        size += len(batch)
        offset += n
    out.close()


def produce_through_broker(bootstrap: str, args) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, args.partitions, 1)]).values():
        future.result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": args.codec,
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    started = time.perf_counter()
    for i in range(args.records):
        while True:
            try:
                producer.produce(
                    TOPIC,
                    record_value(i, args.value_bytes),
                    b"key-%d" % i,
                    partition=i % args.partitions,
                    timestamp=BASE_TIMESTAMP_MS + i,
                )
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300):
        raise RuntimeError("producer did not deliver every record")
    return time.perf_counter() - started


def consume_with_confluent(bootstrap: str, args) -> tuple[float, int, int]:
    """Seconds to read every record with an assigned consumer, records read, value bytes seen."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "spark-read-bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            # librdkafka stops fetching for fetch.queue.backoff.ms (1 s) whenever its
            # queue is full: with a Python loop draining it, the default leaves the
            # consumer idle most of the time (0.18M instead of ~1.4M msg/s here).
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(args.partitions)])
    received = value_bytes = 0
    started = time.perf_counter()
    deadline = time.monotonic() + 600
    while received < args.records and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                received += 1
                value_bytes += len(message.value())
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed, received, value_bytes


def spark_queries(log_dir: str, args, total: int) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_jobs.datasource import PybrokerDataSource

    spark = (
        SparkSession.builder.master(args.master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(PybrokerDataSource)
    df = spark.read.format("pybroker").option("path", log_dir).option("subscribe", TOPIC).load()
    print(f"spark: {df.rdd.getNumPartitions()} input partitions on {args.master}")
    queries = {
        "count()": lambda: df.count(),
        "sum(length(value))": lambda: df.selectExpr("sum(length(value))").collect()[0][0],
        "max(offset), min(timestamp)": lambda: df.selectExpr("max(offset)", "min(timestamp)").collect(),
    }
    for name, query in queries.items():
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            query()
            times.append(time.perf_counter() - started)
        first, best = times[0], min(times[1:] or times)
        print(
            f"spark {name:<28} first {total / first:10,.0f} rows/s   best of the rest {total / best:10,.0f} rows/s"
            f"   ({', '.join(f'{t:.2f}' for t in times)} s)"
        )
    spark.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch-records", type=int, default=1000, help="with --source files")
    parser.add_argument("--segment-mb", type=int, default=16, help="with --source files")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--codec", choices=sorted(CODECS), default="none")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--source", choices=("broker", "files"), default="broker")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        log_dir = Path(tmp) / "logs"
        total = args.records
        if args.source == "files":
            started = time.perf_counter()
            per_partition = args.records // args.partitions
            for p in range(args.partitions):
                write_partition(
                    log_dir / f"{TOPIC}-{p}",
                    per_partition,
                    args.value_bytes,
                    args.batch_records,
                    args.segment_mb << 20,
                    CODECS[args.codec],
                )
            total = per_partition * args.partitions
            print(f"wrote {total} records straight into segments in {time.perf_counter() - started:.1f} s")
            spark_queries(str(log_dir), args, total)
            return 0

        proc, bootstrap = start_broker(log_dir, overrides={"log.segment.bytes": str(args.segment_mb << 20)})
        try:
            produce_s = produce_through_broker(bootstrap, args)
            disk = sum(f.stat().st_size for f in log_dir.rglob("*.log"))
            print(
                f"produced {total} records of {args.value_bytes} B (codec {args.codec}, {disk / 1e6:.1f} MB of "
                f"segments) through the broker in {produce_s:.1f} s"
            )
            consume_s, received, value_bytes = consume_with_confluent(bootstrap, args)
            print(
                f"confluent-kafka consumer: {received / consume_s:10,.0f} rows/s   ({consume_s:.2f} s, "
                f"{received} records, {value_bytes / 1e6:.0f} MB of values)"
            )
            spark_queries(str(log_dir), args, total)
        finally:
            proc.terminate()
            proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
