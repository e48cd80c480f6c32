"""The Raft core of a KRaft-style quorum: a pure state machine (KIP-595, KIP-996).

Longer than ~700 lines on purpose: roles, elections, fetch and snapshot
handling change the same epoch, vote and high-watermark state, and the
simulation checks them as one machine; messages, wire format, log and quorum
state already live in their own modules.

No IO, no clock, no randomness of its own: time comes in as ``now_ms`` and the
election jitter from the ``random.Random`` passed in, so a run is a function
of its inputs and a simulation can replay it from a seed.

Inputs
    ``step(now_ms, message)``      a message received from another node
    ``tick(now_ms)``               time passed (call at ``next_deadline_ms``)
    ``propose(now_ms, records)``   leader only: append the records as one batch
    ``resign(now_ms)``             graceful shutdown of a leader (EndQuorumEpoch)
    ``snapshot_created(now_ms, snapshot_id)``  the state machine stored a snapshot

Each returns an ``Output``. The core appends to and truncates its ``RaftLog``
itself (synchronous, page-cache-like operations; ``Output.log_ops`` lists what
it did), but durability and sending are the driver's, in this order:

    1. persist ``Output.quorum_state`` (the ``quorum-state`` file) when set;
    2. flush the log when ``Output.flush`` is set;
    3. only then send ``Output.messages``;
    4. hand ``Output.committed`` / ``log_ops`` to the state machine;
    5. call ``tick`` again at ``Output.next_deadline_ms``.

Steps 1-2 before 3 is what makes the protocol safe across crashes: a vote is
on disk before the candidate hears of it, and the offset a follower reports in
its next Fetch (from which the leader advances the high watermark) is durable.
A crash between steps loses only things no other node has been told.

The one exception is the leader's own appends (proposals, its LeaderChange
batch): like Kafka's leader it may replicate them before they are on its disk,
so they set ``Output.flush_soon`` rather than ``flush``. The driver flushes
them when it likes (at once, or batched on a timer) and then calls ``tick``;
until then the leader does not count them towards the high watermark, so a
leader crash that loses them cannot lose a committed entry.

States: Unattached (possibly having voted in its epoch), Prospective (pre-vote,
epoch unchanged), Candidate, Leader, Follower, Resigned. Observers (non-voters)
are only ever Unattached or Follower. A node never forgets a known leader of
its current epoch, because an Unattached node may vote in that epoch.

The high watermark is the largest offset held by a majority of voters, counting
the leader's own flushed entries only, and it only moves once it covers the
LeaderChange control batch the leader wrote at the start of its epoch (Raft's
"commit an entry of your own term"). It never goes down while the node runs;
after a restart it starts at the log start offset (the latest snapshot), the
only thing the node knows to be committed without asking the leader.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field

from controller.raft.log import UNDEFINED, Batch, OffsetAndEpoch, RaftLog, SnapshotId
from controller.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    RequestFailed,
    VoteRequest,
    VoteResponse,
)
from controller.raft.quorum_state import QuorumState
from protocol.errors import ErrorCode

LEADER_CHANGE_MAGIC = b"LeaderChange:"


class Role(enum.Enum):
    UNATTACHED = "unattached"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    FOLLOWER = "follower"
    RESIGNED = "resigned"


@dataclass(frozen=True, slots=True)
class RaftConfig:
    # controller.quorum.election.timeout.ms: the base; each wait adds up to as much again at random.
    election_timeout_ms: int = 1000
    # controller.quorum.fetch.timeout.ms: a follower that has not fetched successfully this long
    # stands for election; a leader that has not been fetched from by a majority for 1.5x resigns.
    fetch_timeout_ms: int = 2000
    # controller.quorum.election.backoff.max.ms: cap of the random exponential backoff.
    election_backoff_max_ms: int = 1000
    election_backoff_base_ms: int = 50
    # controller.quorum.request.timeout.ms: resend an unanswered request after this long.
    request_timeout_ms: int = 2000
    # controller.quorum.retry.backoff.ms: resend unanswered (pre-)vote requests this often
    # during an election, so one lost message does not cost a whole election timeout.
    retry_backoff_ms: int = 20
    # How long the leader may park a fetch that has nothing new for the fetcher.
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 1 << 20
    snapshot_chunk_bytes: int = 1 << 20

    @property
    def check_quorum_timeout_ms(self) -> int:
        return self.fetch_timeout_ms * 3 // 2


# -- outputs ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Appended:
    base_offset: int
    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Truncated:
    end_offset: int  # the log now ends here


@dataclass(frozen=True, slots=True)
class PrefixDeleted:
    start_offset: int  # the log now starts here (at a snapshot's end)


@dataclass(frozen=True, slots=True)
class SnapshotInstalled:
    snapshot_id: SnapshotId  # fetched from the leader; the state machine must load it


LogOp = Appended | Truncated | PrefixDeleted | SnapshotInstalled


@dataclass(frozen=True, slots=True)
class ProposeResult:
    base_offset: int = -1
    end_offset: int = -1
    epoch: int = -1
    error: ErrorCode = ErrorCode.NONE


@dataclass(slots=True)
class Output:
    """What one call asks of the driver; see the module docstring for the order."""

    messages: list[tuple[int, Message]] = field(default_factory=list)
    quorum_state: QuorumState | None = None
    flush: bool = False
    # Leader only: its own appends, which may be sent before they are flushed; flush, then tick.
    flush_soon: bool = False
    log_ops: list[LogOp] = field(default_factory=list)
    # The new high watermark when it moved, and the offsets it newly covers
    # ([start, end)); entries a SnapshotInstalled in log_ops brought are not included.
    high_watermark: int | None = None
    committed: tuple[int, int] | None = None
    proposal: ProposeResult | None = None
    next_deadline_ms: int = 0


@dataclass(slots=True)
class ReplicaState:
    replica_id: int
    end_offset: int = -1  # -1: not fetched this epoch
    last_fetch_ms: int | None = None
    last_caught_up_ms: int | None = None


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    """DescribeQuorum's answer as this node knows it (complete on the leader)."""

    leader_id: int | None
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]


