"""The pure replica decisions of replication/replica_core.py, one rule at a time
(the replication simulation runs them under faults; the cluster tests through
real brokers)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from protocol.errors import ErrorCode
from replication.partition import LeaderPartition
from replication.replica_core import (
    Append,
    Backoff,
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


@dataclass
class Log:
    log_start_offset: int = 0
    log_end_offset: int = 10
    high_watermark: int = 5
    epochs: dict[int, tuple[int, int]] = field(default_factory=dict)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epochs.get(epoch, (-1, -1))


def test_an_error_backs_off():
    assert on_fetch_response(ErrorCode.NOT_LEADER_OR_FOLLOWER, None, 7, 0, b"", Log()) == Backoff(ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_out_of_range_behind_the_leaders_log_start_starts_over_there():
    assert on_fetch_response(ErrorCode.OFFSET_OUT_OF_RANGE, None, 30, 20, None, Log()) == StartOver(20)


def test_out_of_range_ahead_of_the_leader_truncates_to_its_high_watermark():
    step = on_fetch_response(ErrorCode.OFFSET_OUT_OF_RANGE, None, 8, 0, None, Log())
    assert isinstance(step, Truncate) and step.offset == 8


def test_out_of_range_otherwise_backs_off():
    assert on_fetch_response(ErrorCode.OFFSET_OUT_OF_RANGE, None, 12, 0, None, Log()) == Backoff(ErrorCode.OFFSET_OUT_OF_RANGE)


def test_a_diverging_epoch_truncates_where_the_logs_agree():
    plog = Log(epochs={3: (3, 9)})
    step = on_fetch_response(ErrorCode.NONE, (3, 7), 5, 0, b"", plog)
    assert isinstance(step, Truncate) and step.offset == 7


def test_no_divergence_appends():
    assert on_fetch_response(ErrorCode.NONE, (-1, -1), 5, 0, b"xyz", Log()) == Append(b"xyz")


@pytest.mark.parametrize(
    ("leader_hw", "leader_start", "expected"),
    [
        (12, 0, (10, None)),  # capped at the follower's log end
        (4, 0, (None, None)),  # never lowered
        (9, 8, (9, 8)),  # the leader's log start, once committed here
        (9, 10, (9, None)),  # not yet committed here: kept
    ],
)
def test_marks_adopted_from_the_leader(leader_hw, leader_start, expected):
    marks = adopt_leader_marks(leader_hw, leader_start, Log())
    assert (marks.high_watermark, marks.delete_records_to) == expected


def leader(isr=(1, 2, 3)) -> LeaderPartition:
    return LeaderPartition(
        local_id=1, replicas=(1, 2, 3), isr=isr, leader_epoch=4, partition_epoch=6,
        log_end_offset=10, high_watermark=10, now_ms=0, lag_max_ms=1000,
    )


def test_a_committed_shrink_is_counted():
    partition = leader()
    partition.begin_change((1, 2))
    outcome = apply_alter_partition_answer(partition, True, ErrorCode.NONE, (4, (1, 2), 7), 0)
    assert outcome.answered and outcome.isr_change == -1 and partition.isr == (1, 2)


def test_an_answer_for_another_leadership_changes_nothing():
    partition = leader()
    partition.begin_change((1, 2))
    outcome = apply_alter_partition_answer(partition, True, ErrorCode.NONE, (5, (1, 2), 7), 0)
    assert outcome.answered and outcome.isr_change == 0 and partition.isr == (1, 2, 3)


def test_a_change_not_applied_is_dropped():
    partition = leader()
    partition.begin_change((1, 2))
    outcome = apply_alter_partition_answer(partition, True, ErrorCode.INELIGIBLE_REPLICA, None, 0)
    assert outcome.answered and not partition.change_in_flight


def test_a_fenced_leader_epoch_supersedes_the_leadership_and_keeps_the_change():
    partition = leader()
    proposal = partition.begin_change((1, 2))
    outcome = apply_alter_partition_answer(partition, True, ErrorCode.FENCED_LEADER_EPOCH, None, 0)
    assert outcome.answered and outcome.superseded and partition.change_in_flight
    assert should_resend(partition, True, proposal)
    assert not should_resend(partition, False, proposal)


def test_other_errors_are_sent_again():
    partition = leader()
    partition.begin_change((1, 2))
    assert not apply_alter_partition_answer(partition, True, ErrorCode.NOT_CONTROLLER, None, 0).answered


@pytest.mark.parametrize(
    ("leader_id", "may_lead", "superseded", "led", "followed", "role"),
    [
        (1, True, False, None, None, Role.NEW_LEADER),
        (1, True, False, 4, None, Role.LEADER_UPDATE),
        (1, False, False, None, None, Role.HELD_BACK),
        (1, True, True, 4, None, Role.HELD_BACK),
        (-1, True, False, None, (2, 3), Role.LEADERLESS),
        (2, True, False, None, (2, 4), Role.FOLLOWING),
        (2, True, False, 3, (2, 3), Role.NEW_FOLLOWER),
        (9, True, False, None, None, Role.NEW_FOLLOWER),
    ],
)
def test_roles(leader_id, may_lead, superseded, led, followed, role):
    assert role_for(1, leader_id, 4, (1, 2, 9), may_lead=may_lead, superseded=superseded, led_epoch=led, followed=followed) is role


def test_not_a_replica():
    assert role_for(5, 5, 4, (1, 2), may_lead=True, superseded=False, led_epoch=None, followed=None) is Role.NOT_A_REPLICA


def test_the_log_owns_the_high_watermark_and_refuses_moves_back_or_past_its_end(tmp_path):
    from protocol.records import build_batch
    from storage.log import LogConfig, PartitionLog

    plog = PartitionLog(tmp_path / "t-0", LogConfig())
    try:
        plog.replicated = True
        for value in (b"a", b"b", b"c"):
            plog.append(bytearray(build_batch([(None, value, [], 0)])), leader_epoch=0)
        plog.reset_high_watermark(1)  # a replica taking the log over from its checkpoint
        state = LeaderPartition(
            local_id=1, replicas=(1,), isr=(1,), leader_epoch=0, partition_epoch=0,
            log_end_offset=3, high_watermark=plog.high_watermark, now_ms=0, lag_max_ms=1000, log=plog,
        )
        assert state.high_watermark == plog.high_watermark == 3  # moved there, read from there
        with pytest.raises(AssertionError):
            plog.high_watermark = 2
        with pytest.raises(AssertionError):
            plog.high_watermark = 4
        plog.truncate_to(2)  # a truncation lowers it with the log end
        assert plog.high_watermark == 2
    finally:
        plog.close()


def test_the_log_owns_the_leaders_log_end_offset(tmp_path):
    from protocol.records import build_batch
    from storage.log import LogConfig, PartitionLog

    plog = PartitionLog(tmp_path / "t-0", LogConfig())
    try:
        plog.replicated = True
        state = LeaderPartition(
            local_id=1, replicas=(1, 2), isr=(1,), leader_epoch=0, partition_epoch=0,
            high_watermark=0, now_ms=0, lag_max_ms=1000, log=plog,
        )
        plog.append(bytearray(build_batch([(None, b"a", [], 0)])), leader_epoch=0)
        assert state.log_end_offset == plog.log_end_offset == 1  # read from the log, no copy to refresh
        assert state.leader_appended(1, now_ms=1) and state.high_watermark == 1
        with pytest.raises(AssertionError):
            state.leader_appended(2, now_ms=2)  # the log ends at 1: a second log end would be a second owner
        on_follower_fetch(state, 1, 2, 1, 3)
        plog.append(bytearray(build_batch([(None, b"b", [], 0)])), leader_epoch=0)
        assert isr_shrink(state, plog.log_end_offset, 3) is None and state.log_end_offset == 2
    finally:
        plog.close()


def test_a_follower_fetch_moves_the_high_watermark_then_proposes_its_return_to_the_isr():
    partition = LeaderPartition(
        local_id=1, replicas=(1, 2, 3), isr=(1, 2), leader_epoch=4, partition_epoch=6,
        log_end_offset=10, high_watermark=5, now_ms=0, lag_max_ms=1000,
    )
    fetched = on_follower_fetch(partition, 12, 2, 12, 10)  # the leader's log grew to 12 meanwhile
    assert fetched.high_watermark_moved and partition.high_watermark == 12 and fetched.expansion is None
    fetched = on_follower_fetch(partition, 12, 3, 12, 20, log_start_offset=3)
    assert not fetched.high_watermark_moved and fetched.log_start_moved
    assert fetched.expansion == (1, 2, 3)


def test_the_isr_check_drops_a_follower_that_lagged_too_long():
    partition = leader()
    on_follower_fetch(partition, 10, 2, 10, 0)
    on_follower_fetch(partition, 10, 3, 10, 0)
    assert isr_shrink(partition, 10, 900) is None
    on_follower_fetch(partition, 20, 2, 20, 1500)
    assert isr_shrink(partition, 20, 1500) == (1, 2)
