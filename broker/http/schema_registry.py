"""The schema registry's HTTP API (``schema.registry.listener=http://HOST:PORT``): Confluent Schema Registry's.

Paths, JSON shapes, error codes (``{"error_code", "message"}``) and the
content type ``application/vnd.schemaregistry.v1+json`` are Confluent's, as
confluent-kafka's ``SchemaRegistryClient`` and serializers use them. What is
served:

- ``POST /subjects/{s}/versions`` (register; the same schema again answers its
  id; ``normalize``; ``id``/``version`` in the body in IMPORT mode),
  ``POST /subjects/{s}`` (lookup, ``deleted``), ``GET /subjects``
  (``deleted``, ``subjectPrefix``), ``GET /subjects/{s}/versions``,
  ``GET /subjects/{s}/versions/{v|latest}`` (+ ``/schema``, ``/referencedby``),
  ``DELETE /subjects/{s}`` and ``/subjects/{s}/versions/{v}`` (soft, then
  ``?permanent=true``);
- ``GET /schemas/ids/{id}`` (+ ``/schema``, ``/subjects``, ``/versions``),
  ``GET /schemas`` (``subjectPrefix``, ``deleted``, ``latestOnly``),
  ``GET /schemas/types``;
- ``GET/PUT/DELETE /config`` and ``/config/{s}`` (``defaultToGlobal``),
  ``GET/PUT/DELETE /mode`` and ``/mode/{s}`` (READWRITE, READONLY, IMPORT);
- ``POST /compatibility/subjects/{s}/versions[/{v}]`` (``verbose``).

- Contexts, as Confluent's registry serves them (always; no setting turns
  them on or off): a subject ``:.ctx:s`` wherever a subject goes (``:.:s`` is
  ``s``); ``/config/:.ctx:`` and ``/mode/:.ctx:`` the context's own settings;
  ``GET /contexts`` (the default ``.`` and every context with a schema
  registered, until deleted), ``DELETE /contexts/{ctx}`` (only an empty one);
  ``GET /schemas/ids/{id}?subject=:.ctx:s`` (the id in that context);
  ``subjectPrefix`` ``:.ctx:`` (one context) and ``:*:`` (all, the default);
  and the prefix ``/contexts/{ctx}/`` before any subject, schema, config,
  mode or compatibility path, which scopes the request to the context (a
  client whose registry URL ends with it works in that context).
- ``GET /openapi.json``: the OpenAPI 3 document of all this
  (``schema_registry_openapi.json`` next to this module; Confluent's registry
  serves nothing at that path).

Any other path answers 404 in Confluent's error shape. Not served yet:
authentication.

Reads are answered from this broker's state caught up to the ``_schemas``
leader's high watermark (broker/schemas/service.py). A write on a broker that
does not lead ``_schemas`` is forwarded, as it came, to the leader's
registry endpoint (its ``schema.registry.listener``), and its answer given
back unchanged; a forwarded request that meets a leader change answers 50003.

With ``metrics.listener`` set, every request is counted by method and status
and timed (broker/http/schema_registry_metrics.py), outside the error middleware so the status
counted is the one answered.
"""

from __future__ import annotations

import json
import logging
import time
from importlib import resources

from aiohttp import ClientError, ClientSession, ClientTimeout, web

from broker.http.server import HttpServer, application
from protocol.schema_formats import formats
from protocol.schema_formats.records import Reference
from broker.schemas.service import NotLeader
from broker.schemas.state import (
    DEFAULT_CONTEXT,
    RegistryError,
    RegistryState,
    context_subject,
    normalize_context,
    normalize_subject,
    parse_version,
    qualified,
    schema_not_found,
    subject_not_found,
)

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
# A request forwarded by another broker carries this header: it is not forwarded again.
FORWARDED_HEADER = "X-Schema-Registry-Forwarded"
FORWARD_TIMEOUT_S = 60.0
# A register body, schema text included.
MAX_BODY_BYTES = 16 << 20
# The API's OpenAPI document, shipped with the package (pyproject's package-data).
OPENAPI_DOCUMENT = "schema_registry_openapi.json"


def openapi_document() -> bytes:
    return resources.files("broker.http").joinpath(OPENAPI_DOCUMENT).read_bytes()


def _answer(body, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(body).encode(), content_type=MEDIA_TYPE.split(";")[0])


def _error(status: int, code: int, message: str) -> web.Response:
    return _answer({"error_code": code, "message": message}, status)


