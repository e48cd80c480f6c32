"""benchmarks/request_path.py runs end to end at a tiny size: every produce and
fetch it sends is answered without error (it raises otherwise), fetch reads back
what produce wrote, and it prints one row per path."""

from __future__ import annotations

import json

import pytest

from benchmarks.request_path import _next_offset, main
from protocol.records import build_batch


def test_both_paths_run_and_report(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    figures = tmp_path / "figures.json"
    assert main(["--rounds", "1", "--requests", "30", "--records", "5", "--json", str(figures)]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]]
    assert rows == ["produce", "fetch"]
    rounds = json.loads(figures.read_text())["rounds"]
    assert rounds["produce"][0]["requests"] == rounds["fetch"][0]["requests"] == 30
    assert all(run["broker_cpu_s"] >= 0 and run["peak_rss_mb"] > 0 for runs in rounds.values() for run in runs)


def test_the_next_fetch_starts_after_the_last_whole_batch() -> None:
    first = build_batch([(None, b"a")] * 3, base_offset=10)
    second = build_batch([(None, b"b")] * 2, base_offset=13)
    assert _next_offset(first + second, 10) == 15
    assert _next_offset(first + second[:20], 10) == 13  # a partial batch at the end is not counted
    assert _next_offset(b"", 7) == 7
