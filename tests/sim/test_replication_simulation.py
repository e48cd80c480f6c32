"""Deterministic simulation of ISR replication over the real storage code.

(Longer than most files: the model of the drivers, the controller, the network
and the invariants checked after every event only make sense read together.)

One partition, three replicas (brokers 1, 2, 3), ``min.insync.replicas=2`` and
acks=all producers. What is real: each replica's log is a
:class:`storage.log.PartitionLog` in its own directory (replicated, so the
replication layer owns its high watermark); the leader's rules are
:class:`replication.partition.LeaderPartition` (ISR, maximal ISR, high
watermark, shrink/expand proposals, acks=all outcomes) and the leader's
checks of a follower's fetch (leader epoch, replica, KIP-320 divergence,
offset range) from replication/fetch_read.py, as the broker's read path asks
them; the replica's decisions are the ones
broker/replica/manager.py carries out, from replication/replica_core.py (the
role each metadata update gives, what a follower does with a fetch answer:
truncate by diverging epoch, out of range, append and adopt the leader's
marks; what an AlterPartition answer does to the leader and whether to send
it again); acks=all waits are :class:`replication.delayed.DelayedProduce` in a
real :class:`replication.purgatory.Purgatory`. What is modelled here is the
asyncio shell around them (broker/replica/manager.py, broker/replica/fetcher.py
and the Fetch/Produce handlers): the follower's fetch loop (one request in
flight per leader, backoff after errors, answers for a follower state that has
since been replaced ignored), the AlterPartition sender (one request in
flight), timers, and a pure model controller (leader, leader epoch, ISR,
partition epoch, broker registrations and fencing, clean elections only,
KIP-903 broker epochs).

Time is simulated and every choice comes from one seeded ``random.Random``, so
a failing seed replays exactly::

    REPLICATION_SIM_SEED=<n> pytest tests/sim/test_replication_simulation.py

``REPLICATION_SIM_SEEDS=<count>`` runs that many seeds from
``REPLICATION_SIM_FIRST_SEED`` (0); ``REPLICATION_SIM_TRACE=1`` prints every event.

Faults:
  * the network delays (1 ms up to a per-seed maximum), loses, duplicates and
    therefore reorders every message: fetches and their answers, produce
    requests (the producer is idempotent, one producer id per value, so a
    duplicate is found by the log's producer state), AlterPartition requests and
    answers, and metadata updates (full partition states with a version; a
    broker applies only newer ones, and the controller re-sends periodically, as
    brokers re-fetch the metadata log). Links between any two of the brokers and
    the controller are cut (one way or both) and healed. A message from or to a
    process that has crashed since it was sent is dropped: its connection died
    with it;
  * crashes lose each process's memory and every byte not fsynced: the log is
    truncated to its recovery point (``flush(fsync=True)`` at random "fsync"
    events, and at segment rolls and truncations) and reopened from disk with
    crash recovery; the restarted replica's high watermark is its last
    ``replication-offset-checkpoint`` value (written at random checkpoint events),
    capped at its log end. The controller fences a crashed broker (it leaves the
    ISR, never emptying it; a fenced leader is replaced by the first unfenced ISR
    member in replica order), the broker registers again with a new broker epoch
    when it restarts, fenced, and is unfenced a little later (a leaderless
    partition whose ISR holds it elects it);
  * the controller sometimes moves leadership back to the preferred replica
    (Kafka's automatic preferred-leader election), so a deposed leader may live
    on with stale metadata.

The crash rule (what Kafka's acks=all promises, and no more): acks=all means
"in the memory of every in-sync replica", so replicas crashing together can
lose acknowledged data. A replica is crashed only while every other replica
is up, and only if the committed data it may lose is still elsewhere: it is not
in the ISR, or it has fsynced everything committed, or another live ISR member's
log reaches the committed end.

Invariants, checked after every event (a failure names the seed and prints the
tail of the event trace):
  1. committed data is never lost: the committed ledger (the batch bytes below
     the highest high watermark any replica has had) is, up to its log end, in
     the log of every live ISR member, and whole in the current leader's log;
     every acknowledged value is in that ledger at the offset it was
     acknowledged at;
  2. no replica's high watermark exceeds its log end, a leader's never
     decreases during its leadership, and no replica truncates below its own
     high watermark;
  3. below the smallest high watermark of the live replicas, all live
     replicas' logs are byte-identical;
  4. an offset never holds two different committed batches, and a value is
     never acknowledged at two offsets.
The simulation keeps each replica's batches in memory as read back from the
log after every change and compares that copy with a full read of the log
after every restart, periodically and at the end (with the leader epoch cache).

At the end everything heals and restarts, producing stops, and within a bounded
time the partition must settle: one leader, all three replicas in the ISR, the
same log end and high watermark everywhere. The three logs must then be
byte-identical, and every acknowledged value must be in them exactly once, at
its offset, in the order the values were first acknowledged.
"""

from __future__ import annotations

import heapq
import itertools
import os
import random
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.records import build_batch, decode_batch_records, iter_batches, parse_batch_header
from replication.delayed import DelayedProduce
from replication.fetch_read import position_error, serving_error
from replication.partition import IsrProposal, LeaderPartition
from replication.purgatory import Purgatory
from replication.replica_core import (
    Backoff,
    FollowerState,
    Role,
    StartOver,
    Truncate,
    adopt_leader_marks,
    apply_alter_partition_answer,
    isr_shrink,
    on_fetch_response,
    on_follower_fetch,
    role_for,
    should_resend,
)
from storage.log import AppendError, LogConfig, PartitionLog

REPLICAS = (1, 2, 3)
CONTROLLER = 0
CLIENT = 100
MIN_INSYNC = 2
KEY = ("replicated", 0)
# Record timestamps and the logs' clock: a fixed wall-clock origin plus simulated time.
BASE_MS = 1_700_000_000_000

CHAOS_MS = 5000
SETTLE_MAX_MS = 20_000
SETTLE_STEP_MS = 50
MAX_EVENTS = 200_000
FETCH_TIMEOUT_MS = 250  # replica.fetch.wait.max.ms + replica.socket.timeout.ms, scaled down
FETCH_BACKOFF_MS = 40  # replica.fetch.backoff.ms
ALTER_TIMEOUT_MS = 300  # the controller channel's request timeout
ALTER_BACKOFF_MS = 100  # the AlterPartition sender's sleep after a failure
PRODUCE_TIMEOUT_MS = 1500
VERIFY_EVERY = 64  # events between full reads of one replica's log
DEFAULT_SEEDS = 40
TRACE = bool(os.environ.get("REPLICATION_SIM_TRACE"))
TRACE_TAIL = 60

class Violation(AssertionError):
    pass


# ----------------------------------------------------------------- messages


