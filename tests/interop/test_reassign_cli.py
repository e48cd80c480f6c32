"""``pybroker reassign`` against one real broker (node 1): what it prints and its
exit codes. Moves between brokers are in tests/cluster/test_reassignment.py."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import PROJECT_ROOT
from tests.interop._support import create_topic, unique_topic


def run_reassign(broker, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "reassign", "--bootstrap-server", broker.bootstrap, *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=60,
        check=False,
    )


def move_file(tmp_path, moves: dict[tuple[str, int], list[int]]):
    path = tmp_path / "move.json"
    partitions = [{"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()]
    path.write_text(json.dumps({"version": 1, "partitions": partitions}))
    return path


def test_execute_verify_cancel_on_one_broker(shared_broker, tmp_path):
    topic = unique_topic("reassign-cli")
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    path = move_file(tmp_path, {(topic, 0): [1], (topic, 1): [1]})

    executed = run_reassign(shared_broker, "--execute", "--reassignment-json-file", str(path))
    assert executed.returncode == 0, executed.stderr
    lines = executed.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    rollback = json.loads(lines[2])
    assert rollback == {
        "version": 1,
        "partitions": [
            {"topic": topic, "partition": 0, "replicas": [1], "log_dirs": ["any"]},
            {"topic": topic, "partition": 1, "replicas": [1], "log_dirs": ["any"]},
        ],
    }
    assert lines[-1] == f"Successfully started partition reassignments for {topic}-0,{topic}-1"

    # The file as the last argument works as well.
    verified = run_reassign(shared_broker, "--verify", str(path))
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.splitlines()[1:] == [
        f"Reassignment of partition {topic}-0 is completed.",
        f"Reassignment of partition {topic}-1 is completed.",
        "Clearing broker-level throttles",
        "Clearing topic-level throttles",
    ]

    cancelled = run_reassign(shared_broker, "--cancel", str(path))
    assert (cancelled.returncode, cancelled.stdout.strip()) == (0, "None of the specified partition reassignments are active.")


def test_refusals_are_one_line_with_a_nonzero_exit(shared_broker, tmp_path):
    topic = unique_topic("reassign-cli-bad")
    create_topic(shared_broker.bootstrap, topic)

    unregistered = run_reassign(shared_broker, "--execute", str(move_file(tmp_path, {(topic, 0): [1, 99]})))
    assert unregistered.returncode == 2
    [error] = unregistered.stderr.strip().splitlines()
    assert error.startswith(f"pybroker reassign: {topic}-0: INVALID_REPLICA_ASSIGNMENT: ") and "broker 99" in error
    # The current assignment was printed before the refusal, to roll back with.
    assert unregistered.stdout.splitlines()[0] == "Current partition replica assignment"

    unknown = run_reassign(shared_broker, "--verify", str(move_file(tmp_path, {(topic, 3): [1]})))
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == f"pybroker reassign: no such partition: {topic}-3"

    # A target other than the current replicas that is not running: not completed.
    elsewhere = run_reassign(shared_broker, "--verify", str(move_file(tmp_path, {(topic, 0): [2]})))
    assert elsewhere.returncode == 1
    assert elsewhere.stdout.splitlines()[-1] == (
        f"There is no active reassignment of partition {topic}-0, but replica set is [1] rather than [2]."
    )

    negative = run_reassign(shared_broker, "--execute", "--throttle", "-5", str(move_file(tmp_path, {(topic, 0): [1]})))
    assert negative.returncode == 2
    assert negative.stderr.strip() == "pybroker reassign: --throttle: '-5' is not a number of bytes per second >= 0"


def test_throttle_is_set_with_execute_and_cleared_by_verify(shared_broker, tmp_path):
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    topic = unique_topic("reassign-cli-throttle")
    create_topic(shared_broker.bootstrap, topic)
    moves = str(move_file(tmp_path, {(topic, 0): [1]}))
    executed = run_reassign(shared_broker, "--execute", "--throttle", "50000000", moves)
    assert executed.returncode == 0, executed.stderr
    assert "The inter-broker throttle limit was set to 50000000 B/s" in executed.stdout
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})

    def topic_config(name: str) -> str:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        return admin.describe_configs([resource])[resource].result(timeout=10)[name].value

    assert topic_config("leader.replication.throttled.replicas") == "0:1"
    verified = run_reassign(shared_broker, "--verify", moves)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.splitlines()[-2:] == ["Clearing broker-level throttles", "Clearing topic-level throttles"]
    assert topic_config("leader.replication.throttled.replicas") == ""
