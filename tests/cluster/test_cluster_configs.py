"""configs/cluster/node-{1,2,3}.properties: what they say (one port scheme,
distinct ids, ports and data dirs, one voters line, RF=3 defaults), and a
cluster started from copies of them (ports moved to free ones) with the
commands their comments give. On it: ``pybroker leader-election`` after a
node's restart (with auto.leader.rebalance.enable=false, so only the tool
moves leaders), then a full stop and start with the rebalance on and its
300 s interval: the preferred replicas lead again within 30 s."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from broker.config import parse_properties
from tests.cluster.test_quorum_processes import free_ports, start_together
from tests.conftest import PROJECT_ROOT, BrokerProcess

CONFIGS = PROJECT_ROOT / "configs" / "cluster"
NODES = (1, 2, 3)
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
DOCUMENTED_PORTS = range(9092, 9107)  # clients, controllers, consoles, REST, metrics: 3 each
PREFERRED_BACK_S = 30


def read(node: int) -> dict[str, str]:
    return parse_properties((CONFIGS / f"node-{node}.properties").read_text())


def port(url: str) -> int:
    return int(url.rstrip("/").rsplit(":", 1)[1])


def test_the_three_files_describe_one_cluster_on_the_documented_ports():
    configs = {n: read(n) for n in NODES}
    voters = {c["controller.quorum.voters"] for c in configs.values()}
    assert voters == {"1@127.0.0.1:9095,2@127.0.0.1:9096,3@127.0.0.1:9097"}
    used = []
    for n, c in configs.items():
        assert c["node.id"] == str(n) and c["process.roles"] == "broker,controller"
        assert c["log.dirs"] == f"data/node-{n}"
        listeners = dict(item.split("://") for item in c["listeners"].split(","))
        assert port(listeners["PLAINTEXT"]) == 9091 + n and port(listeners["CONTROLLER"]) == 9094 + n
        assert c["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{9091 + n}"
        assert (c["inter.broker.listener.name"], c["controller.listener.names"]) == ("PLAINTEXT", "CONTROLLER")
        assert (port(c["console.listener"]), port(c["rest.listener"]), port(c["metrics.listener"])) == (9097 + n, 9100 + n, 9103 + n)
        assert (c["default.replication.factor"], c["min.insync.replicas"], c["offsets.topic.replication.factor"],
                c["transaction.state.log.replication.factor"], c["transaction.state.log.min.isr"]) == ("3", "2", "3", "3", "2")
        used += [port(listeners["PLAINTEXT"]), port(listeners["CONTROLLER"]), port(c["console.listener"]),
                 port(c["rest.listener"]), port(c["metrics.listener"])]
    assert sorted(used) == list(DOCUMENTED_PORTS)


def test_the_fourth_broker_joins_the_same_quorum_on_a_port_of_its_own():
    nodes = {n: read(n) for n in NODES}
    fourth = parse_properties((CONFIGS / "broker-4.properties").read_text())
    assert (fourth["node.id"], fourth["process.roles"], fourth["log.dirs"]) == ("4", "broker", "data/node-4")
    assert fourth["controller.quorum.voters"] == nodes[1]["controller.quorum.voters"]
    assert fourth["listeners"] == fourth["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9107"
    assert 9107 not in DOCUMENTED_PORTS
    for key in ("listener.security.protocol.map", "inter.broker.listener.name", "controller.listener.names",
                "default.replication.factor", "min.insync.replicas", "offsets.topic.replication.factor"):
        assert fourth[key] == nodes[1][key], key


class ConfigCluster:
    """Nodes started with ``pybroker start --config <copy>`` from ``root``."""

    def __init__(self, root: Path, extra: str = ""):
        self.root = root
        self.mapping = dict(zip(DOCUMENTED_PORTS, free_ports(len(DOCUMENTED_PORTS))))
        self.nodes: dict[int, BrokerProcess] = {}
        self.write(extra)
        for n in NODES:
            answer = subprocess.run(
                [sys.executable, "-m", "broker", "storage", "format", "--config", str(self.config(n)), "--cluster-id", CLUSTER_ID],
                cwd=root, capture_output=True, text=True, timeout=60, env=_env(),
            )
            assert answer.returncode == 0, answer.stderr
            assert f"Formatting {root / 'data' / f'node-{n}'}" in answer.stdout or "Formatting data/node-" in answer.stdout

    def config(self, n: int) -> Path:
        return self.root / f"node-{n}.properties"

    def write(self, extra: str) -> None:
        for n in NODES:
            text = (CONFIGS / f"node-{n}.properties").read_text()
            text = re.sub(r"(?<=:)(\d{4})\b", lambda m: str(self.mapping.get(int(m.group(1)), m.group(1))), text)
            self.config(n).write_text(text + extra)

    def process(self, n: int) -> BrokerProcess:
        node = BrokerProcess(self.root, config_file=self.config(n))
        node.overrides = {}  # exactly the file, as a user starts it
        return node

    def start(self) -> None:
        self.nodes = {n: self.process(n) for n in NODES}
        start_together(list(self.nodes.values()))

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.mapping[9091 + n]}" for n in NODES)

    def partitions(self, admin: AdminClient, topic: str):
        try:
            description = admin.describe_topics(TopicCollection([topic]), request_timeout=5)[topic].result(timeout=10)
        except Exception:
            return None
        return {
            p.id: (p.leader.id if p.leader is not None else -1, [r.id for r in p.replicas], sorted(r.id for r in p.isr))
            for p in description.partitions
        }


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(PROJECT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def wait_until(predicate, timeout_s: float, interval_s: float = 0.25):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


def leader_election(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "leader-election", "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, timeout=60, env=_env(),
    )


@pytest.fixture
def cluster(tmp_path):
    made = ConfigCluster(tmp_path, extra="\nauto.leader.rebalance.enable=false\n")
    try:
        yield made
    finally:
        made.stop()
        for n, node in made.nodes.items():
            (tmp_path / f"node-{n}.out").write_text(node.log_text())


def test_leader_election_tool_then_preferred_leaders_back_after_a_full_restart(cluster, tmp_path):
    cluster.start()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = "spread"
    admin.create_topics([NewTopic(topic, num_partitions=6)], request_timeout=20)[topic].result(timeout=30)

    def all_in_sync():
        state = cluster.partitions(admin, topic)
        return state if state and all(isr == [1, 2, 3] for _, _, isr in state.values()) else None

    state = wait_until(all_in_sync, 30)
    assert state, cluster.partitions(admin, topic)
    preferred = {p: replicas[0] for p, (_, replicas, _) in state.items()}
    assert sorted(preferred.values()) == [1, 1, 2, 2, 3, 3]
    assert all(leader == preferred[p] for p, (leader, _, _) in state.items())

    # Node 1 restarts; with the automatic rebalance off, its partitions stay led by others.
    cluster.nodes[1].stop()
    def none_led_by_1():
        state = cluster.partitions(admin, topic)
        return state is not None and all(leader not in (1, -1) for leader, _, _ in state.values())

    assert wait_until(none_led_by_1, 30), cluster.partitions(admin, topic)
    cluster.nodes[1] = cluster.process(1).start()
    assert wait_until(all_in_sync, 60)
    state = cluster.partitions(admin, topic)
    moved = sorted(p for p, (leader, replicas, _) in state.items() if leader != replicas[0])
    assert moved == sorted(p for p, node in preferred.items() if node == 1)

    answer = leader_election(cluster.bootstrap, "--election-type", "preferred", "--all-topic-partitions")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.splitlines() == [
        "Successfully completed leader election (PREFERRED) for partitions " + ", ".join(f"{topic}-{p}" for p in moved)
    ]
    state = cluster.partitions(admin, topic)
    assert all(leader == replicas[0] for leader, replicas, _ in state.values())

    election_file = tmp_path / "election.json"
    election_file.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 1}, {"topic": topic, "partition": 0}]}))
    answer = leader_election(cluster.bootstrap, "--election-type", "PREFERRED", "--path-to-json-file", str(election_file))
    assert (answer.returncode, answer.stdout) == (0, f"Valid replica already elected for partitions {topic}-0, {topic}-1\n")
    answer = leader_election(cluster.bootstrap, "--election-type", "Unclean", "--topic", topic, "--partition", "9")
    assert answer.returncode == 1
    assert answer.stdout.startswith(f"Error completing leader election (UNCLEAN) for partition: {topic}-9: UNKNOWN_TOPIC_OR_PARTITION")
    assert answer.stderr.strip() == "1 replica(s) could not be elected"

    # A full stop, one node after another, then a start with the rebalance on at
    # its default 300 s interval: the last node to stop leads everything at first.
    for n in NODES:
        cluster.nodes[n].stop()
    cluster.write("")
    cluster.start()
    def preferred_lead():
        state = cluster.partitions(admin, topic)
        return state if state and all(leader == replicas[0] for leader, replicas, _ in state.values()) else None

    started = time.monotonic()
    state = wait_until(preferred_lead, PREFERRED_BACK_S)
    print(f"preferred leaders back {time.monotonic() - started:.1f} s after the nodes started")
    assert state, f"leaders {cluster.partitions(admin, topic)} not back on their preferred replicas in {PREFERRED_BACK_S} s"
    # Elected because the preferred replicas came back in sync, not by the imbalance check.
    assert any("preferred replica(s) back in sync lead their partitions again" in node.log_text()
               for node in cluster.nodes.values())
