"""OffsetDelete (key 47), version 0.

Deletes committed offsets of a group. GROUP_ID_NOT_FOUND for a group the
coordinator does not have. While a ``consumer`` group has members, partitions
of topics it subscribes to answer GROUP_SUBSCRIBED_TO_TOPIC and the others are
deleted; a non-empty group of another protocol type answers NON_EMPTY_GROUP.
A KIP-848 consumer group answers GROUP_SUBSCRIBED_TO_TOPIC for the topics its
members subscribe to (by name or regular expression), whatever its state.
Partitions of unknown topics answer UNKNOWN_TOPIC_OR_PARTITION.

With an authorizer (Kafka's order): DELETE on the group, else the request
answers GROUP_AUTHORIZATION_FAILED; then READ on each topic, else its
partitions answer TOPIC_AUTHORIZATION_FAILED and are not deleted.

Leadership: the group's coordinator answers (NOT_COORDINATOR elsewhere); no
replica of the partitions named is read or changed.
"""

from __future__ import annotations

from broker.security.authorization import (
    GROUP,
    TOPIC,
    Partial,
    allowed,
    denied,
    refuse_whole,
    split_entries,
    with_fields,
)
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["OffsetDelete"]
R = struct_classes(API.response)


def authorize(broker, ctx, request):
    """The pre-authorization hook (broker/net/dispatch.py)."""
    if broker.authorizer is None:
        return None
    if not allowed(broker, ctx, AclOperation.DELETE, GROUP, request.group_id):
        return refuse_whole(
            lambda: R.OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[])
        )
    refused = denied(broker, ctx, AclOperation.READ, TOPIC, (t.name for t in request.topics))
    if not refused:
        return None

    def refusal(t):
        if t.name not in refused:
            return None
        return R.OffsetDeleteResponseTopic(
            name=t.name,
            partitions=[
                R.OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                for p in t.partitions
            ],
        )

    partial = split_entries(
        request, "topics", refusal, "topics",
        lambda: R.OffsetDeleteResponse(error_code=ErrorCode.NONE, throttle_time_ms=0, topics=[]),
    )

    def answer(response):
        # A group-level error (NOT_COORDINATOR, ...) is the whole answer, as Kafka gives it.
        return response if response.error_code != ErrorCode.NONE else partial.answer(response)

    # Even with every topic refused the coordinator is asked (with none), so that a
    # client at the wrong broker still hears NOT_COORDINATOR.
    return Partial(partial.request if partial.request is not None else with_fields(request, topics=[]), answer)


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
        error, results = groups.delete_offsets(request.group_id, known)
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

    dispatcher.register(API.key, 0, 0, handle, authorize=lambda ctx, request: authorize(broker, ctx, request))
