"""The balancer's status over HTTP on a real broker process: the REST resources
(GET .../balancer, DELETE .../brokers/{id} as remove-broker, the broker tasks),
the console's balancer page and the Prometheus families.

One combined node with ``balancer.mode=node_add`` and every HTTP endpoint: the
balancer is ready (one broker: nothing to move), the distribution is the
topic's partitions, nothing is known yet of a run ("before" empty), and a
remove-broker that would strand replicas is refused. With ``balancer.mode=off``
the state is off and a drain is refused, in each endpoint's words. In headless
Chromium (when installed, as tests/interop/test_console.py) the page's bars are
drawn under the console's CSP. tests/cluster/test_balancer_http.py watches a
real balancing run.
"""

from __future__ import annotations

import re
import time

from tests.conftest import wait_until
from tests.interop._rest import Rest, rest_port
from tests.interop._support import create_topic, unique_topic
from tests.interop.test_console import browser, console_url, http  # noqa: F401 (browser: a fixture)
from tests.interop.test_metrics import metrics_port, scrape, value

PARTITIONS = 4
LISTENERS = {
    "rest.listener": "http://127.0.0.1:0",
    "console.listener": "http://127.0.0.1:0",
    "metrics.listener": "http://127.0.0.1:0",
}


def balancer_status(rest: Rest, cluster_id: str, want_state: str) -> dict:
    """The balancer resource once its state is ``want_state`` (the first tick may come later)."""
    seen = {}

    def answered():
        status, body, raw = rest.get(f"/v3/clusters/{cluster_id}/balancer")
        assert status == 200, raw
        seen["body"] = body
        return body["state"] == want_state
    assert wait_until(answered, timeout_s=15), seen
    return seen["body"]


def test_balancer_status_rest_console_and_metrics_on_one_broker(broker_factory):
    broker = broker_factory({**LISTENERS, "balancer.mode": "node_add"})
    topic = unique_topic("balanced")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    rest = Rest(rest_port(broker))
    cluster_id = rest.cluster_id()

    def counted():
        body = balancer_status(rest, cluster_id, "ready")
        # Once a tick has looked at the topic: it found nothing to move, so balanced since then.
        placed = [{k: s[k] for k in ("broker_id", "replicas", "leaders")} for s in body["distribution"]] == [{"broker_id": 1, "replicas": PARTITIONS, "leaders": PARTITIONS}]
        return body if placed and body["balanced_since_ms"] is not None else None
    body = wait_until(counted, timeout_s=15)
    assert body, balancer_status(rest, cluster_id, "ready")
    assert body["kind"] == "KafkaBalancerStatus" and body["cluster_id"] == cluster_id
    assert body["moves_in_flight"] == 0 and body["bytes_to_move"] == 0  # ready: nothing of the balancer's moves
    assert body["distribution_before"] == [] and body["distribution_before_ms"] is None
    assert body["broker_tasks"]["related"].endswith(f"/v3/clusters/{cluster_id}/brokers/-/tasks")
    status, tasks, raw = rest.get(f"/v3/clusters/{cluster_id}/brokers/-/tasks")
    assert (status, tasks["kind"], tasks["data"]) == (200, "KafkaBrokerTaskList", []), raw

    # remove-broker: an unknown broker, a shutdown pybroker does not do, a drain that strands replicas.
    status, error, raw = rest.request("DELETE", f"/v3/clusters/{cluster_id}/brokers/99")
    assert status == 404 and "not registered" in error["message"], raw
    status, error, raw = rest.request("DELETE", f"/v3/clusters/{cluster_id}/brokers/1?should_shutdown=true")
    assert status == 400 and "does not stop" in error["message"], raw
    status, error, raw = rest.request("DELETE", f"/v3/clusters/{cluster_id}/brokers/1")
    assert status == 400 and "replication factor of 1" in error["message"], raw
    status, tasks, raw = rest.get(f"/v3/clusters/{cluster_id}/brokers/1/tasks")
    assert (status, tasks["data"]) == (200, []), raw

    status, document, _ = rest.get("/v3/openapi.json")
    paths = document["paths"]
    assert "get" in paths["/v3/clusters/{cluster_id}/balancer"] and "delete" in paths["/v3/clusters/{cluster_id}/brokers/{broker_id}"]
    assert "202" in paths["/v3/clusters/{cluster_id}/brokers/{broker_id}"]["delete"]["responses"]

    # The console page: the state, and a bar per broker with its counts.
    status, _, page = http(console_url(broker) + "/balancer")
    assert status == 200, page
    assert re.search(r'id="balancer-state">ready<', page), page
    assert re.search(r'id="moves-in-flight">0<', page) and re.search(r'id="bytes-to-move">0<', page), page
    row = re.search(r'<tr data-broker="1">(.*?)</tr>', page, re.DOTALL).group(1)
    replicas_cell = re.search(r'<td class="replicas">(.*?)</td>', row, re.DOTALL).group(1)
    assert '<rect class="bar-now"' in replicas_cell and f">{PARTITIONS}</text>" in replicas_cell, row
    assert re.search(r'<td class="replicas-before"><span class="muted">-</span></td>', row), row
    assert "no run since this controller became active" in page

    # Metrics: this node is the active controller.
    samples = scrape(metrics_port(broker))
    assert value(samples, "pybroker_balancer_state", state="ready") == 1
    assert value(samples, "pybroker_balancer_state", state="in_progress") == 0
    assert value(samples, "pybroker_balancer_moves_in_flight") == 0
    assert value(samples, "pybroker_balancer_broker_replicas", broker="1") == PARTITIONS
    assert value(samples, "pybroker_balancer_broker_leaders", broker="1") == PARTITIONS
    assert value(samples, "pybroker_balancer_seconds_since_balanced") >= 0
    assert value(samples, "pybroker_balancer_bytes_to_move") == 0  # ready: nothing to copy
    # The broker's disk use, once a heartbeat has carried its report (one every few seconds).
    deadline = time.monotonic() + 30
    while not [k for k in samples if k[0] == "pybroker_balancer_broker_disk_used_ratio"] and time.monotonic() < deadline:
        time.sleep(0.5)
        samples = scrape(metrics_port(broker))
    assert 0 < value(samples, "pybroker_balancer_broker_disk_used_ratio", broker="1") < 1


