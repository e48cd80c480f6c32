"""TxnOffsetCommit (key 28), versions 0-5.

A transactional producer's consumer offsets (``send_offsets_to_transaction``):
stored in the group's ``__consumer_offsets`` partition as one transactional
batch with the request's producer id and epoch, and answered once every
in-sync replica holds it. The offsets stay pending, invisible to OffsetFetch
(UNSTABLE_OFFSET_COMMIT when stable offsets are asked for), until the
transaction's COMMIT marker lands in that partition; ABORT drops them.

Errors, per partition as Kafka gives them: UNKNOWN_TOPIC_OR_PARTITION for a
partition the cluster does not have; NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE as for OffsetCommit;
INVALID_GROUP_ID for an empty group id; OFFSET_METADATA_TOO_LARGE above
``offset.metadata.max.bytes``. v3+ (KIP-447) names the member: UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID, ILLEGAL_GENERATION (also for a generation given to a group
the coordinator does not have); without membership (generation -1, no member
id, as v0-2 always are) the commit is accepted in any group state, and an
unknown group becomes a simple group. For a KIP-848 consumer group the
generation is the member epoch, checked as for OffsetCommit (UNKNOWN_MEMBER_ID,
STALE_MEMBER_EPOCH, FENCED_MEMBER_EPOCH; any version). A negative producer id answers
INVALID_PRODUCER_ID_MAPPING, a negative epoch INVALID_PRODUCER_EPOCH; the log's
refusals of the producer (INVALID_PRODUCER_EPOCH for an epoch older than the
partition knows, PRODUCER_FENCED, ...) are passed on. v4 (KIP-890)
only allows TRANSACTION_ABORTABLE in answers; this broker does not verify the
transaction's partitions with its coordinator for v0-4, so it never sends it.

v5 (KIP-890 part 2) comes from transactions version 2 producers, which send
no AddOffsetsToTxn: with ``transaction.version`` 2 finalized, the group's
``__consumer_offsets`` partition is first added to the producer's
transaction by its coordinator (locally or with AddPartitionsToTxn v5), and
the offsets are staged only once that is stored. The coordinator's refusals
answer every partition: CONCURRENT_TRANSACTIONS while the last transaction
completes (the client retries), COORDINATOR_NOT_AVAILABLE when the
transaction coordinator cannot be reached or loaded (the client looks the
group coordinator up again), INVALID_PRODUCER_EPOCH for a fenced producer
(as Kafka's partition leaders pass PRODUCER_FENCED on),
INVALID_PRODUCER_ID_MAPPING, INVALID_TXN_STATE. Below that level v5 is
served as v4.

With an authorizer (Kafka's order): WRITE on the transactional id, else every
partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED; READ on the group,
else GROUP_AUTHORIZATION_FAILED for every partition; READ on each topic, else
its partitions answer TOPIC_AUTHORIZATION_FAILED and are not committed.

Leadership: the group's coordinator answers (NOT_COORDINATOR elsewhere) and
writes through the leader of the group's ``__consumer_offsets`` partition;
the committed partitions' own replicas are neither read nor changed.
"""

from __future__ import annotations

from broker.coordinators.transactions.service import transactions_v2
from broker.security.authorization import GROUP, TOPIC, TRANSACTIONAL_ID, allowed, denied
from controller.authorizer import AclOperation
from protocol.consumer_offsets import OffsetAndMetadata
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["TxnOffsetCommit"]
R = struct_classes(API.response)
# The transaction coordinator's refusal of the implicit add (v5), as the
# client is told it (Kafka's partition leaders map them so too).
_ADD_ERRORS = {
    ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.NOT_COORDINATOR: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}


def register(dispatcher, broker) -> None:
    def every_partition(request, error: ErrorCode):
        return R.TxnOffsetCommitResponse(
            throttle_time_ms=0,
            topics=[
                R.TxnOffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=error) for p in topic.partitions],
                )
                for topic in request.topics
            ],
        )

    async def add_offsets_partition(request) -> ErrorCode | None:
        """KIP-890 part 2: the group's offsets partition joins the transaction
        (what AddOffsetsToTxn does for older producers); None once it has."""
        transactions = broker.transactions
        key = transactions.coordinator.offsets_partition_for(request.group_id)
        outcome = await transactions.verify_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, [key], add=True
        )
        error = outcome.get(key, ErrorCode.UNKNOWN_SERVER_ERROR)
        if error == ErrorCode.NONE:
            return None
        return _ADD_ERRORS.get(error, error)

    async def handle(ctx, request):
        version = ctx.api_version
        groups = broker.groups
        if not allowed(broker, ctx, AclOperation.WRITE, TRANSACTIONAL_ID, request.transactional_id):
            return every_partition(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not allowed(broker, ctx, AclOperation.READ, GROUP, request.group_id):
            return every_partition(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        unauthorized = denied(broker, ctx, AclOperation.READ, TOPIC, (topic.name for topic in request.topics))
        # The offsets go to __consumer_offsets: make sure it exists.
        await groups.ensure_offsets_topic()
        now_ms = groups.now_ms()  # the coordinator's sessions: monotonic
        wall_ms = groups.wall_ms()  # the commit timestamp: wall-clock, as Kafka's
        errors: dict[tuple[str, int], ErrorCode] = {}
        offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        for topic in request.topics:
            image = broker.image.topics.get(topic.name)
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                if topic.name in unauthorized:
                    errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                if image is None or p.partition_index not in image.partitions:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                offsets[tp] = OffsetAndMetadata(
                    offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch if version >= 2 else -1,
                    metadata=p.committed_metadata or "",
                    commit_timestamp_ms=wall_ms,
                )
        if offsets:
            wrong = groups.not_writable(request.group_id) if request.group_id else None
            if wrong is None and version >= 5 and transactions_v2(broker.image):
                wrong = await add_offsets_partition(request)
            if wrong is None and groups.is_consumer_group(request.group_id):
                # A consumer group's member gives its member epoch as the generation
                # (checked as Kafka does); the commit is then one without membership.
                wrong = groups.consumer_member_error(
                    request.group_id, request.member_id if version >= 3 else None,
                    request.generation_id if version >= 3 else -1, version, transactional=True,
                )
                if wrong is None:
                    results = groups.run(
                        groups.coordinator.commit_transactional_offsets, now_ms, request.group_id,
                        request.producer_id, request.producer_epoch, -1, "", None, offsets,
                    )
                    errors.update(await groups.answer_after_replication(request.group_id, results))
                    offsets = {}
            if not offsets:
                pass
            elif wrong is not None:
                errors.update({tp: wrong for tp in offsets})
            else:
                results = groups.run(
                    groups.coordinator.commit_transactional_offsets,
                    now_ms,
                    request.group_id,
                    request.producer_id,
                    request.producer_epoch,
                    request.generation_id if version >= 3 else -1,
                    request.member_id if version >= 3 else "",
                    request.group_instance_id if version >= 3 else None,
                    offsets,
                )
                errors.update(await groups.answer_after_replication(request.group_id, results))
        return R.TxnOffsetCommitResponse(
            throttle_time_ms=0,
            topics=[
                R.TxnOffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[
                        R.TxnOffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=errors[(topic.name, p.partition_index)]
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ],
        )

    dispatcher.register(API.key, 0, 5, handle)
