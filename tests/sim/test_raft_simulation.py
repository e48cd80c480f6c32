"""Deterministic simulation of the Raft core (Kafka's RaftEventSimulationTest, TigerBeetle's VOPR).

One seed is one run: the seed draws the cluster (3 or 5 voters plus an
observer), the network's loss/duplication/delay rates, and every chaos event:
symmetric and one-way partitions, crashes (between steps, or in the middle of
carrying out an output: before the quorum state is persisted, before the log
is flushed, before messages are sent) that lose unflushed log data, restarts
from the persisted ``quorum-state`` bytes plus the flushed log, graceful
resignations, and client proposals at random times. Time is simulated; there
is no thread, no sleep and no wall clock, so a failing seed replays exactly:

    RAFT_SIM_SEED=<n> pytest tests/sim/test_raft_simulation.py

``RAFT_SIM_SEEDS=<count>`` runs that many seeds instead of the default, from
``RAFT_SIM_FIRST_SEED`` (0) on.

Invariants, checked after every event:
  * at most one leader per epoch, over the whole history;
  * log matching: a batch (base offset, epoch) is created once by its epoch's
    leader; any node holding it holds the same records after the same
    predecessor epoch (checked on every append, which by induction gives
    "same offset and epoch => same prefix");
  * committed entries never change: the first node to apply an offset (below
    its high watermark) fixes it in a global ledger; every later application,
    snapshot and new leader's log must agree, and a new leader's log must hold
    the whole ledger (nothing committed is lost);
  * each node's high watermark never decreases while it runs. After a restart
    it starts again at the log start offset (the latest snapshot): that is the
    only part of the log a node knows is committed without asking the leader,
    as in KRaft, where the high watermark is not persisted;
  * each node's applied state (the records it applied, offset by offset, or
    loaded from a snapshot) equals the ledger's prefix up to what it applied;
  * each node's metadata image, built as it applied batches (or loaded from a
    snapshot), equals the replay of the committed ledger up to the same offset:
    proposals are KRaft ConfigRecords, so the image is the real one brokers use.

Liveness: after the chaotic phase the network heals and every node restarts;
within a bounded time a leader must exist and a new proposal must commit and
be applied on every node, observer included.
"""

from __future__ import annotations

import heapq
import os
import random
import struct
from dataclasses import dataclass, field, replace

import pytest

from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import CONFIG_RECORD, RESOURCE_BROKER, decode_record, encode_record
from controller.raft.log import MemoryRaftLog, SnapshotId
from controller.raft.messages import VoteResponse
from controller.raft.node import (
    Appended,
    Output,
    PrefixDeleted,
    RaftConfig,
    RaftNode,
    Role,
    SnapshotInstalled,
    Truncated,
)
from controller.raft.quorum_state import QuorumState

CONFIG = RaftConfig(
    election_timeout_ms=150,
    fetch_timeout_ms=300,
    election_backoff_max_ms=100,
    election_backoff_base_ms=10,
    request_timeout_ms=150,
    retry_backoff_ms=20,
    fetch_max_wait_ms=100,
    fetch_max_bytes=600,
    snapshot_chunk_bytes=1000,
)
CHAOS_MS = 3000
HEAL_SETTLE_MS = 2500  # election timeouts + backoffs + catch-up after everything heals
COMMIT_WITHIN_MS = 3000
MAX_EVENTS = 300_000
DEFAULT_SEEDS = 2000
# RAFT_SIM_TRACE=1 prints every event and role change of a (replayed) run.
TRACE = bool(os.environ.get("RAFT_SIM_TRACE"))

Entry = tuple[int, bool, bytes]  # (epoch, control, record)


class Violation(AssertionError):
    pass


def apply_entries(image: MetadataImage, entries: list[Entry], end: int) -> MetadataImage:
    """``image`` with the metadata records among ``entries`` applied; ``end`` is the applied end offset."""
    return apply_records(image, [decode_record(record) for _, control, record in entries if not control], end - 1)


def encode_state(entries: list[Entry]) -> bytes:
    parts = []
    for epoch, control, record in entries:
        parts.append(struct.pack(">iBI", epoch, control, len(record)))
        parts.append(record)
    return b"".join(parts)


def decode_state(data: bytes) -> list[Entry]:
    entries = []
    position = 0
    while position < len(data):
        epoch, control, size = struct.unpack_from(">iBI", data, position)
        position += 9
        entries.append((epoch, bool(control), data[position : position + size]))
        position += size
    return entries


