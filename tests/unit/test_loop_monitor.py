"""broker.loop_monitor: the lag histogram and the rate-limited stall warning."""

from __future__ import annotations

import asyncio
import logging
import time

from broker.loop_monitor import RECENT_WINDOW_S, STALL_WARNING_EVERY_S, STALL_WARNING_MS, LagHistogram, LoopMonitor, RecentMax


def test_histogram_quantiles_are_bucket_bounds():
    histogram = LagHistogram((1, 10, 100))
    for lag_ms in [0.5] * 98 + [5, 500]:
        histogram.observe(lag_ms)
    assert histogram.count == 100
    assert histogram.quantile_ms(0.5) == 1
    assert histogram.quantile_ms(0.99) == 10
    assert histogram.quantile_ms(1.0) == float("inf")  # past the last bound
    assert histogram.max_ms == 500
    assert histogram.counts == [98, 1, 0, 1]
    assert "100 samples" in histogram.summary()


def test_a_stall_is_warned_about_at_most_once_per_period(caplog):
    monitor = LoopMonitor(stall_warning_ms=100)
    with caplog.at_level(logging.WARNING, logger="broker.loop_monitor"):
        monitor.record(5, now_s=1000.0)  # not a stall
        monitor.record(300, now_s=1000.0)
        monitor.record(400, now_s=1001.0)  # within the period: counted, not logged
        monitor.record(200, now_s=1000.0 + STALL_WARNING_EVERY_S + 1)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "300 ms" in warnings[0]
    assert "1 more stalls" in warnings[1]


def test_the_monitor_sees_a_blocked_loop():
    async def scenario() -> LoopMonitor:
        monitor = LoopMonitor(interval_ms=10, stall_warning_ms=10_000)
        monitor.start()
        await asyncio.sleep(0.05)
        time.sleep(0.2)  # holds the loop
        await asyncio.sleep(0.05)
        monitor.stop()
        return monitor

    monitor = asyncio.run(scenario())
    assert monitor.histogram.max_ms >= 150
    assert monitor.max_cpu_lag_ms < 100  # asleep, not computing: no CPU went to that lag


def test_the_cpu_part_of_a_lag_is_measured():
    async def scenario() -> LoopMonitor:
        monitor = LoopMonitor(interval_ms=10, stall_warning_ms=10_000)
        monitor.start(watch_stacks=False)
        await asyncio.sleep(0.05)
        started = time.thread_time()
        while time.thread_time() - started < 0.2:  # holds the loop, computing
            pass
        await asyncio.sleep(0.05)
        monitor.stop()
        return monitor

    monitor = asyncio.run(scenario())
    assert monitor.max_cpu_lag_ms >= 150
    assert monitor.histogram.max_ms >= monitor.max_cpu_lag_ms


def test_the_warning_threshold_is_the_no_stall_goal():
    assert STALL_WARNING_MS == 50


def test_the_recent_maximum_forgets_what_left_its_window():
    recent = RecentMax(window_s=10)
    assert recent.value(100.0) == 0.0
    recent.observe(70.0, 100.2)
    recent.observe(5.0, 100.9)
    recent.observe(20.0, 105.0)
    assert recent.value(105.5) == 70.0
    assert recent.value(109.9) == 70.0  # second 100 is still one of the last ten
    assert recent.value(110.0) == 20.0
    assert recent.value(115.0) == 0.0
    for second in range(1_000):  # a slot per second, never more than the window's
        recent.observe(1.0, 200.0 + second)
        assert len(recent._slots) <= 10


def test_the_monitor_keeps_both_maxima():
    monitor = LoopMonitor(stall_warning_ms=10_000)
    monitor.record(400.0, now_s=1_000.0)
    monitor.record(3.0, now_s=1_000.0 + RECENT_WINDOW_S + 5)
    assert monitor.max_lag_ms == 400.0
    assert monitor.recent_max_lag_ms(now_s=1_000.0 + RECENT_WINDOW_S + 5) == 3.0


def test_a_long_stall_gets_the_loop_threads_stack_logged_while_it_lasts(caplog):
    from broker.loop_monitor import STALL_STACK_MS

    def hold_the_loop_in_a_named_function() -> None:
        time.sleep(STALL_STACK_MS / 1000 + 0.4)

    async def scenario() -> None:
        monitor = LoopMonitor(interval_ms=10, stall_warning_ms=10_000)
        monitor.start()
        await asyncio.sleep(0.05)
        hold_the_loop_in_a_named_function()
        await asyncio.sleep(0.05)
        monitor.stop()

    with caplog.at_level(logging.WARNING, logger="broker.loop_monitor"):
        asyncio.run(scenario())
    stacks = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
    assert len(stacks) == 1  # one stall, one stack
    assert "hold_the_loop_in_a_named_function" in stacks[0]

