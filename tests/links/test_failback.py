"""Failback end to end: A is the source, B mirrors A's topic; A dies (SIGKILL),
B's mirror is failed over and takes writes; A comes back holding records B
never got; ``pybroker mirrors --failback`` on A (over a link A -> B) cuts A's
topic back to where B stopped, reports what it removed, and makes it a mirror
of B, byte for byte."""

from __future__ import annotations

import json

import pytest

from protocol.errors import ErrorCode
from protocol.records import build_batch
from tests.interop._support import create_topic, list_offset, produce_raw, unique_topic
from tests.links._mirror_support import WAIT_S, raw_log
from tests.links.test_links_control import pybroker
from tests.links.test_mirror_topics import (
    STATE_ACTIVE,
    STATE_FAILED_OVER,
    advertises_cluster_links,
    create_link,
    create_mirror_of,
    describe_mirror,
    failover,
    wait_until,
)

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 2
LATEST = -1


def produce(bootstrap: str, topic: str, values_by_partition: dict[int, list[bytes]]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors = []
    for partition, values in values_by_partition.items():
        for value in values:
            producer.produce(topic, value=value, partition=partition, on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(WAIT_S) == 0
    assert not errors, errors


def log_ends(bootstrap: str, topic: str) -> dict[int, int]:
    return {p: list_offset(bootstrap, topic, p, LATEST).offset for p in range(PARTITIONS)}


def same_logs(a: str, b: str, topic: str) -> bool:
    return all(raw_log(a, topic, p) == raw_log(b, topic, p) for p in range(PARTITIONS))


def failback(bootstrap: str, topic: str, link: str, *extra: str, check: bool = True):
    return pybroker("mirrors", "--bootstrap-server", bootstrap, "--failback", "--mirror-topic", topic, "--link", link,
                    *extra, check=check)


def test_failback_cuts_the_old_source_back_reports_it_and_mirrors_the_new_primary(broker_factory):
    a = broker_factory()
    if not advertises_cluster_links(a.bootstrap):
        pytest.skip("the broker does not offer cluster links")
    b = broker_factory()
    topic = unique_topic("failback")
    create_topic(a.bootstrap, topic, partitions=PARTITIONS)
    produce(a.bootstrap, topic, {p: [f"a-{p}-{i}".encode() for i in range(50)] for p in range(PARTITIONS)})
    create_link(b.bootstrap, "from-a", a.bootstrap)
    create_mirror_of(b.bootstrap, topic, "from-a", PARTITIONS)
    assert wait_until(lambda: log_ends(b.bootstrap, topic) == {0: 50, 1: 50}), log_ends(b.bootstrap, topic)

    # A dies; B's mirror is failed over and takes writes of its own.
    a.kill()
    failover(b.bootstrap, topic)
    assert wait_until(lambda: describe_mirror(b.bootstrap, topic).state == STATE_FAILED_OVER), b.log_text()[-3000:]
    produce(b.bootstrap, topic, {p: [f"b-{p}-{i}".encode() for i in range(10)] for p in range(PARTITIONS)})

    # A comes back: its topic is still an ordinary topic, written past the failover point.
    a = broker_factory(data_dir=a.data_dir)
    produce(a.bootstrap, topic, {0: [f"a-late-{i}".encode() for i in range(7)]})
    assert log_ends(a.bootstrap, topic) == {0: 57, 1: 50}

    create_link(a.bootstrap, "to-b", b.bootstrap)
    # A topic of a non-mirror on B is refused, saying why.
    other = unique_topic("plain")
    create_topic(a.bootstrap, other, partitions=PARTITIONS)
    create_topic(b.bootstrap, other, partitions=PARTITIONS)
    refused = failback(a.bootstrap, other, "to-b", check=False)
    assert refused.returncode == 1 and "not a mirror topic" in refused.stderr, refused.stderr

    # The dry run reports and changes nothing.
    dry = failback(a.bootstrap, topic, "to-b", "--dry-run")
    assert "Dry run" in dry.stdout and "Total records to remove: 7" in dry.stdout, dry.stdout
    assert "\tPartition: 0\tStopOffset: 50\tLogEndOffset: 57\tRecordsToRemove: 7" in dry.stdout, dry.stdout
    assert log_ends(a.bootstrap, topic) == {0: 57, 1: 50}
    assert produce_raw(a.bootstrap, topic, build_batch([(None, b"still-writable")]), 1).error_code == ErrorCode.NONE
    # (that write is A's own too: partition 1 now holds one record past B's stop offset)

    done = failback(a.bootstrap, topic, "to-b", "--output", "json")
    report = json.loads(done.stdout)
    assert report["dry_run"] is False and report["records_removed"] == 8, report
    assert [(p["partition"], p["stop_offset"], p["log_end_offset"], p["records_removed"]) for p in report["partitions"]] == [
        (0, 50, 57, 7), (1, 50, 51, 1),
    ]
    # A's topic becomes B's, byte for byte, and read-only.
    assert wait_until(lambda: log_ends(a.bootstrap, topic) == {0: 60, 1: 60}), (log_ends(a.bootstrap, topic), a.log_text()[-3000:])
    assert same_logs(a.bootstrap, b.bootstrap, topic)
    described = describe_mirror(a.bootstrap, topic)
    assert (described.state, described.link_name, described.source_topic) == (STATE_ACTIVE, "to-b", topic)
    refused_write = produce_raw(a.bootstrap, topic, build_batch([(None, b"no")]), 0)
    assert refused_write.error_code == ErrorCode.INVALID_REQUEST
    # B's further writes reach A.
    produce(b.bootstrap, topic, {p: [f"b-more-{p}-{i}".encode() for i in range(5)] for p in range(PARTITIONS)})
    assert wait_until(lambda: log_ends(a.bootstrap, topic) == {0: 65, 1: 65}), log_ends(a.bootstrap, topic)
    assert same_logs(a.bootstrap, b.bootstrap, topic)
    # A restart of A keeps the copied records (the cut is made once).
    a.stop()
    a = broker_factory(data_dir=a.data_dir)
    assert wait_until(lambda: log_ends(a.bootstrap, topic) == {0: 65, 1: 65}), log_ends(a.bootstrap, topic)
    assert same_logs(a.bootstrap, b.bootstrap, topic)
    # A second failback of the same topic is refused: it already follows B.
    again = failback(a.bootstrap, topic, "to-b", check=False)
    assert again.returncode == 1 and "already a mirror topic" in again.stderr, again.stderr
