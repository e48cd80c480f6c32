"""OffsetFetch (key 9), versions 0-9.

Committed offsets of a group (v0-7) or of several groups (v8+). A null topic
list (v2+) asks for every committed offset of the group. A partition without
a committed offset answers offset -1, leader epoch -1 and empty metadata, with
no error, as does an unknown group. Offsets of a transaction that has not
ended (TxnOffsetCommit) are never shown: the last committed offset is. With
``require_stable`` (v7+, KIP-447; what read_committed consumers send) a
partition with such pending offsets answers UNSTABLE_OFFSET_COMMIT and offset
-1 instead, and the client retries; as in Kafka that is a partition error only
(the group's or top-level error stays NONE), and asking for every offset lists
only partitions that have a committed one. v0 reads the offsets Kafka stores in
``__consumer_offsets``, like v1 (its ZooKeeper store is gone).

With an authorizer (as Kafka): a group the caller may not DESCRIBE is answered
GROUP_AUTHORIZATION_FAILED (the group's error, v0-1 every partition's); the
partitions of a topic it may not DESCRIBE answer TOPIC_AUTHORIZATION_FAILED,
and asking for every offset leaves such topics out.

v9 carries the member id and epoch of a KIP-848 consumer group's member:
checked as Kafka does (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH,
FENCED_MEMBER_EPOCH, the group's error), unless both are absent (an admin
client: null member id, epoch -1).

Leadership: the group's coordinator answers (NOT_COORDINATOR elsewhere); no
replica of the partitions named is read.
"""

from __future__ import annotations

from broker.security.authorization import GROUP, TOPIC, allowed, denied
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["OffsetFetch"]
R = struct_classes(API.response)


def _hide(fetched, refused: set[str], every: bool):
    """``fetched`` without what the caller may not see: every offset asked for
    leaves out refused topics, named ones answer TOPIC_AUTHORIZATION_FAILED."""
    if not refused:
        return fetched
    if every:
        return [(topic, partitions) for topic, partitions in fetched if topic not in refused]
    return [
        (topic, [(p, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p, _, _ in partitions] if topic in refused else partitions)
        for topic, partitions in fetched
    ]


def _fetch(coordinator, group_id: str, topics, require_stable: bool = False):
    """[(topic, [(partition, offset or None, error)])] in request order (or sorted,
    for all); ``require_stable``: a partition with a pending transactional commit
    answers UNSTABLE_OFFSET_COMMIT without an offset."""
    if topics is None:
        found = coordinator.fetch_offsets(group_id, None)
    else:
        found = coordinator.fetch_offsets(group_id, [(t.name, p) for t in topics for p in t.partition_indexes])
    by_topic: dict[str, list] = {}
    for topic, partition, offset in found:
        if require_stable and coordinator.has_pending_offsets(group_id, (topic, partition)):
            by_topic.setdefault(topic, []).append((partition, None, ErrorCode.UNSTABLE_OFFSET_COMMIT))
        else:
            by_topic.setdefault(topic, []).append((partition, offset, ErrorCode.NONE))
    return list(by_topic.items())


def _fields(offset):
    if offset is None:
        return {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": ""}
    return {"committed_offset": offset.offset, "committed_leader_epoch": offset.leader_epoch, "metadata": offset.metadata}


def _topics(topic_cls, partition_cls, fetched) -> list:
    """The response's topics (v0-7 and v8+ name their classes differently)."""
    return [
        topic_cls(
            name=topic,
            partitions=[partition_cls(partition_index=p, error_code=e, **_fields(o)) for p, o, e in partitions],
        )
        for topic, partitions in fetched
    ]


def register(dispatcher, broker) -> None:
    def visible(ctx, fetched, every: bool):
        if broker.authorizer is None:
            return fetched
        return _hide(fetched, denied(broker, ctx, AclOperation.DESCRIBE, TOPIC, [t for t, _ in fetched]), every)

    def handle(ctx, request):
        coordinator = broker.groups.coordinator
        if ctx.api_version >= 8:

            def answer(group):
                if not allowed(broker, ctx, AclOperation.DESCRIBE, GROUP, group.group_id):
                    return R.OffsetFetchResponseGroup(group_id=group.group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, topics=[])
                wrong = broker.groups.not_coordinator(group.group_id)
                if wrong is None and ctx.api_version >= 9 and broker.groups.is_consumer_group(group.group_id):
                    wrong = broker.groups.consumer_member_error(group.group_id, group.member_id, group.member_epoch, None)
                if wrong is not None:
                    return R.OffsetFetchResponseGroup(group_id=group.group_id, error_code=wrong, topics=[])
                fetched = visible(ctx, _fetch(coordinator, group.group_id, group.topics, request.require_stable), group.topics is None)
                return R.OffsetFetchResponseGroup(
                    group_id=group.group_id,
                    error_code=ErrorCode.NONE,
                    topics=_topics(R.OffsetFetchResponseTopics, R.OffsetFetchResponsePartitions, fetched),
                )

            return R.OffsetFetchResponse(throttle_time_ms=0, groups=[answer(group) for group in request.groups])
        topics = request.topics if request.topics is not None or ctx.api_version >= 2 else []
        wrong = broker.groups.not_coordinator(request.group_id)
        if not allowed(broker, ctx, AclOperation.DESCRIBE, GROUP, request.group_id):
            wrong = ErrorCode.GROUP_AUTHORIZATION_FAILED
        if wrong is not None:
            if ctx.api_version >= 2:
                return R.OffsetFetchResponse(throttle_time_ms=0, error_code=wrong, topics=[])
            # v0-1 have no top-level error: every partition asked for carries it.
            asked = [(t.name, [(p, None, wrong) for p in t.partition_indexes]) for t in topics]
            return R.OffsetFetchResponse(
                throttle_time_ms=0, topics=_topics(R.OffsetFetchResponseTopic, R.OffsetFetchResponsePartition, asked)
            )
        fetched = visible(ctx, _fetch(coordinator, request.group_id, topics, ctx.api_version >= 7 and request.require_stable), topics is None)
        return R.OffsetFetchResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NONE,
            topics=_topics(R.OffsetFetchResponseTopic, R.OffsetFetchResponsePartition, fetched),
        )

    dispatcher.register(API.key, 0, 9, handle)
