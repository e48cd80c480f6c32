"""Transactions version 2 (KIP-890 part 2) in the pure transaction coordinator:
the epoch bump at every EndTxn v5, the answer's producer id and epoch, epoch
exhaustion (a new producer id), the retry of an EndTxn whose answer was lost,
Kafka's table for EndTxn on Empty/CompleteCommit/CompleteAbort, the implicit
add of a version 2 producer's partitions, and the client transaction version
kept in the records across a reload.

Uses the IO model of test_txn_coordinator.
"""

from __future__ import annotations

import pytest

from broker.coordinators.transactions.model import EPOCH_EXHAUSTED, TRANSACTION_VERSION_2, EndResult
from protocol.errors import ErrorCode
from protocol.transaction_state import TxnState
from tests.unit.test_txn_coordinator import IO, T0, T1, make, ready, reload, snapshot, stored_values


def end2(io: IO, txn_id, producer_id, epoch, commit) -> EndResult | None:
    answers = io._call(io.c.end_txn_v2, txn_id, producer_id, epoch, commit)
    return answers[0] if answers else None


def add2(io: IO, txn_id, producer_id, epoch, partitions) -> ErrorCode | None:
    answers = []

    def reply(result):
        answers.append(result)

    io.run(io.c.add_partitions(io.now_ms, txn_id, producer_id, epoch, partitions, reply, TRANSACTION_VERSION_2))
    assert len(answers) <= 1
    return answers[0] if answers else None


def ongoing2(io: IO, txn_id="txn", partitions=(T0, T1)) -> tuple[int, int]:
    producer_id, epoch = ready(io, txn_id)
    assert add2(io, txn_id, producer_id, epoch, partitions) == ErrorCode.NONE
    return producer_id, epoch


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_v2_bumps_the_epoch_writes_markers_at_it_and_answers_it(commit):
    io = make()
    pid, epoch = ongoing2(io)
    assert io.c.metadata("txn").client_transaction_version == TRANSACTION_VERSION_2
    assert end2(io, "txn", pid, epoch, commit) == EndResult(ErrorCode.NONE, pid, epoch + 1)
    [markers] = io.markers
    assert (markers.producer_id, markers.producer_epoch, markers.commit) == (pid, epoch + 1, commit)
    prepared = stored_values(io)[-1]
    assert prepared.state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    assert (prepared.producer_epoch, prepared.client_transaction_version) == (epoch + 1, TRANSACTION_VERSION_2)
    io.write_markers(markers)
    meta = io.c.metadata("txn")
    assert meta.state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    assert (meta.producer_id, meta.producer_epoch) == (pid, epoch + 1)
    # The next transaction runs at the new epoch; the old one is fenced.
    assert add2(io, "txn", pid, epoch, [T0]) == ErrorCode.PRODUCER_FENCED
    assert add2(io, "txn", pid, epoch + 1, [T0]) == ErrorCode.NONE
    assert end2(io, "txn", pid, epoch + 1, True) == EndResult(ErrorCode.NONE, pid, epoch + 2)


def test_the_next_transaction_waits_while_the_last_one_completes():
    io = make()
    pid, epoch = ongoing2(io)
    assert end2(io, "txn", pid, epoch, True).error == ErrorCode.NONE
    before = snapshot(io)
    assert add2(io, "txn", pid, epoch + 1, [T0]) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert snapshot(io) == before
    io.write_markers(io.markers[-1])
    assert add2(io, "txn", pid, epoch + 1, [T0]) == ErrorCode.NONE


def test_a_retried_end_txn_whose_answer_was_lost():
    io = make()
    io.auto_markers = True
    pid, epoch = ongoing2(io)
    assert end2(io, "txn", pid, epoch, True) == EndResult(ErrorCode.NONE, pid, epoch + 1)
    before = snapshot(io)
    # Same direction with the old epoch: NONE and the current identity, nothing stored.
    assert end2(io, "txn", pid, epoch, True) == EndResult(ErrorCode.NONE, pid, epoch + 1)
    # The other direction: INVALID_TXN_STATE; an older epoch still: fenced.
    assert end2(io, "txn", pid, epoch, False) == EndResult(ErrorCode.INVALID_TXN_STATE)
    assert end2(io, "txn", pid, epoch - 1 if epoch else -5, True) == EndResult(ErrorCode.PRODUCER_FENCED)
    assert snapshot(io) == before


