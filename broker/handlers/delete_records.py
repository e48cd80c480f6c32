"""DeleteRecords (key 21), versions 0-2.

Only the partition's leader carries it out (NOT_LEADER_OR_FOLLOWER on a
follower and on a broker that does not host the partition, as Kafka): it
moves its log start offset up to the requested offset (-1: the high
watermark); records below it can no longer be fetched, and segments that lie
wholly below it are deleted at once. Followers move theirs only by
replication, from the log start offset in the leader's fetch responses. The
answer waits, up to the request's ``timeout_ms`` (then REQUEST_TIMED_OUT),
until every live replica's log start offset reached the requested offset,
and names that low watermark (Kafka's DelayedDeleteRecords); leadership moving
meanwhile answers NOT_LEADER_OR_FOLLOWER, which clients retry at the new
leader. Other errors per partition: UNKNOWN_TOPIC_OR_PARTITION,
OFFSET_OUT_OF_RANGE for an offset beyond the high watermark (or below -1),
POLICY_VIOLATION for a topic whose cleanup.policy lacks ``delete`` and for a
mirror topic that is not writable (cluster links: its records are the
source's until it is promoted or failed over). The log
start offset is kept in ``log-start-offset-checkpoint``, so it survives a
restart.

With an authorizer, a topic the caller may not DELETE answers
TOPIC_AUTHORIZATION_FAILED for each of its partitions, whether or not it exists.
"""

from __future__ import annotations

from broker.replica.leader_append import read_only_mirror_message
from broker.security.authorization import TOPIC, denied, split_entries
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from storage.append_checks import AppendError

API = APIS_BY_NAME["DeleteRecords"]
R = struct_classes(API.response)


def authorize(broker, ctx, request):
    """The pre-authorization hook (broker/net/dispatch.py): only topics the caller may DELETE go on."""
    refused = denied(broker, ctx, AclOperation.DELETE, TOPIC, (t.name for t in request.topics))
    if not refused:
        return None

    def refusal(t):
        if t.name not in refused:
            return None
        return R.DeleteRecordsTopicResult(
            name=t.name,
            partitions=[
                R.DeleteRecordsPartitionResult(
                    partition_index=p.partition_index, low_watermark=-1, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED
                )
                for p in t.partitions
            ],
        )

    return split_entries(request, "topics", refusal, "topics", lambda: R.DeleteRecordsResponse(throttle_time_ms=0, topics=[]))


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        topics = []
        waits = []  # (result, future) for partitions deleted here, waiting for the replicas
        for rt in request.topics:
            partitions = []
            for rp in rt.partitions:
                result = R.DeleteRecordsPartitionResult(partition_index=rp.partition_index, low_watermark=-1, error_code=ErrorCode.NONE)
                partitions.append(result)
                local = broker.replicas.local_replica(rt.name, rp.partition_index)
                if local.error:
                    result.error_code = local.error
                    continue
                plog = local.plog
                if not plog.config.deletes or read_only_mirror_message(broker.image, rt.name) is not None:
                    # A mirror's records are the source's: deleting them is the source's retention.
                    result.error_code = ErrorCode.POLICY_VIOLATION
                    continue
                target = plog.high_watermark if rp.offset == -1 else rp.offset
                try:
                    plog.delete_records(rp.offset)
                except AppendError as exc:
                    result.error_code = exc.error_code
                    continue
                key = (rt.name, rp.partition_index)
                waits.append((result, broker.replicas.wait_for_low_watermark(key, local.leader, plog, target, request.timeout_ms)))
            topics.append(R.DeleteRecordsTopicResult(name=rt.name, partitions=partitions))
        if waits:
            broker.logs.checkpoint()  # the new log start offsets survive a crash
            for result, future in waits:
                result.error_code, result.low_watermark = await future
        return R.DeleteRecordsResponse(throttle_time_ms=0, topics=topics)

    dispatcher.register(API.key, 0, 2, handle, authorize=lambda ctx, request: authorize(broker, ctx, request))
