"""DeleteGroups (key 42), versions 0-2.

Deletes empty groups with their committed offsets (tombstones in
``__consumer_offsets``). Per group: GROUP_ID_NOT_FOUND for a group the
coordinator does not have, NON_EMPTY_GROUP while it has members. A KIP-848
consumer group is deleted the same way: its offsets' tombstones, then its own
records' (members', assignment's and group epoch's), as Kafka writes them.

With an authorizer: a group the caller may not DELETE is answered GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from broker.security.authorization import GROUP, denied
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["DeleteGroups"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        groups = broker.groups
        names = list(dict.fromkeys(request.groups_names))
        refused = denied(broker, ctx, AclOperation.DELETE, GROUP, names)
        wrong = {name: ErrorCode.GROUP_AUTHORIZATION_FAILED if name in refused else groups.not_coordinator(name) for name in names}
        results = groups.delete_groups([name for name in names if wrong[name] is None])
        results.update({name: error for name, error in wrong.items() if error is not None})
        for name in names:
            if results[name] == ErrorCode.NONE:
                results[name] = await groups.replicated(name)
        return R.DeleteGroupsResponse(
            throttle_time_ms=0,
            results=[R.DeletableGroupResult(group_id=name, error_code=results[name]) for name in names],
        )

    dispatcher.register(API.key, 0, 2, handle)
