"""``pybroker leader-election``: Kafka's JSON file, election types in any case,
which partitions, Kafka's output lines; and its run against one broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from broker.tools.client import ToolError
from broker.tools.leader_election import election_report, parse_election_json, parse_election_type
from protocol.errors import ErrorCode
from tests.conftest import PROJECT_ROOT


def test_election_types_in_any_case():
    assert [parse_election_type(t) for t in ("PREFERRED", "preferred", "Unclean")] == [0, 0, 1]
    with pytest.raises(ToolError, match="PREFERRED or UNCLEAN"):
        parse_election_type("clean")


def test_kafkas_json_file():
    text = json.dumps({"partitions": [{"topic": "foo", "partition": 1}, {"topic": "bar", "partition": 0}]})
    assert parse_election_json(text) == [("foo", 1), ("bar", 0)]
    with pytest.raises(ToolError, match='missing "partitions" field'):
        parse_election_json("{}")
    with pytest.raises(ToolError, match="duplicate partitions: foo-1"):
        parse_election_json(json.dumps({"partitions": [{"topic": "foo", "partition": 1}] * 2}))
    with pytest.raises(ToolError, match="not JSON"):
        parse_election_json("{")
    with pytest.raises(ToolError, match='"topic" string'):
        parse_election_json(json.dumps({"partitions": [{"topic": "foo", "partition": "1"}]}))


def test_kafkas_output_lines():
    lines, failed = election_report(0, {
        ("t", 1): (ErrorCode.NONE, None),
        ("t", 0): (ErrorCode.NONE, None),
        ("u", 0): (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        ("u", 1): (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, "Failed to elect leader for partition u-1 under strategy X"),
    })
    assert lines == [
        "Successfully completed leader election (PREFERRED) for partitions t-0, t-1",
        "Valid replica already elected for partitions u-0",
        "Error completing leader election (PREFERRED) for partition: u-1: PREFERRED_LEADER_NOT_AVAILABLE: "
        "Failed to elect leader for partition u-1 under strategy X",
    ]
    assert failed == 1
    assert election_report(1, {}) == ([], 0)


def run(*args):
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "broker", "leader-election", *args], capture_output=True, text=True,
                          timeout=60, env=env)


def test_against_one_broker(shared_broker, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic("elect", num_partitions=2, replication_factor=1)])["elect"].result(timeout=30)
    answer = run("--bootstrap-server", shared_broker.bootstrap, "--election-type", "preferred", "--topic", "elect", "--partition", "1")
    assert (answer.returncode, answer.stdout) == (0, "Valid replica already elected for partitions elect-1\n")
    # Every partition has its preferred leader: nothing to report.
    answer = run("--bootstrap-server", shared_broker.bootstrap, "--election-type", "PREFERRED", "--all-topic-partitions")
    assert (answer.returncode, answer.stdout, answer.stderr) == (0, "", "")
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=PLAINTEXT\n")
    answer = run("--bootstrap-server", shared_broker.bootstrap, "--election-type", "unclean", "--topic", "elect",
                 "--partition", "0", "--admin.config", str(config))
    assert (answer.returncode, answer.stdout) == (0, "Valid replica already elected for partitions elect-0\n")


@pytest.mark.parametrize("args, message", [
    (["--election-type", "preferred"], "give one of --all-topic-partitions"),
    (["--election-type", "preferred", "--all-topic-partitions", "--topic", "t", "--partition", "0"], "not --all-topic-partitions and --topic"),
    (["--election-type", "preferred", "--topic", "t"], "--topic and --partition go together"),
    (["--election-type", "dirty", "--all-topic-partitions"], "PREFERRED or UNCLEAN"),
    (["--election-type", "preferred", "--path-to-json-file", "/nonexistent/e.json"], "cannot read"),
])
def test_usage_errors_exit_2_before_any_connection(args, message):
    answer = run("--bootstrap-server", "127.0.0.1:1", *args)
    assert answer.returncode == 2 and message in answer.stderr, answer.stderr
