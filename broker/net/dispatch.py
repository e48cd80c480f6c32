"""Routes decoded requests to handlers; the registry of what the broker serves.

The handler table is the single source of truth for ApiVersions and for the
UNSUPPORTED_VERSION path: an API is advertised exactly when a handler for it
is registered, over exactly the versions that handler declares.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from broker.net.quotas import EXEMPT_API_KEYS
from protocol.exceptions import ProtocolError
from protocol.framing import decode_request, encode_response
from protocol.headers import API_VERSIONS_KEY, peek_request_header
from protocol.registry import APIS_BY_KEY
from protocol.schema import Api

log = logging.getLogger(__name__)
ANONYMOUS = "User:ANONYMOUS"



@dataclass
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    # The listener the request came in on: Metadata and the endpoints other
    # answers name are given on that listener, as Kafka does.
    listener: str | None = None
    # Who sent the request ("User:ANONYMOUS" without TLS client certificates or
    # SASL) and from which address, as the authorizer reads them (Java's form).
    principal: str = "User:ANONYMOUS"
    host: str = ""
    # Client quotas (broker/net/quotas.py): the request's size, the throttle time a
    # handler decided (the larger of this and the request_percentage throttle
    # goes into the response and mutes the connection), the event-loop time
    # spent on the request (set by the dispatcher), and whether the request is
    # exempt from request_percentage (a follower's Fetch).
    frame_bytes: int = 0
    throttle_time_ms: int = 0
    busy_s: float = 0.0
    throttle_exempt: bool = False


Handler = Callable[[RequestContext, Any], "Any | Awaitable[Any]"]


class AnswerLater:
    """What a synchronous handler returns when it has done its part (a Produce
    has appended its batches) and only waits for its answer (fsyncs, followers).
    A connection that pipelines may go on to its next request meanwhile; the
    answers still go out in request order.

    ``overlappable=False``: the handler has NOT done its part yet (a Produce
    of a transaction must first hear from the transaction coordinator before
    it appends), so the connection takes no further request until the answer
    is ready, or a later Produce could append before it."""

    __slots__ = ("answer", "overlappable")

    def __init__(self, answer: Awaitable[Any], *, overlappable: bool = True):
        self.answer = answer
        self.overlappable = overlappable


# A pre-authorization hook: given the request, None when the caller may do all of
# it, else a broker.security.authorization.Partial (the allowed part and how to answer).
Authorize = Callable[[RequestContext, Any], Any]


@dataclass(frozen=True)
class HandlerSpec:
    api: Api
    min_version: int
    max_version: int
    handle: Handler
    is_async: bool
    authorize: Authorize | None = None


class Dispatcher:
    CLOSE = object()  # returned instead of a response: close the connection

    def __init__(self) -> None:
        self.handlers: dict[int, HandlerSpec] = {}
        # Set on a broker's client listener: admin requests the active
        # controller answers (see broker/controller_node/forwarding.py).
        self.forwarder = None
        self.forwarded_keys: frozenset[int] = frozenset()
        # Whether an API with a handler is offered now (ApiVersions): APIs behind a
        # feature level (share groups) are listed only while it is finalized.
        self.offered: Callable[[int], bool] = lambda api_key: True
        # Set on a broker's client listener: the client quotas (broker.net.quotas.ClientQuotaManager).
        self.quotas = None
        # Set by enable_metrics (metrics.listener): request counts and latency per API.
        self.metrics = None

    def register(
        self, api_key: int, min_version: int, max_version: int, handle: Handler, *, authorize: Authorize | None = None
    ) -> None:
        """``authorize``: the API's pre-authorization hook, run before the request is
        forwarded to the active controller or handled here (a forwarded request
        reaches the controller over the controller listener, where the client's
        principal is not known, so the receiving broker decides; the cluster link
        APIs also refuse there the link settings this node must check itself). It returns None
        when everything is allowed, else a ``broker.security.authorization.Partial``: only its
        ``request`` is forwarded or handled (nothing when None) and its ``answer``
        makes the client's response from what came back."""
        api = APIS_BY_KEY[api_key]
        if not (min_version in api.versions and max_version in api.versions):
            raise ValueError(f"{api.name}: {min_version}-{max_version} outside declared {api.versions}")
        self.handlers[api_key] = HandlerSpec(
            api, min_version, max_version, handle, inspect.iscoroutinefunction(handle), authorize
        )

    def enable_metrics(self, metrics) -> None:
        """Count and time every supported request (broker/http/metrics.py). The timed path
        replaces handle_frame on this instance, so without metrics nothing is paid."""
        self.metrics = metrics
        self.handle_frame = self._metered_handle_frame

    async def _metered_handle_frame(self, frame, connection, *, pipelined: bool = False) -> Any:
        started_s = time.perf_counter()
        # Read before handling: the frame's buffer may be lent out again afterwards.
        api_key = int.from_bytes(frame[0:2], "big") if len(frame) >= 4 else -1
        api_version = int.from_bytes(frame[2:4], "big") if len(frame) >= 4 else -1
        result = await Dispatcher.handle_frame(self, frame, connection, pipelined=pipelined)
        spec = self.handlers.get(api_key)
        # Only what the handler table serves: a client's garbage keys must not make series.
        if spec is not None and spec.min_version <= api_version <= spec.max_version:
            metrics = self.metrics
            if isinstance(result, asyncio.Future):  # answered later, while the connection pipelines
                result.add_done_callback(
                    lambda _: metrics.request_done(api_key, api_version, time.perf_counter() - started_s)
                )
            else:
                metrics.request_done(api_key, api_version, time.perf_counter() - started_s)
        return result

    def supported_versions(self) -> list[tuple[int, int, int]]:
        return sorted((key, spec.min_version, spec.max_version) for key, spec in self.handlers.items())

    def advertised_versions(self) -> list[tuple[int, int, int]]:
        """``supported_versions`` of the APIs offered now: what ApiVersions lists."""
        return [entry for entry in self.supported_versions() if self.offered(entry[0])]

    async def handle_frame(self, frame: bytes, connection, *, pipelined: bool = False) -> Any:
        """Decode, handle and encode one request. Returns the response frame,
        ``None`` when no response is due (acks=0), or :attr:`CLOSE`; with
        ``pipelined``, an :class:`asyncio.Task` giving one of those when the
        handler answered :class:`AnswerLater`.

        With client quotas (``self.quotas`` with some quota set), the event-loop
        time of the request counts towards the client's request_percentage (a
        synchronous handler's whole call; of an async handler, only the steps
        between its awaits, see :class:`_Timed`), and the throttle, the larger
        of the handler's and that one's, goes into the response's
        ``throttle_time_ms`` and mutes the connection (``connection.throttle``)
        for that long (KIP-219)."""
        started_s = 0.0
        quotas = self.quotas
        if quotas is not None:
            if quotas.any_enabled:
                started_s = time.perf_counter()
            else:
                quotas = None
        try:
            api_key, api_version, correlation_id = peek_request_header(frame)
        except ProtocolError as exc:
            log.warning("closing %s: %s", connection.peer, exc)
            return self.CLOSE
        spec = self.handlers.get(api_key)
        if spec is None or not spec.min_version <= api_version <= spec.max_version:
            if api_key == API_VERSIONS_KEY and spec is not None:
                return self._unsupported_api_versions(spec, api_version, correlation_id)
            log.warning(
                "closing %s: unsupported api_key=%d api_version=%d", connection.peer, api_key, api_version
            )
            return self.CLOSE
        try:
            header, body = decode_request(frame, spec.api)
        except ProtocolError as exc:
            log.warning("closing %s: malformed %s v%d request: %s", connection.peer, spec.api.name, api_version, exc)
            return self.CLOSE
        ctx = RequestContext(
            api_key,
            api_version,
            correlation_id,
            header.client_id,
            connection.peer,
            getattr(connection, "listener_name", None),
            getattr(connection, "principal", ANONYMOUS),
            getattr(connection, "peer_host", ""),
            len(frame),
        )
        partial = None
        if spec.authorize is not None:
            partial = spec.authorize(ctx, body)
            if partial is not None:
                if partial.request is None:
                    return encode_response(spec.api, api_version, correlation_id, partial.answer(None))
                body = partial.request
        if api_key in self.forwarded_keys:
            if quotas is not None:
                decoded_s = time.perf_counter()
            forwarded = await self.forwarder.forward(spec.api, api_version, body)
            if forwarded is not None:
                if partial is not None:
                    forwarded = partial.answer(forwarded)
                if quotas is not None:
                    _throttle(quotas, ctx, decoded_s - started_s, connection, forwarded)
                return encode_response(spec.api, api_version, correlation_id, forwarded)
        response = spec.handle(ctx, body)
        if spec.is_async:
            if quotas is None:
                response = await response
            else:
                ctx.busy_s = time.perf_counter() - started_s
                response = await _Timed(response, ctx)
                _throttle(quotas, ctx, ctx.busy_s, connection, response)
        elif type(response) is AnswerLater:
            if quotas is not None:
                # The handler's part is done; what is left is waiting.
                _throttle(quotas, ctx, time.perf_counter() - started_s, connection, None)
            if partial is not None:
                response = AnswerLater(_answered(response.answer, partial), overlappable=response.overlappable)
                partial = None
            if pipelined and response.overlappable:
                return asyncio.get_running_loop().create_task(
                    self._encode_later(spec.api, api_version, correlation_id, response.answer, ctx)
                )
            response = await response.answer
            if response is not None and ctx.throttle_time_ms > 0:
                _set_throttle_time(response, ctx.throttle_time_ms)
        elif quotas is not None:
            _throttle(quotas, ctx, time.perf_counter() - started_s, connection, response)
        if response is None:
            return None
        if partial is not None:
            response = partial.answer(response)
        return encode_response(spec.api, api_version, correlation_id, response)

    @staticmethod
    async def _encode_later(api: Api, api_version: int, correlation_id: int, answer: Awaitable[Any], ctx: RequestContext):
        response = await answer
        if response is None:
            return None
        if ctx.throttle_time_ms > 0:
            _set_throttle_time(response, ctx.throttle_time_ms)
        return encode_response(api, api_version, correlation_id, response)

    def _unsupported_api_versions(self, spec: HandlerSpec, api_version: int, correlation_id: int):
        # A client newer than us asks with a version we do not know: answer in
        # v0, which every client can read, with our ranges so it can retry.
        from protocol.errors import ErrorCode

        body = spec.api.response.cls(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            api_keys=[
                _api_version_entry(spec.api, key, low, high) for key, low, high in self.advertised_versions()
            ],
        )
        return encode_response(spec.api, 0, correlation_id, body)


