"""Transactions: what they cost a producer and a read_committed consumer.

Starts a fresh pybroker and, with confluent-kafka, in one run:

- idempotent produce: N records of 100 B to one partition (``acks=all``,
  ``enable.idempotence``), records per second until the last is acknowledged;
- transactional produce of the same N records, 1,000 per transaction
  (``begin_transaction``, produce, ``commit_transaction``), records per second,
  and the latency of ``commit_transaction`` (p50, p99): its ratio to idempotent
  produce is the figure (goal >= 0.7);
- read_committed against read_uncommitted: a topic of transactions of 1,000
  records, every tenth aborted, read to its end by one consumer of each
  isolation level (log offsets per second from the first record delivered: the
  read_committed consumer is sent the aborted batches too, and drops them);
  goal: the read_committed rate >= 0.8 of the read_uncommitted one.

The two producer phases run in turn, first one then the other, over
``--rounds`` (the machine is noisy);
each round prints its figures, with the broker's CPU use as a share of one
core during each phase (well under 100 %: the client limited it), and the
last line summarises medians.

    python benchmarks/transactions.py                       # 200,000 records, 3 rounds
    python benchmarks/transactions.py --records 500000 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.produce_consume import start_broker
from broker.tools.groups import KafkaConnection, parse_bootstrap
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

CREATE = struct_classes(APIS_BY_NAME["CreateTopics"].request)
RECORD_BYTES = 100
RECORDS_PER_TXN = 1000
ABORT_EVERY = 10
TIMEOUT_S = 60


def create_topic(bootstrap: str, name: str) -> None:
    connection = KafkaConnection(*parse_bootstrap(bootstrap), 30)
    try:
        response = connection.call(
            "CreateTopics", 7,
            topics=[CREATE.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=30000, validate_only=False,
        )
        assert response.topics[0].error_code == 0, response.topics[0]
    finally:
        connection.close()


def produce_all(producer, topic: str, count: int, value: bytes) -> None:
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.001)  # the queue is full: let the client send


def idempotent_rate(bootstrap: str, topic: str, records: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    value = b"x" * RECORD_BYTES
    start = time.perf_counter()
    produce_all(producer, topic, records, value)
    assert producer.flush(TIMEOUT_S) == 0
    return records / (time.perf_counter() - start)


def transactional_rate(bootstrap: str, topic: str, records: int, transactional_id: str, *, abort_every: int = 0):
    """(records per second, commit latencies in seconds)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5})
    producer.init_transactions(TIMEOUT_S)
    value = b"x" * RECORD_BYTES
    latencies = []
    start = time.perf_counter()
    for number in range(records // RECORDS_PER_TXN):
        producer.begin_transaction()
        produce_all(producer, topic, RECORDS_PER_TXN, value)
        began = time.perf_counter()
        if abort_every and number % abort_every == abort_every - 1:
            # Sent first: abort_transaction drops what is still queued, and the
            # readers must find the aborted records in the log.
            assert producer.flush(TIMEOUT_S) == 0
            producer.abort_transaction(TIMEOUT_S)
        else:
            producer.commit_transaction(TIMEOUT_S)
        latencies.append(time.perf_counter() - began)
    elapsed = time.perf_counter() - start
    producer.flush(1)
    return records / elapsed, latencies


def read_to_end_rate(bootstrap: str, topic: str, isolation_level: str) -> tuple[float, int]:
    """(log offsets per second from the first record delivered to the partition's
    end, records delivered). Timed from the first record: a new consumer's start
    (metadata, first fetch) is not the reading."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-{isolation_level}", "enable.auto.commit": False,
        "isolation.level": isolation_level, "enable.partition.eof": True, "fetch.max.bytes": 52428800,
        # Room for the whole topic: with librdkafka's default (100,000 messages)
        # the fetcher backs off for a second whenever this loop falls behind,
        # which the read_uncommitted side (more records) hits more often.
        "queued.min.messages": 1_000_000,
    })
    delivered = 0
    first_offset = None
    start = end_offset = 0.0
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        end_offset = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)[1]
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            messages = consumer.consume(10000, 1.0)
            end = False
            for message in messages:
                if message.error() is None:
                    if first_offset is None:
                        first_offset, start = message.offset(), time.perf_counter()
                    delivered += 1
                elif message.error().code() == -191:  # _PARTITION_EOF
                    end = True
            if end:
                break
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    return (end_offset - first_offset) / elapsed, delivered


def cpu_s(pid: int) -> float:
    """The process's user + system CPU seconds so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Phase:
    """Wall time and broker CPU of one phase: the busy share tells who limited it."""

    def __init__(self, pid: int):
        self.pid = pid

    def __enter__(self):
        self.wall = time.perf_counter()
        self.cpu = cpu_s(self.pid)
        return self

    def __exit__(self, *exc):
        self.busy = (cpu_s(self.pid) - self.cpu) / (time.perf_counter() - self.wall)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * fraction), len(ordered) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    records = args.records - args.records % RECORDS_PER_TXN
    ratios, p50s, p99s, read_ratios = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="pybroker-txn-bench-") as data_dir:
        proc, bootstrap = start_broker(Path(data_dir), overrides={"transaction.state.log.replication.factor": "1",
                                                                   "transaction.state.log.min.isr": "1"})
        try:
            for round_number in range(args.rounds):
                idem_topic, txn_topic = f"idem-{round_number}", f"txn-{round_number}"
                create_topic(bootstrap, idem_topic)
                create_topic(bootstrap, txn_topic)
                # Alternate which goes first, so neither always runs on a warmer broker.
                idem_phase, txn_phase = Phase(proc.pid), Phase(proc.pid)
                for phase in ((idem_phase, txn_phase) if round_number % 2 == 0 else (txn_phase, idem_phase)):
                    with phase:
                        if phase is idem_phase:
                            idempotent = idempotent_rate(bootstrap, idem_topic, records)
                        else:
                            transactional, latencies = transactional_rate(bootstrap, txn_topic, records, f"bench-{round_number}")
                ratios.append(transactional / idempotent)
                p50s.append(percentile(latencies, 0.5) * 1000)
                p99s.append(percentile(latencies, 0.99) * 1000)
                print(
                    f"round {round_number + 1}: idempotent {idempotent:,.0f} rec/s (broker busy {idem_phase.busy:.0%}), "
                    f"transactional {transactional:,.0f} rec/s (broker busy {txn_phase.busy:.0%}) "
                    f"(ratio {ratios[-1]:.2f}), commit p50 {p50s[-1]:.1f} ms p99 {p99s[-1]:.1f} ms",
                    flush=True,
                )
                mixed_topic = f"mixed-{round_number}"
                create_topic(bootstrap, mixed_topic)
                transactional_rate(bootstrap, mixed_topic, records, f"bench-mixed-{round_number}", abort_every=ABORT_EVERY)
                with Phase(proc.pid) as uncommitted_phase:
                    uncommitted, seen_all = read_to_end_rate(bootstrap, mixed_topic, "read_uncommitted")
                with Phase(proc.pid) as committed_phase:
                    committed, seen_committed = read_to_end_rate(bootstrap, mixed_topic, "read_committed")
                expected_committed = records - records // RECORDS_PER_TXN // ABORT_EVERY * RECORDS_PER_TXN
                assert seen_all == records and seen_committed == expected_committed, (seen_all, seen_committed)
                read_ratios.append(committed / uncommitted)
                print(
                    f"round {round_number + 1}: read_uncommitted {uncommitted:,.0f} offsets/s (broker busy {uncommitted_phase.busy:.0%}), "
                    f"read_committed {committed:,.0f} offsets/s (broker busy {committed_phase.busy:.0%}) "
                    f"(10 % aborted; ratio {read_ratios[-1]:.2f})",
                    flush=True,
                )
        finally:
            proc.terminate()
            proc.wait(60)
    print(
        f"median over {args.rounds} rounds: transactional/idempotent {statistics.median(ratios):.2f} "
        f"[{min(ratios):.2f}-{max(ratios):.2f}] (goal >= 0.7); commit p50 {statistics.median(p50s):.1f} ms, "
        f"p99 {statistics.median(p99s):.1f} ms; read_committed/read_uncommitted {statistics.median(read_ratios):.2f} "
        f"[{min(read_ratios):.2f}-{max(read_ratios):.2f}] (goal >= 0.8)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
