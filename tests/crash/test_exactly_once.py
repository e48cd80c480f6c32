"""Exactly-once consume-transform-produce while processes are SIGKILLed.

A broker process and a processor (tests/crash/eos_processor.py: confluent-kafka,
transactional producer, offsets committed inside each transaction) turn an
input topic of uniquely numbered records into an output topic. The processor
is SIGKILLed several times, each time once it has committed its share of the
input and at a random moment after that (seeded: the seed is printed,
``PYBROKER_EOS_SEED`` replays it) and restarted; once, the broker is SIGKILLed
too and restarted on the same data directory and port. At the end the output
read with ``read_committed`` holds every input record exactly once, while
``read_uncommitted`` shows the aborted leftovers of the killed processors were
really there: the first one kills itself once its transaction's output is
written, so the test cannot pass without an abort.

``PYBROKER_EOS_RECORDS`` sets the input size (default 100,000) and
``PYBROKER_EOS_KILLS`` the processor kills (default 4).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import BrokerProcess
from tests.interop._support import create_topic, unique_topic

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RECORDS = int(os.environ.get("PYBROKER_EOS_RECORDS", "100000"))
PROCESSOR_KILLS = int(os.environ.get("PYBROKER_EOS_KILLS", "4"))
PARTITIONS = 3
# Small transactions: more of them, so the kills land inside a run.
CHUNK_RECORDS = 100
RUN_TIME_MAX_S = 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_processor(
    bootstrap: str, source: str, sink: str, log_file, records: int = RECORDS, extra=(), group: str | None = None
) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [
            sys.executable, "-m", "tests.crash.eos_processor",
            "--bootstrap", bootstrap, "--input", source, "--output", sink,
            "--group", group or f"group-{source}", "--transactional-id", f"txn-{source}",
            "--expected", str(records), "--run-time-max-s", str(RUN_TIME_MAX_S), "--chunk-records", str(CHUNK_RECORDS),
            *extra,
        ],
        cwd=PROJECT_ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
    )


def wait_for_progress(log_path: Path, records: int, processor: subprocess.Popen, timeout_s: float = 120) -> bool:
    """Until the processor reports ``records`` input records committed (True), or it
    exits or time runs out (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and processor.poll() is None:
        lines = [line for line in log_path.read_text().splitlines() if line.startswith("committed ")]
        if lines and int(lines[-1].split()[1]) >= records:
            return True
        time.sleep(0.02)
    return False


def fill_input(bootstrap: str, topic: str, records: int = RECORDS) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=f"record-{i}".encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0


def check_exactly_once(committed: list[bytes], records: int) -> None:
    counts = Counter(committed)
    expected = {f"RECORD-{i}".encode() for i in range(records)}
    missing = expected - counts.keys()
    duplicated = {value: n for value, n in counts.items() if n > 1}
    assert not missing, f"{len(missing)} input records never committed to the output, e.g. {sorted(missing)[:5]}"
    assert not duplicated, f"{len(duplicated)} records committed more than once, e.g. {list(duplicated.items())[:5]}"
    assert counts.keys() == expected


def read_output(bootstrap: str, topic: str, isolation_level: str, expected: int, timeout_s: float = 120) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "eos-reader", "enable.auto.commit": False,
        "isolation.level": isolation_level, "auto.offset.reset": "earliest",
    })
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        watermarks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in range(PARTITIONS)}
        deadline = time.monotonic() + timeout_s
        quiet_polls = 0
        while time.monotonic() < deadline and quiet_polls < 10:
            messages = consumer.consume(1000, 0.3)
            messages = [m for m in messages if m.error() is None]
            quiet_polls = 0 if messages else quiet_polls + 1
            values.extend(m.value() for m in messages)
            if len(values) >= expected and quiet_polls:
                break
        assert watermarks  # the topic was readable
    finally:
        consumer.close()
    return values


@pytest.mark.timeout(900)
def test_each_input_record_is_output_exactly_once(tmp_path):
    seed = int(os.environ.get("PYBROKER_EOS_SEED", random.randrange(1 << 30)))
    print(f"PYBROKER_EOS_SEED={seed}")
    rng = random.Random(seed)
    port = free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "transaction.state.log.num.partitions": "4",
        "offsets.topic.num.partitions": "4",
    }
    data_dir = tmp_path / "broker"
    data_dir.mkdir()
    broker = BrokerProcess(data_dir, overrides).start()
    processor = None
    log_path = tmp_path / "processor.log"
    print(f"processor output: {log_path}")
    try:
        bootstrap = broker.bootstrap
        source, sink = unique_topic("eos-in"), unique_topic("eos-out")
        create_topic(bootstrap, source, partitions=PARTITIONS)
        create_topic(bootstrap, sink, partitions=PARTITIONS)
        fill_input(bootstrap, source)

        with open(log_path, "w") as log_file:
            broker_kill_at = rng.randrange(PROCESSOR_KILLS)
            for round_number in range(PROCESSOR_KILLS):
                # Killed once it has done its share, a moment after a commit; the
                # first one kills itself with a transaction's output written.
                target = (round_number + 1) * RECORDS // (PROCESSOR_KILLS + 1) + rng.randrange(CHUNK_RECORDS * 10)
                extra = ("--die-inside-transaction-after", str(target)) if round_number == 0 else ()
                processor = start_processor(bootstrap, source, sink, log_file, extra=extra)
                if round_number == 0:
                    assert processor.wait(RUN_TIME_MAX_S) == -signal.SIGKILL, log_path.read_text()[-4000:]
                else:
                    assert wait_for_progress(log_path, target, processor), log_path.read_text()[-4000:]
                    time.sleep(rng.uniform(0, 0.03))
                    processor.send_signal(signal.SIGKILL)
                processor.wait(30)
                if round_number == broker_kill_at:
                    broker.stop(signal.SIGKILL)
                    broker = BrokerProcess(data_dir, overrides).start()
            processor = start_processor(bootstrap, source, sink, log_file)
            assert processor.wait(RUN_TIME_MAX_S) == 0, log_path.read_text()[-4000:]
        processor = None

        committed = read_output(bootstrap, sink, "read_committed", RECORDS)
        check_exactly_once(committed, RECORDS)
        everything = read_output(bootstrap, sink, "read_uncommitted", RECORDS)
        print(f"output: {len(committed)} committed, {len(everything)} written (aborted leftovers: {len(everything) - len(committed)})")
        # The processor that died inside a transaction had written its output.
        assert len(everything) > len(committed)
    finally:
        if processor is not None and processor.poll() is None:
            processor.kill()
            processor.wait(10)
        broker.stop()