def _schema_text(schema_type: str, text: str) -> web.Response:
    """A schema's text alone (``.../schema``): Avro and JSON Schema texts are JSON; a
    ``.proto`` text is not, and is answered as plain text rather than claimed JSON."""
    media = "text/plain" if schema_type == "PROTOBUF" else "application/json"
    return web.Response(text=text, content_type=media)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


# Paths served under the context prefix ``/contexts/{ctx}`` too.
CONTEXT_SCOPED = ("/subjects", "/schemas", "/config", "/mode", "/compatibility")


def _url_context(request: web.Request) -> str | None:
    """The context of a ``/contexts/{ctx}/...`` request (None without the prefix)."""
    raw = request.match_info.get("context")
    return None if raw is None else normalize_context(raw)


def _in_url_context(request: web.Request, raw: str) -> str:
    """A subject or prefix as the client gave it, qualified with the URL's context
    unless it names a context itself (as Confluent's context filter does)."""
    context = _url_context(request)
    if context is None or raw.startswith((":.", ":*:")):
        return raw
    return qualified(context, raw)


def _subject(request: web.Request, *, required: bool = True) -> str | None:
    """The path's subject as stored (``:.:s`` is ``s``, ``:.ctx:s`` stays qualified).
    Where it may be absent (config, mode): None for the global setting (no subject,
    or the default context's ``:.:``) and ``:.ctx:`` for a context's own."""
    raw = request.match_info["subject"] if required else request.match_info.get("subject")
    if raw is None:
        context = _url_context(request)
        return None if context is None else context_subject(context)
    subject = normalize_subject(_in_url_context(request, raw))
    if not required and subject == "":
        return None
    return subject


def _subject_prefix(request: web.Request) -> str | None:
    """``subjectPrefix``: None (every context) when absent outside a context prefix."""
    raw = request.query.get("subjectPrefix")
    if raw is None:
        if _url_context(request) is None:
            return None
        raw = ""
    return _in_url_context(request, raw)


def _optional_int(body: dict, name: str, code: int) -> int | None:
    """A register body's ``id`` or ``version``: None when absent (or -1, 0, as Confluent's clients send)."""
    value = body.get(name)
    if value in (None, -1, 0):
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RegistryError(422, code, f"The {name} {value!r} is not a positive integer")
    return value


def _schema_body(value, *, with_subject: bool = True) -> dict:
    body = {}
    if with_subject:
        body.update(subject=value.subject, version=value.version, id=value.schema_id)
    if value.schema_type != formats.DEFAULT_SCHEMA_TYPE:
        body["schemaType"] = value.schema_type
    if value.references:
        body["references"] = [{"name": r.name, "subject": r.subject, "version": r.version} for r in value.references]
    body["schema"] = value.schema
    return body


