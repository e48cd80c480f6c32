"""ListPartitionReassignments (key 46), version 0.

The running partition reassignments (KIP-455) as the active controller's
committed metadata shows them (Kafka's controller answers this one too, so a
broker forwards it like the admin writes, broker/controller_node/forwarding.py). ``topics``
null lists every partition being reassigned; otherwise only the named ones,
leaving out unknown topics and partitions and those not being reassigned, as
Kafka does. Each partition carries its current replicas (the target followed
by the replicas being removed), ``adding_replicas`` and ``removing_replicas``.

Where no active controller can be reached, the top-level code is
NOT_CONTROLLER, which clients retry.

Authorization (with an authorizer): DESCRIBE on the cluster, decided by the
broker the client asked before anything is forwarded; without it the top-level
code is CLUSTER_AUTHORIZATION_FAILED and the named partitions are echoed
without replicas (Kafka's error answer).
"""

from __future__ import annotations

from broker.security.authorization import cluster_refusal, refuse_whole
from controller.authorizer import AclOperation
from controller.errors import NotControllerError
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["ListPartitionReassignments"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    def authorize(ctx, request):
        message = cluster_refusal(broker, ctx, AclOperation.DESCRIBE)
        if message is None:
            return None
        return refuse_whole(
            lambda: R.ListPartitionReassignmentsResponse(
                throttle_time_ms=0,
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                error_message=message,
                topics=[
                    R.OngoingTopicReassignment(
                        name=t.name,
                        partitions=[
                            R.OngoingPartitionReassignment(partition_index=p, replicas=[], adding_replicas=[], removing_replicas=[])
                            for p in t.partition_indexes
                        ],
                    )
                    for t in request.topics or []
                ],
            )
        )

    async def handle(ctx, request):
        topics = None
        if request.topics is not None:
            topics = [(t.name, list(t.partition_indexes)) for t in request.topics]
        try:
            ongoing = await broker.controller.list_partition_reassignments(topics)
        except NotControllerError as exc:
            return R.ListPartitionReassignmentsResponse(
                throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, error_message=str(exc), topics=[]
            )
        return R.ListPartitionReassignmentsResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NONE,
            error_message=None,
            topics=[
                R.OngoingTopicReassignment(
                    name=name,
                    partitions=[
                        R.OngoingPartitionReassignment(
                            partition_index=p.partition_id,
                            replicas=list(p.replicas),
                            adding_replicas=list(p.adding_replicas),
                            removing_replicas=list(p.removing_replicas),
                        )
                        for p in partitions
                    ],
                )
                for name, partitions in ongoing
            ],
        )

    dispatcher.register(API.key, 0, 0, handle, authorize=authorize)
