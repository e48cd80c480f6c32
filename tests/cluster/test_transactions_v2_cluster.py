"""Transactions version 2 (KIP-890 part 2) on three nodes, with the transaction
coordinator on another node than the partition's leader: the leader adds the
partition for Produce v12 with AddPartitionsToTxn v5 (no ``verify_only``) to
the coordinator's node, EndTxn v5 bumps the epoch, and the coordinator's
markers reach the leader at the new epoch. Raw requests (our own codec),
as in tests/interop/test_transactions_v2_wire.py, whose helpers it uses; it
skips when ``transaction.version`` 2 cannot be finalized.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from protocol.errors import ErrorCode
from tests.cluster.replication_harness import ReplicatedCluster, wait_until
from tests.cluster.test_transactions_cluster import KEY_TYPE_TRANSACTION, coordinator_node
from tests.interop.test_transactions_v2_wire import end5, produce, producer_epoch_on, try_finalize_v2
from tests.interop.test_txn_coordinator_api import Client, ready

PARTITIONS = 3
TXN_IDS_TRIED = 30


def test_a_version_2_transaction_with_the_coordinator_on_another_node(tmp_path):
    cluster = ReplicatedCluster(
        tmp_path,
        extra={
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "transaction.state.log.num.partitions": "3",
        },
    )
    cluster.start()
    clients = []
    try:
        topic = "v2-data"
        cluster.create_topic(topic, partitions=PARTITIONS)
        leaders = {p: cluster.leader_of(topic, p, timeout_s=30) for p in range(PARTITIONS)}
        txn_id = coordinator = partition = None
        for candidate in (f"v2-txn-{n}" for n in range(TXN_IDS_TRIED)):
            node = wait_until(lambda candidate=candidate: coordinator_node(cluster, candidate, KEY_TYPE_TRANSACTION), 30)
            assert node, f"{candidate} has no coordinator"
            others = [p for p, leader in leaders.items() if leader != node]
            if others:
                txn_id, coordinator, partition = candidate, node, others[0]
                break
        assert txn_id, f"every partition of {topic} is led by the coordinators' node"

        def client_of(node: int) -> Client:
            client = Client(SimpleNamespace(bootstrap=cluster.bootstrap([node])))
            clients.append(client)
            return client

        at_coordinator, at_leader = client_of(coordinator), client_of(leaders[partition])
        if not try_finalize_v2(at_coordinator):
            pytest.skip("transaction.version 2 cannot be finalized on this cluster")
        producer_id, epoch = ready(at_coordinator, txn_id)
        # No AddPartitionsToTxn: the leader asks the coordinator's node to add it.
        assert produce(at_leader, txn_id, topic, producer_id, epoch, partition=partition) == ErrorCode.NONE
        described = at_coordinator.describe(txn_id)
        assert [(t.topic, p) for t in described.topics for p in t.partitions] == [(topic, partition)]
        assert end5(at_coordinator, txn_id, producer_id, epoch, True) == (ErrorCode.NONE, producer_id, epoch + 1)
        at_coordinator.wait_completed(txn_id, "CompleteCommit")
        assert producer_epoch_on(at_leader, topic, partition, producer_id) == epoch + 1
        # The next transaction, at the new epoch; the old epoch is refused by the leader.
        assert produce(at_leader, txn_id, topic, producer_id, epoch + 1, partition=partition) == ErrorCode.NONE
        assert produce(at_leader, txn_id, topic, producer_id, epoch, partition=partition, sequence=3) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert end5(at_coordinator, txn_id, producer_id, epoch + 1, False) == (ErrorCode.NONE, producer_id, epoch + 2)
        at_coordinator.wait_completed(txn_id, "CompleteAbort")
    finally:
        for client in clients:
            client.close()
        cluster.stop()
