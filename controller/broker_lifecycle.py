"""Brokers joining, heartbeating and being fenced, as pure functions of the image.

Kafka's KRaft rules (KIP-631):

* A broker registers with BrokerRegistration and is written down *fenced*
  (RegisterBrokerRecord). Its broker epoch is the offset of that record, so a
  re-registration always gets a larger epoch and stale requests are spotted.
* It then heartbeats. Once the metadata offset it reports has reached its
  registration record (it has seen itself registered), the active controller
  unfences it (UnfenceBrokerRecord) and it may lead partitions again.
* A broker whose heartbeats stop for ``broker.session.timeout.ms`` is fenced
  (FenceBrokerRecord): it leaves every ISR it was in (never emptying one) and
  every partition it led gets a new leader from the remaining ISR, or none.
* A broker that asks to shut down (want_shut_down) gives up its leaderships
  and ISR places first (controlled shutdown) and is told it may stop once it
  leads nothing another broker could lead (see :func:`plan_broker_heartbeat`).
* UnregisterBroker removes a registration, with the effects of fencing.
* unclean.leader.election.enable (topic, else cluster default) lets a replica
  outside the ISR lead when no in-sync replica is usable.

Session times are not replicated: only the active controller keeps them
(:class:`BrokerHeartbeatTracker`), and a newly active controller grants every
registered broker a fresh session, as Kafka's does, so that it fences nobody
for heartbeats it could not have seen. A granted session is not evidence of
life, though: a broker that died just before the failover keeps one for a
whole session timeout. New replicas therefore go only to brokers that have
heartbeated to this controller (:meth:`BrokerHeartbeatTracker.live_brokers`,
see controller/placement.py); Kafka's controller places on every unfenced
broker, pybroker is stricter here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from controller.directories import offline_replicas, offline_still_named, replica_offline
from controller.features import registration_refusal
from controller.metadata.image import MetadataImage, PartitionImage, TopicImage
from controller.metadata.records import (
    BROKER_ENDPOINT,
    BROKER_FEATURE,
    BROKER_REGISTRATION_CHANGE_RECORD,
    CONTROLLED_SHUTDOWN_CHANGE_ENTER,
    FENCE_BROKER_RECORD,
    NO_LEADER,
    PARTITION_CHANGE_RECORD,
    REGISTER_BROKER_RECORD,
    UNFENCE_BROKER_RECORD,
    UNREGISTER_BROKER_RECORD,
)
from protocol.errors import ErrorCode

# PartitionRecord/PartitionChangeRecord.leader_recovery_state after an unclean
# election: the new leader must recover its log before it takes an ISR again.
LEADER_RECOVERY_STATE_RECOVERING = 1
UNCLEAN_LEADER_ELECTION_CONFIG = "unclean.leader.election.enable"
# At most this many partition changes in one proposal when a broker is fenced,
# registers again after a crash or comes back: a broker of 100,000 partitions
# would otherwise have them all changed in one batch, planned, encoded,
# committed and applied in one piece on the event loop (seconds). The rest
# follow in proposals of the same size, back to back (plan_partition_fixes).
ELECTIONS_PER_PROPOSAL_MAX = 1000


@dataclass(frozen=True)
class RegistrationResult:
    error: ErrorCode
    broker_epoch: int = -1
    message: str | None = None


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False
    # The broker was unfenced and more partitions wait for it than one proposal
    # elects: the active controller elects the rest (plan_partition_fixes).
    elections_left: bool = False


class BrokerHeartbeatTracker:
    """The active controller's view of broker sessions (in memory only)."""

    def __init__(self, session_timeout_ms: int):
        self.session_timeout_ms = session_timeout_ms
        self._last_heartbeat_ms: dict[int, int] = {}
        # Brokers heard from since this controller became active (not just granted a session).
        self._heard: set[int] = set()

    def touch(self, broker_id: int, now_ms: int) -> None:
        self._last_heartbeat_ms[broker_id] = now_ms
        self._heard.add(broker_id)

    def remove(self, broker_id: int) -> None:
        """Forget a broker's session (it unregistered)."""
        self._last_heartbeat_ms.pop(broker_id, None)
        self._heard.discard(broker_id)

    def activate(self, image: MetadataImage, now_ms: int) -> None:
        """This controller became active. It cannot know who heartbeated to its
        predecessor: every registered broker gets a fresh session, not yet heard from."""
        self._last_heartbeat_ms = {broker_id: now_ms for broker_id in image.brokers}
        self._heard = set()

    def grant_missing(self, image: MetadataImage, now_ms: int) -> None:
        """A fresh session for every registered broker without one (registered by
        records the predecessor proposed, applied after :meth:`activate`); the
        sessions of brokers already heard from are kept."""
        for broker_id in image.brokers:
            self._last_heartbeat_ms.setdefault(broker_id, now_ms)

    def reset_all(self, image: MetadataImage, now_ms: int) -> None:
        """Fresh sessions for everybody, nobody heard from: the expiry loop was
        stalled and cannot tell a silent broker from heartbeats it did not see."""
        self._last_heartbeat_ms = {broker_id: now_ms for broker_id in image.brokers}
        self._heard.clear()

    def session_alive(self, broker_id: int, now_ms: int) -> bool:
        last = self._last_heartbeat_ms.get(broker_id)
        return last is not None and now_ms - last < self.session_timeout_ms

    def heard_alive(self, broker_id: int, now_ms: int) -> bool:
        """Alive on the evidence of a heartbeat to this controller. A session granted
        at activation does not count: otherwise a combined node restarted after a
        crash would be refused as its own duplicate until its old session ran out."""
        return broker_id in self._heard and self.session_alive(broker_id, now_ms)

    def live_brokers(self, image: MetadataImage, now_ms: int) -> frozenset[int]:
        """Unfenced brokers that have heartbeated to this controller within their
        session: the only ones new replicas may be placed on."""
        return frozenset(
            broker_id for broker_id, broker in image.brokers.items() if not broker.fenced and self.heard_alive(broker_id, now_ms)
        )

    def awaited_brokers(self, image: MetadataImage, now_ms: int) -> dict[int, int]:
        """{broker id: when its session runs out} for the unfenced brokers not heard
        from yet whose granted session still runs: alive or dead, this
        controller will know by that time (a heartbeat, or fencing)."""
        return {
            broker_id: self._last_heartbeat_ms[broker_id] + self.session_timeout_ms
            for broker_id, broker in image.brokers.items()
            if not broker.fenced
            and not broker.in_controlled_shutdown
            and broker_id not in self._heard
            and broker_id in self._last_heartbeat_ms
            and self.session_alive(broker_id, now_ms)
        }

    def expired(self, image: MetadataImage, now_ms: int) -> list[int]:
        """Unfenced brokers whose session ran out (or that never had one here)."""
        return sorted(
            broker_id
            for broker_id, broker in image.brokers.items()
            if not broker.fenced and not self.session_alive(broker_id, now_ms)
        )

    def next_expiry_ms(self, image: MetadataImage) -> int | None:
        """When the first session of an unfenced broker runs out (the time at which
        :meth:`expired` first reports it), or None when no unfenced broker has one
        to run out. A broker without a session is due at once (0)."""
        due_ms = [
            self._last_heartbeat_ms[broker_id] + self.session_timeout_ms if broker_id in self._last_heartbeat_ms else 0
            for broker_id, broker in image.brokers.items()
            if not broker.fenced
        ]
        return min(due_ms, default=None)