class RaftError(RuntimeError):
    """A bug: the core was about to break one of its invariants."""


class RaftNode:
    def __init__(
        self,
        node_id: int,
        voters: set[int] | frozenset[int] | tuple[int, ...],
        log: RaftLog,
        rng: random.Random,
        now_ms: int,
        config: RaftConfig | None = None,
        state: QuorumState | None = None,
    ) -> None:
        self.node_id = node_id
        self.voters = frozenset(voters)
        if not self.voters:
            raise ValueError("a quorum needs at least one voter")
        self.is_voter = node_id in self.voters
        self.log = log
        self.rng = rng
        self.config = config or RaftConfig()
        self._others = tuple(sorted(self.voters - {node_id}))
        self._majority = len(self.voters) // 2 + 1

        state = state or QuorumState()
        if state.current_voters is not None and frozenset(state.current_voters) != self.voters:
            # A static quorum cannot change under a node's feet: refuse rather than split-brain.
            raise ValueError(f"quorum-state voters {sorted(state.current_voters)} differ from {sorted(self.voters)}")
        self.epoch = state.leader_epoch
        self.leader_id: int | None = state.leader_id
        self.voted_id: int | None = state.voted_id
        # Only what a snapshot holds is known committed before the leader says more.
        self.high_watermark = log.start_offset
        self._out = Output()

        self._election_deadline_ms = now_ms
        self._election_retries = 0
        self._granted: set[int] = set()
        self._rejected: set[int] = set()
        self._candidate_lost = False
        self._prevote_active = False
        self._vote_resend_ms = now_ms
        # follower
        self._fetch_deadline_ms = now_ms
        self._fetch_resend_ms = now_ms
        self._leader_contact_ms: int | None = None
        self._leader_resigned = False
        self._snapshot_fetch: tuple[SnapshotId, int] | None = None
        # leader
        self._epoch_start_offset = -1
        self._replicas: dict[int, ReplicaState] = {}
        self._observers: dict[int, ReplicaState] = {}
        self._parked: dict[int, tuple[FetchRequest, int]] = {}
        self._unacked: set[int] = set()
        self._resend_ms = now_ms
        self._reminded_ms: dict[int, int] = {}  # stale voter -> when it may be reminded again
        self._preferred: tuple[int, ...] = ()

        if self.leader_id == node_id:
            # It led this epoch before a restart; it cannot lead it again.
            self.role = Role.RESIGNED
            self._election_deadline_ms = now_ms + self._election_timeout_ms()
        elif self.leader_id is not None:
            self.role = Role.FOLLOWER
            self._fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        else:
            self.role = Role.UNATTACHED
            # An observer looks for the leader at once; a voter waits for one to show up.
            self._election_deadline_ms = now_ms + (self._election_timeout_ms() if self.is_voter else 0)
        if self.voters == {node_id}:
            # A quorum of one has nobody to wait for: it elects itself at once.
            self._election_deadline_ms = now_ms

    # -- public API ------------------------------------------------------

    def step(self, now_ms: int, message: Message) -> Output:
        handler = _HANDLERS[type(message)]
        handler(self, now_ms, message)
        return self._finish(now_ms)

    def tick(self, now_ms: int) -> Output:
        role = self.role
        if role is Role.LEADER:
            self._leader_tick(now_ms)
        elif role is Role.FOLLOWER:
            self._follower_tick(now_ms)
        elif role is Role.UNATTACHED:
            if now_ms >= self._election_deadline_ms:
                if self.is_voter:
                    self._become_prospective(now_ms)
                else:
                    self._observer_probe(now_ms)
        elif role is Role.PROSPECTIVE:
            if now_ms >= self._election_deadline_ms:
                if self._prevote_active:
                    self._prospective_round_failed(now_ms)  # the round timed out
                else:
                    self._start_prevote_round(now_ms)  # the backoff after a lost round is over
            else:
                self._resend_vote_requests(now_ms)
        elif role is Role.CANDIDATE:
            if now_ms >= self._election_deadline_ms:
                if self._candidate_lost:
                    self._become_prospective(now_ms)
                else:
                    self._candidate_lost = True
                    self._election_retries += 1
                    self._election_deadline_ms = now_ms + self._backoff_ms()
            else:
                self._resend_vote_requests(now_ms)
        elif role is Role.RESIGNED:
            if now_ms >= self._election_deadline_ms:
                self._become_prospective(now_ms)
            else:
                self._resend_unacked(now_ms)
        return self._finish(now_ms)

    def propose(self, now_ms: int, records: list[bytes]) -> Output:
        if self.role is not Role.LEADER:
            self._out.proposal = ProposeResult(error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
        elif not records:
            self._out.proposal = ProposeResult(error=ErrorCode.INVALID_REQUEST)
        else:
            batch = Batch(self.log.end_offset, self.epoch, tuple(records))
            self._append(batch)
            self._out.proposal = ProposeResult(batch.base_offset, batch.end_offset, self.epoch)
            self._answer_parked(now_ms)
        return self._finish(now_ms)

    def resign(self, now_ms: int) -> Output:
        if self.role is Role.LEADER:
            self._become_resigned(now_ms)
        return self._finish(now_ms)

    def snapshot_created(self, now_ms: int, snapshot_id: SnapshotId) -> Output:
        """The state machine stored ``snapshot_id`` in the log; drop the prefix it covers."""
        if snapshot_id.end_offset > self.high_watermark:
            raise RaftError(f"snapshot {snapshot_id} is past the high watermark {self.high_watermark}")
        if snapshot_id.end_offset > self.log.start_offset:
            self.log.delete_before(snapshot_id)
            self._out.log_ops.append(PrefixDeleted(self.log.start_offset))
        return self._finish(now_ms)

    @property
    def next_deadline_ms(self) -> int:
        return self._next_deadline()

    def describe_quorum(self) -> QuorumInfo:
        voters = []
        for voter in sorted(self.voters):
            if voter == self.node_id:
                voters.append(ReplicaState(voter, self.log.end_offset, None, None))
            elif self.role is Role.LEADER:
                voters.append(_copy(self._replicas[voter]))
            else:
                voters.append(ReplicaState(voter))
        observers = tuple(_copy(r) for _, r in sorted(self._observers.items())) if self.role is Role.LEADER else ()
        return QuorumInfo(self.leader_id, self.epoch, self.high_watermark, tuple(voters), observers)

    # -- transitions -----------------------------------------------------

    def _persist(self) -> None:
        self._out.quorum_state = QuorumState(
            leader_epoch=self.epoch,
            leader_id=self.leader_id,
            voted_id=self.voted_id,
            current_voters=tuple(sorted(self.voters)),
        )

    def _leave_leadership(self, now_ms: int) -> None:
        # Parked fetches would otherwise wait for a deadline nobody checks.
        for request, _ in self._parked.values():
            self._reply_fetch_error(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._parked.clear()

    def _become_unattached(self, now_ms: int, epoch: int) -> None:
        self._leave_leadership(now_ms)
        self.role = Role.UNATTACHED
        if epoch != self.epoch:
            self.voted_id = None
        self.epoch = epoch
        self.leader_id = None
        self._snapshot_fetch = None
        self._election_deadline_ms = now_ms + (self._election_timeout_ms() if self.is_voter else 0)
        self._persist()

    def _become_follower(self, now_ms: int, epoch: int, leader_id: int) -> None:
        self._leave_leadership(now_ms)
        if epoch != self.epoch:
            self.voted_id = None
        self.role = Role.FOLLOWER
        self.epoch = epoch
        self.leader_id = leader_id
        self._leader_resigned = False
        self._leader_contact_ms = now_ms
        self._fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        self._fetch_resend_ms = now_ms  # fetch at once
        self._snapshot_fetch = None
        self._election_retries = 0
        self._persist()

    def _become_prospective(self, now_ms: int) -> None:
        self._leave_leadership(now_ms)
        self.role = Role.PROSPECTIVE
        self._snapshot_fetch = None
        self._start_prevote_round(now_ms)

    def _start_prevote_round(self, now_ms: int) -> None:
        self._granted = {self.node_id}
        self._rejected = set()
        self._election_deadline_ms = now_ms + self._election_timeout_ms()
        if len(self._granted) >= self._majority:
            self._become_candidate(now_ms)
            return
        self._prevote_active = True
        self._resend_vote_requests(now_ms, force=True)

    def _prospective_round_failed(self, now_ms: int) -> None:
        self._election_retries += 1
        if self.leader_id is not None and not self._leader_resigned:
            # The rest of the quorum still follows our leader (KIP-996): go back to it.
            self._become_follower(now_ms, self.epoch, self.leader_id)
            return
        self._prevote_active = False
        self._election_deadline_ms = now_ms + self._backoff_ms()

    def _voting_open(self) -> bool:
        if self.role is Role.CANDIDATE:
            return not self._candidate_lost
        return self.role is Role.PROSPECTIVE and self._prevote_active

    def _resend_vote_requests(self, now_ms: int, force: bool = False) -> None:
        if not self._voting_open() or (not force and now_ms < self._vote_resend_ms):
            return
        pre_vote = self.role is Role.PROSPECTIVE
        epoch = self.epoch + 1 if pre_vote else self.epoch
        request = VoteRequest(self.node_id, epoch, self.log.last_epoch, self.log.end_offset, pre_vote=pre_vote)
        for voter in self._others:
            if voter not in self._granted and voter not in self._rejected:
                self._out.messages.append((voter, request))
        self._vote_resend_ms = now_ms + self.config.retry_backoff_ms

    def _become_candidate(self, now_ms: int) -> None:
        self.role = Role.CANDIDATE
        self.epoch += 1
        self.leader_id = None
        self.voted_id = self.node_id
        self._leader_resigned = False
        self._candidate_lost = False
        self._granted = {self.node_id}
        self._rejected = set()
        self._election_deadline_ms = now_ms + self._election_timeout_ms()
        self._persist()
        if len(self._granted) >= self._majority:
            self._become_leader(now_ms)
            return
        self._resend_vote_requests(now_ms, force=True)

    def _become_leader(self, now_ms: int) -> None:
        self.role = Role.LEADER
        self.leader_id = self.node_id
        self._election_retries = 0
        self._persist()
        # The LeaderChange control batch: committing it commits every earlier
        # entry, which the leader may not count by replica offsets alone.
        control = Batch(
            self.log.end_offset,
            self.epoch,
            (LEADER_CHANGE_MAGIC + str(self.node_id).encode(),),
            control=True,
        )
        self._epoch_start_offset = control.base_offset
        self._append(control)
        self._replicas = {v: ReplicaState(v, last_fetch_ms=now_ms) for v in self._others}
        self._observers = {}
        self._parked = {}
        self._unacked = set(self._others)
        self._send_to_unacked(BeginQuorumEpochRequest(self.node_id, self.epoch))
        self._resend_ms = now_ms + self.config.request_timeout_ms
        self._update_leader_hw(now_ms)

    def _become_resigned(self, now_ms: int) -> None:
        self._leave_leadership(now_ms)
        self.role = Role.RESIGNED
        # Best-replicated voters first: they are most likely to win and lose nothing.
        ranked = sorted(self._others, key=lambda v: (-self._replicas[v].end_offset, v)) if self._replicas else ()
        self._preferred = tuple(ranked)
        self._unacked = set(self._others)
        self._send_to_unacked(EndQuorumEpochRequest(self.node_id, self.epoch, self._preferred))
        self._resend_ms = now_ms + self.config.request_timeout_ms
        self._election_deadline_ms = now_ms + self._election_timeout_ms()

    def _observe_epoch(self, now_ms: int, epoch: int, leader_id: int | None) -> None:
        """Adopt a higher epoch, or a leader of our epoch we did not know."""
        if leader_id == self.node_id:
            leader_id = None
        if epoch > self.epoch:
            if leader_id is not None:
                self._become_follower(now_ms, epoch, leader_id)
            else:
                self._become_unattached(now_ms, epoch)
        elif epoch == self.epoch and leader_id is not None and self.leader_id is None and self.role is not Role.LEADER:
            self._become_follower(now_ms, epoch, leader_id)

    # -- helpers ---------------------------------------------------------

    def _election_timeout_ms(self) -> int:
        base = self.config.election_timeout_ms
        return base + self.rng.randrange(base)

    def _backoff_ms(self) -> int:
        cap = min(
            self.config.election_backoff_max_ms,
            self.config.election_backoff_base_ms * (1 << min(self._election_retries, 20)),
        )
        return self.rng.randint(1, max(cap, 1))

    def _append(self, batch: Batch) -> None:
        self.log.append(batch)
        self._out.log_ops.append(Appended(batch.base_offset, batch.end_offset, batch.epoch))
        if self.role is Role.LEADER:
            self._out.flush_soon = True
        else:
            self._out.flush = True

    def _set_high_watermark(self, new: int) -> None:
        if new > self.high_watermark:
            old = self.high_watermark
            self.high_watermark = new
            self._out.high_watermark = new
            start = old if self._out.committed is None else self._out.committed[0]
            self._out.committed = (start, new)

    def _send_to_unacked(self, message: Message) -> None:
        for voter in sorted(self._unacked):
            self._out.messages.append((voter, message))

    def _resend_unacked(self, now_ms: int) -> None:
        if self._unacked and now_ms >= self._resend_ms:
            if self.role is Role.LEADER:
                self._send_to_unacked(BeginQuorumEpochRequest(self.node_id, self.epoch))
            else:
                self._send_to_unacked(EndQuorumEpochRequest(self.node_id, self.epoch, self._preferred))
            self._resend_ms = now_ms + self.config.request_timeout_ms

    def _log_is_up_to_date(self, last_epoch: int, last_end_offset: int) -> bool:
        return (last_epoch, last_end_offset) >= (self.log.last_epoch, self.log.end_offset)

    def _leader_alive(self, now_ms: int) -> bool:
        if self.role is Role.LEADER:
            return True
        if self.role is not Role.FOLLOWER or self._leader_resigned or self._leader_contact_ms is None:
            return False
        return now_ms - self._leader_contact_ms < self.config.fetch_timeout_ms

    def _next_deadline(self) -> int:
        role = self.role
        if role is Role.LEADER:
            deadlines = [self._check_quorum_deadline()]
            if self._unacked:
                deadlines.append(self._resend_ms)
            half_ms = self.config.fetch_timeout_ms // 2
            deadlines.extend(
                max((r.last_fetch_ms or 0) + half_ms + 1, self._reminded_ms.get(v, 0))
                for v, r in self._replicas.items()
                if v not in self._unacked
            )
            deadlines.extend(deadline for _, deadline in self._parked.values())
            return min(deadlines)
        if role is Role.FOLLOWER:
            if self._leader_resigned:
                return self._fetch_deadline_ms
            return min(self._fetch_deadline_ms, self._fetch_resend_ms)
        if role is Role.RESIGNED and self._unacked:
            return min(self._election_deadline_ms, self._resend_ms)
        if self._voting_open():
            return min(self._election_deadline_ms, self._vote_resend_ms)
        return self._election_deadline_ms

    def _finish(self, now_ms: int) -> Output:
        out = self._out
        self._out = Output()
        out.next_deadline_ms = self._next_deadline()
        return out

    # -- leader ----------------------------------------------------------

    def _check_quorum_deadline(self) -> int:
        times = sorted((r.last_fetch_ms or 0 for r in self._replicas.values()), reverse=True)
        needed = self._majority - 1  # the leader counts itself
        if needed == 0:
            return 1 << 62
        return times[needed - 1] + self.config.check_quorum_timeout_ms

    def _leader_tick(self, now_ms: int) -> None:
        self._update_leader_hw(now_ms)
        if now_ms >= self._check_quorum_deadline():
            # A majority has not fetched from us for too long: we may be cut
            # off, and a leader nobody follows must not keep taking writes.
            self._become_resigned(now_ms)
            return
        # A voter that stopped fetching may have moved to a higher epoch while
        # cut off (a lost election); pre-votes cannot bring it back while we are
        # alive, so remind it of our epoch: it answers with its own, and we
        # step down for a fresh election everyone can take part in.
        # One reminder per request timeout: a voter that answers it but still
        # does not fetch (it is restarting) must not be reminded in a loop.
        for replica_id in self._stale_voters(now_ms):
            if replica_id not in self._unacked and now_ms >= self._reminded_ms.get(replica_id, 0):
                self._unacked.add(replica_id)
                self._reminded_ms[replica_id] = now_ms + self.config.request_timeout_ms
                self._resend_ms = min(self._resend_ms, now_ms)
        self._resend_unacked(now_ms)
        self._answer_parked(now_ms)

    def _stale_voters(self, now_ms: int) -> list[int]:
        cutoff = now_ms - self.config.fetch_timeout_ms // 2
        return [v for v, r in self._replicas.items() if (r.last_fetch_ms or 0) <= cutoff]

    def _update_leader_hw(self, now_ms: int) -> None:
        offsets = [self.log.flushed_end_offset]
        offsets.extend(self._replicas[v].end_offset for v in self._others)
        offsets.sort(reverse=True)
        candidate = offsets[self._majority - 1]
        if candidate > self._epoch_start_offset and candidate > self.high_watermark:
            self._set_high_watermark(candidate)
            self._answer_parked(now_ms)

    def _answer_parked(self, now_ms: int) -> None:
        if not self._parked:
            return
        end = self.log.end_offset
        for replica_id, (request, deadline) in list(self._parked.items()):
            if request.fetch_offset < end or request.high_watermark < self.high_watermark or now_ms >= deadline:
                del self._parked[replica_id]
                self._reply_fetch(request)

    def _reply_fetch(self, request: FetchRequest) -> None:
        batches = tuple(self.log.read(request.fetch_offset, self.config.fetch_max_bytes))
        self._out.messages.append(
            (
                request.source_id,
                FetchResponse(
                    self.node_id,
                    self.epoch,
                    self.leader_id,
                    request.fetch_offset,
                    request.last_fetched_epoch,
                    high_watermark=self.high_watermark,
                    log_start_offset=self.log.start_offset,
                    batches=batches,
                ),
            )
        )

    def _reply_fetch_error(self, request: FetchRequest, error: ErrorCode, **extra) -> None:
        self._out.messages.append(
            (
                request.source_id,
                FetchResponse(
                    self.node_id,
                    self.epoch,
                    self.leader_id,
                    request.fetch_offset,
                    request.last_fetched_epoch,
                    error=error,
                    high_watermark=self.high_watermark,
                    log_start_offset=self.log.start_offset,
                    **extra,
                ),
            )
        )

    def _validate_fetch_position(self, offset: int, epoch: int) -> tuple[str, object]:
        """("valid", None), ("snapshot", SnapshotId) or ("diverging", OffsetAndEpoch)."""
        log = self.log
        start = log.start_offset
        snapshot = log.latest_snapshot if start > 0 else None
        if snapshot is not None and (
            offset < start or (offset == start and epoch != snapshot.epoch) or epoch < snapshot.epoch
        ):
            return "snapshot", snapshot
        if offset == 0 or (snapshot is not None and offset == start and epoch == snapshot.epoch):
            return "valid", None
        found = log.end_offset_for_epoch(epoch)
        if found == UNDEFINED:
            if snapshot is not None:
                return "snapshot", snapshot
            return "diverging", OffsetAndEpoch(0, 0)
        if found.epoch == epoch and found.offset >= offset:
            return "valid", None
        return "diverging", OffsetAndEpoch(min(found.offset, offset), found.epoch)

    def _replica(self, replica_id: int) -> ReplicaState:
        if replica_id in self._replicas:
            return self._replicas[replica_id]
        return self._observers.setdefault(replica_id, ReplicaState(replica_id))

    # -- handlers --------------------------------------------------------

    def _on_vote_request(self, now_ms: int, request: VoteRequest) -> None:
        if request.pre_vote:
            # A pre-vote changes nothing here, whatever its epoch (KIP-996).
            granted = (
                self.is_voter
                and request.epoch > self.epoch
                and self._log_is_up_to_date(request.last_epoch, request.last_end_offset)
                and not self._leader_alive(now_ms)
            )
            self._out.messages.append(
                (request.source_id, VoteResponse(self.node_id, self.epoch, self.leader_id, granted, pre_vote=True))
            )
            return
        if request.epoch > self.epoch:
            self._become_unattached(now_ms, request.epoch)
        granted = False
        error = ErrorCode.NONE
        if request.epoch < self.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        elif not self.is_voter:
            error = ErrorCode.INCONSISTENT_VOTER_SET
        elif self.voted_id == request.source_id and self.leader_id is None:
            granted = True  # a retry: the vote is already on disk
        elif (
            self.voted_id is None
            and self.leader_id is None
            and self.role in (Role.UNATTACHED, Role.PROSPECTIVE)
            and self._log_is_up_to_date(request.last_epoch, request.last_end_offset)
        ):
            granted = True
            self.voted_id = request.source_id
            self.role = Role.UNATTACHED
            self._election_deadline_ms = now_ms + self._election_timeout_ms()
            self._persist()  # before the response goes out (driver contract)
        self._out.messages.append(
            (request.source_id, VoteResponse(self.node_id, self.epoch, self.leader_id, granted, error=error))
        )

    def _on_vote_response(self, now_ms: int, response: VoteResponse) -> None:
        self._observe_epoch(now_ms, response.epoch, response.leader_id)
        if response.pre_vote:
            if not (self.role is Role.PROSPECTIVE and self._prevote_active) or response.epoch > self.epoch:
                return
            (self._granted if response.vote_granted else self._rejected).add(response.source_id)
            if len(self._granted) >= self._majority:
                self._become_candidate(now_ms)
            elif len(self._rejected) > len(self.voters) - self._majority:
                self._prospective_round_failed(now_ms)
            return
        if self.role is not Role.CANDIDATE or response.epoch != self.epoch:
            return
        (self._granted if response.vote_granted else self._rejected).add(response.source_id)
        if len(self._granted) >= self._majority:
            self._become_leader(now_ms)
        elif len(self._rejected) > len(self.voters) - self._majority and not self._candidate_lost:
            self._candidate_lost = True
            self._election_retries += 1
            self._election_deadline_ms = now_ms + self._backoff_ms()

    def _on_begin_quorum_epoch(self, now_ms: int, request: BeginQuorumEpochRequest) -> None:
        self._observe_epoch(now_ms, request.epoch, request.source_id)
        error = ErrorCode.NONE
        if request.epoch < self.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        elif self.leader_id == request.source_id and self.role is not Role.FOLLOWER:
            self._become_follower(now_ms, self.epoch, request.source_id)
        self._out.messages.append(
            (request.source_id, BeginQuorumEpochResponse(self.node_id, self.epoch, self.leader_id, error))
        )

    def _on_begin_quorum_epoch_response(self, now_ms: int, response: BeginQuorumEpochResponse) -> None:
        self._observe_epoch(now_ms, response.epoch, response.leader_id)
        if self.role is Role.LEADER and response.epoch == self.epoch:
            self._unacked.discard(response.source_id)

    def _on_end_quorum_epoch(self, now_ms: int, request: EndQuorumEpochRequest) -> None:
        self._observe_epoch(now_ms, request.epoch, request.source_id)
        error = ErrorCode.NONE
        if request.epoch < self.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        elif self.leader_id == request.source_id and self.role is Role.FOLLOWER and not self._leader_resigned:
            self._leader_resigned = True
            if self.is_voter:
                # The leader's favourite stands at once; the others give it a head start.
                preferred = request.preferred_successors
                position = preferred.index(self.node_id) if self.node_id in preferred else len(preferred)
                delay_ms = 0
                if position > 0:
                    delay_ms = min(
                        self.config.election_backoff_max_ms,
                        self.config.election_backoff_base_ms * (1 << min(position - 1, 20)),
                    )
                self._fetch_deadline_ms = min(self._fetch_deadline_ms, now_ms + delay_ms)
        self._out.messages.append(
            (request.source_id, EndQuorumEpochResponse(self.node_id, self.epoch, self.leader_id, error))
        )

    def _on_end_quorum_epoch_response(self, now_ms: int, response: EndQuorumEpochResponse) -> None:
        self._observe_epoch(now_ms, response.epoch, response.leader_id)
        if self.role is Role.RESIGNED and response.epoch == self.epoch:
            self._unacked.discard(response.source_id)

    def _on_fetch_request(self, now_ms: int, request: FetchRequest) -> None:
        self._observe_epoch(now_ms, request.epoch, None)
        if request.epoch < self.epoch:
            self._reply_fetch_error(request, ErrorCode.FENCED_LEADER_EPOCH)
            return
        if self.role is not Role.LEADER:
            self._reply_fetch_error(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        verdict, detail = self._validate_fetch_position(request.fetch_offset, request.last_fetched_epoch)
        if verdict == "snapshot":
            self._reply_fetch_error(request, ErrorCode.NONE, snapshot_id=detail)
            return
        if verdict == "diverging":
            self._reply_fetch_error(request, ErrorCode.NONE, diverging=detail)
            return
        replica = self._replica(request.source_id)
        replica.end_offset = request.fetch_offset
        replica.last_fetch_ms = now_ms
        if request.fetch_offset >= self.log.end_offset:
            replica.last_caught_up_ms = now_ms
        if request.source_id in self._replicas:
            self._unacked.discard(request.source_id)  # it follows us: no need for BeginQuorumEpoch
            self._update_leader_hw(now_ms)
        nothing_new = request.fetch_offset >= self.log.end_offset and request.high_watermark >= self.high_watermark
        if nothing_new and request.max_wait_ms > 0:
            wait_ms = min(request.max_wait_ms, self.config.fetch_max_wait_ms)
            self._parked[request.source_id] = (request, now_ms + wait_ms)
            return
        self._parked.pop(request.source_id, None)
        self._reply_fetch(request)

    def _on_fetch_snapshot_request(self, now_ms: int, request: FetchSnapshotRequest) -> None:
        self._observe_epoch(now_ms, request.epoch, None)

        def reply(error: ErrorCode, size: int = 0, data: bytes = b"") -> None:
            self._out.messages.append(
                (
                    request.source_id,
                    FetchSnapshotResponse(
                        self.node_id,
                        self.epoch,
                        self.leader_id,
                        request.snapshot_id,
                        request.position,
                        error,
                        size,
                        data,
                    ),
                )
            )

        if request.epoch < self.epoch:
            reply(ErrorCode.FENCED_LEADER_EPOCH)
            return
        if self.role is not Role.LEADER:
            reply(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        chunk = self.log.read_snapshot(request.snapshot_id, request.position, self.config.snapshot_chunk_bytes)
        if chunk is None:
            reply(ErrorCode.SNAPSHOT_NOT_FOUND)
            return
        data, size = chunk
        if request.position > size:
            reply(ErrorCode.POSITION_OUT_OF_RANGE)
            return
        # Fetching a snapshot is following us: it counts for check-quorum.
        self._replica(request.source_id).last_fetch_ms = now_ms
        reply(ErrorCode.NONE, size, data)

    # -- follower --------------------------------------------------------

    def _follower_tick(self, now_ms: int) -> None:
        if now_ms >= self._fetch_deadline_ms:
            if self.is_voter:
                self._become_prospective(now_ms)
            else:
                # An observer cannot elect anyone; forgetting the leader is
                # safe for it (it never votes) and lets it look for the new one.
                self._become_unattached(now_ms, self.epoch)
            return
        if not self._leader_resigned and now_ms >= self._fetch_resend_ms:
            self._send_fetch(now_ms)

    def _send_fetch(self, now_ms: int) -> None:
        assert self.leader_id is not None
        if self._snapshot_fetch is not None:
            snapshot_id, position = self._snapshot_fetch
            message: Message = FetchSnapshotRequest(self.node_id, self.epoch, snapshot_id, position)
            self._fetch_resend_ms = now_ms + self.config.request_timeout_ms
        else:
            message = FetchRequest(
                self.node_id,
                self.epoch,
                self.log.end_offset,
                self.log.last_epoch,
                high_watermark=self.high_watermark,
                max_wait_ms=self.config.fetch_max_wait_ms,
            )
            self._fetch_resend_ms = now_ms + self.config.fetch_max_wait_ms + self.config.request_timeout_ms
        self._out.messages.append((self.leader_id, message))

    def _observer_probe(self, now_ms: int) -> None:
        # An observer without a leader asks a random voter; a non-leader's
        # error response names the leader it knows.
        voter = self.rng.choice(sorted(self.voters))
        self._out.messages.append(
            (
                voter,
                FetchRequest(
                    self.node_id,
                    self.epoch,
                    self.log.end_offset,
                    self.log.last_epoch,
                    high_watermark=self.high_watermark,
                ),
            )
        )
        self._election_deadline_ms = now_ms + self.config.request_timeout_ms

    def _observer_probe_answered(self, now_ms: int) -> None:
        # The voter asked did not name a leader (an election is under way) or
        # could not be reached: ask again soon, not after a whole request
        # timeout, so brokers find a new controller well within their session.
        if self.role is Role.UNATTACHED and not self.is_voter and self.leader_id is None:
            self._election_deadline_ms = min(self._election_deadline_ms, now_ms + self.config.retry_backoff_ms)

    def _on_request_failed(self, now_ms: int, failed: RequestFailed) -> None:
        if isinstance(failed.request, FetchRequest):
            self._observer_probe_answered(now_ms)

    def _accept_leader_response(self, response: FetchResponse | FetchSnapshotResponse) -> bool:
        return self.role is Role.FOLLOWER and response.source_id == self.leader_id and response.epoch == self.epoch

    def _leader_answered(self, now_ms: int) -> None:
        self._leader_contact_ms = now_ms
        self._fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms

    def _on_fetch_response(self, now_ms: int, response: FetchResponse) -> None:
        self._observe_epoch(now_ms, response.epoch, response.leader_id)
        self._observer_probe_answered(now_ms)
        if not self._accept_leader_response(response):
            return
        if response.error is not ErrorCode.NONE:
            if response.error is ErrorCode.NOT_LEADER_OR_FOLLOWER:
                self._leader_resigned = True
                if not self.is_voter:
                    self._become_unattached(now_ms, self.epoch)
            return
        log = self.log
        if (
            self._snapshot_fetch is not None
            or response.fetch_offset != log.end_offset
            or response.last_fetched_epoch != log.last_epoch
        ):
            return  # answers a fetch from a log state we have left: stale or duplicated
        self._leader_answered(now_ms)
        if response.snapshot_id is not None:
            self._snapshot_fetch = (response.snapshot_id, 0)
        elif response.diverging is not None:
            self._truncate_diverging(response.diverging)
        else:
            for batch in response.batches:
                if batch.base_offset == log.end_offset:
                    self._append(batch)
                elif batch.base_offset > log.end_offset:
                    break
            self._set_high_watermark(min(response.high_watermark, log.end_offset))
        # Flushed before this goes out (driver contract): the offset it reports must be durable.
        self._send_fetch(now_ms)

    def _truncate_diverging(self, diverging: OffsetAndEpoch) -> None:
        log = self.log
        local = log.end_offset_for_epoch(diverging.epoch)
        target = diverging.offset if local == UNDEFINED else min(diverging.offset, local.offset)
        if local == UNDEFINED:
            target = min(target, log.start_offset)
        target = max(target, log.start_offset)
        if target < self.high_watermark:
            raise RaftError(
                f"node {self.node_id} asked to truncate to {target}, below its high watermark {self.high_watermark}"
            )
        if target < log.end_offset:
            new_end = log.truncate_to(target)
            self._out.log_ops.append(Truncated(new_end))

    def _on_fetch_snapshot_response(self, now_ms: int, response: FetchSnapshotResponse) -> None:
        self._observe_epoch(now_ms, response.epoch, response.leader_id)
        if not self._accept_leader_response(response) or self._snapshot_fetch is None:
            return
        snapshot_id, position = self._snapshot_fetch
        if response.snapshot_id != snapshot_id or response.position != position:
            return  # stale or duplicated chunk
        self._leader_answered(now_ms)
        if response.error is not ErrorCode.NONE:
            # The leader dropped that snapshot (a newer one replaced it): fetch
            # again and be told the current one.
            self._snapshot_fetch = None
            self._send_fetch(now_ms)
            return
        self.log.write_snapshot_chunk(snapshot_id, position, response.data)
        position += len(response.data)
        if position >= response.size:
            self.log.commit_snapshot(snapshot_id)
            self._out.log_ops.append(SnapshotInstalled(snapshot_id))
            self._snapshot_fetch = None
            if snapshot_id.end_offset > self.high_watermark:
                # A snapshot holds only committed records; nothing to apply from the log below it.
                self.high_watermark = snapshot_id.end_offset
                self._out.high_watermark = snapshot_id.end_offset
                self._out.committed = None
        else:
            self._snapshot_fetch = (snapshot_id, position)
        self._send_fetch(now_ms)


def _copy(replica: ReplicaState) -> ReplicaState:
    return ReplicaState(replica.replica_id, replica.end_offset, replica.last_fetch_ms, replica.last_caught_up_ms)


_HANDLERS = {
    VoteRequest: RaftNode._on_vote_request,
    VoteResponse: RaftNode._on_vote_response,
    BeginQuorumEpochRequest: RaftNode._on_begin_quorum_epoch,
    BeginQuorumEpochResponse: RaftNode._on_begin_quorum_epoch_response,
    EndQuorumEpochRequest: RaftNode._on_end_quorum_epoch,
    EndQuorumEpochResponse: RaftNode._on_end_quorum_epoch_response,
    FetchRequest: RaftNode._on_fetch_request,
    FetchResponse: RaftNode._on_fetch_response,
    FetchSnapshotRequest: RaftNode._on_fetch_snapshot_request,
    FetchSnapshotResponse: RaftNode._on_fetch_snapshot_response,
    RequestFailed: RaftNode._on_request_failed,
}
