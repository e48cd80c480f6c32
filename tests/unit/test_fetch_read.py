"""The pure rules of what a replica serves of a Fetch (replication/fetch_read.py)."""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode
from replication.fetch_read import leader_epoch_error, position_error, read_upper_offset, serving_error


class Log:
    """A leader's log: epoch 3 covers [0, 10), epoch 5 from 10 to its end 20."""

    log_start_offset = 2
    log_end_offset = 20

    def end_offset_for_epoch(self, epoch: int, current_epoch: int = -1) -> tuple[int, int]:
        if epoch < 3:
            return -1, -1
        if epoch < 5:
            return 3, 10
        return 5, self.log_end_offset


@pytest.mark.parametrize(
    "requested, expected",
    [
        (-1, ErrorCode.NONE),
        (7, ErrorCode.NONE),
        (6, ErrorCode.FENCED_LEADER_EPOCH),
        (8, ErrorCode.UNKNOWN_LEADER_EPOCH),
    ],
)
def test_the_readers_leader_epoch_against_the_known_one(requested, expected):
    assert leader_epoch_error(requested, 7) == expected


def serving(**overrides) -> ErrorCode:
    arguments = {
        "leads": True, "follows": False, "from_follower": False, "is_replica": False,
        "api_version": 17, "requested_epoch": -1, "current_epoch": 7,
    }  # fmt: skip
    arguments.update(overrides)
    return serving_error(**arguments)


def test_the_leader_serves_consumers_and_its_own_followers_only():
    assert serving() == ErrorCode.NONE
    assert serving(from_follower=True, is_replica=True) == ErrorCode.NONE
    assert serving(from_follower=True, is_replica=False) == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_follower_serves_consumers_from_v11_and_never_another_follower():
    follower = {"leads": False, "follows": True}
    assert serving(**follower) == ErrorCode.NONE
    assert serving(**follower, api_version=10) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert serving(**follower, from_follower=True, is_replica=True) == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_broker_hosting_no_replica_serves_nobody_and_a_wrong_epoch_is_named_first():
    assert serving(leads=False) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert serving(leads=False, requested_epoch=6) == ErrorCode.FENCED_LEADER_EPOCH
    assert serving(requested_epoch=8) == ErrorCode.UNKNOWN_LEADER_EPOCH


def position(offset: int, *, last_fetched_epoch: int = -1, check_divergence: bool = True):
    return position_error(
        Log(), offset, check_divergence=check_divergence, last_fetched_epoch=last_fetched_epoch, current_epoch=5
    )


def test_a_follower_whose_epoch_ended_below_its_offset_diverged():
    assert position(12, last_fetched_epoch=3) == (ErrorCode.NONE, (3, 10))
    assert position(10, last_fetched_epoch=3) == (ErrorCode.NONE, None)
    assert position(12, last_fetched_epoch=4) == (ErrorCode.NONE, (3, 10))  # the leader never had epoch 4
    assert position(12, last_fetched_epoch=3, check_divergence=False) == (ErrorCode.NONE, None)


def test_an_offset_outside_the_log_is_out_of_range_once_no_divergence_is_found():
    assert position(1) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
    assert position(21) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
    assert position(2) == position(20) == (ErrorCode.NONE, None)
    assert position(25, last_fetched_epoch=3) == (ErrorCode.NONE, (3, 10))  # truncating comes first


@pytest.mark.parametrize(
    "from_follower, read_committed, expected",
    [(True, False, 20), (True, True, 20), (False, False, 15), (False, True, 12)],
)
def test_followers_read_to_the_log_end_consumers_to_what_is_committed_or_stable(
    from_follower, read_committed, expected
):
    bound = read_upper_offset(
        from_follower=from_follower,
        read_committed=read_committed,
        log_end_offset=20,
        high_watermark=15,
        last_stable_offset=12,
    )
    assert bound == expected
