"""OffsetCommit (key 8), versions 0-9.

Stores consumer positions in ``__consumer_offsets`` (answered once every
in-sync replica of the group's partition has them). Members of a group commit with their member id and generation
(UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS while the
assignment is being completed, FENCED_INSTANCE_ID); a consumer that does not
use group membership commits with generation -1 while the group has no
members (v0 has no generation: always such a commit). v1's per-partition
``commit_timestamp`` and v2-4's ``retention_time_ms`` (an explicit expiry) are
honoured; v6+ stores the leader epoch. Per partition: UNKNOWN_TOPIC_OR_PARTITION
for a partition the cluster does not have, OFFSET_METADATA_TOO_LARGE above
``offset.metadata.max.bytes``. A commit with a generation to a group the
coordinator does not have answers ILLEGAL_GENERATION before v9 and
GROUP_ID_NOT_FOUND from v9, as Kafka does.

A KIP-848 consumer group's member commits with v9+ and its member epoch in
``generation_id_or_member_epoch`` (Kafka's checks: UNKNOWN_MEMBER_ID,
STALE_MEMBER_EPOCH behind the member's epoch, FENCED_MEMBER_EPOCH ahead of it,
UNSUPPORTED_VERSION before v9); epoch -1 commits while the group has no members.

With an authorizer (as Kafka): every partition answers
GROUP_AUTHORIZATION_FAILED when the caller may not READ the group, and
TOPIC_AUTHORIZATION_FAILED for a topic it may not READ.

Leadership: the group's coordinator answers (NOT_COORDINATOR elsewhere) and
writes through the leader of the group's ``__consumer_offsets`` partition;
the committed partitions' own replicas are neither read nor changed.
"""

from __future__ import annotations

from broker.security.authorization import GROUP, TOPIC, allowed, denied
from controller.authorizer import AclOperation
from protocol.consumer_offsets import OffsetAndMetadata
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["OffsetCommit"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    async def handle(ctx, request):
        version = ctx.api_version
        groups = broker.groups
        # The commit is stored in __consumer_offsets: make sure it exists (a
        # client that skipped FindCoordinator would otherwise find it missing).
        await groups.ensure_offsets_topic()
        now_ms = groups.now_ms()  # a commit renews the member's session: monotonic
        wall_ms = groups.wall_ms()  # commit and expiry timestamps: wall-clock, as Kafka's
        expire_ms = -1
        if 2 <= version <= 4 and request.retention_time_ms >= 0:
            expire_ms = wall_ms + request.retention_time_ms
        errors: dict[tuple[str, int], ErrorCode] = {}
        offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        group_refused = not allowed(broker, ctx, AclOperation.READ, GROUP, request.group_id)
        unreadable = denied(broker, ctx, AclOperation.READ, TOPIC, (t.name for t in request.topics))
        for topic in request.topics:
            image = broker.image.topics.get(topic.name)
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                if group_refused:
                    errors[tp] = ErrorCode.GROUP_AUTHORIZATION_FAILED
                    continue
                if unreadable and topic.name in unreadable:
                    errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                if image is None or p.partition_index not in image.partitions:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                commit_ms = p.commit_timestamp if version == 1 and p.commit_timestamp >= 0 else wall_ms
                offsets[tp] = OffsetAndMetadata(
                    offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch if version >= 6 else -1,
                    metadata=p.committed_metadata or "",
                    commit_timestamp_ms=commit_ms,
                    expire_timestamp_ms=expire_ms,
                )
        generation_id = request.generation_id_or_member_epoch if version >= 1 else -1
        wrong = groups.not_writable(request.group_id) if offsets else groups.not_coordinator(request.group_id)
        if wrong is not None:
            errors.update({tp: wrong for tp in offsets})
        elif offsets and groups.is_consumer_group(request.group_id):
            member_error = groups.consumer_member_error(request.group_id, request.member_id if version >= 1 else None, generation_id, version)
            if member_error is not None:
                errors.update({tp: member_error for tp in offsets})
            else:
                results = groups.run(groups.coordinator.commit_consumer_group_offsets, now_ms, request.group_id, offsets)
                errors.update(await groups.answer_after_replication(request.group_id, results))
        elif offsets and version >= 9 and generation_id >= 0 and request.group_id not in groups.coordinator.groups:
            # A member of a group the coordinator does not have: v9+ says so; before
            # v9 Kafka answers ILLEGAL_GENERATION (the coordinator's answer).
            errors.update({tp: ErrorCode.GROUP_ID_NOT_FOUND for tp in offsets})
        elif offsets:
            results = groups.run(
                groups.coordinator.commit_offsets,
                now_ms,
                request.group_id,
                generation_id,
                request.member_id if version >= 1 else "",
                request.group_instance_id if version >= 7 else None,
                offsets,
            )
            errors.update(await groups.answer_after_replication(request.group_id, results))
        return R.OffsetCommitResponse(
            throttle_time_ms=0,
            topics=[
                R.OffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[
                        R.OffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=errors[(topic.name, p.partition_index)]
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ],
        )

    dispatcher.register(API.key, 0, 9, handle)
