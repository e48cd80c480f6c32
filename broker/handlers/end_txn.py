"""EndTxn (key 26), versions 0-4.

Commits or aborts the producer's ongoing transaction: answered NONE once the
coordinator has stored PrepareCommit/PrepareAbort (the markers and the
completion follow; the next transaction waits with CONCURRENT_TRANSACTIONS
until they are done). A retry after the transaction completed answers NONE in
the same direction and INVALID_TXN_STATE in the other; ending a transaction
that was never started (Empty) is INVALID_TXN_STATE; no InitProducerId for
the id and producer id is INVALID_PRODUCER_ID_MAPPING; another epoch is
PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2). NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS and COORDINATOR_NOT_AVAILABLE send the producer
to look for its coordinator again or retry.

Version 5 (KIP-890 part 2: an epoch bump at every transaction end, returned
in the answer) belongs to transactions version 2, which this broker does not
support, so it is not served.

With an authorizer: WRITE on the transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from broker.security.authorization import TRANSACTIONAL_ID, allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["EndTxn"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        if not allowed(broker, ctx, AclOperation.WRITE, TRANSACTIONAL_ID, request.transactional_id):
            return R.EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        error = await broker.transactions.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed
        )
        if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        return R.EndTxnResponse(throttle_time_ms=0, error_code=error)

    dispatcher.register(API.key, 0, 4, handle)
