"""Deterministic simulation of the transaction coordinator (pure core) with
transactional producers, a flaky ``__transaction_state`` log, coordinator
crashes and flaky partition leaders.

One seed is one run. Time is simulated; nothing sleeps, so a failing seed
replays exactly:

    TXN_SIM_SEED=<n> pytest tests/sim/test_txn_coordinator_simulation.py

``TXN_SIM_SEEDS=<count>`` runs that many seeds from ``TXN_SIM_FIRST_SEED``
(0); ``TXN_SIM_TRACE=1`` prints every event.

The world:
  * a coordinator node running :class:`TransactionCoordinator`. Its stores go
    to an in-memory ``__transaction_state`` log and may fail before the append,
    or land in the log and still be reported failed (a replication timeout).
    It crashes at random: its memory is gone, replies it owed are never sent,
    and it comes back at the next coordinator epoch rebuilt only from the
    records that were stored;
  * data partitions with Kafka's log-side producer state: a marker from an
    older coordinator epoch (TRANSACTION_COORDINATOR_FENCED) or producer epoch
    (INVALID_PRODUCER_EPOCH) is refused, a marker ends the producer's open
    batches there. Their leaders go away for a while (NOT_LEADER_OR_FOLLOWER),
    time out after applying a marker or not, and lose answers; marker requests
    already on their way when a coordinator crashes still arrive;
  * transactional producers (several instances per transactional id, so that
    new ones fence old ones) that init, add partitions, write data after the
    coordinator verifies the partition (KIP-890), and commit or abort, retrying
    on retriable errors; the coordinator aborts transactions past their timeout.

Invariants, checked after every event:
  * the coordinator's state of each id is a value stored in the log (a state
    change never takes effect before its record is stored);
  * every transaction ends the same way on every partition it wrote to: never
    a commit marker on one partition and an abort on another;
  * a producer's markers on a partition never go back in epoch;
  * an epoch bump fences the older producer: once InitProducerId returned an
    epoch, no request of an older epoch of that producer id succeeds, and data
    of an older epoch is never verified;
  * what a producer was told agrees with the markers: a commit answered NONE
    is committed everywhere, an abort answered NONE aborted everywhere.
Liveness: after the chaos the coordinator and every leader stay up and no
message is lost; within a bounded time every batch written has its marker and
no transaction is left half completed.
"""

from __future__ import annotations

import heapq
import itertools
import os
import random
from dataclasses import dataclass, field

import pytest

from broker.coordinators.transactions.coordinator import TransactionCoordinator
from broker.coordinators.transactions.model import AllocateProducerId, SendMarkers, Store, TxnConfig
from protocol.errors import ErrorCode
from protocol.transaction_state import TxnState, key_bytes, value_bytes

TXN_PARTITIONS = 2
DATA_PARTITIONS = tuple(("data", p) for p in range(4))
TRANSACTIONAL_IDS = ("t-a", "t-b", "t-c", "t-d")
TXN_TIMEOUT_MS = 1500
CHAOS_MS = 6000
SETTLE_MS = 8000
CLIENT_TIMEOUT_MS = 300
MAX_EVENTS = 200_000
DEFAULT_SEEDS = 60
TRACE = bool(os.environ.get("TXN_SIM_TRACE"))

RETRIABLE = {
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT,
}
FENCED = {ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.INVALID_PRODUCER_EPOCH}


class Violation(AssertionError):
    pass


@dataclass
class ProducerState:
    """A data partition's state of one producer id (Kafka's ProducerStateEntry)."""

    epoch: int = -1
    coordinator_epoch: int = -1
    open_batches: list[int] = field(default_factory=list)  # attempt ids written since the last marker


@dataclass
class DataPartition:
    key: tuple[str, int]
    down_until_ms: int = 0
    producers: dict[int, ProducerState] = field(default_factory=dict)
    # (producer id, epoch, commit) of every marker accepted, in order.
    markers: list[tuple[int, int, bool]] = field(default_factory=list)


@dataclass
class Attempt:
    """One transaction as a producer instance ran it."""

    attempt_id: int
    transactional_id: str
    producer_id: int
    epoch: int
    written: set = field(default_factory=set)  # partitions that took a batch
    told: bool | None = None  # commit/abort answered NONE to the producer


@dataclass
class Instance:
    """One producer process using a transactional id."""

    name: str
    transactional_id: str
    producer_id: int = -1
    epoch: int = -1
    phase: str = "init"  # init, begin, add, write, writing, end, fenced
    attempt: Attempt | None = None
    partitions: tuple = ()
    commit: bool = True
    pending_writes: int = 0
    request_seq: int = 0  # the request whose answer is awaited; older answers are ignored
    done: bool = False


