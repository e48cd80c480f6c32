"""Start-up problems a user can fix end in exactly one line on stderr, naming
what is wrong and what to do, and the exit code of their kind (2 config,
3 storage, 4 listener; see ``pybroker start --help``), never a traceback
(a crash exits 1 with one)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from broker.cli import EXIT_CONFIG, EXIT_LISTENER, EXIT_STORAGE
from storage.dir_lock import LOCK_FILE_NAME, DirLock
from storage.meta_properties import META_PROPERTIES, format_storage, new_cluster_id
from tests.conftest import PROJECT_ROOT

# A refusal comes before anything is served: a Python start-up and a few checks.
REFUSAL_BOUND_S = 10


def start(tmp_path, **overrides) -> tuple[subprocess.CompletedProcess, float]:
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "logs"), **overrides}
    command = [sys.executable, "-m", "broker", "start"]
    for key, value in settings.items():
        command += ["--override", f"{key}={value}"]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    started = time.monotonic()
    # Bounded: a broker that wrongly starts is killed by the timeout, failing the test.
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path, check=False)
    return result, time.monotonic() - started


def one_line(outcome: tuple[subprocess.CompletedProcess, float], exit_code: int) -> str:
    result, took_s = outcome
    assert result.returncode == exit_code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pybroker: "), result.stderr
    assert "pybroker started" not in result.stdout
    assert took_s < REFUSAL_BOUND_S
    return lines[0]


def test_a_bad_config_value_is_a_configuration_error(tmp_path):
    line = one_line(start(tmp_path, **{"num.partitions": "many"}), EXIT_CONFIG)
    assert "num.partitions" in line


def test_a_port_in_use_names_the_listener_and_the_address(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line(start(tmp_path, listeners=f"PLAINTEXT://127.0.0.1:{port}"), EXIT_LISTENER)
    assert f"PLAINTEXT://127.0.0.1:{port}" in line and "(listeners)" in line and "another process uses that port" in line
    assert "give listeners another port" in line


def test_a_controller_port_in_use_stops_the_node_before_it_joins_the_quorum(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        outcome = start(
            tmp_path,
            **{
                "node.id": "1",
                "cluster.id": new_cluster_id(),
                "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}",
                "controller.listener.names": "CONTROLLER",
                "controller.quorum.voters": f"1@127.0.0.1:{port}",
            },
        )
        line = one_line(outcome, EXIT_LISTENER)
    assert f"CONTROLLER://127.0.0.1:{port}" in line and "another process uses that port" in line


def test_a_log_dir_that_cannot_be_made_names_the_file_in_the_way(tmp_path):
    (tmp_path / "a-file").write_text("in the way")
    line = one_line(start(tmp_path, **{"log.dirs": str(tmp_path / "a-file" / "logs")}), EXIT_STORAGE)
    assert f"log dir {tmp_path / 'a-file' / 'logs'} cannot be made" in line
    assert f"{tmp_path / 'a-file'} is a file, not a directory" in line and "log.dirs" in line


def test_a_log_dir_that_cannot_be_written_is_refused_before_start_up(tmp_path):
    """An immutable directory (chattr +i): root may not create files in it either.
    Its .lock exists from an earlier run, so only the write probe can tell."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / LOCK_FILE_NAME).write_text("")
    made = subprocess.run(["chattr", "+i", str(logs)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make a directory immutable here (needs root and a file system with attributes): {made.stderr.strip()}")
    try:
        line = one_line(start(tmp_path), EXIT_STORAGE)
    finally:
        subprocess.run(["chattr", "-i", str(logs)], check=True)
    assert f"log dir {logs} is not writable" in line and "Operation not permitted" in line
    assert "chattr -i" in line and "log.dirs" in line
    assert sorted(p.name for p in logs.iterdir()) == [LOCK_FILE_NAME]  # nothing left behind


def test_a_log_dir_on_a_read_only_file_system_says_so(tmp_path):
    mount_point = tmp_path / "read-only"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount_point)], capture_output=True, text=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here (needs root with CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        line = one_line(start(tmp_path, **{"log.dirs": str(mount_point)}), EXIT_STORAGE)
        below = one_line(start(tmp_path, **{"log.dirs": str(mount_point / "logs")}), EXIT_STORAGE)
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)
    assert f"log dir {mount_point} is on a read-only file system" in line and "remount it read-write" in line
    assert f"log dir {mount_point / 'logs'} is on a read-only file system" in below


def test_a_log_dir_held_by_another_process_names_it(tmp_path):
    held = DirLock.acquire(tmp_path / "logs")
    try:
        line = one_line(start(tmp_path), EXIT_STORAGE)
    finally:
        held.release()
    assert f"log dir {tmp_path / 'logs'} is in use by process {os.getpid()}" in line


def test_a_cluster_id_other_than_meta_properties_names_both_ids_and_the_file(tmp_path):
    on_disk, configured = new_cluster_id(), new_cluster_id()
    format_storage([tmp_path / "logs"], 1, on_disk)
    line = one_line(start(tmp_path, **{"cluster.id": configured}), EXIT_STORAGE)
    assert "cluster id mismatch" in line and str(tmp_path / "logs" / META_PROPERTIES) in line
    assert f"cluster.id={on_disk}" in line and configured in line


def test_log_dirs_of_two_clusters_name_both_files(tmp_path):
    first, second = new_cluster_id(), new_cluster_id()
    format_storage([tmp_path / "a"], 1, first)
    format_storage([tmp_path / "b"], 1, second)
    line = one_line(start(tmp_path, **{"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}"}), EXIT_STORAGE)
    assert "cluster id mismatch" in line
    assert f"{tmp_path / 'a' / META_PROPERTIES} says cluster.id={first}" in line
    assert f"{tmp_path / 'b' / META_PROPERTIES} says cluster.id={second}" in line


def test_another_nodes_log_dir_names_both_node_ids(tmp_path):
    format_storage([tmp_path / "logs"], 2, new_cluster_id())
    line = one_line(start(tmp_path, **{"node.id": "1"}), EXIT_STORAGE)
    assert f"{tmp_path / 'logs' / META_PROPERTIES} says node.id=2" in line and "node.id is 1" in line


def test_unformatted_storage_of_a_multi_node_cluster_names_the_command_to_run(tmp_path):
    with socket.socket() as a, socket.socket() as b, socket.socket() as c:
        for s in (a, b, c):
            s.bind(("127.0.0.1", 0))
        ports = [s.getsockname()[1] for s in (a, b, c)]
    voters = ",".join(f"{node}@127.0.0.1:{port}" for node, port in zip((1, 2, 3), ports))
    outcome = start(
        tmp_path,
        **{
            "node.id": "1",
            "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{ports[0]}",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters,
        },
    )
    line = one_line(outcome, EXIT_STORAGE)
    assert "not formatted" in line and "pybroker storage format" in line


def test_the_exit_codes_are_documented_in_start_help():
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "broker", "start", "--help"], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert result.returncode == 0
    for code in (EXIT_CONFIG, EXIT_STORAGE, EXIT_LISTENER):
        assert f"\n  {code}    " in result.stdout
    assert "crashed" in result.stdout
