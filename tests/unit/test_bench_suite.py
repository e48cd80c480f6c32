"""Smoke test of benchmarks/suite.py: a small run against pybroker only, bounded in time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE_TIMEOUT_S = 60

pytest.importorskip("confluent_kafka")


def test_quick_suite_against_pybroker(tmp_path: Path) -> None:
    rows_path = tmp_path / "rows.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "suite.py"), "--quick", "--brokers", "pybroker",
         "--messages", "20000", "--latency-seconds", "2", "--only", "produce,consume,latency",
         "--json", str(rows_path)],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {row["workload"]: row for row in json.loads(rows_path.read_text())["rows"]}
    assert set(rows) == {"produce 100B acks=1", "produce 100B acks=all", "consume 100B", "latency 5000/s acks=all"}
    for workload, row in rows.items():
        assert row["broker"] == "pybroker", workload
        assert row["error"] is None, (workload, row["error"])
        assert row["msg_per_s"] > 0, workload
        assert row["workload"] in result.stdout  # the printed table has the row
    assert rows["consume 100B"]["messages"] == 20000
    assert rows["latency 5000/s acks=all"]["latency_p50_ms"] > 0


def _suite_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import suite
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return suite


def _benchmark_module(name: str):
    _suite_module()  # puts the benchmarks directory's modules in sys.modules
    return sys.modules[name]


def _runs(suite, workload: str, broker: str, msg_per_s: list[float]) -> list[dict]:
    return [suite.make_row(workload, broker, {"messages": rate, "payload_bytes": rate * 100, "seconds": 1.0})
            for rate in msg_per_s]  # fmt: skip


def test_overlapping_ranges_make_a_tie_and_separate_ones_a_difference() -> None:
    suite = _suite_module()
    rows = suite.summarize(
        _runs(suite, "close", "pybroker", [90, 100, 130]) + _runs(suite, "close", "tansu", [120, 125, 140])
        + _runs(suite, "apart", "pybroker", [200, 210, 220]) + _runs(suite, "apart", "tansu", [100, 105, 110])
        + _runs(suite, "once", "pybroker", [200]) + _runs(suite, "once", "tansu", [100])
    )  # fmt: skip
    suite.add_ratios(rows)
    by_workload = {row["workload"]: row for row in rows if row["broker"] == "pybroker"}
    close, apart, once = by_workload["close"], by_workload["apart"], by_workload["once"]
    assert close["spread"]["msg_per_s"] == [90, 130] and close["msg_per_s"] == 100
    assert (close["pybroker_vs_tansu"], close["ratio_tie"]) == (0.8, True)
    assert (apart["pybroker_vs_tansu"], apart["ratio_tie"]) == (2.0, False)
    assert (once["pybroker_vs_tansu"], once["ratio_tie"]) == (2.0, None)  # no spread, no verdict
    table = suite.format_table(rows)
    assert "tie 0.80" in table and "100 [90.0-130]" in table and "2.00?" in table
    assert ("throughput, 3 workloads: pybroker higher in 1, lower in 0, tie in 1; "
            "1 with one run each, not judged (pybroker higher in 1)") in suite.comparison(rows)  # fmt: skip


def test_the_side_that_used_a_whole_core_limits_the_row() -> None:
    report = _benchmark_module("report")
    cores = os.cpu_count() or 1

    def side(client: float, broker: float, machine: float | None = None, **extra) -> str | None:
        return report.limiting_side({"client_busiest_cores": client, "client_cores": client, "broker_cores": broker,
                                     "machine_cores": machine, **extra})  # fmt: skip

    assert side(1.2, 0.1) == "client"
    assert side(0.2, 0.95) == "broker"
    assert side(1.0, 0.9) == "both"
    assert side(0.3, 0.3, machine=cores * 1.0) == "all cores"  # other load filled the machine
    assert side(0.3, 0.3, machine=0.6) == ("neither" if cores > 1 else "all cores")
    assert side(0.3, 0.3, rate_limited=True) == "fixed rate"
    assert report.limiting_side({"client_busiest_cores": None, "broker_cores": 0.5}) is None


def test_parallel_producers_messages_per_partition_match_their_partitions() -> None:
    workloads = _benchmark_module("workloads")
    for messages, partitions, run, first in [(0, 8, 3, 0), (1, 8, 3, 5), (1000, 64, 100, 16), (12345, 7, 10, 6)]:
        held = [0] * partitions
        for message in range(messages):
            held[workloads._partition_of(message, partitions, run, first)] += 1
        assert workloads._messages_per_partition(messages, partitions, run, first) == held


def test_quick_parallel_workload_against_pybroker(tmp_path: Path) -> None:
    """Four producer and four consumer processes for a second; every message read back."""
    rows_path = tmp_path / "rows.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "suite.py"), "--quick", "--brokers", "pybroker",
         "--only", "parallel", "--parallel-seconds", "1", "--json", str(rows_path)],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S * 2,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads(rows_path.read_text())["rows"]
    assert [row["workload"] for row in rows] == [
        "parallel 4+4 procs 64p 1KB acks=all",
        "parallel 4+4 procs 64p 10KB acks=all",
    ]
    for row in rows:
        assert row["error"] is None, row["error"]
        assert row["messages"] > 0 and row["mb_per_s"] > 0 and row["read_mb_per_s"] > 0
        assert row["client_processes"] == 8 and row["client_cores"] > 0 and row["broker_cores"] > 0
        assert 0 < row["latency_p50_ms"] <= row["latency_p99_ms"] <= row["latency_p999_ms"]
        assert row["limited_by"] is not None
    assert "cores client / broker / other" in result.stdout


def test_rounds_are_summarized_by_their_median() -> None:
    suite = _suite_module()
    rounds = [
        suite.make_row("produce", "pybroker", {"messages": 10, "payload_bytes": 1000, "seconds": s}, peak_rss_mb=rss)
        for s, rss in ((1.0, 30.0), (4.0, 50.0), (2.0, 40.0))
    ]
    rounds.append(suite.make_row("produce", "tansu", {"messages": 10, "payload_bytes": 1000, "seconds": 1.0}))
    [py, tansu] = suite.summarize(rounds)
    assert (py["broker"], py["rounds"], py["seconds"], py["msg_per_s"]) == ("pybroker", 3, 2.0, 5.0)
    assert py["peak_rss_mb"] == 50.0  # the largest, not the median
    assert tansu["rounds"] == 1
    suite.add_ratios([py, tansu])
    assert py["pybroker_vs_tansu"] == 0.5


def test_a_failed_round_fails_the_summary_row() -> None:
    suite = _suite_module()
    ok = suite.make_row("consume", "pybroker", {"messages": 10, "payload_bytes": 1000, "seconds": 1.0})
    failed = suite.make_row("consume", "pybroker", error="TimeoutError: slow")
    [row] = suite.summarize([ok, failed, ok])
    assert row["msg_per_s"] is None
    assert row["error"].startswith("1 of 3 runs failed") and "slow" in row["error"]


def test_limit_rows_report_the_receivers_cpu(tmp_path: Path) -> None:
    suite = _suite_module()
    args = suite.parse_args(["--quick", "--messages", "20000"])
    rows = {row["workload"]: row for row in suite.run_machine_limits(args, str(tmp_path))}
    assert set(rows) == {"limit: TCP sink 1MB writes", "limit: TCP sink -> file append",
                         "limit: file append 1MB writes", "limit: file append + fsync"}  # fmt: skip
    for workload, row in rows.items():
        assert row["error"] is None, (workload, row["error"])
        assert row["mb_per_s"] > 0 and row["cpu_seconds_per_gb"] >= 0, workload
    assert list(tmp_path.iterdir()) == []  # the scratch files are gone
