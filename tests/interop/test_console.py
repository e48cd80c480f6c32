"""The web console (console.listener) of a real broker process: end to end in headless
Chromium (Debian's chromium and chromium-driver, driven by Selenium), and over plain
HTTP for what a browser would hide (CSRF refusals, read-only mode, bad requests).

The browser test opens the overview, creates a topic through the form, produces
with confluent-kafka (one value is a ``<script>``), sees the messages in the
browser (the script shown as text, never run), starts a consumer group and
watches its lag graph change in the open page (the page's script re-fetches the
SVG). A screenshot of each page is saved under the test's tmp dir; with
PYBROKER_CONSOLE_SCREENSHOT=path the overview is copied there too (docs/operations.md's
docs/console-overview.png is made that way).
"""

from __future__ import annotations

import html
import os
import re
import shutil
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from broker.cli import EXIT_CONFIG, EXIT_LISTENER
from tests.conftest import wait_until
from tests.interop._support import Msg, confluent_consumer, produce, unique_topic
from tests.interop.test_metrics import start_refused

CONSOLE_LINE = re.compile(r"console: serving the web console on http://[^:]+:(?P<port>\d+)/")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SCRIPT_VALUE = "<script>document.title='pwned';window.pwned=1</script>"


def console_url(broker) -> str:
    match = wait_until(lambda: CONSOLE_LINE.search(broker.log_text()), timeout_s=10)
    assert match, broker.log_text()
    return f"http://127.0.0.1:{match.group('port')}"


