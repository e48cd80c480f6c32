"""The Docker image's entrypoint run for real, without Docker: ``python -m
broker.container`` as a child process configured only by apache/kafka-style
environment variables, then ``pybroker healthcheck`` and the image's own
HEALTHCHECK command (the same environment, as `docker exec` has it), a
confluent-kafka round trip, SIGTERM, and a second start on the same storage;
a controller-only node's HEALTHCHECK; and a data directory the node's user
cannot write (a root-owned bind mount), refused in one line."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, START_TIMEOUT_S, STARTED_LINE, STOP_TIMEOUT_S
from tests.interop._support import Msg, consume, produce, unique_topic

HEALTHCHECK_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Entrypoint:
    """The container entrypoint as a child process; once it execs, the same PID is the broker."""

    def __init__(self, env: dict[str, str], cwd: Path, **popen_options):
        self.output: list[str] = []
        # The test process's own KAFKA_ variables, if any, must not leak into the node.
        self.process = subprocess.Popen(
            [sys.executable, "-m", "broker.container"],
            cwd=cwd, env=child_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            **popen_options,
        )
        self._started = threading.Event()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        for line in self.process.stdout:
            self.output.append(line)
            if STARTED_LINE.search(line):
                self._started.set()
        self._started.set()

    def wait_started(self) -> None:
        if not self._started.wait(START_TIMEOUT_S) or self.process.poll() is not None:
            self.stop()
            raise AssertionError("the entrypoint did not start a broker:\n" + self.text())

    def stop(self) -> int:
        """SIGTERM, as `docker stop` sends it; SIGKILL only if it hangs (then the test fails)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
                self._reader.join(5)
                raise AssertionError("the broker did not stop on SIGTERM:\n" + self.text()) from None
        self._reader.join(5)
        return self.process.returncode

    def text(self) -> str:
        return "".join(self.output)


def child_env(env: dict[str, str]) -> dict[str, str]:
    """The test's environment without its own KAFKA_ variables, plus ``env`` and this checkout."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_") and k != "CLUSTER_ID"}
    full_env.update(env)
    full_env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    return full_env


def image_healthcheck_command() -> list[str]:
    """The Dockerfile's HEALTHCHECK CMD, run with this interpreter."""
    text = (PROJECT_ROOT / "docker" / "Dockerfile").read_text().replace("\\\n", " ")
    line = next(l for l in text.splitlines() if l.startswith("HEALTHCHECK "))
    command = json.loads(line.split(" CMD ", 1)[1])
    assert command[0] == "python"
    return [sys.executable, *command[1:]]


def image_healthcheck(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """The image's HEALTHCHECK as Docker runs it: in the container's environment."""
    return subprocess.run(
        image_healthcheck_command(), env=child_env(env), cwd=cwd,
        capture_output=True, text=True, timeout=HEALTHCHECK_TIMEOUT_S, check=False,
    )


def healthcheck(bootstrap: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "healthcheck", "--bootstrap-server", bootstrap, "--timeout", "5", *extra],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=HEALTHCHECK_TIMEOUT_S, check=False,
    )


def test_entrypoint_configures_formats_serves_and_stops(tmp_path):
    from storage.meta_properties import new_cluster_id

    broker_port, controller_port = free_port(), free_port()
    log_dir = tmp_path / "data"
    cluster_id = new_cluster_id()
    env = {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@127.0.0.1:{controller_port}",
        "KAFKA_LOG_DIRS": str(log_dir),
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_HEAP_OPTS": "-Xmx1G",  # a JVM setting: ignored, not a broker key
        "CLUSTER_ID": cluster_id,
    }
    bootstrap = f"127.0.0.1:{broker_port}"

    node = Entrypoint(env, tmp_path)
    try:
        node.wait_started()
        assert f"cluster.id={cluster_id}" in node.text()
        assert "KAFKA_HEAP_OPTS is a JVM/launcher setting" in node.text()
        assert "formatted" in node.text()
        written = (log_dir / "server.properties").read_text()
        assert f"controller.quorum.voters=1@127.0.0.1:{controller_port}" in written
        assert "heap.opts" not in written

        healthy = healthcheck(bootstrap)
        assert healthy.returncode == 0, healthy.stderr
        # The image's HEALTHCHECK knows no port: it reads the config the entrypoint wrote.
        image = image_healthcheck(env, tmp_path)
        assert image.returncode == 0, image.stdout + image.stderr
        assert image.stdout == f"127.0.0.1:{broker_port} is healthy: node 1 of cluster {cluster_id}, 1 live broker(s)\n"
        assert "node 1" in healthy.stdout
        wrong = healthcheck(bootstrap, "--node-id", "7")
        assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1, wrong.stderr

        topic = unique_topic("container")
        msgs = [Msg(key=f"k{i}".encode(), value=f"v{i}".encode()) for i in range(5)]
        assert produce("confluent", bootstrap, topic, msgs) == list(range(5))
        got = consume("confluent", bootstrap, topic, 5)
        assert [(g.key, g.value) for g in got] == [(m.key, m.value) for m in msgs]
    finally:
        code = node.stop()
    # The entrypoint exec'd the broker: SIGTERM reached it and it shut down cleanly.
    assert code == 0, node.text()
    stopped = image_healthcheck(env, tmp_path)
    assert stopped.returncode == 1 and stopped.stderr.startswith("pybroker healthcheck: cannot connect"), stopped.stderr
    assert stopped.stderr.count("\n") == 1
    assert "pybroker stopped" in node.text()
    meta = (log_dir / "meta.properties").read_text()  # directory.id is random: a reformat would change it

    again = Entrypoint({k: v for k, v in env.items() if k != "CLUSTER_ID"}, tmp_path)
    try:
        again.wait_started()
        assert "already formatted" in again.text()
        assert f"cluster.id={cluster_id}" in again.text()
        assert (log_dir / "meta.properties").read_text() == meta
        assert consume("confluent", bootstrap, topic, 5) == got  # the data survived the restart
    finally:
        assert again.stop() == 0, again.text()


