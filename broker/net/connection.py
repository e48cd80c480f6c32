"""One client connection: frames in, responses out, in request order.

Just past 700 lines on purpose: framing, ordering, pipelining, back-pressure,
the quota mute and the connection-limit lease all act on the same reading
state, which splitting would scatter (admission itself is broker/net/gate.py).

Kafka answers the requests of one connection strictly in the order they
arrived (clients match responses by correlation id but rely on the order), so
each connection has at most one worker task, running while frames wait, that
takes them from a bounded queue and writes each response before starting the
next request. One exception, for throughput: a Produce that has appended and
only waits (for fsyncs with ``flush.messages``, or for followers with
acks=all) lets the next Produce of the connection append meanwhile, up to
PIPELINED_PRODUCES_MAX; the appends still happen in request order and the
answers still go out in request order, and any other request waits until the
Produces before it are answered. Their fsyncs then share the flusher's passes
instead of taking one pass each. Reading is
paused while the queue is full: a client that pipelines faster than we answer
is slowed down by TCP instead of by our memory. With queued.max.request.bytes
set, reading also pauses while the request bytes received and not yet answered
over all connections of the listeners use up that budget
(:class:`RequestMemoryBudget`).

A connection's memory follows what it does: received bytes go into a scratch
buffer shared by every connection of the event loop (protocol.framing), a
request and its response are dropped once the response is written, and an
idle connection has no task.

On a TLS listener a :class:`broker.net.tls.TLSAcceptor` puts the event loop's TLS layer
between the socket and the connection before a byte is read; the handshake
has HANDSHAKE_TIMEOUT_S, and a failed one (a plaintext client, garbage, an
untrusted certificate, silence) closes the socket with one log line naming
the peer. The connection itself starts only after a handshake. The peer certificate's
principal (``User:ANONYMOUS`` without one) is kept in ``principal`` for the
authorizer. File slices of Fetch responses are read into the TLS stream:
sendfile cannot go through encryption.

On a SASL listener (SASL_SSL: after the TLS handshake) a connection has a
SaslSession, and every frame goes first to broker.net.sasl_listener.sasl_step,
which says what Kafka does with it; frames are bounded by
``sasl.server.max.receive.size`` until authenticated, a failed authentication
is logged once with the peer and closed after
``connection.failed.authentication.delay.ms``, and the SASL principal replaces
the certificate's. Other connections pay one attribute test per request.

A client over a quota (broker/net/quotas.py) is muted for the throttle time, as
Kafka mutes the channel (KIP-219): :meth:`KafkaConnection.throttle` pauses
reading, and no queued request starts until then (answers still go out).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import socket
import time
from collections import deque
from typing import TYPE_CHECKING

from broker.net.sasl_listener import sasl_step
from broker.net.tls import ANONYMOUS, peer_principal
from controller.authorizer import kafka_host_address
from protocol.exceptions import ProtocolError
from protocol.framing import SIZE_PREFIX_BYTES, FrameReceiver, FrameTooLarge
from protocol.registry import APIS_BY_NAME

if TYPE_CHECKING:

    from broker.net.dispatch import Dispatcher
    from broker.net.sasl_listener import SaslListener, SaslStep
    from broker.net.tls import PrincipalMapper

log = logging.getLogger(__name__)

# How many undecoded requests a connection may have waiting before we stop
# reading from its socket (Kafka's queued.max.requests is broker-wide; this is
# the per-connection share of that bound).
PENDING_REQUESTS_MAX = 64
# How many Produce requests of one connection may have appended and wait for
# their answers (fsyncs, followers) at once; librdkafka and the Java client
# send up to five at a time by default.
PIPELINED_PRODUCES_MAX = 8
# An answer whose file slices add up to less than this goes out in one writev,
# read: per system call a small answer (a follower's fetch of one acks=all
# batch) costs more than per byte, and head, sendfile and tail would be three.
SMALL_EXTERNALS_BYTES = 64 << 10
PRODUCE_API_KEY = APIS_BY_NAME["Produce"].key

# Queued after the last request of a connection: end of stream, or shutdown.
# Not an empty frame, which is a (malformed) request of its own.
_END_OF_REQUESTS = object()


class _HeapTrimmer:
    """Gives the C heap's free pages back to the system after many connections
    closed. glibc returns freed memory only from the top of its heap, and each
    connection's transport and socket handle live in the middle of it: without
    this, the memory of 10,000 closed connections stays resident. Where the C
    library has no malloc_trim (not glibc), nothing is done."""

    CLOSES_PER_TRIM = 512
    # Closes come in bursts: trim once no connection closed for QUIET_S (or
    # after MAX_WAIT_S when they keep closing). Counted, not timed, so that a
    # close allocates nothing.
    QUIET_S = 1.0
    MAX_WAIT_S = 10.0

    def __init__(self) -> None:
        self.closes = 0
        self._closes_seen = 0
        self._waited_s: float | None = None
        self._trim = None
        try:
            self._trim = ctypes.CDLL(None).malloc_trim
            self._trim.argtypes, self._trim.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):
            pass

    def connection_closed(self) -> None:
        self.closes += 1
        if self._trim is not None and self.closes >= self.CLOSES_PER_TRIM and self._waited_s is None:
            self._closes_seen, self._waited_s = self.closes, 0.0
            asyncio.get_running_loop().call_later(self.QUIET_S, self._run)

    def _run(self) -> None:
        if self.closes != self._closes_seen and self._waited_s < self.MAX_WAIT_S:
            self._closes_seen = self.closes
            self._waited_s += self.QUIET_S
            asyncio.get_running_loop().call_later(self.QUIET_S, self._run)
            return
        self._waited_s = None
        self.closes = 0
        self._trim(0)


_heap_trimmer = _HeapTrimmer()


class RequestMemoryBudget:
    """queued.max.request.bytes: a bound on the request bytes received and not
    yet answered (frames queued or being handled, and the whole declared size
    of a frame being received), shared by the connections of the listeners it
    is given to.

    As Kafka's memory pool, a frame is admitted when its size is read and
    while less than the limit is in use, so use passes the limit by one frame
    at most. A connection whose frame is refused stops reading and waits here,
    in arrival order, until answers release enough.
    """

    def __init__(self, limit_bytes: int):
        if limit_bytes <= 0:
            raise ValueError("a request memory budget needs a positive limit")
        self.limit_bytes = limit_bytes
        self.used_bytes = 0
        # Figures for operators and tests: the most ever in use, the largest
        # frame admitted, and how many times a frame was refused.
        self.used_bytes_peak = 0
        self.frame_bytes_peak = 0
        self.refusals = 0
        self._waiting: deque = deque()
        self._waking: KafkaConnection | None = None
        self._wake_scheduled = False

    def try_acquire(self, frame_bytes: int, connection: KafkaConnection) -> bool:
        if self.used_bytes >= self.limit_bytes:
            self.refusals += 1
            if connection is self._waking:
                self._waiting.appendleft(connection)  # keeps its turn
            else:
                self._waiting.append(connection)
            return False
        self.used_bytes += frame_bytes
        self.used_bytes_peak = max(self.used_bytes_peak, self.used_bytes)
        self.frame_bytes_peak = max(self.frame_bytes_peak, frame_bytes)
        return True

    def release(self, frame_bytes: int) -> None:
        self.used_bytes -= frame_bytes
        if self._waiting and not self._wake_scheduled and self.used_bytes < self.limit_bytes:
            # Not from here: release runs inside request handling and connection callbacks.
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def forget(self, connection: KafkaConnection) -> None:
        """A connection waiting for memory is gone."""
        try:
            self._waiting.remove(connection)
        except ValueError:
            pass

    def _wake(self) -> None:
        self._wake_scheduled = False
        while self._waiting and self.used_bytes < self.limit_bytes:
            self._waking = self._waiting.popleft()
            try:
                self._waking.memory_available()
            finally:
                self._waking = None

    def summary(self) -> str:
        return (
            f"queued.max.request.bytes={self.limit_bytes}: at most {self.used_bytes_peak} bytes of requests queued,"
            f" largest request {self.frame_bytes_peak} bytes, requests held back for memory {self.refusals} times"
        )


class KafkaConnection(asyncio.BufferedProtocol):
    # Slots, a future only while the send buffer is full, a list only while
    # requests wait, no task while idle (a deque or an Event alone takes over a
    # kilobyte): an idle connection is small.
    __slots__ = (
        "_admitted_bytes",
        "_answering",
        "_budget",
        "_closing",
        "_corked",
        "_connections",
        "_dispatcher",
        "_drain_waiter",
        "_eof_after_held",
        "_frame_waiter",
        "_pending",
        "_pending_head",
        "_queue_full",
        "_reading_paused",
        "_receiver",
        "_sasl",
        "_sasl_listener",
        "_throttle_handle",
        "_throttled_until_s",
        "_tls",
        "_transport",
        "_worker",
        "_zero_copy",
        "_socket_fd",
        "last_active_s",
        "limit_lease",
        "listener_name",
        "peer",
        "peer_host",
        "principal",
    )

    # Whether loop.sendfile worked so far; uvloop answers NotImplementedError.
    _zero_copy_supported = True
    # Whether os.sendfile onto a client's socket worked so far (see _send_file_now).
    _direct_sendfile_supported = True

    def __init__(
        self,
        dispatcher: Dispatcher,
        max_frame_bytes: int,
        connections: set,
        listener_name: str | None = None,
        request_budget: RequestMemoryBudget | None = None,
        tls: PrincipalMapper | None = None,
        sasl: SaslListener | None = None,
    ):
        self._dispatcher = dispatcher
        # The principal mapper on a TLS listener (whose TLSAcceptor made this connection).
        self._tls = tls
        self.principal = ANONYMOUS
        self.listener_name = listener_name
        self._budget = request_budget
        # What this connection holds of the budget: admitted frames not yet answered.
        self._admitted_bytes = 0
        self._receiver = FrameReceiver(max_frame_bytes, admit=self._admit if request_budget is not None else None)
        # On a SASL listener: the session every frame goes through, and the
        # frame limit to restore once it is authenticated.
        self._sasl_listener = sasl
        self._sasl = None
        if sasl is not None:
            self._sasl = sasl.new_session()
            self._receiver.max_frame_bytes = min(max_frame_bytes, sasl.server_config.max_receive_bytes)
        # Frames to answer, from _pending_head on (the slots before it are
        # emptied); no list while there are none.
        self._pending: list | tuple = ()
        self._pending_head = 0
        self._drain_waiter: asyncio.Future | None = None  # the transport's buffer is full
        # Answers finished in this turn of the event loop, written together at its end (_send).
        self._corked: list | None = None
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._queue_full = False
        self._eof_after_held = False
        self._closing = False
        # Set while the worker waits for a pipelined answer: a new request wakes it.
        self._frame_waiter: asyncio.Future | None = None
        # Answers the queued frames in order; runs only while there are some.
        self._worker: asyncio.Task | None = None
        self._connections = connections
        self.peer = "?"
        # The peer's address as ACL hosts are written (Java's form), for the authorizer.
        self.peer_host = ""
        # sendfile would bypass the encryption: a TLS connection reads file slices.
        self._zero_copy = KafkaConnection._zero_copy_supported and tls is None
        # The socket's descriptor where file slices may be sent straight onto it
        # (no TLS); -1 where not.
        self._socket_fd = -1
        # For connections.max.idle.ms: the last byte received or response
        # written, and whether a request is being answered (a long-polling
        # fetch is not idle however long it waits).
        self.last_active_s = time.monotonic()
        self._answering = False
        # Client quotas: muted until this monotonic time (0: not muted) and the timer that unmutes.
        self._throttled_until_s = 0.0
        self._throttle_handle: asyncio.TimerHandle | None = None
        # Its place in the connection limits (broker/net/gate.py), given back on close.
        self.limit_lease = None

    # ----------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.peer_host = kafka_host_address(str(peer[0])) if peer else ""
        self._connections.add(self)
        if self._tls is None and KafkaConnection._direct_sendfile_supported:
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                self._socket_fd = sock.fileno()
        if self._tls is not None:
            # Made by the TLS layer after the handshake: who the peer is.
            try:
                self.principal = peer_principal(transport.get_extra_info("ssl_object"), self._tls)
            except (ValueError, ProtocolError) as exc:
                log.warning("closing %s on TLS listener %s: no principal for its certificate: %s", self.peer, self.listener_name, exc)
                self.abort()

    def get_buffer(self, sizehint: int) -> memoryview:
        # The receiver decides: the shared scratch space, or the rest of a large frame.
        budget = self._budget
        if budget is not None and budget.used_bytes >= budget.limit_bytes:
            # No memory for another request: read the rest of one already
            # admitted, else only the next size prefix, whose frame will be
            # refused (and reading paused) as Kafka mutes a channel.
            return self._receiver.get_buffer(self._receiver.admitted_bytes_due or SIZE_PREFIX_BYTES)
        return self._receiver.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._closing:
            return
        self.last_active_s = time.monotonic()
        self._receive(self._receiver.buffer_updated, nbytes)

    def eof_received(self) -> bool | None:
        if self._receiver.blocked:
            self._eof_after_held = True  # the end goes behind the frames held back for memory
            return True
        if not self._pending and self._worker is None:
            return False  # nothing to answer: the transport closes itself
        # Finish answering what was already received, then close.
        self._queue([_END_OF_REQUESTS])
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._connections.discard(self)
        if self.limit_lease is not None:
            self.limit_lease.release()
        if self._budget is not None:
            if self._receiver.blocked:
                self._budget.forget(self)
            self._release(self._admitted_bytes)
        self._receiver.release()
        self._pending = ()
        if self._throttle_handle is not None:
            self._throttle_handle.cancel()
            self._throttle_handle = None
        self.resume_writing()
        _heap_trimmer.connection_closed()
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()

    def pause_writing(self) -> None:
        if self._drain_waiter is None:
            self._drain_waiter = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ----------------------------------------------------------------- frames in

    def _receive(self, split, *args) -> None:
        try:
            frames = split(*args)
        except FrameTooLarge as exc:
            session = self._sasl
            if session is not None and session.receive_limit_bytes is not None:
                admission = session.frame_too_large(exc.size)
                self._sasl_failed(admission.reason)
                self._close_after_failed_authentication()
                return
            log.warning("closing %s: %s (socket.request.max.bytes)", self.peer, exc)
            self.abort()
            return
        except ProtocolError as exc:
            log.warning("closing %s: %s", self.peer, exc)
            self.abort()
            return
        self._queue(frames)

    def _queue(self, frames: list) -> None:
        if frames:
            if self._pending:
                self._pending += frames
            else:
                self._pending = frames  # the receiver's fresh list: adopted, not copied
            if self._worker is None and not self._closing:
                self._worker = asyncio.get_running_loop().create_task(self._serve(), name=f"conn {self.peer}")
            elif self._frame_waiter is not None and not self._frame_waiter.done():
                self._frame_waiter.set_result(None)
            if len(self._pending) - self._pending_head >= PENDING_REQUESTS_MAX:
                self._queue_full = True
        self._update_reading()

    def _next_frame(self):
        pending, head = self._pending, self._pending_head
        frame = pending[head]
        head += 1
        if head == len(pending):
            self._pending = ()
            head = 0
        else:
            pending[head - 1] = None  # the worker holds the frame now, and drops it when answered
            if head >= PENDING_REQUESTS_MAX:
                del pending[:head]
                head = 0
        self._pending_head = head
        return frame

    def _update_reading(self) -> None:
        paused = self._queue_full or self._receiver.blocked or self._throttled_until_s > 0.0
        if paused != self._reading_paused and not self._closing and not self._transport.is_closing():
            self._reading_paused = paused
            if paused:
                self._transport.pause_reading()
            else:
                self._transport.resume_reading()

    # ----------------------------------------------------------------- client quotas

    def throttle(self, throttle_ms: int) -> None:
        """Read and start nothing more for ``throttle_ms`` (a quota was exceeded)."""
        if self._closing or throttle_ms <= 0:
            return
        until_s = time.monotonic() + throttle_ms / 1000
        if until_s <= self._throttled_until_s:
            return
        self._throttled_until_s = until_s
        if self._throttle_handle is not None:
            self._throttle_handle.cancel()
        self._throttle_handle = asyncio.get_running_loop().call_later(throttle_ms / 1000, self._unthrottle)
        self._update_reading()

    def _unthrottle(self) -> None:
        self._throttle_handle = None
        self._throttled_until_s = 0.0
        if not self._closing:
            self._update_reading()
            if self._frame_waiter is not None and not self._frame_waiter.done():
                self._frame_waiter.set_result(None)  # the worker waits in _wait_throttled

    # ----------------------------------------------------------------- queued.max.request.bytes

    def _admit(self, frame_bytes: int) -> bool:
        if self._budget.try_acquire(frame_bytes, self):
            self._admitted_bytes += frame_bytes
            return True
        return False

    def _release(self, frame_bytes: int) -> None:
        # After connection_lost everything was released at once.
        frame_bytes = min(frame_bytes, self._admitted_bytes)
        if frame_bytes:
            self._admitted_bytes -= frame_bytes
            self._budget.release(frame_bytes)

    def memory_available(self) -> None:
        """The budget has room again: hand out the frames held back since one was refused."""
        if not self._closing:
            self._receive(self._receiver.resume)
            if self._eof_after_held and not self._receiver.blocked:
                self._eof_after_held = False
                self._queue([_END_OF_REQUESTS])

    # ----------------------------------------------------------------- SASL

    @property
    def sasl_enabled(self) -> bool:
        """Whether this connection's listener authenticates with SASL."""
        return self._sasl_listener is not None

    def _sasl_failed(self, reason: str | None) -> None:
        log.info("Failed authentication with %s on listener %s (%s)", self.peer, self.listener_name, reason)

    def _close_after_failed_authentication(self) -> None:
        """Kafka's connection.failed.authentication.delay.ms: stop reading, close a little later."""
        self._closing = True
        transport = self._transport
        if not transport.is_closing():
            transport.pause_reading()
            delay_s = self._sasl_listener.failed_authentication_delay_ms / 1000
            asyncio.get_running_loop().call_later(delay_s, transport.close)

    def _sasl_answer(self, step: SaslStep):
        """The response to write, or CLOSE; a response before a close is flushed first."""
        session = self._sasl
        if step.authenticated:
            self.principal = session.principal
            self._receiver.max_frame_bytes = self._sasl_listener.max_frame_bytes
        if not step.close:
            return step.response
        if step.failed_authentication:
            self._sasl_failed(step.reason)
        else:
            hint = ""
            if step.reason and step.reason.startswith("Unexpected Kafka request"):
                # The usual cause: a client configured for PLAINTEXT (or SSL) on a SASL listener.
                hint = "; the client may not be using SASL (security.protocol SASL_PLAINTEXT or SASL_SSL)"
            log.info("closing %s on listener %s: %s%s", self.peer, self.listener_name, step.reason, hint)
        if step.response is not None:
            self._flush_corked()
            self._transport.write(step.response)
        if step.failed_authentication:
            self._close_after_failed_authentication()
            return None
        if step.response is not None:
            self._closing = True
            self._transport.close()  # flushes the answer first (written above, after the corked ones)
            return None
        return self._dispatcher.CLOSE

    # ----------------------------------------------------------------- worker

    def abort(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._flush_corked()  # the answers before the one that ends the connection still go
            self._transport.abort()

    def idle_s(self, now_s: float) -> float:
        """How long nothing has been received or answered (0 while answering)."""
        if self._answering or self._pending or self._worker is not None or self._receiver.blocked:
            return 0.0
        return now_s - self.last_active_s

    def close_when_idle(self) -> None:
        """Graceful shutdown: answer what is queued, then close."""
        self._queue([_END_OF_REQUESTS])

    async def _write_with_externals(self, frame) -> None:
        """Write a frame whose record fields are file ranges: with sendfile where
        the event loop can (the standard asyncio loop); else as much as the
        socket takes now by sendfile straight onto it, and the rest read and
        written through the transport."""
        self._flush_corked()  # what was answered before goes first (and sendfile needs it written)
        try:
            if not self._zero_copy and sum(len(value) for _, value in frame.externals) < SMALL_EXTERNALS_BYTES:
                self._write_small_externals(frame)
                return
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
                sent = self._send_file_now(value) if self._socket_fd >= 0 else 0
                if sent < len(value):
                    self._transport.write(value.read_from(sent))
            if written < len(frame):
                self._transport.write(memoryview(frame)[written:])
        finally:
            frame.close_externals()

    def _write_small_externals(self, frame) -> None:
        """``frame`` with its file slices read, in one ``writelines``: uvloop sends
        each ``write`` at once, so head, records and tail would be three system
        calls where one writev does (2 KB answers over loopback: 2.3 s/GB of the
        sender's CPU against 3.3 for three sends and 3.8 with sendfile between)."""
        parts = []
        view = memoryview(frame)
        written = 0
        for position, value in frame.externals:
            if position > written:
                parts.append(view[written:position])
            written = position
            parts.append(value.read_all())
        if written < len(frame):
            parts.append(view[written:])
        self._transport.writelines(parts)

    def _send_file_now(self, value) -> int:
        """How many bytes of ``value`` (a file slice) the socket took at once by
        ``os.sendfile``, without waiting: the kernel hands the page cache's pages
        to the socket, where reading them and writing them through the
        transport would copy them twice. Only while the transport holds nothing
        unsent (these bytes must follow what was written before them); a full
        socket buffer ends it, and the caller writes the rest the usual way."""
        transport = self._transport
        if transport.is_closing() or transport.get_write_buffer_size():
            return 0
        sent = 0
        length = len(value)
        try:
            while sent < length:
                count = os.sendfile(self._socket_fd, value.fd, value.position + sent, length - sent)
                if count == 0:
                    break  # the file ends before the slice does: read_from reports it
                sent += count
        except BlockingIOError:
            pass  # the socket's buffer is full
        except (BrokenPipeError, ConnectionError):
            pass  # the transport's own write finds the connection gone, as it would have
        except OSError:
            # This kernel or socket cannot (EINVAL, ENOSYS): read slices from now on.
            KafkaConnection._direct_sendfile_supported = False
            self._socket_fd = -1
        return sent

    def _send(self, data) -> None:
        """Write an answer at the end of this turn of the event loop, in one
        write with the others finished in the same turn: a client pipelining
        small requests (a producer with several in flight) gets its answers in
        one system call rather than one each, and on loopback TCP the write is
        most of an answer's cost."""
        if self._corked is None:
            self._corked = [data]
            asyncio.get_running_loop().call_soon(self._flush_corked)
        else:
            self._corked.append(data)

    def _flush_corked(self) -> None:
        """Write the answers _send holds now (before anything written another way, and before a close)."""
        corked, self._corked = self._corked, None
        if not corked or self._transport is None or self._transport.is_closing():
            return
        self._transport.write(corked[0] if len(corked) == 1 else b"".join(corked))

    async def _answer(self, response, frame_bytes: int) -> None:
        if response is not None:
            if getattr(response, "externals", None):
                await self._write_with_externals(response)
            else:
                self._send(response)
        if self._budget is not None:
            self._release(frame_bytes)
        if self._drain_waiter is not None:
            await self._drain_waiter

    async def _write_finished(self, later: deque) -> None:
        """Write the answers at the head of ``later`` that are ready, in order."""
        while later:
            answer, frame_bytes = later[0]
            if type(answer) is asyncio.Task:
                if not answer.done():
                    return
                answer = answer.result()  # a failure is a bug of ours: it ends the connection
                if answer is self._dispatcher.CLOSE:
                    self.abort()
                    return
            later.popleft()
            await self._answer(answer, frame_bytes)

    def _may_overlap(self, waiting: int) -> bool:
        """Whether the next queued request may start while ``waiting`` answers
        wait: only a Produce behind Produces (its appends land after theirs, in
        request order, and its answer goes out after theirs), up to
        PIPELINED_PRODUCES_MAX. Anything else waits until they are answered,
        as every request does in Kafka."""
        if waiting >= PIPELINED_PRODUCES_MAX:
            return False
        frame = self._pending[self._pending_head]
        return frame is not _END_OF_REQUESTS and len(frame) >= 2 and frame[0] == 0 and frame[1] == PRODUCE_API_KEY

    async def _wait_head_or_frame(self, later: deque) -> None:
        """Until the oldest waiting answer is ready or another request arrives."""
        head = later[0][0]
        if type(head) is not asyncio.Task or head.done():
            return
        waiter = self._frame_waiter = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait((head, waiter), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._frame_waiter = None
            if not waiter.done():
                waiter.cancel()

    async def _wait_throttled(self, later: deque | None) -> None:
        """Until the throttle ends (``_unthrottle`` wakes the waiter) or the oldest answer waiting is ready."""
        head = later[0][0] if later else None
        if head is not None and (type(head) is not asyncio.Task or head.done()):
            return
        waiter = self._frame_waiter = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait((waiter,) if head is None else (head, waiter), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._frame_waiter = None
            if not waiter.done():
                waiter.cancel()

    async def _serve(self) -> None:
        # Ends when the queue is empty: an idle connection has no task (and its
        # coroutine, futures and context) waiting for the next request.
        dispatcher = self._dispatcher
        # Produce answers still waiting for fsyncs or followers, oldest first:
        # (task or finished answer, request bytes). While any wait, later
        # answers queue behind them; a deque only then.
        later: deque | None = None
        try:
            while not self._closing:
                if later:
                    await self._write_finished(later)
                    if not later:
                        later = None
                        continue
                if self._pending:
                    if self._throttled_until_s > 0.0:
                        # Muted by a quota: answers still go out, nothing new starts.
                        await self._wait_throttled(later)
                        continue
                    if later is not None and not self._may_overlap(len(later)):
                        await self._wait_head_or_frame(later)
                        continue
                    frame = self._next_frame()
                    if self._queue_full and len(self._pending) - self._pending_head < PENDING_REQUESTS_MAX // 2:
                        self._queue_full = False
                        self._update_reading()
                    if frame is _END_OF_REQUESTS:
                        break
                    self._answering = True
                    try:
                        if self._sasl is not None and not (step := sasl_step(self._sasl, frame, _now_ms())).dispatch:
                            response = self._sasl_answer(step)
                        else:
                            response = await dispatcher.handle_frame(frame, self, pipelined=True)
                    finally:
                        self._answering = False
                        self.last_active_s = time.monotonic()
                    if response is dispatcher.CLOSE:
                        if later:
                            _cancel_waiting(later)
                        self.abort()
                        return
                    frame_bytes = len(frame)
                    frame = None
                    if later is not None or type(response) is asyncio.Task:
                        if later is None:
                            later = deque()
                        later.append((response, frame_bytes))
                        response = None
                        continue
                    await self._answer(response, frame_bytes)
                    # Answered: neither the request nor its response may stay
                    # referenced from here while the next one waits or is handled.
                    response = None
                elif later:
                    await self._wait_head_or_frame(later)
                else:
                    self._worker = None
                    return
            else:
                if later:
                    _cancel_waiting(later)
                self._worker = None
                return
            # The end of the requests: what was appended is still answered.
            while later and not self._closing:
                await self._write_finished(later)
                if later:
                    await self._wait_head_or_frame(later)
        except asyncio.CancelledError:
            if later:
                _cancel_waiting(later)
            return
        except Exception:  # a bug of ours: drop this connection, keep the broker
            log.exception("connection %s failed", self.peer)
            if later:
                _cancel_waiting(later)
            self.abort()
            return
        # The end of the requests (or a CLOSE answer): no further worker.
        if not self._transport.is_closing():
            self._flush_corked()
            self._transport.close()


def _now_ms() -> int:
    # Wall-clock time: OAuth tokens expire at wall-clock instants.
    return int(time.time() * 1000)


def _cancel_waiting(later: deque) -> None:
    """The connection is gone: nobody will read these answers."""
    for answer, _ in later:
        if type(answer) is asyncio.Task and not answer.done():
            answer.cancel()
