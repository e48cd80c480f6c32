"""Regression guard: two builds of pybroker side by side in one run; exits 1 when the head is worse.

    python benchmarks/compare.py --base e751f8a
    python benchmarks/compare.py --base HEAD~1 --only replication --pairs 3
    python benchmarks/compare.py --base main --head HEAD --only produce,consume,latency,replication

Builds. The base (``--base REF``) is checked out in a temporary git worktree
(``git worktree add --detach``) with its own temporary venv (``python -m venv``,
then ``pip install -e '.[test]'`` from the worktree; the time taken is printed).
``--venv DIR`` keeps that venv between runs: pip then finds the dependencies
installed and only reinstalls the project. The head is, by default, the working
tree of the checkout this file is in, uncommitted changes included, run with the
current interpreter; ``--head REF`` builds a commit the way the base is built.
Worktrees and temporary venvs are removed at the end, on failure and on Ctrl-C.

Workloads (``--only``, comma-separated; default produce,consume,latency): the
pybroker workloads of ``benchmarks/suite.py`` (produce, consume, latency, ...,
one round a run, through its ``--json``) and ``replication``: the RF=3
throughput of ``benchmarks/replication.py --only throughput`` (leader and
follower CPU s/GB, RF=3 and RF=1 msg/s, one round a run, through its ``--json``,
or its printed lines where the tree's version has no ``--json``). Each side runs
its own tree's benchmark script, which runs that tree's broker; the installed
packages are each side's venv's. A workload whose script (or suite.py workload)
one side lacks is skipped, and the guard says so. Both sides get the same sizes
(``--messages``), and run alternately: base, head, base, head... (``--pairs N``
runs each), so the slow and fast phases of a shared machine fall on both.

Verdict, per workload and figure, over each side's runs: "worse" (or "better")
when the two sides' [min-max] ranges do not overlap AND the ratio of the medians
head/base is beyond ``--tolerance`` (default 5 %) in the bad (or good)
direction; "noise" otherwise. Non-overlapping ranges say the difference is
larger than the run-to-run spread measured here; the tolerance keeps a
consistent but negligible difference from failing the guard. Directions: CPU,
RSS and latency are better lower; throughput is better higher. How often noise
alone passes the first test: if the build made no difference, any order of the
m + n runs is as likely as any other, and all n head runs land above all m base
runs in 1 of C(m + n, n) orders: 1 in 6 at 2+2, 1 in 20 at 3+3, 1 in 252 at
5+5, per figure (the table shows each figure's runs; the summary line gives
that chance for each "worse"). The tolerance removes such chance verdicts for
figures whose runs vary less than it; for noisier ones (throughput bound by the
client on a shared machine) more pairs are the remedy. With ``--pairs 1`` there
is no spread, and only the tolerance decides.

Exit status: 0 when no figure is worse, 1 when one is (they are listed), 2 when
a build or a run failed, or when no workload could run on both sides.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE_WORKLOADS = ("produce", "consume", "keyed", "latency", "large", "parallel", "kafka-python")
REPLICATION = "replication"
DEFAULT_ONLY = "produce,consume,latency"
DEFAULT_PAIRS = 3
DEFAULT_TOLERANCE_PERCENT = 5.0
# Each benchmark's own default size, passed explicitly so that both sides do the same work
# even if one tree's default changed; the replication one is the (500,000).
DEFAULT_SUITE_MESSAGES = 2_000_000
DEFAULT_REPLICATION_MESSAGES = 500_000
SUITE_LATENCY_S = 10.0
RUN_TIMEOUT_S = 1800
INSTALL_TIMEOUT_S = 1800
STOP_GRACE_S = 10.0

# Figures compared: key in the benchmark's rows -> (name printed, True when more is better).
SUITE_FIGURES = {
    "cpu_seconds_per_gb": ("broker CPU s/GB", False),
    # Only where there is no s/GB: the latency row runs at a fixed rate, so its CPU seconds
    # are comparable while its per-GB figure is not computed.
    "broker_cpu_seconds": ("broker CPU s", False),
    "peak_rss_mb": ("peak RSS MB", False),
    "latency_p50_ms": ("p50 ms", False),
    "latency_p99_ms": ("p99 ms", False),
    "mb_per_s": ("MB/s", True),
}
REPLICATION_FIGURES = {
    "leader_cpu_seconds_per_gb": ("leader CPU s/GB", False),
    "follower_cpu_seconds_per_gb": ("follower CPU s/GB", False),
    "rf3_msg_per_s": ("RF=3 msg/s", True),
    "rf1_msg_per_s": ("RF=1 msg/s", True),
}
REPLICATION_WORKLOAD = "replication RF=3 acks=all throughput"


class RunFailure(Exception):
    """A build or a benchmark run failed: exit status 2."""


@dataclass
class Side:
    name: str  # "base" or "head"
    label: str  # what the table calls it, e.g. "base e751f8a"
    tree: Path
    python: str


# ---------------------------------------------------------------- verdict


def summary(values: list[float | None]) -> tuple[float, float, float] | None:
    """(median, min, max) of the values that are there; None when none is."""
    present = [v for v in values if v is not None]
    return (statistics.median(present), min(present), max(present)) if present else None


def ratio(base_median: float, head_median: float) -> float:
    if base_median == 0:
        return 1.0 if head_median == 0 else math.inf
    return head_median / base_median


def verdict(base: tuple[float, float, float], head: tuple[float, float, float], higher_is_better: bool,
            tolerance: float) -> str:  # fmt: skip
    """The verdict, "better", "worse" or "noise", on one figure; base and head are (median, min, max),
    tolerance a fraction (0.05 for 5 %)."""
    if base[1] <= head[2] and head[1] <= base[2]:
        return "noise"  # the ranges overlap: the difference is within the spread measured
    head_over_base = ratio(base[0], head[0])
    if abs(head_over_base - 1) <= tolerance:
        return "noise"
    return "better" if (head_over_base > 1) == higher_is_better else "worse"


def chance_apart(base_runs: int, head_runs: int) -> float:
    """The probability that, with no real difference (every run equally likely to be either
    side's), all head runs land above all base runs: 1 / C(m + n, n). A "worse" verdict is a
    false alarm at most this often, per figure."""
    return 1 / math.comb(base_runs + head_runs, head_runs)


def compare_rows(base_rows: list[dict], head_rows: list[dict], figures: dict[str, tuple[str, bool]],
                 tolerance: float) -> list[dict]:  # fmt: skip
    """One result per workload and figure present on both sides."""
    results = []
    workloads = list(dict.fromkeys(row["workload"] for row in base_rows + head_rows))
    for workload in workloads:
        rows = [r for r in base_rows + head_rows if r["workload"] == workload]
        for key, (name, higher_is_better) in figures.items():
            if key == "broker_cpu_seconds" and any(r.get("cpu_seconds_per_gb") is not None for r in rows):
                continue  # s/GB says it, per byte
            if key == "mb_per_s" and any(r.get("rate_limited") for r in rows):
                continue  # a fixed send rate: its throughput is the rate asked for
            base_values = [r.get(key) for r in base_rows if r["workload"] == workload and r.get(key) is not None]
            head_values = [r.get(key) for r in head_rows if r["workload"] == workload and r.get(key) is not None]
            base, head = summary(base_values), summary(head_values)
            if base is None or head is None:
                continue
            results.append({"workload": workload, "figure": name, "base": base, "head": head,
                            "runs": (len(base_values), len(head_values)), "ratio": ratio(base[0], head[0]),
                            "verdict": verdict(base, head, higher_is_better, tolerance)})  # fmt: skip
    return results


def exit_code(results: list[dict], failed: bool) -> int:
    if failed:
        return 2
    return 1 if any(result["verdict"] == "worse" for result in results) else 0


def format_value(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def format_table(results: list[dict], base_label: str, head_label: str) -> str:
    lines = [f"| workload | figure | runs | {base_label} | {head_label} | head/base | verdict |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for r in results:
        base, head = (
            f"{format_value(s[0])} [{format_value(s[1])}-{format_value(s[2])}]" for s in (r["base"], r["head"])
        )
        runs = "{}+{}".format(*r["runs"])
        lines.append(
            f"| {r['workload']} | {r['figure']} | {runs} | {base} | {head} | {r['ratio']:.2f} | {r['verdict']} |"
        )
    return "\n".join(lines)


def legend(pairs: int, tolerance: float) -> str:
    return (f"runs: base+head, {pairs} pair(s) alternating (each of suite.py's consume reads counts as a run); "
            f"median [min-max] over them. verdict: 'worse' or 'better' when the two ranges do not overlap and the "
            f"medians differ by more than {tolerance:.0%} (--tolerance); 'noise' otherwise. Lower is better for CPU, "
            f"RSS and latency; higher for MB/s and msg/s. With no real difference, a figure's ranges still fall "
            f"apart the bad way by chance 1 time in C(m+n, n) for m+n runs: 1 in {1 / chance_apart(pairs, pairs):.0f} "
            f"at {pairs}+{pairs}; the tolerance removes those of figures that vary less than it does.")  # fmt: skip


# ---------------------------------------------------------------- arguments


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare against (any git revision)")
    parser.add_argument("--head", help="a commit to compare (default: this checkout's working tree, uncommitted changes included)")  # fmt: skip
    parser.add_argument("--only", default=DEFAULT_ONLY,
                        help=f"comma-separated, out of {','.join(SUITE_WORKLOADS + (REPLICATION,))} (default {DEFAULT_ONLY})")  # fmt: skip
    parser.add_argument("--pairs", type=int, default=DEFAULT_PAIRS, help=f"runs of each side, alternating (default {DEFAULT_PAIRS})")  # fmt: skip
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE_PERCENT,
                        help=f"percent the medians must differ by, beyond the ranges, to be a verdict (default {DEFAULT_TOLERANCE_PERCENT:g})")  # fmt: skip
    parser.add_argument("--messages", type=int, help=f"messages per workload (default {DEFAULT_SUITE_MESSAGES:,} for suite.py's, {DEFAULT_REPLICATION_MESSAGES:,} for replication)")  # fmt: skip
    parser.add_argument("--venv", type=Path, help="keep the built side's venv here and reuse it on the next run")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    if args.tolerance < 0:
        parser.error("--tolerance must not be negative")
    if args.messages is not None and args.messages < 1:
        parser.error("--messages must be at least 1")
    args.selected = list(dict.fromkeys(name.strip() for name in args.only.split(",") if name.strip()))
    unknown = set(args.selected) - set(SUITE_WORKLOADS) - {REPLICATION}
    if unknown or not args.selected:
        parser.error(f"unknown workload: {', '.join(sorted(unknown))}" if unknown else "--only names no workload")
    if args.venv is not None and args.head is not None:
        parser.error("--venv keeps one built side's venv: use it without --head")
    if args.venv is not None:
        args.venv = args.venv.resolve()  # the commands using it run in the worktree
    return args


# ---------------------------------------------------------------- processes


def run_process(command: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess:
    """Run a command in its own process group, so that on a timeout, a failure or Ctrl-C the
    brokers it started go with it."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except BaseException:
        stop_group(process)
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def stop_group(process: subprocess.Popen) -> None:
    # SIGINT first: the benchmark scripts then stop their brokers and remove their temporary
    # directories on the way out (KeyboardInterrupt runs their finally and with blocks).
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(STOP_GRACE_S)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # whatever the script left running in its group
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], check=False, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RunFailure(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def build(name: str, rev: str, work_dir: Path, venv: Path | None, worktrees: list[Path]) -> Side:
    """A worktree of rev and a venv with it installed; appends the worktree to worktrees
    before anything can fail, so that the caller removes it."""
    commit = git("rev-parse", "--short", f"{rev}^{{commit}}")
    tree = work_dir / name
    worktrees.append(tree)
    git("worktree", "add", "--detach", str(tree), commit)
    venv = venv or work_dir / f"{name}-venv"
    started_s = time.monotonic()
    reused = (venv / "bin" / "python").exists()
    if not reused:
        done = run_process([sys.executable, "-m", "venv", str(venv)], tree, INSTALL_TIMEOUT_S)
        if done.returncode != 0:
            raise RunFailure(f"python -m venv {venv} failed:\n{done.stderr[-3000:]}")
    python = str(venv / "bin" / "python")
    done = run_process([python, "-m", "pip", "install", "-q", "-e", ".[test]"], tree, INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        raise RunFailure(f"pip install -e '.[test]' for {commit} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    print(f"{name} {commit}: worktree and venv ({'reused' if reused else 'new'}) ready, pip install -e '.[test]' "
          f"{time.monotonic() - started_s:.0f} s", flush=True)  # fmt: skip
    return Side(name, f"{name} {commit}", tree, python)


def working_tree_side() -> Side:
    commit = git("rev-parse", "--short", "HEAD")
    changed = git("status", "--porcelain")
    label = f"head {commit}" + (" + uncommitted changes" if changed else "")
    return Side("head", label, ROOT, sys.executable)


def remove_worktrees(worktrees: list[Path]) -> None:
    for tree in worktrees:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], check=False, cwd=ROOT, capture_output=True)
    if worktrees:
        subprocess.run(["git", "worktree", "prune"], check=False, cwd=ROOT, capture_output=True)


