"""An asyncio Kafka protocol client for the node's own requests to other nodes
(Raft messages between controllers, a broker's requests to the active
controller, replica fetches, transaction markers).

One TCP connection, pipelined requests matched to responses by correlation id;
a broken connection fails every request waiting on it and the next request
reconnects. Nothing here retries: the callers (the Raft core, the broker's
lifecycle loop) already resend on their own timers, so a retry here would only
duplicate theirs.

Security (:class:`ClientSecurity`, built once at start by
:func:`node_client_security`): a node connects to a listener of another node
with that listener's security protocol, as a Kafka node does: TLS with the
node's own ``ssl.*`` / ``listener.name.<l>.ssl.*`` settings (the peer's
certificate verified against the trust store, its host name unless
``ssl.endpoint.identification.algorithm`` is empty, our keystore shown when the
peer asks for a client certificate), then for SASL a SaslHandshake v1 and
SaslAuthenticate v2 exchange (broker/security/sasl_client.py) before the first
request. An authentication or TLS failure fails the request like any broken
connection (:class:`AuthenticationFailed`) and is logged once at WARNING until
a connection succeeds again. A session with a lifetime (the peer's
``connections.max.reauth.ms``) is not re-authenticated in place: a new
connection is opened once 85 % of it has passed, and the old one closed at its
end, so requests in flight on it still get their answers.

Waits are bounded with ``asyncio.timeout``, not ``asyncio.wait_for``: on Python
3.11, ``wait_for`` answers a cancellation that arrives in the same loop turn as
the awaited result or error with that result or error (CPython gh-86296), so the
caller's task goes on as if never cancelled. A node stopping while its peers
stop too meets exactly that turn (a replica fetcher cancelled as its leader's
connection closes), and a stop that awaits such a task never ends.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from broker.config import BrokerConfig, ConfigError
from broker.net.tls import client_context, tls_settings
from broker.security.jaas import JaasConfigError, parse_jaas_entry
from broker.security.sasl_client import MechanismClient, SaslClientError, client_factory
from protocol.client import RESPONSE_BYTES_MAX, ClientConnectionState, UndecodableResponse
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.framing import SIZE_PREFIX_BYTES
from protocol.registry import APIS_BY_NAME
from protocol.schema import Api

log = logging.getLogger(__name__)

# Bytes asked of the stream per read: a large response arrives in pieces of this size.
READ_CHUNK_BYTES = 256 << 10


SASL_HANDSHAKE = APIS_BY_NAME["SaslHandshake"]
SASL_AUTHENTICATE = APIS_BY_NAME["SaslAuthenticate"]
# Before authentication a peer's answers are small (a SCRAM message, a mechanism list).
SASL_RESPONSE_BYTES_MAX = 1 << 20
# SCRAM takes two SaslAuthenticate rounds, PLAIN one: more is a misbehaving peer.
SASL_ROUNDS_MAX = 4
# Before this share of a SASL session's lifetime has passed, a new connection replaces it.
SESSION_RENEW_SHARE = 0.85
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")


class ConnectionFailed(ConnectionError):
    """The request may or may not have reached the peer; no response will come."""


class AuthenticationFailed(ConnectionFailed):
    """The peer refused our credentials or certificate, or failed to prove its own."""


@dataclass(frozen=True)
class ClientSecurity:
    """How this node connects to ``listener`` of other nodes (its security protocol)."""

    listener: str
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    sasl_client: Callable[[], MechanismClient] | None = None
    # User:<name> of the SASL credentials: what the peer's authorizer sees.
    principal: str | None = None

    def __repr__(self) -> str:
        return f"ClientSecurity({self.listener}, {self.protocol}, sasl={self.sasl_mechanism})"


PLAINTEXT = ClientSecurity("PLAINTEXT")


def node_client_security(config: BrokerConfig, listener: str, mechanism_key: str) -> ClientSecurity:
    """The client side of ``listener`` (the inter-broker or the first controller
    listener) for this node: its TLS context and, for SASL, the mechanism named
    by ``mechanism_key`` (sasl.mechanism.inter.broker.protocol or
    sasl.mechanism.controller.protocol) with the credentials of the listener's
    JAAS entry. ConfigError names the key to fix; nothing is connected yet."""
    protocol = config.security_protocol(listener)
    context = client_context(tls_settings(config, listener)) if protocol in TLS_PROTOCOLS else None
    if protocol not in SASL_PROTOCOLS:
        return ClientSecurity(listener, protocol, context)
    mechanism = config[mechanism_key]
    jaas_key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.sasl.get(jaas_key)
    try:
        entry = None if text is None else parse_jaas_entry(text)
        factory = client_factory(mechanism, entry, jaas_key)
    except JaasConfigError as exc:
        raise ConfigError(f"{jaas_key}: {exc}") from None
    except ValueError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith(jaas_key) else f"{mechanism_key}: {message}") from None
    return ClientSecurity(listener, protocol, context, mechanism, factory, "User:" + entry.options["username"])


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class KafkaClientConnection:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        *,
        connect_timeout_ms: int = 5000,
        security: ClientSecurity | None = None,
    ):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connect_timeout_ms = connect_timeout_ms
        self.security = security or PLAINTEXT
        # A failure to authenticate is logged once, until a connection succeeds.
        self._failure_logged = False
        # loop time at which the SASL session is renewed (None: it has no lifetime).
        self._renew_at_s: float | None = None
        self._session_end_s = 0.0
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._connecting: asyncio.Future | None = None
        # The current connection's protocol state and the requests waiting on it.
        self._state: ClientConnectionState | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._closed = False

    async def request(self, api: Api, api_version: int, body, *, timeout_ms: int):
        """Send one request and wait for its response body."""
        if self._closed:
            raise ConnectionFailed("connection closed")
        try:
            async with asyncio.timeout(self.connect_timeout_ms / 1000):
                await self._ensure_connected()
        except TimeoutError:
            # asyncio's TimeoutError says nothing; the message is what a status shows.
            raise TimeoutError(f"no connection to {self.host}:{self.port} within {self.connect_timeout_ms} ms") from None
        # The connection this request waited for may be gone already: closed by
        # the owner, or lost, while another request's connect finished.
        writer, state = self._writer, self._state
        if self._closed or writer is None or state is None or writer.is_closing():
            raise ConnectionFailed(f"connection to {self.host}:{self.port} closed")
        correlation_id, data = state.send(api, api_version, body)
        future = asyncio.get_running_loop().create_future()
        pending = self._pending
        pending[correlation_id] = future
        try:
            writer.write(data)
            async with asyncio.timeout(timeout_ms / 1000):
                return await future
        except TimeoutError:
            self._abort(writer)
            raise TimeoutError(f"no answer from {self.host}:{self.port} to {api.name} within {timeout_ms} ms") from None
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
            if self._renew_at_s is None or asyncio.get_running_loop().time() < self._renew_at_s:
                return
            self._retire(self._writer)
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        connecting = self._connecting
        try:
            await asyncio.shield(connecting)
        finally:
            if connecting.done():
                self._connecting = None

    def _retire(self, writer: asyncio.StreamWriter) -> None:
        """Open a new connection for the next requests; this one closes when its
        SASL session ends (the requests in flight on it are answered by then)."""
        self._writer = None
        self._renew_at_s = None
        remaining_s = max(self._session_end_s - asyncio.get_running_loop().time(), 0.0)
        asyncio.get_running_loop().call_later(remaining_s, writer.close)

    async def _connect(self) -> None:
        security = self.security
        context = security.ssl_context
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        except OSError as exc:
            raise ConnectionFailed(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        lifetime_ms = 0
        # Before authentication a peer's answers are small: a larger one is refused.
        state = ClientConnectionState(self.client_id, response_bytes_max=SASL_RESPONSE_BYTES_MAX)
        try:
            if context is not None:
                try:
                    await writer.start_tls(context, server_hostname=self.host, ssl_handshake_timeout=self.connect_timeout_ms / 1000)
                except (OSError, EOFError) as exc:  # ssl.SSLError is an OSError
                    # An untrusted certificate, a host name it does not name, a peer not speaking TLS, ...
                    reason = getattr(exc, "verify_message", None) or str(exc) or "the peer closed the connection (not a TLS listener?)"
                    raise AuthenticationFailed(f"TLS handshake with {self.host}:{self.port} ({security.listener}) failed: {reason}") from exc
            if security.sasl_client is not None:
                try:
                    lifetime_ms = await self._authenticate(reader, writer, state)
                except AuthenticationFailed:
                    raise
                except (OSError, asyncio.IncompleteReadError, ProtocolError) as exc:
                    raise ConnectionFailed(f"connection to {self.host}:{self.port} closed during SASL authentication: {exc}") from exc
        except BaseException as exc:  # a failure, or the connect timeout cancelling us
            writer.close()
            if isinstance(exc, AuthenticationFailed):
                self._log_failure(exc)
            raise
        if self._failure_logged:
            log.info("authenticated to %s:%d (%s) again", self.host, self.port, security.listener)
            self._failure_logged = False
        if lifetime_ms > 0:
            now_s = asyncio.get_running_loop().time()
            self._session_end_s = now_s + lifetime_ms / 1000
            self._renew_at_s = now_s + lifetime_ms * SESSION_RENEW_SHARE / 1000
        else:
            self._renew_at_s = None
        state.response_bytes_max = RESPONSE_BYTES_MAX
        self._writer = writer
        self._state = state
        # Each connection has its own state and pending table, so the end of an
        # old one can never fail requests sent on its successor.
        self._pending = {}
        self._reader_task = asyncio.get_running_loop().create_task(self._read_responses(reader, writer, state, self._pending))

    def _log_failure(self, failure: AuthenticationFailed) -> None:
        if not self._failure_logged:
            self._failure_logged = True
            log.warning("%s; retrying (logged once until it succeeds)", failure)

    @staticmethod
    async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, state: ClientConnectionState,
                        api: Api, api_version: int, body):
        """One request and its response on a connection not yet handed to the reader task."""
        _, data = state.send(api, api_version, body)
        writer.write(data)
        while (response := state.next_response()) is None:
            chunk = await reader.read(READ_CHUNK_BYTES)
            if not chunk:
                raise asyncio.IncompleteReadError(b"", None)
            state.receive_data(chunk)
        return response.body

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            state: ClientConnectionState) -> int:
        """SaslHandshake v1, then SaslAuthenticate v2 rounds until the mechanism
        completes; the session's lifetime in ms (0: none)."""
        security = self.security
        peer = f"{self.host}:{self.port} ({security.listener}, SASL {security.sasl_mechanism})"
        handshake = await self._exchange(
            reader, writer, state, SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request.cls(mechanism=security.sasl_mechanism)
        )
        if handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            raise AuthenticationFailed(
                f"authentication failed with {peer}: the mechanism is not enabled there "
                f"(it offers {', '.join(handshake.mechanisms or []) or 'none'})"
            )
        if handshake.error_code != ErrorCode.NONE:
            # ILLEGAL_SASL_STATE: most likely not a SASL listener there.
            raise AuthenticationFailed(f"authentication failed with {peer}: SaslHandshake answered {_error_name(handshake.error_code)}")
        mechanism = security.sasl_client()
        token = mechanism.initial_token()
        for _ in range(SASL_ROUNDS_MAX):
            answer = await self._exchange(reader, writer, state, SASL_AUTHENTICATE, 2, SASL_AUTHENTICATE.request.cls(auth_bytes=token))
            if answer.error_code != ErrorCode.NONE:
                reason = answer.error_message or _error_name(answer.error_code)
                raise AuthenticationFailed(f"authentication failed with {peer}: {reason}")
            try:
                token = mechanism.evaluate(bytes(answer.auth_bytes))
            except SaslClientError as exc:
                raise AuthenticationFailed(f"authentication failed with {peer}: {exc}") from None
            if token is None:
                return answer.session_lifetime_ms or 0
        raise AuthenticationFailed(f"authentication failed with {peer}: no end after {SASL_ROUNDS_MAX} rounds")

    async def _read_responses(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                              state: ClientConnectionState, pending: dict[int, asyncio.Future]) -> None:
        error: Exception = ConnectionFailed(f"connection to {self.host}:{self.port} closed")
        try:
            if state.buffered_bytes:
                raise ProtocolError(f"{state.buffered_bytes} bytes arrived before any request was sent")
            # From here the transport hands what arrives to a _ResponseReader, which
            # reads each large frame straight into a buffer of its own: the
            # stream would copy it into its buffer, out again for readexactly, and
            # the decoder a third time (replica fetches are most of these bytes).
            # Bytes the stream holds already, if any, go to it first.
            unread = bytes(reader._buffer)  # noqa: SLF001 - asyncio has no public way to take them over
            reader._buffer.clear()  # noqa: SLF001
            responses = _ResponseReader(state, pending, asyncio.get_running_loop().create_future())
            writer.transport.set_protocol(responses)
            if reader.exception() is not None or reader.at_eof() or writer.transport.is_closing():
                # It ended while being set up: the stream heard of it, the reader never will.
                responses.connection_lost(reader.exception())
            elif unread:
                responses.take(unread)
            error = await responses.ended
        except (OSError, ProtocolError) as exc:
            error = ConnectionFailed(f"connection to {self.host}:{self.port}: {exc}")
        finally:
            writer.close()
            if self._writer is writer:
                self._writer = None
            if not isinstance(error, ConnectionFailed):
                error = ConnectionFailed(f"connection to {self.host}:{self.port}: {error}")
            for future in list(pending.values()):
                if not future.done():
                    future.set_exception(error)
            pending.clear()

    def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()


