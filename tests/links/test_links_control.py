"""Cluster links and mirror topics, control plane, against two real single-node
pybroker clusters: a source (A) and a destination (B, with a controller
listener so that a test can send MirrorPartitionsStopped as a partition
leader would). Links and mirrors are driven with ``pybroker cluster-links``
and ``pybroker mirrors`` as a user runs them."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.tools.client import KafkaConnection
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes
from tests.conftest import PROJECT_ROOT, BrokerProcess, wait_until
from tests.interop._support import create_topic, unique_topic

_ST = struct_classes(APIS_BY_NAME["MirrorPartitionsStopped"].request)
_MD = struct_classes(APIS_BY_NAME["Metadata"].request)
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="mirror" password="s3cret";'
SYNCED = {"retention.ms": "123456", "max.message.bytes": "500000"}
TOOL_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pybroker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "broker", *args], check=False, capture_output=True, text=True, env=env, timeout=TOOL_TIMEOUT_S
    )
    if check:
        assert done.returncode == 0, f"pybroker {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


class Destination:
    """A combined node with a controller listener (a quorum of one)."""

    def __init__(self, data_dir: Path):
        self.controller_port = free_port()
        self.process = BrokerProcess(data_dir, {
            "node.id": "1",
            "cluster.id": "bGlua3MtZGVzdGluYXRpb24",
            "process.roles": "broker,controller",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{self.controller_port}",
        })

    def start(self) -> Destination:
        self.process.start()
        return self

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    def broker_epoch(self) -> int:
        """Broker 1's epoch, read from the metadata log with ``pybroker dump-log`` (its last registration)."""
        directory = Path(self.process.overrides["log.dirs"]) / "__cluster_metadata-0"
        segments = sorted(str(p) for p in directory.glob("*.log"))
        out = pybroker("dump-log", "--print-data-log", *segments).stdout
        epochs = re.findall(r"RegisterBrokerRecord\(broker_id=1,.*?broker_epoch=(\d+)", out)
        assert epochs, out[-2000:]
        return int(epochs[-1])


@pytest.fixture
def clusters(tmp_path):
    source = BrokerProcess(tmp_path / "a")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    destination = Destination(tmp_path / "b")
    try:
        source.start()
        destination.start()
        yield source, destination
    finally:
        destination.process.stop()
        source.stop()


def links(dest, *args, check=True):
    return pybroker("cluster-links", "--bootstrap-server", dest.bootstrap, *args, check=check)


def mirrors(dest, *args, check=True):
    return pybroker("mirrors", "--bootstrap-server", dest.bootstrap, *args, check=check)


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    out = pybroker("configs", "--bootstrap-server", bootstrap, "--describe", "--entity-type", "topics",
                   "--entity-name", topic, "--output", "json").stdout
    entity = json.loads(out)["entities"][0]
    return {name: c["value"] for name, c in entity["configs"].items()}


