"""The REST proxy with rest.authentication.method=BASIC and an authorizer: HTTP basic
credentials are the SASL/PLAIN users of the broker's listener, and the principal goes
through the broker's ACLs like any Kafka client's (401 without or with wrong
credentials, 403 with TOPIC_AUTHORIZATION_FAILED's 40301 without an ACL, 200 once
the ACL is there)."""

from __future__ import annotations

import asyncio
import base64
import threading

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from broker.app import Broker
from broker.config import STANDARD_AUTHORIZER, ConfigError, load_config
from tests.conftest import wait_until
from tests.interop._rest import Rest

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
TIMEOUT_S = 30


def _config(tmp_path, **extra):
    jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
        f'user_{u}="{p}"' for u, p in USERS.items()
    ) + ";"
    return load_config(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "log.dirs": str(tmp_path / "logs"),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": "User:admin",
            "rest.listener": "http://127.0.0.1:0",
            "rest.authentication.method": "BASIC",
            **extra,
        },
        warn=lambda _: None,
    )


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    config = _config(tmp_path_factory.mktemp("rest-auth"))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def call(coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(60)

    async def make():
        broker = Broker(config)
        await broker.start()
        return broker

    broker = call(make())
    try:
        yield broker
    finally:
        try:
            call(broker.stop())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)


def _admin(broker) -> AdminClient:
    return AdminClient({
        "bootstrap.servers": f"127.0.0.1:{broker.bound_ports['SASL_PLAINTEXT']}",
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": "admin", "sasl.password": USERS["admin"],
    })


def test_basic_auth_then_acls(secured):
    port = secured.rest.bound_port
    cid = secured.cluster_id
    admin = _admin(secured)
    for future in admin.create_topics([NewTopic("guarded", 1, 1)], request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    record = {"value": {"type": "STRING", "data": "hello"}}
    path = f"/v3/clusters/{cid}/topics/guarded/records"

    status, body, _ = Rest(port).request("POST", path, record)
    assert status == 401 and body["error_code"] == 401
    assert Rest(port, ("alice", "wrong")).request("POST", path, record)[0] == 401
    assert Rest(port, ("mallory", "alice-secret")).get("/v3/clusters")[0] == 401

    alice = Rest(port, ("alice", USERS["alice"]))
    status, body, _ = alice.request("POST", path, record)
    assert (status, body["error_code"]) == (403, 40301), body
    # Topics alice may not describe are not listed to her; the admin (a super user) sees them.
    assert "guarded" not in [t["topic_name"] for t in alice.get(f"/v3/clusters/{cid}/topics")[1]["data"]]
    assert "guarded" in [t["topic_name"] for t in Rest(port, ("admin", USERS["admin"])).get(f"/v3/clusters/{cid}/topics")[1]["data"]]

    bindings = [
        AclBinding(ResourceType.TOPIC, "guarded", ResourcePatternType.LITERAL, "User:alice", "*", op, AclPermissionType.ALLOW)
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ]
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    assert wait_until(lambda: alice.request("POST", path, record)[0] == 200, timeout_s=10)
    status, body, _ = alice.request("POST", path, record)
    assert body["error_code"] == 200 and body["offset"] >= 0
    # Creating topics needs CLUSTER CREATE, which alice lacks.
    status, body, _ = alice.request("POST", f"/v3/clusters/{cid}/topics", {"topic_name": "alices-own"})
    assert status == 403 and body["error_code"] in (40301, 40302), body


V2 = "application/vnd.kafka.v2+json"
BINARY = "application/vnd.kafka.binary.v2+json"


def test_acl_search_lists_the_acls_as_confluent_does(secured):
    cid = secured.cluster_id
    admin = _admin(secured)
    binding = AclBinding(ResourceType.TOPIC, "searched", ResourcePatternType.PREFIXED, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    for future in admin.create_acls([binding], request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    root = Rest(secured.rest.bound_port, ("admin", USERS["admin"]))
    path = f"/v3/clusters/{cid}/acls?resource_type=TOPIC&pattern_type=PREFIXED&principal=User:alice"
    assert wait_until(lambda: root.get(path)[1]["data"], timeout_s=10)
    status, body, _ = root.get(path)
    assert status == 200 and body["kind"] == "KafkaAclList"
    assert [{k: a[k] for k in ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")}
            for a in body["data"]] == [{
                "resource_type": "TOPIC", "resource_name": "searched", "pattern_type": "PREFIXED", "principal": "User:alice",
                "host": "*", "operation": "READ", "permission": "ALLOW"}]
    assert root.get(f"/v3/clusters/{cid}/acls?operation=NOPE")[0] == 400
    # Describing ACLs needs DESCRIBE on the cluster, which alice lacks.
    status, body, _ = Rest(secured.rest.bound_port, ("alice", USERS["alice"])).get(f"/v3/clusters/{cid}/acls")
    assert (status, body["error_code"]) == (403, 40302), body


def test_v2_consumer_reads_with_its_creators_rights(secured):
    port, cid = secured.rest.bound_port, secured.cluster_id
    admin = _admin(secured)
    for future in admin.create_topics([NewTopic("alices-reads", 1, 1)], request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    alice = Rest(port, ("alice", USERS["alice"]))
    status, created, _ = alice.request("POST", "/consumers/alices-group", {"name": "mine", "auto.offset.reset": "earliest"},
                                       content_type=V2)
    assert status == 200, created
    base = "/consumers/alices-group/instances/mine"
    assert alice.request("POST", f"{base}/subscription", {"topics": ["alices-reads"]}, content_type=V2)[0] == 204
    # Joining the group needs READ on it.
    status, body, _ = alice.request("GET", f"{base}/records?timeout=100", accept=BINARY)
    assert (status, body["error_code"]) == (403, 40302), body
    # Another principal does not get alice's instance (it would read with her rights).
    admin_rest = Rest(port, ("admin", USERS["admin"]))
    assert admin_rest.request("GET", f"{base}/assignments")[1]["error_code"] == 40403
    assert Rest(port).request("GET", f"{base}/assignments")[0] == 401

    bindings = [
        AclBinding(ResourceType.GROUP, "alices-group", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "alices-reads", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
    ]
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    record = {"value": {"type": "STRING", "data": "for alice"}}
    assert admin_rest.request("POST", f"/v3/clusters/{cid}/topics/alices-reads/records", record)[0] == 200
    got = []

    def read() -> bool:
        status, body, _ = alice.request("GET", f"{base}/records?timeout=200", accept=BINARY)
        got.extend(body if status == 200 else [])
        return bool(got)

    assert wait_until(read, timeout_s=TIMEOUT_S, interval_s=0.1)
    assert base64.b64decode(got[0]["value"]) == b"for alice"
    assert alice.request("POST", f"{base}/offsets", content_type=None)[0] == 204
    assert alice.request("DELETE", base, content_type=None)[0] == 204


def test_basic_without_plain_users_is_refused_at_start(tmp_path):
    config = load_config(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "logs"),
         "rest.listener": "http://127.0.0.1:0", "rest.authentication.method": "BASIC"},
        warn=lambda _: None,
    )
    with pytest.raises(ConfigError, match="no broker listener has PLAIN users"):
        Broker(config)
