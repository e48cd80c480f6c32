"""``pybroker groups list|describe GROUP`` against a real broker and a real consumer group.

The group is made by confluent-kafka consumers; the tool must show the group,
its members and assignments, and per partition the committed offset, the log
end offset and the lag between them.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

from tests.conftest import PROJECT_ROOT, wait_until
from tests.interop._support import create_topic, unique_topic

PARTITIONS = 3
PER_PARTITION = 20


def run_groups(broker, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "groups", "--bootstrap-server", broker.bootstrap, *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=60,
        check=False,
    )


def produce_per_partition(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(topic, value=b"v%d" % i, partition=p)
    assert producer.flush(30) == 0


def group_consumer(bootstrap: str, group: str, client_id: str):
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )


def partition_rows(stdout: str) -> dict[int, list[str]]:
    rows = {}
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[1].isdigit() and not line.startswith("TOPIC"):
            rows[int(fields[1])] = fields
    return rows


def test_groups_list_and_describe_show_members_offsets_and_lag(broker_factory):
    broker = broker_factory()
    topic = unique_topic("cli-groups")
    group = unique_topic("cli-group")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    produce_per_partition(broker.bootstrap, topic)
    consumers = [group_consumer(broker.bootstrap, group, f"cli-member-{i}") for i in range(2)]
    try:
        for c in consumers:
            c.subscribe([topic])
        # Poll both until the group has handed out every partition.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for c in consumers:
                c.poll(0.1)
            sizes = sorted(len(c.assignment()) for c in consumers)
            # Both members hold partitions (the first may hold all three until it rejoins),
            # and the coordinator says the rebalance is over.
            if sizes == [1, 2] and "Stable" in run_groups(broker, "list", "--state").stdout:
                break
        assert sorted(len(c.assignment()) for c in consumers) == [1, 2]
        from confluent_kafka import TopicPartition

        # Committed offsets 5, 10, 15 for partitions 0, 1, 2, by whoever owns each.
        for c in consumers:
            owned = [tp.partition for tp in c.assignment()]
            if owned:
                c.commit(offsets=[TopicPartition(topic, p, 5 * (p + 1)) for p in owned], asynchronous=False)

        listed = run_groups(broker, "list")
        assert listed.returncode == 0, listed.stderr
        assert group in listed.stdout.split()
        with_state = run_groups(broker, "list", "--state", "Stable")
        assert re.search(rf"^{re.escape(group)}\s+Stable$", with_state.stdout, re.MULTILINE), with_state.stdout
        assert group not in run_groups(broker, "list", "--state", "Empty").stdout

        described = run_groups(broker, "describe", group)
        assert described.returncode == 0, described.stderr
        out = described.stdout
        assert f"GROUP {group}" in out and "STATE Stable" in out and "PROTOCOL-TYPE consumer" in out
        rows = partition_rows(out)
        assert sorted(rows) == list(range(PARTITIONS)), out
        for p, fields in rows.items():
            committed, end, lag = int(fields[2]), int(fields[3]), int(fields[4])
            assert (committed, end, lag) == (5 * (p + 1), PER_PARTITION, PER_PARTITION - 5 * (p + 1)), fields
            assert fields[6] == "/127.0.0.1" and fields[7].startswith("cli-member-")
        member_lines = [line for line in out.splitlines() if line.split() and line.split()[-1].startswith(f"{topic}-")]
        assert len(member_lines) == 2, out
        assigned = {tp for line in member_lines for tp in line.split()[-1].split(",")}
        assert assigned == {f"{topic}-{p}" for p in range(PARTITIONS)}
    finally:
        for c in consumers:
            c.close()

    # After the members left, the group is Empty but its offsets and lag remain.
    assert wait_until(lambda: "STATE Empty" in run_groups(broker, "describe", group).stdout, timeout_s=20)
    described = run_groups(broker, "describe", group)
    rows = partition_rows(described.stdout)
    assert {p: int(f[4]) for p, f in rows.items()} == {p: PER_PARTITION - 5 * (p + 1) for p in range(PARTITIONS)}
    assert all(f[5] == "-" for f in rows.values()), "no member owns a partition any more"


def test_groups_describe_unknown_group_and_unreachable_broker(broker_factory):
    broker = broker_factory()
    missing = run_groups(broker, "describe", "no-such-group")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    unreachable = subprocess.run(
        [sys.executable, "-m", "broker", "groups", "--bootstrap-server", "127.0.0.1:1", "--timeout", "2", "list"],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=60,
        check=False,
    )
    assert unreachable.returncode == 2 and "cannot connect" in unreachable.stderr
