"""The operations a broker delays in its purgatory (replication/purgatory.py).

A produce or DeleteRecords asks ``leader_now`` for this broker's leader state
of the partition as it is now, or None once this broker no longer leads it
(Kafka's DelayedProduce asks the same of the partition each time it tries):
a new leader epoch that keeps the leader here (a reassignment adding or
removing replicas) brings new leader state, and the wait goes on under it.
Each answers through ``resolve``, exactly once. The shell (broker/replica/manager.py) resolves
asyncio futures with them, the replication simulation its produce answers.
"""

from __future__ import annotations

from collections.abc import Callable

from protocol.errors import ErrorCode
from replication.partition import LeaderPartition


class _Once:
    __slots__ = ("_resolve", "done")

    def __init__(self, resolve: Callable):
        self._resolve = resolve
        self.done = False

    def __call__(self, *answer) -> None:
        if not self.done:
            self.done = True
            self._resolve(*answer)


class DelayedProduce:
    """One partition of an acks=all produce, waiting for the high watermark to pass
    ``required_offset`` (Kafka's DelayedProduce); resolves with an ErrorCode."""

    __slots__ = ("leader_now", "required_offset", "resolve")

    def __init__(
        self, leader_now: Callable[[], LeaderPartition | None], required_offset: int, resolve: Callable[[ErrorCode], None]
    ):
        self.leader_now = leader_now
        self.required_offset = required_offset
        self.resolve = _Once(resolve)

    def try_complete(self) -> bool:
        leader = self.leader_now()
        if leader is None:
            self.resolve(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return True
        outcome = leader.produce_outcome(self.required_offset)
        if outcome is None:
            return False
        self.resolve(outcome)
        return True

    def on_expire(self) -> None:
        self.resolve(ErrorCode.REQUEST_TIMED_OUT)

    def on_cancel(self, key) -> None:
        self.resolve(ErrorCode.NOT_LEADER_OR_FOLLOWER)


class DelayedFetch:
    """A long-polling fetch that found too little, waiting for news on any of its
    partitions (an append, a high watermark move); resolves True when woken (it
    then reads again) and False at its deadline."""

    __slots__ = ("added", "resolve")

    def __init__(self, resolve: Callable[[bool], None]):
        self.resolve = _Once(resolve)
        self.added = False

    def try_complete(self) -> bool:
        # The first try is the purgatory's on adding it: the fetch has just read
        # and found too little, so only news after that wakes it.
        if not self.added:
            self.added = True
            return False
        self.resolve(True)
        return True

    def on_expire(self) -> None:
        self.resolve(False)

    def on_cancel(self, key) -> None:
        self.resolve(True)


class DelayedDeleteRecords:
    """One partition of a DeleteRecords, waiting until every live replica's log
    start offset reached the requested offset (Kafka's DelayedDeleteRecords): an
    answer of NONE means no replica that could lead next still serves the deleted
    records. Resolves with ``(error, low watermark)``; ``log_start_offset`` reads
    the leader's own."""

    __slots__ = ("leader_now", "log_start_offset", "required_offset", "resolve")

    def __init__(
        self,
        leader_now: Callable[[], LeaderPartition | None],
        log_start_offset: Callable[[], int],
        required_offset: int,
        resolve: Callable[[ErrorCode, int], None],
    ):
        self.leader_now = leader_now
        self.log_start_offset = log_start_offset
        self.required_offset = required_offset
        self.resolve = _Once(resolve)

    def try_complete(self) -> bool:
        leader = self.leader_now()
        if leader is None:
            self.resolve(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
            return True
        low = leader.low_watermark(self.log_start_offset())
        if low < self.required_offset:
            return False
        self.resolve(ErrorCode.NONE, low)
        return True

    def on_expire(self) -> None:
        self.resolve(ErrorCode.REQUEST_TIMED_OUT, -1)

    def on_cancel(self, key) -> None:
        self.resolve(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
