"""The REST proxy of one broker serving the whole cluster (three combined nodes).

Every node has ``rest.listener`` (basic auth against the PLAIN users of its
SASL_PLAINTEXT listener) and an authorizer; ``admin`` is a super user, ``alice``
gets only the ACLs a test grants. Everything goes through node 1's REST port:
records for partitions led by nodes 1, 2 and 3 are all acknowledged and read
back with confluent-kafka; a group's lags, lag summary and listing come through
a node that does not coordinate the group, with each partition's end offset
from its leader; another broker's configs come from that broker (its own
``broker.rack``); a user without WRITE (or DESCRIBE on the group) is refused
403 for a partition (a group) another node owns, though that node hears the
proxy node as a super user, and allowed once the ACL is there; a v2 consumer
instance on a node that does not coordinate its group joins it there, reads every
partition from its leader and commits the group's offsets; and after a
leader is SIGKILLed, REST produce to its partition succeeds once the
partition has failed over, with no record lost or doubled. A KIP-848 consumer
group coordinated elsewhere shows its type, assignor and members, and is
refused to a caller who may not DESCRIBE its topic.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import uuid

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("aiohttp")

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from broker.config import STANDARD_AUTHORIZER
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until
from tests.ports import free_ports
from tests.interop._rest import Rest

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{u}="{p}"' for u, p in USERS.items()
) + ";"
PROXY = 1  # the node whose REST port every request goes to
TOPIC = "rest-orders"
# Partition i's preferred (first) replica, hence its leader, is node i + 1.
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
BOUND_S = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = ReplicatedCluster(
        tmp_path_factory.mktemp("rest-cluster"),
        extra={
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": "User:admin;User:ANONYMOUS",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "rest.authentication.method": "BASIC",
            # Leaders stay where the test put them until it kills one.
            "auto.leader.rebalance.enable": "false",
        },
    )
    # Not one of the cluster's own picks (picked, not yet bound).
    ports = free_ports(2 * len(NODE_IDS), set(cluster.controller_ports.values()) | set(cluster.client_ports.values()))
    cluster.rest_ports = {}
    for index, node in enumerate(NODE_IDS):
        sasl_port, rest_port = ports[2 * index], ports[2 * index + 1]
        changes = {
            "listeners": f"PLAINTEXT://127.0.0.1:{cluster.client_ports[node]},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                         f"CONTROLLER://127.0.0.1:{cluster.controller_ports[node]}",
            "rest.listener": f"http://127.0.0.1:{rest_port}",
        }
        cluster.overrides[node].update(changes)
        cluster.nodes[node].overrides.update(changes)
        cluster.rest_ports[node] = rest_port
    cluster.start()
    try:
        admin = cluster.admin()
        for future in admin.create_topics([NewTopic(TOPIC, num_partitions=len(ASSIGNMENT), replica_assignment=ASSIGNMENT)], request_timeout=20).values():
            future.result(timeout=30)
        assert wait_until(lambda: _leaders(cluster, PROXY) == {0: 1, 1: 2, 2: 3}, BOUND_S), cluster.describe(TOPIC)
        yield cluster
    finally:
        cluster.save_output()
        cluster.stop()


def _leaders(cluster, via) -> dict[int, int] | None:
    states = cluster.describe(TOPIC, via)
    return None if states is None else {p: s.leader for p, s in states.items()}


def _rest(cluster, node=PROXY, user="admin") -> Rest:
    return Rest(cluster.rest_ports[node], auth=(user, USERS[user]))


def _records_path(rest: Rest, topic=TOPIC) -> str:
    return f"/v3/clusters/{rest.cluster_id()}/topics/{topic}/records"


def _record(partition: int, value: str) -> dict:
    return {"partition_id": partition, "key": {"type": "STRING", "data": f"k-{value}"}, "value": {"type": "STRING", "data": value}}


def _stream(rest: Rest, records: list[dict]) -> list[dict]:
    """One chunked POST of several records; the result line of each."""
    chunks = [json.dumps(r).encode() for r in records]
    status, _, raw = rest.request("POST", _records_path(rest), chunks=iter(chunks))
    assert status == 200, raw
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def _read(cluster, partitions, timeout_s: float = 20.0) -> dict[int, list[tuple[int, str]]]:
    """(offset, value) of every record of each partition, read by confluent-kafka."""
    consumer = Consumer({
        "bootstrap.servers": cluster.bootstrap(), "group.id": f"read-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
    })
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)[1] for p in partitions}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in partitions])
        read: dict[int, list[tuple[int, str]]] = {p: [] for p in partitions}
        deadline = time.monotonic() + timeout_s
        while any(len(read[p]) < ends[p] for p in partitions) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            read[message.partition()].append((message.offset(), message.value().decode()))
        return read
    finally:
        consumer.close()


def _coordinator(cluster, group: str) -> int:
    admin = cluster.admin()  # held until the answer: a collected client fails its futures
    return admin.describe_consumer_groups([group], request_timeout=20)[group].result(timeout=20).coordinator.id


def _grant(cluster, resource_type, name, operation, principal="User:alice") -> None:
    binding = AclBinding(resource_type, name, ResourcePatternType.LITERAL, principal, "*", operation, AclPermissionType.ALLOW)
    admin = cluster.admin()
    for future in admin.create_acls([binding], request_timeout=30).values():
        future.result(timeout=30)


def test_produce_through_one_node_reaches_every_leader(cluster):
    rest = _rest(cluster)
    sent = [_record(i % 3, f"stream-{i}") for i in range(30)]
    results = _stream(rest, sent)
    assert [r["error_code"] for r in results] == [200] * 30, results
    assert [r["partition_id"] for r in results] == [r["partition_id"] for r in sent]
    # One record alone per partition: its own status.
    for partition in range(3):
        status, answer, raw = rest.request("POST", _records_path(rest), _record(partition, f"single-{partition}"))
        assert status == 200 and answer["partition_id"] == partition and answer["offset"] == 10, raw
    read = _read(cluster, range(3))
    for partition in range(3):
        expected = [f"stream-{i}" for i in range(30) if i % 3 == partition] + [f"single-{partition}"]
        assert read[partition] == list(enumerate(expected)), (partition, read[partition])
        offsets = [r["offset"] for r in results if r["partition_id"] == partition]
        assert offsets == list(range(10)), offsets


def test_group_lags_through_a_node_that_does_not_coordinate(cluster):
    group = f"lagging-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group, "enable.auto.commit": False})
    try:
        committed = {0: 2, 1: 5, 2: 7}
        consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in committed.items()], asynchronous=False)
    finally:
        consumer.close()
    coordinator = _coordinator(cluster, group)
    via = next(n for n in NODE_IDS if n != coordinator)
    rest = _rest(cluster, via)
    cluster_id = rest.cluster_id()
    base = f"/v3/clusters/{cluster_id}/consumer-groups/{group}"
    ends = {p: cluster.watermarks(TOPIC, p)[1] for p in range(3)}
    assert all(end >= 11 for end in ends.values()), ends

    status, body, raw = rest.get(base + "/lags")
    assert status == 200, raw
    lags = {row["partition_id"]: (row["current_offset"], row["log_end_offset"], row["lag"]) for row in body["data"]}
    assert lags == {p: (committed[p], ends[p], ends[p] - committed[p]) for p in range(3)}, (via, coordinator, lags)

    status, summary, raw = rest.get(base + "/lag-summary")
    assert status == 200, raw
    assert summary["total_lag"] == sum(ends[p] - committed[p] for p in range(3))
    assert summary["max_lag"] == max(ends[p] - committed[p] for p in range(3))

    status, one, raw = rest.get(base)
    assert status == 200, raw
    assert one["state"] == "EMPTY" and one["coordinator"]["related"].endswith(f"/brokers/{coordinator}"), one
    status, listed, raw = rest.get(f"/v3/clusters/{cluster_id}/consumer-groups")
    assert status == 200 and group in [g["consumer_group_id"] for g in listed["data"]], raw
    status, consumers, raw = rest.get(base + "/consumers")
    assert status == 200 and consumers["data"] == [], raw


def test_a_consumer_group_through_a_node_that_does_not_coordinate_it(cluster):
    """A KIP-848 group is described there with ConsumerGroupDescribe; a caller who may
    DESCRIBE the group but not its topic is refused here, though that node hears a super user."""
    topic = f"kip848-{uuid.uuid4().hex[:6]}"
    admin = cluster.admin()
    for future in admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)], request_timeout=20).values():
        future.result(timeout=20)
    group = f"kip848-{uuid.uuid4().hex[:6]}"
    member = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group, "group.protocol": "consumer",
                       "client.id": "rest-kip848", "enable.auto.commit": False})
    try:
        member.subscribe([topic])
        assert wait_until(lambda: member.poll(0.2) is None and len(member.assignment()) == 2, BOUND_S)
        coordinator = _coordinator(cluster, group)
        via = next(n for n in NODE_IDS if n != coordinator)
        rest = _rest(cluster, via)
        base = f"/v3/clusters/{rest.cluster_id()}/consumer-groups/{group}"
        assert wait_until(lambda: rest.get(base)[1]["state"] == "STABLE", BOUND_S), rest.get(base)
        status, one, raw = rest.get(base)
        assert (one["type"], one["partition_assignor"], one["is_mixed_consumer_group"]) == ("CONSUMER", "uniform", False), raw
        assert one["coordinator"]["related"].endswith(f"/brokers/{coordinator}"), one
        status, consumers, raw = rest.get(base + "/consumers")
        assert [c["client_id"] for c in consumers["data"]] == ["rest-kip848"], raw
        # As linked: the member id (base64, with "+" or "/" at times) percent-encoded.
        status, assigned, raw = rest.get(urllib.parse.urlsplit(consumers["data"][0]["assignments"]["related"]).path)
        assert status == 200, raw
        assert sorted((a["topic_name"], a["partition_id"]) for a in assigned["data"]) == [(topic, 0), (topic, 1)], raw

        _grant(cluster, ResourceType.GROUP, group, AclOperation.DESCRIBE)
        alice = _rest(cluster, via, user="alice")
        outcome = []
        # Refused for the topic (40301, TOPIC_AUTHORIZATION_FAILED as the handler answers) once the group ACL
        # is seen (before: 40302 for the group).
        assert wait_until(lambda: outcome.append(alice.get(base)) or (outcome[-1][0], (outcome[-1][1] or {}).get("error_code"))
                          == (403, 40301), BOUND_S), outcome[-1]
    finally:
        member.close()


def test_another_brokers_configs_come_from_that_broker(cluster):
    rest = _rest(cluster)
    for node in NODE_IDS:
        status, body, raw = rest.get(f"/v3/clusters/{rest.cluster_id()}/brokers/{node}/configs")
        assert status == 200, raw
        configs = {c["name"]: c["value"] for c in body["data"]}
        assert configs["broker.rack"] == f"rack-{node}" and configs["node.id"] == str(node), (node, configs.get("broker.rack"))


def test_the_remote_path_authorizes_as_the_caller(cluster):
    alice = _rest(cluster, user="alice")
    _grant(cluster, ResourceType.TOPIC, TOPIC, AclOperation.DESCRIBE)
    path = _records_path(alice)
    remote = 1  # led by node 2: sent there over the node connection, where the proxy node is a super user
    status, answer, raw = alice.request("POST", path, _record(remote, "refused"))
    assert (status, answer["error_code"]) == (403, 40301), raw
    status, answer, raw = alice.request("POST", path, _record(0, "refused"))  # led here
    assert (status, answer["error_code"]) == (403, 40301), raw

    _grant(cluster, ResourceType.TOPIC, TOPIC, AclOperation.WRITE)
    outcome = []
    assert wait_until(lambda: outcome.append(alice.request("POST", path, _record(remote, "allowed"))) or outcome[-1][0] == 200, BOUND_S), outcome[-1]
    assert outcome[-1][1]["partition_id"] == remote

    # Groups: DESCRIBE on the group is asked here before the coordinator is.
    group = f"private-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    coordinator = _coordinator(cluster, group)
    via = next(n for n in NODE_IDS if n != coordinator)
    alice_via = _rest(cluster, via, user="alice")
    base = f"/v3/clusters/{alice_via.cluster_id()}/consumer-groups"
    status, answer, raw = alice_via.get(f"{base}/{group}/lags")
    assert (status, answer["error_code"]) == (403, 40302), raw
    status, listed, raw = alice_via.get(base)
    assert status == 200 and group not in [g["consumer_group_id"] for g in listed["data"]], raw
    status, listed, raw = _rest(cluster, via).get(base)
    assert status == 200 and group in [g["consumer_group_id"] for g in listed["data"]], raw


def test_a_v2_consumer_on_a_node_that_does_not_coordinate_its_group(cluster):
    group = f"rest-v2-{uuid.uuid4().hex[:6]}"
    coordinator = _coordinator(cluster, group)
    via = next(n for n in NODE_IDS if n != coordinator)
    rest = _rest(cluster, via)
    v2 = "application/vnd.kafka.v2+json"
    status, _, raw = rest.request("POST", f"/consumers/{group}", {"name": "remote", "auto.offset.reset": "earliest",
                                                                         "auto.commit.enable": "false"}, content_type=v2)
    assert status == 200, raw
    base = f"/consumers/{group}/instances/remote"
    assert rest.request("POST", f"{base}/subscription", {"topics": [TOPIC]}, content_type=v2)[0] == 204
    ends = {p: cluster.watermarks(TOPIC, p)[1] for p in range(3)}
    got: list[dict] = []
    deadline = time.monotonic() + BOUND_S
    while len(got) < sum(ends.values()) and time.monotonic() < deadline:
        status, records, raw = rest.request("GET", f"{base}/records?timeout=500", accept="application/vnd.kafka.binary.v2+json")
        assert status == 200, raw
        got += records
    # Every partition, led by nodes 1, 2 and 3, read from its leader; the group on its coordinator.
    assert sorted((r["partition"], r["offset"]) for r in got) == [(p, o) for p in range(3) for o in range(ends[p])]
    assert rest.request("POST", f"{base}/offsets", content_type=None)[0] == 204
    status, members, raw = _rest(cluster, coordinator).get(f"/v3/clusters/{rest.cluster_id()}/consumer-groups/{group}/consumers")
    assert status == 200 and len(members["data"]) == 1, raw
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=20)
    finally:
        consumer.close()
    assert {tp.partition: tp.offset for tp in committed} == ends
    assert rest.request("DELETE", base, content_type=None)[0] == 204


def test_produce_to_a_killed_leaders_partition_after_failover(cluster):
    rest = _rest(cluster)
    before = _read(cluster, range(3))
    victim = next(n for n in NODE_IDS if n != PROXY)
    partition = ASSIGNMENT.index(next(a for a in ASSIGNMENT if a[0] == victim))
    assert cluster.partition(TOPIC, partition).leader == victim
    cluster.kill(victim)
    started = time.monotonic()
    # Sent at once: the proxy retries from its image until the partition has a new leader.
    results = _stream(rest, [_record(p, f"after-kill-{p}") for p in range(3)])
    assert [r["error_code"] for r in results] == [200] * 3, results
    assert time.monotonic() - started < BOUND_S
    assert cluster.partition(TOPIC, partition, via=PROXY).leader not in (victim, -1)
    # Groups are listed by every broker left, and the lags of a group read again.
    status, listed, raw = rest.get(f"/v3/clusters/{rest.cluster_id()}/consumer-groups")
    assert status == 200 and listed["data"], raw
    for group in (g["consumer_group_id"] for g in listed["data"]):
        status, _, raw = rest.get(f"/v3/clusters/{rest.cluster_id()}/consumer-groups/{group}/lags")
        assert status == 200, raw
    after = _read(cluster, range(3))
    for p in range(3):
        assert after[p] == before[p] + [(len(before[p]), f"after-kill-{p}")], (p, after[p][-3:])
