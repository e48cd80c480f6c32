"""benchmarks/request_cost.py runs end to end at a tiny size: every produce it sends
is answered without error (it raises otherwise) and it prints a line per run."""

from __future__ import annotations

import pytest

from benchmarks.request_cost import _pair_summary, main


def test_both_parts_run_and_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--pairs", "1", "--codec-mb", "1", "--messages", "2000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(",")[0] for line in lines if not line.startswith(" ")] == [
        "codec", "codec", "librdkafka", "librdkafka",
    ]
    assert "16 partitions a request" in lines[0] and "  3 requests" in lines[0]
    assert "1 partition a request" in lines[1] and "48 requests" in lines[1]
    assert all("requests of" in line and "us/request" in line for line in lines if not line.startswith(" "))


def test_a_pair_too_short_for_the_clock_says_so() -> None:
    wide = {"cpu_s": 0.0, "requests": 3}
    assert "too short" in _pair_summary(wide, {"cpu_s": 0.01, "requests": 48})
    assert _pair_summary({"cpu_s": 0.1, "requests": 10}, {"cpu_s": 0.2, "requests": 110}) == (
        "2.00x the CPU; 1000 us per extra request"
    )
