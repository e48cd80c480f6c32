"""How long the broker's event loop leaves requests waiting during big, slow work.

A prober thread sends one ApiVersions request every ``--probe-interval-ms`` on
its own connection and times each round trip, while the broker does one of:

- create:     CreateTopics of one topic with ``--partitions`` partitions (20,000),
              probed until every partition's directory exists;
- delete:     DeleteTopics of such a topic (made first, not measured), probed
              until every partition's directory is gone;
- retention:  retention deletes ``--segments`` segments (1,000) of one topic at once,
              while a producer sends at ``--rate`` msg/s (5,000) acks=all and its
              p99.9 produce latency is measured too;
- durable:    acks=all produce with ``flush.messages=1`` (an fsync per batch) to
              ``--durable-partitions`` partitions (1,000) from one producer, and the
              same into a page-cache topic, alternating: messages/s of each and
              their ratio;
- compaction: the log cleaner compacts one partition of ``--compaction-mb`` MB
              (about 1.2 million 100-byte records over 1,000 keys): how long
              until it is cleaned, and ApiVersions meanwhile;
- shutdown:   SIGTERM of a broker holding ``--shutdown-partitions`` partitions
              (with a record each): seconds from the signal to the exit, and from
              a kill -9 restart to serving (``--restarts`` times; with
              ``--shutdown-dir`` the partitions are kept there and reused).

Each phase prints the ApiVersions round trips (p50 / p99 / max, ms) while it ran,
and the broker's own figure: the largest lag its loop monitor saw
(``pybroker_event_loop_lag_max_seconds`` from its metrics endpoint, read before
and after the phase), the largest part of a lag its thread spent on the CPU
(``pybroker_event_loop_lag_cpu_max_seconds``: on a shared machine a lag also
holds time the broker was not scheduled or waited for the disk) and how many
of its samples were over 50 ms meanwhile.

    python benchmarks/loop_stalls.py                     # every phase
    python benchmarks/loop_stalls.py --only create --partitions 20000
"""

from __future__ import annotations

import argparse
import re
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import peers
from metrics_overhead import _metrics_port

from protocol.client import ClientConnectionState
from protocol.framing import SIZE_PREFIX_BYTES
from protocol.registry import APIS_BY_NAME

API_VERSIONS = APIS_BY_NAME["ApiVersions"]
PHASES = ("create", "delete", "retention", "durable", "compaction", "shutdown")
METRICS_OVERRIDES = {"metrics.listener": "http://127.0.0.1:0"}
STALL_MS = 50
WAIT_S = 600.0


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class Prober:
    """ApiVersions round trips on one connection, every interval, in a thread."""

    def __init__(self, bootstrap: str, interval_ms: float):
        host, port = bootstrap.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=60)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._state = ClientConnectionState("loop-stalls")
        self._interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self.round_trips_ms: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _round_trip(self) -> float:
        body = API_VERSIONS.request.cls(client_software_name="loop-stalls", client_software_version="1")
        _, request = self._state.send(API_VERSIONS, 3, body)
        started = time.perf_counter()
        self._sock.sendall(request)
        frame = self._recv_exactly(self._state.frame_size(self._recv_exactly(SIZE_PREFIX_BYTES)))
        elapsed_ms = (time.perf_counter() - started) * 1000
        self._state.receive_frame(frame)  # checks it answers this request
        return elapsed_ms

    def _recv_exactly(self, count: int) -> bytes:
        chunks, remaining = [], count
        while remaining:
            chunk = self._sock.recv(remaining)
            if not chunk:
                raise ConnectionError("broker closed the probe connection")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.round_trips_ms.append(self._round_trip())
            self._stop.wait(self._interval_s)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(70)
        self._sock.close()

    def summary(self) -> str:
        trips = self.round_trips_ms
        return (
            f"ApiVersions round trips: {len(trips)}, p50 {percentile(trips, 0.5):.2f} ms, "
            f"p99 {percentile(trips, 0.99):.2f} ms, max {max(trips, default=float('nan')):.2f} ms"
        )


