"""ShareGroupHeartbeat (key 76), version 1: KIP-932 share groups.

A member joins (epoch 0), stays (its epoch), changes its subscription and
leaves (-1) by heartbeats; the broker assigns with the simple assignor
(broker/coordinators/share_groups/membership.py has the rules, the group
service runs it). Version 1 only, as Kafka 4.1+ serves it (v0 was Kafka 4.0's
early access and is not served), and only once ``share.version`` >= 1 is
finalized: before that UNSUPPORTED_VERSION, and ApiVersions does not list it.

As Kafka: GROUP_AUTHORIZATION_FAILED without READ on the group,
TOPIC_AUTHORIZATION_FAILED when a subscribed topic may not be DESCRIBEd;
GROUP_ID_NOT_FOUND for the id of a classic group with members or of a
consumer group. The answer waits until what the heartbeat stored is on every
in-sync replica of the group's ``__consumer_offsets`` partition.
"""

from __future__ import annotations

from collections import defaultdict

from broker.coordinators.share_groups.membership import ShareHeartbeatRequest
from broker.coordinators.share_groups.service import share_groups_enabled
from broker.handlers.join_group import client_host
from broker.security.authorization import GROUP, MESSAGES, TOPIC, allowed, denied
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["ShareGroupHeartbeat"]
R = struct_classes(API.response)


def _refused(error: ErrorCode, message: str | None = None):
    return R.ShareGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=error, error_message=message, member_id=None, member_epoch=-1,
        heartbeat_interval_ms=0, assignment=None,
    )


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        if not share_groups_enabled(broker):
            return _refused(ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled (share.version is not finalized).")
        if not allowed(broker, ctx, AclOperation.READ, GROUP, request.group_id):
            return _refused(ErrorCode.GROUP_AUTHORIZATION_FAILED, MESSAGES.get(ErrorCode.GROUP_AUTHORIZATION_FAILED))
        names = request.subscribed_topic_names
        if names and denied(broker, ctx, AclOperation.DESCRIBE, TOPIC, names):
            return _refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, MESSAGES.get(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        response = await broker.groups.share_group_heartbeat(ShareHeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            rack_id=request.rack_id,
            subscribed_topic_names=None if names is None else tuple(names),
            client_id=ctx.client_id or "",
            client_host=client_host(ctx.peer),
        ))
        if response.error != ErrorCode.NONE:
            return _refused(response.error, response.error_message)
        assignment = None
        if response.assignment is not None:
            by_topic: dict = defaultdict(list)
            for topic_id, partition in response.assignment:
                by_topic[topic_id].append(partition)
            assignment = R.Assignment(
                topic_partitions=[R.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items())]
            )
        return R.ShareGroupHeartbeatResponse(
            throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, member_id=response.member_id,
            member_epoch=response.member_epoch, heartbeat_interval_ms=response.heartbeat_interval_ms, assignment=assignment,
        )

    dispatcher.register(API.key, 1, 1, handle)
