"""After a clean restart a broker opens its partition logs on first use; until then
they are hosted (and led, where the metadata says so) all the same.

A broker with 50 partitions (5 topics x 10) is stopped cleanly and started
again; without touching any topic, the ReplicaManager gauges of /metrics, the
console's topic list, DescribeLogDirs (kafka-python), ``pybroker topics
--describe`` and Metadata (confluent-kafka) all count the 50 partitions, and
the count of open logs the metrics endpoint reports stays small throughout:
reading them does not open them. Then one produce opens one log, and a
topic's console page (which uses its partitions) shows each one's offsets.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT, wait_until
from tests.interop._support import create_topic, unique_topic
from tests.interop.test_console import console_url, http
from tests.interop.test_metrics import METRICS_LINE, scrape, value

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPICS = 5
PARTITIONS_PER_TOPIC = 10
HOSTED = TOPICS * PARTITIONS_PER_TOPIC
# Logs a restarted broker may open before any client uses them (none today).
OPEN_AT_START_MAX = 2
OVERRIDES = {"metrics.listener": "http://127.0.0.1:0", "console.listener": "http://127.0.0.1:0"}


def metrics_port_of(broker) -> int:
    match = wait_until(lambda: METRICS_LINE.search(broker.log_text()), timeout_s=10)
    assert match, broker.log_text()
    return int(match.group("port"))


def gauges(port: int) -> dict[str, float]:
    samples = scrape(port)
    return {
        name: value(samples, metric)
        for name, metric in (
            ("hosted", "kafka_server_replicamanager_partitioncount"),
            ("leaders", "kafka_server_replicamanager_leadercount"),
            ("under", "kafka_server_replicamanager_underreplicatedpartitions"),
            ("open", "pybroker_log_open_partitions"),
        )
    }


def produce_to_every_partition(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    errors = []
    for topic in topics:
        for partition in range(PARTITIONS_PER_TOPIC):
            producer.produce(topic, b"v" * 100, partition=partition, on_delivery=lambda err, _: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors, errors


def test_hosted_partitions_count_everywhere_after_a_restart_without_being_opened(broker_factory, tmp_path):
    data_dir = tmp_path / "node"
    broker = broker_factory(OVERRIDES, data_dir=data_dir)
    topics = sorted(unique_topic(f"hosted{i}") for i in range(TOPICS))
    for topic in topics:
        create_topic(broker.bootstrap, topic, PARTITIONS_PER_TOPIC)
    produce_to_every_partition(broker.bootstrap, topics)
    before = gauges(metrics_port_of(broker))
    assert (before["hosted"], before["leaders"]) == (HOSTED, HOSTED)
    assert broker.stop() == 0

    broker = broker_factory(OVERRIDES, data_dir=data_dir)
    port = metrics_port_of(broker)
    # Leadership starts once the controller has unfenced the broker: bounded wait.
    after = wait_until(lambda: (g := gauges(port))["leaders"] == HOSTED and g, timeout_s=15)
    assert after, gauges(port)
    assert (after["hosted"], after["under"]) == (HOSTED, 0)
    assert after["open"] <= OPEN_AT_START_MAX

    # The console's topic list: every partition counted and sized, none "unavailable".
    status, _, page = http(console_url(broker) + "/topics")
    assert status == 200
    assert "unavailable" not in page
    for topic in topics:
        row = re.search(rf"<tr><td><a href=\"/topic\?name={re.escape(topic)}\">{re.escape(topic)}</a></td><td>(\d+)</td>", page)
        assert row and int(row.group(1)) == PARTITIONS_PER_TOPIC, page

    # DescribeLogDirs (kafka-python): all 50, with their sizes from the files.
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        [answer] = admin.describe_log_dirs()
    finally:
        admin.close()
    sizes = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for d in answer["log_dirs"] for t in d["topics"] for p in t["partitions"]
    }
    assert set(sizes) == {(t, p) for t in topics for p in range(PARTITIONS_PER_TOPIC)}
    assert all(size > 100 for size in sizes.values()), sizes

    # pybroker topics --describe (Metadata + DescribeConfigs): a leader for each, none unavailable.
    described = subprocess.run(
        [sys.executable, "-m", "broker", "topics", "--bootstrap-server", broker.bootstrap, "--describe"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )
    assert described.returncode == 0, described.stderr
    assert described.stdout.count("\tLeader: 1\t") == HOSTED, described.stdout
    unavailable = subprocess.run(
        [sys.executable, "-m", "broker", "topics", "--bootstrap-server", broker.bootstrap, "--describe",
         "--unavailable-partitions"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )
    assert (unavailable.returncode, unavailable.stdout) == (0, ""), unavailable.stderr

    # Metadata through confluent-kafka: every partition led by this broker, no error.
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30)
    for topic in topics:
        partitions = metadata.topics[topic].partitions
        assert sorted(partitions) == list(range(PARTITIONS_PER_TOPIC))
        assert {(p.leader, p.error) for p in partitions.values()} == {(1, None)}

    # None of those reads opened a log; using a partition opens that one.
    assert gauges(port)["open"] <= OPEN_AT_START_MAX
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topics[0], b"after", partition=3)
    assert producer.flush(30) == 0
    final = gauges(port)
    assert (final["hosted"], final["leaders"]) == (HOSTED, HOSTED)
    assert 1 <= final["open"] <= OPEN_AT_START_MAX + 1

    # A topic's page uses its partitions (as a Fetch would): offsets and sizes of each.
    status, _, page = http(console_url(broker) + f"/topic?name={topics[1]}")
    assert status == 200 and "unavailable" not in page
    # start, high watermark, end, size: one record in each partition.
    rows = re.findall(r"<td>0</td><td>1</td><td>1</td><td>(\d+)</td></tr>", page)
    assert len(rows) == PARTITIONS_PER_TOPIC and all(int(size) > 100 for size in rows), page
