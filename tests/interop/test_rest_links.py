"""Every link the REST proxy's v3 answers emit resolves: a bounded crawl from /v3 and
/v3/clusters over every ``related`` and ``metadata.self`` URL, on a broker that has a
topic, a live group member with committed offsets and a dynamic cluster-wide config,
fails on any path the proxy does not serve (its 404 "HTTP 404 Not Found") and on any
path its own OpenAPI document does not describe. A resource that is simply absent
(a partition not being reassigned) may answer Confluent's 404 for a missing resource."""

from __future__ import annotations

import re
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from tests.conftest import wait_until
from tests.interop._rest import Rest, rest_port
from tests.interop._support import Msg, confluent_consumer, create_topic, produce, unique_topic

confluent_kafka = pytest.importorskip("confluent_kafka")

CRAWL_URLS_MAX = 400
# Of a list, the links of its first items are followed (every item has the same kinds of links;
# a broker's ~300 configs and __consumer_offsets' 50 partitions need not all be visited).
LIST_ITEMS_FOLLOWED = 3
MISSING_ROUTE = "HTTP 404 Not Found"
# Resources that may be absent although the link to them is right (Confluent answers 404 too).
MAY_BE_ABSENT = (
    re.compile(r"/topics/[^/]+/partitions/\d+/reassignment$"),
    re.compile(r"/consumer-groups/[^/]+/lags/[^/]+/partitions/\d+$"),  # no committed offset there: no lag row
)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    from tests.conftest import BrokerProcess

    broker = BrokerProcess(tmp_path_factory.mktemp("rest-links"), {"rest.listener": "http://127.0.0.1:0"}).start()
    try:
        yield broker, Rest(rest_port(broker))
    finally:
        broker.stop()


def _links(value, out: list[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("related", "self") and isinstance(item, str):
                out.append(item)
            else:
                _links(item, out)
    elif isinstance(value, list):
        for item in value:
            _links(item, out)


def _route_patterns(rest: Rest) -> list[re.Pattern]:
    status, document, _ = rest.get("/v3/openapi.json")
    assert status == 200
    return [re.compile("^" + re.sub(r"\\{\w+\\}", "[^/]+", re.escape(path)) + "$") for path in document["paths"]]


def test_every_link_from_the_root_resolves(proxy):
    broker, rest = proxy
    topic = unique_topic("rest-links")
    group = "rest-links-group"
    create_topic(broker.bootstrap, topic, partitions=2)
    produce("confluent", broker.bootstrap, topic, [Msg(b"k", b"v")], partition=0)
    # A cluster-wide dynamic broker config, so /broker-configs lists one and its link is followed.
    done = subprocess.run(
        [sys.executable, "-m", "broker", "configs", "--bootstrap-server", broker.bootstrap, "--alter",
         "--entity-type", "brokers", "--entity-default", "--add-config", "log.retention.ms=604800001"],
        check=False, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    consumer = confluent_consumer(broker.bootstrap, {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        polled = []
        assert wait_until(lambda: polled.append(consumer.poll(0.5)) or polled[-1] is not None, timeout_s=30)
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, p, 1) for p in (0, 1)], asynchronous=False)
        cid = rest.cluster_id()
        # The member is in the group's description before the crawl starts.
        assert wait_until(lambda: rest.get(f"/v3/clusters/{cid}/consumer-groups/{group}/consumers")[1]["data"], timeout_s=30)

        status, root, _ = rest.get("/v3")
        assert status == 200 and root["clusters"]["related"].endswith("/v3/clusters"), root
        patterns = _route_patterns(rest)
        seen: set[str] = set()
        queue = ["/v3"]
        visited_kinds = set()
        while queue:
            assert len(seen) < CRAWL_URLS_MAX, "the crawl did not end"
            path = queue.pop(0)
            if path in seen:
                continue
            seen.add(path)
            assert any(p.match(path) for p in patterns), f"{path} is linked but not in /v3/openapi.json"
            status, body, raw = rest.get(path)
            if status == 404 and any(p.search(path) for p in MAY_BE_ABSENT):
                assert body["message"] != MISSING_ROUTE, path
                continue
            if path.endswith("/acls"):
                # Without an authorizer there are no ACLs to list: Kafka's SECURITY_DISABLED,
                # in Confluent's shape (test_rest_auth.py lists them with an authorizer).
                assert (status, body["error_code"]) == (400, 40002) and "Authorizer" in body["message"], body
                continue
            assert status == 200, f"GET {path}: {status} {raw[:300]!r}"
            visited_kinds.add(body.get("kind"))
            found: list[str] = []
            if isinstance(body.get("data"), list):
                body = {**body, "data": body["data"][:LIST_ITEMS_FOLLOWED]}
            _links(body, found)
            for url in found:
                split = urlsplit(url)
                assert split.port == rest.port, url
                if split.path not in seen:
                    queue.append(split.path)
    finally:
        consumer.close()
    # The crawl reached the resources the issue named, and the ones under groups.
    for kind in ("KafkaClusterConfigList", "KafkaClusterConfig", "KafkaReassignmentList", "KafkaReplicaList", "KafkaReplica",
                 "KafkaBrokerConfig", "KafkaConsumer", "KafkaConsumerAssignmentList", "KafkaConsumerAssignment",
                 "KafkaConsumerLag", "KafkaConsumerGroupLagSummary"):
        assert kind in visited_kinds, (kind, sorted(k for k in visited_kinds if k))
    assert any(p.endswith("/acls") for p in seen)
