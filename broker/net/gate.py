"""The first protocol of every connection on a client listener: it applies the
connection limits (the accounting is broker/net/limits.py) before the
socket becomes a KafkaConnection (behind a TLSAcceptor on a TLS listener).

An accepted socket is, at once and before a byte is read:

- refused (closed) when its address is at ``max.connections.per.ip``;
- held without reading and closed after the throttle time when its address is
  over its ``connection_creation_rate`` client quota (Kafka closes it after that
  delay, so the client backs off instead of reconnecting in a loop);
- otherwise counted for its address and admitted, in arrival order per listener:
  if the listener's queue is empty, it is within the creation rates and a slot
  is free (the usual case), it is handed over there and then; else it waits in
  the queue, reading nothing, first for the delay the creation rates give it
  (recorded once, when it reaches the head), then for a slot under
  ``max.connections`` / ``listener.name.<l>.max.connections``, as Kafka's
  acceptor waits. Waiting sockets are what a full kernel backlog is for Kafka:
  past ``WAITING_MAX`` per listener, new ones are closed at once.

Each admitted connection carries a :class:`Lease` that gives its slot back when
it closes (``KafkaConnection.connection_lost``, or a failed TLS handshake).
A refusal is logged once per address and reason per minute; nothing here runs
per request, so a flood on one address costs the others one accept each.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import deque

from broker.net.limits import ConnectionLimits, LogLimiter, normalize_ip
from broker.net.tls import TLSAcceptor

log = logging.getLogger(__name__)

# Sockets one listener holds waiting (for a slot, the creation rate, or the close
# of an IP over its quota) before it closes new ones at once: each holds a
# descriptor and a transport (a few kilobytes), and Kafka's equivalent, the
# kernel's accept backlog, is bounded too.
WAITING_MAX = 1024
# How often a refused address is logged again, per reason.
LOG_INTERVAL_MS = 60_000


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class Lease:
    """An open connection's place in the counts; released once."""

    __slots__ = ("_gate", "evicted", "ip", "listener", "released")

    def __init__(self, gate: ConnectionGate, listener: str, ip: str):
        self._gate = gate
        self.listener = listener
        self.ip = ip
        self.released = False
        self.evicted = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._gate._closed(self)


