"""The consumer group model as ``__consumer_offsets`` records, and back (pure).

The coordinator changes a group only by applying the records it stores
(:func:`apply_record`), and replay after a failover applies the same records
decoded from the log: the group a new coordinator rebuilds is the group the
old one had, by construction. What is not in the records is the timers: the
loading coordinator gives every member a fresh session.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import replace

from broker.coordinators.consumer_groups.model import (
    NO_PARTITIONS,
    ClassicMembership,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    Partitions,
    ResolvedRegex,
    TopicInfo,
)
from protocol.consumer_group_records import (
    VALUE_CLASSES,
    ConsumerGroupRecord,
    ClassicMemberMetadata,
    ClassicProtocol,
    CurrentTopicPartitions,
    PartitionRacks,
    RecordKind,
    TargetTopicPartitions,
    TopicMetadata,
)


def by_topic(partitions: Partitions, cls) -> list:
    """(topic id, partition) pairs as the records' per-topic lists (``cls`` per topic), in order.

    Share groups' records (broker/coordinators/share_groups/membership.py) use it too.
    """
    grouped: dict[uuid.UUID, list[int]] = defaultdict(list)
    for topic_id, partition in partitions:
        grouped[topic_id].append(partition)
    return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(grouped.items())]


def from_topics(topic_partitions) -> Partitions:
    """The reverse of :func:`by_topic`."""
    return frozenset((tp.topic_id, p) for tp in topic_partitions for p in tp.partitions)


def group_epoch_record(group_id: str, epoch: int) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(RecordKind.GROUP_METADATA, group_id, None, VALUE_CLASSES[RecordKind.GROUP_METADATA](epoch=epoch))


def subscription_metadata_record(group_id: str, metadata: dict[str, TopicInfo]) -> ConsumerGroupRecord:
    topics = []
    for name in sorted(metadata):
        info = metadata[name]
        racks_known = any(info.partition_racks)
        topics.append(TopicMetadata(
            topic_id=info.topic_id,
            topic_name=name,
            num_partitions=info.partition_count,
            partition_metadata=[
                PartitionRacks(partition=p, racks=sorted(racks)) for p, racks in enumerate(info.partition_racks)
            ] if racks_known else [],
        ))
    value = VALUE_CLASSES[RecordKind.PARTITION_METADATA](topics=topics)
    return ConsumerGroupRecord(RecordKind.PARTITION_METADATA, group_id, None, value)


def member_metadata_record(group_id: str, member: ConsumerGroupMember) -> ConsumerGroupRecord:
    value = VALUE_CLASSES[RecordKind.MEMBER_METADATA](
        instance_id=member.instance_id,
        rack_id=member.rack_id,
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=list(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        server_assignor=member.server_assignor,
        classic_member_metadata=None if member.classic is None else ClassicMemberMetadata(
            session_timeout_ms=member.classic.session_timeout_ms,
            supported_protocols=[ClassicProtocol(name=name, metadata=metadata) for name, metadata in member.classic.protocols],
        ),
    )
    return ConsumerGroupRecord(RecordKind.MEMBER_METADATA, group_id, member.member_id, value)


def assignment_epoch_record(group_id: str, epoch: int) -> ConsumerGroupRecord:
    value = VALUE_CLASSES[RecordKind.TARGET_ASSIGNMENT_METADATA](assignment_epoch=epoch)
    return ConsumerGroupRecord(RecordKind.TARGET_ASSIGNMENT_METADATA, group_id, None, value)


def target_record(group_id: str, member_id: str, partitions: Partitions) -> ConsumerGroupRecord:
    value = VALUE_CLASSES[RecordKind.TARGET_ASSIGNMENT_MEMBER](topic_partitions=by_topic(partitions, TargetTopicPartitions))
    return ConsumerGroupRecord(RecordKind.TARGET_ASSIGNMENT_MEMBER, group_id, member_id, value)


def current_assignment_record(group_id: str, member: ConsumerGroupMember) -> ConsumerGroupRecord:
    value = VALUE_CLASSES[RecordKind.CURRENT_MEMBER_ASSIGNMENT](
        member_epoch=member.member_epoch,
        previous_member_epoch=member.previous_member_epoch,
        state=int(member.state),
        assigned_partitions=by_topic(member.assigned, CurrentTopicPartitions),
        partitions_pending_revocation=by_topic(member.pending_revocation, CurrentTopicPartitions),
    )
    return ConsumerGroupRecord(RecordKind.CURRENT_MEMBER_ASSIGNMENT, group_id, member.member_id, value)


def regex_record(group_id: str, regex: str, resolved: ResolvedRegex | None) -> ConsumerGroupRecord:
    """What ``regex`` resolved to; None: its tombstone (no member subscribes with it any more)."""
    value = None if resolved is None else VALUE_CLASSES[RecordKind.REGULAR_EXPRESSION](
        topics=sorted(resolved.topics), version=resolved.version, timestamp=resolved.timestamp_ms,
    )
    return ConsumerGroupRecord(RecordKind.REGULAR_EXPRESSION, group_id, None, value, regex)


def member_removal_records(group_id: str, member_id: str) -> list[ConsumerGroupRecord]:
    """Tombstones of a member, in Kafka's order: current assignment, target, metadata."""
    return [
        ConsumerGroupRecord(RecordKind.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id, None),
        ConsumerGroupRecord(RecordKind.TARGET_ASSIGNMENT_MEMBER, group_id, member_id, None),
        ConsumerGroupRecord(RecordKind.MEMBER_METADATA, group_id, member_id, None),
    ]


