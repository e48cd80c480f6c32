"""ShareFetch and ShareAcknowledge (keys 78-79), version 1: KIP-932 share groups.

Served on the partitions' leader by the share-partition service
(broker/coordinators/share_groups/service.py), only once ``share.version`` >= 1
is finalized (UNSUPPORTED_VERSION before; ApiVersions does not list them).
Version 1 only, as Kafka 4.1+ (v0 was Kafka 4.0's early access).

ShareFetch: within the member's share session (epoch 0 opens it, each next
request the next epoch, -1 closes it), the partitions named join the session
and the forgotten ones leave; the acknowledgements it carries are applied
first (each partition's outcome in ``acknowledge_error_code``), then records
are acquired from every partition of the session, up to ``max_records`` in
all, and returned with their acquired ranges and delivery counts. With
nothing to acquire the request waits up to ``max_wait_ms`` for new records.
While a partition's state cannot be read or written (its ``__share_group_state``
coordinator moves or loads) the fetch hands out nothing from it, without an
error: librdkafka fails a poll on partition errors it does not know.
A closing request (-1) only acknowledges, then releases what the member holds
here. ShareAcknowledge settles acquired records without fetching (epoch 0 is
INVALID_SHARE_SESSION_EPOCH: it cannot open a session).

Errors, as Kafka: GROUP_AUTHORIZATION_FAILED without READ on the group,
TOPIC_AUTHORIZATION_FAILED per partition without READ on its topic,
UNKNOWN_TOPIC_ID, NOT_LEADER_OR_FOLLOWER with the current leader (and its
endpoint), SHARE_SESSION_NOT_FOUND / INVALID_SHARE_SESSION_EPOCH at the top
level, INVALID_RECORD_STATE for an acknowledgement of records the member does
not hold.
"""

from __future__ import annotations

import time

from broker.coordinators.share_groups.service import share_groups_enabled
from broker.security.authorization import GROUP, MESSAGES, TOPIC, allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

FETCH = APIS_BY_NAME["ShareFetch"]
ACK = APIS_BY_NAME["ShareAcknowledge"]
F = struct_classes(FETCH.response)
A = struct_classes(ACK.response)
NOT_ENABLED = "Share groups are not enabled (share.version is not finalized)."
# Records a fetch acquires when the request does not say (MaxRecords 0).
DEFAULT_MAX_RECORDS = 500
_STATE_UNAVAILABLE = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR})


