"""KIP-932 share group membership: ShareGroupHeartbeat (pure).

Shaped as the KIP-848 consumer group coordinator
(broker/coordinators/consumer_groups/coordinator.py): every operation takes
``now_ms``, sessions are deadlines fired by :meth:`tick`, and what must
survive a coordinator failover is returned as :class:`Store` effects of
``__consumer_offsets`` records (key versions 10-14,
protocol/share_group_records.py). The groups change only by applying those
records (:func:`apply_record`), at once; a failed store puts the group back.

A share group has no revocation: partitions are shared, so a member takes its
target assignment at once and its epoch is the assignment epoch. The group
epoch goes up when a member joins, leaves, changes its subscription, or when
the subscribed topics' partition counts change; the target is then computed
by the simple assignor (:func:`simple_assign`): every subscribed partition
gets at least one member and every member at least one partition when there
are enough, as Kafka's SimpleAssignor.

Heartbeats: epoch 0 joins (GROUP_MAX_SIZE_REACHED past ``group.share.max.size``),
-1 leaves; any other epoch must be the member's own or its previous one (an
answer that was lost), else FENCED_MEMBER_EPOCH; an unknown member is
UNKNOWN_MEMBER_ID. A member silent for ``group.share.session.timeout.ms`` is
removed.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from broker.coordinators.consumer_groups.records import by_topic, from_topics
from broker.coordinators.effects import Store
from protocol.consumer_offsets import partition_for_group
from protocol.errors import ErrorCode
from protocol.share_group_records import (
    VALUE_CLASSES,
    CurrentTopicPartitions,
    ShareGroupRecord,
    ShareGroupRecordKind,
    TargetTopicPartitions,
    decode_record,
    encode_record,
)

TopicPartition = tuple[uuid.UUID, int]
Partitions = frozenset[TopicPartition]
NO_PARTITIONS: Partitions = frozenset()
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STABLE = 1  # the member state Kafka writes in ShareGroupCurrentMemberAssignmentValue


@dataclass(frozen=True)
class ShareGroupConfig:
    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size
    offsets_partitions: int = 50  # offsets.topic.num.partitions


@dataclass(frozen=True)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Partitions = NO_PARTITIONS


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Partitions] = field(default_factory=dict)
    # The subscribed topics' (id, partition count) the target was computed for;
    # not stored: a loading coordinator takes them from the image it has.
    topics_seen: frozenset[tuple[str, uuid.UUID, int]] | None = None

    def copy(self) -> ShareGroup:
        return ShareGroup(self.group_id, self.group_epoch, self.assignment_epoch, dict(self.members), dict(self.target), self.topics_seen)

    @property
    def state(self) -> str:
        """Kafka's share group states (ShareGroupDescribe)."""
        return "Stable" if self.members else "Empty"

    def subscribed_topic_names(self) -> set[str]:
        return {name for m in self.members.values() for name in m.subscribed_topic_names}


@dataclass(frozen=True)
class ShareHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class ShareHeartbeatResponse:
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Partitions | None = None  # None: unchanged


# ----------------------------------------------------------------- the simple assignor


def simple_assign(members: Mapping[str, tuple[str, ...]], topics: Mapping[str, tuple[uuid.UUID, int]]) -> dict[str, Partitions]:
    """Kafka's SimpleAssignor in spirit: per topic, its partitions and the
    members subscribing to it are paired round robin for max(members,
    partitions) turns, so every partition has a member and every member a
    partition when there are enough; the turn each topic starts at rotates so
    that members spread over topics. Deterministic (sorted ids)."""
    assignment: dict[str, set[TopicPartition]] = {m: set() for m in members}
    start = 0
    for name in sorted(topics):
        topic_id, count = topics[name]
        subscribers = sorted(m for m, names in members.items() if name in names)
        if not subscribers or count <= 0:
            continue
        for turn in range(max(len(subscribers), count)):
            member = subscribers[(turn + start) % len(subscribers)]
            assignment[member].add((topic_id, turn % count))
        start += count
    return {m: frozenset(tps) for m, tps in assignment.items()}


# ----------------------------------------------------------------- records


def group_epoch_record(group_id: str, epoch: int) -> ShareGroupRecord:
    kind = ShareGroupRecordKind.GROUP_METADATA
    return ShareGroupRecord(kind, group_id, None, VALUE_CLASSES[kind](epoch=epoch))


def member_metadata_record(group_id: str, member: ShareMember) -> ShareGroupRecord:
    kind = ShareGroupRecordKind.MEMBER_METADATA
    value = VALUE_CLASSES[kind](
        rack_id=member.rack_id, client_id=member.client_id, client_host=member.client_host,
        subscribed_topic_names=list(member.subscribed_topic_names),
    )
    return ShareGroupRecord(kind, group_id, member.member_id, value)


