"""The ``pybroker start`` command as a real process: clean shutdown on signals,
config errors, unknown keys, and data surviving a restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.conftest import BrokerProcess

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 30


@pytest.fixture
def brokers():
    started: list[BrokerProcess] = []

    def start(data_dir: Path, overrides: dict[str, str] | None = None) -> BrokerProcess:
        data_dir.mkdir(parents=True, exist_ok=True)
        broker = BrokerProcess(data_dir, overrides)
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        if broker.process is not None and broker.process.poll() is None:
            broker.kill()


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "broker", "start", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def base_overrides(tmp_path: Path) -> list[str]:
    return ["--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'logs'}"]


# --------------------------------------------------------------------------- signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_the_broker_cleanly(brokers, tmp_path, sig):
    broker = brokers(tmp_path / "b")
    assert broker.process.poll() is None
    assert broker.port > 0
    started_at = time.monotonic()
    code = broker.stop(sig)
    assert code == 0, broker.log_text()
    assert time.monotonic() - started_at < 15
    assert "pybroker stopped" in broker.log_text()
    lines = broker.log_text().splitlines()
    started = [i for i, line in enumerate(lines) if "pybroker started" in line]
    stopped = [i for i, line in enumerate(lines) if "pybroker stopped" in line]
    assert started and stopped and started[0] < stopped[-1]
    assert "Traceback" not in broker.log_text()


# --------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    "override, key",
    [
        ("num.partitions=abc", "num.partitions"),
        ("auto.create.topics.enable=maybe", "auto.create.topics.enable"),
        ("log.segment.bytes=1", "log.segment.bytes"),
    ],
)
def test_invalid_config_value_exits_2_naming_the_key(tmp_path, override, key):
    result = run_cli([*base_overrides(tmp_path), "--override", override], tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert key in result.stderr
    assert "Traceback" not in result.stderr
    assert "pybroker started" not in result.stdout


def test_bad_override_syntax_exits_2(tmp_path):
    result = run_cli([*base_overrides(tmp_path), "--override", "no-equals-sign"], tmp_path)
    assert result.returncode == 2
    assert "no-equals-sign" in result.stderr


def test_missing_config_file_exits_2(tmp_path):
    result = run_cli(["--config", str(tmp_path / "missing.properties"), *base_overrides(tmp_path)], tmp_path)
    assert result.returncode == 2
    assert "missing.properties" in result.stderr


def test_invalid_value_in_config_file_exits_2(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs=logs\nmessage.max.bytes=lots\n")
    result = run_cli(["--config", str(config)], tmp_path)
    assert result.returncode == 2
    assert "message.max.bytes" in result.stderr


# --------------------------------------------------------------------------- unknown keys


def test_unknown_key_only_warns(brokers, tmp_path):
    broker = brokers(tmp_path / "b", {"some.unknown.key": "1", "num.network.threads": "8"})
    text = broker.log_text()
    assert "some.unknown.key" in text
    assert "num.network.threads" in text
    assert broker.process.poll() is None
    assert broker.stop() == 0


# --------------------------------------------------------------------------- restart


def test_data_written_before_sigterm_is_readable_after_restart(brokers, tmp_path):
    data_dir = tmp_path / "persist"
    broker = brokers(data_dir)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks=1, linger_ms=0)
    try:
        sent = [(f"k{i}".encode(), f"value-{i}".encode()) for i in range(30)]
        futures = [producer.send("persisted", key=k, value=v) for k, v in sent]
        offsets = [f.get(timeout=15).offset for f in futures]
        producer.flush(timeout=15)
    finally:
        producer.close(timeout=5)
    assert offsets == list(range(30))
    assert broker.stop(signal.SIGTERM) == 0, broker.log_text()

    again = brokers(data_dir)
    consumer = KafkaConsumer(
        bootstrap_servers=again.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        consumer_timeout_ms=4000,
    )
    try:
        tp = TopicPartition("persisted", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        received = []
        deadline = time.monotonic() + 20
        while len(received) < len(sent) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500, max_records=100).values():
                received.extend(batch)
        assert [(m.offset, m.key, m.value) for m in received] == [(i, k, v) for i, (k, v) in enumerate(sent)]
        assert consumer.end_offsets([tp])[tp] == 30
    finally:
        consumer.close()
    # Appends carry on after the restored offsets.
    producer = KafkaProducer(bootstrap_servers=again.bootstrap, enable_idempotence=False, acks=1)
    try:
        assert producer.send("persisted", b"after").get(timeout=15).offset == 30
    finally:
        producer.close(timeout=5)
    assert again.stop(signal.SIGTERM) == 0