class ConnectionGate:
    """One per broker, over its client listeners."""

    def __init__(self, limits: ConnectionLimits, connections: set):
        self.limits = limits
        # Every KafkaConnection of the broker: the least recently active one of an
        # unprotected listener is closed when the protected listener took the
        # total over max.connections.
        self._connections = connections
        self._queues: dict[str, deque[_Arrival]] = {name: deque() for name in limits.listeners}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._held_arrivals: set[_Arrival] = set()  # sockets of IPs over their quota, waiting to be closed
        self._evicting = 0
        self._wake_scheduled = False
        self._log = LogLimiter(LOG_INTERVAL_MS)

    def close(self) -> None:
        """Shutdown: close every socket still waiting (admitted ones are the broker's to close)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for arrival in [*self._held_arrivals, *(a for queue in self._queues.values() for a in queue)]:
            if arrival.transport is not None:
                arrival.transport.abort()

    def protocol_factory(self, listener: str, make_connection, tls_context=None):
        """``tls_context``: the listener's SSLContext, or a callable giving its current
        one, read per connection (a dynamic TLS change reaches later connections)."""
        return lambda: _Arrival(self, listener, make_connection, tls_context)

    def waiting(self, listener: str) -> int:
        return len(self._queues[listener])

    # ----------------------------------------------------------------- arrivals

    def _refuse(self, arrival: _Arrival, reason: str, now_ms: int) -> None:
        if self._log.should_log((arrival.ip, reason), now_ms):
            log.info("refusing connection from %s on listener %s: %s (logged once a minute per address)", arrival.ip, arrival.listener, reason)
        arrival.transport.abort()

    def _arrived(self, arrival: _Arrival) -> None:
        limits = self.limits
        now_ms = _now_ms()
        verdict, throttle_ms = limits.arrive(arrival.ip, now_ms)
        if verdict == "refuse":
            self._refuse(arrival, f"the address has max.connections.per.ip={limits.max_for_ip(arrival.ip)} connections", now_ms)
            return
        if verdict == "throttle":
            if len(self._held_arrivals) >= WAITING_MAX:
                self._refuse(arrival, "over its connection_creation_rate quota", now_ms)
                return
            if self._log.should_log((arrival.ip, "quota"), now_ms):
                log.info(
                    "closing connection from %s on listener %s in %d ms: over its connection_creation_rate quota "
                    "(logged once a minute per address)", arrival.ip, arrival.listener, throttle_ms,
                )
            self._held_arrivals.add(arrival)
            arrival.hold_then_close(throttle_ms)
            return
        arrival.counted = True
        listener = arrival.listener
        queue = self._queues[listener]
        if not queue:
            delay_ms = limits.record_creation(listener, now_ms)
            if delay_ms == 0 and limits.slot_available(listener):
                self._open(arrival)
                return
            arrival.ready_ms = now_ms + delay_ms
        elif len(queue) >= WAITING_MAX:
            arrival.counted = False
            limits.leave(arrival.ip)
            self._refuse(arrival, f"{WAITING_MAX} connections already wait on the listener", now_ms)
            return
        arrival.pause()
        queue.append(arrival)
        self._admit(listener)

    def _open(self, arrival: _Arrival) -> None:
        self.limits.open(arrival.listener)
        arrival.hand_over(Lease(self, arrival.listener, arrival.ip))
        if self.limits.protected(arrival.listener):
            self._evict_for(arrival.listener)

    def _admit(self, listener: str) -> None:
        """Open the queue's head connections whose delay passed while slots are free."""
        queue = self._queues[listener]
        limits = self.limits
        while queue:
            head = queue[0]
            now_ms = _now_ms()
            if head.ready_ms is None:
                head.ready_ms = now_ms + limits.record_creation(listener, now_ms)
            if head.ready_ms > now_ms:
                if listener not in self._timers:
                    self._timers[listener] = asyncio.get_running_loop().call_later(
                        (head.ready_ms - now_ms) / 1000, self._timer_fired, listener
                    )
                return
            if not limits.slot_available(listener):
                return  # a close wakes it (_closed)
            queue.popleft()
            self._open(head)

    def _timer_fired(self, listener: str) -> None:
        self._timers.pop(listener, None)
        self._admit(listener)

    def _gone(self, arrival: _Arrival) -> None:
        """A waiting socket's peer went away (or it was closed while held)."""
        self._held_arrivals.discard(arrival)
        if arrival.counted:
            arrival.counted = False
            self.limits.leave(arrival.ip)
            queue = self._queues[arrival.listener]
            was_head = bool(queue) and queue[0] is arrival
            try:
                queue.remove(arrival)
            except ValueError:
                pass
            if was_head:
                timer = self._timers.pop(arrival.listener, None)
                if timer is not None:
                    timer.cancel()
                self._admit(arrival.listener)

    # ----------------------------------------------------------------- closes

    def _closed(self, lease: Lease) -> None:
        self.limits.close(lease.listener, lease.ip)
        if lease.evicted:
            self._evicting -= 1
        if not self._wake_scheduled and any(self._queues.values()):
            # Not from inside connection_lost: the next connection starts on a clean stack.
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        for listener, queue in self._queues.items():
            if queue:
                self._admit(listener)

    def _evict_for(self, protected: str) -> None:
        """Kafka's closeExcessConnections: the protected (inter-broker) listener went over
        max.connections, so connections of the other listeners are closed, the least
        recently active first, until the total is back within it."""
        limits = self.limits
        excess = limits.total - self._evicting - limits.settings.max_connections
        if excess <= 0:
            return
        candidates = [
            c for c in self._connections
            if c.listener_name != protected and c.limit_lease is not None and not c.limit_lease.evicted
        ]
        candidates.sort(key=lambda c: c.last_active_s)
        for connection in candidates[:excess]:
            connection.limit_lease.evicted = True
            self._evicting += 1
            log.info("closing %s on listener %s: max.connections reached by the inter-broker listener %s", connection.peer, connection.listener_name, protected)
            connection.abort()


