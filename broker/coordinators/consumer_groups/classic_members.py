"""Classic-protocol members inside a KIP-848 consumer group: the online upgrade (pure).

Kafka's online migration, the upgrade half (``group.consumer.migration.policy``
``upgrade``): a consumer-protocol member joining a classic group with members
converts it into a consumer group (:meth:`ClassicMembers.convert`). Each
classic member becomes a member of the consumer group with what its JoinGroup
said (its subscription and owned partitions, read from the ``consumer``
protocol metadata; its session timeout and protocols, kept as Kafka's
``classicMemberMetadata`` in its member record) and what its last SyncGroup
gave it: its assignment is its current and target assignment, at the classic
generation, which becomes the group epoch. The group's records replace the
classic group's (whose tombstone is written in the same store).

Classic members then speak their own protocol to the consumer group, which
assigns for them as for any member: JoinGroup brings the member's
subscription and owned partitions and answers at once with its member epoch as
the generation (it leads nothing: the server assigns); SyncGroup answers the
partitions the server's reconciliation gave it; Heartbeat answers
REBALANCE_IN_PROGRESS while the member is behind the group epoch or not yet at
its target (revoking, or waiting for partitions others hold), so it rejoins
and moves one step, as the classic protocol can; LeaveGroup removes it. A
commit is checked against its epoch as a generation (ILLEGAL_GENERATION).

Not served (refused, never pretended): static classic members in a consumer
group (INCONSISTENT_GROUP_PROTOCOL; a classic group with static members is not
converted), and the downgrade back to a classic group when the last
consumer-protocol member leaves (the group stays a consumer group; its classic
members go on in it as above).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from broker.coordinators.consumer_groups.model import (
    NO_PARTITIONS,
    ClassicMembership,
    ConsumerGroupMember,
    MemberFenced,
    MemberState,
    Partitions,
)
from broker.coordinators.consumer_groups.reconciliation import reconcile
from broker.coordinators.consumer_groups.records import (
    assignment_epoch_record,
    current_assignment_record,
    group_epoch_record,
    member_metadata_record,
    subscription_metadata_record,
    target_record,
)
from broker.coordinators.effects import Store
from protocol.consumer_offsets import decode_assignment, decode_subscription, encode_assignment
from protocol.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True)
class ClassicMemberView:
    """A classic group's member, as the conversion reads it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes


@dataclass(frozen=True)
class ClassicGroupView:
    """A Stable classic group of protocol type ``consumer``, as the conversion reads it."""

    group_id: str
    generation_id: int
    protocol_name: str
    members: tuple[ClassicMemberView, ...]


@dataclass(frozen=True)
class ClassicJoin:
    """JoinGroup's request, as a consumer group reads it."""

    group_id: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool


@dataclass(frozen=True)
class ClassicJoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_name: str | None = None


def upgrade_refusal(view: ClassicGroupView, max_size: int) -> str | None:
    """Why the classic group cannot be converted (Kafka's validateOnlineUpgrade, and
    what this broker does not convert), or None."""
    if len(view.members) > max_size:
        return "its size exceeds the consumer group maximum size"
    if any(m.instance_id is not None for m in view.members):
        return "it has static members (not converted by this broker)"
    for member in view.members:
        # Before its first rebalance ends a group has chosen no protocol yet.
        metadata = dict(member.protocols).get(view.protocol_name) if view.protocol_name else member.protocols[0][1]
        if metadata is None or decode_subscription(metadata) is None:
            return f"member {member.member_id}'s subscription does not parse"
        if decode_assignment(member.assignment) is None:
            return f"member {member.member_id}'s assignment does not parse"
    return None


