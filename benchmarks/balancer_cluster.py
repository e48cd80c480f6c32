"""The balancer on real processes: spreading partitions onto a new broker, and
re-creating the replicas of a dead one.

    python benchmarks/balancer_cluster.py                      # 300 partitions, 1,000 MB, 50 MiB/s
    python benchmarks/balancer_cluster.py --partitions 60 --data-mb 100 --latency-seconds 10
    python benchmarks/balancer_cluster.py --throttle-mib 20 --only add

Three combined nodes (1-3) and a broker-only node 4, processes on 127.0.0.1,
``balancer.mode=node_add``, ``balancer.throttle.bytes.per.second`` from
``--throttle-mib``, confluent-kafka clients, records of 1,000 B:

* add: one topic of ``--partitions`` partitions (RF=3) on nodes 1-3 is filled
  with ``--data-mb`` MB (the same number of records in every partition). A
  producer then sends at ``--rate`` records/s (acks=all, idempotent, keyless,
  spread over the partitions) for ``--latency-seconds`` with nothing moving;
  node 4 starts, and the same producer goes on until the cluster is balanced:
  replica counts per broker within max/min <= 1.1, every ISR full, and the
  balancer's status ready (nothing in flight). Prints the time from node 4's
  start to balanced, the data node 4 then holds, the replica and leader counts,
  and the produce latency (send to acknowledgement) of the records sent before
  node 4 started against those sent while the balancer moved partitions.
* fail (after "add", which it needs: ``--only fail`` runs both):
  ``balancer.broker.failure.threshold.ms`` is ``--threshold-s``; node 4
  (holding its share after "add") is SIGKILLed and left down. Prints the time
  from the kill until every partition again has three in-sync replicas, none on
  node 4, and from the threshold: the moment node 4 was first seen fenced (gone
  from Metadata) plus the threshold, when the balancer may start.

Each wait is bounded by ``--timeout-s``. The commit measured is printed first.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from quorum import Node, start_cluster  # noqa: E402
from workloads import _percentile, _producer_config  # noqa: E402

TOPIC = "balance"
NEW_BROKER = 4
RECORD_BYTES = 1000
SESSION_TIMEOUT_MS = 3000
CLUSTER_SETTINGS = {
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "broker.heartbeat.interval.ms": "300",
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "replica.lag.time.max.ms": "10000",
    "offsets.topic.replication.factor": "3",
    "group.initial.rebalance.delay.ms": "0",
    "balancer.mode": "node_add",
}
MIB = 1 << 20
POLL_INTERVAL_S = 0.5


def commit() -> str:
    found = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True, check=False)
    return found.stdout.strip() or "unknown"


class PacedProducer:
    """Sends ``rate`` records/s (acks=all, idempotent) in a thread and keeps,
    for every record, when it was sent and when it was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, rate: int):
        from confluent_kafka import Producer

        self.topic = topic
        self.rate = rate
        self.samples: list[tuple[float, float]] = []  # (sent, acknowledged), monotonic seconds
        self.errors: Counter = Counter()
        self.sent = 0
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 120000, "topic.metadata.refresh.interval.ms": 1000,
        })  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error, _message, sent: float) -> None:
        if error is None:
            self.samples.append((sent, time.monotonic()))
        else:
            self.errors[error.name()] += 1

    def _run(self) -> None:
        payload = b"x" * RECORD_BYTES
        started = time.monotonic()
        while not self._stop.is_set():
            due = min(1000, int((time.monotonic() - started) * self.rate) - self.sent)
            for _ in range(due):
                now = time.monotonic()
                try:
                    self.producer.produce(self.topic, payload, on_delivery=lambda e, m, now=now: self._delivered(e, m, now))
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.002)

    def start(self) -> "PacedProducer":
        self._thread.start()
        return self

    def stop(self, timeout_s: float) -> int:
        """Stop sending and wait (bounded) for every acknowledgement; the records left unacknowledged."""
        self._stop.set()
        self._thread.join(10)
        return self.producer.flush(timeout_s)

    def latency_ms(self, start: float, end: float) -> dict | None:
        window = sorted((acked - sent) * 1000 for sent, acked in self.samples if start <= sent < end)
        if not window:
            return None
        return {"records": len(window), "p50": _percentile(window, 0.5), "p99": _percentile(window, 0.99), "max": window[-1]}


