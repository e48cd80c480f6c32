"""The hand-off micro-benchmark (benchmarks/handoff.py) moves every request to the
other side and back through each transport, checks each answer, and leaves no
process, thread or shared memory block behind."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest

from benchmarks.handoff import ANSWER, CellResult, _check, main, run_cell

TINY_BYTES = 64
ROUND_TRIPS = 40


@pytest.mark.parametrize("transport", ["unix", "pipe", "shm", "thread"])
@pytest.mark.parametrize("window", [1, 4])
def test_every_request_crosses_and_is_answered(transport: str, window: int) -> None:
    threads_before = threading.active_count()
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    result = run_cell(transport, TINY_BYTES, window, seconds=60.0, max_round_trips=ROUND_TRIPS)
    assert isinstance(result, CellResult)
    # The receiver counted the same timed requests as the sender (checked inside
    # run_cell too), and both sides spent CPU on them.
    assert result.round_trips == ROUND_TRIPS
    assert result.wall_s > 0
    assert result.sender_cpu_s >= 0 and result.receiver_cpu_s >= 0
    assert result.sender_cpu_s + result.receiver_cpu_s > 0
    assert multiprocessing.active_children() == []
    assert threading.active_count() == threads_before
    if shm_before or os.path.isdir("/dev/shm"):
        assert set(os.listdir("/dev/shm")) - shm_before == set()


def test_a_wrong_answer_is_caught() -> None:
    """The check the sender makes on every answer is what proves the bytes crossed."""
    _check((7, TINY_BYTES, 7, 0), 7, TINY_BYTES)
    with pytest.raises(AssertionError):
        _check((7, TINY_BYTES, 6, 0), 7, TINY_BYTES)
    with pytest.raises(AssertionError):
        _check((7, TINY_BYTES - 1, 7, 0), 7, TINY_BYTES)


def test_the_command_prints_a_row_per_cell(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--sizes", str(TINY_BYTES), "--windows", "1", "--seconds", "0.01", "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split()[0] for line in lines[2:]]
    assert rows == ["unix", "pipe", "shm", "thread", "memcpy"]
    assert ANSWER.size == 16