def plan_register_broker(
    image: MetadataImage,
    request,
    *,
    cluster_id: str,
    broker_epoch: int,
    session_alive: bool,
    changes_max: int | None = None,
) -> tuple[RegistrationResult, list]:
    """BrokerRegistration: a RegisterBrokerRecord (fenced), or Kafka's error.

    ``broker_epoch`` is the offset the record will be written at (Kafka numbers
    broker epochs so); ``session_alive`` says whether the registered
    incarnation of this broker id still heartbeats to this controller. A new
    incarnation of a broker that was not fenced leaves its partitions in the
    same proposal, at most ``changes_max`` of them (None: all); the rest are
    :func:`plan_partition_fixes`', and the broker is not unfenced before
    they are done (see :func:`plan_broker_heartbeat`).
    """
    if request.cluster_id != cluster_id:
        return RegistrationResult(
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            message=f"Expected cluster ID {cluster_id}, but got cluster ID {request.cluster_id}",
        ), []
    existing = image.brokers.get(request.broker_id)
    if existing is not None and existing.incarnation_id != request.incarnation_id and session_alive:
        # Another process with the same node.id is alive: refuse rather than let them fight.
        return RegistrationResult(
            ErrorCode.DUPLICATE_BROKER_REGISTRATION,
            message=f"Another broker is registered with that broker id {request.broker_id} and its session is alive.",
        ), []
    unsupported = registration_refusal(image, request.features)
    if unsupported is not None:
        return RegistrationResult(ErrorCode.UNSUPPORTED_VERSION, message=unsupported), []
    record = REGISTER_BROKER_RECORD(
        broker_id=request.broker_id,
        is_migrating_zk_broker=bool(getattr(request, "is_migrating_zk_broker", False)),
        incarnation_id=request.incarnation_id,
        broker_epoch=broker_epoch,
        end_points=[
            BROKER_ENDPOINT.cls(
                name=listener.name, host=listener.host, port=listener.port, security_protocol=listener.security_protocol
            )
            for listener in request.listeners
        ],
        features=[
            BROKER_FEATURE.cls(
                name=f.name, min_supported_version=f.min_supported_version, max_supported_version=f.max_supported_version
            )
            for f in request.features
        ],
        rack=request.rack,
        fenced=True,
        in_controlled_shutdown=False,
        log_dirs=list(getattr(request, "log_dirs", []) or []),
    )
    records = [record]
    if existing is not None and not existing.fenced and existing.incarnation_id != request.incarnation_id:
        # A new process while the old one's session was still counted: it did not
        # shut down cleanly (a controlled shutdown would have moved its
        # leaderships), so its logs may have lost what it had not flushed. It
        # leaves every ISR and leadership now, in the same commit as its
        # registration, as when fenced (Kafka's unclean-shutdown handling).
        gone = {request.broker_id}
        records += _leave_partitions(image, gone, _usable_after(image, gone), limit=changes_max)
    return RegistrationResult(ErrorCode.NONE, broker_epoch), records