class BalancerCluster:
    def __init__(self, root: Path, settings: dict[str, str]):
        self.root = root
        self.settings = settings
        self.nodes, _ = start_cluster(root, 3, settings)
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes.values() if n.process is not None and n.process.poll() is None)

    def add_broker(self) -> Node:
        overrides = dict(self.nodes[1].overrides)
        data_dir = self.root / f"node{NEW_BROKER}"
        data_dir.mkdir()
        overrides.update({
            "node.id": str(NEW_BROKER), "process.roles": "broker", "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(data_dir / "logs"),
        })  # fmt: skip
        node = Node(NEW_BROKER, data_dir, overrides)
        self.nodes[NEW_BROKER] = node
        node.start()
        return node

    def layout(self):
        """({(topic, partition): (leader, replicas, isr)}, live broker ids), or None."""
        try:
            metadata = self.admin.list_topics(timeout=10)
        except Exception:  # a node busy or going away: ask again
            return None
        partitions = {
            (name, p.id): (p.leader, tuple(p.replicas), tuple(sorted(p.isrs)))
            for name, topic in metadata.topics.items() if topic.error is None for p in topic.partitions.values()
        }  # fmt: skip
        return partitions, set(metadata.brokers)

    def balancer_status(self) -> str:
        described = subprocess.run(
            [sys.executable, "-m", "broker", "cluster", "balance", "--describe", "--bootstrap-server", self.bootstrap],
            capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
        )  # fmt: skip
        return described.stdout

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()


def wait(predicate, what: str, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"waiting for {what} ({timeout_s:.0f} s)")
        time.sleep(POLL_INTERVAL_S)


