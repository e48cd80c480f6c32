"""docker/compose.yaml as it is written, run without a Docker engine: each
service is a process in its own network namespace (its hostname resolvable by
every other, all joined by a bridge), started through the image's entrypoint
with the service's environment; published ports are forwarded from the host's
127.0.0.1. Clients on the host (the EXTERNAL listeners) and in another
"container" (the INTERNAL ones) produce and consume through the RF=3 cluster.
Skips, saying why, where network namespaces cannot be made. Where a Docker
engine with compose answers, the same test runs ``docker compose up`` on the
file instead."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.faults.cluster import COMPOSE_FILE, load_services, wait_until
from tests.netns import NamespaceUnavailable, VirtualNetwork, check_available

pytest.importorskip("confluent_kafka")
pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema: pip install -e '.[test]'")
from confluent_kafka import Consumer, Producer  # noqa: E402 (after the skip)
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

PROJECT_ROOT = Path(__file__).resolve().parents[2]
START_BOUND_S = 90
STOP_BOUND_S = 20
MESSAGES = 500


class _Pipe(socketserver.BaseRequestHandler):
    """One forwarded connection: bytes both ways until either side closes."""

    def handle(self):
        upstream = socket.create_connection(self.server.target, timeout=10)
        upstream.settimeout(None)

        def pump(source, sink):
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                for s in (source, sink):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        back = threading.Thread(target=pump, args=(upstream, self.request), daemon=True)
        back.start()
        pump(self.request, upstream)
        back.join(5)
        upstream.close()


class PublishedPort(socketserver.ThreadingTCPServer):
    """``ports: "P:P"``: 127.0.0.1:P on the host to the service's P."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, target: tuple[str, int]):
        super().__init__(("127.0.0.1", port), _Pipe)
        self.target = target
        threading.Thread(target=self.serve_forever, daemon=True).start()


def produce_values(bootstrap: str, topic: str, prefix: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, f"{prefix}-{i}".encode())
    assert producer.flush(60) == 0


def consume_values(bootstrap: str, topic: str, group: str, expected: int) -> set[bytes]:
    """Values a new group member reads from the start, until ``expected`` or 60 s."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
    consumer.close()
    return seen


CONTAINER_CLIENT = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Consumer, Producer
    bootstrap, topic, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(100):
        producer.produce(topic, f"inside-{i}".encode())
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "inside", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < expected + 100 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
    consumer.close()
    print("seen", len(seen))
    """
)


def image_healthcheck() -> list[str]:
    """The Dockerfile's HEALTHCHECK CMD, run with this interpreter."""
    text = (PROJECT_ROOT / "docker" / "Dockerfile").read_text().replace("\\\n", " ")
    line = next(l for l in text.splitlines() if l.startswith("HEALTHCHECK "))
    command = json.loads(line.split(" CMD ", 1)[1])
    assert command[0] == "python"
    return [sys.executable, *command[1:]]


def docker_engine() -> str | None:
    """Why no Docker engine with compose can be used here, or None if one can."""
    if shutil.which("docker") is None:
        return "no docker command"
    for probe in (["docker", "info", "--format", "{{.ServerVersion}}"], ["docker", "compose", "version"]):
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{' '.join(probe)}: {exc}"
        if done.returncode != 0:
            return f"{' '.join(probe)}: {(done.stderr or done.stdout).strip()[:200]}"
    return None


def run_with_docker_engine(tmp_path) -> None:
    """The same checks through ``docker compose up``: the image is built from
    docker/Dockerfile, clients on the host use the published ports, and a
    broker's own healthcheck reaches another broker by its compose hostname."""
    project = f"pbtest{uuid.uuid4().hex[:6]}"
    compose = ["docker", "compose", "-p", project, "-f", str(COMPOSE_FILE)]
    try:
        up = subprocess.run([*compose, "up", "-d", "--build", "--wait", "--wait-timeout", str(START_BOUND_S * 3)],
                            capture_output=True, text=True, timeout=START_BOUND_S * 10)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        outside = "localhost:9092,localhost:9094,localhost:9096"
        topic = f"compose-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": outside})
        for future in admin.create_topics([NewTopic(topic, num_partitions=3)]).values():
            future.result(timeout=30)
        produce_values(outside, topic, "outside", MESSAGES)
        assert len(consume_values(outside, topic, "outside", MESSAGES)) == MESSAGES
        inside = subprocess.run(
            [*compose, "exec", "-T", "broker-4", "pybroker", "healthcheck", "--bootstrap-server", "broker-5:19092"],
            capture_output=True, text=True, timeout=60,
        )
        assert inside.returncode == 0, inside.stdout + inside.stderr
    finally:
        subprocess.run([*compose, "down", "-v", "--timeout", str(STOP_BOUND_S)], capture_output=True, timeout=300)


