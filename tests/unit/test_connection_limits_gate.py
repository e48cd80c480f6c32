"""broker/net/gate.py in-process, on the standard event loop and on uvloop
(which starts reading after connection_made whatever the protocol asked, so a
waiting socket may have read its first bytes: they must reach the connection)."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from broker.net import gate as connection_gate
from broker.net.gate import ConnectionGate
from broker.net.limits import ConnectionLimits, LimitSettings

LOOPS = ["asyncio"]
try:
    import uvloop

    LOOPS.append("uvloop")
except ImportError:  # pragma: no cover
    uvloop = None


class Echo(asyncio.BufferedProtocol):
    """A stand-in for KafkaConnection: echoes, keeps the lease and gives it back on close."""

    def __init__(self, connections: set, listener: str = "CLIENT"):
        self.buffer = bytearray(65536)
        self.limit_lease = None
        self.connections = connections
        self.listener_name = listener
        self.sasl_enabled = False  # read by the TLS layer when it names a failed handshake's protocol
        self.last_active_s = 0.0
        self.peer = "?"
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        self.connections.add(self)

    def get_buffer(self, sizehint):
        return memoryview(self.buffer)

    def buffer_updated(self, nbytes):
        self.transport.write(bytes(self.buffer[:nbytes]))

    def abort(self):
        self.transport.abort()

    def connection_lost(self, exc):
        self.connections.discard(self)
        if self.limit_lease is not None:
            self.limit_lease.release()


def run(loop_name: str, coroutine):
    if loop_name == "uvloop":
        return uvloop.run(coroutine)
    return asyncio.run(coroutine)


async def serve(gate: ConnectionGate, connections: set, listener: str = "CLIENT", tls=None, host="127.0.0.1"):
    server = await asyncio.get_running_loop().create_server(
        gate.protocol_factory(listener, lambda: Echo(connections, listener), tls), host, 0
    )
    return server, server.sockets[0].getsockname()[1]


async def until(condition, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def closed(reader: asyncio.StreamReader, timeout_s: float = 5.0) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout_s) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("loop_name", LOOPS)
def test_a_connection_over_max_waits_and_keeps_its_first_bytes(loop_name):
    async def main():
        connections: set = set()
        limits = ConnectionLimits(LimitSettings(max_connections=1), ["CLIENT"])
        gate = ConnectionGate(limits, connections)
        server, port = await serve(gate, connections)
        r1, w1 = await asyncio.open_connection("127.0.0.1", port)
        w1.write(b"a")
        assert await asyncio.wait_for(r1.readexactly(1), 5) == b"a"
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        w2.write(b"hello")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(r2.readexactly(1), 0.3)
        assert gate.waiting("CLIENT") == 1 and limits.total == 1
        w1.close()
        assert await asyncio.wait_for(r2.readexactly(5), 5) == b"hello"  # nothing lost while it waited
        w2.write(b"!")
        assert await asyncio.wait_for(r2.readexactly(1), 5) == b"!"
        w2.close()
        await until(lambda: limits.total == 0 and not limits.by_ip)
        server.close()

    run(loop_name, main())


@pytest.mark.parametrize("loop_name", LOOPS)
def test_past_the_waiting_bound_new_sockets_are_closed(loop_name, monkeypatch):
    monkeypatch.setattr(connection_gate, "WAITING_MAX", 1)

    async def main():
        connections: set = set()
        limits = ConnectionLimits(LimitSettings(max_connections=1), ["CLIENT"])
        gate = ConnectionGate(limits, connections)
        server, port = await serve(gate, connections)
        first = await asyncio.open_connection("127.0.0.1", port)
        second = await asyncio.open_connection("127.0.0.1", port)  # waits for the slot
        await until(lambda: gate.waiting("CLIENT") == 1)
        third = await asyncio.open_connection("127.0.0.1", port)  # no room to wait
        assert await closed(third[0])
        await until(lambda: limits.by_ip == {"127.0.0.1": 2})  # the refused one is not counted
        # A waiting socket whose peer gave up is only seen (read) once admitted, as a
        # connection in Kafka's accept backlog: then it closes and gives everything back.
        second[1].close()
        first[1].close()
        await until(lambda: limits.total == 0 and not limits.by_ip and gate.waiting("CLIENT") == 0)
        server.close()

    run(loop_name, main())


@pytest.mark.parametrize("loop_name", LOOPS)
def test_an_address_at_its_maximum_is_closed_at_once(loop_name):
    async def main():
        connections: set = set()
        limits = ConnectionLimits(LimitSettings(max_connections_per_ip=1), ["CLIENT"])
        gate = ConnectionGate(limits, connections)
        server, port = await serve(gate, connections)
        kept = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert await closed(reader)
            writer.close()
        assert limits.refused_per_ip == 5 and limits.total == 1
        assert gate._log.suppressed == 4  # logged once
        kept[1].close()
        await until(lambda: limits.total == 0)
        server.close()

    run(loop_name, main())


@pytest.mark.parametrize("loop_name", LOOPS)
def test_the_protected_listener_over_max_evicts_the_least_recently_active_other(loop_name):
    async def main():
        connections: set = set()
        settings = LimitSettings(max_connections=2, protected_listener="INTERNAL")
        limits = ConnectionLimits(settings, ["INTERNAL", "EXTERNAL"])
        gate = ConnectionGate(limits, connections)
        external, external_port = await serve(gate, connections, "EXTERNAL")
        internal, internal_port = await serve(gate, connections, "INTERNAL")
        old = await asyncio.open_connection("127.0.0.1", external_port)
        await until(lambda: len(connections) == 1)
        next(iter(connections)).last_active_s = -1.0  # the least recently active
        recent = await asyncio.open_connection("127.0.0.1", external_port)
        await until(lambda: len(connections) == 2)
        node = await asyncio.open_connection("127.0.0.1", internal_port)  # not held back by the maximum
        node[1].write(b"x")
        assert await asyncio.wait_for(node[0].readexactly(1), 5) == b"x"
        assert await closed(old[0])
        await until(lambda: limits.total == 2 and limits.by_listener == {"INTERNAL": 1, "EXTERNAL": 1})
        recent[1].write(b"y")
        assert await asyncio.wait_for(recent[0].readexactly(1), 5) == b"y"
        for _, writer in (recent, node):
            writer.close()
        await until(lambda: limits.total == 0)
        external.close()
        internal.close()

    run(loop_name, main())


@pytest.mark.parametrize("loop_name", LOOPS)
def test_shutdown_closes_the_waiting_sockets(loop_name):
    async def main():
        connections: set = set()
        limits = ConnectionLimits(LimitSettings(max_connections=0), ["CLIENT"])
        gate = ConnectionGate(limits, connections)
        server, port = await serve(gate, connections)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await until(lambda: gate.waiting("CLIENT") == 1)
        gate.close()
        assert await closed(reader)
        await until(lambda: gate.waiting("CLIENT") == 0 and not limits.by_ip)
        writer.close()
        server.close()

    run(loop_name, main())


@pytest.mark.parametrize("loop_name", LOOPS)
def test_a_failed_tls_handshake_gives_the_slot_back(loop_name, tmp_path):
    from tests.tls_certs import make_certs, openssl_or_skip

    openssl_or_skip()
    certs = make_certs(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(certs.server_cert), str(certs.server_key))
    client_context = ssl.create_default_context(cafile=str(certs.ca))

    async def main():
        connections: set = set()
        limits = ConnectionLimits(LimitSettings(max_connections=1), ["CLIENT"])
        gate = ConnectionGate(limits, connections)
        server, port = await serve(gate, connections, tls=context)
        # Plaintext on the TLS port: the handshake fails, and the one slot is free again.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x00\x00\x00\x10not a tls hello!")
        assert await closed(reader)
        await until(lambda: limits.total == 0)
        # A TLS client then gets the slot, and gives it back when it closes.
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context, server_hostname="localhost")
        writer.write(b"tls")
        assert await asyncio.wait_for(reader.readexactly(3), 5) == b"tls"
        assert limits.total == 1
        writer.close()
        await until(lambda: limits.total == 0)
        server.close()

    run(loop_name, main())
