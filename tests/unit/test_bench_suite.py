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
    assert row["error"].startswith("1 of 3 rounds failed") and "slow" in row["error"]


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