def http(url: str, data: dict | None = None, cookie: str | None = None, content_type: str = "application/x-www-form-urlencoded"):
    """(status, headers, body) without following redirects."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    body = urllib.parse.urlencode(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, method="POST" if data is not None else "GET")
    if data is not None:
        request.add_header("Content-Type", content_type)
    if cookie:
        request.add_header("Cookie", cookie)
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=10) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


def session(url: str) -> tuple[str, str]:
    """A session cookie and its CSRF token, as a browser gets them from a page."""
    status, headers, body = http(url + "/topics")
    assert status == 200
    cookie = headers["Set-Cookie"].split(";")[0]
    token = re.search(r'name="csrf_token" value="([^"]+)"', body).group(1)
    return cookie, token


def submit(url: str, path: str, form: dict, cookie: str) -> tuple[str, str]:
    """Post a form and follow its redirect as the browser would: (page path, the message it shows once)."""
    status, headers, _ = http(url + path, form, cookie)
    assert status == 303, (status, headers)
    location = headers["Location"]
    status, _, page = http(url + location, cookie=cookie)
    flash = re.search(r'<p class="flash (?:ok|err)" id="flash(?:-error)?">(.*?)</p>', page)
    return location, html.unescape(flash.group(1)) if flash else ""


# --------------------------------------------------------------------------- over HTTP


def test_forms_need_the_sessions_token_and_pages_escape(broker_factory):
    broker = broker_factory({"console.listener": "http://127.0.0.1:0"})
    url = console_url(broker)
    cookie, token = session(url)
    topic = unique_topic("console-http")
    # No token, another session's token: refused, nothing created.
    assert http(url + "/topics/create", {"name": topic, "partitions": "1"}, cookie)[0] == 403
    _, other_token = session(url)
    assert http(url + "/topics/create", {"name": topic, "partitions": "1", "csrf_token": other_token}, cookie)[0] == 403
    assert http(url + f"/topic?name={topic}")[0] == 404
    # With it: created through CreateTopics, and the broker's own validation answers bad input.
    location, shown = submit(url, "/topics/create", {"name": topic, "partitions": "2", "csrf_token": token, "configs": "retention.ms=3600123"}, cookie)
    assert location == f"/topic?name={topic}" and shown == f"created topic {topic}"
    assert http(url + location, cookie=cookie)[2].count('class="flash') == 0  # shown once
    # The message comes from the session, not the URL: a link cannot make the console say anything.
    assert 'class="flash' not in http(url + f"/topic?name={topic}&msg=hello&err=hello")[2]
    status, _, page = http(url + f"/topic?name={topic}")
    assert status == 200 and page.count("/messages?topic=") >= 2 and "3600123" in page
    assert "TOPIC_ALREADY_EXISTS" in submit(url, "/topics/create", {"name": topic, "partitions": "1", "csrf_token": token}, cookie)[1]
    assert "INVALID_CONFIG" in submit(url, "/topic/config", {"name": topic, "key": "retention.ms", "value": "soon", "action": "set", "csrf_token": token}, cookie)[1]
    assert submit(url, "/topic/config", {"name": topic, "key": "retention.ms", "action": "delete", "csrf_token": token}, cookie)[1].startswith("deleted retention.ms")
    assert "3600123" not in http(url + f"/topic?name={topic}")[2]
    # Deleting wants the name typed again.
    assert "confirm" in submit(url, "/topic/delete", {"name": topic, "confirm": "", "csrf_token": token}, cookie)[1]
    assert http(url + f"/topic?name={topic}")[0] == 200
    assert submit(url, "/topic/delete", {"name": topic, "confirm": topic, "csrf_token": token}, cookie)[1] == f"deleted topic {topic}"
    assert wait_until(lambda: http(url + f"/topic?name={topic}")[0] == 404, timeout_s=10)
    # Escaping: a record whose value is markup is text in the page; the CSP forbids inline script anyway.
    produce("confluent", broker.bootstrap, "console-escape", [Msg(key=b'"><img src=x>', value=SCRIPT_VALUE.encode())])
    status, headers, page = http(url + "/messages?topic=console-escape&partition=0&offset=0")
    assert status == 200
    assert "<script>document.title" not in page and "&lt;script&gt;document.title=&#39;pwned&#39;" in page
    assert '"><img' not in page and "&#34;&gt;&lt;img src=x&gt;" in page
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    # Browsing by time (milliseconds or ISO), as hex, a page at a time.
    now_ms = int(time.time() * 1000)
    stamped = [Msg(key=None, value=v, timestamp=now_ms - 3000 + 1000 * i) for i, v in enumerate((b"AB", b"CD", b"EF"))]
    produce("confluent", broker.bootstrap, "console-times", stamped)
    offsets = lambda page: [int(o) for o in re.findall(r"<tr><td>(\d+)</td><td>", page)]
    assert offsets(http(url + f"/messages?topic=console-times&timestamp={now_ms - 2000}")[2]) == [1, 2]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((now_ms - 1000) / 1000)) + f".{(now_ms - 1000) % 1000:03d}Z"
    assert offsets(http(url + f"/messages?topic=console-times&timestamp={iso}")[2]) == [2]
    page = http(url + "/messages?topic=console-times&offset=0&limit=2&decoding=hex")[2]
    assert offsets(page) == [0, 1] and "<pre>41 42</pre>" in page and "offset=2" in page
    assert "not JSON" in http(url + "/messages?topic=console-times&offset=0&decoding=json")[2]
    assert "UNKNOWN_TOPIC_OR_PARTITION" in http(url + "/messages?topic=console-times&partition=7")[2]
    # Bad requests: wrong content type, too large a form, a non-integer offset, an unknown page.
    assert http(url + "/topics/create", {"csrf_token": token}, cookie, content_type="text/plain")[0] == 400
    assert http(url + "/messages?topic=console-escape&offset=abc")[0] == 400
    assert http(url + "/nowhere")[0] == 404
    status, _, _ = http(url + "/topics/create", {"name": "x" * 70_000, "csrf_token": token}, cookie)
    assert status == 413


def test_read_only_console_refuses_changes(broker_factory):
    broker = broker_factory({"console.listener": "http://127.0.0.1:0", "console.read.only": "true", "metrics.listener": "http://127.0.0.1:0"})
    url = console_url(broker)
    cookie = http(url + "/topics")[1]["Set-Cookie"].split(";")[0]
    _, _, page = http(url + "/topics", cookie=cookie)
    assert "create-topic" not in page and "read-only" in page
    assert http(url + "/topics/create", {"name": "nope", "partitions": "1", "csrf_token": "x"}, cookie)[0] == 403
    assert http(url + "/topic?name=nope")[0] == 404
    # With metrics.listener set, the charts add the endpoint's counters to the console's own samples.
    charts = http(url + "/charts.svg")[2]
    assert 'id="chart-messages_in"' in charts and 'id="chart-requests"' in charts and 'id="chart-log_bytes"' in charts


def test_a_bad_or_taken_console_listener_is_refused_in_one_line(tmp_path):
    code, lines = start_refused(tmp_path, **{"console.listener": "https://127.0.0.1:8080"})
    assert code == EXIT_CONFIG and len(lines) == 1 and "console.listener" in lines[0], lines
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, lines = start_refused(tmp_path, **{"console.listener": f"http://127.0.0.1:{port}"})
    assert code == EXIT_LISTENER and len(lines) == 1, lines
    assert f"http://127.0.0.1:{port} (console.listener)" in lines[0] and "another process uses that port" in lines[0]


# --------------------------------------------------------------------------- in Chromium


@pytest.fixture
def browser(tmp_path):
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("Debian's chromium and chromium-driver are not installed (apt-get install -y chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    yield driver
    driver.quit()


def test_console_end_to_end_in_chromium(broker_factory, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    broker = broker_factory({"console.listener": "http://127.0.0.1:0", "console.lag.history.ms": "60000"})
    url = console_url(broker)
    shots = tmp_path / "screenshots"
    shots.mkdir()

    def shot(name: str) -> None:
        browser.save_screenshot(str(shots / f"{name}.png"))

    wait = WebDriverWait(browser, 15)
    browser.get(url + "/")
    assert browser.find_element(By.ID, "brokers").text.count("active") == 1
    assert "leader" in browser.find_element(By.ID, "controllers").text  # the single node leads its own quorum
    shot("overview-empty")

    # Create a topic through the form (the page asks for confirmation first).
    topic = unique_topic("console-e2e")
    browser.get(url + "/topics")
    browser.find_element(By.ID, "new-topic-name").send_keys(topic)
    browser.find_element(By.ID, "new-topic-partitions").send_keys("3")
    browser.find_element(By.CSS_SELECTOR, "#create-topic button").click()
    wait.until(lambda d: _alert(d)).accept()
    wait.until(lambda d: d.find_elements(By.ID, "flash"))
    assert f"created topic {topic}" in browser.find_element(By.ID, "flash").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 3
    shot("topic")

    # Produce with confluent-kafka, see the messages, the <script> one as text.
    msgs = [Msg(key=f"k{i}".encode(), value=f'{{"n": {i}}}'.encode(), headers=(("source", b"test"),)) for i in range(20)]
    msgs.append(Msg(key=b"evil", value=SCRIPT_VALUE.encode()))
    produce("confluent", broker.bootstrap, topic, msgs, partition=0)
    browser.get(url + f"/messages?topic={topic}&partition=0&offset=0&decoding=json")
    values = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "#records td.value pre")]
    assert len(values) == 21
    assert values[3] == '{\n  "n": 3\n}'
    assert values[-1] == SCRIPT_VALUE and "not JSON" in browser.find_elements(By.CSS_SELECTOR, "#records td.value")[-1].text
    assert browser.title != "pwned" and browser.execute_script("return window.pwned === undefined")
    assert "source" in browser.find_elements(By.CSS_SELECTOR, "#records td.headers")[0].text
    shot("messages")
    browser.get(url + f"/messages?topic={topic}&partition=0&search=evil")
    assert [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#records td.key")] == ["evil"]

    # A consumer group reads 5 records and commits: lag 16, graphed.
    group = unique_topic("console-group")
    consumer = confluent_consumer(broker.bootstrap, {"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        read = 0
        deadline = time.monotonic() + 20
        while read < 5 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error() and message.partition() == 0:
                read += 1
                if read == 5:
                    consumer.commit(message=message, asynchronous=False)
        assert read == 5
        browser.get(url + f"/group?id={group}")
        chart = lambda d: d.find_element(By.ID, "lag-chart")
        wait.until(lambda d: f"{topic}-0: 16" in chart(d).text)
        before = chart(browser).get_attribute("outerHTML")
        assert "<polyline" in before or "<circle" in before
        shot("group")
        # More records: the open page's script re-fetches the chart, which now shows lag 46.
        produce("confluent", broker.bootstrap, topic, [Msg(key=None, value=b"more")] * 30, partition=0)
        WebDriverWait(browser, 15).until(lambda d: f"{topic}-0: 46" in chart(d).text)
        after = chart(browser).get_attribute("outerHTML")
        assert after != before and int(re.search(r'data-points="(\d+)"', after).group(1)) > int(re.search(r'data-points="(\d+)"', before).group(1))
        assert group in browser.find_element(By.TAG_NAME, "h1").text
        browser.refresh()
        first_row = browser.find_element(By.CSS_SELECTOR, "#group-partitions tbody tr").text.split()
        assert first_row[:5] == [topic, "0", "5", "51", "46"], first_row
        assert "rdkafka" in browser.find_element(By.ID, "members").text
        shot("group-lag")
    finally:
        consumer.close()

    # The navigation leads to the cluster links (none on this broker).
    browser.find_element(By.LINK_TEXT, "Links").click()
    wait.until(lambda d: d.find_elements(By.ID, "no-links"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "Cluster links"
    shot("links")

    browser.get(url + "/charts")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#charts svg.chart")) >= 4
    shot("charts")
    browser.get(url + "/")
    assert browser.find_element(By.ID, "under-count").text == "0"
    shot("overview")
    assert {p.name for p in shots.iterdir()} >= {"overview.png", "topic.png", "messages.png", "group-lag.png", "charts.png"}
    target = os.environ.get("PYBROKER_CONSOLE_SCREENSHOT")
    if target:
        shutil.copy(shots / "overview.png", Path(target))


def _alert(driver):
    from selenium.common.exceptions import NoAlertPresentException

    try:
        return driver.switch_to.alert
    except NoAlertPresentException:
        return False
