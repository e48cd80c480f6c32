"""The quick fault run of the transactional workload (``--workload txn``):
the compose cluster in network namespaces, the same seeded schedule as the
quick run of test_quick_run.py, transactional producers with seeded aborts,
consume-transform-produce with send_offsets_to_transaction and
read_committed readers. No transaction anomaly may be found
(txn_checker.py). Longer runs: docs/RELIABILITY.md."""

from __future__ import annotations

import pytest

from tests.faults.quick import fault_run
from tests.faults.test_quick_run import QUICK_SECONDS, QUICK_SEED

pytest.importorskip("confluent_kafka")
pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema: pip install -e '.[test]'")

# Two producers at 10 transactions/s over the 95 s schedule commit a
# thousand or so on this 2-core machine; far fewer means the clients stalled.
COMMITTED_FLOOR = 300


@pytest.mark.timeout(600)
def test_quick_txn_fault_run_finds_no_anomaly(tmp_path):
    from tests.faults.run import passed

    summary, report = fault_run(QUICK_SECONDS, QUICK_SEED, tmp_path, workload_name="txn")
    assert summary["final_read"] == "final-done", report
    assert summary["txn_anomalies"] == 0, report
    assert summary["txn_committed"] > COMMITTED_FLOOR, report
    assert summary["txn_aborted_in_log"] > 0, report  # aborted data was in the log for the readers to skip
    assert summary["inputs_with_output"] > 0, report  # the processors ran
    assert passed(summary), report
