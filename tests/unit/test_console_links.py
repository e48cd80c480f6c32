"""The console's Links and mirror pages (broker/http/console/links.py) over a fake
broker and a fake cluster reader: links and states from the image, partitions
joined from every live broker's DescribeMirrors answer, a broker that does not
answer named, the lag over time sampled as a sum (records) and a max (ms), and
every user-given name escaped."""

from __future__ import annotations

import asyncio
import re
import uuid
from types import SimpleNamespace

from broker.config import MetricsListener
from broker.http.cluster_reader import NodeUnavailable
from broker.http.console.history import History
from broker.http.console.links import cluster_mirrors, link_rows, mirror_detail
from broker.http.console.server import Console
from controller.metadata.image import ClusterLink, MetadataImage, MirrorTopic, PartitionImage, TopicImage
from controller.metadata.records import MIRROR_ACTIVE, MIRROR_FAILED_OVER
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

R = struct_classes(APIS_BY_NAME["DescribeMirrors"].response)
EVIL = '<b id="x">"east"&'
LINK = ClusterLink(uuid.uuid4(), EVIL, {"bootstrap.servers": "src-1:9092,<src-2>:9092"})
QUIET = ClusterLink(uuid.uuid4(), "quiet", {"bootstrap.servers": "other:9092"})
ORDERS, STOPPED = uuid.uuid4(), uuid.uuid4()
MIRROR_NAME = "orders<script>"


def _partitions(count: int, leader_of) -> dict:
    return {p: PartitionImage(p, (1, 2), (1, 2), leader_of(p), 3, 3) for p in range(count)}


IMAGE = MetadataImage(
    brokers={1: SimpleNamespace(fenced=False), 2: SimpleNamespace(fenced=False), 3: SimpleNamespace(fenced=True)},
    topics={
        MIRROR_NAME: TopicImage(MIRROR_NAME, ORDERS, _partitions(3, lambda p: 1 if p == 0 else 2)),
        "stopped": TopicImage("stopped", STOPPED, _partitions(1, lambda p: 1)),
    },
    topic_names_by_id={ORDERS: MIRROR_NAME, STOPPED: "stopped"},
    cluster_links={EVIL: LINK, "quiet": QUIET},
    mirror_topics={
        ORDERS: MirrorTopic(ORDERS, LINK.link_id, "orders", MIRROR_ACTIVE),
        STOPPED: MirrorTopic(STOPPED, LINK.link_id, "stopped-src", MIRROR_FAILED_OVER, "failed over by <admin>", {0: (77, 2)}),
    },
)


def _partition(index, leader, *, source_hw, end, lag_ms, error=ErrorCode.NONE, message=None, stop=-1):
    return R.DescribedMirrorPartition(
        partition_index=index, leader_id=leader, error_code=error, error_message=message,
        local_log_end_offset=end, local_high_watermark=end, source_high_watermark=source_hw,
        lag_records=max(source_hw - end, 0) if source_hw >= 0 else -1, lag_ms=lag_ms, last_fetch_ms=1_700_000_000_123, stop_offset=stop,
    )


def _answer(node_id, partitions_by_topic):
    topics = []
    for name, partitions in partitions_by_topic.items():
        mirror = IMAGE.mirror_of(name)
        topics.append(R.DescribedMirror(
            mirror_topic=name, error_code=ErrorCode.NONE, link_name=EVIL, source_topic=mirror.source_topic,
            state=mirror.state, reason=mirror.reason, partitions=partitions,
        ))
    return R.DescribeMirrorsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, topics=topics)


ANSWERS = {
    1: _answer(1, {
        MIRROR_NAME: [_partition(0, 1, source_hw=100, end=60, lag_ms=1500)],
        "stopped": [_partition(0, 1, source_hw=-1, end=77, lag_ms=-1, stop=77)],
    }),
    2: _answer(2, {MIRROR_NAME: [
        _partition(1, 2, source_hw=50, end=45, lag_ms=400),
        _partition(2, 2, source_hw=30, end=30, lag_ms=0, error=ErrorCode.NETWORK_EXCEPTION, message="the source does not answer"),
    ]}),
}


class FakeReader:
    """Answers DescribeMirrors as the nodes in ``answers`` would; the others are unavailable."""

    def __init__(self, answers):
        self.answers = answers
        self.asked = []

    async def describe_mirrors(self, node_id, topics=None):
        self.asked.append((node_id, topics))
        if node_id not in self.answers:
            raise NodeUnavailable(f"node {node_id} did not answer DescribeMirrors: timed out")
        answer = self.answers[node_id]
        if topics is None:
            return answer
        return R.DescribeMirrorsResponse(throttle_time_ms=0, error_code=0, topics=[t for t in answer.topics if t.mirror_topic in topics])

    def close(self):
        pass


