"""Cluster links: mirror lag, mirroring throughput against follower replication, failover time.

    python benchmarks/mirroring.py                         # everything
    python benchmarks/mirroring.py --only lag --seconds 30
    python benchmarks/mirroring.py --only throughput --megabytes 500 --rounds 3
    python benchmarks/mirroring.py --only failover --rounds 5

A source (one pybroker node) and a destination (two combined pybroker nodes,
real processes on 127.0.0.1), confluent-kafka clients, one partition:

* lag: records of 1 KB produced to the source at 10,000 records/s (acks=all)
  and read from the destination's mirror of the topic; the time from each
  record's scheduled send to its arrival at the destination's consumer, so a
  producer falling behind its schedule counts too. The mirror has RF=2 in the
  destination, so its high watermark waits for the destination's follower as
  any acks=all write would;
* throughput: the same bytes (``--megabytes`` of 1 KB records) copied two
  ways inside the destination's machine, alternating in rounds: a follower
  added to an RF=1 topic by a reassignment (from the reassignment to the
  follower in the ISR) and a mirror of a source topic made by a link (from
  the mirror's creation to its high watermark at the source's). Prints each
  median rate, their ratio (mirror / follower) and the copying broker's CPU
  seconds per GB in both (from /proc: user + system);
* failover: a producer writes the source continuously (acks=all); the source
  is killed (SIGKILL), ``pybroker mirrors --failover`` runs, and a producer of
  the destination sends until a write is acknowledged: the time from the
  failover command's start to that acknowledgement. A fresh source and mirror
  each round.

Every figure's window covers the work it names: the copying broker's
background work (its fetcher, its follower's replication) runs inside it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from peers import run_pybroker  # noqa: E402
from quorum import start_cluster  # noqa: E402
from replication import cpu_seconds  # noqa: E402
from workloads import end_to_end_latency, produce  # noqa: E402

DESTINATION_SETTINGS = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "300",
    "offsets.topic.replication.factor": "1",
    "group.initial.rebalance.delay.ms": "0",
    "min.insync.replicas": "1",
}
RECORD_BYTES = 1000
WAIT_S = 300.0
POLL_S = 0.01


def tool(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "broker", *args], capture_output=True, text=True, env=env, timeout=120)
    if check and result.returncode != 0:
        raise RuntimeError(f"pybroker {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
    return result


def wait(predicate, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"waiting for {what}")
        time.sleep(POLL_S)


def high_watermark(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-hw", "enable.auto.commit": False})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


class Watermarks:
    """One consumer kept open to read a topic's high watermark often and cheaply."""

    def __init__(self, bootstrap: str):
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watch", "enable.auto.commit": False})

    def high(self, topic: str) -> int:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            return self.consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        except KafkaException:  # the mirror not known there yet
            return -1

    def close(self) -> None:
        self.consumer.close()


class Destination:
    def __init__(self, root: Path):
        self.nodes, _ = start_cluster(root, 2, DESTINATION_SETTINGS)
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes.values())

    @property
    def one(self) -> str:
        return f"127.0.0.1:{self.nodes[1].port}"

    def create(self, topic: str, replicas: list[int]) -> None:
        from confluent_kafka.admin import NewTopic

        self.admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas])])[topic].result(60)
        wait(lambda: self.isr(topic) == sorted(replicas), f"{topic} in sync")

    def isr(self, topic: str) -> list[int] | None:
        try:
            metadata = self.admin.list_topics(topic, timeout=5).topics.get(topic)
        except Exception:  # noqa: BLE001 - asked again
            return None
        if metadata is None or metadata.error is not None or 0 not in metadata.partitions:
            return None
        return sorted(metadata.partitions[0].isrs)

    def leader_of(self, topic: str) -> int:
        metadata = self.admin.list_topics(topic, timeout=5).topics[topic]
        return metadata.partitions[0].leader

    def link(self, name: str, source: str) -> None:
        tool("cluster-links", "--bootstrap-server", self.one, "--create", "--link", name, "--config", f"bootstrap.servers={source}")

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()


