"""Size-prefixed frames, and whole requests/responses (header + body).

Sans-IO: :class:`FrameSplitter` takes whatever bytes arrived and hands back
complete frames; :class:`FrameReceiver` does the same with buffers it lends to
the reader (no joining and slicing of large frames). The caller owns the socket.

Receivers share one scratch buffer per thread, so memory follows what a
connection is doing, not how many there are. Frames handed out never change
afterwards: small ones are copies, and a large frame's own buffer is never
lent again (handlers may keep views of it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

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


class ReceiveScratch:
    """The buffer a socket reads into when the bytes may start a new frame.

    One is shared by every receiver of a thread (see :func:`thread_scratch`):
    the socket fills it in ``get_buffer``/``buffer_updated``, called back to back
    for one connection, and complete frames leave it as copies before
    ``buffer_updated`` returns. Only the unfinished tail of the last read stays,
    marked by ``owner``, until another receiver needs the scratch and the owner
    moves that tail out: a connection busy alone keeps its tail in place (no
    copy), and an idle connection holds no receive buffer at all.
    """

    __slots__ = ("buffer", "owner", "view")

    def __init__(self, size_bytes: int):
        if size_bytes < 2 * SIZE_PREFIX_BYTES:
            raise ValueError(f"a receive scratch of {size_bytes} bytes cannot hold two size prefixes")
        self.buffer = bytearray(size_bytes)
        self.view = memoryview(self.buffer)
        self.owner: FrameReceiver | None = None


_per_thread = threading.local()


def thread_scratch(size_bytes: int) -> ReceiveScratch:
    """This thread's shared scratch of that size (made on first use)."""
    by_size = _per_thread.__dict__.setdefault("scratch_by_size", {})
    scratch = by_size.get(size_bytes)
    if scratch is None:
        scratch = by_size[size_bytes] = ReceiveScratch(size_bytes)
    return scratch


