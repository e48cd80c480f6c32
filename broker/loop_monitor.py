"""How late the event loop runs: a lag histogram, and a warning on a stall.

Everything a client waits for runs on the one event loop, so work that holds
it (a big topic creation, fsyncs, a retention pass) delays every connection.
A task asks to wake every ``interval_ms``; how much later than asked it wakes
is the loop's lag, which is what any request arriving then also waited.

A stall that lasts ``STALL_STACK_MS`` is also caught while it lasts: a watcher
thread logs where the loop's thread is (its Python stack), so that a stall seen
in production names its cause (rate-limited as the warning).

The largest lag is published twice (broker/http/metrics.py): since the start,
and over the last ``RECENT_WINDOW_S`` seconds, so that a scrape shows a stall
that one bucket of the histogram would only count.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger(__name__)

# Upper bounds (ms) of the histogram's buckets; a last one holds the rest.
LAG_BUCKET_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000)
DEFAULT_INTERVAL_MS = 50
# A lag this long is logged: the broker's goal is no stall over 50 ms, so one
# is worth a line (rate-limited below) even when no client timed out.
STALL_WARNING_MS = 50
# At most one stall warning per this many seconds (the first always goes).
STALL_WARNING_EVERY_S = 10.0
# A stall still going on after this long gets the loop thread's stack logged.
STALL_STACK_MS = 500
# Innermost frames of a stalled stack that are logged.
STACK_FRAMES = 12
# The recent maximum covers this many seconds, in one-second slots: longer than
# Prometheus' usual 15 s scrape interval, so no stall falls between two scrapes.
RECENT_WINDOW_S = 60


class LagHistogram:
    """Counts of observed lags per bucket (cumulative counts are a Prometheus
    histogram's), their sum and the largest one."""

    def __init__(self, bounds_ms: tuple[float, ...] = LAG_BUCKET_BOUNDS_MS):
        self.bounds_ms = bounds_ms
        self.counts = [0] * (len(bounds_ms) + 1)
        self.sum_ms = 0.0
        self.max_ms = 0.0

    def observe(self, lag_ms: float) -> None:
        self.counts[bisect.bisect_left(self.bounds_ms, lag_ms)] += 1
        self.sum_ms += lag_ms
        self.max_ms = max(self.max_ms, lag_ms)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def quantile_ms(self, fraction: float) -> float:
        """The upper bound of the bucket holding that quantile (inf past the last bound)."""
        total = self.count
        if total == 0:
            return 0.0
        rank = fraction * total
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank and count:
                return self.bounds_ms[index] if index < len(self.bounds_ms) else float("inf")
        return float("inf")

    def summary(self) -> str:
        if not self.count:
            return "no samples"
        return (
            f"{self.count} samples, p50 <= {self.quantile_ms(0.5):g} ms, p99 <= {self.quantile_ms(0.99):g} ms, "
            f"max {self.max_ms:.1f} ms"
        )


class RecentMax:
    """The largest value observed over the last ``window_s`` seconds, kept as
    one maximum per whole second (memory and cost bounded by the window)."""

    def __init__(self, window_s: int = RECENT_WINDOW_S):
        self.window_s = window_s
        self._slots: dict[int, float] = {}

    def observe(self, value: float, now_s: float) -> None:
        second = int(now_s)
        if value > self._slots.get(second, float("-inf")):
            self._slots[second] = value
        if len(self._slots) > self.window_s:
            self._forget_before(second - self.window_s + 1)

    def value(self, now_s: float) -> float:
        """0 when nothing was observed in the window."""
        self._forget_before(int(now_s) - self.window_s + 1)
        return max(self._slots.values(), default=0.0)

    def _forget_before(self, first_second: int) -> None:
        for second in [s for s in self._slots if s < first_second]:
            del self._slots[second]


class LoopMonitor:
    def __init__(self, interval_ms: float = DEFAULT_INTERVAL_MS, stall_warning_ms: float = STALL_WARNING_MS):
        self.interval_ms = interval_ms
        self.stall_warning_ms = stall_warning_ms
        self.histogram = LagHistogram()
        self.recent_max_ms = RecentMax()
        # The largest part of a lag that the loop's thread spent on the CPU
        # (a lower bound, from its thread CPU time): on a shared machine a lag
        # may also be time the process was not scheduled, or waited for a
        # disk, which this leaves out.
        self.max_cpu_lag_ms = 0.0
        self._task: asyncio.Task | None = None
        self._last_warning_s = float("-inf")
        self._unreported_stalls = 0
        # For the watcher thread: when the loop last woke the monitor, and whose thread it is.
        self._last_wake_s = time.monotonic()
        self._loop_thread_id: int | None = None
        self._watcher_stop = threading.Event()
        self._last_stack_s = float("-inf")

    def start(self, *, watch_stacks: bool = True) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="event loop lag")
        self._loop_thread_id = threading.get_ident()
        self._last_wake_s = time.monotonic()
        if watch_stacks:
            threading.Thread(target=self._watch, name="event loop stall watcher", daemon=True).start()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._watcher_stop.set()

    def _watch(self) -> None:
        """Log the loop thread's stack once per stall that lasts STALL_STACK_MS (at
        most once per STALL_WARNING_EVERY_S): what holds the loop, found while it does."""
        reported_wake_s = None
        check_s = self.interval_ms / 1000
        while not self._watcher_stop.wait(check_s):
            woke_s = self._last_wake_s
            now_s = time.monotonic()
            blocked_ms = (now_s - woke_s) * 1000 - self.interval_ms
            if blocked_ms < STALL_STACK_MS or woke_s == reported_wake_s or now_s - self._last_stack_s < STALL_WARNING_EVERY_S:
                continue
            frame = sys._current_frames().get(self._loop_thread_id)
            if frame is None:
                continue
            reported_wake_s, self._last_stack_s = woke_s, now_s
            stack = "".join(traceback.format_stack(frame)[-STACK_FRAMES:])
            log.warning("the event loop has been blocked for %.0f ms so far, in:\n%s", blocked_ms, stack.rstrip())

    @property
    def max_lag_ms(self) -> float:
        """The largest lag since the monitor started."""
        return self.histogram.max_ms

    def recent_max_lag_ms(self, now_s: float | None = None) -> float:
        """The largest lag over the last ``RECENT_WINDOW_S`` seconds."""
        return self.recent_max_ms.value(time.monotonic() if now_s is None else now_s)

    def record(self, lag_ms: float, now_s: float) -> None:
        self.histogram.observe(lag_ms)
        self.recent_max_ms.observe(lag_ms, now_s)
        if lag_ms < self.stall_warning_ms:
            return
        if now_s - self._last_warning_s < STALL_WARNING_EVERY_S:
            self._unreported_stalls += 1
            return
        more = f" ({self._unreported_stalls} more stalls since the last warning)" if self._unreported_stalls else ""
        log.warning("the event loop was blocked for %.0f ms: every request waited meanwhile%s", lag_ms, more)
        self._last_warning_s = now_s
        self._unreported_stalls = 0

    async def _run(self) -> None:
        interval_s = self.interval_ms / 1000
        while True:
            asked_s = time.monotonic()
            asked_cpu_s = time.thread_time()
            await asyncio.sleep(interval_s)
            woke_s = self._last_wake_s = time.monotonic()
            lag_ms = max(0.0, (woke_s - asked_s - interval_s) * 1000)
            # CPU beyond the interval's length went to the lag at least.
            cpu_ms = (time.thread_time() - asked_cpu_s) * 1000 - self.interval_ms
            self.max_cpu_lag_ms = max(self.max_cpu_lag_ms, min(lag_ms, cpu_ms))
            self.record(lag_ms, woke_s)
