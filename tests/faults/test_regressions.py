"""Fault runs that once found a bug, kept as they were found (seed, length,
fault kinds), with what was wrong. Each must now pass: nothing acknowledged
lost, duplicated or read inconsistently, no committed offset read going back.
The unit tests named with each pin the mechanism; these keep the scenario."""

from __future__ import annotations

import pytest

from tests.faults.quick import assert_safe, fault_run

pytest.importorskip("confluent_kafka")
pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema: pip install -e '.[test]'")

FOUND = [
    pytest.param(
        2, 60, ("split", "isolate-leader"),
        # A leader of a __consumer_offsets partition, cut off and replaced,
        # served the group's older committed offsets for 8 s after the network
        # healed (its Raft connection was stuck in TCP backoff). Unit tests:
        # test_kafka_client.py, test_replica_manager_roles.py.
        id="stale-coordinator-after-isolation",
    ),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("seed", "seconds", "kinds"), FOUND)
def test_a_schedule_that_found_a_bug_passes(seed, seconds, kinds, tmp_path):
    summary, report = fault_run(seconds, seed, tmp_path, kinds=kinds)
    assert_safe(summary, report)
