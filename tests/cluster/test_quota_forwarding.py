"""AlterClientQuotas sent to a node that is not the active controller, on three
combined nodes: the broker forwards it (broker/controller_node/forwarding.py), the controller
writes the ClientQuotaRecords, DescribeClientQuotas on every node shows the
quota once the records reach it, and every node enforces it (a Produce over
the quota is answered with ``throttle_time_ms``)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("confluent_kafka")

from broker.net.node_client import KafkaClientConnection
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until
from tests.cluster.test_leader_elections import BOUND_S, start
from tests.interop.test_client_quotas import EXACT, alter_request, describe_request, described

ALTER = APIS_BY_NAME["AlterClientQuotas"]
DESCRIBE = APIS_BY_NAME["DescribeClientQuotas"]
METADATA = APIS_BY_NAME["Metadata"]
_M = struct_classes(METADATA.request)


def ask(cluster: ReplicatedCluster, node: int, api, body, version: int = 1, client_id: str = "quota-test"):
    process = cluster.nodes[node]

    async def run():
        connection = KafkaClientConnection(process.host, process.port, client_id)
        try:
            return await connection.request(api, version, body, timeout_ms=int(BOUND_S * 1000))
        finally:
            connection.close()

    return asyncio.run(run())


def test_a_broker_forwards_quota_changes_and_every_node_enforces_them(tmp_path):
    cluster = start(tmp_path, {})
    try:
        controller = cluster.active_controller(BOUND_S)
        assert controller is not None
        via = next(n for n in cluster.alive() if n != controller)
        entity = [("client-id", "busy")]
        response = ask(cluster, via, ALTER, alter_request([(entity, {"request_percentage": 0.01})]))
        assert [e.error_code for e in response.entries] == [ErrorCode.NONE]
        want = {(("client-id", "busy"),): {"request_percentage": 0.01}}
        for node in NODE_IDS:
            assert wait_until(
                lambda node=node: described(ask(cluster, node, DESCRIBE, describe_request([("client-id", EXACT, "busy")]))) == want,
                BOUND_S,
            ), node
        # 0.01 % of a thread: a couple of Metadata requests are over it on any node.
        request = _M.MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        for node in NODE_IDS:
            throttles = [ask(cluster, node, METADATA, request, 12, "busy").throttle_time_ms for _ in range(3)]
            assert max(throttles) > 0, (node, throttles)
        # Refused by the controller as Kafka's is, wherever the request came in.
        bad = ask(cluster, via, ALTER, alter_request([(entity, {"producer_byte_rate": 0.5})]))
        assert [e.error_code for e in bad.entries] == [ErrorCode.INVALID_REQUEST]
    finally:
        cluster.stop()
