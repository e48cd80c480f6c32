"""ControllerBackoff: how often a broker retries a controller that does not
answer, and how often it says so."""

from __future__ import annotations

import itertools
import random

from broker.controller_node.forwarding import (
    FAILURE_LOG_INTERVAL_S,
    RECONNECT_BACKOFF_JITTER,
    RECONNECT_BACKOFF_MAX_MS,
    RECONNECT_BACKOFF_MS,
    ControllerBackoff,
)


def test_the_backoff_doubles_from_the_initial_wait_up_to_the_maximum_with_jitter():
    backoff = ControllerBackoff(1, random.Random(7))
    assert backoff.backoff_ms() == 0 and backoff.ready(0.0)
    now = 100.0
    for failures in range(1, 12):
        backoff.failed(now, "BrokerHeartbeat", "refused")
        expected = min(RECONNECT_BACKOFF_MS * 2 ** (failures - 1), RECONNECT_BACKOFF_MAX_MS)
        wait_s = backoff.retry_at_s - now
        assert expected * (1 - RECONNECT_BACKOFF_JITTER) <= wait_s * 1000 <= expected * (1 + RECONNECT_BACKOFF_JITTER)
        assert not backoff.ready(now) and not backoff.ready(now + wait_s * 0.99)
        assert backoff.ready(now + wait_s)
        now += wait_s


def test_attempts_against_a_dead_controller_come_about_once_a_second_not_twenty_times():
    backoff = ControllerBackoff(1, random.Random(3))
    attempts, now, step_s = 0, 0.0, 0.05  # the lifecycle loop wakes every 50 ms
    while now < 60.0:
        if backoff.ready(now):
            attempts += 1
            backoff.failed(now, "BrokerHeartbeat", "refused")
        now += step_s
    # Steady state: one attempt per RECONNECT_BACKOFF_MAX_MS (+-20%), after a few quick ones.
    assert 40 <= attempts <= 60 + 10


def test_failures_are_logged_first_then_at_most_once_per_interval_with_a_count():
    backoff = ControllerBackoff(2, random.Random(1))
    lines = []
    now = 0.0
    while now < 3 * FAILURE_LOG_INTERVAL_S + 0.5:
        line = backoff.failed(now, "BrokerHeartbeat", "Connection refused")
        if line is not None:
            lines.append((now, line))
        now += 0.05
    times = [t for t, _ in lines]
    assert times[0] == 0.0 and "cannot reach controller 2" in lines[0][1] and "Connection refused" in lines[0][1]
    assert len(lines) == 4
    assert all(b - a >= FAILURE_LOG_INTERVAL_S - 1e-9 for a, b in itertools.pairwise(times))
    assert "still cannot reach controller 2" in lines[1][1] and "more failed attempt(s)" in lines[1][1]
    count = int(lines[1][1].split(": ")[1].split(" more")[0])
    assert count == round(FAILURE_LOG_INTERVAL_S / 0.05)


def test_an_answer_resets_the_backoff_and_says_so_once():
    backoff = ControllerBackoff(3)
    assert backoff.answered() is None
    for i in range(5):
        backoff.failed(float(i), "BrokerHeartbeat", "timed out")
    assert backoff.answered() == "controller 3 answers again after 5 failed attempt(s)"
    assert backoff.ready(0.0) and backoff.backoff_ms() == 0
    assert backoff.answered() is None
    # A new run of failures is reported afresh.
    assert backoff.failed(10.0, "BrokerHeartbeat", "refused") is not None


def test_retry_now_clears_the_wait_but_keeps_the_count_and_the_rate_limit():
    backoff = ControllerBackoff(1, random.Random(5))
    for i in range(6):
        backoff.failed(i * 0.01, "BrokerHeartbeat", "refused")
    assert not backoff.ready(0.1)
    backoff.retry_now()
    assert backoff.ready(0.1)
    assert backoff.failed(0.2, "BrokerHeartbeat", "refused") is None  # still within the log interval
    assert backoff.failures == 7
