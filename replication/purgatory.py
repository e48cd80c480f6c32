"""Delayed operations waiting on partitions, with one deadline heap (Kafka's purgatory).

An acks=all produce waits until the high watermark passes its batch, a
DeleteRecords until every replica's log start passed its offset, a
long-polling fetch for data (replication/delayed.py; the broker drives one
purgatory for all of them, broker/replica/partition_watch.py). Each waiting
operation is *watched* under the keys (partitions) whose progress may
complete it; when a key moves, the owner calls :meth:`Purgatory.check` and the operations watched there re-test
themselves. Deadlines live in one heap, so a thousand waiting requests cost
one timer in the driver, not a thousand. Pure: times are arguments.

An operation completes exactly once, by whichever comes first: a successful
``try_complete``, its deadline (``on_expire``) or :meth:`Purgatory.cancel_key`
(the partition stopped being led here).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable
from typing import Protocol


class DelayedOperation(Protocol):
    def try_complete(self) -> bool:
        """Complete now if the condition holds (calling its own completion); True if done."""

    def on_expire(self) -> None:
        """The deadline passed before the condition held."""

    def on_cancel(self, key: Hashable) -> None:
        """A watched key went away (e.g. leadership moved); complete with an error."""


class _Entry:
    __slots__ = ("operation", "keys", "deadline_ms", "done")

    def __init__(self, operation: DelayedOperation, keys: tuple, deadline_ms: int):
        self.operation = operation
        self.keys = keys
        self.deadline_ms = deadline_ms
        self.done = False


class Purgatory:
    def __init__(self, max_operations: int = 1_000_000):
        self.max_operations = max_operations
        self._watchers: dict[Hashable, list[_Entry]] = {}
        self._deadlines: list[tuple[int, int, _Entry]] = []
        self._sequence = itertools.count()
        self._pending = 0
        # Entries in the watch lists, finished ones included: an operation
        # finished through one key stays in its other keys' lists until swept.
        self._watched = 0

    def __len__(self) -> int:
        return self._pending

    def add(self, operation: DelayedOperation, keys: Iterable[Hashable], deadline_ms: int) -> bool:
        """Try ``operation`` once; if it cannot complete yet, watch it under ``keys``
        until ``deadline_ms``. True when it completed at once. Refuses (raises
        OverflowError) past ``max_operations`` waiting, so the caller can answer
        with an error instead of growing without bound."""
        if operation.try_complete():
            return True
        if self._pending >= self.max_operations:
            raise OverflowError(f"{self._pending} delayed operations are waiting already")
        entry = _Entry(operation, tuple(keys), deadline_ms)
        for key in entry.keys:
            self._watchers.setdefault(key, []).append(entry)
        self._watched += len(entry.keys)
        heapq.heappush(self._deadlines, (deadline_ms, next(self._sequence), entry))
        self._pending += 1
        return False

    def _finish(self, entry: _Entry) -> None:
        entry.done = True
        self._pending -= 1

    def check(self, key: Hashable) -> int:
        """``key`` made progress: operations watched there try again; returns how many completed."""
        entries = self._watchers.get(key)
        if not entries:
            return 0
        completed = 0
        waiting = []
        for entry in entries:
            if entry.done:
                continue
            if entry.operation.try_complete():
                self._finish(entry)
                completed += 1
            else:
                waiting.append(entry)
        self._watched -= len(entries) - len(waiting)
        if waiting:
            self._watchers[key] = waiting
        else:
            del self._watchers[key]
        if completed:
            self._purge_done_watchers()
        return completed

    def cancel_key(self, key: Hashable) -> int:
        """Every operation watching ``key`` ends with ``on_cancel``; returns how many."""
        entries = self._watchers.pop(key, [])
        self._watched -= len(entries)
        cancelled = 0
        for entry in entries:
            if not entry.done:
                self._finish(entry)
                entry.operation.on_cancel(key)
                cancelled += 1
        return cancelled

    def expire(self, now_ms: int) -> int:
        """Operations whose deadline is at or before ``now_ms`` end with ``on_expire``."""
        expired = 0
        heap = self._deadlines
        while heap and heap[0][0] <= now_ms:
            _, _, entry = heapq.heappop(heap)
            if entry.done:
                continue
            self._finish(entry)
            entry.operation.on_expire()
            expired += 1
        if expired:
            self._purge_done_watchers()
        return expired

    def _purge_done_watchers(self) -> None:
        # Finished entries are dropped from the watch lists lazily (a fetch woken
        # through one of its partitions is still listed under the others); once
        # they outnumber the live ones, sweep, so that idle keys do not keep them
        # alive. Each sweep removes at least as many entries as it keeps.
        if self._watched > 2 * self._pending + 64:
            watched = 0
            for key in list(self._watchers):
                live = [e for e in self._watchers[key] if not e.done]
                if live:
                    self._watchers[key] = live
                    watched += len(live)
                else:
                    del self._watchers[key]
            self._watched = watched

    def watched_keys(self) -> list[Hashable]:
        """The keys some operation waits under (finished ones may linger until swept)."""
        return list(self._watchers)

    def next_deadline_ms(self) -> int | None:
        heap = self._deadlines
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        return heap[0][0] if heap else None
