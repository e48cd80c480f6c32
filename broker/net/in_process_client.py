"""Kafka requests handed to this broker's own dispatcher, framed by the client core.

The REST proxy (broker/http/rest/kafka.py) and the web console (broker/http/console/admin.py)
turn their calls into the requests a Kafka client would send and give them to
``broker.dispatcher.handle_frame`` in-process: the same handlers, authorization,
forwarding and metrics as over TCP, with no socket. The bytes go through
:class:`protocol.client.ClientConnectionState` like every other client's, so
correlation ids, the response size limit and decoding are the core's; only the
transport (a call instead of a socket) is here.
"""

from __future__ import annotations

from protocol.client import ClientConnectionState
from protocol.exceptions import ProtocolError
from protocol.framing import SIZE_PREFIX_BYTES
from protocol.schema import Api


class RequestRefused(Exception):
    """The dispatcher closed the in-process 'connection' (a request it refuses
    outright, as it would close a socket) or owed no answer."""


class InProcessClient:
    """Requests to ``broker``'s dispatcher as ``client_id``; each call names the
    connection the dispatcher reads (principal, peer, listener). Calls may overlap."""

    def __init__(self, broker, client_id: str):
        self._broker = broker
        self._state = ClientConnectionState(client_id)

    async def request(self, api: Api, api_version: int, body, connection):
        """The response body. Raises :class:`RequestRefused` without an answer and
        ``ProtocolError`` for an answer that does not decode."""
        state = self._state
        correlation_id, data = state.send(api, api_version, body)
        dispatcher = self._broker.dispatcher
        try:
            # handle_frame takes the frame without its size prefix, as a connection hands it over.
            answer = await dispatcher.handle_frame(memoryview(data)[SIZE_PREFIX_BYTES:], connection)
        except BaseException:
            state.abandon(correlation_id)
            raise
        if answer is None or answer is dispatcher.CLOSE:
            state.abandon(correlation_id)
            raise RequestRefused(f"{api.name} v{api_version} was refused by the broker")
        if getattr(answer, "externals", None):
            answer = _materialized(answer)  # a Fetch's record fields are file ranges: read them
        try:
            state.frame_size(bytes(answer[:SIZE_PREFIX_BYTES]))  # the one response size limit
        except ProtocolError:
            state.abandon(correlation_id)  # the state outlives this answer, unlike a socket's
            raise
        return state.receive_frame(memoryview(answer)[SIZE_PREFIX_BYTES:]).body


def _materialized(frame) -> bytes:
    """A response frame whose record fields are file ranges, as the bytes a socket
    would have carried (what the connection writes with sendfile)."""
    try:
        out = bytearray()
        written = 0
        for position, value in frame.externals:
            out += memoryview(frame)[written:position]
            written = position
            out += value.read_all()
        out += memoryview(frame)[written:]
        return bytes(out)
    finally:
        frame.close_externals()