def group_removal_records(group: ConsumerGroup) -> list[ConsumerGroupRecord]:
    """Tombstones of a whole group, in Kafka's order: each member's, then the
    assignment epoch, the subscription metadata, the resolved regular
    expressions and last the group epoch (whose tombstone is what removes the
    group on replay)."""
    records = [r for member_id in sorted(group.members) for r in member_removal_records(group.group_id, member_id)]
    records += [
        ConsumerGroupRecord(RecordKind.TARGET_ASSIGNMENT_METADATA, group.group_id, None, None),
        ConsumerGroupRecord(RecordKind.PARTITION_METADATA, group.group_id, None, None),
    ]
    records += [regex_record(group.group_id, regex, None) for regex in sorted(group.resolved_regexes)]
    records += [
        ConsumerGroupRecord(RecordKind.GROUP_METADATA, group.group_id, None, None),
    ]
    return records


def apply_record(groups: dict[str, ConsumerGroup], record: ConsumerGroupRecord) -> None:
    """Apply one record to ``groups`` (live, or replaying the log in order)."""
    kind, value = record.kind, record.value
    if kind == RecordKind.GROUP_METADATA and value is None:
        groups.pop(record.group_id, None)
        return
    group = groups.get(record.group_id)
    if group is None:
        if kind == RecordKind.REGULAR_EXPRESSION and value is None:
            return  # a compacted log may keep it past its group's records
        group = groups[record.group_id] = ConsumerGroup(record.group_id)
    if kind == RecordKind.GROUP_METADATA:
        group.group_epoch = value.epoch
    elif kind == RecordKind.PARTITION_METADATA:
        group.subscription_metadata = {} if value is None else {
            t.topic_name: TopicInfo(
                t.topic_id,
                t.topic_name,
                tuple(frozenset(pm.racks) for pm in sorted(t.partition_metadata, key=lambda pm: pm.partition))
                if t.partition_metadata else (frozenset(),) * t.num_partitions,
            )
            for t in value.topics
        }
    elif kind == RecordKind.REGULAR_EXPRESSION:
        if value is None:
            group.resolved_regexes.pop(record.regular_expression, None)
        else:
            group.resolved_regexes[record.regular_expression] = ResolvedRegex(
                frozenset(value.topics), value.version, value.timestamp,
            )
    elif kind == RecordKind.TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = 0 if value is None else value.assignment_epoch
    elif kind == RecordKind.TARGET_ASSIGNMENT_MEMBER:
        if value is None:
            group.target.pop(record.member_id, None)
        else:
            group.target[record.member_id] = from_topics(value.topic_partitions)
    elif kind == RecordKind.MEMBER_METADATA:
        if value is None:
            group.remove_member(record.member_id)
        else:
            member = group.members.get(record.member_id) or ConsumerGroupMember(record.member_id)
            group.set_member(replace(
                member,
                instance_id=value.instance_id,
                rack_id=value.rack_id,
                client_id=value.client_id,
                client_host=value.client_host,
                subscribed_topic_names=tuple(value.subscribed_topic_names),
                subscribed_topic_regex=value.subscribed_topic_regex,
                rebalance_timeout_ms=value.rebalance_timeout_ms,
                server_assignor=value.server_assignor,
                classic=None if value.classic_member_metadata is None else ClassicMembership(
                    value.classic_member_metadata.session_timeout_ms,
                    tuple((p.name, bytes(p.metadata)) for p in value.classic_member_metadata.supported_protocols),
                ),
            ))
    elif kind == RecordKind.CURRENT_MEMBER_ASSIGNMENT:
        member = group.members.get(record.member_id) or ConsumerGroupMember(record.member_id)
        if value is None:
            member = replace(member, member_epoch=0, previous_member_epoch=0, state=MemberState.STABLE,
                             assigned=NO_PARTITIONS, pending_revocation=NO_PARTITIONS)
        else:
            member = replace(
                member,
                member_epoch=value.member_epoch,
                previous_member_epoch=value.previous_member_epoch,
                state=MemberState(value.state) if value.state in MemberState._value2member_map_ else MemberState.UNKNOWN,
                assigned=from_topics(value.assigned_partitions),
                pending_revocation=from_topics(value.partitions_pending_revocation),
            )
        group.set_member(member)
