"""The code blocks of README.md and docs/*.md, and running them as a reader would.

A reader pastes a page's blocks in order into one shell, in one directory, with
brokers started by the page itself (``pybroker start ...`` in the foreground of
another terminal). ``Workspace`` does that in a temporary directory holding a
copy of ``configs/``: every ``:PORT`` of the page's blocks and of the copied
configs is moved to a free port (the same free port everywhere on the page), a
``pybroker start`` line runs in the background until it prints
``pybroker started``, and ``pybroker``, ``python`` and ``python3`` are this
checkout's. Nothing is written into the checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests import ports

PROJECT_ROOT = Path(__file__).resolve().parents[2]

SHELL_LANGUAGES = frozenset({"sh", "shell", "bash", "console"})
RUNNABLE_LANGUAGES = SHELL_LANGUAGES | {"python"}

# A block after an HTML comment starting with this starts its servers beside the
# running ones (a broker joining the cluster a page started) instead of in their place.
JOINS_MARKER = "joins the running servers"
# Commands that serve until they are stopped, and the stdout line saying they are ready.
LONG_RUNNING_READY_LINES = {"pybroker start": "pybroker started", "pybroker dev-cluster": "bootstrap.servers="}
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30
BLOCK_TIMEOUT_S = 180

# The broker a page's blocks talk to when the page starts none itself: the quick start's.
DEFAULT_BROKER_COMMAND = "pybroker start --config configs/server.properties"
DEFAULT_BROKER_PORT = 9092

_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_MARKER = re.compile(r"^\s*<!--(.*?)-->\s*$")
# A port as the docs write one: right after a colon (host:port, a listener URL, a voter).
_PORT = re.compile(r"(?<=:)(\d{4,5})\b")
_ADDRESS = re.compile(r"(?:127\.0\.0\.1|localhost):(\d{4,5})\b")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
# `pybroker dev-cluster --base-port P` uses 5 ports a node from P on.
_BASE_PORT = re.compile(r"--base-port[ =](\d{4,5})\b")
BASE_PORT_RUN = 50


@dataclass(frozen=True)
class Block:
    page: str  # relative to the project root, e.g. "docs/cli.md"
    language: str
    text: str
    line: int  # of the opening fence, 1-based
    marker: str  # the HTML comment right before the fence, "" without one

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def page_blocks(page: str) -> list[Block]:
    """Every fenced block of a page, indented ones (in list items) dedented."""
    lines = (PROJECT_ROOT / page).read_text().splitlines()
    found = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, language = len(opening.group(1)), opening.group(2)
        previous = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = _MARKER.match(previous)
        end = i + 1
        while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
            end += 1
        body = "\n".join(line[indent:] if line[:indent].strip() == "" else line for line in lines[i + 1:end])
        found.append(Block(page, language, body + "\n", i + 1, marker.group(1).strip() if marker else ""))
        i = end + 1
    return found


def shell_script(block: Block) -> str:
    """A shell block as a script: a ``console`` block's ``$ `` lines, other blocks as they are."""
    if block.language != "console":
        return block.text
    commands = [line[2:] for line in block.text.splitlines() if line.startswith("$ ")]
    return "\n".join(commands) + "\n"


def commands(script: str) -> list[str]:
    """The script's commands: lines joined where they end in a backslash, here-documents kept whole."""
    found, lines, i = [], script.splitlines(), 0
    while i < len(lines):
        command = lines[i]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command += "\n" + lines[i]
        heredoc = _HEREDOC.search(command)
        if heredoc:
            while i + 1 < len(lines):
                i += 1
                command += "\n" + lines[i]
                if lines[i].strip() == heredoc.group(2):
                    break
        found.append(command)
        i += 1
    return found


def long_running_ready_line(command: str) -> str | None:
    stripped = command.strip()
    for prefix, ready in LONG_RUNNING_READY_LINES.items():
        if stripped == prefix or stripped.startswith(prefix + " "):
            return ready
    return None


def free_port() -> int:
    # Outside the ephemeral range: the page's own servers dial each other meanwhile.
    return ports.free_port()


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port_run(count: int, taken: set[int]) -> int:
    """The first of ``count`` consecutive ports that are free now and not in ``taken``."""
    for _ in range(200):
        start = ports.free_port(taken)
        run = set(range(start, start + count))
        if start + count <= 65536 and not run & taken and all(bindable(p) for p in run):
            return start
    raise RuntimeError(f"no {count} consecutive free ports found")


def ports_in(text: str) -> set[int]:
    return {int(p) for p in _PORT.findall(text) if 1024 <= int(p) <= 65535}