def fill(bootstrap: str, partitions: int, megabytes: int, timeout_s: float) -> float:
    """The same number of records of RECORD_BYTES in every partition (acks=all); the seconds it took."""
    from confluent_kafka import Producer

    config, failures = _producer_config(bootstrap, "all")
    producer = Producer(config)
    payload = b"x" * RECORD_BYTES
    per_partition = max(1, megabytes * 1_000_000 // RECORD_BYTES // partitions)
    started = time.monotonic()
    deadline = started + timeout_s
    for index in range(per_partition):
        for partition in range(partitions):
            while True:
                try:
                    producer.produce(TOPIC, payload, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.01)
                    if time.monotonic() > deadline:
                        raise TimeoutError("filling the topic")
        if index % 100 == 0:
            producer.poll(0)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    if left or failures:
        raise RuntimeError(f"filling the topic: {left} unacknowledged, {len(failures)} failed ({failures[:1]})")
    return time.monotonic() - started


def counts(partitions: dict, brokers) -> tuple[Counter, Counter]:
    replicas = Counter(dict.fromkeys(brokers, 0))
    leaders = Counter(dict.fromkeys(brokers, 0))
    for leader, members, _ in partitions.values():
        replicas.update(b for b in members if b in replicas)
        if leader in leaders:
            leaders[leader] += 1
    return replicas, leaders


def spread(counter: Counter) -> float:
    return max(counter.values()) / min(counter.values()) if min(counter.values()) > 0 else float("inf")


def log_bytes(node: Node) -> int:
    return sum(f.stat().st_size for f in (node.data_dir / "logs").glob(f"{TOPIC}-*/*.log"))


def format_latency(figures: dict | None) -> str:
    if figures is None:
        return "no records"
    return f"p50 {figures['p50']:.1f} ms, p99 {figures['p99']:.1f} ms, max {figures['max']:.1f} ms ({figures['records']} records)"


def bench_add(cluster: BalancerCluster, args) -> None:
    everyone = [1, 2, 3, NEW_BROKER]
    producer = PacedProducer(cluster.bootstrap, TOPIC, args.rate).start()
    baseline_start = time.monotonic()
    time.sleep(args.latency_seconds)
    started = time.monotonic()
    node4 = cluster.add_broker()
    joined = time.monotonic()  # node 4 printed its start line: registered and unfenced
    seen = {}

    def balanced():
        # The status first: a layout read after it is no older than it (a broker's
        # metadata may lag the controller's, so a layout read first could be).
        ready = "Status: ready" in cluster.balancer_status().splitlines()
        found = cluster.layout()
        if found is None:
            return None
        partitions, _ = found
        replicas, _ = counts(partitions, everyone)
        if replicas[NEW_BROKER] and "first_replica" not in seen:
            seen["first_replica"] = time.monotonic()
        if spread(replicas) > 1.1 or any(set(isr) != set(members) for _, members, isr in partitions.values()):
            return None
        seen.setdefault("even", time.monotonic())
        return ready and partitions

    try:
        partitions = wait(balanced, "an even spread onto node 4", args.timeout_s)
    finally:
        done = time.monotonic()
        left = producer.stop(60)
    replicas, leaders = counts(partitions, everyone)
    held_mb = log_bytes(node4) / 1e6
    filled_mb = replicas[NEW_BROKER] * args.data_mb / args.partitions
    seconds = done - joined
    print(f"add: node 4 up {joined - started:.1f} s after its process started; from then: first replica on it after "
          f"{seen.get('first_replica', done) - joined:.1f} s, even after {seen['even'] - joined:.1f} s, "
          f"balanced and ready after {seconds:.1f} s")  # fmt: skip
    print(f"  node 4 holds {held_mb:.0f} MB ({filled_mb:.0f} MB of it copied from the fill: "
          f"{filled_mb / seconds:.1f} MB/s; throttle {args.throttle_mib:g} MiB/s = {args.throttle_mib * MIB / 1e6:.1f} MB/s)")  # fmt: skip
    print(f"  replicas {dict(sorted(replicas.items()))} (max/min {spread(replicas):.2f}), "
          f"leaders {dict(sorted(leaders.items()))} (max/min {spread(leaders):.2f})")  # fmt: skip
    print(f"  produce latency at {args.rate} records/s, acks=all, before node 4: {format_latency(producer.latency_ms(baseline_start, started))}")
    print(f"  the same from node 4's start to balanced: {format_latency(producer.latency_ms(started, done))}")
    if producer.errors or left:
        print(f"  producer: {dict(producer.errors)} failed, {left} unacknowledged at the end")


def bench_fail(cluster: BalancerCluster, args) -> None:
    survivors = {1, 2, 3}
    node4 = cluster.nodes[NEW_BROKER]

    def holding():
        found = cluster.layout()
        return found is not None and sum(NEW_BROKER in members for _, members, _ in found[0].values())

    held = wait(holding, "replicas on node 4", args.timeout_s)
    killed = time.monotonic()
    node4.stop(signal.SIGKILL)
    seen = {}

    def restored():
        found = cluster.layout()
        if found is None:
            return None
        partitions, brokers = found
        if NEW_BROKER not in brokers:
            seen.setdefault("fenced", time.monotonic())
        return all(
            len(members) == 3 and set(members) <= survivors and set(isr) == set(members) for _, members, isr in partitions.values()
        )  # fmt: skip

    wait(restored, "three in-sync replicas on nodes 1-3", args.timeout_s)
    done = time.monotonic()
    fenced = seen.get("fenced", done)
    threshold_s = args.threshold_s
    print(f"fail: node 4 (holding {held} replicas) SIGKILLed; fenced after {fenced - killed:.1f} s "
          f"(broker.session.timeout.ms={SESSION_TIMEOUT_MS}); RF=3 restored {done - killed:.1f} s after the kill, "
          f"{done - fenced - threshold_s:.1f} s after the threshold ({threshold_s:.0f} s from fencing)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="add,fail")
    parser.add_argument("--partitions", type=int, default=300)
    parser.add_argument("--data-mb", type=int, default=1000)
    parser.add_argument("--throttle-mib", type=float, default=50)
    parser.add_argument("--rate", type=int, default=1000, help="records/s of the latency producer")
    parser.add_argument("--latency-seconds", type=float, default=30, help="the baseline window, before node 4 starts")
    parser.add_argument("--threshold-s", type=float, default=10, help="balancer.broker.failure.threshold.ms, in seconds")
    parser.add_argument("--max-moves-per-broker", type=int, default=5)
    parser.add_argument("--timeout-s", type=float, default=1800, help="the bound on each wait")
    args = parser.parse_args()
    only = set(args.only.split(","))
    settings = dict(CLUSTER_SETTINGS)
    settings.update({
        "balancer.throttle.bytes.per.second": str(int(args.throttle_mib * MIB)),
        "balancer.broker.failure.threshold.ms": str(int(args.threshold_s * 1000)),
        "balancer.max.moves.per.broker": str(args.max_moves_per_broker),
    })  # fmt: skip
    print(f"commit {commit()}: {args.partitions} partitions RF=3, {args.data_mb} MB, throttle {args.throttle_mib} MiB/s")
    with tempfile.TemporaryDirectory() as tmp:
        cluster = BalancerCluster(Path(tmp), settings)
        try:
            from confluent_kafka.admin import NewTopic

            futures = cluster.admin.create_topics([NewTopic(TOPIC, num_partitions=args.partitions, replication_factor=3)])
            futures[TOPIC].result(60)
            wait(lambda: (found := cluster.layout()) and sum(t == TOPIC for t, _ in found[0]) == args.partitions
                 and all(len(isr) == 3 for _, _, isr in found[0].values()), "the topic in sync", args.timeout_s)  # fmt: skip
            took = fill(cluster.bootstrap, args.partitions, args.data_mb, args.timeout_s)
            print(f"filled {TOPIC} with {args.data_mb} MB in {took:.1f} s")
            wait(lambda: (found := cluster.layout()) and all(len(isr) == 3 for _, _, isr in found[0].values()),
                 "every ISR full after the fill", args.timeout_s)  # fmt: skip
            if "add" in only or "fail" in only:
                bench_add(cluster, args)
            if "fail" in only:
                bench_fail(cluster, args)
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
