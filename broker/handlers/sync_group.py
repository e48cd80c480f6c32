"""SyncGroup (key 14), versions 0-5.

The second step of a rebalance: the leader sends every member's assignment,
the others wait for theirs. Answered when the leader's assignment is stored
in ``__consumer_offsets`` (or at once in a Stable group). v5 checks the
protocol type and name against the group's (INCONSISTENT_GROUP_PROTOCOL).
Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (the
group started another rebalance; rejoin), FENCED_INSTANCE_ID.
"""

from __future__ import annotations

from broker.security.authorization import GROUP, allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["SyncGroup"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        version = ctx.api_version
        if not allowed(broker, ctx, AclOperation.READ, GROUP, request.group_id):
            return R.SyncGroupResponse(
                throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, protocol_type=None,
                protocol_name=None, assignment=b"",
            )
        assignments = {a.member_id: a.assignment for a in request.assignments}
        result = await broker.groups.sync_group(
            request.group_id,
            request.generation_id,
            request.member_id,
            request.group_instance_id if version >= 3 else None,
            request.protocol_type if version >= 5 else None,
            request.protocol_name if version >= 5 else None,
            assignments,
        )
        return R.SyncGroupResponse(
            throttle_time_ms=0,
            error_code=result.error,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name,
            assignment=result.assignment,
        )

    dispatcher.register(API.key, 0, 5, handle)