class ClassicMembers:
    """The classic protocol on consumer groups; mixed into ConsumerGroupCoordinator,
    whose records, timers and stores it uses."""

    def _partitions_of(self, by_name) -> Partitions:
        """(topic name, partitions) pairs as (topic id, partition), unknown topics left out."""
        partitions = set()
        for name, numbers in by_name:
            info = self.topics.get(name)
            if info is not None:
                partitions.update((info.topic_id, p) for p in numbers if 0 <= p < info.partition_count)
        return frozenset(partitions)

    def _names_of(self, partitions: Partitions) -> dict[str, list[int]]:
        names = {info.topic_id: name for name, info in self.topics.items()}
        by_name: dict[str, list[int]] = {}
        for topic_id, partition in partitions:
            if topic_id in names:
                by_name.setdefault(names[topic_id], []).append(partition)
        return by_name

    def convert(self, now_ms: int, view: ClassicGroupView, records: list) -> None:
        """The classic group's members as members of a new consumer group (applied
        to ``records``), at the classic generation; Kafka's convertToConsumerGroup."""
        group_id, epoch = view.group_id, view.generation_id
        for classic in view.members:
            subscription = decode_subscription(dict(classic.protocols)[view.protocol_name])
            assigned = self._partitions_of((t.topic, t.partitions) for t in decode_assignment(classic.assignment))
            member = ConsumerGroupMember(
                classic.member_id,
                rack_id=subscription.rack_id or None,
                client_id=classic.client_id,
                client_host=classic.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                rebalance_timeout_ms=classic.rebalance_timeout_ms,
                classic=ClassicMembership(classic.session_timeout_ms, classic.protocols),
                member_epoch=epoch,
                previous_member_epoch=epoch,
                state=MemberState.STABLE,
                assigned=assigned,
            )
            self._apply(records, member_metadata_record(group_id, member))
            self._apply(records, target_record(group_id, member.member_id, assigned))
            self._apply(records, current_assignment_record(group_id, member))
        group = self.groups[group_id]
        self._apply(records, group_epoch_record(group_id, epoch))
        names = group.subscribed_topic_names()
        self._apply(records, subscription_metadata_record(group_id, {n: self.topics[n] for n in names if n in self.topics}))
        self._apply(records, assignment_epoch_record(group_id, epoch))
        for member in group.members.values():
            self._arm_timers(group, member, now_ms, assignment_changed=True)

    # ----------------------------------------------------------------- JoinGroup

    def classic_join(self, now_ms: int, request: ClassicJoin, reply: Callable[[ClassicJoinResult], None]) -> list[Store]:
        """JoinGroup of a classic member to a consumer group (Kafka's
        classicGroupJoinToConsumerGroup); answered at once with its member epoch
        as the generation once what it changed is stored."""
        group = self.groups[request.group_id]

        def refuse(error: ErrorCode, member_id: str = request.member_id) -> list[Store]:
            reply(ClassicJoinResult(error, member_id=member_id))
            return []

        if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not request.protocols or request.instance_id is not None:
            return refuse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        protocol_name, metadata = request.protocols[0]
        subscription = decode_subscription(metadata)
        if subscription is None:
            return refuse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        member_id = request.member_id
        if not member_id:
            member_id = self._new_member_id()
            if request.require_known_member_id:
                return refuse(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        existing = group.members.get(member_id)
        if existing is not None and existing.classic is None:
            return refuse(ErrorCode.UNKNOWN_MEMBER_ID)
        if existing is None and len(group.members) >= self.config.max_size:
            return refuse(ErrorCode.GROUP_MAX_SIZE_REACHED)
        before = self._snapshot(request.group_id)
        records: list = []
        member = existing or ConsumerGroupMember(member_id)
        updated = replace(
            member,
            rack_id=subscription.rack_id or None,
            client_id=request.client_id,
            client_host=request.client_host,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            subscribed_topic_regex=None,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            server_assignor=None,
            classic=ClassicMembership(request.session_timeout_ms, tuple(request.protocols)),
        )
        bump = existing is None or (updated.subscribed_topic_names, updated.rack_id) != (member.subscribed_topic_names, member.rack_id)
        if existing is None or not updated.metadata_equal(member):
            self._apply(records, member_metadata_record(request.group_id, updated))
        self._refresh_group_epoch(group, records, bump)
        self._maybe_compute_target(group, records)
        member = group.members[member_id]
        # What it still owns: a cooperative member lists it, an eager one revoked everything before rejoining.
        owned = self._partitions_of((t.topic, t.partitions) for t in (subscription.owned_partitions or []))
        try:
            reconciled = reconcile(group, member, group.target.get(member_id, NO_PARTITIONS), group.assignment_epoch, owned)
        except MemberFenced:
            if records:
                self._restore(request.group_id, before)
            return refuse(ErrorCode.UNKNOWN_MEMBER_ID)
        if not reconciled.assignment_equal(member):
            self._apply(records, current_assignment_record(request.group_id, reconciled))
        self._arm_timers(group, reconciled, now_ms, assignment_changed=not reconciled.assignment_equal(member))
        result = ClassicJoinResult(ErrorCode.NONE, member_id, reconciled.member_epoch, protocol_name)
        if not records:
            reply(result)
            return []
        return self._store(request.group_id, before, records,
                           lambda error: reply(result if error == ErrorCode.NONE else ClassicJoinResult(error, member_id)))

    # ----------------------------------------------------------------- SyncGroup, Heartbeat, LeaveGroup

    def _classic_member(self, group_id: str, member_id: str, generation_id: int) -> tuple[ErrorCode, ConsumerGroupMember | None]:
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if member is None or member.classic is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, None
        if generation_id != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION, None
        return ErrorCode.NONE, member

    def classic_sync(self, now_ms: int, group_id: str, generation_id: int, member_id: str, protocol_type: str | None,
                     protocol_name: str | None) -> tuple[ErrorCode, str | None, bytes]:
        """SyncGroup: (error, protocol name, the member's assignment as the
        ``consumer`` protocol encodes it). The assignments a client sends are
        ignored: the server assigns."""
        error, member = self._classic_member(group_id, member_id, generation_id)
        if member is None:
            return error, None, b""
        if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, None, b""
        names = [name for name, _ in member.classic.protocols]
        if protocol_name is not None and protocol_name not in names:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, None, b""
        self._arm_timers(self.groups[group_id], member, now_ms, assignment_changed=False)
        return ErrorCode.NONE, protocol_name or names[0], encode_assignment(self._names_of(member.assigned))

    def classic_heartbeat(self, now_ms: int, group_id: str, generation_id: int, member_id: str) -> ErrorCode:
        """Heartbeat: a fresh session; REBALANCE_IN_PROGRESS while the member must
        rejoin to move toward its target."""
        error, member = self._classic_member(group_id, member_id, generation_id)
        if member is None:
            return error
        group = self.groups[group_id]
        self._arm_timers(group, member, now_ms, assignment_changed=False)
        if member.state != MemberState.STABLE or member.member_epoch < group.group_epoch:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def classic_leave(self, now_ms: int, group_id: str, leaving: list[tuple[str, str | None]],
                      reply: Callable[[tuple[ErrorCode, list[ErrorCode]]], None]) -> list[Store]:
        """LeaveGroup of classic members: each leaves as a consumer-protocol member does."""
        group = self.groups.get(group_id)
        if group is None:
            reply((ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)))
            return []
        before = self._snapshot(group_id)
        records: list = []
        errors = []
        for member_id, _instance_id in leaving:
            member = group.members.get(member_id)
            if member is None or member.classic is None:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            self._remove_member(group, member_id, records)
            errors.append(ErrorCode.NONE)
        if not records:
            reply((ErrorCode.NONE, errors))
            return []
        return self._store(group_id, before, records,
                           lambda error: reply((error, errors if error == ErrorCode.NONE else [])))