@dataclass(frozen=True)
class PartitionState:
    """What a broker learns from the metadata: the partition and the broker registrations."""

    version: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    broker_epochs: tuple[tuple[int, int], ...]
    fenced: frozenset[int]

    @property
    def partition(self) -> tuple:
        return (self.leader, self.leader_epoch, self.partition_epoch, self.isr)

    def broker_epoch(self, broker_id: int) -> int:
        return dict(self.broker_epochs).get(broker_id, -1)


@dataclass(frozen=True)
class MetadataUpdate:
    state: PartitionState


@dataclass(frozen=True)
class FetchRequest:
    replica_id: int
    replica_epoch: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int
    fetch_id: int
    state_token: int


@dataclass(frozen=True)
class FetchResponse:
    fetch_id: int
    state_token: int
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    diverging: tuple[int, int] | None
    records: bytes = field(repr=False)

    def __repr__(self) -> str:
        return (
            f"FetchResponse(id={self.fetch_id}, token={self.state_token}, {self.error.name}, hw={self.high_watermark}, "
            f"diverging={self.diverging}, {len(self.records)} bytes)"
        )


@dataclass(frozen=True)
class ProduceRequest:
    request_id: int
    value: bytes
    batch: bytes = field(repr=False)


@dataclass(frozen=True)
class ProduceResponse:
    request_id: int
    error: ErrorCode
    offset: int


@dataclass(frozen=True)
class AlterPartitionRequest:
    request_id: int
    broker_id: int
    broker_epoch: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[tuple[int, int], ...]  # (broker id, broker epoch the leader saw)


@dataclass(frozen=True)
class AlterPartitionResponse:
    request_id: int
    error: ErrorCode  # the whole request
    partition_error: ErrorCode = ErrorCode.NONE
    leader: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: tuple[int, ...] = ()


# ----------------------------------------------------------------- the model controller


class ModelController:
    """The active controller's view of the partition and of broker registrations.

    Pure and always up (the metadata quorum has its own simulation): fencing
    takes a broker out of the ISR (never emptying it) and out of leadership,
    electing the first unfenced ISR member in replica order; a broker that
    registers again gets a new broker epoch and stays fenced until unfenced;
    AlterPartition is checked as controller/alter_partition.py checks it. Every
    leader change bumps the leader epoch, every change the partition epoch.
    """

    def __init__(self) -> None:
        self.leader = REPLICAS[0]
        self.leader_epoch = 0
        self.partition_epoch = 0
        self.isr: tuple[int, ...] = REPLICAS
        self.broker_epochs = {b: b for b in REPLICAS}
        self.next_broker_epoch = len(REPLICAS) + 1
        self.fenced: set[int] = set()
        self.version = 1
        self.leader_changes = 0
        self.isr_changes = 0

    def state(self) -> PartitionState:
        return PartitionState(
            self.version,
            self.leader,
            self.leader_epoch,
            self.partition_epoch,
            self.isr,
            tuple(sorted(self.broker_epochs.items())),
            frozenset(self.fenced),
        )

    def _change(self, *, isr=None, leader=None) -> bool:
        changed = False
        if isr is not None and tuple(isr) != self.isr:
            self.isr = tuple(isr)
            self.isr_changes += 1
            changed = True
        if leader is not None and leader != self.leader:
            # Any leader in a PartitionChangeRecord bumps the leader epoch, -1 included.
            self.leader = leader
            self.leader_epoch += 1
            self.leader_changes += 1
            changed = True
        if changed:
            self.partition_epoch += 1
            self.version += 1
        return changed

    def _first_usable(self, candidates) -> int:
        return next((b for b in REPLICAS if b in candidates and b not in self.fenced), -1)

    def fence(self, broker_id: int) -> None:
        if broker_id in self.fenced:
            return
        self.fenced.add(broker_id)
        self.version += 1
        isr = [b for b in self.isr if b != broker_id] or list(self.isr[-1:])
        leader = self.leader
        if leader in (broker_id, -1):
            leader = self._first_usable(isr)
        self._change(isr=isr, leader=leader)

    def register(self, broker_id: int) -> None:
        # A new incarnation of a broker still counted alive left uncleanly: it
        # leaves the ISR and leadership at once, as the real controller does.
        self.fence(broker_id)
        self.broker_epochs[broker_id] = self.next_broker_epoch
        self.next_broker_epoch += 1
        self.fenced.add(broker_id)
        self.version += 1

    def unfence(self, broker_id: int) -> None:
        if broker_id not in self.fenced:
            return
        self.fenced.discard(broker_id)
        self.version += 1
        if self.leader == -1 and broker_id in self.isr:
            self._change(leader=broker_id)

    def elect_preferred(self) -> bool:
        preferred = self._first_usable(self.isr)
        if preferred < 0 or preferred == self.leader:
            return False
        return self._change(leader=preferred)

    def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        rid = request.request_id
        if self.broker_epochs.get(request.broker_id) != request.broker_epoch:
            return AlterPartitionResponse(rid, ErrorCode.STALE_BROKER_EPOCH)

        def refused(error: ErrorCode) -> AlterPartitionResponse:
            return AlterPartitionResponse(rid, ErrorCode.NONE, error)

        if request.leader_epoch > self.leader_epoch or request.partition_epoch > self.partition_epoch:
            return refused(ErrorCode.NOT_CONTROLLER)
        if request.leader_epoch < self.leader_epoch:
            return refused(ErrorCode.FENCED_LEADER_EPOCH)
        if request.broker_id != self.leader:
            return refused(ErrorCode.INVALID_REQUEST)
        if request.partition_epoch < self.partition_epoch:
            return refused(ErrorCode.INVALID_UPDATE_VERSION)
        new_isr = [b for b, _ in request.new_isr]
        if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(REPLICAS) or self.leader not in new_isr:
            return refused(ErrorCode.INVALID_REQUEST)
        for broker_id, broker_epoch in request.new_isr:
            if broker_id in self.fenced or (broker_epoch != -1 and broker_epoch != self.broker_epochs.get(broker_id)):
                return refused(ErrorCode.INELIGIBLE_REPLICA)
        self._change(isr=new_isr)
        return AlterPartitionResponse(
            rid, ErrorCode.NONE, ErrorCode.NONE, self.leader, self.leader_epoch, self.partition_epoch, self.isr
        )


# ----------------------------------------------------------------- brokers


@dataclass
class Fetcher:
    """A fetch loop towards one leader broker: one request in flight at a time."""

    leader_id: int
    in_flight: int | None = None
    scheduled: bool = False


