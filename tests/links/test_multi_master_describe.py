"""``pybroker cluster-links --describe`` shows a link's multi-master copies
(DescribeMultiMasterCopies asked of every broker): copying and caught up, then
stopped with the reason once the source lost records the copy never read.

The gap is made as it happens in the field: B copies a producer's first
batch from A; the link is deleted (B keeps its position, the committed
offset of the link's group); the producer writes on, and A deletes every
record so far (DeleteRecords, as retention would); the producer writes once
more; the link is made again under the same name. B's position is now
before A's log start, the copy moves to the log start and meets the
producer's third batch while it holds only the first: the second is lost,
so the copy stops rather than break the producer's order.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.interop._support import create_topic, list_offset, unique_topic
from tests.links.test_links_control import pybroker
from tests.links.test_multi_master_ring import create_multi_master_link, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")

LATEST = -1
WAIT_S = 60


def copies(bootstrap: str, link: str) -> list[dict]:
    out = pybroker("cluster-links", "--bootstrap-server", bootstrap, "--describe", "--link", link, "--output", "json").stdout
    [described] = json.loads(out)["links"]
    return described.get("multi_master_copies", [])


def write(producer, topic: str, values: list[str]) -> None:
    for value in values:
        producer.produce(topic, value=value.encode(), partition=0)
    assert producer.flush(WAIT_S) == 0


def test_describe_shows_copies_and_a_stopped_one_with_its_reason(broker_factory, tmp_path):
    topic = unique_topic("mm-describe")
    a = broker_factory({"cluster.link.origin.id": "1"})
    b = broker_factory({"cluster.link.origin.id": "2"})
    for broker in (a, b):
        create_topic(broker.bootstrap, topic, partitions=1)
    producer = confluent_kafka.Producer({"bootstrap.servers": a.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    write(producer, topic, ["first"])
    create_multi_master_link(b.bootstrap, "from-a", a.bootstrap, topic)
    assert wait_until(lambda: list_offset(b.bootstrap, topic, 0, LATEST).offset == 1, WAIT_S)

    # Copying, caught up: the state, position and lag of the one partition B leads.
    caught_up = wait_until(lambda: [c for c in copies(b.bootstrap, "from-a") if c["lag_records"] == 0], WAIT_S)
    assert caught_up, copies(b.bootstrap, "from-a")
    [copy] = caught_up
    assert (copy["topic"], copy["partition"], copy["state"], copy["error"]) == (topic, 0, "COPYING", None)
    assert copy["source_position"] == copy["source_high_watermark"] == 1
    assert copy["copied_batches"] == 1 and copy["lag_ms"] == 0 and copy["last_fetch_ms"] > 0
    text = pybroker("cluster-links", "--bootstrap-server", b.bootstrap, "--describe", "--link", "from-a").stdout
    assert f"Topic: {topic}\tPartition: 0\tLeader: " in text and "State: COPYING" in text, text

    # Lose the producer's second batch at the source before B reads it.
    pybroker("cluster-links", "--bootstrap-server", b.bootstrap, "--delete", "--link", "from-a")
    write(producer, topic, ["second"])
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 2}], "version": 1}))
    pybroker("delete-records", "--bootstrap-server", a.bootstrap, "--offset-json-file", str(offsets))
    write(producer, topic, ["third"])
    create_multi_master_link(b.bootstrap, "from-a", a.bootstrap, topic)

    stopped = wait_until(lambda: [c for c in copies(b.bootstrap, "from-a") if c["state"] == "STOPPED"], WAIT_S)
    assert stopped, copies(b.bootstrap, "from-a")
    [copy] = stopped
    assert "copy stopped" in copy["error"] and "expected 1" in copy["error"], copy
    text = pybroker("cluster-links", "--bootstrap-server", b.bootstrap, "--describe", "--link", "from-a").stdout
    assert "State: STOPPED" in text and "Error: partition 0: copy stopped" in text, text
    # Nothing after the gap was copied.
    time.sleep(1)
    assert list_offset(b.bootstrap, topic, 0, LATEST).offset == 1