def plan_broker_heartbeat(
    image: MetadataImage,
    request,
    now_ms: int | None = None,
    *,
    tracker: BrokerHeartbeatTracker | None = None,
    registration_offset: int | None = None,
    elections_max: int | None = None,
    leave_pending: bool = False,
) -> tuple[HeartbeatResult, list]:
    """BrokerHeartbeat: unfence a caught-up broker, fence one that asks, or move
    leadership away from one that wants to shut down.

    With ``tracker`` (and ``now_ms``) the broker's session is renewed here once
    the request proves to come from the registered incarnation; a caller that
    renews sessions itself passes neither. ``registration_offset`` is the
    offset of the broker's RegisterBrokerRecord, which is its broker epoch
    unless the caller knows better.

    Controlled shutdown, simplified from Kafka's: the first heartbeat asking to
    shut down marks the broker in controlled shutdown, hands each partition it
    leads to another usable member of the ISR and takes it out of every ISR
    (never emptying one). The answer says ``should_shut_down`` once, with these
    records applied, the broker leads nothing another broker could lead: the
    caller answers only after the records are committed, so the broker stops
    only after its leaderships have moved. Where Kafka would leave a partition
    without a leader (its only in-sync replica is leaving), the leaving broker
    stays its leader until it is fenced, as the session expiry will do.

    An unfence elects at most ``elections_max`` leaders (all with None); the
    result's ``elections_left`` says whether some were left for
    :func:`plan_partition_fixes`. With ``leave_pending`` (the caller's word
    that a bounded fencing or re-registration of this broker may have left
    partitions naming it) the broker is not unfenced yet: it must never lead
    at an epoch it held before it was fenced.
    """
    broker = image.brokers.get(request.broker_id)
    if broker is None:
        return HeartbeatResult(ErrorCode.BROKER_ID_NOT_REGISTERED), []
    if broker.epoch != request.broker_epoch:
        return HeartbeatResult(ErrorCode.STALE_BROKER_EPOCH), []
    if tracker is not None and now_ms is not None:
        tracker.touch(broker.broker_id, now_ms)
    if registration_offset is None:
        registration_offset = broker.epoch
    # Kafka's rule: a broker has caught up once it has seen its own registration.
    caught_up = request.current_metadata_offset >= registration_offset
    records: list = []
    fenced = broker.fenced
    elections_left = False
    if request.want_shut_down:
        if not fenced:
            # A fenced broker leads nothing and is in no ISR that could move: it may just stop.
            records += _controlled_shutdown_records(image, broker.broker_id, broker.epoch, broker.in_controlled_shutdown)
        return HeartbeatResult(ErrorCode.NONE, caught_up, fenced, should_shut_down=True), records
    if fenced and not request.want_fence and caught_up:
        if leave_pending:
            return HeartbeatResult(ErrorCode.NONE, caught_up, True), []
        records.append(UNFENCE_BROKER_RECORD(id=broker.broker_id, epoch=broker.epoch))
        elections, elections_left = _elect_on_unfence(image, broker.broker_id, elections_max)
        records += elections
        fenced = False
    elif not fenced and request.want_fence:
        records += plan_fence_brokers(image, [broker.broker_id])
        fenced = True
    return HeartbeatResult(ErrorCode.NONE, caught_up, fenced, False, elections_left), records


