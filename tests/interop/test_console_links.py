"""The console's Links and mirror pages on a real destination: two single-node
clusters, A the source and B the destination (with ``console.listener``), a
link and a mirror made with the tools, and a mirror held behind its source.

The lag is made real and then frozen: B copies with
``replica.fetch.max.bytes=1`` (one batch per fetch, as a fetch always returns
at least one) and the mirror partition throttled to one byte per second, so
after its first fetch it has learned A's high watermark but holds one batch of
many; then A stops, and nothing can move the numbers but the clock. The pages
must show what ``pybroker mirrors --describe --output json`` shows, and the
lag chart must draw it.
"""

from __future__ import annotations

import html
import json
import re

import pytest

from tests.conftest import wait_until
from tests.interop._support import create_topic, unique_topic
from tests.interop.test_console import console_url, http
from tests.links.test_links_control import pybroker

confluent_kafka = pytest.importorskip("confluent_kafka")

RECORDS = 20
WAIT_S = 60


def describe(bootstrap: str, topic: str) -> dict:
    out = pybroker("mirrors", "--bootstrap-server", bootstrap, "--describe", "--topics", topic, "--output", "json").stdout
    [mirror] = json.loads(out)["mirrors"]
    return mirror


def cell(row: str, name: str) -> str:
    return re.search(rf'<td class="{name}"[^>]*>(.*?)</td>', row).group(1)


def test_the_links_and_mirror_pages_show_a_lagging_mirror(broker_factory):
    source = broker_factory()
    dest = broker_factory({"console.listener": "http://127.0.0.1:0", "console.lag.history.ms": "10000", "replica.fetch.max.bytes": "1"})
    url = console_url(dest)
    # Before any link: the page says so, and the navigation leads to it.
    status, _, page = http(url + "/links")
    assert status == 200 and 'id="no-links"' in page and '<a href="/links">Links</a>' in page
    topic = unique_topic("console-mirror")
    create_topic(source.bootstrap, topic, partitions=1)
    producer = confluent_kafka.Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 0})
    for i in range(RECORDS):  # one batch each
        producer.produce(topic, value=f"record-{i}".encode(), partition=0)
        assert producer.flush(WAIT_S) == 0
    pybroker("configs", "--bootstrap-server", dest.bootstrap, "--alter", "--entity-type", "brokers", "--entity-default",
             "--add-config", "follower.replication.throttled.rate=1")
    pybroker("cluster-links", "--bootstrap-server", dest.bootstrap, "--create", "--link", "east",
             "--config", f"bootstrap.servers={source.bootstrap}")
    pybroker("mirrors", "--bootstrap-server", dest.bootstrap, "--create", "--mirror-topic", topic, "--link", "east",
             "--config", "follower.replication.throttled.replicas=*")

    def behind():
        [p] = describe(dest.bootstrap, topic)["partitions"]
        return p["source_high_watermark"] == RECORDS and p["lag_records"] > 0

    assert wait_until(behind, timeout_s=WAIT_S, interval_s=0.2), describe(dest.bootstrap, topic)
    source.stop()

    def frozen():
        """The tool's view once A's absence shows as the partition's error and stays put."""
        first = describe(dest.bootstrap, topic)
        second = describe(dest.bootstrap, topic)
        [p1], [p2] = first["partitions"], second["partitions"]
        keys = ("source_high_watermark", "local_log_end_offset", "local_high_watermark", "lag_records", "error", "stop_offset")
        if p1["error"] and all(p1[k] == p2[k] for k in keys):
            return second
        return None

    before = wait_until(frozen, timeout_s=WAIT_S, interval_s=0.5)
    assert before, describe(dest.bootstrap, topic)
    [p] = before["partitions"]
    assert before["state"] == "ACTIVE" and p["lag_records"] == RECORDS - p["local_log_end_offset"] > 0

    status, _, links_page = http(url + "/links")
    status_m, _, mirror_page = http(url + f"/mirror?topic={topic}")
    [after] = describe(dest.bootstrap, topic)["partitions"]
    assert status == status_m == 200

    section = re.search(r'<section class="link" data-link="east">.*?</section>', links_page, re.DOTALL).group(0)
    assert f'<span class="bootstrap">{source.bootstrap}</span>' in section
    row = re.search(rf'<tr data-mirror="{topic}">.*?</tr>', section).group(0)
    assert cell(row, "state") == "ACTIVE" and int(cell(row, "lag-records")) == p["lag_records"]
    assert p["lag_ms"] <= int(cell(row, "lag-ms")) <= after["lag_ms"]
    # A's absence is the link's error, as the partition's leader reports it.
    [shown_error] = [html.unescape(m) for m in re.findall(r'<p class="flash err link-error">(.*?)</p>', section)]
    assert shown_error in (p["error"], after["error"])

    assert '<span id="mirror-state">ACTIVE</span>' in mirror_page
    prow = re.search(r'<tr data-partition="0"[^>]*>.*?</tr>', mirror_page).group(0)
    for name, key in (("source-hw", "source_high_watermark"), ("log-end", "local_log_end_offset"), ("hw", "local_high_watermark"),
                      ("lag-records", "lag_records"), ("stop-offset", "stop_offset")):
        assert int(cell(prow, name)) == p[key], (name, prow)
    assert p["lag_ms"] <= int(cell(prow, "lag-ms")) <= after["lag_ms"]
    assert int(re.search(r'data-ms="(-?\d+)"', prow).group(1)) == p["last_fetch_ms"] > 0
    assert html.unescape(cell(prow, "error")) in (p["error"], after["error"])

    # The lag over time: sampled every second, the records line at the frozen lag.
    def charted():
        svg = http(url + f"/mirror/lag.svg?topic={topic}")[2]
        points = re.search(r'id="mirror-lag-records" data-points="(\d+)"', svg)
        return svg if points and int(points.group(1)) >= 2 else None

    svg = wait_until(charted, timeout_s=WAIT_S, interval_s=0.5)
    assert svg, http(url + f"/mirror/lag.svg?topic={topic}")[2]
    assert f"sum over partitions: {p['lag_records']}</text>" in svg
    assert "<polyline" in svg
    # Not a mirror: 404.
    assert http(url + "/mirror?topic=no-such-mirror")[0] == 404
