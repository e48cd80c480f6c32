"""The librdkafka suite command (tests/compat/librdkafka.py) without librdkafka: its data
file, its reading of test.c's table and of the runner's output, and its verdicts.

Running the suite itself needs a librdkafka source tree and takes long; it is a
documented command (docs/COMPATIBILITY.md), not part of this run. With
LIBRDKAFKA_SRC naming a v2.15.0 tree, the selection is also checked against it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.compat import librdkafka as suite


@pytest.fixture(scope="module")
def selection() -> suite.Selection:
    return suite.load_selection()


def test_data_file_is_consistent(selection):
    assert suite.selection_problems(selection) == []
    assert len(selection.tests) == 86  # the issue's "86 broker-facing PLAINTEXT tests"
    assert selection.kafka_version == "3.9.0"
    assert {known.issue for known in selection.known_failures.values()} <= {17, 18, 19}
    assert set(selection.known_failures) == {"0103_transactions", "0081_admin", "0092_mixed_msgver"}
    assert selection.broker_config["num.partitions"] == "4"
    assert selection.broker_config["auto.create.topics.enable"] == "true"
    assert selection.broker_config["offsets.topic.replication.factor"] == "1"
    # One runner process per number: 0045's three selected entries run together.
    assert selection.tests_of("0045") == [
        "0045_subscribe_update",
        "0045_resubscribe_with_regex",
        "0045_subscribe_many_updates",
    ]
    assert selection.timeout_of("0113") > selection.default_timeout_s


def test_data_file_problems_are_found():
    broken = suite.Selection(
        librdkafka_version="v2.15.0", kafka_version="3.9.0", default_timeout_s=60,
        tests=("0001_multiobj", "0001_multiobj", "bad"),
        excluded={"0001_multiobj": suite.Exclusion("sockem", "x"), "0002_unkpart": suite.Exclusion("nope", "")},
        known_failures={"0003_msgmaxsize": suite.KnownFailure(42, "")},
        timeouts_s={"0004_conf": 10}, broker_config={}, test_conf={},
    )  # fmt: skip
    problems = "\n".join(suite.selection_problems(broken))
    for expected in (
        "0001_multiobj: selected twice",
        "0001_multiobj: both selected and excluded",
        "bad: not a test-runner test name",
        "0002_unkpart: unknown exclusion category 'nope'",
        "0002_unkpart: exclusion without a reason",
        "0003_msgmaxsize: known failure that is not selected",
        "0003_msgmaxsize: known failure for issue 42",
        "0004_conf: time cap for a test that is not selected",
    ):
        assert expected in problems


TEST_C = r"""
int x;
struct test tests[] = {
    {.name = "<MAIN>", .flags = TEST_F_LOCAL},
    _TEST(0000_unittests, TEST_F_LOCAL, _THRES(.ucpu = 100.0, .scpu = 20.0)),
    _TEST(0001_multiobj, 0),
    _TEST(0028_long_topicnames,
          TEST_F_KNOWN_ISSUE,
          TEST_BRKVER(0, 9, 0, 0),
          .extra = "https://github.com/confluentinc/librdkafka/issues/529"),
    /* a comment with _TEST(9999_fake, 0) in it */
    _TEST(0045_subscribe_update_topic_remove,
          0,
          TEST_BRKVER(0, 9, 0, 0),
          .scenario = "noautocreate"),
#if WITH_SOCKEM
    _TEST(0049_consume_conn_close, TEST_F_SOCKEM, TEST_BRKVER(0, 9, 0, 0)),
#endif
    _TEST(0066_plugins,
          TEST_F_LOCAL | TEST_F_KNOWN_ISSUE_WIN32 | TEST_F_KNOWN_ISSUE_OSX,
          .extra = "dynamic loading, (might) not work"),
    _TEST(0103_transactions, 0, TEST_BRKVER(0, 11, 0, 0), .scenario = "default,ak23"),
    _TEST(8000_idle, TEST_F_MANUAL),
    {NULL}};
