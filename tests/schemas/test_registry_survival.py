"""The schema registry survives the loss of any one node and a restart of all of them.

A 3-node cluster with ``_schemas`` at RF=3 (min.insync.replicas=2). A ledger keeps
every registration a node acknowledged: subject, version, id and schema text. After
each fault the ledger is read back through the nodes still up (nothing acknowledged
is lost) and new registrations through each of them succeed with ids past every id
handed out before (never reused)."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until
from tests.schemas._registry import start_registry_cluster
from tests.schemas.test_registry_cluster import record, schemas_leader

READ_TIMEOUT_S = 20.0
WRITE_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = ReplicatedCluster(tmp_path_factory.mktemp("registry-survival"))
    try:
        start_registry_cluster(cluster)
        # (subject, version) -> (id, schema text), as acknowledged.
        cluster.ledger = {}
        yield cluster
    finally:
        cluster.save_output()
        cluster.stop()


def register(cluster, node: int, subject: str, schema: dict) -> int:
    """Register through ``node`` (again while it answers 5xx, as clients do during an
    election); the id, recorded in the ledger with the version the registry gives it."""
    registry = cluster.registries[node]
    answers = []

    def answered():
        answers.append(registry.register(subject, schema))
        return answers[-1][0] < 500

    wait_until(answered, WRITE_TIMEOUT_S, interval_s=0.2)
    status, body = answers[-1]
    assert status == 200, (node, subject, body)
    # The refusals meanwhile are Confluent's backend errors, in its error shape.
    for status, refusal in answers[:-1]:
        assert status == 500 and set(refusal) == {"error_code", "message"} and refusal["error_code"] in (50001, 50002, 50003), refusal
    schema_id = body["id"]
    status, found = registry.post(f"/subjects/{subject}", {"schema": json.dumps(schema)})
    assert status == 200 and found["id"] == schema_id, (node, found)
    cluster.ledger[(subject, found["version"])] = (schema_id, json.dumps(schema))
    return schema_id


def assert_ledger_served(cluster, nodes) -> None:
    """Every acknowledged (subject, version) answers its id and text through each of ``nodes``."""
    for node in nodes:
        registry = cluster.registries[node]
        # The first read waits for the node to answer at all (a restarted one may still be catching up).
        assert wait_until(lambda: registry.get("/subjects")[0] == 200, READ_TIMEOUT_S), node
        subjects = {subject for subject, _ in cluster.ledger}
        assert subjects <= set(registry.get("/subjects")[1]), (node, subjects)
        for (subject, version), (schema_id, text) in cluster.ledger.items():
            assert registry.get(f"/subjects/{subject}/versions/{version}") == (
                200, {"subject": subject, "version": version, "id": schema_id, "schema": text},
            ), (node, subject, version)  # fmt: skip
            assert registry.get(f"/schemas/ids/{schema_id}") == (200, {"schema": text}), (node, schema_id)


def assert_registrations_continue(cluster, nodes, tag: str) -> None:
    """A new subject and a new version of an old one through each of ``nodes``: fresh ids past every old one."""
    old_max = max(schema_id for schema_id, _ in cluster.ledger.values())
    old_ids = {schema_id for schema_id, _ in cluster.ledger.values()}
    new_ids = []
    for node in nodes:
        name = f"{tag}{node}{uuid.uuid4().hex[:6]}"
        new_ids.append(register(cluster, node, f"{name}-value", record(name)))
        new_ids.append(register(cluster, node, "shared-value", record("Shared", len(cluster.ledger) + 1)))
    assert all(schema_id > old_max for schema_id in new_ids), (old_max, new_ids)
    assert len(set(new_ids)) == len(new_ids) and not old_ids & set(new_ids), new_ids


def kill_and_check(cluster, victim: int, tag: str) -> None:
    survivors = [n for n in NODE_IDS if n != victim]
    cluster.kill(victim)
    # At once, as a client would: through each survivor, retried while it answers 5xx.
    assert_registrations_continue(cluster, survivors, tag)
    assert cluster.leader_of("_schemas", exclude=(victim,), timeout_s=20) is not None
    assert_ledger_served(cluster, survivors)
    # Back to three: the node that was down serves what was registered while it was.
    cluster.heal()
    assert_ledger_served(cluster, [victim])


def seed(cluster, tag: str) -> None:
    for node in NODE_IDS:
        name = f"{tag}{node}{uuid.uuid4().hex[:6]}"
        register(cluster, node, f"{name}-value", record(name))
    register(cluster, NODE_IDS[0], "shared-value", record("Shared", len(cluster.ledger) + 1))


def test_the_loss_of_the_schemas_leader_loses_nothing(cluster):
    seed(cluster, "Lead")
    assert len(cluster.describe("_schemas", via=1)[0].replicas) == 3
    kill_and_check(cluster, schemas_leader(cluster), "AfterLead")


def test_the_loss_of_a_schemas_follower_loses_nothing(cluster):
    seed(cluster, "Follow")
    leader = schemas_leader(cluster)
    kill_and_check(cluster, next(n for n in NODE_IDS if n != leader), "AfterFollow")


def test_a_restart_of_every_node_keeps_every_subject_version_and_id(cluster):
    seed(cluster, "Restart")
    # A subject's compatibility level and another's mode are kept as well.
    frozen = f"frozen{uuid.uuid4().hex[:6]}-value"
    register(cluster, 1, frozen, record("Frozen"))
    registry = cluster.registries[2]
    assert registry.request("PUT", "/config/shared-value", {"compatibility": "FULL"}) == (200, {"compatibility": "FULL"})
    assert registry.request("PUT", f"/mode/{frozen}", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    before = {node: cluster.registries[node].get("/schemas?deleted=true") for node in NODE_IDS}
    for node in NODE_IDS:
        cluster.kill(node)
    cluster.restart_together(NODE_IDS)
    assert_ledger_served(cluster, NODE_IDS)
    # The whole listing, not only the ledger: the same on every node as before.
    for node in NODE_IDS:
        assert wait_until(lambda node=node: cluster.registries[node].get("/schemas?deleted=true") == before[node], READ_TIMEOUT_S), node
    for node in NODE_IDS:
        assert cluster.registries[node].get("/config/shared-value") == (200, {"compatibilityLevel": "FULL"}), node
        assert cluster.registries[node].get(f"/mode/{frozen}") == (200, {"mode": "READONLY"}), node
        assert cluster.registries[node].register(frozen, record("Frozen", 2))[1]["error_code"] == 42205, node
    assert_registrations_continue(cluster, NODE_IDS, "AfterRestart")
