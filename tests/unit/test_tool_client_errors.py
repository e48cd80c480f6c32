"""The tools' client when a broker answers what a plaintext client cannot read:
TLS alert bytes where a response should start are named as such, with what
to pass in --command-config (the peer here is a socket that answers a TLS
alert record, as a TLS listener may)."""

from __future__ import annotations

import socket
import threading

import pytest

from broker.tools.client import KafkaConnection, ToolError

# A TLS record: alert (21), TLS 1.2, two bytes: fatal (2), protocol_version (70).
TLS_ALERT = b"\x15\x03\x03\x00\x02\x02\x46"


def one_shot_peer(answer: bytes):
    """A listening socket that reads the first bytes of one connection, writes ``answer`` and closes."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)

    def serve() -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            conn.recv(4096)
            conn.sendall(answer)
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server.getsockname()[1], thread


def test_tls_bytes_in_place_of_a_response_are_named():
    port, thread = one_shot_peer(TLS_ALERT)
    connection = KafkaConnection("127.0.0.1", port, timeout_s=5)
    try:
        with pytest.raises(ToolError) as failed:
            connection.call("ApiVersions", 0)
    finally:
        connection.close()
        thread.join(10)
    assert str(failed.value) == (
        f"127.0.0.1:{port} answered ApiVersions with TLS: the listener expects SSL or SASL_SSL, and this client "
        "speaks PLAINTEXT; pass security.protocol (and the truststore) with --command-config FILE"
    )
