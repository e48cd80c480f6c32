"""Wall-clock jumps for one process: the LD_PRELOAD shim of clock_shim.c,
built with the C compiler into a folder of the run, and the offset file
through which the nemesis moves a broker's wall clock while it runs.

Only the wall clock moves (CLOCK_REALTIME, gettimeofday, time); the
monotonic clock, which the broker's timeouts, leases and event loop use,
stays real. Debian's libfaketime was tried first: with its monotonic clock
left real (FAKETIME_DONT_FAKE_MONOTONIC=1) Python's time.sleep fails with
EINVAL, and faking the monotonic clock too is not the fault meant here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SHIM_SOURCE = Path(__file__).with_name("clock_shim.c")
OFFSET_FILE_ENV = "CLOCK_SHIM_OFFSET_FILE"
# The shim reads its file again at most this often (RELOAD_NS in clock_shim.c).
RELOAD_S = 0.02
BUILD_TIMEOUT_S = 60


class ClockShimUnavailable(RuntimeError):
    """No C compiler, or the shim did not build."""


def build_shim(folder: Path, source: Path = SHIM_SOURCE) -> Path:
    """Compile the shim (or another LD_PRELOAD ``source`` of this folder: the
    EIO shim) into ``folder``; its path."""
    what = source.stem.replace("_", " ")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ClockShimUnavailable(f"no C compiler (cc or gcc) to build the {what} (apt-get install gcc)")
    folder.mkdir(parents=True, exist_ok=True)
    library = folder / f"{source.stem}.so"
    done = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-o", str(library), str(source), "-ldl"],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise ClockShimUnavailable(f"the {what} did not build: {done.stderr.strip()[-500:]}")
    return library


def preload_env(library: Path, offset_file: Path) -> dict[str, str]:
    """The environment that puts a process under the shim, reading ``offset_file``."""
    return {"LD_PRELOAD": str(library), OFFSET_FILE_ENV: str(offset_file)}


def set_offset(offset_file: Path, offset_s: float) -> None:
    """The process's wall clock is ``offset_s`` seconds off the true time from
    now on (within RELOAD_S). Written whole and renamed into place, so the shim
    never reads half a number."""
    partial = offset_file.with_name(offset_file.name + ".partial")
    partial.write_text(f"{offset_s:+.3f}\n")
    os.replace(partial, offset_file)
