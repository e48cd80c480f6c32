"""DescribeProducers (key 61), version 0.

For each requested partition, the idempotent producers the partition's log
remembers (its producer state: the latest snapshot plus the batches after
it, see storage/producer_snapshot.py): producer id, epoch, the last sequence
it wrote and the largest timestamp of its last batch; producers idle for
``producer.id.expiration.ms`` are gone (a producer inside a transaction does
not expire). ``coordinator_epoch`` is the epoch of the transaction
coordinator that last wrote a marker for the producer here (-1: none), and
``current_txn_start_offset`` the first offset of its open transaction on
the partition (-1: none), which shows a transaction left hanging. Every producer the state holds is listed. Errors per partition:
UNKNOWN_TOPIC_OR_PARTITION for an unknown topic or partition,
NOT_LEADER_OR_FOLLOWER for a partition this broker does not host or only
follows (Kafka answers from the leader only). With an
authorizer, a topic the caller may not READ answers TOPIC_AUTHORIZATION_FAILED
for each partition asked.
"""

from __future__ import annotations

from broker.security.authorization import MESSAGES, TOPIC, denied, split_entries
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["DescribeProducers"]
R = struct_classes(API.response)


def authorize(broker, ctx, request):
    """The pre-authorization hook (broker/net/dispatch.py)."""
    refused = denied(broker, ctx, AclOperation.READ, TOPIC, (t.name for t in request.topics))
    if not refused:
        return None
    error = ErrorCode.TOPIC_AUTHORIZATION_FAILED

    def refusal(t):
        if t.name not in refused:
            return None
        return R.TopicResponse(
            name=t.name,
            partitions=[
                R.PartitionResponse(partition_index=i, error_code=error, error_message=MESSAGES[error], active_producers=[])
                for i in t.partition_indexes
            ],
        )

    return split_entries(request, "topics", refusal, "topics", lambda: R.DescribeProducersResponse(throttle_time_ms=0, topics=[]))


def register(dispatcher, broker) -> None:
    def handle(ctx, request):
        topics = []
        for rt in request.topics:
            partitions = []
            for index in rt.partition_indexes:
                answer = R.PartitionResponse(partition_index=index, error_code=ErrorCode.NONE, error_message=None, active_producers=[])
                partitions.append(answer)
                local = broker.replicas.local_replica(rt.name, index)
                if local.error:
                    answer.error_code = local.error
                    continue
                plog = local.plog
                answer.active_producers = [
                    R.ProducerState(
                        producer_id=producer_id,
                        producer_epoch=entry.epoch,
                        last_sequence=entry.last_sequence,
                        last_timestamp=entry.last_timestamp_ms,
                        coordinator_epoch=entry.coordinator_epoch,
                        current_txn_start_offset=entry.current_txn_first_offset,
                    )
                    for producer_id, entry in sorted(plog.producer_state.producers.items())
                ]
            topics.append(R.TopicResponse(name=rt.name, partitions=partitions))
        return R.DescribeProducersResponse(throttle_time_ms=0, topics=topics)

    dispatcher.register(API.key, 0, 0, handle, authorize=lambda ctx, request: authorize(broker, ctx, request))
