"""The broker's CPU per request and per GB on its client hot paths, without a client library in the way.

One Python client with a raw socket sends ready-made requests to a fresh
pybroker and reads the answers, keeping ``--in-flight`` requests outstanding:

- produce: Produce v9, acks=1, one partition, one record batch of ``--records``
  records of ``--size`` bytes (the same encoded batch every time: the broker
  gives it new offsets, so it is appended every time);
- fetch:   Fetch v12 of the partition produce filled, from offset 0 up, at most
  ``--fetch-bytes`` per answer, as a consumer reads it (each answer's next
  offset is the next request's), until the end, then again from 0.

The client encodes each request once, so nearly all of the CPU it spends is
its socket; the broker's CPU seconds (user + system, all threads, read from
/proc before and after) per request and per GB of records are the figures.
Batch sizes pick what is measured: ``--records 8000`` (0.9 MB batches) is
mostly per-byte work, ``--records 10`` mostly per-request work.

    python benchmarks/request_path.py
    python benchmarks/request_path.py --records 10 --requests 20000
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import peers

from protocol.client import ClientConnectionState
from protocol.registry import APIS_BY_NAME
from protocol.records import build_batch
from protocol.schema import struct_classes

PRODUCE = APIS_BY_NAME["Produce"]
FETCH = APIS_BY_NAME["Fetch"]
METADATA = APIS_BY_NAME["Metadata"]
CREATE_TOPICS = APIS_BY_NAME["CreateTopics"]
TOPIC = "request-path"
WAIT_S = 60.0
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def broker_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


class Connection:
    """One blocking socket and the protocol state of its requests."""

    def __init__(self, bootstrap: str):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.state = ClientConnectionState("request-path")
        self._buffer = bytearray()

    def send(self, api, version: int, body) -> bytes:
        return self.state.send(api, version, body)[1]

    def receive(self):
        while True:
            response = self.state.next_response()
            if response is not None:
                return response.body
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            self.state.receive_data(chunk)

    def call(self, api, version: int, body):
        self.sock.sendall(self.send(api, version, body))
        return self.receive()

    def close(self) -> None:
        self.sock.close()


def create_topic(connection: Connection) -> None:
    body = CREATE_TOPICS.request.cls(topics=[_new_topic()], timeout_ms=30_000)
    answer = connection.call(CREATE_TOPICS, 5, body)
    error = answer.topics[0].error_code
    if error not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
        raise RuntimeError(f"CreateTopics failed: error {error}")
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        metadata = connection.call(METADATA, 9, METADATA.request.cls(topics=[_metadata_topic()]))
        partitions = metadata.topics[0].partitions if metadata.topics else []
        if partitions and partitions[0].leader_id >= 0 and partitions[0].error_code == 0:
            return
        time.sleep(0.05)
    raise RuntimeError("the topic's partition got no leader")


def _new_topic():
    return struct_classes(CREATE_TOPICS.request).CreatableTopic(
        name=TOPIC, num_partitions=1, replication_factor=1, assignments=[], configs=[]
    )


def _metadata_topic():
    return struct_classes(METADATA.request).MetadataRequestTopic(name=TOPIC)


def produce_request(connection: Connection, batch: bytes) -> bytes:
    structs = struct_classes(PRODUCE.request)
    body = PRODUCE.request.cls(
        transactional_id=None,
        acks=1,
        timeout_ms=30_000,
        topic_data=[structs.TopicProduceData(name=TOPIC, partition_data=[structs.PartitionProduceData(index=0, records=batch)])],
    )
    return connection.send(PRODUCE, 9, body)


def run_produce(connection: Connection, batch: bytes, requests: int, in_flight: int, pid: int) -> dict:
    # Encoding once and resending the same frame would reuse its correlation id;
    # the state numbers each request, so encode them ahead of the timed part.
    frames = [produce_request(connection, batch) for _ in range(requests)]
    started_cpu, started_s = broker_cpu_s(pid), time.perf_counter()
    sent = answered = 0
    while answered < requests:
        while sent < requests and sent - answered < in_flight:
            connection.sock.sendall(frames[sent])
            frames[sent] = None
            sent += 1
        answer = connection.receive()
        partition = answer.responses[0].partition_responses[0]
        if partition.error_code != 0:
            raise RuntimeError(f"Produce failed: error {partition.error_code}")
        answered += 1
    return _figures(pid, started_cpu, started_s, requests, requests * len(batch))


def run_fetch(connection: Connection, requests: int, fetch_bytes: int, pid: int) -> dict:
    structs = struct_classes(FETCH.request)

    def request(offset: int):
        partition = structs.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=fetch_bytes,
        )  # fmt: skip
        return FETCH.request.cls(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=fetch_bytes, isolation_level=0,
            session_id=0, session_epoch=-1, topics=[structs.FetchTopic(topic=TOPIC, partitions=[partition])],
            forgotten_topics_data=[], rack_id="",
        )  # fmt: skip

    started_cpu, started_s = broker_cpu_s(pid), time.perf_counter()
    offset = 0
    record_bytes = 0
    for _ in range(requests):
        answer = connection.call(FETCH, 12, request(offset))
        partition = answer.responses[0].partitions[0]
        if partition.error_code != 0:
            raise RuntimeError(f"Fetch failed: error {partition.error_code}")
        records = partition.records or b""
        record_bytes += len(records)
        offset = _next_offset(records, offset) if records else 0
    return _figures(pid, started_cpu, started_s, requests, record_bytes)


def _next_offset(records, offset: int) -> int:
    """The offset after the last whole batch in ``records``."""
    position = 0
    while position + 12 <= len(records):
        base_offset = int.from_bytes(records[position : position + 8], "big")
        length = int.from_bytes(records[position + 8 : position + 12], "big")
        if position + 12 + length > len(records):
            break
        last_delta = int.from_bytes(records[position + 23 : position + 27], "big")
        offset = base_offset + last_delta + 1
        position += 12 + length
    return offset


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _figures(pid: int, started_cpu: float, started_s: float, requests: int, payload_bytes: int) -> dict:
    elapsed_s = time.perf_counter() - started_s
    cpu_s = broker_cpu_s(pid) - started_cpu
    return {
        "peak_rss_mb": peak_rss_mb(pid),
        "requests": requests,
        "seconds": elapsed_s,
        "broker_cpu_s": cpu_s,
        "cpu_us_per_request": cpu_s / requests * 1e6,
        "cpu_s_per_gb": cpu_s / (payload_bytes / 1e9) if payload_bytes else None,
        "mb_per_s": payload_bytes / 1e6 / elapsed_s,
        "requests_per_s": requests / elapsed_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="produce,fetch", help="produce, fetch or both (fetch reads what produce wrote)")
    parser.add_argument("--records", type=int, default=8_000, help="records per batch (default 8,000: about 0.9 MB)")
    parser.add_argument("--size", type=int, default=100, help="bytes per record value (default 100)")
    parser.add_argument("--requests", type=int, default=2_000, help="requests per run (default 2,000)")
    parser.add_argument("--in-flight", type=int, default=5, help="produce requests outstanding (default 5)")
    parser.add_argument("--fetch-bytes", type=int, default=1 << 20, help="max bytes per fetch answer (default 1 MiB)")
    parser.add_argument("--rounds", type=int, default=3, help="fresh brokers, one after the other (default 3)")
    parser.add_argument("--json", type=Path, help="write the rounds' figures here")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    batch = build_batch([(None, b"x" * args.size)] * args.records)
    rounds: dict[str, list[dict]] = {"produce": [], "fetch": []}
    for round_number in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="pybroker-request-path-") as tmp:
            with peers.run_pybroker(Path(tmp)) as broker:
                pid = broker.process.pid
                connection = Connection(broker.bootstrap)
                try:
                    create_topic(connection)
                    time.sleep(0.5)  # let start-up work settle before counting CPU
                    produced = run_produce(connection, batch, args.requests, args.in_flight, pid)
                    if "produce" in only:
                        rounds["produce"].append(produced)
                    if "fetch" in only:
                        rounds["fetch"].append(run_fetch(connection, args.requests, args.fetch_bytes, pid))
                finally:
                    connection.close()
        print(f"round {round_number}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{args.records} records x {args.size} B per batch ({len(batch):,} B), {args.requests} requests per run")
    print(f"{'path':8} {'n':>2} {'CPU us/request':>22} {'CPU s/GB':>20} {'peak RSS MB':>16} {'MB/s':>18} {'requests/s':>20}")
    for path, runs in rounds.items():
        if not runs:
            continue
        cells = []
        for figure, form in (
            ("cpu_us_per_request", "{:.0f}"), ("cpu_s_per_gb", "{:.3f}"), ("peak_rss_mb", "{:.0f}"),
            ("mb_per_s", "{:.0f}"), ("requests_per_s", "{:.0f}"),
        ):  # fmt: skip
            values = [run[figure] for run in runs if run[figure] is not None]
            median = statistics.median(values)
            cells.append(f"{form.format(median)} [{form.format(min(values))}-{form.format(max(values))}]")
        print(f"{path:8} {len(runs):>2} {cells[0]:>22} {cells[1]:>20} {cells[2]:>16} {cells[3]:>18} {cells[4]:>20}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rounds": rounds}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
