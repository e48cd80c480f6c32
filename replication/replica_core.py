"""A replica's decisions, as pure rules returning effects (the leader's own rules
are replication/partition.py's).

The broker's shell (broker/replica/manager.py) and the replication simulation
(tests/sim/test_replication_simulation.py) both call these and carry out what
they return: the role a new metadata image gives this broker; on the follower
side the truncations, the append and the marks adopted from the leader; and
what an AlterPartition answer does to the leader's state. Nothing here does IO or reads a clock; a follower's log is
read through :class:`FollowerLog` (``storage.log.PartitionLog`` is one).

A fetch answer for one partition is applied in two steps, because the append
between them is the shell's and may fail:

1. :func:`on_fetch_response` decides from the answer's error, diverging epoch
   and marks what comes first: back off, truncate (KIP-320), start over at the
   leader's log start (out of range, behind it), or append the records;
2. after appending, :func:`adopt_leader_marks` says which high watermark and
   log start offset the follower takes from the leader.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from protocol.errors import ErrorCode
from replication.partition import IsrProposal, LeaderPartition, truncation_for_divergence


class FollowerLog(Protocol):
    """What the follower's decisions read of its log."""

    log_start_offset: int
    log_end_offset: int
    high_watermark: int

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...


class FollowerState:
    """One partition this broker follows, for one (leader, leader epoch)."""

    __slots__ = ("caught_up", "leader_epoch", "leader_id", "topic_id")

    def __init__(self, topic_id, leader_id: int, leader_epoch: int):
        self.topic_id = topic_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        # The leader's last answer found this replica at its high watermark (Kafka's
        # fetch state lag <= 0); unknown, so False, until an answer says so. A
        # follower throttle holds back only replicas that are not.
        self.caught_up = False


# ----------------------------------------------------------------- roles


class Role(Enum):
    """What a partition's new metadata makes of this broker's replica."""

    NOT_A_REPLICA = "not a replica"  # stop the replica if it was one
    HELD_BACK = "held back"  # named leader but may not lead (yet): neither lead nor follow
    LEADER_UPDATE = "leader update"  # still leader at the same epoch: new replicas or ISR
    NEW_LEADER = "new leader"  # resign any older leadership and lead this epoch
    LEADERLESS = "leaderless"  # no leader: neither lead nor follow, keep the log
    FOLLOWING = "following"  # already following this leader at this epoch: nothing to do
    NEW_FOLLOWER = "new follower"  # resign and follow this leader at this epoch


def role_for(
    node_id: int,
    leader_id: int,
    leader_epoch: int,
    replicas,
    *,
    may_lead: bool,
    superseded: bool,
    led_epoch: int | None,
    followed: tuple[int, int] | None,
) -> Role:
    """The role a partition's metadata (``leader_id`` at ``leader_epoch`` over
    ``replicas``) gives broker ``node_id``, which leads it at ``led_epoch`` (None:
    does not lead it) and follows ``followed`` ((leader, epoch); None: does not
    follow it). ``may_lead`` is False until the controller has seen this process
    caught up with its registration; ``superseded``: the controller said this
    leader epoch is over while the metadata still names this broker."""
    if node_id not in replicas:
        return Role.NOT_A_REPLICA
    if leader_id == node_id:
        if not may_lead or superseded:
            return Role.HELD_BACK
        return Role.LEADER_UPDATE if led_epoch == leader_epoch else Role.NEW_LEADER
    if leader_id < 0:
        return Role.LEADERLESS
    if followed == (leader_id, leader_epoch):
        return Role.FOLLOWING
    return Role.NEW_FOLLOWER


# ----------------------------------------------------------------- the leader's side


@dataclass(frozen=True)
class FollowerFetched:
    """What a follower's fetch did to the leader state: the high watermark moved
    (re-test what waits on it), or else the follower's log start moved (a
    DeleteRecords may be waiting for it); an ISR expansion to propose, or None."""

    high_watermark_moved: bool
    log_start_moved: bool
    expansion: tuple[int, ...] | None


def on_follower_fetch(
    leader: LeaderPartition,
    log_end_offset: int,
    replica_id: int,
    fetch_offset: int,
    now_ms: int,
    broker_epoch: int = -1,
    log_start_offset: int = -1,
) -> FollowerFetched:
    """A follower fetched from ``fetch_offset`` while the leader's log ends at
    ``log_end_offset`` (read now: appends made outside Produce count too)."""
    leader.observe_log_end(log_end_offset)
    start_before = leader.followers[replica_id].log_start_offset
    moved = leader.follower_fetched(replica_id, fetch_offset, now_ms, broker_epoch, log_start_offset)
    start_moved = not moved and leader.followers[replica_id].log_start_offset != start_before
    return FollowerFetched(moved, start_moved, leader.proposed_expansion())


def isr_shrink(leader: LeaderPartition, log_end_offset: int, now_ms: int) -> tuple[int, ...] | None:
    """The periodic ISR check: the shrunk ISR to propose, or None."""
    leader.observe_log_end(log_end_offset)
    return leader.proposed_shrink(now_ms)


# ----------------------------------------------------------------- a fetch answer


@dataclass(frozen=True)
class Backoff:
    """An error the metadata must resolve: this partition waits before fetching again."""

    error: ErrorCode


@dataclass(frozen=True)
class Truncate:
    """Cut the log to ``offset`` (it diverged from the leader, or runs ahead of it)."""

    offset: int
    reason: str


@dataclass(frozen=True)
class StartOver:
    """The log ends before the leader's log start: empty it and start at ``offset``,
    which is also its high watermark (everything below is committed and deleted)."""

    offset: int


