"""AddOffsetsToTxn (key 25), versions 0-4.

Adds the ``__consumer_offsets`` partition of ``group_id`` (the group
coordinator's: the hash of the group id modulo ``offsets.topic.num.partitions``)
to the producer's transaction, so that the offsets it then commits with
TxnOffsetCommit are completed by the transaction's marker. Answered by the
transaction coordinator with AddPartitionsToTxn's errors: NONE once stored,
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, INVALID_PRODUCER_ID_MAPPING,
PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2), CONCURRENT_TRANSACTIONS,
COORDINATOR_NOT_AVAILABLE.

With an authorizer: WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group (else
GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from broker.security.authorization import GROUP, TRANSACTIONAL_ID, allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["AddOffsetsToTxn"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        if not allowed(broker, ctx, AclOperation.WRITE, TRANSACTIONAL_ID, request.transactional_id):
            return R.AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not allowed(broker, ctx, AclOperation.READ, GROUP, request.group_id):
            return R.AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        error = await broker.transactions.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
        )
        if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        return R.AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=error)

    dispatcher.register(API.key, 0, 4, handle)
