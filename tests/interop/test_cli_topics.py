"""``pybroker topics`` against a running broker: create/list/describe/alter/delete with
kafka-topics.sh's flags, Kafka's describe lines checked exactly, ``--output json``
parsed, errors as one line with their exit codes. confluent-kafka's AdminClient
checks that what the tool says happened did happen."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT
from tests.interop._support import unique_topic

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, ConfigResource


def pybroker(broker, *args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args[:1], "--bootstrap-server", broker.bootstrap, *args[1:]],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False, input=stdin,
    )


def topic_id_of(broker, topic: str) -> str:
    listed = json.loads(pybroker(broker, "topics", "--list", "--topic", topic, "--output", "json").stdout)
    return listed["topics"][0]["topic_id"]


def test_create_describe_alter_delete_a_topic(shared_broker):
    broker = shared_broker
    topic = unique_topic("clitopics")
    created = pybroker(broker, "topics", "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1",
                       "--config", "retention.ms=60000", "--config", "cleanup.policy=compact")
    assert (created.returncode, created.stdout, created.stderr) == (0, f"Created topic {topic}.\n", "")

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_configs([ConfigResource("topic", topic)])
    configs = next(iter(described.values())).result(timeout=30)
    assert configs["retention.ms"].value == "60000" and configs["cleanup.policy"].value == "compact"

    topic_id = topic_id_of(broker, topic)
    assert len(topic_id) == 22
    out = pybroker(broker, "topics", "--describe", "--topic", topic)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        f"Topic: {topic}\tTopicId: {topic_id}\tPartitionCount: 2\tReplicationFactor: 1\t"
        "Configs: cleanup.policy=compact,retention.ms=60000\n"
        f"\tTopic: {topic}\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\n"
        f"\tTopic: {topic}\tPartition: 1\tLeader: 1\tReplicas: 1\tIsr: 1\n"
    )
    by_id = pybroker(broker, "topics", "--describe", "--topic-id", topic_id)
    assert by_id.stdout == out.stdout

    as_json = json.loads(pybroker(broker, "topics", "--describe", "--topic", topic, "--output", "json").stdout)
    assert as_json == {"topics": [{
        "name": topic, "topic_id": topic_id,
        "partitions": [{"partition": p, "leader": 1, "replicas": [1], "isr": [1]} for p in (0, 1)],
        "configs": {"cleanup.policy": "compact", "retention.ms": "60000"},
    }]}

    altered = pybroker(broker, "topics", "--alter", "--topic", topic, "--partitions", "3")
    assert (altered.returncode, altered.stderr) == (0, "")
    assert admin.list_topics(topic, timeout=30).topics[topic].partitions.keys() == {0, 1, 2}
    fewer = pybroker(broker, "topics", "--alter", "--topic", topic, "--partitions", "2")
    assert fewer.returncode == 1 and fewer.stderr.startswith("pybroker topics: ") and "3 partitions" in fewer.stderr

    again = pybroker(broker, "topics", "--create", "--topic", topic)
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr and again.stderr.count("\n") == 1
    quiet = pybroker(broker, "topics", "--create", "--topic", topic, "--if-not-exists")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")

    deleted = pybroker(broker, "topics", "--delete", "--topic", topic)
    assert (deleted.returncode, deleted.stderr) == (0, "")
    listed = pybroker(broker, "topics", "--list")
    assert topic not in listed.stdout.split()
    missing = pybroker(broker, "topics", "--describe", "--topic", topic)
    assert (missing.returncode, missing.stderr) == (1, f"pybroker topics: Topic '{topic}' does not exist as expected\n")
    assert pybroker(broker, "topics", "--delete", "--topic", topic, "--if-exists").returncode == 0


def test_list_with_regex_internal_topics_and_replica_assignment(shared_broker):
    broker = shared_broker
    prefix = unique_topic("clire")
    names = [f"{prefix}-a", f"{prefix}-b", f"{prefix}x"]
    for name in names[:2]:
        assert pybroker(broker, "topics", "--create", "--topic", name).returncode == 0
    assigned = pybroker(broker, "topics", "--create", "--topic", names[2], "--replica-assignment", "1,1,1")
    assert assigned.returncode == 0, assigned.stderr
    assert pybroker(broker, "topics", "--describe", "--topic", names[2]).stdout.count("\tPartition: ") == 3

    # A whole-name regular expression; commas separate alternatives, as Kafka's include list.
    assert pybroker(broker, "topics", "--list", "--topic", f"{prefix}-.*").stdout.split() == names[:2]
    assert pybroker(broker, "topics", "--list", "--topic", f"{prefix}-a,{prefix}x").stdout.split() == [names[0], names[2]]
    assert pybroker(broker, "topics", "--list", "--topic", prefix).stdout == ""

    # __consumer_offsets exists once a group committed: internal, left out with --exclude-internal.
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": prefix})
    consumer.commit(offsets=[confluent_kafka.TopicPartition(names[0], 0, 0)], asynchronous=False)
    consumer.close()
    everything = json.loads(pybroker(broker, "topics", "--list", "--output", "json").stdout)["topics"]
    internal = {t["name"] for t in everything if t["internal"]}
    assert "__consumer_offsets" in internal
    assert "__consumer_offsets" in pybroker(broker, "topics", "--list").stdout.split()
    assert "__consumer_offsets" not in pybroker(broker, "topics", "--list", "--exclude-internal").stdout.split()
    refused = pybroker(broker, "topics", "--delete", "--topic", "__consumer_offsets")
    assert refused.returncode == 1 and "internal" in refused.stderr


def test_usage_and_connection_errors_exit_2(shared_broker):
    broker = shared_broker
    bad = pybroker(broker, "topics", "--create", "--topic", "t", "--partitions", "2", "--replica-assignment", "1,1")
    assert bad.returncode == 2 and bad.stderr.startswith("pybroker topics: --replica-assignment")
    json_create = pybroker(broker, "topics", "--create", "--topic", "t", "--output", "json")
    assert json_create.returncode == 2 and "--output json" in json_create.stderr
    bad_id = pybroker(broker, "topics", "--describe", "--topic-id", "not-an-id")
    assert bad_id.returncode == 2 and "--topic-id" in bad_id.stderr
    unreachable = subprocess.run(
        [sys.executable, "-m", "broker", "topics", "--bootstrap-server", "127.0.0.1:1", "--timeout", "2", "--list"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )
    assert unreachable.returncode == 2 and unreachable.stderr.startswith("pybroker topics: cannot connect to 127.0.0.1:1")
    invalid = pybroker(broker, "topics", "--create", "--topic", "bad/name")
    assert invalid.returncode == 1 and "INVALID_TOPIC_EXCEPTION" in invalid.stderr
