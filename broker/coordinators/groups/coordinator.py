"""The classic group coordinator: membership, rebalances and committed offsets.

Longer than ~700 lines on purpose: the join, sync, heartbeat, leave and
offset paths (transactional ones included) share one set of generation and
timer invariants, which a split by request would spread over modules that all
mutate the same group. The pending transactional offsets themselves are kept
by :mod:`broker.coordinators.groups.pending_offsets`.

Pure and single-threaded: every operation takes ``now_ms``, timers are
deadlines kept in the groups and fired by :meth:`GroupCoordinator.tick`, and
requests pass a ``reply`` callback that is called exactly once, maybe at
once, maybe from a later operation or tick (JoinGroup waits until the
rebalance's join phase ends, SyncGroup until the leader's assignment arrives).
What must survive a restart is returned as :class:`~broker.coordinators.effects.Store`
effects of ``__consumer_offsets`` records, in the order they must be appended,
before anyone is told it succeeded: an operation whose answer or state depends
on the append's outcome gives its store a token, and the rest of it runs when
the shell reports that outcome with :meth:`GroupCoordinator.store_done`. The
shell reports it at once, before it runs any other operation (then waits for
the in-sync replicas before it answers), so the coordinator never sees a
second request while a store's outcome is open.

Kafka's rules followed here, in brief:

- JoinGroup v4+ from an unknown dynamic member answers MEMBER_ID_REQUIRED with
  a fresh id, which the member must join with within its session timeout.
- The first rebalance of an empty group waits ``group.initial.rebalance.delay.ms``,
  extended by the same delay while new members keep arriving, up to the
  rebalance timeout. Later join phases end when every member has rejoined, or
  at the rebalance timeout, when dynamic members that did not rejoin are dropped.
- The protocol is chosen by the members' votes among the protocols all support.
- Members that do not heartbeat (or join, or sync) within their session timeout
  are removed; members that do not send SyncGroup within the rebalance timeout
  after the join phase are removed and the group rebalances.
- A static member (``group.instance.id``) that rejoins with an unknown member
  id takes over its old id's place; in a Stable group whose protocol its
  protocols leave unchanged that needs no rebalance (the leader is told to skip
  the assignment, v9+, or is not told it leads). An old id of a replaced
  member is fenced.
- Offsets: a group that does not use the coordinator (generation -1) may commit
  while it has no members; otherwise the member id and generation must match.
  Offsets of an empty group expire ``offsets.retention.minutes`` after it
  became empty; an empty group with no offsets left is removed.
- Transactional offsets (TxnOffsetCommit) are stored with the producer's id
  and epoch (one transactional batch) and stay pending until the transaction's
  marker lands in the group's partition (:meth:`GroupCoordinator.complete_transaction`):
  COMMIT makes them the committed offsets unless a plain commit of the same
  partition was written after them, ABORT drops them. A commit without
  membership (generation -1, no member id: clients before KIP-447) is accepted
  whatever the group's state; one with membership must match it, but a group
  in CompletingRebalance does not refuse it. A tombstone of a partition (offset
  deletion, group deletion, a deleted topic) drops its pending offsets too; a
  partition with pending offsets does not expire, and a group with any is not
  removed by expiry.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from broker.coordinators.effects import Record, Store
from broker.coordinators.groups.group import ClassicGroup, GroupState, Member
from broker.coordinators.groups.pending_offsets import PendingOffset, PendingTxnOffsets
from protocol.consumer_offsets import (
    GROUP_VALUE_CLASS,
    GroupKey,
    GroupMember,
    OffsetAndMetadata,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_key_bytes,
    group_value_bytes,
    offset_key_bytes,
    offset_value_bytes,
    partition_for_group,
)
from protocol.errors import ErrorCode

Reply = Callable[[object], None]
# What an operation does once its store's outcome is known (the client's error, or NONE).
StoreDone = Callable[[ErrorCode], None]


class _WhenAllStored:
    """Calls ``finish`` once the operation has planned its stores (``close``) and
    each store it expects has its outcome (``done``)."""

    def __init__(self, finish: Callable[[], None]):
        self._finish = finish
        self._open = 1

    def expect(self) -> None:
        self._open += 1

    def done(self) -> None:
        self._open -= 1
        if self._open == 0:
            self._finish()

    close = done


class _Count:
    """How many offsets an operation's stores removed, answered once every
    outcome is known."""

    def __init__(self, reply: Reply):
        self.total = 0
        self._answer = _WhenAllStored(lambda: reply(self.total))

    def expect(self) -> None:
        self._answer.expect()

    def add(self, count: int) -> None:
        self.total += count
        self._answer.done()

    def all_planned(self) -> None:
        self._answer.close()


@dataclass(frozen=True)
class GroupConfig:
    offsets_partitions: int = 50
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000


@dataclass
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool = True
    # JoinGroup v9+ (KIP-814): a static leader rejoining a Stable group may be told to skip the assignment.
    supports_skip_assignment: bool = True


@dataclass
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: list[MemberSummary]


@dataclass
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


def _take_join_fields(member: Member, request: JoinRequest) -> None:
    """What a member's JoinGroup says about it replaces what the group knew."""
    member.protocols = list(request.protocols)
    member.session_timeout_ms = request.session_timeout_ms
    member.rebalance_timeout_ms = request.rebalance_timeout_ms
    member.client_id = request.client_id
    member.client_host = request.client_host