"""


def test_parse_test_declarations():
    decls = {decl.name: decl for decl in suite.parse_test_declarations(TEST_C)}
    assert list(decls) == [
        "0000_unittests", "0001_multiobj", "0028_long_topicnames", "0045_subscribe_update_topic_remove",
        "0049_consume_conn_close", "0066_plugins", "0103_transactions", "8000_idle",
    ]  # fmt: skip
    assert decls["0028_long_topicnames"].flags == {"TEST_F_KNOWN_ISSUE"}
    assert decls["0066_plugins"].flags == {"TEST_F_LOCAL", "TEST_F_KNOWN_ISSUE_WIN32", "TEST_F_KNOWN_ISSUE_OSX"}
    assert decls["0049_consume_conn_close"].conditions == ("WITH_SOCKEM",)
    assert decls["0103_transactions"].scenarios == ("default", "ak23")
    assert [name for name, decl in decls.items() if decl.broker_facing] == [
        "0001_multiobj", "0028_long_topicnames", "0045_subscribe_update_topic_remove",
        "0049_consume_conn_close", "0103_transactions",
    ]  # fmt: skip
    assert suite.automatic_exclusion(decls["0049_consume_conn_close"]) == "sockem"
    assert suite.automatic_exclusion(decls["0045_subscribe_update_topic_remove"]) == "noautocreate"
    assert suite.automatic_exclusion(decls["0103_transactions"]) is None


def test_check_against_source():
    decls = suite.parse_test_declarations(TEST_C)
    selection = suite.Selection(
        librdkafka_version="v2.15.0", kafka_version="3.9.0", default_timeout_s=60,
        tests=("0001_multiobj", "0049_consume_conn_close", "0066_plugins", "0123_gone"),
        excluded={"0045_subscribe_update_topic_remove": suite.Exclusion("kafka-cli", "x")},
        known_failures={}, timeouts_s={}, broker_config={}, test_conf={},
    )  # fmt: skip
    problems = suite.check_against_source(selection, decls)
    assert problems == [
        "0028_long_topicnames: broker-facing test neither selected nor excluded",
        "0045_subscribe_update_topic_remove: excluded as kafka-cli, test.c says noautocreate",
        "0049_consume_conn_close: selected, but test.c says sockem",
        "0103_transactions: broker-facing test neither selected nor excluded",
        "0066_plugins: local or manual in test.c (flags TEST_F_KNOWN_ISSUE_OSX | TEST_F_KNOWN_ISSUE_WIN32 | TEST_F_LOCAL)",
        "0123_gone: not in test.c's tests[] table",
    ]


@pytest.mark.skipif(not os.environ.get("LIBRDKAFKA_SRC"), reason="set LIBRDKAFKA_SRC to a librdkafka v2.15.0 tree")
def test_selection_matches_the_source_tree(selection):
    source = Path(os.environ["LIBRDKAFKA_SRC"])
    decls = suite.parse_test_declarations((source / "tests" / "test.c").read_text())
    assert suite.check_against_source(selection, decls) == []
    broker_facing = [decl for decl in decls if decl.broker_facing]
    assert len(decls) == 196 and len(broker_facing) == 120


# What test-runner prints (stderr and stdout to one file), colours included.
RUNNER_OUTPUT = (
    "\x1b[36m[<MAIN>                      /  0.000s] Tests to run     : 0045\n\x1b[0m"
    "\x1b[36m[0045_subscribe_update       /  0.001s] ================= Running test 0045_subscribe_update "
    "=================\n\x1b[0m"
    "\x1b[36m[0045_subscribe_update       / 41.210s] \x1b[32m================= Test 0045_subscribe_update PASSED "
    "=================\x1b[0m\n\x1b[0m"
    "\x1b[33m[0045_subscribe_update_mock  /  0.000s] WARN: SKIPPING TEST: Filtered due to negative test flags\n\x1b[0m"
    '\x1b[31m### Test "0045_resubscribe_with_regex (do_test_resubscribe_with_regex:720)" failed at '
    "0045-subscribe_update.c:761:do_test_resubscribe_with_regex() at Wed Nov 26 02:10:11 2025: ###\n"
    "Expected assignment of 2 partitions, got 0\n"
    "\x1b[36m[0045_subscribe_many_updates/  0.000s] \x1b[33mSKIPPING TEST: Test requires RapidJSON\n\x1b[0m"
    "TEST 20251126021011 (bare, scenario default) SUMMARY\n"
    "#==================================================================#\n"
    "|\x1b[32m <MAIN>                                   |     PASSED |  99.000s \x1b[0m|\n"
    "|\x1b[32m 0045_subscribe_update                    |     PASSED |  41.210s \x1b[0m|\n"
    "|\x1b[33m 0045_subscribe_update_mock               |    SKIPPED |   0.000s \x1b[0m|\x1b[36m Filtered due to "
    "negative test flags\x1b[0m\n"
    "|\x1b[31m 0045_resubscribe_with_regex              |     FAILED |  30.500s \x1b[0m|\x1b[31m "
    "do_test_resubscribe_with_regex:720: do_test_resubscribe_with_regex():761: Expected assignment of 2 partitions, "
    "got 0\x1b[0m\n"
    "|\x1b[33m 0045_subscribe_many_updates              |    SKIPPED |   0.001s \x1b[0m|\x1b[36m Test requires "
    "RapidJSON\x1b[0m\n"
    "|\x1b[31m 0028_long_topicnames                     |    SKIPPED |   0.000s \x1b[0m|\x1b[36m Filtered due to "
    "negative test flags\x1b[0m <-- known issue: https://github.com/confluentinc/librdkafka/issues/529\n"
    "#==================================================================#\n"
)


def test_parse_runner_output_summary_table():
    results = suite.parse_runner_output(RUNNER_OUTPUT)
    assert results["0045_subscribe_update"] == suite.TestResult("0045_subscribe_update", "passed", 41.21, "")
    failed = results["0045_resubscribe_with_regex"]
    assert (failed.state, failed.duration_s) == ("failed", 30.5)
    assert failed.reason.endswith("Expected assignment of 2 partitions, got 0")
    assert results["0045_subscribe_many_updates"].state == "skipped"
    assert results["0045_subscribe_many_updates"].reason == "Test requires RapidJSON"
    assert results["0028_long_topicnames"].reason == "Filtered due to negative test flags"
    assert "<MAIN>" not in results


def test_parse_runner_output_without_summary():
    """A runner killed at its cap printed no summary: the end-of-test lines and failure messages remain."""
    cut = RUNNER_OUTPUT.split("TEST 2025")[0]
    results = suite.parse_runner_output(cut)
    assert results["0045_subscribe_update"].state == "passed"
    assert results["0045_subscribe_update"].duration_s is None
    # A failing test's thread exits without an end line: its failure message is enough.
    assert results["0045_resubscribe_with_regex"] == suite.TestResult(
        "0045_resubscribe_with_regex",
        "failed",
        None,
        "do_test_resubscribe_with_regex:720: Expected assignment of 2 partitions, got 0",
    )
    assert "0045_subscribe_many_updates" not in results  # still running when the runner was killed


def test_parse_runner_output_report_wins():
    report = json.loads(
        '{"id": "x", "tests": {"<MAIN>": {"name": "<MAIN>", "state": "PASSED", "duration": 99.0},'
        ' "0045_subscribe_update": {"name": "0045_subscribe_update", "state": "FAILED", "duration": 50.0,'
        ' "report": [{"a": 1}]}, "0045_gone": {"state": "DNS"}}}'
    )
    results = suite.parse_runner_output(RUNNER_OUTPUT, report)
    assert results["0045_subscribe_update"].state == "failed"
    assert results["0045_subscribe_update"].duration_s == 50.0
    assert "0045_gone" not in results
    assert results["0045_resubscribe_with_regex"].state == "failed"  # from the table, the report lacks it


def test_read_report_tolerates_bad_json(tmp_path):
    (tmp_path / "r.json").write_text('{"tests": {"a": {"extra": "un"escaped"}}}')
    assert suite.read_report(tmp_path / "r.json") is None
    assert suite.read_report(tmp_path / "missing.json") is None


def _run(tmp_path: Path, tests: list[str], text: str, exit_code: int, killed: bool = False) -> suite.NumberRun:
    log = tmp_path / "runner.log"
    log.write_text(text)
    run = suite.NumberRun(tests[0][:4], tests, 900, log, exit_code=exit_code, killed=killed)
    run.results = suite.settle_results(run, suite.parse_runner_output(text))
    return run


def test_settle_results(tmp_path):
    tests = ["0045_subscribe_update", "0045_resubscribe_with_regex", "0045_subscribe_many_updates"]
    run = _run(tmp_path, tests, RUNNER_OUTPUT, 134)
    assert [result.state for result in run.results.values()] == ["passed", "failed", "skipped"]

    cut = RUNNER_OUTPUT.split("\x1b[31m### Test")[0]
    run = _run(tmp_path, tests, cut, -9, killed=True)
    assert run.results["0045_subscribe_update"].state == "passed"
    assert run.results["0045_resubscribe_with_regex"].reason == "no result: killed after the 900 s cap"

    run = _run(tmp_path, tests[:1], "", 1)
    assert run.results["0045_subscribe_update"].reason == "no result: test-runner exited with code 1"

    leaked = RUNNER_OUTPUT.replace("0045_resubscribe_with_regex              |     FAILED", "x") + (
        "\x1b[33m[<MAIN>                      /100.000s] WARN: 1 thread(s) still active in librdkafka\n"
    )
    run = _run(tmp_path, tests[:1], leaked, 134)
    assert run.results["0045_subscribe_update"].state == "failed"
    assert "exited with code 134 after the test passed" in run.results["0045_subscribe_update"].reason


def test_rows_counts_and_table(tmp_path):
    selection = suite.load_selection()
    text = (
        "|\x1b[32m 0001_multiobj |     PASSED |   1.000s \x1b[0m|\n"
        "|\x1b[31m 0092_mixed_msgver |     FAILED |   2.000s \x1b[0m| INVALID_CONFIG\n"
        "|\x1b[31m 0081_admin |     PASSED |   3.000s \x1b[0m|\n"
        "|\x1b[31m 0002_unkpart |     FAILED |   4.000s \x1b[0m| boom\n"
        "|\x1b[33m 0053_stats |    SKIPPED |   0.000s \x1b[0m| RapidJSON >=1.1.0 not available\n"
    )
    runs = [
        _run(tmp_path, [name], text, 0)
        for name in ("0001_multiobj", "0092_mixed_msgver", "0081_admin", "0002_unkpart", "0053_stats")
    ]
    rows = suite.make_rows(selection, runs)
    assert suite.counts_line(rows) == "2 passed, 2 failed, 1 skipped"
    assert [row.name for row in rows if row.unexpected] == ["0002_unkpart"]
    by_name = {row.name: row for row in rows}
    assert by_name["0092_mixed_msgver"].note.startswith("known, issue 17: ")
    assert "but passed" in by_name["0081_admin"].note
    table = suite.format_table(rows)
    assert "0002_unkpart" in table and "FAILED" in table
    markdown = suite.format_markdown_failures(rows)
    assert "| 0002_unkpart | none (unexpected) | boom |" in markdown
    assert "| 0092_mixed_msgver | 17 |" in markdown


def test_command_refuses_a_directory_that_is_no_source_tree(tmp_path, capsys):
    assert suite.main([str(tmp_path)]) == suite.EXIT_CANNOT_RUN
    assert "is not a librdkafka source tree" in capsys.readouterr().err


def test_write_test_conf(tmp_path):
    path = tmp_path / "test.conf"
    suite.write_test_conf(path, "127.0.0.1:12345", {"broker.address.family": "v4", "test.timeout.multiplier": "2"})
    lines = path.read_text().splitlines()
    assert "bootstrap.servers=127.0.0.1:12345" in lines
    assert "security.protocol=PLAINTEXT" in lines
    assert "test.timeout.multiplier=2" in lines
