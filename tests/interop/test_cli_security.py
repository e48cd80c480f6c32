"""``--command-config`` of every tool over SSL (client certificate required),
SASL_PLAINTEXT and SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.

The SCRAM users are made by ``pybroker configs`` itself over the PLAINTEXT
listener; then topics, console-producer/consumer, get-offsets, groups,
transactions, metadata-quorum, reassign and healthcheck each run over a
secured listener.
A wrong password, an unknown mechanism, a Java keystore and a plaintext
client on the TLS port each fail with one line and exit code 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT, BrokerProcess, wait_until
from tests.interop._support import unique_topic
from tests.tls_certs import make_certs, openssl_or_skip

PLAIN_USERS = {"admin": "admin-secret"}
SCRAM_USERS = {"SCRAM-SHA-256": ("bob", "bob-secret"), "SCRAM-SHA-512": ("carol", "carol-secret")}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    openssl_or_skip()
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory, certs):
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
        f'user_{name}="{password}"' for name, password in PLAIN_USERS.items()
    ) + ";"
    broker = BrokerProcess(
        tmp_path_factory.mktemp("cli-secured"),
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
            "ssl.keystore.location": str(certs.server_keystore),
            "ssl.truststore.location": str(certs.ca),
            "listener.name.ssl.ssl.client.auth": "required",
        },
    ).start()
    broker.listeners = {
        match.group(1): f"127.0.0.1:{match.group(2)}"
        for line in broker.output
        if (match := re.search(r"listening on (\w+)://127\.0\.0\.1:(\d+)", line))
    }
    yield broker
    broker.stop()


def run(bootstrap: str, command: str, *args, config=None, stdin: str | None = None) -> subprocess.CompletedProcess:
    extra = ["--command-config", str(config)] if config is not None else []
    return subprocess.run(
        [sys.executable, "-m", "broker", command, "--bootstrap-server", bootstrap, *extra, *args],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=90, check=False, input=stdin,
    )


def properties(path, **values) -> object:
    path.write_text("".join(f"{key.replace('_', '.')}={value}\n" for key, value in values.items()))
    return path


def jaas(module: str, user: str, password: str) -> str:
    return f'org.apache.kafka.common.security.{module} required \\\n    username="{user}" password="{password}";'


@pytest.fixture(scope="module")
def scram_users(secured_broker):
    for mechanism, (user, password) in SCRAM_USERS.items():
        made = run(secured_broker.listeners["PLAINTEXT"], "configs", "--alter", "--entity-type", "users",
                   "--entity-name", user, "--add-config", f"{mechanism}=[iterations=4096,password={password}]")
        assert made.returncode == 0, made.stderr
    return SCRAM_USERS


def every_tool_works(bootstrap: str, config) -> None:
    """Each tool over the listener of ``bootstrap``, as ``config`` says to connect."""
    topic = unique_topic("clisec")
    created = run(bootstrap, "topics", "--create", "--topic", topic, "--partitions", "2", config=config)
    assert (created.returncode, created.stdout) == (0, f"Created topic {topic}.\n"), created.stderr
    assert topic in run(bootstrap, "topics", "--list", config=config).stdout.split()
    described = json.loads(run(bootstrap, "topics", "--describe", "--topic", topic, "--output", "json", config=config).stdout)
    assert [p["partition"] for p in described["topics"][0]["partitions"]] == [0, 1]
    produced = run(bootstrap, "console-producer", "--topic", topic, config=config, stdin="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    offsets = run(bootstrap, "get-offsets", "--topic", topic, config=config)
    assert sum(int(line.rsplit(":", 1)[1]) for line in offsets.stdout.split()) == 3, offsets.stderr
    group = unique_topic("clisecg")
    consumed = run(bootstrap, "console-consumer", "--topic", topic, "--group", group, "--from-beginning",
                   "--max-messages", "3", config=config)
    assert sorted(consumed.stdout.split()) == ["one", "three", "two"], consumed.stderr
    described_group = run(bootstrap, "groups", "describe", group, config=config)
    assert described_group.returncode == 0, described_group.stderr
    assert described_group.stdout.splitlines()[2].startswith(f"{group} {topic} "), described_group.stdout
    reset = run(bootstrap, "groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute",
                config=config)
    assert reset.returncode == 0 and reset.stdout.count(f" {topic} ") == 2, reset.stderr
    assert run(bootstrap, "transactions", "list", config=config).returncode == 0
    health = run(bootstrap, "healthcheck", config=config)
    assert health.returncode == 0 and "is healthy: node 1" in health.stdout, health.stderr
    quorum = run(bootstrap, "metadata-quorum", "describe", "--status", config=config)
    assert quorum.returncode == 0 and "LeaderId:" in quorum.stdout, quorum.stderr
    plan = config.parent / f"{topic}-reassign.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1]}]}))
    verified = run(bootstrap, "reassign", "--verify", "--reassignment-json-file", str(plan), config=config)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    configs = run(bootstrap, "configs", "--describe", "--entity-type", "topics", "--entity-name", topic, config=config)
    assert configs.stdout == f"Dynamic configs for topic {topic} are:\n", configs.stderr


@pytest.mark.parametrize("mechanism", sorted(SCRAM_USERS))
def test_scram_over_sasl_plaintext(secured_broker, scram_users, mechanism, tmp_path):
    user, password = scram_users[mechanism]
    config = properties(tmp_path / "client.properties", security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                        sasl_jaas_config=jaas("scram.ScramLoginModule", user, password))
    every_tool_works(secured_broker.listeners["SASL_PLAINTEXT"], config)


def test_scram_and_plain_over_sasl_ssl(secured_broker, scram_users, certs, tmp_path):
    user, password = scram_users["SCRAM-SHA-512"]
    config = properties(tmp_path / "scram.properties", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                        sasl_jaas_config=jaas("scram.ScramLoginModule", user, password),
                        ssl_truststore_location=certs.ca, ssl_truststore_type="PEM")
    topic = unique_topic("clisaslssl")
    bootstrap = secured_broker.listeners["SASL_SSL"]
    assert run(bootstrap, "topics", "--create", "--topic", topic, config=config).returncode == 0
    plain = properties(tmp_path / "plain.properties", security_protocol="SASL_SSL", sasl_mechanism="PLAIN",
                       sasl_jaas_config=jaas("plain.PlainLoginModule", "admin", PLAIN_USERS["admin"]),
                       ssl_truststore_location=certs.ca)
    assert topic in run(bootstrap, "topics", "--list", config=plain).stdout.split()


def test_ssl_with_a_client_certificate(secured_broker, certs, tmp_path):
    config = properties(tmp_path / "ssl.properties", security_protocol="SSL", ssl_truststore_location=certs.ca,
                        ssl_truststore_type="PEM", ssl_keystore_location=certs.client_keystore, ssl_keystore_type="PEM",
                        ssl_endpoint_identification_algorithm="https")
    every_tool_works(secured_broker.listeners["SSL"], config)


def test_connection_problems_are_one_line_and_exit_2(secured_broker, scram_users, certs, tmp_path):
    sasl = secured_broker.listeners["SASL_PLAINTEXT"]
    wrong = properties(tmp_path / "wrong.properties", security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                       sasl_jaas_config=jaas("scram.ScramLoginModule", "bob", "not-bob-secret"))
    failed = run(sasl, "topics", "--list", config=wrong)
    assert failed.returncode == 2 and failed.stderr.startswith("pybroker topics: authentication failed")
    assert failed.stderr.count("\n") == 1

    gssapi = properties(tmp_path / "gssapi.properties", security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI")
    refused = run(sasl, "topics", "--list", config=gssapi)
    assert refused.returncode == 2 and "sasl.mechanism GSSAPI is not supported" in refused.stderr

    jks = properties(tmp_path / "jks.properties", security_protocol="SSL", ssl_truststore_location=certs.ca,
                     ssl_truststore_type="JKS")
    java = run(secured_broker.listeners["SSL"], "topics", "--list", config=jks)
    assert java.returncode == 2 and "ssl.truststore.type JKS is a Java keystore" in java.stderr
    binary = tmp_path / "store.p12"
    binary.write_bytes(b"\x30\x82\x01\x00" + bytes(64))
    untyped = properties(tmp_path / "untyped.properties", security_protocol="SSL", ssl_truststore_location=binary)
    not_pem = run(secured_broker.listeners["SSL"], "topics", "--list", config=untyped)
    assert not_pem.returncode == 2 and "is not a PEM file" in not_pem.stderr

    no_cert = properties(tmp_path / "nocert.properties", security_protocol="SSL", ssl_truststore_location=certs.ca)
    without = run(secured_broker.listeners["SSL"], "topics", "--list", "--timeout", "5", config=no_cert)
    assert without.returncode == 2 and without.stderr.startswith("pybroker topics: ")

    missing = run(sasl, "groups", "list", config=tmp_path / "absent.properties")
    assert missing.returncode == 2 and "cannot read" in missing.stderr


@pytest.mark.parametrize(
    ("listener", "expected"),
    [
        # The SSL listener requires a client certificate: the probe's TLS handshake passes, what follows does not.
        ("SSL", "the listener speaks TLS: it expects SSL or SASL_SSL"),
        ("SASL_SSL", "the listener appears to expect SASL_SSL (SASL mechanisms PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"),
        ("SASL_PLAINTEXT", ("the listener appears to expect SASL_PLAINTEXT (SASL mechanisms PLAIN, SCRAM-SHA-256, "
                           "SCRAM-SHA-512)")),
    ],
)
def test_a_plaintext_client_on_a_secured_listener_is_told_what_to_pass(secured_broker, listener, expected):
    address = secured_broker.listeners[listener]
    done = run(address, "topics", "--list", "--timeout", "5")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"pybroker topics: the broker at {address} closed the connection instead of "
                                  "answering Metadata: ")
    assert expected in done.stderr
    assert done.stderr.endswith("; if this listener uses SSL or SASL, pass its client settings with "
                                "--command-config FILE\n")
    # The broker says on its side which listener the bytes arrived on, and what the client may be using.
    if listener == "SASL_PLAINTEXT":
        wanted = "during SASL handshake; the client may not be using SASL"
    else:
        wanted = f"not a TLS handshake; the listener's security protocol is {listener}, the client may be using PLAINTEXT"
    assert wait_until(lambda: wanted in secured_broker.log_text(), timeout_s=10), secured_broker.log_text()[-2000:]


def test_a_plaintext_client_on_an_ssl_listener_without_client_certificates(tmp_path, certs):
    broker = BrokerProcess(
        tmp_path,
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.location": str(certs.server_keystore),
        },
    ).start()
    try:
        ports = [m.group(1) for line in broker.output if (m := re.search(r"listening on SSL://127\.0\.0\.1:(\d+)", line))]
        address = f"127.0.0.1:{ports[0]}"
        done = run(address, "groups", "--list", "--timeout", "5")
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert f"the broker at {address} closed the connection" in done.stderr
        assert ": the listener appears to expect SSL (TLS without SASL); if this listener uses SSL or SASL" in done.stderr
    finally:
        broker.stop()
