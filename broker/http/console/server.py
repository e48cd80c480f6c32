"""The console's HTTP side: an aiohttp application on ``console.listener``, routing, sessions, CSRF.

One request per connection (``Connection: close``), a form body of at most
64 KiB read within 10 s, and the limits every endpoint has (broker/http/server.py:
connections at once, request head size and time): anything else is answered
400/413 or closed. Pages are
Jinja2 templates with autoescaping on, so every topic name, key, value and
header from the cluster reaches the page as text; the Content-Security-Policy
allows only the console's own script and style besides (nothing is loaded
from elsewhere, and inline script never runs).

Forms that change the cluster are POSTs carrying the session's CSRF token: the
session is a random cookie (HttpOnly, SameSite=Strict) mapped to a random
token in memory (at most ``MAX_SESSIONS``, the oldest dropped first), and a
POST without the session's token is refused with 403. With
``console.read.only=true`` every such POST is refused with 403 and no form is
shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import OrderedDict
from pathlib import Path
from urllib.parse import parse_qs, urlencode

from aiohttp import web
from jinja2 import Environment, FileSystemLoader, select_autoescape

from broker.config import MetricsListener
from broker.http.cluster_reader import ClusterReader
from broker.http.console import balancer, links, schemas, views
from broker.http.console.admin import Admin, AdminRefused
from broker.http.console.history import History, svg_chart
from broker.http.server import REQUEST_HEAD_TIMEOUT_S, HttpServer, application

log = logging.getLogger(__name__)

MAX_FORM_BYTES = 64 * 1024
# A form's body, once its head came, arrives within as long as a head may take.
FORM_TIMEOUT_S = REQUEST_HEAD_TIMEOUT_S
MAX_SESSIONS = 1000
SESSION_COOKIE = "pybroker_console"
HERE = Path(__file__).parent
STATIC = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
)
# The phrases older Pythons' http.HTTPStatus lack (RFC 9110's name for 413).
_REASONS = {413: "Content Too Large"}


class Response:
    def __init__(self, status: int, body: bytes = b"", content_type: str = "text/html; charset=utf-8", headers=()):
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = list(headers)
        self.flash: tuple[str, str] | None = None


class BadRequest(Exception):
    pass


class Console:
    def __init__(self, broker, listener: MetricsListener, *, read_only: bool, history_ms: int):
        self.broker = broker
        self.listener = listener
        self.read_only = read_only
        # Reads of other brokers (partitions led, groups coordinated elsewhere): pooled node connections.
        self.reader = ClusterReader(broker, f"pybroker-console-{broker.node_id}")
        self.history = History(broker, history_ms, self.reader)
        self.admin = Admin(broker)
        self.templates = Environment(
            loader=FileSystemLoader(str(HERE / "templates")), autoescape=select_autoescape(default=True, default_for_string=True)
        )
        self.templates.filters["ms_time"] = lambda ms: time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z" if ms is not None and ms >= 0 else "-"
        self._sessions: OrderedDict[str, str] = OrderedDict()
        # session id -> (message, error) the page after a form shows once (kept here, not
        # in the redirect's URL, so that a link cannot make the console say anything).
        self._flashes: dict[str, tuple[str, str]] = {}
        # Every path and method comes to _serve, so that the answers are the console's own.
        app = application(one_request_per_connection=True, client_max_size=MAX_FORM_BYTES)
        app.router.add_route("*", "/{path:.*}", self._serve)
        self.http = HttpServer(app, listener)
        self._sampler: asyncio.Task | None = None
        self.bound_port: int | None = None

    @classmethod
    def from_config(cls, broker) -> Console | None:
        config = broker.config
        listener = config["console.listener"]
        if listener is None:
            return None
        return cls(broker, listener, read_only=config["console.read.only"], history_ms=config["console.lag.history.ms"])

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind and serve; an OSError (port in use...) is the caller's to report."""
        listener = self.listener
        self.bound_port = await self.http.start()
        self._sampler = asyncio.get_running_loop().create_task(self._sample_forever(), name="console samples")
        shown = MetricsListener(listener.host, self.bound_port)
        log.info("console: serving the web console on %s/%s", shown, " (read-only)" if self.read_only else "")

    async def stop(self) -> None:
        await self.http.stop()
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler  # its loop catches everything else
            self._sampler = None
        self.reader.close()

    async def _sample_forever(self) -> None:
        interval_s = self.history.interval_ms / 1000
        while True:
            try:
                await self.history.sample()
            except asyncio.CancelledError:
                raise
            except Exception:  # a sampling bug must not end the graphs for good
                log.exception("console: sampling failed")
            await asyncio.sleep(interval_s)

    # ------------------------------------------------------------- HTTP

    async def _serve(self, request: web.Request) -> web.Response:
        try:
            response = await self._handle(request)
        except BadRequest as exc:
            response = Response(400, f"bad request: {exc}\n".encode(), "text/plain; charset=utf-8")
        except Exception:
            log.exception("console: request failed")
            response = Response(500, b"internal error\n", "text/plain; charset=utf-8")
        headers = [("Content-Type", response.content_type), *SECURITY_HEADERS, *response.headers]
        # aiohttp leaves a HEAD answer's body out itself, keeping its Content-Length.
        return web.Response(status=response.status, reason=_REASONS.get(response.status), body=response.body, headers=headers)

    async def _handle(self, request: web.Request) -> Response:
        method = request.method
        # The path as sent (not percent-decoded), as the pages' links are written.
        path = request.rel_url.raw_path
        query = _single(parse_qs(request.rel_url.raw_query_string, keep_blank_values=True))
        session, new_cookie = self._session(request.headers.get("Cookie", ""))
        host = request.remote or ""
        if method == "POST":
            try:
                length = int(request.headers.get("Content-Length", ""))
            except ValueError:
                raise BadRequest("a form needs a Content-Length") from None
            if length < 0 or length > MAX_FORM_BYTES:
                return Response(413, b"form too large\n", "text/plain; charset=utf-8")
            if not request.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
                raise BadRequest("forms are application/x-www-form-urlencoded")
            try:
                body = await asyncio.wait_for(request.read(), FORM_TIMEOUT_S)
            except (TimeoutError, ConnectionError):
                raise BadRequest("incomplete form") from None
            form = _single(parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True))
            response = await self._post(path, form, session, host)
        elif method in ("GET", "HEAD"):
            response = await self._get(path, query, session, host)
        else:
            response = Response(405, b"method not allowed\n", "text/plain; charset=utf-8", (("Allow", "GET, HEAD, POST"),))
        if new_cookie:
            response.headers.append(("Set-Cookie", f"{SESSION_COOKIE}={session[0]}; Path=/; HttpOnly; SameSite=Strict"))
        return response

    def _session(self, cookie_header: str) -> tuple[tuple[str, str], bool]:
        """(session id, CSRF token), and whether the session is new (a cookie to set)."""
        for part in cookie_header.split(";"):
            name, _, value = part.strip().partition("=")
            if name == SESSION_COOKIE and value in self._sessions:
                self._sessions.move_to_end(value)
                return (value, self._sessions[value]), False
        session_id, token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self._sessions[session_id] = token
        while len(self._sessions) > MAX_SESSIONS:
            dropped, _ = self._sessions.popitem(last=False)
            self._flashes.pop(dropped, None)
        return (session_id, token), True

    def _page(self, template: str, session, status: int = 200, **context) -> Response:
        body = self.templates.get_template(template).render(
            csrf_token=session[1], read_only=self.read_only, node_id=self.broker.node_id, **context
        )
        return Response(status, body.encode())

    # ------------------------------------------------------------- pages

    async def _get(self, path: str, query: dict, session, host: str) -> Response:
        broker = self.broker
        msg, err = self._flashes.pop(session[0], ("", ""))
        flash = {"msg": msg, "err": err}
        if path == "/":
            return self._page("overview.html", session, o=views.overview(broker), **flash)
        if path == "/topics":
            rows, notes = await views.topic_rows(broker, self.reader)
            return self._page("topics.html", session, topics=rows, notes=notes, **flash)
        if path == "/topic":
            name = query.get("name", "")
            started = time.perf_counter()
            detail = await views.topic_detail(broker, self.reader, name)
            if detail is None:
                return self._page("error.html", session, 404, message=f"no topic {name!r}")
            try:
                configs = await self.admin.topic_configs(host, name)
                configs_error = ""
            except AdminRefused as exc:
                configs, configs_error = [], str(exc)
            response = self._page("topic.html", session, t=detail, configs=configs, configs_error=configs_error, **flash)
            response.headers.append(("Server-Timing", f"render;dur={(time.perf_counter() - started) * 1000:.1f}"))
            return response
        if path == "/messages":
            return await self._messages(query, session)
        if path == "/groups":
            rows, notes = await views.group_rows(broker, self.reader)
            return self._page("groups.html", session, groups=rows, notes=list(dict.fromkeys(notes + self.history.unavailable)))
        if path == "/group":
            name = query.get("id", "")
            detail = await views.group_detail(broker, self.reader, name)
            if detail is None:
                return self._page("error.html", session, 404, message=f"no group {name!r}")
            return self._page("group.html", session, g=detail, chart=self._lag_chart(name))
        if path == "/group/lag.svg":
            return Response(200, self._lag_chart(query.get("id", "")).encode(), "image/svg+xml; charset=utf-8")
        if path == "/links":
            rows, notes = await links.link_rows(broker, self.reader)
            return self._page("links.html", session, links=rows, notes=notes)
        if path == "/mirror":
            name = query.get("topic", "")
            detail = await links.mirror_detail(broker, self.reader, name)
            if detail is None:
                return self._page("error.html", session, 404, message=f"no mirror topic {name!r}")
            return self._page("mirror.html", session, m=detail, charts=self._mirror_charts(name),
                              interval_ms=self.history.interval_ms, window_ms=self.history.window_ms)
        if path == "/mirror/lag.svg":
            return Response(200, "".join(self._mirror_charts(query.get("topic", ""))).encode(), "image/svg+xml; charset=utf-8")
        if path == "/schemas":
            overview = await schemas.registry_overview(broker, deleted=query.get("deleted", "") == "true")
            return self._page("schemas.html", session, r=overview)
        if path == "/subject":
            name = query.get("name", "")
            detail = await schemas.subject_detail(broker, name, deleted=query.get("deleted", "") == "true",
                                                  diff_from=query.get("from", ""), diff_to=query.get("to", ""))
            if detail is None:
                return self._page("error.html", session, 404, message=f"no subject {name!r}")
            return self._page("subject.html", session, detail["status"], s=detail)
        if path == "/balancer":
            try:
                return self._page("balancer.html", session, b=await balancer.balancer_overview(self.admin, host), error="")
            except AdminRefused as exc:
                return self._page("balancer.html", session, 503, b=None, error=str(exc))
        if path == "/charts":
            return self._page("charts.html", session, charts=self._broker_charts(), metrics_on=broker.metrics is not None,
                              interval_ms=self.history.interval_ms, window_ms=self.history.window_ms)
        if path == "/charts.svg":
            return Response(200, "".join(self._broker_charts()).encode(), "image/svg+xml; charset=utf-8")
        if path.startswith("/static/") and path[len("/static/"):] in STATIC:
            name = path[len("/static/"):]
            return Response(200, (HERE / "static" / name).read_bytes(), STATIC[name])
        return self._page("error.html", session, 404, message=f"no page {path}")

    def _lag_chart(self, group_id: str) -> str:
        return svg_chart(self.history.group_lag(group_id), title=f"Lag of {group_id}", unit="records", css_id="lag-chart")

    def _mirror_charts(self, topic: str) -> list[str]:
        records, millis = self.history.mirror_lag_points(topic)
        return [
            svg_chart({"sum over partitions": records}, title=f"Mirror lag of {topic}", unit="records", css_id="mirror-lag-records"),
            svg_chart({"max over partitions": millis}, title=f"Mirror lag of {topic}", unit="ms", css_id="mirror-lag-ms"),
        ]

    def _broker_charts(self) -> list[str]:
        charts = []
        for name, (title, unit, rate) in self.history.series_specs().items():
            points = self.history.broker_chart_points(name, rate)
            charts.append(svg_chart({name: points}, title=title, unit=unit, width=420, height=150, css_id=f"chart-{name}"))
        return charts

    async def _messages(self, query: dict, session) -> Response:
        topic = query.get("topic", "")
        try:
            partition = int(query.get("partition", "0") or 0)
            offset = int(query["offset"]) if query.get("offset", "") != "" else None
            limit = int(query.get("limit", "50") or 50)
        except ValueError:
            raise BadRequest("partition, offset and limit are integers") from None
        timestamp_ms = None
        if query.get("timestamp", ""):
            timestamp_ms = _parse_time(query["timestamp"])
        decoding = query.get("decoding", "text") or "text"
        search = query.get("search", "")
        result = await views.browse(self.broker, self.reader, topic, partition, offset=offset, timestamp_ms=timestamp_ms,
                              decoding=decoding, search=search, limit=limit)
        topic_image = self.broker.image.topics.get(topic)
        return self._page(
            "messages.html", session, topic=topic, partition=partition, partitions=sorted(topic_image.partitions) if topic_image else [],
            decoding=decoding, search=search, limit=limit, offset="" if offset is None else offset,
            timestamp=query.get("timestamp", ""), r=result, decodings=views.DECODINGS,
            next_link="/messages?" + urlencode({"topic": topic, "partition": partition, "offset": result.next_offset or 0,
                                               "decoding": decoding, "search": search, "limit": limit}),
        )

    # ------------------------------------------------------------- forms

    async def _post(self, path: str, form: dict, session, host: str) -> Response:
        response = await self._post_form(path, form, session, host)
        if response.flash is not None:
            self._flashes[session[0]] = response.flash
        return response

    async def _post_form(self, path: str, form: dict, session, host: str) -> Response:
        if self.read_only:
            return Response(403, b"the console is read-only (console.read.only=true)\n", "text/plain; charset=utf-8")
        if not secrets.compare_digest(form.get("csrf_token", ""), session[1]):
            return Response(403, b"missing or stale form token: reload the page and try again\n", "text/plain; charset=utf-8")
        name = form.get("name", "")
        try:
            if path == "/topics/create":
                try:
                    partitions = int(form.get("partitions", "") or -1)
                    replication = int(form.get("replication_factor", "") or -1)
                except ValueError:
                    return _redirect("/topics", err="partitions and replication factor are integers")
                configs = {}
                for line in form.get("configs", "").splitlines():
                    if line.strip():
                        key, sep, value = line.partition("=")
                        if not sep:
                            return _redirect("/topics", err=f"config line {line.strip()!r} is not key=value")
                        configs[key.strip()] = value.strip()
                await self.admin.create_topic(host, name, partitions, replication, configs)
                return _redirect("/topic", name=name, msg=f"created topic {name}")
            if path == "/topic/delete":
                if form.get("confirm", "") != name:
                    return _redirect("/topic", name=name, err="type the topic's name to confirm its deletion")
                await self.admin.delete_topic(host, name)
                return _redirect("/topics", msg=f"deleted topic {name}")
            if path == "/topic/config":
                key = form.get("key", "").strip()
                if not key:
                    return _redirect("/topic", name=name, err="name the config to change")
                value = None if form.get("action") == "delete" else form.get("value", "")
                await self.admin.alter_topic_config(host, name, key, value)
                done = f"deleted {key} (back to the default)" if value is None else f"set {key}={value}"
                return _redirect("/topic", name=name, msg=done)
        except AdminRefused as exc:
            back = ("/topics", {}) if path == "/topics/create" else ("/topic", {"name": name})
            return _redirect(back[0], err=str(exc), **back[1])
        return Response(404, b"no such form\n", "text/plain; charset=utf-8")


def _single(values: dict[str, list[str]]) -> dict[str, str]:
    return {k: v[0] for k, v in values.items()}


def _redirect(path: str, *, msg: str = "", err: str = "", **query) -> Response:
    """A 303 to ``path``; the page there shows ``msg`` or ``err`` once."""
    response = Response(303, b"", headers=(("Location", path + ("?" + urlencode(query) if query else "")),))
    response.flash = (msg, err)
    return response


def _parse_time(text: str) -> int:
    """Milliseconds since the epoch, or an ISO date-time (UTC unless it names a zone)."""
    from datetime import UTC, datetime

    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"timestamp {text!r} is neither milliseconds nor an ISO date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)
