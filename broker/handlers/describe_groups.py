"""DescribeGroups (key 15), versions 0-5.

State, protocol type and members of each group. As in Kafka, the protocol
name and each member's metadata and assignment are given only for a Stable
group; a group the coordinator does not have is described as ``Dead`` with no
error. Member hosts read ``/<address>``. ``authorized_operations`` (v3+) is
INT32_MIN unless asked for; then every operation Kafka defines for a group
(no authorizer: all are allowed).

With an authorizer: a group the caller may not DESCRIBE is answered
GROUP_AUTHORIZATION_FAILED; authorized operations are what it may do.
"""

from __future__ import annotations

from broker.security.authorization import GROUP, allowed
from broker.security.authorization import operations as _operations
from broker.security.authorized_operations import AUTHORIZED_OPERATIONS_OMITTED, DELETE, DESCRIBE, READ, bitfield
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["DescribeGroups"]
R = struct_classes(API.response)
GROUP_OPERATIONS = bitfield((READ, DESCRIBE, DELETE))


def register(dispatcher, broker) -> None:
    def handle(ctx, request):
        coordinator = broker.groups.coordinator
        include_operations = ctx.api_version >= 3 and request.include_authorized_operations
        described = []
        for group_id in request.groups:
            if not allowed(broker, ctx, AclOperation.DESCRIBE, GROUP, group_id):
                described.append(
                    R.DescribedGroup(
                        error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=group_id, group_state="", protocol_type="",
                        protocol_data="", members=[], authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
                    )
                )
                continue
            operations = (
                _operations(broker, ctx, GROUP, group_id, GROUP_OPERATIONS) if include_operations else AUTHORIZED_OPERATIONS_OMITTED
            )
            wrong = broker.groups.not_coordinator(group_id)
            if wrong is not None:
                described.append(
                    R.DescribedGroup(
                        error_code=wrong, group_id=group_id, group_state="", protocol_type="", protocol_data="",
                        members=[], authorized_operations=operations,
                    )
                )
                continue
            summary = coordinator.describe_group(group_id)
            described.append(
                R.DescribedGroup(
                    error_code=ErrorCode.NONE,
                    group_id=group_id,
                    group_state=summary.state,
                    protocol_type=summary.protocol_type,
                    protocol_data=summary.protocol_name,
                    members=[
                        R.DescribedGroupMember(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata,
                            member_assignment=m.assignment,
                        )
                        for m in summary.members
                    ],
                    authorized_operations=operations,
                )
            )
        return R.DescribeGroupsResponse(throttle_time_ms=0, groups=described)

    dispatcher.register(API.key, 0, 5, handle)
