"""SCRAM credentials given at format time (``pybroker storage format --add-scram``, KIP-900).

- The command line: kafka-storage.sh's syntax, one line and exit code 1 on a
  bad argument with nothing written, a bootstrap.checkpoint without the
  password, a note on a node without the controller role.
- A single combined node formatted with alice's SCRAM-SHA-256 credential: a
  confluent-kafka client authenticates as alice right after the start, with
  no AlterUserScramCredentials, and DescribeUserScramCredentials lists her. A
  restart with a changed password shows the bootstrap is applied once: the log
  already has metadata, so the file is ignored.
- Three combined nodes, each formatted with the same credentials, whose
  inter-broker listener authenticates the nodes with SCRAM-SHA-512 as the
  ``broker`` user that only --add-scram created (the only super user of the
  authorizer): replication between the nodes works, and alice (SCRAM-SHA-256)
  produces once given an ACL. The voters reach each other on the controller
  listener with PLAIN: they must before any credential is in the metadata log
  (Kafka cannot do SCRAM between controllers either, KAFKA-15513); a
  broker-only node then registers and heartbeats there with SCRAM-SHA-512.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from broker.config import STANDARD_AUTHORIZER
from broker.net.node_client import ClientSecurity, KafkaClientConnection
from broker.security.sasl_client import ScramClient
from controller.features import default_feature_levels
from controller.metadata.bootstrap import BOOTSTRAP_FILE, read_bootstrap_file
from protocol.scram import ScramMechanism as Mechanism
from tests.cluster.replication_harness import CLUSTER_ID, NODE_IDS, ReplicatedCluster, wait_until
from tests.cluster.test_quorum_processes import MD, METADATA, free_ports
from tests.conftest import PROJECT_ROOT, BrokerProcess

BOUND_S = 30.0
ALICE = ("alice", "alice-secret")
NODE_USER = ("broker", "broker-secret")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
ADD_SCRAM = [
    "--add-scram", f"SCRAM-SHA-256=[name={ALICE[0]},password={ALICE[1]}]",
    "--add-scram", f'SCRAM-SHA-512=[name={NODE_USER[0]},password="{NODE_USER[1]}",iterations=8192]',
]


def pybroker(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "broker", *args], check=False, capture_output=True, text=True, env=env, timeout=60)


def write_properties(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def format_node(data_dir: Path, overrides: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    """``pybroker storage format`` with the settings the node will start with."""
    settings = {**BrokerProcess(data_dir, overrides).overrides}
    settings.pop("cluster.id", None)
    config = write_properties(data_dir / "server.properties", settings)
    return pybroker("storage", "format", "--config", str(config), "--cluster-id", CLUSTER_ID, *extra)


def scram_settings(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def describe_scram(admin: AdminClient, user: str) -> list[tuple[str, int]]:
    description = admin.describe_user_scram_credentials([user])[user].result(timeout=BOUND_S)
    return sorted((info.mechanism.name, info.iterations) for info in description.scram_credential_infos)


def produce(settings: dict, topic: str, count: int) -> list:
    producer = Producer({**settings, "acks": "all", "message.timeout.ms": 20000})
    errors: list = []
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    return errors


# ----------------------------------------------------------------------------- the command line


def test_bad_add_scram_arguments_are_one_line_and_exit_1_with_nothing_written(tmp_path):
    overrides = {"listeners": "PLAINTEXT://127.0.0.1:0"}
    for argument, expected in [
        ("SCRAM-SHA-256", "no '=' after the mechanism"),
        ("SCRAM-SHA-256[name=alice,password=x]", "'SCRAM-SHA-256[name' is not supported"),
        ("SCRAM-SHA-1=[name=alice,password=x]", "is not supported"),
        ("SCRAM-SHA-256=name=alice,password=x]", "must start with '['"),
        ("SCRAM-SHA-256=[name=alice,password=x", "must end with ']'"),
        ("SCRAM-SHA-256=[password=x]", "'name' is required"),
        ("SCRAM-SHA-256=[name=alice]", "give 'password' or 'saltedpassword'"),
        ("SCRAM-SHA-256=[name=alice,password=x,iterations=4095]", "iterations must be >= 4096"),
        ("SCRAM-SHA-512=[name=alice,password=x,iterations=16385]", "iterations must be <= 16384"),
        ("SCRAM-SHA-256=[name=alice,saltedpassword=\"YCE=\"]", "'saltedpassword' needs 'salt'"),
        ("SCRAM-SHA-256=[name=alice,salt=\"%%%\",saltedpassword=\"YCE=\"]", "salt is not valid base64"),
        ("SCRAM-SHA-256=[name=alice,pasword=x]", "unknown setting 'pasword'"),
    ]:
        result = format_node(tmp_path, overrides, "--add-scram", argument)
        assert result.returncode == 1, (argument, result)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (argument, result.stderr)
        assert not (tmp_path / "logs").exists(), argument


def test_the_bootstrap_file_holds_keys_not_the_password(tmp_path):
    result = format_node(
        tmp_path,
        {"listeners": "PLAINTEXT://127.0.0.1:0"},
        *ADD_SCRAM,
        "--add-scram", 'SCRAM-SHA-512=[name=carol,iterations=8192,salt="N3E=",saltedpassword="YCE="]',
    )
    assert result.returncode == 0, result.stderr
    assert "SCRAM credentials of alice (SCRAM-SHA-256), broker (SCRAM-SHA-512), carol (SCRAM-SHA-512)" in result.stdout
    data = (tmp_path / "logs" / BOOTSTRAP_FILE).read_bytes()
    assert ALICE[1].encode() not in data and NODE_USER[1].encode() not in data
    records = [record for _, record in read_bootstrap_file(tmp_path / "logs")]
    assert [(r.name, r.mechanism, r.iterations) for r in records] == [("alice", 1, 4096), ("broker", 2, 8192), ("carol", 2, 8192)]
    assert records[2].salt == b"7q"  # base64 "N3E=" as given


def test_a_node_without_the_controller_role_is_formatted_with_a_note(tmp_path):
    overrides = {
        "process.roles": "broker",
        "controller.quorum.voters": "1@127.0.0.1:19093",
        "controller.listener.names": "CONTROLLER",
        "node.id": "4",
    }
    result = format_node(tmp_path, overrides, *ADD_SCRAM)
    assert result.returncode == 0, result.stderr
    assert "never applies its --add-scram credentials" in result.stderr


# ----------------------------------------------------------------------------- a single node


def test_a_single_node_starts_with_the_credentials_and_applies_them_once(tmp_path):
    overrides = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512"}
    result = format_node(tmp_path, overrides, *ADD_SCRAM)
    assert result.returncode == 0, result.stderr
    broker = BrokerProcess(tmp_path, overrides).start()
    try:
        alice = scram_settings(broker.bootstrap, *ALICE)
        admin = AdminClient(alice)  # the first request authenticates as alice
        assert describe_scram(admin, "alice") == [("SCRAM_SHA_256", 4096)]
        assert describe_scram(admin, "broker") == [("SCRAM_SHA_512", 8192)]
        assert produce(alice, f"boot-{uuid.uuid4().hex[:6]}", 3) == [None] * 3
        # A new password, then a restart: the log has metadata, so the file is not applied again.
        upsertion = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"changed")
        for future in admin.alter_user_scram_credentials([upsertion]).values():
            future.result(timeout=BOUND_S)
        # The two credentials after the new cluster's feature levels.
        assert f"writing the bootstrap metadata ({2 + len(default_feature_levels())} records)" in broker.log_text()
    finally:
        broker.stop()
    broker = BrokerProcess(tmp_path, overrides).start()
    try:
        assert "the bootstrap metadata (feature levels, bootstrap.checkpoint) is not written" in broker.log_text()
        admin = AdminClient(scram_settings(broker.bootstrap, "alice", "changed"))
        assert describe_scram(admin, "alice") == [("SCRAM_SHA_256", 4096)]
        errors: list = []
        refused = Producer({**scram_settings(broker.bootstrap, *ALICE), "error_cb": errors.append})
        wait_until(lambda: refused.poll(0.2) or errors, 10)
        assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    finally:
        broker.stop()


# ----------------------------------------------------------------------------- three nodes, SCRAM between them


def node_settings() -> dict[str, str]:
    plain = f'{PLAIN_MODULE} required username="{NODE_USER[0]}" password="{NODE_USER[1]}" user_{NODE_USER[0]}="{NODE_USER[1]}";'
    return {
        "listener.security.protocol.map": "SECURE:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SECURE",
        "listener.name.secure.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        # The node's own credentials on the inter-broker listener; the listener's users are the metadata's.
        "listener.name.secure.scram-sha-512.sasl.jaas.config": (
            f'{SCRAM_MODULE} required username="{NODE_USER[0]}" password="{NODE_USER[1]}";'
        ),
        # The voters reach each other with PLAIN; brokers may come with SCRAM-SHA-512 (below).
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": plain,
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": f"User:{NODE_USER[0]}",
        "auto.leader.rebalance.enable": "false",
    }


class ScramCluster(ReplicatedCluster):
    """The harness's three nodes, formatted with --add-scram, their inter-broker listener on SCRAM-SHA-512."""

    def __init__(self, root):
        super().__init__(root, extra=node_settings())
        for node in NODE_IDS:
            listeners = f"SECURE://127.0.0.1:{self.client_ports[node]},CONTROLLER://127.0.0.1:{self.controller_ports[node]}"
            self.overrides[node]["listeners"] = listeners
            self.nodes[node].overrides["listeners"] = listeners
        self.security = ClientSecurity(
            "SECURE", "SASL_PLAINTEXT", None, "SCRAM-SHA-512", lambda: ScramClient(Mechanism.SCRAM_SHA_512, *NODE_USER)
        )

    def format(self) -> None:
        for node in NODE_IDS:
            result = format_node(self.nodes[node].data_dir, self.overrides[node], *ADD_SCRAM)
            assert result.returncode == 0, result.stderr

    def client_config(self, user=NODE_USER, mechanism="SCRAM-SHA-512") -> dict:
        return scram_settings(self.bootstrap(), *user, mechanism)

    def admin(self, nodes=None) -> AdminClient:
        return AdminClient(self.client_config())

    def _metadata(self, node: int, timeout_ms: int = 3000):
        process = self.nodes[node]

        async def ask():
            connection = KafkaClientConnection(
                process.host, process.port, "scram-test", connect_timeout_ms=timeout_ms, security=self.security
            )
            try:
                body = MD.MetadataRequest(topics=None, allow_auto_topic_creation=False)
                return await connection.request(METADATA, 12, body, timeout_ms=timeout_ms)
            finally:
                connection.close()

        return asyncio.run(ask())