def produce_bytes(bootstrap: str, topic: str, megabytes: int) -> int:
    messages = megabytes * 1_000_000 // RECORD_BYTES
    produce(bootstrap, topic, messages, RECORD_BYTES, "1", WAIT_S)
    return messages


def bench_lag(seconds: float, rate_per_s: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        source = stack.enter_context(run_pybroker(Path(tmp) / "source"))
        destination = Destination(Path(tmp) / "destination")
        stack.callback(destination.stop)
        destination.link("east", source.bootstrap)
        tool("topics", "--bootstrap-server", source.bootstrap, "--create", "--topic", "lag", "--partitions", "1")
        tool("mirrors", "--bootstrap-server", destination.one, "--create", "--mirror-topic", "lag", "--link", "east",
             "--replication-factor", "2")
        result = end_to_end_latency(source.bootstrap, "lag", rate_per_s, seconds, RECORD_BYTES, seconds + 120,
                                    consume_bootstrap=destination.bootstrap)
    print(f"mirror lag at {rate_per_s:,} records/s of {RECORD_BYTES} B for {seconds:.0f} s (send at the source to "
          f"receipt at the destination, mirror RF=2): p50 {result['latency_p50_ms']:.1f} ms, "
          f"p99 {result['latency_p99_ms']:.1f} ms, p99.9 {result['latency_p999_ms']:.1f} ms, "
          f"max {result['latency_max_ms']:.1f} ms")  # fmt: skip


def _follower_round(destination: Destination, topic: str, megabytes: int) -> tuple[float, float]:
    """(seconds, copying broker's CPU seconds) to add a follower to an RF=1 topic of ``megabytes``."""
    destination.create(topic, [1])
    produce_bytes(destination.bootstrap, topic, megabytes)
    plan = Path(tempfile.mkstemp(suffix=".json")[1])
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2]}]}))
    follower_pid = destination.nodes[2].process.pid
    cpu_before = cpu_seconds(follower_pid)
    start = time.perf_counter()
    tool("reassign", "--bootstrap-server", destination.one, "--execute", "--reassignment-json-file", str(plan))
    wait(lambda: destination.isr(topic) == [1, 2], f"{topic}: the follower in sync")
    seconds = time.perf_counter() - start
    plan.unlink()
    return seconds, cpu_seconds(follower_pid) - cpu_before


def _mirror_round(destination: Destination, source_bootstrap: str, topic: str, megabytes: int) -> tuple[float, float]:
    """(seconds, copying broker's CPU seconds) to mirror a source topic of ``megabytes`` with RF=1."""
    tool("topics", "--bootstrap-server", source_bootstrap, "--create", "--topic", topic, "--partitions", "1")
    produce_bytes(source_bootstrap, topic, megabytes)
    source_high = high_watermark(source_bootstrap, topic)
    watch = Watermarks(destination.bootstrap)
    cpu_before = {n: cpu_seconds(node.process.pid) for n, node in destination.nodes.items()}
    start = time.perf_counter()
    try:
        tool("mirrors", "--bootstrap-server", destination.one, "--create", "--mirror-topic", topic, "--link", "east",
             "--replication-factor", "1")
        wait(lambda: watch.high(topic) >= source_high, f"{topic}: the mirror caught up")
    finally:
        watch.close()
    seconds = time.perf_counter() - start
    leader = destination.leader_of(topic)
    return seconds, cpu_seconds(destination.nodes[leader].process.pid) - cpu_before[leader]


