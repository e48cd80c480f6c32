"""The REST proxy's connections to other nodes (broker/http/rest/cluster.py NodeConnections):
one per node on its inter-broker endpoint from the metadata image, reused, replaced
when the node's address changes, at most a bound (least recently used closed first),
all closed when the proxy stops; a node without an endpoint is 'nothing sent'."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

pytest.importorskip("aiohttp")

from broker.http.rest.cluster import NodeConnections, _Unsent
from controller.metadata.image import BrokerRegistration, Endpoint


class FakeConnection:
    def __init__(self, host, port, client_id, to, connect_timeout_ms):
        self.address = (host, port)
        self.client_id = client_id
        self.to = to
        self.closed = False

    def close(self):
        self.closed = True


def _broker(ports: dict[int, int]):
    made = []

    def node_connection(host, port, client_id, *, to, connect_timeout_ms):
        made.append(FakeConnection(host, port, client_id, to, connect_timeout_ms))
        return made[-1]

    def registration(node, port):
        endpoints = (Endpoint("REPLICATION", "127.0.0.1", port, 0), Endpoint("CLIENTS", "127.0.0.1", port + 1, 0))
        return BrokerRegistration(node, uuid.uuid4(), 1, endpoints, fenced=False)

    broker = SimpleNamespace(
        node_id=1,
        config=SimpleNamespace(inter_broker_listener_name="REPLICATION"),
        image=SimpleNamespace(brokers={n: registration(n, p) for n, p in ports.items()}),
        node_connection=node_connection,
    )
    return broker, made, registration


def test_one_connection_per_node_on_its_inter_broker_endpoint():
    broker, made, _ = _broker({2: 9100, 3: 9200})
    nodes = NodeConnections(broker)
    two = nodes.get(2)
    assert nodes.get(2) is two and len(made) == 1
    assert two.address == ("127.0.0.1", 9100) and two.to == "broker" and two.client_id == "pybroker-rest-1"
    assert nodes.get(3).address == ("127.0.0.1", 9200)


def test_a_moved_node_gets_a_new_connection_and_the_old_one_is_closed():
    broker, _, registration = _broker({2: 9100})
    nodes = NodeConnections(broker)
    old = nodes.get(2)
    broker.image.brokers[2] = registration(2, 9300)
    new = nodes.get(2)
    assert new is not old and old.closed and not new.closed and new.address == ("127.0.0.1", 9300)


def test_past_the_bound_the_least_recently_used_is_closed():
    broker, _, _ = _broker({2: 9100, 3: 9200, 4: 9300})
    nodes = NodeConnections(broker, limit=2)
    two, three = nodes.get(2), nodes.get(3)
    nodes.get(2)  # used again: 3 is now the least recent
    four = nodes.get(4)
    assert three.closed and not two.closed and not four.closed


def test_no_endpoint_and_a_closed_pool_send_nothing():
    broker, made, _ = _broker({2: 9100})
    nodes = NodeConnections(broker)
    with pytest.raises(_Unsent):
        nodes.get(7)  # not registered
    broker.config.inter_broker_listener_name = "OTHER"
    with pytest.raises(_Unsent):
        nodes.get(2)
    broker.config.inter_broker_listener_name = "REPLICATION"
    two = nodes.get(2)
    nodes.close()
    assert two.closed
    with pytest.raises(_Unsent):
        nodes.get(2)
    assert len(made) == 1
