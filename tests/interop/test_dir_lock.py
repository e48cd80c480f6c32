"""Two processes on one log dir: the second is refused at once, the first goes on
as if nothing happened (Kafka's .lock). The lock dies with its process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from storage.dir_lock import DirLock, LogDirLocked, lock_dirs
from tests.conftest import PROJECT_ROOT, BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")


def files_of(root):
    return sorted(
        (str(path.relative_to(root)), path.stat().st_size)
        for path in root.rglob("*")
        if path.is_file()
    )


def second_start(broker: BrokerProcess) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "broker", "start"]
    for key, value in broker.overrides.items():
        command += ["--override", f"{key}={value}"]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.run(command, capture_output=True, text=True, timeout=30, env=env, cwd=broker.data_dir)


def test_a_second_broker_on_the_same_log_dir_is_refused_and_the_first_serves_on(tmp_path):
    first = BrokerProcess(tmp_path).start()
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": first.bootstrap})
        producer.produce("locked", b"before")
        assert producer.flush(30) == 0
        before = files_of(tmp_path / "logs")

        started = time.monotonic()
        second = second_start(first)
        took_s = time.monotonic() - started
        assert second.returncode == 3, second.stdout + second.stderr  # a storage error
        assert took_s < 10  # a Python start-up and one refused lock
        message = second.stderr.strip().splitlines()
        assert len(message) == 1 and "in use" in message[0], second.stderr
        assert str(tmp_path / "logs") in message[0] and f"process {first.process.pid}" in message[0]
        assert "Traceback" not in second.stderr
        assert files_of(tmp_path / "logs") == before  # it read nothing, wrote nothing

        producer.produce("locked", b"after")
        assert producer.flush(30) == 0
        consumer = confluent_kafka.Consumer({"bootstrap.servers": first.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["locked"])
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value())
        consumer.close()
        assert seen == [b"before", b"after"]
    finally:
        first.stop(signal.SIGKILL)
    # kill -9 leaves nothing to clean up: the next start takes the lock.
    again = BrokerProcess(tmp_path).start()
    again.stop()
    assert again.process.returncode == 0


def test_locks_are_exclusive_within_a_process_too_and_all_or_none(tmp_path):
    held = DirLock.acquire(tmp_path / "b")
    with pytest.raises(LogDirLocked, match="is in use by process"):
        lock_dirs([tmp_path / "a", tmp_path / "b"])
    # "a" was locked and released again when "b" failed.
    DirLock.acquire(tmp_path / "a").release()
    held.release()
    locks = lock_dirs([tmp_path / "a", tmp_path / "b", tmp_path / "a"])
    assert len(locks) == 2
    for lock in locks:
        lock.release()
