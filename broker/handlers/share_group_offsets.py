"""DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets
(keys 90-92), version 0 (Kafka 4.1): the start offsets of a share group's
share-partitions, read, set and deleted by the group's coordinator, which asks
the share coordinators (broker/coordinators/share_groups/offsets.py).

- Describe: per partition the share-partition start offset (SPSO) and the
  leader epoch that last wrote its state; -1 for both when the partition has no
  state yet. Topics null: every partition of the topics the members subscribe
  to and every other partition the group has state of. DESCRIBE on the group
  (else GROUP_AUTHORIZATION_FAILED) and on each topic (its partitions answer
  TOPIC_AUTHORIZATION_FAILED; with topics null it is left out).
- Alter: the state of each partition set anew at the given start offset, with
  nothing in flight, at a higher state epoch, so that the partition's leader
  builds its share-partition again from it. READ on the group and each topic.
- Delete: the state of every partition of each topic deleted, so that the next
  member starts where ``share.auto.offset.reset`` says. DELETE on the group,
  READ on each topic.

A group that is not a share group answers GROUP_ID_NOT_FOUND (also Alter:
it does not make one); Alter and Delete answer NON_EMPTY_GROUP while it has
members, both as the top-level error and on every partition or topic. Unknown
topics and partitions answer UNKNOWN_TOPIC_OR_PARTITION; NOT_COORDINATOR and
COORDINATOR_LOAD_IN_PROGRESS come from the group service. Served only while
``share.version`` >= 1 is finalized (UNSUPPORTED_VERSION before).
"""

from __future__ import annotations

import uuid

from broker.coordinators.share_groups import offsets as share_offsets
from broker.coordinators.share_groups.service import share_groups_enabled
from broker.security.authorization import GROUP, MESSAGES, TOPIC, allowed
from controller.authorizer import AclOperation
from controller.topic_commands import INTERNAL_TOPICS
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

DESCRIBE = APIS_BY_NAME["DescribeShareGroupOffsets"]
ALTER = APIS_BY_NAME["AlterShareGroupOffsets"]
DELETE = APIS_BY_NAME["DeleteShareGroupOffsets"]
DR = struct_classes(DESCRIBE.response)
AR = struct_classes(ALTER.response)
XR = struct_classes(DELETE.response)
NO_TOPIC_ID = uuid.UUID(int=0)
DISABLED = "Share groups are not enabled (share.version is not finalized)."


