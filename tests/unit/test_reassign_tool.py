"""``pybroker reassign``: the reassignment file (Kafka's JSON), the rollback JSON,
and the refusals made before any broker is asked."""

from __future__ import annotations

import json

import pytest

from broker.cli import main
from broker.tools.groups import ToolError
from broker.tools.reassign import Move, assignment_json, parse_reassignment_json


def test_parse_kafkas_file():
    text = json.dumps({
        "version": 1,
        "partitions": [
            {"topic": "t", "partition": 0, "replicas": [2, 3, 4]},
            {"topic": "t", "partition": 1, "replicas": [4, 2, 3], "log_dirs": ["any", "any", "any"]},
        ],
    })
    assert parse_reassignment_json(text) == [Move("t", 0, (2, 3, 4)), Move("t", 1, (4, 2, 3))]
    # Without "version" the file is version 1, as Kafka reads it.
    assert parse_reassignment_json('{"partitions":[{"topic":"u","partition":2,"replicas":[1]}]}') == [Move("u", 2, (1,))]


@pytest.mark.parametrize(
    "document,words",
    [
        ("not json", "not JSON"),
        ("[]", '"partitions" list'),
        ('{"version":2,"partitions":[{"topic":"t","partition":0,"replicas":[1]}]}', "only version 1"),
        ('{"version":1}', 'no "partitions" list'),
        ('{"version":1,"partitions":[]}', "lists no partitions"),
        ('{"partitions":[{"partition":0,"replicas":[1]}]}', 'no "topic"'),
        ('{"partitions":[{"topic":"t","partition":-1,"replicas":[1]}]}', '"partition"'),
        ('{"partitions":[{"topic":"t","partition":true,"replicas":[1]}]}', '"partition"'),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":[]}]}', "t-0: \"replicas\" must be a non-empty list"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":["1"]}]}', "broker ids"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}', "more than once"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}', "one directory per replica"),
        ('{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/data/a"]}]}', "log directories is not supported"),
        (
            '{"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}',
            "t-0 is listed more than once",
        ),
    ],
)
def test_bad_files_are_refused_naming_the_problem(document, words):
    with pytest.raises(ToolError) as refused:
        parse_reassignment_json(document)
    assert words in str(refused.value)


def test_the_rollback_json_is_a_reassignment_file_of_the_current_replicas():
    text = assignment_json({("t", 1): (3, 1), ("t", 0): (1, 2)})
    assert text == (
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any","any"]},'
        '{"topic":"t","partition":1,"replicas":[3,1],"log_dirs":["any","any"]}]}'
    )
    assert parse_reassignment_json(text) == [Move("t", 0, (1, 2)), Move("t", 1, (3, 1))]


def test_a_bad_throttle_is_refused_before_anything_is_asked(tmp_path, capsys):
    path = tmp_path / "move.json"
    path.write_text('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]}]}')
    # Port 9 (discard): nothing is contacted, or this would fail to connect instead.
    for argv, message in (
        (["--execute", "--throttle", "fast"], "--throttle: 'fast' is not a number of bytes per second >= 0"),
        (["--verify", "--throttle", "1000"], "--throttle goes with --execute (--verify removes the throttle once every move is completed)"),
    ):
        code = main(["reassign", "--bootstrap-server", "127.0.0.1:9", *argv, str(path)])
        assert code == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"pybroker reassign: {message}"]


def test_file_problems_are_one_line_and_a_nonzero_exit(tmp_path, capsys):
    missing = tmp_path / "missing.json"
    assert main(["reassign", "--bootstrap-server", "127.0.0.1:9", "--verify", "--reassignment-json-file", str(missing)]) == 2
    assert main(["reassign", "--bootstrap-server", "127.0.0.1:9", "--verify"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}')
    assert main(["reassign", "--bootstrap-server", "127.0.0.1:9", "--cancel", str(bad)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("pybroker reassign: ") for line in lines)
    assert "cannot read" in lines[0] and "--reassignment-json-file" in lines[1] and "more than once" in lines[2]
