"""Three combined nodes on 127.0.0.1 form a metadata quorum over real TCP.

The nodes elect a leader with Vote requests, replicate the metadata log with
Fetch, and keep every committed topic when the leader is SIGKILLed: a new
leader is elected within the election timeout plus a margin, and topics can
be created again. Requests go over the wire with the broker's own client.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time

import pytest

from broker.net.node_client import KafkaClientConnection
from controller.raft import wire
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests import ports
from tests.conftest import PROJECT_ROOT, BrokerProcess

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
ELECTION_TIMEOUT_MS = 500
FETCH_TIMEOUT_MS = 1000
# A new leader within (fetch timeout + 2x election timeout, the worst random draw) plus a margin.
SESSION_TIMEOUT_MS = 1500
FAILOVER_BOUND_S = (FETCH_TIMEOUT_MS + 2 * ELECTION_TIMEOUT_MS) / 1000 + 4.0

CREATE_TOPICS = APIS_BY_NAME["CreateTopics"]
METADATA = APIS_BY_NAME["Metadata"]
DESCRIBE_QUORUM = APIS_BY_NAME["DescribeQuorum"]
CT = struct_classes(CREATE_TOPICS.request)
MD = struct_classes(METADATA.request)


def free_ports(count: int) -> list[int]:
    """Ports for nodes started later (tests/ports.py: outside the ephemeral range)."""
    return ports.free_ports(count)


def start_together(processes) -> None:
    """Start nodes at once: each prints its start line only once a leader is
    known, which needs a majority of the voters running."""
    errors = []

    def run(process):
        try:
            process.start()
        except Exception as exc:  # reported below, with the node's output
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(process,)) for process in processes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]


class Cluster:
    def __init__(self, root, size: int = 3):
        self.controller_ports = dict(zip(range(1, size + 1), free_ports(size)))
        voters = ",".join(f"{node}@127.0.0.1:{port}" for node, port in self.controller_ports.items())
        self.nodes: dict[int, BrokerProcess] = {}
        for node, port in self.controller_ports.items():
            data_dir = root / f"node{node}"
            data_dir.mkdir()
            self.nodes[node] = BrokerProcess(
                data_dir,
                {
                    "node.id": str(node),
                    "cluster.id": CLUSTER_ID,
                    "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}",
                    "controller.listener.names": "CONTROLLER",
                    "controller.quorum.voters": voters,
                    "controller.quorum.election.timeout.ms": str(ELECTION_TIMEOUT_MS),
                    "controller.quorum.fetch.timeout.ms": str(FETCH_TIMEOUT_MS),
                    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                    "broker.heartbeat.interval.ms": "200",
                },
            )

    def start(self, nodes=None) -> None:
        start_together([self.nodes[n] for n in (nodes or self.nodes)])

    def stop(self) -> None:
        for process in self.nodes.values():
            process.stop()


async def request(host: str, port: int, api, version: int, body, timeout_ms: int = 5000):
    connection = KafkaClientConnection(host, port, "quorum-test")
    try:
        return await connection.request(api, version, body, timeout_ms=timeout_ms)
    finally:
        connection.close()


def describe_quorum(cluster: Cluster, node: int):
    """(leader id, epoch, high watermark) as ``node`` answers DescribeQuorum, or None."""

    async def ask():
        body = await request("127.0.0.1", cluster.controller_ports[node], DESCRIBE_QUORUM, 1, wire.describe_quorum_request(), 2000)
        partition = body.topics[0].partitions[0] if body.topics else None
        if partition is None or partition.error_code != ErrorCode.NONE:
            return None
        return partition.leader_id, partition.leader_epoch, partition.high_watermark, partition

    try:
        return asyncio.run(ask())
    except (TimeoutError, OSError, ConnectionError):
        return None


def find_leader(cluster: Cluster, alive, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for node in alive:
            answer = describe_quorum(cluster, node)
            if answer is not None:
                return node, answer
        time.sleep(0.05)
    return None, None


def create_topic(process: BrokerProcess, name: str, partitions: int = 1) -> int:
    body = CT.CreateTopicsRequest(
        topics=[CT.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=10000,
        validate_only=False,
    )
    response = asyncio.run(request(process.host, process.port, CREATE_TOPICS, 7, body, 15000))
    return response.topics[0].error_code


def metadata(process: BrokerProcess):
    body = MD.MetadataRequest(topics=None, allow_auto_topic_creation=False)
    return asyncio.run(request(process.host, process.port, METADATA, 12, body))


def topic_names(process: BrokerProcess) -> set[str]:
    return {t.name for t in metadata(process).topics}


def alive_brokers(process: BrokerProcess) -> list[int]:
    return sorted(b.node_id for b in metadata(process).brokers)


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path)
    yield cluster
    cluster.stop()


def test_three_controllers_elect_a_leader_and_survive_its_sigkill(cluster):
    cluster.start()
    leader, answer = find_leader(cluster, cluster.nodes, 15)
    assert leader is not None, "no leader answered DescribeQuorum"
    _, epoch, _, partition = answer
    assert sorted(v.replica_id for v in partition.current_voters) == [1, 2, 3]

    created = [f"before-{i}" for i in range(5)]
    for name in created:
        assert create_topic(cluster.nodes[leader], name) == ErrorCode.NONE
    # A follower forwards admin requests to the active controller.
    follower = next(n for n in cluster.nodes if n != leader)
    assert create_topic(cluster.nodes[follower], "at-a-follower") == ErrorCode.NONE
    assert create_topic(cluster.nodes[follower], "at-a-follower") == ErrorCode.TOPIC_ALREADY_EXISTS
    # The quorum tool asks any broker; a follower forwards to the leader.
    for via in (follower, leader):
        status = quorum_tool("--bootstrap-server", cluster.nodes[via].bootstrap, "describe", "--status")
        assert f"LeaderId:               {leader}" in status and "CurrentVoters:          [1,2,3]" in status
    table = quorum_tool("--bootstrap-controller", f"127.0.0.1:{cluster.controller_ports[leader]}", "describe", "--replication")
    assert table.splitlines()[0].split() == ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    assert sorted(line.split()[-1] for line in table.splitlines()[1:]) == ["Follower", "Follower", "Leader"]
    # Every node registered its broker listener; partitions spread over them.
    for process in cluster.nodes.values():
        assert wait_until_true(lambda p=process: alive_brokers(p) == [1, 2, 3], 10)
    assert create_topic(cluster.nodes[leader], "spread", partitions=6) == ErrorCode.NONE
    spread = next(t for t in metadata(cluster.nodes[leader]).topics if t.name == "spread")
    assert {p.leader_id for p in spread.partitions} == {1, 2, 3}
    # Followers learn committed topics from the log.
    for node, process in cluster.nodes.items():
        assert wait_until_true(lambda p=process: set(created) <= topic_names(p), 10), f"node {node} lacks topics"

    killed_at = time.monotonic()
    cluster.nodes[leader].stop(signal.SIGKILL)
    survivors = [n for n in cluster.nodes if n != leader]
    new_leader, answer = find_leader(cluster, survivors, FAILOVER_BOUND_S)
    failover_s = time.monotonic() - killed_at
    assert new_leader is not None and new_leader != leader, f"no new leader within {FAILOVER_BOUND_S} s"
    assert answer[1] > epoch
    # Nothing committed is lost, and the new leader takes new topics.
    assert set(created) <= topic_names(cluster.nodes[new_leader])
    assert wait_until_true(lambda: create_topic(cluster.nodes[new_leader], "after-failover") == ErrorCode.NONE, 10)
    print(f"failover: a new leader answered {failover_s * 1000:.0f} ms after the SIGKILL")

    # The killed node comes back as a follower and catches up from the log.
    cluster.nodes[leader] = BrokerProcess(cluster.nodes[leader].data_dir, cluster.nodes[leader].overrides)
    cluster.start([leader])
    wanted = {*created, "after-failover"}
    assert wait_until_true(lambda: wanted <= topic_names(cluster.nodes[leader]), 15)


def test_a_broker_that_stops_heartbeating_is_fenced_and_unfenced_on_return(cluster):
    cluster.start()
    leader, _ = find_leader(cluster, cluster.nodes, 15)
    assert leader is not None
    silent = next(n for n in cluster.nodes if n != leader)
    watcher = cluster.nodes[leader]
    assert wait_until_true(lambda: alive_brokers(watcher) == [1, 2, 3], 10)
    assert create_topic(watcher, "led-everywhere", partitions=6) == ErrorCode.NONE

    def leaders():
        topic = next(t for t in metadata(watcher).topics if t.name == "led-everywhere")
        return {p.partition_index: p.leader_id for p in topic.partitions}

    owned = [p for p, node in leaders().items() if node == silent]
    assert owned
    cluster.nodes[silent].process.send_signal(signal.SIGSTOP)
    try:
        # Fenced after the session timeout: gone from Metadata, its partitions leaderless
        # (each has one replica, so no one else is in sync to take over).
        assert wait_until_true(lambda: silent not in alive_brokers(watcher), SESSION_TIMEOUT_MS / 1000 + 5)
        assert all(leaders()[p] == -1 for p in owned)
    finally:
        cluster.nodes[silent].process.send_signal(signal.SIGCONT)
    # Back: it heartbeats, is unfenced and leads its partitions again.
    assert wait_until_true(lambda: alive_brokers(watcher) == [1, 2, 3], 15)
    assert wait_until_true(lambda: all(leaders()[p] == silent for p in owned), 10)


def quorum_tool(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "broker", "metadata-quorum", *args], capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def wait_until_true(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except (TimeoutError, OSError, ConnectionError):
            pass
        time.sleep(0.1)
    return False
