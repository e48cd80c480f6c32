"""Transactions in the producer state (storage/producer_state.py), without a log.

A transaction opens with its producer's first transactional batch and closes
with a marker; the checks of data batches and markers; the last stable offset
recorded with a completed transaction; the first unstable offset as the high
watermark moves; verification guards; expiry, removal and truncation.
"""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode
from storage.producer_state import NO_TXN, ProducerEntry, ProducerStateError, ProducerStateManager


def data(state, pid, offset, *, epoch=0, seq=0, count=1, transactional=True, ts=0):
    state.update(pid, epoch, seq, count - 1, offset, ts, transactional=transactional)


def marker(state, pid, offset, *, commit, epoch=0, coordinator_epoch=0, ts=0):
    return state.apply_marker(pid, epoch, coordinator_epoch, offset, ts, commit=commit)


def refused(check, *args) -> ErrorCode:
    with pytest.raises(ProducerStateError) as info:
        check(*args)
    return info.value.error_code


def test_a_transaction_opens_with_its_first_batch_and_closes_with_its_marker():
    state = ProducerStateManager()
    data(state, 1, 10, count=2)
    data(state, 1, 12, seq=2)  # a later batch of the same transaction
    assert state.producers[1].current_txn_first_offset == 10
    assert state.ongoing_transactions() == {1: 10} and state.has_ongoing_transaction(1)
    completed = marker(state, 1, 13, commit=False, coordinator_epoch=4)
    assert (completed.producer_id, completed.first_offset, completed.last_offset, completed.aborted) == (1, 10, 13, True)
    assert completed.last_stable_offset == 14  # no other transaction open
    entry = state.producers[1]
    assert entry.current_txn_first_offset == NO_TXN and entry.coordinator_epoch == 4
    assert not state.has_ongoing_transaction(1)


def test_a_marker_without_an_open_transaction_completes_nothing():
    state = ProducerStateManager()
    assert marker(state, 5, 0, commit=True, epoch=3, coordinator_epoch=2) is None
    entry = state.producers[5]
    assert (entry.epoch, entry.coordinator_epoch, len(entry.batches)) == (3, 2, 0)


def test_the_stable_offset_of_a_completion_is_the_oldest_other_open_transaction():
    state = ProducerStateManager()
    data(state, 1, 0)
    data(state, 2, 1)
    data(state, 3, 2)
    data(state, 2, 3, seq=1)
    # Producer 2 commits at 4: producer 1's transaction (from 0) is still open.
    assert marker(state, 2, 4, commit=True).last_stable_offset == 0
    assert marker(state, 1, 5, commit=False).last_stable_offset == 2
    assert marker(state, 3, 6, commit=False).last_stable_offset == 7


def test_first_unstable_offset_follows_open_and_unreplicated_transactions():
    state = ProducerStateManager()
    assert state.first_unstable_offset(0) is None
    data(state, 1, 0)
    data(state, 2, 1)
    assert state.first_unstable_offset(2) == 0 and state.first_undecided_offset() == 0
    marker(state, 1, 2, commit=True)
    # Decided, but the marker at 2 is not below the high watermark yet.
    assert state.first_undecided_offset() == 1
    assert state.first_unstable_offset(2) == 0
    assert state.first_unstable_offset(3) == 1
    marker(state, 2, 3, commit=False)
    assert state.first_unstable_offset(3) == 1  # producer 2's marker at 3 is not replicated
    assert state.first_unstable_offset(4) is None


def test_ongoing_transactions_stay_in_first_offset_order_whatever_the_load_order():
    state = ProducerStateManager()
    state.load_entry(ProducerEntry(7, 0, current_txn_first_offset=30))
    state.load_entry(ProducerEntry(8, 0, current_txn_first_offset=10))
    state.load_entry(ProducerEntry(9, 0, current_txn_first_offset=20))
    assert list(state.ongoing_transactions().items()) == [(8, 10), (9, 20), (7, 30)]
    assert state.first_undecided_offset() == 10


def test_non_transactional_batch_inside_a_transaction_is_invalid_txn_state():
    state = ProducerStateManager()
    data(state, 1, 0)
    assert refused(state.check_transaction, 1, 0, False, None) == ErrorCode.INVALID_TXN_STATE
    state.check_transaction(1, 0, True, None)  # more of the same transaction
    marker(state, 1, 1, commit=True)
    state.check_transaction(1, 0, False, None)  # after its end: fine


