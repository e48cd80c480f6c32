"""``pybroker transactions`` against a running broker, as a user runs it.

A confluent-kafka transactional producer leaves a transaction open; the tool
lists it (with and without a state filter), describes it at its coordinator,
shows its start offset among the partition's producers, and ``abort
--start-offset`` ends it on the partition, after which the last stable offset
moves past it and read_committed consumers go on. Errors (an unknown
transactional id, no open transaction at an offset) exit 1 with one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import wait_until
from tests.interop._support import create_topic, list_offset, unique_topic

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LATEST = -1


def pybroker(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT))
    return subprocess.run([sys.executable, "-m", "broker", *args], capture_output=True, text=True, env=env, timeout=60)


def last_stable_offset(bootstrap: str, topic: str) -> int:
    return list_offset(bootstrap, topic, 0, LATEST, isolation_level=1).offset


def test_list_describe_and_abort_a_hanging_transaction(broker_factory):
    from confluent_kafka import Producer

    broker = broker_factory({"transaction.state.log.num.partitions": "2"})
    bootstrap = broker.bootstrap
    topic = unique_topic("txn-cli")
    create_topic(bootstrap, topic)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"before", partition=0)
    assert plain.flush(30) == 0
    transactional_id = f"cli-{topic}"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"inside", partition=0)
    assert producer.flush(30) == 0
    assert last_stable_offset(bootstrap, topic) == 1

    listed = pybroker("transactions", "--bootstrap-server", bootstrap, "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    row = next(line.split() for line in lines[1:] if line.split()[0] == transactional_id)
    assert row[1] == "1" and row[3] == "Ongoing"
    filtered = pybroker("transactions", "--bootstrap-server", bootstrap, "list", "--state", "CompleteCommit")
    assert filtered.returncode == 0 and transactional_id not in filtered.stdout

    described = pybroker("transactions", "--bootstrap-server", bootstrap, "describe", "--transactional-id", transactional_id)
    assert described.returncode == 0, described.stderr
    header, values = (line.split() for line in described.stdout.splitlines())
    fields = dict(zip(header, values))
    assert fields["TransactionState"] == "Ongoing" and fields["TopicPartitions"] == f"{topic}-0"

    producers = pybroker("transactions", "--bootstrap-server", bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
    assert producers.returncode == 0, producers.stderr
    rows = [line.split() for line in producers.stdout.splitlines()[1:]]
    assert [r[-1] for r in rows if r[0] == row[2]] == ["1"]  # CurrentTransactionStartOffset

    missing = pybroker("transactions", "--bootstrap-server", bootstrap, "abort", "--topic", topic, "--partition", "0",
                       "--start-offset", "0")
    assert missing.returncode == 1 and "no open transaction starts at offset 0" in missing.stderr
    aborted = pybroker("transactions", "--bootstrap-server", bootstrap, "abort", "--topic", topic, "--partition", "0",
                       "--start-offset", "1")
    assert aborted.returncode == 0, aborted.stderr
    # The marker is at offset 2: the partition is stable again past it.
    assert wait_until(lambda: last_stable_offset(bootstrap, topic) == 3, 10)

    unknown = pybroker("transactions", "--bootstrap-server", bootstrap, "describe", "--transactional-id", "no-such-id")
    assert unknown.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in unknown.stderr
