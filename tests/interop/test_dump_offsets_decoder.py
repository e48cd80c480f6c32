"""``pybroker dump-log --offsets-decoder`` on a ``__consumer_offsets`` segment a
broker wrote for a real consumer group (confluent-kafka): offset commits and
group metadata decoded, tombstones after the group is deleted."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from protocol.consumer_offsets import partition_for_group
from tests.conftest import PROJECT_ROOT

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

OFFSETS_PARTITIONS = 3
GROUP = "dump-group"
TOPIC = "dumped"


def dump(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "broker", "dump-log", *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def decoded_records(stdout: str) -> list[tuple[dict | str, dict | str]]:
    """(key, payload) of every record line, JSON parsed where it is JSON."""
    found = []
    for line in stdout.splitlines():
        match = re.search(r" key: (.*) payload: (.*)$", line)
        if match is None:
            continue
        key, payload = match.groups()
        found.append(tuple(json.loads(text) if text.startswith("{") else text for text in (key, payload)))
    return found


def test_offsets_decoder_prints_commits_and_group_metadata_of_a_real_segment(broker_factory):
    broker = broker_factory({"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0

    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([TOPIC])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 5 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen += 1
    assert seen == 5
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 5, metadata="checkpoint-1")], asynchronous=False)
    consumer.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_consumer_groups([GROUP], request_timeout=15)[GROUP].result(timeout=30)

    partition_dir = broker.data_dir / "logs" / f"__consumer_offsets-{partition_for_group(GROUP, OFFSETS_PARTITIONS)}"
    segment = partition_dir / f"{0:020d}.log"
    result = dump("--offsets-decoder", str(segment))
    assert result.returncode == 0, result.stderr
    records = decoded_records(result.stdout)

    commits = [(k, v) for k, v in records if isinstance(k, dict) and k["type"] == "1"]
    assert commits, result.stdout
    key, value = commits[0]
    assert key == {"type": "1", "data": {"group": GROUP, "topic": TOPIC, "partition": 0}}
    assert value["version"] == "3"
    assert value["data"]["offset"] == 5
    # The metadata as the client sent it: this confluent-kafka version counts
    # the C string's terminating NUL in its length.
    assert value["data"]["metadata"] in ("checkpoint-1", "checkpoint-1\x00")
    assert set(value["data"]) == {"offset", "leaderEpoch", "metadata", "commitTimestamp"}
    assert abs(value["data"]["commitTimestamp"] - time.time() * 1000) < 120_000

    metadata = [(k, v) for k, v in records if isinstance(k, dict) and k["type"] == "2" and isinstance(v, dict)]
    assert metadata, result.stdout
    assert all(key == {"type": "2", "data": {"group": GROUP}} for key, _ in metadata)
    # The consumer's leaving emptied the group: a new generation without protocol or members.
    empty = metadata[-1][1]["data"]
    assert (empty["protocol"], empty["leader"], empty["members"]) == (None, None, [])
    group = next(v["data"] for _, v in reversed(metadata) if v["data"]["members"])
    assert empty["generation"] == group["generation"] + 1
    assert group["protocolType"] == "consumer" and group["generation"] >= 1 and group["protocol"]
    (member,) = group["members"]
    assert member["memberId"] == group["leader"] and member["clientId"] == "rdkafka"
    # The consumer protocol's payloads, decoded too.
    assert member["subscription"]["topics"] == [TOPIC]
    assert member["assignment"]["assignedPartitions"] == [{"topic": TOPIC, "partitions": [0]}]

    # Deleting the group wrote tombstones for its offsets and its metadata.
    tombstones = {json.dumps(k, sort_keys=True) for k, v in records if v == "<DELETE>"}
    assert json.dumps({"type": "2", "data": {"group": GROUP}}, sort_keys=True) in tombstones
    assert json.dumps(commits[0][0], sort_keys=True) in tombstones

    # Without the decoder, -d prints the raw bytes as before.
    raw = dump("-d", str(segment))
    assert raw.returncode == 0 and '"type"' not in raw.stdout and " payload: " in raw.stdout
