"""A KIP-848 consumer group and its members (pure).

A group has an epoch that goes up whenever what the assignment depends on
changes (members, their subscriptions, racks and assignors, the subscribed
topics' partitions), a target assignment computed for one group epoch (the
assignment epoch), and members that each move toward their target at their
own pace: a member's epoch reaches the assignment epoch once it holds its
target minus the partitions others have not released yet.

Partitions are ``(topic id, partition)`` pairs. The group knows which member
holds each partition (assigned or still to revoke): a partition is given to a
new owner only once no one holds it.
"""

from __future__ import annotations

import enum
import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

TopicPartition = tuple[uuid.UUID, int]
Partitions = frozenset[TopicPartition]
NO_PARTITIONS: Partitions = frozenset()

# Member epochs a heartbeat may carry besides the member's own.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberFenced(Exception):
    """The member must give up its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


class MemberState(enum.IntEnum):
    """Values as Kafka writes them in ConsumerGroupCurrentMemberAssignmentValue.State."""

    UNKNOWN = 0
    STABLE = 1
    UNREVOKED_PARTITIONS = 2  # must revoke partitions before it moves on
    UNRELEASED_PARTITIONS = 3  # at the assignment epoch, waiting for partitions others still hold


@dataclass(frozen=True)
class TopicInfo:
    """What the coordinator knows of a topic from the metadata image."""

    topic_id: uuid.UUID
    name: str
    # One entry per partition: the racks of its replicas (empty: unknown).
    partition_racks: tuple[frozenset[str], ...]

    @property
    def partition_count(self) -> int:
        return len(self.partition_racks)


# The subscribed topics' metadata the target assignment was computed from, by name.
SubscriptionMetadata = Mapping[str, TopicInfo]


def subscription_metadata_hash(metadata: SubscriptionMetadata) -> bytes:
    """A digest of ``metadata`` independent of dict order: equal metadata, equal digests."""
    digest = hashlib.sha256()
    for name in sorted(metadata):
        info = metadata[name]
        digest.update(f"{name}\0{info.topic_id}\0{info.partition_count}\0".encode())
        for racks in info.partition_racks:
            digest.update((",".join(sorted(racks)) + ";").encode())
    return digest.digest()


@dataclass(frozen=True)
class ResolvedRegex:
    """What a regular expression subscription matched when the coordinator last
    resolved it: Kafka's ConsumerGroupRegularExpression record."""

    topics: frozenset[str]
    version: int  # the metadata image offset its topics were read at
    timestamp_ms: int


def resolve_regex(regex: str, topic_names: Iterable[str]) -> frozenset[str]:
    """The topics of ``topic_names`` that ``regex`` matches whole (Kafka matches
    with RE2/J; Python's ``re`` agrees on the expressions clients use for topic
    names)."""
    pattern = re.compile(regex)
    return frozenset(name for name in topic_names if pattern.fullmatch(name))


def member_topics(member: ConsumerGroupMember, resolved: Mapping[str, ResolvedRegex]) -> set[str]:
    """The topics ``member`` subscribes to: its names, and what its regular
    expression resolved to; nothing for an expression not resolved yet (Kafka
    resolves them apart from the heartbeat, and a member gets their topics at a
    later heartbeat)."""
    names = set(member.subscribed_topic_names)
    if member.subscribed_topic_regex:
        regex = resolved.get(member.subscribed_topic_regex)
        if regex is not None:
            names |= regex.topics
    return names


@dataclass(frozen=True)
class ClassicMembership:
    """What a member that speaks the classic protocol (JoinGroup, SyncGroup,
    Heartbeat) inside a consumer group keeps of it: Kafka's classicMemberMetadata."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in its order of preference


@dataclass(frozen=True)
class ConsumerGroupMember:
    """One member; replaced (``dataclasses.replace``), never mutated."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: ClassicMembership | None = None  # a classic-protocol member (online upgrade)
    # Reconciliation: the current assignment record.
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Partitions = NO_PARTITIONS
    pending_revocation: Partitions = NO_PARTITIONS

    def metadata_equal(self, other: ConsumerGroupMember) -> bool:
        return (
            self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
            self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor, self.classic,
        ) == (
            other.instance_id, other.rack_id, other.client_id, other.client_host, other.subscribed_topic_names,
            other.subscribed_topic_regex, other.rebalance_timeout_ms, other.server_assignor, other.classic,
        )

    def assignment_equal(self, other: ConsumerGroupMember) -> bool:
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned, self.pending_revocation) == (
            other.member_epoch, other.previous_member_epoch, other.state, other.assigned, other.pending_revocation,
        )


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    # member id -> its target assignment (at assignment_epoch).
    target: dict[str, Partitions] = field(default_factory=dict)
    subscription_metadata: dict[str, TopicInfo] = field(default_factory=dict)
    # regular expression -> what it resolved to, for the expressions members subscribe with.
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    # Derived from members (kept in step by set_member/remove_member):
    owners: dict[TopicPartition, str] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id

    def copy(self) -> ConsumerGroup:
        """A copy to restore if an operation's records are not stored (members are immutable)."""
        return ConsumerGroup(
            self.group_id, self.group_epoch, self.assignment_epoch, dict(self.members), dict(self.target),
            dict(self.subscription_metadata), dict(self.resolved_regexes), dict(self.owners), dict(self.static_members),
        )

    def set_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        for tp in member.assigned | member.pending_revocation:
            self.owners[tp] = member.member_id
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._release(old)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
                del self.static_members[old.instance_id]

    def _release(self, member: ConsumerGroupMember) -> None:
        for tp in member.assigned | member.pending_revocation:
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]

    def owner_other_than(self, tp: TopicPartition, member_id: str) -> str | None:
        owner = self.owners.get(tp)
        return owner if owner is not None and owner != member_id else None

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroupDescribe group states."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def subscribed_topic_names(self) -> set[str]:
        """The topics some member subscribes to, by name or by a resolved regular
        expression (a name may be of a topic that does not exist)."""
        names: set[str] = set()
        for member in self.members.values():
            names |= member_topics(member, self.resolved_regexes)
        return names

    def subscribed_regexes(self) -> set[str]:
        """The regular expressions members subscribe with."""
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}
