"""The REST proxy's v2 consumer API (Confluent REST Proxy's) against a real broker process:
create an instance, subscribe, read binary and JSON records, commit and read back the
group's committed offsets (also through ``pybroker groups describe``), seek, two
instances of one group sharing a topic's partitions without reading a record twice,
delete (then 40403), an idle instance expiring, and Confluent's error codes."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time

import pytest

from tests.conftest import wait_until
from tests.interop._rest import Rest, rest_port
from tests.interop._support import create_topic, unique_topic

confluent_kafka = pytest.importorskip("confluent_kafka")

V2 = "application/vnd.kafka.v2+json"
BINARY = "application/vnd.kafka.binary.v2+json"
JSON_RECORDS = "application/vnd.kafka.json.v2+json"
DEADLINE_S = 60


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    from tests.conftest import BrokerProcess

    broker = BrokerProcess(tmp_path_factory.mktemp("rest-consumers"), {"rest.listener": "http://127.0.0.1:0"}).start()
    try:
        yield broker, Rest(rest_port(broker))
    finally:
        broker.stop()


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes]]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for partition, key, value in records:
        producer.produce(topic, value=value, key=key, partition=partition)
    assert producer.flush(30) == 0


def _v2(rest: Rest, method: str, path: str, body=None):
    return rest.request(method, path, body, content_type=V2)


def _create(rest: Rest, group: str, **settings) -> str:
    status, body, raw = _v2(rest, "POST", f"/consumers/{group}", settings)
    assert status == 200, raw
    assert rest.last_content_type.startswith(V2)
    return f"/consumers/{group}/instances/{body['instance_id']}"


def _records(rest: Rest, base: str, accept: str = BINARY, timeout_ms: int = 500):
    status, body, raw = rest.request("GET", f"{base}/records?timeout={timeout_ms}", accept=accept)
    assert status == 200, raw
    assert rest.last_content_type.startswith(accept)
    return body


def _read(rest: Rest, base: str, count: int, accept: str = BINARY) -> list[dict]:
    got: list[dict] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        got += _records(rest, base, accept)
    assert len(got) == count, got
    return got


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _current_offset(table: str, topic: str, partition: int) -> str | None:
    """CURRENT-OFFSET of a partition in ``groups describe``'s table, by its header (whatever the column order)."""
    header: list[str] = []
    for line in table.splitlines():
        fields = line.split()
        if "CURRENT-OFFSET" in fields:
            header = fields
        elif header and len(fields) == len(header):
            row = dict(zip(header, fields))
            if row.get("TOPIC") == topic and row.get("PARTITION") == str(partition):
                return row["CURRENT-OFFSET"]
    return None


