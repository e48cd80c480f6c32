"""InitProducerId (key 22), versions 0-5.

Idempotent producers (no transactional id) get a fresh producer id at epoch 0
on every call, as Kafka does for them (a producer that asks again with its old
id and epoch, v3+, also gets a new id: without a transactional id there is no
state to bump). Ids come from blocks reserved durably in the metadata log, so
none is ever reused.

A transactional id goes to the transaction coordinator (broker/transactions):
the first call creates ``__transaction_state`` if needed; a broker that does
not coordinate the id answers NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS
while it loads the id's partition). The coordinator bumps the epoch (a new id
starts at 0; an exhausted epoch moves to a new producer id), fences an
ongoing transaction (CONCURRENT_TRANSACTIONS: the producer retries),
answers CONCURRENT_TRANSACTIONS while a transaction completes, and
INVALID_TRANSACTION_TIMEOUT for a timeout <= 0 or above
``transaction.max.timeout.ms``. From v3 the producer may send the id and
epoch it has (KIP-360): both -1, or both set (INVALID_REQUEST otherwise);
a stale pair is PRODUCER_FENCED, which versions before 4 (that do not know
it) get as INVALID_PRODUCER_EPOCH, as Kafka maps it.

With an authorizer (Kafka's checks): a transactional id needs WRITE on it
(else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs
IDEMPOTENT_WRITE on the cluster or WRITE on some topic (an ALLOW that is not
wholly denied, the authorizer's authorize_by_resource_type), else
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from broker.security.authorization import TRANSACTIONAL_ID, allowed, cluster_allowed
from controller.authorizer import AclOperation, ResourceType
from controller.errors import NotControllerError
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["InitProducerId"]
R = struct_classes(API.response)


def _error(error: ErrorCode):
    return R.InitProducerIdResponse(error_code=error, producer_id=-1, producer_epoch=-1)


def register(dispatcher, broker) -> None:
    # One allocator per broker, shared with the transaction coordinator.
    allocator = broker.transactions.producer_ids

    def idempotent_allowed(ctx) -> bool:
        authorizer = broker.authorizer
        return (
            authorizer is None
            or cluster_allowed(broker, ctx, AclOperation.IDEMPOTENT_WRITE)
            or authorizer.authorize_by_resource_type(ctx.principal, ctx.host, AclOperation.WRITE, ResourceType.TOPIC)
        )

    async def handle(ctx, request):
        if request.transactional_id is not None:
            if not allowed(broker, ctx, AclOperation.WRITE, TRANSACTIONAL_ID, request.transactional_id):
                return _error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            return await transactional(ctx, request)
        if not idempotent_allowed(ctx):
            return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        try:
            producer_id = await allocator.next_id()
        except NotControllerError:
            # Kafka answers a failed block allocation with this retriable error.
            return _error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return R.InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)

    async def transactional(ctx, request):
        producer_id, producer_epoch = request.producer_id, request.producer_epoch
        if (producer_id == -1) != (producer_epoch == -1):
            return _error(ErrorCode.INVALID_REQUEST)
        expected = None if producer_id == -1 else (producer_id, producer_epoch)
        result = await broker.transactions.init_producer_id(request.transactional_id, request.transaction_timeout_ms, expected)
        error = result.error
        if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        return R.InitProducerIdResponse(error_code=error, producer_id=result.producer_id, producer_epoch=result.producer_epoch)

    dispatcher.register(API.key, 0, 5, handle)
