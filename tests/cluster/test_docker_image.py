"""docker/Dockerfile built and run by a Docker engine, where one answers
(``docker info``, honouring DOCKER_HOST) and the image's base is there or can
be pulled; skips saying which is missing otherwise (without an engine,
tests/interop/test_container_entrypoint.py and tests/cluster/test_compose_topology.py
run the same entrypoint and topology as processes).

* The ``docker run`` cluster of docs/clusters.md: three combined nodes on a user-defined
  network, each reaching the others by container name, all three reported
  healthy by the image's own HEALTHCHECK (which needs the quorum: a broker is
  healthy once it is registered and unfenced), on ports other than 9092.
* A bind mount the image's user cannot write: one line, exit code 3."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BUILD_BOUND_S = 900
HEALTHY_BOUND_S = 120
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"docker {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done


def base_image() -> str:
    text = (PROJECT_ROOT / "docker" / "Dockerfile").read_text()
    return re.search(r"^FROM\s+(\S+)", text, re.M).group(1)


@pytest.fixture(scope="module")
def image():
    """The image built from this checkout, removed afterwards."""
    if shutil.which("docker") is None:
        pytest.skip("no docker command")
    try:
        info = docker("info", "--format", "{{.ServerVersion}}", timeout=30, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("docker info did not answer in 30 s")
    if info.returncode != 0:
        pytest.skip(f"no Docker engine answers: {(info.stderr or info.stdout).strip()[:200]}")
    base = base_image()
    if docker("image", "inspect", base, check=False).returncode != 0:
        pulled = docker("pull", base, timeout=600, check=False)
        if pulled.returncode != 0:
            pytest.skip(f"the base image {base} is not here and cannot be pulled: {pulled.stderr.strip()[:200]}")
    tag = f"pybroker-test:{uuid.uuid4().hex[:8]}"
    docker("build", "-f", "docker/Dockerfile", "-t", tag, str(PROJECT_ROOT), timeout=BUILD_BOUND_S)
    try:
        yield tag
    finally:
        docker("image", "rm", "-f", tag, check=False)


def health(container: str) -> str:
    done = docker("inspect", "--format", "{{.State.Health.Status}}", container, check=False)
    return done.stdout.strip()


def test_docker_run_cluster_on_a_user_defined_network(image):
    network = f"pybroker-{uuid.uuid4().hex[:6]}"
    names = [f"{network}-c{i}" for i in (1, 2, 3)]
    voters = ",".join(f"{i}@{name}:19093" for i, name in enumerate(names, 1))
    docker("network", "create", network)
    try:
        for node_id, name in enumerate(names, 1):
            docker(
                "run", "-d", "--name", name, "--network", network,
                "--health-interval", "2s", "--health-start-period", "60s",
                "-e", f"KAFKA_NODE_ID={node_id}", "-e", "KAFKA_PROCESS_ROLES=broker,controller",
                "-e", "KAFKA_LISTENERS=PLAINTEXT://:19092,CONTROLLER://:19093",
                "-e", f"KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://{name}:19092",
                "-e", "KAFKA_CONTROLLER_LISTENER_NAMES=CONTROLLER",
                "-e", f"KAFKA_CONTROLLER_QUORUM_VOTERS={voters}",
                "-e", f"CLUSTER_ID={CLUSTER_ID}", "-e", "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR=3",
                image,
            )
        deadline = time.monotonic() + HEALTHY_BOUND_S
        states = {}
        while time.monotonic() < deadline:
            states = {name: health(name) for name in names}
            if all(state == "healthy" for state in states.values()) or "unhealthy" in states.values():
                break
            time.sleep(1)
        logs = "".join(docker("logs", "--tail", "20", name, check=False).stdout for name in names)
        assert set(states.values()) == {"healthy"}, f"{states}\n{logs}"
        # One node asks another by its container name: the network resolves it.
        asked = docker("exec", names[0], "pybroker", "healthcheck", "--bootstrap-server", f"{names[2]}:19092",
                       "--node-id", "3", check=False)
        assert asked.returncode == 0, asked.stdout + asked.stderr
        assert "3 live broker(s)" in asked.stdout
    finally:
        for name in names:
            docker("rm", "-f", "-v", name, check=False, timeout=60)
        docker("network", "rm", network, check=False)


def test_a_root_owned_bind_mount_is_refused_in_one_line(image):
    mount = Path(tempfile.mkdtemp(prefix="pybroker-mount-"))
    try:
        mount.chmod(0o755)  # and owned by whoever runs the test: not uid 1000 when that is root
        if mount.stat().st_uid == 1000:
            pytest.skip("the test runs as uid 1000, the image's user: its directory is writable")
        done = docker("run", "--rm", "--network", "none", "-v", f"{mount}:/var/lib/pybroker", image,
                      check=False, timeout=120)
        assert done.returncode == 3, done.stdout + done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(
            "pybroker container: the data directory /var/lib/pybroker is not writable by uid 1000 "
        ), done.stderr
        assert list(mount.iterdir()) == []
    finally:
        shutil.rmtree(mount, ignore_errors=True)
