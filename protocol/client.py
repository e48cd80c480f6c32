"""The client side of one Kafka connection, without the connection.

:class:`ClientConnectionState` is what every client of this project (the
node's asyncio connections to other nodes, the admin tools' blocking sockets,
the Spark driver's high-watermark client) shares: it numbers requests with
correlation ids, encodes them, cuts the bytes that come back into
size-prefixed frames, refuses one larger than its limit, and decodes each
response with the API and version of the request it answers. The caller owns
the socket and the clock: it writes what :meth:`~ClientConnectionState.send`
returns, hands every received chunk to :meth:`~ClientConnectionState.receive_data`
and takes answers from :meth:`~ClientConnectionState.next_response` (h11's
shape: bytes in, events out, no I/O).

Anything wrong in the received bytes raises :class:`ProtocolError`, the one
error of the protocol layer; the connection is then unusable (its byte stream
has lost its framing), so the caller closes it.
"""

from __future__ import annotations

from typing import NamedTuple

from protocol.exceptions import ProtocolError
from protocol.framing import SIZE_PREFIX_BYTES, FrameTooLarge, decode_response, encode_request
from protocol.primitives import INT32
from protocol.schema import Api

# A response frame larger than this is a broken peer, not something to buffer.
# Kafka's clients set no such limit; a Fetch answer is bounded by the request's
# max_bytes (50 MiB by default), so this leaves room while keeping a corrupt
# size prefix from reserving gigabytes.
RESPONSE_BYTES_MAX = 256 << 20
# Correlation ids are int32 on the wire and stay non-negative here.
CORRELATION_ID_MASK = 0x7FFFFFFF


class Response(NamedTuple):
    """A decoded response and the correlation id of the request it answers."""

    correlation_id: int
    body: object


class UndecodableResponse(ProtocolError):
    """A response frame whose bytes do not decode as the answer to its request;
    ``correlation_id`` names that request, so its caller can be told why."""

    def __init__(self, correlation_id: int, api_name: str, reason: ProtocolError):
        super().__init__(f"{api_name} response: {reason}")
        self.correlation_id = correlation_id


class ClientConnectionState:
    """Requests sent and responses received on one connection; no I/O.

    Responses are matched by correlation id, not by order (Kafka brokers
    answer in order, but nothing here needs to rely on it). A response to a
    request this state did not send, or already answered, is a protocol error.
    """

    __slots__ = ("_buffer", "_in_flight", "_next_correlation_id", "_start", "client_id", "response_bytes_max")

    def __init__(self, client_id: str | None, *, response_bytes_max: int = RESPONSE_BYTES_MAX):
        self.client_id = client_id
        # May be changed between responses (a node allows less before it has authenticated).
        self.response_bytes_max = response_bytes_max
        self._next_correlation_id = 1
        # correlation id -> (api, api_version) of the requests awaiting an answer.
        self._in_flight: dict[int, tuple[Api, int]] = {}
        # Received bytes not yet handed out; the unread ones start at ``_start``.
        self._buffer = bytearray()
        self._start = 0

    def send(self, api: Api, api_version: int, body, *, expect_response: bool = True) -> tuple[int, bytes]:
        """(correlation id, the bytes to write) of one request. A request that
        gets no response (a Produce with acks=0) is not awaited."""
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & CORRELATION_ID_MASK
        data = encode_request(api, api_version, correlation_id, self.client_id, body)
        if expect_response:
            self._in_flight[correlation_id] = (api, api_version)
        return correlation_id, data

    def abandon(self, correlation_id: int) -> None:
        """Stop awaiting the answer to a request that will get none (a transport
        that learned so without closing: the broker's in-process dispatcher
        refusing it); a late answer to it is then a protocol error."""
        self._in_flight.pop(correlation_id, None)

    @property
    def in_flight(self) -> int:
        """How many requests await their response."""
        return len(self._in_flight)

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet handed out as a response."""
        return len(self._buffer) - self._start

    def receive_data(self, data) -> None:
        """Bytes as they came from the peer, however they are cut."""
        if self._start and self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        self._buffer += data

    def next_response(self) -> Response | None:
        """The next complete response, or None until more bytes arrive.

        Raises :class:`ProtocolError` (:class:`FrameTooLarge` over the limit,
        :class:`UndecodableResponse` for a body that does not decode) on bad bytes.
        """
        buffer, start = self._buffer, self._start
        if len(buffer) - start < SIZE_PREFIX_BYTES:
            return None
        size = INT32.unpack_from(buffer, start)[0]
        if size < 0:
            raise ProtocolError(f"negative response size {size}")
        if size > self.response_bytes_max:
            raise FrameTooLarge(size, self.response_bytes_max)
        end = start + SIZE_PREFIX_BYTES + size
        if len(buffer) < end:
            return None
        with memoryview(buffer) as view:
            frame = view[start + SIZE_PREFIX_BYTES : end].tobytes()
        self._start = end
        if end == len(buffer):
            buffer.clear()
            self._start = 0
        elif end > len(buffer) // 2:
            # Most of the buffer is read: drop it, so it does not grow with the stream.
            del buffer[:end]
            self._start = 0
        if size < 4:
            raise ProtocolError(f"a response frame of {size} bytes is shorter than its header")
        return self._decode_frame(frame)

    def frame_size(self, prefix) -> int:
        """The size a frame's 4-byte prefix announces, checked as ``next_response``
        checks it: for a transport that reads whole frames itself (the asyncio node
        client's ``readexactly``, which spares the large replica fetches a copy
        into this state's buffer and out again) and hands them to ``receive_frame``."""
        size = INT32.unpack(prefix)[0]
        if size < 0:
            raise ProtocolError(f"negative response size {size}")
        if size > self.response_bytes_max:
            raise FrameTooLarge(size, self.response_bytes_max)
        if size < 4:
            raise ProtocolError(f"a response frame of {size} bytes is shorter than its header")
        return size

    def receive_frame(self, frame: bytes) -> Response:
        """One whole response frame (after its size prefix, see ``frame_size``),
        decoded; not to be mixed with ``receive_data`` on one connection."""
        return self._decode_frame(frame)

    def _decode_frame(self, frame: bytes) -> Response:
        correlation_id = INT32.unpack_from(frame, 0)[0]
        request = self._in_flight.pop(correlation_id, None)
        if request is None:
            raise ProtocolError(f"a response with correlation id {correlation_id}, which no request awaits")
        api, api_version = request
        try:
            _, body = decode_response(api, api_version, frame)
        except ProtocolError as exc:
            raise UndecodableResponse(correlation_id, api.name, exc) from exc
        return Response(correlation_id, body)

    def responses(self):
        """Every response complete so far, in the order they arrived."""
        while (response := self.next_response()) is not None:
            yield response
