"""A newcomer's first start: ``pybroker start`` with no ``--config`` runs the
single-node defaults of configs/server.properties (data under the directory it
is started from, internal topics with one replica, so a group consumer gets its
records at once), and a fresh log dir logs no recovery "after an unclean
shutdown", while a broker killed with SIGKILL does on its next start."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.conftest import BrokerProcess
from tests.interop._support import Msg, produce, unique_topic

confluent_kafka = pytest.importorskip("confluent_kafka")

UNCLEAN_LINE = "after an unclean shutdown"
GROUP_RECORDS_WITHIN_S = 10
RECORDS = 5


def test_a_fresh_start_recovers_nothing_and_a_killed_broker_recovers(broker_factory, tmp_path):
    data_dir = tmp_path / "node"
    broker = broker_factory(data_dir=data_dir)
    assert UNCLEAN_LINE not in broker.log_text(), broker.log_text()
    topic = unique_topic("unclean")
    produce("confluent", broker.bootstrap, topic, [Msg(None, b"v")], partition=0)
    broker.kill()

    restarted = broker_factory(data_dir=data_dir)
    # One partition log on disk (the metadata log is not one): recovered, and said so.
    assert f"recovering 1 partition logs {UNCLEAN_LINE}" in restarted.log_text(), restarted.log_text()
    assert restarted.stop() == 0

    clean = broker_factory(data_dir=data_dir)
    assert UNCLEAN_LINE not in clean.log_text(), clean.log_text()


def test_start_without_a_config_serves_a_group_consumer_at_once(tmp_path):
    from confluent_kafka import Consumer

    cwd = tmp_path / "newcomer"
    cwd.mkdir()
    broker = BrokerProcess(cwd)
    # As a user moving the port would: listeners only. No log.dirs, no replication factors.
    broker.overrides = {"listeners": "PLAINTEXT://127.0.0.1:0"}
    try:
        broker.start()
        data = cwd / "data" / "kafka-logs"
        assert (data / "meta.properties").is_file()
        log_text = broker.log_text()
        assert f"started with the single-node defaults of configs/server.properties; data in {data}" in log_text
        topic = unique_topic("newcomer")
        produce("confluent", broker.bootstrap, topic, [Msg(None, f"r{i}".encode()) for i in range(RECORDS)], partition=0)

        consumer = Consumer({
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"newcomer-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        })
        got = []
        started = time.monotonic()
        try:
            consumer.subscribe([topic])
            while len(got) < RECORDS and time.monotonic() - started < GROUP_RECORDS_WITHIN_S:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    got.append(message.value())
        finally:
            consumer.close()
        assert got == [f"r{i}".encode() for i in range(RECORDS)], broker.log_text()
        assert "cannot create __consumer_offsets" not in broker.log_text()
        assert (data / "__consumer_offsets-0").is_dir()
    finally:
        broker.stop()