class LoopLag:
    """The broker's loop monitor, read from its metrics endpoint: the largest lag
    since the start and the count of samples over ``STALL_MS``."""

    def __init__(self, broker):
        self._url = f"http://127.0.0.1:{_metrics_port(broker.process.pid, int(broker.bootstrap.rsplit(':', 1)[1]))}/metrics"
        self._before = self._read()

    def _read(self) -> tuple[float, int]:
        with urllib.request.urlopen(self._url, timeout=60) as response:
            text = response.read().decode()
        self.cpu_max_ms = 1000 * float(re.search(r"^pybroker_event_loop_lag_cpu_max_seconds (\S+)$", text, re.M).group(1))
        max_s = float(re.search(r"^pybroker_event_loop_lag_max_seconds (\S+)$", text, re.M).group(1))
        bound = repr(STALL_MS / 1000)
        under = float(re.search(rf'^pybroker_event_loop_lag_seconds_bucket{{le="{re.escape(bound)}"}} (\S+)$', text, re.M).group(1))
        total = float(re.search(r"^pybroker_event_loop_lag_seconds_count (\S+)$", text, re.M).group(1))
        return max_s * 1000, int(total - under)

    def mark(self) -> None:
        """The phase starts now: what came before (start-up, set-up) is set apart."""
        self._before = self._read()

    def since_start(self) -> str:
        max_ms, over = self._read()
        return (
            f"broker loop monitor since its start: max {max_ms:.0f} ms (of which on its CPU at least {self.cpu_max_ms:.0f} ms), "
            f"{over} samples over {STALL_MS} ms"
        )

    def summary(self) -> str:
        max_before_ms, over_before = self._before
        cpu_before_ms = self.cpu_max_ms
        max_ms, over = self._read()
        if max_ms > max_before_ms:
            largest = f"max {max_ms:.0f} ms"
        else:  # the phase's own largest is hidden behind an earlier one
            largest = f"max <= {max_before_ms:.0f} ms (the largest before the phase)"
        if self.cpu_max_ms > cpu_before_ms:
            cpu = f"largest part on its CPU {self.cpu_max_ms:.0f} ms"
        else:
            cpu = f"largest part on its CPU <= {cpu_before_ms:.0f} ms (before the phase)"
        return f"broker loop monitor: {largest}, {cpu}, {over - over_before} samples over {STALL_MS} ms"


def print_stall_stacks(broker, blocks_max: int = 3, frames_max: int | None = None) -> None:
    """The stacks the broker's loop monitor logged for stalls of 500 ms or more
    (from the tail of its output): where the loop was held. With ``frames_max``
    only each stack's innermost frames (one line each)."""
    text = broker.output()
    blocks = [block for block in text.split("WARNING ") if "so far, in:" in block]
    for block in blocks[:blocks_max]:
        if frames_max is not None:
            head, _, stack = block.partition("so far, in:")
            frames = [line.strip() for line in stack.splitlines() if line.strip().startswith("File ")]
            block = head + "so far, in: ... " + " <- ".join(reversed(frames[-frames_max:]))
        print("  broker: " + block.strip().replace("\n", "\n  "), flush=True)


def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict | None = None) -> float:
    from confluent_kafka.admin import NewTopic

    started = time.perf_counter()
    client = admin(bootstrap)  # kept referenced: the futures fail when it is destroyed
    futures = client.create_topics(
        [NewTopic(name, partitions, 1, config=configs or {})], operation_timeout=WAIT_S, request_timeout=WAIT_S
    )
    futures[name].result(WAIT_S)
    return time.perf_counter() - started


def partition_dirs(data_dir: Path, topic: str) -> int:
    return sum(1 for path in data_dir.iterdir() if re.fullmatch(rf"{topic}-\d+", path.name))


def phase_create(broker, args, data_dir: Path) -> None:
    bootstrap = broker.bootstrap
    lag = LoopLag(broker)
    with Prober(bootstrap, args.probe_interval_ms) as prober:
        time.sleep(0.5)
        lag.mark()
        started = time.perf_counter()
        elapsed_s = create_topic(bootstrap, "big", args.partitions)
        # The partitions' directories are made in the background: probe until they all exist.
        deadline = time.monotonic() + WAIT_S
        while partition_dirs(data_dir, "big") < args.partitions and time.monotonic() < deadline:
            time.sleep(0.1)
        directories_s = time.perf_counter() - started
        time.sleep(0.5)
    print(
        f"create {args.partitions} partitions: {elapsed_s:.2f} s, their directories {directories_s:.1f} s; {prober.summary()}; "
        f"{lag.summary()}",
        flush=True,
    )


