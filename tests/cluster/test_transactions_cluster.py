"""Exactly-once processing on three replicated nodes while the coordinator's node dies.

Three combined nodes (tests/cluster/replication_harness.py) with RF=3 input
and output topics and an RF=3 ``__transaction_state``
(``transaction.state.log.min.isr`` 2). The consume-transform-produce processor
of tests/crash/eos_processor.py runs; it is SIGKILLed twice and restarted,
and the node that coordinates its transactional id is SIGKILLed while it
works: another node's replica of the transaction log takes over, finishes or
aborts what was in flight, and the processor carries on. The output read with
read_committed holds every input record exactly once, on every replica's
leader in turn.
"""

from __future__ import annotations

import signal
import time

from broker.transactions_tool import TransactionsTool
from tests.cluster.replication_harness import ReplicatedCluster, wait_until
from tests.crash.test_exactly_once import (
    check_exactly_once,
    fill_input,
    read_output,
    start_processor,
    wait_for_progress,
)

RECORDS = 30_000
PARTITIONS = 3


def coordinator_of(cluster: ReplicatedCluster, transactional_id: str) -> int | None:
    tool = TransactionsTool(cluster.bootstrap().split(",")[0], timeout_s=5)
    try:
        return tool.describe_transaction(transactional_id).coordinator_id
    except Exception:
        return None
    finally:
        tool.close()


def test_exactly_once_survives_the_coordinators_node(tmp_path):
    cluster = ReplicatedCluster(
        tmp_path,
        extra={
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "transaction.state.log.num.partitions": "3",
        },
    )
    cluster.start()
    processor = None
    log_path = tmp_path / "processor.log"
    try:
        source, sink = "eos-in", "eos-out"
        cluster.create_topic(source, partitions=PARTITIONS)
        cluster.create_topic(sink, partitions=PARTITIONS)
        fill_input(cluster.bootstrap(), source, RECORDS)
        transactional_id = f"txn-{source}"
        with open(log_path, "w") as log_file:
            for share in (1, 2):
                processor = start_processor(cluster.bootstrap(), source, sink, log_file, RECORDS)
                assert wait_for_progress(log_path, share * RECORDS // 5, processor), log_path.read_text()[-4000:]
                processor.send_signal(signal.SIGKILL)
                processor.wait(30)
            processor = start_processor(cluster.bootstrap(), source, sink, log_file, RECORDS)
            coordinator = wait_until(lambda: coordinator_of(cluster, transactional_id), 30)
            assert coordinator, "the processor's transactional id has no coordinator"
            assert wait_for_progress(log_path, 3 * RECORDS // 5, processor), log_path.read_text()[-4000:]
            cluster.kill(coordinator)  # mid-run: the processor must carry on through the new coordinator
            time.sleep(3)
            assert processor.poll() is None, "the processor finished before the coordinator's node was killed"
            cluster.heal()
            assert processor.wait(600) == 0, log_path.read_text()[-4000:]
        processor = None
        check_exactly_once(read_output(cluster.bootstrap(), sink, "read_committed", RECORDS), RECORDS)
    finally:
        if processor is not None and processor.poll() is None:
            processor.kill()
            processor.wait(10)
        cluster.save_output()
        cluster.stop()