def assignment_epoch_record(group_id: str, epoch: int) -> ShareGroupRecord:
    kind = ShareGroupRecordKind.TARGET_ASSIGNMENT_METADATA
    return ShareGroupRecord(kind, group_id, None, VALUE_CLASSES[kind](assignment_epoch=epoch))


def target_record(group_id: str, member_id: str, partitions: Partitions) -> ShareGroupRecord:
    kind = ShareGroupRecordKind.TARGET_ASSIGNMENT_MEMBER
    return ShareGroupRecord(kind, group_id, member_id, VALUE_CLASSES[kind](topic_partitions=by_topic(partitions, TargetTopicPartitions)))


def current_assignment_record(group_id: str, member: ShareMember) -> ShareGroupRecord:
    kind = ShareGroupRecordKind.CURRENT_MEMBER_ASSIGNMENT
    value = VALUE_CLASSES[kind](
        member_epoch=member.member_epoch, previous_member_epoch=member.previous_member_epoch, state=STABLE,
        assigned_partitions=by_topic(member.assigned, CurrentTopicPartitions),
    )
    return ShareGroupRecord(kind, group_id, member.member_id, value)


def member_removal_records(group_id: str, member_id: str) -> list[ShareGroupRecord]:
    """Tombstones of a member, in Kafka's order: current assignment, target, metadata."""
    return [
        ShareGroupRecord(ShareGroupRecordKind.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id, None),
        ShareGroupRecord(ShareGroupRecordKind.TARGET_ASSIGNMENT_MEMBER, group_id, member_id, None),
        ShareGroupRecord(ShareGroupRecordKind.MEMBER_METADATA, group_id, member_id, None),
    ]


def apply_record(groups: dict[str, ShareGroup], record: ShareGroupRecord) -> None:
    """Apply one record to ``groups`` (live, or replaying the log in order)."""
    kind, value = record.kind, record.value
    if kind == ShareGroupRecordKind.GROUP_METADATA and value is None:
        groups.pop(record.group_id, None)
        return
    group = groups.get(record.group_id)
    if group is None:
        group = groups[record.group_id] = ShareGroup(record.group_id)
    if kind == ShareGroupRecordKind.GROUP_METADATA:
        group.group_epoch = value.epoch
    elif kind == ShareGroupRecordKind.TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = 0 if value is None else value.assignment_epoch
    elif kind == ShareGroupRecordKind.TARGET_ASSIGNMENT_MEMBER:
        if value is None:
            group.target.pop(record.member_id, None)
        else:
            group.target[record.member_id] = from_topics(value.topic_partitions)
    elif kind == ShareGroupRecordKind.MEMBER_METADATA:
        if value is None:
            group.members.pop(record.member_id, None)
        else:
            member = group.members.get(record.member_id) or ShareMember(record.member_id)
            group.members[record.member_id] = replace(
                member, rack_id=value.rack_id, client_id=value.client_id, client_host=value.client_host,
                subscribed_topic_names=tuple(value.subscribed_topic_names),
            )
    elif kind == ShareGroupRecordKind.CURRENT_MEMBER_ASSIGNMENT:
        member = group.members.get(record.member_id) or ShareMember(record.member_id)
        if value is None:
            member = replace(member, member_epoch=0, previous_member_epoch=0, assigned=NO_PARTITIONS)
        else:
            member = replace(member, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
                             assigned=from_topics(value.assigned_partitions))
        group.members[record.member_id] = member


# ----------------------------------------------------------------- the coordinator


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str | None = None):
        super().__init__(message)
        self.error = error
        self.message = message