def phase_delete(broker, args, data_dir: Path) -> None:
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "big", args.partitions)
    deadline = time.monotonic() + WAIT_S
    while partition_dirs(data_dir, "big") < args.partitions and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)
    lag = LoopLag(broker)
    with Prober(bootstrap, args.probe_interval_ms) as prober:
        time.sleep(0.5)
        lag.mark()
        started = time.perf_counter()
        client = admin(bootstrap)  # kept referenced: the future fails when it is destroyed
        client.delete_topics(["big"], operation_timeout=WAIT_S, request_timeout=WAIT_S)["big"].result(WAIT_S)
        answered_s = time.perf_counter() - started
        # Probe until every directory is gone (however the broker removes them).
        deadline = time.monotonic() + WAIT_S
        while any(path.name.startswith("big-") for path in data_dir.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.1)
        gone_s = time.perf_counter() - started
        time.sleep(0.5)
    print(
        f"delete {args.partitions} partitions: {answered_s:.2f} s, their directories gone {gone_s:.1f} s; {prober.summary()}; "
        f"{lag.summary()}",
        flush=True,
    )


def produce_at_rate(bootstrap: str, topic: str, rate_per_s: int, seconds: float, size_bytes: int) -> list[float]:
    """acks=all produce latencies (ms, send to delivery report) at a fixed rate."""
    from confluent_kafka import Producer

    latencies_ms: list[float] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    payload = b"x" * size_bytes

    def delivered(error, _message, sent=None) -> None:
        if error is None:
            latencies_ms.append((time.perf_counter() - sent) * 1000)

    interval_s = 1 / rate_per_s
    next_send = time.perf_counter()
    deadline = next_send + seconds
    while next_send < deadline:
        now = time.perf_counter()
        if now < next_send:
            producer.poll(0)
            if next_send - now > 0.0005:
                time.sleep(min(next_send - now, 0.001))
            continue
        producer.produce(topic, payload, on_delivery=lambda e, m, sent=now: delivered(e, m, sent))
        next_send += interval_s
    producer.flush(60)
    return latencies_ms


def phase_retention(bootstrap: str, args, lag: LoopLag) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import ConfigResource

    segment_bytes = 16_384
    create_topic(bootstrap, "aging", 1, {"segment.bytes": str(segment_bytes)})
    create_topic(bootstrap, "live", 1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 4096})
    payload = b"r" * 1000
    for _ in range(args.segments * segment_bytes // 1000 + 100):
        producer.produce("aging", payload)
        producer.poll(0)
    producer.flush(60)
    baseline = produce_at_rate(bootstrap, "live", args.rate, 3.0, 100)
    resource = ConfigResource("topic", "aging", set_config={"retention.ms": "1"})
    with Prober(bootstrap, args.probe_interval_ms) as prober:
        lag.mark()
        result: dict = {}
        worker = threading.Thread(target=lambda: result.update(latencies=produce_at_rate(bootstrap, "live", args.rate, 8.0, 100)))
        worker.start()
        time.sleep(1.0)
        client = admin(bootstrap)
        client.alter_configs([resource])[resource].result(30)
        worker.join(60)
    latencies = result.get("latencies", [])
    print(
        f"retention of ~{args.segments} segments: produce at {args.rate} msg/s p99 {percentile(latencies, 0.99):.2f} ms, "
        f"p99.9 {percentile(latencies, 0.999):.2f} ms (before: p99.9 {percentile(baseline, 0.999):.2f} ms); {prober.summary()}; {lag.summary()}",
        flush=True,
    )


def phase_compaction(bootstrap: str, args, data_dir: Path, lag: LoopLag) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import ConfigResource

    # A huge min.compaction.lag.ms keeps every segment uncleanable while the
    # topic is written; setting it to 0 starts the cleaning, timed from there.
    create_topic(
        bootstrap, "keyed", 1,
        {"cleanup.policy": "compact", "segment.bytes": str(8 << 20), "min.compaction.lag.ms": str(10**12)},
    )
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 65536})
    value = b"c" * 100
    records = args.compaction_mb * (1 << 20) // 110
    for i in range(records):
        while True:
            try:
                producer.produce("keyed", value, key=b"key-%04d" % (i % 1000))
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(WAIT_S) == 0
    directory = data_dir / "keyed-0"

    def log_bytes() -> int:
        return sum(p.stat().st_size for p in directory.glob("*.log"))

    before = log_bytes()
    resource = ConfigResource("topic", "keyed", set_config={
        "cleanup.policy": "compact", "segment.bytes": str(8 << 20), "min.compaction.lag.ms": "0",
    })
    with Prober(bootstrap, args.probe_interval_ms) as prober:
        lag.mark()
        started = time.perf_counter()
        client = admin(bootstrap)  # kept referenced: the future fails when it is destroyed
        client.alter_configs([resource])[resource].result(30)
        while log_bytes() > before // 10 and time.perf_counter() - started < WAIT_S:
            time.sleep(0.1)
        cleaned_s = time.perf_counter() - started
    print(
        f"compaction of {before / 1e6:.0f} MB ({records:,} records, 1,000 keys) to {log_bytes() / 1e6:.1f} MB: "
        f"{cleaned_s:.1f} s after the config change; {prober.summary()}; {lag.summary()}",
        flush=True,
    )


