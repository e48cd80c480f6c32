"""An asyncio Kafka protocol client for the node's own requests to other nodes
(Raft messages between controllers, a broker's requests to the active
controller).

One TCP connection, pipelined requests matched to responses by correlation id;
a broken connection fails every request waiting on it and the next request
reconnects. Nothing here retries: the callers (the Raft core, the broker's
lifecycle loop) already resend on their own timers, so a retry here would only
duplicate theirs.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct

from protocol.exceptions import ProtocolError
from protocol.framing import decode_response, encode_request
from protocol.schema import Api

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# A response larger than this is a protocol error, not something to buffer.
RESPONSE_BYTES_MAX = 256 << 20


class ConnectionFailed(ConnectionError):
    """The request may or may not have reached the peer; no response will come."""


class KafkaClientConnection:
    def __init__(self, host: str, port: int, client_id: str, *, connect_timeout_ms: int = 5000):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connect_timeout_ms = connect_timeout_ms
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._connecting: asyncio.Future | None = None
        self._pending: dict[int, tuple[asyncio.Future, Api, int]] = {}
        self._correlation_ids = itertools.count(1)
        self._closed = False

    async def request(self, api: Api, api_version: int, body, *, timeout_ms: int):
        """Send one request and wait for its response body."""
        if self._closed:
            raise ConnectionFailed("connection closed")
        await asyncio.wait_for(self._ensure_connected(), self.connect_timeout_ms / 1000)
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        future = asyncio.get_running_loop().create_future()
        pending = self._pending
        pending[correlation_id] = (future, api, api_version)
        writer = self._writer
        try:
            writer.write(encode_request(api, api_version, correlation_id, self.client_id, body))
            return await asyncio.wait_for(future, timeout_ms / 1000)
        except asyncio.TimeoutError:
            self._abort(writer)
            raise
        finally:
            pending.pop(correlation_id, None)

    def _abort(self, writer: asyncio.StreamWriter) -> None:
        """Drop a connection a request timed out on, as Kafka's NetworkClient
        does. After a network cut the kernel may keep such a connection open
        while TCP retransmits with ever longer backoff, and every later request
        would queue behind it for seconds after the network is back; the next
        request opens a new connection instead."""
        if self._writer is writer:
            self._writer = None
        writer.transport.abort()  # close() would wait for the unsent bytes to drain

    async def _ensure_connected(self) -> None:
        if self._writer is not None and not self._writer.is_closing():
            return
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        connecting = self._connecting
        try:
            await asyncio.shield(connecting)
        finally:
            if connecting.done():
                self._connecting = None

    async def _connect(self) -> None:
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        except OSError as exc:
            raise ConnectionFailed(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        self._writer = writer
        # Each connection has its own pending table, so the end of an old one
        # can never fail requests sent on its successor.
        self._pending = {}
        self._reader_task = asyncio.get_running_loop().create_task(self._read_responses(reader, writer, self._pending))

    async def _read_responses(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pending: dict) -> None:
        error: Exception = ConnectionFailed(f"connection to {self.host}:{self.port} closed")
        try:
            while True:
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                if not 4 <= size <= RESPONSE_BYTES_MAX:
                    raise ProtocolError(f"response frame of {size} bytes")
                frame = await reader.readexactly(size)
                correlation_id = _SIZE.unpack_from(frame, 0)[0]
                entry = pending.pop(correlation_id, None)
                if entry is None:
                    continue  # its caller timed out and left
                future, api, api_version = entry
                if future.done():
                    continue
                try:
                    _, body = decode_response(api, api_version, frame)
                except ProtocolError as exc:
                    future.set_exception(exc)
                    raise
                future.set_result(body)
        except (OSError, asyncio.IncompleteReadError, ProtocolError) as exc:
            if not isinstance(exc, asyncio.IncompleteReadError):
                error = ConnectionFailed(f"connection to {self.host}:{self.port}: {exc}")
        finally:
            writer.close()
            if self._writer is writer:
                self._writer = None
            for future, _, _ in list(pending.values()):
                if not future.done():
                    future.set_exception(error)
            pending.clear()

    def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
