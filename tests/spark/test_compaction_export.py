"""compaction_preview and export against values computed here from what was produced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from datetime import UTC, date, datetime
from functools import partial
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT
from tests.interop._support import create_topic, unique_topic
from tests.spark._support import stopped_log_dir

DAY_MS = 86_400_000
MIDNIGHT_MS = 1_700_000_000_000 - 1_700_000_000_000 % DAY_MS + DAY_MS  # a UTC midnight
SEGMENT_BYTES = 1024
FLUSH_EVERY_RECORDS = 8  # small batches, so the small segments roll often


def produce_scenario(bootstrap: str) -> tuple[str, str, dict[tuple[str, int, int], tuple]]:
    """A keyed topic (3 partitions, repeated keys, tombstones) and a plain one (2 partitions,
    null keys among keyed records), timestamps from 45 minutes before a UTC midnight to 45
    after. Returns both names and {(topic, partition, offset): (key, value, timestamp_ms, headers)}
    with the offsets the broker acknowledged."""
    from confluent_kafka import Producer

    keyed_topic, plain_topic = unique_topic("compact"), unique_topic("plain")
    create_topic(bootstrap, keyed_topic, partitions=3)
    create_topic(bootstrap, plain_topic, partitions=2)
    to_send = []
    for i in range(90):
        value = None if i % 11 == 5 else b"v%d-" % i + b"x" * (i % 17)
        to_send.append((keyed_topic, i % 3, b"k%d" % (i % 8), value, MIDNIGHT_MS - 45 * 60_000 + i * 60_000))
    for i in range(40):
        key = None if i % 4 == 0 else b"p%d" % (i % 5)
        value = None if i % 13 == 0 else b"w" * (i % 9)
        to_send.append((plain_topic, i % 2, key, value, MIDNIGHT_MS - 45 * 60_000 + i * 135_000))

    produced = {}
    errors = []

    def delivered(headers, err, msg) -> None:
        # The delivery report carries no headers: the ones sent come in bound.
        if err is not None:
            errors.append(err)
            return
        produced[(msg.topic(), msg.partition(), msg.offset())] = (msg.key(), msg.value(), msg.timestamp()[1], headers)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for n, (topic, partition, key, value, timestamp_ms) in enumerate(to_send, 1):
        headers = (("n", b"%d" % n),) if n % 3 == 0 else ()
        producer.produce(
            topic,
            key=key,
            value=value,
            partition=partition,
            timestamp=timestamp_ms,
            headers=list(headers) or None,
            on_delivery=partial(delivered, headers),
        )
        if n % FLUSH_EVERY_RECORDS == 0:
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0
    assert not errors and len(produced) == len(to_send)
    return keyed_topic, plain_topic, produced


def in_offset_order(produced):
    return sorted(produced.items())


def millis(value: datetime) -> int:
    """Epoch milliseconds of a timestamp Spark returned in the (UTC) test session."""
    return round(value.replace(tzinfo=UTC).timestamp() * 1000)


def utc_date_of(timestamp_ms: int) -> date:
    return datetime.fromtimestamp(timestamp_ms / 1000, UTC).date()


def start_with_data(broker_factory):
    broker = broker_factory({"log.segment.bytes": str(SEGMENT_BYTES)})
    keyed_topic, plain_topic, produced = produce_scenario(broker.bootstrap)
    log_dir = stopped_log_dir(broker)
    assert len(list((log_dir / f"{keyed_topic}-0").glob("*.log"))) >= 2, "expected several segments"
    return log_dir, keyed_topic, plain_topic, produced


def test_latest_per_key_and_compaction_preview(spark, broker_factory):
    from spark_jobs.compaction_preview import compaction_preview, latest_per_key
    from spark_jobs.session import read_topics

    log_dir, keyed_topic, plain_topic, produced = start_with_data(broker_factory)
    # Cached: the two jobs below then read the segments once.
    records = read_topics(spark, str(log_dir), f"{keyed_topic},{plain_topic}").cache()

    latest = {}  # (topic, partition, key) -> (offset, value, timestamp_ms): later offsets overwrite
    for (topic, partition, offset), (key, value, timestamp_ms, _) in in_offset_order(produced):
        if key is not None:
            latest[(topic, partition, key)] = (offset, value, timestamp_ms)
    got = {
        (row.topic, row.partition, bytes(row.key)): (
            row.offset,
            None if row.value is None else bytes(row.value),
            millis(row.timestamp),
        )
        for row in latest_per_key(records).collect()
    }
    assert got == latest
    assert any(value is None for _, value, _ in latest.values()), "some key should end in a tombstone"

    expected = defaultdict(Counter)
    for (topic, partition, offset), (key, value, _, _) in produced.items():
        counts = expected[(topic, partition)]
        size = len(key or b"") + len(value or b"")
        counts["records"] += 1
        if key is None:
            counts["keyless_records"] += 1
            continue
        counts["keyed_records"] += 1
        counts["bytes_now"] += size
        latest_offset, latest_value, _ = latest[(topic, partition, key)]
        if offset != latest_offset:
            counts["removable_records"] += 1
            counts["reclaimable_bytes"] += size
        elif latest_value is None:
            counts["tombstones"] += 1
    for topic, partition, _ in latest:
        expected[(topic, partition)]["distinct_keys"] += 1
    assert sum(c["keyless_records"] for c in expected.values()) > 0
    removable_tombstones = sum(
        1
        for (topic, partition, offset), (key, value, _, _) in produced.items()
        if key is not None and value is None and latest[(topic, partition, key)][0] != offset
    )
    assert removable_tombstones > 0, "some tombstone should be superseded by a later record"

    rows = compaction_preview(records).collect()
    records.unpersist()
    assert [(r.topic, r.partition) for r in rows] == sorted(expected)
    for row in rows:
        e = expected[(row.topic, row.partition)]
        assert (
            row.records,
            row.keyless_records,
            row.keyed_records,
            row.distinct_keys,
            row.removable_records,
            row.tombstones,
            row.removable_after_tombstones_expire,
            row.bytes_now,
            row.bytes_after_compaction,
            row.reclaimable_bytes,
        ) == (
            e["records"],
            e["keyless_records"],
            e["keyed_records"],
            e["distinct_keys"],
            e["removable_records"],
            e["tombstones"],
            e["removable_records"] + e["tombstones"],
            e["bytes_now"],
            e["bytes_now"] - e["reclaimable_bytes"],
            e["reclaimable_bytes"],
        ), (row.topic, row.partition)
        assert row.reclaimable_ratio == pytest.approx(e["reclaimable_bytes"] / e["bytes_now"])


def read_export(output: Path) -> dict[tuple[str, int, int], tuple]:
    """{(topic, partition, offset): (key, value, timestamp_ms, headers or None, date directory)}."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    exported = {}
    for directory in sorted(output.glob("date=*")):
        table = pq.read_table(directory)
        timestamp_type = table.schema.field("timestamp").type
        timestamps_ms = table.column("timestamp").cast(pa.timestamp("ms", tz=timestamp_type.tz)).cast(pa.int64())
        columns = table.to_pydict()
        headers = columns.get("headers", [None] * table.num_rows)
        for i in range(table.num_rows):
            header_pairs = None if headers[i] is None else tuple((h["key"], h["value"]) for h in headers[i])
            exported[(columns["topic"][i], columns["partition"][i], columns["offset"][i])] = (
                columns["key"][i],
                columns["value"][i],
                timestamps_ms[i].as_py(),
                header_pairs,
                directory.name,
            )
    return exported


