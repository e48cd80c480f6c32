"""What the metrics endpoint costs produce throughput: two brokers in one run,
one with ``metrics.listener`` (scraped every second, 15x Prometheus' default
rate) and one without, produced to in alternating rounds so that both see the
same machine; prints each round and the median of each side.

    python benchmarks/metrics_overhead.py --messages 500000 --size 100 --rounds 5
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from produce_consume import start_broker

SCRAPE_EVERY_S = 1.0


def produce_rate(bootstrap: str, topic: str, messages: int, size: int, acks: str, batch_bytes: int) -> float:
    """msg/s of ``messages`` records of ``size`` bytes through librdkafka."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": batch_bytes,
                         "acks": acks, "queue.buffering.max.messages": 2_000_000})
    payload = b"x" * size
    producer.produce(topic, payload)  # creates the topic, outside the timing
    producer.flush(30)
    started = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} messages not delivered")
    return messages / (time.perf_counter() - started)


def scrape_forever(port: int, stop: threading.Event, counts: list[int]) -> None:
    while not stop.wait(SCRAPE_EVERY_S):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            response.read()
        counts[0] += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--acks", default="1")
    # Kafka's default batch.size: many requests, so that a per-request cost shows
    # (1 MB batches would leave only a few dozen Produce requests to measure).
    parser.add_argument("--batch-bytes", type=int, default=16384)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        off_proc, off_bootstrap = start_broker(Path(tmp) / "off")
        on_proc, on_bootstrap = start_broker(
            Path(tmp) / "on", overrides={"metrics.listener": "http://127.0.0.1:0"}
        )
        stop = threading.Event()
        scrapes = [0]
        try:
            # The broker logs at WARNING here: find the endpoint's port from its socket instead.
            port = _metrics_port(on_proc.pid, int(on_bootstrap.rsplit(":", 1)[1]))
            scraper = threading.Thread(target=scrape_forever, args=(port, stop, scrapes), daemon=True)
            scraper.start()
            for round_index in range(args.rounds):
                # Alternate which side goes first, so neither always gets the warmer machine.
                order = ("off", "on") if round_index % 2 == 0 else ("on", "off")
                for side in order:
                    bootstrap = off_bootstrap if side == "off" else on_bootstrap
                    rate = produce_rate(bootstrap, f"bench-{round_index}", args.messages, args.size, args.acks, args.batch_bytes)
                    rates[side].append(rate)
                    print(f"round {round_index + 1} metrics {side:3}: {rate:,.0f} msg/s", flush=True)
        finally:
            stop.set()
            for proc in (off_proc, on_proc):
                proc.terminate()
                proc.wait(30)
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    print(
        f"messages={args.messages} size={args.size}B batch.size={args.batch_bytes} acks={args.acks} "
        f"rounds={args.rounds} scrapes={scrapes[0]}"
    )
    print(f"median produce: metrics off {off:,.0f} msg/s, on {on:,.0f} msg/s: {100 * (off - on) / off:+.1f} % slower with metrics")


def _metrics_port(pid: int, client_port: int) -> int:
    """The port other than the client listener's that the broker process listens on."""
    import os

    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        match = re.fullmatch(r"socket:\[(\d+)\]", target)
        if match:
            inodes.add(match.group(1))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            port = int(fields[1].rsplit(":", 1)[1], 16)
            if fields[3] == "0A" and fields[9] in inodes and port != client_port:
                return port
        time.sleep(0.1)
    raise RuntimeError("the metrics listener was not found")


if __name__ == "__main__":
    main()
