"""docs/security.md's "A secured broker, step by step", run as printed, then every unauthorized attempt.

The blocks marked ``<!-- security walkthrough: ... -->`` are taken from docs/security.md
and run in a temporary directory: the openssl commands, the storage format with
three SCRAM users, the broker started with a copy of configs/secure.properties,
admin.properties written, the admin tools with it, the clients. (tests/interop/
test_docs_commands.py runs the other blocks of the docs and leaves these to this test.) Only the port changes (a
free one instead of 9094) and ``pybroker`` is this checkout's. Then the broker
configured from it must refuse everything the walkthrough does not allow, each
with Kafka's error.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import PROJECT_ROOT
from tests.interop._docs_blocks import free_port, page_blocks
from tests.tls_certs import openssl_or_skip

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

DOCS_PORT = "9094"
START_TIMEOUT_S = 60


def walkthrough_blocks() -> dict[str, str]:
    prefix = "security walkthrough: "
    found = {b.marker[len(prefix):]: b.text for b in page_blocks("docs/security.md") if b.marker.startswith(prefix)}
    assert set(found) == {"certificates", "format and start", "admin.properties", "topic and ACLs", "clients"}, found.keys()
    return found


def shell(script: str, cwd, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Run ``script`` with bash, ``pybroker`` being this checkout's."""
    prelude = f"set -euo pipefail\npybroker() {{ {shlex.quote(sys.executable)} -m broker \"$@\"; }}\n"
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(["bash", "-c", prelude + script], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory):
    openssl_or_skip()
    blocks = walkthrough_blocks()
    root = tmp_path_factory.mktemp("secured")
    port = str(free_port())

    def here(text: str) -> str:
        return text.replace(f"localhost:{DOCS_PORT}", f"localhost:{port}").replace(f":{DOCS_PORT}\n", f":{port}\n")

    done = shell(blocks["certificates"], root)
    assert done.returncode == 0, done.stderr
    (root / "configs").mkdir()
    config = (PROJECT_ROOT / "configs" / "secure.properties").read_text()
    assert f"127.0.0.1:{DOCS_PORT}" in config and f"localhost:{DOCS_PORT}" in config
    (root / "configs" / "secure.properties").write_text(config.replace(DOCS_PORT, port))
    format_lines, start_line = blocks["format and start"].rstrip().rsplit("\n", 1)
    assert start_line == "pybroker start --config configs/secure.properties"
    done = shell(format_lines, root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "alice-secret" not in (root / "data" / "secure-logs" / "bootstrap.checkpoint").read_bytes().decode("latin-1")

    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    broker = subprocess.Popen(
        [sys.executable, "-m", "broker", "start", "--config", "configs/secure.properties"],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        output = []
        while time.monotonic() < deadline:
            line = broker.stdout.readline()
            if not line:
                break
            output.append(line)
            if line.startswith("pybroker started"):
                break
        assert output and output[-1].startswith("pybroker started"), "".join(output)
        done = shell(blocks["admin.properties"], root)
        assert done.returncode == 0, done.stdout + done.stderr
        done = shell(here(blocks["topic and ACLs"]), root)
        assert done.returncode == 0, done.stdout + done.stderr
        yield root, port, blocks, here
    finally:
        broker.terminate()
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait(10)


def test_the_walkthrough_runs_as_printed(walkthrough):
    root, _port, blocks, here = walkthrough
    script = root / "clients.py"
    script.write_text(here(blocks["clients"]))
    done = subprocess.run([sys.executable, str(script)], cwd=root, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if not line.startswith("%")]
    assert "alice writes: [None]" in lines, done.stdout
    assert any(line.startswith("bob writes:") and "TOPIC_AUTHORIZATION_FAILED" in line for line in lines), done.stdout
    assert "bob reads: [b'order-1']" in lines, done.stdout


def client(root, port: str, user: str, password: str, **extra) -> dict:
    return {
        "bootstrap.servers": f"localhost:{port}", "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(root / "secrets" / "ca.pem"), "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user, "sasl.password": password, **extra,
    }


def tool_as(root, port: str, user: str, password: str, *args) -> subprocess.CompletedProcess:
    config = root / f"{user}.properties"
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={root / 'secrets' / 'ca.pem'}\n"
    )
    return shell(f"pybroker {shlex.join(args)} --bootstrap-server localhost:{port} --command-config {shlex.quote(str(config))}", root, 60)


def test_every_unauthorized_attempt_is_refused(walkthrough):
    root, port, _blocks, _here = walkthrough
    # Authentication: a wrong password, an unknown user.
    for user, password in (("alice", "not-her-password"), ("mallory", "anything")):
        done = tool_as(root, port, user, password, "topics", "--list")
        assert done.returncode == 2 and "Authentication failed" in done.stderr, (user, done.stderr)
    # No TLS on the TLS port: the connection is closed without an answer.
    with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as sock:
        sock.sendall(bytes.fromhex("0000001300120003000000010007707962726f6b6572000000"))
        sock.settimeout(10)
        try:
            answer = sock.recv(64)
        except (ConnectionResetError, TimeoutError):
            answer = b""
        assert not answer.startswith(b"\x00\x00"), answer
    # alice may not read, nor join the group.
    alice = Consumer(client(root, port, "alice", "alice-secret", **{"group.id": "billing", "auto.offset.reset": "earliest"}))
    alice.subscribe(["orders"])
    errors = []
    for _ in range(20):
        errors += [m.error().name() for m in alice.consume(10, 0.5) if m.error() is not None]
        if errors:
            break
    alice.close()
    assert {"GROUP_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED"} & set(errors), errors
    # Neither may create topics (alice's CREATE is on orders only) or ACLs.
    admin = AdminClient(client(root, port, "alice", "alice-secret"))
    with pytest.raises(KafkaException) as raised:
        admin.create_topics([NewTopic("payments", 1, 1)], request_timeout=20)["payments"].result(timeout=30)
    assert raised.value.args[0].name() == "TOPIC_AUTHORIZATION_FAILED"
    done = tool_as(root, port, "bob", "bob-secret", "acls", "--add", "--allow-principal", "User:bob", "--producer", "--topic", "orders")
    assert done.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in done.stderr, done.stderr
    # bob's refused write above left nothing: orders holds only alice's record.
    done = tool_as(root, port, "admin", "admin-secret", "get-offsets", "--topic", "orders")
    assert done.returncode == 0, done.stderr
    assert sum(int(line.rsplit(":", 1)[1] or 0) for line in done.stdout.split()) <= 1, done.stdout