def expected_export(produced, starting: dict, ending: dict, topics: set[str], with_headers: bool):
    """The produced records in [starting, ending) per partition (missing: earliest/latest)."""
    expected = {}
    for (topic, partition, offset), (key, value, timestamp_ms, headers) in produced.items():
        start = starting.get(topic, {}).get(str(partition), -2)
        end = ending.get(topic, {}).get(str(partition), -1)
        if topic in topics and offset >= max(start, 0) and (end == -1 or offset < end):
            header_pairs = (headers or None) if with_headers else None
            expected[(topic, partition, offset)] = (
                key,
                value,
                timestamp_ms,
                header_pairs,
                f"date={utc_date_of(timestamp_ms).isoformat()}",
            )
    return expected


def test_export_partitions_by_utc_date_whatever_the_session_time_zone(spark, broker_factory, tmp_path):
    from pyspark.errors import AnalysisException
    from pyspark.sql.types import DateType

    from spark_jobs.export import export_records, with_date
    from spark_jobs.session import read_topics

    log_dir, keyed_topic, plain_topic, produced = start_with_data(broker_factory)
    starting = {keyed_topic: {"0": 3, "1": -2, "2": 10}}
    ending = {keyed_topic: {"0": 25, "1": -1, "2": 20}}
    output = tmp_path / "export"

    previous_zone = spark.conf.get("spark.sql.session.timeZone")
    # UTC+14: every record here falls on the later local date, so a local-time date would show.
    spark.conf.set("spark.sql.session.timeZone", "Pacific/Kiritimati")
    try:
        per_date = export_records(
            spark,
            str(log_dir),
            str(output),
            topics=keyed_topic,
            starting_offsets=json.dumps(starting),
            ending_offsets=json.dumps(ending),
        )
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous_zone)

    expected = expected_export(produced, starting, ending, {keyed_topic}, with_headers=False)
    exported = read_export(output)
    assert exported == expected
    expected_dirs = sorted({entry[-1] for entry in expected.values()})
    assert len(expected_dirs) == 2
    assert sorted(p.name for p in output.iterdir() if p.is_dir()) == expected_dirs
    dates = Counter(utc_date_of(entry[2]) for entry in expected.values())
    assert per_date == sorted(dates.items())

    dated = with_date(read_topics(spark, str(log_dir), plain_topic))
    assert dated.schema["date"].dataType == DateType()
    assert dated.columns[-1] == "date"
    # Neither mode below runs a job: ignore finds the directory, errorifexists fails on it.
    assert export_records(spark, str(log_dir), str(output), topics=plain_topic, mode="ignore") is None
    with pytest.raises(AnalysisException):
        export_records(spark, str(log_dir), str(output), topics=plain_topic, mode="errorifexists")
    assert read_export(output) == expected


def test_export_runs_as_a_module(broker_factory, tmp_path):
    log_dir, keyed_topic, plain_topic, produced = start_with_data(broker_factory)
    starting = {plain_topic: {"0": 4}, keyed_topic: {"1": 7}}
    ending = {plain_topic: {"1": 15}, keyed_topic: {"2": 12}}
    output = tmp_path / "export"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_jobs.export",
            "--path",
            str(log_dir),
            "--topics",
            f"{keyed_topic},{plain_topic}",
            "--output",
            str(output),
            "--starting-offsets",
            json.dumps(starting),
            "--ending-offsets",
            json.dumps(ending),
            "--include-headers",
            "--mode",
            "overwrite",
            "--master",
            "local[1]",
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env=env,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]

    expected = expected_export(produced, starting, ending, {keyed_topic, plain_topic}, with_headers=True)
    assert read_export(output) == expected
    dates = Counter(utc_date_of(entry[2]) for entry in expected.values())
    assert len(dates) == 2
    printed = result.stdout.splitlines()
    assert printed[:2] == [f"{day.isoformat()}\t{count}" for day, count in sorted(dates.items())]
    assert printed[2] == f"{len(expected)} records written to {output}"
