"""The eio nemesis' mechanism: tests/faults/eio_shim.c, an LD_PRELOAD shim
that makes writes and syncs fail with EIO for the files under the directories
its control file names (a failing disk under one log dir), built with the C
compiler into a run's folder as the clock shim is (tests/faults/clock.py).

A shim rather than device-mapper (dm-error / dm-flakey) or a FUSE layer: it
needs no kernel module, block device or FUSE mount in the namespaces, works
on the brokers' tmpfs, and fails exactly one log dir of one process while the
other dir on the same tmpfs keeps working.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.faults.clock import ClockShimUnavailable, build_shim

SHIM_SOURCE = Path(__file__).with_name("eio_shim.c")
CONTROL_FILE_ENV = "EIO_SHIM_CONTROL_FILE"
# The shim reads its control file again at most this often (RELOAD_NS in eio_shim.c).
RELOAD_S = 0.02
# Comes from build_shim: no compiler, or the shim did not build.
EioShimUnavailable = ClockShimUnavailable


def build_eio_shim(folder: Path) -> Path:
    """Compile the shim into ``folder``; its path."""
    return build_shim(folder, SHIM_SOURCE)


def preload_env(library: Path, control_file: Path) -> dict[str, str]:
    """The environment that puts a process under the shim, reading ``control_file``."""
    return {"LD_PRELOAD": str(library), CONTROL_FILE_ENV: str(control_file)}


def set_failing(control_file: Path, directories: list[Path]) -> None:
    """From now on (within RELOAD_S) writes and syncs under ``directories`` fail
    with EIO; an empty list ends that. Written whole and renamed into place,
    so the shim never reads half a list."""
    partial = control_file.with_name(control_file.name + ".partial")
    partial.write_text("".join(f"{os.path.abspath(d)}\n" for d in directories))
    os.replace(partial, control_file)