def _broker(image=IMAGE):
    return SimpleNamespace(node_id=1, image=image, is_broker=True, metrics=None, config={})


def test_links_list_every_link_with_its_mirrors_states_lag_and_errors():
    reader = FakeReader(ANSWERS)
    rows, notes = asyncio.run(link_rows(_broker(), reader))
    assert notes == []
    assert sorted(n for n, _ in reader.asked) == [1, 2]  # the fenced broker 3 is not asked
    evil, quiet = rows
    assert (evil["name"], evil["bootstrap"]) == (EVIL, "src-1:9092,<src-2>:9092")
    assert (quiet["name"], quiet["mirrors"]) == ("quiet", [])
    orders, stopped = evil["mirrors"]
    # Records: the sum over partitions (40 + 5 + 0); ms: the largest.
    assert (orders["topic"], orders["state"], orders["partitions"], orders["lag_records"], orders["lag_ms"]) == (MIRROR_NAME, "ACTIVE", 3, 45, 1500)
    assert orders["errors"] == ["NETWORK_EXCEPTION: the source does not answer"]
    assert (stopped["state"], stopped["reason"], stopped["lag_records"], stopped["lag_ms"]) == ("FAILED_OVER", "failed over by <admin>", None, None)
    assert evil["errors"] == ["NETWORK_EXCEPTION: the source does not answer"]


def test_a_broker_that_does_not_answer_is_named_and_its_partitions_are_not_described():
    reader = FakeReader({1: ANSWERS[1]})
    detail = asyncio.run(mirror_detail(_broker(), reader, MIRROR_NAME))
    assert reader.asked == [(1, [MIRROR_NAME]), (2, [MIRROR_NAME])]
    assert detail["notes"] == ["node 2 unavailable: node 2 did not answer DescribeMirrors: timed out"]
    p0, p1, p2 = detail["partition_rows"]
    assert (p0["described"], p0["source_hw"], p0["log_end"], p0["lag_records"], p0["lag_ms"]) == (True, 100, 60, 40, 1500)
    assert (p1["described"], p1["leader"], p2["described"]) == (False, 2, False)
    assert (detail["lag_records"], detail["lag_ms"]) == (40, 1500)
    assert asyncio.run(mirror_detail(_broker(), reader, "not-a-mirror")) is None


def test_no_mirror_topics_no_request():
    reader = FakeReader(ANSWERS)
    image = MetadataImage(cluster_links={"quiet": QUIET})
    rows, notes = asyncio.run(link_rows(_broker(image), reader))
    assert reader.asked == [] and notes == [] and rows[0]["mirrors"] == []


def test_the_lag_over_time_is_sampled_per_mirror_topic():
    reader = FakeReader(ANSWERS)
    history = History(_broker(), 600_000, reader)
    views = asyncio.run(cluster_mirrors(_broker(), reader)).views
    history._record_mirror_lag(views, 1_000, 0)
    history._record_mirror_lag(views, 2_000, 0)
    records, millis = history.mirror_lag_points(MIRROR_NAME)
    assert records == [(1_000, 45), (2_000, 45)] and millis == [(1_000, 1500), (2_000, 1500)]
    # A stopped mirror whose partitions tell no lag has no series (a gap, not a made-up 0).
    assert history.mirror_lag_points("stopped") == ([], [])
    # Samples older than the window go, and with them an empty series.
    history._record_mirror_lag({}, 700_000, 650_000)
    assert MIRROR_NAME not in history.mirror_lag


def _console(reader):
    console = Console(_broker(), MetricsListener("127.0.0.1", 0), read_only=True, history_ms=600_000)
    console.reader = reader
    console.history.reader = reader
    return console