# Frames up to this size are cut out of the reader's scratch buffer (copied once,
# small); larger ones get a buffer of their own that the socket reads into.
SMALL_FRAME_BYTES = 64 << 10


class _ResponseReader(asyncio.BufferedProtocol):
    """The node client's response frames, read from the transport without copies
    of the large ones (a replica fetch's records reach the log as a view of the
    buffer the kernel wrote them to). Each frame is decoded as it completes and
    resolves its request's future; ``ended`` gets the connection's end (a
    ConnectionFailed) and nothing after it is read."""

    def __init__(self, state: ClientConnectionState, pending: dict[int, asyncio.Future], ended: asyncio.Future):
        self._state = state
        self._pending = pending
        self.ended = ended
        self._scratch = bytearray(SMALL_FRAME_BYTES + SIZE_PREFIX_BYTES)
        self._start = 0  # the scratch buffer's unread bytes are [_start, _end)
        self._end = 0
        self._frame: bytearray | None = None  # a large frame being read into
        self._filled = 0

    # ----------------------------------------------------------------- transport callbacks

    def get_buffer(self, sizehint: int):
        if self._frame is not None:
            return memoryview(self._frame)[self._filled :]
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._scratch) - self._end < SIZE_PREFIX_BYTES:
            self._compact()
        return memoryview(self._scratch)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self.ended.done():
            return
        try:
            if self._frame is not None:
                self._filled += nbytes
                if self._filled == len(self._frame):
                    frame, self._frame = self._frame, None
                    self._deliver(frame)
                return
            self._end += nbytes
            self._split()
        except (ProtocolError, ConnectionFailed) as exc:
            self._end_with(exc)

    def take(self, data: bytes) -> None:
        """Bytes that arrived before this reader took over, as if just received."""
        view = memoryview(data)
        while view and not self.ended.done():
            buffer = self.get_buffer(len(view))
            count = min(len(buffer), len(view))
            buffer[:count] = view[:count]
            buffer.release()
            self.buffer_updated(count)
            view = view[count:]

    def eof_received(self):
        self._end_with(ConnectionFailed("closed by the peer"))
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_with(ConnectionFailed(str(exc) if exc is not None else "closed"))

    # ----------------------------------------------------------------- frames

    def _split(self) -> None:
        """Decode the whole frames in the scratch buffer; a large one's start moves
        to a buffer of its own, which the rest is read into."""
        scratch = self._scratch
        while self._end - self._start >= SIZE_PREFIX_BYTES and not self.ended.done():
            size = self._state.frame_size(scratch[self._start : self._start + SIZE_PREFIX_BYTES])
            body = self._start + SIZE_PREFIX_BYTES
            have = self._end - body
            if size > SMALL_FRAME_BYTES:
                frame = bytearray(size)
                part = min(have, size)
                frame[:part] = scratch[body : body + part]
                self._start = body + part
                if part == size:
                    self._deliver(frame)
                    continue
                self._frame, self._filled = frame, part
                return
            if have < size:
                if len(scratch) - self._start < SIZE_PREFIX_BYTES + size:
                    self._compact()
                return
            self._start = body + size
            with memoryview(scratch) as view:
                frame = view[body : body + size].tobytes()
            self._deliver(frame)

    def _compact(self) -> None:
        unread = self._end - self._start
        self._scratch[:unread] = self._scratch[self._start : self._end]
        self._start, self._end = 0, unread

    def _deliver(self, frame) -> None:
        pending = self._pending
        try:
            correlation_id, body = self._state.receive_frame(frame)
        except UndecodableResponse as exc:
            future = pending.pop(exc.correlation_id, None)
            if future is not None and not future.done():
                future.set_exception(exc)
            raise
        future = pending.pop(correlation_id, None)
        if future is not None and not future.done():  # else its caller timed out and left
            future.set_result(body)

    def _end_with(self, error: Exception) -> None:
        if not self.ended.done():
            self.ended.set_result(error)
