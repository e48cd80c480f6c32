"""DeleteGroups (key 42), versions 0-2.

Deletes empty groups with their committed offsets (tombstones in
``__consumer_offsets``). Per group: GROUP_ID_NOT_FOUND for a group the
coordinator does not have, NON_EMPTY_GROUP while it has members. A KIP-848
consumer group is deleted the same way: its offsets' tombstones, then its own
records' (members', assignment's and group epoch's), as Kafka writes them.
An empty KIP-932 share group loses its share-partition state first (DeleteShareGroupState
at the share coordinators, broker/coordinators/share_groups/offsets.py), then its
records; if a state cannot be deleted the group is kept and answers that error.

With an authorizer: a group the caller may not DELETE is answered GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from broker.coordinators.share_groups import offsets as share_offsets
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
        for name in names:
            share_group = groups.share_groups.groups.get(name) if wrong[name] is None else None
            if share_group is not None and not share_group.members:
                wrong[name] = await delete_share_state(broker, name)
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


async def delete_share_state(broker, group_id: str) -> ErrorCode | None:
    """Delete the share-partition state of ``group_id`` for every partition of every
    topic (a share-partition without state costs its coordinator nothing); the
    first error, or None once all of it is gone."""
    keys = share_offsets.all_partition_keys(broker.image, group_id)
    results = await share_offsets.delete(broker.shares, keys)
    return next((error for error in results.values() if error != ErrorCode.NONE), None)
