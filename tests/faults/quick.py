"""What the suite's fault runs share (test_quick_run.py, test_txn_quick_run.py,
test_five_quick_run.py, test_regressions.py, test_upgrade.py): a run that
skips with the reason where network namespaces cannot be made, prints its
progress and results table, and the checks every safe run must pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.netns import NamespaceUnavailable, check_available

# The records workload's counts that must be 0 in a safe run.
SAFETY_COUNTS = (
    "lost", "duplicates", "inconsistent", "nonmonotonic_polls", "commits_backwards", "phantom_reads", "topics_lost",
)


def fault_run(seconds: float, seed: int, out: Path, **options) -> tuple[dict, str]:
    """(summary, printed report) of ``run_faults`` with ``options``; a skip when
    this machine cannot make network namespaces."""
    try:
        check_available()
    except NamespaceUnavailable as exc:
        pytest.skip(str(exc))
    from tests.faults.run import run_faults, table

    summary = run_faults(seconds, seed, out, log=lambda line: print(line, flush=True), **options)
    report = table(summary) + f"\nresults in {out}"
    print(report)
    return summary, report


def assert_safe(summary: dict, report: str, counts: tuple[str, ...] = SAFETY_COUNTS) -> None:
    """The final read got everything, each of ``counts`` is 0, and the run passed."""
    from tests.faults.run import passed

    assert summary["final_read"] == "final-done", report
    for key in counts:
        assert summary[key] == 0, f"{key}: {summary.get(key)}\n{report}"
    assert passed(summary), report
