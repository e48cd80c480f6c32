"""Real clients over an SSL listener (client authentication required) of a
``pybroker start`` process: confluent-kafka, kafka-python, aiokafka and kcat
produce and consume, a fetch large enough to be file slices included; a
client without a certificate, with an untrusted one, a plaintext client on
the TLS port and a TLS client on the plaintext port are refused, each with a
line in the broker's log, while the others carry on. Start-up refuses a wrong
key password and a missing file with one line and exit code 2."""

from __future__ import annotations

import asyncio
import re
import shutil
import ssl
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import PROJECT_ROOT, BrokerProcess
from tests.tls_certs import make_certs, openssl_or_skip

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient

MESSAGES = 120
VALUE_BYTES = 20_000  # 2.4 MB in all: fetched as file slices of several segments' worth
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    openssl_or_skip()
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, certs):
    broker = BrokerProcess(
        tmp_path_factory.mktemp("tls-broker"),
        {
            "listeners": "SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "ssl.keystore.location": str(certs.server_keystore),
            "ssl.truststore.location": str(certs.ca),
            "ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT",
            "log.segment.bytes": "500000",
        },
    ).start()
    plaintext = None
    for line in broker.output:
        match = re.search(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)", line)
        if match:
            plaintext = f"127.0.0.1:{match.group(1)}"
    broker.plaintext_bootstrap = plaintext
    yield broker
    broker.stop()


def confluent_ssl(certs, bootstrap, with_cert=True, **extra):
    settings = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
        **extra,
    }
    if with_cert:
        settings |= {"ssl.certificate.location": str(certs.client_cert), "ssl.key.location": str(certs.client_key)}
    return settings


def payloads():
    return [(f"k{i}".encode(), bytes([i % 251]) * VALUE_BYTES) for i in range(MESSAGES)]


def consume_all(consumer, topic, count) -> list[tuple[bytes, bytes]]:
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append((message.key(), message.value()))
    consumer.close()
    return got


def log_lines(broker, pattern: str) -> list[str]:
    return [line for line in broker.output if re.search(pattern, line)]


def test_confluent_kafka_round_trip_with_a_client_certificate(tls_broker, certs):
    topic = f"tls-confluent-{uuid.uuid4().hex[:8]}"
    producer = confluent_kafka.Producer(confluent_ssl(certs, tls_broker.bootstrap, **{"linger.ms": 5}))
    for key, value in payloads():
        producer.produce(topic, value, key, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer(confluent_ssl(certs, tls_broker.bootstrap, **{"group.id": "g", "enable.auto.commit": False}))
    assert consume_all(consumer, topic, MESSAGES) == payloads()


def test_kafka_python_round_trip(tls_broker, certs):
    kafka = pytest.importorskip("kafka")
    topic = f"tls-kafka-python-{uuid.uuid4().hex[:8]}"
    settings = {
        "bootstrap_servers": tls_broker.bootstrap, "security_protocol": "SSL", "ssl_cafile": str(certs.ca),
        "ssl_certfile": str(certs.client_cert), "ssl_keyfile": str(certs.client_key),
    }
    producer = kafka.KafkaProducer(**settings)
    for key, value in payloads()[:30]:
        producer.send(topic, value, key, partition=0)
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = kafka.KafkaConsumer(**settings, consumer_timeout_ms=10_000)
    consumer.assign([kafka.TopicPartition(topic, 0)])
    consumer.seek(kafka.TopicPartition(topic, 0), 0)
    got = [(m.key, m.value) for _, m in zip(range(30), consumer)]
    consumer.close()
    assert got == payloads()[:30]


def test_aiokafka_round_trip(tls_broker, certs):
    aiokafka = pytest.importorskip("aiokafka")
    topic = f"tls-aiokafka-{uuid.uuid4().hex[:8]}"
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.load_cert_chain(str(certs.client_cert), str(certs.client_key))

    async def main():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=tls_broker.bootstrap, security_protocol="SSL", ssl_context=context)
        await producer.start()
        try:
            for key, value in payloads()[:30]:
                await producer.send_and_wait(topic, value, key, partition=0)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=tls_broker.bootstrap, security_protocol="SSL", ssl_context=context, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            partition = aiokafka.TopicPartition(topic, 0)
            consumer.assign([partition])
            got = []
            while len(got) < 30:
                batch = await asyncio.wait_for(consumer.getmany(partition, timeout_ms=1000), TIMEOUT_S)
                got += [(m.key, m.value) for m in batch.get(partition, [])]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == payloads()[:30]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (apt-get install kcat)")