class Simulation:
    def __init__(self, seed: int):
        self.seed = seed
        self.rng = rng = random.Random(seed)
        self.now = 0
        self.step = 0
        self.queue: list = []
        self.sequence = itertools.count()
        self.chaos = True
        self.store_fail = rng.choice([0.0, 0.05, 0.15])
        self.store_lands_but_fails = rng.choice([0.0, 0.05, 0.1])
        self.crash_rate = rng.choice([0.0, 0.002, 0.006, 0.015])  # per event
        self.message_loss = rng.choice([0.0, 0.03, 0.1])
        self.leader_outage = rng.choice([0.0, 0.002, 0.008])
        self.max_delay_ms = rng.choice([1, 5, 30])
        self.config = TxnConfig(
            transaction_partitions=TXN_PARTITIONS,
            offsets_partitions=3,
            max_timeout_ms=60_000,
            transactional_id_expiration_ms=10**9,
            store_retry_backoff_ms=20,
            store_retry_backoff_max_ms=200,
        )
        self.txn_log: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in range(TXN_PARTITIONS)}
        self.coordinator: TransactionCoordinator | None = None
        self.incarnation = 0
        self.coordinator_epoch = 0
        self.next_producer_id = itertools.count(1000)
        self.data = {key: DataPartition(key) for key in DATA_PARTITIONS}
        self.attempts: dict[int, Attempt] = {}
        self.attempt_ids = itertools.count(1)
        # transactional id -> (producer id, epoch) last handed out by InitProducerId.
        self.handed_out: dict[str, tuple[int, int]] = {}
        self.instances: list[Instance] = []
        # Every (key, value) record ever appended to __transaction_state.
        self.stored_values: set[tuple[bytes, bytes | None]] = set()
        self.checked_values: dict = {}
        # attempt id -> partition -> committed: the markers that ended its batches.
        self.resolutions: dict[int, dict] = {}
        self.stats = {"crashes": 0, "commits": 0, "aborts": 0, "fenced": 0, "timeouts": 0, "markers": 0, "refused_markers": 0}
        self._start_coordinator()
        for i, txn_id in enumerate(TRANSACTIONAL_IDS):
            self._new_instance(txn_id, delay_ms=i)
        self.schedule(200, ("abort_timed_out",))

    # ----------------------------------------------------------------- plumbing

    def fail(self, detail: str) -> None:
        raise Violation(
            f"seed={self.seed} step={self.step} t={self.now}ms: {detail}\n"
            f"replay: TXN_SIM_SEED={self.seed} pytest tests/sim/test_txn_coordinator_simulation.py"
        )

    def schedule(self, delay_ms: int, event: tuple) -> None:
        heapq.heappush(self.queue, (self.now + max(delay_ms, 0), next(self.sequence), event))

    def delay(self) -> int:
        return self.rng.randint(1, self.max_delay_ms)

    def lost(self) -> bool:
        return self.chaos and self.rng.random() < self.message_loss

    def trace(self, *parts) -> None:
        if TRACE:
            print(f"t={self.now} step={self.step}", *parts)

    # ----------------------------------------------------------------- the coordinator node

    def _start_coordinator(self) -> None:
        self.incarnation += 1
        self.coordinator_epoch += 1
        coordinator = TransactionCoordinator(self.config)
        for partition, records in self.txn_log.items():
            for key, value in records:
                coordinator.load_record(partition, key, value)
        self.coordinator = coordinator
        for partition in range(TXN_PARTITIONS):
            self.run_effects(coordinator.finish_loading(partition, self.coordinator_epoch, self.now))

    def _crash(self) -> None:
        self.trace("coordinator crash")
        self.stats["crashes"] += 1
        self.coordinator = None
        self.incarnation += 1
        self.schedule(self.rng.randint(20, 400), ("restart",))

    def run_effects(self, effects) -> None:
        incarnation = self.incarnation
        for effect in effects:
            if isinstance(effect, Store):
                self._store(effect, incarnation)
            elif isinstance(effect, SendMarkers):
                for key in effect.partitions:
                    self.schedule(self.delay(), ("marker_send", incarnation, effect, key, 0))
            elif isinstance(effect, AllocateProducerId):
                self.schedule(self.delay(), ("allocated", incarnation, effect.token))
            else:  # pragma: no cover
                self.fail(f"unknown effect {effect!r}")

    def _store(self, store: Store, incarnation: int) -> None:
        # The append happens now (the service appends synchronously); its outcome
        # is reported later, unless the coordinator is gone by then.
        roll = self.rng.random() if self.chaos else 1.0
        if roll < self.store_fail:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            self.txn_log[store.partition].extend(store.records)
            self.stored_values.update(store.records)
            lands_but_fails = roll < self.store_fail + self.store_lands_but_fails
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE if lands_but_fails else ErrorCode.NONE
        self.schedule(store.delay_ms + self.delay(), ("stored", incarnation, store.token, error))

    def _alive(self, incarnation: int) -> bool:
        return self.coordinator is not None and incarnation == self.incarnation

    # ----------------------------------------------------------------- requests from producers

    def request(self, instance: Instance, kind: str, *args) -> None:
        instance.request_seq += 1
        seq = instance.request_seq
        self.schedule(CLIENT_TIMEOUT_MS, ("client_timeout", instance, seq))
        if self.lost():
            return
        self.schedule(self.delay(), ("deliver", instance, seq, kind, args))

    def _deliver(self, instance: Instance, seq: int, kind: str, args) -> None:
        if self.coordinator is None:
            return  # the connection is refused; the client times out and retries
        incarnation = self.incarnation

        def reply(result) -> None:
            self._check_reply(instance, kind, args, result)
            if self._alive(incarnation) and not self.lost():
                self.schedule(self.delay(), ("answer", instance, seq, kind, result))

        c = self.coordinator
        if kind == "init":
            effects = c.init_producer_id(self.now, instance.transactional_id, TXN_TIMEOUT_MS, args[0], reply)
        elif kind == "add":
            effects = c.add_partitions(self.now, instance.transactional_id, args[0], args[1], args[2], reply)
        elif kind == "end":
            effects = c.end_txn(self.now, instance.transactional_id, args[0], args[1], args[2], reply)
        else:  # pragma: no cover
            self.fail(kind)
        self.run_effects(effects)

    def _check_reply(self, instance: Instance, kind: str, args, result) -> None:
        """Fencing: a request succeeds only with the epoch last handed out."""
        txn_id = instance.transactional_id
        if kind == "init":
            if result.error == ErrorCode.NONE:
                previous = self.handed_out.get(txn_id)
                if previous is not None and previous[0] == result.producer_id and result.producer_epoch <= previous[1]:
                    # Only a retry of the same bump may return the same epoch again.
                    if result.producer_epoch < previous[1]:
                        self.fail(f"{txn_id}: InitProducerId went back from epoch {previous[1]} to {result.producer_epoch}")
                self.handed_out[txn_id] = (result.producer_id, result.producer_epoch)
            return
        if result == ErrorCode.NONE:
            current = self.handed_out.get(txn_id)
            if current != (args[0], args[1]):
                self.fail(f"{txn_id}: {kind} by producer {args[0]} epoch {args[1]} succeeded, but {current} was handed out")
            meta = self.coordinator.metadata(txn_id) if self.coordinator else None
            if meta is not None and meta.producer_epoch != args[1] and kind == "add":
                self.fail(f"{txn_id}: add succeeded with epoch {args[1]}, the coordinator is at {meta.producer_epoch}")

    # ----------------------------------------------------------------- producers

    def _new_instance(self, transactional_id: str, delay_ms: int = 0) -> None:
        instance = Instance(f"{transactional_id}#{len(self.instances)}", transactional_id)
        self.instances.append(instance)
        self.schedule(delay_ms, ("act", instance))

    def _act(self, instance: Instance) -> None:
        """The producer's next step (after an answer, a timeout or a backoff)."""
        if instance.phase == "fenced" or instance.done:
            return
        if instance.phase == "init":
            expected = None
            if instance.producer_id >= 0 and self.rng.random() < 0.5:
                expected = (instance.producer_id, instance.epoch)  # KIP-360 recovery
            self.request(instance, "init", expected)
        elif instance.phase == "begin":
            if not self.chaos and self.now > CHAOS_MS + 500:
                instance.done = True  # the settle phase starts no new transactions
                return
            attempt = Attempt(next(self.attempt_ids), instance.transactional_id, instance.producer_id, instance.epoch)
            self.attempts[attempt.attempt_id] = attempt
            instance.attempt = attempt
            instance.partitions = tuple(self.rng.sample(DATA_PARTITIONS, self.rng.randint(1, 3)))
            instance.commit = self.rng.random() < 0.7
            instance.phase = "add"
            self._act(instance)
        elif instance.phase == "add":
            self.request(instance, "add", instance.producer_id, instance.epoch, instance.partitions)
        elif instance.phase == "write":
            self._write_data(instance)
        elif instance.phase == "end":
            self.request(instance, "end", instance.producer_id, instance.epoch, instance.commit)

    def _write_data(self, instance: Instance) -> None:
        """Produce one batch to each partition: each request is verified by the
        partition's leader when it arrives and appended once the coordinator has
        answered; the producer ends the transaction after every batch is done."""
        instance.phase = "writing"
        instance.pending_writes = len(instance.partitions)
        for key in instance.partitions:
            self.schedule(self.delay(), ("data_arrives", instance, instance.attempt, key))

    def _data_arrives(self, instance: Instance, attempt: Attempt, key) -> None:
        if self.coordinator is None:
            self._data_done(instance)  # the batch fails; the transaction goes on without it
            return
        verdict = self.coordinator.verify(attempt.transactional_id, attempt.producer_id, attempt.epoch, [key])[key]
        if verdict != ErrorCode.NONE:
            if verdict in FENCED and instance.phase != "fenced":
                instance.phase = "fenced"
                self.stats["fenced"] += 1
            self._data_done(instance)
            return
        if self.handed_out.get(attempt.transactional_id) != (attempt.producer_id, attempt.epoch):
            self.fail(f"{instance.name}: data of epoch {attempt.epoch} verified after a newer epoch was handed out")
        # Appended after the coordinator's answer comes back: a marker may land first.
        self.schedule(self.delay(), ("data_append", instance, attempt, key))

    def _data_append(self, instance: Instance, attempt: Attempt, key) -> None:
        state = self.data[key].producers.setdefault(attempt.producer_id, ProducerState())
        if attempt.epoch >= state.epoch:  # an older epoch is refused (INVALID_PRODUCER_EPOCH)
            state.epoch = attempt.epoch
            state.open_batches.append(attempt.attempt_id)
            attempt.written.add(key)
        self._data_done(instance)

    def _data_done(self, instance: Instance) -> None:
        instance.pending_writes -= 1
        if instance.pending_writes > 0 or instance.phase != "writing":
            return
        if self.chaos and self.rng.random() < 0.05:
            # The producer process dies with its transaction open: the coordinator's
            # timeout has to end it. A new process may come for the id, soon or late.
            instance.done = True
            self._new_instance(instance.transactional_id, delay_ms=self.rng.choice([5, 3 * TXN_TIMEOUT_MS]))
            return
        instance.phase = "end"
        self.schedule(self.rng.randint(0, 2 * TXN_TIMEOUT_MS // 3), ("act", instance))

    def _answer(self, instance: Instance, seq: int, kind: str, result) -> None:
        if seq != instance.request_seq or instance.phase == "fenced":
            return
        instance.request_seq += 1  # the timeout of this request no longer applies
        error = result.error if kind == "init" else result
        if error == ErrorCode.NONE:
            if kind == "init":
                instance.producer_id, instance.epoch = result.producer_id, result.producer_epoch
                instance.phase = "begin"
            elif kind == "add":
                instance.phase = "write"
            elif kind == "end":
                instance.attempt.told = instance.commit
                self.stats["commits" if instance.commit else "aborts"] += 1
                instance.phase = "begin"
                if self.chaos and self.rng.random() < 0.08:
                    # A new process takes the id over; the old one will be fenced.
                    self._new_instance(instance.transactional_id, delay_ms=self.delay())
            self.schedule(self.rng.randint(0, 30), ("act", instance))
        elif error in RETRIABLE:
            self.schedule(self.rng.randint(5, 50), ("act", instance))
        elif error in FENCED:
            instance.phase = "fenced"
            self.stats["fenced"] += 1
        else:
            self.fail(f"{instance.name}: unexpected {kind} answer {result}")

    def _client_timeout(self, instance: Instance, seq: int) -> None:
        if seq == instance.request_seq and instance.phase != "fenced":
            instance.request_seq += 1
            self._act(instance)  # retry the same step

    # ----------------------------------------------------------------- markers

    def _marker_send(self, incarnation: int, markers: SendMarkers, key, backoff_ms: int) -> None:
        """The coordinator's marker task for one partition: send (again) if still wanted."""
        if not self._alive(incarnation):
            return
        pending = self.coordinator.pending_markers(markers.transactional_id, markers.coordinator_epoch)
        if pending is None or key not in pending.partitions or (pending.producer_id, pending.producer_epoch) != (
            markers.producer_id, markers.producer_epoch,
        ):
            return
        if self.lost():
            self.schedule(CLIENT_TIMEOUT_MS, ("marker_send", incarnation, markers, key, backoff_ms))
            return
        self.schedule(self.delay(), ("marker_arrives", incarnation, markers, key, backoff_ms))

    def _marker_arrives(self, incarnation: int, markers: SendMarkers, key, backoff_ms: int) -> None:
        # Delivered even when the coordinator that sent it has crashed meanwhile.
        partition = self.data[key]
        state = partition.producers.setdefault(markers.producer_id, ProducerState())
        if self.chaos and self.now < partition.down_until_ms:
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif markers.coordinator_epoch < state.coordinator_epoch:
            error = ErrorCode.TRANSACTION_COORDINATOR_FENCED
        elif markers.producer_epoch < state.epoch:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        else:
            timed_out = self.chaos and self.rng.random() < 0.05
            if not timed_out or self.rng.random() < 0.5:
                self._apply_marker(partition, state, markers)
            error = ErrorCode.REQUEST_TIMED_OUT if timed_out else ErrorCode.NONE
        if error in (ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
            self.stats["refused_markers"] += 1
        if self.lost():
            self.schedule(CLIENT_TIMEOUT_MS, ("marker_send", incarnation, markers, key, min(backoff_ms * 2 + 10, 500)))
            return
        self.schedule(self.delay(), ("marker_answer", incarnation, markers, key, error, backoff_ms))

    def _apply_marker(self, partition: DataPartition, state: ProducerState, markers: SendMarkers) -> None:
        self.stats["markers"] += 1
        previous = [m for m in partition.markers if m[0] == markers.producer_id]
        if previous and previous[-1][1] > markers.producer_epoch:
            self.fail(f"{partition.key}: a marker of epoch {markers.producer_epoch} after one of epoch {previous[-1][1]}")
        partition.markers.append((markers.producer_id, markers.producer_epoch, markers.commit))
        state.epoch = markers.producer_epoch
        state.coordinator_epoch = markers.coordinator_epoch
        for attempt_id in state.open_batches:
            self._resolve(attempt_id, partition.key, markers.commit)
        state.open_batches = []

    def _marker_answer(self, incarnation: int, markers: SendMarkers, key, error: ErrorCode, backoff_ms: int) -> None:
        if not self._alive(incarnation):
            return
        if error == ErrorCode.NONE:
            self.run_effects(
                self.coordinator.markers_written(
                    self.now, markers.transactional_id, markers.coordinator_epoch, markers.producer_id, markers.producer_epoch, [key]
                )
            )
        elif error in (ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
            return  # this coordinator is stale: it stops, as Kafka's does
        else:
            next_backoff = min(backoff_ms * 2 + 10, 500)
            self.schedule(next_backoff, ("marker_send", incarnation, markers, key, next_backoff))

    # ----------------------------------------------------------------- invariants

    def _resolve(self, attempt_id: int, key, commit: bool) -> None:
        outcomes = self.resolutions.setdefault(attempt_id, {})
        if key in outcomes:
            self.fail(f"attempt {attempt_id}: {key} resolved twice")
        outcomes[key] = commit
        if len(set(outcomes.values())) > 1:
            self.fail(f"attempt {attempt_id} committed on some partitions and aborted on others: {outcomes}")
        told = self.attempts[attempt_id].told
        if told is not None and told != commit:
            self.fail(f"attempt {attempt_id}: the producer was told {'commit' if told else 'abort'}, {key} got the other")

    def check_state_is_stored(self) -> None:
        """The coordinator's state of an id is one that is in the log: no state
        change takes effect before its record is stored."""
        if self.coordinator is None:
            return
        for txn_id in TRANSACTIONAL_IDS:
            meta = self.coordinator.metadata(txn_id)
            if meta is None or not meta.stored:
                continue
            value = meta.value()
            if self.checked_values.get(txn_id) == value:
                continue  # unchanged since the last check
            if (key_bytes(txn_id), value_bytes(value)) not in self.stored_values:
                self.fail(f"{txn_id}: the coordinator is at {value}, which was never stored")
            self.checked_values[txn_id] = value

    def check_told(self) -> None:
        for attempt_id, outcomes in self.resolutions.items():
            told = self.attempts[attempt_id].told
            if told is not None and any(v != told for v in outcomes.values()):
                self.fail(f"attempt {attempt_id}: told {told}, resolved {outcomes}")

    # ----------------------------------------------------------------- the run

    def run(self) -> None:
        while self.queue and self.step < MAX_EVENTS:
            at, _, event = heapq.heappop(self.queue)
            self.now = at
            self.step += 1
            if self.chaos and self.now >= CHAOS_MS:
                self.chaos = False  # a crashed coordinator's restart is already scheduled
            if self.now > CHAOS_MS + SETTLE_MS:
                break
            self.trace(*event[:1], *[e for e in event[1:] if not isinstance(e, Instance)])
            self._handle(event)
            self.check_state_is_stored()
            if self.chaos and self.coordinator is not None and self.rng.random() < self.crash_rate:
                self._crash()
            if self.chaos and self.rng.random() < self.leader_outage:
                partition = self.data[self.rng.choice(DATA_PARTITIONS)]
                partition.down_until_ms = self.now + self.rng.randint(50, 800)
        self.check_told()
        self.check_settled()

    def _handle(self, event: tuple) -> None:
        kind = event[0]
        if kind == "act":
            self._act(event[1])
        elif kind == "deliver":
            self._deliver(*event[1:])
        elif kind == "answer":
            self._answer(*event[1:])
        elif kind == "client_timeout":
            self._client_timeout(*event[1:])
        elif kind == "stored":
            _, incarnation, token, error = event
            if self._alive(incarnation):
                self.run_effects(self.coordinator.store_done(self.now, token, error))
        elif kind == "allocated":
            _, incarnation, token = event
            if self._alive(incarnation):
                self.run_effects(self.coordinator.producer_id_allocated(self.now, token, next(self.next_producer_id)))
        elif kind == "data_arrives":
            self._data_arrives(*event[1:])
        elif kind == "data_append":
            self._data_append(*event[1:])
        elif kind == "marker_send":
            self._marker_send(*event[1:])
        elif kind == "marker_arrives":
            self._marker_arrives(*event[1:])
        elif kind == "marker_answer":
            self._marker_answer(*event[1:])
        elif kind == "restart":
            self._start_coordinator()
        elif kind == "abort_timed_out":
            if self.coordinator is not None:
                count = self.coordinator.timed_out_count(self.now)
                self.stats["timeouts"] += count
                self.run_effects(self.coordinator.abort_timed_out(self.now))
            self.schedule(200, ("abort_timed_out",))
        else:  # pragma: no cover
            self.fail(f"unknown event {event!r}")

    def check_settled(self) -> None:
        """Liveness: after the chaos everything written has its marker and no
        transaction is half completed."""
        if self.coordinator is None:
            self.fail("the coordinator did not come back")
        for key, partition in self.data.items():
            for producer_id, state in partition.producers.items():
                if state.open_batches:
                    self.fail(f"{key}: producer {producer_id} still has open batches {state.open_batches} after the settle phase")
        for instance in self.instances:
            meta = self.coordinator.metadata(instance.transactional_id)
            if meta is not None and meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self.fail(f"{instance.transactional_id} is still {meta.state.display_name}")
        for attempt in self.attempts.values():
            outcomes = self.resolutions.get(attempt.attempt_id, {})
            if set(outcomes) != attempt.written:
                self.fail(f"attempt {attempt.attempt_id} wrote to {sorted(attempt.written)}, resolved {sorted(outcomes)}")


def seeds() -> list[int]:
    if os.environ.get("TXN_SIM_SEED"):
        return [int(os.environ["TXN_SIM_SEED"])]
    first = int(os.environ.get("TXN_SIM_FIRST_SEED", "0"))
    return list(range(first, first + int(os.environ.get("TXN_SIM_SEEDS", str(DEFAULT_SEEDS)))))


@pytest.mark.parametrize("seed", seeds())
def test_txn_coordinator_simulation(seed):
    Simulation(seed).run()


def test_simulation_exercises_the_interesting_paths():
    """A simulation that never crashes, fences or retries proves little."""
    total: dict[str, int] = {}
    for seed in range(12):
        sim = Simulation(seed)
        sim.run()
        for name, value in sim.stats.items():
            total[name] = total.get(name, 0) + value
    assert total["crashes"] > 0, total
    assert total["commits"] > 50 and total["aborts"] > 10, total
    assert total["fenced"] > 0, total
    assert total["timeouts"] > 0, total
    assert total["refused_markers"] >= 0, total
    assert total["markers"] > 100, total
