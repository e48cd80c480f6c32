"""ListOffsets (key 2), versions 1-10 (Kafka 4 dropped v0's offset lists).

Timestamps: -2 earliest (log start offset), -1 latest (high watermark; the
last stable offset for ``isolation_level`` read_committed, v2+),
-3 (v7+) the record with the largest timestamp, -4 (v8+) earliest local (the
log start: there is no tiered storage), -5 (v9+) earliest pending upload
(offset -1: nothing is tiered). Any other value finds the first *record*
whose timestamp is >= it, or offset -1 when there is none.

Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER on a follower and
on a broker that does not host the partition; FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH for a ``current_leader_epoch`` that is not the one this
broker knows), as in Kafka: a follower's log start and end are not the
partition's. A ``replica_id`` of -2 (a debugging tool) may read any replica.
A consumer (``replica_id`` -1) sees offsets up to the high watermark (the last
stable offset for read_committed) and gets OFFSET_NOT_AVAILABLE from a new
leader whose high watermark has not reached the start of its epoch yet
(KIP-207); a replica or a debugging tool is answered with the log end offset.

With an authorizer, a topic the caller may not DESCRIBE has every partition
answered TOPIC_AUTHORIZATION_FAILED (Kafka's check, before existence).
"""

from __future__ import annotations

from broker.handlers.fetch import READ_COMMITTED
from broker.security.authorization import TOPIC, denied
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["ListOffsets"]
R = struct_classes(API.response)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
EARLIEST_PENDING_UPLOAD = -5
# The oldest version that may ask for each special timestamp.
_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, EARLIEST_PENDING_UPLOAD: 9}
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2


def register(dispatcher, broker) -> None:
    def handle(ctx, request):
        topics = []
        refused = denied(broker, ctx, AclOperation.DESCRIBE, TOPIC, (rt.name for rt in request.topics))
        from_consumer = request.replica_id == CONSUMER_REPLICA_ID
        for rt in request.topics:
            partitions = []
            for rp in rt.partitions:
                resp = R.ListOffsetsPartitionResponse(partition_index=rp.partition_index, error_code=ErrorCode.NONE)
                partitions.append(resp)
                if refused and rt.name in refused:
                    resp.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                local = broker.replicas.local_replica(
                    rt.name,
                    rp.partition_index,
                    current_leader_epoch=rp.current_leader_epoch,
                    require_leader=request.replica_id != DEBUGGING_REPLICA_ID,
                )
                if local.error:
                    resp.error_code = local.error
                    continue
                plog, leader_epoch = local.plog, local.partition.leader_epoch
                ts = rp.timestamp
                if ts < 0 and (ts < EARLIEST_PENDING_UPLOAD or ctx.api_version < _MIN_VERSION.get(ts, 0)):
                    resp.error_code = ErrorCode.UNSUPPORTED_VERSION if ts >= EARLIEST_PENDING_UPLOAD else ErrorCode.INVALID_REQUEST
                    continue
                # What a consumer may see ends at the high watermark (the last stable
                # offset for read_committed); a replica or a debugging tool sees the log end.
                if not from_consumer:
                    fetchable = plog.log_end_offset
                elif request.isolation_level == READ_COMMITTED:
                    fetchable = plog.last_stable_offset
                else:
                    fetchable = plog.high_watermark
                # A new leader whose high watermark has not yet reached the start of
                # its epoch cannot tell a consumer where the log ends (KIP-207).
                not_available = (
                    from_consumer
                    and local.leader is not None
                    and local.leader.leader_epoch_start_offset > plog.high_watermark
                )
                if ts == LATEST:
                    if not_available:
                        resp.error_code = ErrorCode.OFFSET_NOT_AVAILABLE
                        continue
                    resp.offset, resp.timestamp = fetchable, -1
                elif ts in (EARLIEST, EARLIEST_LOCAL):
                    resp.offset, resp.timestamp = plog.log_start_offset, -1
                elif ts == EARLIEST_PENDING_UPLOAD:
                    resp.offset, resp.timestamp = -1, -1
                elif ts == MAX_TIMESTAMP:
                    found = plog.max_timestamp_offset()
                    resp.offset, resp.timestamp = found if found else (-1, -1)
                else:
                    if not_available:
                        resp.error_code = ErrorCode.OFFSET_NOT_AVAILABLE
                        continue
                    found = plog.offset_for_timestamp(ts)
                    # Kafka answers a consumer only with a record it may fetch.
                    if found and found[0] >= fetchable:
                        found = None
                    resp.offset, resp.timestamp = found if found else (-1, -1)
                resp.leader_epoch = leader_epoch if resp.offset >= 0 else -1
            topics.append(R.ListOffsetsTopicResponse(name=rt.name, partitions=partitions))
        return R.ListOffsetsResponse(throttle_time_ms=0, topics=topics)

    dispatcher.register(API.key, 1, 10, handle)
