"""The log cleaner in slices (clean_log_steps, LogManager.clean_compacted_steps):
the same result as in one piece, appends between steps kept, and a cleaning that
stops, with nothing half done, when the log is truncated, closed or loses
segments to retention between steps."""

from __future__ import annotations

import pytest

from protocol.records import build_batch
from storage.cleaner import clean_log, clean_log_steps
from storage.log import LogConfig
from storage.manager import LogManager
from tests.unit.test_cleaner import COMPACT, DAY, T0, append, consume, file_records, fill, latest_per_key, logs  # noqa: F401


def drive(steps, between=None):
    """Run a step generator to its end, calling ``between(step)`` after each step."""
    count = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value, count
        count += 1
        if between is not None:
            between(count)


def leftovers(plog):
    return sorted(p.name for p in plog.directory.iterdir() if p.name.endswith((".cleaned", ".swap")))


def test_in_steps_the_same_as_in_one_piece(logs, tmp_path):
    whole = logs.open()
    written = fill(whole, keys=5, rounds=20)
    clean_log(whole, T0 + DAY)

    other = type(logs)(tmp_path / "other-0")
    try:
        sliced = other.open()
        assert fill(sliced, keys=5, rounds=20) == written
        result, steps = drive(clean_log_steps(sliced, T0 + DAY))
        assert result.cleaned
        assert steps >= len(written)  # a step per batch read, at least
        assert file_records(sliced) == file_records(whole)
        assert consume(sliced) == consume(whole)
    finally:
        other.close_all()


def test_appends_between_steps_are_kept(logs):
    plog = logs.open()
    written = fill(plog, keys=5, rounds=20)
    first_uncleanable = plog.active_segment.base_offset
    added = []

    def produce(step):
        if step % 7 == 0:
            result = append(plog, [("late", f"v{step}", T0 + step)])
            added.append((result.base_offset, b"late", f"v{step}".encode(), T0 + step))

    result, _ = drive(clean_log_steps(plog, T0 + DAY), produce)
    assert result.cleaned and added
    assert consume(plog) == latest_per_key(written, first_uncleanable) + added
    assert leftovers(plog) == []


def test_a_truncation_between_steps_stops_the_cleaning(logs):
    plog = logs.open()
    written = fill(plog, keys=5, rounds=20)
    before = file_records(plog)
    end = plog.log_end_offset

    def truncate(step):
        if step == 3:
            plog.truncate_to(end - 2)

    result, _ = drive(clean_log_steps(plog, T0 + DAY, first_dirty_offset=None), truncate)
    assert not result.cleaned
    assert "truncated" in result.skipped
    assert result.first_dirty_offset == 0  # the checkpoint it started from
    assert file_records(plog) == before[: len(before) - 2]
    assert leftovers(plog) == []
    assert len(written) == end


def test_segments_removed_by_retention_between_steps_are_not_swapped(logs):
    plog = logs.open()
    fill(plog, keys=5, rounds=20)
    bases_before = [s.base_offset for s in plog.segments]

    map_steps = plog.active_segment.base_offset  # a step per batch of the dirty range (one record each)

    def delete_records(step):
        if step == map_steps + 4:  # the map is built; the first group is being written
            plog.delete_records(plog.segments[2].base_offset)

    result, _ = drive(clean_log_steps(plog, T0 + DAY), delete_records)
    assert not result.cleaned
    assert "deleted" in result.skipped
    assert [s.base_offset for s in plog.segments] == bases_before[2:]
    assert leftovers(plog) == []


def test_closing_the_log_between_steps_stops_the_cleaning(logs):
    plog = logs.open()
    fill(plog, keys=5, rounds=20)
    steps = clean_log_steps(plog, T0 + DAY)
    for _ in range(30):
        next(steps)
    plog.closed = True  # as close() and delete() mark it
    with pytest.raises(StopIteration) as done:
        next(steps)
    assert "closed" in done.value.value.skipped
    plog.closed = False
    assert leftovers(plog) == []


def test_the_manager_cleans_only_compacted_logs_without_opening_the_others(tmp_path):
    manager = LogManager([tmp_path / "logs"])
    compacted = manager.get_or_create("c", 0, LogConfig(**COMPACT))
    fill(compacted, keys=5, rounds=20)
    manager.get_or_create("plain", 0, LogConfig()).append(build_batch([(b"k", b"v", [], T0)]))
    manager.close()
    reopened = LogManager([tmp_path / "logs"])
    reopened.register("c", 0, LogConfig(**COMPACT), existing=tmp_path / "logs" / "c-0")
    reopened.register("plain", 0, LogConfig(), existing=tmp_path / "logs" / "plain-0")
    cleaned, steps = drive(reopened.clean_compacted_steps(T0 + DAY))
    assert cleaned == 1 and steps > 0
    assert ("plain", 0) not in reopened.logs  # never opened for the cleaner
    reopened.close()
