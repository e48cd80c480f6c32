"""FindCoordinator (key 10), versions 0-6.

A consumer group (key_type 0) is coordinated by the leader of its
``__consumer_offsets`` partition (Kafka's hash of the group id modulo
``offsets.topic.num.partitions``), a transactional id (key_type 1) by the
leader of its ``__transaction_state`` partition (the same hash modulo
``transaction.state.log.num.partitions``); either is answered with that
broker's endpoint on the client listener, COORDINATOR_NOT_AVAILABLE while the
partition has no serving leader. The first lookup creates the internal topic
(``__consumer_offsets`` or ``__transaction_state``), as in Kafka. Share groups
(key_type 2) answer COORDINATOR_NOT_AVAILABLE: there is no share coordinator
yet. Other key types answer INVALID_REQUEST. From v4 a request may ask for
several keys at once.

With an authorizer (as Kafka): a group key needs DESCRIBE on the group (else
GROUP_AUTHORIZATION_FAILED), a transactional id DESCRIBE on it (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from broker.security.authorization import GROUP, TRANSACTIONAL_ID, allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["FindCoordinator"]
R = struct_classes(API.response)

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2


def register(dispatcher, broker) -> None:
    unavailable = (ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1)

    async def lookup(ctx, key_type: int, key: str, listener: str | None):
        """(error_code, message, node_id, host, port)."""
        if key_type == KEY_TYPE_GROUP and not allowed(broker, ctx, AclOperation.DESCRIBE, GROUP, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, None, -1, "", -1
        if key_type == KEY_TYPE_TRANSACTION and not allowed(broker, ctx, AclOperation.DESCRIBE, TRANSACTIONAL_ID, key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, -1, "", -1
        if key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
            service = broker.groups if key_type == KEY_TYPE_GROUP else broker.transactions
            # As Kafka, the first lookup of a coordinator creates its internal topic.
            ensure = service.ensure_offsets_topic if key_type == KEY_TYPE_GROUP else service.ensure_topic
            if await ensure() != ErrorCode.NONE:
                return unavailable
            error, leader = service.coordinator_of(key)
            if error != ErrorCode.NONE:
                return unavailable
            endpoint = next(((h, p) for i, h, p, _ in broker.alive_brokers(listener) if i == leader), None)
            if endpoint is None:  # fenced, or not on the client listener
                return unavailable
            return ErrorCode.NONE, None, leader, endpoint[0], endpoint[1]
        if key_type == KEY_TYPE_SHARE:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", -1, "", -1
        return ErrorCode.INVALID_REQUEST, f"Unknown coordinator type {key_type}", -1, "", -1

    async def handle(ctx, request):
        if ctx.api_version < 4:
            error, message, node_id, host, port = await lookup(ctx, request.key_type, request.key, ctx.listener)
            return R.FindCoordinatorResponse(
                throttle_time_ms=0, error_code=error, error_message=message, node_id=node_id, host=host, port=port
            )
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node_id, host, port = await lookup(ctx, request.key_type, key, ctx.listener)
            coordinators.append(R.Coordinator(key=key, node_id=node_id, host=host, port=port, error_code=error, error_message=message))
        return R.FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)

    dispatcher.register(API.key, 0, 6, handle)
