"""benchmarks/compare_commits.py: the side-by-side table of two commits' runs."""

from __future__ import annotations

import pytest

from benchmarks.compare_commits import compare, main, summary


def rows(workload: str, cpu: list[float], rss: list[float]) -> list[dict]:
    return [{"workload": workload, "cpu_seconds_per_gb": c, "peak_rss_mb": r} for c, r in zip(cpu, rss, strict=True)]


def test_overlapping_ranges_are_noise_and_separate_ones_a_ratio():
    a = rows("produce 100B acks=1", [1.0, 1.2, 1.1], [50.0, 51.0, 52.0])
    b = rows("produce 100B acks=1", [1.15, 1.3, 1.25], [60.0, 61.0, 62.0])
    table = compare(a, b, "A x", "B y").splitlines()
    assert table[0] == "| workload | figure | A x | B y | B/A |"
    cpu = next(line for line in table if "cpu_seconds_per_gb" in line)
    rss = next(line for line in table if "peak_rss_mb" in line)
    assert cpu.endswith("| 1.14 noise |"), cpu  # medians 1.1 and 1.25; [1.0-1.2] meets [1.15-1.3]
    assert rss.endswith("| 1.20 |"), rss  # 51 and 61, apart
    assert "1.1 [1-1.2]" in cpu


def test_figures_a_workload_lacks_are_left_out():
    a = [{"workload": "latency", "latency_p99_ms": 3.0, "cpu_seconds_per_gb": None}]
    b = [{"workload": "latency", "latency_p99_ms": 4.0, "cpu_seconds_per_gb": None}]
    table = compare(a, b, "A", "B")
    assert "latency_p99_ms" in table and "cpu_seconds_per_gb" not in table
    assert summary([None, None]) is None


def test_pairs_must_be_positive():
    with pytest.raises(SystemExit):
        main(["HEAD", "HEAD", "--pairs", "0"])
