"""spark.read.format("pybroker") against the files of a real broker fed by librdkafka.

One broker for the module (small segments, so every partition has many),
one topic per codec with three partitions; the records each test expects are
what the producer was told (partition, offset) for what it sent.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import time

import pytest

from protocol.records import build_batch
from tests.conftest import BrokerProcess, wait_until
from tests.interop._support import create_topic, unique_topic
from tests.spark._support import stopped_log_dir

confluent_kafka = pytest.importorskip("confluent_kafka")

SEGMENT_BYTES = 1024
PARTITIONS = 3
RECORDS_PER_TOPIC = 150
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
T0_MS = 1_700_000_000_000


def produce(bootstrap: str, topic: str, records: list[dict], codec: str = "none", linger_ms: int = 5) -> list[dict]:
    """Produce with confluent-kafka; returns the records with their partition and offset."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": linger_ms,
            "batch.num.messages": 10,
            "enable.idempotence": False,
        }
    )
    delivered: dict[int, tuple[int, int]] = {}
    errors = []

    def on_delivery(err, msg, i):
        if err is not None:
            errors.append(err)
        else:
            delivered[i] = (msg.partition(), msg.offset())

    for i, r in enumerate(records):
        kwargs = {"headers": r["headers"]} if r["headers"] else {}
        producer.produce(
            topic,
            key=r["key"],
            value=r["value"],
            partition=r["partition"],
            timestamp=r["timestamp_ms"],
            on_delivery=lambda err, msg, i=i: on_delivery(err, msg, i),
            **kwargs,
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return [dict(r, partition=delivered[i][0], offset=delivered[i][1]) for i, r in enumerate(records)]


def make_records(count: int, first: int = 0) -> list[dict]:
    records = []
    for i in range(first, first + count):
        headers = [("h1", b"x%d" % i), ("h2", None)] if i % 4 == 1 else []
        records.append(
            {
                "key": None if i % 5 == 0 else b"key-%d" % i,
                "value": b"value-%d-" % i + random.Random(i).randbytes(40 + i % 30),  # incompressible
                "partition": i % PARTITIONS,
                "timestamp_ms": T0_MS + i,
                "headers": headers,
            }
        )
    return records


def as_expected(records: list[dict], topic: str) -> dict:
    return {
        (topic, r["partition"], r["offset"]): (r["key"], r["value"], r["timestamp_ms"] * 1000, 0, r["headers"] or None)
        for r in records
    }


def collect(df) -> dict:
    from pyspark.sql import functions as F

    rows = df.select("*", F.unix_micros("timestamp").alias("ts_us")).collect()
    got = {}
    for row in rows:
        headers = [(h["key"], h["value"]) for h in row["headers"]] if row.asDict().get("headers") else None
        got[(row["topic"], row["partition"], row["offset"])] = (
            row["key"],
            row["value"],
            row["ts_us"],
            row["timestampType"],
            headers,
        )
    assert len(got) == len(rows), "duplicate (topic, partition, offset) rows"
    return got


def read(spark, log_dir, **options):
    reader = spark.read.format("pybroker").option("path", str(log_dir))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A broker's log dir with topics ``<prefix>-<codec>``; yields (broker, log dir, {topic: produced records}).

    The broker is stopped once the records are acknowledged (see ``stopped_log_dir``)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("spark-broker"), {"log.segment.bytes": str(SEGMENT_BYTES)}).start()
    try:
        prefix = unique_topic("spark")
        produced = {}
        for codec in CODECS:
            topic = f"{prefix}-{codec}"
            create_topic(broker.bootstrap, topic, PARTITIONS)
            produced[topic] = produce(broker.bootstrap, topic, make_records(RECORDS_PER_TOPIC), codec)
        yield broker, stopped_log_dir(broker), produced
    finally:
        broker.stop()


def test_schema_is_the_kafka_sources(spark, cluster):
    _, log_dir, produced = cluster
    topic = next(iter(produced))
    assert read(spark, log_dir, subscribe=topic).schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int>"
    )
    assert (
        read(spark, log_dir, subscribe=topic, includeHeaders="true")
        .schema.simpleString()
        .endswith(",headers:array<struct<key:string,value:binary>>>")
    )


