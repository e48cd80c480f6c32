"""Produce and consume throughput over SSL against PLAINTEXT, in the same run.

Starts one pybroker with an SSL listener and a PLAINTEXT one (certificates made
with the openssl command, as the tests make them), then for each listener in
turn produces N messages of S bytes to a fresh one-partition topic with
confluent-kafka (linger.ms=10, batch.size=1 MB) and consumes them with an
assigned consumer. Prints MB/s for each and the SSL/PLAINTEXT ratios (the
issue's goal: >= 0.6 for produce). Fetches over TLS read the segment files
instead of using sendfile, so consume shows that cost too.

    python benchmarks/tls.py --messages 300000 --size 1000
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.produce_consume import start_broker
from tests.tls_certs import make_certs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def produce(settings: dict, topic: str, messages: int, size: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({**settings, "linger.ms": 10, "batch.size": 1_000_000, "acks": 1})
    value = b"x" * size
    started = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return time.perf_counter() - started


def consume(settings: dict, topic: str, messages: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**settings, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    while got < messages:
        batch = consumer.consume(10_000, timeout=1.0)
        got += sum(1 for m in batch if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--no-uvloop", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pybroker-tls-bench-") as tmp:
        certs = make_certs(Path(tmp) / "certs")
        ssl_port, plain_port = free_port(), free_port()
        proc, _ = start_broker(
            Path(tmp) / "logs",
            args.no_uvloop,
            {
                "listeners": f"SSL://127.0.0.1:{ssl_port},PLAINTEXT://127.0.0.1:{plain_port}",
                "ssl.keystore.location": str(certs.server_keystore),
            },
        )
        try:
            listeners = {
                "PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{plain_port}"},
                "SSL": {
                    "bootstrap.servers": f"127.0.0.1:{ssl_port}",
                    "security.protocol": "SSL",
                    "ssl.ca.location": str(certs.ca),
                },
            }
            megabytes = args.messages * args.size / 1e6
            results = {}
            for name, settings in listeners.items():
                topic = f"bench-{name.lower()}-{uuid.uuid4().hex[:6]}"
                produce(settings, topic, 1000, args.size)  # creates the topic, warms the connection
                produce_s = produce(settings, topic, args.messages, args.size)
                consume_s = consume(settings, topic, args.messages + 1000)
                results[name] = (megabytes / produce_s, (megabytes + 1000 * args.size / 1e6) / consume_s)
                print(f"{name:9} produce {results[name][0]:8.1f} MB/s   consume {results[name][1]:8.1f} MB/s", flush=True)
            print(
                f"SSL/PLAINTEXT ratio: produce {results['SSL'][0] / results['PLAINTEXT'][0]:.2f}, "
                f"consume {results['SSL'][1] / results['PLAINTEXT'][1]:.2f} "
                f"({args.messages} messages of {args.size} bytes, {'asyncio' if args.no_uvloop else 'uvloop'})"
            )
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
