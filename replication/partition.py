"""A partition's replica state on its leader, as pure rules (Kafka's Partition).

The leader knows, per follower, the log end offset it last fetched from and
when it was last caught up; from these it moves the high watermark, decides
who leaves or joins the in-sync replica set (ISR), and tells an acks=all
produce when it is done. Nothing here does IO or reads a clock: times are
arguments, and ISR changes are proposals the caller sends to the controller
(AlterPartition) and reports back.

Rules, as Kafka 4 keeps them:

* The high watermark is the smallest log end offset over the *maximal* ISR
  (the committed ISR plus a replica whose addition is in flight, KIP-497), and
  over followers that are caught up and eligible but not in the ISR yet (so an
  expansion cannot make the high watermark go backwards). It never decreases.
  A follower's log end offset is unknown (-1) from the leader's election until
  its first fetch, so the high watermark waits for every ISR member to fetch.
* A follower is caught up when its fetch offset reaches the leader's log end
  offset as of that fetch; it also counts as caught up at the time of its
  previous fetch when it has since reached what the leader had then
  (Kafka's lastCaughtUpTimeMs). One not caught up for ``replica.lag.time.max.ms``
  leaves the ISR.
* A follower joins the ISR once its log end offset reaches both the high
  watermark and the start of the leader's epoch, and it is eligible (registered,
  unfenced, not shutting down: KIP-841).
* One ISR change at a time: while an AlterPartition is in flight no other
  change is proposed; the committed ISR comes back through the metadata (or the
  controller's answer) with a new partition epoch.
* acks=all needs ``min.insync.replicas`` in the committed ISR before the append
  (NOT_ENOUGH_REPLICAS) and is answered once the high watermark passes the
  batch; if the maximal ISR shrank below the minimum meanwhile, the answer is
  NOT_ENOUGH_REPLICAS_AFTER_APPEND.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from protocol.errors import ErrorCode

UNKNOWN_OFFSET = -1


class PartitionMarks(Protocol):
    """Where a partition's log end offset and high watermark live
    (``storage.log.PartitionLog``: its log end moves with its appends and
    truncations, and its high watermark setter refuses a move backwards or past
    the log end)."""

    high_watermark: int

    @property
    def log_end_offset(self) -> int: ...


class _OwnMarks:
    """The log end offset and high watermark of leader state bound to no log (the
    rules' own tests), the high watermark held to the same checks as the log's."""

    __slots__ = ("_offset", "log_end_offset")

    def __init__(self, log_end_offset: int, high_watermark: int):
        self.log_end_offset = log_end_offset
        self._offset = high_watermark

    @property
    def high_watermark(self) -> int:
        return self._offset

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        if offset < self._offset:
            raise AssertionError(f"high watermark moved back from {self._offset} to {offset}")
        self._offset = offset


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """An ISR change as the AlterPartition that asks for it: the new ISR, the
    partition epoch it was computed against, and each follower's broker epoch
    (the one its progress was made under; -1 unknown)."""

    isr: tuple[int, ...]
    partition_epoch: int
    follower_epochs: tuple[tuple[int, int], ...]

    def broker_epoch(self, replica: int, own_epoch: int) -> int:
        return dict(self.follower_epochs).get(replica, own_epoch)


@dataclass
class FollowerProgress:
    """The leader's view of one follower replica."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end_offset: int = UNKNOWN_OFFSET
    # The broker epoch the follower fetched with (-1: unknown, a pre-v15 fetch).
    # Progress made by an earlier incarnation of the broker says nothing about the
    # log it restarted with, so a follower may join the ISR only once it has
    # fetched with the epoch it is registered with now (KIP-903).
    broker_epoch: int = -1
    # The follower's own log start offset, as its last fetch said (-1: unknown).
    # It moves only when the follower applies the leader's (fetch responses carry
    # it), so the leader learns here when a DeleteRecords reached every replica.
    log_start_offset: int = UNKNOWN_OFFSET
    # The high watermark the follower was last sent (-1: none in this leadership).
    # A follower's high watermark is what a consumer reading from it (KIP-392) and
    # the partition's next leader start from, so a move the follower has not heard
    # of answers its waiting fetch at once, records or not (Kafka's
    # lastSentHighWatermark): else it would hear of it only at its next append or
    # at the end of its replica.fetch.wait.max.ms.
    last_sent_high_watermark: int = UNKNOWN_OFFSET

    def is_caught_up(self, leader_end_offset: int, now_ms: int, lag_max_ms: int) -> bool:
        return self.log_end_offset == leader_end_offset or now_ms - self.last_caught_up_ms <= lag_max_ms


class LeaderPartition:
    """Replica state of a partition this broker leads, for one leader epoch."""

    def __init__(
        self,
        *,
        local_id: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        leader_epoch: int,
        partition_epoch: int,
        log_end_offset: int | None = None,
        high_watermark: int,
        now_ms: int,
        lag_max_ms: int,
        min_insync_replicas: int = 1,
        ineligible: Iterable[int] = (),
        registered_epochs: Mapping[int, int] | None = None,
        log: PartitionMarks | None = None,
    ):
        """``log`` owns the log end offset and the high watermark: this state reads
        both from there and moves the high watermark there, so each has one home.
        Without a log, ``log_end_offset`` and ``high_watermark`` start private
        stand-ins; with one, a ``log_end_offset`` given must be the log's."""
        self.local_id = local_id
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.pending_isr: tuple[int, ...] | None = None
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        # Names the unbroken run of leader epochs this broker leads the partition
        # for: ``carry_over`` keeps it from the previous epoch, a leadership taken
        # up after another broker's (or after none) starts a new one. A wait made
        # in one tenure never completes in another, whose log may have been
        # truncated in between.
        self.tenure = object()
        if log is None:
            if log_end_offset is None:
                raise TypeError("leader state without a log needs its log_end_offset")
            self._owner: PartitionMarks = _OwnMarks(log_end_offset, min(high_watermark, log_end_offset))
        else:
            self._owner = log
            self.observe_log_end(log.log_end_offset if log_end_offset is None else log_end_offset)
        # The offset this leader epoch started at: a follower must hold at least
        # this much to be in sync (it has seen every earlier epoch's end).
        self.leader_epoch_start_offset = self.log_end_offset
        self.lag_max_ms = lag_max_ms
        self.min_insync_replicas = min_insync_replicas
        self.ineligible = set(ineligible)
        self.registered_epochs: dict[int, int] = dict(registered_epochs or {})
        # Kafka resets followers on election: ISR members count as caught up now,
        # so they have a full lag period to fetch before they are dropped.
        self.followers = {
            replica: FollowerProgress(last_caught_up_ms=now_ms if replica in self.isr else 0)
            for replica in self.replicas
            if replica != local_id
        }
        self.maybe_advance_high_watermark(now_ms)

    # ----------------------------------------------------------------- views

    @property
    def high_watermark(self) -> int:
        return self._owner.high_watermark

    @property
    def log_end_offset(self) -> int:
        """The leader's log end offset, read from its log (its one home)."""
        return self._owner.log_end_offset

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    @property
    def change_in_flight(self) -> bool:
        return self.pending_isr is not None

    def is_replica(self, broker_id: int) -> bool:
        return broker_id in self.followers

    # ----------------------------------------------------------------- progress

    def observe_log_end(self, log_end_offset: int) -> None:
        """The leader's log ends at ``log_end_offset`` now. State bound to no log
        takes it into its stand-in; a log's own end must agree, as the log is
        where it lives (a different one would mean two logs for one partition)."""
        owner = self._owner
        if isinstance(owner, _OwnMarks):
            owner.log_end_offset = log_end_offset
        elif owner.log_end_offset != log_end_offset:
            raise AssertionError(f"told of log end {log_end_offset}, the leader's log ends at {owner.log_end_offset}")

    def leader_appended(self, log_end_offset: int, now_ms: int) -> bool:
        """The leader's log grew to ``log_end_offset``; True when the high watermark moved."""
        self.observe_log_end(log_end_offset)
        return self.maybe_advance_high_watermark(now_ms)

    def follower_fetched(
        self, replica_id: int, fetch_offset: int, now_ms: int, broker_epoch: int = -1, log_start_offset: int = UNKNOWN_OFFSET
    ) -> bool:
        """A follower fetched from ``fetch_offset`` (so it holds everything below)
        as broker epoch ``broker_epoch``, its log starting at ``log_start_offset``;
        True when the high watermark moved. A fetch from an older incarnation than
        one already seen is ignored."""
        progress = self.followers[replica_id]
        if broker_epoch >= 0:
            if broker_epoch < progress.broker_epoch:
                return False
            progress.broker_epoch = broker_epoch
        if log_start_offset >= 0:
            progress.log_start_offset = log_start_offset
        if fetch_offset >= self.log_end_offset:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
        elif fetch_offset >= progress.last_fetch_leader_end_offset:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.last_fetch_leader_end_offset = self.log_end_offset
        progress.last_fetch_ms = now_ms
        progress.log_end_offset = min(fetch_offset, self.log_end_offset)
        return self.maybe_advance_high_watermark(now_ms)

    def send_high_watermark(self, replica_id: int) -> bool:
        """Follower ``replica_id``'s fetch answer carries the high watermark now;
        True when the follower had not been sent it yet (its fetch must then be
        answered at once, see FollowerProgress.last_sent_high_watermark)."""
        progress = self.followers[replica_id]
        high_watermark = self.high_watermark
        behind = progress.last_sent_high_watermark < high_watermark
        progress.last_sent_high_watermark = high_watermark
        return behind

    def maybe_advance_high_watermark(self, now_ms: int) -> bool:
        new_hw = self.log_end_offset
        maximal = self.maximal_isr
        for replica, progress in self.followers.items():
            if progress.log_end_offset >= new_hw:
                continue
            joining = (
                progress.log_end_offset >= 0
                and self._eligible(replica)
                and progress.is_caught_up(self.log_end_offset, now_ms, self.lag_max_ms)
            )
            if replica in maximal or joining:
                new_hw = progress.log_end_offset
        if new_hw > self._owner.high_watermark:
            self._owner.high_watermark = new_hw
            return True
        return False

    # ----------------------------------------------------------------- acks=all

    def check_enough_replicas(self) -> ErrorCode:
        """Before an acks=all append (Kafka counts the committed ISR here)."""
        if len(self.isr) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def produce_outcome(self, required_offset: int) -> ErrorCode | None:
        """None while an acks=all produce whose last offset is ``required_offset - 1``
        must wait; else its answer."""
        if self.high_watermark < required_offset:
            return None
        if len(self.maximal_isr) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def low_watermark(self, own_log_start_offset: int) -> int:
        """The lowest log start offset of this replica and of every follower that is
        not fenced or shutting down (Kafka's lowWatermarkIfLeader): a DeleteRecords
        is done when this reaches its offset. A live follower that has not fetched
        yet counts as unknown (-1), so the deletion waits for it."""
        low = own_log_start_offset
        for replica, progress in self.followers.items():
            if replica not in self.ineligible and progress.log_start_offset < low:
                low = progress.log_start_offset
        return low

    # ----------------------------------------------------------------- ISR changes

    def _eligible(self, replica: int) -> bool:
        """Not fenced or shutting down, and its progress is from the incarnation the
        metadata knows (when both epochs are known)."""
        if replica in self.ineligible:
            return False
        fetched = self.followers[replica].broker_epoch
        registered = self.registered_epochs.get(replica, -1)
        return fetched < 0 or registered < 0 or fetched == registered

    def isr_broker_epoch(self, replica: int) -> int:
        """The broker epoch to name for ``replica`` in an AlterPartition: the one it
        fetched with, so the controller refuses progress of a dead incarnation."""
        if replica in self.followers and self.followers[replica].broker_epoch >= 0:
            return self.followers[replica].broker_epoch
        return self.registered_epochs.get(replica, -1)

    def _in_sync(self, replica: int) -> bool:
        progress = self.followers[replica]
        return (
            self._eligible(replica)
            and progress.log_end_offset >= self.high_watermark
            and progress.log_end_offset >= self.leader_epoch_start_offset
        )

    def proposed_expansion(self) -> tuple[int, ...] | None:
        """The ISR with one caught-up follower added, or None (nothing to add, or a
        change already in flight). Replicas keep their replica-list order."""
        if self.change_in_flight:
            return None
        for replica in self.followers:
            if replica not in self.isr and self._in_sync(replica):
                joined = set(self.isr) | {replica}
                return tuple(r for r in self.replicas if r in joined)
        return None

    def proposed_shrink(self, now_ms: int) -> tuple[int, ...] | None:
        """The ISR without followers that have lagged for longer than
        ``replica.lag.time.max.ms`` (or that became ineligible), or None."""
        if self.change_in_flight:
            return None
        out = {
            replica
            for replica in self.isr
            if replica != self.local_id
            and (
                replica in self.ineligible
                or not self.followers[replica].is_caught_up(self.log_end_offset, now_ms, self.lag_max_ms)
            )
        }
        if not out:
            return None
        return tuple(r for r in self.isr if r not in out)

    def begin_change(self, new_isr: Iterable[int]) -> IsrProposal:
        """``new_isr`` is in flight from now on; what to send for it, fixed now: a
        resend must not pick up a newer partition epoch or a newer incarnation's
        broker epoch, which the controller would accept for progress it never
        made."""
        self.pending_isr = tuple(new_isr)
        return IsrProposal(
            self.pending_isr,
            self.partition_epoch,
            tuple((b, self.isr_broker_epoch(b)) for b in self.pending_isr if b != self.local_id),
        )

    def change_failed(self) -> None:
        self.pending_isr = None

    def committed(self, isr: Iterable[int], partition_epoch: int, now_ms: int) -> bool:
        """A committed ISR (the controller's answer or the metadata) for this leader
        epoch; older partition epochs are ignored. True when the high watermark moved."""
        if partition_epoch < self.partition_epoch:
            return False
        isr = tuple(isr)
        if partition_epoch == self.partition_epoch and self.pending_isr is not None and isr != self.pending_isr:
            return False  # the ISR we knew again: the change in flight is still open
        self.isr = isr
        self.partition_epoch = partition_epoch
        self.pending_isr = None
        return self.maybe_advance_high_watermark(now_ms)

    def set_replicas(self, replicas: Iterable[int]) -> None:
        """The assignment changed within this leader epoch: a reassignment added
        or reordered replicas (one that removes a replica always brings a new
        leader epoch). An added replica is tracked from nothing, so it joins the
        ISR only once it has caught up, and holds back no high watermark before."""
        self.replicas = tuple(replicas)
        for replica in self.replicas:
            if replica != self.local_id and replica not in self.followers:
                self.followers[replica] = FollowerProgress()
        for replica in [r for r in self.followers if r not in self.replicas]:
            del self.followers[replica]

    def carry_over(self, previous: LeaderPartition, now_ms: int) -> bool:
        """This broker led the partition's previous leader epoch as ``previous``
        and leads this one too (the epoch moved without the leader: a
        reassignment, an ISR change through the controller). What each follower
        was known to hold stays known (Kafka's resetReplicaState for a leader
        that is not new): its log end and log start offsets and the broker epoch
        it fetched with; its timers start over as on any election, counted from
        now for ISR members and from never for the rest. True when the high
        watermark moved (the new ISR may be smaller)."""
        self.tenure = previous.tenure
        for replica, progress in self.followers.items():
            before = previous.followers.get(replica)
            if before is None:
                continue
            progress.log_end_offset = before.log_end_offset
            progress.log_start_offset = before.log_start_offset
            progress.broker_epoch = before.broker_epoch
            progress.last_sent_high_watermark = before.last_sent_high_watermark
            progress.last_fetch_leader_end_offset = self.leader_epoch_start_offset
            progress.last_fetch_ms = now_ms if replica in self.isr else 0
        return self.maybe_advance_high_watermark(now_ms)

    def set_ineligible(self, broker_ids: Iterable[int], now_ms: int, registered_epochs: Mapping[int, int] | None = None) -> bool:
        self.ineligible = set(broker_ids)
        if registered_epochs is not None:
            self.registered_epochs = dict(registered_epochs)
        return self.maybe_advance_high_watermark(now_ms)

    def preferred_read_replica(self, client_rack: str, racks: Mapping[int, str | None], fetch_offset: int) -> int:
        """KIP-392 with Kafka's RackAwareReplicaSelector: a consumer that names its
        rack reads from a replica in that rack, the leader if it is one; among
        followers, only those holding ``fetch_offset`` and not fenced qualify, the
        furthest ahead (then the most recently caught up) winning. Anyone else,
        or a consumer without a rack, reads from the leader."""
        if not client_rack or racks.get(self.local_id) == client_rack:
            return self.local_id
        best = None
        for replica, progress in self.followers.items():
            if racks.get(replica) != client_rack or replica in self.ineligible:
                continue
            if progress.log_end_offset < fetch_offset:
                continue
            rank = (progress.log_end_offset, progress.last_caught_up_ms)
            if best is None or rank > best[0]:
                best = (rank, replica)
        return self.local_id if best is None else best[1]


# ----------------------------------------------------------------- follower side


@dataclass(frozen=True)
class Truncation:
    """Where a follower cuts its log after its leader reported a divergence, and
    whether that settles it (else the next fetch, carrying the follower's then
    latest epoch, asks again)."""

    offset: int
    complete: bool


def truncation_for_divergence(
    diverging_epoch: int,
    diverging_end_offset: int,
    local_end_offset_for_epoch: tuple[int, int],
    local_log_end_offset: int,
    local_high_watermark: int,
) -> Truncation:
    """Kafka's rule (KIP-320) for a fetch answered with ``diverging_epoch``:
    ``local_end_offset_for_epoch`` is the follower's own (epoch, end offset) for
    the largest epoch at or below ``diverging_epoch`` ((-1, -1) when it has none).

    * The follower has that epoch: its log agrees up to the smaller of the two
      end offsets, so it cuts there and is done.
    * It has only an older epoch: it cuts to where that one ends and asks again.
    * It has none: everything from the leader's end offset on may differ.
    * The leader has no epoch to offer (its cache lacks the follower's epoch
      and every earlier one): the follower falls back to its high watermark,
      everything below which is committed.
    """
    local_epoch, local_end = local_end_offset_for_epoch
    if diverging_end_offset < 0:
        return Truncation(min(local_high_watermark, local_log_end_offset), True)
    if local_epoch < 0 or local_end < 0:
        return Truncation(min(diverging_end_offset, local_log_end_offset), True)
    if local_epoch != diverging_epoch:
        return Truncation(min(local_end, local_log_end_offset), False)
    return Truncation(min(local_end, diverging_end_offset, local_log_end_offset), True)


def diverging_epoch_for_fetch(
    last_fetched_epoch: int, fetch_offset: int, leader_end_offset_for_epoch: tuple[int, int]
) -> tuple[int, int] | None:
    """The leader's check of a follower fetch (KIP-320): ``leader_end_offset_for_epoch``
    answers ``last_fetched_epoch`` from the leader's epoch cache. The follower
    diverges when the leader does not have that epoch or the epoch ended below the
    fetch offset; the answer is the (epoch, end offset) to send back, or None."""
    if last_fetched_epoch < 0:
        return None
    epoch, end_offset = leader_end_offset_for_epoch
    if epoch != last_fetched_epoch or end_offset < fetch_offset:
        return epoch, end_offset
    return None