def test_compose_services_run_as_namespaced_processes(tmp_path):
    if docker_engine() is None:
        run_with_docker_engine(tmp_path)
        return
    try:
        check_available()
    except NamespaceUnavailable as exc:
        pytest.skip(str(exc))
    services = load_services(COMPOSE_FILE)
    hostnames = [service["hostname"] for service in services.values()] + ["client"]
    processes: dict[str, subprocess.Popen] = {}
    forwarders: list[PublishedPort] = []
    envs: dict[str, dict[str, str]] = {}
    net = VirtualNetwork(hostnames)
    try:
        for name, service in services.items():
            host = service["hostname"]
            env = {key: value for key, value in os.environ.items() if not key.startswith("KAFKA_")}
            env.update({key: str(value) for key, value in service["environment"].items()})
            env["KAFKA_LOG_DIRS"] = str(tmp_path / host)  # the named volume
            env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
            envs[name] = env
            log = open(tmp_path / f"{host}.log", "w")
            processes[host] = subprocess.Popen(
                [*net.exec_prefix(host), sys.executable, "-m", "broker.container"],
                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
            )
            for mapping in service.get("ports", []):
                # "P:P" or "127.0.0.1:P:P": either way the host's 127.0.0.1 is forwarded here.
                host_ip, published, target = ([""] + str(mapping).split(":"))[-3:]
                assert host_ip in ("", "127.0.0.1"), mapping
                published, target = int(published), int(target)
                try:
                    forwarders.append(PublishedPort(published, (net.ips[host], target)))
                except OSError as exc:
                    pytest.skip(f"port {published} of {name} cannot be published on 127.0.0.1: {exc}")

        healthcheck = image_healthcheck()

        def healthy(name):
            # The image's HEALTHCHECK (no service overrides it), run in the
            # service's namespace with its environment, as `docker exec` does.
            assert "healthcheck" not in services[name]
            done = subprocess.run(
                [*net.exec_prefix(services[name]["hostname"]), *healthcheck],
                capture_output=True, text=True, timeout=30, env=envs[name], cwd=tmp_path,
            )
            return done.returncode == 0

        brokers = [n for n, s in services.items() if "broker" in s["environment"]["KAFKA_PROCESS_ROLES"]]
        assert len(brokers) == 3
        for name in services:  # controllers too: the image's check finds their controller listener
            assert wait_until(lambda name=name: healthy(name), START_BOUND_S), (
                f"{name} never healthy:\n" + (tmp_path / f"{services[name]['hostname']}.log").read_text()[-3000:]
            )

        # A client on the host, through the published ports (EXTERNAL listeners).
        outside = ",".join(f"localhost:{f.server_address[1]}" for f in forwarders)
        topic = f"compose-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": outside})
        for future in admin.create_topics([NewTopic(topic, num_partitions=3)]).values():
            future.result(timeout=30)
        def replicated():
            partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
            return [(p.replicas, p.isrs) for p in partitions] if all(len(p.isrs) == 3 for p in partitions) else None

        replicas = wait_until(replicated, 30)
        assert replicas and all(len(r) == 3 for r, _ in replicas), admin.list_topics(topic, timeout=10).topics[topic].partitions
        produce_values(outside, topic, "outside", MESSAGES)

        # A client in another container, by the brokers' hostnames (INTERNAL listeners).
        inside = ",".join(f"{services[n]['hostname']}:19092" for n in brokers)
        done = subprocess.run(
            [*net.exec_prefix("client"), sys.executable, "-c", CONTAINER_CLIENT, inside, topic, str(MESSAGES)],
            capture_output=True, text=True, timeout=150,
        )
        assert done.returncode == 0 and done.stdout.split() == ["seen", str(MESSAGES + 100)], done.stdout + done.stderr

        assert len(consume_values(outside, topic, "outside", MESSAGES + 100)) == MESSAGES + 100
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(STOP_BOUND_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        for forwarder in forwarders:
            forwarder.shutdown()
            forwarder.server_close()
        net.close()