def test_a_balancer_that_is_off_says_so_everywhere(broker_factory):
    broker = broker_factory(dict(LISTENERS))  # the test harness's balancer.mode=off
    rest = Rest(rest_port(broker))
    cluster_id = rest.cluster_id()
    body = balancer_status(rest, cluster_id, "off")
    assert [{k: s[k] for k in ("broker_id", "replicas", "leaders")} for s in body["distribution"]] == [{"broker_id": 1, "replicas": 0, "leaders": 0}], body
    status, error, raw = rest.request("DELETE", f"/v3/clusters/{cluster_id}/brokers/1")
    assert status == 400 and "balancer.mode is off" in error["message"], raw
    status, _, page = http(console_url(broker) + "/balancer")
    assert status == 200 and re.search(r'id="balancer-state">off<', page), page
    samples = scrape(metrics_port(broker))
    assert value(samples, "pybroker_balancer_state", state="off") == 1
    assert value(samples, "pybroker_balancer_moves_in_flight") == 0
    assert not [k for k in samples if k[0] == "pybroker_balancer_seconds_since_balanced"]


def test_the_balancer_page_in_chromium(broker_factory, request, tmp_path):
    """The page as a browser draws it under the console's CSP: the bars are SVG
    attributes, not inline style, so they render at their width."""
    driver = request.getfixturevalue("browser")  # skips without chromium
    from selenium.webdriver.common.by import By

    broker = broker_factory({"console.listener": "http://127.0.0.1:0", "balancer.mode": "node_add"})
    create_topic(broker.bootstrap, unique_topic("drawn"), partitions=PARTITIONS)
    url = console_url(broker)
    driver.get(url + "/")
    driver.find_element(By.LINK_TEXT, "Balancer").click()

    def drawn():
        driver.refresh()
        bars = driver.find_elements(By.CSS_SELECTOR, '#distribution tr[data-broker="1"] td.replicas rect.bar-now')
        return bars and driver.find_element(By.ID, "balancer-state").text == "ready" and bars[0].size["width"] > 0
    assert wait_until(drawn, timeout_s=15), driver.page_source
    label = driver.find_element(By.CSS_SELECTOR, '#distribution tr[data-broker="1"] td.leaders text.bar-label').text
    assert label == str(PARTITIONS)
    driver.save_screenshot(str(tmp_path / "balancer.png"))
