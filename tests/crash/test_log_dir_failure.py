"""A log dir that runs out of space halts the broker instead of acknowledging
writes it could not make.

The partition logs live on a 2 MiB tmpfs of their own (the metadata log
elsewhere), and an acks=all producer writes 64 KiB records until the disk is
full. The broker must exit (status 1) with a line naming the failed
directory; every record it acknowledged must be read back after a restart
on the same (still full) directory, whose recovery cuts the torn tail.
Needs root to mount the tmpfs; skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.conftest import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition

RECORD_BYTES = 64 * 1024


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


@pytest.mark.timeout(120)
def test_full_log_dir_halts_the_broker_and_loses_nothing_acknowledged(tmp_path, small_disk):
    overrides = {
        "log.dirs": str(small_disk / "logs"),
        "metadata.log.dir": str(tmp_path / "metadata"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
    }
    broker = BrokerProcess(tmp_path, overrides).start()
    acknowledged: list[bytes] = []
    errors: list = []
    try:
        producer = Producer({
            "bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
            "message.timeout.ms": 5000, "retries": 0, "message.max.bytes": 1_000_000,
        })  # fmt: skip

        def on_delivery(error, message):
            (errors if error is not None else acknowledged).append(error if error is not None else message.value())

        deadline = time.monotonic() + 60
        index = 0
        while broker.process.poll() is None and time.monotonic() < deadline:
            producer.produce("full", f"{index:08d}".encode() + b"x" * (RECORD_BYTES - 8), on_delivery=on_delivery)
            index += 1
            producer.flush(5)
        producer.flush(10)
        assert broker.process.wait(30) == 1
        output = "".join(broker.output)
        assert "failed" in output and str(small_disk / "logs") in output, output[-2000:]
        assert acknowledged, "nothing was acknowledged before the disk filled"
        assert len(acknowledged) < index  # the write that hit the full disk was not acknowledged
    finally:
        broker.stop()

    restarted = BrokerProcess(tmp_path, overrides).start()
    try:
        consumer = Consumer({"bootstrap.servers": restarted.bootstrap, "group.id": "check", "enable.auto.commit": False})
        consumer.assign([TopicPartition("full", 0, 0)])
        read: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(read) < len(acknowledged) and time.monotonic() < deadline:
            for message in consumer.consume(100, 1.0):
                if message.error() is None:
                    read.append(message.value())
        consumer.close()
        assert read[: len(acknowledged)] == acknowledged
    finally:
        restarted.stop()
