"""Helpers of the schema registry tests: the endpoint's port from a broker's log, JSON over HTTP."""

from __future__ import annotations

import http.client
import json
import re

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
