"""Three combined nodes whose node-to-node and controller traffic is SASL_SSL (PLAIN).

Every listener of every node speaks SASL_SSL: the clients' and inter-broker
one (SECURE) and the controller one (CONTROLLER). The nodes authenticate to
each other as User:broker, the only super user of the authorizer (no
User:ANONYMOUS), so everything between them must authenticate: the Raft
quorum (Vote, BeginQuorumEpoch, Fetch), registrations and heartbeats,
forwarded admin requests, AlterPartition and the followers' replica fetches.
The test checks that an RF=3 topic replicates to every node (all in the ISR,
the same batches on disk), that a SIGKILLed leader fails over and the node
comes back into the ISR, that killing the active controller elects another
one which then serves metadata writes, that a client without ACLs is refused
while one with them produces, and that a broker whose inter-node password is
wrong never registers and logs why.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import uuid

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from broker.config import STANDARD_AUTHORIZER
from broker.net.node_client import ClientSecurity, KafkaClientConnection
from broker.security.sasl_client import PlainClient
from controller.raft import wire
from protocol.errors import ErrorCode
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until
from tests.cluster.test_quorum_processes import DESCRIBE_QUORUM, MD, METADATA, free_ports
from tests.conftest import BrokerProcess
from tests.tls_certs import make_certs, openssl_or_skip

BOUND_S = 30.0
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
USERS = {"broker": "broker-secret", "alice": "alice-secret", "mallory": "mallory-secret"}


def jaas(username: str, password: str, users: dict[str, str]) -> str:
    """The node's own credentials (username/password) and the users its listener accepts."""
    accepted = " ".join(f'user_{u}="{p}"' for u, p in users.items())
    return f'{PLAIN_MODULE} required username="{username}" password="{password}" {accepted};'


def secure_settings(certs, node_password: str = USERS["broker"]) -> dict[str, str]:
    return {
        "listener.security.protocol.map": "SECURE:SASL_SSL,CONTROLLER:SASL_SSL",
        "inter.broker.listener.name": "SECURE",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.secure.plain.sasl.jaas.config": jaas("broker", node_password, USERS),
        # Only the nodes reach the controller listener.
        "listener.name.controller.plain.sasl.jaas.config": jaas("broker", node_password, {"broker": USERS["broker"]}),
        "ssl.keystore.location": str(certs.server_keystore),
        "ssl.truststore.location": str(certs.ca),
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:broker",
        "auto.leader.rebalance.enable": "false",
    }


class SecureCluster(ReplicatedCluster):
    """The harness's cluster on SASL_SSL listeners; its own requests go as User:broker."""

    def __init__(self, root, certs):
        super().__init__(root, extra=secure_settings(certs))
        self.certs = certs
        for node in NODE_IDS:
            listeners = f"SECURE://127.0.0.1:{self.client_ports[node]},CONTROLLER://127.0.0.1:{self.controller_ports[node]}"
            self.overrides[node]["listeners"] = listeners
            self.nodes[node].overrides["listeners"] = listeners
        self.security = ClientSecurity(
            "SECURE",
            "SASL_SSL",
            ssl.create_default_context(cafile=str(certs.ca)),
            "PLAIN",
            lambda: PlainClient("broker", USERS["broker"]),
        )

    def client_config(self, user: str = "broker", password: str | None = None, nodes=None) -> dict:
        return {
            "bootstrap.servers": self.bootstrap(nodes),
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": user,
            "sasl.password": USERS[user] if password is None else password,
            "ssl.ca.location": str(self.certs.ca),
        }

    def admin(self, nodes=None) -> AdminClient:
        return AdminClient(self.client_config(nodes=nodes))

    def _request(self, port: int, api, version: int, body, timeout_ms: int = 3000):
        async def ask():
            connection = KafkaClientConnection("127.0.0.1", port, "secure-test", connect_timeout_ms=timeout_ms, security=self.security)
            try:
                return await connection.request(api, version, body, timeout_ms=timeout_ms)
            finally:
                connection.close()

        return asyncio.run(ask())

    def _metadata(self, node: int, timeout_ms: int = 3000):
        return self._request(self.client_ports[node], METADATA, 12, MD.MetadataRequest(topics=None, allow_auto_topic_creation=False), timeout_ms)

    def active_controller(self, timeout_s: float = 10.0) -> int | None:
        def ask():
            for node in self.alive():
                try:
                    body = self._request(self.controller_ports[node], DESCRIBE_QUORUM, 1, wire.describe_quorum_request())
                except (TimeoutError, OSError, ConnectionError):
                    continue
                partition = body.topics[0].partitions[0] if body.topics else None
                if partition is not None and partition.error_code == ErrorCode.NONE and partition.leader_id in NODE_IDS:
                    return partition.leader_id
            return None

        return wait_until(ask, timeout_s)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    openssl_or_skip()
    return make_certs(tmp_path_factory.mktemp("certs"))


