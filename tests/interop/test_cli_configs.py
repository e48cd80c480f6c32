"""``pybroker configs`` against a running broker: topic configs described and altered
(IncrementalAlterConfigs SET and DELETE, list values in brackets), broker configs,
SCRAM credentials of users made and removed (test_cli_security.py then
logs in with them), client quotas set, shown and removed, and whatever the broker refuses
shown as its error with exit code 1."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT
from tests.interop._support import unique_topic

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, ConfigResource


def pybroker(broker, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args[:1], "--bootstrap-server", broker.bootstrap, *args[1:]],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )


def test_topic_configs_described_and_altered(shared_broker):
    broker = shared_broker
    topic = unique_topic("cliconfigs")
    assert pybroker(broker, "topics", "--create", "--topic", topic, "--config", "retention.ms=1000").returncode == 0
    described = pybroker(broker, "configs", "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert (described.returncode, described.stdout) == (0, (
        f"Dynamic configs for topic {topic} are:\n"
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}\n"
    ))

    altered = pybroker(broker, "configs", "--alter", "--entity-type", "topics", "--entity-name", topic,
                       "--add-config", "cleanup.policy=[compact,delete],segment.ms=60000", "--delete-config", "retention.ms")
    assert (altered.returncode, altered.stdout) == (0, f"Completed updating config for topic {topic}.\n")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    configs = next(iter(admin.describe_configs([ConfigResource("topic", topic)]).values())).result(timeout=30)
    assert configs["cleanup.policy"].value == "compact,delete" and configs["segment.ms"].value == "60000"
    assert configs["retention.ms"].is_default

    as_json = json.loads(pybroker(broker, "configs", "--describe", "--entity-type", "topics", "--entity-name", topic,
                                  "--output", "json").stdout)
    entity = as_json["entities"][0]
    assert (entity["entity_type"], entity["entity_name"], entity["error"]) == ("topics", topic, None)
    assert entity["configs"] == {
        "cleanup.policy": {"value": "compact,delete", "source": "DYNAMIC_TOPIC_CONFIG", "sensitive": False, "read_only": False},
        "segment.ms": {"value": "60000", "source": "DYNAMIC_TOPIC_CONFIG", "sensitive": False, "read_only": False},
    }
    everything = pybroker(broker, "configs", "--describe", "--entity-type", "topics", "--entity-name", topic, "--all")
    lines = everything.stdout.splitlines()
    assert lines[0] == f"All configs for topic {topic} are:"
    assert any(line.startswith("  retention.ms=604800000 sensitive=false synonyms={") for line in lines), lines

    # Errors the broker answers are shown, not hidden.
    missing = pybroker(broker, "configs", "--describe", "--entity-type", "topics", "--entity-name", "no-such-topic")
    assert missing.returncode == 1
    assert missing.stderr == "pybroker configs: topic no-such-topic: UNKNOWN_TOPIC_OR_PARTITION: The topic 'no-such-topic' does not exist.\n"
    wrong = pybroker(broker, "configs", "--alter", "--entity-type", "topics", "--entity-name", topic,
                     "--add-config", "no.such.config=1")
    assert wrong.returncode == 1 and wrong.stderr.startswith(f"pybroker configs: cannot alter topic {topic}: INVALID_")


def test_broker_configs(shared_broker):
    broker = shared_broker
    dynamic = pybroker(broker, "configs", "--describe", "--entity-type", "brokers", "--entity-name", "1")
    assert (dynamic.returncode, dynamic.stdout) == (0, "Dynamic configs for broker 1 are:\n")
    default = pybroker(broker, "configs", "--describe", "--entity-type", "brokers", "--entity-default")
    assert (default.returncode, default.stdout) == (0, "Default configs for brokers in the cluster are:\n")
    everything = pybroker(broker, "configs", "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all")
    assert "  num.partitions=1 sensitive=false synonyms={" in everything.stdout
    # The dynamic replication throttle is one pybroker honours.
    set_rate = pybroker(broker, "configs", "--alter", "--entity-type", "brokers", "--entity-name", "1",
                        "--add-config", "leader.replication.throttled.rate=1048576")
    assert (set_rate.returncode, set_rate.stdout) == (0, "Completed updating config for broker 1.\n")
    shown = pybroker(broker, "configs", "--describe", "--entity-type", "brokers", "--entity-name", "1")
    assert "  leader.replication.throttled.rate=1048576 sensitive=false" in shown.stdout
    assert pybroker(broker, "configs", "--alter", "--entity-type", "brokers", "--entity-name", "1",
                    "--delete-config", "leader.replication.throttled.rate").returncode == 0
    # Others are refused by the broker: its message is shown.
    refused = pybroker(broker, "configs", "--alter", "--entity-type", "brokers", "--entity-name", "1",
                       "--add-config", "log.dirs=/elsewhere")
    assert refused.returncode == 1
    assert "cannot alter broker 1: INVALID_REQUEST: Cannot update these configs dynamically: Set(log.dirs)" in refused.stderr


def test_scram_users(shared_broker):
    broker = shared_broker
    user = unique_topic("cliuser")
    added = pybroker(broker, "configs", "--alter", "--entity-type", "users", "--entity-name", user,
                     "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]")
    assert (added.returncode, added.stdout) == (0, f"Completed updating config for user {user}.\n"), added.stderr
    added512 = pybroker(broker, "configs", "--alter", "--entity-type", "users", "--entity-name", user,
                        "--add-config", "SCRAM-SHA-512=[password=other-secret]")
    assert added512.returncode == 0, added512.stderr
    described = pybroker(broker, "configs", "--describe", "--entity-type", "users", "--entity-name", user)
    assert described.returncode == 0, described.stderr
    assert described.stdout == (
        f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=8192, "
        "SCRAM-SHA-512=iterations=4096\n"
    )
    as_json = json.loads(pybroker(broker, "configs", "--describe", "--entity-type", "users", "--entity-name", user,
                                  "--output", "json").stdout)
    assert as_json["scram_credentials"] == [{"user": user, "credentials": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 8192}, {"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}]

    removed = pybroker(broker, "configs", "--alter", "--entity-type", "users", "--entity-name", user,
                       "--delete-config", "SCRAM-SHA-512")
    assert removed.returncode == 0, removed.stderr
    after = pybroker(broker, "configs", "--describe", "--entity-type", "users", "--entity-name", user)
    assert after.stdout == f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=8192\n"
    again = pybroker(broker, "configs", "--alter", "--entity-type", "users", "--entity-name", user,
                     "--delete-config", "SCRAM-SHA-512")
    assert again.returncode == 1 and "RESOURCE_NOT_FOUND" in again.stderr

    bad = pybroker(broker, "configs", "--alter", "--entity-type", "users", "--entity-name", user,
                   "--add-config", "SCRAM-SHA-256=[iterations=8192]")
    assert bad.returncode == 2 and "password" in bad.stderr


def test_client_quotas(shared_broker):
    broker = shared_broker
    client, user = unique_topic("cliclient"), unique_topic("cliquser")
    quotas = pybroker(broker, "configs", "--alter", "--entity-type", "clients", "--entity-name", client,
                      "--add-config", "producer_byte_rate=1024,request_percentage=50")
    if "does not serve" in quotas.stderr:  # a broker without client quotas: said as such
        assert (quotas.returncode, quotas.stderr) == (
            1, "pybroker configs: the broker does not serve AlterClientQuotas (client quotas)\n"
        )
        return
    assert (quotas.returncode, quotas.stdout) == (0, f"Completed updating config for client {client}.\n"), quotas.stderr
    described = pybroker(broker, "configs", "--describe", "--entity-type", "clients", "--entity-name", client)
    assert described.stdout == f"Quota configs for client-id '{client}' are producer_byte_rate=1024.0, request_percentage=50.0\n"
    assert pybroker(broker, "configs", "--alter", "--entity-type", "users", "--entity-name", user,
                    "--add-config", "consumer_byte_rate=2048").returncode == 0
    as_json = json.loads(pybroker(broker, "configs", "--describe", "--entity-type", "users", "--entity-name", user,
                                  "--output", "json").stdout)
    assert as_json == {"quotas": [{"entity": f"user-principal '{user}'", "values": {"consumer_byte_rate": 2048.0}}],
                       "scram_credentials": []}
    removed = pybroker(broker, "configs", "--alter", "--entity-type", "clients", "--entity-name", client,
                       "--delete-config", "request_percentage")
    assert removed.returncode == 0, removed.stderr
    after = pybroker(broker, "configs", "--describe", "--entity-type", "clients", "--entity-name", client)
    assert after.stdout == f"Quota configs for client-id '{client}' are producer_byte_rate=1024.0\n"
    wrong = pybroker(broker, "configs", "--alter", "--entity-type", "clients", "--entity-name", client,
                     "--add-config", "bogus_rate=1")
    assert wrong.returncode == 1
    assert wrong.stderr.startswith(f"pybroker configs: cannot alter quotas of client {client}: INVALID_REQUEST")
    not_a_number = pybroker(broker, "configs", "--alter", "--entity-type", "clients", "--entity-name", client,
                            "--add-config", "producer_byte_rate=fast")
    assert not_a_number.returncode == 2 and "needs a number" in not_a_number.stderr