def serving(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class BlockFailed(AssertionError):
    pass


class Workspace:
    """One page's directory, port map and running servers."""

    def __init__(self, root: Path, blocks: list[Block]):
        self.root = root
        shutil.copytree(PROJECT_ROOT / "configs", root / "configs")
        configs_text = "".join(p.read_text() for p in sorted((root / "configs").rglob("*.properties")))
        wanted = ports_in(configs_text) | {DEFAULT_BROKER_PORT}
        for block in blocks:
            wanted |= ports_in(block.text)
        self.ports = {port: free_port() for port in sorted(wanted)}
        for block in blocks:
            for base in _BASE_PORT.findall(block.text):
                taken = set(self.ports.values()) - {self.ports[int(base)]}
                self.ports[int(base)] = free_port_run(BASE_PORT_RUN, taken)
        for path in (root / "configs").rglob("*.properties"):
            path.write_text(self.rewrite(path.read_text()))
        bin_dir = root / ".bin"
        bin_dir.mkdir()
        tmp_dir = root / ".tmp"
        tmp_dir.mkdir()
        for name, target in (("pybroker", f'"{sys.executable}" -m broker'), ("python", f'"{sys.executable}"'), ("python3", f'"{sys.executable}"')):
            shim = bin_dir / name
            shim.write_text(f'#!/bin/sh\nexec {target} "$@"\n')
            shim.chmod(0o755)
        self.env = dict(
            os.environ,
            PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            TMPDIR=str(tmp_dir),
        )
        # The running long-running commands: (process, command, log file).
        self.servers: list[tuple[subprocess.Popen, str, Path]] = []
        self._logs = 0

    def rewrite(self, text: str) -> str:
        return _PORT.sub(lambda m: str(self.ports.get(int(m.group(1)), m.group(1))), text)

    # ------------------------------------------------------------------ blocks

    def run(self, block: Block) -> None:
        if block.language == "python":
            self._needs_broker(block.text)
            self._check(block, [sys.executable, "-c", self.rewrite(block.text)], block.text)
            return
        script = shell_script(block)
        joins = block.marker.startswith(JOINS_MARKER)
        before: list[str] = []
        starts: list[tuple[str, str]] = []  # consecutive long-running commands, started together
        for command in commands(script):
            ready = long_running_ready_line(command)
            if ready is None:
                if starts and (not command.strip() or command.strip().startswith("#")):
                    continue  # a blank or comment line between the nodes of one cluster
                if starts:
                    self.start_servers(starts, block.where, joins=joins)
                    starts = []
                before.append(command)
                continue
            if before:
                self._run_shell(block, "\n".join(before))
                before = []
            starts.append((self.rewrite(command), ready))
        if starts:
            self.start_servers(starts, block.where, joins=joins)
        if before:
            self._run_shell(block, "\n".join(before))

    def _run_shell(self, block: Block, script: str) -> None:
        self._needs_broker(script)
        self._check(block, ["bash", "-c", "set -euo pipefail\n" + self.rewrite(script)], script)

    def _check(self, block: Block, argv: list[str], shown: str) -> None:
        # A session of its own, killed afterwards: whatever the block left running
        # in the background (a `cmd &`) goes with it instead of outliving the test.
        process = subprocess.Popen(
            argv, cwd=self.root, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            stdout, stderr = process.communicate(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _kill_session(process)
            stdout, stderr = process.communicate()
            raise BlockFailed(f"{block.where}: still running after {BLOCK_TIMEOUT_S} s:\n{shown}\n{stdout[-3000:]}\n{stderr[-3000:]}") from None
        finally:
            _kill_session(process)
        if process.returncode != 0 or "Traceback (most recent call last)" in stderr:
            raise BlockFailed(
                f"{block.where}: exit code {process.returncode}\n--- block\n{shown}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-5000:]}"
            )

    def _needs_broker(self, text: str) -> None:
        """Start the page's default broker for a block that talks to its port when nothing serves it."""
        if DEFAULT_BROKER_PORT in {int(p) for p in _ADDRESS.findall(text)} and not serving(self.ports[DEFAULT_BROKER_PORT]):
            self.start_server(DEFAULT_BROKER_COMMAND, "pybroker started", "the page's default broker")

    # ------------------------------------------------------------------ servers

    def start_server(self, command: str, ready_line: str, where: str) -> None:
        self.start_servers([(command, ready_line)], where)

    def start_servers(self, started: list[tuple[str, str]], where: str, joins: bool = False) -> None:
        """Run long-running commands in the background, all at once, until each
        printed its ready line (the ones running before are stopped first, unless
        the new ones ``joins`` them)."""
        if not joins:
            self.stop_server()
        for command, _ in started:
            self._logs += 1
            log_path = self.root / f"server-{self._logs}.log"
            with open(log_path, "w") as log:
                process = subprocess.Popen(
                    ["bash", "-c", "exec " + command], cwd=self.root, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.servers.append((process, command, log_path))
        deadline = time.monotonic() + START_TIMEOUT_S
        for (process, command, log_path), (_, ready_line) in zip(self.servers[-len(started):], started):
            while time.monotonic() < deadline:
                if ready_line in log_path.read_text():
                    break
                if process.poll() is not None:
                    deadline = 0
                    break
                time.sleep(0.1)
            else:
                deadline = 0
            if ready_line not in log_path.read_text():
                outputs = "\n".join(f"--- {c}\n{p.read_text()[-3000:]}" for _, c, p in self.servers)
                self.stop_server(check=False)
                raise BlockFailed(f"{where}: {command!r} did not print {ready_line!r} within {START_TIMEOUT_S} s:\n{outputs}")

    def stop_server(self, check: bool = True) -> None:
        """Stop the running servers as Ctrl-C does; each must exit 0 without a traceback."""
        servers, self.servers = self.servers, []
        for process, _, _ in servers:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        failures = []
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process, command, log_path in servers:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
                failures.append(f"{command!r} did not stop within {STOP_TIMEOUT_S} s of SIGINT")
            _kill_session(process)
            output = log_path.read_text()
            if process.returncode != 0 or "Traceback (most recent call last)" in output:
                failures.append(f"{command!r} exited {process.returncode} on SIGINT:\n{output[-5000:]}")
        if check and failures:
            raise BlockFailed("\n".join(failures))


def _kill_session(process: subprocess.Popen) -> None:
    """SIGKILL what is left of the session ``process`` leads (its own pid is its session's id)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