def plan_fence_brokers(image: MetadataImage, broker_ids: Iterable[int], *, changes_max: int | None = None) -> list:
    """Fence brokers (a session ran out, or they asked): FenceBrokerRecords, then
    every partition they led or followed in sync loses them, at most
    ``changes_max`` of those in this proposal (None: all; the rest are
    :func:`plan_partition_fixes`'). Unregistered brokers are skipped; an
    already fenced one gets no second FenceBrokerRecord, but any partition
    still naming it is fixed all the same."""
    gone = {b for b in broker_ids if b in image.brokers}
    records: list = [FENCE_BROKER_RECORD(id=b, epoch=image.brokers[b].epoch) for b in sorted(gone) if not image.brokers[b].fenced]
    records += _leave_partitions(image, gone, _usable_after(image, gone), limit=changes_max)
    return records


def plan_unregister_broker(image: MetadataImage, broker_id: int) -> tuple[ErrorCode, list]:
    """UnregisterBroker: the broker leaves every ISR and leadership, as when fenced,
    and its registration is removed."""
    broker = image.brokers.get(broker_id)
    if broker is None:
        return ErrorCode.BROKER_ID_NOT_REGISTERED, []
    records = _leave_partitions(image, {broker_id}, _usable_after(image, {broker_id}))
    records.append(UNREGISTER_BROKER_RECORD(broker_id=broker_id, broker_epoch=broker.epoch))
    return ErrorCode.NONE, records


def usable_broker_ids(image: MetadataImage) -> tuple[int, ...]:
    """Registered, unfenced brokers not shutting down: where new replicas and leaders may go."""
    return tuple(
        sorted(b for b, broker in image.brokers.items() if not broker.fenced and not broker.in_controlled_shutdown)
    )


def rack_alternating_order(image: MetadataImage, broker_ids: tuple[int, ...]) -> tuple[int, ...]:
    """Brokers in the order replicas are dealt out: one broker of each rack in turn
    (racks by name, brokers by id within a rack), as Kafka's rack-aware placement
    lists them, so that round-robin assignment puts a partition's replicas on as
    many racks as it can. Brokers without a rack form a rack of their own.
    (Topic creation now places replicas with controller.placement; this order is
    kept for callers that still pass ClusterDefaults.placement_order.)"""
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(broker_ids):
        rack = image.brokers[broker_id].rack if broker_id in image.brokers else None
        by_rack.setdefault(rack or "", []).append(broker_id)
    racks = [by_rack[name] for name in sorted(by_rack)]
    order = []
    for index in range(max((len(r) for r in racks), default=0)):
        order.extend(rack[index] for rack in racks if index < len(rack))
    return tuple(order)


# -- leadership ---------------------------------------------------------------


def _usable_after(image: MetadataImage, leaving: set[int]) -> set[int]:
    return {b for b in usable_broker_ids(image) if b not in leaving}


def unclean_election_enabled(image: MetadataImage, topic: TopicImage) -> bool:
    """unclean.leader.election.enable of the topic, else of the cluster-wide broker default."""
    value = topic.configs.get(UNCLEAN_LEADER_ELECTION_CONFIG)
    if value is None:
        value = image.broker_configs.get(UNCLEAN_LEADER_ELECTION_CONFIG, "false")
    return value.strip().lower() == "true"


