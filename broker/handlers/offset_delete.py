"""OffsetDelete (key 47), version 0.

Deletes committed offsets of a group. GROUP_ID_NOT_FOUND for a group the
coordinator does not have. While a ``consumer`` group has members, partitions
of topics it subscribes to answer GROUP_SUBSCRIBED_TO_TOPIC and the others are
deleted; a non-empty group of another protocol type answers NON_EMPTY_GROUP.
Partitions of unknown topics answer UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes

API = APIS_BY_KEY[47]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        groups = broker.groups
        wrong = groups.not_coordinator(request.group_id)
        if wrong is not None:
            return R.OffsetDeleteResponse(error_code=wrong, throttle_time_ms=0, topics=[])
        errors: dict[tuple[str, int], ErrorCode] = {}
        known = []
        for topic in request.topics:
            image = broker.image.topics.get(topic.name)
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                if image is None or p.partition_index not in image.partitions:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    known.append(tp)
        error, results = groups.coordinator.delete_offsets(request.group_id, known)
        if error == ErrorCode.NONE:
            error = await groups.replicated(request.group_id)
        if error != ErrorCode.NONE:
            return R.OffsetDeleteResponse(error_code=error, throttle_time_ms=0, topics=[])
        errors.update(results)
        return R.OffsetDeleteResponse(
            error_code=ErrorCode.NONE,
            throttle_time_ms=0,
            topics=[
                R.OffsetDeleteResponseTopic(
                    name=topic.name,
                    partitions=[
                        R.OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=errors[(topic.name, p.partition_index)])
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ],
        )

    dispatcher.register(API.key, 0, 0, handle)
