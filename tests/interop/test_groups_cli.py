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


OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]


def partition_rows(stdout: str) -> dict[int, list[str]]:
    """kafka-consumer-groups.sh --describe rows by partition: GROUP TOPIC PARTITION CURRENT-OFFSET ..."""
    rows = {}
    for line in stdout.splitlines():
        fields = line.split()
        if len(fields) == len(OFFSETS_HEADER) and fields[2].isdigit():
            rows[int(fields[2])] = fields
    return rows


def assert_aligned(lines: list[str], header: list[str]) -> None:
    """Every row's cells start where the header's columns start (Kafka pads each column)."""
    starts = [lines[0].index(name) for name in header]
    for line in lines[1:]:
        for start in starts[1:]:
            assert line[start - 1] == " " and line[start] != " ", (line, start)


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
        assert described.returncode == 0 and described.stderr == "", described.stderr
        lines = described.stdout.splitlines()
        assert lines[0] == "" and lines[1].split() == OFFSETS_HEADER, described.stdout
        assert_aligned(lines[1:], OFFSETS_HEADER)
        # Kafka's minimum widths: GROUP and TOPIC padded to their longest value (at least 15), PARTITION 10.
        group_width, topic_width = max(15, len(group)), max(15, len(topic))
        assert lines[1].index("PARTITION") == group_width + 1 + topic_width + 1
        assert lines[1].index("CURRENT-OFFSET") == lines[1].index("PARTITION") + 11
        rows = partition_rows(described.stdout)
        assert sorted(rows) == list(range(PARTITIONS)), described.stdout
        for p, fields in rows.items():
            committed, end, lag = int(fields[3]), int(fields[4]), int(fields[5])
            assert (committed, end, lag) == (5 * (p + 1), PER_PARTITION, PER_PARTITION - 5 * (p + 1)), fields
            assert fields[0] == group and fields[1] == topic
            assert fields[7] == "/127.0.0.1" and fields[8].startswith("cli-member-")
        # The member holding two partitions comes first, as Kafka orders the rows.
        assert rows_in_order(described.stdout)[0][6] == rows_in_order(described.stdout)[1][6]

        # The same through Kafka's flags, with --offsets spelled out.
        assert run_groups(broker, "--describe", "--group", group, "--offsets").stdout == described.stdout

        members = run_groups(broker, "--describe", "--group", group, "--members")
        lines = members.stdout.splitlines()
        assert lines[0] == "" and lines[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        assert_aligned(lines[1:], ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"])
        assert sorted(line.split()[-1] for line in lines[2:]) == ["1", "2"], members.stdout

        verbose = run_groups(broker, "describe", group, "--members", "--verbose")
        lines = verbose.stdout.splitlines()
        # Kafka 4's columns; a classic group has no epochs and no target assignment.
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT",
                  "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        assert lines[1].split() == header
        assert_aligned(lines[1:], header)
        start, end = lines[1].index("CURRENT-ASSIGNMENT"), lines[1].index("TARGET-EPOCH")
        assignments = sorted(line[start:end].strip() for line in lines[2:])
        assert all(line.split()[-4::2] == ["-", "-"] and line.split()[-1] == "-" for line in lines[2:]), verbose.stdout
        # topic:0,1 for the member holding two partitions, topic:2 or similar for the other.
        assert len(assignments) == 2 and all(re.fullmatch(rf"{re.escape(topic)}:\d(,\d)*", a) for a in assignments)
        assert sorted(p for a in assignments for p in a[len(topic) + 1:].split(",")) == ["0", "1", "2"]

        state = run_groups(broker, "--describe", "--group", group, "--state")
        lines = state.stdout.splitlines()
        assert lines[1].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        row = lines[2]
        assert row.startswith(group) and f"{broker.bootstrap}  (1)" in row
        assert row.split()[-3:] == ["range", "Stable", "2"], row
        assert lines[1].index("ASSIGNMENT-STRATEGY") == max(15, len(group)) + 1 + max(25, len(f"{broker.bootstrap}  (1)")) + 1
    finally:
        for c in consumers:
            c.close()

    # After the members left, the group is Empty but its offsets and lag remain.
    assert wait_until(lambda: "Empty" in run_groups(broker, "describe", group, "--state").stdout, timeout_s=20)
    described = run_groups(broker, "describe", group)
    assert described.stderr == f"Consumer group '{group}' has no active members.\n"
    rows = partition_rows(described.stdout)
    assert {p: int(f[5]) for p, f in rows.items()} == {p: PER_PARTITION - 5 * (p + 1) for p in range(PARTITIONS)}
    assert all(f[6:] == ["-", "-", "-"] for f in rows.values()), "no member owns a partition any more"
    # No members: --members prints no table, only the note.
    members = run_groups(broker, "--describe", "--group", group, "--members")
    assert (members.returncode, members.stdout) == (0, "") and "has no active members" in members.stderr


def rows_in_order(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if len(line.split()) == len(OFFSETS_HEADER) and line.split()[2].isdigit()]


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