class SchemaRegistryApi:
    def __init__(self, broker):
        self.broker = broker
        self.service = broker.schemas
        self.listener = broker.config["schema.registry.listener"]
        self.bound_port: int | None = None
        self._session: ClientSession | None = None
        self._openapi: bytes | None = None
        # With metrics.listener set, each request is counted by method and status (None: not counted).
        self.metrics = None
        if broker.metrics is not None:
            from broker.http.schema_registry_metrics import SchemaRegistryMetrics

            self.metrics = broker.metrics.schema_registry = SchemaRegistryMetrics(self.service)
        middlewares = [self._count, self._errors] if self.metrics is not None else [self._errors]
        app = application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
        get, post, put, delete = "GET", "POST", "PUT", "DELETE"
        routes = [
            (get, "/", self.root),
            (get, "/openapi.json", self.openapi),
            (get, "/schemas/types", self.schema_types),
            (get, "/contexts", self.contexts),
            (get, "/schemas", self.schemas),
            (get, "/schemas/ids/{id}", self.schema_by_id),
            (get, "/schemas/ids/{id}/schema", self.schema_text_by_id),
            (get, "/schemas/ids/{id}/subjects", self.subjects_of_id),
            (get, "/schemas/ids/{id}/versions", self.versions_of_id),
            (get, "/subjects", self.subjects),
            (post, "/subjects/{subject}", self.lookup),
            (delete, "/subjects/{subject}", self.delete_subject),
            (get, "/subjects/{subject}/versions", self.versions),
            (post, "/subjects/{subject}/versions", self.register),
            (get, "/subjects/{subject}/versions/{version}", self.version),
            (get, "/subjects/{subject}/versions/{version}/schema", self.version_schema),
            (get, "/subjects/{subject}/versions/{version}/referencedby", self.referenced_by),
            (delete, "/subjects/{subject}/versions/{version}", self.delete_version),
            (get, "/config", self.get_config),
            (put, "/config", self.put_config),
            (delete, "/config", self.delete_config),
            (get, "/config/{subject}", self.get_config),
            (put, "/config/{subject}", self.put_config),
            (delete, "/config/{subject}", self.delete_config),
            (get, "/mode", self.get_mode),
            (put, "/mode", self.put_mode),
            (delete, "/mode", self.delete_mode),
            (get, "/mode/{subject}", self.get_mode),
            (put, "/mode/{subject}", self.put_mode),
            (delete, "/mode/{subject}", self.delete_mode),
            (post, "/compatibility/subjects/{subject}/versions", self.compatibility),
            (post, "/compatibility/subjects/{subject}/versions/{version}", self.compatibility),
        ]
        routes += [(method, "/contexts/{context}" + path, handler) for method, path, handler in routes if path.startswith(CONTEXT_SCOPED)]
        routes += [(delete, "/contexts/{context}", self.delete_context)]
        for method, path, handler in routes:
            app.router.add_route(method, path, handler)
        self.app = app
        self.http = HttpServer(app, self.listener)

    async def start(self) -> None:
        self.bound_port = await self.http.start()
        host = f"[{self.listener.host}]" if ":" in self.listener.host else (self.listener.host or "0.0.0.0")
        log.info("schema registry: serving on http://%s:%d", host, self.bound_port)

    async def stop(self) -> None:
        await self.http.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------------ plumbing

    @web.middleware
    async def _count(self, request: web.Request, handler):
        """Outside ``_errors``: the status counted is the one answered (a request
        cancelled before its answer, its caller gone, is not counted)."""
        started = time.perf_counter()
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            self.metrics.request_done(request.method, exc.status, time.perf_counter() - started)
            raise
        self.metrics.request_done(request.method, response.status, time.perf_counter() - started)
        return response

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        try:
            return await handler(request)
        except RegistryError as exc:
            return _error(exc.status, exc.code, exc.message)
        except web.HTTPException as exc:
            if exc.status >= 400:
                return _error(exc.status, exc.status, f"HTTP {exc.status} {exc.reason}")
            raise
        except Exception:  # a bug answers in the API's shape, and is logged with its trace
            log.exception("schema registry: %s %s failed", request.method, request.path)
            return _error(500, 50001, "Error in the backend data store: an internal error (see the broker's log)")

    async def _state(self) -> RegistryState:
        return await self.service.read_state()

    async def _body(self, request: web.Request) -> dict:
        try:
            body = json.loads(await request.read() or b"{}")
        except ValueError as exc:
            raise RegistryError(400, 400, f"Unrecognized JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise RegistryError(400, 400, "The request body is not a JSON object")
        return body

    async def _write(self, request: web.Request, plan):
        """Run a write as the leader, or forward the request to it."""
        try:
            return _answer(await self.service.write(plan))
        except NotLeader as exc:
            if request.headers.get(FORWARDED_HEADER) or exc.leader < 0:
                raise RegistryError(500, 50003, "Error while forwarding the request to the leader: leadership is moving") from None
            return await self._forward(request, exc.leader)

    async def _forward(self, request: web.Request, leader: int) -> web.Response:
        listener = await self.service.registry_listener_of(leader)
        if not listener:
            raise RegistryError(500, 50003, f"Error while forwarding the request to the leader: broker {leader} serves no schema registry")
        host_port = listener.split("://", 1)[-1]
        host, _, port = host_port.rpartition(":")
        if host in ("", "0.0.0.0", "[::]"):
            registration = self.broker.image.brokers.get(leader)
            endpoint = registration.endpoint(self.broker.config.inter_broker_listener_name) if registration else None
            host = endpoint.host if endpoint is not None else "127.0.0.1"
        if self._session is None:
            self._session = ClientSession(timeout=ClientTimeout(total=FORWARD_TIMEOUT_S))
        url = f"http://{host}:{port}{request.path_qs}"
        headers = {FORWARDED_HEADER: str(self.broker.node_id)}
        if request.content_type:
            headers["Content-Type"] = request.headers.get("Content-Type", MEDIA_TYPE)
        try:
            async with self._session.request(request.method, url, data=await request.read(), headers=headers) as answer:
                payload = await answer.read()
                return web.Response(status=answer.status, body=payload, content_type=MEDIA_TYPE)
        except (ClientError, TimeoutError) as exc:
            raise RegistryError(500, 50003, f"Error while forwarding the request to the leader (broker {leader}): {exc or type(exc).__name__}") from None

    # ------------------------------------------------------------------ schemas

    async def root(self, request):
        return _answer({})

    async def openapi(self, request):
        if self._openapi is None:
            self._openapi = openapi_document()
        return web.Response(body=self._openapi, content_type="application/json")

    async def contexts(self, request):
        state = await self._state()
        names = state.context_names()
        prefix = request.query.get("contextPrefix")
        if prefix:
            names = [n for n in names if n.startswith(prefix)]
        return _answer(names)

    async def delete_context(self, request):
        context = normalize_context(request.match_info["context"])

        def plan(state: RegistryState):
            return None, state.plan_delete_context(context)

        response = await self._write(request, plan)
        return web.Response(status=204) if response.status == 200 else response

    async def schema_types(self, request):
        return _answer(list(formats.SCHEMA_TYPES))

    def _schema_id(self, request) -> int:
        try:
            return int(request.match_info["id"])
        except ValueError:
            raise schema_not_found(request.match_info["id"]) from None

    def _entry(self, state: RegistryState, request):
        """The id's entry in the context the ``subject`` parameter (or the URL's context) names."""
        schema_id = self._schema_id(request)
        raw = request.query.get("subject")
        default = _url_context(request) or DEFAULT_CONTEXT
        subject = normalize_subject(_in_url_context(request, raw)) if raw else None
        context = state.context_of_id(schema_id, subject, default)
        return state.schema_by_id(schema_id, context), context

    async def schema_by_id(self, request):
        state = await self._state()
        entry, _ = self._entry(state, request)
        body = {}
        if entry.schema_type != formats.DEFAULT_SCHEMA_TYPE:
            body["schemaType"] = entry.schema_type
        if entry.references:
            body["references"] = [{"name": r.name, "subject": r.subject, "version": r.version} for r in entry.references]
        body["schema"] = entry.schema
        return _answer(body)

    async def schema_text_by_id(self, request):
        state = await self._state()
        entry, _ = self._entry(state, request)
        return _schema_text(entry.schema_type, entry.schema)

    def _uses(self, state: RegistryState, request) -> list[tuple[str, int]]:
        entry, _ = self._entry(state, request)
        deleted = _flag(request, "deleted")
        return sorted((s, v) for s, v in entry.users if deleted or not state.subjects[s][v].deleted)

    async def subjects_of_id(self, request):
        state = await self._state()
        return _answer(sorted({s for s, _ in self._uses(state, request)}))

    async def versions_of_id(self, request):
        state = await self._state()
        return _answer([{"subject": s, "version": v} for s, v in self._uses(state, request)])

    async def schemas(self, request):
        state = await self._state()
        deleted, latest_only = _flag(request, "deleted"), _flag(request, "latestOnly")
        out = []
        for subject in state.subject_names(deleted=deleted, prefix=_subject_prefix(request)):
            values = state.live_versions(subject, deleted=deleted)
            for value in values[-1:] if latest_only else values:
                out.append(_schema_body(value))
        return _answer(out)

    # ------------------------------------------------------------------ subjects

    async def subjects(self, request):
        state = await self._state()
        return _answer(state.subject_names(deleted=_flag(request, "deleted"), prefix=_subject_prefix(request)))

    async def versions(self, request):
        state = await self._state()
        subject = _subject(request)
        values = state.live_versions(subject, deleted=_flag(request, "deleted"))
        if not values:
            raise subject_not_found(subject)
        return _answer([v.version for v in values])

    async def version(self, request):
        state = await self._state()
        value = state.version_of(_subject(request), request.match_info["version"], deleted=_flag(request, "deleted"))
        return _answer(_schema_body(value))

    async def version_schema(self, request):
        state = await self._state()
        value = state.version_of(_subject(request), request.match_info["version"], deleted=_flag(request, "deleted"))
        return _schema_text(value.schema_type, value.schema)

    async def referenced_by(self, request):
        state = await self._state()
        value = state.version_of(_subject(request), request.match_info["version"])
        ids = sorted(
            other.schema_id for versions in state.subjects.values() for other in versions.values()
            if not other.deleted and state.references_to(other, value)
        )  # fmt: skip
        return _answer(ids)

    @staticmethod
    def _schema_of(body: dict) -> tuple[str, str, tuple[Reference, ...]]:
        text = body.get("schema")
        if not isinstance(text, str) or not text:
            raise RegistryError(422, 42201, "Invalid schema: the body has no schema")
        schema_type = body.get("schemaType") or formats.DEFAULT_SCHEMA_TYPE
        references = []
        for ref in body.get("references") or []:
            try:
                references.append(Reference(str(ref["name"]), str(ref["subject"]), int(ref["version"])))
            except (KeyError, TypeError, ValueError):
                raise RegistryError(422, 42201, f"Invalid schema: a reference is not {{name, subject, version}}: {ref}") from None
        return text, str(schema_type), tuple(references)

    async def register(self, request):
        subject = _subject(request)
        body = await self._body(request)
        text, schema_type, references = self._schema_of(body)
        schema_id, version = _optional_int(body, "id", 42201), _optional_int(body, "version", 42202)
        normalize = _flag(request, "normalize")

        def plan(state: RegistryState):
            registered = state.plan_register(
                subject, schema_type, text, references, schema_id=schema_id, version=version, normalize=normalize
            )
            return {"id": registered.schema_id}, registered.records

        return await self._write(request, plan)

    async def lookup(self, request):
        state = await self._state()
        subject = _subject(request)
        body = await self._body(request)
        text, schema_type, references = self._schema_of(body)
        deleted = _flag(request, "deleted")
        if not state.live_versions(subject, deleted=deleted):
            raise subject_not_found(subject)
        parsed = state.parse(schema_type, text, references, subject)
        if _flag(request, "normalize"):
            parsed = state.parse(schema_type, parsed.normalized, references, subject)
        value = state.lookup(subject, parsed, references, deleted=deleted)
        if value is None:
            raise schema_not_found()
        return _answer(_schema_body(value))

    async def delete_subject(self, request):
        subject, permanent = _subject(request), _flag(request, "permanent")
        return await self._write(request, lambda state: state.plan_delete_subject(subject, permanent=permanent))

    async def delete_version(self, request):
        subject, raw, permanent = _subject(request), request.match_info["version"], _flag(request, "permanent")
        return await self._write(request, lambda state: state.plan_delete_version(subject, raw, permanent=permanent))

    # ------------------------------------------------------------------ config and mode

    async def get_config(self, request):
        state = await self._state()
        subject = _subject(request, required=False)
        level = state.compatibility(subject, default_to_global=_flag(request, "defaultToGlobal"))
        if level is None:
            raise RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")
        return _answer({"compatibilityLevel": level})

    async def put_config(self, request):
        subject = _subject(request, required=False)
        body = await self._body(request)
        level = body.get("compatibility", body.get("compatibilityLevel"))
        level = level.upper() if isinstance(level, str) else level

        def plan(state: RegistryState):
            return {"compatibility": level}, state.plan_config(subject, level if isinstance(level, str) else "")

        return await self._write(request, plan)

    async def delete_config(self, request):
        subject = _subject(request, required=False)

        def plan(state: RegistryState):
            if subject is not None and subject not in state.configs:
                raise subject_not_found(subject)
            return {"compatibilityLevel": state.compatibility(subject)}, state.plan_config(subject, None)

        return await self._write(request, plan)

    async def get_mode(self, request):
        state = await self._state()
        subject = _subject(request, required=False)
        mode = state.mode(subject, default_to_global=_flag(request, "defaultToGlobal"))
        if mode is None:
            raise RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")
        return _answer({"mode": mode})

    async def put_mode(self, request):
        subject = _subject(request, required=False)
        body = await self._body(request)
        mode = body.get("mode")
        mode = mode.upper() if isinstance(mode, str) else ""
        force = _flag(request, "force")
        return await self._write(request, lambda state: ({"mode": mode}, state.plan_mode(subject, mode, force=force)))

    async def delete_mode(self, request):
        subject = _subject(request, required=False)

        def plan(state: RegistryState):
            if subject is not None and subject not in state.modes:
                raise subject_not_found(subject)
            return {"mode": state.mode(subject)}, state.plan_mode(subject, None)

        return await self._write(request, plan)

    # ------------------------------------------------------------------ compatibility

    async def compatibility(self, request):
        state = await self._state()
        subject = _subject(request)
        body = await self._body(request)
        text, schema_type, references = self._schema_of(body)
        parsed = state.parse(schema_type, text, references, subject)
        raw = request.match_info.get("version")
        live = state.live_versions(subject)
        if raw is None or parse_version(raw) is None:
            if raw is not None and not live:
                raise subject_not_found(subject)
            messages = state.compatibility_messages(subject, parsed)
        else:
            value = state.version_of(subject, raw)
            messages = state.compatibility_messages(subject, parsed, [value])
        answer = {"is_compatible": not messages}
        if _flag(request, "verbose"):
            answer["messages"] = messages
        return _answer(answer)
