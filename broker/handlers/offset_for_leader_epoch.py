"""OffsetForLeaderEpoch (key 23), versions 0-4.

For each partition, the end offset of the requested leader epoch: the start
offset of the first later epoch that wrote to the log, or the log end offset
when the requested epoch is the latest; with the largest epoch at or below the
requested one (v1+). The answer follows Kafka's LeaderEpochFileCache.endOffsetFor:
epoch -1 and an epoch above every known one answer epoch -1 / offset -1 (no
error); an epoch below every known one answers itself with the start offset of
the first known epoch. Like a Kafka leader, the partition's current leader
epoch counts as known from the moment this broker leads it, starting at the
log end offset, even before a batch of that epoch is written; and epochs
wholly below the log start offset count as starting at it.

``current_leader_epoch`` (v2+): -1 skips the check; older than the partition's
leader epoch answers FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH (the
same check as Fetch and ListOffsets). Unknown topic or partition:
UNKNOWN_TOPIC_OR_PARTITION; a partition this broker does not host, or only
follows: NOT_LEADER_OR_FOLLOWER. ``replica_id`` (v3+; -1 for consumers, -2 for
debugging tools, a broker id for followers) is not used: every request is
answered from the leader's log only, as Kafka does (a follower's epochs may
still hold a suffix the leader truncates away).

With an authorizer: CLUSTER_ACTION on the cluster (followers) allows every
topic; otherwise a topic the caller may not DESCRIBE answers
TOPIC_AUTHORIZATION_FAILED for each of its partitions.
"""

from __future__ import annotations

from broker.security.authorization import TOPIC, cluster_allowed, denied, split_entries
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["OffsetForLeaderEpoch"]
R = struct_classes(API.response)

def authorize(broker, ctx, request):
    """The pre-authorization hook (broker/net/dispatch.py)."""
    if broker.authorizer is None or cluster_allowed(broker, ctx, AclOperation.CLUSTER_ACTION):
        return None
    refused = denied(broker, ctx, AclOperation.DESCRIBE, TOPIC, (t.topic for t in request.topics))
    if not refused:
        return None

    def refusal(t):
        if t.topic not in refused:
            return None
        return R.OffsetForLeaderTopicResult(
            topic=t.topic,
            partitions=[
                R.EpochEndOffset(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, partition=p.partition, leader_epoch=-1, end_offset=-1)
                for p in t.partitions
            ],
        )

    return split_entries(request, "topics", refusal, "topics", lambda: R.OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=[]))


def register(dispatcher, broker) -> None:
    def handle(ctx, request):
        topics = []
        for rt in request.topics:
            partitions = []
            for rp in rt.partitions:
                answer = R.EpochEndOffset(error_code=ErrorCode.NONE, partition=rp.partition, leader_epoch=-1, end_offset=-1)
                partitions.append(answer)
                current = rp.current_leader_epoch if ctx.api_version >= 2 else -1
                local = broker.replicas.local_replica(rt.topic, rp.partition, current_leader_epoch=current)
                if local.error:
                    answer.error_code = local.error
                    continue
                answer.leader_epoch, answer.end_offset = local.plog.end_offset_for_epoch(rp.leader_epoch, local.partition.leader_epoch)
            topics.append(R.OffsetForLeaderTopicResult(topic=rt.topic, partitions=partitions))
        return R.OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)

    dispatcher.register(API.key, 0, 4, handle, authorize=lambda ctx, request: authorize(broker, ctx, request))
