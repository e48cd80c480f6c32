"""Two commits of pybroker side by side, in one run: is a change costlier?

Each commit's tree is exported (``git archive``) into a temporary directory and
``benchmarks/suite.py`` of that tree runs against that tree's broker, one round at
a time, alternating between the commits (A, B, A, B, ...), so that the slow and
fast phases of a shared machine fall on both. The table shows, per workload and
figure, each commit's median [min-max] over its runs and B/A; "noise" where the
two ranges overlap.

    python benchmarks/compare_commits.py HEAD~1 HEAD
    python benchmarks/compare_commits.py v1 v2 --only produce,consume,latency --pairs 8

Both commits need a suite.py with --only, --brokers, --rounds and --json. The
installed packages (confluent-kafka, uvloop, ...) are this environment's, shared
by both; only the project's own code differs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Figures compared, with their direction: True when more is better.
FIGURES = {
    "cpu_seconds_per_gb": False,
    "broker_cpu_seconds": False,
    "peak_rss_mb": False,
    "latency_p50_ms": False,
    "latency_p99_ms": False,
    "mb_per_s": True,
}
RUN_TIMEOUT_S = 1800


def export_tree(rev: str, into: Path) -> str:
    """The commit's files under ``into``; returns the commit's short id."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "archive", commit], cwd=ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {rev} failed")
    return commit


def run_suite(tree: Path, only: str, json_path: Path) -> list[dict]:
    command = [
        sys.executable, "benchmarks/suite.py", "--only", only, "--brokers", "pybroker",
        "--rounds", "1", "--json", str(json_path),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if done.returncode != 0 or not json_path.exists():
        raise SystemExit(f"suite.py in {tree} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(json_path.read_text())["round_rows"]


def summary(values: list[float]) -> tuple[float, float, float] | None:
    values = [v for v in values if v is not None]
    return (statistics.median(values), min(values), max(values)) if values else None


def compare(rows_a: list[dict], rows_b: list[dict], label_a: str, label_b: str) -> str:
    workloads = list(dict.fromkeys(r["workload"] for r in rows_a + rows_b))
    lines = [f"| workload | figure | {label_a} | {label_b} | B/A |", "| --- | --- | ---: | ---: | ---: |"]
    for workload in workloads:
        for figure in FIGURES:
            a = summary([r.get(figure) for r in rows_a if r["workload"] == workload])
            b = summary([r.get(figure) for r in rows_b if r["workload"] == workload])
            if a is None or b is None:
                continue
            overlap = a[1] <= b[2] and b[1] <= a[2]
            ratio = f"{b[0] / a[0]:.2f}" if a[0] else "-"
            verdict = f"{ratio} noise" if overlap else ratio
            lines.append(
                f"| {workload} | {figure} | {a[0]:.3g} [{a[1]:.3g}-{a[2]:.3g}] | {b[0]:.3g} [{b[1]:.3g}-{b[2]:.3g}] | {verdict} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="commit A (the one before)")
    parser.add_argument("head", nargs="?", default="HEAD", help="commit B (default HEAD)")
    parser.add_argument("--only", default="produce,consume,latency", help="suite.py workloads")
    parser.add_argument("--pairs", type=int, default=5, help="runs of each commit, alternating (default 5)")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    with tempfile.TemporaryDirectory(prefix="pybroker-compare-") as work:
        work_dir = Path(work)
        trees = {}
        for name, rev in (("a", args.base), ("b", args.head)):
            trees[name] = (export_tree(rev, work_dir / name), work_dir / name)
        rows: dict[str, list[dict]] = {"a": [], "b": []}
        for pair in range(1, args.pairs + 1):
            for name in ("a", "b"):
                commit, tree = trees[name]
                print(f"pair {pair}/{args.pairs}: {commit} ...", flush=True)
                rows[name] += run_suite(tree, args.only, work_dir / f"{name}-{pair}.json")
        label_a, label_b = f"A {trees['a'][0]}", f"B {trees['b'][0]}"
        print()
        print(f"{args.pairs} runs each, alternating; median [min-max]; 'noise': the ranges overlap")
        print(compare(rows["a"], rows["b"], label_a, label_b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
