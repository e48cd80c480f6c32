"""The web console and the metrics on three nodes: one node's console shows the
whole cluster (messages of partitions led elsewhere, a group coordinated
elsewhere with its members and lag over time), and the group coordinator's
metrics report lag for partitions whose log is on other nodes; a KIP-848
consumer group coordinated elsewhere is shown with its type and its member's
current and target assignment.

The topic has replication factor 1, so each partition's log is on one node
only: a page of another node can show its records only by asking that node.
"""

from __future__ import annotations

import html
import re
import time
import urllib.request
import uuid

import pytest

from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until
from tests.ports import free_ports
from protocol.consumer_offsets import partition_for_group
from tests.conftest import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer

PARTITIONS = 3
# A row of the group page's partition table: partition, committed, high watermark, lag.
GROUP_ROW = re.compile(
    r"<tr><td><a href=\"/topic\?name=[^\"]+\">[^<]+</a></td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td>"
)
FIRST = 20  # records per partition before the group commits
MORE = 7  # records per partition produced after


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=15) as response:
        assert response.status == 200, url
        return response.read().decode()


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition in range(PARTITIONS):
        for i in range(start, start + count):
            producer.produce(topic, value=f"p{partition}-v{i}".encode(), key=f"k{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def lag_metrics(text: str, group: str, topic: str) -> dict[int, float]:
    found = {}
    for line in text.splitlines():
        if (
            line.startswith("kafka_consumergroup_lag{")
            and f'consumergroup="{group}"' in line
            and f'topic="{topic}"' in line
        ):
            partition = int(re.search(r'partition="(\d+)"', line).group(1))
            found[partition] = float(line.rsplit(" ", 1)[1])
    return found


@pytest.fixture
def cluster(tmp_path):
    cluster = ReplicatedCluster(tmp_path)
    # Not one of the ports the cluster picked for its listeners: picked, not
    # yet bound, so a second pick could hand one of them out again (a CI run
    # failed with a controller port in use).
    taken = set(cluster.controller_ports.values()) | set(cluster.client_ports.values())
    ports = free_ports(2 * len(NODE_IDS), taken)
    cluster.console_ports, cluster.metrics_ports = {}, {}
    for index, node in enumerate(NODE_IDS):
        cluster.console_ports[node], cluster.metrics_ports[node] = ports[2 * index], ports[2 * index + 1]
        cluster.overrides[node]["console.listener"] = f"http://127.0.0.1:{cluster.console_ports[node]}"
        cluster.overrides[node]["console.lag.history.ms"] = "60000"  # a sample a second
        cluster.overrides[node]["metrics.listener"] = f"http://127.0.0.1:{cluster.metrics_ports[node]}"
        cluster.nodes[node] = BrokerProcess(cluster.nodes[node].data_dir, cluster.overrides[node])
    cluster._history = [(n, p) for n, p in cluster.nodes.items()]
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_one_console_shows_the_whole_cluster(cluster):
    topic = f"whole-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=1, config={"min.insync.replicas": "1"})

    # Every node's metadata has the topic with a leader for each partition (the consoles read their image).
    def placed():
        views = [cluster.describe(topic, via=node) for node in NODE_IDS]
        if all(v is not None and len(v) == PARTITIONS and all(s.leader >= 0 for s in v.values()) for v in views):
            return views[0]
        return None

    state = wait_until(placed, 15)
    assert state, {node: cluster.describe(topic, via=node) for node in NODE_IDS}
    leaders = {p: s.leader for p, s in state.items()}
    assert len(set(leaders.values())) == PARTITIONS, f"expected the partitions spread over the nodes: {leaders}"
    produce(cluster.bootstrap(), topic, 0, FIRST)

    # A group whose members commit, and that stays a member (no further polls).
    group = f"cg-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap(),
            "group.id": group,
            "client.id": "console-cluster-test",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 30
        while got < PARTITIONS * FIRST and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got += 1
        assert got == PARTITIONS * FIRST
        consumer.commit(asynchronous=False)
        admin = cluster.admin()  # kept: the futures resolve only while their client lives
        coordinator = admin.describe_consumer_groups([group])[group].result(timeout=20).coordinator.id
        viewer = next(n for n in NODE_IDS if n != coordinator)
        console = f"http://127.0.0.1:{cluster.console_ports[viewer]}"

        # Messages of every partition, two of them led by other nodes, one by this one.
        for partition in range(PARTITIONS):
            page = get(f"{console}/messages?topic={topic}&partition={partition}&offset=0&limit=50")
            values = re.findall(r"p\d-v\d+", page)
            assert values == [f"p{partition}-v{i}" for i in range(FIRST)], (partition, leaders[partition], page[-2000:])
        # A search and a start offset on a partition led elsewhere.
        remote_partition = next(p for p, leader in leaders.items() if leader != viewer)
        page = get(f"{console}/messages?topic={topic}&partition={remote_partition}&search=v13")
        assert re.findall(r"p\d-v\d+", page) == [f"p{remote_partition}-v13"]
        page = get(f"{console}/messages?topic={topic}&partition={remote_partition}&offset=15")
        assert re.findall(r"p\d-v\d+", page) == [f"p{remote_partition}-v{i}" for i in range(15, FIRST)]
        # Sizes of every partition, from their leaders.
        page = get(f"{console}/topic?name={topic}")
        assert "unavailable" not in page and page.count("not here") == 0, page

        # The group, coordinated by another node: listed, its member, its lag (0 so far).
        groups_page = get(f"{console}/groups")
        assert group in groups_page and f"<td>{coordinator}</td>" in groups_page
        group_page = html.unescape(get(f"{console}/group?id={group}"))
        assert "console-cluster-test" in group_page
        assert f"coordinator node {coordinator}" in group_page
        for partition in range(PARTITIONS):
            assert f"{topic}-{partition}" in group_page  # in the member's assignment
        rows = GROUP_ROW.findall(group_page)
        assert sorted((int(p), int(c), int(h), int(lag)) for p, c, h, lag in rows) == [
            (p, FIRST, FIRST, 0) for p in range(PARTITIONS)
        ], group_page

        # Its lag series: 0 on every partition, then MORE after more records.
        def chart_lags() -> dict[str, str]:
            svg = html.unescape(get(f"{console}/group/lag.svg?id={group}"))
            return dict(re.findall(rf"({re.escape(topic)}-\d): (\d+)</text>", svg))

        assert wait_until(lambda: chart_lags() == {f"{topic}-{p}": "0" for p in range(PARTITIONS)}, 15), chart_lags()
        produce(cluster.bootstrap(), topic, FIRST, MORE)
        assert wait_until(lambda: chart_lags() == {f"{topic}-{p}": str(MORE) for p in range(PARTITIONS)}, 15), (
            chart_lags()
        )
        points = int(re.search(r'data-points="(\d+)"', get(f"{console}/group/lag.svg?id={group}")).group(1))
        assert points >= 2 * PARTITIONS

        # The coordinator's own console: the group read in-process, high watermarks from the leaders.
        own = html.unescape(get(f"http://127.0.0.1:{cluster.console_ports[coordinator]}/group?id={group}"))
        assert sorted(int(lag) for *_, lag in GROUP_ROW.findall(own)) == [MORE] * PARTITIONS, own

        # The coordinator's metrics: lag of every partition, two of whose logs are elsewhere.
        metrics_url = f"http://127.0.0.1:{cluster.metrics_ports[coordinator]}/metrics"
        expected = {p: float(MORE) for p in range(PARTITIONS)}
        assert wait_until(lambda: lag_metrics(get(metrics_url), group, topic) == expected, 20), lag_metrics(
            get(metrics_url), group, topic
        )
        # Another node does not coordinate the group: no series for it there (per-broker metrics, as Kafka's).
        assert lag_metrics(get(f"http://127.0.0.1:{cluster.metrics_ports[viewer]}/metrics"), group, topic) == {}

        # A KIP-848 consumer group coordinated by another node: its type, epochs and its member's
        # current and target assignment, read there with ConsumerGroupDescribe.
        offsets_topic = admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
        names = (f"kip848-{uuid.uuid4().hex[:6]}" for _ in range(1000))
        kip848 = next(g for g in names if offsets_topic.partitions[
            partition_for_group(g, len(offsets_topic.partitions))].leader not in (viewer, -1))
        member = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": kip848, "group.protocol": "consumer",
                           "client.id": "kip848-cluster-test", "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            member.subscribe([topic])
            assert wait_until(lambda: member.poll(0.2) is None and len(member.assignment()) == PARTITIONS, 30)
            row = re.compile(rf">{kip848}</a></td><td>consumer</td><td>consumer</td><td>(\d+)</td><td>Stable</td><td>1</td>")
            assert wait_until(lambda: row.search(get(f"{console}/groups")), 30), get(f"{console}/groups")
            page = html.unescape(get(f"{console}/group?id={kip848}"))
            assert "consumer group (KIP-848), assignor uniform" in page and "kip848-cluster-test" in page, page
            cells = re.findall(r"<td>(.*?)</td>", re.search(r'<table id="members">(.*?)</table>', page, re.S).group(1))
            assert cells[6] == cells[5] == ", ".join(f"{topic}-{p}" for p in range(PARTITIONS)), cells  # at its target
        finally:
            member.close()

        # A node that does not answer: the pages say so within the reader's timeout, never hang.
        stopped = leaders[remote_partition]
        cluster.pause(stopped)
        started = time.monotonic()
        page = html.unescape(get(f"{console}/messages?topic={topic}&partition={remote_partition}&offset=0"))
        assert time.monotonic() - started < 12
        assert f"{topic}-{remote_partition}" in page and ("did not answer" in page or "has no leader" in page), page[
            -3000:
        ]
        assert not re.findall(r"p\d-v\d+", page)
        started = time.monotonic()
        page = html.unescape(get(f"{console}/topic?name={topic}"))
        assert time.monotonic() - started < 12 and "unavailable" in page
        cluster.resume(stopped)
    finally:
        consumer.close()
