"""ConsumerGroupHeartbeat (key 68), versions 0-1: KIP-848 consumer groups.

A member of a ``group.protocol=consumer`` group joins, stays, changes its
subscription and reconciles its assignment by heartbeats; the broker assigns
(broker/coordinators/consumer_groups/coordinator.py has the rules, the group
service runs it). The request's owned partitions and the answer's assignment
name topics by id. v1 adds ``subscribed_topic_regex`` (evaluated on the broker
against the topics of the metadata image, internal ones left out).

Served only while the cluster finalizes ``group.version`` >= 1: below it
(``pybroker features downgrade --feature group.version=0``) every heartbeat
answers UNSUPPORTED_VERSION before anything else, as Kafka 4 answers when
its consumer protocol is not enabled; the API stays listed in ApiVersions.

As Kafka: GROUP_AUTHORIZATION_FAILED without READ on the group, and
TOPIC_AUTHORIZATION_FAILED when a subscribed topic name may not be DESCRIBEd.
NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE from
the group service; GROUP_ID_NOT_FOUND for the id of a classic group with
members. The answer waits until what the heartbeat stored is on every in-sync
replica of the group's ``__consumer_offsets`` partition.
"""

from __future__ import annotations

from collections import defaultdict

from broker.coordinators.consumer_groups.coordinator import HeartbeatRequest
from broker.handlers.join_group import client_host
from broker.security.authorization import GROUP, MESSAGES, TOPIC, allowed, denied
from controller.authorizer import AclOperation
from controller.features import consumer_protocol_enabled
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["ConsumerGroupHeartbeat"]
R = struct_classes(API.response)
DISABLED_MESSAGE = (
    "The consumer group protocol (KIP-848) is not enabled: the cluster's group.version is 0 "
    "(pybroker features upgrade --feature group.version=1)"
)


def _refused(error: ErrorCode, message: str | None = None):
    return R.ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=error, error_message=message, member_id=None, member_epoch=-1,
        heartbeat_interval_ms=0, assignment=None,
    )


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        if not consumer_protocol_enabled(broker.image):
            return _refused(ErrorCode.UNSUPPORTED_VERSION, DISABLED_MESSAGE)
        if not allowed(broker, ctx, AclOperation.READ, GROUP, request.group_id):
            return _refused(ErrorCode.GROUP_AUTHORIZATION_FAILED, MESSAGES.get(ErrorCode.GROUP_AUTHORIZATION_FAILED))
        names = request.subscribed_topic_names
        if names and denied(broker, ctx, AclOperation.DESCRIBE, TOPIC, names):
            return _refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, MESSAGES.get(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        owned = None
        if request.topic_partitions is not None:
            owned = frozenset((t.topic_id, p) for t in request.topic_partitions for p in t.partitions)
        heartbeat = HeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=None if names is None else tuple(names),
            subscribed_topic_regex=request.subscribed_topic_regex if ctx.api_version >= 1 else None,
            server_assignor=request.server_assignor,
            owned=owned,
            client_id=ctx.client_id or "",
            client_host=client_host(ctx.peer),
        )
        response = await broker.groups.consumer_group_heartbeat(heartbeat)
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
        return R.ConsumerGroupHeartbeatResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NONE,
            error_message=None,
            member_id=response.member_id,
            member_epoch=response.member_epoch,
            heartbeat_interval_ms=response.heartbeat_interval_ms,
            assignment=assignment,
        )

    dispatcher.register(API.key, 0, 1, handle)