@dataclass
class SimBroker:
    node_id: int
    directory: Path
    plog: PartitionLog | None = None
    alive: bool = False
    incarnation: int = 0
    metadata: PartitionState | None = None
    min_metadata_version: int = 0  # the controller's version when this incarnation registered
    leader: LeaderPartition | None = None
    follower: FollowerState | None = None
    # The fetcher's view of the partition followed: which FollowerState its
    # requests were made for (an answer for another is ignored), and its backoff.
    follower_token: int = 0
    fetch_backoff_until: int = 0
    # A leader epoch the controller said is over (ReplicaManager.superseded).
    superseded_epoch: int = -1
    purgatory: Purgatory = field(default_factory=Purgatory)
    fetchers: dict[int, Fetcher] = field(default_factory=dict)
    alter_queue: tuple[LeaderPartition, IsrProposal] | None = None
    alter_in_flight: tuple[int, tuple[LeaderPartition, IsrProposal]] | None = None
    alter_send_scheduled: bool = False
    alter_backoff_until: int = 0
    # Batch bytes by offset, as read back from the log after every change.
    mirror: list[bytes] = field(default_factory=list)
    checkpoint_hw: int = 0  # replication-offset-checkpoint
    checkpoint_recovery_point: int | None = None  # recovery-point-offset-checkpoint
    ledger_checked: int = 0  # offsets below this were compared with the ledger
    leader_hw: tuple[int, int] | None = None  # (id of the LeaderPartition, its last high watermark)


@dataclass
class Stats:
    produced: int = 0
    acked: int = 0
    duplicate_acks: int = 0
    produce_errors: dict[str, int] = field(default_factory=dict)
    crashes: int = 0
    leader_changes: int = 0
    preferred_elections: int = 0
    isr_changes: int = 0
    shrinks_proposed: int = 0
    expansions_proposed: int = 0
    alter_failures: int = 0
    divergences: int = 0
    truncations: int = 0
    fetch_errors: int = 0
    fsyncs: int = 0


def read_batches(plog: PartitionLog, start: int, end: int) -> list[bytes]:
    """The batches of [start, end) as the log returns them (a read stays in one segment)."""
    out: list[bytes] = []
    offset = start
    for _ in range(end - start + 1):  # every round returns at least one batch, or stops
        if offset >= end:
            break
        data = plog.read(offset, 1 << 30, upper_offset=end)
        if not data:
            break
        for position, size, header in iter_batches(data):
            out.append(bytes(data[position : position + size]))
            offset = header.base_offset + header.last_offset_delta + 1
    return out


def epochs_of(batches: list[bytes]) -> list[tuple[int, int]]:
    """(epoch, start offset) of each leader epoch in a run of batches starting at offset 0."""
    epochs: list[tuple[int, int]] = []
    for batch in batches:
        header = parse_batch_header(batch)
        if not epochs or header.partition_leader_epoch > epochs[-1][0]:
            epochs.append((header.partition_leader_epoch, header.base_offset))
    return epochs


def producer_id_of(batch: bytes) -> int:
    return parse_batch_header(batch).producer_id


# ----------------------------------------------------------------- the simulation


