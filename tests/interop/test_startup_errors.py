"""Start-up problems a user can fix end in one line on stderr and exit code 2,
never a traceback (a crash exits 1 with one)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.conftest import PROJECT_ROOT


def start(tmp_path, **overrides) -> subprocess.CompletedProcess:
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "logs"), **overrides}
    command = [sys.executable, "-m", "broker", "start"]
    for key, value in settings.items():
        command += ["--override", f"{key}={value}"]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)


def one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("pybroker: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_port_in_use_names_the_listener_and_the_address(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line(start(tmp_path, listeners=f"PLAINTEXT://127.0.0.1:{port}"))
    assert f"PLAINTEXT://127.0.0.1:{port}" in line and "(listeners)" in line and "another process uses that port" in line


def test_a_log_dir_that_cannot_be_made_names_the_directory(tmp_path):
    (tmp_path / "a-file").write_text("in the way")
    line = one_line(start(tmp_path, **{"log.dirs": str(tmp_path / "a-file" / "logs")}))
    assert f"log dir {tmp_path / 'a-file' / 'logs'} cannot be used" in line and "log.dirs" in line
