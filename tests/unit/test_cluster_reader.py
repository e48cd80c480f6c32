"""broker/http/cluster_reader.py without processes: requests batched one per leader,
an unavailable node's partitions reported unknown (never waited on), the
connection pool's bound and close; and the metrics' consumer-group lag for
partitions led elsewhere, read from the background cache at scrape time."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.http import cluster_reader
from broker.http.cluster_reader import ClusterReader, HighWatermarkCache, NodeUnavailable
from protocol.consumer_offsets import OffsetAndMetadata
from protocol.errors import ErrorCode
from tests.unit.test_metrics import FakeLog, fake_broker, metrics_of, samples


class FakeConnection:
    def __init__(self, address):
        self.address = address
        self.closed = False

    def close(self):
        self.closed = True


def cluster_broker(leaders: dict[tuple[str, int], int], nodes=(1, 2, 3)):
    topics: dict = {}
    for (topic, partition), leader in leaders.items():
        topics.setdefault(topic, SimpleNamespace(partitions={})).partitions[partition] = SimpleNamespace(leader=leader)
    opened = []

    def node_connection(host, port, client_id, *, to, connect_timeout_ms):
        assert to == "broker"
        opened.append(FakeConnection((host, port)))
        return opened[-1]

    brokers = {
        n: SimpleNamespace(
            endpoint=lambda name, n=n: SimpleNamespace(host="127.0.0.1", port=9000 + n) if name == "INTERNAL" else None
        )
        for n in nodes
    }
    broker = SimpleNamespace(
        image=SimpleNamespace(topics=topics, brokers=brokers),
        config=SimpleNamespace(inter_broker_listener_name="INTERNAL"),
        node_connection=node_connection,
    )
    return broker, opened


def test_offsets_are_asked_once_per_leader_and_an_unavailable_leader_leaves_its_partitions_unknown():
    broker, _ = cluster_broker({("t", 0): 2, ("t", 1): 3, ("t", 2): 2, ("u", 0): -1})
    reader = ClusterReader(broker, "test")
    calls = []

    async def list_offsets(node_id, partitions, timestamp):
        calls.append((node_id, sorted(partitions), timestamp))
        if node_id == 3:
            raise NodeUnavailable("node 3 did not answer")
        return {key: (ErrorCode.NONE, 100 + key[1]) for key in partitions}

    reader.list_offsets = list_offsets
    found, unknown = asyncio.run(reader.offsets_by_leader([("t", 0), ("t", 1), ("t", 2), ("u", 0)]))
    assert sorted(calls) == [(2, [("t", 0), ("t", 2)], -1), (3, [("t", 1)], -1)]
    assert found == {("t", 0): 100, ("t", 2): 102}
    assert unknown == {("t", 1), ("u", 0)}  # leader 3 unavailable; u-0 has no leader


def test_connections_are_pooled_per_node_bounded_and_closed(monkeypatch):
    monkeypatch.setattr(cluster_reader, "MAX_NODE_CONNECTIONS", 2)
    broker, opened = cluster_broker({}, nodes=(1, 2, 3))
    reader = ClusterReader(broker, "test")
    first = reader._connection(1)
    assert reader._connection(1) is first and len(opened) == 1
    reader._connection(2)
    reader._connection(3)  # a third node: the least recently used (node 1) is closed
    assert first.closed and set(reader._connections) == {2, 3}
    try:
        reader._connection(7)
    except NodeUnavailable as exc:
        assert "node 7" in str(exc)
    else:
        raise AssertionError("an unregistered node must be unavailable")
    reader.close()
    assert all(c.closed for c in opened)


def test_request_timeout_is_node_unavailable_and_drops_the_connection():
    broker, opened = cluster_broker({}, nodes=(2,))

    class Silent(FakeConnection):
        async def request(self, api, version, body, *, timeout_ms):
            await asyncio.sleep(10)

    broker.node_connection = lambda host, port, client_id, *, to, connect_timeout_ms: (
        opened.append(Silent((host, port))) or opened[-1]
    )
    reader = ClusterReader(broker, "test", request_timeout_ms=50)

    async def ask():
        try:
            await reader.request(2, cluster_reader.LIST_GROUPS, 4, None)
        except NodeUnavailable as exc:
            return str(exc)

    assert "node 2 did not answer ListGroups" in asyncio.run(ask())
    assert opened[0].closed and not reader._connections


def test_cache_refresh_replaces_values_and_forgets_unanswered_partitions():
    broker, _ = cluster_broker({("t", 0): 2, ("t", 1): 3})
    reader = ClusterReader(broker, "test")
    answers = {2: {("t", 0): (ErrorCode.NONE, 5)}, 3: {("t", 1): (ErrorCode.NONE, 9)}}

    async def list_offsets(node_id, partitions, timestamp):
        if answers.get(node_id) is None:
            raise NodeUnavailable("down")
        return answers[node_id]

    reader.list_offsets = list_offsets
    cache = HighWatermarkCache(reader, lambda: {("t", 0), ("t", 1)}, 1000)
    asyncio.run(cache.refresh())
    assert cache.values == {("t", 0): 5, ("t", 1): 9}
    answers[3] = None
    asyncio.run(cache.refresh())
    assert cache.values == {("t", 0): 5}  # no stale high watermark of an unanswered leader


def test_metrics_lag_of_partitions_led_elsewhere_comes_from_the_cache():
    logs = {("a", 0): FakeLog(10, 8)}
    offsets = {
        "g": {
            ("a", 0): OffsetAndMetadata(3, -1, "", 0),
            ("far", 0): OffsetAndMetadata(4, -1, "", 0),
            ("far", 1): OffsetAndMetadata(1, -1, "", 0),
        }
    }
    metrics = metrics_of(fake_broker(logs=logs, offsets=offsets))
    assert metrics._remote_lag_partitions() == {("far", 0), ("far", 1)}
    # The scrape reads the cache only: far-1's leader did not answer, so it has no series.
    metrics.remote_hws = SimpleNamespace(values={("far", 0): 10})
    got = samples(metrics)
    lag = {
        dict(labels)["topic"] + "-" + dict(labels)["partition"]: v
        for (name, labels), v in got.items()
        if name == "kafka_consumergroup_lag"
    }
    assert lag == {"a-0": 5, "far-0": 6}