# What a waiting socket may have read before its reading stopped (uvloop starts reading
# after connection_made whatever it was told there): handed to the connection with it.
EARLY_BYTES_MAX = 4096


class _Arrival(asyncio.BufferedProtocol):
    """An accepted socket until the gate hands it over (or closes it)."""

    __slots__ = ("_early", "_early_used", "_gate", "_make", "_paused", "_timer", "_tls", "counted", "ip", "listener", "ready_ms", "transport")

    def __init__(self, gate: ConnectionGate, listener: str, make_connection, tls_context):
        self._gate = gate
        self.listener = listener
        self._make = make_connection
        self._tls = tls_context
        self.transport: asyncio.Transport | None = None
        self.ip = "?"
        self.counted = False
        self.ready_ms: int | None = None
        self._paused = False
        self._timer: asyncio.TimerHandle | None = None
        self._early: bytearray | None = None
        self._early_used = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.ip = normalize_ip(str(peer[0])) if peer else "?"
        self._gate._arrived(self)

    def pause(self) -> None:
        self._paused = True
        self.transport.pause_reading()

    def hold_then_close(self, delay_ms: int) -> None:
        self.pause()
        self._timer = asyncio.get_running_loop().call_later(delay_ms / 1000, self.transport.abort)

    def get_buffer(self, sizehint: int) -> memoryview:
        # Only while waiting: a small buffer, and reading stops in buffer_updated.
        if self._early is None:
            self._early = bytearray(EARLY_BYTES_MAX)
        return memoryview(self._early)[self._early_used:]

    def buffer_updated(self, nbytes: int) -> None:
        self._early_used += nbytes
        if self.transport is not None:
            self.transport.pause_reading()

    def hand_over(self, lease: Lease) -> None:
        connection = self._make()
        connection.limit_lease = lease
        if self._tls is None:
            protocol = connection
        else:
            context = self._tls if isinstance(self._tls, ssl.SSLContext) else self._tls()
            protocol = _CountedTLSAcceptor(connection, context, lease)
        transport = self.transport
        self.transport = None
        self._make = None
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if self._early is not None and self._early_used and not transport.is_closing():
            _feed(transport.get_protocol(), memoryview(self._early)[: self._early_used])
        self._early = None
        if self._paused and not transport.is_closing():
            transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        # Only while waiting or held; after hand_over the socket belongs to the connection.
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._gate._gone(self)

    def eof_received(self) -> bool | None:
        return None  # the peer gave up while waiting: close (connection_lost follows)


def _feed(protocol: asyncio.BufferedProtocol, data: memoryview) -> None:
    """Bytes read before the hand-over, given to the new protocol as the socket would."""
    while data:
        buffer = protocol.get_buffer(len(data))
        n = min(len(buffer), len(data))
        if n == 0:
            return
        buffer[:n] = data[:n]
        protocol.buffer_updated(n)
        data = data[n:]


class _CountedTLSAcceptor(TLSAcceptor):
    """A TLSAcceptor whose failed handshake gives the connection's slot back (a
    successful one hands the slot to the KafkaConnection, which releases it)."""

    __slots__ = ("_lease",)

    def __init__(self, connection, context, lease: Lease):
        super().__init__(connection, context)
        self._lease = lease

    def _handshake_done(self, waiter: asyncio.Future) -> None:
        failed = waiter.cancelled() or waiter.exception() is not None
        super()._handshake_done(waiter)
        if failed:
            self._lease.release()
