"""broker.net.connection on a TLS listener, in-process over real TCP, with the
standard event loop and with uvloop: the handshake, the peer's principal kept
on the connection, file slices read into the TLS stream (never sendfile),
and bad clients (no certificate where one is required, an untrusted one,
plaintext, garbage, silence) closed with one log line while others carry on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import struct

import pytest

import broker.net.tls as tls_module
from broker.config import load_config
from broker.net.connection import KafkaConnection
from broker.net.tls import PrincipalMapper, TLSAcceptor, server_context, tls_settings
from protocol.framing import ResponseFrame
from storage.file_slice import FileSlice
from tests.tls_certs import make_certs, openssl_or_skip

TIMEOUT_S = 20
RULES = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    openssl_or_skip()
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request):
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return lambda coroutine: uvloop.run(asyncio.wait_for(coroutine, TIMEOUT_S))
    return lambda coroutine: asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S))


class Echo:
    """Answers every frame with the principal of its connection, followed by
    the bytes of a file range as an external (a Fetch's file slice)."""

    CLOSE = object()

    def __init__(self, path):
        self.path = path
        self.principals: list[str] = []

    async def handle_frame(self, frame, connection, pipelined=False):
        self.principals.append(connection.principal)
        body = connection.principal.encode()
        size = os.path.getsize(self.path)
        answer = ResponseFrame(struct.pack(">i", len(body) + size) + body)
        answer.add_external(FileSlice(os.open(self.path, os.O_RDONLY), 0, size))
        return answer


def server_tls(certs, client_auth: str):
    config = load_config(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.location": str(certs.server_keystore),
            "ssl.truststore.location": str(certs.ca),
            "ssl.client.auth": client_auth,
            "ssl.principal.mapping.rules": RULES,
        }
    )
    settings = tls_settings(config, "SSL")
    return server_context(settings), PrincipalMapper(settings.principal_rules)


def client_ssl(certs, cert=None, key=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


@contextlib.asynccontextmanager
async def served(certs, tmp_path, client_auth="required"):
    payload = tmp_path / "slice.bin"
    payload.write_bytes(os.urandom(300_000))
    handlers = Echo(payload)
    connections: set = set()
    tls = server_tls(certs, client_auth)
    server = await asyncio.get_running_loop().create_server(
        lambda: TLSAcceptor(KafkaConnection(handlers, 1 << 20, connections, "SSL", None, tls[1]), tls[0]), "127.0.0.1", 0
    )
    try:
        yield server.sockets[0].getsockname()[1], handlers, connections, payload.read_bytes()
    finally:
        server.close()
        for connection in list(connections):
            connection.abort()


async def round_trip(port, context) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    try:
        writer.write(struct.pack(">i", 4) + b"ping")
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        return await reader.readexactly(size)
    finally:
        writer.close()


def test_handshake_principal_and_file_slices_over_tls(certs, tmp_path, run):
    zero_copy_before = KafkaConnection._zero_copy_supported

    async def main():
        async with served(certs, tmp_path) as (port, handlers, _, payload):
            answer = await round_trip(port, client_ssl(certs, certs.client_cert, certs.client_key))
            assert answer == b"User:client1" + payload
            assert handlers.principals == ["User:client1"]

        async with served(certs, tmp_path, client_auth="none") as (port, handlers, _, payload):
            assert await round_trip(port, client_ssl(certs)) == b"User:ANONYMOUS" + payload

    run(main())
    # TLS connections read slices without giving up sendfile for plaintext ones.
    assert KafkaConnection._zero_copy_supported == zero_copy_before


def test_bad_clients_are_closed_with_one_line_and_others_carry_on(certs, tmp_path, run, caplog, monkeypatch):
    monkeypatch.setattr(tls_module, "HANDSHAKE_TIMEOUT_S", 0.5)
    caplog.set_level(logging.WARNING, logger="broker.net.tls")

    async def closed(port, send: bytes | None = None, context=None) -> None:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="localhost" if context else None
        )
        if send:
            writer.write(send)
        try:
            assert await reader.read() == b""
        except (ssl.SSLError, ConnectionResetError):
            pass
        writer.close()

    async def main():
        async with served(certs, tmp_path) as (port, _, connections, payload):
            good = client_ssl(certs, certs.client_cert, certs.client_key)
            # A Kafka ApiVersions request in clear, garbage, silence.
            await closed(port, bytes.fromhex("0000001500120003000000010009707962726f6b657200"))
            await closed(port, os.urandom(2000))
            await asyncio.gather(closed(port), round_trip(port, good))  # a silent client holds nobody up
            for context in (client_ssl(certs), client_ssl(certs, certs.untrusted_cert, certs.untrusted_key)):
                try:
                    await closed(port, b"x", context)
                except (ssl.SSLError, ConnectionError):
                    pass  # refused during (TLS 1.2) or right after (TLS 1.3) the handshake
            assert await round_trip(port, good) == b"User:client1" + payload
            for _ in range(50):
                if len(connections) == 0:
                    break
                await asyncio.sleep(0.02)
            assert not connections

    run(main())
    lines = [r.getMessage() for r in caplog.records if "TLS listener SSL" in r.getMessage()]
    assert len(lines) == 5, lines
    assert "a client not speaking TLS?" in lines[0] and "127.0.0.1:" in lines[0]
    assert any("no TLS handshake within 0.5 s" in line for line in lines)
    assert sum("CERTIFICATE" in line.upper() for line in lines) >= 2
    assert not any("BEGIN" in line for line in lines)
