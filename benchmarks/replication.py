"""Replicated partitions on three brokers: throughput, latency, failover, catch-up.

    python benchmarks/replication.py                      # everything
    python benchmarks/replication.py --only throughput --rounds 3 --messages 1000000
    python benchmarks/replication.py --only failover --rounds 5
    python benchmarks/replication.py --only latency --set max.incremental.fetch.session.cache.slots=0
    python benchmarks/replication.py --only throughput --rounds 1 --json figures.json

Three combined nodes (real processes on 127.0.0.1, ``min.insync.replicas=2``),
confluent-kafka clients, 100-byte records, one partition:

* throughput: acks=all into an RF=1 topic and an RF=3 topic led by the same
  broker, alternating in rounds; prints each median and their ratio, and the
  CPU seconds per GB of the leader and of one follower during the RF=3 runs
  (from /proc, user + system);
* latency: produce-to-consume latency at 5,000 msg/s, acks=all, RF=3, with the
  leader's and a follower's CPU per 1,000 messages; then one acks=all produce
  at a time: its round trip and the CPU each request costs them;
* failover: a producer sends continuously (acks=all, idempotent) while the
  partition leader is killed with SIGKILL (and, separately, stopped with
  SIGTERM, which is a controlled shutdown): the time from the signal to the
  first acknowledgement of a record produced after it; median of the rounds.
  The killed broker is restarted and back in the ISR before the next round;
* catch-up: a follower is stopped, N MB are produced, the follower restarts;
  the time from its start to its return to the ISR gives the catch-up rate.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from quorum import Node, start_cluster  # noqa: E402
from workloads import end_to_end_latency, produce  # noqa: E402

SESSION_TIMEOUT_MS = 3000
CLUSTER_SETTINGS = {
    "min.insync.replicas": "2",
    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "broker.heartbeat.interval.ms": "300",
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "replica.lag.time.max.ms": "10000",
    "offsets.topic.replication.factor": "1",
    "group.initial.rebalance.delay.ms": "0",
}
WAIT_S = 60.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cluster:
    def __init__(self, root: Path):
        self.nodes, _ = start_cluster(root, 3, CLUSTER_SETTINGS)
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    @property
    def bootstrap(self) -> str:
        # A restarted node listens on a new ephemeral port: ask for the current ones.
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes.values())

    def create(self, topic: str, replicas: list[int]) -> None:
        from confluent_kafka.admin import NewTopic

        # min.insync.replicas cannot exceed the replicas there are (acks=all would be refused).
        configs = {"min.insync.replicas": str(min(2, len(replicas)))}
        futures = self.admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas], config=configs)])
        futures[topic].result(WAIT_S)
        self.wait(lambda: self.partition(topic) is not None and sorted(self.partition(topic).isrs) == sorted(replicas), f"{topic} in sync")

    def partition(self, topic: str):
        try:
            metadata = self.admin.list_topics(topic, timeout=5).topics.get(topic)
        except Exception:  # a node being restarted: ask again
            return None
        if metadata is None or metadata.error is not None or 0 not in metadata.partitions:
            return None
        return metadata.partitions[0]

    def wait(self, predicate, what: str, timeout_s: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waiting for {what}")
            time.sleep(0.05)

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()


def bench_throughput(cluster: Cluster, rounds: int, messages: int) -> dict:
    """Prints the figures; returns each round's, for --json."""
    leader, follower = 1, 2
    cluster.create("rf1", [leader])
    cluster.create("rf3", [leader, follower, 3])
    rates = {"rf1": [], "rf3": []}
    cpu = {"leader": [], "follower": []}
    round_figures = []
    for round_no in range(rounds):
        for topic in ("rf1", "rf3"):
            before = {n: cpu_seconds(cluster.nodes[n].process.pid) for n in (leader, follower)}
            result = produce(cluster.bootstrap, topic, messages, 100, "all", 600)
            after = {n: cpu_seconds(cluster.nodes[n].process.pid) for n in (leader, follower)}
            rate = result["messages"] / result["seconds"]
            rates[topic].append(rate)
            if topic == "rf3":
                gigabytes = result["payload_bytes"] / 1e9
                cpu["leader"].append((after[leader] - before[leader]) / gigabytes)
                cpu["follower"].append((after[follower] - before[follower]) / gigabytes)
            print(f"  round {round_no + 1} {topic}: {rate / 1e3:.0f}k msg/s ({result['seconds']:.2f} s)")
        round_figures.append({"rf1_msg_per_s": rates["rf1"][-1], "rf3_msg_per_s": rates["rf3"][-1],
                              "leader_cpu_seconds_per_gb": cpu["leader"][-1],
                              "follower_cpu_seconds_per_gb": cpu["follower"][-1]})  # fmt: skip
    rf1, rf3 = statistics.median(rates["rf1"]), statistics.median(rates["rf3"])
    print(f"throughput acks=all, 100 B, {messages} messages, median of {rounds}: RF=1 {rf1 / 1e3:.0f}k msg/s, "
          f"RF=3 {rf3 / 1e3:.0f}k msg/s, ratio {rf3 / rf1:.2f}")  # fmt: skip
    print(f"broker CPU during RF=3 produce (payload): leader {statistics.median(cpu['leader']):.2f} s/GB, "
          f"follower {statistics.median(cpu['follower']):.2f} s/GB")  # fmt: skip
    return {"messages": messages, "payload_bytes": 100, "acks": "all", "rounds": round_figures}