def _change(topic_id: uuid.UUID, partition: PartitionImage, *, isr=None, leader=None, leader_recovery_state=None):
    """A PartitionChangeRecord carrying only what differs from ``partition``, or None.
    The leader field is set only when the leader really changes: any value there
    bumps the leader epoch."""
    fields = {}
    if isr is not None and tuple(isr) != partition.isr:
        fields["isr"] = list(isr)
    if leader is not None and leader != partition.leader:
        fields["leader"] = leader
    if leader_recovery_state is not None and leader_recovery_state != partition.leader_recovery_state:
        fields["leader_recovery_state"] = leader_recovery_state
    if not fields:
        return None
    return PARTITION_CHANGE_RECORD(partition_id=partition.partition_id, topic_id=topic_id, **fields)


def _leave_partitions(
    image: MetadataImage,
    leaving: set[int],
    usable: set[int],
    *,
    keep_sole_leader: bool = False,
    limit: int | None = None,
) -> list:
    """The partition changes for ``leaving`` brokers going out of every ISR and leadership.

    The ISR never empties: its last member stays, so that the partition can wait
    for the one broker known to have all its data. A leaving leader is replaced
    by the first usable member of the remaining ISR; with none, by the first
    usable replica when the topic allows unclean election (the ISR then restarts
    from it, recovering), else by nobody (-1). With ``keep_sole_leader`` a
    leader nobody in sync can replace keeps its leadership and its ISR. At most
    ``limit`` changes (None: all): the rest are :func:`plan_partition_fixes`'.
    """
    records = []
    for topic in image.topics.values():
        unclean: list = []
        for partition in topic.partitions.values():
            if partition.leader not in leaving and not leaving.intersection(partition.isr):
                continue
            if limit is not None and len(records) >= limit:
                return records
            change = _leave_change(image, topic, partition, leaving, usable, unclean, keep_sole_leader)
            if change is not None:
                records.append(change)
    return records


def _leave_change(image, topic, partition, leaving, usable, unclean: list, keep_sole_leader: bool = False):
    """One partition's change for ``leaving`` brokers (see :func:`_leave_partitions`),
    or None. ``unclean`` caches the topic's unclean election setting (empty: not read yet)."""
    isr = [b for b in partition.isr if b not in leaving] or list(partition.isr[-1:])
    leader = partition.leader
    recovery = None
    if leader in leaving or leader == NO_LEADER:
        leader = next((b for b in isr if b in usable and not replica_offline(image, partition, b)), NO_LEADER)
        if leader == NO_LEADER and keep_sole_leader and partition.leader in leaving:
            return None
        if leader == NO_LEADER:
            if not unclean:
                unclean.append(unclean_election_enabled(image, topic))
            if unclean[0]:
                leader = next(
                    (b for b in partition.replicas if b in usable and not replica_offline(image, partition, b)), NO_LEADER
                )
                if leader != NO_LEADER:
                    isr, recovery = [leader], LEADER_RECOVERY_STATE_RECOVERING
    return _change(topic.topic_id, partition, isr=isr, leader=leader, leader_recovery_state=recovery)


def _elect_on_unfence(image: MetadataImage, broker_id: int, limit: int | None) -> tuple[list, bool]:
    """Partitions without a leader whose ISR holds the returning broker get it back as
    leader; with unclean election allowed, so do those where it is only a replica.
    At most ``limit`` of them (None: all); also whether any were left."""
    records = []
    usable = set(usable_broker_ids(image))
    for topic in image.topics.values():
        unclean = None
        for partition in topic.partitions.values():
            if partition.leader != NO_LEADER or broker_id not in partition.replicas:
                continue
            if replica_offline(image, partition, broker_id):
                continue  # its log dir failed: it has nothing to lead with
            if limit is not None and len(records) >= limit:
                return records, True
            if broker_id in partition.isr:
                records.append(_change(topic.topic_id, partition, leader=broker_id))
                continue
            if unclean is None:
                unclean = unclean_election_enabled(image, topic)
            if unclean and not usable.intersection(partition.isr):
                records.append(
                    _change(
                        topic.topic_id,
                        partition,
                        isr=[broker_id],
                        leader=broker_id,
                        leader_recovery_state=LEADER_RECOVERY_STATE_RECOVERING,
                    )
                )
    return records, False


def _still_named(partition: PartitionImage, fenced: set[int]) -> bool:
    """Whether a fenced broker still leads ``partition`` or shares its ISR with
    another broker: what a bounded fencing or re-registration has left to do."""
    if partition.leader in fenced:
        return True
    return bool(fenced.intersection(partition.isr)) and not fenced.issuperset(partition.isr)


