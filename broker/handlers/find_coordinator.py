"""FindCoordinator (key 10), versions 0-6.

Consumer groups (key_type 0) are coordinated by this broker, the only one of
the cluster. Transactional ids (key_type 1) and share groups (key_type 2)
answer COORDINATOR_NOT_AVAILABLE: there is no transaction or share
coordinator yet. Other key types answer INVALID_REQUEST. From v4 a request may
ask for several keys at once.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes

API = APIS_BY_KEY[10]
R = struct_classes(API.response)

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2


def register(dispatcher, broker) -> None:
    async def lookup(key_type: int):
        """(error_code, message, node_id, host, port)."""
        if key_type == KEY_TYPE_GROUP:
            # As Kafka, the first lookup of a group coordinator creates __consumer_offsets.
            if await broker.groups.ensure_offsets_topic() != ErrorCode.NONE:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1
            host, port = broker.advertised_endpoint()
            return ErrorCode.NONE, None, broker.node_id, host, port
        if key_type in (KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1
        return ErrorCode.INVALID_REQUEST, f"Unknown coordinator type {key_type}", -1, "", -1

    async def handle(ctx, request):
        if ctx.api_version < 4:
            error, message, node_id, host, port = await lookup(request.key_type)
            return R.FindCoordinatorResponse(
                throttle_time_ms=0, error_code=error, error_message=message, node_id=node_id, host=host, port=port
            )
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node_id, host, port = await lookup(request.key_type)
            coordinators.append(R.Coordinator(key=key, node_id=node_id, host=host, port=port, error_code=error, error_message=message))
        return R.FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)

    dispatcher.register(API.key, 0, 6, handle)