# ---------------------------------------------------------------- workloads


def missing_reason(tree: Path, workload: str) -> str | None:
    """Why this tree cannot run the workload, or None when it can."""
    script = tree / "benchmarks" / ("replication.py" if workload == REPLICATION else "suite.py")
    if not script.exists():
        return f"its tree has no benchmarks/{script.name}"
    if workload != REPLICATION:
        text = script.read_text()
        if '"--json"' not in text:
            return "its suite.py has no --json"
        names = re.search(r"WORKLOAD_NAMES = \(([^)]*)\)", text)
        if names is None or f'"{workload}"' not in names.group(1):
            return f"its suite.py has no workload {workload}"
    return None


def run_suite(side: Side, workloads: list[str], messages: int, scratch: Path) -> list[dict]:
    json_path = scratch / f"{side.name}-suite.json"
    json_path.unlink(missing_ok=True)
    command = [side.python, "benchmarks/suite.py", "--only", ",".join(workloads), "--brokers", "pybroker",
               "--rounds", "1", "--messages", str(messages), "--latency-seconds", f"{SUITE_LATENCY_S:g}",
               "--json", str(json_path)]  # fmt: skip
    done = run_process(command, side.tree, RUN_TIMEOUT_S)
    if done.returncode != 0 or not json_path.exists():
        raise RunFailure(f"{side.label}: suite.py failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")  # fmt: skip
    return [row for row in json.loads(json_path.read_text())["round_rows"] if row.get("broker") == "pybroker"]


