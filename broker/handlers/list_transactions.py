"""ListTransactions (key 66), versions 0-1.

The transactional ids this broker coordinates (an admin client asks every
broker), with producer id and state. Filters, all optional: state names
(Kafka's; names it does not know come back in ``unknown_state_filters`` and
match nothing), producer ids, and from v1 ``duration_filter``: only
transactions running longer than that many milliseconds (-1: no filter).
COORDINATOR_LOAD_IN_PROGRESS while a ``__transaction_state`` partition is
being loaded. Version 2 (a transactional id pattern) is not served. With an
authorizer, only the ids the caller may DESCRIBE are listed.
"""

from __future__ import annotations

from broker.security.authorization import TRANSACTIONAL_ID, allowed
from controller.authorizer import AclOperation
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["ListTransactions"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        duration_ms = request.duration_filter if ctx.api_version >= 1 else -1
        error, unknown, listings = broker.transactions.list_transactions(
            request.state_filters, request.producer_id_filters, duration_ms
        )
        return R.ListTransactionsResponse(
            throttle_time_ms=0,
            error_code=error,
            unknown_state_filters=unknown,
            transaction_states=[
                R.TransactionState(transactional_id=x.transactional_id, producer_id=x.producer_id, transaction_state=x.state.display_name)
                for x in listings
                if allowed(broker, ctx, AclOperation.DESCRIBE, TRANSACTIONAL_ID, x.transactional_id)
            ],
        )

    dispatcher.register(API.key, 0, 1, handle)