def produce_spread(bootstrap: str, topic: str, partitions: int, messages: int) -> float:
    """acks=all messages/s, spread over every partition, one producer."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    payload = b"d" * 100
    started = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, payload, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(WAIT_S)
    assert remaining == 0
    return messages / (time.perf_counter() - started)


def phase_durable(bootstrap: str, args, lag: LoopLag) -> None:
    partitions = args.durable_partitions
    create_topic(bootstrap, "durable", partitions, {"flush.messages": "1"})
    create_topic(bootstrap, "cached", partitions)
    rates: dict[str, list[float]] = {"durable": [], "cached": []}
    with Prober(bootstrap, args.probe_interval_ms) as prober:
        lag.mark()
        for _ in range(args.rounds):
            for topic in ("durable", "cached"):
                rates[topic].append(produce_spread(bootstrap, topic, partitions, args.durable_messages))
    durable, cached = statistics.median(rates["durable"]), statistics.median(rates["cached"])
    print(
        f"acks=all to {partitions} partitions: flush.messages=1 {durable:,.0f} msg/s, page cache {cached:,.0f} msg/s, "
        f"ratio {durable / cached:.2f} (medians of {args.rounds}); {prober.summary()}; {lag.summary()}",
        flush=True,
    )


def make_many_partitions(args, data_dir: Path) -> None:
    """``--shutdown-partitions`` partitions (100 topics of 1000) with a record
    each, then a clean stop, timed."""
    from confluent_kafka import Producer

    broker_cm = peers.run_pybroker(data_dir)
    broker = broker_cm.__enter__()
    try:
        per_topic = 1000
        for index in range(args.shutdown_partitions // per_topic):
            create_topic(broker.bootstrap, f"many{index:03d}", per_topic)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
        for index in range(args.shutdown_partitions // per_topic):
            for partition in range(per_topic):
                producer.produce(f"many{index:03d}", b"v", partition=partition)
                producer.poll(0)
        assert producer.flush(WAIT_S) == 0
        started = time.perf_counter()
        broker.process.send_signal(signal.SIGTERM)
        broker.process.wait(WAIT_S)
        stop_s = time.perf_counter() - started
        print(f"{args.shutdown_partitions} partitions: SIGTERM to exit {stop_s:.2f} s", flush=True)
    finally:
        broker_cm.__exit__(None, None, None)


def start_after_kill(data_dir: Path) -> None:
    """A start, a kill -9 a second later, then the start measured: to listening
    (every log recovered), to serving every partition (each has a leader in
    the metadata: the broker's unfence and the elections it brings are done),
    the broker's CPU seconds until each (less sensitive to a shared machine
    than the wall clock) and its loop monitor over the whole start."""
    with peers.run_pybroker(data_dir) as broker:
        time.sleep(1)
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait(30)
    started = time.perf_counter()
    with peers.run_pybroker(data_dir, METRICS_OVERRIDES) as broker:
        serving_s = time.perf_counter() - started
        cpu_s = process_cpu_s(broker.process.pid)
        last_topic = max(path.name.rsplit("-", 1)[0] for path in data_dir.iterdir() if path.name.startswith("many"))
        with Prober(broker.bootstrap, 50) as prober:
            # The elections go topic by topic in the image's order: the last
            # topic is led last. It alone is polled while the prober runs (a
            # Metadata answer of 100,000 partitions holds the broker's loop for
            # seconds: it would be the benchmark's own stall).
            wait_all_led(broker.bootstrap, last_topic, WAIT_S)
            led_s = time.perf_counter() - started
            led_cpu_s = process_cpu_s(broker.process.pid)
        leaderless = wait_all_led(broker.bootstrap, "many", WAIT_S)  # then every partition, checked once
        start_lag = LoopLag(broker).since_start()
        print_stall_stacks(broker, blocks_max=12, frames_max=4)
    partitions = sum(1 for path in data_dir.iterdir() if path.name.startswith("many"))
    print(
        f"{partitions} partitions: start after kill -9 to listening (every log recovered) {serving_s:.2f} s, "
        f"broker CPU {cpu_s:.1f} s; to every partition led {led_s:.2f} s"
        f"{f' ({leaderless} still without a leader)' if leaderless else ''}, broker CPU {led_cpu_s:.1f} s "
        f"(ApiVersions meanwhile {prober.summary()}); {start_lag}",
        flush=True,
    )


def wait_all_led(bootstrap: str, prefix: str, bound_s: float) -> int:
    """Wait (bounded by ``bound_s``) until every partition of the topics named
    ``prefix...`` has a leader; the count still without one (-1: none seen)."""
    client = admin(bootstrap)
    deadline = time.monotonic() + bound_s
    leaderless = -1
    while time.monotonic() < deadline:
        try:
            # One topic asked by name when the prefix is a whole name (cheap);
            # else all of them.
            topics = client.list_topics(topic=prefix if prefix[-1].isdigit() else None, timeout=60).topics
        except Exception:  # the broker still starting: try again
            time.sleep(0.5)
            continue
        named = [t for name, t in topics.items() if name.startswith(prefix)]
        leaderless = sum(1 for t in named for p in t.partitions.values() if p.leader < 0) if named else -1
        if leaderless == 0:
            return 0
        time.sleep(0.2)
    return leaderless


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase_shutdown(args) -> None:
    # Recovering 100,000 logs after a kill takes longer than peers' usual start-up bound.
    peers.STARTUP_TIMEOUT_S = WAIT_S
    if args.shutdown_dir is not None:
        # Kept between runs: made once (minutes), then only the starts are measured.
        data_dir = Path(args.shutdown_dir)
        if not (data_dir / "many000-0").exists():
            data_dir.mkdir(parents=True, exist_ok=True)
            make_many_partitions(args, data_dir)
        for _ in range(args.restarts):
            start_after_kill(data_dir)
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as data_dir:
        make_many_partitions(args, Path(data_dir))
        for _ in range(args.restarts):
            start_after_kill(Path(data_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(PHASES), help=f"comma-separated phases of {', '.join(PHASES)}")
    parser.add_argument("--partitions", type=int, default=20_000)
    parser.add_argument("--segments", type=int, default=1_000)
    parser.add_argument("--rate", type=int, default=5_000)
    parser.add_argument("--durable-partitions", type=int, default=100)
    parser.add_argument("--durable-messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shutdown-partitions", type=int, default=100_000)
    parser.add_argument("--restarts", type=int, default=1, help="shutdown: starts after kill -9 measured")
    parser.add_argument(
        "--shutdown-dir", default=None,
        help="shutdown: keep the partitions here (made on the first run, reused by later ones) instead of a temp dir",
    )
    parser.add_argument("--compaction-mb", type=int, default=128)
    parser.add_argument("--probe-interval-ms", type=float, default=5.0)
    parser.add_argument("--dir", default=None, help="where the brokers' data goes (default: the system's temp dir)")
    args = parser.parse_args()
    selected = [p for p in args.only.split(",") if p]
    unknown = set(selected) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    for phase in selected:
        if phase == "shutdown":
            phase_shutdown(args)
            continue
        with tempfile.TemporaryDirectory(dir=args.dir) as data_dir:
            overrides = {"log.retention.check.interval.ms": "500", "log.cleaner.backoff.ms": "500", **METRICS_OVERRIDES}
            with peers.run_pybroker(Path(data_dir), overrides) as broker:
                if phase == "create":
                    phase_create(broker, args, Path(data_dir))
                elif phase == "delete":
                    phase_delete(broker, args, Path(data_dir))
                elif phase == "compaction":
                    phase_compaction(broker.bootstrap, args, Path(data_dir), LoopLag(broker))
                else:
                    {"retention": phase_retention, "durable": phase_durable}[phase](broker.bootstrap, args, LoopLag(broker))
                print_stall_stacks(broker)


if __name__ == "__main__":
    main()
