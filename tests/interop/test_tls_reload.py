"""Dynamic listener TLS files (Kafka's KIP-226): the keystore of a running
broker's SSL listener is changed with ``pybroker configs --alter --entity-type
brokers --entity-name 1 --add-config listener.name.ssl.ssl.keystore.location=...``.
Connections accepted afterwards get the new certificate (a client trusting
only the new CA connects, one trusting only the old CA is refused), a
connection opened before keeps working; the change survives a restart; a
file rotated at the same path is re-read when the key is SET again with the
same value; a keystore that cannot be loaded is logged and the listener keeps
its certificate. The controller's checks (per broker, listener prefix only)
are checked on its plan directly."""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time

import pytest

from controller.config_commands import OP_DELETE, OP_SET, ConfigChange, ConfigOp, plan_alter_configs
from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import RESOURCE_BROKER, record_api_key
from protocol.errors import ErrorCode
from tests.conftest import PROJECT_ROOT, BrokerProcess
from tests.tls_certs import make_certs, openssl_or_skip

KEY = "listener.name.ssl.ssl.keystore.location"
WAIT_S = 20


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    openssl_or_skip()
    return make_certs(tmp_path_factory.mktemp("certs"))


def start(data_dir, certs) -> BrokerProcess:
    data_dir.mkdir(exist_ok=True)
    broker = BrokerProcess(
        data_dir,
        {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.location": str(certs.server_keystore)},
    ).start()
    ports = [m.group(1) for line in broker.output for m in [re.search(r"listening on SSL://127\.0\.0\.1:(\d+)", line)] if m]
    assert ports, "".join(broker.output)
    broker.ssl_port = int(ports[-1])
    return broker


def alter(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "broker", "configs", "--bootstrap-server", broker.bootstrap, "--alter",
         "--entity-type", "brokers", "--entity-name", "1", *args],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )
    return done


def tls_connect(port: int, ca) -> ssl.SSLSocket:
    """A TLS connection verifying the broker against ``ca`` only (raises SSLCertVerificationError otherwise)."""
    context = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        return context.wrap_socket(raw, server_hostname="localhost")
    except BaseException:
        raw.close()
        raise


def trusted_by(port: int, ca) -> bool:
    try:
        tls_connect(port, ca).close()
        return True
    except ssl.SSLCertVerificationError:
        return False


def wait_trusted_by(port: int, ca, expected: bool = True) -> None:
    deadline = time.monotonic() + WAIT_S
    while trusted_by(port, ca) != expected:  # bounded by the deadline
        assert time.monotonic() < deadline, f"the listener's certificate did not change within {WAIT_S} s"
        time.sleep(0.2)


def api_versions(sock: ssl.SSLSocket, correlation_id: int) -> int:
    """ApiVersions v0 over ``sock``: the correlation id and error code of the answer."""
    client_id = b"tls-reload"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    sock.sendall(struct.pack(">i", len(body)) + body)
    header = b""
    while len(header) < 10:  # bounded: the socket times out
        chunk = sock.recv(10 - len(header))
        assert chunk, "the broker closed the connection"
        header += chunk
    size, got_id, error = struct.unpack(">iih", header)
    rest = size - 6
    while rest > 0:
        chunk = sock.recv(min(rest, 65536))
        assert chunk, "the broker closed the connection"
        rest -= len(chunk)
    assert got_id == correlation_id
    return error


def test_rotating_a_listener_keystore_at_run_time(tmp_path, certs):
    broker = start(tmp_path / "data", certs)
    try:
        assert trusted_by(broker.ssl_port, certs.ca) and not trusted_by(broker.ssl_port, certs.other_ca)
        opened_before = tls_connect(broker.ssl_port, certs.ca)
        assert api_versions(opened_before, 1) == 0

        done = alter(broker, "--add-config", f"{KEY}={certs.rotated_server_keystore}")
        assert done.returncode == 0, done.stdout + done.stderr
        wait_trusted_by(broker.ssl_port, certs.other_ca)
        assert not trusted_by(broker.ssl_port, certs.ca)  # the old CA's clients: refused on new connections
        assert api_versions(opened_before, 2) == 0  # a connection from before keeps its TLS session
        opened_before.close()
        assert any("listener SSL: new TLS context loaded" in line for line in broker.output)
    finally:
        broker.stop()

    # The value lives in the metadata log: a restart serves the new certificate from the start.
    broker = start(tmp_path / "data", certs)
    try:
        assert trusted_by(broker.ssl_port, certs.other_ca) and not trusted_by(broker.ssl_port, certs.ca)

        # A file rotated at the same path: read again when the key is SET again with the same value.
        live = tmp_path / "live-keystore.pem"
        shutil.copyfile(certs.rotated_server_keystore, live)
        done = alter(broker, "--add-config", f"{KEY}={live}")
        assert done.returncode == 0, done.stdout + done.stderr
        shutil.copyfile(certs.server_keystore, live)
        time.sleep(1)
        assert trusted_by(broker.ssl_port, certs.other_ca), "re-read without the key being set again"
        done = alter(broker, "--add-config", f"{KEY}={live}")
        assert done.returncode == 0, done.stdout + done.stderr
        wait_trusted_by(broker.ssl_port, certs.ca)
        assert not trusted_by(broker.ssl_port, certs.other_ca)

        # A keystore that cannot be loaded: one line logged, the listener keeps its certificate.
        done = alter(broker, "--add-config", f"{KEY}={tmp_path / 'no-such-keystore.pem'}")
        assert done.returncode == 0, done.stdout + done.stderr
        deadline = time.monotonic() + WAIT_S
        refused = []
        while not refused and time.monotonic() < deadline:  # bounded by the deadline
            refused = [line for line in broker.output if "listener SSL keeps its current TLS context" in line]
            time.sleep(0.1)
        assert len(refused) == 1 and "ssl.keystore.location" in refused[0], refused
        assert trusted_by(broker.ssl_port, certs.ca) and not trusted_by(broker.ssl_port, certs.other_ca)

        # Deleting the dynamic key: back to server.properties' keystore (the same CA here, a new context).
        done = alter(broker, "--add-config", f"{KEY}={certs.rotated_server_keystore}")
        assert done.returncode == 0, done.stdout + done.stderr
        wait_trusted_by(broker.ssl_port, certs.other_ca)
        done = alter(broker, "--delete-config", KEY)
        assert done.returncode == 0, done.stdout + done.stderr
        wait_trusted_by(broker.ssl_port, certs.ca)
    finally:
        broker.stop()


