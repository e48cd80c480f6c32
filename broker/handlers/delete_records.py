"""DeleteRecords (key 21), versions 0-2.

Moves each partition's log start offset up to the requested offset (-1: the
high watermark); records below it can no longer be fetched, and segments that
lie wholly below it are deleted at once. Answers the new low watermark.
Errors per partition: UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE for an
offset beyond the high watermark (or below -1). The log start offset is kept
in ``log-start-offset-checkpoint``, so it survives a restart.

With an authorizer, a topic the caller may not DELETE answers
TOPIC_AUTHORIZATION_FAILED for each of its partitions, whether or not it exists.
"""

from __future__ import annotations

from broker.authorization import TOPIC, denied, split_entries
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes
from storage.log import AppendError

API = APIS_BY_KEY[21]
R = struct_classes(API.response)


def authorize(broker, ctx, request):
    """The pre-authorization hook (broker/dispatch.py): only topics the caller may DELETE go on."""
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
    def handle(ctx, request):
        topics = []
        for rt in request.topics:
            topic = broker.image.topics.get(rt.name)
            partitions = []
            for rp in rt.partitions:
                result = R.DeleteRecordsPartitionResult(partition_index=rp.partition_index, low_watermark=-1, error_code=ErrorCode.NONE)
                partitions.append(result)
                plog = broker.partition_log(rt.name, rp.partition_index) if topic and rp.partition_index in topic.partitions else None
                if plog is None:
                    result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                try:
                    result.low_watermark = plog.delete_records(rp.offset)
                except AppendError as exc:
                    result.error_code = exc.error_code
            topics.append(R.DeleteRecordsTopicResult(name=rt.name, partitions=partitions))
        broker.logs.checkpoint()  # the new log start offsets survive a crash
        return R.DeleteRecordsResponse(throttle_time_ms=0, topics=topics)

    dispatcher.register(API.key, 0, 2, handle, authorize=lambda ctx, request: authorize(broker, ctx, request))
