"""Real clients over SASL_PLAINTEXT and SASL_SSL listeners of a ``pybroker start`` process.

confluent-kafka, kafka-python, aiokafka and kcat produce and consume with
PLAIN (users of the listener's JAAS entry), SCRAM-SHA-256 and SCRAM-SHA-512
(users made with AlterUserScramCredentials through confluent's AdminClient)
and OAUTHBEARER (unsecured JWTs); DescribeUserScramCredentials lists them.
A wrong password, an unknown user, an unknown mechanism, SaslAuthenticate
before SaslHandshake, a Produce before authentication and a too-large frame
are each refused with Kafka's error or a closed connection and one log line,
while the others carry on; a SaslHandshake on the PLAINTEXT listener answers
ILLEGAL_SASL_STATE. A librdkafka consumer whose sessions last 3 s keeps
consuming across re-authentications.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import shutil
import socket
import ssl
import subprocess
import time
import uuid

import pytest

from protocol.errors import ErrorCode
from protocol.framing import decode_response, encode_request
from protocol.primitives import INT32
from protocol.registry import APIS_BY_NAME
from tests.conftest import BrokerProcess
from tests.tls_certs import make_certs, openssl_or_skip

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

TIMEOUT_S = 30
MESSAGES = 20
PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
SCRAM_USERS = {"SCRAM-SHA-256": ("bob", "bob-secret"), "SCRAM-SHA-512": ("carol", "carol-secret")}
REAUTH_MS = 3000
HANDSHAKE, AUTHENTICATE, PRODUCE = APIS_BY_NAME["SaslHandshake"], APIS_BY_NAME["SaslAuthenticate"], APIS_BY_NAME["Produce"]


def _plain_jaas() -> str:
    users = " ".join(f'user_{name}="{password}"' for name, password in PLAIN_USERS.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    openssl_or_skip()
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory, certs):
    broker = BrokerProcess(
        tmp_path_factory.mktemp("sasl-broker"),
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": _plain_jaas(),
            "listener.name.sasl_ssl.plain.sasl.jaas.config": _plain_jaas(),
            # Short sessions for SCRAM-SHA-256 on SASL_PLAINTEXT: its clients re-authenticate.
            "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": str(REAUTH_MS),
            "ssl.keystore.location": str(certs.server_keystore),
            "sasl.server.max.receive.size": "4096",
        },
    ).start()
    broker.listeners = {
        match.group(1): f"127.0.0.1:{match.group(2)}"
        for line in broker.output
        if (match := re.search(r"listening on (\w+)://127\.0\.0\.1:(\d+)", line))
    }
    # The SCRAM users, made over the PLAINTEXT listener as a first user would be.
    admin = AdminClient({"bootstrap.servers": broker.listeners["PLAINTEXT"]})
    upsertions = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")), 4096), password.encode())
        for m, (user, password) in SCRAM_USERS.items()
    ]
    for future in admin.alter_user_scram_credentials(upsertions).values():
        future.result(timeout=TIMEOUT_S)
    yield broker
    broker.stop()


def confluent_settings(broker, certs, protocol: str, mechanism: str, user: str | None = None, password: str | None = None, **extra):
    settings = {"bootstrap.servers": broker.listeners[protocol], "security.protocol": protocol, "sasl.mechanism": mechanism}
    if protocol == "SASL_SSL":
        settings["ssl.ca.location"] = str(certs.ca)
    if mechanism == "OAUTHBEARER":
        settings |= {"enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": f"principal={user or 'alice'}"}
    else:
        if user is None:
            user, password = SCRAM_USERS[mechanism] if mechanism.startswith("SCRAM") else ("alice", PLAIN_USERS["alice"])
        settings |= {"sasl.username": user, "sasl.password": password}
    return settings | extra


def messages(tag: str) -> list[tuple[bytes, bytes]]:
    return [(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode() * 50) for i in range(MESSAGES)]


def confluent_round_trip(settings: dict, topic: str, payload) -> list:
    producer = confluent_kafka.Producer(settings | {"linger.ms": 5})
    for key, value in payload:
        producer.produce(topic, value, key, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer(settings | {"group.id": "g", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < len(payload) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append((message.key(), message.value()))
    consumer.close()
    return got


def log_lines(broker, pattern: str) -> list[str]:
    return [line for line in broker.output if re.search(pattern, line)]


def wait_for_line(broker, pattern: str, before: int) -> None:
    deadline = time.monotonic() + 10
    while len(log_lines(broker, pattern)) <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(log_lines(broker, pattern)) > before, pattern


MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_round_trip(sasl_broker, certs, protocol, mechanism):
    topic = f"sasl-confluent-{uuid.uuid4().hex[:8]}"
    payload = messages(mechanism)
    assert confluent_round_trip(confluent_settings(sasl_broker, certs, protocol, mechanism), topic, payload) == payload


def test_describe_user_scram_credentials(sasl_broker, certs):
    admin = AdminClient(confluent_settings(sasl_broker, certs, "SASL_SSL", "PLAIN", "admin", "admin-secret"))
    described = admin.describe_user_scram_credentials().result(timeout=TIMEOUT_S)
    assert sorted(described) == ["bob", "carol"]
    info = described["carol"].scram_credential_infos[0]
    assert info.mechanism == ScramMechanism.SCRAM_SHA_512 and info.iterations == 4096


def _unsecured_tokens():
    """kafka-python's token provider: an unsigned JWT for alice."""
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class UnsecuredTokens(AbstractTokenProvider):
        def token(self) -> str:
            def part(value: dict) -> str:
                return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

            now = int(time.time())  # whole seconds, as token issuers write them
            return f"{part({'alg': 'none'})}.{part({'sub': 'alice', 'iat': now, 'exp': now + 3600})}."

    return UnsecuredTokens()


