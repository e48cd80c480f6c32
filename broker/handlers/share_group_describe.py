"""ShareGroupDescribe (key 77), version 1: KIP-932 share groups.

Per group: its state (Empty, Stable), group and assignment epochs, the
assignor (``simple``), and each member's metadata and assignment, topics named
by id and by name. An id that is not a share group answers GROUP_ID_NOT_FOUND,
as Kafka does. Served, like ShareGroupHeartbeat, only once ``share.version``
>= 1 is finalized (UNSUPPORTED_VERSION before). GROUP_AUTHORIZATION_FAILED
without DESCRIBE on the group; NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
from the group service.
"""

from __future__ import annotations

from collections import defaultdict

from broker.coordinators.share_groups.service import share_groups_enabled
from broker.handlers.describe_groups import GROUP_OPERATIONS
from broker.security.authorization import GROUP, MESSAGES, allowed
from broker.security.authorization import operations as _operations
from broker.security.authorized_operations import AUTHORIZED_OPERATIONS_OMITTED
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["ShareGroupDescribe"]
R = struct_classes(API.response)
ASSIGNOR = "simple"


def _failed(group_id: str, error: ErrorCode, message: str | None, operations: int = AUTHORIZED_OPERATIONS_OMITTED):
    return R.DescribedGroup(
        error_code=error, error_message=message, group_id=group_id, group_state="", group_epoch=-1,
        assignment_epoch=-1, assignor_name="", members=[], authorized_operations=operations,
    )


def register(dispatcher, broker) -> None:
    def assignment(partitions):
        by_topic: dict = defaultdict(list)
        for topic_id, partition in partitions:
            by_topic[topic_id].append(partition)
        names = broker.image.topic_names_by_id
        return R.Assignment(topic_partitions=[
            R.TopicPartitions(topic_id=t, topic_name=names.get(t, ""), partitions=sorted(ps)) for t, ps in sorted(by_topic.items())
        ])

    def describe(ctx, group_id: str, include_operations: bool):
        if not share_groups_enabled(broker):
            return _failed(group_id, ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled (share.version is not finalized).")
        if not allowed(broker, ctx, AclOperation.DESCRIBE, GROUP, group_id):
            return _failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, MESSAGES.get(ErrorCode.GROUP_AUTHORIZATION_FAILED))
        operations = _operations(broker, ctx, GROUP, group_id, GROUP_OPERATIONS) if include_operations else AUTHORIZED_OPERATIONS_OMITTED
        groups = broker.groups
        wrong = groups.not_coordinator(group_id)
        if wrong is not None:
            return _failed(group_id, wrong, None, operations)
        group = groups.share_groups.groups.get(group_id)
        if group is None:
            known = group_id in groups.coordinator.groups or groups.is_consumer_group(group_id)
            message = f"Group {group_id} is not a share group." if known else f"Group {group_id} not found."
            return _failed(group_id, ErrorCode.GROUP_ID_NOT_FOUND, message, operations)
        return R.DescribedGroup(
            error_code=ErrorCode.NONE, error_message=None, group_id=group_id, group_state=group.state,
            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch, assignor_name=ASSIGNOR,
            members=[
                R.Member(
                    member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
                    client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
                    assignment=assignment(m.assigned),
                )
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ],
            authorized_operations=operations,
        )

    def handle(ctx, request):
        include_operations = request.include_authorized_operations
        return R.ShareGroupDescribeResponse(
            throttle_time_ms=0, groups=[describe(ctx, group_id, include_operations) for group_id in request.group_ids]
        )

    dispatcher.register(API.key, 1, 1, handle)