class FrameReceiver:
    """Receives size-prefixed frames into buffers it hands out, so a socket
    reads straight into them (``asyncio.BufferedProtocol``'s two calls).

    Bytes that may start a new frame are read into a scratch buffer shared by
    all receivers of the thread (:class:`ReceiveScratch`); small frames leave it
    as ``bytes`` (one copy). A frame too large for half the scratch gets a
    ``bytearray`` of its own (of exactly its size up to FRAME_CHUNK_BYTES;
    larger frames are received in chunks and joined), and the socket reads the
    rest of it into that directly: a 1 MB produce request is copied once, from
    the kernel, instead of being joined and sliced (the copies cost as much CPU
    as writing the batch to the log). Each large frame has its own buffer, never
    reused, because handlers may keep views of a request's records.

    What a receiver holds between reads is what its connection is doing: an
    unfinished frame moved out of the scratch when another receiver takes it
    (to a buffer of its own when its size is known and above CARRY_BYTES_MAX,
    else as a copy put back in front of the scratch at the next read), a large
    frame's buffer, or nothing.

    ``admit(frame_bytes)``, when given, is asked once per frame as soon as its
    size is known; when it answers False the receiver stops there, keeps that
    frame and any bytes after it aside (``blocked``) and hands them out from
    :meth:`resume`, asking again. The caller stops reading meanwhile.

    Every ``get_buffer`` must be followed by its ``buffer_updated`` before any
    other receiver sharing the scratch is used (the socket writes in between).
    """

    __slots__ = (
        "_admit",
        "_carry",
        "_chunk_filled",
        "_chunk_view",
        "_end",
        "_frame_bytes",
        "_frame_chunks",
        "_frame_filled",
        "_head_admitted",
        "_lead_bytes",
        "_scratch",
        "_start",
        "blocked",
        "max_frame_bytes",
    )

    SCRATCH_BYTES = 256 * 1024
    # A large frame's buffer is allocated this much at a time, as its bytes
    # arrive: a size prefix alone must not make us reserve socket.request.max.bytes.
    FRAME_CHUNK_BYTES = 16 * 1024 * 1024
    # An unfinished frame moved out of the scratch up to this size is copied
    # back in front of it for the next read, which may then bring the frames
    # behind it too; a larger one gets its own buffer, so its bytes are copied
    # once however many reads it takes.
    CARRY_BYTES_MAX = 16 * 1024
    # After a large frame, the next read into the scratch is at most this much:
    # a client sending large frames back to back (a producer of big batches)
    # most likely sends another, whose bytes would otherwise land in the
    # scratch and be copied into the frame's own buffer (up to the scratch's
    # size, a quarter of a 1 MB request). The read after this one goes
    # straight into the frame's buffer. Small frames end it.
    LEAD_BYTES_AFTER_LARGE = 4 * 1024

    def __init__(
        self,
        max_frame_bytes: int,
        scratch_bytes: int = SCRATCH_BYTES,
        *,
        scratch: ReceiveScratch | None = None,
        admit: Callable[[int], bool] | None = None,
    ):
        self.max_frame_bytes = max_frame_bytes
        self._scratch = scratch if scratch is not None else thread_scratch(scratch_bytes)
        self._admit = admit
        # Our bytes in the scratch while we are its owner (both 0 otherwise).
        self._start = 0
        self._end = 0
        # Our unsplit bytes while they are out of the scratch: an unfinished
        # frame (bytes), or everything from a refused frame on (bytearray).
        self._carry: bytes | bytearray = b""
        # Whether the frame whose size prefix starts our unsplit bytes was admitted.
        self._head_admitted = False
        self.blocked = False
        self._frame_bytes = 0  # size of the large frame being received; 0 when none is
        self._frame_chunks: list[bytearray] | tuple = ()  # no list while no large frame is under way
        self._chunk_view: memoryview | None = None
        self._chunk_filled = 0
        self._frame_filled = 0
        self._lead_bytes = 0  # LEAD_BYTES_AFTER_LARGE after a large frame, else 0: no limit

    def get_buffer(self, max_bytes: int | None = None) -> memoryview:
        """Where the next received bytes go (never empty; at most ``max_bytes`` >= 1)."""
        if self._frame_bytes:
            view = self._chunk_view[self._chunk_filled :]
        else:
            if self._scratch.owner is not self:
                self._take_scratch()
            view = self._scratch.view[self._end :]
            if self._lead_bytes and (max_bytes is None or max_bytes > self._lead_bytes):
                max_bytes = self._lead_bytes
        return view if max_bytes is None or max_bytes >= len(view) else view[:max_bytes]

    def buffer_updated(self, received_bytes: int) -> list:
        """Account for bytes written into the last buffer; return the frames
        (without size prefixes) that are now complete, in order."""
        if self._frame_bytes:
            return self._large_frame_updated(received_bytes)
        scratch = self._scratch
        if scratch.owner is not self:
            raise RuntimeError("buffer_updated without get_buffer: another receiver used the scratch in between")
        if self.blocked:
            self._carry += scratch.view[:received_bytes]
            scratch.owner = None
            return []
        self._end += received_bytes
        return self._split_scratch()

    def resume(self) -> list:
        """The frames held back since ``admit`` refused one, as far as it admits them now."""
        if not self.blocked:
            return []
        self.blocked = False
        held = self._carry
        self._carry = b""
        frames, start = self._split(held, memoryview(held), 0, len(held))
        if self.blocked:
            self._carry = held[start:]
        elif start < len(held):
            self._carry = bytes(held[start:])  # one unfinished frame, at most half the scratch
        return frames

    def release(self) -> None:
        """Drop everything received and not handed out, and ``admit`` (often a
        method of the connection that owns this receiver): the connection is gone."""
        self._admit = None
        if self._scratch.owner is self:
            self._scratch.owner = None
        self._start = self._end = 0
        self._carry = b""
        self._head_admitted = self.blocked = False
        self._frame_bytes, self._frame_chunks, self._chunk_view = 0, (), None
        self._chunk_filled = self._frame_filled = 0
        self._lead_bytes = 0

    @property
    def admitted_bytes_due(self) -> int:
        """Bytes still to receive of a frame already admitted (0 when none is under way)."""
        if self._frame_bytes:
            return self._frame_bytes - self._frame_filled
        if not self._head_admitted:
            return 0
        if self._scratch.owner is self:
            size = INT32.unpack_from(self._scratch.buffer, self._start)[0]
            return SIZE_PREFIX_BYTES + size - (self._end - self._start)
        size = INT32.unpack_from(self._carry, 0)[0]
        return SIZE_PREFIX_BYTES + size - len(self._carry)

    @property
    def buffered_bytes(self) -> int:
        return self._end - self._start + len(self._carry) + self._frame_filled

    # ----------------------------------------------------------------- the shared scratch

    def _take_scratch(self) -> None:
        scratch = self._scratch
        if scratch.owner is not None:
            scratch.owner._leave_scratch()
        scratch.owner = self
        carry = self._carry
        if carry and not self.blocked:
            # At most half the scratch (larger unfinished frames have their own buffer).
            scratch.buffer[: len(carry)] = carry
            self._carry = b""
            self._start, self._end = 0, len(carry)
        else:
            self._start = self._end = 0

    def _leave_scratch(self) -> None:
        """Another receiver takes the scratch: move our unfinished frame out of it."""
        scratch = self._scratch
        start, end = self._start, self._end
        self._start = self._end = 0
        scratch.owner = None
        if start == end:
            return
        if self._head_admitted:
            size = INT32.unpack_from(scratch.buffer, start)[0]
            if size > self.CARRY_BYTES_MAX:
                self._start_large_frame(size, scratch.view[start + SIZE_PREFIX_BYTES : end])
                return
        self._carry = scratch.view[start:end].tobytes()

    def _split_scratch(self) -> list:
        scratch = self._scratch
        buffer, view = scratch.buffer, scratch.view
        end = self._end
        frames, start = self._split(buffer, view, self._start, end)
        if self.blocked:
            self._carry = bytearray(view[start:end])
            start = end
        if start == end:
            scratch.owner = None
            start = end = 0
        elif start and len(buffer) - end < len(buffer) // 2:
            # Less than half the scratch is left for the rest of a small frame: move
            # the unfinished frame (at most half the scratch) to the front.
            remaining = end - start
            buffer[:remaining] = bytes(view[start:end])  # a copy: the two ranges may overlap
            start, end = 0, remaining
        self._start, self._end = start, end
        return frames

    def _split(self, buffer, view: memoryview, start: int, end: int) -> tuple[list, int]:
        """Frames complete in ``buffer[start:end]`` and where the unsplit rest
        begins; a frame too large for half the scratch starts its own buffer."""
        large_frame_bytes = len(self._scratch.buffer) // 2
        admit, max_frame_bytes, unpack_from = self._admit, self.max_frame_bytes, INT32.unpack_from
        admitted = self._head_admitted
        frames = []
        while end - start >= SIZE_PREFIX_BYTES:
            size = unpack_from(buffer, start)[0]
            if not admitted:
                if size < 0:
                    raise ProtocolError(f"negative frame size {size}")
                if size > max_frame_bytes:
                    raise FrameTooLarge(size, max_frame_bytes)
                if admit is not None and not admit(size):
                    self.blocked = True
                    break
                admitted = True
            body_start = start + SIZE_PREFIX_BYTES
            if end - body_start >= size:
                frames.append(view[body_start : body_start + size].tobytes())
                start = body_start + size
                admitted = False
                self._lead_bytes = 0
                continue
            if size > large_frame_bytes:
                # Move what arrived of it into its own buffer; the socket fills the rest.
                self._start_large_frame(size, view[body_start:end])
                start = end
                admitted = False
            break
        self._head_admitted = admitted
        return frames, start

    # ----------------------------------------------------------------- frames in their own buffers

    def _start_large_frame(self, size: int, received: memoryview) -> None:
        # ``received`` (what of the frame has arrived) is always less than the
        # frame, but may span chunks when chunks are smaller than the scratch.
        self._head_admitted = False
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
            self._frame_bytes, self._frame_chunks, self._chunk_view, self._frame_filled = 0, (), None, 0
            self._lead_bytes = self.LEAD_BYTES_AFTER_LARGE
            return [chunks[0] if len(chunks) == 1 else b"".join(chunks)]
        if self._chunk_filled == len(self._chunk_view):
            self._chunk_view.release()
            self._next_chunk()
        return []


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
