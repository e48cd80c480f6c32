"""The metadata quorum: failover time, topic creations per second, replay of a long log.

    python benchmarks/quorum.py                  # all three
    python benchmarks/quorum.py --only failover --rounds 5
    python benchmarks/quorum.py --only topics --topics 2000
    python benchmarks/quorum.py --only replay --records 1000000

* failover: three combined nodes (real processes on 127.0.0.1, Kafka's default
  Raft timings unless overridden); SIGKILL the leader and time until a
  survivor answers DescribeQuorum as the new leader, then restart the killed
  node and wait for it to rejoin. Prints each round and min/median/max.
* topics: CreateTopics of one topic per request to the active controller,
  one request at a time (latency-bound: every commit is an fsync, and on three
  nodes a round trip to a follower) and with 32 in flight on 8 connections
  (the controller batches nothing itself, but fsyncs of proposals that arrive
  together are shared). On one node and on the three-node quorum.
* replay: a synthetic 1,000,000-record metadata log (``metadata_replay.py``'s
  busy cluster) written to a ``DiskRaftLog`` in batches of 100 records, then
  the start-up path timed: open the log (batch headers only), read, decode and
  apply every committed batch into the image; and writing and loading the
  snapshot of that image.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from broker.net.node_client import KafkaClientConnection
from controller.raft import wire
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

CREATE_TOPICS = APIS_BY_NAME["CreateTopics"]
DESCRIBE_QUORUM = APIS_BY_NAME["DescribeQuorum"]
CT = struct_classes(CREATE_TOPICS.request)
CLUSTER_ID = "YmVuY2htYXJrLWNsdXN0ZXI"


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class Node:
    def __init__(self, node_id: int, data_dir: Path, overrides: dict[str, str]):
        self.node_id = node_id
        self.data_dir = data_dir
        self.overrides = overrides
        self.process: subprocess.Popen | None = None
        self.port = 0

    def start(self) -> None:
        cmd = [sys.executable, "-m", "broker", "--log-level", "WARNING", "start"]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.process = subprocess.Popen(cmd, cwd=self.data_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        output = []
        for line in self.process.stdout:
            output.append(line)
            if line.startswith("pybroker started"):
                self.port = int(line.rsplit(":", 1)[1])
                break
        else:
            raise RuntimeError(f"node {self.node_id} did not start:\n{''.join(output)}")
        threading.Thread(target=lambda: [None for _ in self.process.stdout], daemon=True).start()

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_cluster(root: Path, size: int, extra: dict[str, str]) -> tuple[dict[int, Node], dict[int, int]]:
    controller_ports = dict(zip(range(1, size + 1), free_ports(size)))
    voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in controller_ports.items()) if size > 1 else ""
    nodes = {}
    for node_id, port in controller_ports.items():
        data_dir = root / f"node{node_id}"
        data_dir.mkdir(parents=True)
        overrides = {"node.id": str(node_id), "cluster.id": CLUSTER_ID, "log.dirs": str(data_dir / "logs"), **extra}
        if size > 1:
            overrides.update(
                {
                    "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}",
                    "controller.listener.names": "CONTROLLER",
                    "controller.quorum.voters": voters,
                }
            )
        else:
            overrides["listeners"] = "PLAINTEXT://127.0.0.1:0"
        nodes[node_id] = Node(node_id, data_dir, overrides)
    threads = [threading.Thread(target=n.start) for n in nodes.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return nodes, controller_ports


async def _request(port: int, api, version: int, body, timeout_ms: int = 5000):
    connection = KafkaClientConnection("127.0.0.1", port, "bench")
    try:
        return await connection.request(api, version, body, timeout_ms=timeout_ms)
    finally:
        connection.close()


def leader_of(controller_ports: dict[int, int], candidates) -> tuple[int, int] | None:
    for node_id in candidates:
        try:
            body = asyncio.run(_request(controller_ports[node_id], DESCRIBE_QUORUM, 1, wire.describe_quorum_request(), 500))
        except (TimeoutError, OSError, ConnectionError):
            continue
        partition = body.topics[0].partitions[0] if body.topics else None
        if partition is not None and partition.error_code == ErrorCode.NONE:
            return partition.leader_id, partition.leader_epoch
    return None


def wait_leader(controller_ports, candidates, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = leader_of(controller_ports, candidates)
        if found is not None:
            return found
        time.sleep(0.01)
    raise RuntimeError("no leader")


def bench_failover(rounds: int, extra: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        nodes, ports = start_cluster(Path(tmp), 3, extra)
        try:
            times_ms = []
            for round_no in range(rounds):
                leader, epoch = wait_leader(ports, nodes, 30)
                survivors = [n for n in nodes if n != leader]
                killed_at = time.monotonic()
                nodes[leader].stop(signal.SIGKILL)
                while True:
                    found = leader_of(ports, survivors)
                    if found is not None and found[1] > epoch:
                        break
                    time.sleep(0.005)
                elapsed_ms = (time.monotonic() - killed_at) * 1000
                times_ms.append(elapsed_ms)
                print(f"  round {round_no + 1}: leader {leader} killed, node {found[0]} leads epoch {found[1]} after {elapsed_ms:.0f} ms")
                nodes[leader].start()
            print(
                f"failover (kill -> new leader answering DescribeQuorum), {rounds} rounds: "
                f"min {min(times_ms):.0f} ms, median {statistics.median(times_ms):.0f} ms, max {max(times_ms):.0f} ms"
            )
        finally:
            for node in nodes.values():
                node.stop()


async def _create_topics(port: int, names: list[str], in_flight: int) -> float:
    connections = [KafkaClientConnection("127.0.0.1", port, f"bench-{i}") for i in range(min(8, in_flight))]
    queue = list(reversed(names))
    failures = []

    async def worker(index: int):
        connection = connections[index % len(connections)]
        while queue:
            name = queue.pop()
            body = CT.CreateTopicsRequest(
                topics=[CT.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
                timeout_ms=30000,
                validate_only=False,
            )
            response = await connection.request(CREATE_TOPICS, 7, body, timeout_ms=30000)
            if response.topics[0].error_code != ErrorCode.NONE:
                failures.append((name, response.topics[0].error_code))

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(in_flight)))
    elapsed = time.perf_counter() - started
    for connection in connections:
        connection.close()
    if failures:
        raise RuntimeError(f"{len(failures)} creations failed, e.g. {failures[0]}")
    return elapsed


def bench_topics(count: int) -> None:
    for size in (1, 3):
        with tempfile.TemporaryDirectory() as tmp:
            nodes, ports = start_cluster(Path(tmp), size, {})
            try:
                leader = wait_leader(ports, nodes, 30)[0] if size > 1 else 1
                port = nodes[leader].port
                for in_flight in (1, 32):
                    names = [f"t-{size}-{in_flight}-{i}" for i in range(count)]
                    elapsed = asyncio.run(_create_topics(port, names, in_flight))
                    print(
                        f"topic creations, {size} node(s), {in_flight} in flight: {count} in {elapsed:.2f} s = "
                        f"{count / elapsed:,.0f}/s ({elapsed / count * 1000:.2f} ms each)"
                    )
            finally:
                for node in nodes.values():
                    node.stop()


def bench_replay(total: int) -> None:
    from metadata_replay import LogBuilder

    from broker.controller_node.quorum_controller import QuorumController
    from controller.metadata.records import encode_record
    from controller.metadata.snapshot_file import decode_snapshot_file, encode_snapshot_file
    from controller.raft.disk_log import DiskRaftLog
    from controller.raft.log import Batch
    from controller.topic_commands import ClusterDefaults

    records = LogBuilder(seed=7, partitions_per_topic=10).build(total, topics=2000)
    values = [encode_record(r) for r in records]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "__cluster_metadata-0"
        log = DiskRaftLog(directory)
        started = time.perf_counter()
        for start in range(0, len(values), 100):
            log.append(Batch(start, 1, tuple(values[start : start + 100])))
        log.flush()
        log.close()
        print(f"replay: wrote {len(values):,} records in {time.perf_counter() - started:.1f} s")

        async def replay():
            opened = time.perf_counter()
            raft_log = DiskRaftLog(directory)
            opened_s = time.perf_counter() - opened
            controller = QuorumController(raft_log, ClusterDefaults((1,), 1, 1), snapshot_bytes_between=1 << 62)
            applied = time.perf_counter()
            controller.raft_committed(raft_log.end_offset)
            applied_s = time.perf_counter() - applied
            return raft_log, controller.image, opened_s, applied_s

        raft_log, image, opened_s, applied_s = asyncio.run(replay())
        total_s = opened_s + applied_s
        print(
            f"replay of {len(values):,} records: open {opened_s:.2f} s + read/decode/apply {applied_s:.2f} s = {total_s:.2f} s "
            f"({len(values) / total_s:,.0f} records/s); {len(image.topics)} topics, "
            f"{sum(len(t.partitions) for t in image.topics.values())} partitions"
        )
        started = time.perf_counter()
        data = encode_snapshot_file(image, 0, 0)
        encoded_s = time.perf_counter() - started
        started = time.perf_counter()
        loaded = decode_snapshot_file(data, image.offset)
        loaded_s = time.perf_counter() - started
        assert loaded.topics == image.topics
        print(f"snapshot of that image: {len(data) / 1e6:.1f} MB, written in {encoded_s:.2f} s, loaded in {loaded_s:.2f} s")
        raft_log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["failover", "topics", "replay"], action="append")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument(
        "--election-timeout-ms", type=int, default=None, help="controller.quorum.election.timeout.ms (Kafka's default: 1000)"
    )
    parser.add_argument("--fetch-timeout-ms", type=int, default=None, help="controller.quorum.fetch.timeout.ms (default: 2000)")
    args = parser.parse_args()
    extra = {}
    if args.election_timeout_ms:
        extra["controller.quorum.election.timeout.ms"] = str(args.election_timeout_ms)
    if args.fetch_timeout_ms:
        extra["controller.quorum.fetch.timeout.ms"] = str(args.fetch_timeout_ms)
    only = set(args.only or ["failover", "topics", "replay"])
    if "failover" in only:
        bench_failover(args.rounds, extra)
    if "topics" in only:
        bench_topics(args.topics)
    if "replay" in only:
        bench_replay(args.records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