def produce(cluster: SecureCluster, user: str, topic: str, values: list[str]) -> list:
    """Produce with acks=all as ``user``; the delivery error of each value (None: written)."""
    producer = Producer({**cluster.client_config(user), "acks": "all", "message.timeout.ms": 20000, "retries": 5})
    errors = []
    for value in values:
        producer.produce(topic, value.encode(), on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    return errors


def create_topic(cluster: SecureCluster, name: str, replication_factor: int, partitions: int = 1) -> bool:
    """Create ``name`` as the node user; True once it exists (an earlier attempt may have made it)."""
    topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor)
    admin = cluster.admin()  # held: a collected client fails its futures with _DESTROY
    for future in admin.create_topics([topic], request_timeout=20).values():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return True


def replicated_everywhere(cluster: SecureCluster, topic: str, count: int, nodes=NODE_IDS) -> tuple[bool, str]:
    return cluster.segments_identical(topic, 0, count, nodes=nodes)


def test_a_cluster_whose_nodes_talk_sasl_ssl_replicates_fails_over_and_elects(tmp_path, certs):
    cluster = SecureCluster(tmp_path, certs)
    try:
        cluster.start()
        assert wait_until(lambda: cluster.brokers(1) == list(NODE_IDS), BOUND_S), cluster.brokers(1)
        topic = f"secure-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic)
        admin = cluster.admin()
        for future in admin.create_acls(
            [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.ALL, AclPermissionType.ALLOW)],
            request_timeout=30,
        ).values():
            future.result(timeout=30)

        # Followers fetch from the leader over SASL_SSL: all three in the ISR, the same batches on every node.
        assert cluster.wait_for_isr(topic, 0, NODE_IDS, BOUND_S, everywhere=True) is not None, cluster.describe(topic)
        # (Until the ACL reaches the leader alice is refused: try again.)
        assert wait_until(lambda: produce(cluster, "alice", topic, [f"a-{i}" for i in range(20)]) == [None] * 20, BOUND_S, interval_s=1.0)
        written = 20
        ok = wait_until(lambda: replicated_everywhere(cluster, topic, written)[0], BOUND_S)
        assert ok, replicated_everywhere(cluster, topic, written)[1]

        # DescribeQuorum asked of a node that is not the active controller is passed on
        # over the secured controller listener, and answered with the quorum's leader.
        controller = cluster.active_controller()
        other = next(n for n in NODE_IDS if n != controller)
        answer = cluster._request(cluster.client_ports[other], DESCRIBE_QUORUM, 1, wire.describe_quorum_request())
        quorum = answer.topics[0].partitions[0]
        assert (quorum.error_code, quorum.leader_id) == (ErrorCode.NONE, controller), answer

        # An authenticated client without ACLs is refused; the topic's writer is not.
        refused = produce(cluster, "mallory", topic, ["m-0"])
        assert [e.code() for e in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], refused

        # The leader dies: another takes over, acks=all goes on with two replicas.
        leader = cluster.leader_of(topic, 0, BOUND_S)
        assert leader is not None
        cluster.kill(leader)
        assert cluster.leader_of(topic, 0, BOUND_S, exclude={leader}) is not None, cluster.describe(topic)
        assert produce(cluster, "alice", topic, [f"b-{i}" for i in range(10)]) == [None] * 10
        written += 10
        # Back from the dead, it catches up over SASL_SSL and rejoins the ISR.
        cluster.restart(leader)
        assert cluster.wait_for_isr(topic, 0, NODE_IDS, BOUND_S) is not None, cluster.describe(topic)
        ok = wait_until(lambda: replicated_everywhere(cluster, topic, written)[0], BOUND_S)
        assert ok, replicated_everywhere(cluster, topic, written)[1]

        # The active controller dies: the others elect one over the SASL_SSL controller listener,
        # and metadata writes (forwarded by brokers to it) go on.
        controller = cluster.active_controller(BOUND_S)
        assert controller is not None
        cluster.kill(controller)
        successor = wait_until(lambda: (c := cluster.active_controller(5)) not in (None, controller) and c, BOUND_S)
        assert successor, "no new active controller"
        other = f"secure-{uuid.uuid4().hex[:6]}"
        assert wait_until(lambda: create_topic(cluster, other, replication_factor=2), BOUND_S, interval_s=1.0)
        survivors = [n for n in NODE_IDS if n != controller]
        assert cluster.wait_for_isr(other, 0, survivors, BOUND_S) is not None, cluster.describe(other)
    except BaseException:
        cluster.save_output()
        raise
    finally:
        cluster.stop()


