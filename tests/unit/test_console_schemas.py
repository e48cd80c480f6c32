"""The console's Schemas and subject pages (broker/http/console/schemas.py) over a fake
broker whose schema registry service answers a RegistryState built by the registry's
own planning and replay: subjects with their latest version, type, id and level, the
soft-deleted ones behind a toggle, each version pretty-printed with its references,
diffs of two versions, the latest checked against each earlier one at the subject's
level, a registry never used or unreadable, and every user-given string escaped."""

from __future__ import annotations

import asyncio
import html
import json
import re
from types import SimpleNamespace

from broker.config import MetricsListener
from broker.http.console.schemas import NEVER_USED, diff_lines, pretty, registry_overview, subject_detail
from broker.http.console.server import Console
from protocol.schema_formats.records import Reference
from broker.schemas.state import RegistryError, RegistryState

EVIL = '<b id="x">"users"&-value'
SCRIPT_DOC = "</pre><script>alert(1)</script>"
V1 = {"type": "record", "name": "User", "doc": SCRIPT_DOC, "fields": [{"name": "name", "type": "string"}]}
# v2 adds a field without a default (not BACKWARD with v1), v3 one with a default (BACKWARD with v2, not with v1).
V2 = {**V1, "fields": [*V1["fields"], {"name": "email", "type": "string"}]}
V3 = {**V2, "fields": [*V2["fields"], {"name": "age", "type": "int", "default": 0}]}
ADDRESS = {"type": "record", "name": "Address", "fields": [{"name": "street", "type": "string"}]}
HOME = {"type": "record", "name": "Home", "fields": [{"name": "address", "type": "Address"}]}
SESSION = ("s", "t")


def _apply(state, records):
    for key, value in records:
        state.apply(key, value)


def _register(state, subject, schema, schema_type="AVRO", references=()):
    text = schema if isinstance(schema, str) else json.dumps(schema)
    registered = state.plan_register(subject, schema_type, text, tuple(references))
    _apply(state, registered.records)
    return registered.schema_id


def _state() -> RegistryState:
    state = RegistryState()
    _apply(state, state.plan_config(EVIL, "NONE"))
    for schema in (V1, V2, V3):
        _register(state, EVIL, schema)
    _apply(state, state.plan_config(EVIL, "BACKWARD_TRANSITIVE"))
    _register(state, "address", ADDRESS)
    _register(state, "home-value", HOME, references=[Reference("Address", "address", 1)])
    # A JSON schema, then an Avro one: the registry does not compare across types.
    _register(state, "mixed", {"type": "object"}, "JSON")
    _register(state, "mixed", {"type": "string"})
    _register(state, "gone-value", {"type": "enum", "name": "Gone", "symbols": ["A"]})
    _, records = state.plan_delete_subject("gone-value", permanent=False)
    _apply(state, records)
    _apply(state, state.plan_config(None, "FULL"))
    _apply(state, state.plan_mode("address", "READONLY"))
    return state


class FakeService:
    def __init__(self, state=None, *, exists=True, error=None):
        self.state = state
        self.shell = SimpleNamespace(topic_exists=lambda: exists)
        self.error = error
        self.reads = 0

    async def read_state(self):
        self.reads += 1
        if self.error is not None:
            raise self.error
        return self.state


def _broker(service, *, listener=None, is_broker=True):
    return SimpleNamespace(node_id=1, is_broker=is_broker, image=None, metrics=None, schemas=service,
                           config={"schema.registry.listener": listener})


def _console(broker):
    return Console(broker, MetricsListener("127.0.0.1", 0), read_only=False, history_ms=600_000)


def _get(console, path, query=None):
    return asyncio.run(console._get(path, query or {}, SESSION, "127.0.0.1"))


def test_the_overview_lists_subjects_with_latest_version_type_id_and_level():
    state = _state()
    overview = asyncio.run(registry_overview(_broker(FakeService(state))))
    assert (overview["global_compatibility"], overview["global_mode"], overview["notes"]) == ("FULL", "READWRITE", [])
    rows = {r["subject"]: r for r in overview["subjects"]}
    assert sorted(rows) == sorted([EVIL, "address", "home-value", "mixed"])  # gone-value is soft-deleted
    evil = rows[EVIL]
    assert (evil["version"], evil["versions"], evil["schema_type"], evil["id"]) == (3, 3, "AVRO", state.subjects[EVIL][3].schema_id)
    assert (evil["compatibility"], evil["compatibility_source"]) == ("BACKWARD_TRANSITIVE", "subject")
    assert (rows["mixed"]["compatibility"], rows["mixed"]["compatibility_source"], rows["mixed"]["version"]) == ("FULL", "global", 2)
    assert (rows["address"]["mode"], rows["mixed"]["mode"]) == ("READONLY", "")
    assert overview["max_id"] == max(state.ids) and overview["schemas"] == len(state.ids)
    with_deleted = asyncio.run(registry_overview(_broker(FakeService(state)), deleted=True))
    gone = next(r for r in with_deleted["subjects"] if r["subject"] == "gone-value")
    assert (gone["subject_deleted"], gone["version"], gone["versions"], gone["deleted_versions"]) == (True, 1, 0, 1)


