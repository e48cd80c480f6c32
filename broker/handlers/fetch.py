"""Fetch (key 1), versions 4-17 (Kafka 4 dropped 0-3 and down-conversion).

Consumer fetches only: no follower fetches until replication exists. Each
partition returns whole batches from the one holding ``fetch_offset`` up to
the high watermark, at most ``partition_max_bytes``; the response stays within
``max_bytes`` except that the first batch of the first non-empty partition is
returned whole however large (KIP-74), so a consumer always makes progress.
Long poll: without ``min_bytes`` of data the request waits up to
``max_wait_ms`` for appends to its partitions. Fetch sessions (KIP-227) are
not kept: every response has session_id 0, which tells clients to send full
fetch requests; a request naming a session gets FETCH_SESSION_ID_NOT_FOUND.
Topic ids are used from v13, with UNKNOWN_TOPIC_ID for unknown ones.
"""

from __future__ import annotations

import time

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes

API = APIS_BY_KEY[1]
R = struct_classes(API.response)
READ_COMMITTED = 1


def leader_epoch_error(requested: int, current: int) -> ErrorCode:
    if requested == -1 or requested == current:
        return ErrorCode.NONE
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


def register(dispatcher, broker) -> None:
    def build(request, api_version):
        image = broker.image
        by_id = api_version >= 13
        remaining_bytes = request.max_bytes
        total_bytes = 0
        has_error = False
        keys = []
        responses = []
        slices = []
        for fetch_topic in request.topics:
            topic = image.topic_by_id(fetch_topic.topic_id) if by_id else image.topics.get(fetch_topic.topic)
            partitions = []
            for fp in fetch_topic.partitions:
                pd = R.PartitionData(
                    partition_index=fp.partition, error_code=ErrorCode.NONE, high_watermark=-1, records=b""
                )
                partitions.append(pd)
                if topic is None:
                    pd.error_code = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    has_error = True
                    continue
                partition = topic.partitions.get(fp.partition)
                plog = broker.partition_log(topic.name, fp.partition) if partition is not None else None
                if plog is None:
                    pd.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    has_error = True
                    continue
                keys.append((topic.name, fp.partition))
                pd.high_watermark = plog.high_watermark
                pd.last_stable_offset = plog.high_watermark
                pd.log_start_offset = plog.log_start_offset
                pd.aborted_transactions = [] if request.isolation_level == READ_COMMITTED else None
                epoch_error = leader_epoch_error(fp.current_leader_epoch, partition.leader_epoch)
                if epoch_error:
                    pd.error_code = epoch_error
                    has_error = True
                    continue
                offset = fp.fetch_offset
                if offset < plog.log_start_offset or offset > plog.log_end_offset:
                    pd.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                    has_error = True
                    continue
                limit = min(fp.partition_max_bytes, remaining_bytes)
                if limit <= 0 and total_bytes:
                    continue
                file_slice = plog.read_slice(offset, max(limit, 0), oversized_first_batch=total_bytes == 0)
                if file_slice is not None:
                    # Sent from the file by the connection (sendfile when it can).
                    pd.records = file_slice
                    slices.append(file_slice)
                    total_bytes += len(file_slice)
                    remaining_bytes -= len(file_slice)
            responses.append(
                R.FetchableTopicResponse(
                    topic=fetch_topic.topic if not by_id else "",
                    topic_id=fetch_topic.topic_id if by_id else (topic.topic_id if topic else fetch_topic.topic_id),
                    partitions=partitions,
                )
            )
        response = R.FetchResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0, responses=responses)
        return response, total_bytes, has_error, keys, slices

    async def handle(ctx, request):
        if request.session_id != 0:
            return R.FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=[])
        deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
        while True:
            response, total_bytes, has_error, keys, slices = build(request, ctx.api_version)
            remaining_s = deadline - time.monotonic()
            if total_bytes >= request.min_bytes or has_error or remaining_s <= 0 or not keys or broker.stopping:
                return response
            for file_slice in slices:  # not enough yet: this answer is dropped
                file_slice.close()
            if not await broker.partition_watch.wait_any(keys, remaining_s):
                return build(request, ctx.api_version)[0]

    dispatcher.register(API.key, 4, 17, handle)
