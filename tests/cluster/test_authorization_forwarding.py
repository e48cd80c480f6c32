"""Authorization of forwarded admin requests on three combined nodes with an authorizer.

The request reaches a broker that is not the active controller, which decides
before forwarding (the controller hears it over the controller listener, as
User:ANONYMOUS, a super user as broker/config.py requires in a cluster): a
topic the caller may not create is answered there and only the allowed ones
are forwarded, the answer keeping the request's order; ElectLeaders without
ALTER on the cluster and IncrementalAlterConfigs without ALTER_CONFIGS on the
topic are refused, and succeed once the ACLs (created through another node)
reach the receiving broker. Clients authenticate over SASL_PLAINTEXT with
PLAIN; the harness's own PLAINTEXT clients are User:ANONYMOUS, a super user.
"""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from broker.config import STANDARD_AUTHORIZER
from protocol.errors import ErrorCode
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until
from tests.cluster.test_leader_elections import BOUND_S
from tests.cluster.test_quorum_processes import free_ports
from tests.interop.test_authorization import USERS
from tests.interop.test_authorization_apis import Raw

JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{u}="{p}"' for u, p in USERS.items()
) + ";"


def start_secured(tmp_path) -> tuple[ReplicatedCluster, dict[int, str]]:
    cluster = ReplicatedCluster(
        tmp_path,
        extra={
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": "User:admin;User:ANONYMOUS",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "auto.leader.rebalance.enable": "false",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        },
    )
    sasl = {}
    for node, port in zip(NODE_IDS, free_ports(len(NODE_IDS))):
        listeners = (
            f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cluster.controller_ports[node]}"
        )
        cluster.overrides[node]["listeners"] = listeners
        cluster.nodes[node].overrides["listeners"] = listeners
        sasl[node] = f"127.0.0.1:{port}"
    cluster.start()
    return cluster, sasl


def grant(cluster: ReplicatedCluster, node: int, *bindings) -> None:
    """Create ACLs through ``node`` (as the harness's User:ANONYMOUS, a super user)."""
    admin = cluster.admin([node])
    for future in admin.create_acls(list(bindings), request_timeout=30).values():
        future.result(timeout=30)


def allow(resource_type, name, operation, principal="User:alice"):
    return AclBinding(resource_type, name, ResourcePatternType.LITERAL, principal, "*", operation, AclPermissionType.ALLOW)


def creatable(name):
    return {"name": name, "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []}


def test_a_broker_authorizes_before_forwarding(tmp_path):
    cluster, sasl = start_secured(tmp_path)
    try:
        controller = cluster.active_controller(BOUND_S)
        assert controller is not None
        via = next(n for n in NODE_IDS if n != controller)
        other = next(n for n in NODE_IDS if n not in (controller, via))
        refused_name, allowed_name = f"no-{uuid.uuid4().hex[:6]}", f"yes-{uuid.uuid4().hex[:6]}"

        def create():
            with Raw(sasl[via], "alice") as connection:
                answer = connection.request(
                    "CreateTopics", 7, topics=[creatable(refused_name), creatable(allowed_name)], timeout_ms=20000, validate_only=False
                )
            return [(t.name, t.error_code) for t in answer.topics]

        denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert create() == [(refused_name, denied), (allowed_name, denied)]
        grant(cluster, other, allow(ResourceType.TOPIC, allowed_name, AclOperation.CREATE))
        outcome = []
        assert wait_until(lambda: outcome.append(create()) or outcome[-1][1][1] != denied, BOUND_S), outcome
        # Only the allowed topic went to the controller; the refusal kept its place.
        assert outcome[-1] == [(refused_name, denied), (allowed_name, ErrorCode.NONE)]
        topics = cluster.admin().list_topics(timeout=20).topics
        assert allowed_name in topics and refused_name not in topics

        def elect():
            with Raw(sasl[via], "alice") as connection:
                answer = connection.request(
                    "ElectLeaders", 2, election_type=0, topic_partitions=[{"topic": allowed_name, "partitions": [0]}], timeout_ms=20000
                )
            return answer.error_code, [p.error_code for r in answer.replica_election_results for p in r.partition_result]

        cluster_denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert elect() == (cluster_denied, [cluster_denied])
        grant(cluster, other, allow(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER))
        results = []
        assert wait_until(lambda: results.append(elect()) or results[-1][0] != cluster_denied, BOUND_S), results
        assert results[-1] == (ErrorCode.NONE, [ErrorCode.ELECTION_NOT_NEEDED])

        def alter():
            with Raw(sasl[via], "alice") as connection:
                answer = connection.request(
                    "IncrementalAlterConfigs", 1, validate_only=False,
                    resources=[{"resource_type": 2, "resource_name": allowed_name, "configs": [
                        {"name": "retention.ms", "config_operation": 0, "value": "3600000"}
                    ]}],
                )
            return [r.error_code for r in answer.responses]

        assert alter() == [denied]
        grant(cluster, other, allow(ResourceType.TOPIC, allowed_name, AclOperation.ALTER_CONFIGS))
        codes = []
        assert wait_until(lambda: codes.append(alter()) or codes[-1] != [denied], BOUND_S), codes
        assert codes[-1] == [ErrorCode.NONE]
        from confluent_kafka.admin import ConfigResource

        resource = ConfigResource(ResourceType.TOPIC, allowed_name)
        admin = cluster.admin([other])
        described = admin.describe_configs([resource], request_timeout=20)[resource].result(timeout=20)
        assert described["retention.ms"].value == "3600000"
    finally:
        cluster.stop()