REPLICATION_ROUND = re.compile(r"round 1 (rf1|rf3): \d+k msg/s \(([\d.]+) s\)")
REPLICATION_CPU = re.compile(r"leader ([\d.]+) s/GB, follower ([\d.]+) s/GB")


def parse_replication_output(stdout: str, messages: int) -> dict:
    """The figures of a one-round run from the lines replication.py prints, for trees whose
    replication.py has no --json (the rates from messages / seconds, as it computes them)."""
    seconds = dict(REPLICATION_ROUND.findall(stdout))
    cpu = REPLICATION_CPU.search(stdout)
    if set(seconds) != {"rf1", "rf3"} or cpu is None:
        raise RunFailure(f"replication.py printed no throughput figures:\n{stdout[-3000:]}")
    return {"rf1_msg_per_s": messages / float(seconds["rf1"]), "rf3_msg_per_s": messages / float(seconds["rf3"]),
            "leader_cpu_seconds_per_gb": float(cpu.group(1)), "follower_cpu_seconds_per_gb": float(cpu.group(2))}  # fmt: skip


def run_replication(side: Side, messages: int, scratch: Path) -> list[dict]:
    json_path = scratch / f"{side.name}-replication.json"
    json_path.unlink(missing_ok=True)
    has_json = '"--json"' in (side.tree / "benchmarks" / "replication.py").read_text()
    command = [side.python, "benchmarks/replication.py", "--only", "throughput", "--rounds", "1",
               "--messages", str(messages)] + (["--json", str(json_path)] if has_json else [])  # fmt: skip
    done = run_process(command, side.tree, RUN_TIMEOUT_S)
    if done.returncode != 0:
        raise RunFailure(f"{side.label}: replication.py failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")  # fmt: skip
    if has_json:
        figures = json.loads(json_path.read_text())["throughput"]["rounds"]
    else:
        figures = [parse_replication_output(done.stdout, messages)]
    return [{"workload": REPLICATION_WORKLOAD, **round_figures} for round_figures in figures]


