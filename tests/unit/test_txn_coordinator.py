"""The transaction coordinator as a pure state machine: explicit clock, effects
carried out (or held, or failed) by a small in-memory IO side.

Every transition of Kafka's state machine, then every out-of-order call of
the issue's "Bad input": each gets Kafka's error code and changes no state
(the id's metadata, the stored records and the effects are compared before
and after).

Longer than ~700 lines on purpose: one case per transition and per error of
one state machine, next to the small IO model they all share.
"""

from __future__ import annotations

import copy
import itertools

import pytest

from broker.coordinators.transactions.coordinator import TransactionCoordinator
from broker.coordinators.transactions.model import (
    AllocateProducerId,
    InitResult,
    SendMarkers,
    Store,
    TxnConfig,
)
from protocol.consumer_offsets import partition_for_group
from protocol.errors import ErrorCode
from protocol.transaction_state import TxnState, decode_key, decode_value, key_bytes, partition_for, value_bytes

PARTITIONS = 4
TIMEOUT_MS = 60_000
T0 = ("topic", 0)
T1 = ("topic", 1)


class IO:
    """Carries out the coordinator's effects: stores go to an in-memory log per
    partition (or fail, or wait), allocations count up, markers are collected
    (and written at once when ``auto_markers``)."""

    def __init__(self, coordinator: TransactionCoordinator):
        self.c = coordinator
        self.now_ms = 1_000_000
        self.log: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in range(PARTITIONS)}
        self.fail_stores_with: ErrorCode | None = None
        self.hold_stores = False
        self.held: list[Store] = []
        self.delayed: list[Store] = []
        self.auto_markers = False
        self.markers: list[SendMarkers] = []
        self.allocations: list[AllocateProducerId] = []
        self.hold_allocations = False
        self.producer_ids = itertools.count(5000)

    def run(self, effects):
        for effect in effects:
            if isinstance(effect, Store):
                if effect.delay_ms:
                    self.delayed.append(effect)
                elif self.hold_stores:
                    self.held.append(effect)
                else:
                    self.finish_store(effect)
            elif isinstance(effect, SendMarkers):
                self.markers.append(effect)
                if self.auto_markers:
                    self.write_markers(effect)
            elif isinstance(effect, AllocateProducerId):
                self.allocations.append(effect)
                if not self.hold_allocations:
                    self.allocate(effect)
            else:  # pragma: no cover
                raise AssertionError(effect)

    def finish_store(self, store: Store, error: ErrorCode | None = None):
        error = error if error is not None else (self.fail_stores_with or ErrorCode.NONE)
        if error == ErrorCode.NONE:
            self.log[store.partition].extend(store.records)
        self.run(self.c.store_done(self.now_ms, store.token, error))

    def release_held(self, error: ErrorCode | None = None):
        held, self.held = self.held, []
        for store in held:
            self.finish_store(store, error)

    def allocate(self, allocation: AllocateProducerId, error: ErrorCode = ErrorCode.NONE):
        producer_id = None if error != ErrorCode.NONE else next(self.producer_ids)
        self.run(self.c.producer_id_allocated(self.now_ms, allocation.token, producer_id, error))

    def write_markers(self, markers: SendMarkers, partitions=None):
        self.run(
            self.c.markers_written(
                self.now_ms,
                markers.transactional_id,
                markers.coordinator_epoch,
                markers.producer_id,
                markers.producer_epoch,
                markers.partitions if partitions is None else partitions,
            )
        )

    # Requests, answered through a reply that must be called exactly once.

    def _call(self, method, *args):
        answers = []

        def reply(result):
            answers.append(result)
            assert len(answers) == 1, f"answered twice: {answers}"

        self.run(method(self.now_ms, *args, reply))
        return answers

    def init(self, txn_id, timeout_ms=TIMEOUT_MS, expected=None) -> InitResult | None:
        answers = self._call(self.c.init_producer_id, txn_id, timeout_ms, expected)
        return answers[0] if answers else None

    def add(self, txn_id, producer_id, epoch, partitions) -> ErrorCode | None:
        answers = self._call(self.c.add_partitions, txn_id, producer_id, epoch, partitions)
        return answers[0] if answers else None

    def add_offsets(self, txn_id, producer_id, epoch, group) -> ErrorCode | None:
        answers = self._call(self.c.add_offsets, txn_id, producer_id, epoch, group)
        return answers[0] if answers else None

    def end(self, txn_id, producer_id, epoch, commit) -> ErrorCode | None:
        answers = self._call(self.c.end_txn, txn_id, producer_id, epoch, commit)
        return answers[0] if answers else None

    def state(self, txn_id):
        meta = self.c.metadata(txn_id)
        return None if meta is None else meta.state


