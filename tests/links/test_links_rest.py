"""Cluster links and mirror topics through the REST proxy's v3 resources (Confluent's
shapes), against a source broker and a destination broker serving REST."""

from __future__ import annotations

import pytest

from tests.conftest import BrokerProcess
from tests.interop._rest import Rest, rest_port
from tests.interop._support import create_topic, unique_topic

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="mirror" password="s3cret";'


@pytest.fixture
def pair(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    source = BrokerProcess(tmp_path / "a")
    dest = BrokerProcess(tmp_path / "b", {"rest.listener": "http://127.0.0.1:0"})
    try:
        source.start()
        dest.start()
        rest = Rest(rest_port(dest))
        yield source, dest, rest, f"/v3/clusters/{rest.cluster_id()}"
    finally:
        dest.stop()
        source.stop()


def test_links_and_mirrors_over_rest(pair):
    source, _, rest, base = pair
    configs = [{"name": "bootstrap.servers", "value": source.bootstrap}, {"name": "sasl.jaas.config", "value": JAAS}]
    status, _, raw = rest.request("POST", base + "/links?link_name=east", {"configs": configs})
    assert status == 204, raw
    status, body, _ = rest.request("POST", base + "/links?link_name=east", {"configs": configs})
    assert status == 400 and "already exists" in body["message"]
    status, body, _ = rest.request("POST", base + "/links?link_name=west", {"configs": [{"name": "bootstrap.server", "value": "x:1"}]})
    assert status == 400 and "bootstrap.server" in body["message"]

    status, links, _ = rest.get(base + "/links")
    assert status == 200 and links["kind"] == "KafkaLinkDataList"
    assert [link["link_name"] for link in links["data"]] == ["east"]
    status, link, _ = rest.get(base + "/links/east")
    assert status == 200 and link["metadata"]["self"].endswith("/links/east") and link["topic_names"] == []
    assert rest.get(base + "/links/nope")[0] == 404
    status, listed, _ = rest.get(base + "/links/east/configs")
    by_name = {c["name"]: c for c in listed["data"]}
    assert by_name["sasl.jaas.config"]["value"] is None and by_name["sasl.jaas.config"]["sensitive"] is True
    assert by_name["bootstrap.servers"]["value"] == source.bootstrap
    assert by_name["consumer.offset.sync.enable"] == {**by_name["consumer.offset.sync.enable"], "value": "false", "is_default": True}

    topic = unique_topic("rest-orders")
    create_topic(source.bootstrap, topic, partitions=3, configs={"retention.ms": "86400000"})
    status, mirror, raw = rest.request("POST", base + "/links/east/mirrors", {"source_topic_name": topic})
    assert status == 201, raw
    assert (mirror["mirror_topic_name"], mirror["num_partitions"], mirror["mirror_status"]) == (topic, 3, "ACTIVE")
    status, body, _ = rest.request("POST", base + "/links/east/mirrors", {"source_topic_name": "missing-topic"})
    assert status == 404

    status, mirrors, _ = rest.get(base + "/links/east/mirrors")
    assert status == 200 and [m["mirror_topic_name"] for m in mirrors["data"]] == [topic]
    assert mirrors["data"][0]["source_topic_name"] == topic and mirrors["data"][0]["mirror_status"] == "ACTIVE"
    lags = mirrors["data"][0]["mirror_lags"]
    assert lags is None or sorted(lag["partition"] for lag in lags) == [0, 1, 2]

    status, body, _ = rest.request("POST", base + "/links/east/mirrors:promote", {"mirror_topic_names": [topic, "plain"]})
    assert status == 200
    assert [(d["mirror_topic_name"], d["error_code"]) for d in body["data"]] == [(topic, 0), ("plain", 42)]
    status, mirrors, _ = rest.get(base + "/links/east/mirrors")
    assert mirrors["data"][0]["mirror_status"] in ("PENDING_PROMOTE", "PROMOTED")
    status, body, _ = rest.request("POST", base + "/links/east/mirrors:failover", {"mirror_topic_names": [topic]})
    assert status == 200 and body["data"][0]["error_code"] in (0, 42)  # 42: promoted already

    # A paused mirror keeps the link from going, unless forced.
    paused = unique_topic("rest-paused")
    create_topic(source.bootstrap, paused, partitions=1)
    assert rest.request("POST", base + "/links/east/mirrors", {"source_topic_name": paused})[0] == 201
    status, body, _ = rest.request("POST", base + "/links/east/mirrors:pause", {"mirror_topic_names": [paused]})
    assert body["data"][0]["error_code"] == 0
    status, mirrors, _ = rest.get(base + "/links/east/mirrors")
    assert {m["mirror_topic_name"]: m["mirror_status"] for m in mirrors["data"]}[paused] == "PAUSED"
    status, body, _ = rest.request("DELETE", base + "/links/east")
    assert status == 400 and f"{paused} (PAUSED)" in body["message"]
    assert rest.request("DELETE", base + "/links/east?force=true")[0] == 204
    assert rest.get(base + "/links")[1]["data"] == []
    assert rest.get(base + "/links/east/mirrors")[0] == 404
