"""The KIP-848 consumer group coordinator: ConsumerGroupHeartbeat (pure).

Pure and single-threaded, as the classic coordinator
(broker/coordinators/groups/coordinator.py): every operation takes ``now_ms``,
the session and rebalance timeouts are deadlines fired by :meth:`tick`, and
what must survive a failover is returned as :class:`Store` effects of
``__consumer_offsets`` records (protocol/consumer_group_records.py). The group
changes only by applying those records (broker/coordinators/consumer_groups/records.py),
at once; the heartbeat is answered once the shell reports the store's outcome
(:meth:`store_done`), and a failed store puts the group back as it was. The
shell reports each outcome before it runs any other operation, so no other
operation ever sees a change whose store has not been decided.

A heartbeat, as Kafka's GroupMetadataManager handles it:

1. The request is checked (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR,
   INVALID_REGULAR_EXPRESSION), then the member: epoch 0 joins (or rejoins;
   a static member takes over the place its instance id left with epoch -2:
   UNRELEASED_INSTANCE_ID while that member is still in, GROUP_MAX_SIZE_REACHED
   for a new member of a full group); any other epoch must be the member's
   own, or its previous one with owned partitions it was assigned (a lost
   answer), else FENCED_MEMBER_EPOCH; an unknown member is UNKNOWN_MEMBER_ID,
   another member's instance id FENCED_INSTANCE_ID. Epoch -1 leaves; -2 leaves
   for a while (a static member keeps its partitions until its session
   expires).
2. The member's fields the request carries update its metadata. The group
   epoch goes up when a member joins or leaves, changes its subscription,
   rack or assignor, or when the subscribed topics' partitions (or racks)
   changed.
3. When the group epoch is past the assignment epoch, the target assignment
   is computed by the group's assignor (the one most members ask for; the
   first configured otherwise) from the current targets.
4. The member is reconciled toward its target (reconciliation.py), and is
   answered its epoch and, when it changed or the request was a full one, its
   assigned partitions.

A member's regular expression is resolved apart from its heartbeat, as in
Kafka 4: a heartbeat with an expression the group has not resolved yet is
answered at once with the topics it subscribes to by name, and the next
:meth:`tick` resolves the expression against the image's topics, stores what it
matched (a ConsumerGroupRegularExpression record) and bumps the group epoch, so
the members get those topics at a later heartbeat. A group's expressions are
resolved again when the image's topic names change, at most once every
``REGEX_REFRESH_MIN_INTERVAL_MS``; an expression no member uses any more is
tombstoned.

A member that does not heartbeat within ``group.consumer.session.timeout.ms``
is removed; one that has partitions to revoke and does not revoke them within
its rebalance timeout is removed too. Either bumps the group epoch.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from broker.coordinators.consumer_groups.assignors import ASSIGNORS, UNIFORM, AssignmentMember
from broker.coordinators.consumer_groups.classic_members import ClassicGroupView, ClassicMembers
from broker.coordinators.consumer_groups.model import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    NO_PARTITIONS,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberFenced,
    MemberState,
    Partitions,
    TopicInfo,
    ResolvedRegex,
    member_topics,
    resolve_regex,
    subscription_metadata_hash,
)
from broker.coordinators.consumer_groups.reconciliation import reconcile
from broker.coordinators.consumer_groups.records import (
    apply_record,
    assignment_epoch_record,
    current_assignment_record,
    group_epoch_record,
    group_removal_records,
    member_metadata_record,
    member_removal_records,
    regex_record,
    subscription_metadata_record,
    target_record,
)
from broker.coordinators.effects import Store
from protocol.consumer_group_records import ConsumerGroupRecord, decode_record, encode_record
from protocol.consumer_offsets import partition_for_group
from protocol.errors import ErrorCode


# A group's regular expressions are resolved again after the image's topic
# names changed, but not sooner than this after their last resolution (Kafka's
# batching of regular expression refreshes).
REGEX_REFRESH_MIN_INTERVAL_MS = 10_000


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = (UNIFORM, "range")  # group.consumer.assignors; the first is the default
    offsets_partitions: int = 50  # offsets.topic.num.partitions


@dataclass(frozen=True)
class HeartbeatRequest:
    """ConsumerGroupHeartbeat's request; None fields are unchanged since the last heartbeat."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Partitions | None = None  # TopicPartitions
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class HeartbeatResponse:
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Partitions | None = None  # None: unchanged


