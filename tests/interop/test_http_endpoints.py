"""The limits the three HTTP endpoints share (broker/http/server.py), on a real broker
process with metrics.listener, console.listener and rest.listener all set: each
endpoint admits MAX_HTTP_CONNECTIONS connections at once and closes one more
unanswered, the Kafka listener serves clients all the while, and a connection
that sends no request head is closed after REQUEST_HEAD_TIMEOUT_S, freeing its slot."""

from __future__ import annotations

import socket
import time

from broker.http.server import MAX_HTTP_CONNECTIONS, REQUEST_HEAD_TIMEOUT_S
from tests.conftest import wait_until
from tests.interop._rest import REST_LINE
from tests.interop._support import Msg, consume, create_topic, produce, unique_topic
from tests.interop.test_console import CONSOLE_LINE
from tests.interop.test_metrics import METRICS_LINE

# What each endpoint answers 200 to; ``Connection: close`` so that an answered
# probe gives its slot back at once, kept-alive REST included.
PROBES = {
    "metrics": (METRICS_LINE, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    "console": (CONSOLE_LINE, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    "rest": (REST_LINE, b"GET /v3/clusters HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
}


def answer(port: int, request: bytes) -> bytes:
    """Everything the endpoint sends on a new connection to this request, until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(request)
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
            return received
        except ConnectionResetError:  # closed before (or while) the request arrived
            return b""


def test_each_endpoint_admits_a_bounded_number_of_connections(broker_factory):
    broker = broker_factory(
        {"metrics.listener": "http://127.0.0.1:0", "console.listener": "http://127.0.0.1:0", "rest.listener": "http://127.0.0.1:0"}
    )
    assert wait_until(lambda: all(line.search(broker.log_text()) for line, _ in PROBES.values()))
    ports = {name: int(line.search(broker.log_text()).group("port")) for name, (line, _) in PROBES.items()}
    for name, port in ports.items():
        assert answer(port, PROBES[name][1]).startswith(b"HTTP/1.1 200 "), name

    held: dict[str, list[socket.socket]] = {}
    try:
        for name, port in ports.items():
            request = PROBES[name][1]
            held[name] = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(MAX_HTTP_CONNECTIONS)]
            # Once the idle ones are all accepted, one more is closed unanswered (each
            # endpoint has its own count: the others' full slots do not matter).
            assert wait_until(lambda port=port, request=request: answer(port, request) == b""), name
            held[name][0].sendall(request)  # an admitted connection is served meanwhile
            assert held[name][0].recv(12) == b"HTTP/1.1 200", name
        # Every endpoint full: Kafka clients are served as ever.
        topic = unique_topic("http-limits")
        create_topic(broker.bootstrap, topic)
        produce("confluent", broker.bootstrap, topic, [Msg(key=None, value=b"v%d" % i) for i in range(10)])
        assert [got.value for got in consume("kafka-python", broker.bootstrap, topic, 10)] == [b"v%d" % i for i in range(10)]
        # The idle connections never send a request head: the endpoint closes each one
        # after REQUEST_HEAD_TIMEOUT_S, freeing its slot.
        for name, sockets in held.items():
            for sock in sockets[1:]:
                sock.settimeout(REQUEST_HEAD_TIMEOUT_S + 20)
                started_s = time.monotonic()
                try:
                    assert sock.recv(1) == b"", name
                except ConnectionResetError:
                    pass
                assert time.monotonic() - started_s < REQUEST_HEAD_TIMEOUT_S + 10, name
        for name, port in ports.items():
            assert answer(port, PROBES[name][1]).startswith(b"HTTP/1.1 200 "), name
    finally:
        for sockets in held.values():
            for sock in sockets:
                sock.close()