def test_the_schemas_page_escapes_subject_names_and_shows_the_numbers():
    state = _state()
    console = _console(_broker(FakeService(state), listener=MetricsListener("127.0.0.1", 8081)))
    response = _get(console, "/schemas")
    assert response.status == 200
    page = response.body.decode()
    assert '<a href="/schemas">Schemas</a>' in page
    assert EVIL not in page and "&lt;b id=&#34;x&#34;&gt;&#34;users&#34;&amp;-value" in page
    assert "/subject?name=%3Cb%20id%3D%22x%22%3E%22users%22%26-value" in page
    row = re.search(r'<tr data-subject="&lt;b id=&#34;x&#34;&gt;&#34;users&#34;&amp;-value">.*?</tr>', page).group(0)
    assert '<td class="version">3</td>' in row and '<td class="type">AVRO</td>' in row
    assert f'<td class="id">{state.subjects[EVIL][3].schema_id}</td>' in row
    assert '<td class="compatibility">BACKWARD_TRANSITIVE</td>' in row
    assert 'id="global-compatibility">FULL<' in page and 'id="global-mode">READWRITE<' in page
    assert 'id="registry-url">http://127.0.0.1:8081<' in page
    assert "gone-value" not in page and 'href="/schemas?deleted=true"' in page
    page = _get(console, "/schemas", {"deleted": "true"}).body.decode()
    assert 'data-subject="gone-value" class="warn"' in page and 'href="/schemas" id="toggle-deleted"' in page
    # Read-only whatever console.read.only says: no form posts anything.
    assert 'method="post"' not in page


def test_the_subject_page_shows_versions_pretty_printed_references_and_escapes_schema_texts():
    state = _state()
    console = _console(_broker(FakeService(state)))
    page = _get(console, "/subject", {"name": EVIL}).body.decode()
    assert "<script>" not in page.replace('<script src="/static/console.js" defer></script>', "")
    assert "</pre><script>" not in page and "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # Each version pretty-printed (indented, fields in their own order), newest first.
    versions = re.findall(r'<section class="schema-version" id="v(\d+)">', page)
    assert versions == ["3", "2", "1"]
    v3 = re.search(r'<section class="schema-version" id="v3">.*?<pre class="schema">(.*?)</pre>', page, re.DOTALL).group(1)
    assert json.loads(html.unescape(v3)) == V3 and '\n  "name": "User",\n' in html.unescape(v3)
    assert 'id="compatibility">BACKWARD_TRANSITIVE<' in page and 'method="post"' not in page
    home = _get(console, "/subject", {"name": "home-value"}).body.decode()
    refs = re.search(r'<tr data-version="1">.*?</tr>', home).group(0)
    assert '<a href="/subject?name=address#v1">Address</a> (address version 1)' in refs
    assert _get(console, "/subject", {"name": "nope"}).status == 404
    # A soft-deleted subject only with deleted versions shown.
    assert _get(console, "/subject", {"name": "gone-value"}).status == 404
    gone = _get(console, "/subject", {"name": "gone-value", "deleted": "true"}).body.decode()
    assert '<tr data-version="1" class="warn">' in gone and '<td class="deleted">yes</td>' in gone


def test_the_latest_version_is_checked_against_each_earlier_one_at_the_subjects_level():
    state = _state()
    detail = asyncio.run(subject_detail(_broker(FakeService(state)), EVIL))
    v2, v1 = detail["compatibility_rows"]
    assert (v2["version"], v2["result"], v2["required"], v2["errors"]) == (2, "compatible", True, [])
    assert (v1["version"], v1["result"], v1["required"]) == (1, "incompatible", True)
    assert any("email" in e for e in v1["errors"]), v1
    # At BACKWARD only the last earlier version is required; the others are still shown.
    _apply(state, state.plan_config(EVIL, "BACKWARD"))
    v2, v1 = asyncio.run(subject_detail(_broker(FakeService(state)), EVIL))["compatibility_rows"]
    assert (v2["required"], v1["required"], v1["result"]) == (True, False, "incompatible")
    _apply(state, state.plan_config(EVIL, "NONE"))
    rows = asyncio.run(subject_detail(_broker(FakeService(state)), EVIL))["compatibility_rows"]
    assert [(r["result"], r["required"]) for r in rows] == [("not checked", False), ("not checked", False)]
    # Versions of another type are not compared, as the registry does not compare them.
    [json_row] = asyncio.run(subject_detail(_broker(FakeService(state)), "mixed"))["compatibility_rows"]
    assert (json_row["version"], json_row["result"], json_row["required"]) == (1, "other type", False)
    assert asyncio.run(subject_detail(_broker(FakeService(state)), "address"))["compatibility_rows"] == []
    page = _get(_console(_broker(FakeService(_state()))), "/subject", {"name": EVIL}).body.decode()
    row = re.search(r'<tr data-against="1" class="warn">.*?</tr>', page).group(0)
    assert '<td class="required">yes</td>' in row and '<td class="result">incompatible</td>' in row


