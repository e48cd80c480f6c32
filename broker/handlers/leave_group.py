"""LeaveGroup (key 13), versions 0-5.

v0-2 name one member; v3+ a batch of members, each by member id or (static
members) by group instance id, with an error per member. Members that leave
make the group rebalance at once. An unknown group answers UNKNOWN_MEMBER_ID
for each member; a member id that does not own the instance id it names
answers FENCED_INSTANCE_ID.
"""

from __future__ import annotations

from broker.security.authorization import GROUP, allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["LeaveGroup"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        if not allowed(broker, ctx, AclOperation.READ, GROUP, request.group_id):
            if ctx.api_version < 3:
                return R.LeaveGroupResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
            return R.LeaveGroupResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
        groups = broker.groups
        wrong = groups.not_coordinator(request.group_id)
        if wrong is not None:
            return R.LeaveGroupResponse(throttle_time_ms=0, error_code=wrong, members=[])
        if ctx.api_version < 3:
            leaving = [(request.member_id, None)]
        else:
            leaving = [(m.member_id, m.group_instance_id) for m in request.members]
        if groups.is_consumer_group(request.group_id):
            # Classic members of a consumer group (the online upgrade).
            error, member_errors = await groups.classic_leave(request.group_id, leaving)
        else:
            error, member_errors = groups.run(groups.coordinator.leave_group, groups.now_ms(), request.group_id, leaving)
            groups.after_operation(request.group_id)
            if error == ErrorCode.NONE:
                error = await groups.replicated(request.group_id)
        if ctx.api_version < 3:
            # One member: its error is the response's.
            if error == ErrorCode.NONE and member_errors:
                error = member_errors[0]
            return R.LeaveGroupResponse(throttle_time_ms=0, error_code=error)
        members = []
        if error == ErrorCode.NONE:
            members = [
                R.MemberResponse(member_id=member_id, group_instance_id=instance_id, error_code=member_error)
                for (member_id, instance_id), member_error in zip(leaving, member_errors)
            ]
        return R.LeaveGroupResponse(throttle_time_ms=0, error_code=error, members=members)

    dispatcher.register(API.key, 0, 5, handle)
