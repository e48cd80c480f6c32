"""OffsetFetch (key 9), versions 0-9.

Committed offsets of a group (v0-7) or of several groups (v8+). A null topic
list (v2+) asks for every committed offset of the group. A partition without
a committed offset answers offset -1, leader epoch -1 and empty metadata, with
no error, as does an unknown group. There are no transactional offsets yet,
so ``require_stable`` (v7+) never finds unstable ones. v0 reads the offsets
Kafka stores in ``__consumer_offsets``, like v1 (its ZooKeeper store is gone).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes

API = APIS_BY_KEY[9]
R = struct_classes(API.response)


def _fetch(coordinator, group_id: str, topics):
    """[(topic, [(partition, offset or None)])] in request order (or sorted, for all)."""
    if topics is None:
        found = coordinator.fetch_offsets(group_id, None)
    else:
        found = coordinator.fetch_offsets(group_id, [(t.name, p) for t in topics for p in t.partition_indexes])
    by_topic: dict[str, list] = {}
    for topic, partition, offset in found:
        by_topic.setdefault(topic, []).append((partition, offset))
    return list(by_topic.items())


def _fields(offset):
    if offset is None:
        return {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": ""}
    return {"committed_offset": offset.offset, "committed_leader_epoch": offset.leader_epoch, "metadata": offset.metadata}


def _topics(topic_cls, partition_cls, fetched, error: ErrorCode = ErrorCode.NONE) -> list:
    """The response's topics (v0-7 and v8+ name their classes differently)."""
    return [
        topic_cls(
            name=topic,
            partitions=[partition_cls(partition_index=p, error_code=error, **_fields(o)) for p, o in partitions],
        )
        for topic, partitions in fetched
    ]


def register(dispatcher, broker) -> None:
    def handle(ctx, request):
        coordinator = broker.groups.coordinator
        if ctx.api_version >= 8:

            def answer(group):
                wrong = broker.groups.not_coordinator(group.group_id)
                if wrong is not None:
                    return R.OffsetFetchResponseGroup(group_id=group.group_id, error_code=wrong, topics=[])
                fetched = _fetch(coordinator, group.group_id, group.topics)
                return R.OffsetFetchResponseGroup(
                    group_id=group.group_id,
                    error_code=ErrorCode.NONE,
                    topics=_topics(R.OffsetFetchResponseTopics, R.OffsetFetchResponsePartitions, fetched),
                )

            return R.OffsetFetchResponse(throttle_time_ms=0, groups=[answer(group) for group in request.groups])
        topics = request.topics if request.topics is not None or ctx.api_version >= 2 else []
        wrong = broker.groups.not_coordinator(request.group_id)
        if wrong is not None:
            if ctx.api_version >= 2:
                return R.OffsetFetchResponse(throttle_time_ms=0, error_code=wrong, topics=[])
            # v0-1 have no top-level error: every partition asked for carries it.
            asked = [(t.name, [(p, None) for p in t.partition_indexes]) for t in topics]
            return R.OffsetFetchResponse(
                throttle_time_ms=0, topics=_topics(R.OffsetFetchResponseTopic, R.OffsetFetchResponsePartition, asked, wrong)
            )
        fetched = _fetch(coordinator, request.group_id, topics)
        return R.OffsetFetchResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NONE,
            topics=_topics(R.OffsetFetchResponseTopic, R.OffsetFetchResponsePartition, fetched),
        )

    dispatcher.register(API.key, 0, 9, handle)