def bench_throughput(megabytes: int, rounds: int) -> None:
    rates: dict[str, list[float]] = {"follower": [], "mirror": []}
    cpu: dict[str, list[float]] = {"follower": [], "mirror": []}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        source = stack.enter_context(run_pybroker(Path(tmp) / "source"))
        destination = Destination(Path(tmp) / "destination")
        stack.callback(destination.stop)
        destination.link("east", source.bootstrap)
        gigabytes = megabytes / 1000
        for round_no in range(rounds):
            for kind in ("follower", "mirror"):
                topic = f"{kind}-{round_no}"
                if kind == "follower":
                    seconds, cpu_s = _follower_round(destination, topic, megabytes)
                else:
                    seconds, cpu_s = _mirror_round(destination, source.bootstrap, topic, megabytes)
                rates[kind].append(megabytes / seconds)
                cpu[kind].append(cpu_s / gigabytes)
                print(f"  round {round_no + 1} {kind}: {megabytes / seconds:.1f} MB/s ({seconds:.2f} s), "
                      f"copying broker {cpu_s / gigabytes:.2f} CPU s/GB")  # fmt: skip
    follower, mirror = statistics.median(rates["follower"]), statistics.median(rates["mirror"])
    print(f"copy of {megabytes} MB of {RECORD_BYTES} B records, median of {rounds}: follower replication "
          f"{follower:.1f} MB/s ({statistics.median(cpu['follower']):.2f} CPU s/GB), mirror {mirror:.1f} MB/s "
          f"({statistics.median(cpu['mirror']):.2f} CPU s/GB), ratio mirror/follower {mirror / follower:.2f}")  # fmt: skip


def _failover_round(root: Path, round_no: int) -> tuple[float, int]:
    """(seconds from the failover command to the first acknowledged write, records lost)."""
    from confluent_kafka import Producer

    topic = f"failover-{round_no}"
    acked: list[int] = []
    source_cm = run_pybroker(root / f"source-{round_no}")
    source = source_cm.__enter__()
    destination = Destination(root / f"destination-{round_no}")
    try:
        destination.link("east", source.bootstrap)
        tool("topics", "--bootstrap-server", source.bootstrap, "--create", "--topic", topic, "--partitions", "1")
        tool("mirrors", "--bootstrap-server", destination.one, "--create", "--mirror-topic", topic, "--link", "east",
             "--replication-factor", "2")
        writer = Producer({"bootstrap.servers": source.bootstrap, "acks": "all", "linger.ms": 5,
                           "message.timeout.ms": 5000})  # fmt: skip

        def delivered(err, message) -> None:
            if err is None:
                acked.append(message.offset())

        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # a steady trickle, then the source dies mid-stream
            writer.produce(topic, b"x" * RECORD_BYTES, on_delivery=delivered)
            writer.poll(0.001)
        writer.poll(0.2)
        source.process.send_signal(signal.SIGKILL)
        source.process.wait(10)
        writer.flush(6)
        start = time.perf_counter()
        tool("mirrors", "--bootstrap-server", destination.one, "--failover", "--topics", topic)
        producer = Producer({"bootstrap.servers": destination.bootstrap, "acks": "all", "message.timeout.ms": 30000})
        first: list[float] = []
        producer.produce(topic, b"after", on_delivery=lambda err, _m: first.append(time.perf_counter()) if err is None else None)
        wait(lambda: producer.poll(0.01) >= 0 and bool(first), "the first write after the failover", 60)
        stop = high_watermark(destination.bootstrap, topic) - 1  # the write after the failover is the last record
        lost = max(0, (max(acked) + 1 if acked else 0) - stop)
        return first[0] - start, lost
    finally:
        destination.stop()
        with contextlib.suppress(Exception):
            source_cm.__exit__(None, None, None)


def bench_failover(rounds: int) -> None:
    times, lost = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(rounds):
            seconds, lost_records = _failover_round(Path(tmp), round_no)
            times.append(seconds)
            lost.append(lost_records)
            print(f"  round {round_no + 1}: {seconds:.2f} s from --failover to the first acknowledged write, "
                  f"{lost_records} acknowledged records not mirrored")  # fmt: skip
    print(f"failover, median of {rounds}: {statistics.median(times):.2f} s (max {max(times):.2f} s); acknowledged "
          f"records lost per round: {lost}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["lag", "throughput", "failover"])
    parser.add_argument("--seconds", type=float, default=30.0, help="lag: how long to produce")
    parser.add_argument("--rate", type=int, default=10_000, help="lag: records per second")
    parser.add_argument("--megabytes", type=int, default=300, help="throughput: MB per copy")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.only in (None, "lag"):
        bench_lag(args.seconds, args.rate)
    if args.only in (None, "throughput"):
        bench_throughput(args.megabytes, args.rounds)
    if args.only in (None, "failover"):
        bench_failover(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
