"""Two consumer-group scenarios of librdkafka's own test suite, with
confluent-kafka (the same group logic), against a broker with Kafka-like
group timing (group.initial.rebalance.delay.ms=500, as the suite command in
tests/compat uses; with 0 both fail on Kafka too: docs/COMPATIBILITY.md).

- 0089_max_poll_interval: a consumer that stops polling for longer than
  max.poll.interval.ms leaves the group; the other one is given its
  partition and reads on, not before max.poll.interval.ms has passed.
- 0113_cooperative_rebalance, l_unsubscribe: two cooperative-sticky members
  share four partitions after one assignment each; the one that unsubscribes
  revokes its two and the other is given them, without revoking its own.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from tests.conftest import BrokerProcess
from tests.interop._support import create_topic, unique_topic

MAX_POLL_INTERVAL_MS = 10_000
SCENARIO_BOUND_S = 60


@pytest.fixture(scope="module")
def delayed_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("group-scenarios"), {"group.initial.rebalance.delay.ms": "500"}).start()
    yield broker
    broker.stop()


@pytest.mark.timeout(90)
def test_a_consumer_past_max_poll_interval_hands_its_partition_over(delayed_broker):
    bootstrap = delayed_broker.bootstrap
    topic = unique_topic("maxpoll")
    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, value=b"m%d" % i, partition=0)
    assert producer.flush(10) == 0
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": topic,
        "session.timeout.ms": 6000,
        "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
        "auto.offset.reset": "earliest",
    }
    consumers = [Consumer(dict(config, **{"client.id": f"c{i}"})) for i in range(2)]
    for consumer in consumers:
        consumer.subscribe([topic])
    first_at = None
    silent_until = [0.0, 0.0]
    deadline = time.monotonic() + SCENARIO_BOUND_S
    try:
        while time.monotonic() < deadline:
            for i, consumer in enumerate(consumers):
                if silent_until[i] > time.monotonic():
                    continue  # this one has stopped polling
                message = consumer.poll(0.1)
                if message is None or message.error():
                    continue
                now = time.monotonic()
                if first_at is None:
                    first_at, silent_until[i] = now, now + 20
                    continue
                waited_s = now - first_at
                assert waited_s * 1000 >= MAX_POLL_INTERVAL_MS, f"the other consumer read after {waited_s:.1f} s"
                assert waited_s < 20
                return
        pytest.fail("no second message within the bound")
    finally:
        for consumer in consumers:
            consumer.close()


@pytest.mark.timeout(90)
def test_a_cooperative_member_that_unsubscribes_hands_over_only_its_partitions(delayed_broker):
    bootstrap = delayed_broker.bootstrap
    topics = [unique_topic("coop-a"), unique_topic("coop-b")]
    for topic in topics:
        create_topic(bootstrap, topic, partitions=2)
    group = unique_topic("coop-group")
    counts = {name: {"assign": 0, "revoke": 0, "lost": 0} for name in ("C_1", "C_2")}

    def member(name):
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "partition.assignment.strategy": "cooperative-sticky",
            }
        )

        def on_assign(c, partitions):
            counts[name]["assign"] += 1
            c.incremental_assign(partitions)

        def on_revoke(c, partitions):
            counts[name]["revoke"] += 1
            c.incremental_unassign(partitions)

        def on_lost(c, partitions):
            counts[name]["lost"] += 1
            c.incremental_unassign(partitions)

        consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        return consumer

    c1 = member("C_1")
    c1.poll(0.05)  # C_1 is joining when C_2 subscribes, as in the librdkafka test
    c2 = member("C_2")
    unsubscribed = False
    deadline = time.monotonic() + SCENARIO_BOUND_S
    try:
        while time.monotonic() < deadline:
            c1.poll(0.2)
            c2.poll(0.2)
            held = (len(c1.assignment()), len(c2.assignment()))
            if not unsubscribed and held == (2, 2):
                # One generation shared the partitions: one assignment each.
                assert (counts["C_1"]["assign"], counts["C_2"]["assign"]) == (1, 1), counts
                c1.unsubscribe()
                unsubscribed = True
            elif unsubscribed and held == (0, 4):
                assert counts["C_1"] == {"assign": 1, "revoke": 1, "lost": 0}, counts
                assert counts["C_2"] == {"assign": 2, "revoke": 0, "lost": 0}, counts
                return
        pytest.fail(f"not settled within the bound: {held}, {counts}")
    finally:
        c1.close()
        c2.close()
