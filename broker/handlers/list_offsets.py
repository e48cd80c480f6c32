"""ListOffsets (key 2), versions 1-10 (Kafka 4 dropped v0's offset lists).

Timestamps: -2 earliest (log start offset), -1 latest (high watermark; the
last stable offset for ``isolation_level`` read_committed, v2+),
-3 (v7+) the record with the largest timestamp, -4 (v8+) earliest local (the
log start: there is no tiered storage), -5 (v9+) earliest pending upload
(offset -1: nothing is tiered). Any other value finds the first *record*
whose timestamp is >= it, or offset -1 when there is none.

With an authorizer, a topic the caller may not DESCRIBE has every partition
answered TOPIC_AUTHORIZATION_FAILED (Kafka's check, before existence).
"""

from __future__ import annotations

from broker.authorization import TOPIC, denied
from broker.handlers.fetch import READ_COMMITTED, leader_epoch_error
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes

API = APIS_BY_KEY[2]
R = struct_classes(API.response)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
EARLIEST_PENDING_UPLOAD = -5
# The oldest version that may ask for each special timestamp.
_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, EARLIEST_PENDING_UPLOAD: 9}


def register(dispatcher, broker) -> None:
    def handle(ctx, request):
        image = broker.image
        topics = []
        refused = denied(broker, ctx, AclOperation.DESCRIBE, TOPIC, (rt.name for rt in request.topics))
        for rt in request.topics:
            topic = image.topics.get(rt.name)
            partitions = []
            for rp in rt.partitions:
                resp = R.ListOffsetsPartitionResponse(partition_index=rp.partition_index, error_code=ErrorCode.NONE)
                partitions.append(resp)
                if refused and rt.name in refused:
                    resp.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                partition = topic.partitions.get(rp.partition_index) if topic else None
                plog = broker.partition_log(rt.name, rp.partition_index) if partition else None
                if plog is None:
                    resp.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                epoch_error = leader_epoch_error(rp.current_leader_epoch, partition.leader_epoch)
                if epoch_error:
                    resp.error_code = epoch_error
                    continue
                ts = rp.timestamp
                if ts < 0 and (ts < EARLIEST_PENDING_UPLOAD or ctx.api_version < _MIN_VERSION.get(ts, 0)):
                    resp.error_code = ErrorCode.UNSUPPORTED_VERSION if ts >= EARLIEST_PENDING_UPLOAD else ErrorCode.INVALID_REQUEST
                    continue
                leader_epoch = partition.leader_epoch
                if ts == LATEST:
                    latest = plog.last_stable_offset if request.isolation_level == READ_COMMITTED else plog.high_watermark
                    resp.offset, resp.timestamp = latest, -1
                elif ts in (EARLIEST, EARLIEST_LOCAL):
                    resp.offset, resp.timestamp = plog.log_start_offset, -1
                elif ts == EARLIEST_PENDING_UPLOAD:
                    resp.offset, resp.timestamp = -1, -1
                elif ts == MAX_TIMESTAMP:
                    found = plog.max_timestamp_offset()
                    resp.offset, resp.timestamp = found if found else (-1, -1)
                else:
                    found = plog.offset_for_timestamp(ts)
                    resp.offset, resp.timestamp = found if found else (-1, -1)
                resp.leader_epoch = leader_epoch if resp.offset >= 0 else -1
            topics.append(R.ListOffsetsTopicResponse(name=rt.name, partitions=partitions))
        return R.ListOffsetsResponse(throttle_time_ms=0, topics=topics)

    dispatcher.register(API.key, 1, 10, handle)
