"""Size-prefixed frames, and whole requests/responses (header + body).

Sans-IO: :class:`FrameSplitter` takes whatever bytes arrived and hands back
complete frames; :class:`FrameReceiver` does the same with buffers it lends to
the reader (no joining and slicing of large frames). The caller owns the socket.
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
    """Splits a byte stream into Kafka frames (int32 size + payload), for callers
    that already hold the bytes (a blocking client, tests): the push-style face
    of :class:`FrameReceiver`, which does the splitting, so both check sizes and
    cut frames the same way."""

    __slots__ = ("_receiver",)

    def __init__(self, max_frame_bytes: int):
        self._receiver = FrameReceiver(max_frame_bytes)

    @property
    def max_frame_bytes(self) -> int:
        return self._receiver.max_frame_bytes

    def feed(self, data) -> list:
        receiver, source = self._receiver, memoryview(data)
        frames, position = [], 0
        while position < len(source):
            buffer = receiver.get_buffer()
            count = min(len(buffer), len(source) - position)
            buffer[:count] = source[position : position + count]
            position += count
            frames += receiver.buffer_updated(count)
        return frames

    @property
    def buffered_bytes(self) -> int:
        return self._receiver.buffered_bytes


class FrameReceiver:
    """Receives size-prefixed frames into buffers it hands out, so a socket
    reads straight into them (``asyncio.BufferedProtocol``'s two calls).

    Small frames arrive in one reusable scratch buffer and leave it as
    ``bytes`` (one copy). A frame too large for half the scratch buffer gets a
    ``bytearray`` of its own (of exactly its size up to FRAME_CHUNK_BYTES;
    larger frames are received in chunks and joined), and the socket reads the
    rest of it into that directly: a 1 MB produce request is copied once, from the kernel,
    instead of being joined and sliced (the copies cost as much CPU as writing
    the batch to the log). Each large frame has its own buffer, never reused,
    because handlers may keep views of a request's records.
    """

    __slots__ = (
        "_chunk_filled",
        "_chunk_view",
        "_end",
        "_frame_bytes",
        "_frame_chunks",
        "_frame_filled",
        "_scratch",
        "_scratch_view",
        "_start",
        "max_frame_bytes",
    )

    SCRATCH_BYTES = 256 * 1024
    # A large frame's buffer is allocated this much at a time, as its bytes
    # arrive: a size prefix alone must not make us reserve socket.request.max.bytes.
    FRAME_CHUNK_BYTES = 16 * 1024 * 1024

    def __init__(self, max_frame_bytes: int, scratch_bytes: int = SCRATCH_BYTES):
        self.max_frame_bytes = max_frame_bytes
        self._scratch = bytearray(scratch_bytes)
        self._scratch_view = memoryview(self._scratch)
        self._start = 0  # first byte of scratch not yet handed out as a frame
        self._end = 0  # end of the bytes received into scratch
        self._frame_bytes = 0  # size of the large frame being received; 0 when none is
        self._frame_chunks: list[bytearray] = []
        self._chunk_view: memoryview | None = None
        self._chunk_filled = 0
        self._frame_filled = 0

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go (never empty)."""
        if self._frame_bytes:
            return self._chunk_view[self._chunk_filled :]
        return self._scratch_view[self._end :]

    def buffer_updated(self, received_bytes: int) -> list:
        """Account for bytes written into the last buffer; return the frames
        (without size prefixes) that are now complete, in order."""
        if self._frame_bytes:
            return self._large_frame_updated(received_bytes)
        self._end += received_bytes
        return self._split_scratch()

    def _start_large_frame(self, size: int, received: memoryview) -> None:
        # ``received`` (what of the frame was in the scratch buffer) is always less
        # than the frame, but may span chunks when chunks are smaller than scratch.
        self._frame_bytes = size
        self._frame_chunks = []
        self._frame_filled = 0
        self._next_chunk()
        position = 0
        while position < len(received):
            count = min(len(self._chunk_view) - self._chunk_filled, len(received) - position)
            self._chunk_view[self._chunk_filled : self._chunk_filled + count] = received[position : position + count]
            position += count
            self._chunk_filled += count
            self._frame_filled += count
            if self._chunk_filled == len(self._chunk_view):
                self._next_chunk()

    def _next_chunk(self) -> None:
        chunk = bytearray(min(self.FRAME_CHUNK_BYTES, self._frame_bytes - self._frame_filled))
        self._frame_chunks.append(chunk)
        self._chunk_view = memoryview(chunk)
        self._chunk_filled = 0

    def _large_frame_updated(self, received_bytes: int) -> list:
        self._chunk_filled += received_bytes
        self._frame_filled += received_bytes
        if self._frame_filled == self._frame_bytes:
            chunks = self._frame_chunks
            self._chunk_view.release()
            self._frame_bytes, self._frame_chunks, self._chunk_view, self._frame_filled = 0, [], None, 0
            return [chunks[0] if len(chunks) == 1 else b"".join(chunks)]
        if self._chunk_filled == len(self._chunk_view):
            self._chunk_view.release()
            self._next_chunk()
        return []

    def _split_scratch(self) -> list:
        scratch, view = self._scratch, self._scratch_view
        start, end = self._start, self._end
        large_frame_bytes = len(scratch) // 2
        frames = []
        while end - start >= SIZE_PREFIX_BYTES:
            size = INT32.unpack_from(scratch, start)[0]
            if size < 0:
                raise ProtocolError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameTooLarge(size, self.max_frame_bytes)
            body_start = start + SIZE_PREFIX_BYTES
            if end - body_start >= size:
                frames.append(view[body_start : body_start + size].tobytes())
                start = body_start + size
                continue
            if size > large_frame_bytes:
                # Move what arrived of it into its own buffer; the socket fills the rest.
                self._start_large_frame(size, view[body_start:end])
                start = end
            break
        if start == end:
            start = end = 0
        elif start and len(scratch) - end < large_frame_bytes:
            # Less than half the scratch is left for the rest of a small frame: move
            # the partial frame (at most half the scratch) to the front.
            remaining = end - start
            scratch[:remaining] = bytes(view[start:end])  # a copy: the two ranges may overlap
            start, end = 0, remaining
        self._start, self._end = start, end
        return frames

    @property
    def buffered_bytes(self) -> int:
        return self._end - self._start + self._frame_filled


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
