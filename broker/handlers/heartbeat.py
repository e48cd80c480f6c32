"""Heartbeat (key 12), versions 0-4.

Keeps a member's session alive. Answers REBALANCE_IN_PROGRESS while the group
rebalances (the member must rejoin), ILLEGAL_GENERATION for an old generation,
UNKNOWN_MEMBER_ID for a member the group does not have, FENCED_INSTANCE_ID for
a static member whose instance id another member id has taken over. A
classic member of a KIP-848 consumer group is answered by the consumer group
(REBALANCE_IN_PROGRESS while it must rejoin to move toward its target).
"""

from __future__ import annotations

from broker.security.authorization import GROUP, allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["Heartbeat"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    def handle(ctx, request):
        if not allowed(broker, ctx, AclOperation.READ, GROUP, request.group_id):
            return R.HeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        groups = broker.groups
        error = groups.not_coordinator(request.group_id)
        if error is not None:
            return R.HeartbeatResponse(throttle_time_ms=0, error_code=error)
        if groups.is_consumer_group(request.group_id):
            # A classic member of a consumer group (the online upgrade).
            error = groups.classic_heartbeat(request.group_id, request.generation_id, request.member_id)
            return R.HeartbeatResponse(throttle_time_ms=0, error_code=error)
        error = groups.coordinator.heartbeat(
            groups.now_ms(),
            request.group_id,
            request.generation_id,
            request.member_id,
            request.group_instance_id if ctx.api_version >= 3 else None,
        )
        return R.HeartbeatResponse(throttle_time_ms=0, error_code=error)

    dispatcher.register(API.key, 0, 4, handle)