def make(**config) -> IO:
    config.setdefault("transaction_partitions", PARTITIONS)
    config.setdefault("offsets_partitions", 6)
    config.setdefault("max_timeout_ms", 900_000)
    config.setdefault("transactional_id_expiration_ms", 3_600_000)
    coordinator = TransactionCoordinator(TxnConfig(**config))
    io = IO(coordinator)
    for partition in range(PARTITIONS):
        io.run(coordinator.finish_loading(partition, 7, io.now_ms))
    return io


def ready(io: IO, txn_id="txn") -> tuple[int, int]:
    result = io.init(txn_id)
    assert result.error == ErrorCode.NONE
    return result.producer_id, result.producer_epoch


def ongoing(io: IO, txn_id="txn", partitions=(T0, T1)) -> tuple[int, int]:
    producer_id, epoch = ready(io, txn_id)
    assert io.add(txn_id, producer_id, epoch, partitions) == ErrorCode.NONE
    return producer_id, epoch


def snapshot(io: IO, txn_id="txn"):
    """Everything a refused request must leave as it was."""
    meta = io.c.metadata(txn_id)
    fields = None
    if meta is not None:
        fields = {k: v for k, v in vars(meta).items() if k != "pending"}
        fields["pending"] = None if meta.pending is None else (meta.pending.kind, meta.pending.target)
    return copy.deepcopy((fields, io.log, len(io.markers), len(io.held), len(io.allocations)))


def stored_values(io: IO, txn_id="txn"):
    partition = partition_for(txn_id, PARTITIONS)
    return [decode_value(v) for k, v in io.log[partition] if decode_key(k) == txn_id]


# --------------------------------------------------------------------------- InitProducerId


def test_a_new_transactional_id_gets_a_new_producer_id_at_epoch_0():
    io = make()
    result = io.init("txn")
    assert result == InitResult(ErrorCode.NONE, 5000, 0)
    [value] = stored_values(io)
    assert (value.producer_id, value.producer_epoch, value.state, value.timeout_ms) == (5000, 0, TxnState.EMPTY, TIMEOUT_MS)
    assert (value.partitions, value.start_ms, value.last_update_ms) == (frozenset(), -1, io.now_ms)
    # Stored as version 0, as Kafka writes it below transaction.version 2.
    [(_, raw)] = io.log[partition_for("txn", PARTITIONS)]
    assert raw[:2] == b"\x00\x00"


def test_init_again_bumps_the_epoch_and_takes_the_new_timeout():
    io = make()
    ready(io)
    result = io.init("txn", timeout_ms=5000)
    assert result == InitResult(ErrorCode.NONE, 5000, 1)
    assert io.c.metadata("txn").timeout_ms == 5000
    assert len(io.allocations) == 1  # the id is kept


def test_init_with_the_current_producer_id_and_epoch_bumps_it_kip_360():
    io = make()
    producer_id, epoch = ready(io)
    assert io.init("txn", expected=(producer_id, epoch)) == InitResult(ErrorCode.NONE, producer_id, epoch + 1)
    # A retry of that bump (its answer lost) gets the same epoch again, with no new record.
    records = len(io.log[partition_for("txn", PARTITIONS)])
    assert io.init("txn", expected=(producer_id, epoch)) == InitResult(ErrorCode.NONE, producer_id, epoch + 1)
    assert len(io.log[partition_for("txn", PARTITIONS)]) == records + 1  # stored again, same epoch
    assert stored_values(io)[-1].producer_epoch == epoch + 1


