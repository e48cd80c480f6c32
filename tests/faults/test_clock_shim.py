"""The clock-jump nemesis' mechanism by itself: a Python process under the
shim sees time.time() jump when its offset file changes, forwards and back,
while time.monotonic() and time.sleep keep running as before; uvloop starts
under it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.faults.clock import RELOAD_S, ClockShimUnavailable, build_shim, preload_env, set_offset

PROBE = """
import json, sys, time
for line in sys.stdin:
    if not line.strip():
        break
    time.sleep(0.001)  # must not fail under the shim (it did under libfaketime)
    print(json.dumps([time.time(), time.monotonic()]), flush=True)
"""
JUMP_S = 600.0
TOLERANCE_S = 5.0


@pytest.fixture
def shim(tmp_path):
    try:
        return build_shim(tmp_path / "shim")
    except ClockShimUnavailable as exc:
        pytest.skip(str(exc))


def test_wall_clock_jumps_and_monotonic_does_not(shim, tmp_path):
    offset_file = tmp_path / "offset"
    set_offset(offset_file, 0)
    probe = subprocess.Popen(
        [sys.executable, "-c", PROBE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **preload_env(shim, offset_file)},
    )

    def sample() -> tuple[float, float, float]:
        """(the probe's wall minus ours, the probe's monotonic, ours)."""
        probe.stdin.write("x\n")
        probe.stdin.flush()
        wall_s, monotonic_s = json.loads(probe.stdout.readline())
        return wall_s - time.time(), monotonic_s, time.monotonic()

    try:
        skews = []
        for offset_s in (0, JUMP_S, -JUMP_S, 0):
            set_offset(offset_file, offset_s)
            time.sleep(RELOAD_S * 3)
            skews.append(sample())
        assert probe.poll() is None, "the probe died under the shim"
    finally:
        probe.stdin.close()
        probe.wait(10)
    for (skew_s, _, _), offset_s in zip(skews, (0, JUMP_S, -JUMP_S, 0)):
        assert abs(skew_s - offset_s) < TOLERANCE_S, skews
    # CLOCK_MONOTONIC is system-wide: the probe's and ours agree, through every jump.
    for _, probe_monotonic_s, our_monotonic_s in skews:
        assert abs(probe_monotonic_s - our_monotonic_s) < TOLERANCE_S, skews
    monotonic = [probe_monotonic_s for _, probe_monotonic_s, _ in skews]
    assert monotonic == sorted(monotonic) and monotonic[-1] - monotonic[0] < 30, skews


def test_uvloop_and_datetime_under_the_shim(shim, tmp_path):
    pytest.importorskip("uvloop")
    offset_file = tmp_path / "offset"
    set_offset(offset_file, -JUMP_S)
    code = (
        "import asyncio, datetime, time, uvloop\n"
        "async def main():\n"
        "    loop = asyncio.get_running_loop(); t = loop.time(); await asyncio.sleep(0.05)\n"
        "    return loop.time() - t\n"
        "print(uvloop.run(main()), datetime.datetime.now().timestamp(), time.time())\n"
    )
    before_s = time.time()
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **preload_env(shim, offset_file)},
    )
    assert done.returncode == 0, done.stderr
    slept_s, datetime_s, wall_s = (float(x) for x in done.stdout.split())
    assert 0.04 < slept_s < 5
    assert abs(wall_s - before_s + JUMP_S) < TOLERANCE_S * 6
    assert abs(datetime_s - wall_s) < 1
