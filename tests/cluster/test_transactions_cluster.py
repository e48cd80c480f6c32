"""Exactly-once processing on three replicated nodes while coordinators' nodes die.

Three combined nodes (tests/cluster/replication_harness.py) with RF=3 input
and output topics and an RF=3 ``__transaction_state``
(``transaction.state.log.min.isr`` 2). The consume-transform-produce processor
of tests/crash/eos_processor.py runs; it is SIGKILLed twice and restarted.
Its group is picked so that its group coordinator lives on another node than
its transaction coordinator, and then, while it works:

1. the transaction coordinator's node is SIGKILLed: another node's replica of
   the transaction log takes over and finishes or aborts what was in flight,
   and the same processor carries on (no restart allowed);
2. the group coordinator's node is SIGKILLed: another node's replica of
   ``__consumer_offsets`` takes over, with the transaction's pending offsets.
   Here the processor may be restarted when its client stalls (exit code 3):
   librdkafka 2.16 can block ``send_offsets_to_transaction`` for good once the
   broker it had cached as group coordinator is dropped from the metadata, as
   against Apache Kafka (confluentinc/librdkafka#5511). A restarted processor
   fences the stalled one, so the promise below is unchanged.

The output read with read_committed holds every input record exactly once.
"""

from __future__ import annotations

import signal
import time

from broker.tools.groups import KafkaConnection, parse_bootstrap
from tests.cluster.replication_harness import ReplicatedCluster, wait_until
from tests.crash.eos_processor import EXIT_CLIENT_STALLED
from tests.crash.test_exactly_once import (
    check_exactly_once,
    fill_input,
    read_output,
    start_processor,
    wait_for_progress,
)

RECORDS = 30_000
PARTITIONS = 3
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
GROUP_CANDIDATES_MAX = 50
STALL_RESTARTS_MAX = 2


def coordinator_node(cluster: ReplicatedCluster, key: str, key_type: int) -> int | None:
    """The node FindCoordinator names for ``key`` (creating the internal topic), or None."""
    connection = None
    try:
        connection = KafkaConnection(*parse_bootstrap(cluster.bootstrap().split(",")[0]), 5)
        response = connection.call("FindCoordinator", 3, key=key, key_type=key_type)
        return response.node_id if response.error_code == 0 else None
    except Exception:
        return None
    finally:
        if connection is not None:
            connection.close()


def test_exactly_once_survives_the_coordinators_nodes(tmp_path):
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
        txn_coordinator = wait_until(lambda: coordinator_node(cluster, transactional_id, KEY_TYPE_TRANSACTION), 30)
        assert txn_coordinator, "the processor's transactional id has no coordinator"
        group = group_coordinator = None
        for candidate in (f"group-{source}-{n}" for n in range(GROUP_CANDIDATES_MAX)):
            node = wait_until(lambda: coordinator_node(cluster, candidate, KEY_TYPE_GROUP), 30)
            assert node, f"group {candidate} has no coordinator"
            if node != txn_coordinator:
                group, group_coordinator = candidate, node
                break
        assert group, f"every candidate group is coordinated by node {txn_coordinator}"

        def start():
            return start_processor(cluster.bootstrap(), source, sink, log_file, RECORDS, group=group)

        with open(log_path, "w") as log_file:
            for share in (1, 2):
                processor = start()
                assert wait_for_progress(log_path, share * RECORDS // 5, processor), log_path.read_text()[-4000:]
                processor.send_signal(signal.SIGKILL)
                processor.wait(30)
            processor = start()
            assert wait_for_progress(log_path, RECORDS // 2, processor), log_path.read_text()[-4000:]
            # 1. The transaction coordinator's node, mid-run: the same processor carries on.
            cluster.kill(txn_coordinator)
            time.sleep(3)
            assert processor.poll() is None, "the processor finished before the coordinator's node was killed"
            cluster.heal()
            assert wait_for_progress(log_path, 2 * RECORDS // 3, processor), log_path.read_text()[-4000:]
            # 2. The group coordinator's node (unchanged by step 1: it was another node).
            assert coordinator_node(cluster, group, KEY_TYPE_GROUP) == group_coordinator
            cluster.kill(group_coordinator)
            time.sleep(3)
            assert processor.poll() is None, "the processor finished before the group coordinator's node was killed"
            cluster.heal()
            stall_restarts = 0
            while (code := processor.wait(600)) == EXIT_CLIENT_STALLED and stall_restarts < STALL_RESTARTS_MAX:
                stall_restarts += 1
                print(f"processor restarted after a client stall ({stall_restarts})")
                processor = start()
            assert code == 0, log_path.read_text()[-4000:]
        processor = None
        check_exactly_once(read_output(cluster.bootstrap(), sink, "read_committed", RECORDS), RECORDS)
    finally:
        if processor is not None and processor.poll() is None:
            processor.kill()
            processor.wait(10)
        cluster.save_output()
        cluster.stop()
