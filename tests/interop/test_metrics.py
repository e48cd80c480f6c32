"""The Prometheus endpoint (metrics.listener) of a real broker process, scraped over
HTTP and parsed with prometheus-client's own parser, under a confluent-kafka
(librdkafka) produce/consume load; the series caps; the refusals at start."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.cli import EXIT_CONFIG, EXIT_LISTENER
from tests.conftest import PROJECT_ROOT, wait_until
from tests.interop._support import Msg, confluent_consumer, create_topic, produce, unique_topic

METRICS_LINE = re.compile(r"metrics: serving Prometheus metrics on http://[^:]+:(?P<port>\d+)/metrics")
RECORDS = 50


def metrics_port(broker) -> int:
    match = METRICS_LINE.search(broker.log_text())
    assert match, broker.log_text()
    return int(match.group("port"))


def get(port: int, path: str = "/metrics", accept: str | None = None, method: str = "GET"):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    if accept:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.headers.get("Content-Type"), response.read().decode()


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """sample name and sorted labels -> value, through prometheus-client's parser."""
    _, _, text = get(port)
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def with_lag(port: int, group: str, topic: str):
    """A scrape that has the group's lag series, else None."""
    samples = scrape(port)
    return samples if value(samples, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="0") is not None else None


def listening_ports(pid: int) -> set[int]:
    """TCP ports the process listens on (Linux /proc): its socket inodes in LISTEN state."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as file:
                lines = file.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.fixture(scope="module")
def metrics_broker(tmp_path_factory):
    from tests.conftest import BrokerProcess

    broker = BrokerProcess(
        tmp_path_factory.mktemp("metrics-broker"),
        {"metrics.listener": "http://127.0.0.1:0", "metrics.group.series.max": "3"},
    ).start()
    yield broker
    broker.stop()


def test_values_move_under_a_produce_consume_load(metrics_broker):
    from confluent_kafka import TopicPartition

    port = metrics_port(metrics_broker)
    bootstrap = metrics_broker.bootstrap
    topic = unique_topic("metrics")
    create_topic(bootstrap, topic)
    before = scrape(port)
    assert value(before, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) in (None, 0.0)
    msgs = [Msg(key=b"k%d" % i, value=b"v" * (100 + i)) for i in range(RECORDS)]
    produce("confluent", bootstrap, topic, msgs, extra={"linger.ms": 5})

    after = scrape(port)
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == RECORDS
    # The batches are appended as received: the bytes in are the log's size.
    bytes_in = value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    assert bytes_in > RECORDS * 100
    assert bytes_in == value(after, "kafka_log_log_size", topic=topic, partition="0")
    assert value(after, "kafka_log_log_logendoffset", topic=topic, partition="0") == RECORDS
    assert value(after, "kafka_log_log_logstartoffset", topic=topic, partition="0") == 0
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total") >= RECORDS  # all topics
    produce_requests = value(after, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic)
    assert produce_requests >= 1
    assert value(after, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 0
    produce_count = sum(v for (name, labels), v in after.items() if name == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in labels)
    assert produce_count >= produce_requests
    assert value(after, "kafka_network_requestmetrics_totaltime_seconds_count", request="Produce") == produce_count
    assert value(after, "kafka_network_requestmetrics_totaltime_seconds_bucket", request="Produce", le="+Inf") == produce_count
    assert any(name == "kafka_network_requestmetrics_requests_total" and ("request", "Metadata") in labels for name, labels in after)
    assert value(after, "kafka_server_replicamanager_leadercount") >= 1
    assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(after, "kafka_controller_kafkacontroller_activecontrollercount") == 1

    # A group reads everything, commits half way, then at the end: its lag falls to 0.
    group = unique_topic("metrics-group")
    consumer = confluent_consumer(bootstrap, {"group.id": group})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen += 1
        assert seen == RECORDS
        connections = scrape(port)
        assert value(connections, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 1
        consumer.commit(offsets=[TopicPartition(topic, 0, RECORDS // 2)], asynchronous=False)
        half = wait_until(lambda: with_lag(port, group, topic))
        assert value(half, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="0") == RECORDS - RECORDS // 2
        assert value(half, "kafka_consumergroup_current_offset", consumergroup=group, topic=topic, partition="0") == RECORDS // 2
        consumer.commit(offsets=[TopicPartition(topic, 0, RECORDS)], asynchronous=False)
    finally:
        consumer.close()
    done = scrape(port)
    assert value(done, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="0") == 0
    bytes_out = value(done, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic)
    assert bytes_out >= bytes_in  # everything was read at least once
    assert value(done, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=topic) >= 1
    assert value(done, "kafka_network_requestmetrics_totaltime_seconds_count", request="Fetch") >= 1
    assert value(done, "pybroker_event_loop_lag_seconds_count") > 0


def test_group_lag_series_are_capped(metrics_broker):
    from confluent_kafka import TopicPartition

    port = metrics_port(metrics_broker)
    bootstrap = metrics_broker.bootstrap
    topic = unique_topic("metrics-capped")
    create_topic(bootstrap, topic, partitions=5)
    group = unique_topic("metrics-many")
    consumer = confluent_consumer(bootstrap, {"group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(5)], asynchronous=False)
    finally:
        consumer.close()
    samples = scrape(port)
    lag_series = [labels for name, labels in samples if name == "kafka_consumergroup_lag"]
    assert len(lag_series) == 3  # metrics.group.series.max
    assert value(samples, "pybroker_metrics_series_dropped", family="group_lag") >= 2


def test_http_paths_and_formats(metrics_broker):
    port = metrics_port(metrics_broker)
    status, content_type, text = get(port)
    assert status == 200 and content_type.startswith("text/plain")
    assert "# TYPE kafka_server_brokertopicmetrics_bytesin_total counter" in text
    status, content_type, text = get(port, accept="application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text") and text.rstrip().endswith("# EOF")
    status, _, text = get(port, method="HEAD")
    assert status == 200 and text == ""
    with pytest.raises(urllib.error.HTTPError) as refused:
        get(port, "/")
    assert refused.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as refused:
        get(port, method="POST")
    assert refused.value.code == 405


def test_topic_series_are_capped(broker_factory):
    broker = broker_factory({"metrics.listener": "http://127.0.0.1:0", "metrics.topic.series.max": "2"})
    port = metrics_port(broker)
    topics = sorted(f"capped-{i}" for i in range(5))
    for topic in topics:
        create_topic(broker.bootstrap, topic)
    samples = scrape(port)
    sized = {dict(labels)["topic"] for name, labels in samples if name == "kafka_log_log_size"}
    assert sized == set(topics[:2])
    assert value(samples, "pybroker_metrics_series_dropped", family="topic") == 3
    # The all-topics series stays whatever the cap.
    assert value(samples, "kafka_server_brokertopicmetrics_bytesin_total") == 0


def test_the_listener_is_off_by_default(broker_factory):
    broker = broker_factory()
    assert "metrics:" not in broker.log_text()
    assert listening_ports(broker.process.pid) == {broker.port}


def test_the_listener_is_bound_when_configured(metrics_broker):
    assert listening_ports(metrics_broker.process.pid) == {metrics_broker.port, metrics_port(metrics_broker)}


# --------------------------------------------------------------------------- refusals at start


def start_refused(tmp_path, **overrides) -> tuple[int, list[str]]:
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "logs"), **overrides}
    command = [sys.executable, "-m", "broker", "start"]
    for key, raw in settings.items():
        command += ["--override", f"{key}={raw}"]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path, check=False)
    assert "Traceback" not in result.stderr and "pybroker started" not in result.stdout, result.stderr
    return result.returncode, result.stderr.splitlines()


@pytest.mark.parametrize("raw", ["127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1:70000", "http://host:1/path"])
def test_a_bad_metrics_listener_is_refused_in_one_line(tmp_path, raw):
    code, lines = start_refused(tmp_path, **{"metrics.listener": raw})
    assert code == EXIT_CONFIG and len(lines) == 1 and "metrics.listener" in lines[0], lines


def test_a_metrics_port_in_use_is_a_listener_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, lines = start_refused(tmp_path, **{"metrics.listener": f"http://127.0.0.1:{port}"})
    assert code == EXIT_LISTENER and len(lines) == 1, lines
    assert f"http://127.0.0.1:{port} (metrics.listener)" in lines[0] and "another process uses that port" in lines[0]


def test_idle_connections_to_the_endpoint_are_bounded(metrics_broker):
    """Connections that send nothing hold a slot until their head times out; past
    MAX_HTTP_CONNECTIONS new ones are closed at once, and scrapes work again after."""
    from broker.http.metrics import MAX_HTTP_CONNECTIONS

    port = metrics_port(metrics_broker)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(MAX_HTTP_CONNECTIONS)]
    try:
        time.sleep(0.2)  # accepted by the broker
        extra = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            try:
                extra.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = extra.recv(100)
            except ConnectionResetError:  # closed before the request arrived
                answer = b""
            assert answer == b""  # closed without an answer
        finally:
            extra.close()
    finally:
        for sock in idle:
            sock.close()
    assert wait_until(lambda: _scrapes(port))


def _scrapes(port: int) -> bool:
    try:
        return get(port)[0] == 200
    except (urllib.error.URLError, ConnectionError):
        return False