class Simulation:
    def __init__(self, seed: int, root: Path):
        self.seed = seed
        self.rng = rng = random.Random(seed)
        self.now = 0
        self.step = 0
        self.queue: list[tuple[int, int, tuple]] = []
        self.sequence = 0
        self.ids = itertools.count(1)
        self.trace: deque[str] = deque(maxlen=TRACE_TAIL)
        self.stats = Stats()
        self.controller = ModelController()
        self.chaos = True
        self.blocked: set[tuple[int, int]] = set()
        self.loss = rng.choice([0.0, 0.02, 0.1, 0.2])
        self.duplicate = rng.choice([0.0, 0.05, 0.2])
        self.max_delay_ms = rng.choice([1, 5, 20, 60])
        self.lag_max_ms = rng.choice([120, 400, 1500])
        self.fetch_idle_ms = rng.choice([3, 15, 40])
        self.fetch_max_bytes = rng.choice([1, 300, 1 << 20])  # 1: one batch per fetch
        self.metadata_push_ms = rng.choice([40, 150])
        self.config = LogConfig(
            segment_bytes=rng.choice([400, 1500, 1 << 20]),
            segment_index_bytes=rng.choice([64, 4096]),
            index_interval_bytes=rng.choice([1, 200, 4096]),
        )
        self.brokers = {b: SimBroker(b, Path(root) / f"broker-{b}" / "replicated-0") for b in REPLICAS}
        # The committed ledger: batch bytes by offset, below the highest high watermark seen.
        self.ledger: list[bytes] = []
        self.acks: list[tuple[bytes, int, bool]] = []  # (value, offset, found as a duplicate), in ack order
        self.acked_at: dict[bytes, int] = {}
        self.acked_checked = 0
        self.values_sent = 0
        for broker in self.brokers.values():
            self._open(broker)
            broker.alive = True
        state = self.controller.state()
        for broker in self.brokers.values():
            self.apply_metadata(broker, state)

    # -- plumbing --------------------------------------------------------------

    def fail(self, detail: str) -> None:
        tail = "\n".join(self.trace)
        raise Violation(
            f"seed={self.seed} step={self.step} t={self.now}ms: {detail}\n"
            f"state: {self.describe()}\n"
            f"replay: REPLICATION_SIM_SEED={self.seed} pytest tests/sim/test_replication_simulation.py\n"
            f"last events:\n{tail}"
        )

    def schedule(self, at_ms: int, event: tuple) -> None:
        self.sequence += 1
        heapq.heappush(self.queue, (max(at_ms, self.now), self.sequence, event))

    def clock_ms(self) -> int:
        return BASE_MS + self.now

    def incarnation_of(self, node: int) -> int:
        broker = self.brokers.get(node)
        return broker.incarnation if broker is not None else 0

    def send(self, source: int, destination: int, message) -> None:
        copies = 1
        if self.rng.random() < self.loss:
            copies = 0
        elif self.rng.random() < self.duplicate:
            copies = 2
        for _ in range(copies):
            delay = self.rng.randint(1, self.max_delay_ms)
            self.schedule(
                self.now + delay,
                ("deliver", source, self.incarnation_of(source), destination, self.incarnation_of(destination), message),
            )

    def describe(self) -> str:
        c = self.controller
        parts = [f"ctl: leader {c.leader} e{c.leader_epoch} pe{c.partition_epoch} isr{list(c.isr)} fenced{sorted(c.fenced)}"]
        for broker in self.brokers.values():
            if not broker.alive:
                parts.append(f"{broker.node_id}:down")
                continue
            plog = broker.plog
            role = "-"
            if broker.leader is not None:
                lp = broker.leader
                role = f"L/e{lp.leader_epoch}/isr{list(lp.isr)}" + (f"->{list(lp.pending_isr)}" if lp.pending_isr else "")
            elif broker.follower is not None:
                role = f"F({broker.follower.leader_id})/e{broker.follower.leader_epoch}"
            parts.append(
                f"{broker.node_id}:{role}/leo{plog.log_end_offset}/hw{plog.high_watermark}/rp{plog.recovery_point}"
            )
        return " ".join(parts)

    # -- logs --------------------------------------------------------------------

    def _open(self, broker: SimBroker, recovery_point: int | None = None, after_crash: bool = False) -> None:
        plog = PartitionLog(broker.directory, self.config, clock_ms=self.clock_ms, recovery_point=recovery_point)
        plog.replicated = True
        # As _init_high_watermark: the checkpointed high watermark, never the log end.
        plog.reset_high_watermark(min(max(broker.checkpoint_hw, plog.log_start_offset), plog.log_end_offset))
        broker.plog = plog
        if after_crash:
            self.verify_disk(broker, "reopened after a crash")

    def verify_disk(self, broker: SimBroker, when: str) -> None:
        plog = broker.plog
        batches = read_batches(plog, 0, plog.log_end_offset)
        if len(batches) != plog.log_end_offset:
            self.fail(f"broker {broker.node_id} ({when}): {len(batches)} batches read below log end {plog.log_end_offset}")
        if batches != broker.mirror:
            first = next((i for i, (a, b) in enumerate(zip(batches, broker.mirror)) if a != b), min(len(batches), len(broker.mirror)))
            self.fail(f"broker {broker.node_id} ({when}): the log differs from what it returned before, from offset {first}")
        if epochs_of(batches) != plog.leader_epochs:
            self.fail(
                f"broker {broker.node_id} ({when}): leader epoch cache {plog.leader_epochs}, "
                f"the batches say {epochs_of(batches)}"
            )

    def read_back(self, broker: SimBroker, start: int) -> None:
        """Extend the in-memory copy with what the log now holds from ``start``."""
        plog = broker.plog
        if start != len(broker.mirror):
            self.fail(f"broker {broker.node_id}: appended at {start}, its copy ends at {len(broker.mirror)}")
        batches = read_batches(plog, start, plog.log_end_offset)
        if len(batches) != plog.log_end_offset - start:
            self.fail(f"broker {broker.node_id}: read {len(batches)} batches of [{start}, {plog.log_end_offset})")
        for offset, batch in enumerate(batches, start):
            header = parse_batch_header(batch)
            if header.base_offset != offset or header.last_offset_delta != 0:
                self.fail(f"broker {broker.node_id}: the batch read at {offset} is {header}")
        broker.mirror.extend(batches)

    def truncate(self, broker: SimBroker, offset: int, why: str) -> None:
        plog = broker.plog
        if offset >= plog.log_end_offset:
            return
        before_hw = plog.high_watermark
        new_end = plog.truncate_to(offset)
        self.stats.truncations += 1
        if new_end < before_hw:
            self.fail(f"broker {broker.node_id} truncated to {new_end} ({why}), below its high watermark {before_hw}")
        del broker.mirror[new_end:]
        broker.ledger_checked = min(broker.ledger_checked, new_end)
        if plog.log_end_offset != len(broker.mirror):
            self.fail(f"broker {broker.node_id}: log end {plog.log_end_offset} after truncating to {offset}")

    # -- metadata and roles (ReplicaManager.apply_image / _apply_partition) ---------

    def broadcast(self) -> None:
        state = self.controller.state()
        for broker_id in REPLICAS:
            self.send(CONTROLLER, broker_id, MetadataUpdate(state))

    def apply_metadata(self, broker: SimBroker, state: PartitionState) -> None:
        old = broker.metadata
        if old is not None and state.version <= old.version:
            return  # the image only moves forward
        if state.version < broker.min_metadata_version:
            return  # from before this incarnation registered
        broker.metadata = state
        # An image that leaves the partition as it was does not touch it (the
        # real code compares partition images by identity).
        if old is None or old.partition != state.partition:
            self.apply_partition(broker, state)
        if old is None or (old.fenced, old.broker_epochs) != (state.fenced, state.broker_epochs):
            if broker.leader is not None and broker.leader.set_ineligible(state.fenced, self.now, dict(state.broker_epochs)):
                self.high_watermark_moved(broker)

    def apply_partition(self, broker: SimBroker, state: PartitionState) -> None:
        """ReplicaManager._apply_partition: the role from replica_core.role_for. (A
        restarted broker acts on no metadata from before its registration, so it
        may always lead here.)"""
        leader = broker.leader
        following = broker.follower
        role = role_for(
            broker.node_id,
            state.leader,
            state.leader_epoch,
            REPLICAS,
            may_lead=True,
            superseded=state.leader_epoch <= broker.superseded_epoch,
            led_epoch=None if leader is None else leader.leader_epoch,
            followed=None if following is None else (following.leader_id, following.leader_epoch),
        )
        if role is Role.HELD_BACK:
            self.resign(broker)
            self.stop_following(broker)
            return
        broker.superseded_epoch = -1  # a newer epoch, or no longer ours: the metadata has caught up
        if role is Role.LEADER_UPDATE:
            self.stop_following(broker)
            leader.set_replicas(REPLICAS)
            if leader.committed(state.isr, state.partition_epoch, self.now):
                self.high_watermark_moved(broker)
        elif role is Role.NEW_LEADER:
            self.stop_following(broker)
            self.resign(broker)
            self.become_leader(broker, state)
        elif role is Role.LEADERLESS:
            self.resign(broker)
            self.stop_following(broker)
        elif role is Role.FOLLOWING:
            self.resign(broker)
        elif role is Role.NEW_FOLLOWER:
            self.resign(broker)
            self.become_follower(broker, state)
        else:
            self.fail(f"broker {broker.node_id}: {role} of a partition all brokers replicate")

    def become_leader(self, broker: SimBroker, state: PartitionState) -> None:
        plog = broker.plog
        leader = LeaderPartition(
            local_id=broker.node_id,
            replicas=REPLICAS,
            isr=state.isr,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            log_end_offset=plog.log_end_offset,
            high_watermark=plog.high_watermark,
            now_ms=self.now,
            lag_max_ms=self.lag_max_ms,
            min_insync_replicas=MIN_INSYNC,
            ineligible=state.fenced,
            registered_epochs=dict(state.broker_epochs),
            log=plog,
        )
        broker.leader = leader
        broker.leader_hw = (id(leader), plog.high_watermark)
        self.schedule(self.now + self.isr_check_interval(), ("isr_check", broker.node_id, broker.incarnation, id(leader)))

    def resign(self, broker: SimBroker) -> None:
        if broker.leader is not None:
            broker.leader = None
            broker.leader_hw = None
            broker.purgatory.cancel_key(KEY)
            broker.alter_queue = None

    def become_follower(self, broker: SimBroker, state: PartitionState) -> None:
        self.stop_following(broker)
        broker.follower = FollowerState(KEY, state.leader, state.leader_epoch)
        broker.follower_token = next(self.ids)
        broker.fetch_backoff_until = 0
        self.wake_fetcher(broker, state.leader, 0)

    def stop_following(self, broker: SimBroker) -> None:
        broker.follower = None

    def high_watermark_moved(self, broker: SimBroker) -> None:
        """ReplicaManager._high_watermark_moved: the leader state moved it in the log."""
        broker.purgatory.check(KEY)

    def isr_check_interval(self) -> int:
        return max(self.lag_max_ms // 2, 50)

    # -- leader side ------------------------------------------------------------

    def leader_fetch(self, broker: SimBroker, replica_id: int, request: FetchRequest) -> FetchResponse:
        """The Fetch handler for a follower (v17), one partition."""

        def answer(error=ErrorCode.NONE, hw=-1, diverging=None, records=b"") -> FetchResponse:
            return FetchResponse(request.fetch_id, request.state_token, error, hw, 0, diverging, records)

        state = broker.metadata
        leader = broker.leader
        if state is None:
            return answer(ErrorCode.UNKNOWN_TOPIC_ID)
        error = serving_error(
            leads=leader is not None,
            follows=False,
            from_follower=True,
            is_replica=leader is not None and leader.is_replica(replica_id),
            api_version=17,
            requested_epoch=request.current_leader_epoch,
            current_epoch=state.leader_epoch,
        )
        if error != ErrorCode.NONE:
            return answer(error)
        plog = broker.plog
        offset = request.fetch_offset
        error, diverging = position_error(
            plog,
            offset,
            check_divergence=True,
            last_fetched_epoch=request.last_fetched_epoch,
            current_epoch=state.leader_epoch,
        )
        if diverging is not None:
            return answer(hw=plog.high_watermark, diverging=diverging)
        if error != ErrorCode.NONE:
            return answer(error, hw=plog.high_watermark)
        fetched = on_follower_fetch(leader, plog.log_end_offset, replica_id, offset, self.now, request.replica_epoch)
        if fetched.high_watermark_moved or fetched.log_start_moved:
            self.high_watermark_moved(broker)
        if fetched.expansion is not None:
            self.stats.expansions_proposed += 1
            self.propose(broker, leader, fetched.expansion)
        records = plog.read(offset, request.max_bytes, upper_offset=plog.log_end_offset)
        return answer(hw=plog.high_watermark, records=records)

    def handle_produce(self, broker: SimBroker, request: ProduceRequest) -> None:
        """The Produce handler, acks=all, one partition."""
        leader = broker.leader
        if leader is None:
            return self.produce_answered(broker, request, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, False)
        error = leader.check_enough_replicas()
        if error != ErrorCode.NONE:
            return self.produce_answered(broker, request, error, -1, False)
        plog = broker.plog
        start = plog.log_end_offset
        try:
            result = plog.append(bytearray(request.batch), leader_epoch=leader.leader_epoch)
        except AppendError as exc:
            return self.produce_answered(broker, request, exc.error_code, -1, False)
        if not result.duplicate:
            if result.base_offset != start or result.last_offset != start:
                self.fail(f"broker {broker.node_id} appended at {result.base_offset}..{result.last_offset}, log end was {start}")
            self.read_back(broker, start)
            if leader.leader_appended(plog.log_end_offset, self.now):
                self.high_watermark_moved(broker)
        required = result.last_offset + 1
        outcome = leader.produce_outcome(required)
        if outcome is None:
            incarnation = broker.incarnation
            operation = DelayedProduce(
                lambda: leader if broker.leader is leader and broker.incarnation == incarnation else None,
                required,
                lambda error: self.produce_answered(broker, request, error, result.base_offset, result.duplicate),
            )
            deadline = self.now + PRODUCE_TIMEOUT_MS
            if not broker.purgatory.add(operation, (KEY,), deadline):
                self.schedule(deadline, ("expire", broker.node_id, broker.incarnation))
            return
        self.produce_answered(broker, request, outcome, result.base_offset, result.duplicate)

    def produce_answered(self, broker: SimBroker, request: ProduceRequest, error: ErrorCode, offset: int, duplicate: bool) -> None:
        if error == ErrorCode.NONE:
            self.record_ack(broker, request.value, offset, duplicate)
        else:
            self.stats.produce_errors[error.name] = self.stats.produce_errors.get(error.name, 0) + 1
        self.send(broker.node_id, CLIENT, ProduceResponse(request.request_id, error, offset if error == ErrorCode.NONE else -1))

    def record_ack(self, broker: SimBroker, value: bytes, offset: int, duplicate: bool) -> None:
        if offset >= len(broker.mirror):
            self.fail(f"broker {broker.node_id} acknowledged {value!r} at {offset}, past its log end {len(broker.mirror)}")
        _, records = decode_batch_records(broker.mirror[offset])
        if [r.value for r in records] != [value]:
            self.fail(f"broker {broker.node_id} acknowledged {value!r} at {offset}, which holds {[r.value for r in records]}")
        previous = self.acked_at.get(value)
        if previous is not None and previous != offset:
            self.fail(f"{value!r} acknowledged at {offset}, and before at {previous}")
        self.stats.acked += 1
        if previous is None:
            self.acked_at[value] = offset
            self.acks.append((value, offset, duplicate))
        else:
            self.stats.duplicate_acks += 1

    def on_isr_check(self, broker: SimBroker, leader_id: int) -> None:
        """ReplicaManager._isr_check_loop for this broker's leadership."""
        leader = broker.leader
        if leader is None or id(leader) != leader_id:
            return
        shrunk = isr_shrink(leader, broker.plog.log_end_offset, self.now)
        if shrunk is not None:
            self.stats.shrinks_proposed += 1
            self.propose(broker, leader, shrunk)
        self.schedule(self.now + self.isr_check_interval(), ("isr_check", broker.node_id, broker.incarnation, leader_id))

    # -- AlterPartition sender (ReplicaManager._propose / _alter_partition_loop) ----

    def propose(self, broker: SimBroker, leader: LeaderPartition, new_isr: tuple[int, ...]) -> None:
        broker.alter_queue = (leader, leader.begin_change(new_isr))
        self.kick_alter(broker)

    def kick_alter(self, broker: SimBroker) -> None:
        if broker.alter_in_flight is None and broker.alter_queue is not None and not broker.alter_send_scheduled:
            broker.alter_send_scheduled = True
            self.schedule(max(self.now, broker.alter_backoff_until), ("alter_send", broker.node_id, broker.incarnation))

    def on_alter_send(self, broker: SimBroker) -> None:
        broker.alter_send_scheduled = False
        if broker.alter_in_flight is not None or broker.alter_queue is None:
            return
        leader, proposal = broker.alter_queue
        broker.alter_queue = None
        state = broker.metadata
        request = AlterPartitionRequest(
            next(self.ids),
            broker.node_id,
            state.broker_epoch(broker.node_id),
            leader.leader_epoch,
            proposal.partition_epoch,
            tuple((b, proposal.broker_epoch(b, state.broker_epoch(broker.node_id))) for b in proposal.isr),
        )
        broker.alter_in_flight = (request.request_id, (leader, proposal))
        self.send(broker.node_id, CONTROLLER, request)
        self.schedule(self.now + ALTER_TIMEOUT_MS, ("alter_timeout", broker.node_id, broker.incarnation, request.request_id))

    def on_alter_answer(self, broker: SimBroker, request_id: int, response: AlterPartitionResponse | None) -> None:
        """The answer (None: the send failed or timed out), as _alter_partition_loop and
        _apply_alter_response carry it out."""
        if broker.alter_in_flight is None or broker.alter_in_flight[0] != request_id:
            return  # a late or duplicated answer: nothing waits for it any more
        _, entry = broker.alter_in_flight
        leader, proposal = entry
        broker.alter_in_flight = None
        retry = response is None or response.error != ErrorCode.NONE
        if not retry:
            error = response.partition_error
            committed = (response.leader_epoch, response.isr, response.partition_epoch) if error == ErrorCode.NONE else None
            outcome = apply_alter_partition_answer(leader, broker.leader is leader, error, committed, self.now)
            if outcome.refused is not None:
                self.stats.alter_failures += 1
            if outcome.high_watermark_moved:
                self.high_watermark_moved(broker)
            if outcome.superseded:
                # ReplicaManager._superseded_leader: not leading until the metadata catches up.
                broker.superseded_epoch = leader.leader_epoch
                self.resign(broker)
            retry = not outcome.answered
        if retry:
            if response is None or response.error != ErrorCode.NONE:
                self.stats.alter_failures += 1
            if should_resend(leader, broker.leader is leader, proposal) and broker.alter_queue is None:
                broker.alter_queue = entry  # it may have been applied: send it again
            broker.alter_backoff_until = self.now + ALTER_BACKOFF_MS
        self.kick_alter(broker)

    # -- follower side (ReplicaFetcher and ReplicaManager.follower_response) --------

    def wake_fetcher(self, broker: SimBroker, leader_id: int, delay_ms: int) -> None:
        fetcher = broker.fetchers.setdefault(leader_id, Fetcher(leader_id))
        if fetcher.in_flight is None and not fetcher.scheduled:
            fetcher.scheduled = True
            self.schedule(self.now + delay_ms, ("fetch", broker.node_id, broker.incarnation, leader_id))

    def on_fetch(self, broker: SimBroker, leader_id: int) -> None:
        fetcher = broker.fetchers[leader_id]
        fetcher.scheduled = False
        state = broker.follower
        if state is None or state.leader_id != leader_id:
            return  # no partition to fetch from this leader: the loop idles
        if broker.fetch_backoff_until > self.now:
            fetcher.scheduled = True
            self.schedule(broker.fetch_backoff_until, ("fetch", broker.node_id, broker.incarnation, leader_id))
            return
        plog = broker.plog
        request = FetchRequest(
            replica_id=broker.node_id,
            replica_epoch=broker.metadata.broker_epoch(broker.node_id) if broker.metadata else -1,
            current_leader_epoch=state.leader_epoch,
            fetch_offset=plog.log_end_offset,
            last_fetched_epoch=plog.leader_epochs[-1][0] if plog.leader_epochs else -1,
            log_start_offset=plog.log_start_offset,
            max_bytes=self.fetch_max_bytes,
            fetch_id=next(self.ids),
            state_token=broker.follower_token,
        )
        fetcher.in_flight = request.fetch_id
        self.send(broker.node_id, leader_id, request)
        self.schedule(
            self.now + FETCH_TIMEOUT_MS, ("fetch_timeout", broker.node_id, broker.incarnation, leader_id, request.fetch_id)
        )

    def on_fetch_timeout(self, broker: SimBroker, leader_id: int, fetch_id: int) -> None:
        fetcher = broker.fetchers.get(leader_id)
        if fetcher is None or fetcher.in_flight != fetch_id:
            return
        # The connection is closed (a late answer is never read) and the loop backs off.
        fetcher.in_flight = None
        self.wake_fetcher(broker, leader_id, FETCH_BACKOFF_MS)

    def on_fetch_response(self, broker: SimBroker, leader_id: int, response: FetchResponse) -> None:
        fetcher = broker.fetchers.get(leader_id)
        if fetcher is None or fetcher.in_flight != response.fetch_id:
            return  # an answer on a connection closed since, or a duplicate
        fetcher.in_flight = None
        state = broker.follower
        if state is None or broker.follower_token != response.state_token:
            # follower_response: the role changed while the fetch was out.
            self.wake_fetcher(broker, leader_id, 0)
            return
        if not self.follower_response(broker, state, response):
            self.stats.fetch_errors += 1
            broker.fetch_backoff_until = self.now + FETCH_BACKOFF_MS
        if broker.follower is state:
            # The leader long-polls an empty fetch; here the follower waits instead.
            self.wake_fetcher(broker, leader_id, self.rng.randint(0, 2) if response.records else self.fetch_idle_ms)

    def follower_response(self, broker: SimBroker, state: FollowerState, response: FetchResponse) -> bool:
        """ReplicaManager.follower_response: replica_core decides, this carries it out."""
        plog = broker.plog
        step = on_fetch_response(
            response.error, response.diverging, response.high_watermark, response.log_start_offset, response.records, plog
        )
        if isinstance(step, Backoff):
            return False
        if isinstance(step, Truncate):
            if response.error == ErrorCode.NONE:
                self.stats.divergences += 1
            self.truncate(broker, step.offset, step.reason)
            return True
        if isinstance(step, StartOver):
            self.fail(f"broker {broker.node_id} told to start over at {step.offset}: no log here deletes records")
        if step.records:
            start = plog.log_end_offset
            try:
                appended = plog.append_as_follower(step.records)
            except AppendError as exc:
                self.fail(f"broker {broker.node_id}: a batch from leader {state.leader_id} failed its checks: {exc}")
            if appended:
                self.read_back(broker, start)
                fetched = [bytes(step.records[p : p + s]) for p, s, _ in iter_batches(step.records, allow_truncated_tail=True)]
                if broker.mirror[start:] != fetched[: len(broker.mirror) - start]:
                    self.fail(f"broker {broker.node_id} holds other bytes than leader {state.leader_id} sent from {start}")
        marks = adopt_leader_marks(response.high_watermark, response.log_start_offset, plog)
        if marks.high_watermark is not None:
            plog.high_watermark = marks.high_watermark
        if marks.delete_records_to is not None:
            self.fail(f"broker {broker.node_id} told to delete records below {marks.delete_records_to}: no log here deletes records")
        return True

    # -- crashes -------------------------------------------------------------------

    def can_crash(self, broker: SimBroker) -> bool:
        if any(not b.alive for b in self.brokers.values()):
            return False
        committed = len(self.ledger)
        if broker.node_id not in self.controller.isr or broker.plog.recovery_point >= committed:
            return True
        return any(
            other is not broker and other.alive and other.node_id in self.controller.isr and other.plog.log_end_offset >= committed
            for other in self.brokers.values()
        )

    def crash(self, broker: SimBroker) -> None:
        self.stats.crashes += 1
        broker.alive = False
        broker.incarnation += 1
        broker.leader = None
        broker.leader_hw = None
        broker.follower = None
        broker.follower_token = 0
        broker.fetch_backoff_until = 0
        broker.superseded_epoch = -1
        broker.metadata = None
        broker.purgatory = Purgatory()  # waiting produces are never answered
        broker.fetchers = {}
        broker.alter_queue = None
        broker.alter_in_flight = None
        broker.alter_send_scheduled = False
        broker.alter_backoff_until = 0
        plog = broker.plog
        # Everything past the last fsync is gone; the files then hold what a
        # power loss would have left.
        new_end = plog.truncate_to(plog.recovery_point)
        del broker.mirror[new_end:]
        broker.ledger_checked = min(broker.ledger_checked, new_end)
        plog.close()
        broker.plog = None
        # Session expiry fences the broker before it can register again.
        fence_at = self.now + self.rng.randint(0, 200)
        self.schedule(fence_at, ("fence", broker.node_id))
        self.schedule(fence_at + self.rng.randint(10, 300), ("restart", broker.node_id))

    def restart(self, broker: SimBroker) -> None:
        recovery_point = None
        if broker.checkpoint_recovery_point is not None and self.rng.random() < 0.8:
            recovery_point = min(broker.checkpoint_recovery_point, len(broker.mirror))
        self._open(broker, recovery_point, after_crash=True)
        broker.alive = True
        self.controller.register(broker.node_id)
        # A restarted broker acts on no metadata older than its registration
        # (Kafka's broker waits until it has caught up to it): an older image
        # may still name it leader of an epoch whose log it lost the tail of.
        broker.min_metadata_version = self.controller.version
        self.broadcast()
        self.schedule(self.now + self.rng.randint(5, 60), ("unfence", broker.node_id, broker.incarnation))

    # -- invariants -------------------------------------------------------------------

    def check(self) -> None:
        live = [b for b in self.brokers.values() if b.alive]
        ledger = self.ledger
        for broker in live:
            plog = broker.plog
            end = plog.log_end_offset
            hw = plog.high_watermark
            if end != len(broker.mirror):
                self.fail(f"broker {broker.node_id}: log end {end}, {len(broker.mirror)} batches read back")
            if hw > end:
                self.fail(f"broker {broker.node_id}: high watermark {hw} past its log end {end}")
            if broker.leader is not None:
                mark, last = broker.leader_hw
                if mark == id(broker.leader):
                    if hw < last:
                        self.fail(f"leader {broker.node_id} high watermark went from {last} down to {hw} in epoch {broker.leader.leader_epoch}")
                    broker.leader_hw = (mark, hw)
            # (4) and the ledger: committed batches never change.
            for offset in range(broker.ledger_checked, hw):
                if offset < len(ledger):
                    if broker.mirror[offset] != ledger[offset]:
                        self.fail(
                            f"committed offset {offset} changed: broker {broker.node_id} (hw {hw}) holds "
                            f"{self.describe_batch(broker.mirror[offset])}, committed was {self.describe_batch(ledger[offset])}"
                        )
                else:
                    ledger.append(broker.mirror[offset])
            broker.ledger_checked = max(broker.ledger_checked, hw)
        committed = len(ledger)
        # (1) committed data is in every live ISR member (as far as its log goes) and in the leader.
        for broker_id in self.controller.isr:
            broker = self.brokers[broker_id]
            if not broker.alive:
                continue
            # A clean election may pick any of them, so each must hold all of it.
            if len(broker.mirror) < committed:
                self.fail(
                    f"ISR member {broker_id} log ends at {len(broker.mirror)}, {committed} offsets are committed "
                    f"(leader {self.controller.leader}, isr {list(self.controller.isr)})"
                )
            limit = committed
            if broker.mirror[:limit] != ledger[:limit]:
                first = next(i for i in range(limit) if broker.mirror[i] != ledger[i])
                self.fail(
                    f"ISR member {broker_id} holds {self.describe_batch(broker.mirror[first])} at committed offset {first}, "
                    f"committed was {self.describe_batch(ledger[first])}"
                )
        leader = self.brokers.get(self.controller.leader)
        if leader is not None and leader.alive and len(leader.mirror) < committed:
            self.fail(f"leader {leader.node_id} log ends at {len(leader.mirror)}, {committed} offsets are committed")
        for value, offset, _ in self.acks[self.acked_checked :]:
            if offset >= committed or producer_id_of(ledger[offset]) != self.value_id(value):
                self.fail(f"{value!r} acknowledged at {offset} is not committed there")
        self.acked_checked = len(self.acks)
        # (3) below the smallest high watermark of the live replicas, the logs are identical.
        if len(live) > 1:
            low = min(b.plog.high_watermark for b in live)
            first = live[0].mirror[:low]
            for broker in live[1:]:
                if broker.mirror[:low] != first:
                    self.fail(f"brokers {live[0].node_id} and {broker.node_id} differ below high watermark {low}")
        if self.step % VERIFY_EVERY == 0 and live:
            broker = live[self.step // VERIFY_EVERY % len(live)]
            self.verify_disk(broker, "periodic read")

    def describe_batch(self, batch: bytes) -> str:
        header = parse_batch_header(batch)
        return f"value #{header.producer_id} of epoch {header.partition_leader_epoch}"

    def value_id(self, value: bytes) -> int:
        return int(value.rsplit(b"-", 1)[1])

    # -- events -------------------------------------------------------------------------

    def run_until(self, end_ms: int) -> None:
        while self.queue and self.queue[0][0] <= end_ms:
            at, _, event = heapq.heappop(self.queue)
            self.now = at
            self.step += 1
            if self.step > MAX_EVENTS:
                self.fail("too many events: a loop that never waits")
            self.handle(event)
            self.check()
        self.now = max(self.now, end_ms)

    def handle(self, event: tuple) -> None:
        line = f"[{self.step} t={self.now}] {event}"
        self.trace.append(line)
        if TRACE:
            print(line + "\n    " + self.describe())
        kind = event[0]
        if kind == "deliver":
            self.deliver(*event[1:])
            return
        if kind in ("fetch", "fetch_timeout", "alter_send", "alter_timeout", "isr_check", "expire", "unfence"):
            broker = self.brokers[event[1]]
            if not broker.alive or broker.incarnation != event[2]:
                return  # scheduled by a process that has crashed since
            if kind == "fetch":
                self.on_fetch(broker, event[3])
            elif kind == "fetch_timeout":
                self.on_fetch_timeout(broker, event[3], event[4])
            elif kind == "alter_send":
                self.on_alter_send(broker)
            elif kind == "alter_timeout":
                self.on_alter_answer(broker, event[3], None)
            elif kind == "isr_check":
                self.on_isr_check(broker, event[3])
            elif kind == "expire":
                broker.purgatory.expire(self.now)
            elif kind == "unfence":
                self.controller.unfence(broker.node_id)
                self.broadcast()
        elif kind == "fence":
            self.controller.fence(event[1])
            self.broadcast()
        elif kind == "restart":
            self.restart(self.brokers[event[1]])
        elif kind == "metadata_push":
            self.broadcast()
            self.schedule(self.now + self.metadata_push_ms, ("metadata_push",))
        elif kind == "produce":
            if self.chaos:
                self.produce()
                self.schedule(self.now + self.rng.randint(3, 40), ("produce",))
        elif kind == "chaos":
            if self.chaos:
                self.chaos_event()
                self.schedule(self.now + self.rng.randint(10, 150), ("chaos",))

    def deliver(self, source: int, source_incarnation: int, destination: int, destination_incarnation: int, message) -> None:
        if (source, destination) in self.blocked:
            return
        sender = self.brokers.get(source)
        if sender is not None and (not sender.alive or sender.incarnation != source_incarnation):
            return  # the sender's connection died with it
        if destination == CONTROLLER:
            if isinstance(message, AlterPartitionRequest):
                before = self.controller.version
                response = self.controller.alter_partition(message)
                self.send(CONTROLLER, source, response)
                if self.controller.version != before:
                    self.broadcast()
            return
        if destination == CLIENT:
            return  # the producer never retries: acks are counted where they are decided
        broker = self.brokers[destination]
        if not broker.alive or broker.incarnation != destination_incarnation:
            return  # the connection died with the process it went to
        if isinstance(message, MetadataUpdate):
            self.apply_metadata(broker, message.state)
        elif isinstance(message, FetchRequest):
            self.send(destination, source, self.leader_fetch(broker, source, message))
        elif isinstance(message, FetchResponse):
            self.on_fetch_response(broker, source, message)
        elif isinstance(message, ProduceRequest):
            self.handle_produce(broker, message)
        elif isinstance(message, AlterPartitionResponse):
            self.on_alter_answer(broker, message.request_id, message)

    def produce(self) -> None:
        target = self.controller.leader
        if target < 0 or self.rng.random() < 0.15:
            target = self.rng.choice(REPLICAS)  # a client with stale metadata
        self.values_sent += 1
        number = self.values_sent
        value = f"s{self.seed}-{number}".encode()
        # One producer id per value: a duplicated request is the same batch, which the
        # leader's producer state recognises, so no value is ever written twice.
        batch = build_batch(
            [(None, value, [], self.clock_ms())], producer_id=number, producer_epoch=0, base_sequence=0
        )
        self.stats.produced += 1
        self.send(CLIENT, target, ProduceRequest(next(self.ids), value, batch))

    def chaos_event(self) -> None:
        rng = self.rng
        brokers = list(self.brokers.values())
        roll = rng.random()
        if roll < 0.18:
            # Half the crashes aim at the leader: elections and divergent tails come from there.
            leader = self.brokers.get(self.controller.leader)
            broker = leader if leader is not None and rng.random() < 0.5 else rng.choice(brokers)
            if broker.alive and self.can_crash(broker):
                self.crash(broker)
        elif roll < 0.40:
            broker = rng.choice(brokers)
            if broker.alive:
                broker.plog.flush(fsync=True)
                self.stats.fsyncs += 1
        elif roll < 0.58:
            broker = rng.choice(brokers)
            if broker.alive:
                broker.checkpoint_hw = broker.plog.high_watermark
                broker.checkpoint_recovery_point = broker.plog.recovery_point
        elif roll < 0.64:
            if self.controller.elect_preferred():
                self.stats.preferred_elections += 1
                self.broadcast()
        elif roll < 0.72:
            nodes = [CONTROLLER, *REPLICAS]
            a, b = rng.sample(nodes, 2)
            self.blocked |= {(a, b), (b, a)}
        elif roll < 0.80:
            a, b = rng.sample([CONTROLLER, *REPLICAS], 2)
            self.blocked.add((a, b))  # one way: a's messages to b vanish
        elif roll < 0.92:
            self.blocked = set()

    def heal(self) -> None:
        self.chaos = False
        self.blocked = set()
        self.loss = 0.0
        self.duplicate = 0.0

    def settled(self) -> bool:
        c = self.controller
        if c.leader < 0 or c.isr != REPLICAS or c.fenced:
            return False
        if not all(b.alive for b in self.brokers.values()):
            return False
        leader = self.brokers[c.leader]
        if leader.leader is None or leader.leader.isr != REPLICAS or leader.leader.change_in_flight:
            return False
        end = leader.plog.log_end_offset
        for broker in self.brokers.values():
            if broker.metadata is None or broker.metadata.version != c.version:
                return False
            if broker.plog.log_end_offset != end or broker.plog.high_watermark != end:
                return False
        return len(leader.purgatory) == 0

    def run(self) -> None:
        self.schedule(0, ("chaos",))
        self.schedule(0, ("metadata_push",))
        self.schedule(self.rng.randint(0, 30), ("produce",))
        self.run_until(CHAOS_MS)
        self.heal()
        deadline = self.now + SETTLE_MAX_MS
        while not self.settled():
            if self.now >= deadline:
                self.fail(f"liveness: not settled {SETTLE_MAX_MS} ms after healing")
            self.run_until(self.now + SETTLE_STEP_MS)
        self.stats.leader_changes = self.controller.leader_changes
        self.stats.isr_changes = self.controller.isr_changes
        self.final_check()

    def final_check(self) -> None:
        leader = self.brokers[self.controller.leader]
        for broker in self.brokers.values():
            self.verify_disk(broker, "final read")
            if broker.mirror != leader.mirror:
                self.fail(f"broker {broker.node_id} differs from leader {leader.node_id} after settling")
        log = leader.mirror
        if log != self.ledger[: len(log)] or len(self.ledger) != len(log):
            self.fail(f"the settled log ({len(log)} batches) is not the committed ledger ({len(self.ledger)})")
        seen: dict[int, int] = {}
        for offset, batch in enumerate(log):
            value_id = producer_id_of(batch)
            if value_id in seen:
                self.fail(f"value #{value_id} is in the log twice, at {seen[value_id]} and {offset}")
            seen[value_id] = offset
        last = -1
        for value, offset, _ in self.acks:
            if seen.get(self.value_id(value)) != offset:
                self.fail(f"{value!r} acknowledged at {offset} is at {seen.get(self.value_id(value))} in the settled log")
            if offset <= last:
                self.fail(f"{value!r} was acknowledged after a value at {last}, but sits at {offset}")
            last = offset

    def close(self) -> None:
        for broker in self.brokers.values():
            if broker.plog is not None:
                broker.plog.close()
                broker.plog = None


def seeds() -> list[int]:
    if os.environ.get("REPLICATION_SIM_SEED"):
        return [int(os.environ["REPLICATION_SIM_SEED"])]
    first = int(os.environ.get("REPLICATION_SIM_FIRST_SEED", "0"))
    return list(range(first, first + int(os.environ.get("REPLICATION_SIM_SEEDS", str(DEFAULT_SEEDS)))))


def simulate(seed: int, root: Path) -> Simulation:
    sim = Simulation(seed, root)
    try:
        sim.run()
    finally:
        sim.close()
    return sim


@pytest.mark.parametrize("seed", seeds())
def test_replication_simulation(seed, tmp_path):
    simulate(seed, tmp_path)
