"""``pybroker dev-cluster --nodes 3`` as a user runs it: one bootstrap line once
ready, RF=3 defaults, a confluent-kafka round trip, a node killed (reported, not
restarted by itself, the others serving), restarted on request with the ISR
back to three, then SIGINT stops every process (each on its SIGTERM, none killed
after the stop timeout) and leaves no listener."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from broker.config import parse_properties
from tests.conftest import PROJECT_ROOT

READY_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60


class Lines:
    """A pipe's lines, read by a thread, waited for with a deadline."""

    def __init__(self, stream):
        self.all: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in stream:
            self.all.append(line.rstrip("\n"))
            self._queue.put(line.rstrip("\n"))

    def wait_for(self, predicate, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no such line within {timeout_s} s; got {self.all}")
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if predicate(line):
                return line


def wait_until(predicate, timeout_s: float, interval_s: float = 0.25):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of the (still running) dev-cluster counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def node_ports(config_file: Path) -> list[int]:
    raw = parse_properties(config_file.read_text())
    urls = [raw["console.listener"], raw["rest.listener"], raw["metrics.listener"]]
    urls += raw["listeners"].split(",")
    return [int(url.rstrip("/").rsplit(":", 1)[1]) for url in urls]


def isr_sizes(admin: AdminClient, topic: str) -> list[int] | None:
    try:
        description = admin.describe_topics(TopicCollection([topic]), request_timeout=5)[topic].result(timeout=10)
    except Exception:
        return None
    return [len(p.isr) for p in description.partitions]


def replicas_on(admin: AdminClient, broker_id: int) -> int:
    """How many partition replicas the cluster's metadata places on ``broker_id``."""
    try:
        topics = admin.list_topics(timeout=10).topics
    except Exception:  # a broker between states: ask again
        return 0
    return sum(broker_id in p.replicas for t in topics.values() for p in t.partitions.values())


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.fixture
def dev_cluster(tmp_path):
    data_dir = tmp_path / "dev"
    env = _env()
    process = subprocess.Popen(
        [sys.executable, "-m", "broker", "dev-cluster", "--nodes", "3", "--data-dir", str(data_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )
    out, err = Lines(process.stdout), Lines(process.stderr)
    try:
        yield process, data_dir, out, err
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
        # Whatever happened, no node outlives the test.
        for pid_file in data_dir.glob("*-*.pid"):  # node-N and broker-N
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        for log in sorted(data_dir.glob("*-*.log")):
            sys.stderr.write(f"---- {log.name} (tail)\n" + "".join(log.read_text(errors="replace").splitlines(True)[-30:]))


def test_dev_cluster_round_trip_node_loss_restart_and_stop(dev_cluster):
    process, data_dir, out, err = dev_cluster
    line = out.wait_for(lambda l: l.startswith("bootstrap.servers="), READY_TIMEOUT_S)
    bootstrap = line.split("=", 1)[1]
    assert len(bootstrap.split(",")) == 3
    out.wait_for(lambda l: l.startswith("node 3: console http://"), 5)

    configs = {n: parse_properties((data_dir / f"node-{n}.properties").read_text()) for n in (1, 2, 3)}
    for config in configs.values():
        assert (config["default.replication.factor"], config["min.insync.replicas"]) == ("3", "2")
        assert (config["offsets.topic.replication.factor"], config["transaction.state.log.replication.factor"],
                config["transaction.state.log.min.isr"]) == ("3", "3", "2")
    pids = {n: int((data_dir / f"node-{n}.pid").read_text()) for n in (1, 2, 3)}
    assert all(alive(pid) for pid in pids.values())
    for n in (1, 2, 3):
        assert (data_dir / f"node-{n}.log").stat().st_size > 0

    # A topic with the cluster's default replication factor: three replicas.
    topic = f"dev-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2)], request_timeout=20)[topic].result(timeout=30)
    assert wait_until(lambda: isr_sizes(admin, topic) == [3, 3], 30)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(20):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < 20 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value().decode())
    consumer.close()
    assert seen == {f"v{i}" for i in range(20)}

    # Node 2 dies: dev-cluster says so, restarts nothing, the others serve on.
    os.kill(pids[2], signal.SIGKILL)
    report = err.wait_for(lambda l: "node 2 " in l, 30)
    assert f"node 2 (pid {pids[2]}) was killed by SIGKILL" in report and "node-2.log" in report
    assert not (data_dir / "node-2.pid").exists()
    assert wait_until(lambda: isr_sizes(admin, topic) == [2, 2], 30)
    assert alive(pids[1]) and alive(pids[3])
    assert not any(alive(pid) for pid in _pids_of_config(data_dir / "node-2.properties"))
    producer.produce(topic, value=b"while-2-is-down", partition=0)
    assert producer.flush(30) == 0

    # Restarted only on request, on its own data: the ISR heals back to three.
    process.stdin.write("restart 2\n")
    process.stdin.flush()
    err.wait_for(lambda l: "node 2 started again" in l, 10)
    new_pid = int((data_dir / "node-2.pid").read_text())
    assert new_pid != pids[2] and alive(new_pid)
    assert wait_until(lambda: isr_sizes(admin, topic) == [3, 3], 60), isr_sizes(admin, topic)

    # add-broker: a broker-only node joins the running cluster, and the balancer
    # (balancer.mode's default, node_add) moves replicas onto it by itself.
    process.stdin.write("add-broker\n")
    process.stdin.flush()
    joined = out.wait_for(lambda l: l.startswith("broker 4 joined"), 90)
    assert "pybroker cluster balance" in joined
    added = parse_properties((data_dir / "broker-4.properties").read_text())
    assert added["process.roles"] == "broker" and added["cluster.id"] == configs[1]["cluster.id"]
    pids[4] = int((data_dir / "broker-4.pid").read_text())
    assert wait_until(lambda: replicas_on(admin, 4) > 0, 90), "the balancer moved nothing onto broker 4"

    # SIGINT: every node stops, dev-cluster exits 0, nothing listens any more.
    ports = [port for n in (1, 2, 3) for port in node_ports(data_dir / f"node-{n}.properties")]
    ports += node_ports(data_dir / "broker-4.properties")
    assert listening(ports[0])
    process.send_signal(signal.SIGINT)
    assert process.wait(STOP_TIMEOUT_S) == 0
    # Each node exited on its SIGTERM: none had to be killed after --stop-timeout.
    assert not [l for l in err.all if "did not stop within" in l], err.all
    for pid in (pids[1], new_pid, pids[3], pids[4]):
        assert not alive(pid)
    assert [port for port in ports if listening(port)] == []
    assert sum(1 for l in out.all if l.startswith("bootstrap.servers=")) == 1
    assert not list(data_dir.glob("*-*.pid"))

    # The same data dir later: the same cluster again, the added broker in it, its records kept.
    again = subprocess.Popen(
        [sys.executable, "-m", "broker", "dev-cluster", "--nodes", "3", "--data-dir", str(data_dir)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )
    try:
        again_out, again_err = Lines(again.stdout), Lines(again.stderr)
        broker_4 = f"127.0.0.1:{added['listeners'].rsplit(':', 1)[1]}"
        assert again_out.wait_for(lambda l: l.startswith("bootstrap.servers="), READY_TIMEOUT_S) == f"{line},{broker_4}"
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g2-{topic}", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        count = 0
        deadline = time.monotonic() + 60
        while count < 21 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            count += message is not None and message.error() is None
        consumer.close()
        assert count == 21
    finally:
        again.send_signal(signal.SIGINT)
        assert again.wait(STOP_TIMEOUT_S) == 0
    assert not [l for l in again_err.all if "did not stop within" in l], again_err.all
    assert [port for port in ports if listening(port)] == []


def _pids_of_config(config_file: Path) -> list[int]:
    """Processes whose command line names ``config_file`` (none once it is dead)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(config_file).encode() in cmdline:
                pids.append(int(entry.name))
    return pids


def test_dev_cluster_refuses_a_data_dir_of_another_size_and_a_wildcard_host(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "node-1.properties").write_text("node.id=1\n")
    answer = subprocess.run(
        [sys.executable, "-m", "broker", "dev-cluster", "--nodes", "3", "--data-dir", str(tmp_path / "d")],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert answer.returncode == 1 and "holds a dev cluster of 1 node(s), not --nodes 3" in answer.stderr
    answer = subprocess.run(
        [sys.executable, "-m", "broker", "dev-cluster", "--nodes", "1", "--host", "0.0.0.0", "--data-dir", str(tmp_path / "e")],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert answer.returncode == 1 and "give the address clients connect to" in answer.stderr