def test_transaction_markers_cross_nodes_over_sasl_ssl(tmp_path, certs):
    """A transaction over partitions led by every node: the coordinator sends its
    WriteTxnMarkers (and the leaders their AddPartitionsToTxn verification) to
    the other brokers' SASL_SSL inter-broker listener; a read_committed consumer
    sees the records only once the markers are written."""
    cluster = SecureCluster(tmp_path, certs)
    try:
        cluster.start()
        assert wait_until(lambda: cluster.brokers(1) == list(NODE_IDS), BOUND_S)
        topic = f"secure-txn-{uuid.uuid4().hex[:6]}"
        assert create_topic(cluster, topic, replication_factor=3, partitions=3)
        leaders = wait_until(lambda: (d := cluster.describe(topic)) and len({p.leader for p in d.values()}) == 3 and d, BOUND_S)
        assert leaders, cluster.describe(topic)
        producer = Producer({**cluster.client_config(), "transactional.id": f"txn-{uuid.uuid4().hex[:6]}", "transaction.timeout.ms": 30000})
        producer.init_transactions(30)
        producer.begin_transaction()
        for partition in range(3):
            for i in range(5):
                producer.produce(topic, f"t-{partition}-{i}".encode(), partition=partition)
        producer.commit_transaction(30)
        consumer = Consumer(
            {**cluster.client_config(), "group.id": f"g-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed",
             "auto.offset.reset": "earliest", "enable.auto.commit": False}
        )
        try:
            consumer.subscribe([topic])
            seen = []
            wait_until(lambda: seen.extend(m.value() for m in consumer.consume(50, 1.0) if m.error() is None) or len(seen) >= 15, BOUND_S, interval_s=0.01)
            assert sorted(seen) == sorted(f"t-{p}-{i}".encode() for p in range(3) for i in range(5))
        finally:
            consumer.close()
    except BaseException:
        cluster.save_output()
        raise
    finally:
        cluster.stop()


def test_a_broker_with_a_wrong_inter_node_password_does_not_join(tmp_path, certs):
    cluster = SecureCluster(tmp_path, certs)
    intruder = None
    try:
        cluster.start()
        assert wait_until(lambda: cluster.brokers(1) == list(NODE_IDS), BOUND_S)
        (port,) = free_ports(1)
        overrides = {
            **cluster.overrides[1],
            **secure_settings(certs, node_password="not-the-password"),
            "node.id": "4",
            "process.roles": "broker",
            "listeners": f"SECURE://127.0.0.1:{port}",
            "broker.rack": "rack-4",
        }
        data_dir = tmp_path / "node4"
        data_dir.mkdir()
        intruder = BrokerProcess(data_dir, overrides)
        # It never prints its start line (no leader known, never unfenced): start it aside.
        thread = threading.Thread(target=lambda: _start_quietly(intruder), daemon=True)
        thread.start()
        refused = wait_until(lambda: "authentication failed" in intruder.log_text(), BOUND_S)
        assert refused, intruder.log_text()[-3000:]
        assert "(CONTROLLER, SASL PLAIN): Authentication failed: Invalid username or password" in intruder.log_text()
        assert "not-the-password" not in intruder.log_text()
        assert cluster.brokers(1) == list(NODE_IDS)
    finally:
        if intruder is not None:
            intruder.kill()
        cluster.stop()


def _start_quietly(process: BrokerProcess) -> None:
    try:
        process.start()
    except RuntimeError:
        pass  # killed by the test before it could start, as intended