Reply = Callable[[HeartbeatResponse], None]


@dataclass
class _Timers:
    """One group's deadlines (not stored: a loading coordinator starts them afresh)."""

    # member id -> when its session ends.
    session: dict[str, int] = field(default_factory=dict)
    # member id -> (when it must have revoked, the member epoch it must revoke at).
    rebalance: dict[str, tuple[int, int]] = field(default_factory=dict)

    def copy(self) -> _Timers:
        return _Timers(dict(self.session), dict(self.rebalance))


# What a failed store puts back: the group (None: there was none) and its timers.
_Snapshot = tuple[ConsumerGroup | None, _Timers]


class _Refused(Exception):
    def __init__(self, error: ErrorCode, message: str | None = None):
        super().__init__(message)
        self.error = error
        self.message = message


class ConsumerGroupCoordinator(ClassicMembers):
    def __init__(
        self,
        config: ConsumerGroupConfig,
        new_member_id: Callable[[], str] | None = None,
        wall_clock_ms: Callable[[], int] | None = None,
    ):
        self.config = config
        # ``now_ms`` times sessions and rebalances; a resolved expression's
        # stored timestamp is wall-clock time, as in Kafka (``now_ms`` without one).
        self._wall_clock_ms = wall_clock_ms
        self.groups: dict[str, ConsumerGroup] = {}
        # The topics of the metadata image, by name (set_topics).
        self.topics: dict[str, TopicInfo] = {}
        self.topics_image_offset = -1  # the metadata offset self.topics were read at
        # Goes up when the topic names change: the groups' expressions are resolved again.
        self._topic_names_version = 0
        # The groups with a member subscribed by regular expression, and, per group,
        # (topic names version, when) of its expressions' last resolution here.
        self._regex_groups: set[str] = set()
        self._regex_checked: dict[str, tuple[int, int]] = {}
        self._new_member_id = new_member_id or (lambda: str(uuid.uuid4()))
        self._timers: dict[str, _Timers] = {}
        self._tokens = itertools.count(1)
        # token -> (group id, the group and its timers before the store, what to do with the outcome).
        self._open_stores: dict[int, tuple[str, _Snapshot, Callable[[ErrorCode], None]]] = {}

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.config.offsets_partitions)

    def set_topics(self, topics: Mapping[str, TopicInfo], image_offset: int = -1) -> None:
        """The topics as the metadata image (at ``image_offset``) has them now;
        groups notice a change of their subscribed topics at their next
        heartbeat, and of the topics their regular expressions match once the
        expressions are resolved again (:meth:`tick`)."""
        if topics.keys() != self.topics.keys():
            self._topic_names_version += 1
        self.topics = dict(topics)
        self.topics_image_offset = image_offset

    # ----------------------------------------------------------------- effects

    def _apply(self, records: list[ConsumerGroupRecord], record: ConsumerGroupRecord) -> None:
        apply_record(self.groups, record)
        records.append(record)

    def _snapshot(self, group_id: str) -> _Snapshot:
        group = self.groups.get(group_id)
        timers = self._timers.get(group_id)
        return (None if group is None else group.copy()), (_Timers() if timers is None else timers.copy())

    def _timers_of(self, group_id: str) -> _Timers:
        timers = self._timers.get(group_id)
        if timers is None:
            timers = self._timers[group_id] = _Timers()
        return timers

    def _store(self, group_id: str, before: _Snapshot, records: list[ConsumerGroupRecord],
               then: Callable[[ErrorCode], None], leading: tuple[tuple[bytes, bytes | None], ...] = ()) -> list[Store]:
        """One store of ``records``, after ``leading`` records already encoded (a
        converted classic group's tombstone)."""
        token = next(self._tokens)
        self._open_stores[token] = (group_id, before, then)
        encoded = leading + tuple(encode_record(r) for r in records)
        return [Store(self.partition_for(group_id), -1, encoded, token)]

    def store_done(self, token: int, error: ErrorCode) -> list[Store]:
        """The outcome of the store with ``token``; a failed one undoes its change."""
        group_id, before, then = self._open_stores.pop(token)
        if error != ErrorCode.NONE:
            self._restore(group_id, before)
        then(error)
        return []

    def _restore(self, group_id: str, before: _Snapshot) -> None:
        group, timers = before
        if group is None:
            self.groups.pop(group_id, None)
            self._timers.pop(group_id, None)
        else:
            self.groups[group_id] = group
            self._timers[group_id] = timers

    # ----------------------------------------------------------------- replay

    def load_record(self, key: bytes, value: bytes | None) -> None:
        """Replay one consumer group record of ``__consumer_offsets``, in log order."""
        record = decode_record(key, value)
        apply_record(self.groups, record)
        if record.group_id in self.groups and (record.regular_expression is not None or (
                record.value is not None and getattr(record.value, "subscribed_topic_regex", None))):
            self._regex_groups.add(record.group_id)

    def finish_loading(self, now_ms: int, partition: int | None = None) -> None:
        """Every member (of the groups of ``partition``, when given: those of other
        partitions keep their deadlines) gets a fresh session; one with partitions
        to revoke, its rebalance timeout."""
        for group in self.groups.values():
            if partition is not None and self.partition_for(group.group_id) != partition:
                continue
            for member in group.members.values():
                self._arm_timers(group, member, now_ms, assignment_changed=True)
            # The expressions are resolved once against this broker's image.
            self._regex_checked.pop(group.group_id, None)

    def unload_partition(self, partition: int) -> None:
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            del self.groups[group_id]
            self._drop_timers(group_id)
            self._regex_groups.discard(group_id)
            self._regex_checked.pop(group_id, None)

    def _drop_timers(self, group_id: str, member_id: str | None = None) -> None:
        if member_id is None:
            self._timers.pop(group_id, None)
        elif group_id in self._timers:
            self._timers[group_id].session.pop(member_id, None)
            self._timers[group_id].rebalance.pop(member_id, None)

    def _arm_timers(self, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int, assignment_changed: bool) -> None:
        """A fresh session; and while it has partitions to revoke, its rebalance
        timeout, started again by each change of its assignment (a new
        revocation), as Kafka does."""
        timers = self._timers_of(group.group_id)
        # A classic member keeps the session timeout its JoinGroup asked for.
        session_ms = self.config.session_timeout_ms if member.classic is None else member.classic.session_timeout_ms
        timers.session[member.member_id] = now_ms + session_ms
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if assignment_changed or member.member_id not in timers.rebalance:
                timeout_ms = member.rebalance_timeout_ms if member.rebalance_timeout_ms >= 0 else self.config.session_timeout_ms
                timers.rebalance[member.member_id] = (now_ms + timeout_ms, member.member_epoch)
        else:
            timers.rebalance.pop(member.member_id, None)

    # ----------------------------------------------------------------- heartbeat

    def heartbeat(self, now_ms: int, request: HeartbeatRequest, reply: Reply, upgrading: ClassicGroupView | None = None,
                  classic_tombstone: tuple[bytes, bytes | None] | None = None) -> list[Store]:
        """``upgrading``: a joining member converts this classic group (Kafka's
        online upgrade), whose ``classic_tombstone`` is stored first."""
        before = self._snapshot(request.group_id)
        records: list[ConsumerGroupRecord] = []
        try:
            self._check_request(request)
            if upgrading is not None:
                if request.member_epoch != JOIN_EPOCH:
                    raise _Refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a consumer group.")
                self.convert(now_ms, upgrading, records)
            if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                response = self._leave(now_ms, request, records)
            else:
                response = self._heartbeat(now_ms, request, records)
        except _Refused as refused:
            # What was applied before the refusal is undone (a member in an
            # unknown state is fenced after its metadata was updated).
            if records:
                self._restore(request.group_id, before)
            reply(HeartbeatResponse(refused.error, refused.message))
            return []
        if not records:
            reply(response)
            return []

        def stored(error: ErrorCode) -> None:
            if error == ErrorCode.NONE:
                reply(response)
            else:
                reply(HeartbeatResponse(error))

        leading = () if upgrading is None or classic_tombstone is None else (classic_tombstone,)
        return self._store(request.group_id, before, records, stored, leading)

    def _check_request(self, request: HeartbeatRequest) -> None:
        def invalid(message: str) -> _Refused:
            return _Refused(ErrorCode.INVALID_REQUEST, message)

        if not request.group_id:
            raise invalid("GroupId can't be empty.")
        if request.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if request.rack_id == "":
            raise invalid("RackId can't be empty.")
        if request.member_epoch < STATIC_LEAVE_EPOCH:
            raise invalid(f"MemberEpoch {request.member_epoch} is invalid.")
        if request.member_epoch != JOIN_EPOCH and not request.member_id:
            raise invalid("MemberId can't be empty.")
        if request.member_epoch == JOIN_EPOCH:
            if request.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.owned is None or request.owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        if request.member_epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
            raise invalid("InstanceId can't be null when leaving as a static member.")
        if request.server_assignor is not None and request.server_assignor not in self.config.assignors:
            raise _Refused(ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {request.server_assignor} is not supported.")
        if request.subscribed_topic_regex:
            try:
                re.compile(request.subscribed_topic_regex)
            except re.error as e:
                raise _Refused(ErrorCode.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex is invalid: {e}") from None

    def _member_for_heartbeat(self, group: ConsumerGroup | None, request: HeartbeatRequest,
                              records: list[ConsumerGroupRecord]) -> tuple[ConsumerGroupMember, bool]:
        """The member the heartbeat is from (a new one: True), after the membership checks."""
        if request.member_epoch == JOIN_EPOCH:
            member_id = request.member_id or self._new_member_id()
            existing = None if group is None else group.members.get(member_id)
            if request.instance_id is not None and group is not None:
                static_id = group.static_members.get(request.instance_id)
                if static_id is not None and static_id != member_id:
                    old = group.members[static_id]
                    if old.member_epoch != STATIC_LEAVE_EPOCH:
                        raise _Refused(ErrorCode.UNRELEASED_INSTANCE_ID,
                                       f"Static member {static_id} with instance id {request.instance_id} is still in the group.")
                    return self._replace_static_member(group, old, member_id, records), False
            if existing is not None:
                return existing, False
            if group is not None and len(group.members) >= self.config.max_size:
                raise _Refused(ErrorCode.GROUP_MAX_SIZE_REACHED, f"The group reached its maximum size of {self.config.max_size}.")
            return ConsumerGroupMember(member_id), True
        member = None if group is None else group.members.get(request.member_id)
        if member is None or member.classic is not None:
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {request.member_id} is not a consumer-protocol member of group {request.group_id}.")
        if request.instance_id is not None and member.instance_id != request.instance_id:
            raise _Refused(ErrorCode.FENCED_INSTANCE_ID, f"Instance id {request.instance_id} is not member {member.member_id}'s.")
        if request.member_epoch > member.member_epoch:
            raise _Refused(ErrorCode.FENCED_MEMBER_EPOCH, f"Epoch {request.member_epoch} is ahead of the member's {member.member_epoch}.")
        if request.member_epoch < member.member_epoch and not (
            # Its answer of the last epoch was lost: it may catch up if what it owns was assigned to it.
            request.member_epoch == member.previous_member_epoch
            and request.owned is not None
            and request.owned <= member.assigned
        ):
            raise _Refused(ErrorCode.FENCED_MEMBER_EPOCH, f"Epoch {request.member_epoch} is behind the member's {member.member_epoch}.")
        return member, False

    def _replace_static_member(self, group: ConsumerGroup, old: ConsumerGroupMember, new_id: str,
                               records: list[ConsumerGroupRecord]) -> ConsumerGroupMember:
        """A static member back under a new member id takes over its old place:
        partitions and target; the old id is forgotten (and fenced)."""
        target = group.target.get(old.member_id, NO_PARTITIONS)
        for record in member_removal_records(group.group_id, old.member_id):
            self._apply(records, record)
        self._drop_timers(group.group_id, old.member_id)
        # As a joining member (epoch 0) that owns nothing yet: reconciled at
        # once to the assignment epoch, with what it had and still may have.
        new = replace(old, member_id=new_id, member_epoch=JOIN_EPOCH, previous_member_epoch=JOIN_EPOCH)
        self._apply(records, member_metadata_record(group.group_id, new))
        self._apply(records, target_record(group.group_id, new_id, target))
        self._apply(records, current_assignment_record(group.group_id, new))
        return new

    def _heartbeat(self, now_ms: int, request: HeartbeatRequest, records: list[ConsumerGroupRecord]) -> HeartbeatResponse:
        group = self.groups.get(request.group_id)
        if group is None and request.member_epoch != JOIN_EPOCH:
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {request.group_id} has no member {request.member_id}.")
        member, is_new = self._member_for_heartbeat(group, request, records)
        group_id = request.group_id

        # A join is a full request: what it leaves null is not set (a static member
        # coming back under a new id may subscribe differently); later heartbeats
        # send null for what did not change.
        joining = request.member_epoch == JOIN_EPOCH

        def given(sent, current):
            return sent if sent is not None or joining else current

        names = given(request.subscribed_topic_names, member.subscribed_topic_names)
        updated = replace(
            member,
            instance_id=given(request.instance_id, member.instance_id),
            rack_id=given(request.rack_id, member.rack_id),
            client_id=request.client_id or member.client_id,
            client_host=request.client_host or member.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(names or ()))),
            subscribed_topic_regex=given(request.subscribed_topic_regex, member.subscribed_topic_regex) or None,
            server_assignor=given(request.server_assignor, member.server_assignor),
        )
        bump = is_new or (updated.subscribed_topic_names, updated.subscribed_topic_regex, updated.rack_id, updated.server_assignor) != (
            member.subscribed_topic_names, member.subscribed_topic_regex, member.rack_id, member.server_assignor
        )
        if is_new or not updated.metadata_equal(member):
            # A new member's record makes it (epoch 0, nothing assigned) and its group.
            self._apply(records, member_metadata_record(group_id, updated))
        group = self.groups[group_id]
        if updated.subscribed_topic_regex:
            self._regex_groups.add(group_id)
        self._drop_unused_regexes(group, records)
        self._refresh_group_epoch(group, records, bump)
        self._maybe_compute_target(group, records)

        member = group.members[updated.member_id]
        try:
            reconciled = reconcile(group, member, group.target.get(member.member_id, NO_PARTITIONS), group.assignment_epoch, request.owned)
        except MemberFenced as fenced:
            raise _Refused(ErrorCode.FENCED_MEMBER_EPOCH, str(fenced)) from None
        if not reconciled.assignment_equal(member):
            self._apply(records, current_assignment_record(group_id, reconciled))
        self._arm_timers(group, reconciled, now_ms, assignment_changed=not reconciled.assignment_equal(member))

        full_request = request.member_epoch == JOIN_EPOCH or (
            request.rebalance_timeout_ms != -1
            and (request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None)
            and request.owned is not None
        )
        changed = reconciled.assigned != member.assigned or is_new
        return HeartbeatResponse(
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=reconciled.assigned if full_request or changed else None,
        )

    def _refresh_group_epoch(self, group: ConsumerGroup, records: list[ConsumerGroupRecord], bump: bool) -> None:
        """Store the subscribed topics' metadata if it changed, and bump the group
        epoch if that or the caller asks for it."""
        names = group.subscribed_topic_names()
        metadata = {name: self.topics[name] for name in names if name in self.topics}
        if subscription_metadata_hash(metadata) != subscription_metadata_hash(group.subscription_metadata):
            self._apply(records, subscription_metadata_record(group.group_id, metadata))
            bump = True
        if bump:
            self._apply(records, group_epoch_record(group.group_id, group.group_epoch + 1))

    def assignor_of(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for (ties by name); the default when none asks."""
        votes = Counter(m.server_assignor for m in group.members.values() if m.server_assignor in self.config.assignors)
        if not votes:
            return self.config.assignors[0]
        return min(votes, key=lambda name: (-votes[name], name))

    def _maybe_compute_target(self, group: ConsumerGroup, records: list[ConsumerGroupRecord]) -> None:
        if group.group_epoch <= group.assignment_epoch:
            return
        metadata = group.subscription_metadata
        topics = {info.topic_id: info for info in metadata.values()}
        members = {
            m.member_id: AssignmentMember(
                topic_ids=frozenset(metadata[n].topic_id for n in member_topics(m, group.resolved_regexes) if n in metadata),
                rack_id=m.rack_id,
                current=group.target.get(m.member_id, NO_PARTITIONS),
            )
            for m in group.members.values()
        }
        new_target = ASSIGNORS[self.assignor_of(group)](members, topics)
        for member_id in sorted(new_target):
            if group.target.get(member_id) != new_target[member_id]:
                self._apply(records, target_record(group.group_id, member_id, new_target[member_id]))
        self._apply(records, assignment_epoch_record(group.group_id, group.group_epoch))

    # ----------------------------------------------------------------- leaving

    def _leave(self, now_ms: int, request: HeartbeatRequest, records: list[ConsumerGroupRecord]) -> HeartbeatResponse:
        group = self.groups.get(request.group_id)
        if request.instance_id is None:
            member = None if group is None else group.members.get(request.member_id)
            if member is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {request.member_id} is not in group {request.group_id}.")
        else:
            member_id = None if group is None else group.static_members.get(request.instance_id)
            if member_id is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"No static member with instance id {request.instance_id}.")
            if member_id != request.member_id:
                raise _Refused(ErrorCode.FENCED_INSTANCE_ID, f"Instance id {request.instance_id} is member {member_id}'s.")
            member = group.members[member_id]
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            # It keeps its partitions (no one else gets them) until its session ends.
            # What it was revoking is released: its process is gone.
            away = replace(member, member_epoch=STATIC_LEAVE_EPOCH, state=MemberState.STABLE, pending_revocation=NO_PARTITIONS)
            self._apply(records, current_assignment_record(group.group_id, away))
            self._timers_of(group.group_id).rebalance.pop(member.member_id, None)
        else:
            self._remove_member(group, member.member_id, records)
        return HeartbeatResponse(member_id=member.member_id, member_epoch=request.member_epoch,
                                 heartbeat_interval_ms=self.config.heartbeat_interval_ms)

    def _remove_member(self, group: ConsumerGroup, member_id: str, records: list[ConsumerGroupRecord]) -> None:
        for record in member_removal_records(group.group_id, member_id):
            self._apply(records, record)
        self._drop_timers(group.group_id, member_id)
        self._drop_unused_regexes(group, records)
        self._refresh_group_epoch(group, records, bump=True)

    # ----------------------------------------------------------------- regular expressions

    def _drop_unused_regexes(self, group: ConsumerGroup, records: list[ConsumerGroupRecord]) -> None:
        for regex in sorted(group.resolved_regexes.keys() - group.subscribed_regexes()):
            self._apply(records, regex_record(group.group_id, regex, None))

    def _regex_due_ms(self, group_id: str) -> int | None:
        """When ``group_id``'s regular expressions are to be resolved (0: now),
        None if they need not be."""
        group = self.groups.get(group_id)
        regexes = set() if group is None else group.subscribed_regexes()
        if not regexes:
            self._regex_groups.discard(group_id)
            self._regex_checked.pop(group_id, None)
            return None
        checked = self._regex_checked.get(group_id)
        if checked is None or regexes - group.resolved_regexes.keys():
            return 0
        version, at_ms = checked
        if version != self._topic_names_version:
            return at_ms + REGEX_REFRESH_MIN_INTERVAL_MS
        return None

    def _resolve_regexes(self, group: ConsumerGroup, now_ms: int) -> list[Store]:
        """Resolve the group's expressions against the image's topics; store those
        whose topics changed, and bump the group epoch if any did."""
        group_id = group.group_id
        self._regex_checked[group_id] = (self._topic_names_version, now_ms)
        names = sorted(self.topics)
        before = self._snapshot(group_id)
        records: list[ConsumerGroupRecord] = []
        for regex in sorted(group.subscribed_regexes()):
            try:
                topics = resolve_regex(regex, names)
            except re.error:
                topics = frozenset()  # a stored expression Python's re does not read matches nothing
            known = group.resolved_regexes.get(regex)
            if known is None or known.topics != topics:
                self._apply(records, regex_record(group_id, regex, ResolvedRegex(topics, self.topics_image_offset, now_ms if self._wall_clock_ms is None else self._wall_clock_ms())))
        if not records:
            return []
        self._refresh_group_epoch(group, records, bump=True)

        def stored(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                self._regex_checked.pop(group_id, None)  # put back as it was: try again at the next tick

        return self._store(group_id, before, records, stored)

    # ----------------------------------------------------------------- group admin

    def delete_group(self, group_id: str, reply: Callable[[ErrorCode], None]) -> list[Store]:
        """Remove an empty group (DeleteGroups, offset expiry, a classic JoinGroup
        taking the id over): GROUP_ID_NOT_FOUND for no such group, NON_EMPTY_GROUP
        while it has members (a static member away with epoch -2 is one), else
        the group's tombstones; ``reply`` gets the outcome. Its committed offsets
        are the classic coordinator's: the caller removes them first, as Kafka
        writes the offsets' tombstones before the group's."""
        group = self.groups.get(group_id)
        if group is None:
            reply(ErrorCode.GROUP_ID_NOT_FOUND)
            return []
        if group.members:
            reply(ErrorCode.NON_EMPTY_GROUP)
            return []
        before = self._snapshot(group_id)
        records: list[ConsumerGroupRecord] = []
        for record in group_removal_records(group):
            self._apply(records, record)
        self._timers.pop(group_id, None)
        return self._store(group_id, before, records, reply)

    def empty_group_ids(self) -> list[str]:
        return sorted(g.group_id for g in self.groups.values() if not g.members)

    # ----------------------------------------------------------------- timers

    def tick(self, now_ms: int) -> list[Store]:
        """Remove the members whose session or rebalance timeout has passed, and
        resolve the regular expressions that are due."""
        effects: list[Store] = []
        for group_id in sorted(self._regex_groups):
            due_ms = self._regex_due_ms(group_id)
            if due_ms is not None and due_ms <= now_ms:
                effects += self._resolve_regexes(self.groups[group_id], now_ms)
        for group_id in sorted(self._timers):
            group, timers = self.groups.get(group_id), self._timers[group_id]
            if group is None:
                continue
            expired = {m for m, deadline in timers.session.items() if deadline <= now_ms}
            for member_id, (deadline, epoch) in timers.rebalance.items():
                member = group.members.get(member_id)
                if deadline <= now_ms and member and member.member_epoch == epoch and member.state == MemberState.UNREVOKED_PARTITIONS:
                    expired.add(member_id)
            gone = sorted(m for m in expired if m in group.members)
            if not gone:
                continue
            before = self._snapshot(group_id)
            records: list[ConsumerGroupRecord] = []
            for member_id in gone:
                self._remove_member(group, member_id, records)
            if records:
                # A failed store puts the members and their passed deadlines back: the next tick tries again.
                effects += self._store(group_id, before, records, lambda error: None)
        return effects

    def next_deadline_ms(self) -> int | None:
        deadlines = [
            deadline
            for timers in self._timers.values()
            for deadline in [*timers.session.values(), *(d for d, _ in timers.rebalance.values())]
        ]
        deadlines += [d for d in map(self._regex_due_ms, sorted(self._regex_groups)) if d is not None]
        return min(deadlines, default=None)