class GroupCoordinator:
    def __init__(self, config: GroupConfig, new_member_id: Callable[[str], str],
                 is_consumer_group: Callable[[str], bool] = lambda group_id: False,
                 wall_clock_ms: Callable[[], int] | None = None):
        self.config = config
        # ``now_ms`` times sessions and rebalances; a group's state timestamp is
        # written to its record and compared with offset commit timestamps
        # (offsets.retention), so it is wall-clock time, as in Kafka. Without a
        # wall clock (tests) it is ``now_ms`` too.
        self._wall_clock_ms = wall_clock_ms
        self._new_member_id = new_member_id
        # A KIP-848 consumer group has this id (its own coordinator has it): its
        # offsets are kept here, but no classic group is made of them.
        self._is_consumer_group = is_consumer_group
        # The stores of the running operation, and what waits for their outcomes.
        self._effects: list[Store] = []
        self._store_waiters: dict[int, StoreDone] = {}
        self._tokens = itertools.count(1)
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.pending = PendingTxnOffsets()
        # The write position (see broker.coordinators.groups.pending_offsets) of each committed
        # offset's record: a transaction's commit keeps a newer plain commit.
        self._committed_positions: dict[str, dict[tuple[str, int], int]] = {}
        self._write_positions = itertools.count()
        self._loaded_group_values: dict[str, object] = {}

    # ----------------------------------------------------------------- persistence


    def _stamp(self, now_ms: int) -> int:
        """A group state timestamp: wall-clock time (see __init__)."""
        return now_ms if self._wall_clock_ms is None else self._wall_clock_ms()
    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.config.offsets_partitions)

    def _group_value(self, group: ClassicGroup):
        return GROUP_VALUE_CLASS(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id if group.members else None,
            current_state_timestamp=group.state_timestamp_ms,
            members=[
                GroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata_for(group.protocol_name),
                    assignment=m.assignment,
                )
                for m in group.members.values()
            ],
        )

    def _store(self, partition: int, records: list[Record], then: StoreDone | None = None, producer: tuple[int, int] = (-1, -1)) -> None:
        """Plan the append of ``records``; ``then`` runs with its outcome."""
        token = None
        if then is not None:
            token = next(self._tokens)
            self._store_waiters[token] = then
        producer_id, producer_epoch = producer
        self._effects.append(Store(partition, -1, tuple(records), token, producer_id=producer_id, producer_epoch=producer_epoch))

    def _take_effects(self) -> list[Store]:
        effects, self._effects = self._effects, []
        return effects

    def store_done(self, token: int, error: ErrorCode) -> list[Store]:
        """The outcome of a store with ``token`` (NONE, or the error the client is
        told): the operation that planned it goes on. Returns the stores that follow."""
        self._store_waiters.pop(token)(error)
        return self._take_effects()

    def _store_group(self, group: ClassicGroup, then: StoreDone | None = None) -> None:
        key, value = group_key_bytes(group.group_id), group_value_bytes(self._group_value(group))
        self._store(self.partition_for(group.group_id), [(key, value)], then)

    def load_record(self, key: bytes, value: bytes | None, producer_id: int = -1) -> None:
        """Replay one ``__consumer_offsets`` record (in log order) while loading a
        partition; ``producer_id`` is that of a transactional batch (-1: not one).
        The partition's transaction markers are replayed with :meth:`complete_transaction`."""
        decoded = decode_key(key)
        if isinstance(decoded, OffsetKey):
            tp = (decoded.topic, decoded.partition)
            if value is None:
                self._forget_offset(decoded.group, tp)
            elif producer_id >= 0:
                self.pending.add(producer_id, decoded.group, tp, PendingOffset(decode_offset_value(value), next(self._write_positions)))
            else:
                self._set_committed(decoded.group, tp, decode_offset_value(value), next(self._write_positions))
        elif isinstance(decoded, GroupKey):
            self._loaded_group_values[decoded.group] = None if value is None else decode_group_value(value)

    def finish_loading(self, now_ms: int) -> None:
        """Build the groups from what was replayed; members get a fresh session timeout."""
        for group_id, value in self._loaded_group_values.items():
            if value is None or self._is_consumer_group(group_id):
                # A consumer group took over the id of an empty classic group.
                continue
            group = ClassicGroup(group_id)
            group.generation_id = value.generation
            group.protocol_type = value.protocol_type or None
            group.protocol_name = value.protocol
            for m in value.members:
                member = Member(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    session_timeout_ms=m.session_timeout,
                    rebalance_timeout_ms=m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout,
                    protocol_type=group.protocol_type or "",
                    protocols=[(value.protocol or "", m.subscription)],
                    assignment=m.assignment,
                    heartbeat_deadline_ms=now_ms + m.session_timeout,
                )
                group.add(member)
            group.leader_id = value.leader if value.leader in group.members else group.leader_id
            state = GroupState.STABLE if group.members else GroupState.EMPTY
            group.transition(state, value.current_state_timestamp if value.current_state_timestamp >= 0 else self._stamp(now_ms))
            self.groups[group_id] = group
        self._loaded_group_values.clear()
        for group_id in [g for g, offsets in self.offsets.items() if not offsets]:
            del self.offsets[group_id]
            self._committed_positions.pop(group_id, None)
        # A group known only by its offsets (or by offsets of a transaction still
        # open) is a simple group, as Kafka makes one on replay.
        for group_id in [*self.offsets, *self.pending.group_ids()]:
            if group_id not in self.groups and not self._is_consumer_group(group_id):
                group = ClassicGroup(group_id)
                group.transition(GroupState.EMPTY, self._stamp(now_ms))
                self.groups[group_id] = group

    # ----------------------------------------------------------------- JoinGroup

    def join_group(self, now_ms: int, request: JoinRequest, reply: Reply) -> list[Store]:
        created = False
        group = self.groups.get(request.group_id)
        error = self._validate_join(request, group)
        if error is None and group is None:
            group = ClassicGroup(request.group_id)
            group.transition(GroupState.EMPTY, self._stamp(now_ms))
            self.groups[request.group_id] = group
            created = True
        if error is not None:
            reply(JoinResult(error, member_id=request.member_id))
        elif request.member_id == "":
            if self._join_unknown_member(now_ms, group, request, reply):
                # A static member took over its old id's place in an existing group:
                # the rest of the join runs once that is stored.
                return self._take_effects()
        else:
            self._join_known_member(now_ms, group, request, reply)
        if created and group.is_(GroupState.EMPTY) and group.is_empty and not group.pending_members:
            # A group that a failed first join would leave behind, empty.
            del self.groups[request.group_id]
        elif group is not None:
            self._fire_group_timers(group, now_ms)
        return self._take_effects()

    def _validate_join(self, request: JoinRequest, group: ClassicGroup | None) -> ErrorCode | None:
        if not request.group_id:
            return ErrorCode.INVALID_GROUP_ID
        if group is None and request.member_id:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not self.config.min_session_timeout_ms <= request.session_timeout_ms <= self.config.max_session_timeout_ms:
            return ErrorCode.INVALID_SESSION_TIMEOUT
        if group is not None and group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if not request.protocol_type or not request.protocols:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if group is not None and not group.is_empty:
            member_id = request.member_id or None
            if group.protocol_type != request.protocol_type or not group.supports(request.protocol_type, request.protocols, member_id):
                return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _group_full(self, group: ClassicGroup) -> bool:
        return len(group.members) + len(group.pending_members) >= self.config.max_size

    def _join_unknown_member(self, now_ms: int, group: ClassicGroup, request: JoinRequest, reply: Reply) -> bool:
        """True when the join goes on once a store's outcome is known."""
        new_id = self._new_member_id(request.group_instance_id or request.client_id)
        if request.group_instance_id is not None:
            old_id = group.static_members.get(request.group_instance_id)
            if old_id is not None:
                return self._replace_static_member(now_ms, group, request, old_id, new_id, reply)
        if self._group_full(group):
            reply(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED))
            return False
        if request.group_instance_id is None and request.require_known_member_id:
            group.pending_members[new_id] = now_ms + request.session_timeout_ms
            reply(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id))
            return False
        self._add_member_and_rebalance(now_ms, group, request, new_id, reply)
        return False

    def _join_known_member(self, now_ms: int, group: ClassicGroup, request: JoinRequest, reply: Reply) -> None:
        member_id = request.member_id
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            if self._group_full(group):
                reply(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=member_id))
                return
            self._add_member_and_rebalance(now_ms, group, request, member_id, reply)
            return
        error = self._member_error(group, member_id, request.group_instance_id)
        if error is not None:
            reply(JoinResult(error, member_id=member_id))
            return
        member = group.members[member_id]
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._update_member(member, request, reply)
            self._maybe_complete_join(group, now_ms)
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            if member.same_protocols(request.protocols):
                # A repeated JoinGroup (say, a retry after a lost response): answer it again.
                reply(self._join_result(group, member))
            else:
                self._update_member(member, request, reply)
                self._prepare_rebalance(group, now_ms)
        elif group.is_(GroupState.STABLE):
            if member_id == group.leader_id or not member.same_protocols(request.protocols):
                # The leader rejoins to make the group reassign (say, for new partitions).
                self._update_member(member, request, reply)
                self._prepare_rebalance(group, now_ms)
            else:
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
                reply(self._join_result(group, member))
        else:
            reply(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))

    def _member_error(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> ErrorCode | None:
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def _update_member(self, member: Member, request: JoinRequest, reply: Reply) -> None:
        if member.join_reply is not None and member.join_reply is not reply:
            # A second JoinGroup while the first still waits: the first is superseded.
            member.join_reply(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        _take_join_fields(member, request)
        member.join_reply = reply

    def _add_member_and_rebalance(self, now_ms: int, group: ClassicGroup, request: JoinRequest, member_id: str, reply: Reply) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=list(request.protocols),
            join_reply=reply,
            heartbeat_deadline_ms=now_ms + request.session_timeout_ms,
            is_new=True,
        )
        group.add(member)
        group.new_member_joined = True
        self._maybe_prepare_rebalance(group, now_ms)

    def _replace_static_member(self, now_ms: int, group: ClassicGroup, request: JoinRequest, old_id: str, new_id: str, reply: Reply) -> bool:
        old = group.members[old_id]
        if old.join_reply is not None:
            old.join_reply(JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id))
            old.join_reply = None
        if old.sync_reply is not None:
            old.sync_reply(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
            old.sync_reply = None
        previous_leader = group.leader_id
        member = group.replace_static_member(request.group_instance_id, old_id, new_id)
        saved = (member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms, member.client_id, member.client_host)
        _take_join_fields(member, request)
        member.heartbeat_deadline_ms = now_ms + request.session_timeout_ms
        # As Kafka: in a Stable group the assignment stands unless the member's new
        # protocols change the group's protocol; its subscription bytes may differ
        # (a restarted cooperative member owns no partitions yet).
        if group.is_(GroupState.STABLE) and group.select_protocol() == group.protocol_name:

            def stored(error: ErrorCode) -> None:
                if error != ErrorCode.NONE:
                    (member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms, member.client_id, member.client_host) = saved
                    group.replace_static_member(request.group_instance_id, new_id, old_id)
                    reply(JoinResult(error, member_id=""))
                else:
                    result = self._join_result(group, member)
                    if request.supports_skip_assignment:
                        # JoinGroup v9+: the leader is told it leads, and not to assign.
                        result.skip_assignment = new_id == group.leader_id
                    else:
                        # Before v9 a rejoining leader must not think it leads (it would assign,
                        # and a Stable group ignores that assignment): it is told the leader it
                        # replaced, with no members.
                        result.members = []
                        result.leader = previous_leader or ""
                    reply(result)
                self._fire_group_timers(group, now_ms)  # what join_group does after every join

            self._store_group(group, stored)
            return True
        self._update_member(member, request, reply)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group, now_ms)
        else:
            self._prepare_rebalance(group, now_ms)
        return False

    def _join_result(self, group: ClassicGroup, member: Member) -> JoinResult:
        members = []
        if member.member_id == group.leader_id:
            members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name)) for m in group.members.values()]
        return JoinResult(
            ErrorCode.NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=members,
        )

    # ----------------------------------------------------------------- rebalance phases

    def _maybe_prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, now_ms)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group, now_ms)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # The assignment being computed is void: whoever waits for it must rejoin.
            for member in group.members.values():
                member.assignment = b""
                if member.sync_reply is not None:
                    member.sync_reply(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
                    member.sync_reply = None
        group.sync_deadline_ms = None
        group.pending_sync.clear()
        rebalance_timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if group.is_(GroupState.EMPTY):
            delay_ms = self.config.initial_rebalance_delay_ms
            group.in_initial_delay = True
            group.new_member_joined = False
            group.initial_delay_ms = delay_ms
            group.initial_delay_remaining_ms = max(rebalance_timeout_ms - delay_ms, 0)
            group.join_deadline_ms = now_ms + delay_ms
        else:
            group.in_initial_delay = False
            group.join_deadline_ms = now_ms + rebalance_timeout_ms
        group.transition(GroupState.PREPARING_REBALANCE, self._stamp(now_ms))
        self._maybe_complete_join(group, now_ms)

    def _maybe_complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        if group.is_(GroupState.PREPARING_REBALANCE) and not group.in_initial_delay and group.all_members_joined():
            self._complete_join(group, now_ms)

    def _complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        group.join_deadline_ms = None
        group.in_initial_delay = False
        # Ids handed out with MEMBER_ID_REQUIRED stay valid until their own deadline
        # (Kafka keeps pendingMembers across generations): the member may still join
        # with its id, and that join starts the next rebalance.
        for member in list(group.members.values()):
            # Dynamic members that did not rejoin in time are gone; static ones keep
            # their place until their session times out.
            if member.join_reply is None and member.group_instance_id is None:
                group.remove(member.member_id)
        group.generation_id += 1
        if group.is_empty:
            group.protocol_name = None
            group.transition(GroupState.EMPTY, self._stamp(now_ms))
            # No one waits for this outcome: if the store fails, the previous
            # generation's record stands; it is rewritten at the next change.
            self._store_group(group)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members or group.members[group.leader_id].join_reply is None:
            rejoined = [m.member_id for m in group.members.values() if m.join_reply is not None]
            group.leader_id = (rejoined or list(group.members))[0]
        group.transition(GroupState.COMPLETING_REBALANCE, self._stamp(now_ms))
        group.pending_sync = set(group.members)
        group.sync_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in group.members.values())
        for member in group.members.values():
            member.is_new = False
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            if member.join_reply is not None:
                join_reply, member.join_reply = member.join_reply, None
                join_reply(self._join_result(group, member))

    # ----------------------------------------------------------------- SyncGroup

    def sync_group(
        self,
        now_ms: int,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        reply: Reply,
    ) -> list[Store]:
        self._sync_group(now_ms, group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name, assignments, reply)
        return self._take_effects()

    def _sync_group(
        self,
        now_ms: int,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        reply: Reply,
    ) -> None:
        group = self.groups.get(group_id)
        if group is None:
            reply(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if group.is_(GroupState.DEAD):
            reply(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        error = self._member_error(group, member_id, group_instance_id)
        if error is None and generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if error is None and (
            (protocol_type is not None and protocol_type != group.protocol_type)
            or (protocol_name is not None and protocol_name != group.protocol_name)
        ):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is None and group.is_(GroupState.PREPARING_REBALANCE):
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not None:
            reply(SyncResult(error))
            return
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline_ms = None
        if group.is_(GroupState.STABLE):
            reply(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
            return
        # CompletingRebalance: wait for the leader's assignment.
        if member.sync_reply is not None and member.sync_reply is not reply:
            member.sync_reply(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_reply = reply
        if member_id != group.leader_id:
            return
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        # Stored as Stable; the group goes back to where it was if that fails.
        previous = (group.state, group.state_timestamp_ms)
        group.transition(GroupState.STABLE, self._stamp(now_ms))

        def stored(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                group.state, group.state_timestamp_ms = previous
                for m in group.members.values():
                    m.assignment = b""
                    if m.sync_reply is not None:
                        m.sync_reply(SyncResult(error))
                        m.sync_reply = None
                self._prepare_rebalance(group, now_ms)
                return
            for m in group.members.values():
                if m.sync_reply is not None:
                    sync_reply, m.sync_reply = m.sync_reply, None
                    m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
                    sync_reply(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, m.assignment))

        self._store_group(group, stored)

    # ----------------------------------------------------------------- Heartbeat and LeaveGroup

    def heartbeat(self, now_ms: int, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._member_error(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, now_ms: int, group_id: str, leaving: list[tuple[str, str | None]], reply: Reply) -> list[Store]:
        """``leaving`` is (member id, group instance id) pairs; a static member may
        leave by instance id alone (empty member id). ``reply`` gets the group error
        and one error per member."""
        reply(self._leave_group(now_ms, group_id, leaving))
        return self._take_effects()

    def _leave_group(self, now_ms: int, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        errors = []
        for member_id, instance_id in leaving:
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != known:
                    errors.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            if member_id in group.pending_members:
                del group.pending_members[member_id]
                errors.append(ErrorCode.NONE)
                self._maybe_complete_join(group, now_ms)
                continue
            if member_id not in group.members:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            self._remove_member_and_update(group, member_id, now_ms)
            errors.append(ErrorCode.NONE)
        return ErrorCode.NONE, errors

    def _remove_member_and_update(self, group: ClassicGroup, member_id: str, now_ms: int) -> None:
        member = group.remove(member_id)
        if member is None:
            return
        if member.join_reply is not None:
            member.join_reply(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
            member.join_reply = None
        if member.sync_reply is not None:
            member.sync_reply(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
            member.sync_reply = None
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group, now_ms)

    # ----------------------------------------------------------------- timers

    def tick(self, now_ms: int) -> list[Store]:
        for group in list(self.groups.values()):
            self._fire_group_timers(group, now_ms)
        return self._take_effects()

    def _fire_group_timers(self, group: ClassicGroup, now_ms: int) -> None:
        for member_id, deadline_ms in list(group.pending_members.items()):
            if deadline_ms <= now_ms:
                del group.pending_members[member_id]
                self._maybe_complete_join(group, now_ms)
        for member in list(group.members.values()):
            waiting = member.join_reply is not None or member.sync_reply is not None
            if not waiting and member.heartbeat_deadline_ms <= now_ms and member.member_id in group.members:
                self._remove_member_and_update(group, member.member_id, now_ms)
        if group.is_(GroupState.PREPARING_REBALANCE) and group.join_deadline_ms is not None and group.join_deadline_ms <= now_ms:
            if group.in_initial_delay and group.new_member_joined and group.initial_delay_remaining_ms > 0:
                delay_ms = min(group.initial_delay_ms, group.initial_delay_remaining_ms)
                group.initial_delay_remaining_ms -= delay_ms
                group.new_member_joined = False
                group.join_deadline_ms = now_ms + delay_ms
            else:
                self._complete_join(group, now_ms)
        if group.sync_deadline_ms is not None and group.sync_deadline_ms <= now_ms:
            group.sync_deadline_ms = None
            if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and group.pending_sync:
                for member_id in list(group.pending_sync):
                    member = group.remove(member_id)
                    if member is not None and member.sync_reply is not None:
                        member.sync_reply(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
                group.pending_sync.clear()
                self._prepare_rebalance(group, now_ms)

    def next_deadline_ms(self, group_ids: Iterable[str] | None = None) -> int | None:
        """The earliest deadline of the given groups (default: all)."""
        deadlines = []
        groups = self.groups.values() if group_ids is None else [self.groups[g] for g in group_ids if g in self.groups]
        for group in groups:
            if group.join_deadline_ms is not None:
                deadlines.append(group.join_deadline_ms)
            if group.sync_deadline_ms is not None:
                deadlines.append(group.sync_deadline_ms)
            deadlines.extend(group.pending_members.values())
            for member in group.members.values():
                if member.join_reply is None and member.sync_reply is None:
                    deadlines.append(member.heartbeat_deadline_ms)
        return min(deadlines, default=None)

    def shutdown(self) -> None:
        """Answer every waiting request: this broker no longer coordinates."""
        for group in self.groups.values():
            self._answer_waiting(group, ErrorCode.NOT_COORDINATOR)

    @staticmethod
    def _answer_waiting(group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            if member.join_reply is not None:
                member.join_reply(JoinResult(error, member_id=member.member_id))
                member.join_reply = None
            if member.sync_reply is not None:
                member.sync_reply(SyncResult(error))
                member.sync_reply = None

    def unload_partition(self, partition: int) -> int:
        """Forget the groups and offsets kept in one ``__consumer_offsets`` partition
        (this broker stopped leading it): waiting requests are answered
        NOT_COORDINATOR and the clients find the new coordinator. Returns how many
        groups were dropped."""
        dropped = [g for g in self.groups if self.partition_for(g) == partition]
        for group_id in dropped:
            self._answer_waiting(self.groups.pop(group_id), ErrorCode.NOT_COORDINATOR)
        for group_id in [g for g in self.offsets if self.partition_for(g) == partition]:
            del self.offsets[group_id]
            self._committed_positions.pop(group_id, None)
        # Pending transactional offsets come back from the log at the next load.
        self.pending.discard_groups([g for g in self.pending.group_ids() if self.partition_for(g) == partition])
        for group_id in [g for g in self._loaded_group_values if self.partition_for(g) == partition]:
            del self._loaded_group_values[group_id]
        return len(dropped)

    # ----------------------------------------------------------------- offsets

    def _set_committed(self, group_id: str, tp: tuple[str, int], offset: OffsetAndMetadata, position: int) -> None:
        self.offsets.setdefault(group_id, {})[tp] = offset
        self._committed_positions.setdefault(group_id, {})[tp] = position

    def _forget_offset(self, group_id: str, tp: tuple[str, int]) -> None:
        """What a tombstone of the partition does: its committed offset and every
        pending transactional one go."""
        committed = self.offsets.get(group_id)
        if committed is not None:
            committed.pop(tp, None)
        positions = self._committed_positions.get(group_id)
        if positions is not None:
            positions.pop(tp, None)
        self.pending.discard(group_id, tp)

    def _accept_metadata(self, offsets: dict[tuple[str, int], OffsetAndMetadata]):
        """(errors of partitions whose metadata is too long, the other offsets)."""
        results: dict[tuple[str, int], ErrorCode] = {}
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        for tp, offset in offsets.items():
            if offset.metadata is not None and len(offset.metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                accepted[tp] = offset
        return results, accepted

    def commit_offsets(
        self,
        now_ms: int,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
        reply: Reply,
    ) -> list[Store]:
        """OffsetCommit; ``reply`` gets the error of each partition."""
        group = self.groups.get(group_id)
        error = None
        if group is None:
            if generation_id >= 0:
                # A member of a generation the coordinator does not know (any more).
                error = ErrorCode.ILLEGAL_GENERATION
        elif group.is_(GroupState.DEAD):
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif generation_id < 0 and group.is_(GroupState.EMPTY):
            pass  # the group does not use the coordinator for membership
        else:
            error = self._member_error(group, member_id, group_instance_id)
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            if error is None and group.is_(GroupState.COMPLETING_REBALANCE):
                error = ErrorCode.REBALANCE_IN_PROGRESS
            if error is None:
                member = group.members[member_id]
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if error is not None:
            reply({tp: error for tp in offsets})
            return []
        return self._store_offsets(
            now_ms, group_id, offsets, reply,
            lambda tp, offset, position: self._set_committed(group_id, tp, offset, position),
        )

    def _store_offsets(
        self,
        now_ms: int,
        group_id: str,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
        reply: Reply,
        record: Callable[[tuple[str, int], OffsetAndMetadata, int], None],
        producer: tuple[int, int] = (-1, -1),
    ) -> list[Store]:
        """The part OffsetCommit and TxnOffsetCommit share once their checks pass:
        store the offsets whose metadata fits, and once stored make the group if
        it is unknown (as Kafka: a commit without membership to an unknown group
        makes a simple group) and ``record`` each offset at its write position
        (committed, or pending its transaction); then answer."""
        results, accepted = self._accept_metadata(offsets)
        if not accepted:
            reply(results)
            return []
        unknown_group = group_id not in self.groups

        def stored(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                reply({tp: results.get(tp, error) for tp in offsets})
                return
            if unknown_group and not self._is_consumer_group(group_id):
                self._new_simple_group(group_id, now_ms)
            for tp, offset in accepted.items():
                record(tp, offset, next(self._write_positions))
            results.update({tp: ErrorCode.NONE for tp in accepted})
            reply(results)

        records = [(offset_key_bytes(OffsetKey(group_id, t, p)), offset_value_bytes(o)) for (t, p), o in accepted.items()]
        self._store(self.partition_for(group_id), records, stored, producer=producer)
        return self._take_effects()

    def commit_consumer_group_offsets(
        self, now_ms: int, group_id: str, offsets: dict[tuple[str, int], OffsetAndMetadata], reply: Reply
    ) -> list[Store]:
        """OffsetCommit to a consumer group, whose coordinator checked the member."""
        return self._store_offsets(
            now_ms, group_id, offsets, reply,
            lambda tp, offset, position: self._set_committed(group_id, tp, offset, position),
        )

    def forget_empty_group(self, group_id: str) -> None:
        """A classic group whose id a consumer group took: an empty one, or a Stable
        one converted by the online upgrade, whose members the consumer group has
        now (its offsets stay)."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.transition(GroupState.DEAD, 0)

    def _new_simple_group(self, group_id: str, now_ms: int) -> None:
        group = ClassicGroup(group_id)
        group.transition(GroupState.EMPTY, self._stamp(now_ms))
        self.groups[group_id] = group

    def commit_transactional_offsets(
        self,
        now_ms: int,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
        reply: Reply,
    ) -> list[Store]:
        """TxnOffsetCommit: store ``offsets`` as one transactional batch of the
        producer; they stay pending until :meth:`complete_transaction`. ``reply``
        gets the error of each partition; a refused request changes nothing."""
        group = self.groups.get(group_id)
        if not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        elif producer_id < 0:
            # No transaction can have this producer id (Kafka's transaction
            # verification answers so for an id its transactional id does not have).
            error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        elif producer_epoch < 0:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        else:
            error = self._txn_commit_error(group, generation_id, member_id, group_instance_id)
        if error is not None:
            reply({tp: error for tp in offsets})
            return []
        return self._store_offsets(
            now_ms, group_id, offsets, reply,
            lambda tp, offset, position: self.pending.add(producer_id, group_id, tp, PendingOffset(offset, position)),
            producer=(producer_id, producer_epoch),
        )

    def _txn_commit_error(self, group: ClassicGroup | None, generation_id: int, member_id: str, instance_id: str | None) -> ErrorCode | None:
        if group is None:
            return None if generation_id < 0 else ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self._member_error(group, member_id, instance_id)
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            return error
        # TxnOffsetCommit v0-2 carries no membership: accepted in any state, as in Kafka.
        return None

    def complete_transaction(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker of ``producer_id`` landed in ``offsets_partition``
        (or was replayed from it): its pending offsets of that partition's groups
        become committed (COMMIT; a plain commit written after one keeps its place)
        or are dropped (ABORT). A marker with nothing pending changes nothing, so a
        repeated marker is harmless."""
        taken = self.pending.take(producer_id, lambda group_id: self.partition_for(group_id) == offsets_partition)
        if not commit:
            return
        for group_id, offsets in taken.items():
            committed = self.offsets.get(group_id, {})
            positions = self._committed_positions.get(group_id, {})
            for tp, pending in offsets.items():
                if tp not in committed or positions.get(tp, -1) < pending.write_position:
                    self._set_committed(group_id, tp, pending.offset, pending.write_position)
            if group_id not in self.groups and not self._is_consumer_group(group_id):
                # Kept while its commit was pending, so only while loading (where
                # finish_loading puts the stored group in its place) is it missing.
                self.groups[group_id] = ClassicGroup(group_id)

    def has_pending_offsets(self, group_id: str, tp: tuple[str, int]) -> bool:
        """A transactional commit of the partition waits for its transaction to end."""
        return self.pending.has(group_id, tp)

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None) -> list[tuple[str, int, OffsetAndMetadata | None]]:
        """Committed offsets of the group (None: not committed); ``partitions`` None means all."""
        committed = self.offsets.get(group_id, {})
        if partitions is None:
            return [(t, p, o) for (t, p), o in sorted(committed.items())]
        return [(t, p, committed.get((t, p))) for t, p in partitions]

    def delete_consumer_group_offsets(
        self, group_id: str, partitions: list[tuple[str, int]], subscribed_topics: set[str], reply: Reply
    ) -> list[Store]:
        """OffsetDelete of a KIP-848 consumer group (kept by its own coordinator),
        whose members subscribe to ``subscribed_topics``."""
        return self.delete_offsets(group_id, partitions, reply, subscribed_topics)

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]], reply: Reply, consumer_group_topics: set[str] | None = None
    ) -> list[Store]:
        """OffsetDelete; ``reply`` gets the group error and the error of each partition.
        ``consumer_group_topics``: see :meth:`delete_consumer_group_offsets`."""
        group = self.groups.get(group_id)
        subscribed: set[str] = set()
        if consumer_group_topics is not None:
            subscribed = consumer_group_topics
        elif group is None or group.is_(GroupState.DEAD):
            reply((ErrorCode.GROUP_ID_NOT_FOUND, {}))
            return []
        elif not group.is_(GroupState.EMPTY):
            topics = group.subscribed_topics()
            if topics is None:
                reply((ErrorCode.NON_EMPTY_GROUP, {}))
                return []
            subscribed = topics
        results = {}
        deletable = []
        committed = self.offsets.get(group_id, {})
        for tp in partitions:
            if tp[0] in subscribed:
                results[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                results[tp] = ErrorCode.NONE
                # A pending transactional offset is deleted too (Kafka writes the
                # tombstone for either).
                if tp in committed or self.pending.has(group_id, tp):
                    deletable.append(tp)
        if not deletable:
            reply((ErrorCode.NONE, results))
            return []

        def stored(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                reply((error, {}))
                return
            for tp in deletable:
                self._forget_offset(group_id, tp)
            reply((ErrorCode.NONE, results))

        self._store(self.partition_for(group_id), [(offset_key_bytes(OffsetKey(group_id, t, p)), None) for t, p in deletable], stored)
        return self._take_effects()

    def expire_consumer_group_offsets(self, now_ms: int, subscribed_topics: dict[str, set[str]], reply: Reply) -> list[Store]:
        """Offset retention of the KIP-848 consumer groups (group id -> the topics
        their members subscribe to), whose offsets are kept here: as in Kafka, an
        offset of a topic the group does not subscribe to (none, once it is empty)
        expires ``offsets.retention.minutes`` after its commit (or at its explicit
        expiry); ``reply`` gets how many expired."""
        retention_ms = self.config.offsets_retention_ms
        expired_total = _Count(reply)
        for group_id, topics in sorted(subscribed_topics.items()):
            expired = [
                tp
                for tp, o in self.offsets.get(group_id, {}).items()
                if tp[0] not in topics
                and (o.expire_timestamp_ms if o.expire_timestamp_ms >= 0 else o.commit_timestamp_ms + retention_ms) <= now_ms
                and not self.pending.has(group_id, tp)
            ]
            if expired:
                self._drop_offsets(now_ms, group_id, sorted(expired), expired_total)
        expired_total.all_planned()
        return self._take_effects()

    def expire_offsets(self, now_ms: int, reply: Reply) -> list[Store]:
        """Kafka's offset retention; ``reply`` gets how many offsets expired. An offset
        whose partition has a pending transactional commit does not expire yet."""
        retention_ms = self.config.offsets_retention_ms
        expired_total = _Count(reply)
        for group_id, group in list(self.groups.items()):
            committed = self.offsets.get(group_id, {})
            expired = []
            if group.is_(GroupState.EMPTY):
                since_empty = group.state_timestamp_ms if group.protocol_type is not None and group.state_timestamp_ms >= 0 else None
                for tp, o in committed.items():
                    deadline = o.expire_timestamp_ms if o.expire_timestamp_ms >= 0 else (since_empty if since_empty is not None else o.commit_timestamp_ms) + retention_ms
                    if deadline <= now_ms and not self.pending.has(group_id, tp):
                        expired.append(tp)
            elif group.is_(GroupState.STABLE) and group.protocol_type == "consumer":
                subscribed = group.subscribed_topics()
                if subscribed is not None:
                    for tp, o in committed.items():
                        deadline = o.expire_timestamp_ms if o.expire_timestamp_ms >= 0 else o.commit_timestamp_ms + retention_ms
                        if tp[0] not in subscribed and deadline <= now_ms and not self.pending.has(group_id, tp):
                            expired.append(tp)
            if expired or (group.is_(GroupState.EMPTY) and not committed):
                self._drop_offsets(now_ms, group_id, expired, expired_total)
        expired_total.all_planned()
        return self._take_effects()

    def remove_offsets_of_topics(self, now_ms: int, topics: set[str], reply: Reply) -> list[Store]:
        """A deleted topic's committed and pending offsets go with it (Kafka's
        onTopicsDeleted); an empty group left without offsets is removed. ``reply``
        gets how many offsets went."""
        removed = _Count(reply)
        for group_id in list(dict.fromkeys([*self.offsets, *self.pending.group_ids()])):
            partitions = set(self.offsets.get(group_id, {})) | self.pending.partitions_of(group_id)
            gone = sorted(tp for tp in partitions if tp[0] in topics)
            if not gone:
                continue
            self._drop_offsets(now_ms, group_id, gone, removed)
        removed.all_planned()
        return self._take_effects()

    def _drop_offsets(self, now_ms: int, group_id: str, gone: list[tuple[str, int]], count: _Count) -> None:
        """Tombstone ``gone`` offsets of a group (committed or pending); an empty group
        left without offsets is removed with them. Adds to ``count`` how many offsets
        went (none if the store failed)."""
        group = self.groups.get(group_id)
        committed = self.offsets.get(group_id, {})
        records: list[tuple[bytes, bytes | None]] = [(offset_key_bytes(OffsetKey(group_id, t, p)), None) for t, p in gone]
        left = (set(committed) | self.pending.partitions_of(group_id)) - set(gone)
        remove_group = group is not None and group.is_(GroupState.EMPTY) and not left and not group.pending_members
        if remove_group:
            records.append((group_key_bytes(group_id), None))
        if not records:
            return

        def stored(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                count.add(0)
                return
            for tp in gone:
                self._forget_offset(group_id, tp)
            if remove_group:
                group.transition(GroupState.DEAD, self._stamp(now_ms))
                del self.groups[group_id]
                self.offsets.pop(group_id, None)
                self._committed_positions.pop(group_id, None)
            count.add(len(gone))

        count.expect()
        self._store(self.partition_for(group_id), records, stored)

    def has_offsets(self, group_id: str) -> bool:
        """Whether the group has committed offsets or pending transactional ones."""
        return bool(self.offsets.get(group_id)) or bool(self.pending.partitions_of(group_id))

    def delete_all_offsets(self, group_id: str, reply: Reply) -> list[Store]:
        """Tombstone every committed and pending offset of a group that is not a
        classic one here (a KIP-848 consumer group being deleted); ``reply`` gets
        the store's error."""
        committed = self.offsets.get(group_id, {})
        partitions = [*committed, *sorted(self.pending.partitions_of(group_id) - set(committed))]
        if not partitions:
            reply(ErrorCode.NONE)
            return []

        def stored(error: ErrorCode) -> None:
            if error == ErrorCode.NONE:
                self.offsets.pop(group_id, None)
                self._committed_positions.pop(group_id, None)
                self.pending.discard_groups([group_id])
            reply(error)

        self._store(self.partition_for(group_id), [(offset_key_bytes(OffsetKey(group_id, t, p)), None) for t, p in partitions], stored)
        return self._take_effects()

    # ----------------------------------------------------------------- group admin

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[GroupListing]:
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        listings = []
        for group in self.groups.values():
            if group.is_(GroupState.DEAD):
                continue
            if wanted_states and group.state.value.lower() not in wanted_states:
                continue
            if wanted_types and "classic" not in wanted_types:
                continue
            listings.append(GroupListing(group.group_id, group.protocol_type or "", group.state.value))
        return listings

    def describe_group(self, group_id: str) -> GroupSummary:
        group = self.groups.get(group_id)
        if group is None:
            return GroupSummary(group_id, GroupState.DEAD.value, "", "", [])
        stable = group.is_(GroupState.STABLE)
        members = [
            MemberSummary(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata_for(group.protocol_name) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        return GroupSummary(group_id, group.state.value, group.protocol_type or "", (group.protocol_name or "") if stable else "", members)

    def delete_groups(self, now_ms: int, group_ids: list[str], reply: Reply) -> list[Store]:
        """DeleteGroups; ``reply`` gets the error of each group."""
        results: dict[str, ErrorCode] = {}
        answer = _WhenAllStored(lambda: reply(results))
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                results[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_(GroupState.EMPTY) or group.pending_members:
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                # Pending transactional offsets do not keep an empty group alive: they
                # are tombstoned with it (once per partition), as Kafka does.
                committed = self.offsets.get(group_id, {})
                partitions = [*committed, *sorted(self.pending.partitions_of(group_id) - set(committed))]
                records: list[tuple[bytes, bytes | None]] = [(offset_key_bytes(OffsetKey(group_id, t, p)), None) for t, p in partitions]
                records.append((group_key_bytes(group_id), None))
                results[group_id] = ErrorCode.NONE  # its place in the answer; the outcome sets it

                def stored(error: ErrorCode, group_id: str = group_id, group: ClassicGroup = group) -> None:
                    if error == ErrorCode.NONE:
                        group.transition(GroupState.DEAD, self._stamp(now_ms))
                        del self.groups[group_id]
                        self.offsets.pop(group_id, None)
                        self._committed_positions.pop(group_id, None)
                        self.pending.discard_groups([group_id])
                    results[group_id] = error
                    answer.done()

                answer.expect()
                self._store(self.partition_for(group_id), records, stored)
        answer.close()
        return self._take_effects()