def iter_unfinished_partitions(image: MetadataImage):
    """Per topic, ``(partitions visited, keys)``: the ``(topic name, partition id)``
    of partitions that a fenced broker still leads or shares an ISR in, and of
    those without a leader, and (JBOD) those a replica in an offline log dir
    still leads or shares an ISR in. A generator, so that the caller can look at a big
    image a few topics at a time; :func:`plan_partition_fixes` decides what,
    if anything, each one needs."""
    fenced = {b for b, broker in image.brokers.items() if broker.fenced}
    # Only brokers that registered their dirs can have offline ones.
    jbod = any(broker.log_dirs for broker in image.brokers.values())
    for name, topic in image.topics.items():
        keys = [
            (name, partition.partition_id)
            for partition in topic.partitions.values()
            if partition.leader == NO_LEADER
            or (fenced and _still_named(partition, fenced))
            or (jbod and partition.directories and offline_still_named(image, partition))
        ]
        yield len(topic.partitions), keys


def plan_partition_fixes(image: MetadataImage, keys: list, start: int, limit: int) -> tuple[list, int]:
    """The changes that bounded fencings, re-registrations and unfences left, for
    ``keys[start:]`` as ``image`` has them now, until ``limit`` changes are
    planned: a fenced broker still leading, or in an ISR beside others, leaves
    (as :func:`plan_fence_brokers` would have done); a partition without a leader
    gets the first usable ISR member in replica order (Kafka's clean election),
    else, the topic allowing unclean election, the first usable replica, whose
    ISR then restarts from it, recovering. Returns ``(records, next start)``.

    Safe at any time: a partition has no leader only while no usable broker
    could take it cleanly (fencing and controlled shutdown elect one whenever
    they can), so whatever this finds became electable when a broker came back.
    """
    fenced = {b for b, broker in image.brokers.items() if broker.fenced}
    usable = set(usable_broker_ids(image))
    records: list = []
    index = start
    unclean_by_topic: dict[str, list] = {}
    while index < len(keys) and len(records) < limit:
        name, partition_id = keys[index]
        index += 1
        topic = image.topics.get(name)
        partition = topic.partitions.get(partition_id) if topic is not None else None
        if partition is None:
            continue
        unclean = unclean_by_topic.setdefault(name, [])
        change = None
        if fenced and _still_named(partition, fenced):
            change = _leave_change(image, topic, partition, fenced, usable, unclean)
        elif partition.directories and offline_still_named(image, partition):
            change = _leave_change(image, topic, partition, offline_replicas(image, partition), usable, unclean)
        elif partition.leader == NO_LEADER and usable:
            offline = offline_replicas(image, partition)
            leader = next(
                (b for b in partition.replicas if b in usable and b in partition.isr and b not in offline), NO_LEADER
            )
            if leader != NO_LEADER:
                change = _change(topic.topic_id, partition, leader=leader)
            else:
                if not unclean:
                    unclean.append(unclean_election_enabled(image, topic))
                leader = (
                    next((b for b in partition.replicas if b in usable and b not in offline), NO_LEADER)
                    if unclean[0]
                    else NO_LEADER
                )
                if leader != NO_LEADER:
                    change = _change(
                        topic.topic_id, partition, isr=[leader], leader=leader, leader_recovery_state=LEADER_RECOVERY_STATE_RECOVERING
                    )
        if change is not None:
            records.append(change)
    return records, index


def plan_unfinished_leadership(image: MetadataImage, limit: int) -> tuple[bool, list]:
    """What :func:`plan_partition_fixes` makes of the whole image in one piece, at
    most ``limit`` changes: ``(more left, records)``. For tests and small
    images; the active controller walks a big one a few topics at a time."""
    keys = [key for _, topic_keys in iter_unfinished_partitions(image) for key in topic_keys]
    records, end = plan_partition_fixes(image, keys, 0, limit)
    return end < len(keys), records


def _controlled_shutdown_records(image: MetadataImage, broker_id: int, broker_epoch: int, already: bool) -> list:
    records = []
    if not already:
        records.append(
            BROKER_REGISTRATION_CHANGE_RECORD(
                broker_id=broker_id, broker_epoch=broker_epoch, in_controlled_shutdown=CONTROLLED_SHUTDOWN_CHANGE_ENTER
            )
        )
    records += _leave_partitions(image, {broker_id}, _usable_after(image, {broker_id}), keep_sole_leader=True)
    return records
