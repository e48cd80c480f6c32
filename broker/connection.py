"""One client connection: frames in, responses out, in request order.

Kafka answers the requests of one connection strictly in the order they
arrived (clients match responses by correlation id but rely on the order), so
each connection has one worker task that takes decoded frames from a bounded
queue and writes each response before starting the next request. Reading is
paused while the queue is full: a client that pipelines faster than we answer
is slowed down by TCP instead of by our memory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from typing import TYPE_CHECKING

from protocol.exceptions import ProtocolError
from protocol.framing import FrameReceiver, FrameTooLarge

if TYPE_CHECKING:
    from broker.dispatch import Dispatcher

log = logging.getLogger(__name__)

# How many undecoded requests a connection may have waiting before we stop
# reading from its socket (Kafka's queued.max.requests is broker-wide; this is
# the per-connection share of that bound).
PENDING_REQUESTS_MAX = 64

# Queued after the last request of a connection: end of stream, or shutdown.
# Not an empty frame, which is a (malformed) request of its own.
_END_OF_REQUESTS = object()


class KafkaConnection(asyncio.BufferedProtocol):
    # Whether loop.sendfile worked so far; uvloop answers NotImplementedError.
    _zero_copy_supported = True

    def __init__(self, dispatcher: "Dispatcher", max_frame_bytes: int, connections: set, listener_name: str | None = None):
        self._dispatcher = dispatcher
        self.listener_name = listener_name
        self._receiver = FrameReceiver(max_frame_bytes)
        self._pending: deque = deque()
        self._wakeup = asyncio.Event()
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._closing = False
        self._worker: asyncio.Task | None = None
        self._connections = connections
        self.peer = "?"
        self._drained = asyncio.Event()
        self._drained.set()
        self._zero_copy = KafkaConnection._zero_copy_supported
        # For connections.max.idle.ms: the last byte received or response
        # written, and whether a request is being answered (a long-polling
        # fetch is not idle however long it waits).
        self.last_active_s = time.monotonic()
        self._answering = False

    # ----------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._connections.add(self)
        self._worker = asyncio.get_running_loop().create_task(self._serve(), name=f"conn {self.peer}")

    def get_buffer(self, sizehint: int) -> memoryview:
        # The receiver decides: its scratch space, or the rest of a large frame.
        return self._receiver.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._closing:
            return
        self.last_active_s = time.monotonic()
        try:
            frames = self._receiver.buffer_updated(nbytes)
        except FrameTooLarge as exc:
            log.warning("closing %s: %s (socket.request.max.bytes)", self.peer, exc)
            self.abort()
            return
        except ProtocolError as exc:
            log.warning("closing %s: %s", self.peer, exc)
            self.abort()
            return
        if frames:
            self._pending.extend(frames)
            self._wakeup.set()
            if len(self._pending) >= PENDING_REQUESTS_MAX and not self._reading_paused:
                self._reading_paused = True
                self._transport.pause_reading()

    def eof_received(self) -> bool | None:
        # Finish answering what was already received, then close.
        self._pending.append(_END_OF_REQUESTS)
        self._wakeup.set()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._connections.discard(self)
        self._drained.set()
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()

    def pause_writing(self) -> None:
        self._drained.clear()

    def resume_writing(self) -> None:
        self._drained.set()

    # ----------------------------------------------------------------- worker

    def abort(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    def idle_s(self, now_s: float) -> float:
        """How long nothing has been received or answered (0 while answering)."""
        if self._answering or self._pending:
            return 0.0
        return now_s - self.last_active_s

    def close_when_idle(self) -> None:
        """Graceful shutdown: answer what is queued, then close."""
        self._pending.append(_END_OF_REQUESTS)
        self._wakeup.set()

    async def _write_with_externals(self, frame) -> None:
        """Write a frame whose record fields are file ranges: with sendfile where
        the event loop can (the standard asyncio loop), else by reading them."""
        try:
            loop = asyncio.get_running_loop()
            written = 0
            for position, value in frame.externals:
                if position > written:
                    self._transport.write(memoryview(frame)[written:position])
                written = position
                if self._zero_copy:
                    try:
                        with os.fdopen(os.dup(value.fd), "rb", closefd=True) as file:
                            await loop.sendfile(self._transport, file, value.position, len(value), fallback=False)
                        continue
                    except (NotImplementedError, RuntimeError, asyncio.SendfileNotAvailableError):
                        # uvloop and some transports cannot: copy from now on.
                        KafkaConnection._zero_copy_supported = False
                        self._zero_copy = False
                self._transport.write(value.read_all())
            if written < len(frame):
                self._transport.write(memoryview(frame)[written:])
        finally:
            frame.close_externals()

    async def _serve(self) -> None:
        dispatcher = self._dispatcher
        try:
            while not self._closing:
                if not self._pending:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                frame = self._pending.popleft()
                if self._reading_paused and len(self._pending) < PENDING_REQUESTS_MAX // 2:
                    self._reading_paused = False
                    self._transport.resume_reading()
                if frame is _END_OF_REQUESTS:
                    break
                self._answering = True
                try:
                    response = await dispatcher.handle_frame(frame, self)
                finally:
                    self._answering = False
                    self.last_active_s = time.monotonic()
                if response is None:
                    continue
                if response is dispatcher.CLOSE:
                    self.abort()
                    return
                if getattr(response, "externals", None):
                    await self._write_with_externals(response)
                else:
                    self._transport.write(response)
                if not self._drained.is_set():
                    await self._drained.wait()
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug of ours: drop this connection, keep the broker
            log.exception("connection %s failed", self.peer)
            self.abort()
            return
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
