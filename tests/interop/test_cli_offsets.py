"""``pybroker get-offsets``, ``delete-records`` and ``groups --reset-offsets|--delete|
--delete-offsets`` against a running broker, with records and groups made by
confluent-kafka and the results checked through it too."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT
from tests.interop._support import create_topic, unique_topic

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient

TIMEOUT_S = 30
BASE_MS = 1_700_000_000_000


def pybroker(broker, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args[:1], "--bootstrap-server", broker.bootstrap, *args[1:]],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )


def produce(bootstrap: str, topic: str, per_partition: list[int]) -> None:
    """Records numbered from 0 per partition, each 1 s after the previous one (from BASE_MS)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for partition, count in enumerate(per_partition):
        for i in range(count):
            producer.produce(topic, value=b"v%d" % i, partition=partition, timestamp=BASE_MS + i * 1000)
    assert producer.flush(TIMEOUT_S) == 0


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_group_offsets([confluent_kafka.ConsumerGroupTopicPartitions(group)])
    return {(tp.topic, tp.partition): tp.offset for tp in result[group].result(timeout=TIMEOUT_S).topic_partitions
            if tp.offset >= 0}


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[confluent_kafka.TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    consumer.close()


def test_get_offsets_by_time(shared_broker):
    broker = shared_broker
    topic = unique_topic("cligetoff")
    create_topic(broker.bootstrap, topic, partitions=3)
    produce(broker.bootstrap, topic, [5, 3, 0])
    latest = pybroker(broker, "get-offsets", "--topic", topic)
    assert (latest.returncode, latest.stdout) == (0, f"{topic}:0:5\n{topic}:1:3\n{topic}:2:0\n")
    earliest = pybroker(broker, "get-offsets", "--topic", topic, "--time", "earliest", "--partitions", "0-1")
    assert earliest.stdout == f"{topic}:0:0\n{topic}:1:0\n"
    by_time = pybroker(broker, "get-offsets", "--topic", topic, "--time", str(BASE_MS + 2500), "--partitions", "0,1")
    # Partition 1's last record is at +2 s: no offset, printed empty as Kafka prints it.
    assert by_time.stdout == f"{topic}:0:3\n{topic}:1:\n"
    max_ts = pybroker(broker, "get-offsets", "--topic", topic, "--time", "-3", "--partitions", "0")
    assert max_ts.stdout == f"{topic}:0:4\n"
    assert pybroker(broker, "get-offsets", "--topic", "no-such-topic-x").returncode == 1
    bad = pybroker(broker, "get-offsets", "--topic", topic, "--time", "yesterday")
    assert bad.returncode == 2 and bad.stderr.startswith("pybroker get-offsets: --time")


def test_delete_records_from_a_json_file(shared_broker, tmp_path):
    broker = shared_broker
    topic = unique_topic("clidelrec")
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker.bootstrap, topic, [10, 4])
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"partitions": [
        {"topic": topic, "partition": 0, "offset": 6},
        {"topic": topic, "partition": 1, "offset": -1},
        {"topic": topic, "partition": 7, "offset": 1},
    ], "version": 1}))
    out = pybroker(broker, "delete-records", "--offset-json-file", str(plan))
    assert out.returncode == 1  # partition 7 does not exist
    assert out.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 6",
        f"partition: {topic}-1\tlow_watermark: 4",
        f"partition: {topic}-7\terror: UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition.",
    ]
    earliest = pybroker(broker, "get-offsets", "--topic", topic, "--time", "-2")
    assert earliest.stdout == f"{topic}:0:6\n{topic}:1:4\n"
    plan.write_text('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}, {"topic": "t", "partition": 0, "offset": 2}]}')
    twice = pybroker(broker, "delete-records", "--offset-json-file", str(plan))
    assert twice.returncode == 2 and "duplicate" in twice.stderr