def kafka_python_settings(broker, certs, protocol: str, mechanism: str) -> dict:
    settings = {"bootstrap_servers": broker.listeners[protocol], "security_protocol": protocol, "sasl_mechanism": mechanism}
    if protocol == "SASL_SSL":
        settings["ssl_cafile"] = str(certs.ca)
    if mechanism == "OAUTHBEARER":
        settings["sasl_oauth_token_provider"] = _unsecured_tokens()
    else:
        user, password = SCRAM_USERS[mechanism] if mechanism.startswith("SCRAM") else ("alice", PLAIN_USERS["alice"])
        settings |= {"sasl_plain_username": user, "sasl_plain_password": password}
    return settings


@pytest.mark.parametrize(
    "protocol,mechanism",
    [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_SSL", "OAUTHBEARER")],
)
def test_kafka_python_round_trip(sasl_broker, certs, protocol, mechanism):
    kafka = pytest.importorskip("kafka")
    topic = f"sasl-kafka-python-{uuid.uuid4().hex[:8]}"
    settings = kafka_python_settings(sasl_broker, certs, protocol, mechanism)
    producer = kafka.KafkaProducer(**settings)
    payload = messages("kp")
    for key, value in payload:
        producer.send(topic, value, key, partition=0)
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = kafka.KafkaConsumer(**settings, consumer_timeout_ms=10_000)
    partition = kafka.TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    got = [(m.key, m.value) for _, m in zip(range(MESSAGES), consumer)]
    consumer.close()
    assert got == payload


@pytest.mark.parametrize(
    "protocol,mechanism", [("SASL_SSL", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512")]
)
def test_aiokafka_round_trip(sasl_broker, certs, protocol, mechanism):
    aiokafka = pytest.importorskip("aiokafka")
    topic = f"sasl-aiokafka-{uuid.uuid4().hex[:8]}"
    user, password = SCRAM_USERS[mechanism] if mechanism.startswith("SCRAM") else ("alice", PLAIN_USERS["alice"])
    settings = {
        "bootstrap_servers": sasl_broker.listeners[protocol], "security_protocol": protocol, "sasl_mechanism": mechanism,
        "sasl_plain_username": user, "sasl_plain_password": password,
    }
    if protocol == "SASL_SSL":
        settings["ssl_context"] = ssl.create_default_context(cafile=str(certs.ca))
    payload = messages("aio")

    async def main():
        producer = aiokafka.AIOKafkaProducer(**settings)
        await producer.start()
        try:
            for key, value in payload:
                await producer.send_and_wait(topic, value, key, partition=0)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(**settings, auto_offset_reset="earliest")
        await consumer.start()
        try:
            partition = aiokafka.TopicPartition(topic, 0)
            consumer.assign([partition])
            got = []
            while len(got) < MESSAGES:
                batch = await asyncio.wait_for(consumer.getmany(partition, timeout_ms=1000), TIMEOUT_S)
                got += [(m.key, m.value) for m in batch.get(partition, [])]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == payload


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (apt-get install kcat)")
def test_kcat_round_trip_with_scram_over_sasl_ssl(sasl_broker, certs):
    topic = f"sasl-kcat-{uuid.uuid4().hex[:8]}"
    user, password = SCRAM_USERS["SCRAM-SHA-512"]
    args = [
        "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={certs.ca}", "-X", "sasl.mechanism=SCRAM-SHA-512",
        "-X", f"sasl.username={user}", "-X", f"sasl.password={password}",
    ]
    lines = [f"key-{i}:value-{i}" for i in range(20)]
    bootstrap = sasl_broker.listeners["SASL_SSL"]
    produce = subprocess.run(
        ["kcat", "-b", bootstrap, *args, "-P", "-t", topic, "-p", "0", "-K:"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )
    assert produce.returncode == 0, (produce.stderr, log_lines(sasl_broker, "authentication"))
    read = subprocess.run(
        ["kcat", "-b", bootstrap, *args, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%k:%s\n"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.splitlines() == lines


# --------------------------------------------------------------------------- refusals


def _auth_error(settings: dict) -> str:
    """The error a client reports when the broker refuses its authentication."""
    errors: list = []
    producer = confluent_kafka.Producer(settings | {"error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION, errors
    return errors[0].str()


class RawClient:
    """A socket speaking bare Kafka frames, to send what no client library would."""

    def __init__(self, bootstrap: str):
        host, port = bootstrap.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)

    def send(self, api, version: int, **fields) -> None:
        self.sock.sendall(encode_request(api, version, 7, "raw", api.request.cls(**fields)))

    def receive(self, api, version: int):
        size = INT32.unpack(self._exactly(4))[0]
        return decode_response(api, version, self._exactly(size))[1]

    def closed(self) -> bool:
        """Whether the broker closed the connection (and sent nothing more)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def test_wrong_password_and_unknown_user_are_refused_with_kafkas_messages(sasl_broker, certs):
    failed = "Failed authentication with 127.0.0.1"
    before = len(log_lines(sasl_broker, failed))
    message = _auth_error(confluent_settings(sasl_broker, certs, "SASL_PLAINTEXT", "PLAIN", "alice", "not-alices"))
    assert "Invalid username or password" in message
    message = _auth_error(confluent_settings(sasl_broker, certs, "SASL_SSL", "SCRAM-SHA-512", "nobody", "whatever"))
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in message
    wait_for_line(sasl_broker, failed, before + 1)
    assert not log_lines(sasl_broker, "not-alices|whatever")
    # The good ones carry on.
    admin = AdminClient(confluent_settings(sasl_broker, certs, "SASL_PLAINTEXT", "SCRAM-SHA-512"))
    assert admin.list_topics(timeout=10).brokers


def test_raw_refusals_close_the_connection(sasl_broker, certs):
    bootstrap = sasl_broker.listeners["SASL_PLAINTEXT"]
    # An unknown mechanism: the enabled ones, then the connection closes.
    raw = RawClient(bootstrap)
    raw.send(HANDSHAKE, 1, mechanism="DIGEST-MD5")
    answer = raw.receive(HANDSHAKE, 1)
    assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    assert raw.closed()
    raw.close()
    # SaslAuthenticate before a handshake, and a Produce before authentication: closed unanswered.
    for api, version, fields in [
        (AUTHENTICATE, 2, {"auth_bytes": b"\x00alice\x00alice-secret"}),
        (PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 1000, "topic_data": []}),
    ]:
        raw = RawClient(bootstrap)
        raw.send(api, version, **fields)
        assert raw.closed(), api.name
        raw.close()
    # A frame above sasl.server.max.receive.size (4096 here) before authentication.
    before = len(log_lines(sasl_broker, "invalid receive size 100000"))
    raw = RawClient(bootstrap)
    raw.sock.sendall(INT32.pack(100_000) + b"\x00" * 64)
    assert raw.closed()
    raw.close()
    wait_for_line(sasl_broker, "invalid receive size 100000", before)
    # A SaslHandshake on the PLAINTEXT listener: Kafka's ILLEGAL_SASL_STATE, the connection stays.
    raw = RawClient(sasl_broker.listeners["PLAINTEXT"])
    raw.send(HANDSHAKE, 1, mechanism="PLAIN")
    assert raw.receive(HANDSHAKE, 1).error_code == ErrorCode.ILLEGAL_SASL_STATE
    raw.send(HANDSHAKE, 1, mechanism="PLAIN")
    assert raw.receive(HANDSHAKE, 1).error_code == ErrorCode.ILLEGAL_SASL_STATE
    raw.close()
    # And authenticated clients are served as before.
    admin = AdminClient(confluent_settings(sasl_broker, certs, "SASL_PLAINTEXT", "PLAIN"))
    assert admin.list_topics(timeout=10).brokers


def test_a_long_lived_consumer_keeps_working_across_reauthentications(sasl_broker, certs):
    topic = f"sasl-reauth-{uuid.uuid4().hex[:8]}"
    settings = confluent_settings(sasl_broker, certs, "SASL_PLAINTEXT", "SCRAM-SHA-256")
    expired_before = len(log_lines(sasl_broker, "expired"))
    producer = confluent_kafka.Producer(settings)
    # librdkafka's own account of its re-authentications (KIP-368).
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    rdkafka_log = logging.getLogger(f"rdkafka-{topic}")
    rdkafka_log.addHandler(handler)
    rdkafka_log.setLevel(logging.DEBUG)
    rdkafka_log.propagate = False
    consumer = confluent_kafka.Consumer(
        settings | {"group.id": f"reauth-{topic}", "auto.offset.reset": "earliest", "debug": "security", "logger": rdkafka_log}
    )
    consumer.subscribe([topic])
    sent, got = [], []
    deadline = time.monotonic() + 3.5 * REAUTH_MS / 1000
    while time.monotonic() < deadline:
        value = f"m{len(sent)}".encode()
        producer.produce(topic, value)
        producer.poll(0)
        sent.append(value)
        for _ in range(4):
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                got.append(message.value())
    assert producer.flush(TIMEOUT_S) == 0
    end = time.monotonic() + TIMEOUT_S
    while len(got) < len(sent) and time.monotonic() < end:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    assert got == sent
    # Re-authenticated on the same connections, in time: none outlived its session.
    assert any("Auth in state REAUTH" in line for line in lines), lines[-20:]
    assert len(log_lines(sasl_broker, "expired")) == expired_before
