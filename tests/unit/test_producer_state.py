import pytest

from protocol.errors import ErrorCode
from storage.producer_state import INT32_MAX, ProducerStateError, ProducerStateManager


def appended(state, pid, epoch, seq, delta, offset):
    assert state.check(pid, epoch, seq, delta) is None
    state.update(pid, epoch, seq, delta, offset, 0)


def test_unknown_producer_is_accepted_at_any_sequence():
    state = ProducerStateManager()
    assert state.check(7, 0, 42, 3) is None


def test_in_order_batches_and_duplicates():
    state = ProducerStateManager()
    appended(state, 7, 0, 0, 4, 100)  # sequences 0-4 at offsets 100-104
    appended(state, 7, 0, 5, 0, 105)
    duplicate = state.check(7, 0, 0, 4)
    assert (duplicate.first_offset, duplicate.last_offset) == (100, 104)
    assert state.check(7, 0, 6, 1) is None


def test_gap_is_out_of_order():
    state = ProducerStateManager()
    appended(state, 7, 0, 0, 0, 0)
    with pytest.raises(ProducerStateError) as info:
        state.check(7, 0, 2, 0)
    assert info.value.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_older_epoch_is_fenced_and_new_epoch_starts_at_zero():
    state = ProducerStateManager()
    appended(state, 7, 3, 0, 0, 0)
    with pytest.raises(ProducerStateError) as info:
        state.check(7, 2, 1, 0)
    assert info.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(ProducerStateError) as info:
        state.check(7, 4, 5, 0)
    assert info.value.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.check(7, 4, 0, 0) is None


def test_only_the_last_five_batches_are_remembered():
    state = ProducerStateManager()
    for i in range(6):
        appended(state, 1, 0, i, 0, i)
    # Sequence 0 fell out of the window: it is neither a duplicate nor in order.
    with pytest.raises(ProducerStateError):
        state.check(1, 0, 0, 0)
    assert state.check(1, 0, 5, 0).first_offset == 5


def test_sequence_wraps_after_int32_max():
    state = ProducerStateManager()
    appended(state, 1, 0, INT32_MAX - 1, 1, 0)  # INT32_MAX-1, INT32_MAX
    assert state.check(1, 0, 0, 0) is None


def test_truncate_forgets_batches_past_the_cut():
    state = ProducerStateManager()
    appended(state, 1, 0, 0, 0, 10)
    appended(state, 1, 0, 1, 0, 11)
    state.truncate_from(11)
    assert state.check(1, 0, 1, 0) is None
    state.truncate_from(0)
    assert len(state) == 0
