"""The console's Schemas and subject pages on a real broker process: schemas registered
over the registry's API (schema.registry.listener) read back over HTTP from the
console (console.listener), which reads ``_schemas`` in-process; before the first
registration, and on a broker that serves no registry, the page says the registry
was never used."""

from __future__ import annotations

import html
import json
import re
import urllib.parse

import pytest

from tests.conftest import BrokerProcess, wait_until
from tests.interop.test_console import console_url, http
from tests.schemas._registry import REGISTRY_LINE, Registry, registry_port

SUBJECT = 'orders<b>"&-value'
V1 = {"type": "record", "name": "Order", "doc": "<script>alert(1)</script>", "fields": [{"name": "id", "type": "long"}]}
# V2 adds a field without a default (not BACKWARD with V1: registered under NONE);
# V3 one with a default, so it is BACKWARD with V2 but not with V1.
V2 = {**V1, "fields": [*V1["fields"], {"name": "note", "type": "string"}]}
V3 = {**V2, "fields": [*V2["fields"], {"name": "customer", "type": "string", "default": ""}]}
ADDRESS = {"type": "record", "name": "Address", "fields": [{"name": "street", "type": "string"}]}
HOME = {"type": "record", "name": "Home", "fields": [{"name": "address", "type": "Address"}]}


def path_of(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def cell(row: str, name: str) -> str:
    return re.search(rf'<td class="{name}">(.*?)</td>', row, re.DOTALL).group(1)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("registry-console"), {
        "schema.registry.listener": "http://127.0.0.1:0", "console.listener": "http://127.0.0.1:0",
    }).start()  # fmt: skip
    try:
        assert wait_until(lambda: REGISTRY_LINE.search(broker.log_text()))
        yield broker
    finally:
        broker.stop()


def test_schemas_registered_over_the_api_are_shown_by_the_console(broker):
    url = console_url(broker)
    registry = Registry(registry_port(broker))
    # Before the first registration: no _schemas topic yet, the defaults shown.
    status, _, page = http(url + "/schemas")
    assert status == 200 and "no _schemas topic" in page and 'id="no-subjects"' in page, page
    assert 'id="global-compatibility">BACKWARD<' in page and '<a href="/schemas">Schemas</a>' in page

    subject = path_of(SUBJECT)
    assert registry.request("PUT", f"/config/{subject}", {"compatibility": "NONE"})[0] == 200
    ids = [registry.register(subject, schema)[1]["id"] for schema in (V1, V2, V3)]
    assert registry.request("PUT", f"/config/{subject}", {"compatibility": "BACKWARD_TRANSITIVE"})[0] == 200
    assert registry.register("address", ADDRESS)[0] == 200
    status, body = registry.register("home-value", HOME, references=[{"name": "Address", "subject": "address", "version": 1}])
    assert status == 200, body
    assert registry.register("gone-value", {"type": "enum", "name": "Gone", "symbols": ["A"]})[0] == 200
    assert registry.request("DELETE", "/subjects/gone-value")[0] == 200

    status, _, page = http(url + "/schemas")
    assert status == 200 and "no _schemas topic" not in page
    assert SUBJECT not in page and "orders&lt;b&gt;&#34;&amp;-value" in page
    row = re.search(r'<tr data-subject="orders&lt;b&gt;&#34;&amp;-value">.*?</tr>', page).group(0)
    assert (cell(row, "version"), cell(row, "type"), cell(row, "id")) == ("3", "AVRO", str(ids[2]))
    assert cell(row, "compatibility") == "BACKWARD_TRANSITIVE"
    assert "gone-value" not in page
    _, _, with_deleted = http(url + "/schemas?deleted=true")
    assert 'data-subject="gone-value" class="warn"' in with_deleted

    status, _, page = http(url + f"/subject?name={subject}")
    assert status == 200
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert [int(v) for v in re.findall(r'<tr data-version="(\d+)">', page)] == [3, 2, 1]
    for version, schema_id in zip((1, 2, 3), ids):
        assert cell(re.search(rf'<tr data-version="{version}">.*?</tr>', page).group(0), "id") == str(schema_id)
    # The latest against each earlier version at BACKWARD_TRANSITIVE: v2 fine, v1 not.
    against_2 = re.search(r'<tr data-against="2">.*?</tr>', page, re.DOTALL).group(0)
    against_1 = re.search(r'<tr data-against="1" class="warn">.*?</tr>', page, re.DOTALL).group(0)
    assert cell(against_2, "result") == "compatible" and cell(against_1, "result") == "incompatible"
    assert "note" in cell(against_1, "errors") and cell(against_2, "errors") == "-"
    # The default diff: version 2 against version 3 (the customer field added).
    diff = re.search(r'<pre class="diff" id="diff">(.*?)</pre>', page, re.DOTALL).group(1)
    assert '<span class="diff-add">+      &#34;name&#34;: &#34;customer&#34;,</span>' in diff and "diff-remove" not in diff
    status, _, page = http(url + f"/subject?name={subject}&from=3&to=1")
    diff = re.search(r'<pre class="diff" id="diff">(.*?)</pre>', page, re.DOTALL).group(1)
    assert '<span class="diff-remove">-      &#34;name&#34;: &#34;note&#34;,</span>' in diff

    status, _, page = http(url + "/subject?name=home-value")
    assert status == 200 and '<a href="/subject?name=address#v1">Address</a> (address version 1)' in page
    pretty = re.search(r'<pre class="schema">(.*?)</pre>', page, re.DOTALL).group(1)
    assert json.loads(html.unescape(pretty)) == HOME
    assert http(url + "/subject?name=nope")[0] == 404


def test_a_broker_without_the_registry_listener_says_the_registry_was_never_used(tmp_path):
    broker = BrokerProcess(tmp_path, {"console.listener": "http://127.0.0.1:0"}).start()
    try:
        status, _, page = http(console_url(broker) + "/schemas")
        assert status == 200 and "no _schemas topic" in page and "schema.registry.listener</code> is not set" in page
    finally:
        broker.stop()