def test_subscribe_read_binary_commit_and_delete(proxy):
    broker, rest = proxy
    topic, group = unique_topic("rest-v2"), unique_topic("rest-v2-group")
    create_topic(broker.bootstrap, topic, partitions=1)
    _produce(broker.bootstrap, topic, [(0, b"k%d" % i, b"value-%d" % i) for i in range(3)])

    status, body, _ = _v2(rest, "POST", f"/consumers/{group}", {
        "name": "first", "format": "binary", "auto.offset.reset": "earliest", "auto.commit.enable": "false",
    })
    assert status == 200 and body["instance_id"] == "first"
    assert body["base_uri"] == f"http://127.0.0.1:{rest.port}/consumers/{group}/instances/first"
    base = f"/consumers/{group}/instances/first"
    status, body, _ = _v2(rest, "POST", f"/consumers/{group}", {"name": "first"})
    assert (status, body["error_code"]) == (409, 40902)
    assert rest.last_content_type.startswith(V2)

    assert _v2(rest, "POST", f"{base}/subscription", {"topics": [topic]})[0] == 204
    assert rest.get(f"{base}/subscription")[1] == {"topics": [topic]}
    records = _read(rest, base, 3)
    assert [(r["topic"], r["partition"], r["offset"]) for r in records] == [(topic, 0, i) for i in range(3)]
    assert [(r["key"], r["value"]) for r in records] == [(_b64(b"k%d" % i), _b64(b"value-%d" % i)) for i in range(3)]
    assert rest.get(f"{base}/assignments")[1] == {"partitions": [{"topic": topic, "partition": 0}]}

    # The Accept header must name the instance's format (or none).
    status, body, _ = rest.request("GET", f"{base}/records", accept=JSON_RECORDS)
    assert (status, body["error_code"]) == (406, 40601)
    status, body, _ = rest.request("GET", f"{base}/records", accept="text/plain")
    assert (status, body["error_code"]) == (406, 406)
    status, body, _ = rest.request("POST", f"{base}/subscription", raw=b'{"topics": ["x"]}', content_type="text/plain")
    assert status == 415 and body["error_code"] == 415

    # Nothing committed yet (auto-commit is off); then a commit of the positions.
    status, body, _ = rest.request("GET", f"{base}/committed/offsets", {"partitions": [{"topic": topic, "partition": 0}]},
                                   content_type=V2)
    assert status == 200 and body == {"offsets": []}
    assert rest.request("POST", f"{base}/offsets", content_type=None)[0] == 204
    status, body, _ = rest.request("GET", f"{base}/committed/offsets", {"partitions": [{"topic": topic, "partition": 0}]},
                                   content_type=V2)
    assert body["offsets"] == [{"topic": topic, "partition": 0, "offset": 3, "metadata": ""}]
    # The group's own offsets, as every Kafka tool sees them, with the instance as a member.
    described = subprocess.run(
        [sys.executable, "-m", "broker", "groups", "--bootstrap-server", broker.bootstrap, "describe", group],
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert described.returncode == 0, described.stderr
    assert _current_offset(described.stdout, topic, 0) == "3", described.stdout

    assert _v2(rest, "DELETE", base)[0] == 204
    status, body, _ = rest.request("GET", f"{base}/records", accept=BINARY)
    assert (status, body["error_code"]) == (404, 40403)
    assert rest.last_content_type.startswith(V2)
    assert _v2(rest, "DELETE", base)[1]["error_code"] == 40403
    # It left the group: the group is empty, its offsets stay.
    cid = rest.cluster_id()
    assert wait_until(lambda: rest.get(f"/v3/clusters/{cid}/consumer-groups/{group}")[1]["state"] == "EMPTY", timeout_s=30)


def test_json_records_manual_assignment_seeks_and_explicit_commit(proxy):
    broker, rest = proxy
    topic, group = unique_topic("rest-v2-json"), unique_topic("rest-v2-json-group")
    create_topic(broker.bootstrap, topic, partitions=1)
    values = [{"n": i, "name": f"item-{i}"} for i in range(4)]
    _produce(broker.bootstrap, topic, [(0, json.dumps(i).encode(), json.dumps(v).encode()) for i, v in enumerate(values)])
    base = _create(rest, group, name="reader", format="json", **{"auto.commit.enable": "false"})
    tp = {"topic": topic, "partition": 0}

    # Positions exist only for assigned partitions.
    status, body, _ = _v2(rest, "POST", f"{base}/positions", {"offsets": [{**tp, "offset": 0}]})
    assert (status, body["error_code"]) == (409, 40903)
    assert _v2(rest, "POST", f"{base}/assignments", {"partitions": [tp]})[0] == 204
    status, body, _ = _v2(rest, "POST", f"{base}/subscription", {"topics": [topic]})
    assert (status, body["error_code"]) == (409, 40903)  # subscription and assignment are exclusive
    assert _v2(rest, "POST", f"{base}/positions/beginning", {"partitions": [tp]})[0] == 204
    records = _read(rest, base, 4, JSON_RECORDS)
    assert [(r["key"], r["value"]) for r in records] == list(enumerate(values))

    # Confluent's commit of given offsets: each is the last record processed, so offset + 1 is committed.
    assert _v2(rest, "POST", f"{base}/offsets", {"offsets": [{**tp, "offset": 1}]})[0] == 204
    status, body, _ = rest.request("GET", f"{base}/committed/offsets", content_type=None)
    assert body["offsets"] == [{**tp, "offset": 2, "metadata": ""}]

    assert _v2(rest, "POST", f"{base}/positions", {"offsets": [{**tp, "offset": 3}]})[0] == 204
    assert [r["offset"] for r in _read(rest, base, 1, JSON_RECORDS)] == [3]
    assert _v2(rest, "POST", f"{base}/positions/end", {"partitions": [tp]})[0] == 204
    assert _records(rest, base, JSON_RECORDS, timeout_ms=200) == []

    status, body, _ = _v2(rest, "POST", "/consumers/g", {"format": "avro"})
    assert (status, body["error_code"]) == (422, 42204)
    status, body, _ = _v2(rest, "POST", "/consumers/g", {"format": "binary", "maxWindowSize": "1"})
    assert (status, body["error_code"]) == (422, 42204)
    assert _v2(rest, "DELETE", base)[0] == 204


def test_two_instances_of_a_group_share_its_partitions(proxy):
    broker, rest = proxy
    topic, group = unique_topic("rest-v2-shared"), unique_topic("rest-v2-shared-group")
    create_topic(broker.bootstrap, topic, partitions=2)
    first = _create(rest, group, name="a", **{"auto.offset.reset": "earliest"})
    second = _create(rest, group, name="b", **{"auto.offset.reset": "earliest"})
    assert _v2(rest, "POST", f"{first}/subscription", {"topics": [topic]})[0] == 204
    _records(rest, first)  # joins, alone: both partitions
    assert len(rest.get(f"{first}/assignments")[1]["partitions"]) == 2
    assert _v2(rest, "POST", f"{second}/subscription", {"topics": [topic]})[0] == 204

    def shared() -> bool:
        # Reading drives each instance's join; the first rejoins when its heartbeat hears of the rebalance.
        for base in (first, second):
            _records(rest, base, timeout_ms=100)
        owned = [rest.get(f"{base}/assignments")[1]["partitions"] for base in (first, second)]
        return all(len(o) == 1 for o in owned) and owned[0] != owned[1]

    assert wait_until(shared, timeout_s=DEADLINE_S, interval_s=0.2)
    cid = rest.cluster_id()
    assert len(rest.get(f"/v3/clusters/{cid}/consumer-groups/{group}/consumers")[1]["data"]) == 2

    _produce(broker.bootstrap, topic, [(i % 2, None, b"shared-%d" % i) for i in range(20)])
    got: dict[str, list[dict]] = {first: [], second: []}
    deadline = time.monotonic() + DEADLINE_S
    while sum(len(v) for v in got.values()) < 20 and time.monotonic() < deadline:
        for base in (first, second):
            got[base] += _records(rest, base, timeout_ms=200)
    values = sorted(base64.b64decode(r["value"]) for v in got.values() for r in v)
    assert values == sorted(b"shared-%d" % i for i in range(20))  # every record once: none twice
    for base, records in got.items():
        owned = {p["partition"] for p in rest.get(f"{base}/assignments")[1]["partitions"]}
        assert records and {r["partition"] for r in records} == owned
    for base in (first, second):
        assert _v2(rest, "DELETE", base)[0] == 204


def test_an_idle_instance_expires_and_leaves_its_group(tmp_path):
    from tests.conftest import BrokerProcess

    broker = BrokerProcess(tmp_path, {"rest.listener": "http://127.0.0.1:0", "rest.consumer.instance.timeout.ms": "2000"}).start()
    try:
        rest = Rest(rest_port(broker))
        topic, group = unique_topic("rest-v2-idle"), unique_topic("rest-v2-idle-group")
        create_topic(broker.bootstrap, topic, partitions=1)
        base = _create(rest, group, name="idle")
        assert _v2(rest, "POST", f"{base}/subscription", {"topics": [topic]})[0] == 204
        _records(rest, base)
        cid = rest.cluster_id()
        members = f"/v3/clusters/{cid}/consumer-groups/{group}/consumers"
        assert len(rest.get(members)[1]["data"]) == 1
        # Watched through v3 only (using the instance would keep it alive).
        assert wait_until(lambda: rest.get(members)[1]["data"] == [], timeout_s=30)
        status, body, _ = rest.request("GET", f"{base}/records", accept=BINARY)
        assert (status, body["error_code"]) == (404, 40403)
        assert "expired after" in broker.log_text()
    finally:
        broker.stop()


def test_a_pattern_subscription_follows_new_topics(proxy):
    broker, rest = proxy
    prefix = unique_topic("rest-v2-pattern")
    group = unique_topic("rest-v2-pattern-group")
    # No body: every setting at its default (a generated name, binary, latest, auto-commit).
    status, created, raw = rest.request("POST", f"/consumers/{group}", content_type=None)
    assert status == 200 and created["instance_id"].startswith("rest-consumer-"), raw
    base = f"/consumers/{group}/instances/{created['instance_id']}"
    create_topic(broker.bootstrap, f"{prefix}-a", partitions=1)
    assert _v2(rest, "POST", f"{base}/subscription", {"topic_pattern": f"{prefix}-.*"})[0] == 204
    _records(rest, base)
    assert rest.get(f"{base}/subscription")[1] == {"topics": [f"{prefix}-a"]}
    # A new matching topic joins the subscription at a heartbeat (a rejoin), read from its start.
    create_topic(broker.bootstrap, f"{prefix}-b", partitions=1)

    def follows() -> bool:
        _records(rest, base, timeout_ms=100)
        return rest.get(f"{base}/subscription")[1] == {"topics": [f"{prefix}-a", f"{prefix}-b"]}

    assert wait_until(follows, timeout_s=DEADLINE_S, interval_s=0.2)
    _produce(broker.bootstrap, f"{prefix}-b", [(0, None, b"late")])
    assert [base64.b64decode(r["value"]) for r in _read(rest, base, 1)] == [b"late"]
    status, body, _ = _v2(rest, "POST", f"{base}/subscription", {"topics": ["x"], "topic_pattern": "y"})
    assert status == 422 and body["error_code"] == 422
    assert _v2(rest, "DELETE", f"{base}/subscription")[0] == 204
    assert rest.get(f"{base}/assignments")[1] == {"partitions": []}
    assert _v2(rest, "DELETE", base)[0] == 204
