"""The quick fault run of the README's test command: the compose cluster in
network namespaces, all nemeses the kernel allows, about two minutes, a
fixed seed. Nothing acknowledged may be lost, duplicated or read
inconsistently. Longer runs: ``python -m tests.faults`` (docs/RELIABILITY.md)."""

from __future__ import annotations

import pytest

from tests.faults.nemesis import CLOCK_JUMP_S, KINDS, retention_ms_for, schedule
from tests.faults.quick import assert_safe, fault_run

pytest.importorskip("confluent_kafka")
pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema: pip install -e '.[test]'")

# Seed 345 over 113 s meets each of the twelve kinds that need no netem once
# (113 s is the shortest length some seed below 3,000 does it in).
QUICK_SEED = 345
QUICK_SECONDS = 113


def test_schedules_are_seeded_disjoint_and_meet_every_kind():
    kinds = tuple(k for k in KINDS if k != "latency-loss")
    plan = schedule(QUICK_SEED, QUICK_SECONDS, kinds)
    assert plan == schedule(QUICK_SEED, QUICK_SECONDS, kinds)
    assert plan != schedule(QUICK_SEED + 1, QUICK_SECONDS, kinds)
    assert {w.kind for w in plan} == set(kinds)
    for earlier, later in zip(plan, plan[1:]):
        assert earlier.start_s < earlier.end_s < later.start_s
    assert plan[0].start_s >= 5 and plan[-1].end_s <= QUICK_SECONDS
    long_plan = schedule(3, 600, KINDS)
    # Shuffled decks: every kind before any repeats, so counts differ by at most one.
    counts = [sum(w.kind == k for w in long_plan) for k in KINDS]
    assert max(counts) - min(counts) <= 1


def test_no_record_of_a_run_is_due_for_retention_on_a_clock_jumped_forward():
    # The run, its heal and final read (under 300 s), plus the largest forward jump.
    for seconds in (50, 113, 600, 3600, 7200):
        assert retention_ms_for(seconds) > (seconds + 300 + CLOCK_JUMP_S[1]) * 1000


@pytest.mark.timeout(900)
def test_quick_fault_run_loses_nothing(tmp_path):
    summary, report = fault_run(QUICK_SECONDS, QUICK_SEED, tmp_path)
    assert_safe(summary, report)
    assert summary["acknowledged"] > 10_000, report
    made = {w["kind"] for w in summary["nemeses"] if "error" not in w}
    assert made == {w.kind for w in schedule(QUICK_SEED, QUICK_SECONDS, tuple(k for k in KINDS if k not in summary["nemeses_unavailable"]))}, report
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
