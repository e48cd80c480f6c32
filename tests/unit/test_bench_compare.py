"""benchmarks/compare.py, the regression guard: its verdicts, exit status and arguments.

No broker runs here: the benchmark runs are replaced by rows given in the test.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.compare import (
    REPLICATION_FIGURES,
    SUITE_FIGURES,
    RunFailure,
    Side,
    chance_apart,
    compare_rows,
    exit_code,
    missing_reason,
    parse_args,
    parse_replication_output,
    run_pairs,
    summary,
    verdict,
)

TOLERANCE = 0.05


# ---------------------------------------------------------------- verdict


def test_overlapping_ranges_are_noise_whatever_the_medians():
    # medians 1.0 and 1.3 (30 % apart) but the head's best run is inside the base's range
    assert verdict((1.0, 0.9, 1.25), (1.3, 1.2, 1.4), False, TOLERANCE) == "noise"


def test_separate_ranges_beyond_the_tolerance_are_worse_or_better_by_direction():
    base, head = (1.0, 0.95, 1.05), (1.2, 1.15, 1.25)
    assert verdict(base, head, False, TOLERANCE) == "worse"  # CPU up by 20 %
    assert verdict(base, head, True, TOLERANCE) == "better"  # throughput up by 20 %
    assert verdict(head, base, False, TOLERANCE) == "better"
    assert verdict(head, base, True, TOLERANCE) == "worse"


def test_separate_ranges_within_the_tolerance_are_noise():
    # a consistent 3 % difference: measured, but under the 5 % tolerance
    assert verdict((1.0, 0.999, 1.001), (1.03, 1.029, 1.031), False, TOLERANCE) == "noise"
    assert verdict((1.0, 0.999, 1.001), (1.03, 1.029, 1.031), False, 0.02) == "worse"


def test_touching_ranges_overlap():
    assert verdict((1.0, 0.9, 1.1), (1.5, 1.1, 1.9), False, TOLERANCE) == "noise"


def test_a_zero_base_median():
    assert verdict((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), False, TOLERANCE) == "noise"
    assert verdict((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), False, TOLERANCE) == "worse"


def test_summary_leaves_out_missing_values():
    assert summary([3.0, None, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert summary([None, None]) is None


def suite_rows(workload: str, **figures: list[float]) -> list[dict]:
    count = len(next(iter(figures.values())))
    return [{"workload": workload, **{key: values[i] for key, values in figures.items()}} for i in range(count)]


def test_compare_rows_per_workload_and_figure():
    base = suite_rows("produce 100B acks=1", cpu_seconds_per_gb=[1.0, 1.1, 1.05], mb_per_s=[150.0, 151.0, 149.0], broker_cpu_seconds=[0.2, 0.22, 0.21])  # fmt: skip
    head = suite_rows("produce 100B acks=1", cpu_seconds_per_gb=[1.5, 1.6, 1.55], mb_per_s=[150.5, 151.0, 148.0], broker_cpu_seconds=[0.3, 0.32, 0.31])  # fmt: skip
    base += suite_rows("latency 5000/s acks=all", latency_p99_ms=[3.0, 3.2, 3.1], broker_cpu_seconds=[2.0, 2.1, 2.2])
    head += suite_rows("latency 5000/s acks=all", latency_p99_ms=[2.0, 2.1, 2.2], broker_cpu_seconds=[2.1, 2.2, 2.3])
    results = {(r["workload"], r["figure"]): r for r in compare_rows(base, head, SUITE_FIGURES, TOLERANCE)}
    assert set(results) == {
        ("produce 100B acks=1", "broker CPU s/GB"),
        ("produce 100B acks=1", "MB/s"),
        # CPU seconds only where there is no s/GB (a fixed-rate row)
        ("latency 5000/s acks=all", "p99 ms"),
        ("latency 5000/s acks=all", "broker CPU s"),
    }
    assert results[("produce 100B acks=1", "broker CPU s/GB")]["verdict"] == "worse"
    assert results[("produce 100B acks=1", "broker CPU s/GB")]["ratio"] == pytest.approx(1.55 / 1.05)
    assert results[("produce 100B acks=1", "MB/s")]["verdict"] == "noise"
    assert results[("latency 5000/s acks=all", "p99 ms")]["verdict"] == "better"
    assert results[("latency 5000/s acks=all", "broker CPU s")]["verdict"] == "noise"
    assert results[("produce 100B acks=1", "MB/s")]["runs"] == (3, 3)


def test_a_fixed_rate_row_has_no_throughput_verdict():
    base = suite_rows("latency 5000/s acks=all", mb_per_s=[0.5, 0.5], latency_p99_ms=[3.0, 3.0], rate_limited=[True, True])  # fmt: skip
    head = suite_rows("latency 5000/s acks=all", mb_per_s=[0.4, 0.4], latency_p99_ms=[3.0, 3.0], rate_limited=[True, True])  # fmt: skip
    assert [r["figure"] for r in compare_rows(base, head, SUITE_FIGURES, TOLERANCE)] == ["p99 ms"]


def test_chance_of_ranges_apart_with_no_difference():
    # all n head runs above all m base runs: 1 order out of C(m + n, n)
    assert [round(1 / chance_apart(n, n)) for n in (1, 2, 3, 5)] == [2, 6, 20, 252]
    assert round(1 / chance_apart(6, 6)) == 924  # suite.py's consume: 3 reads a run, 2 pairs


def test_exit_code():
    noise = {"verdict": "noise"}
    assert exit_code([noise, {"verdict": "better"}], failed=False) == 0
    assert exit_code([noise, {"verdict": "worse"}], failed=False) == 1
    assert exit_code([{"verdict": "worse"}], failed=True) == 2
    assert exit_code([], failed=False) == 0


# ---------------------------------------------------------------- arguments


def test_defaults_and_workloads():
    args = parse_args(["--base", "e751f8a"])
    assert (args.base, args.head, args.pairs, args.tolerance) == ("e751f8a", None, 3, 5.0)
    assert args.selected == ["produce", "consume", "latency"]
    args = parse_args(["--base", "HEAD~1", "--head", "HEAD", "--only", "replication, produce,replication", "--tolerance", "10"])  # fmt: skip
    assert args.selected == ["replication", "produce"] and args.tolerance == 10.0
    assert parse_args(["--base", "x", "--venv", "cache/venv"]).venv == Path.cwd() / "cache" / "venv"


@pytest.mark.parametrize(
    "argv",
    [
        [],  # --base is required
        ["--base", "x", "--pairs", "0"],
        ["--base", "x", "--tolerance", "-1"],
        ["--base", "x", "--only", "produce,bogus"],
        ["--base", "x", "--only", ","],
        ["--base", "x", "--messages", "0"],
        ["--base", "x", "--head", "y", "--venv", "v"],
    ],
)
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as raised:
        parse_args(argv)
    assert raised.value.code == 2
    assert "error" in capsys.readouterr().err


# ---------------------------------------------------------------- trees and runs


def tree(tmp_path: Path, name: str, suite: str | None, replication: str | None) -> Path:
    root = tmp_path / name
    (root / "benchmarks").mkdir(parents=True)
    if suite is not None:
        (root / "benchmarks" / "suite.py").write_text(suite)
    if replication is not None:
        (root / "benchmarks" / "replication.py").write_text(replication)
    return root


SUITE_TEXT = 'WORKLOAD_NAMES = ("produce", "consume", "latency")\nparser.add_argument("--json")\n'


def test_missing_reason(tmp_path):
    full = tree(tmp_path, "full", SUITE_TEXT, "")
    assert missing_reason(full, "produce") is None and missing_reason(full, "replication") is None
    assert missing_reason(full, "keyed") == "its suite.py has no workload keyed"
    bare = tree(tmp_path, "bare", None, None)
    assert missing_reason(bare, "produce") == "its tree has no benchmarks/suite.py"
    assert missing_reason(bare, "replication") == "its tree has no benchmarks/replication.py"
    old = tree(tmp_path, "old", 'WORKLOAD_NAMES = ("produce",)\n', "")
    assert missing_reason(old, "produce") == "its suite.py has no --json"


def test_replication_figures_from_printed_lines():
    printed = (
        "  round 1 rf1: 40k msg/s (12.50 s)\n"
        "  round 1 rf3: 25k msg/s (20.00 s)\n"
        "throughput acks=all, 100 B, 500000 messages, median of 1: RF=1 40k msg/s, RF=3 25k msg/s, ratio 0.62\n"
        "broker CPU during RF=3 produce (payload): leader 4.01 s/GB, follower 2.80 s/GB\n"
    )
    assert parse_replication_output(printed, 500_000) == {
        "rf1_msg_per_s": 40_000.0, "rf3_msg_per_s": 25_000.0,
        "leader_cpu_seconds_per_gb": 4.01, "follower_cpu_seconds_per_gb": 2.8,
    }  # fmt: skip
    with pytest.raises(RunFailure):
        parse_replication_output("Traceback ...", 500_000)


def run_args(only: str, pairs: int = 2) -> argparse.Namespace:
    return parse_args(["--base", "b", "--only", only, "--pairs", str(pairs)])


def fake_suite(cpu: dict[str, list[float]], calls: list[str]):
    def run(side, workloads, messages, scratch):
        calls.append(side.name)
        value = cpu[side.name][sum(1 for c in calls if c == side.name) - 1]
        return [{"workload": "produce 100B acks=1", "broker": "pybroker", "cpu_seconds_per_gb": value}]

    return run


def sides(tmp_path: Path, base_replication: str | None = "") -> tuple[Side, Side]:
    base = Side("base", "base b", tree(tmp_path, "b", SUITE_TEXT, base_replication), "python")
    head = Side("head", "head h", tree(tmp_path, "h", SUITE_TEXT, ""), "python")
    return base, head


def test_runs_alternate_and_a_worse_figure_exits_1(tmp_path, capsys):
    calls: list[str] = []
    run_suite = fake_suite({"base": [1.0, 1.1], "head": [1.5, 1.6]}, calls)
    status = run_pairs(run_args("produce"), *sides(tmp_path), tmp_path, run_suite=run_suite)
    assert calls == ["base", "head", "base", "head"]
    assert status == 1
    out = capsys.readouterr().out
    assert "| produce 100B acks=1 | broker CPU s/GB | 2+2 | 1.05 [1-1.1] | 1.55 [1.5-1.6] | 1.48 | worse |" in out
    assert "worse beyond the noise: produce 100B acks=1: broker CPU s/GB x1.48 (by chance alone: 1 in 6)" in out


def test_noise_exits_0(tmp_path):
    run_suite = fake_suite({"base": [1.0, 1.2], "head": [1.1, 1.3]}, [])
    assert run_pairs(run_args("produce"), *sides(tmp_path), tmp_path, run_suite=run_suite) == 0


def test_a_failed_run_exits_2(tmp_path, capsys):
    def failing(side, workloads, messages, scratch):
        raise RunFailure("broker did not start")

    assert run_pairs(run_args("produce"), *sides(tmp_path), tmp_path, run_suite=failing) == 2
    assert "broker did not start" in capsys.readouterr().err


def test_a_workload_the_base_lacks_is_skipped(tmp_path, capsys):
    calls: list[str] = []
    run_suite = fake_suite({"base": [1.0, 1.0], "head": [1.0, 1.0]}, calls)

    def replication_must_not_run(*_args):
        raise AssertionError("replication ran although the base has no replication.py")

    status = run_pairs(run_args("produce,replication"), *sides(tmp_path, base_replication=None), tmp_path,
                       run_suite=run_suite, run_replication=replication_must_not_run)  # fmt: skip
    assert status == 0 and calls == ["base", "head", "base", "head"]
    assert "skipping replication: base b: its tree has no benchmarks/replication.py" in capsys.readouterr().out


def test_replication_figures_and_directions(tmp_path, capsys):
    def run_replication(side, messages, scratch):
        slower = side.name == "head"
        return [{"workload": "replication RF=3 acks=all throughput", "rf3_msg_per_s": 20_000.0 if slower else 30_000.0,
                 "rf1_msg_per_s": 40_000.0, "leader_cpu_seconds_per_gb": 4.0, "follower_cpu_seconds_per_gb": 2.0 if slower else 3.0}]  # fmt: skip

    status = run_pairs(run_args("replication"), *sides(tmp_path), tmp_path, run_replication=run_replication)
    out = capsys.readouterr().out
    assert status == 1
    assert "| RF=3 msg/s | 2+2 | 30,000 [30,000-30,000] | 20,000 [20,000-20,000] | 0.67 | worse |" in out
    assert "| follower CPU s/GB | 2+2 | 3 [3-3] | 2 [2-2] | 0.67 | better |" in out
    assert "| leader CPU s/GB | 2+2 | 4 [4-4] | 4 [4-4] | 1.00 | noise |" in out
    assert {name for name, _ in REPLICATION_FIGURES.values()} == {"leader CPU s/GB", "follower CPU s/GB", "RF=3 msg/s", "RF=1 msg/s"}  # fmt: skip


def test_nothing_both_sides_can_run_exits_2(tmp_path, capsys):
    def must_not_run(*_args):
        raise AssertionError("a workload ran although the base cannot run it")

    status = run_pairs(run_args("replication"), *sides(tmp_path, base_replication=None), tmp_path,
                       run_suite=must_not_run, run_replication=must_not_run)  # fmt: skip
    assert status == 2
    assert "nothing compared" in capsys.readouterr().out
