"""The broker's CPU per produce request against per batch: what a small request costs.

docs/SCALING.md needs to know how much of a produce request's cost goes with
the request (framing, decoding, the response, its send, a wake-up) and how much
with each partition's batch, because running several broker processes per host
turns one request of many batches into many requests of one batch. Against one
pybroker (started as benchmarks/suite.py starts it), acks=1, broker CPU from
/proc, the modes alternating (A, B, A, B ...):

- ``codec``: the same 16 KiB batches (150 records of 100 bytes) sent with our own
  protocol codec on one socket, either as requests of 16 partitions, 4 requests
  in flight, or as requests of one partition each, 64 in flight (the same bytes
  in flight). ``--codec-mb`` MB per run.
- ``librdkafka``: confluent-kafka (the suite's producer settings), one partition,
  ``--messages`` records of 100 bytes with ``batch.size`` 16384 and then 1000000;
  requests counted from librdkafka's statistics (the broker's ``tx``).

    python benchmarks/request_cost.py                     # both, 3 pairs each
    python benchmarks/request_cost.py --only codec --pairs 5 --codec-mb 128
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # after the sys.path lines: found in the benchmarks directory
import workloads

from protocol.framing import decode_response, encode_request
from protocol.primitives import INT32
from protocol.records import build_batch
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

PRODUCE = APIS_BY_NAME["Produce"]
PRODUCE_VERSION = 9
PARTITIONS = 16
RECORDS_PER_BATCH = 150
RECORD_BYTES = 100
WIDE_IN_FLIGHT = 4  # requests of 16 batches: 4 x 16 x 16 KiB = 1 MiB in flight
NARROW_IN_FLIGHT = 64  # requests of 1 batch: the same 1 MiB (the broker reads up to 64 ahead)
SOCKET_TIMEOUT_S = 60.0
RUN_DEADLINE_S = 300.0
TOPIC_WAIT_S = 30.0
LIBRDKAFKA_BATCH_SIZES = (16384, 1_000_000)
STATS_INTERVAL_MS = 100
STATS_SETTLE_S = 0.5  # one more statistics report after the flush: its tx counts every request


class _Socket:
    """A blocking socket of Kafka frames, every wait bounded by its timeout."""

    def __init__(self, bootstrap: str):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)

    def close(self) -> None:
        self.sock.close()

    def _exactly(self, count: int) -> bytes:
        data = bytearray()
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError(f"the broker closed after {len(data)} of {count} bytes")
            data += chunk
        return bytes(data)

    def read_frame(self) -> bytes:
        return self._exactly(self._size())

    def _size(self) -> int:
        return INT32.unpack(self._exactly(4))[0]


def _produce_frame(topic: str, partition_batches: dict[int, bytes]) -> bytes:
    classes = struct_classes(PRODUCE.request)
    body = classes.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=30000,
        topic_data=[
            classes.TopicProduceData(
                name=topic,
                partition_data=[classes.PartitionProduceData(index=p, records=b) for p, b in partition_batches.items()],
            )
        ],
    )
    return encode_request(PRODUCE, PRODUCE_VERSION, 1, "request-cost", body)


def _codec_run(broker: peers.RunningBroker, topic: str, wide: bool, megabytes: int) -> dict:
    batch = build_batch([(None, b"x" * RECORD_BYTES)] * RECORDS_PER_BATCH)
    batches = megabytes * (1 << 20) // len(batch) // PARTITIONS * PARTITIONS
    if wide:
        frames = [_produce_frame(topic, {p: batch for p in range(PARTITIONS)})] * (batches // PARTITIONS)
        in_flight = WIDE_IN_FLIGHT
    else:
        narrow = [_produce_frame(topic, {p: batch}) for p in range(PARTITIONS)]
        frames = [narrow[i % PARTITIONS] for i in range(batches)]
        in_flight = NARROW_IN_FLIGHT
    connection = _Socket(broker.bootstrap)
    deadline = time.monotonic() + RUN_DEADLINE_S
    try:
        cpu_start = broker.cpu_seconds()
        last = b""
        for start in range(0, len(frames), in_flight):
            workloads.check_deadline(deadline, "sending produce requests")
            chunk = frames[start:start + in_flight]
            connection.sock.sendall(b"".join(chunk))
            for _ in chunk:
                last = connection.read_frame()
        cpu_s = broker.cpu_seconds() - cpu_start
    finally:
        connection.close()
    _, response = decode_response(PRODUCE, PRODUCE_VERSION, last)
    errors = {p.error_code for t in response.responses for p in t.partition_responses}
    if errors != {0}:
        raise RuntimeError(f"produce answered with error codes {sorted(errors)}")
    return {"requests": len(frames), "batches": batches, "bytes": batches * len(batch), "cpu_s": cpu_s}


def _librdkafka_run(broker: peers.RunningBroker, topic: str, batch_size: int, messages: int) -> dict:
    from confluent_kafka import Producer

    workloads.create_topic(broker.bootstrap, topic, 1)
    sent = {"tx": 0}

    def on_stats(text: str) -> None:
        for entry in json.loads(text)["brokers"].values():
            if entry.get("nodeid", -1) >= 0:  # the broker, not the bootstrap entry
                sent["tx"] = entry["tx"]

    config, failures = workloads._producer_config(broker.bootstrap, "1")
    config.update({"batch.size": batch_size, "statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": on_stats})
    producer = Producer(config)
    producer.list_topics(topic, timeout=TOPIC_WAIT_S)
    producer.poll(STATS_SETTLE_S)
    tx_start, cpu_start = sent["tx"], broker.cpu_seconds()
    workloads._produce_all(producer, topic, b"x" * RECORD_BYTES, messages, time.monotonic() + RUN_DEADLINE_S)
    cpu_s = broker.cpu_seconds() - cpu_start
    producer.poll(STATS_SETTLE_S)
    if failures:
        raise RuntimeError(f"{len(failures)} messages failed, first: {failures[0]}")
    return {"requests": sent["tx"] - tx_start, "batches": None, "bytes": messages * RECORD_BYTES, "cpu_s": cpu_s}


def _line(label: str, run: dict) -> str:
    requests = max(1, run["requests"])
    text = (
        f"{label:<36} {run['requests']:>6} requests of {run['bytes'] / requests / 1024:7.1f} KiB: "
        f"broker {run['cpu_s']:.2f} CPU s, {run['cpu_s'] / (run['bytes'] / 1e9):5.2f} s/GB, "
        f"{run['cpu_s'] / requests * 1e6:6.0f} us/request"
    )
    if run["batches"]:
        text += f", {run['cpu_s'] / run['batches'] * 1e6:4.0f} us/batch"
    return text


def _pair_summary(wide: dict, narrow: dict) -> str:
    if wide["cpu_s"] <= 0:
        return "too short to measure (CPU time counts whole clock ticks)"
    extra_us = (narrow["cpu_s"] - wide["cpu_s"]) / (narrow["requests"] - wide["requests"]) * 1e6
    return f"{narrow['cpu_s'] / wide['cpu_s']:.2f}x the CPU; {extra_us:.0f} us per extra request"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="codec,librdkafka")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--codec-mb", type=int, default=64)
    parser.add_argument("--messages", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    with tempfile.TemporaryDirectory() as data_dir, peers.run_pybroker(Path(data_dir)) as broker:
        if "codec" in parts:
            workloads.create_topic(broker.bootstrap, "codec", PARTITIONS)
            _codec_run(broker, "codec", True, args.codec_mb)  # warm-up: segments open, memory touched
            _codec_run(broker, "codec", False, args.codec_mb)
            for pair in range(args.pairs):
                wide = _codec_run(broker, "codec", True, args.codec_mb)
                narrow = _codec_run(broker, "codec", False, args.codec_mb)
                print(_line("codec, 16 partitions a request", wide), flush=True)
                print(_line("codec, 1 partition a request", narrow), flush=True)
                print(f"  pair {pair + 1}: {_pair_summary(wide, narrow)}", flush=True)
        if "librdkafka" in parts:
            for pair in range(args.pairs):
                for batch_size in LIBRDKAFKA_BATCH_SIZES:
                    run = _librdkafka_run(broker, f"rdk-{pair}-{batch_size}", batch_size, args.messages)
                    print(_line(f"librdkafka, batch.size {batch_size}", run), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