def test_reset_offsets_every_way_then_delete(shared_broker):
    broker = shared_broker
    topic = unique_topic("clireset")
    group = unique_topic("cliresetg")
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker.bootstrap, topic, [10, 6])
    commit(broker.bootstrap, group, {(topic, 0): 4, (topic, 1): 2})

    def reset(*spec, run="--dry-run"):
        return pybroker(broker, "groups", "--reset-offsets", "--group", group, *spec, run)

    def table(rows):
        header = f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} NEW-OFFSET"
        return "\n".join(["", header] + [f"{group:<30} {topic:<30} {p:<10} {o}" for p, o in rows]) + "\n"

    dry = reset("--topic", topic, "--to-earliest")
    assert (dry.returncode, dry.stdout) == (0, table([(0, 0), (1, 0)]))
    assert committed(broker.bootstrap, group) == {(topic, 0): 4, (topic, 1): 2}, "a dry run commits nothing"
    assert reset("--topic", topic, "--to-latest").stdout == table([(0, 10), (1, 6)])
    assert reset("--topic", f"{topic}:1", "--shift-by", "-5").stdout == table([(1, 0)])  # clamped at the start
    assert reset("--all-topics", "--shift-by", "3").stdout == table([(0, 7), (1, 5)])
    assert reset("--topic", topic, "--to-offset", "8").stdout == table([(0, 8), (1, 6)])  # clamped at the end
    at = dt.datetime.fromtimestamp((BASE_MS + 3000) / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert reset("--topic", topic, "--to-datetime", at).stdout == table([(0, 3), (1, 3)])
    # Records are from 2023: a duration of one day back finds none, so the log end.
    assert reset("--topic", topic, "--by-duration", "P1DT0H0M0S").stdout == table([(0, 10), (1, 6)])

    executed = reset("--topic", topic, "--to-offset", "5", run="--execute")
    assert executed.stdout == table([(0, 5), (1, 5)])
    assert committed(broker.bootstrap, group) == {(topic, 0): 5, (topic, 1): 5}
    warned = pybroker(broker, "groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-latest")
    assert warned.returncode == 0 and warned.stderr.startswith("WARN: No action will be performed")

    deleted_offsets = pybroker(broker, "groups", "--delete-offsets", "--group", group, "--topic", f"{topic}:1")
    assert deleted_offsets.returncode == 0, deleted_offsets.stderr
    assert deleted_offsets.stdout.splitlines() == [
        f"Request succeed for deleting offsets with topic {topic} group {group}",
        "",
        f"{'TOPIC':<30} {'PARTITION':<15} STATUS",
        f"{topic:<30} {1:<15} Successful",
    ]
    assert committed(broker.bootstrap, group) == {(topic, 0): 5}

    deleted = pybroker(broker, "groups", "--delete", "--group", group)
    assert (deleted.returncode, deleted.stdout) == (0, f"Deletion of requested consumer groups ('{group}') was successful.\n")
    again = pybroker(broker, "groups", "--delete", "--group", group)
    assert again.returncode == 1
    assert again.stderr == (
        "Deletion of some consumer groups failed:\n"
        f"* Group '{group}' could not be deleted due to: GROUP_ID_NOT_FOUND\n"
    )


def test_reset_and_delete_refused_while_the_group_has_members(shared_broker):
    broker = shared_broker
    topic = unique_topic("cliactive")
    group = unique_topic("cliactiveg")
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker.bootstrap, topic, [3])
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    try:
        consumer.subscribe([topic])
        for _ in range(150):  # bounded: until the member holds its partition
            consumer.poll(0.2)
            if consumer.assignment():
                break
        assert consumer.assignment()
        refused = pybroker(broker, "groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                           "--execute")
        assert refused.returncode == 1
        assert refused.stderr == (
            f"pybroker groups: Assignments can only be reset if the group '{group}' is inactive, but the current "
            "state is Stable.\n"
        )
        # --all-groups: the active group is reported and left alone, the others are still reset (exit code 1).
        every = pybroker(broker, "groups", "--reset-offsets", "--all-groups", "--all-topics", "--to-earliest", "--dry-run")
        assert every.returncode == 1 and f"pybroker groups: Assignments can only be reset if the group '{group}' is " \
            "inactive, but the current state is Stable.\n" in every.stderr, every.stderr
        assert f"\n{group} " not in every.stdout
        busy = pybroker(broker, "groups", "--delete", "--group", group)
        assert busy.returncode == 1 and "NON_EMPTY_GROUP" in busy.stderr
        # Kafka's --describe --group spelling of 'describe GROUP'.
        described = pybroker(broker, "groups", "--describe", "--group", group, "--state")
        assert described.returncode == 0 and described.stdout.splitlines()[2].split()[0] == group
        assert described.stdout.splitlines()[2].split()[-2:] == ["Stable", "1"], described.stdout
        assert group in pybroker(broker, "groups", "--list").stdout.split()
    finally:
        consumer.close()
    usage = pybroker(broker, "groups", "--reset-offsets", "--group", group, "--to-earliest")
    assert usage.returncode == 2 and "--topic or --all-topics" in usage.stderr
