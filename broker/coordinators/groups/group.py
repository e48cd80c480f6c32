"""One classic group: its members, generation, protocol and state.

States and their moves (Kafka's classic group state machine)::

    Empty --join--> PreparingRebalance --all joined or rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable | CompletingRebalance --join, leave, expiry, metadata change--> PreparingRebalance
    PreparingRebalance --nobody left when the join completes--> Empty
    Empty --deleted or offsets expired--> Dead

Pure data plus small helpers; :mod:`broker.coordinators.groups.coordinator` drives it.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's order of preference
    assignment: bytes = b""
    # A pending JoinGroup / SyncGroup: the callback that answers it.
    join_reply: Callable | None = None
    sync_reply: Callable | None = None
    heartbeat_deadline_ms: int = 0
    is_new: bool = False  # joined during the current rebalance (leaves at its expiry if it never rejoins)

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1  # when the group last changed state (offset expiry counts from Empty)
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in order of joining
    # Member ids handed out with MEMBER_ID_REQUIRED, waiting for the member's second JoinGroup: id -> deadline.
    pending_members: dict[str, int] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    # Rebalance timing: when the join phase ends, and for the first rebalance of an
    # empty group the rest of the rebalance timeout that more joiners may extend it by.
    join_deadline_ms: int | None = None
    initial_delay_remaining_ms: int = 0
    initial_delay_ms: int = 0
    new_member_joined: bool = False
    in_initial_delay: bool = False
    # After the join phase: members that must send SyncGroup before this deadline.
    sync_deadline_ms: int | None = None
    pending_sync: set[str] = field(default_factory=set)

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = now_ms

    @property
    def is_empty(self) -> bool:
        return not self.members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            # Any remaining member may lead; prefer one that has already rejoined.
            rejoined = [m.member_id for m in self.members.values() if m.join_reply is not None]
            self.leader_id = (rejoined or list(self.members) or [None])[0]
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def candidate_protocols(self, excluding: str | None = None) -> set[str] | None:
        """Protocols every member (but ``excluding``) supports; None when there is no such member."""
        sets = [set(m.protocol_names()) for m in self.members.values() if m.member_id != excluding]
        if not sets:
            return None
        return set.intersection(*sets)

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]], member_id: str | None = None) -> bool:
        if not protocol_type or not protocols:
            return False
        others = self.candidate_protocols(excluding=member_id)
        if others is None:  # nobody else: any protocols do
            return True
        if self.protocol_type is not None and protocol_type != self.protocol_type:
            return False
        return bool(others & {name for name, _ in protocols})

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support;
        the most votes win (ties: the earliest joined member's preference)."""
        candidates = self.candidate_protocols() or set()
        votes: Counter[str] = Counter()
        for member in self.members.values():
            for name in member.protocol_names():
                if name in candidates:
                    votes[name] += 1
                    break
        best = max(votes.values())
        first = next(iter(self.members.values()))
        for name in first.protocol_names():
            if votes.get(name) == best:
                return name
        return min(name for name, count in votes.items() if count == best)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.join_reply is not None for m in self.members.values())

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members of a ``consumer`` group subscribe to (None: unknown)."""
        from protocol.consumer_offsets import decode_subscription_topics

        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            decoded = decode_subscription_topics(member.metadata_for(self.protocol_name))
            if decoded is None:
                return None
            topics |= decoded
        return topics