def test_marker_epoch_rules():
    state = ProducerStateManager()
    data(state, 1, 0, epoch=5)
    marker(state, 1, 1, commit=True, epoch=5, coordinator_epoch=3)
    assert refused(state.check_marker, 1, 4, 3) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert refused(state.check_marker, 1, 5, 2) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    state.check_marker(1, 5, 3)
    state.check_marker(1, 6, 9)  # a newer producer epoch: the coordinator's bump
    state.check_marker(99, 0, 0)  # a producer never seen here
    marker(state, 1, 2, commit=False, epoch=6, coordinator_epoch=4)
    assert state.producers[1].epoch == 6 and not state.producers[1].batches
    assert refused(state.check_epoch, 1, 5) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_replayed_marker_of_an_older_epoch_still_closes_the_transaction():
    state = ProducerStateManager()
    data(state, 1, 0, epoch=3)
    completed = marker(state, 1, 1, commit=False, epoch=2)
    assert completed is not None and state.producers[1].epoch == 3


def test_a_newer_epoch_keeps_the_open_transaction():
    state = ProducerStateManager()
    data(state, 1, 0, epoch=0, count=3)
    data(state, 1, 3, epoch=1, seq=0)
    entry = state.producers[1]
    assert entry.epoch == 1 and entry.current_txn_first_offset == 0 and len(entry.batches) == 1


def test_verification_guard_lifecycle():
    state = ProducerStateManager()
    guard = state.verification_guard_for(1, now_ms=0)
    assert state.verification_guard_for(1, now_ms=5) is guard  # the same until replaced
    # Verification asked for: only the current guard opens a transaction.
    assert refused(state.check_transaction, 1, 0, True, object()) == ErrorCode.INVALID_TXN_STATE
    state.check_transaction(1, 0, True, guard)
    data(state, 1, 0)
    # Inside the transaction (same epoch) no guard is needed.
    state.check_transaction(1, 0, True, object())
    # A marker replaces the guard.
    marker(state, 1, 1, commit=True)
    assert state.verification_guard(1) is None
    assert refused(state.check_transaction, 1, 0, True, guard) == ErrorCode.INVALID_TXN_STATE
    # A newer epoch replaces it too.
    guard = state.verification_guard_for(1, now_ms=0)
    data(state, 1, 2, epoch=1, transactional=False)
    assert state.verification_guard(1) is None
    # No verification asked for (None): nothing is checked.
    state.check_transaction(1, 1, True, None)


def test_a_guard_does_not_cover_a_newer_epoch_inside_an_open_transaction():
    state = ProducerStateManager()
    data(state, 1, 0, epoch=0)
    assert refused(state.check_transaction, 1, 1, True, object()) == ErrorCode.INVALID_TXN_STATE
    guard = state.verification_guard_for(1, now_ms=0)
    state.check_transaction(1, 1, True, guard)


def test_expiry_spares_open_transactions_and_drops_old_guards():
    state = ProducerStateManager()
    data(state, 1, 0, ts=0)
    data(state, 2, 1, transactional=False, ts=0)
    state.verification_guard_for(3, now_ms=0)
    fresh = state.verification_guard_for(4, now_ms=900)
    assert state.remove_expired(now_ms=1000, expiration_ms=500) == [2]
    assert set(state.producers) == {1}
    assert state.verification_guard(3) is None and state.verification_guard(4) is fresh
    marker(state, 1, 2, commit=True, ts=0)
    assert state.remove_expired(now_ms=1000, expiration_ms=500) == [1]


def test_removal_below_the_log_start_drops_their_transactions():
    state = ProducerStateManager()
    data(state, 1, 0)
    data(state, 2, 5)
    data(state, 3, 6)
    marker(state, 3, 7, commit=True)
    state.verification_guard_for(1, now_ms=0)
    assert state.remove_below(5) == [1]
    assert state.ongoing_transactions() == {2: 5} and state.verification_guard(1) is None
    assert state.first_unstable_offset(0) == 5
    # Producer 2's open transaction goes with its data; producer 3's completed one
    # (marker at 7, not replicated) once the start passes its marker.
    assert sorted(state.remove_below(8)) == [2, 3]
    assert state.ongoing_transactions() == {} and state.first_unstable_offset(0) is None


def test_truncation_reopens_transactions_whose_marker_was_cut():
    state = ProducerStateManager()
    data(state, 1, 0)
    data(state, 2, 1)
    marker(state, 1, 2, commit=True)
    data(state, 3, 3)
    state.truncate_from(2)
    assert state.ongoing_transactions() == {1: 0, 2: 1}
    assert 3 not in state.producers
    state.truncate_from(1)
    assert state.ongoing_transactions() == {1: 0}
