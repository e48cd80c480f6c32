"""Durations on the monotonic clock, Kafka's wall-clock timestamps on the wall
clock: a wall clock stepped by minutes neither expires sessions, leases,
replica lag or waiting requests early nor holds them past their time
(broker/clock.py; docs/RELIABILITY.md, "Clock jumps")."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from broker.coordinators.groups.coordinator import GroupConfig, GroupCoordinator
from broker.coordinators.groups.group import GroupState
from broker.replica.partition_watch import PartitionWatch
from replication.purgatory import DelayedOperation
from tests.unit.test_group_coordinator import (
    SESSION_MS,
    DrivenCoordinator,
    FakeStore,
    Replies,
    join_new_member,
    offset,
    sync,
)

JUMP_S = 600


@pytest.fixture(params=[JUMP_S, -JUMP_S], ids=["forward", "back"])
def jumped_wall_clock(request, monkeypatch):
    """time.time() from now on is ``request.param`` seconds off; monotonic untouched."""
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + request.param)
    return request.param


def _duration_clocks():
    from broker.coordinators.groups.service import GroupService
    from broker.coordinators.share_groups.service import SharePartitionService
    from broker.replica import fetcher, manager, partition_watch

    clocks = {
        "replica lag (replica manager)": manager._now_ms,
        "waiting fetches and produces (partition watch)": partition_watch._now_ms,
        "group sessions (group service)": GroupService.now_ms,
        "share record locks (share group service)": SharePartitionService.now_ms,
    }
    assert fetcher.monotonic_ms is manager.monotonic_ms  # follower quota windows
    return clocks


def test_durations_do_not_follow_the_wall_clock(jumped_wall_clock):
    from broker.clock import monotonic_ms

    for name, clock in _duration_clocks().items():
        assert abs(clock() - monotonic_ms()) < 1000, f"{name} follows the wall clock"


def test_group_service_stamps_records_with_the_wall_clock(jumped_wall_clock):
    from broker.coordinators.groups.service import GroupService

    assert abs(GroupService.wall_ms() - (time.time() * 1000)) < 1000
    assert abs(GroupService.wall_ms() - int(time.monotonic() * 1000)) > 60_000


def test_controller_times_broker_sessions_on_the_monotonic_clock(jumped_wall_clock):
    from broker.clock import monotonic_ms
    from broker.controller_node.quorum_controller import QuorumController

    defaults = QuorumController.__init__.__kwdefaults__
    assert defaults["monotonic_clock_ms"] is monotonic_ms


@pytest.mark.parametrize("jump_s", [JUMP_S, -JUMP_S], ids=["forward", "back"])
def test_a_waiting_fetch_expires_on_time_whatever_the_wall_clock_does(jump_s, monkeypatch):
    """On the wall clock, a step back of 10 minutes while a fetch waited held
    its 300 ms wait that long (and a step forward ended it at once)."""
    real_time = time.time
    offset_s = [0.0]
    monkeypatch.setattr(time, "time", lambda: real_time() + offset_s[0])

    class Waiting(DelayedOperation):
        expired_at: float | None = None

        def try_complete(self) -> bool:
            return False

        def on_expire(self) -> None:
            self.expired_at = time.monotonic()

        def on_cancel(self, key) -> None:
            raise AssertionError("nothing cancels it")

    async def run() -> float:
        watch = PartitionWatch()
        operation = Waiting()
        started = time.monotonic()
        assert not watch.add(operation, ["key"], timeout_ms=300)
        offset_s[0] = jump_s  # the step, while the fetch waits
        deadline = started + 5
        while operation.expired_at is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            watch.check("key")  # news on the partition: what re-tests a waiting fetch
        watch.close()
        assert operation.expired_at is not None, "still waiting after 5 s"
        return operation.expired_at - started

    assert 0.29 <= asyncio.run(run()) < 2


def _coordinator_with_wall_clock(wall):
    ids = itertools.count(1)
    coordinator = GroupCoordinator(
        GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000, offsets_retention_ms=60_000),
        lambda prefix: f"{prefix}-{next(ids)}",
        wall_clock_ms=lambda: wall[0],
    )
    return DrivenCoordinator(coordinator, FakeStore().write)


def test_group_sessions_follow_now_and_state_timestamps_the_wall_clock():
    """The coordinator's ``now_ms`` (monotonic in the broker) times the session;
    the wall clock, jumping 10 minutes either way, stamps the group's state and
    expires nothing by itself."""
    wall = [1_700_000_000_000]
    coordinator = _coordinator_with_wall_clock(wall)
    replies = Replies()
    member = join_new_member(coordinator, replies, 0, "a")
    sync(coordinator, replies, 0, "a-sync", member, 1, {member: b"x"})
    group = coordinator.groups["g"]
    assert group.state is GroupState.STABLE and group.state_timestamp_ms == wall[0]
    for jump_ms in (JUMP_S * 1000, -2 * JUMP_S * 1000):
        wall[0] += jump_ms
        coordinator.tick(1000)
        assert member in group.members, "a wall-clock jump expired the session"
    coordinator.tick(SESSION_MS + 1)
    assert member not in group.members, "the session outlived its timeout"
    assert group.state_timestamp_ms == wall[0]


def test_offsets_retention_counts_from_the_wall_clock_state_timestamp():
    """Offsets of an empty group expire offsets.retention after the group emptied,
    by the wall clock (as Kafka's), not by the coordinator's monotonic now_ms."""
    wall = [1_700_000_000_000]
    coordinator = _coordinator_with_wall_clock(wall)
    coordinator.commit_offsets(5, "g", -1, "", None, {("t", 0): offset(1, now=wall[0])})
    assert coordinator.groups["g"].state_timestamp_ms == wall[0]
    assert coordinator.expire_offsets(wall[0] + 59_999) == 0
    assert coordinator.expire_offsets(wall[0] + 60_000) == 1