def bench_latency(cluster: Cluster, seconds: float) -> None:
    cluster.create("latency", [1, 2, 3])
    leader = cluster.partition("latency").leader
    follower = next(n for n in (1, 2, 3) if n != leader)
    before = {n: cpu_seconds(cluster.nodes[n].process.pid) for n in (leader, follower)}
    result = end_to_end_latency(cluster.bootstrap, "latency", 5000, seconds, 100, 120)
    after = {n: cpu_seconds(cluster.nodes[n].process.pid) for n in (leader, follower)}
    print(f"latency at 5,000 msg/s, RF=3 acks=all, {seconds:.0f} s: p50 {result['latency_p50_ms']:.2f} ms, "
          f"p99 {result['latency_p99_ms']:.2f} ms, p99.9 {result['latency_p999_ms']:.2f} ms, "
          f"max {result['latency_max_ms']:.2f} ms")  # fmt: skip
    # At this rate the batches are small: what a broker spends per request, not per byte
    # (warm-up and the consumer's idle polls included, the same for every build).
    per_thousand = 1000 / (5000 * seconds)
    print(f"broker CPU during the latency run, per 1,000 messages: leader {(after[leader] - before[leader]) * 1000 * per_thousand:.1f} ms, "
          f"follower {(after[follower] - before[follower]) * 1000 * per_thousand:.1f} ms")  # fmt: skip
    serial_acks_all(cluster, "latency", leader, follower, SERIAL_PRODUCES)


# One produce at a time: every request pays the whole RF=3 round trip, and the CPU
# per request does not depend on how the client batched (at a fixed rate it does).
SERIAL_PRODUCES = 2000


