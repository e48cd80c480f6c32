"""The REST proxy (rest.listener) of a real broker process: Confluent REST Proxy v3
resources over HTTP, produce through REST and consume with confluent-kafka, produce
with confluent-kafka and read the group's lags through REST, streaming mode, and
Confluent's error shape and statuses for bad input."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import wait_until
from tests.interop._rest import Rest, b64, rest_port, results
from tests.interop._support import (
    Msg,
    confluent_consumer,
    consume,
    create_topic,
    produce,
    read_all_batches,
    unique_topic,
)

confluent_kafka = pytest.importorskip("confluent_kafka")

STREAMED_RECORDS = 1000


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    from tests.conftest import BrokerProcess

    broker = BrokerProcess(
        tmp_path_factory.mktemp("rest-broker"),
        {"rest.listener": "http://127.0.0.1:0", "message.max.bytes": "100000"},
    ).start()
    try:
        rest = Rest(rest_port(broker))
        yield broker, rest, rest.cluster_id()
    finally:
        broker.stop()


def test_cluster_brokers_and_their_configs(proxy):
    broker, rest, cid = proxy
    status, cluster, _ = rest.get(f"/v3/clusters/{cid}")
    assert status == 200 and cluster["kind"] == "KafkaCluster"
    assert cluster["metadata"]["resource_name"] == f"crn:///kafka={cid}"
    assert cluster["brokers"]["related"].endswith(f"/v3/clusters/{cid}/brokers")
    status, brokers, _ = rest.get(f"/v3/clusters/{cid}/brokers")
    assert status == 200 and [b["broker_id"] for b in brokers["data"]] == [1]
    assert brokers["data"][0]["port"] == broker.port
    status, one, _ = rest.get(f"/v3/clusters/{cid}/brokers/1")
    assert status == 200 and one["kind"] == "KafkaBroker" and one["host"] == "127.0.0.1"
    status, configs, _ = rest.get(f"/v3/clusters/{cid}/brokers/1/configs")
    by_name = {c["name"]: c for c in configs["data"]}
    assert by_name["message.max.bytes"]["value"] == "100000"
    assert by_name["message.max.bytes"]["source"] == "STATIC_BROKER_CONFIG"
    assert rest.get(f"/v3/clusters/{cid}/brokers/7")[0] == 404
    status, error, _ = rest.get("/v3/clusters/not-this-one/topics")
    assert status == 404 and error == {"error_code": 404, "message": "Cluster not-this-one cannot be found."}


def test_topic_lifecycle_configs_and_partitions(proxy):
    _, rest, cid = proxy
    topic = unique_topic("rest-topic")
    status, created, _ = rest.request("POST", f"/v3/clusters/{cid}/topics", {
        "topic_name": topic, "partitions_count": 3, "replication_factor": 1,
        "configs": [{"name": "cleanup.policy", "value": "compact"}],
    })
    assert status == 201, created
    assert created["partitions_count"] == 3 and created["replication_factor"] == 1
    status, again, _ = rest.request("POST", f"/v3/clusters/{cid}/topics", {"topic_name": topic})
    assert status == 400 and again["error_code"] == 40002
    status, listed, _ = rest.get(f"/v3/clusters/{cid}/topics")
    assert topic in [t["topic_name"] for t in listed["data"]]
    status, partitions, _ = rest.get(f"/v3/clusters/{cid}/topics/{topic}/partitions")
    assert [p["partition_id"] for p in partitions["data"]] == [0, 1, 2]
    assert partitions["data"][0]["leader"]["related"].endswith(f"/topics/{topic}/partitions/0/replicas/1")
    assert rest.get(f"/v3/clusters/{cid}/topics/{topic}/partitions/2")[0] == 200
    assert rest.get(f"/v3/clusters/{cid}/topics/{topic}/partitions/3")[1]["error_code"] == 40403

    base = f"/v3/clusters/{cid}/topics/{topic}/configs"
    status, config, _ = rest.get(base + "/cleanup.policy")
    assert (config["value"], config["source"], config["is_default"]) == ("compact", "DYNAMIC_TOPIC_CONFIG", False)
    assert rest.request("PUT", base + "/retention.ms", {"value": "60000"})[0] == 204
    assert rest.get(base + "/retention.ms")[1]["value"] == "60000"
    status, _, _ = rest.request("POST", base + ":alter", {"data": [
        {"name": "retention.ms", "operation": "DELETE"}, {"name": "segment.ms", "value": "3600000"},
    ]})
    assert status == 204
    configs = {c["name"]: c for c in rest.get(base)[1]["data"]}
    assert configs["retention.ms"]["source"] == "DEFAULT_CONFIG"
    assert configs["segment.ms"]["value"] == "3600000"
    assert rest.request("DELETE", base + "/segment.ms")[0] == 204
    assert rest.get(base + "/segment.ms")[1]["is_default"] is True
    status, refused, _ = rest.request("PUT", base + "/retention.ms", {"value": "not-a-number"})
    assert status == 400 and refused["error_code"] == 40002

    assert rest.request("DELETE", f"/v3/clusters/{cid}/topics/{topic}")[0] == 204
    assert wait_until(lambda: rest.get(f"/v3/clusters/{cid}/topics/{topic}")[0] == 404)
    status, gone, _ = rest.get(f"/v3/clusters/{cid}/topics/{topic}")
    assert gone == {"error_code": 40403, "message": "This server does not host this topic-partition."}


def test_produce_every_payload_type_and_consume_with_confluent_kafka(proxy):
    broker, rest, cid = proxy
    topic = unique_topic("rest-produce")
    create_topic(broker.bootstrap, topic, partitions=2)
    path = f"/v3/clusters/{cid}/topics/{topic}/records"
    sent = [
        ({"partition_id": 1, "key": {"type": "BINARY", "data": b64(b"\x00\xffk")}, "value": {"type": "BINARY", "data": b64(b"\x01\x02")},
          "headers": [{"name": "h1", "value": b64(b"v1")}, {"name": "h2", "value": None}]},
         (b"\x00\xffk", b"\x01\x02", (("h1", b"v1"), ("h2", None)))),
        ({"partition_id": 1, "key": {"type": "STRING", "data": "clé"}, "value": {"type": "STRING", "data": "välue"}},
         ("clé".encode(), "välue".encode(), ())),
        ({"partition_id": 1, "key": {"type": "JSON", "data": 7}, "value": {"type": "JSON", "data": {"a": [1, "x"], "b": None}}},
         (b"7", b'{"a":[1,"x"],"b":null}', ())),
        ({"partition_id": 1, "value": {"type": "STRING", "data": "no key"}, "timestamp": "2024-05-06T07:08:09.123Z"},
         (None, b"no key", ())),
    ]
    offsets = []
    for body, (key, value, _) in sent:
        status, answer, raw = rest.request("POST", path, body)
        assert status == 200, raw
        assert answer["error_code"] == 200 and answer["partition_id"] == 1 and answer["topic_name"] == topic
        assert answer["value"]["size"] == len(value)
        assert answer["key"] == (None if key is None else {"type": body["key"]["type"], "size": len(key)})
        offsets.append(answer["offset"])
    assert offsets == [0, 1, 2, 3]
    assert answer["timestamp"] == "2024-05-06T07:08:09.123Z"
    got = consume("confluent", broker.bootstrap, topic, len(sent), partitions=(1,))
    assert [(g.key, g.value, g.headers) for g in got] == [expected for _, expected in sent]
    # Without partition_id a keyed record goes where Kafka's default partitioner puts it.
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    placed = []
    producer.produce(topic, key=b"route-me", value=b"x", on_delivery=lambda err, msg: placed.append(msg.partition()))
    producer.flush(30)
    status, answer, _ = rest.request("POST", path, {"key": {"type": "BINARY", "data": b64(b"route-me")}, "value": {"type": "STRING", "data": "y"}})
    assert status == 200 and answer["partition_id"] == placed[0]


def test_streaming_mode_batches_a_thousand_records_from_one_chunked_post(proxy):
    broker, rest, cid = proxy
    topic = unique_topic("rest-stream")
    create_topic(broker.bootstrap, topic, partitions=1)
    lines = [json.dumps({"value": {"type": "STRING", "data": f"record-{i}"}}).encode() for i in range(STREAMED_RECORDS)]
    # Chunks cut records in the middle: the parser must wait for the rest.
    blob = b"".join(lines)
    chunks = [blob[i:i + 997] for i in range(0, len(blob), 997)]
    started = time.monotonic()
    status, _, raw = rest.request("POST", f"/v3/clusters/{cid}/topics/{topic}/records", chunks=iter(chunks))
    assert status == 200, raw[:500]
    answers = results(raw)
    assert [a["offset"] for a in answers] == list(range(STREAMED_RECORDS))
    assert all(a["error_code"] == 200 for a in answers)
    got = consume("confluent", broker.bootstrap, topic, STREAMED_RECORDS)
    assert [g.value for g in got] == [f"record-{i}".encode() for i in range(STREAMED_RECORDS)]
    # Batched: a few Produce requests, one record batch per partition each, not one per record.
    batches = read_all_batches(broker.bootstrap, topic)
    assert len(batches) <= STREAMED_RECORDS // 100, (len(batches), time.monotonic() - started)


def test_group_lags_after_producing_with_confluent_kafka(proxy):
    broker, rest, cid = proxy
    topic = unique_topic("rest-lag")
    group = unique_topic("rest-group")
    create_topic(broker.bootstrap, topic, partitions=2)
    for partition in (0, 1):
        produce("confluent", broker.bootstrap, topic, [Msg(None, b"v%d" % i) for i in range(10)], partition=partition)
    consumer = confluent_consumer(broker.bootstrap, {"group.id": group, "client.id": "lagging-client"})
    try:
        from confluent_kafka import TopicPartition

        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 20 and time.monotonic() < deadline:
            if consumer.poll(0.5) is not None:
                seen += 1
        assert seen == 20
        # Committed: 4 behind on partition 0, 7 behind on partition 1.
        consumer.commit(offsets=[TopicPartition(topic, 0, 6), TopicPartition(topic, 1, 3)], asynchronous=False)
        base = f"/v3/clusters/{cid}/consumer-groups/{group}"
        status, lags, _ = rest.get(base + "/lags")
        assert status == 200, (lags, broker.log_text()[-3000:])
        rows = {(r["topic_name"], r["partition_id"]): r for r in lags["data"]}
        assert (rows[(topic, 0)]["current_offset"], rows[(topic, 0)]["log_end_offset"], rows[(topic, 0)]["lag"]) == (6, 10, 4)
        assert rows[(topic, 1)]["lag"] == 7 and rows[(topic, 1)]["client_id"] == "lagging-client"
        status, summary, _ = rest.get(base + "/lag-summary")
        assert (summary["total_lag"], summary["max_lag"], summary["max_lag_partition_id"]) == (11, 7, 1)
        status, described, _ = rest.get(base)
        assert described["state"] == "STABLE" and described["kind"] == "KafkaConsumerGroup"
        status, consumers, _ = rest.get(base + "/consumers")
        assert [c["client_id"] for c in consumers["data"]] == ["lagging-client"]
        status, groups, _ = rest.get(f"/v3/clusters/{cid}/consumer-groups")
        assert group in [g["consumer_group_id"] for g in groups["data"]]
    finally:
        consumer.close()
    status, missing, _ = rest.get(f"/v3/clusters/{cid}/consumer-groups/no-such-group")
    assert status == 404 and set(missing) == {"error_code", "message"}


def test_bad_input_gets_confluents_status_and_shape(proxy):
    broker, rest, cid = proxy
    topic = unique_topic("rest-bad")
    create_topic(broker.bootstrap, topic, partitions=1)
    path = f"/v3/clusters/{cid}/topics/{topic}/records"
    status, error, _ = rest.request("POST", path, raw=b'{"value": {"type": "STRING", "data": ')
    assert status == 400 and error["error_code"] == 400 and error["message"].startswith("Malformed JSON")
    status, error, _ = rest.request("POST", f"/v3/clusters/{cid}/topics/{unique_topic('absent')}/records",
                                    {"value": {"type": "STRING", "data": "x"}})
    assert (status, error) == (404, {"error_code": 40403, "message": "This server does not host this topic-partition."})
    status, error, _ = rest.request("POST", path, {"value": {"type": "STRING", "data": "x" * 200_000}})
    assert status == 413 and error["error_code"] == 413 and "max.message.bytes" in error["message"]
    status, error, _ = rest.request("POST", path, raw=b'{"value": {"type": "STRING", "data": "x"}}', content_type="text/plain")
    assert (status, error) == (415, {"error_code": 415, "message": "HTTP 415 Unsupported Media Type"})
    status, error, _ = rest.request("POST", path, {"value": {"type": "AVRO", "data": "x"}})
    assert status == 400 and "schema registry" in error["message"]
    status, error, _ = rest.request("POST", path, {"value": {"type": "BINARY", "data": "%%%"}})
    assert status == 400 and "base64" in error["message"]
    status, error, _ = rest.request("POST", f"/v3/clusters/{cid}/topics", raw=b"[1, 2")
    assert status == 400 and error["error_code"] == 400
    # In streaming mode a bad record ends the stream with an error line after the good ones.
    status, _, raw = rest.request("POST", path, chunks=iter([b'{"value":{"type":"STRING","data":"ok"}}', b"{nope"]))
    answers = results(raw)
    assert status == 200 and answers[0]["error_code"] == 200 and answers[1]["error_code"] == 400
    # Nothing was written for the refused records.
    assert [g.value for g in consume("confluent", broker.bootstrap, topic, 1, settle_s=1.0)] == [b"ok"]