class _Timed:
    """Awaits a coroutine as ``await coroutine`` would, adding the time each of its steps
    runs (not the time it waits) to ``ctx.busy_s``: the event-loop time of an async handler."""

    __slots__ = ("_coroutine", "_ctx")

    def __init__(self, coroutine, ctx: RequestContext):
        self._coroutine = coroutine
        self._ctx = ctx

    def __await__(self):
        coroutine, ctx = self._coroutine, self._ctx
        sent, thrown = None, None
        while True:
            started_s = time.perf_counter()
            try:
                if thrown is None:
                    awaited = coroutine.send(sent)
                else:
                    awaited = coroutine.throw(thrown)
            except StopIteration as done:
                ctx.busy_s += time.perf_counter() - started_s
                return done.value
            finally:
                thrown = None
            ctx.busy_s += time.perf_counter() - started_s
            try:
                sent = yield awaited
            except BaseException as exc:  # cancellation included: the coroutine decides
                sent, thrown = None, exc


def _throttle(quotas, ctx: RequestContext, busy_s: float, connection, response) -> None:
    """Record the request's event-loop time for request_percentage; the larger of that
    throttle and the handler's goes into ``ctx`` and ``response`` (when there is one yet)
    and mutes the connection."""
    throttle_ms = ctx.throttle_time_ms
    if not ctx.throttle_exempt and ctx.api_key not in EXEMPT_API_KEYS:
        throttle_ms = max(throttle_ms, quotas.record_request_time(ctx.principal, ctx.client_id, busy_s))
    if throttle_ms <= 0:
        return
    ctx.throttle_time_ms = throttle_ms
    if response is not None:
        _set_throttle_time(response, throttle_ms)
    throttle = getattr(connection, "throttle", None)
    if throttle is not None:
        throttle(throttle_ms)


def _set_throttle_time(response, throttle_ms: int) -> None:
    if "throttle_time_ms" in getattr(type(response), "__slots__", ()):
        response.throttle_time_ms = max(response.throttle_time_ms or 0, throttle_ms)


async def _answered(answer: Awaitable[Any], partial) -> Any:
    response = await answer
    return None if response is None else partial.answer(response)


def _api_version_entry(api_versions_api: Api, key: int, low: int, high: int):
    item = api_versions_api.response.fields[1].type.item
    return item.cls(api_key=key, min_version=low, max_version=high)
