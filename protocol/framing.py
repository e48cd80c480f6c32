"""Size-prefixed frames, and whole requests/responses (header + body).

Sans-IO: :class:`FrameSplitter` takes whatever bytes arrived and hands back
complete frames; the caller owns the socket.
"""

from __future__ import annotations

from protocol.codec import decode_struct, encode_struct
from protocol.exceptions import ProtocolError, UnsupportedVersionError
from protocol.headers import (
    RESPONSE_HEADER,
    decode_request_header,
    encode_request_header,
    encode_response_header,
    peek_request_header,
    request_header_version,
    response_header_version,
)
from protocol.primitives import INT32
from protocol.registry import APIS_BY_KEY
from protocol.schema import Api

SIZE_PREFIX_BYTES = 4


class FrameTooLarge(ProtocolError):
    def __init__(self, size: int, limit: int):
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class FrameSplitter:
    """Splits a byte stream into Kafka frames (int32 size + payload)."""

    __slots__ = ("max_frame_bytes", "_buffer")

    def __init__(self, max_frame_bytes: int):
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    def feed(self, data) -> list[bytes]:
        buffer = self._buffer
        buffer += data
        frames = []
        pos = 0
        available = len(buffer)
        while available - pos >= SIZE_PREFIX_BYTES:
            size = INT32.unpack_from(buffer, pos)[0]
            if size < 0:
                raise ProtocolError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameTooLarge(size, self.max_frame_bytes)
            end = pos + SIZE_PREFIX_BYTES + size
            if end > available:
                break
            frames.append(bytes(buffer[pos + SIZE_PREFIX_BYTES : end]))
            pos = end
        if pos:
            del buffer[:pos]
        return frames

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)


def lookup_api(api_key: int, api_version: int) -> Api:
    api = APIS_BY_KEY.get(api_key)
    if api is None or api_version not in api.versions:
        raise UnsupportedVersionError(api_key, api_version)
    return api


def decode_request(frame, api: Api | None = None):
    """Decode one request frame (without its size prefix).

    Returns ``(header, body)``. Raises :class:`UnsupportedVersionError` when the
    (api, version) is not declared, :class:`ProtocolError` on bad bytes.
    """
    api_key, api_version, _ = peek_request_header(frame)
    if api is None:
        api = lookup_api(api_key, api_version)
    flexible = api_version in api.flexible
    header, pos = decode_request_header(frame, request_header_version(api_key, api_version, flexible))
    # Kafka's request parser ignores bytes after the last field, and clients
    # rely on it (librdkafka 2.16's Metadata v12 carries three extra bytes).
    body, _ = decode_struct(api.request, api_version, flexible, frame, pos, exact=False)
    return header, body


def encode_request(api: Api, api_version: int, correlation_id: int, client_id: str | None, body) -> bytes:
    flexible = api_version in api.flexible
    out = bytearray(SIZE_PREFIX_BYTES)
    encode_request_header(out, request_header_version(api.key, api_version, flexible), api.key, api_version, correlation_id, client_id)
    encode_struct(api.request, api_version, flexible, body, out)
    INT32.pack_into(out, 0, len(out) - SIZE_PREFIX_BYTES)
    return bytes(out)


class ResponseFrame(bytearray):
    """An encoded frame whose record fields may be external (e.g. file ranges):
    ``externals`` lists ``(position, value)`` — the value's bytes belong at that
    position of the frame, between ``self[:position]`` and what follows."""

    def __init__(self, *args):
        super().__init__(*args)
        self.externals: list[tuple[int, object]] = []

    def add_external(self, value) -> None:
        self.externals.append((len(self), value))

    @property
    def frame_bytes(self) -> int:
        return len(self) + sum(len(v) for _, v in self.externals)

    def close_externals(self) -> None:
        for _, value in self.externals:
            close = getattr(value, "close", None)
            if close is not None:
                close()


def encode_response(api: Api, api_version: int, correlation_id: int, body) -> ResponseFrame:
    """The whole frame, size prefix included."""
    flexible = api_version in api.flexible
    out = ResponseFrame(SIZE_PREFIX_BYTES)
    encode_response_header(out, response_header_version(api.key, flexible), correlation_id)
    encode_struct(api.response, api_version, flexible, body, out)
    INT32.pack_into(out, 0, out.frame_bytes - SIZE_PREFIX_BYTES)
    return out


def decode_response(api: Api, api_version: int, frame):
    """Decode one response frame (without its size prefix): ``(correlation_id, body)``."""
    flexible = api_version in api.flexible
    if len(frame) < 4:
        raise ProtocolError("response shorter than its header")
    correlation_id = INT32.unpack_from(frame, 0)[0]
    pos = 4
    if response_header_version(api.key, flexible) >= 1:
        _, pos = decode_struct(RESPONSE_HEADER.struct, 1, True, frame, 0, exact=False)
    body, _ = decode_struct(api.response, api_version, flexible, frame, pos)
    return correlation_id, body