def test_the_diff_of_two_chosen_versions():
    state = _state()
    console = _console(_broker(FakeService(state)))
    detail = asyncio.run(subject_detail(_broker(FakeService(state)), EVIL))
    # By default: the version before the latest against the latest.
    assert (detail["diff_from"], detail["diff_to"]) == (2, 3)
    added = [line for kind, line in detail["diff"] if kind == "add"]
    assert any('"age"' in line for line in added) and not [line for kind, line in detail["diff"] if kind == "remove" and "email" in line]
    detail = asyncio.run(subject_detail(_broker(FakeService(state)), EVIL, diff_from="3", diff_to="1"))
    removed = [line for kind, line in detail["diff"] if kind == "remove"]
    assert any('"email"' in line for line in removed) and any('"age"' in line for line in removed)
    assert detail["diff"][:2] == [("header", "--- version 3"), ("header", "+++ version 1")]
    same = asyncio.run(subject_detail(_broker(FakeService(state)), EVIL, diff_from="2", diff_to="2"))
    assert same["diff"] == [] and same["diff_error"] == ""
    for bad in ("7", "x<y>"):
        wrong = asyncio.run(subject_detail(_broker(FakeService(state)), EVIL, diff_from=bad))
        assert wrong["diff"] is None and "no version" in wrong["diff_error"]
    page = _get(console, "/subject", {"name": EVIL, "from": "1", "to": "3"}).body.decode()
    diff = re.search(r'<pre class="diff" id="diff">(.*?)</pre>', page, re.DOTALL).group(1)
    assert '<span class="diff-add">+      &#34;name&#34;: &#34;age&#34;,</span>' in diff
    assert '<span class="diff-hunk">@@ ' in diff and '<span class="diff-same">       &#34;name&#34;: &#34;name&#34;,</span>' in diff
    assert "&lt;/pre&gt;" not in diff  # the doc (the same in both) is no change
    assert '<option value="1" selected>version 1</option>' in page and '<option value="3" selected>version 3</option>' in page
    page = _get(console, "/subject", {"name": EVIL, "from": "x<y>"}).body.decode()
    assert 'id="diff-error"' in page and "x&lt;y&gt;" in page and "x<y>" not in page


def test_a_schema_text_that_changes_script_is_escaped_in_the_diff():
    lines = diff_lines(pretty("AVRO", json.dumps({"type": "string"})), pretty("AVRO", json.dumps({"type": "string", "doc": "<script>"})), "a", "b")
    assert ("add", '+  "doc": "<script>"') in lines
    state = RegistryState()
    _apply(state, state.plan_config("s", "NONE"))
    _register(state, "s", {"type": "string"})
    _register(state, "s", {"type": "string", "doc": "<script>x</script>"})
    page = _get(_console(_broker(FakeService(state))), "/subject", {"name": "s"}).body.decode()
    assert '<span class="diff-add">+  &#34;doc&#34;: &#34;&lt;script&gt;x&lt;/script&gt;&#34;</span>' in page


def test_pretty_printing_keeps_protobuf_and_unreadable_texts_as_they_are():
    proto = 'syntax = "proto3";\nmessage M { string a = 1; }\n'
    assert pretty("PROTOBUF", proto) == proto.rstrip("\n")
    assert pretty("AVRO", '"string"') == '"string"'
    assert pretty("JSON", "{not json") == "{not json"
    assert pretty("JSON", '{"b": 1, "a": {"c": []}}') == '{\n  "b": 1,\n  "a": {\n    "c": []\n  }\n}'


def test_a_registry_never_used_unreadable_or_absent_is_said_so():
    never = _broker(FakeService(exists=False))
    overview = asyncio.run(registry_overview(never))
    assert overview["notes"] == [NEVER_USED] and overview["subjects"] == []
    assert never.schemas.reads == 0  # nothing to catch up with
    page = _get(_console(never), "/schemas").body.decode()
    assert "no _schemas topic" in page and 'id="no-subjects"' in page and 'id="global-compatibility">BACKWARD<' in page
    assert "schema.registry.listener</code> is not set" in page
    assert _get(_console(never), "/subject", {"name": "x"}).status == 404
    failing = _broker(FakeService(RegistryState(), error=RegistryError(500, 50001, "Error in the backend data store: _schemas has no leader yet")))
    overview = asyncio.run(registry_overview(failing))
    assert overview["notes"] == ["the schema registry could not be read: Error in the backend data store: _schemas has no leader yet"]
    response = _get(_console(failing), "/subject", {"name": "x"})
    assert response.status == 503 and "has no leader yet" in response.body.decode()
    controller = _broker(None, is_broker=False)
    assert "not a broker" in asyncio.run(registry_overview(controller))["notes"][0]
