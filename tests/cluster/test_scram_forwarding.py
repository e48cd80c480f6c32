"""AlterUserScramCredentials sent to a node that is not the active controller,
on three combined nodes: the broker forwards it (broker/controller_node/forwarding.py), the
controller writes the credential records, and DescribeUserScramCredentials on
every node lists the user once the records reach it (and no longer once
removed)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

pytest.importorskip("confluent_kafka")

from broker.net.node_client import KafkaClientConnection
from protocol import scram
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until
from tests.cluster.test_leader_elections import BOUND_S, start

ALTER = APIS_BY_NAME["AlterUserScramCredentials"]
DESCRIBE = APIS_BY_NAME["DescribeUserScramCredentials"]
A = struct_classes(ALTER.request)
D = struct_classes(DESCRIBE.request)


def ask(cluster: ReplicatedCluster, node: int, api, body):
    process = cluster.nodes[node]

    async def run():
        connection = KafkaClientConnection(process.host, process.port, "scram-test")
        try:
            return await connection.request(api, 0, body, timeout_ms=int(BOUND_S * 1000))
        finally:
            connection.close()

    return asyncio.run(run())


def described_users(cluster: ReplicatedCluster, node: int) -> dict[str, list[tuple[int, int]]]:
    response = ask(cluster, node, DESCRIBE, D.DescribeUserScramCredentialsRequest(users=None))
    assert response.error_code == ErrorCode.NONE
    return {r.user: [(c.mechanism, c.iterations) for c in r.credential_infos] for r in response.results}


def test_a_broker_forwards_credential_changes_to_the_active_controller(tmp_path):
    cluster = start(tmp_path, {})
    try:
        controller = cluster.active_controller(BOUND_S)
        assert controller is not None
        via = next(n for n in cluster.alive() if n != controller)
        salt = hashlib.sha256(b"salt").digest()
        salted = scram.salted_password(scram.ScramMechanism.SCRAM_SHA_256, "dave-secret", salt, 4096)
        upsert = A.ScramCredentialUpsertion(name="dave", mechanism=1, iterations=4096, salt=salt, salted_password=salted)
        response = ask(cluster, via, ALTER, A.AlterUserScramCredentialsRequest(deletions=[], upsertions=[upsert]))
        assert [(r.user, r.error_code) for r in response.results] == [("dave", ErrorCode.NONE)]
        for node in NODE_IDS:
            assert wait_until(lambda node=node: described_users(cluster, node) == {"dave": [(1, 4096)]}, BOUND_S), node
        # The controller checks as Kafka's does, wherever the request came in.
        twice = ask(cluster, via, ALTER, A.AlterUserScramCredentialsRequest(deletions=[], upsertions=[upsert, upsert]))
        assert [(r.user, r.error_code) for r in twice.results] == [("dave", ErrorCode.DUPLICATE_RESOURCE)]
        remove = A.ScramCredentialDeletion(name="dave", mechanism=1)
        gone = ask(cluster, via, ALTER, A.AlterUserScramCredentialsRequest(deletions=[remove], upsertions=[]))
        assert [(r.user, r.error_code) for r in gone.results] == [("dave", ErrorCode.NONE)]
        for node in NODE_IDS:
            assert wait_until(lambda node=node: described_users(cluster, node) == {}, BOUND_S), node
    finally:
        cluster.stop()
