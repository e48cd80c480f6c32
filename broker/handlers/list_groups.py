"""ListGroups (key 16), versions 0-5.

Every group the coordinator has, with its protocol type (``consumer`` for
consumer groups, empty for offsets committed without a group), its state (v4+)
and its type (v5+): ``classic``, or ``consumer`` for a KIP-848 consumer group
(protocol type ``consumer``; states Empty, Assigning, Reconciling, Stable), or
``share`` for a KIP-932 share group (protocol type ``share``; Empty, Stable). ``states_filter`` (v4+) and ``types_filter`` (v5+) match
case-insensitively; empty filters match everything.

With an authorizer (as Kafka): DESCRIBE on the cluster lists every group,
otherwise only the groups the caller may DESCRIBE.
"""

from __future__ import annotations

from broker.coordinators.groups.coordinator import GroupListing
from broker.security.authorization import GROUP, allowed, cluster_allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["ListGroups"]
R = struct_classes(API.response)


def _consumer_groups(broker, states, types) -> list[GroupListing]:
    wanted_states = {s.lower() for s in states}
    if types and "consumer" not in {t.lower() for t in types}:
        return []
    return [
        GroupListing(group.group_id, "consumer", group.state, group_type="consumer")
        for group in broker.groups.consumer_groups.groups.values()
        if not wanted_states or group.state.lower() in wanted_states
    ]


def _share_groups(broker, states, types) -> list[GroupListing]:
    wanted_states = {s.lower() for s in states}
    if types and "share" not in {t.lower() for t in types}:
        return []
    return [
        GroupListing(group.group_id, "share", group.state, group_type="share")
        for group in broker.groups.share_groups.groups.values()
        if not wanted_states or group.state.lower() in wanted_states
    ]


def register(dispatcher, broker) -> None:
    def handle(ctx, request):
        states = request.states_filter if ctx.api_version >= 4 else []
        types = request.types_filter if ctx.api_version >= 5 else []
        # Each broker lists the groups it coordinates (admin clients ask them all).
        listings = [
            *broker.groups.coordinator.list_groups(states, types),
            *_consumer_groups(broker, states, types),
            *_share_groups(broker, states, types),
        ]
        listings = [g for g in listings if broker.groups.not_coordinator(g.group_id) is None]
        if not cluster_allowed(broker, ctx, AclOperation.DESCRIBE):
            listings = [g for g in listings if allowed(broker, ctx, AclOperation.DESCRIBE, GROUP, g.group_id)]
        return R.ListGroupsResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NONE,
            groups=[
                R.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state, group_type=g.group_type)
                for g in listings
            ],
        )

    dispatcher.register(API.key, 0, 5, handle)