def test_the_pages_escape_link_and_topic_names_and_show_the_numbers():
    console = _console(FakeReader(ANSWERS))
    session = ("s", "t")
    page = asyncio.run(console._get("/links", {}, session, "127.0.0.1")).body.decode()
    assert '<a href="/links">Links</a>' in page
    assert EVIL not in page and "&lt;b id=&#34;x&#34;&gt;&#34;east&#34;&amp;" in page
    assert "<script>" not in page and "orders&lt;script&gt;" in page and "/mirror?topic=orders%3Cscript%3E" in page
    assert "&lt;src-2&gt;:9092" in page
    row = re.search(r'<tr data-mirror="orders&lt;script&gt;">.*?</tr>', page).group(0)
    assert '<td class="state">ACTIVE</td>' in row and '<td class="lag-records">45</td>' in row and '<td class="lag-ms">1500</td>' in row
    response = asyncio.run(console._get("/mirror", {"topic": MIRROR_NAME}, session, "127.0.0.1"))
    assert response.status == 200
    page = response.body.decode()
    assert "<script>" not in page.replace('<script src="/static/console.js" defer></script>', "")
    row = re.search(r'<tr data-partition="0">.*?</tr>', page).group(0)
    for cls, value in (("source-hw", 100), ("log-end", 60), ("hw", 60), ("lag-records", 40), ("lag-ms", 1500), ("stop-offset", -1)):
        assert f'<td class="{cls}">{value}</td>' in row, (cls, row)
    assert "2023-11-14 22:13:20.123Z" in row
    assert "NETWORK_EXCEPTION: the source does not answer" in re.search(r'<tr data-partition="2" class="warn">.*?</tr>', page).group(0)
    assert 'id="mirror-lag-records"' in page and 'id="mirror-lag-ms"' in page
    stopped = asyncio.run(console._get("/mirror", {"topic": "stopped"}, session, "127.0.0.1")).body.decode()
    assert '<td class="stop-offset">77</td>' in stopped and "failed over by &lt;admin&gt;" in stopped
    assert asyncio.run(console._get("/mirror", {"topic": "nope"}, session, "127.0.0.1")).status == 404
    svg = asyncio.run(console._get("/mirror/lag.svg", {"topic": MIRROR_NAME}, session, "127.0.0.1"))
    assert svg.content_type.startswith("image/svg+xml") and "orders&lt;script&gt;" in svg.body.decode()


MM = struct_classes(APIS_BY_NAME["DescribeMultiMasterCopies"].response)
RING = ClusterLink(uuid.uuid4(), "from-a", {"bootstrap.servers": "a:9092", "multi.master.topics": "ledger<x>"})


class MultiMasterReader(FakeReader):
    """Also answers DescribeMultiMasterCopies: node 1 copies partition 0 and stopped on partition 1; node 2 is silent."""

    async def describe_multi_master(self, node_id, links=None):
        self.asked.append((node_id, "multi-master"))
        if node_id != 1:
            raise NodeUnavailable(f"node {node_id} did not answer DescribeMultiMasterCopies: timed out")
        rows = [
            MM.MultiMasterCopy(link_name="from-a", topic="ledger<x>", partition_index=1, leader_id=1, stopped=True,
                               error_message="partition 1: copy stopped: <gap>", source_position=9, source_high_watermark=12,
                               lag_records=3, lag_ms=2500, last_fetch_ms=1, copied_batches=4, skipped_batches=0),
            MM.MultiMasterCopy(link_name="from-a", topic="ledger<x>", partition_index=0, leader_id=1, stopped=False,
                               error_message=None, source_position=20, source_high_watermark=20, lag_records=0,
                               lag_ms=0, last_fetch_ms=1, copied_batches=7, skipped_batches=2),
        ]
        return MM.DescribeMultiMasterCopiesResponse(throttle_time_ms=0, error_code=0, copies=rows)


def test_links_show_each_multi_master_copy_from_its_leader():
    image = MetadataImage(
        brokers={1: SimpleNamespace(fenced=False), 2: SimpleNamespace(fenced=False)}, cluster_links={"from-a": RING}
    )
    reader = MultiMasterReader({})
    rows, notes = asyncio.run(link_rows(_broker(image), reader))
    assert notes == ["node 2 unavailable: node 2 did not answer DescribeMultiMasterCopies: timed out"]
    [row] = rows
    assert row["multi_master_topics"] == "ledger<x>"
    assert [(c["partition"], c["state"], c["lag_records"], c["error"]) for c in row["copies"]] == [
        (0, "COPYING", 0, ""), (1, "STOPPED", 3, "partition 1: copy stopped: <gap>"),
    ]
    console = _console(reader)
    console.broker.image = image
    page = asyncio.run(console._get("/links", {}, ("s", "t"), "127.0.0.1")).body.decode()
    stopped = re.search(r'<tr data-copy="ledger&lt;x&gt;-1">.*?</tr>', page).group(0)
    assert '<td class="state">STOPPED</td>' in stopped and "copy stopped: &lt;gap&gt;" in stopped
    # A cluster without multi-master links asks nothing.
    reader = MultiMasterReader({})
    asyncio.run(link_rows(_broker(MetadataImage(cluster_links={"quiet": QUIET})), reader))
    assert reader.asked == []
