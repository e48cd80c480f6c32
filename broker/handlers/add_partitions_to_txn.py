"""AddPartitionsToTxn (key 24), versions 0-5.

Versions 0-3 come from transactional producers: one transaction
(``v3_and_below_*``) whose partitions join it before the producer writes to
them. Every partition must exist (UNKNOWN_TOPIC_OR_PARTITION) and not be in an
internal topic (TOPIC_AUTHORIZATION_FAILED, as Kafka answers a client that
names one), and not be in a mirror topic that is not writable (INVALID_REQUEST:
cluster links keep a mirror read-only until it is promoted or failed over);
if any fails, the others get OPERATION_NOT_ATTEMPTED and nothing
is added. Otherwise the transaction coordinator answers one error for all of
them: NONE once the transaction (Ongoing) with the partitions is stored,
or NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, INVALID_PRODUCER_ID_MAPPING
(no InitProducerId for this id and producer id), PRODUCER_FENCED (another
epoch; INVALID_PRODUCER_EPOCH before v2, which does not know it),
CONCURRENT_TRANSACTIONS (the previous transaction is still completing),
COORDINATOR_NOT_AVAILABLE (the state could not be stored).

Versions 4-5 come from brokers and carry several transactions, each of which
may be ``verify_only`` (KIP-890 part 1: a partition leader asks whether the
partitions are in the producer's ongoing transaction before it takes the
transaction's first batch). A verified partition answers NONE; one that is
not in the transaction INVALID_TXN_STATE in v4 and TRANSACTION_ABORTABLE in
v5 (Kafka 4.0's answer); the coordinator's errors apply to all of a
transaction's partitions. Without ``verify_only`` (KIP-890 part 2) a partition
leader adds the partitions for a transactions version 2 producer (Produce
v12, TxnOffsetCommit v5), and the transaction is recorded as version 2 (it
ends with an epoch bump).

With an authorizer (Kafka's checks): versions 0-3 need WRITE on the
transactional id (else every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and WRITE on each topic (else its
partitions answer TOPIC_AUTHORIZATION_FAILED, the others
OPERATION_NOT_ATTEMPTED); versions 4-5 need CLUSTER_ACTION on the cluster
(brokers), else the top-level code is CLUSTER_AUTHORIZATION_FAILED.

Leadership: the transaction coordinator of the transactional id answers
(NOT_COORDINATOR elsewhere); the partitions named are only checked against
the metadata, since nothing is read from or written to their replicas here.
"""

from __future__ import annotations

import asyncio

from broker.coordinators.transactions.model import TRANSACTION_VERSION_1, TRANSACTION_VERSION_2
from broker.links.multi_master_rules import is_multi_master
from broker.replica.leader_append import read_only_mirror_message
from broker.security.authorization import TOPIC, TRANSACTIONAL_ID, allowed, cluster_allowed, denied
from controller.authorizer import AclOperation
from controller.topic_commands import INTERNAL_TOPICS
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["AddPartitionsToTxn"]
R = struct_classes(API.response)
BROKER_VERSION_MIN = 4


def _topic_results(outcome: dict[tuple[str, int], ErrorCode]):
    by_topic: dict[str, list] = {}
    for (topic, partition), error in outcome.items():
        by_topic.setdefault(topic, []).append(R.AddPartitionsToTxnPartitionResult(partition_index=partition, partition_error_code=error))
    return [R.AddPartitionsToTxnTopicResult(name=topic, results_by_partition=results) for topic, results in by_topic.items()]


def register(dispatcher, broker) -> None:
    async def one(ctx, version: int, transactional_id: str, producer_id: int, producer_epoch: int, partitions, verify_only: bool):
        image = broker.image
        refused: dict[tuple[str, int], ErrorCode] = {}
        keys = list(dict.fromkeys(partitions))
        unauthorized: set[str] = set()
        if version < BROKER_VERSION_MIN:
            # From a client: the transactional id first, then each topic (brokers' v4+ were checked as a whole).
            if not allowed(broker, ctx, AclOperation.WRITE, TRANSACTIONAL_ID, transactional_id):
                return {key: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for key in keys}
            unauthorized = denied(broker, ctx, AclOperation.WRITE, TOPIC, (topic for topic, _ in keys))
        for key in keys:
            topic = image.topics.get(key[0])
            if version < BROKER_VERSION_MIN and (key[0] in INTERNAL_TOPICS or key[0] in unauthorized):
                refused[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or key[1] not in topic.partitions:
                refused[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif read_only_mirror_message(image, key[0]) is not None or is_multi_master(image, key[0]):
                # Multi-master topics (cluster links) take no transactions (broker/links/multi_master_rules.py).
                refused[key] = ErrorCode.INVALID_REQUEST
        if refused:
            return {key: refused.get(key, ErrorCode.OPERATION_NOT_ATTEMPTED) for key in keys}
        transactions = broker.transactions
        if verify_only:
            outcome = transactions.verify(transactional_id, producer_id, producer_epoch, keys)
            if version >= 5:
                outcome = {
                    key: ErrorCode.TRANSACTION_ABORTABLE if error == ErrorCode.INVALID_TXN_STATE else error
                    for key, error in outcome.items()
                }
            return outcome
        # A broker's add (v4+ without verify_only) is for a transactions version 2
        # producer (Produce v12, TxnOffsetCommit v5): Kafka reads the version so.
        client_transaction_version = TRANSACTION_VERSION_2 if version >= BROKER_VERSION_MIN else TRANSACTION_VERSION_1
        error = await transactions.add_partitions(transactional_id, producer_id, producer_epoch, keys, client_transaction_version)
        if error == ErrorCode.PRODUCER_FENCED and version < 2:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        return {key: error for key in keys}

    async def handle(ctx, request):
        version = ctx.api_version
        if version < BROKER_VERSION_MIN:
            partitions = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
            outcome = await one(
                ctx,
                version,
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                partitions,
                False,
            )
            return R.AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(outcome))
        if not cluster_allowed(broker, ctx, AclOperation.CLUSTER_ACTION):
            return R.AddPartitionsToTxnResponse(
                throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[]
            )
        # Several entries for one id are taken as one (Kafka groups partitions by id);
        # it is only verified if every entry asks for verification alone.
        merged: dict[str, list] = {}
        for txn in request.transactions:
            entry = merged.setdefault(txn.transactional_id, [txn.producer_id, txn.producer_epoch, [], True])
            entry[2].extend((t.name, p) for t in txn.topics for p in t.partitions)
            entry[3] = entry[3] and txn.verify_only
        outcomes = await asyncio.gather(
            *(one(ctx, version, txn_id, pid, epoch, partitions, verify_only) for txn_id, (pid, epoch, partitions, verify_only) in merged.items())
        )
        return R.AddPartitionsToTxnResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NONE,
            results_by_transaction=[
                R.AddPartitionsToTxnResult(transactional_id=txn_id, topic_results=_topic_results(outcome))
                for txn_id, outcome in zip(merged, outcomes)
            ],
        )

    dispatcher.register(API.key, 0, 5, handle)
