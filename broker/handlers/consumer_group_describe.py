"""ConsumerGroupDescribe (key 69), version 0: KIP-848 consumer groups.

Per group: its state (Empty, Assigning, Reconciling, Stable), group and
assignment epochs, the assignor it uses, and each member's metadata, current
assignment and target assignment, topics named by id and by name (from the
metadata image). A group id that is not a consumer group (unknown, or a
classic group) answers GROUP_ID_NOT_FOUND, as Kafka does; admin clients then
describe it with DescribeGroups. ``authorized_operations`` is INT32_MIN
unless asked for.

Served only while the cluster finalizes ``group.version`` >= 1; below it
every group answers UNSUPPORTED_VERSION, as in Kafka 4.

As Kafka: GROUP_AUTHORIZATION_FAILED without DESCRIBE on the group;
TOPIC_AUTHORIZATION_FAILED (and no members) for a group whose members
subscribe to or are assigned a topic the caller may not DESCRIBE.
NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS from the group service.
"""

from __future__ import annotations

from collections import defaultdict

from broker.coordinators.consumer_groups.model import NO_PARTITIONS
from broker.handlers.consumer_group_heartbeat import DISABLED_MESSAGE
from broker.handlers.describe_groups import GROUP_OPERATIONS
from broker.security.authorization import GROUP, MESSAGES, TOPIC, allowed, denied
from broker.security.authorization import operations as _operations
from broker.security.authorized_operations import AUTHORIZED_OPERATIONS_OMITTED
from controller.authorizer import AclOperation
from controller.features import consumer_protocol_enabled
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["ConsumerGroupDescribe"]
R = struct_classes(API.response)


def _failed(group_id: str, error: ErrorCode, message: str | None, operations: int = AUTHORIZED_OPERATIONS_OMITTED):
    return R.DescribedGroup(
        error_code=error, error_message=message, group_id=group_id, group_state="", group_epoch=-1,
        assignment_epoch=-1, assignor_name="", members=[], authorized_operations=operations,
    )


def register(dispatcher, broker) -> None:
    def topic_name(group, topic_id) -> str:
        name = broker.image.topic_names_by_id.get(topic_id)
        if name is not None:
            return name
        for info in group.subscription_metadata.values():
            if info.topic_id == topic_id:
                return info.name
        return ""

    def assignment(group, partitions):
        by_topic: dict = defaultdict(list)
        for topic_id, partition in partitions:
            by_topic[topic_id].append(partition)
        return R.Assignment(topic_partitions=[
            R.TopicPartitions(topic_id=t, topic_name=topic_name(group, t), partitions=sorted(ps))
            for t, ps in sorted(by_topic.items())
        ])

    def describe(ctx, group_id: str, include_operations: bool):
        if not allowed(broker, ctx, AclOperation.DESCRIBE, GROUP, group_id):
            return _failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, MESSAGES.get(ErrorCode.GROUP_AUTHORIZATION_FAILED))
        operations = _operations(broker, ctx, GROUP, group_id, GROUP_OPERATIONS) if include_operations else AUTHORIZED_OPERATIONS_OMITTED
        groups = broker.groups
        wrong = groups.not_coordinator(group_id)
        if wrong is not None:
            return _failed(group_id, wrong, None, operations)
        group = groups.consumer_groups.groups.get(group_id)
        if group is None:
            message = f"Group {group_id} is not a consumer group." if group_id in groups.coordinator.groups else f"Group {group_id} not found."
            return _failed(group_id, ErrorCode.GROUP_ID_NOT_FOUND, message, operations)
        members = sorted(group.members.values(), key=lambda m: m.member_id)
        if broker.authorizer is not None:
            topics = set()
            for m in members:
                topics.update(m.subscribed_topic_names)
                for topic_id, _ in m.assigned | m.pending_revocation | group.target.get(m.member_id, NO_PARTITIONS):
                    topics.add(topic_name(group, topic_id))
            if denied(broker, ctx, AclOperation.DESCRIBE, TOPIC, topics - {""}):
                return _failed(group_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                               "The described group uses topics that the client is not authorized to describe.", operations)
        return R.DescribedGroup(
            error_code=ErrorCode.NONE,
            error_message=None,
            group_id=group_id,
            group_state=group.state,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=groups.consumer_groups.assignor_of(group),
            members=[
                R.Member(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=list(m.subscribed_topic_names),
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=assignment(group, m.assigned),
                    target_assignment=assignment(group, group.target.get(m.member_id, NO_PARTITIONS)),
                )
                for m in members
            ],
            authorized_operations=operations,
        )

    def handle(ctx, request):
        if not consumer_protocol_enabled(broker.image):
            return R.ConsumerGroupDescribeResponse(
                throttle_time_ms=0,
                groups=[_failed(group_id, ErrorCode.UNSUPPORTED_VERSION, DISABLED_MESSAGE) for group_id in request.group_ids],
            )
        include_operations = request.include_authorized_operations
        return R.ConsumerGroupDescribeResponse(
            throttle_time_ms=0, groups=[describe(ctx, group_id, include_operations) for group_id in request.group_ids]
        )

    dispatcher.register(API.key, 0, 0, handle)
