"""The broker's delayed operations, driven on the event loop: acks=all produces,
DeleteRecords and long-polling fetches wait in one purgatory
(replication/purgatory.py), under one limit, with one timer for all their
deadlines (Kafka keeps a purgatory per kind; the mechanism is the same).

The replica manager's operations (replication/delayed.py) wait under their
partition's key and are re-tested by :meth:`PartitionWatch.check` when its high
watermark or a follower's log start moves. A long-polling fetch waits under its
partitions' fetch keys, woken by :meth:`PartitionWatch.notify` when one of them
gets an append or a new high watermark; woken, it reads again. A follower
replica's fetch waits under keys of its own: it reads up to the log end, so an
append below an unmoved high watermark (:meth:`PartitionWatch.notify_log_end`)
wakes followers only; a high watermark move wakes both, as the followers must
hear of it (see replication.partition.FollowerProgress.last_sent_high_watermark).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Hashable, Iterable

from broker.clock import monotonic_ms
from replication.delayed import DelayedFetch
from replication.purgatory import DelayedOperation, Purgatory

# Fetches wait under (FETCH_WAIT, partition key), so a produce or a DeleteRecords
# is re-tested only by what can complete it, and a fetch only by news.
FETCH_WAIT = "fetch"
# Follower replicas' fetches wait under (FOLLOWER_FETCH_WAIT, partition key).
FOLLOWER_FETCH_WAIT = "follower fetch"
_FETCH_WAITS = (FETCH_WAIT, FOLLOWER_FETCH_WAIT)


def _now_ms() -> int:
    # Deadlines of waiting fetches and produces: on the wall clock, a step back
    # of minutes held a fetch's max wait that long.
    return monotonic_ms()


class PartitionWatch:
    def __init__(self, max_operations: int = 1_000_000) -> None:
        self.purgatory = Purgatory(max_operations)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline_ms: int | None = None

    def __len__(self) -> int:
        return len(self.purgatory)

    # ----------------------------------------------------------------- operations

    def add(self, operation: DelayedOperation, keys: Iterable[Hashable], timeout_ms: int) -> bool:
        """``operation`` waits under ``keys`` for at most ``timeout_ms``; True when it
        completed at once. Raises OverflowError when the purgatory is full."""
        if self.purgatory.add(operation, keys, _now_ms() + max(timeout_ms, 0)):
            return True
        self._arm_timer()
        return False

    def check(self, key: Hashable) -> int:
        """``key`` made progress: the operations waiting under it try again."""
        return self.purgatory.check(key)

    def cancel_key(self, key: Hashable) -> int:
        """``key`` stopped being led here: the operations waiting under it end."""
        return self.purgatory.cancel_key(key)

    # ----------------------------------------------------------------- long-polling fetches

    def notify(self, key: Hashable) -> None:
        """The partition ``key`` has news (an append, a new leader epoch, its log
        went away): the fetches waiting on it read again."""
        check = self.purgatory.check
        check((FETCH_WAIT, key))
        check((FOLLOWER_FETCH_WAIT, key))

    def notify_log_end(self, key: Hashable) -> None:
        """Only the log end of ``key`` moved (an append that left the high watermark
        where it was): the followers' fetches read again (a consumer's would find
        nothing new below the high watermark)."""
        self.purgatory.check((FOLLOWER_FETCH_WAIT, key))

    def wake_all(self) -> None:
        """Every waiting fetch reads again now (the broker is stopping)."""
        for key in self.purgatory.watched_keys():
            if isinstance(key, tuple) and key and key[0] in _FETCH_WAITS:
                self.purgatory.check(key)

    async def wait_any(self, keys: Iterable[Hashable], timeout_s: float, *, follower: bool = False) -> bool:
        """Wait until one of ``keys`` is notified or ``timeout_s`` passes; True if
        notified. ``follower``: a follower replica waits, which an append
        that leaves the high watermark where it was wakes alone. A fetch the
        purgatory has no room for does not wait (False)."""
        if timeout_s <= 0:
            return False
        future = asyncio.get_running_loop().create_future()

        def resolve(woken: bool) -> None:
            if not future.done():  # its fetch may have gone with its connection
                future.set_result(woken)

        try:
            kind = FOLLOWER_FETCH_WAIT if follower else FETCH_WAIT
            self.add(DelayedFetch(resolve), [(kind, key) for key in keys], math.ceil(timeout_s * 1000))
        except OverflowError:
            return False
        return await future

    # ----------------------------------------------------------------- the timer

    def _arm_timer(self) -> None:
        deadline_ms = self.purgatory.next_deadline_ms()
        if deadline_ms is None or (self._timer is not None and self._timer_deadline_ms is not None and self._timer_deadline_ms <= deadline_ms):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_deadline_ms = deadline_ms
        self._timer = asyncio.get_running_loop().call_later(max(deadline_ms - _now_ms(), 0) / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_deadline_ms = None
        self.purgatory.expire(_now_ms())
        self._arm_timer()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_deadline_ms = None
