"""Multi-master copy across restarts, and producer id origins that do not match.

The link's source positions are the committed offsets of the group
``_pybroker-link-<link>`` on the destination: a restarted destination goes
on from them (it fetches no batch it already copied). A node restarted with
another ``cluster.link.origin.id`` than the ids it handed out refuses to
hand out more, and says why.
"""

from __future__ import annotations

import pytest

from tests.interop._support import create_topic, unique_topic
from tests.interop.test_metrics import metrics_port, scrape
from tests.links.test_multi_master_ring import (
    PARTITIONS,
    batch_outcomes,
    create_multi_master_link,
    partition_records,
    record_count,
    wait_until,
)

confluent_kafka = pytest.importorskip("confluent_kafka")

WAIT_S = 60


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2})
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=i % PARTITIONS)
    assert producer.flush(WAIT_S) == 0


def committed_positions(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def restart(broker) -> None:
    broker.stop()
    broker.output.clear()  # the new process's lines (its ports) only
    broker.start()


def test_a_restarted_destination_goes_on_from_its_committed_positions(broker_factory):
    topic = unique_topic("positions")
    a = broker_factory({"cluster.link.origin.id": "1"})
    b = broker_factory({"cluster.link.origin.id": "2", "metrics.listener": "http://127.0.0.1:0"})
    for broker in (a, b):
        create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    create_multi_master_link(b.bootstrap, "from-a", a.bootstrap, topic)
    produce(a.bootstrap, topic, [f"first-{i}" for i in range(100)])
    assert wait_until(lambda: record_count(b.bootstrap, topic) == 100), record_count(b.bootstrap, topic)
    # The positions are the source's log ends, committed on the destination.
    expected = {p: len([i for i in range(100) if i % PARTITIONS == p]) for p in range(PARTITIONS)}
    assert wait_until(lambda: committed_positions(b.bootstrap, "_pybroker-link-from-a", topic) == expected), (
        committed_positions(b.bootstrap, "_pybroker-link-from-a", topic)
    )
    restart(b)
    produce(a.bootstrap, topic, [f"second-{i}" for i in range(100)])
    assert wait_until(lambda: record_count(b.bootstrap, topic) == 200), record_count(b.bootstrap, topic)
    values = [v for p in range(PARTITIONS) for _, v in partition_records(b.bootstrap, topic, p)]
    assert sorted(values) == sorted([f"first-{i}" for i in range(100)] + [f"second-{i}" for i in range(100)])
    # Nothing fetched again after the restart: only the new batches were seen.
    outcomes = batch_outcomes(b, topic)
    assert outcomes.get("copied", 0) > 0 and outcomes.get("already_here", 0) == 0, outcomes


def test_a_node_with_another_origin_refuses_to_hand_out_producer_ids(broker_factory):
    topic = unique_topic("origins")
    broker = broker_factory({"cluster.link.origin.id": "1"})
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, ["one"])  # producer ids of origin 1 handed out
    broker.overrides["cluster.link.origin.id"] = "2"
    restart(broker)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "message.timeout.ms": 5000}
    )
    reports = []
    producer.produce(topic, value=b"two", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(30)
    assert reports and reports[0] is not None, reports
    assert wait_until(lambda: "refusing to allocate producer ids: cluster.link.origin.id is 2" in broker.log_text(), 10)
    assert "(origin 1)" in broker.log_text()


def test_partition_counts_that_differ_stop_the_copy_and_say_so(broker_factory):
    topic = unique_topic("counts")
    a = broker_factory({"cluster.link.origin.id": "1"})
    b = broker_factory({"cluster.link.origin.id": "2", "metrics.listener": "http://127.0.0.1:0"})
    create_topic(a.bootstrap, topic, partitions=PARTITIONS)
    create_topic(b.bootstrap, topic, partitions=PARTITIONS + 1)
    produce(a.bootstrap, topic, [f"v-{i}" for i in range(10)])
    create_multi_master_link(b.bootstrap, "from-a", a.bootstrap, topic)

    def errors():
        return {
            dict(labels)["partition"]: value
            for (name, labels), value in scrape(metrics_port(b)).items()
            if name == "pybroker_multi_master_partition_error" and dict(labels)["topic"] == topic
        }

    assert wait_until(lambda: errors() == {str(p): 1.0 for p in range(PARTITIONS + 1)}), errors()
    assert wait_until(lambda: f"the source's {topic} has {PARTITIONS} partitions, this cluster's {PARTITIONS + 1}" in b.log_text(), 10)
    assert record_count(b.bootstrap, topic) == 0