@dataclass(frozen=True)
class Append:
    """Append ``records`` (possibly nothing), then adopt the leader's marks."""

    records: bytes | memoryview | None


FetchStep = Backoff | Truncate | StartOver | Append


def on_fetch_response(
    error: ErrorCode,
    diverging: tuple[int, int] | None,
    leader_high_watermark: int | None,
    leader_log_start_offset: int | None,
    records,
    plog: FollowerLog,
) -> FetchStep:
    """What a follower does first with its leader's answer for one partition."""
    if error == ErrorCode.OFFSET_OUT_OF_RANGE:
        return _out_of_range(leader_high_watermark, leader_log_start_offset, plog)
    if error != ErrorCode.NONE:
        return Backoff(error)
    if diverging is not None and (diverging[0] >= 0 or diverging[1] >= 0):
        epoch, end_offset = diverging
        truncation = truncation_for_divergence(
            epoch,
            end_offset,
            plog.end_offset_for_epoch(epoch) if epoch >= 0 else (-1, -1),
            plog.log_end_offset,
            plog.high_watermark,
        )
        return Truncate(truncation.offset, f"diverging at epoch {epoch} (end offset {end_offset})")
    return Append(records)


def _out_of_range(leader_high_watermark: int | None, leader_log_start_offset: int | None, plog: FollowerLog) -> FetchStep:
    if leader_log_start_offset is not None and leader_log_start_offset >= 0 and plog.log_end_offset < leader_log_start_offset:
        return StartOver(leader_log_start_offset)
    if leader_high_watermark is not None and 0 <= leader_high_watermark < plog.log_end_offset:
        return Truncate(leader_high_watermark, "ahead of the leader's high watermark")
    return Backoff(ErrorCode.OFFSET_OUT_OF_RANGE)


@dataclass(frozen=True)
class LeaderMarks:
    """What the follower adopts after appending: a higher high watermark (None: keep
    its own) and a log start to delete records up to (None: keep its own)."""

    high_watermark: int | None
    delete_records_to: int | None


def adopt_leader_marks(leader_high_watermark: int, leader_log_start_offset: int | None, plog: FollowerLog) -> LeaderMarks:
    """The leader's high watermark, capped at the follower's log end, when it is
    higher than the follower's own; the leader's log start once the follower's
    (new) high watermark has reached it, so a follower deletes only committed
    records."""
    high_watermark = min(leader_high_watermark, plog.log_end_offset)
    new_high_watermark = high_watermark if high_watermark > plog.high_watermark else None
    committed = plog.high_watermark if new_high_watermark is None else new_high_watermark
    delete_to = None
    if leader_log_start_offset is not None and plog.log_start_offset < leader_log_start_offset <= committed:
        delete_to = leader_log_start_offset
    return LeaderMarks(new_high_watermark, delete_to)


# ----------------------------------------------------------------- AlterPartition answers

# Errors after which the leader waits for the metadata to tell it more.
NOT_APPLIED_ALTER_ERRORS = frozenset({ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED})
STALE_ALTER_ERRORS = frozenset(
    {
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.NEW_LEADER_ELECTED,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
    }
)


@dataclass(frozen=True)
class AlterOutcome:
    """What one partition's AlterPartition answer did to the leader state.

    ``answered`` False: no answer settles the change (send it again).
    ``isr_change``: -1 a shrink, +1 an expansion was applied, 0 none.
    ``superseded``: the controller holds a newer leader epoch; stop leading until
    the metadata says who leads. ``refused``: the error to log, if any."""

    answered: bool
    high_watermark_moved: bool = False
    isr_change: int = 0
    superseded: bool = False
    refused: ErrorCode | None = None


def apply_alter_partition_answer(
    leader: LeaderPartition,
    still_leading: bool,
    error: ErrorCode,
    committed: tuple[int, tuple[int, ...], int] | None,
    now_ms: int,
) -> AlterOutcome:
    """Carry one partition's AlterPartition answer into ``leader`` (``still_leading``:
    it is still this broker's leader state of the partition); ``committed`` is
    the answer's (leader epoch, ISR, partition epoch) when ``error`` is NONE."""
    if error == ErrorCode.NONE:
        leader_epoch, isr, partition_epoch = committed
        if not (still_leading and leader_epoch == leader.leader_epoch):
            return AlterOutcome(True)
        isr_size = len(leader.isr)
        moved = leader.committed(isr, partition_epoch, now_ms)
        # Counted only when applied (an answer for an older partition epoch is not).
        change = (len(leader.isr) > isr_size) - (len(leader.isr) < isr_size)
        return AlterOutcome(True, moved, change)
    if error in NOT_APPLIED_ALTER_ERRORS:
        # The controller says the change was not made and the partition epoch is
        # current: back to the committed ISR, proposed again by a later check if
        # still right.
        if still_leading:
            leader.change_failed()
        return AlterOutcome(True, refused=error)
    if error in STALE_ALTER_ERRORS:
        # This leader's view is behind, and an earlier send of the same change may
        # have been applied: it stays pending until the metadata brings the truth.
        return AlterOutcome(True, refused=error, superseded=error == ErrorCode.FENCED_LEADER_EPOCH and still_leading)
    return AlterOutcome(False, refused=error)


def should_resend(leader: LeaderPartition, still_leading: bool, proposal: IsrProposal) -> bool:
    """After a failed send or an answer that settles nothing: the change may have been
    applied even though no answer said so, so it stays pending (counted in the
    maximal ISR) and the same request goes again, as Kafka's
    AlterPartitionManager does, while this leadership still proposes it."""
    return still_leading and leader.pending_isr == proposal.isr
