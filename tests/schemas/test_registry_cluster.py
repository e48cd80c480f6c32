"""The schema registry on a 3-node cluster: every node serves it, the leader of
``_schemas`` (RF=3) is the one writer. A schema registered through one node is
visible through every other at once (each catches up to the leader's high
watermark before answering), and registrations through all nodes at once get
unique ids."""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until
from tests.schemas._registry import start_registry_cluster


@pytest.fixture
def cluster(tmp_path):
    cluster = ReplicatedCluster(tmp_path)
    try:
        start_registry_cluster(cluster)
        yield cluster
    finally:
        cluster.stop()


def record(name: str, fields: int = 1) -> dict:
    return {"type": "record", "name": name, "fields": [{"name": f"f{i}", "type": "int", "default": 0} for i in range(fields)]}


def register_until_answered(registry, subject: str, schema: dict, timeout_s: float = 30.0):
    """Register, again while the answer is a 5xx: a broker whose image still names a
    dead leader answers one, as Confluent's registry does during an election, and
    clients retry (a registration is idempotent). The last answer."""
    answers = []

    def answered():
        answers.append(registry.register(subject, schema))
        return answers[-1][0] < 500

    wait_until(answered, timeout_s, interval_s=0.2)
    return answers[-1]


def schemas_leader(cluster) -> int:
    state = cluster.describe("_schemas", via=1)
    return state[0].leader


def test_registered_through_one_node_is_read_through_the_others_at_once(cluster):
    registries = cluster.registries
    subject = f"orders-{uuid.uuid4().hex[:6]}-value"
    status, body = registries[1].register(subject, record("Order"))
    assert status == 200, body
    schema_id = body["id"]
    assert len(cluster.describe("_schemas", via=1)[0].replicas) == 3
    leader = schemas_leader(cluster)
    # Register through a node that does not lead _schemas (forwarded to the leader),
    # then read at once through every node, the non-leaders included.
    writer = next(n for n in NODE_IDS if n != leader)
    status, body = registries[writer].register(subject, record("Order", 2))
    assert status == 200, body
    second = body["id"]
    for node in NODE_IDS:
        assert registries[node].get(f"/subjects/{subject}/versions") == (200, [1, 2]), node
        assert registries[node].get(f"/schemas/ids/{second}")[1]["schema"] == json.dumps(record("Order", 2)), node
        assert registries[node].get(f"/schemas/ids/{schema_id}")[0] == 200, node
    # A refusal by the leader comes back through the forwarding node unchanged.
    incompatible = {"type": "record", "name": "Order", "fields": [{"name": "f0", "type": "int"}, {"name": "g", "type": "string"}]}
    status, body = registries[writer].register(subject, incompatible)
    assert (status, body["error_code"]) == (409, 409), body
    # Config writes are forwarded too, and read everywhere.
    assert registries[writer].request("PUT", f"/config/{subject}", {"compatibility": "FULL"}) == (200, {"compatibility": "FULL"})
    for node in NODE_IDS:
        assert registries[node].get(f"/config/{subject}") == (200, {"compatibilityLevel": "FULL"}), node


def test_concurrent_registrations_on_all_nodes_get_unique_ids(cluster):
    registries = cluster.registries
    prefix = uuid.uuid4().hex[:6]
    per_node = 8
    answers: dict[tuple[int, int], tuple[int, dict]] = {}

    def register_all(node: int) -> None:
        for i in range(per_node):
            name = f"R{prefix}n{node}i{i}"
            answers[(node, i)] = registries[node].register(f"{name}-value", record(name))

    threads = [threading.Thread(target=register_all, args=(node,)) for node in NODE_IDS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    assert all(status == 200 for status, _ in answers.values()), answers
    ids = [body["id"] for _, body in answers.values()]
    assert len(set(ids)) == len(ids) == per_node * len(NODE_IDS), sorted(ids)
    # Every node maps every id to the schema registered with it.
    for node in NODE_IDS:
        for (writer, i), (_, body) in answers.items():
            name = f"R{prefix}n{writer}i{i}"
            assert json.loads(registries[node].get(f"/schemas/ids/{body['id']}")[1]["schema"])["name"] == name


def test_the_registry_survives_the_loss_of_the_schemas_leader(cluster):
    registries = cluster.registries
    subject = f"survive-{uuid.uuid4().hex[:6]}-value"
    status, body = registries[1].register(subject, record("Survive"))
    assert status == 200, body
    first = body["id"]
    old_leader = schemas_leader(cluster)
    cluster.kill(old_leader)
    new_leader = cluster.leader_of("_schemas", exclude=(old_leader,), timeout_s=20)
    assert new_leader is not None and new_leader != old_leader
    survivors = [n for n in NODE_IDS if n != old_leader]
    # Through each survivor: the old schema is there, and a new one gets an id past it
    # (the new leader replayed every id the old one gave out).
    answers = []
    for node in survivors:
        assert wait_until(lambda node=node: registries[node].get(f"/schemas/ids/{first}")[0] == 200, 20), node
        status, body = register_until_answered(registries[node], f"{subject}-{node}", record(f"Survive{node}"))
        assert status == 200, (node, body)
        answers.append(body["id"])
    assert all(schema_id > first for schema_id in answers) and len(set(answers)) == len(answers), answers
    for node in survivors:
        assert registries[node].get(f"/subjects/{subject}/versions") == (200, [1]), node


def test_validation_on_a_leader_that_has_not_seen_the_id_yet_catches_up_first(cluster):
    """A topic validated on produce, each partition led by another node: a schema
    registered through node 1 and used at once is taken by every partition's
    leader (it catches its registry up before deciding); an unregistered id is
    refused there."""
    from protocol.errors import ErrorCode
    from protocol.records import build_batch
    from tests.interop._support import produce_raw

    topic = f"validated-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, 3, 3, {"confluent.value.schema.validation": "true"})
    subject = f"{topic}-value"
    status, body = register_until_answered(cluster.registries[1], subject, record("Event"))
    assert status == 200, body
    framed = b"\x00" + body["id"].to_bytes(4, "big") + b"\x00"  # f0 = 0
    for partition in range(3):
        leader = cluster.leader_of(topic, partition)
        bootstrap = cluster.nodes[leader].bootstrap
        assert produce_raw(bootstrap, topic, build_batch([(None, framed)]), partition).error_code == ErrorCode.NONE
        unknown = b"\x00" + (body["id"] + 1000).to_bytes(4, "big") + b"\x00"
        answer = produce_raw(bootstrap, topic, build_batch([(None, unknown)]), partition)
        assert answer.error_code == ErrorCode.INVALID_RECORD and "is not registered" in answer.error_message