def register(dispatcher, broker) -> None:
    service = broker.shares

    def leader_of(topic: str | None, partition: int) -> tuple[int, int]:
        image = broker.image.topics.get(topic) if topic else None
        part = image.partitions.get(partition) if image else None
        return (part.leader, part.leader_epoch) if part else (-1, -1)

    def endpoints(cls, broker_ids, listener) -> list:
        return [
            cls(node_id=node_id, host=host, port=port, rack=rack)
            for node_id, host, port, rack in broker.alive_brokers(listener)
            if node_id in broker_ids
        ]

    def partition_error(ctx, topic: str | None, partition: int) -> ErrorCode | None:
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_ID
        if not allowed(broker, ctx, AclOperation.READ, TOPIC, topic):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        image = broker.image.topics.get(topic)
        if image is None or partition not in image.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        error = broker.replicas.local_replica(topic, partition).error
        return None if error == ErrorCode.NONE else error

    async def acknowledge_all(ctx, group_id, member_id, topics) -> dict:
        """(topic id, partition) -> the outcome of its acknowledgement batches."""
        names = broker.image.topic_names_by_id
        outcomes = {}
        for t in topics:
            topic = names.get(t.topic_id)
            for p in t.partitions:
                if not p.acknowledgement_batches:
                    continue
                error = partition_error(ctx, topic, p.partition_index)
                if error is None:
                    batches = [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches]
                    error = await service.acknowledge(group_id, member_id, topic, t.topic_id, p.partition_index, batches)
                outcomes[(t.topic_id, p.partition_index)] = error
        return outcomes

    def fetch_refused(error: ErrorCode, message: str | None = None):
        return F.ShareFetchResponse(
            throttle_time_ms=0, error_code=error, error_message=message,
            acquisition_lock_timeout_ms=service.config.record_lock_duration_ms, responses=[], node_endpoints=[],
        )

    async def share_fetch(ctx, request):
        if not share_groups_enabled(broker):
            return fetch_refused(ErrorCode.UNSUPPORTED_VERSION, NOT_ENABLED)
        group_id, member_id = request.group_id, request.member_id
        if not group_id or not member_id:
            return fetch_refused(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be given.")
        if not allowed(broker, ctx, AclOperation.READ, GROUP, group_id):
            return fetch_refused(ErrorCode.GROUP_AUTHORIZATION_FAILED, MESSAGES.get(ErrorCode.GROUP_AUTHORIZATION_FAILED))
        epoch = request.share_session_epoch
        error, session = service.session(group_id, member_id, epoch)
        if session is None:
            return fetch_refused(error)
        if epoch != -1:
            for t in request.topics:
                for p in t.partitions:
                    session.partitions.add((t.topic_id, p.partition_index))
            for t in request.forgotten_topics_data:
                for p in t.partitions:
                    session.partitions.discard((t.topic_id, p))
        acknowledged = await acknowledge_all(ctx, group_id, member_id, request.topics)
        names = broker.image.topic_names_by_id
        fetched: dict = {}  # (topic id, partition) -> (error, acquired, records)
        if epoch == -1:
            await service.close_session(group_id, member_id)
        else:
            deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
            while True:
                budget = request.max_records if request.max_records > 0 else DEFAULT_MAX_RECORDS
                bytes_left = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
                got_any = False
                for topic_id, partition in sorted(session.partitions):
                    topic = names.get(topic_id)
                    error = partition_error(ctx, topic, partition)
                    if error is not None:
                        fetched[(topic_id, partition)] = (error, [], None)
                        continue
                    if budget <= 0 or bytes_left <= 0:
                        continue
                    error, acquired, data = await service.acquire(group_id, member_id, topic, topic_id, partition, budget, bytes_left)
                    if error in _STATE_UNAVAILABLE:
                        # The share-partition's state cannot be read or written just now
                        # (its coordinator moves or loads): nothing to hand out yet, as an
                        # empty fetch; clients fail a fetch on errors they do not know.
                        continue
                    if error != ErrorCode.NONE or acquired:
                        fetched[(topic_id, partition)] = (error, acquired, data)
                    if acquired:
                        got_any = True
                        budget -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
                        bytes_left -= len(data or b"")
                remaining_s = deadline - time.monotonic()
                if got_any or remaining_s <= 0 or broker.stopping or any(e != ErrorCode.NONE for e, _, _ in fetched.values()):
                    break
                keys = [(names[t], p) for t, p in session.partitions if t in names]
                if not keys:
                    break
                await broker.partition_watch.wait_any(keys, min(remaining_s, 0.5))
        responses: dict = {}
        leaders_named: set[int] = set()
        for key in sorted(set(acknowledged) | set(fetched)):
            topic_id, partition = key
            error, acquired, data = fetched.get(key, (ErrorCode.NONE, [], None))
            leader_id, leader_epoch = leader_of(names.get(topic_id), partition)
            if error == ErrorCode.NOT_LEADER_OR_FOLLOWER and leader_id >= 0:
                leaders_named.add(leader_id)
            ack_error = acknowledged.get(key, ErrorCode.NONE)
            responses.setdefault(topic_id, []).append(F.PartitionData(
                partition_index=partition, error_code=error, error_message=None,
                acknowledge_error_code=ack_error, acknowledge_error_message=None,
                current_leader=F.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch),
                records=data if acquired else b"",  # librdkafka reads a null as a bad size
                acquired_records=[F.AcquiredRecords(first_offset=a.first_offset, last_offset=a.last_offset, delivery_count=a.delivery_count) for a in acquired],
            ))
        return F.ShareFetchResponse(
            throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
            acquisition_lock_timeout_ms=service.config.record_lock_duration_ms,
            responses=[F.ShareFetchableTopicResponse(topic_id=t, partitions=ps) for t, ps in responses.items()],
            node_endpoints=endpoints(F.NodeEndpoint, leaders_named, ctx.listener),
        )

    def ack_refused(error: ErrorCode, message: str | None = None):
        return A.ShareAcknowledgeResponse(throttle_time_ms=0, error_code=error, error_message=message, responses=[], node_endpoints=[])

    async def share_acknowledge(ctx, request):
        if not share_groups_enabled(broker):
            return ack_refused(ErrorCode.UNSUPPORTED_VERSION, NOT_ENABLED)
        group_id, member_id = request.group_id, request.member_id
        if not group_id or not member_id:
            return ack_refused(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be given.")
        if not allowed(broker, ctx, AclOperation.READ, GROUP, group_id):
            return ack_refused(ErrorCode.GROUP_AUTHORIZATION_FAILED, MESSAGES.get(ErrorCode.GROUP_AUTHORIZATION_FAILED))
        epoch = request.share_session_epoch
        if epoch == 0:
            return ack_refused(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session.")
        error, session = service.session(group_id, member_id, epoch)
        if session is None:
            return ack_refused(error)
        acknowledged = await acknowledge_all(ctx, group_id, member_id, request.topics)
        if epoch == -1:
            await service.close_session(group_id, member_id)
        names = broker.image.topic_names_by_id
        responses: dict = {}
        leaders_named: set[int] = set()
        for (topic_id, partition), error in sorted(acknowledged.items()):
            leader_id, leader_epoch = leader_of(names.get(topic_id), partition)
            if error == ErrorCode.NOT_LEADER_OR_FOLLOWER and leader_id >= 0:
                leaders_named.add(leader_id)
            responses.setdefault(topic_id, []).append(A.PartitionData(
                partition_index=partition, error_code=error, error_message=None,
                current_leader=A.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch),
            ))
        return A.ShareAcknowledgeResponse(
            throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
            responses=[A.ShareAcknowledgeTopicResponse(topic_id=t, partitions=ps) for t, ps in responses.items()],
            node_endpoints=endpoints(A.NodeEndpoint, leaders_named, ctx.listener),
        )

    dispatcher.register(FETCH.key, 1, 1, share_fetch)
    dispatcher.register(ACK.key, 1, 1, share_acknowledge)
