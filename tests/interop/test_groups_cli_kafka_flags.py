"""kafka-consumer-groups.sh's flags on ``pybroker groups`` against a real broker:
``--all-groups`` with --describe, --reset-offsets and --delete, ``--state``
with --describe, ``--export`` of a reset as CSV, and the usage rules between
the flags (exit code 2)."""

from __future__ import annotations

from tests.interop._support import create_topic, unique_topic
from tests.interop.test_groups_cli import PARTITIONS, PER_PARTITION, partition_rows, produce_per_partition, run_groups


def test_all_groups_state_and_export(broker_factory):
    broker = broker_factory()
    topic = unique_topic("cli-allg")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    produce_per_partition(broker.bootstrap, topic)
    first, second = "allg-a-" + topic, "allg-b-" + topic
    for group, offset in ((first, 4), (second, 7)):
        # A reset of a group that does not exist yet commits its first offsets (Kafka's tool does the same).
        made = run_groups(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-offset", str(offset),
                          "--execute")
        assert made.returncode == 0, made.stderr

    described = run_groups(broker, "--describe", "--all-groups")
    assert described.returncode == 0, described.stderr
    # A block per group, each after a blank line, sorted by group id.
    assert described.stdout.startswith("\nGROUP ")
    blocks = described.stdout[1:].rstrip("\n").split("\n\n")
    assert [block.splitlines()[1].split()[0] for block in blocks] == [first, second], described.stdout
    assert described.stderr.splitlines() == [f"Consumer group '{g}' has no active members." for g in (first, second)]
    rows = partition_rows(blocks[0])
    assert {p: (int(f[3]), int(f[5])) for p, f in rows.items()} == {p: (4, PER_PARTITION - 4) for p in range(PARTITIONS)}

    state = run_groups(broker, "--describe", "--all-groups", "--state")
    lines = [line for line in state.stdout.splitlines() if line.startswith(("allg-a-", "allg-b-"))]
    assert [line.split()[0] for line in lines] == [first, second]
    assert all(line.split()[-3:] == ["-", "Empty", "0"] for line in lines), state.stdout

    listed = run_groups(broker, "--list", "--state", "empty,STABLE")  # any case, as Kafka's tool
    assert listed.stdout.splitlines()[0].split() == ["GROUP", "STATE"]
    assert f"{first}{' ' * (max(15, len(first), len(second)) + 10 - len(first))} Empty" in listed.stdout.splitlines()

    exported = run_groups(broker, "--reset-offsets", "--group", first, "--all-topics", "--to-earliest", "--dry-run",
                          "--export")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.splitlines() == [f"{topic},{p},0" for p in range(PARTITIONS)]

    everyone = run_groups(broker, "--reset-offsets", "--all-groups", "--topic", topic, "--to-latest", "--execute",
                          "--export")
    assert everyone.returncode == 0, everyone.stderr
    assert everyone.stdout.splitlines() == [
        f"{g},{topic},{p},{PER_PARTITION}" for g in (first, second) for p in range(PARTITIONS)
    ]
    after = partition_rows(run_groups(broker, "--describe", "--group", second).stdout)
    assert {p: int(f[5]) for p, f in after.items()} == {p: 0 for p in range(PARTITIONS)}

    deleted = run_groups(broker, "--delete", "--all-groups")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == f"Deletion of requested consumer groups ('{first}', '{second}') was successful.\n"
    assert run_groups(broker, "--list").stdout == ""
    gone = run_groups(broker, "--describe", "--group", first)
    assert gone.returncode == 1 and gone.stderr == f"Consumer group '{first}' does not exist.\n"


def test_flag_rules_are_usage_errors(broker_factory):
    broker = broker_factory()
    for args, message in (
        (["--members"], "go with --describe"),
        (["--list", "--verbose"], "go with --describe"),
        (["--describe", "--group", "g", "--members", "--state"], "at most one of"),
        (["describe", "g", "--members", "--offsets"], "at most one of"),
        (["--describe", "--group", "g", "--state", "Stable"], "--state takes no value with --describe"),
        (["--describe"], "--describe needs --group"),
        (["--describe", "--group", "g", "--all-groups"], "not both"),
        (["--list", "--all-groups"], "--all-groups goes with"),
        (["--delete-offsets", "--all-groups", "--topic", "t"], "--all-groups goes with"),
        (["--list", "--export"], "--export goes with --reset-offsets"),
        (["--list", "--state", "Stable,Sleepy"], "--state: Sleepy: the states are PreparingRebalance,"),
        (["--describe", "--group", "g", "--type"], "--type goes with --list"),
        (["list", "--type", "classic,share"], "--type: share: the types are classic, consumer"),
    ):
        done = run_groups(broker, *args)
        assert done.returncode == 2 and done.stderr.startswith("pybroker groups: ") and message in done.stderr, (
            args, done.stderr,
        )
        assert done.stdout == ""