def test_entrypoint_refuses_a_cluster_without_cluster_id(tmp_path):
    controller_port = free_port()
    env = {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "controller",
        "KAFKA_LISTENERS": f"CONTROLLER://127.0.0.1:{controller_port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@127.0.0.1:{controller_port}",
        "KAFKA_LOG_DIRS": str(tmp_path / "data"),
    }
    node = Entrypoint(env, tmp_path)
    try:
        node.process.wait(START_TIMEOUT_S)
    finally:
        node.stop()
    assert node.process.returncode == 1
    assert node.text().strip().splitlines() == [
        "pybroker container: CLUSTER_ID is not set: the nodes of a multi-node cluster are formatted with one "
        "shared id (make one with 'pybroker storage random-uuid')"
    ]


def test_healthcheck_fails_with_one_line_when_nothing_listens():
    result = healthcheck(f"127.0.0.1:{free_port()}")
    assert result.returncode == 1
    assert result.stderr.startswith("pybroker healthcheck: cannot connect") and result.stderr.count("\n") == 1


def test_image_healthcheck_of_a_controller_only_node(tmp_path):
    from storage.meta_properties import new_cluster_id

    controller_port = free_port()
    env = {
        "KAFKA_NODE_ID": "3",
        "KAFKA_PROCESS_ROLES": "controller",
        "KAFKA_LISTENERS": f"CONTROLLER://:{controller_port}",  # every interface, as in a container
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"3@127.0.0.1:{controller_port}",
        "KAFKA_LOG_DIRS": str(tmp_path / "data"),
        "CLUSTER_ID": new_cluster_id(),
    }
    node = Entrypoint(env, tmp_path)
    try:
        # As Docker does: the check runs until it passes (the start line names no host to wait on here).
        deadline = time.monotonic() + START_TIMEOUT_S
        image = image_healthcheck(env, tmp_path)
        while image.returncode != 0 and node.process.poll() is None and time.monotonic() < deadline:
            image = image_healthcheck(env, tmp_path)
        assert image.returncode == 0, image.stdout + image.stderr + node.text()
        assert image.stdout == f"127.0.0.1:{controller_port} is healthy: controller 3 answers ApiVersions\n"
    finally:
        assert node.stop() == 0, node.text()


NOBODY = "nobody"
# The entrypoint as another user: the interpreter and its modules are loaded as
# root (they may live where nobody else can read), then it drops to the user
# and runs as the image's ENTRYPOINT does.
AS_USER = """
import argparse, locale, os, sys
import broker.container
argparse.ArgumentParser().parse_args([])  # loads what argparse loads lazily (gettext's translations)
os.setgroups([])
os.setgid(int(sys.argv[2]))
os.setuid(int(sys.argv[1]))
sys.exit(broker.container.main([]))
"""


def test_a_data_directory_the_user_cannot_write_is_refused_in_one_line():
    """A bind mount keeps its host owner: the entrypoint, run as a user who
    cannot write the data directory (as root: dropped to nobody; otherwise a
    directory without write permission), exits with the storage exit code and
    one line saying what to do."""
    # A world-searchable place: pytest's tmp_path is private to this user.
    base = Path(tempfile.mkdtemp(prefix="pybroker-bind-"))
    base.chmod(0o755)
    data = base / "pybroker"
    data.mkdir(mode=0o755)
    env = {"KAFKA_LISTENERS": f"PLAINTEXT://127.0.0.1:{free_port()}", "KAFKA_LOG_DIRS": str(data)}
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam(NOBODY)
        except KeyError:
            pytest.skip(f"no user {NOBODY!r} to drop root privileges to")
        uid = user.pw_uid
        command = [sys.executable, "-c", AS_USER, str(uid), str(user.pw_gid)]
    else:
        data.chmod(0o555)
        uid = os.geteuid()
        command = [sys.executable, "-m", "broker.container"]
    try:
        done = subprocess.run(command, env=child_env(env), cwd=base, capture_output=True, text=True,
                              timeout=START_TIMEOUT_S, check=False)
        left = list(data.iterdir())
    finally:
        data.chmod(0o755)
        shutil.rmtree(base)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout == ""
    line = done.stderr
    assert line.count("\n") == 1, line
    assert line.startswith(
        f"pybroker container: the data directory {data} is not writable by uid {uid} ({data} is owned by "
    ), line
    assert line.endswith("or run with --user as its owner (docker run --user UID:GID, or user: \"UID:GID\" in compose)\n"), line
    assert left == []  # not even the config file
