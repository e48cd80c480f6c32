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