@dataclass
class SimNode:
    node_id: int
    is_voter: bool
    log: MemoryRaftLog = field(default_factory=MemoryRaftLog)
    durable_state: bytes | None = None
    raft: RaftNode | None = None
    incarnation: int = 0
    applied: list[Entry] = field(default_factory=list)
    image: MetadataImage = field(default_factory=MetadataImage)
    last_hw: int = 0
    tick_due: int | None = None
    flush_pending: bool = False
    # Crash while carrying out the next output: 0 before persisting the quorum state,
    # 1 before flushing, 2 before sending, 3 right after sending.
    crash_at_stage: int | None = None


@dataclass
class Stats:
    elections: int = 0
    truncations: int = 0
    snapshots_created: int = 0
    snapshots_installed: int = 0
    crashes: int = 0
    committed: int = 0
    resignations: int = 0


class Simulation:
    def __init__(self, seed: int, voters: int, observers: int = 1):
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self.step = 0
        self.queue: list[tuple[int, int, tuple]] = []
        self.sequence = 0
        ids = list(range(1, voters + observers + 1))
        self.voter_ids = frozenset(ids[:voters])
        self.nodes = {i: SimNode(i, i in self.voter_ids) for i in ids}
        self.blocked: set[tuple[int, int]] = set()
        rng = self.rng
        self.loss = rng.choice([0.0, 0.02, 0.1, 0.25])
        self.duplicate = rng.choice([0.0, 0.05, 0.2])
        self.max_delay_ms = rng.choice([1, 5, 20, 60])
        self.snapshot_chance = rng.choice([0.0, 0.05, 0.3])
        # A targeted fault: crash a voter right after it granted a vote, and bring it back
        # fast, while the election is still on (a vote that is not durable gets granted twice).
        self.crash_after_vote = rng.choice([0.0, 0.0, 0.3])
        # 1 byte: one batch per fetch, so a follower can hold old entries without the
        # new leader's LeaderChange batch (what "commit an entry of your own epoch" is about).
        self.config = replace(CONFIG, fetch_max_bytes=rng.choice([1, 100, 600, 1 << 20]))
        self.leaders_by_epoch: dict[int, int] = {}
        self.ledger: list[Entry] = []
        self.batches: dict[tuple[int, int], tuple[tuple[bytes, ...], bool, int]] = {}
        # (node, incarnation, epoch, base offset, records): proposals whose fate is open.
        self.pending: list[tuple[int, int, int, int, tuple[bytes, ...]]] = []
        self.acked: list[tuple[int, tuple[bytes, ...]]] = []
        self.proposed = 0
        self.stats = Stats()
        self.chaos = True
        for node in self.nodes.values():
            self._start(node)

    # -- plumbing ------------------------------------------------------------

    def fail(self, detail: str) -> None:
        raise Violation(
            f"seed={self.seed} step={self.step} t={self.now}ms: {detail}\n"
            f"replay: RAFT_SIM_SEED={self.seed} pytest tests/sim/test_raft_simulation.py"
        )

    def schedule(self, at_ms: int, event: tuple) -> None:
        self.sequence += 1
        heapq.heappush(self.queue, (max(at_ms, self.now), self.sequence, event))

    def _start(self, node: SimNode) -> None:
        node.incarnation += 1
        state = QuorumState.decode(node.durable_state) if node.durable_state else None
        node.raft = RaftNode(
            node.node_id,
            self.voter_ids,
            node.log,
            random.Random(self.seed * 7919 + node.node_id * 131 + node.incarnation),
            self.now,
            self.config,
            state,
        )
        # The state machine restarts from the latest snapshot; the log above it is re-applied
        # once the high watermark is learned again.
        start = node.log.start_offset
        node.applied = decode_state(node.log.snapshot_data(node.log.latest_snapshot)) if start else []
        node.image = apply_entries(MetadataImage(), node.applied, len(node.applied))
        if len(node.applied) != start:
            self.fail(f"node {node.node_id} snapshot holds {len(node.applied)} entries, log starts at {start}")
        self._check_prefix(node, node.applied, "restart snapshot", extend=False)
        node.last_hw = node.raft.high_watermark
        node.tick_due = None
        node.flush_pending = False
        node.crash_at_stage = None
        self._schedule_tick(node, node.raft.next_deadline_ms)

    def crash(self, node: SimNode, restart_after_ms: int | None = None) -> None:
        if node.raft is None:
            return
        if TRACE:
            print(f"    crash {node.node_id}")
        self.stats.crashes += 1
        node.raft = None
        node.log.crash()
        node.tick_due = None
        if restart_after_ms is None:
            restart_after_ms = self.rng.randint(20, 600)
        self.schedule(self.now + restart_after_ms, ("restart", node.node_id))

    def _schedule_tick(self, node: SimNode, at_ms: int) -> None:
        at_ms = max(at_ms, self.now)
        if node.tick_due is None or at_ms < node.tick_due or node.tick_due < self.now:
            node.tick_due = at_ms
            self.schedule(at_ms, ("tick", node.node_id, node.incarnation, at_ms))

    def send(self, source: int, destination: int, message) -> None:
        copies = 1
        if self.rng.random() < self.loss:
            copies = 0
        elif self.rng.random() < self.duplicate:
            copies = 2
        for _ in range(copies):
            delay = self.rng.randint(1, self.max_delay_ms)
            self.schedule(self.now + delay, ("deliver", source, destination, message))

    # -- carrying out an output (the driver contract) ------------------------

    def execute(self, node: SimNode, out: Output) -> None:
        raft = node.raft
        self._check_log_ops(node, out)
        stage = node.crash_at_stage
        if stage == 0:
            return self.crash(node)
        if out.quorum_state is not None:
            node.durable_state = out.quorum_state.encode()
        if stage == 1:
            return self.crash(node)
        if out.flush:
            node.log.flush()
        if stage == 2:
            return self.crash(node)
        for destination, message in out.messages:
            self.send(node.node_id, destination, message)
        self._apply(node, out)
        if node.raft is not raft:
            return
        if stage == 3:
            return self.crash(node)  # right after, say, a vote went out
        if (
            self.chaos
            and self.crash_after_vote
            and any(isinstance(m, VoteResponse) and m.vote_granted and not m.pre_vote for _, m in out.messages)
            and self.rng.random() < self.crash_after_vote
        ):
            return self.crash(node, restart_after_ms=self.rng.randint(1, 40))
        if out.flush_soon and not node.flush_pending:
            node.flush_pending = True
            self.schedule(self.now + self.rng.randint(0, 30), ("flush", node.node_id, node.incarnation))
        self._schedule_tick(node, out.next_deadline_ms)

    def _check_log_ops(self, node: SimNode, out: Output) -> None:
        log = node.log
        for op in out.log_ops:
            if isinstance(op, Appended):
                for batch in log.read(op.base_offset, 1):
                    if batch.base_offset != op.base_offset or batch.epoch != op.epoch:
                        self.fail(f"node {node.node_id}: log op {op} but the log holds {batch}")
                    key = (batch.base_offset, batch.epoch)
                    before = log.epoch_at(batch.base_offset - 1) if batch.base_offset > 0 else 0
                    known = self.batches.get(key)
                    if known is None:
                        raft = node.raft
                        if raft.role is not Role.LEADER or raft.epoch != batch.epoch:
                            self.fail(f"node {node.node_id} appended {batch} that no leader created")
                        self.batches[key] = (batch.records, batch.control, before)
                    elif known != (batch.records, batch.control, before):
                        self.fail(
                            f"log matching: node {node.node_id} holds {batch} {batch.records} after epoch "
                            f"{before}; its leader created {known[0]} (control={known[1]}) after epoch {known[2]}"
                        )
            elif isinstance(op, Truncated):
                self.stats.truncations += 1
                if op.end_offset < node.raft.high_watermark:
                    self.fail(f"node {node.node_id} truncated to {op.end_offset} below its HW")
            elif isinstance(op, SnapshotInstalled):
                self.stats.snapshots_installed += 1
            elif isinstance(op, PrefixDeleted) and op.start_offset != log.start_offset:
                self.fail(f"node {node.node_id}: {op} but the log starts at {log.start_offset}")

    # -- the state machine above the core -------------------------------------

    def _check_prefix(
        self, node: SimNode, entries: list[Entry], what: str, start: int = 0, extend: bool = True
    ) -> None:
        if not extend and len(entries) > len(self.ledger):
            # Snapshots are made of applied entries only, so the ledger has them already.
            self.fail(f"node {node.node_id} {what} holds {len(entries)} entries, only {len(self.ledger)} committed")
        for offset in range(start, len(entries)):
            entry = entries[offset]
            if offset < len(self.ledger):
                if self.ledger[offset] != entry:
                    self.fail(
                        f"committed entry changed: node {node.node_id} {what} has {entry} at {offset}, "
                        f"ledger has {self.ledger[offset]}"
                    )
            elif offset == len(self.ledger):
                self.ledger.append(entry)
                self.stats.committed += 1
            else:
                self.fail(f"node {node.node_id} {what} skips offsets {len(self.ledger)}..{offset}")

    def _apply(self, node: SimNode, out: Output) -> None:
        raft = node.raft
        log = node.log
        for op in out.log_ops:
            if isinstance(op, SnapshotInstalled):
                entries = decode_state(log.snapshot_data(op.snapshot_id))
                if len(entries) != op.snapshot_id.end_offset:
                    self.fail(f"node {node.node_id} snapshot {op.snapshot_id} holds {len(entries)} entries")
                self._check_prefix(node, entries, "installed snapshot", extend=False)
                node.applied = entries
                node.image = apply_entries(MetadataImage(), entries, len(entries))
        hw = raft.high_watermark
        applied = node.applied
        if hw > len(applied):
            if len(applied) < log.start_offset:
                self.fail(f"node {node.node_id} applied {len(applied)} but its log starts at {log.start_offset}")
            first = len(applied)
            offset = first
            while offset < hw:
                # A read returns at most 4 KiB of batches: read on until the HW.
                batches = log.read(offset, 4096)
                if not batches:
                    self.fail(f"node {node.node_id} HW {hw} is past its log end {log.end_offset}")
                for batch in batches:
                    for index, record in enumerate(batch.records):
                        at = batch.base_offset + index
                        if offset <= at < hw:
                            applied.append((batch.epoch, batch.control, record))
                    offset = batch.end_offset
                    if offset >= hw:
                        break
            self._check_prefix(node, applied, "applied state", first)
            node.image = apply_entries(node.image, applied[first:], len(applied))
        if (
            self.snapshot_chance
            and len(applied) - log.start_offset >= 40
            and len(applied) <= log.end_offset
            and self.rng.random() < self.snapshot_chance
        ):
            end = len(applied)
            snapshot_id = SnapshotId(end, log.epoch_at(end - 1))
            log.create_snapshot(snapshot_id, encode_state(applied))
            self.stats.snapshots_created += 1
            self.execute(node, raft.snapshot_created(self.now, snapshot_id))

    # -- invariants after every event -----------------------------------------

    def check(self) -> None:
        for node in self.nodes.values():
            raft = node.raft
            if raft is None:
                continue
            log = node.log
            if raft.role is Role.LEADER:
                holder = self.leaders_by_epoch.setdefault(raft.epoch, node.node_id)
                if holder != node.node_id:
                    self.fail(f"two leaders in epoch {raft.epoch}: {holder} and {node.node_id}")
                # A deposed leader may linger until check-quorum or a higher epoch reaches
                # it; the newest leader must hold everything committed.
                if raft.epoch == max(self.leaders_by_epoch) and log.end_offset < len(self.ledger):
                    self.fail(f"leader {node.node_id} log ends at {log.end_offset}, {len(self.ledger)} are committed")
            if raft.high_watermark < node.last_hw:
                self.fail(f"node {node.node_id} HW went from {node.last_hw} down to {raft.high_watermark}")
            node.last_hw = raft.high_watermark
            if raft.high_watermark > log.end_offset:
                self.fail(f"node {node.node_id} HW {raft.high_watermark} is past its log end {log.end_offset}")
            if log.flushed_end_offset > log.end_offset:
                self.fail(f"node {node.node_id} flushed past its log end")
        self.check_acknowledgements()

    def check_acknowledgements(self) -> None:
        """A client is told "committed" once its leader's HW covers the batch; it must be in the ledger."""
        still_open = []
        for entry in self.pending:
            node_id, incarnation, epoch, base, records = entry
            node = self.nodes[node_id]
            raft = node.raft
            if raft is None or node.incarnation != incarnation or raft.epoch != epoch:
                continue  # the client never hears back: the outcome is unknown, either is fine
            if raft.high_watermark < base + len(records):
                still_open.append(entry)
                continue
            got = [record for _, _, record in self.ledger[base : base + len(records)]]
            if got != list(records):
                self.fail(f"acknowledged proposal at {base} {records} is {got} in the committed ledger")
            self.acked.append((base, records))
        self.pending = still_open

    def check_new_leader(self, node: SimNode) -> None:
        """Leader completeness: everything committed in earlier epochs is in the new leader's log.

        (A leader elected in an epoch older than another leader's, in a partition
        that has not heard of the newer epoch, need not hold what that one committed.)
        """
        log = node.log
        self.stats.elections += 1
        epoch = node.raft.epoch
        limit = len(self.ledger)
        while limit > 0 and self.ledger[limit - 1][0] >= epoch:
            limit -= 1
        if log.start_offset > limit:
            self.fail(f"leader {node.node_id} log starts past the committed entries")
        offset = log.start_offset
        while offset < limit:
            batches = log.read(offset, 1 << 30)
            if not batches:
                self.fail(f"new leader {node.node_id} lacks committed offset {offset}")
            for batch in batches:
                for index, record in enumerate(batch.records):
                    at = batch.base_offset + index
                    if at >= limit:
                        return
                    if at >= offset and self.ledger[at] != (batch.epoch, batch.control, record):
                        self.fail(f"new leader {node.node_id} has a different entry at committed offset {at}")
                offset = batch.end_offset

    # -- events ------------------------------------------------------------------

    def run_until(self, end_ms: int) -> None:
        while self.queue and self.queue[0][0] <= end_ms:
            at, _, event = heapq.heappop(self.queue)
            self.now = at
            self.step += 1
            if self.step > MAX_EVENTS:
                self.fail("too many events: livelock or a deadline that never moves")
            leaders_before = {i for i, n in self.nodes.items() if n.raft and n.raft.role is Role.LEADER}
            self.handle(event)
            for node_id, node in self.nodes.items():
                if node.raft and node.raft.role is Role.LEADER and node_id not in leaders_before:
                    self.check_new_leader(node)
            self.check()
        self.now = max(self.now, end_ms)

    def handle(self, event: tuple) -> None:
        kind = event[0]
        if TRACE:
            print(f"[{self.step} t={self.now}] {event} " + self.describe())
        if kind == "deliver":
            _, source, destination, message = event
            node = self.nodes[destination]
            if node.raft is None or (source, destination) in self.blocked:
                return
            self.execute(node, node.raft.step(self.now, message))
        elif kind == "tick":
            _, node_id, incarnation, due = event
            node = self.nodes[node_id]
            if node.raft is None or node.incarnation != incarnation or node.tick_due != due:
                return
            node.tick_due = None
            self.execute(node, node.raft.tick(self.now))
        elif kind == "flush":
            _, node_id, incarnation = event
            node = self.nodes[node_id]
            if node.raft is None or node.incarnation != incarnation:
                return
            node.flush_pending = False
            node.log.flush()
            self.execute(node, node.raft.tick(self.now))
        elif kind == "restart":
            node = self.nodes[event[1]]
            if node.raft is None:
                self._start(node)
        elif kind == "chaos":
            if self.chaos:
                self.chaos_event()
                self.schedule(self.now + self.rng.randint(10, 250), ("chaos",))
        elif kind == "propose":
            self.propose()
            self.schedule(self.now + self.rng.randint(5, 120), ("propose",))

    def describe(self) -> str:
        parts = []
        for node_id, node in self.nodes.items():
            raft = node.raft
            if raft is None:
                parts.append(f"{node_id}:down")
            else:
                parts.append(
                    f"{node_id}:{raft.role.value[:4]}/e{raft.epoch}/l{raft.leader_id}/v{raft.voted_id}"
                    f"/leo{node.log.end_offset}/fl{node.log.flushed_end_offset}/hw{raft.high_watermark}"
                )
        return " ".join(parts)

    def propose(self, node_id: int | None = None) -> tuple[int, tuple[bytes, ...]] | None:
        up = [n for n in self.nodes.values() if n.raft is not None]
        if node_id is None:
            if not up:
                return None
            # Clients mostly find the leader; some ask whoever they last knew.
            leaders = [n for n in up if n.raft.role is Role.LEADER]
            node = self.rng.choice(leaders if leaders and self.rng.random() < 0.7 else up)
        else:
            node = self.nodes[node_id]
        self.proposed += 1
        # Broker configs with a few recurring keys, so later records overwrite and delete earlier ones.
        records = tuple(
            encode_record(
                CONFIG_RECORD(
                    resource_type=RESOURCE_BROKER,
                    resource_name=str(self.rng.randint(0, 2)),
                    name=f"key-{self.rng.randint(0, 5)}",
                    value=None if self.rng.random() < 0.2 else f"s{self.seed}-p{self.proposed}-r{i}",
                )
            )
            for i in range(self.rng.randint(1, 4))
        )
        out = node.raft.propose(self.now, list(records))
        result = out.proposal
        self.execute(node, out)
        if result.error:
            return None
        self.pending.append((node.node_id, node.incarnation, result.epoch, result.base_offset, records))
        return result.base_offset, records

    def chaos_event(self) -> None:
        rng = self.rng
        nodes = list(self.nodes.values())
        roll = rng.random()
        if roll < 0.22:
            node = rng.choice(nodes)
            if node.raft is not None:
                if rng.random() < 0.5:
                    self.crash(node)
                else:
                    node.crash_at_stage = rng.randint(0, 3)
        elif roll < 0.30:
            leaders = [n for n in nodes if n.raft is not None and n.raft.role is Role.LEADER]
            if leaders:
                self.stats.resignations += 1
                self.execute(leaders[0], leaders[0].raft.resign(self.now))
        elif roll < 0.45:
            ids = [n.node_id for n in nodes]
            rng.shuffle(ids)
            cut = rng.randint(1, len(ids) - 1)
            left, right = set(ids[:cut]), set(ids[cut:])
            self.blocked = {(a, b) for a in left for b in right} | {(b, a) for a in left for b in right}
        elif roll < 0.60:
            a, b = rng.sample([n.node_id for n in nodes], 2)
            self.blocked.add((a, b))  # one-way: a's messages to b vanish, b's still reach a
        elif roll < 0.80:
            self.blocked = set()

    def heal(self) -> None:
        self.chaos = False
        self.blocked = set()
        self.loss = 0.0
        self.duplicate = 0.0
        for node in self.nodes.values():
            node.crash_at_stage = None
            if node.raft is None:
                self._start(node)

    def run(self) -> None:
        self.schedule(0, ("chaos",))
        self.schedule(self.rng.randint(0, 50), ("propose",))
        self.run_until(CHAOS_MS)
        self.heal()
        self.run_until(self.now + HEAL_SETTLE_MS)
        leaders = [n for n in self.nodes.values() if n.raft.role is Role.LEADER]
        if not leaders:
            roles = {i: (n.raft.role.value, n.raft.epoch) for i, n in self.nodes.items()}
            self.fail(f"liveness: no leader {HEAL_SETTLE_MS}ms after healing: {roles}")
        leader = max(leaders, key=lambda n: n.raft.epoch)
        marker = self.propose(leader.node_id)
        if marker is None:
            self.fail("liveness: the leader refused a proposal")
        base, records = marker
        self.run_until(self.now + COMMIT_WITHIN_MS)
        end = base + len(records)
        for node in self.nodes.values():
            if len(node.applied) < end:
                self.fail(
                    f"liveness: node {node.node_id} applied {len(node.applied)} entries, "
                    f"the proposal at {base} did not reach it within {COMMIT_WITHIN_MS}ms "
                    f"(role {node.raft.role.value}, epoch {node.raft.epoch})"
                )
        self.final_check()

    def final_check(self) -> None:
        for node in self.nodes.values():
            if node.applied != self.ledger[: len(node.applied)]:
                self.fail(f"node {node.node_id} applied state differs from the committed ledger")
            replayed = apply_entries(MetadataImage(), self.ledger[: len(node.applied)], len(node.applied))
            if node.image != replayed:
                self.fail(f"node {node.node_id} image differs from the replay of the committed log")
        for base, records in self.acked:
            if [record for _, _, record in self.ledger[base : base + len(records)]] != list(records):
                self.fail(f"acknowledged proposal at {base} is not in the committed ledger")


def seeds() -> list[int]:
    if os.environ.get("RAFT_SIM_SEED"):
        return [int(os.environ["RAFT_SIM_SEED"])]
    first = int(os.environ.get("RAFT_SIM_FIRST_SEED", "0"))
    return list(range(first, first + int(os.environ.get("RAFT_SIM_SEEDS", str(DEFAULT_SEEDS)))))


@pytest.mark.parametrize("seed", seeds())
def test_raft_simulation(seed):
    voters = 3 if seed % 2 == 0 else 5
    Simulation(seed, voters=voters, observers=1).run()


def test_simulation_exercises_the_interesting_paths():
    """A sim that never truncates or ships a snapshot proves little: check that it does."""
    total = Stats()
    for seed in range(40):
        sim = Simulation(seed, voters=3 if seed % 2 == 0 else 5)
        sim.run()
        for name in vars(total):
            setattr(total, name, getattr(total, name) + getattr(sim.stats, name))
    assert total.elections > 40
    assert total.truncations > 0
    assert total.snapshots_created > 0
    assert total.snapshots_installed > 0
    assert total.crashes > 0
    assert total.resignations > 0
    assert total.committed > 1000
