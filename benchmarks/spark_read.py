"""Rows/s of ``spark.read.format("pybroker")`` over segment files on a local Spark.

    python benchmarks/spark_read.py [--records 1000000] [--value-bytes 100] [--codec none] [--master local[2]]

Writes the segments directly (batches of ``--batch-records`` records built by
protocol.records, rolled every ``--segment-mb``), the way a broker lays them
out, then times a few queries that read every record. Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from protocol.compression import CompressionType
from protocol.records import build_batch

CODECS = {
    "none": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


def write_partition(pdir: Path, records: int, value_bytes: int, batch_records: int, segment_bytes: int, codec: int):
    pdir.mkdir(parents=True)
    t0 = 1_700_000_000_000
    offset = 0
    segment_base = 0
    out = open(pdir / f"{segment_base:020d}.log", "wb")  # noqa: SIM115
    size = 0
    while offset < records:
        n = min(batch_records, records - offset)
        batch = build_batch(
            [
                (b"key-%d" % (offset + i), (b"%d-" % (offset + i)).ljust(value_bytes, b"v"), [], t0 + offset + i)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch-records", type=int, default=1000)
    parser.add_argument("--segment-mb", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--codec", choices=sorted(CODECS), default="none")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_jobs.datasource import PybrokerDataSource

    with tempfile.TemporaryDirectory() as tmp:
        log_dir = Path(tmp)
        started = time.perf_counter()
        per_partition = args.records // args.partitions
        for p in range(args.partitions):
            write_partition(
                log_dir / f"bench-{p}",
                per_partition,
                args.value_bytes,
                args.batch_records,
                args.segment_mb << 20,
                CODECS[args.codec],
            )
        total = per_partition * args.partitions
        disk = sum(f.stat().st_size for f in log_dir.rglob("*.log"))
        print(
            f"wrote {total} records ({disk / 1e6:.1f} MB on disk, codec {args.codec}) "
            f"in {time.perf_counter() - started:.1f}s"
        )

        spark = (
            SparkSession.builder.master(args.master)
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(PybrokerDataSource)
        df = spark.read.format("pybroker").option("path", str(log_dir)).option("subscribe", "bench").load()
        print(f"{df.rdd.getNumPartitions()} input partitions on {args.master}")
        queries = {
            "count()": lambda: df.count(),
            "sum(length(value))": lambda: df.selectExpr("sum(length(value))").collect()[0][0],
            "max(offset), min(timestamp)": lambda: df.selectExpr("max(offset)", "min(timestamp)").collect(),
        }
        for name, query in queries.items():
            for attempt in ("cold", "warm"):
                started = time.perf_counter()
                query()
                elapsed = time.perf_counter() - started
                print(f"{name:<30} {attempt}: {elapsed:6.2f}s  {total / elapsed:12,.0f} rows/s")
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
