"""What a replica may serve of a Fetch, as pure rules (the decisions of Kafka's
``ReplicaManager.readFromLocalLog`` and ``Partition.fetchRecords``).

The broker's read path (broker/replica/read.py) asks these, in this order, for
each partition of a Fetch, and the replication simulation asks the leader's
epoch check too:

1. :func:`serving_error`: whether this broker serves the reader at all (the
   leader serves everyone; a follower serves consumers of v11+ requests,
   KIP-392; a follower replica is served only by the leader and only when it
   is a replica of the partition), and the reader's leader epoch;
2. :func:`position_error`: for a follower, whether its log diverged from the
   leader's (KIP-320), then whether the fetch offset is inside the log;
3. :func:`read_upper_offset`: how far the reader may read (the log end for a
   follower replica, the last stable offset for read_committed, else the high
   watermark).

Nothing here does IO or reads a clock; the log is read through
:class:`ReadableLog` (``storage.log.PartitionLog`` is one).
"""

from __future__ import annotations

from typing import Protocol

from protocol.errors import ErrorCode
from replication.partition import diverging_epoch_for_fetch

# Fetch versions from which a consumer may read from a follower (KIP-392), and
# from which a follower replica names its last fetched epoch (KIP-320).
FOLLOWER_READ_MIN_VERSION = 11
DIVERGING_EPOCH_MIN_VERSION = 12

# Errors after which the reader looks for the leader again (v12+ answers name it, KIP-951).
LEADER_ERRORS = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


class ReadableLog(Protocol):
    """What the rules read of a partition's log."""

    log_start_offset: int
    log_end_offset: int

    def end_offset_for_epoch(self, epoch: int, current_epoch: int = -1) -> tuple[int, int]: ...


def leader_epoch_error(requested: int, current: int) -> ErrorCode:
    """The reader's ``current_leader_epoch`` against the one this broker knows
    (-1: the reader does not say)."""
    if requested == -1 or requested == current:
        return ErrorCode.NONE
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


def serving_error(
    *,
    leads: bool,
    follows: bool,
    from_follower: bool,
    is_replica: bool,
    api_version: int,
    requested_epoch: int,
    current_epoch: int,
) -> ErrorCode:
    """NONE when this broker serves the fetch; ``leads``/``follows``: this broker
    leads / follows the partition (neither when it does not host it);
    ``is_replica``: the fetching follower is a replica of the partition. A
    wrong leader epoch wins over not serving, as Kafka checks it first."""
    serves = leads or (follows and not from_follower and api_version >= FOLLOWER_READ_MIN_VERSION)
    epoch_error = leader_epoch_error(requested_epoch, current_epoch)
    if epoch_error != ErrorCode.NONE:
        return epoch_error
    if not serves or (from_follower and not is_replica):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.NONE


def position_error(
    log: ReadableLog,
    fetch_offset: int,
    *,
    check_divergence: bool,
    last_fetched_epoch: int,
    current_epoch: int,
) -> tuple[ErrorCode, tuple[int, int] | None]:
    """(error, diverging (epoch, end offset)) of a fetch from ``fetch_offset``:
    with ``check_divergence`` (a follower replica's v12+ fetch naming its last
    fetched epoch), a follower whose log diverged gets the leader's end of that
    epoch and must truncate before it reads (KIP-320); then an offset outside
    ``[log start, log end]`` is OFFSET_OUT_OF_RANGE."""
    if check_divergence and last_fetched_epoch >= 0:
        diverging = diverging_epoch_for_fetch(
            last_fetched_epoch,
            fetch_offset,
            log.end_offset_for_epoch(last_fetched_epoch, current_epoch=current_epoch),
        )
        if diverging is not None:
            return ErrorCode.NONE, diverging
    if fetch_offset < log.log_start_offset or fetch_offset > log.log_end_offset:
        return ErrorCode.OFFSET_OUT_OF_RANGE, None
    return ErrorCode.NONE, None


def read_upper_offset(
    *, from_follower: bool, read_committed: bool, log_end_offset: int, high_watermark: int, last_stable_offset: int
) -> int:
    """Where a read stops: a follower replica copies the whole log; a consumer
    reads what is committed, and a read_committed one only what is stable."""
    if from_follower:
        return log_end_offset
    if read_committed:
        return last_stable_offset
    return high_watermark
