"""Metadata (key 3), versions 0-12.

Topics: null (v1+) or empty (v0) asks for every topic; an unknown topic is
created when both the request (v4+, always for older versions) and
``auto.create.topics.enable`` allow it, otherwise it is answered with
UNKNOWN_TOPIC_OR_PARTITION. Lookups by topic id (v10+) answer UNKNOWN_TOPIC_ID
when unknown. Authorized operations (v8+) are INT32_MIN unless requested;
then, as a Kafka broker without an authorizer answers, every operation of the
resource type (see broker.security.authorized_operations), or with an authorizer what
the caller may do.

With an authorizer (broker/security/authorization.py), as Kafka: a request for every
topic lists only those the caller may DESCRIBE; a named topic it may not
DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED without saying whether it
exists (by id: TOPIC_AUTHORIZATION_FAILED with the id and no name); a topic to
auto-create needs CREATE on the cluster or on the topic, else
TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from broker.coordinators.groups.service import OFFSETS_TOPIC
from broker.security.authorization import CLUSTER, TOPIC, allowed, cluster_allowed, operations
from broker.security.authorized_operations import AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_OPERATIONS, TOPIC_OPERATIONS
from controller.authorizer import AclOperation
from controller.directories import replica_offline
from controller.topic_commands import INTERNAL_TOPICS, CreateTopicSpec, topic_name_error
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes

API = APIS_BY_NAME["Metadata"]
R = struct_classes(API.response)


def offline_replicas(image, replicas, partition=None) -> list[int]:
    """Replicas on brokers that are unregistered or fenced (Kafka's KRaft metadata
    cache counts both as offline), and, given the ``partition``, those in a log
    dir their broker reported offline (JBOD, KIP-858)."""
    brokers = image.brokers
    return [
        r
        for r in replicas
        if r not in brokers or brokers[r].fenced or (partition is not None and replica_offline(image, partition, r))
    ]


def topic_response(broker, topic, api_version: int, include_operations: bool = False, ctx=None):
    partitions = []
    image = broker.image
    for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id):
        partitions.append(
            R.MetadataResponsePartition(
                # A partition without a leader cannot be produced to or read: say so.
                error_code=ErrorCode.NONE if p.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=p.partition_id,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas),
                isr_nodes=list(p.isr),
                offline_replicas=offline_replicas(image, p.replicas, p) if image.brokers else [],
            )
        )
    return R.MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.name in INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=(
            operations(broker, ctx, TOPIC, topic.name, TOPIC_OPERATIONS) if include_operations else AUTHORIZED_OPERATIONS_OMITTED
        ),
    )


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        image = broker.image
        requested = request.topics
        if ctx.api_version == 0 and requested == []:
            requested = None  # v0 had no null: empty meant all topics
        topic_operations = ctx.api_version >= 8 and request.include_topic_authorized_operations
        allow_auto_create = (request.allow_auto_topic_creation if ctx.api_version >= 4 else True) and broker.config[
            "auto.create.topics.enable"
        ]
        topics = []
        describe, create = AclOperation.DESCRIBE, AclOperation.CREATE
        if requested is None:
            topics = [
                topic_response(broker, t, ctx.api_version, topic_operations, ctx)
                for t in image.topics.values()
                if allowed(broker, ctx, describe, TOPIC, t.name)
            ]
        else:
            to_create = []
            for wanted in requested:
                name = wanted.name
                topic_id = getattr(wanted, "topic_id", ZERO_UUID)
                if name is None or (topic_id is not None and topic_id != ZERO_UUID):
                    # By id (v10+) whenever one is given, as Kafka decides: the
                    # Java client sends an empty name beside the id, not null.
                    topic = image.topic_by_id(topic_id)
                    if topic is None:
                        topics.append(R.MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id))
                    elif not allowed(broker, ctx, describe, TOPIC, topic.name):
                        # Ids are not secret (Kafka's reasoning); the name is.
                        topics.append(R.MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=None, topic_id=topic_id))
                    else:
                        topics.append(topic_response(broker, topic, ctx.api_version, topic_operations, ctx))
                    continue
                if not allowed(broker, ctx, describe, TOPIC, name):
                    # Whether it exists is not the caller's to learn.
                    topics.append(R.MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=ZERO_UUID))
                    continue
                may_create = allow_auto_create and name not in image.topics and (cluster_allowed(broker, ctx, create) or allowed(broker, ctx, create, TOPIC, name))
                if name == OFFSETS_TOPIC and name not in image.topics and may_create:
                    await broker.groups.ensure_offsets_topic()  # created with its internal configs
                    image = broker.image
                topic = image.topics.get(name)
                if topic is not None:
                    topics.append(topic_response(broker, topic, ctx.api_version, topic_operations, ctx))
                elif topic_name_error(name):
                    topics.append(R.MetadataResponseTopic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name, topic_id=ZERO_UUID))
                elif allow_auto_create and not may_create:
                    topics.append(R.MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=ZERO_UUID))
                elif allow_auto_create:
                    to_create.append(name)
                    topics.append(name)  # placeholder, filled below
                else:
                    topics.append(R.MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=ZERO_UUID))
            if to_create:
                results = {r.name: r for r in await broker.controller.create_topics([CreateTopicSpec(n) for n in dict.fromkeys(to_create)])}
                image = broker.image
                for i, entry in enumerate(topics):
                    if isinstance(entry, str):
                        topic = image.topics.get(entry)
                        if topic is not None:
                            topics[i] = topic_response(broker, topic, ctx.api_version, topic_operations, ctx)
                        else:
                            code = results[entry].error_code if entry in results else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                            topics[i] = R.MetadataResponseTopic(error_code=code, name=entry, topic_id=ZERO_UUID)
        return R.MetadataResponse(
            throttle_time_ms=0,
            brokers=[R.MetadataResponseBroker(node_id=i, host=h, port=p, rack=r) for i, h, p, r in broker.alive_brokers(ctx.listener)],
            cluster_id=broker.cluster_id,
            controller_id=broker.controller_id,
            topics=topics,
            cluster_authorized_operations=operations(broker, ctx, CLUSTER, "kafka-cluster", CLUSTER_OPERATIONS)
            if 8 <= ctx.api_version <= 10 and request.include_cluster_authorized_operations
            else AUTHORIZED_OPERATIONS_OMITTED,
        )

    dispatcher.register(API.key, 0, 12, handle)
