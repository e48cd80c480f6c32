"""DescribeQuorum (key 55), versions 0-2, on the client listener.

Only the quorum's leader knows every replica's progress, so only it answers
(as Kafka); the controller listener answers with the same function. A broker that is not
the leader passes the request on to the leader's controller listener, as a
Kafka broker forwards it to the active controller; with no leader known it
answers NOT_LEADER_OR_FOLLOWER, which tools retry. With an authorizer the
caller needs DESCRIBE on the cluster, else the top-level code is
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging

from broker.security.authorization import cluster_allowed
from controller.authorizer import AclOperation
from controller.raft import wire
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME

API = APIS_BY_NAME["DescribeQuorum"]
log = logging.getLogger(__name__)


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        if not cluster_allowed(broker, ctx, AclOperation.DESCRIBE):
            return wire.describe_quorum_error(ctx.api_version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if broker.raft.is_leader:
            return describe_quorum_response(broker, ctx.api_version, request)
        leader = broker.raft.leader_id
        address = broker.config.quorum_voters.get(leader) if leader is not None else None
        if address is None:
            return wire.describe_quorum_error(ctx.api_version, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        # Over the controller listener's own security (TLS, SASL), as every node-to-controller request.
        connection = broker.node_connection(address[0], address[1], f"broker-{broker.node_id}", to="controller")
        try:
            return await connection.request(API, ctx.api_version, request, timeout_ms=broker.config.raft_config.request_timeout_ms)
        except Exception as exc:  # the leader moved or died: the tool asks again
            log.info("DescribeQuorum: the leader %s did not answer: %s", leader, exc)
            return wire.describe_quorum_error(ctx.api_version, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        finally:
            connection.close()

    dispatcher.register(API.key, 0, 2, handle)


def describe_quorum_response(broker, api_version: int, request):
    """The leader's answer, on the client listener (here) and the controller listener."""
    topics = request.topics
    asked_metadata = (
        len(topics) == 1
        and topics[0].topic_name == wire.METADATA_TOPIC
        and [p.partition_index for p in topics[0].partitions] == [wire.METADATA_PARTITION]
    )
    if not asked_metadata:
        return wire.describe_quorum_error(api_version, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, request)
    if not broker.raft.is_leader:
        return wire.describe_quorum_error(api_version, ErrorCode.NOT_LEADER_OR_FOLLOWER, request)
    return wire.describe_quorum_response(broker.raft.describe_quorum(), api_version)
