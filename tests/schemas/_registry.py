"""Helpers of the schema registry tests: the endpoint's port from a broker's log, JSON over HTTP."""

from __future__ import annotations

import http.client
import json
import re
from contextlib import contextmanager

REGISTRY_LINE = re.compile(r"schema registry: serving on http://[^:]+:(?P<port>\d+)")
MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"


def registry_port(broker) -> int:
    match = REGISTRY_LINE.search(broker.log_text())
    assert match, broker.log_text()
    return int(match.group("port"))


class Registry:
    """Calls to one broker's schema registry: (status, parsed JSON body)."""

    def __init__(self, port: int):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.last_content_type = None

    def request(self, method: str, path: str, body=None):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": MEDIA_TYPE} if data is not None else {}
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
        self.last_content_type = response.getheader("Content-Type", "")
        return response.status, (json.loads(payload) if payload else None)

    def get(self, path: str):
        return self.request("GET", path)

    def post(self, path: str, body):
        return self.request("POST", path, body)

    def register(self, subject: str, schema: dict | str, **extra):
        text = schema if isinstance(schema, str) else json.dumps(schema)
        return self.post(f"/subjects/{subject}/versions", {"schema": text, **extra})


def start_registry_cluster(cluster) -> None:
    """Start a ReplicatedCluster (tests/cluster/replication_harness.py) with the
    registry on every node, each on a fixed port (a restarted node serves it where
    it did before); ``cluster.registries`` maps node id -> Registry."""
    from tests.cluster.replication_harness import NODE_IDS, wait_until
    from tests.cluster.test_quorum_processes import free_ports
    from tests.conftest import BrokerProcess

    ports = dict(zip(NODE_IDS, free_ports(len(NODE_IDS))))
    for node in NODE_IDS:
        cluster.overrides[node]["schema.registry.listener"] = f"http://127.0.0.1:{ports[node]}"
        cluster.nodes[node] = BrokerProcess(cluster.nodes[node].data_dir, cluster.overrides[node])
    cluster._history = list(cluster.nodes.items())
    cluster.start()
    assert wait_until(lambda: all(REGISTRY_LINE.search(cluster.nodes[n].log_text()) for n in NODE_IDS), 15)
    cluster.registries = {node: Registry(ports[node]) for node in NODE_IDS}


USER_V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
USER_V2 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}]}
USER_BAD = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}, {"name": "email", "type": "string"}]}


@contextmanager
def serving_registry(data_dir):
    """One broker process serving the registry on an ephemeral port: a Registry
    whose ``broker`` is the process, stopped on exit."""
    from tests.conftest import BrokerProcess, wait_until

    broker = BrokerProcess(data_dir, {"schema.registry.listener": "http://127.0.0.1:0"}).start()
    try:
        assert wait_until(lambda: REGISTRY_LINE.search(broker.log_text()))
        registry = Registry(registry_port(broker))
        registry.broker = broker
        yield registry
    finally:
        broker.stop()
