"""Helpers of the REST proxy tests: a broker process with rest.listener, and HTTP calls."""

from __future__ import annotations

import base64
import http.client
import json
import re

REST_LINE = re.compile(r"rest: serving the REST proxy on http://[^:]+:(?P<port>\d+)/v3")
JSON = "application/json"


def rest_port(broker) -> int:
    match = REST_LINE.search(broker.log_text())
    assert match, broker.log_text()
    return int(match.group("port"))


class Rest:
    """JSON over HTTP/1.1 to one REST proxy; ``auth`` is (user, password) for basic auth."""

    def __init__(self, port: int, auth: tuple[str, str] | None = None):
        self.port = port
        self.auth = auth

    def headers(self, content_type: str | None = JSON, accept: str | None = None) -> dict:
        headers = {}
        if accept:
            headers["Accept"] = accept
        if content_type:
            headers["Content-Type"] = content_type
        if self.auth is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(":".join(self.auth).encode()).decode()
        return headers

    def request(self, method: str, path: str, body=None, *, content_type: str | None = JSON, raw: bytes | None = None,
                chunks=None, accept: str | None = None):
        """(status, parsed JSON or None, raw body)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            if chunks is not None:
                connection.request(method, path, body=chunks, headers=self.headers(content_type, accept), encode_chunked=True)
            else:
                connection.request(method, path, body=data, headers=self.headers(content_type if data is not None else None, accept))
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
        media = response.getheader("Content-Type", "")
        is_json = media.startswith(JSON) or (media.startswith("application/vnd.kafka") and "+json" in media)
        parsed = json.loads(payload) if payload and is_json and b"\n{" not in payload.strip() else None
        self.last_content_type = media
        return response.status, parsed, payload

    def get(self, path: str):
        return self.request("GET", path)

    def cluster_id(self) -> str:
        status, body, _ = self.get("/v3/clusters")
        assert status == 200, body
        return body["data"][0]["cluster_id"]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def results(payload: bytes) -> list[dict]:
    """The JSON values of a streamed answer (concatenated JSON objects)."""
    decoder = json.JSONDecoder()
    text = payload.decode()
    out, pos = [], 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return out
        value, pos = decoder.raw_decode(text, pos)
        out.append(value)