def test_every_codec_reads_back_record_for_record(spark, cluster):
    _, log_dir, produced = cluster
    segments = list((log_dir / f"{next(iter(produced))}-0").glob("*.log"))
    assert len(segments) >= 3, f"log.segment.bytes={SEGMENT_BYTES} should make several segments"
    for topic, records in produced.items():
        df = read(spark, log_dir, subscribe=topic, includeHeaders="true")
        assert df.rdd.getNumPartitions() >= PARTITIONS
        assert collect(df) == as_expected(records, topic), topic


def test_subscribe_several_topics_and_pattern(spark, cluster):
    _, log_dir, produced = cluster
    topics = sorted(produced)
    expected = {}
    for topic in topics[:2]:
        expected.update(as_expected(produced[topic], topic))
    got = collect(read(spark, log_dir, subscribe=",".join(topics[:2]), includeHeaders="true"))
    assert got == expected
    prefix = topics[0].rsplit("-", 1)[0]
    pattern_df = read(spark, log_dir, subscribePattern=f"{prefix}-(gzip|zstd)")
    assert {row["topic"] for row in pattern_df.select("topic").distinct().collect()} == {
        f"{prefix}-gzip",
        f"{prefix}-zstd",
    }
    assert pattern_df.count() == 2 * RECORDS_PER_TOPIC


def test_assign_and_offset_ranges(spark, cluster):
    _, log_dir, produced = cluster
    topic = min(produced)
    expected = as_expected(produced[topic], topic)
    # without headers the headers column is absent
    expected = {k: v[:4] + (None,) for k, v in expected.items()}
    got = collect(read(spark, log_dir, assign=json.dumps({topic: [1, 2]})))
    assert got == {k: v for k, v in expected.items() if k[1] in (1, 2)}
    starting = json.dumps({topic: {"0": 7, "1": -2}})
    ending = json.dumps({topic: {"0": 31, "1": 20, "2": -1}})
    got = collect(read(spark, log_dir, subscribe=topic, startingOffsets=starting, endingOffsets=ending))
    want = {
        k: v for k, v in expected.items() if (k[1] == 0 and 7 <= k[2] < 31) or (k[1] == 1 and k[2] < 20) or k[1] == 2
    }
    assert got == want
    assert read(spark, log_dir, subscribe=topic, startingOffsets="earliest").count() == len(expected)
    assert (
        read(spark, log_dir, subscribe=topic, endingOffsets=json.dumps({topic: {"0": 0, "1": 0, "2": 0}})).count() == 0
    )


def test_missing_or_conflicting_options_are_errors(spark, cluster):
    _, log_dir, produced = cluster
    topic = next(iter(produced))
    with pytest.raises(Exception, match="Exactly one of the options"):
        read(spark, log_dir).collect()
    with pytest.raises(Exception, match="Exactly one of the options"):
        read(spark, log_dir, subscribe=topic, subscribePattern=".*").collect()
    with pytest.raises(Exception, match='option "path" is required'):
        spark.read.format("pybroker").option("subscribe", topic).load().collect()
    with pytest.raises(Exception, match="startingOffsets"):
        read(spark, log_dir, subscribe=topic, startingOffsets="somewhere").collect()


def test_reading_while_a_producer_appends_sees_a_prefix(spark, broker_factory):
    broker = broker_factory({"log.segment.bytes": str(16 * SEGMENT_BYTES)})
    log_dir = broker.data_dir / "logs"
    topic = unique_topic("spark-live")
    create_topic(broker.bootstrap, topic, 1)
    stop = threading.Event()
    produced: list[dict] = []

    def keep_producing():
        n = 0
        while not stop.is_set() and n < 5000:  # bounded: a read costs a Spark task per segment
            batch = [dict(r, partition=0) for r in make_records(50, n)]
            produced.extend(produce(broker.bootstrap, topic, batch, "lz4", linger_ms=1))
            n += 50
            time.sleep(0.1)

    thread = threading.Thread(target=keep_producing, daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: len(produced) >= 100, timeout_s=20)
        counts, alive = [], []
        for _ in range(3):
            # The live high watermark: the checkpointed one may lag the appends by seconds.
            live = {"kafka.bootstrap.servers": broker.bootstrap}
            got = collect(read(spark, log_dir, subscribe=topic, includeHeaders="true", **live))
            offsets = sorted(k[2] for k in got)
            assert offsets == list(range(len(offsets))), "not a prefix of the log"
            counts.append(len(offsets))
            alive.append(thread.is_alive())
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(30)
    expected = as_expected(produced, topic)
    assert all(got[k] == expected[k] for k in got)
    assert counts[-1] >= 100 and counts == sorted(counts)
    assert alive[0], "the producer stopped before the first read: nothing was read during appends"