def partition_count(bootstrap: str, topic: str) -> int:
    out = pybroker("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic, "--output", "json").stdout
    return len(json.loads(out)["topics"][0]["partitions"])


def leader_epochs(bootstrap: str, topic: str):
    """(topic id, {partition: leader epoch}) from a Metadata request."""
    host, port = bootstrap.rsplit(":", 1)
    connection = KafkaConnection(host, int(port), 10)
    try:
        response = connection.call(
            "Metadata", 12, topics=[_MD.MetadataRequestTopic(topic_id=ZERO_UUID, name=topic)],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        )
    finally:
        connection.close()
    found = response.topics[0]
    assert found.error_code == ErrorCode.NONE, found
    return found.topic_id, {p.partition_index: p.leader_epoch for p in found.partitions}


def test_links_and_mirrors_with_the_tools(clusters):
    source, dest = clusters
    done = links(dest, "--create", "--link", "east", "--config",
                 f"bootstrap.servers={source.bootstrap},127.0.0.1:1,sasl.jaas.config={JAAS}")
    assert "Cluster link 'east' creation successfully completed." in done.stdout
    again = links(dest, "--create", "--link", "east", "--config", f"bootstrap.servers={source.bootstrap}", check=False)
    assert again.returncode == 1 and "DUPLICATE_RESOURCE" in again.stderr
    typo = links(dest, "--create", "--link", "west", "--config", f"bootstrap.servers={source.bootstrap},consumer.ofset.sync.ms=5",
                 check=False)
    assert typo.returncode == 1 and "consumer.ofset.sync.ms" in typo.stderr

    described = json.loads(links(dest, "--describe", "--link", "east", "--output", "json").stdout)["links"][0]
    assert described["configs"]["bootstrap.servers"]["value"] == f"{source.bootstrap},127.0.0.1:1"
    assert described["configs"]["sasl.jaas.config"] == {"value": None, "sensitive": True}
    text = links(dest, "--describe", "--link", "east").stdout
    assert "sasl.jaas.config=(sensitive)" in text and "s3cret" not in text
    listed = links(dest, "--list").stdout
    assert "Link name: 'east'" in listed

    links(dest, "--alter", "--link", "east", "--add-config", f"bootstrap.servers={source.bootstrap},consumer.offset.sync.ms=1000",
          "--delete-config", "sasl.jaas.config")
    configs = json.loads(links(dest, "--describe", "--link", "east", "--output", "json").stdout)["links"][0]["configs"]
    assert configs["consumer.offset.sync.ms"]["value"] == "1000" and "sasl.jaas.config" not in configs
    refused = links(dest, "--alter", "--link", "east", "--delete-config", "bootstrap.servers", check=False)
    assert refused.returncode == 1 and "cannot be deleted" in refused.stderr

    # A mirror of a 3-partition topic: same partition count, synced configs equal.
    topic = unique_topic("orders")
    create_topic(source.bootstrap, topic, partitions=3, configs={**SYNCED, "min.insync.replicas": "1"})
    done = mirrors(dest, "--create", "--mirror-topic", topic, "--link", "east")
    assert "(3 partitions)" in done.stdout
    assert partition_count(dest.bootstrap, topic) == 3
    mirrored = topic_configs(dest.bootstrap, topic)
    assert {k: mirrored.get(k) for k in SYNCED} == SYNCED
    assert "min.insync.replicas" not in mirrored  # not a synced config
    assert mirrors(dest, "--list", "--link", "east").stdout.split() == [topic]
    exists = mirrors(dest, "--create", "--mirror-topic", topic, "--link", "east", check=False)
    assert exists.returncode == 1 and "TOPIC_ALREADY_EXISTS" in exists.stderr
    missing = mirrors(dest, "--create", "--mirror-topic", "no-such-topic", "--link", "east", check=False)
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr

    # Synced configs and partitions follow the source, not the user.
    alter = pybroker("configs", "--bootstrap-server", dest.bootstrap, "--alter", "--entity-type", "topics", "--entity-name", topic,
                     "--add-config", "retention.ms=1", check=False)
    assert alter.returncode == 1 and "synced from the source" in alter.stderr
    grow = pybroker("topics", "--bootstrap-server", dest.bootstrap, "--alter", "--topic", topic, "--partitions", "5", check=False)
    assert grow.returncode == 1 and "mirror topic" in grow.stderr

    # The link cannot go while the mirror follows it; with --force it goes, and the mirror FAILED.
    kept = links(dest, "--delete", "--link", "east", check=False)
    assert kept.returncode == 1 and f"{topic} (ACTIVE)" in kept.stderr
    links(dest, "--delete", "--link", "east", "--force")
    assert "east" not in links(dest, "--list").stdout
    failed = mirrors(dest, "--pause", "--topics", topic, check=False)
    assert failed.returncode == 1 and "in state FAILED" in failed.stderr


def test_a_link_to_an_unreachable_source_is_refused_at_mirror_creation(clusters):
    _, dest = clusters
    links(dest, "--create", "--link", "dead", "--config", f"bootstrap.servers=127.0.0.1:{free_port()}")
    refused = mirrors(dest, "--create", "--mirror-topic", "orders", "--link", "dead", check=False)
    assert refused.returncode == 1
    assert "NETWORK_EXCEPTION" in refused.stderr and "cannot reach the source cluster of link dead" in refused.stderr
    unknown = mirrors(dest, "--create", "--mirror-topic", "orders", "--link", "nowhere", check=False)
    assert unknown.returncode == 1 and "RESOURCE_NOT_FOUND" in unknown.stderr


def test_promote_completes_when_the_leaders_report_the_stop_and_survives_a_restart(clusters):
    source, dest = clusters
    links(dest, "--create", "--link", "east", "--config", f"bootstrap.servers={source.bootstrap}")
    topic = unique_topic("promoted")
    create_topic(source.bootstrap, topic, partitions=2)
    mirrors(dest, "--create", "--mirror-topic", topic, "--link", "east")
    topic_id, epochs_before = leader_epochs(dest.bootstrap, topic)

    # A stale broker epoch is refused by the controller listener, whoever sends it.
    connection = KafkaConnection("127.0.0.1", dest.controller_port, 10)
    try:
        stale = connection.call(
            "MirrorPartitionsStopped", 0, broker_id=1, broker_epoch=dest.broker_epoch() + 1,
            topics=[_ST.StoppedMirrorTopic(topic_id=topic_id, partitions=[
                _ST.StoppedMirrorPartition(partition_index=0, leader_epoch=epochs_before[0], offset=0, last_epoch=-1,
                                           max_producer_id=-1)
            ])],
        )
        assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    finally:
        connection.close()

    # The source's topic is empty: each leader stops at 0 at once and reports it.
    done = mirrors(dest, "--promote", "--topics", topic)
    assert f"Mirror topic {topic} is PROMOTED." in done.stdout
    assert done.stdout.count("StopOffset: 0") == 2
    promoted = mirrors(dest, "--promote", "--topics", topic, "--timeout-ms", "0", check=False)
    assert promoted.returncode == 1 and "in state PROMOTED" in promoted.stderr

    after = leader_epochs(dest.bootstrap, topic)[1]
    assert after == {p: epoch + 1 for p, epoch in epochs_before.items()}
    # A promoted mirror is an ordinary topic: its synced configs are the user's now.
    pybroker("configs", "--bootstrap-server", dest.bootstrap, "--alter", "--entity-type", "topics", "--entity-name", topic,
             "--add-config", "retention.ms=1000")

    # Restarted, the destination still has the link and the mirror's state.
    other = unique_topic("kept")
    create_topic(source.bootstrap, other, partitions=1)
    mirrors(dest, "--create", "--mirror-topic", other, "--link", "east")
    dest.process.stop()
    dest.process.start()
    assert wait_until(lambda: "Link name: 'east'" in links(dest, "--list", check=False).stdout, 30)
    assert mirrors(dest, "--list").stdout.split() == sorted([topic, other])
    assert "in state PROMOTED" in mirrors(dest, "--promote", "--topics", topic, "--timeout-ms", "0", check=False).stderr
    assert "in state ACTIVE" in mirrors(dest, "--resume", "--topics", other, check=False).stderr


def test_mirror_operations_name_what_is_wrong(clusters):
    _, dest = clusters
    plain = unique_topic("plain")
    create_topic(dest.bootstrap, plain, partitions=1)
    refused = mirrors(dest, "--failover", "--topics", plain, "--timeout-ms", "0", check=False)
    assert refused.returncode == 1 and "not a mirror topic" in refused.stderr
    usage = mirrors(dest, "--promote", check=False)
    assert usage.returncode == 2 and "--promote needs --topics" in usage.stderr


def test_a_broker_that_is_not_the_controller_forwards_link_and_mirror_requests(tmp_path):
    """A controller-only node and two brokers: the link and the mirror are asked of a
    broker, forwarded to the active controller, which reads the source itself."""
    from tests.cluster.test_quorum_processes import start_together

    source = BrokerProcess(tmp_path / "a")
    (tmp_path / "a").mkdir()
    controller_port = free_port()
    common = {
        "cluster.id": "bGlua3MtZm9yd2FyZGluZw",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "offsets.topic.replication.factor": "1",
        "default.replication.factor": "2",
    }
    nodes = [BrokerProcess(tmp_path / "c1", {**common, "node.id": "1", "process.roles": "controller",
                                             "listeners": f"CONTROLLER://127.0.0.1:{controller_port}"})]
    for node in (2, 3):
        nodes.append(BrokerProcess(tmp_path / f"b{node}", {**common, "node.id": str(node), "process.roles": "broker",
                                                           "listeners": "PLAINTEXT://127.0.0.1:0"}))
    for process in nodes:
        process.data_dir.mkdir()
    try:
        source.start()
        start_together(nodes)
        broker = SimpleNamespace(bootstrap=nodes[1].bootstrap)
        links(broker, "--create", "--link", "east", "--config", f"bootstrap.servers={source.bootstrap}")
        topic = unique_topic("forwarded")
        create_topic(source.bootstrap, topic, partitions=3, configs={"retention.ms": "7200000"})
        done = mirrors(broker, "--create", "--mirror-topic", topic, "--link", "east")
        assert "(3 partitions)" in done.stdout
        other = SimpleNamespace(bootstrap=nodes[2].bootstrap)
        assert wait_until(lambda: mirrors(other, "--list", check=False).stdout.split() == [topic], 15)
        assert topic_configs(other.bootstrap, topic).get("retention.ms") == "7200000"
        host, port = other.bootstrap.rsplit(":", 1)
        connection = KafkaConnection(host, int(port), 10)
        try:
            response = connection.call("Metadata", 12, topics=[_MD.MetadataRequestTopic(topic_id=ZERO_UUID, name=topic)],
                                       allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        finally:
            connection.close()
        assert {len(p.replica_nodes) for p in response.topics[0].partitions} == {2}  # default.replication.factor
        refused = mirrors(broker, "--pause", "--topics", "nope", check=False)
        assert refused.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in refused.stderr
    finally:
        for process in reversed(nodes):
            process.stop()
        source.stop()