def test_init_with_a_stale_or_unknown_producer_is_fenced_and_changes_nothing():
    io = make()
    producer_id, epoch = ready(io)
    io.init("txn")  # epoch 1; the last epoch is forgotten (no expected epoch)
    before = snapshot(io)
    assert io.init("txn", expected=(producer_id, epoch)).error == ErrorCode.PRODUCER_FENCED
    assert io.init("txn", expected=(producer_id + 99, 1)).error == ErrorCode.PRODUCER_FENCED
    assert snapshot(io) == before


def test_init_with_an_id_and_epoch_for_an_unknown_transactional_id_starts_afresh():
    io = make()
    result = io.init("other", expected=(77, 3))
    assert result == InitResult(ErrorCode.NONE, 5000, 0)


def test_an_exhausted_epoch_moves_to_a_new_producer_id():
    io = make()
    producer_id, _ = ready(io)
    meta = io.c.metadata("txn")
    meta.producer_epoch = 32766
    result = io.init("txn", expected=(producer_id, 32766))
    assert result == InitResult(ErrorCode.NONE, 5001, 0)
    meta = io.c.metadata("txn")
    assert (meta.previous_producer_id, meta.last_producer_epoch) == (producer_id, 32766)
    # A retry of the rotation from the old id (its answer lost) is not fenced.
    assert io.init("txn", expected=(producer_id, 32766)).error == ErrorCode.NONE


@pytest.mark.parametrize("timeout_ms", [0, -1, 900_001])
def test_invalid_transaction_timeout(timeout_ms):
    io = make()
    before = snapshot(io)
    assert io.init("txn", timeout_ms=timeout_ms).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert snapshot(io) == before and io.c.metadata("txn") is None


def test_empty_transactional_id_is_an_invalid_request():
    io = make()
    assert io.init("").error == ErrorCode.INVALID_REQUEST
    assert io.add("", 1, 0, [T0]) == ErrorCode.INVALID_REQUEST
    assert io.end("", 1, 0, True) == ErrorCode.INVALID_REQUEST
    assert io.c.describe("")[0] == ErrorCode.INVALID_REQUEST