def register(dispatcher, broker) -> None:
    service = broker.shares

    def group_refusal(ctx, group_id: str, operation: int, empty: bool) -> tuple[ErrorCode, str | None] | None:
        """The group-level error of a request about ``group_id``, or None."""
        if not share_groups_enabled(broker):
            return ErrorCode.UNSUPPORTED_VERSION, DISABLED
        if not allowed(broker, ctx, operation, GROUP, group_id):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, MESSAGES[ErrorCode.GROUP_AUTHORIZATION_FAILED]
        groups = broker.groups
        wrong = groups.not_coordinator(group_id)
        if wrong is not None:
            return wrong, None
        group = groups.share_groups.groups.get(group_id)
        if group is None:
            known = group_id in groups.coordinator.groups or groups.is_consumer_group(group_id)
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group." if known else f"Group {group_id} not found."
        if empty and group.members:
            return ErrorCode.NON_EMPTY_GROUP, f"Share group {group_id} is not empty."
        return None

    def partition_error(ctx, name: str, partition: int, operation: int) -> ErrorCode | None:
        if not allowed(broker, ctx, operation, TOPIC, name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        topic = broker.image.topics.get(name)
        if topic is None or partition not in topic.partitions or name in INTERNAL_TOPICS:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return None

    def topic_id(name: str) -> uuid.UUID:
        topic = broker.image.topics.get(name)
        return topic.topic_id if topic is not None else NO_TOPIC_ID

    # ----------------------------------------------------------------- describe

    async def describe_group(ctx, request_group):
        group_id = request_group.group_id
        refused = group_refusal(ctx, group_id, AclOperation.DESCRIBE, empty=False)
        if refused is not None:
            return DR.DescribeShareGroupOffsetsResponseGroup(group_id=group_id, topics=[], error_code=refused[0], error_message=refused[1])
        image = broker.image
        asked: dict[str, list[int]] = {}
        errors: dict[tuple[str, int], ErrorCode] = {}
        if request_group.topics is None:
            subscribed = broker.groups.share_groups.groups[group_id].subscribed_topic_names()
            for name, topic in sorted(image.topics.items()):
                if name not in INTERNAL_TOPICS and allowed(broker, ctx, AclOperation.DESCRIBE, TOPIC, name):
                    asked[name] = sorted(topic.partitions)
        else:
            subscribed = None
            for t in request_group.topics:
                partitions = asked.setdefault(t.topic_name, [])
                for p in t.partitions:
                    if p not in partitions:
                        partitions.append(p)
                    error = partition_error(ctx, t.topic_name, p, AclOperation.DESCRIBE)
                    if error is not None:
                        errors[(t.topic_name, p)] = error
        keys = {(name, p): (group_id, topic_id(name), p) for name, ps in asked.items() for p in ps if (name, p) not in errors}
        summaries = await share_offsets.summaries(service, keys.values())
        topics = []
        for name, ps in asked.items():
            partitions = []
            for p in ps:
                error = errors.get((name, p))
                summary = summaries[keys[(name, p)]] if error is None else None
                if subscribed is not None and name not in subscribed and not summary.has_state:
                    continue  # topics null: only partitions the group reads or has state of
                if summary is not None and (summary.has_state or summary.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    start, epoch, error = (summary.start_offset, summary.leader_epoch, ErrorCode.NONE) if summary.has_state else (-1, -1, ErrorCode.NONE)
                else:
                    start, epoch, error = -1, -1, error if error is not None else summary.error
                partitions.append(DR.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=p, start_offset=start, leader_epoch=epoch, error_code=error, error_message=None))
            if partitions or subscribed is None:
                topics.append(DR.DescribeShareGroupOffsetsResponseTopic(topic_name=name, topic_id=topic_id(name), partitions=partitions))
        return DR.DescribeShareGroupOffsetsResponseGroup(group_id=group_id, topics=topics, error_code=ErrorCode.NONE, error_message=None)

    async def describe(ctx, request):
        return DR.DescribeShareGroupOffsetsResponse(
            throttle_time_ms=0, groups=[await describe_group(ctx, g) for g in request.groups])

    # ----------------------------------------------------------------- alter

    async def alter(ctx, request):
        group_id = request.group_id
        refused = group_refusal(ctx, group_id, AclOperation.READ, empty=True)
        errors: dict[tuple[str, int], ErrorCode] = {}
        offsets: dict[tuple[str, int], int] = {}
        for t in request.topics:
            for p in t.partitions:
                tp = (t.topic_name, p.partition_index)
                error = refused[0] if refused is not None else partition_error(ctx, t.topic_name, p.partition_index, AclOperation.READ)
                if error is None and p.start_offset < 0:
                    error = ErrorCode.INVALID_REQUEST
                if error is not None:
                    errors[tp] = error
                else:
                    offsets[tp] = p.start_offset
        if offsets:
            keys = {tp: (group_id, topic_id(tp[0]), tp[1]) for tp in offsets}
            results = await share_offsets.reset(service, {keys[tp]: offset for tp, offset in offsets.items()})
            errors.update({tp: results[keys[tp]] for tp in offsets})
        return AR.AlterShareGroupOffsetsResponse(
            throttle_time_ms=0,
            error_code=refused[0] if refused is not None else ErrorCode.NONE,
            error_message=refused[1] if refused is not None else None,
            responses=[
                AR.AlterShareGroupOffsetsResponseTopic(topic_name=t.topic_name, topic_id=topic_id(t.topic_name), partitions=[
                    AR.AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index, error_code=errors[(t.topic_name, p.partition_index)], error_message=None)
                    for p in t.partitions])
                for t in request.topics
            ],
        )

    # ----------------------------------------------------------------- delete

    async def delete(ctx, request):
        group_id = request.group_id
        refused = group_refusal(ctx, group_id, AclOperation.DELETE, empty=True)
        errors: dict[str, ErrorCode] = {}
        keys: dict[str, list] = {}
        for t in request.topics:
            name = t.topic_name
            if refused is not None:
                errors[name] = refused[0]
            elif not allowed(broker, ctx, AclOperation.READ, TOPIC, name):
                errors[name] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif name not in broker.image.topics or name in INTERNAL_TOPICS:
                errors[name] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                topic = broker.image.topics[name]
                keys[name] = [(group_id, topic.topic_id, p) for p in sorted(topic.partitions)]
        results = await share_offsets.delete(service, [k for ks in keys.values() for k in ks])
        for name, topic_keys in keys.items():
            errors[name] = next((results[k] for k in topic_keys if results[k] != ErrorCode.NONE), ErrorCode.NONE)
        return XR.DeleteShareGroupOffsetsResponse(
            throttle_time_ms=0,
            error_code=refused[0] if refused is not None else ErrorCode.NONE,
            error_message=refused[1] if refused is not None else None,
            responses=[
                XR.DeleteShareGroupOffsetsResponseTopic(
                    topic_name=t.topic_name, topic_id=topic_id(t.topic_name), error_code=errors[t.topic_name], error_message=None)
                for t in request.topics
            ],
        )

    dispatcher.register(DESCRIBE.key, 0, 0, describe)
    dispatcher.register(ALTER.key, 0, 0, alter)
    dispatcher.register(DELETE.key, 0, 0, delete)
