"""What the broker's three HTTP endpoints (metrics, console, REST proxy) share: one
HTTP runtime (aiohttp) and one set of limits.

At most ``MAX_HTTP_CONNECTIONS`` connections at once per endpoint: one more is
closed as soon as it is accepted, unanswered, so idle connections cannot pile
up; a request line and each header line of at most ``MAX_REQUEST_HEAD_BYTES``
(else 400); a first request head within ``REQUEST_HEAD_TIMEOUT_S`` of the
connection's opening and, on a kept-alive connection (the REST proxy's), the
next one within ``KEEPALIVE_TIMEOUT_S`` of the last answer, else the connection
is closed; no access log. The metrics endpoint and the console answer one
request per connection (``Connection: close``). aiohttp is imported when an
endpoint starts, not with this module: a broker without endpoints never loads it.
"""

from __future__ import annotations

import asyncio

# Connections at once, per endpoint: a few Prometheus servers, a few people's
# browsers, a few REST clients. More are closed at once, unanswered.
MAX_HTTP_CONNECTIONS = 32
# The request line and each header line (aiohttp's parser limits); a scrape, a
# page or a REST call needs far less.
MAX_REQUEST_HEAD_BYTES = 16 * 1024
# A connection whose first request head is not complete by then is closed:
# what holds a slot without asking anything is not a client.
REQUEST_HEAD_TIMEOUT_S = 10.0
# A kept-alive REST connection waiting for its next request is closed after this long.
KEEPALIVE_TIMEOUT_S = 30.0
# At broker stop, requests in flight get this long to finish (aiohttp's default is 60 s).
SHUTDOWN_GRACE_S = 2.0


def application(*, middlewares=(), client_max_size: int = 1 << 20, one_request_per_connection: bool = False):
    """An aiohttp Application with what every endpoint's requests go through first."""
    from aiohttp import web

    @web.middleware
    async def shared(request, handler):
        transport = request.transport
        connection = transport.get_protocol() if transport is not None else None
        if isinstance(connection, _Connection):
            connection.head_arrived()
        response = await handler(request)
        if one_request_per_connection:
            response.force_close()
        return response

    return web.Application(middlewares=[shared, *middlewares], client_max_size=client_max_size)


class HttpServer:
    """An application served on a listener (``http://HOST:PORT``) under the shared limits."""

    def __init__(self, app, listener):
        self.app = app
        self.listener = listener
        self.bound_port: int | None = None
        self.open_connections = 0
        self._runner = None
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        """Bind and serve; the bound port. An OSError (port in use...) is the caller's to report."""
        from aiohttp import web

        self._runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_GRACE_S,
            max_line_size=MAX_REQUEST_HEAD_BYTES, max_field_size=MAX_REQUEST_HEAD_BYTES, keepalive_timeout=KEEPALIVE_TIMEOUT_S,
        )
        await self._runner.setup()
        try:
            # Not aiohttp's TCPSite: each connection is admitted (or closed) by _Connection first.
            self._server = await asyncio.get_running_loop().create_server(
                lambda: _Connection(self), self.listener.host or None, self.listener.port, reuse_address=True
            )
        except OSError:
            await self._runner.cleanup()
            self._runner = None
            raise
        self.bound_port = self._server.sockets[0].getsockname()[1]
        return self.bound_port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()  # closes the open connections after SHUTDOWN_GRACE_S
            self._runner = None


class _Connection(asyncio.Protocol):
    """One accepted connection: counted against the limit when made (so a burst of
    accepts cannot pass it), then handed to aiohttp's protocol; closed when its
    first request head is late."""

    __slots__ = ("handler", "head_timer", "server")

    def __init__(self, server: HttpServer):
        self.server = server
        self.handler = None
        self.head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        server = self.server
        if server.open_connections >= MAX_HTTP_CONNECTIONS or server._runner is None:
            transport.close()
            return
        server.open_connections += 1
        self.head_timer = asyncio.get_running_loop().call_later(REQUEST_HEAD_TIMEOUT_S, transport.close)
        self.handler = server._runner.server()
        self.handler.connection_made(transport)

    def head_arrived(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def connection_lost(self, exc) -> None:
        if self.handler is None:
            return
        self.server.open_connections -= 1
        self.head_arrived()
        self.handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.handler is not None:
            self.handler.data_received(data)

    def eof_received(self):
        return self.handler.eof_received() if self.handler is not None else None

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()
