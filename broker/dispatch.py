"""Routes decoded requests to handlers; the registry of what the broker serves.

The handler table is the single source of truth for ApiVersions and for the
UNSUPPORTED_VERSION path: an API is advertised exactly when a handler for it
is registered, over exactly the versions that handler declares.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from protocol.exceptions import ProtocolError
from protocol.framing import decode_request, encode_response
from protocol.headers import peek_request_header
from protocol.registry import APIS_BY_KEY
from protocol.schema import Api

log = logging.getLogger(__name__)
ANONYMOUS = "User:ANONYMOUS"

API_VERSIONS_KEY = 18


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
# it, else a broker.authorization.Partial (the allowed part and how to answer).
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
        # controller answers (see broker/forwarding.py).
        self.forwarder = None
        self.forwarded_keys: frozenset[int] = frozenset()

    def register(
        self, api_key: int, min_version: int, max_version: int, handle: Handler, *, authorize: Authorize | None = None
    ) -> None:
        """``authorize``: the API's pre-authorization hook, run before the request is
        forwarded to the active controller or handled here (a forwarded request
        reaches the controller over the controller listener, where the client's
        principal is not known, so the receiving broker decides). It returns None
        when everything is allowed, else a ``broker.authorization.Partial``: only its
        ``request`` is forwarded or handled (nothing when None) and its ``answer``
        makes the client's response from what came back."""
        api = APIS_BY_KEY[api_key]
        if not (min_version in api.versions and max_version in api.versions):
            raise ValueError(f"{api.name}: {min_version}-{max_version} outside declared {api.versions}")
        self.handlers[api_key] = HandlerSpec(
            api, min_version, max_version, handle, inspect.iscoroutinefunction(handle), authorize
        )

    def supported_versions(self) -> list[tuple[int, int, int]]:
        return sorted((key, spec.min_version, spec.max_version) for key, spec in self.handlers.items())

    async def handle_frame(self, frame: bytes, connection, *, pipelined: bool = False) -> Any:
        """Decode, handle and encode one request. Returns the response frame,
        ``None`` when no response is due (acks=0), or :attr:`CLOSE`; with
        ``pipelined``, an :class:`asyncio.Task` giving one of those when the
        handler answered :class:`AnswerLater`."""
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
        )
        partial = None
        if spec.authorize is not None:
            partial = spec.authorize(ctx, body)
            if partial is not None:
                if partial.request is None:
                    return encode_response(spec.api, api_version, correlation_id, partial.answer(None))
                body = partial.request
        if api_key in self.forwarded_keys:
            forwarded = await self.forwarder.forward(spec.api, api_version, body)
            if forwarded is not None:
                if partial is not None:
                    forwarded = partial.answer(forwarded)
                return encode_response(spec.api, api_version, correlation_id, forwarded)
        response = spec.handle(ctx, body)
        if spec.is_async:
            response = await response
        elif type(response) is AnswerLater:
            if partial is not None:
                response = AnswerLater(_answered(response.answer, partial), overlappable=response.overlappable)
                partial = None
            if pipelined and response.overlappable:
                return asyncio.get_running_loop().create_task(
                    self._encode_later(spec.api, api_version, correlation_id, response.answer)
                )
            response = await response.answer
        if response is None:
            return None
        if partial is not None:
            response = partial.answer(response)
        return encode_response(spec.api, api_version, correlation_id, response)

    @staticmethod
    async def _encode_later(api: Api, api_version: int, correlation_id: int, answer: Awaitable[Any]):
        response = await answer
        return None if response is None else encode_response(api, api_version, correlation_id, response)

    def _unsupported_api_versions(self, spec: HandlerSpec, api_version: int, correlation_id: int):
        # A client newer than us asks with a version we do not know: answer in
        # v0, which every client can read, with our ranges so it can retry.
        from protocol.errors import ErrorCode

        body = spec.api.response.cls(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            api_keys=[
                _api_version_entry(spec.api, key, low, high) for key, low, high in self.supported_versions()
            ],
        )
        return encode_response(spec.api, 0, correlation_id, body)


async def _answered(answer: Awaitable[Any], partial) -> Any:
    response = await answer
    return None if response is None else partial.answer(response)


def _api_version_entry(api_versions_api: Api, key: int, low: int, high: int):
    item = api_versions_api.response.fields[1].type.item
    return item.cls(api_key=key, min_version=low, max_version=high)