def test_a_torn_batch_at_the_end_is_not_read(spark, cluster, tmp_path):
    _, log_dir, produced = cluster
    topic = min(produced)
    copy = tmp_path / "logs"
    shutil.copytree(log_dir / f"{topic}-0", copy / f"{topic}-0")
    newest = max((copy / f"{topic}-0").glob("*.log"))
    whole = newest.read_bytes()
    next_offset = max(r["offset"] for r in produced[topic] if r["partition"] == 0) + 1
    batch = build_batch([(b"k", b"torn", [], T0_MS)], base_offset=next_offset)
    for cut in (5, 30, len(batch) - 1):
        newest.write_bytes(whole + batch[:cut])
        got = collect(read(spark, copy, subscribe=topic))
        assert max(k[2] for k in got) == next_offset - 1
        assert len(got) == len([r for r in produced[topic] if r["partition"] == 0])
    newest.write_bytes(whole + batch)
    assert max(k[2] for k in collect(read(spark, copy, subscribe=topic))) == next_offset


def test_a_start_below_the_earliest_offset_fails_unless_fail_on_data_loss_is_false(spark, cluster, tmp_path):
    _, log_dir, produced = cluster
    topic = min(produced)
    copy = tmp_path / "logs"
    shutil.copytree(log_dir / f"{topic}-0", copy / f"{topic}-0")
    oldest = min((copy / f"{topic}-0").glob("*.log"))
    oldest.unlink()  # as retention would
    earliest = int(min((copy / f"{topic}-0").glob("*.log")).stem)
    starting = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, copy, subscribe=topic, startingOffsets=starting).collect()
    got = collect(read(spark, copy, subscribe=topic, startingOffsets=starting, failOnDataLoss="false"))
    assert min(k[2] for k in got) == earliest
    assert min(k[2] for k in collect(read(spark, copy, subscribe=topic))) == earliest


def without_headers(expected: dict) -> dict:
    return {k: v[:4] + (None,) for k, v in expected.items()}


def test_starting_and_ending_timestamps(spark, cluster):
    _, log_dir, produced = cluster
    topic = min(produced)
    expected = without_headers(as_expected(produced[topic], topic))
    # Each partition's timestamps grow with its offsets (T0_MS + record number).
    got = collect(
        read(
            spark,
            log_dir,
            subscribe=topic,
            startingOffsets="earliest",  # startingTimestamp takes precedence
            startingTimestamp=str(T0_MS + 30),
            endingTimestamp=str(T0_MS + 90),
        )
    )
    assert got == {k: v for k, v in expected.items() if (T0_MS + 30) * 1000 <= v[2] < (T0_MS + 90) * 1000}
    # an ending timestamp no record reaches means latest
    got = collect(read(spark, log_dir, subscribe=topic, startingTimestamp=str(T0_MS + 140), endingTimestamp="9" * 15))
    assert got == {k: v for k, v in expected.items() if v[2] >= (T0_MS + 140) * 1000}


def test_offsets_by_timestamp_and_the_no_match_strategy(spark, cluster):
    _, log_dir, produced = cluster
    topic = min(produced)
    expected = without_headers(as_expected(produced[topic], topic))
    too_late = T0_MS + 10_000  # after every record
    starting = json.dumps({topic: {"0": T0_MS + 30, "1": too_late}})
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        read(spark, log_dir, subscribe=topic, startingOffsetsByTimestamp=starting).collect()
    got = collect(
        read(
            spark,
            log_dir,
            subscribe=topic,
            startingOffsetsByTimestamp=starting,
            startingOffsetsByTimestampStrategy="latest",  # partition 1 starts at its end: nothing
            startingOffsets=json.dumps({topic: {"0": 0, "2": 20}}),  # partition 2 is not in the JSON
            endingOffsetsByTimestamp=json.dumps({topic: {"0": T0_MS + 90, "2": too_late}}),
        )
    )
    want = {
        k: v
        for k, v in expected.items()
        if (k[1] == 0 and (T0_MS + 30) * 1000 <= v[2] < (T0_MS + 90) * 1000) or (k[1] == 2 and k[2] >= 20)
    }
    assert got == want
    from spark_jobs.datasource import PybrokerReader

    # The timestamp decides, so startingOffsets=latest is not judged (as in Spark).
    PybrokerReader({"path": str(log_dir), "subscribe": topic, "startingoffsets": "latest", "startingtimestamp": "0"})
    with pytest.raises(ValueError, match="startingTimestamp must be a timestamp"):
        PybrokerReader({"path": str(log_dir), "subscribe": topic, "startingtimestamp": "yesterday"})
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy must be one of"):
        read(spark, log_dir, subscribe=topic, startingTimestamp="0", startingOffsetsByTimestampStrategy="x").collect()


