"""The five topology's quick fault run: docker/compose.five.yaml (five combined
nodes, a five-voter quorum) in network namespaces with a client host on each
side of a split, splits and kills for about a minute. Nothing acknowledged may
be lost, duplicated or read inconsistently by either client host, and the
minority side's client (client-b) keeps trying through every split; the
summary reports each side's availability (availability_by_client).
Longer runs: ``python -m tests.faults --topology five`` (docs/RELIABILITY.md)."""

from __future__ import annotations

import pytest

from tests.faults.nemesis import schedule
from tests.faults.quick import assert_safe, fault_run

pytest.importorskip("confluent_kafka")
pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema: pip install -e '.[test]'")

# Seed 3 over 50 s: split 7 s, kill 9 s, split 7 s, kill 6 s.
FIVE_SEED = 3
FIVE_SECONDS = 50
FIVE_KINDS = ("split", "kill")
# Six producers (three per client host) share the two cores with five nodes.
FIVE_RATE_PER_PRODUCER = 50.0


def test_the_five_schedule_meets_two_splits_and_two_kills():
    plan = schedule(FIVE_SEED, FIVE_SECONDS, FIVE_KINDS)
    assert [w.kind for w in plan] == ["split", "kill", "split", "kill"]
    assert all(w.end_s - w.start_s >= 5 for w in plan if w.kind == "split")


@pytest.mark.timeout(600)
def test_five_nodes_with_clients_on_both_sides_lose_nothing(tmp_path):
    summary, report = fault_run(
        FIVE_SECONDS, FIVE_SEED, tmp_path, kinds=FIVE_KINDS, rate_per_producer=FIVE_RATE_PER_PRODUCER, topology="five"
    )
    assert_safe(summary, report)
    made = [w for w in summary["nemeses"] if "error" not in w]
    assert [w["kind"] for w in made] == ["split", "kill", "split", "kill"], report
    splits = [w for w in made if w["kind"] == "split"]
    # Two of the five nodes, and the second client host with them.
    assert all(len(w["targets"]) == 2 and w["detail"] == "client-b with the minority" for w in splits), report
    by_client = summary["availability_by_client"]
    assert sorted(by_client) == ["client-a", "client-b"], report
    for client, shares in by_client.items():
        # Both hosts wrote and kept sending through the splits. How much of
        # that was acknowledged in time depends on the machine's load (a
        # busy 2-core machine had 0.86 of the sends outside faults
        # acknowledged, a quiet one 0.98), so the figures are reported, not
        # asserted; the minority side's are lower in every run in
        # docs/RELIABILITY.md.
        assert shares["acknowledged"] > 2_000, (client, report)
        assert shares["during_by_kind"].get("split") is not None, (client, report)