def serial_acks_all(cluster: Cluster, topic: str, leader: int, follower: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    payload = b"x" * 100
    for _ in range(100):  # connected, and the partition's leader known
        producer.produce(topic, payload)
        producer.flush(WAIT_S)
    before = {n: cpu_seconds(cluster.nodes[n].process.pid) for n in (leader, follower)}
    round_trips = []
    for _ in range(count):
        started = time.perf_counter()
        producer.produce(topic, payload)
        if producer.flush(WAIT_S):
            raise TimeoutError("a produce was not acknowledged")
        round_trips.append(time.perf_counter() - started)
    after = {n: cpu_seconds(cluster.nodes[n].process.pid) for n in (leader, follower)}
    round_trips.sort()
    print(f"one acks=all produce at a time, RF=3, {count}: round trip p50 {round_trips[count // 2] * 1000:.2f} ms, "
          f"p99 {round_trips[count * 99 // 100] * 1000:.2f} ms; broker CPU per request: "
          f"leader {(after[leader] - before[leader]) / count * 1e6:.0f} us, follower {(after[follower] - before[follower]) / count * 1e6:.0f} us")  # fmt: skip


def _failover_round(cluster: Cluster, topic: str, sig: int) -> float:
    from confluent_kafka import Producer

    partition = cluster.partition(topic)
    leader = partition.leader
    acked_after: list[float] = []
    errors: list = []
    stop = threading.Event()
    signalled_at = [None]

    producer = Producer({
        "bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0,
        "message.timeout.ms": 60000, "topic.metadata.refresh.interval.ms": 1000,
    })  # fmt: skip

    # Each delivery callback knows when its record was sent: only records sent
    # after the signal count, so an acknowledgement already in flight does not.
    def produce_stamped():
        while not stop.is_set():
            sent = time.monotonic()
            producer.produce(topic, b"x" * 100, on_delivery=lambda e, m, sent=sent: _delivered(e, sent))
            producer.poll(0.001)

    def _delivered(error, sent):
        if error is not None:
            errors.append(error)
        elif signalled_at[0] is not None and sent > signalled_at[0]:
            acked_after.append(time.monotonic())

    thread = threading.Thread(target=produce_stamped, daemon=True)
    thread.start()
    time.sleep(1.0)
    signalled_at[0] = time.monotonic()
    cluster.nodes[leader].stop(sig)
    try:
        cluster.wait(lambda: bool(acked_after), "an acknowledgement from the new leader", 60)
    finally:
        stop.set()
        thread.join(10)
        producer.flush(30)
    elapsed_ms = (acked_after[0] - signalled_at[0]) * 1000
    if errors:
        print(f"    {len(errors)} delivery errors, first: {errors[0]}")
    cluster.nodes[leader].start()
    cluster.wait(lambda: cluster.partition(topic) is not None and len(cluster.partition(topic).isrs) == 3, "the restarted broker back in the ISR")
    return elapsed_ms


def bench_failover(cluster: Cluster, rounds: int) -> None:
    cluster.create("failover", [1, 2, 3])
    for name, sig, bound in (("SIGKILL", signal.SIGKILL, f"goal <= {SESSION_TIMEOUT_MS + 1000} ms"), ("SIGTERM", signal.SIGTERM, "goal <= 1000 ms")):
        times_ms = []
        for round_no in range(rounds):
            elapsed = _failover_round(cluster, "failover", sig)
            times_ms.append(elapsed)
            print(f"  {name} round {round_no + 1}: first acknowledgement after {elapsed:.0f} ms")
        print(f"failover by {name} ({bound}; broker.session.timeout.ms={SESSION_TIMEOUT_MS}): "
              f"min {min(times_ms):.0f} ms, median {statistics.median(times_ms):.0f} ms, max {max(times_ms):.0f} ms")  # fmt: skip


def bench_catch_up(cluster: Cluster, megabytes: int) -> None:
    cluster.create("catchup", [1, 2, 3])
    follower: Node = cluster.nodes[3]
    follower.stop(signal.SIGTERM)
    cluster.wait(lambda: 3 not in cluster.partition("catchup").isrs, "the stopped follower out of the ISR")
    messages = megabytes * 10_000
    produce(cluster.bootstrap, "catchup", messages, 100, "all", 600)
    started = time.monotonic()
    follower.start()
    cluster.wait(lambda: cluster.partition("catchup") is not None and 3 in cluster.partition("catchup").isrs, "the follower back in the ISR", 600)
    seconds = time.monotonic() - started
    print(f"catch-up of {megabytes} MB of payload after a restart (start to ISR): {seconds:.1f} s, {megabytes / seconds:.1f} MB/s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="throughput,latency,failover,catchup")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--failover-rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--latency-seconds", type=float, default=20)
    parser.add_argument("--catch-up-mb", type=int, default=100)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for every node (repeatable), to compare settings side by side")
    parser.add_argument("--json", type=Path, help="also write the throughput figures of every round to this file")
    args = parser.parse_args(argv)
    for setting in args.set:
        key, _, value = setting.partition("=")
        CLUSTER_SETTINGS[key] = value
    only = set(args.only.split(","))
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp))
        try:
            if "throughput" in only:
                figures["throughput"] = bench_throughput(cluster, args.rounds, args.messages)
            if "latency" in only:
                bench_latency(cluster, args.latency_seconds)
            if "failover" in only:
                bench_failover(cluster, args.failover_rounds)
            if "catchup" in only:
                bench_catch_up(cluster, args.catch_up_mb)
        finally:
            cluster.stop()
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
