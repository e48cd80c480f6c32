"""Produce and consume throughput through a real broker with confluent-kafka.

Starts a fresh pybroker on an ephemeral 127.0.0.1 port, produces N messages of
S bytes to one partition with librdkafka (linger.ms=10, batch.size=1 MB), then
consumes them with an assigned consumer, and prints msg/s and MB/s for both.

    python benchmarks/produce_consume.py --messages 500000 --size 100
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def start_broker(data_dir: Path, no_uvloop: bool = False, overrides: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    extra = [arg for key, value in (overrides or {}).items() for arg in ("-o", f"{key}={value}")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker", "--log-level", "WARNING", "start",
         "-o", "listeners=PLAINTEXT://127.0.0.1:0", "-o", "advertised.listeners=", "-o", f"log.dirs={data_dir}",
         "-o", "offsets.topic.replication.factor=1", "-o", "transaction.state.log.replication.factor=1",
         "-o", "transaction.state.log.min.isr=1"]
        + extra
        + (["--no-uvloop"] if no_uvloop else []),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    deadline = time.monotonic() + 30
    for line in proc.stdout:
        match = re.search(r"listening on (\S+)", line)
        if match:
            return proc, match.group(1)
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("broker did not start")


def raw_fetch_all(bootstrap: str, end_offset: int) -> tuple[float, int]:
    """Read the topic with bare Fetch requests (our codec, one socket): what the
    broker serves when no client library sits in between."""
    from protocol.client import ClientConnectionState
    from protocol.framing import SIZE_PREFIX_BYTES
    from protocol.records import iter_batches
    from protocol.registry import APIS_BY_NAME
    from protocol.schema import struct_classes

    api = APIS_BY_NAME["Fetch"]
    Q = struct_classes(api.request)
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    state = ClientConnectionState("bench")

    def recv_exactly(n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks += chunk
        return bytes(chunks)

    offset, total, requests = 0, 0, 0
    start = time.perf_counter()
    while offset < end_offset and requests < 100_000:
        requests += 1
        request = Q.FetchRequest(
            max_wait_ms=100, min_bytes=1, max_bytes=50 << 20,
            topics=[Q.FetchTopic(topic="bench", partitions=[Q.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=10 << 20)])],
        )
        sock.sendall(state.send(api, 12, request)[1])
        response = state.receive_frame(recv_exactly(state.frame_size(recv_exactly(SIZE_PREFIX_BYTES)))).body
        records = response.responses[0].partitions[0].records or b""
        total += len(records)
        for _, _, header in iter_batches(records, allow_truncated_tail=True):
            offset = header.base_offset + header.last_offset_delta + 1
    sock.close()
    return time.perf_counter() - start, total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--acks", default="1")
    parser.add_argument("--no-uvloop", action="store_true", help="run the broker on the standard asyncio loop (zero-copy sendfile)")
    args = parser.parse_args()
    from confluent_kafka import Consumer, Producer, TopicPartition

    with tempfile.TemporaryDirectory() as tmp:
        proc, bootstrap = start_broker(Path(tmp), args.no_uvloop)
        try:
            payload = b"x" * args.size
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "batch.size": 1_000_000,
                                 "acks": args.acks, "queue.buffering.max.messages": 2_000_000})
            producer.produce("bench", payload)  # creates the topic
            producer.flush(30)
            start = time.perf_counter()
            for _ in range(args.messages):
                while True:
                    try:
                        producer.produce("bench", payload)
                        break
                    except BufferError:
                        producer.poll(0.01)
            producer.flush(120)
            produce_s = time.perf_counter() - start

            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                                 "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760})
            consumer.assign([TopicPartition("bench", 0, 1)])
            received = 0
            start = time.perf_counter()
            deadline = time.monotonic() + 300
            while received < args.messages and time.monotonic() < deadline:
                for message in consumer.consume(10000, 1.0):
                    if not message.error():
                        received += 1
            consume_s = time.perf_counter() - start
            consumer.close()
            raw_s, raw_bytes = raw_fetch_all(bootstrap, args.messages + 1)
        finally:
            proc.terminate()
            proc.wait(30)
    mb = args.messages * args.size / 1e6
    print(f"messages={args.messages} size={args.size}B acks={args.acks} loop={'asyncio' if args.no_uvloop else 'uvloop'}")
    print(f"produce: {args.messages / produce_s:,.0f} msg/s  {mb / produce_s:,.1f} MB/s  ({produce_s:.2f} s)")
    print(f"consume: {received / consume_s:,.0f} msg/s  {received * args.size / 1e6 / consume_s:,.1f} MB/s  ({consume_s:.2f} s, {received} received)")
    print(f"raw fetch (no client library): {(args.messages + 1) / raw_s:,.0f} msg/s  {raw_bytes / 1e6 / raw_s:,.1f} MB/s on the wire  ({raw_s:.2f} s)")


if __name__ == "__main__":
    main()
