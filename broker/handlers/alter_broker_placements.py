"""AlterBrokerPlacements (key 16011, pybroker's own), version 0.

Cordons brokers (no new replicas go to them), drains them (``pybroker cluster
remove-broker``: the balancer moves every replica off) or puts them back to
normal. The active controller writes the states as BrokerPlacementRecords and
answers once they are committed (controller/balancer/placement_commands.py
says what is refused, per broker); a broker forwards the request there. Where
no active controller answers, every broker gets NOT_CONTROLLER.

Authorization (with an authorizer): ALTER on the cluster; without it the
top-level code is CLUSTER_AUTHORIZATION_FAILED and nothing changes.
"""

from __future__ import annotations

from broker.security.authorization import cluster_refusal, refuse_whole
from controller.authorizer import AclOperation
from controller.errors import NotControllerError
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["AlterBrokerPlacements"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    def authorize(ctx, request):
        message = cluster_refusal(broker, ctx, AclOperation.ALTER)
        if message is None:
            return None
        return refuse_whole(
            lambda: R.AlterBrokerPlacementsResponse(
                throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=message, results=[]
            )
        )

    async def handle(ctx, request):
        changes = [(b.broker_id, b.state) for b in request.brokers]
        try:
            results = await broker.controller.alter_broker_placements(changes)
        except NotControllerError as exc:
            return R.AlterBrokerPlacementsResponse(
                throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                results=[
                    R.BrokerPlacementResult(broker_id=b, error_code=ErrorCode.NOT_CONTROLLER, error_message=str(exc))
                    for b, _ in changes
                ],
            )
        return R.AlterBrokerPlacementsResponse(
            throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
            results=[R.BrokerPlacementResult(broker_id=r.broker_id, error_code=r.error, error_message=r.message) for r in results],
        )

    dispatcher.register(API.key, 0, 0, handle, authorize=authorize)