def test_not_coordinator_and_load_in_progress():
    io = make()
    partition = partition_for("txn", PARTITIONS)
    io.c.unload_partition(partition)
    assert io.init("txn").error == ErrorCode.NOT_COORDINATOR
    assert io.add("txn", 1, 0, [T0]) == ErrorCode.NOT_COORDINATOR
    assert io.c.verify("txn", 1, 0, [T0]) == {T0: ErrorCode.NOT_COORDINATOR}
    io.c.load_record(partition, key_bytes("unrelated"), None)
    assert io.init("txn").error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert io.end("txn", 1, 0, True) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert io.c.describe("txn")[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert io.c.list_transactions(io.now_ms)[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    io.run(io.c.finish_loading(partition, 8, io.now_ms))
    assert io.init("txn").error == ErrorCode.NONE


def test_concurrent_init_while_the_first_is_being_stored():
    io = make()
    io.hold_stores = True
    assert io.init("txn") is None  # waits for its record
    assert io.init("txn").error == ErrorCode.CONCURRENT_TRANSACTIONS
    io.release_held()
    assert io.state("txn") == TxnState.EMPTY


def test_a_failed_store_of_a_new_id_forgets_it():
    io = make()
    io.fail_stores_with = ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert io.init("txn").error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert io.c.metadata("txn") is None
    assert io.c.describe("txn")[0] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    io.fail_stores_with = None
    assert io.init("txn").error == ErrorCode.NONE


def test_a_failed_epoch_bump_changes_nothing():
    io = make()
    ready(io)
    before = snapshot(io)
    io.fail_stores_with = ErrorCode.NOT_COORDINATOR
    assert io.init("txn").error == ErrorCode.NOT_COORDINATOR
    assert snapshot(io)[0] == before[0]


def test_allocation_failure_is_the_answer():
    io = make()
    io.hold_allocations = True
    answers = []
    io.run(io.c.init_producer_id(io.now_ms, "txn", TIMEOUT_MS, None, answers.append))
    assert answers == []  # waits for a producer id
    [allocation] = io.allocations
    io.allocate(allocation, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert answers == [InitResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)]
    assert io.c.metadata("txn") is None


def test_init_on_an_ongoing_transaction_fences_the_producer_and_aborts():
    io = make()
    producer_id, epoch = ongoing(io)
    assert io.init("txn") == InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
    [markers] = io.markers
    assert (markers.producer_id, markers.producer_epoch, markers.commit) == (producer_id, epoch + 1, False)
    assert markers.partitions == (T0, T1)
    assert io.state("txn") == TxnState.PREPARE_ABORT
    # The old producer can do nothing any more.
    assert io.add("txn", producer_id, epoch, [T0]) == ErrorCode.PRODUCER_FENCED
    assert io.end("txn", producer_id, epoch, True) == ErrorCode.PRODUCER_FENCED
    # Until the markers are written, the new producer waits.
    assert io.init("txn").error == ErrorCode.CONCURRENT_TRANSACTIONS
    io.write_markers(markers)
    assert io.state("txn") == TxnState.COMPLETE_ABORT
    assert io.init("txn") == InitResult(ErrorCode.NONE, producer_id, epoch + 2)


# --------------------------------------------------------------------------- AddPartitionsToTxn / AddOffsetsToTxn


def test_add_partitions_starts_the_transaction():
    io = make()
    producer_id, epoch = ready(io)
    io.now_ms += 10
    assert io.add("txn", producer_id, epoch, [T0]) == ErrorCode.NONE
    meta = io.c.metadata("txn")
    assert (meta.state, meta.partitions, meta.start_ms) == (TxnState.ONGOING, frozenset({T0}), io.now_ms)
    io.now_ms += 10
    assert io.add("txn", producer_id, epoch, [T1]) == ErrorCode.NONE
    meta = io.c.metadata("txn")
    assert (meta.partitions, meta.start_ms, meta.last_update_ms) == (frozenset({T0, T1}), io.now_ms - 10, io.now_ms)
    [_, first, second] = stored_values(io)
    assert (first.state, second.partitions) == (TxnState.ONGOING, frozenset({T0, T1}))


def test_adding_partitions_already_in_the_transaction_stores_nothing():
    io = make()
    producer_id, epoch = ongoing(io)
    before = snapshot(io)
    assert io.add("txn", producer_id, epoch, [T1]) == ErrorCode.NONE
    assert snapshot(io) == before


def test_add_offsets_adds_the_groups_offsets_partition():
    io = make()
    producer_id, epoch = ready(io)
    assert io.add_offsets("txn", producer_id, epoch, "my-group") == ErrorCode.NONE
    assert io.c.metadata("txn").partitions == frozenset({("__consumer_offsets", partition_for_group("my-group", 6))})


def test_a_failed_add_changes_nothing():
    io = make()
    producer_id, epoch = ready(io)
    before = snapshot(io)
    io.fail_stores_with = ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert io.add("txn", producer_id, epoch, [T0]) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert snapshot(io)[:2] == before[:2]


# --------------------------------------------------------------------------- EndTxn and markers


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_prepares_writes_markers_and_completes(commit):
    io = make()
    producer_id, epoch = ongoing(io)
    assert io.end("txn", producer_id, epoch, commit) == ErrorCode.NONE
    assert io.state("txn") == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    [markers] = io.markers
    assert markers == SendMarkers("txn", partition_for("txn", PARTITIONS), 7, producer_id, epoch, commit, (T0, T1))
    assert io.c.pending_markers("txn", 7) == markers
    io.write_markers(markers, [T1])
    assert io.state("txn") == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    assert io.c.pending_markers("txn", 7).partitions == (T0,)
    io.write_markers(markers, [T0])
    assert io.state("txn") == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    assert io.c.pending_markers("txn", 7) is None
    states = [v.state for v in stored_values(io)]
    done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    prepared = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    assert states == [TxnState.EMPTY, TxnState.ONGOING, prepared, done]
    assert stored_values(io)[-1].partitions == frozenset()
    # A retry after completion: NONE the same way, INVALID_TXN_STATE the other.
    before = snapshot(io)
    assert io.end("txn", producer_id, epoch, commit) == ErrorCode.NONE
    assert io.end("txn", producer_id, epoch, not commit) == ErrorCode.INVALID_TXN_STATE
    assert snapshot(io) == before
    # The next transaction uses the same epoch (transactions version 1).
    assert io.add("txn", producer_id, epoch, [T0]) == ErrorCode.NONE


def test_end_txn_while_markers_are_written_is_concurrent():
    io = make()
    producer_id, epoch = ongoing(io)
    io.end("txn", producer_id, epoch, True)
    before = snapshot(io)
    assert io.end("txn", producer_id, epoch, True) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert io.end("txn", producer_id, epoch, False) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert io.add("txn", producer_id, epoch, [T0]) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert io.init("txn").error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert snapshot(io) == before


def test_an_empty_transaction_completes_without_markers():
    io = make()
    producer_id, epoch = ready(io)
    assert io.add("txn", producer_id, epoch, []) == ErrorCode.NONE
    assert io.end("txn", producer_id, epoch, True) == ErrorCode.NONE
    assert io.markers == [] and io.state("txn") == TxnState.COMPLETE_COMMIT


def test_a_failed_prepare_leaves_the_transaction_ongoing():
    io = make()
    producer_id, epoch = ongoing(io)
    io.fail_stores_with = ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert io.end("txn", producer_id, epoch, True) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert io.state("txn") == TxnState.ONGOING and io.markers == []
    io.fail_stores_with = None
    assert io.end("txn", producer_id, epoch, False) == ErrorCode.NONE


def test_a_failed_completion_is_retried_after_a_backoff():
    io = make()
    producer_id, epoch = ongoing(io)
    io.end("txn", producer_id, epoch, True)
    io.fail_stores_with = ErrorCode.COORDINATOR_NOT_AVAILABLE
    io.write_markers(io.markers[0])
    assert io.state("txn") == TxnState.PREPARE_COMMIT
    delays = []
    for _ in range(3):
        store = io.delayed.pop()
        delays.append(store.delay_ms)
        io.finish_store(store)
    assert delays == [100, 200, 400]
    io.fail_stores_with = None
    io.finish_store(io.delayed.pop())
    assert io.state("txn") == TxnState.COMPLETE_COMMIT


def test_markers_of_another_epoch_or_coordinator_epoch_are_ignored():
    io = make()
    producer_id, epoch = ongoing(io)
    io.end("txn", producer_id, epoch, True)
    before = snapshot(io)
    io.run(io.c.markers_written(io.now_ms, "txn", 6, producer_id, epoch, [T0, T1]))
    io.run(io.c.markers_written(io.now_ms, "txn", 7, producer_id, epoch + 1, [T0, T1]))
    assert io.c.pending_markers("txn", 6) is None
    assert snapshot(io) == before


# --------------------------------------------------------------------------- bad input: errors that change nothing


def bad_inputs(io: IO, producer_id: int, epoch: int, init_error=ErrorCode.PRODUCER_FENCED):
    """(name, call, expected error) for out-of-order calls with the id in its current state."""
    return [
        ("end without init", lambda: io.end("never-initialised", 1, 0, True), ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ("add without init", lambda: io.add("never-initialised", 1, 0, [T0]), ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ("add offsets without init", lambda: io.add_offsets("never-initialised", 1, 0, "g"), ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ("end with another producer id", lambda: io.end("txn", producer_id + 1, epoch, True), ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ("add with another producer id", lambda: io.add("txn", producer_id + 1, epoch, [T0]), ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        ("add with a stale epoch", lambda: io.add("txn", producer_id, epoch - 1, [T0]), ErrorCode.PRODUCER_FENCED),
        ("add offsets with a stale epoch", lambda: io.add_offsets("txn", producer_id, epoch - 1, "g"), ErrorCode.PRODUCER_FENCED),
        ("end with a stale epoch", lambda: io.end("txn", producer_id, epoch - 1, True), ErrorCode.PRODUCER_FENCED),
        ("end with a future epoch", lambda: io.end("txn", producer_id, epoch + 1, True), ErrorCode.PRODUCER_FENCED),
        # (While a transition is pending, InitProducerId answers that first, as Kafka does.)
        ("init with another producer id", lambda: io.init("txn", expected=(producer_id + 1, epoch)).error, init_error),
    ]


def test_bad_input_on_an_empty_transaction_changes_nothing():
    io = make()
    ready(io)
    producer_id, epoch = ready(io)  # epoch 1, so that epoch - 1 exists
    cases = bad_inputs(io, producer_id, epoch) + [
        ("init with a stale epoch", lambda: io.init("txn", expected=(producer_id, epoch - 1)).error, ErrorCode.PRODUCER_FENCED),
        ("end on Empty", lambda: io.end("txn", producer_id, epoch, True), ErrorCode.INVALID_TXN_STATE),
        ("abort on Empty", lambda: io.end("txn", producer_id, epoch, False), ErrorCode.INVALID_TXN_STATE),
    ]
    for name, call, expected in cases:
        before = snapshot(io)
        assert call() == expected, name
        assert snapshot(io) == before, name
        assert io.c.metadata("never-initialised") is None, name


def test_bad_input_on_an_ongoing_transaction_changes_nothing():
    io = make()
    ready(io)
    producer_id, epoch = ongoing(io)
    for name, call, expected in bad_inputs(io, producer_id, epoch):
        before = snapshot(io)
        assert call() == expected, name
        assert snapshot(io) == before, name


def test_bad_input_while_completing_changes_nothing():
    io = make()
    ready(io)
    producer_id, epoch = ongoing(io)
    io.end("txn", producer_id, epoch, False)
    cases = bad_inputs(io, producer_id, epoch, init_error=ErrorCode.CONCURRENT_TRANSACTIONS) + [
        ("init with a stale epoch", lambda: io.init("txn", expected=(producer_id, epoch - 1)).error, ErrorCode.CONCURRENT_TRANSACTIONS),
    ]
    for name, call, expected in cases:
        before = snapshot(io)
        assert call() == expected, name
        assert snapshot(io) == before, name


def test_init_with_a_stale_epoch_of_the_current_id_fences_an_ongoing_transaction_as_kafka_does():
    # Kafka checks only the producer id before it fences an ongoing transaction;
    # the caller's retry then finds its epoch stale.
    io = make()
    ready(io)
    producer_id, epoch = ongoing(io)
    assert io.init("txn", expected=(producer_id, epoch - 1)).error == ErrorCode.CONCURRENT_TRANSACTIONS
    io.write_markers(io.markers[0])
    assert io.state("txn") == TxnState.COMPLETE_ABORT
    assert io.init("txn", expected=(producer_id, epoch - 1)).error == ErrorCode.PRODUCER_FENCED


# --------------------------------------------------------------------------- verification (KIP-890 part 1)


def test_verify_partitions():
    io = make()
    producer_id, epoch = ready(io)
    assert io.c.verify("txn", producer_id, epoch, [T0]) == {T0: ErrorCode.INVALID_TXN_STATE}
    io.add("txn", producer_id, epoch, [T0])
    assert io.c.verify("txn", producer_id, epoch, [T0, T1]) == {T0: ErrorCode.NONE, T1: ErrorCode.INVALID_TXN_STATE}
    assert io.c.verify("txn", producer_id, epoch + 1, [T0]) == {T0: ErrorCode.PRODUCER_FENCED}
    assert io.c.verify("txn", producer_id + 1, epoch, [T0]) == {T0: ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    assert io.c.verify("nobody", producer_id, epoch, [T0]) == {T0: ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    io.end("txn", producer_id, epoch, True)
    assert io.c.verify("txn", producer_id, epoch, [T0]) == {T0: ErrorCode.CONCURRENT_TRANSACTIONS}
    io.write_markers(io.markers[0])
    assert io.c.verify("txn", producer_id, epoch, [T0]) == {T0: ErrorCode.INVALID_TXN_STATE}


# --------------------------------------------------------------------------- timeouts and expiration


def test_a_timed_out_transaction_is_aborted_with_an_epoch_bump():
    io = make()
    producer_id, epoch = ongoing(io)
    io.now_ms += TIMEOUT_MS
    assert io.c.abort_timed_out(io.now_ms) == []  # not older than its timeout yet
    io.now_ms += 1
    io.auto_markers = True
    io.run(io.c.abort_timed_out(io.now_ms))
    [markers] = io.markers
    assert (markers.producer_epoch, markers.commit) == (epoch + 1, False)
    assert io.state("txn") == TxnState.COMPLETE_ABORT
    assert io.end("txn", producer_id, epoch, True) == ErrorCode.PRODUCER_FENCED
    assert io.add("txn", producer_id, epoch, [T0]) == ErrorCode.PRODUCER_FENCED
    # The fenced producer cannot bump its way back in, a new one can.
    assert io.init("txn", expected=(producer_id, epoch)).error == ErrorCode.PRODUCER_FENCED
    assert io.init("txn") == InitResult(ErrorCode.NONE, producer_id, epoch + 2)


def test_transactional_ids_expire_when_idle_and_complete():
    io = make(transactional_id_expiration_ms=10_000)
    ready(io, "idle")
    ongoing(io, "busy")
    io.now_ms += 10_000
    io.hold_stores = True
    io.run(io.c.expire_transactional_ids(io.now_ms))
    [store] = io.held
    assert [(decode_key(k), v) for k, v in store.records] == [("idle", None)]
    # While the tombstone is being stored the id is busy.
    assert io.init("idle").error == ErrorCode.CONCURRENT_TRANSACTIONS
    io.release_held()
    assert io.c.metadata("idle") is None and io.state("busy") == TxnState.ONGOING
    assert io.c.describe("idle")[0] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_a_failed_tombstone_keeps_the_id():
    io = make(transactional_id_expiration_ms=10_000)
    ready(io, "idle")
    io.now_ms += 10_000
    io.fail_stores_with = ErrorCode.COORDINATOR_NOT_AVAILABLE
    io.run(io.c.expire_transactional_ids(io.now_ms))
    assert io.state("idle") == TxnState.EMPTY and io.c.metadata("idle").pending is None


# --------------------------------------------------------------------------- describe and list


def test_describe_and_list():
    io = make()
    producer_id, epoch = ongoing(io, "a")
    ready(io, "b")
    error, description = io.c.describe("a")
    assert error == ErrorCode.NONE
    assert (description.state, description.producer_id, description.producer_epoch) == (TxnState.ONGOING, producer_id, epoch)
    assert (description.partitions, description.timeout_ms, description.start_ms) == ((T0, T1), TIMEOUT_MS, io.now_ms)
    assert io.c.describe("missing")[0] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    def listed(*args, **kwargs):
        error, unknown, listings = io.c.list_transactions(io.now_ms, *args, **kwargs)
        assert error == ErrorCode.NONE
        return unknown, sorted((x.transactional_id, x.state.display_name) for x in listings)

    assert listed() == ([], [("a", "Ongoing"), ("b", "Empty")])
    assert listed(["Ongoing", "Bogus"]) == (["Bogus"], [("a", "Ongoing")])
    assert listed(["Bogus"]) == (["Bogus"], [])
    assert listed([], [producer_id]) == ([], [("a", "Ongoing")])
    # Duration: only transactions running longer than it (Empty has no start: always listed, as in Kafka).
    io.now_ms += 5000
    assert listed(duration_filter_ms=5000) == ([], [("b", "Empty")])
    assert listed(duration_filter_ms=4999) == ([], [("a", "Ongoing"), ("b", "Empty")])


# --------------------------------------------------------------------------- loading and unloading


def reload(io: IO, epoch: int = 8) -> IO:
    """A new coordinator that replays the stored records (a restart or a new leader)."""
    fresh = IO(TransactionCoordinator(io.c.config))
    fresh.now_ms = io.now_ms
    fresh.log = io.log
    for partition, records in io.log.items():
        for key, value in records:
            fresh.c.load_record(partition, key, value)
    for partition in range(PARTITIONS):
        fresh.run(fresh.c.finish_loading(partition, epoch, fresh.now_ms))
    return fresh


def test_reload_rebuilds_every_state_from_the_records():
    io = make()
    ready(io, "empty")
    ongoing(io, "ongoing")
    pid, epoch = ongoing(io, "committed")
    io.auto_markers = True
    io.end("committed", pid, epoch, True)
    fresh = reload(io)
    for txn_id in ("empty", "ongoing", "committed"):
        old, new = io.c.metadata(txn_id), fresh.c.metadata(txn_id)
        assert old.value() == new.value(), txn_id


def test_reload_resumes_markers_of_prepared_transactions():
    io = make()
    pid, epoch = ongoing(io)
    io.end("txn", pid, epoch, True)  # markers not written
    fresh = reload(io, epoch=9)
    [markers] = fresh.markers
    assert (markers.commit, markers.coordinator_epoch, markers.partitions) == (True, 9, (T0, T1))
    fresh.write_markers(markers)
    assert fresh.state("txn") == TxnState.COMPLETE_COMMIT


def test_reload_of_a_prepare_epoch_fence_record_resumes_the_abort():
    io = make()
    pid, epoch = ongoing(io)
    meta = io.c.metadata("txn")
    partition = partition_for("txn", PARTITIONS)
    fence = meta.value().__class__(**{**vars(meta.value()), "state": TxnState.PREPARE_EPOCH_FENCE})
    io.log[partition].append((key_bytes("txn"), value_bytes(fence)))
    fresh = reload(io)
    [markers] = fresh.markers
    assert (markers.commit, markers.producer_epoch) == (False, epoch + 1)


def test_tombstones_remove_ids_on_reload():
    io = make()
    ready(io)
    io.log[partition_for("txn", PARTITIONS)].append((key_bytes("txn"), None))
    assert reload(io).c.metadata("txn") is None


def test_unloading_answers_waiting_requests_not_coordinator():
    io = make()
    producer_id, epoch = ready(io)
    io.hold_stores = True
    answers = []
    io.run(io.c.add_partitions(io.now_ms, "txn", producer_id, epoch, [T0], answers.append))
    io.hold_allocations = True
    neighbour = next(f"other-{i}" for i in range(100) if partition_for(f"other-{i}", PARTITIONS) == partition_for("txn", PARTITIONS))
    io.run(io.c.init_producer_id(io.now_ms, neighbour, TIMEOUT_MS, None, answers.append))
    assert answers == []
    io.c.unload_partition(partition_for("txn", PARTITIONS))
    assert answers == [ErrorCode.NOT_COORDINATOR, InitResult(ErrorCode.NOT_COORDINATOR)]
    # The late outcomes change nothing and answer nobody twice.
    io.release_held()
    io.allocate(io.allocations[-1])
    assert len(answers) == 2
    assert io.c.metadata("txn") is None
    assert io.init("txn").error == ErrorCode.NOT_COORDINATOR


def test_a_store_from_an_older_coordinator_epoch_is_ignored():
    io = make()
    producer_id, epoch = ready(io)
    io.hold_stores = True
    answers = []
    io.run(io.c.add_partitions(io.now_ms, "txn", producer_id, epoch, [T0], answers.append))
    partition = partition_for("txn", PARTITIONS)
    io.c.unload_partition(partition)
    for key, value in io.log[partition]:
        io.c.load_record(partition, key, value)
    io.run(io.c.finish_loading(partition, 8, io.now_ms))
    io.release_held()
    assert answers == [ErrorCode.NOT_COORDINATOR]
    assert io.state("txn") == TxnState.EMPTY
