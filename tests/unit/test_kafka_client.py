"""broker.net.node_client: the broker's own outbound connections (Raft, forwarding
to the controller, replica fetchers)."""

from __future__ import annotations

import asyncio

import pytest

from broker.net.node_client import ConnectionFailed, KafkaClientConnection
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes


def test_a_request_timeout_drops_the_connection_and_the_next_request_opens_a_new_one():
    """After a network cut a connection can stay open in the kernel while TCP
    backs off; a request that timed out must not leave later requests queued
    behind it (Kafka's NetworkClient disconnects on request timeout too)."""

    async def scenario():
        accepted: list[asyncio.StreamReader] = []
        closed = asyncio.Event()

        async def silent_peer(reader, writer):
            accepted.append(reader)
            try:
                while await reader.read(65536):
                    pass  # reads requests, never answers
            finally:
                closed.set()
                writer.close()

        server = await asyncio.start_server(silent_peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = KafkaClientConnection("127.0.0.1", port, "test", connect_timeout_ms=2000)
        api = APIS_BY_NAME["ApiVersions"]
        body = struct_classes(api.request).ApiVersionsRequest(client_software_name="test", client_software_version="1")
        try:
            other = asyncio.ensure_future(connection.request(api, 3, body, timeout_ms=5000))
            await asyncio.sleep(0.05)
            with pytest.raises(asyncio.TimeoutError):
                await connection.request(api, 3, body, timeout_ms=200)
            # The connection went down with it: the peer sees it closed, and the
            # other request on it fails at once instead of waiting out its 5 s.
            await asyncio.wait_for(closed.wait(), 2)
            with pytest.raises(ConnectionFailed):
                await asyncio.wait_for(other, 2)
            with pytest.raises(asyncio.TimeoutError):
                await connection.request(api, 3, body, timeout_ms=200)
            assert len(accepted) == 2
        finally:
            connection.close()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_a_request_whose_connection_closes_while_it_connects_fails_as_a_connection_failure():
    """Two requests wait for one connect; the owner closes the connection
    (a fetcher stopping, a node shutting down) before they resume. Each must
    fail as ConnectionFailed, which callers expect, not with an AttributeError."""

    async def scenario():
        async def peer(reader, writer):
            try:
                while await reader.read(65536):
                    pass
            finally:
                writer.close()

        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = KafkaClientConnection("127.0.0.1", port, "test", connect_timeout_ms=2000)
        api = APIS_BY_NAME["ApiVersions"]
        body = struct_classes(api.request).ApiVersionsRequest(client_software_name="test", client_software_version="1")
        original = connection._ensure_connected

        async def connect_then_close():
            await original()
            connection.close()  # what another task does while this one waits

        connection._ensure_connected = connect_then_close
        try:
            for _ in range(2):
                with pytest.raises(ConnectionFailed):
                    await connection.request(api, 3, body, timeout_ms=1000)
        finally:
            connection.close()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_a_cancellation_in_the_turn_the_connection_ends_cancels_the_request():
    """A node stopping while its peers stop too: the peer's connection ends (its
    reader fails the pending request) in the same loop turn as the caller's task
    is cancelled. The task must end cancelled; on Python 3.11 ``asyncio.wait_for``
    raised the connection error instead, and a fetcher loop that retries on such
    errors went on for good, its node never exiting on SIGTERM."""

    async def scenario():
        received = asyncio.Event()

        async def silent_peer(reader, writer):
            try:
                while await reader.read(65536):
                    received.set()  # reads the request, never answers
            finally:
                writer.close()

        server = await asyncio.start_server(silent_peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = KafkaClientConnection("127.0.0.1", port, "test", connect_timeout_ms=2000)
        api = APIS_BY_NAME["ApiVersions"]
        body = struct_classes(api.request).ApiVersionsRequest(client_software_name="test", client_software_version="1")
        try:
            task = asyncio.ensure_future(connection.request(api, 3, body, timeout_ms=10_000))
            await asyncio.wait_for(received.wait(), 5)
            (pending,) = connection._pending.values()
            # What the connection's reader does when the peer goes, then the cancel, in one turn.
            pending.set_exception(ConnectionFailed("connection reset by peer"))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 5)
        finally:
            connection.close()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
