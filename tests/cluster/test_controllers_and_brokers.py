"""Three controllers and two brokers as separate processes, with real clients.

The brokers follow the metadata log as observers, register and heartbeat,
and forward admin requests to the active controller; topics are spread over
both brokers and serve produce and fetch. SIGKILL of the active controller
elects a new one and clients keep creating topics; a broker that stops
heartbeating is fenced, and unfenced when it returns.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.cluster.test_quorum_processes import (
    alive_brokers,
    find_leader,
    free_ports,
    metadata,
    start_together,
    wait_until_true,
)
from tests.conftest import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CLUSTER_ID = "Q2xvdWQtY2x1c3Rlci0wMQ"
SESSION_TIMEOUT_MS = 1500
FAILOVER_BOUND_S = 2.0 + 4.0


class Cluster:
    def __init__(self, root):
        self.controller_ports = dict(zip((1, 2, 3), free_ports(3)))
        voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in self.controller_ports.items())
        common = {
            "cluster.id": CLUSTER_ID,
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters,
            "controller.quorum.election.timeout.ms": "500",
            "controller.quorum.fetch.timeout.ms": "1000",
            "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "broker.heartbeat.interval.ms": "200",
        }
        self.nodes: dict[int, BrokerProcess] = {}
        for node, port in self.controller_ports.items():
            (root / f"controller{node}").mkdir()
            self.nodes[node] = BrokerProcess(
                root / f"controller{node}",
                {**common, "node.id": str(node), "process.roles": "controller", "listeners": f"CONTROLLER://127.0.0.1:{port}"},
            )
        for node in (4, 5):
            (root / f"broker{node}").mkdir()
            self.nodes[node] = BrokerProcess(
                root / f"broker{node}",
                {**common, "node.id": str(node), "process.roles": "broker", "listeners": "PLAINTEXT://127.0.0.1:0"},
            )

    def start(self, nodes) -> None:
        start_together([self.nodes[n] for n in nodes])

    @property
    def bootstrap(self) -> str:
        return ",".join(self.nodes[n].bootstrap for n in (4, 5))

    def stop(self) -> None:
        for process in self.nodes.values():
            process.stop()


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path)
    yield cluster
    cluster.stop()


def create(admin: AdminClient, *topics: NewTopic) -> None:
    for future in admin.create_topics(list(topics), request_timeout=20).values():
        future.result(timeout=30)


def test_controllers_and_brokers(cluster):
    cluster.start([1, 2, 3, 4, 5])
    leader, _ = find_leader(cluster, [1, 2, 3], 15)
    assert leader is not None
    broker4, broker5 = cluster.nodes[4], cluster.nodes[5]
    for broker in (broker4, broker5):
        assert wait_until_true(lambda b=broker: alive_brokers(b) == [4, 5], 15)

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create(admin, NewTopic("orders", num_partitions=4, replication_factor=1))
    # Committed by the controller; each broker learns it from the metadata log.
    for broker in (broker4, broker5):
        assert wait_until_true(lambda b=broker: "orders" in {t.name for t in metadata(b).topics}, 10)
    orders = next(t for t in metadata(broker4).topics if t.name == "orders")
    assert {p.leader_id for p in orders.partitions} == {4, 5}

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(200):
        producer.produce("orders", key=str(i).encode(), value=f"order-{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-orders", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("orders", p, 0) for p in range(4)])
    seen = set()
    deadline = time.monotonic() + 30
    while len(seen) < 200 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
    consumer.close()
    assert len(seen) == 200

    # The active controller dies: a new one is elected and topics can still be created.
    cluster.nodes[leader].stop(signal.SIGKILL)
    survivors = [n for n in (1, 2, 3) if n != leader]
    new_leader, _ = find_leader(cluster, survivors, FAILOVER_BOUND_S)
    assert new_leader is not None and new_leader != leader
    # With a 1.5 s session a broker may be fenced before it finds the new
    # controller; it is unfenced once its heartbeats reach it.
    for broker in (broker4, broker5):
        assert wait_until_true(lambda b=broker: alive_brokers(b) == [4, 5], SESSION_TIMEOUT_MS / 1000 + 10)
    create(admin, NewTopic("after-failover", num_partitions=2, replication_factor=1))
    assert wait_until_true(lambda: "orders" in {t.name for t in metadata(broker5).topics}, 5)

    # Broker 5 stops heartbeating: fenced, then unfenced when it returns.
    broker5.process.send_signal(signal.SIGSTOP)
    try:
        assert wait_until_true(lambda: alive_brokers(broker4) == [4], SESSION_TIMEOUT_MS / 1000 + 6)
    finally:
        broker5.process.send_signal(signal.SIGCONT)
    assert wait_until_true(lambda: alive_brokers(broker4) == [4, 5], 15)
