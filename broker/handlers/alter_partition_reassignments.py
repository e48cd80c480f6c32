"""AlterPartitionReassignments (key 45), versions 0-1.

Moves partitions to new replicas (KIP-455), or cancels a move. The plan is the
active controller's (controller/reassignment.py, Kafka's
ReplicationControlManager.alterPartitionReassignments): a broker forwards the
request there (broker/controller_node/forwarding.py), and the answer comes once the
PartitionChangeRecords are committed. A partition's ``replicas`` is the target
list; null cancels the running reassignment (NO_REASSIGNMENT_IN_PROGRESS when
there is none). Per partition: UNKNOWN_TOPIC_OR_PARTITION,
INVALID_REPLICA_ASSIGNMENT (empty target, a broker twice, an unregistered
broker, a cancel that would need an unclean election the topic does not
allow), and from v1, with ``allow_replication_factor_change`` false,
INVALID_REPLICATION_FACTOR for a target of another size than the original
replica count (KIP-860); the v1 response echoes that flag.

Success means the reassignment has started (or, for a reorder or a removal of
replicas whose peers are in sync, is already complete): the added replicas
then catch up from the leader, and once all of them are in the ISR the
leader's AlterPartition completes the move and the removed replicas delete
their copies. ListPartitionReassignments shows it meanwhile.

Where no active controller can be reached, the top-level code and every
partition answer NOT_CONTROLLER, which clients retry. ``timeout_ms`` is not
waited on beyond the commit.

Authorization (with an authorizer): ALTER on the cluster, decided by the broker
the client asked before anything is forwarded; without it the top-level code
and every partition answer CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from broker.security.authorization import cluster_refusal, refuse_whole
from controller.authorizer import AclOperation
from controller.errors import NotControllerError
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["AlterPartitionReassignments"]
R = struct_classes(API.response)
ALLOW_RF_CHANGE_VERSION = 1


def register(dispatcher, broker) -> None:
    def everyone(request, error: ErrorCode, message: str):
        return [
            R.ReassignableTopicResponse(
                name=t.name,
                partitions=[
                    R.ReassignablePartitionResponse(
                        partition_index=p.partition_index, error_code=error, error_message=message
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]

    def authorize(ctx, request):
        message = cluster_refusal(broker, ctx, AclOperation.ALTER)
        if message is None:
            return None
        error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        allow = request.allow_replication_factor_change if ctx.api_version >= ALLOW_RF_CHANGE_VERSION else True
        return refuse_whole(
            lambda: R.AlterPartitionReassignmentsResponse(
                throttle_time_ms=0,
                allow_replication_factor_change=allow,
                error_code=error,
                error_message=message,
                responses=everyone(request, error, message),
            )
        )

    async def handle(ctx, request):
        allow = request.allow_replication_factor_change if ctx.api_version >= ALLOW_RF_CHANGE_VERSION else True
        topics = [
            (t.name, [(p.partition_index, None if p.replicas is None else list(p.replicas)) for p in t.partitions])
            for t in request.topics
        ]
        try:
            results = await broker.controller.alter_partition_reassignments(topics, allow)
        except NotControllerError as exc:
            message = str(exc)
            return R.AlterPartitionReassignmentsResponse(
                throttle_time_ms=0,
                allow_replication_factor_change=allow,
                error_code=ErrorCode.NOT_CONTROLLER,
                error_message=message,
                responses=everyone(request, ErrorCode.NOT_CONTROLLER, message),
            )
        responses = [
            R.ReassignableTopicResponse(
                name=name,
                partitions=[
                    R.ReassignablePartitionResponse(
                        partition_index=r.partition_id, error_code=r.error, error_message=r.message
                    )
                    for r in partition_results
                ],
            )
            for name, partition_results in results
        ]
        return R.AlterPartitionReassignmentsResponse(
            throttle_time_ms=0,
            allow_replication_factor_change=allow,
            error_code=ErrorCode.NONE,
            error_message=None,
            responses=responses,
        )

    dispatcher.register(API.key, 0, 1, handle, authorize=authorize)
