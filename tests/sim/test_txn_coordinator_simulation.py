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
    Some ids run transactions version 2 (KIP-890 part 2): no AddPartitionsToTxn,
    the partition's leader adds the partition when the data arrives, and every
    EndTxn bumps the epoch (the producer goes on with the identity it is
    answered); some of them start near the end of the epoch range, so that
    ends move them to new producer ids, with crashes between prepare and
    complete.

Invariants, checked after every event:
  * the coordinator's state of each id is a value stored in the log (a state
    change never takes effect before its record is stored);
  * every transaction ends the same way on every partition it wrote to: never
    a commit marker on one partition and an abort on another;
  * a producer's markers on a partition never go back in epoch;
  * an epoch bump fences the older producer: once InitProducerId (or, version
    2, EndTxn) returned an epoch, no request of an older epoch of that
    producer id succeeds (but the retry of that very EndTxn, answered with
    the identity already handed out), and data of an older epoch is never
    verified or added;
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
from broker.coordinators.transactions.model import (
    EPOCH_EXHAUSTED,
    EPOCH_MAX,
    TRANSACTION_VERSION_2,
    AllocateProducerId,
    SendMarkers,
    Store,
    TxnConfig,
)
from protocol.errors import ErrorCode
from protocol.transaction_state import TransactionValue, TxnState, key_bytes, partition_for, value_bytes

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
    v2: bool = False  # transactions version 2: no add step, EndTxn bumps the epoch


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
        self.stats = {
            "crashes": 0, "commits": 0, "aborts": 0, "fenced": 0, "timeouts": 0, "markers": 0, "refused_markers": 0,
            "v2_ends": 0, "v2_rotations": 0, "v2_adds": 0, "v2_prepared_at_restart": 0,
        }
        # Transactions version 2 ids, some starting near the end of the epoch range
        # (as if they had run ~32760 transactions: their ends soon move them to a new id).
        self.v2_ids = {txn_id for txn_id in TRANSACTIONAL_IDS if rng.random() < 0.5}
        for i, txn_id in enumerate(sorted(self.v2_ids)):
            if rng.random() < 0.6:
                value = TransactionValue(
                    producer_id=900 + i, producer_epoch=EPOCH_EXHAUSTED - rng.randint(2, 5), timeout_ms=TXN_TIMEOUT_MS,
                    state=TxnState.EMPTY, partitions=frozenset(), last_update_ms=0, start_ms=-1,
                )
                record = (key_bytes(txn_id), value_bytes(value))
                self.txn_log[partition_for(txn_id, TXN_PARTITIONS)].append(record)
                self.stored_values.add(record)
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
        for txn_id in self.v2_ids:
            meta = coordinator._loading.get(partition_for(txn_id, TXN_PARTITIONS), {}).get(txn_id)
            if meta is not None and meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self.stats["v2_prepared_at_restart"] += 1  # the new coordinator completes it
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
        elif kind == "end2":
            effects = c.end_txn_v2(self.now, instance.transactional_id, args[0], args[1], args[2], reply)
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
        if kind == "end2":
            if result.error == ErrorCode.NONE:
                current = self.handed_out.get(txn_id)
                identity = (result.producer_id, result.producer_epoch)
                # A fresh end with the identity handed out, or the retry of the end
                # that handed out the identity it answers again.
                if current != (args[0], args[1]) and current != identity:
                    self.fail(f"{txn_id}: EndTxn v5 by {args[0]} epoch {args[1]} answered {identity}, but {current} was handed out")
                if identity[0] == args[0] and identity[1] != min(args[1] + 1, EPOCH_MAX):
                    self.fail(f"{txn_id}: EndTxn v5 at epoch {args[1]} answered epoch {identity[1]}")
                if identity[0] != args[0]:
                    self.stats["v2_rotations"] += 1
                self.handed_out[txn_id] = identity
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
        instance = Instance(f"{transactional_id}#{len(self.instances)}", transactional_id, v2=transactional_id in self.v2_ids)
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
            instance.phase = "write" if instance.v2 else "add"
            self._act(instance)
        elif instance.phase == "add":
            self.request(instance, "add", instance.producer_id, instance.epoch, instance.partitions)
        elif instance.phase == "write":
            self._write_data(instance)
        elif instance.phase == "end":
            self.request(instance, "end2" if instance.v2 else "end", instance.producer_id, instance.epoch, instance.commit)

    def _write_data(self, instance: Instance) -> None:
        """Produce one batch to each partition: each request is verified by the
        partition's leader when it arrives and appended once the coordinator has
        answered; the producer ends the transaction after every batch is done."""
        instance.phase = "writing"
        instance.pending_writes = len(instance.partitions)
        for key in instance.partitions:
            self.schedule(self.delay(), ("data_arrives", instance, instance.attempt, key))

    def _data_arrives(self, instance: Instance, attempt: Attempt, key, tries: int = 0) -> None:
        if self.coordinator is None:
            self._data_done(instance)  # the batch fails; the transaction goes on without it
            return
        if instance.v2:
            self._data_add(instance, attempt, key, tries)
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

    def _data_add(self, instance: Instance, attempt: Attempt, key, tries: int) -> None:
        """Version 2: the leader adds the partition with the coordinator (its answer
        may be lost or never come: the produce request then times out)."""
        incarnation = self.incarnation
        write = {"done": False}  # answered, or given up by the client's timeout

        def reply(error) -> None:
            if error == ErrorCode.NONE:
                self.stats["v2_adds"] += 1
                if self.handed_out.get(attempt.transactional_id) != (attempt.producer_id, attempt.epoch):
                    self.fail(f"{instance.name}: partition added at epoch {attempt.epoch} after a newer identity was handed out")
            if self._alive(incarnation) and not self.lost():
                self.schedule(self.delay(), ("data_added", instance, attempt, key, tries, error, write))

        self.schedule(CLIENT_TIMEOUT_MS, ("data_timeout", instance, write))
        self.run_effects(
            self.coordinator.add_partitions(
                self.now, attempt.transactional_id, attempt.producer_id, attempt.epoch, [key], reply, TRANSACTION_VERSION_2
            )
        )

    def _data_added(self, instance: Instance, attempt: Attempt, key, tries: int, error: ErrorCode, write: dict) -> None:
        if write["done"]:
            return
        write["done"] = True
        if error == ErrorCode.NONE:
            self.schedule(self.delay(), ("data_append", instance, attempt, key))
        elif error in RETRIABLE and tries < 20:
            # NOT_ENOUGH_REPLICAS to the client, which sends the batch again.
            self.schedule(self.rng.randint(5, 50), ("data_arrives", instance, attempt, key, tries + 1))
        else:
            if error in FENCED:
                instance.phase = "fenced"
                self.stats["fenced"] += 1
            self._data_done(instance)

    def _data_timeout(self, instance: Instance, write: dict) -> None:
        # The answer never came (lost or the coordinator crashed): the batch fails.
        if not write["done"]:
            write["done"] = True
            self._data_done(instance)

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
        if instance.v2 and instance.attempt.written != set(instance.partitions):
            # A failed send makes a version 2 transaction abortable (Kafka's
            # clients then only abort): nothing may have been added at all, and
            # a commit of nothing is INVALID_TXN_STATE.
            instance.commit = False
        instance.phase = "end"
        self.schedule(self.rng.randint(0, 2 * TXN_TIMEOUT_MS // 3), ("act", instance))

    def _answer(self, instance: Instance, seq: int, kind: str, result) -> None:
        if seq != instance.request_seq or instance.phase == "fenced":
            return
        instance.request_seq += 1  # the timeout of this request no longer applies
        error = result.error if kind in ("init", "end2") else result
        if error == ErrorCode.NONE:
            if kind == "end2":
                instance.producer_id, instance.epoch = result.producer_id, result.producer_epoch
                self.stats["v2_ends"] += 1
                kind = "end"
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
        elif error in FENCED or (kind == "end2" and error == ErrorCode.INVALID_TXN_STATE and instance.commit):
            # Version 2: a commit after the coordinator aborted the transaction
            # (its timeout) is the retry of an abort in the other direction:
            # INVALID_TXN_STATE, fatal to the producer as Kafka's clients take it.
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
        elif kind == "data_added":
            self._data_added(*event[1:])
        elif kind == "data_timeout":
            self._data_timeout(*event[1:])
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
    assert total["v2_ends"] > 50 and total["v2_adds"] > 50 and total["v2_rotations"] > 0, total
    assert total["v2_prepared_at_restart"] > 0, total
