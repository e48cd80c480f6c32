"""DescribeTopicPartitions (key 75), version 0.

Topic and partition metadata, paginated (KIP-966), as Kafka's broker answers
it (DescribeTopicPartitionsRequestHandler and KRaftMetadataCache):

- ``topics`` empty asks for every topic; otherwise the named ones (each once).
  Topics are answered in name order, starting at the cursor's topic (names
  before it are skipped) and, within that topic, at the cursor's partition.
- At most min(``response_partition_limit``, ``max.request.partition.size.limit``)
  partitions are answered. When a topic is cut short, ``next_cursor`` names it
  and its first partition left out; when the limit is used up exactly before
  another topic, ``next_cursor`` is that topic at partition 0; else it is null.
- A named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION (an
  illegal name INVALID_TOPIC_EXCEPTION), with no partitions; listing every
  topic never produces such entries. A cursor whose topic is not among the
  named topics makes every named topic answer INVALID_REQUEST.
- Per partition: leader, leader epoch, replicas, ISR, eligible leader replicas
  and last known ELR (empty: pybroker keeps no ELR) and offline replicas
  (replicas on brokers that are not registered: none on a single node).
- ``is_internal`` is Kafka's: only ``__consumer_offsets`` and ``__transaction_state``.
- ``topic_authorized_operations`` is always filled in (the request has no flag
  for it): every TOPIC operation, as Kafka reports without an authorizer; with
  one, what the caller may do on the topic.
- With an authorizer, topics the caller may not DESCRIBE are left out; named
  ones are answered after the others with TOPIC_AUTHORIZATION_FAILED, no topic
  id and no partitions (whether or not they exist), as Kafka does.
"""

from __future__ import annotations

from broker.security.authorization import TOPIC, denied, operations
from broker.security.authorized_operations import TOPIC_OPERATIONS
from controller.authorizer import AclOperation
from controller.directories import replica_offline
from controller.topic_commands import INTERNAL_TOPICS, topic_name_error
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes

API = APIS_BY_NAME["DescribeTopicPartitions"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    def partition_entries(topic, first_index: int, max_count: int):
        """Entries of partitions ``first_index`` up to ``max_count`` of them, and the
        index of the next partition left out (-1 when none is)."""
        image = broker.image
        brokers = image.brokers
        # Before any registration (a single node starting up) the node itself is the cluster.
        registered = set(brokers) if brokers else set(broker.controller.defaults.broker_ids)
        fenced = {b for b, registration in brokers.items() if registration.fenced}
        size = len(topic.partitions)
        upper = min(size, first_index + max_count)
        entries = []
        for index in range(first_index, upper):
            p = topic.partitions.get(index)
            if p is None:
                continue
            entries.append(
                R.DescribeTopicPartitionsResponsePartition(
                    error_code=ErrorCode.NONE,
                    partition_index=index,
                    leader_id=p.leader,
                    leader_epoch=p.leader_epoch,
                    replica_nodes=list(p.replicas),
                    isr_nodes=list(p.isr),
                    eligible_leader_replicas=[],
                    last_known_elr=[],
                    offline_replicas=[r for r in p.replicas if r not in registered or r in fenced or replica_offline(image, p, r)],
                )
            )
        return entries, (upper if upper < size else -1)

    def handle(ctx, request):
        image = broker.image
        cursor = request.cursor
        cursor_topic = cursor.topic_name if cursor is not None else ""
        list_all = not request.topics
        if list_all:
            names = [name for name in image.topics if name >= cursor_topic]
        else:
            names = list(dict.fromkeys(t.name for t in request.topics if t.name >= cursor_topic))
            if cursor is not None and cursor.topic_name not in names:
                # Kafka fails the whole request, which answers each named topic with the error.
                return R.DescribeTopicPartitionsResponse(
                    throttle_time_ms=0,
                    topics=[
                        R.DescribeTopicPartitionsResponseTopic(
                            error_code=ErrorCode.INVALID_REQUEST, name=t.name, topic_id=ZERO_UUID, partitions=[]
                        )
                        for t in request.topics
                    ],
                    next_cursor=None,
                )
        refused = denied(broker, ctx, AclOperation.DESCRIBE, TOPIC, names)
        if refused:
            names = [name for name in names if name not in refused]
        names.sort()
        remaining = min(request.response_partition_limit, broker.config["max.request.partition.size.limit"])
        topics = []
        next_cursor = None
        for name in names:
            if remaining > 0:
                topic = image.topics.get(name)
                if topic is None:
                    if not list_all:
                        error = ErrorCode.INVALID_TOPIC_EXCEPTION if topic_name_error(name) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        topics.append(
                            R.DescribeTopicPartitionsResponseTopic(
                                error_code=error,
                                name=name,
                                topic_id=ZERO_UUID,
                                is_internal=name in INTERNAL_TOPICS,
                                partitions=[],
                                topic_authorized_operations=operations(broker, ctx, TOPIC, name, TOPIC_OPERATIONS),
                            )
                        )
                    continue
                first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
                partitions, next_partition = partition_entries(topic, first, remaining)
                topics.append(
                    R.DescribeTopicPartitionsResponseTopic(
                        error_code=ErrorCode.NONE,
                        name=name,
                        topic_id=topic.topic_id,
                        is_internal=name in INTERNAL_TOPICS,
                        partitions=partitions,
                        topic_authorized_operations=operations(broker, ctx, TOPIC, name, TOPIC_OPERATIONS),
                    )
                )
                if next_partition != -1:
                    next_cursor = R.Cursor(topic_name=name, partition_index=next_partition)
                    break
                remaining -= len(partitions)
            elif remaining == 0:
                # The limit is used up exactly: the next call starts at this topic.
                next_cursor = R.Cursor(topic_name=name, partition_index=0)
                break
        if refused and not list_all:
            topics.extend(
                R.DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=ZERO_UUID, is_internal=False, partitions=[]
                )
                for name in sorted(refused)
            )
        return R.DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)

    dispatcher.register(API.key, 0, 0, handle)