def run_pairs(args: argparse.Namespace, base: Side, head: Side, scratch: Path,
              run_suite: Callable = run_suite, run_replication: Callable = run_replication) -> int:  # fmt: skip
    """Alternate the sides over the pairs, print the table and return the exit status."""
    selected = []
    for workload in args.selected:
        reasons = [f"{side.label}: {reason}" for side in (base, head) if (reason := missing_reason(side.tree, workload))]  # fmt: skip
        if reasons:
            print(f"skipping {workload}: {'; '.join(reasons)}")
        else:
            selected.append(workload)
    if not selected:
        print("no workload both sides can run: nothing compared (exit 2)")
        return 2  # a guard that ran nothing must not pass
    suite_workloads = [w for w in selected if w != REPLICATION]
    rows: dict[str, dict[str, list[dict]]] = {"suite": {"base": [], "head": []}, REPLICATION: {"base": [], "head": []}}  # fmt: skip
    results: list[dict] = []
    failed = False
    try:
        for pair in range(1, args.pairs + 1):
            for side in (base, head):
                print(f"pair {pair}/{args.pairs}: {side.label} ...", flush=True)
                if suite_workloads:
                    rows["suite"][side.name] += run_suite(side, suite_workloads, args.messages or DEFAULT_SUITE_MESSAGES, scratch)  # fmt: skip
                if REPLICATION in selected:
                    rows[REPLICATION][side.name] += run_replication(side, args.messages or DEFAULT_REPLICATION_MESSAGES, scratch)  # fmt: skip
    except RunFailure as exc:
        print(f"run failed: {exc}", file=sys.stderr)
        failed = True
    tolerance = args.tolerance / 100
    for group, figures in (("suite", SUITE_FIGURES), (REPLICATION, REPLICATION_FIGURES)):
        results += compare_rows(rows[group]["base"], rows[group]["head"], figures, tolerance)
    if failed:
        print("(the runs before the failure, for what they are worth)" if results else "no complete pair")
    print()
    print(format_table(results, base.label, head.label))
    print()
    print(legend(args.pairs, tolerance))
    if args.pairs == 1:
        print("one run a side measures no spread: only the tolerance decides.")
    worse = [f"{r['workload']}: {r['figure']} x{r['ratio']:.2f} (by chance alone: 1 in {1 / chance_apart(*r['runs']):.0f})"
             for r in results if r["verdict"] == "worse"]  # fmt: skip
    status = exit_code(results, failed)
    if status == 2:
        print("run failure: exit 2")
    elif worse:
        print("worse beyond the noise: " + "; ".join(worse))
    else:
        print("nothing worse beyond the noise")
    return status


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def terminated(_signum, _frame):
        raise KeyboardInterrupt  # so that the worktrees and venvs are removed on a kill too

    signal.signal(signal.SIGTERM, terminated)
    worktrees: list[Path] = []
    work_dir = Path(tempfile.mkdtemp(prefix="pybroker-compare-"))
    try:
        base = build("base", args.base, work_dir, args.venv, worktrees)
        head = build("head", args.head, work_dir, None, worktrees) if args.head else working_tree_side()
        print(f"{args.pairs} pair(s) of runs, workloads {','.join(args.selected)}", flush=True)
        return run_pairs(args, base, head, work_dir)
    except RunFailure as exc:
        print(f"failed: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 2
    finally:
        remove_worktrees(worktrees)
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