# ------------------------------------------------------------------ the controller's checks (no broker)


def plan(image, ops, name="1"):
    change = ConfigChange(RESOURCE_BROKER, name, [ConfigOp(*op) for op in ops])
    return plan_alter_configs(image, change, incremental=True, local_node_id=1 if name else None)


@pytest.mark.parametrize(
    "ops, name, fragment",
    [
        ([(KEY, OP_SET, "/k.pem")], "", "Cannot update these configs at default cluster level, broker id must be specified"),
        ([("ssl.keystore.location", OP_SET, "/k.pem")], "1", "can be dynamically updated only per-listener using the listener prefix"),
        ([("listener.name.ssl.ssl.client.auth", OP_SET, "always")], "1", "expected none, requested or required"),
        ([(KEY, OP_SET, "  ")], "1", "must not be empty"),
        ([("listener.name.ssl.ssl.keystore.key", OP_SET, "secret-key-text")], "1", "expected PEM text"),
        ([("listener.name.ssl.ssl.cipher.suites", OP_SET, "x")], "1", "per-listener configs cannot be updated"),
    ],
)
def test_the_controller_refuses_what_kafka_refuses(ops, name, fragment):
    result, records = plan(MetadataImage(), ops, name)
    assert (result.error_code, records) == (ErrorCode.INVALID_REQUEST, [])
    assert fragment in result.error_message
    assert "secret-key-text" not in result.error_message


def test_a_set_with_the_same_value_is_written_again():
    image = MetadataImage()
    ops = [(KEY, OP_SET, " /k.pem "), ("listener.name.ssl.ssl.client.auth", OP_SET, "Required")]
    result, records = plan(image, ops)
    assert result.error_code == ErrorCode.NONE
    image = apply_records(image, [(record_api_key(r), r) for r in records], image.offset + 1)
    assert dict(image.configs_of(RESOURCE_BROKER, "1")) == {KEY: "/k.pem", "listener.name.ssl.ssl.client.auth": "required"}
    result, records = plan(image, [(KEY, OP_SET, "/k.pem")])
    assert [(r.name, r.value) for r in records] == [(KEY, "/k.pem")]  # the broker re-reads the file
    result, records = plan(image, [("log.retention.ms", OP_SET, "5")])
    image = apply_records(image, [(record_api_key(r), r) for r in records], image.offset + 1)
    result, records = plan(image, [("log.retention.ms", OP_SET, "5")])
    assert records == []  # other keys: only a change is written
    result, records = plan(image, [(KEY, OP_DELETE, None)])
    assert [(r.name, r.value) for r in records] == [(KEY, None)]


# ------------------------------------------------------------------ the broker's side (no process)


def test_listener_tls_applies_trust_store_client_auth_and_pem_strings(certs, caplog):
    from broker.config import load_config
    from broker.net.security_setup import ListenerTls

    config = load_config(
        {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093", "ssl.keystore.location": str(certs.server_keystore)},
        warn=lambda _: None,
    )
    tls = ListenerTls(config)
    start_context = tls["SSL"][0]
    assert start_context.verify_mode == ssl.CERT_NONE
    assert tls.apply_dynamic({}) == []  # nothing changed: the context stays
    prefix = "listener.name.ssl."
    dynamic = {prefix + "ssl.client.auth": "required", prefix + "ssl.truststore.location": str(certs.ca)}
    assert tls.apply_dynamic(dynamic) == ["SSL"]
    assert tls["SSL"][0].verify_mode == ssl.CERT_REQUIRED
    assert tls.apply_dynamic(dynamic) == []  # the same settings and files: not rebuilt
    # The keystore given as PEM strings replaces the static keystore file.
    chain, key = certs.rotated_server_keystore.read_text(), certs.rotated_server_keystore.read_text()
    pem = {**dynamic, prefix + "ssl.keystore.certificate.chain": chain, prefix + "ssl.keystore.key": key}
    assert tls.apply_dynamic(pem) == ["SSL"]
    # Conflicting dynamic keys, then an unreadable trust store: logged once each, the context kept.
    kept = tls["SSL"][0]
    caplog.set_level("ERROR")
    assert tls.apply_dynamic({**pem, prefix + "ssl.keystore.location": str(certs.server_keystore)}) == []
    assert tls.apply_dynamic({**pem, prefix + "ssl.keystore.location": str(certs.server_keystore)}) == []
    assert tls.apply_dynamic({**pem, prefix + "ssl.truststore.location": "/no/such/ca.pem"}) == []
    assert tls["SSL"][0] is kept
    lines = [r.getMessage() for r in caplog.records if "keeps its current TLS context" in r.getMessage()]
    assert len(lines) == 2 and "set either it or ssl.keystore.certificate.chain" in lines[0], lines
    assert "-----BEGIN" not in "".join(lines)
    # Deleted dynamic keys: back to server.properties.
    assert tls.apply_dynamic({}) == ["SSL"]
    assert tls["SSL"][0].verify_mode == ssl.CERT_NONE