def test_a_retry_while_the_markers_are_written_is_concurrent():
    io = make()
    pid, epoch = ongoing2(io)
    end2(io, "txn", pid, epoch, False)
    before = snapshot(io)
    assert end2(io, "txn", pid, epoch, False) == EndResult(ErrorCode.CONCURRENT_TRANSACTIONS)
    # The bumped epoch is no retry of this prepare: fenced (Kafka's rule for PrepareX).
    assert end2(io, "txn", pid, epoch + 1, False) == EndResult(ErrorCode.PRODUCER_FENCED)
    assert snapshot(io) == before


def test_kafkas_table_for_empty_and_completed_states():
    io = make()
    io.auto_markers = True
    pid, epoch = ready(io)
    # Empty: commit is INVALID_TXN_STATE, abort bumps (a transaction with no partition).
    before = snapshot(io)
    assert end2(io, "txn", pid, epoch, True) == EndResult(ErrorCode.INVALID_TXN_STATE)
    assert snapshot(io) == before
    assert end2(io, "txn", pid, epoch, False) == EndResult(ErrorCode.NONE, pid, epoch + 1)
    assert io.state("txn") == TxnState.COMPLETE_ABORT and io.markers == []
    # CompleteAbort: abort again with the current epoch bumps again; a retry is NONE.
    assert end2(io, "txn", pid, epoch + 1, False) == EndResult(ErrorCode.NONE, pid, epoch + 2)
    assert end2(io, "txn", pid, epoch + 1, False) == EndResult(ErrorCode.NONE, pid, epoch + 2)
    assert end2(io, "txn", pid, epoch + 2, True) == EndResult(ErrorCode.INVALID_TXN_STATE)
    # CompleteCommit: commit with the current epoch is INVALID_TXN_STATE, abort bumps.
    assert add2(io, "txn", pid, epoch + 2, [T0]) == ErrorCode.NONE
    assert end2(io, "txn", pid, epoch + 2, True) == EndResult(ErrorCode.NONE, pid, epoch + 3)
    assert end2(io, "txn", pid, epoch + 3, True) == EndResult(ErrorCode.INVALID_TXN_STATE)
    assert end2(io, "txn", pid, epoch + 2, False) == EndResult(ErrorCode.INVALID_TXN_STATE)
    assert end2(io, "txn", pid, epoch + 3, False) == EndResult(ErrorCode.NONE, pid, epoch + 4)


def test_errors_of_end_txn_v2():
    io = make()
    pid, epoch = ongoing2(io)
    before = snapshot(io)
    assert end2(io, "", pid, epoch, True) == EndResult(ErrorCode.INVALID_REQUEST)
    assert end2(io, "unknown", pid, epoch, True) == EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    assert end2(io, "txn", pid + 1, epoch, True) == EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    assert end2(io, "txn", pid, epoch + 1, True) == EndResult(ErrorCode.PRODUCER_FENCED)
    assert snapshot(io) == before


def test_an_exhausted_epoch_moves_to_a_new_producer_id_at_the_end():
    io = make()
    pid, _ = ready(io)
    meta = io.c.metadata("txn")
    meta.producer_epoch = EPOCH_EXHAUSTED  # as if 32766 transactions had run
    assert add2(io, "txn", pid, EPOCH_EXHAUSTED, [T0]) == ErrorCode.NONE
    result = end2(io, "txn", pid, EPOCH_EXHAUSTED, True)
    new_pid = result.producer_id
    assert result.error == ErrorCode.NONE and new_pid != pid and result.producer_epoch == 0
    [markers] = io.markers
    # The markers carry the old id at the last epoch; the record names the next id.
    assert (markers.producer_id, markers.producer_epoch) == (pid, EPOCH_EXHAUSTED + 1)
    assert stored_values(io)[-1].next_producer_id == new_pid
    # The new id is only pending until the markers are written.
    assert add2(io, "txn", new_pid, 0, [T0]) == ErrorCode.CONCURRENT_TRANSACTIONS
    io.write_markers(markers)
    meta = io.c.metadata("txn")
    assert (meta.producer_id, meta.producer_epoch, meta.previous_producer_id) == (new_pid, 0, pid)
    completed = stored_values(io)[-1]
    assert (completed.producer_id, completed.producer_epoch, completed.previous_producer_id) == (new_pid, 0, pid)
    # The retry with the old identity is answered with the new one.
    assert end2(io, "txn", pid, EPOCH_EXHAUSTED, True) == EndResult(ErrorCode.NONE, new_pid, 0)
    assert end2(io, "txn", pid, EPOCH_EXHAUSTED, False) == EndResult(ErrorCode.INVALID_TXN_STATE)
    assert add2(io, "txn", new_pid, 0, [T1]) == ErrorCode.NONE


