"""A consumer group of a multi-master topic moves to another cluster after a
failover and resumes at its translated place (broker/links/group_translation.py).

Two pybroker processes A and B (origins 1 and 2), a 2-partition topic written
in both at once by idempotent confluent-kafka producers, links both ways
copying it and syncing the offsets of one group. The group consumes part of
the topic on A and commits; then A is stopped, as when its site is lost, and
the group's consumer on B reads from the synced offsets:

- every record reaches the group: what it consumed on A and on B together is
  every record written (nothing skipped);
- the synced offset of each partition on B is exactly the first batch there
  holding a record the group had not consumed on A;
- the records it gets again are those of batches it had consumed whole on A
  that B holds after that place, as many as the broker reports;
- the link from B back to A never moves the group's offsets on A (a place
  translated from a translation is never ahead).
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from protocol.records import decode_records, iter_batches
from tests.interop._support import create_topic, list_offset, unique_topic
from tests.interop.test_metrics import metrics_port, scrape
from tests.links._mirror_support import raw_log
from tests.links.test_multi_master_ring import create_multi_master_link, record_count, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition

PARTITIONS = 2  # as the ring's helpers count
RECORDS_PER_CLUSTER = 200
CONSUMED_ON_A = 230
WAIT_S = 60
LATEST = -1


def write(bootstrap: str, topic: str, cluster: str, failures: list) -> None:
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2, "batch.num.messages": 5})
        for i in range(RECORDS_PER_CLUSTER):
            producer.produce(topic, value=f"{cluster}-{i}".encode(), partition=i % PARTITIONS)
            if i % 20 == 0:
                producer.poll(0.01)
        if producer.flush(WAIT_S):
            failures.append(f"{cluster}: records left undelivered")
    except Exception as exc:  # noqa: BLE001 - reported by the test
        failures.append(f"{cluster}: {exc!r}")


def batches(bootstrap: str, topic: str, partition: int) -> list[tuple[int, list[str]]]:
    """(base offset, record values) of each data batch of the partition."""
    data, _ = raw_log(bootstrap, topic, partition)
    out = []
    for position, size, header in iter_batches(data):
        if not header.is_control:
            out.append((header.base_offset, [r.value.decode() for r in decode_records(data[position : position + size])]))
    return out


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def consume(bootstrap: str, group: str, topic: str, count: int | None, idle_s: float = 3.0) -> list[tuple[int, int, str]]:
    """(partition, offset, value) consumed by ``group`` (``count`` records, or until idle), committed at the end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    got: list[tuple[int, int, str]] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        last_s = time.monotonic()
        while time.monotonic() < deadline and (count is None or len(got) < count):
            messages = consumer.consume(1 if count is not None else 100, 0.5)
            for message in messages:
                if message.error() is None:
                    got.append((message.partition(), message.offset(), message.value().decode()))
                    last_s = time.monotonic()
            if count is None and got and time.monotonic() - last_s > idle_s:
                break
        if got:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def translation_metrics(broker, group: str, topic: str) -> dict[int, dict[str, float]]:
    found: dict[int, dict[str, float]] = {}
    for (name, labels), value in scrape(metrics_port(broker)).items():
        labels = dict(labels)
        if name.startswith("pybroker_multi_master_group_") and labels.get("group") == group and labels.get("topic") == topic:
            found.setdefault(int(labels["partition"]), {})[name.removeprefix("pybroker_multi_master_group_")] = value
    return found


def test_a_group_resumes_on_another_cluster_at_its_translated_place(broker_factory):
    topic, group = unique_topic("mm-groups"), f"mm-group-{uuid.uuid4().hex[:6]}"
    a = broker_factory({"cluster.link.origin.id": "1", "metrics.listener": "http://127.0.0.1:0"})
    b = broker_factory({"cluster.link.origin.id": "2", "metrics.listener": "http://127.0.0.1:0"})
    for broker in (a, b):
        create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    filters = json.dumps({"groupFilters": [{"name": group, "patternType": "LITERAL", "filterType": "INCLUDE"}]})
    for here, there, name in ((b, a, "from-a"), (a, b, "from-b")):
        create_multi_master_link(
            here.bootstrap,
            name,
            there.bootstrap,
            topic,
            {"consumer.offset.sync.enable": "true", "consumer.offset.sync.ms": "500", "consumer.offset.group.filters": filters},
        )
    failures: list[str] = []
    writers = [threading.Thread(target=write, args=(broker.bootstrap, topic, name, failures)) for name, broker in (("A", a), ("B", b))]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join(WAIT_S + 30)
    assert not failures, failures
    total = 2 * RECORDS_PER_CLUSTER
    assert wait_until(lambda: record_count(a.bootstrap, topic) == total and record_count(b.bootstrap, topic) == total)

    on_a = consume(a.bootstrap, group, topic, CONSUMED_ON_A)
    assert len(on_a) == CONSUMED_ON_A
    committed_on_a = committed(a.bootstrap, group, topic)
    assert committed_on_a

    # The place on B: the first batch holding a record the group did not consume on A.
    consumed_values = {value for _, _, value in on_a}
    expected_place, expected_again = {}, {}
    for p in range(PARTITIONS):
        place, again = None, 0
        for base_offset, values in batches(b.bootstrap, topic, p):
            whole = all(v in consumed_values for v in values)
            if place is None and not whole:
                place = base_offset
            elif place is not None and whole:
                again += len(values)
        expected_place[p] = place if place is not None else list_offset(b.bootstrap, topic, p, LATEST).offset
        expected_again[p] = again
    synced = wait_until(lambda: (c := committed(b.bootstrap, group, topic)) == expected_place and c)
    assert synced == expected_place, (committed(b.bootstrap, group, topic), expected_place)
    reported = translation_metrics(b, group, topic)
    for p in range(PARTITIONS):
        assert reported[p]["offset"] == expected_place[p], reported
        assert reported[p]["again_counted"] == 1, reported
        assert reported[p]["again_records"] == expected_again[p], (reported, expected_again)
    # A few rounds of the link from B to A: the group's offsets on A stay as the group committed them.
    time.sleep(2)
    assert committed(a.bootstrap, group, topic) == committed_on_a

    # A is lost; the group goes on on B.
    a.stop()
    on_b = consume(b.bootstrap, group, topic, None)
    everything = {f"{c}-{i}" for c in "AB" for i in range(RECORDS_PER_CLUSTER)}
    assert consumed_values | {value for _, _, value in on_b} == everything, "records skipped by the move"
    for p in range(PARTITIONS):
        offsets = sorted(o for q, o, _ in on_b if q == p)
        end = list_offset(b.bootstrap, topic, p, LATEST).offset
        assert offsets == list(range(expected_place[p], end)), f"partition {p}: not read from the synced offset on"
    again_values = [value for _, _, value in on_b if value in consumed_values]
    partly = sum(1 for v in again_values) - sum(expected_again.values())
    # Besides the batches consumed whole, at most the one batch per partition
    # the group had consumed in part comes again.
    assert 0 <= partly <= PARTITIONS * 5, (len(again_values), expected_again)