class ShareGroupCoordinator:
    def __init__(self, config: ShareGroupConfig, new_member_id: Callable[[], str] | None = None):
        self.config = config
        self.groups: dict[str, ShareGroup] = {}
        # name -> (topic id, partition count), as the metadata image has them.
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}
        self._new_member_id = new_member_id or (lambda: str(uuid.uuid4()))
        self._sessions: dict[str, dict[str, int]] = {}  # group -> member -> session deadline
        self._tokens = itertools.count(1)
        self._open_stores: dict[int, tuple[str, ShareGroup | None, dict[str, int], Callable[[ErrorCode], None]]] = {}

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.config.offsets_partitions)

    def set_topics(self, topics: Mapping[str, tuple[uuid.UUID, int]]) -> None:
        self.topics = dict(topics)

    # ----------------------------------------------------------------- effects

    def _apply(self, records: list[ShareGroupRecord], record: ShareGroupRecord) -> None:
        apply_record(self.groups, record)
        records.append(record)

    def _store(self, group_id: str, before, records: list[ShareGroupRecord], then: Callable[[ErrorCode], None]) -> list[Store]:
        token = next(self._tokens)
        self._open_stores[token] = (group_id, before[0], before[1], then)
        return [Store(self.partition_for(group_id), -1, tuple(encode_record(r) for r in records), token)]

    def _before(self, group_id: str):
        group = self.groups.get(group_id)
        return (None if group is None else group.copy()), dict(self._sessions.get(group_id, {}))

    def store_done(self, token: int, error: ErrorCode) -> list[Store]:
        group_id, group, sessions, then = self._open_stores.pop(token)
        if error != ErrorCode.NONE:
            self._restore(group_id, group, sessions)
        then(error)
        return []

    def _restore(self, group_id: str, group: ShareGroup | None, sessions: dict[str, int]) -> None:
        if group is None:
            self.groups.pop(group_id, None)
            self._sessions.pop(group_id, None)
        else:
            self.groups[group_id] = group
            self._sessions[group_id] = sessions

    # ----------------------------------------------------------------- replay

    def load_record(self, key: bytes, value: bytes | None) -> None:
        apply_record(self.groups, decode_record(key, value))

    def finish_loading(self, now_ms: int, partition: int | None = None) -> None:
        """Every member of the loaded groups gets a fresh session; the topics the
        targets were computed for are taken to be the image's (no epoch bump
        for a failover)."""
        for group in self.groups.values():
            if partition is not None and self.partition_for(group.group_id) != partition:
                continue
            group.topics_seen = self._topics_of(group)
            sessions = self._sessions.setdefault(group.group_id, {})
            for member_id in group.members:
                sessions[member_id] = now_ms + self.config.session_timeout_ms

    def unload_partition(self, partition: int) -> None:
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            del self.groups[group_id]
            self._sessions.pop(group_id, None)

    # ----------------------------------------------------------------- heartbeat

    def _topics_of(self, group: ShareGroup) -> frozenset[tuple[str, uuid.UUID, int]]:
        return frozenset((n, *self.topics[n]) for n in group.subscribed_topic_names() if n in self.topics)

    def heartbeat(self, now_ms: int, request: ShareHeartbeatRequest, reply: Callable[[ShareHeartbeatResponse], None]) -> list[Store]:
        before = self._before(request.group_id)
        records: list[ShareGroupRecord] = []
        try:
            response = self._heartbeat(now_ms, request, records)
        except _Refused as refused:
            if records:
                self._restore(request.group_id, *before)
            reply(ShareHeartbeatResponse(refused.error, refused.message, member_epoch=-1))
            return []
        if not records:
            reply(response)
            return []

        def stored(error: ErrorCode) -> None:
            reply(response if error == ErrorCode.NONE else ShareHeartbeatResponse(error, member_epoch=-1))

        return self._store(request.group_id, before, records, stored)

    def _heartbeat(self, now_ms: int, request: ShareHeartbeatRequest, records: list[ShareGroupRecord]) -> ShareHeartbeatResponse:
        if not request.group_id:
            raise _Refused(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if request.rack_id == "":
            raise _Refused(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
        if request.member_epoch < LEAVE_EPOCH:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"MemberEpoch {request.member_epoch} is invalid.")
        if request.member_epoch != JOIN_EPOCH and not request.member_id:
            raise _Refused(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        if request.member_epoch == JOIN_EPOCH and not request.subscribed_topic_names:
            raise _Refused(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        group_id = request.group_id
        group = self.groups.get(group_id)
        if request.member_epoch == LEAVE_EPOCH:
            if group is None or request.member_id not in group.members:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {request.member_id} is not in group {group_id}.")
            self._remove_member(group, request.member_id, records)
            return ShareHeartbeatResponse(member_id=request.member_id, member_epoch=LEAVE_EPOCH,
                                          heartbeat_interval_ms=self.config.heartbeat_interval_ms)
        if request.member_epoch == JOIN_EPOCH:
            member_id = request.member_id or self._new_member_id()
            member = None if group is None else group.members.get(member_id)
            is_new = member is None
            if is_new and group is not None and len(group.members) >= self.config.max_size:
                raise _Refused(ErrorCode.GROUP_MAX_SIZE_REACHED, f"The group reached its maximum size of {self.config.max_size}.")
            member = member or ShareMember(member_id)
        else:
            member = None if group is None else group.members.get(request.member_id)
            if member is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {request.member_id} is not in group {group_id}.")
            if request.member_epoch not in (member.member_epoch, member.previous_member_epoch):
                raise _Refused(ErrorCode.FENCED_MEMBER_EPOCH,
                               f"Epoch {request.member_epoch} is not the member's {member.member_epoch}.")
            is_new = False
        names = member.subscribed_topic_names if request.subscribed_topic_names is None else tuple(sorted(set(request.subscribed_topic_names)))
        updated = replace(
            member,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            client_id=request.client_id or member.client_id,
            client_host=request.client_host or member.client_host,
            subscribed_topic_names=names,
        )
        if is_new or updated != member:
            self._apply(records, member_metadata_record(group_id, updated))
        group = self.groups[group_id]
        bump = is_new or updated.subscribed_topic_names != member.subscribed_topic_names
        self._refresh(group, records, bump)
        current = group.members[updated.member_id]
        target = group.target.get(current.member_id, NO_PARTITIONS)
        if current.member_epoch != group.assignment_epoch or current.assigned != target:
            current = replace(current, previous_member_epoch=current.member_epoch, member_epoch=group.assignment_epoch, assigned=target)
            self._apply(records, current_assignment_record(group_id, current))
        self._sessions.setdefault(group_id, {})[current.member_id] = now_ms + self.config.session_timeout_ms
        changed = request.member_epoch == JOIN_EPOCH or current.assigned != member.assigned or is_new
        return ShareHeartbeatResponse(
            member_id=current.member_id, member_epoch=current.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=current.assigned if changed else None,
        )

    def _refresh(self, group: ShareGroup, records: list[ShareGroupRecord], bump: bool) -> None:
        """Bump the group epoch when asked or when the subscribed topics changed,
        then compute the target for the new epoch."""
        seen = self._topics_of(group)
        if seen != group.topics_seen:
            group.topics_seen = seen
            bump = True
        if bump:
            self._apply(records, group_epoch_record(group.group_id, group.group_epoch + 1))
        if group.group_epoch <= group.assignment_epoch:
            return
        topics = {name: (topic_id, count) for name, topic_id, count in seen}
        target = simple_assign({m.member_id: m.subscribed_topic_names for m in group.members.values()}, topics)
        for member_id in sorted(target):
            if group.target.get(member_id) != target[member_id]:
                self._apply(records, target_record(group.group_id, member_id, target[member_id]))
        self._apply(records, assignment_epoch_record(group.group_id, group.group_epoch))

    def _remove_member(self, group: ShareGroup, member_id: str, records: list[ShareGroupRecord]) -> None:
        for record in member_removal_records(group.group_id, member_id):
            self._apply(records, record)
        self._sessions.get(group.group_id, {}).pop(member_id, None)
        self._refresh(group, records, bump=True)

    def delete_group(self, group_id: str, reply: Callable[[ErrorCode], None]) -> list[Store]:
        """DeleteGroups of a share group: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP while it
        has members, else the tombstones of its targets, assignment epoch and group
        epoch (its share-partition state is deleted by the caller first)."""
        group = self.groups.get(group_id)
        if group is None or group.members:
            reply(ErrorCode.GROUP_ID_NOT_FOUND if group is None else ErrorCode.NON_EMPTY_GROUP)
            return []
        before = self._before(group_id)
        records: list[ShareGroupRecord] = []
        for member_id in sorted(group.target):
            self._apply(records, ShareGroupRecord(ShareGroupRecordKind.TARGET_ASSIGNMENT_MEMBER, group_id, member_id, None))
        self._apply(records, ShareGroupRecord(ShareGroupRecordKind.TARGET_ASSIGNMENT_METADATA, group_id, None, None))
        self._apply(records, ShareGroupRecord(ShareGroupRecordKind.GROUP_METADATA, group_id, None, None))
        self._sessions.pop(group_id, None)
        return self._store(group_id, before, records, reply)

    # ----------------------------------------------------------------- timers

    def tick(self, now_ms: int) -> list[Store]:
        """Remove the members whose session has ended."""
        effects: list[Store] = []
        for group_id in sorted(self._sessions):
            group = self.groups.get(group_id)
            sessions = self._sessions[group_id]
            gone = sorted(m for m, deadline in sessions.items() if deadline <= now_ms and group is not None and m in group.members)
            if not gone:
                continue
            before = self._before(group_id)
            records: list[ShareGroupRecord] = []
            for member_id in gone:
                self._remove_member(group, member_id, records)
            effects += self._store(group_id, before, records, lambda error: None)
        return effects

    def next_deadline_ms(self) -> int | None:
        return min((d for sessions in self._sessions.values() for d in sessions.values()), default=None)