def test_a_failed_prepare_changes_nothing():
    io = make()
    pid, epoch = ongoing2(io)
    before = snapshot(io)
    io.fail_stores_with = ErrorCode.NOT_COORDINATOR
    assert end2(io, "txn", pid, epoch, True) == EndResult(ErrorCode.NOT_COORDINATOR)
    assert snapshot(io) == before


def test_unloading_answers_a_waiting_end_txn_v2():
    io = make()
    pid, epoch = ongoing2(io)
    io.hold_stores = True
    answers = []
    io.run(io.c.end_txn_v2(io.now_ms, "txn", pid, epoch, True, answers.append))
    assert answers == []
    io.c.unload_partition(io.c.partition_for("txn"))
    assert answers == [EndResult(ErrorCode.NOT_COORDINATOR)]


def test_a_version_1_end_on_a_version_2_transaction_keeps_the_epoch():
    io = make()
    io.auto_markers = True
    pid, epoch = ongoing2(io)
    assert io.end("txn", pid, epoch, True) == ErrorCode.NONE
    meta = io.c.metadata("txn")
    assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_COMMIT, epoch)


def test_version_1_transactions_keep_version_0_records():
    io = make()
    io.auto_markers = True
    pid, epoch = ready(io)
    assert io.add("txn", pid, epoch, [T0]) == ErrorCode.NONE
    assert io.end("txn", pid, epoch, True) == ErrorCode.NONE
    assert all(v.client_transaction_version == 0 and v.next_producer_id == -1 for v in stored_values(io))


@pytest.mark.parametrize("step", ["prepared", "completed"])
def test_a_reload_keeps_the_client_transaction_version_and_the_next_producer_id(step):
    io = make()
    pid, _ = ready(io)
    io.c.metadata("txn").producer_epoch = EPOCH_EXHAUSTED
    assert add2(io, "txn", pid, EPOCH_EXHAUSTED, [T0, T1]) == ErrorCode.NONE
    new_pid = end2(io, "txn", pid, EPOCH_EXHAUSTED, False).producer_id
    if step == "completed":
        io.write_markers(io.markers[-1])
    fresh = reload(io, epoch=9)
    if step == "prepared":
        # The new coordinator finishes the abort and moves to the next id as the old would have.
        [markers] = fresh.markers
        assert (markers.producer_id, markers.producer_epoch, markers.commit) == (pid, EPOCH_EXHAUSTED + 1, False)
        fresh.write_markers(markers)
    meta = fresh.c.metadata("txn")
    assert (meta.state, meta.producer_id, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, new_pid, 0)
    assert meta.client_transaction_version == TRANSACTION_VERSION_2
    assert end2(fresh, "txn", pid, EPOCH_EXHAUSTED, False) == EndResult(ErrorCode.NONE, new_pid, 0)


def test_an_init_fencing_a_version_2_transaction_aborts_it_and_the_retry_bumps_again():
    io = make()
    io.auto_markers = True
    pid, epoch = ongoing2(io)
    assert io.init("txn").error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert io.state("txn") == TxnState.COMPLETE_ABORT
    result = io.init("txn")
    assert (result.error, result.producer_id) == (ErrorCode.NONE, pid) and result.producer_epoch > epoch + 1
    # The zombie with the old epoch can neither end nor add.
    assert end2(io, "txn", pid, epoch, True).error == ErrorCode.PRODUCER_FENCED
    assert add2(io, "txn", pid, epoch, [T0]) == ErrorCode.PRODUCER_FENCED


def test_the_gate_reads_the_finalized_transaction_version():
    from types import SimpleNamespace

    from broker.coordinators.transactions.service import transactions_v2

    assert not transactions_v2(SimpleNamespace(features={}))
    assert not transactions_v2(SimpleNamespace(features={"transaction.version": 1}))
    assert transactions_v2(SimpleNamespace(features={"transaction.version": 2}))
