"""JoinGroup (key 11), versions 0-9.

The first step of a classic group rebalance (see broker.coordinators.groups.coordinator).
v4+ members joining without a member id are answered MEMBER_ID_REQUIRED with
one to join with; v0-3 members are admitted directly. v0 has no rebalance
timeout: the session timeout serves as both, as in Kafka. The response waits
until the join phase of the rebalance ends. The leader gets every member's
metadata for the chosen protocol; static members (v5+ ``group_instance_id``)
that rejoin a stable group without changing its protocol get the current
generation at once, and a rejoining static leader is told (v9
``skip_assignment``) that the group's assignment stands; before v9 it is
answered, as by Kafka, with the leader id it replaced and no members, so that
it does not run the assignor. The member's host is reported as Kafka does, ``/<address>``.
"""

from __future__ import annotations

from broker.coordinators.groups.coordinator import JoinRequest
from broker.security.authorization import GROUP, allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["JoinGroup"]
R = struct_classes(API.response)


def client_host(peer: str) -> str:
    """Kafka reports a client's address as Java's InetAddress prints it: ``/127.0.0.1``."""
    return "/" + peer.rsplit(":", 1)[0]


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        version = ctx.api_version
        if not allowed(broker, ctx, AclOperation.READ, GROUP, request.group_id):
            return R.JoinGroupResponse(
                throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                protocol_type=None, protocol_name=None if version >= 7 else "", leader="", skip_assignment=False,
                member_id="", members=[],
            )
        join = JoinRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id if version >= 5 else None,
            client_id=ctx.client_id or "",
            client_host=client_host(ctx.peer),
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
        result = await broker.groups.join_group(join)
        protocol_name = result.protocol_name
        if protocol_name is None and version < 7:
            protocol_name = ""  # not nullable before v7
        return R.JoinGroupResponse(
            throttle_time_ms=0,
            error_code=result.error,
            generation_id=result.generation_id if result.error == ErrorCode.NONE else -1,
            protocol_type=result.protocol_type,
            protocol_name=protocol_name,
            leader=result.leader,
            skip_assignment=result.skip_assignment,
            member_id=result.member_id,
            members=[
                R.JoinGroupResponseMember(member_id=member_id, group_instance_id=instance_id, metadata=metadata)
                for member_id, instance_id, metadata in result.members
            ],
        )

    dispatcher.register(API.key, 0, 9, handle)
