"""DescribeTransactions (key 65), version 0.

For each transactional id: its state (Kafka's names: Empty, Ongoing,
PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort), timeout, the
start time of its transaction (-1 when none has started), producer id and
epoch, and the partitions of the transaction (while it completes, only those
still without a marker). Errors per id: NOT_COORDINATOR (ask the id's
coordinator: FindCoordinator with key type 1), COORDINATOR_LOAD_IN_PROGRESS,
TRANSACTIONAL_ID_NOT_FOUND, INVALID_REQUEST for an empty id.

With an authorizer: an id the caller may not DESCRIBE answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; the partitions of topics it may not
DESCRIBE are left out of the answer (Kafka's handleDescribeTransactionsRequest).
"""

from __future__ import annotations

from broker.security.authorization import TOPIC, TRANSACTIONAL_ID, allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["DescribeTransactions"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    def describe(ctx, transactional_id: str):
        if not allowed(broker, ctx, AclOperation.DESCRIBE, TRANSACTIONAL_ID, transactional_id):
            return R.TransactionState(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, transactional_id=transactional_id)
        error, description = broker.transactions.describe(transactional_id)
        if error != ErrorCode.NONE:
            return R.TransactionState(error_code=error, transactional_id=transactional_id)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in description.partitions:
            by_topic.setdefault(topic, []).append(partition)
        hidden = [topic for topic in by_topic if not allowed(broker, ctx, AclOperation.DESCRIBE, TOPIC, topic)]
        for topic in hidden:
            del by_topic[topic]
        return R.TransactionState(
            error_code=ErrorCode.NONE,
            transactional_id=transactional_id,
            transaction_state=description.state.display_name,
            transaction_timeout_ms=description.timeout_ms,
            transaction_start_time_ms=description.start_ms,
            producer_id=description.producer_id,
            producer_epoch=description.producer_epoch,
            topics=[R.TopicData(topic=topic, partitions=partitions) for topic, partitions in by_topic.items()],
        )

    async def handle(ctx, request):
        return R.DescribeTransactionsResponse(
            throttle_time_ms=0, transaction_states=[describe(ctx, txn_id) for txn_id in request.transactional_ids]
        )

    dispatcher.register(API.key, 0, 0, handle)