def test_min_partitions_splits_the_largest_pieces(spark, cluster):
    _, log_dir, produced = cluster
    topic = min(produced)
    pieces = read(spark, log_dir, subscribe=topic).rdd.getNumPartitions()  # one per segment
    df = read(spark, log_dir, subscribe=topic, minPartitions=str(pieces + 4))
    assert df.rdd.getNumPartitions() == pieces + 4
    assert collect(df) == without_headers(as_expected(produced[topic], topic))


def test_a_large_segment_is_split_and_each_record_read_once(spark, tmp_path):
    """One 100-batch segment with an ``.index`` entry per batch, read whole and cut."""
    from storage.index import OFFSET_ENTRY

    pdir = tmp_path / "logs" / "big-0"
    pdir.mkdir(parents=True)
    data, index = bytearray(), bytearray()
    for first in range(0, 2000, 20):
        if data:
            index += OFFSET_ENTRY.pack(first + 19, len(data))  # the batch's last offset -> its position
        data += build_batch(
            [(b"k%d" % o, b"v%d" % o, [], T0_MS + o) for o in range(first, first + 20)], base_offset=first
        )
    (pdir / f"{0:020d}.log").write_bytes(bytes(data))
    (pdir / f"{0:020d}.index").write_bytes(bytes(index))
    whole = read(spark, tmp_path / "logs", subscribe="big")
    assert whole.rdd.getNumPartitions() == 1
    expected = collect(whole)
    assert sorted(k[2] for k in expected) == list(range(2000))
    by_bytes = read(spark, tmp_path / "logs", subscribe="big", maxBytesPerPartition=str(len(data) // 8))
    assert by_bytes.rdd.getNumPartitions() == 8
    assert collect(by_bytes) == expected  # collect() fails on a duplicate (topic, partition, offset)
    by_records = read(spark, tmp_path / "logs", subscribe="big", maxRecordsPerPartition="300")
    assert by_records.rdd.getNumPartitions() == 7
    assert collect(by_records) == expected
    with pytest.raises(Exception, match="maxBytesPerPartition must be a positive integer"):
        read(spark, tmp_path / "logs", subscribe="big", maxBytesPerPartition="0").collect()


def test_read_committed_leaves_out_aborted_and_open_transactions(spark, tmp_path):
    from protocol.records import ControlType, build_control_batch

    def transactional(first: int, count: int, producer_id: int) -> bytes:
        records = [(b"k", b"v%d" % o, [], T0_MS + o) for o in range(first, first + count)]
        return build_batch(records, base_offset=first, producer_id=producer_id, producer_epoch=0, is_transactional=True)

    def marker(offset: int, producer_id: int, control_type: int) -> bytes:
        return build_control_batch(
            control_type,
            base_offset=offset,
            producer_id=producer_id,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=T0_MS,
        )

    # 0-1 P1 | 2 plain | 3 P2 | 4 ABORT P1 | 5 COMMIT P2 | 6 P3 (still open) | 7 plain
    pdir = tmp_path / "logs" / "txn-0"
    pdir.mkdir(parents=True)
    (pdir / f"{0:020d}.log").write_bytes(
        transactional(0, 2, 1)
        + build_batch([(b"k", b"v2", [], T0_MS)], base_offset=2)
        + transactional(3, 1, 2)
        + marker(4, 1, ControlType.ABORT)
        + marker(5, 2, ControlType.COMMIT)
        + transactional(6, 1, 3)
        + build_batch([(b"k", b"v7", [], T0_MS)], base_offset=7)
    )

    def offsets(**options) -> list[int]:
        return sorted(row["offset"] for row in read(spark, tmp_path / "logs", subscribe="txn", **options).collect())

    assert offsets() == [0, 1, 2, 3, 6, 7]  # read_uncommitted: everything but the markers
    assert offsets(isolationLevel="read_committed") == [2, 3]  # P1 aborted; nothing from P3's open one on
    assert offsets(**{"kafka.isolation.level": "read_committed"}) == [2, 3]
    with pytest.raises(Exception, match="isolationLevel must be one of"):
        offsets(isolationLevel="serializable")