def test_kcat_round_trip(tls_broker, certs):
    topic = f"tls-kcat-{uuid.uuid4().hex[:8]}"
    ssl_args = [
        "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={certs.ca}",
        "-X", f"ssl.certificate.location={certs.client_cert}", "-X", f"ssl.key.location={certs.client_key}",
    ]
    lines = [f"key-{i}:value-{i}" for i in range(20)]
    produce = subprocess.run(
        ["kcat", "-b", tls_broker.bootstrap, *ssl_args, "-P", "-t", topic, "-p", "0", "-K:"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )
    assert produce.returncode == 0, produce.stderr
    read = subprocess.run(
        ["kcat", "-b", tls_broker.bootstrap, *ssl_args, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%k:%s\n"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.splitlines() == lines


def _refused(settings) -> None:
    admin = AdminClient(settings)
    with pytest.raises(confluent_kafka.KafkaException):
        admin.list_topics(timeout=3)


def _wait_for_line(broker, pattern: str, before: int) -> None:
    deadline = time.monotonic() + 10
    while len(log_lines(broker, pattern)) <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(log_lines(broker, pattern)) > before, pattern


def test_bad_clients_are_refused_and_logged_while_others_carry_on(tls_broker, certs):
    failed = r"on TLS listener SSL: .*TLS handshake failed"
    before = len(log_lines(tls_broker, failed))
    _refused(confluent_ssl(certs, tls_broker.bootstrap, with_cert=False))
    _refused(
        confluent_ssl(certs, tls_broker.bootstrap, with_cert=False)
        | {"ssl.certificate.location": str(certs.untrusted_cert), "ssl.key.location": str(certs.untrusted_key)}
    )
    _refused({"bootstrap.servers": tls_broker.bootstrap})  # plaintext client on the TLS port
    _wait_for_line(tls_broker, "a client not speaking TLS", 0)
    _wait_for_line(tls_broker, failed, before + 2)
    # A TLS client on the plaintext port: its ClientHello is no Kafka frame.
    before_plain = len(log_lines(tls_broker, "closing 127.0.0.1"))
    _refused(confluent_ssl(certs, tls_broker.plaintext_bootstrap))
    _wait_for_line(tls_broker, "closing 127.0.0.1", before_plain)
    assert not log_lines(tls_broker, "BEGIN|PRIVATE KEY")
    # And a good client is served as before.
    admin = AdminClient(confluent_ssl(certs, tls_broker.bootstrap))
    assert admin.list_topics(timeout=10).brokers


def _start_fails(tmp_path, overrides: dict[str, str]) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "broker", "start"]
    for key, value in {"listeners": "SSL://127.0.0.1:0", "log.dirs": str(tmp_path / "logs"), **overrides}.items():
        args += ["--override", f"{key}={value}"]
    done = subprocess.run(args, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "logs").exists()  # refused before it touched its data
    return done


def test_start_refuses_a_wrong_key_password_and_a_missing_file(tmp_path, certs):
    chain = certs.server_cert.read_text()
    key = certs.server_key_encrypted.read_text()
    done = _start_fails(
        tmp_path, {"ssl.keystore.certificate.chain": chain, "ssl.keystore.key": key, "ssl.key.password": "not-it"}
    )
    assert "ssl.key.password does not decrypt the private key" in done.stderr and "not-it" not in done.stderr
    done = _start_fails(tmp_path, {"ssl.keystore.location": str(tmp_path / "absent.pem")})
    assert "ssl.keystore.location: no such file" in done.stderr
    done = _start_fails(tmp_path, {"listeners": "SASL_SSL://127.0.0.1:0"})
    assert "listener SASL_SSL speaks TLS but has no certificate" in done.stderr
    done = _start_fails(tmp_path, {"listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": str(certs.server_keystore)})
    assert "sasl.enabled.mechanisms: GSSAPI (Kerberos, Kafka's default) is not supported" in done.stderr
