"""EndTxn (key 26), versions 0-5.

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

Version 5 (KIP-890 part 2, transactions version 2): with ``transaction.version``
2 finalized, the coordinator bumps the producer epoch at the end of every
transaction (the markers carry the new epoch) and answers the producer id and
epoch the producer goes on with: epoch + 1, or a new producer id at epoch 0
when the epoch is exhausted. A retry whose answer was lost (the epoch just
below the current one) is answered NONE with the current id and epoch; an
abort with no transaction open bumps the epoch too (Kafka's rules, see
``TransactionCoordinator.end_txn_v2``). Below transaction.version 2 a v5
request is served as v4 and answers the producer id and epoch it came with,
unchanged (a Kafka 4 client sends v5 only once the feature is finalized).

With an authorizer: WRITE on the transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from broker.coordinators.transactions.service import transactions_v2
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
        if ctx.api_version >= 5 and transactions_v2(broker.image):
            result = await broker.transactions.end_txn_v2(
                request.transactional_id, request.producer_id, request.producer_epoch, request.committed
            )
            return R.EndTxnResponse(
                throttle_time_ms=0, error_code=result.error, producer_id=result.producer_id, producer_epoch=result.producer_epoch
            )
        error = await broker.transactions.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed
        )
        if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        response = R.EndTxnResponse(throttle_time_ms=0, error_code=error)
        if error == ErrorCode.NONE:
            # v5 below transaction.version 2: no bump, the producer keeps its id and epoch.
            response.producer_id, response.producer_epoch = request.producer_id, request.producer_epoch
        return response

    dispatcher.register(API.key, 0, 5, handle)