def test_three_nodes_authenticate_each_other_with_a_scram_user_made_at_format_time(tmp_path):
    cluster = ScramCluster(tmp_path)
    try:
        cluster.format()
        cluster.start()
        assert wait_until(lambda: cluster.brokers(1) == list(NODE_IDS), BOUND_S), cluster.brokers(1)
        admin = cluster.admin()
        assert describe_scram(admin, "alice") == [("SCRAM_SHA_256", 4096)]
        topic = f"scram-{uuid.uuid4().hex[:6]}"
        for future in admin.create_topics([NewTopic(topic, 1, 3)], request_timeout=20).values():
            future.result(timeout=BOUND_S)
        # Followers fetch from the leader as User:broker over SCRAM-SHA-512: all three join the ISR.
        assert cluster.wait_for_isr(topic, 0, NODE_IDS, BOUND_S, everywhere=True) is not None, cluster.describe(topic)
        alice = cluster.client_config(ALICE, "SCRAM-SHA-256")
        refused = produce(alice, topic, 1)
        assert [e.code() for e in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], refused
        acl = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
        for future in admin.create_acls([acl], request_timeout=30).values():
            future.result(timeout=BOUND_S)
        assert wait_until(lambda: produce(alice, topic, 10) == [None] * 10, BOUND_S, interval_s=1.0)
        assert wait_until(lambda: cluster.segments_identical(topic, 0, 10)[0], BOUND_S), cluster.segments_identical(topic, 0, 10)[1]
        # The credentials went into the log once, by the first active controller.
        writers = [n for n in NODE_IDS if "writing the bootstrap metadata" in cluster.nodes[n].log_text()]
        assert len(writers) == 1, writers

        # A broker-only node reaches the controllers with SCRAM-SHA-512 as the same user:
        # registration, heartbeats and the metadata log all go through it.
        (port,) = free_ports(1)
        overrides = {
            **cluster.overrides[1],
            "node.id": "4",
            "process.roles": "broker",
            "listeners": f"SECURE://127.0.0.1:{port}",
            "broker.rack": "rack-4",
            "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
            "listener.name.controller.scram-sha-512.sasl.jaas.config": (
                f'{SCRAM_MODULE} required username="{NODE_USER[0]}" password="{NODE_USER[1]}";'
            ),
        }
        data_dir = tmp_path / "node4"
        data_dir.mkdir()
        result = format_node(data_dir, overrides, *ADD_SCRAM)
        assert result.returncode == 0 and "never applies" in result.stderr, result
        broker = BrokerProcess(data_dir, overrides)
        try:
            broker.start()
            assert wait_until(lambda: cluster.brokers(1) == [*NODE_IDS, 4], BOUND_S), cluster.brokers(1)
            assert "authentication failed" not in broker.log_text().lower()
            assert "bootstrap" not in broker.log_text()  # a broker never applies the file
        finally:
            broker.stop()
    except BaseException:
        cluster.save_output()
        raise
    finally:
        cluster.stop()
