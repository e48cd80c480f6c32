"""Three combined nodes with replicated partitions, and a Jepsen-style checker.

``ReplicatedCluster`` runs nodes 1..3 as real ``pybroker start`` processes
(``process.roles=broker,controller``), each with a PLAINTEXT and a CONTROLLER
listener on ports picked free at the start and kept across restarts, with timings short enough that
fencing, ISR changes and elections happen within seconds. Nodes can be
stopped, SIGKILLed, SIGSTOPped/SIGCONTed, SIGTERMed (controlled shutdown) and
restarted on their own data directories.

``StreamProducer`` produces ``<prefix>-<n>`` values, n = 0, 1, 2, ... to one
partition with an idempotent acks=all confluent-kafka producer and records
every operation as invoke, then ok(offset) or fail(error); an operation with
neither is indeterminate (it may or may not have been written).
``check_history`` reads the partition back and reports what Kafka promises
for acknowledged writes: each appears exactly once, at the offset it was
acknowledged with, in acknowledgement order, and nothing appears that was
never attempted. ``segments_identical`` compares the replicas' batch bytes
below the high watermark, since followers keep the leader's bytes unchanged.

Longer than ~700 lines on purpose: the cluster, the producer and the checker
are used together by every replication test and share the history's format.
"""

from __future__ import annotations

import asyncio
import json
import signal
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# What a partition answers while its leadership changes (librdkafka does not flag
# them all retriable in get_watermark_offsets' errors).
LEADER_CHANGE_ERRORS = frozenset(
    {KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}
)

from broker.net.node_client import KafkaClientConnection
from tests.cluster.test_quorum_processes import MD, METADATA, describe_quorum, free_ports, start_together
from tests.conftest import BrokerProcess

CLUSTER_ID = "UmVwbGljYXRpb24tdGVzdA"
NODE_IDS = (1, 2, 3)
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

# Kafka's record batch header (magic 2): baseOffset int64, batchLength int32
# (the bytes after this field), partitionLeaderEpoch int32, magic int8,
# crc uint32, attributes int16, lastOffsetDelta int32 at byte 23.
BATCH_PREFIX = 12
BATCH_HEADER = 61
LAST_OFFSET_DELTA_AT = 23


@dataclass(frozen=True)
class PartitionState:
    """One partition as a node's Metadata (v12) answer shows it."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]
    error_code: int


class ReplicatedCluster:
    """Nodes 1..3, each a broker and a controller voter, sharing one cluster id.

    Timings: a broker silent for ``session_timeout_ms`` is fenced; a follower
    not caught up for ``replica_lag_time_max_ms`` leaves the ISR; a quorum
    without a leader for ``fetch timeout`` elects one within two election
    timeouts. Topics default to RF=3 with min.insync.replicas=2, so one node
    may be down and acks=all still succeeds, two may not.
    """

    ELECTION_TIMEOUT_MS = 500
    FETCH_TIMEOUT_MS = 1000
    HEARTBEAT_INTERVAL_MS = 200

    def __init__(
        self,
        root: Path,
        *,
        replica_lag_time_max_ms: int = 2000,
        session_timeout_ms: int = 1800,
        offsets_topic_partitions: int = 5,
        extra: dict[str, str] | None = None,
    ):
        self.root = Path(root)
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.session_timeout_ms = session_timeout_ms
        ports = free_ports(2 * len(NODE_IDS))
        self.controller_ports = dict(zip(NODE_IDS, ports[: len(NODE_IDS)]))
        # A node keeps its client port across restarts, as a Kafka broker's
        # advertised listener does: clients (librdkafka) keep a node id's address
        # and would go on connecting to a port nobody listens on any more.
        self.client_ports = dict(zip(NODE_IDS, ports[len(NODE_IDS):]))
        voters = ",".join(f"{node}@127.0.0.1:{port}" for node, port in self.controller_ports.items())
        self.overrides: dict[int, dict[str, str]] = {}
        for node, port in self.controller_ports.items():
            self.overrides[node] = {
                "node.id": str(node),
                "process.roles": "broker,controller",
                "cluster.id": CLUSTER_ID,
                "listeners": f"PLAINTEXT://127.0.0.1:{self.client_ports[node]},CONTROLLER://127.0.0.1:{port}",
                "controller.listener.names": "CONTROLLER",
                "controller.quorum.voters": voters,
                "controller.quorum.election.timeout.ms": str(self.ELECTION_TIMEOUT_MS),
                "controller.quorum.fetch.timeout.ms": str(self.FETCH_TIMEOUT_MS),
                "broker.session.timeout.ms": str(session_timeout_ms),
                "broker.heartbeat.interval.ms": str(self.HEARTBEAT_INTERVAL_MS),
                "replica.lag.time.max.ms": str(replica_lag_time_max_ms),
                "default.replication.factor": "3",
                "min.insync.replicas": "2",
                "offsets.topic.replication.factor": "3",
                "schema.registry.topic.replication.factor": "3",
                # Kafka's 50 partitions of __consumer_offsets would be 150 replicas
                # fetching on a 2-core test machine; a handful shows the same rules.
                "offsets.topic.num.partitions": str(offsets_topic_partitions),
                "group.initial.rebalance.delay.ms": "0",
                "num.partitions": "1",
                # One rack per node, so a consumer naming a rack reads from that
                # node's replica (KIP-392): proof that followers hold the data.
                "broker.rack": f"rack-{node}",
                "replica.selector.class": RACK_AWARE_SELECTOR,
                **(extra or {}),
            }
        self.nodes: dict[int, BrokerProcess] = {}
        for node in NODE_IDS:
            data_dir = self.root / f"node{node}"
            data_dir.mkdir(parents=True, exist_ok=True)
            self.nodes[node] = BrokerProcess(data_dir, self.overrides[node])
        self.paused: set[int] = set()
        # Every process ever started, so teardown can keep their output.
        self._history: list[tuple[int, BrokerProcess]] = [(n, p) for n, p in self.nodes.items()]

    # ----------------------------------------------------------------- processes

    def start(self, nodes=None) -> None:
        """Start nodes together: a node prints its start line only once the quorum
        has a leader and it is unfenced, which needs a majority running."""
        start_together([self.nodes[n] for n in (nodes or NODE_IDS)])

    def running(self, node: int) -> bool:
        process = self.nodes[node].process
        return process is not None and process.poll() is None

    def alive(self) -> list[int]:
        """Nodes whose process runs and is not stopped with SIGSTOP."""
        return [n for n in NODE_IDS if self.running(n) and n not in self.paused]

    def kill(self, node: int) -> None:
        self.paused.discard(node)
        self.nodes[node].stop(signal.SIGKILL)

    def terminate(self, node: int) -> int | None:
        """SIGTERM (controlled shutdown), waiting for the exit; the exit code."""
        self.resume(node)
        return self.nodes[node].stop(signal.SIGTERM)

    def signal(self, node: int, sig: int) -> None:
        process = self.nodes[node].process
        assert process is not None and process.poll() is None, f"node {node} is not running"
        process.send_signal(sig)

    def pause(self, node: int) -> None:
        self.signal(node, signal.SIGSTOP)
        self.paused.add(node)

    def resume(self, node: int) -> None:
        if node in self.paused and self.running(node):
            self.nodes[node].process.send_signal(signal.SIGCONT)
        self.paused.discard(node)

    def restart(self, node: int) -> None:
        """Start ``node`` again on its data directory (after a kill or terminate)."""
        if self.running(node):
            self.kill(node)
        old = self.nodes[node]
        self.nodes[node] = BrokerProcess(old.data_dir, self.overrides[node])
        self._history.append((node, self.nodes[node]))
        self.nodes[node].start()

    def restart_together(self, nodes) -> None:
        """Start stopped ``nodes`` again on their data directories, together: each
        prints its start line only once a quorum (a majority running) has a leader."""
        for node in nodes:
            old = self.nodes[node]
            old.stop()
            self.nodes[node] = BrokerProcess(old.data_dir, self.overrides[node])
            self._history.append((node, self.nodes[node]))
        start_together([self.nodes[n] for n in nodes])

    def stop(self) -> None:
        for node in NODE_IDS:
            self.resume(node)  # a stopped process cannot act on SIGTERM
        for node in NODE_IDS:
            self.nodes[node].stop()

    def heal(self, timeout_s: float = 45.0) -> None:
        """Back to three running, unfenced nodes: resume paused ones, restart dead
        ones (together when the quorum needs them), and wait for every node to
        list all three brokers."""
        for node in list(self.paused):
            self.resume(node)
        dead = [n for n in NODE_IDS if not self.running(n)]
        if dead:
            self.restart_together(dead)
        ok = wait_until(lambda: all(self.brokers(n) == list(NODE_IDS) for n in NODE_IDS), timeout_s)
        if not ok:
            raise RuntimeError("cluster did not heal: " + repr({n: self.brokers(n) for n in NODE_IDS}))

    def save_output(self) -> None:
        """Write every process's output next to its data, for post-mortems."""
        for index, (node, process) in enumerate(self._history):
            (self.root / f"node{node}.run{index}.out").write_text(process.log_text())

    def tail(self, node: int, lines: int = 40) -> str:
        return "".join(self.nodes[node].output[-lines:])

    # ------------------------------------------------------------------- clients

    def bootstrap(self, nodes=None) -> str:
        return ",".join(self.nodes[n].bootstrap for n in (nodes or self.alive()))

    def admin(self, nodes=None) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap(nodes)})

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3, config=None) -> None:
        admin = self.admin()
        topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=config or {})
        for future in admin.create_topics([topic], request_timeout=20).values():
            future.result(timeout=30)

    def active_controller(self, timeout_s: float = 10.0) -> int | None:
        """The metadata quorum's leader as DescribeQuorum tells, or None."""

        def ask():
            for node in self.alive():
                answer = describe_quorum(self, node)
                if answer is not None and answer[0] in NODE_IDS:
                    return answer[0]
            return None

        return wait_until(ask, timeout_s)

    # ------------------------------------------------------------------ metadata

    def request(self, node: int, api, version: int, body, timeout_ms: int = 3000, client_id: str = "replication-test"):
        """One request to ``node``'s client listener on a connection of its own; the response body."""
        process = self.nodes[node]

        async def ask():
            connection = KafkaClientConnection(process.host, process.port, client_id, connect_timeout_ms=timeout_ms)
            try:
                return await connection.request(api, version, body, timeout_ms=timeout_ms)
            finally:
                connection.close()

        return asyncio.run(ask())

    def _metadata(self, node: int, timeout_ms: int = 3000):
        body = MD.MetadataRequest(topics=None, allow_auto_topic_creation=False)
        return self.request(node, METADATA, 12, body, timeout_ms)

    def brokers(self, node: int) -> list[int] | None:
        """Unfenced brokers as ``node`` lists them, or None if it does not answer."""
        try:
            return sorted(b.node_id for b in self._metadata(node).brokers)
        except (TimeoutError, OSError, ConnectionError, asyncio.TimeoutError):
            return None

    def describe(self, topic: str, via: int | None = None) -> dict[int, PartitionState] | None:
        """Per partition: leader, leader epoch, replicas, ISR, as the Metadata v12
        answer of ``via`` (default: the first live node that answers) shows them;
        None if no node answered or the topic is unknown to it."""
        for node in [via] if via is not None else self.alive():
            try:
                body = self._metadata(node)
            except (TimeoutError, OSError, ConnectionError, asyncio.TimeoutError):
                continue
            for t in body.topics:
                if t.name == topic and t.error_code == 0:
                    return {
                        p.partition_index: PartitionState(
                            p.partition_index,
                            p.leader_id,
                            p.leader_epoch,
                            tuple(p.replica_nodes),
                            tuple(sorted(p.isr_nodes)),
                            tuple(p.offline_replicas or ()),
                            p.error_code,
                        )
                        for p in t.partitions
                    }
            return None
        return None

    def partition(self, topic: str, partition: int = 0, via: int | None = None) -> PartitionState | None:
        states = self.describe(topic, via)
        return None if states is None else states.get(partition)

    def describe_admin(self, topic: str) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]]:
        """(leader, replicas, isr) per partition as confluent-kafka's
        describe_topics reports them: what a real admin client sees."""
        from confluent_kafka import TopicCollection

        admin = self.admin()  # held: a collected client fails its futures with _DESTROY
        futures = admin.describe_topics(TopicCollection([topic]), request_timeout=10)
        description = futures[topic].result(timeout=15)
        return {
            p.id: (p.leader.id if p.leader is not None else -1, tuple(r.id for r in p.replicas), tuple(sorted(r.id for r in p.isr)))
            for p in description.partitions
        }

    def leader_of(self, topic: str, partition: int = 0, timeout_s: float = 10.0, exclude=()) -> int | None:
        """A live leader (not in ``exclude``) for the partition, waiting for one."""

        def ask():
            state = self.partition(topic, partition)
            if state is not None and state.leader in self.alive() and state.leader not in exclude:
                return state.leader
            return None

        return wait_until(ask, timeout_s)

    def wait_for_isr(self, topic: str, partition: int, isr, timeout_s: float, everywhere: bool = False) -> PartitionState | None:
        """Wait until the ISR is ``isr`` (as a node answers; with ``everywhere``
        as every live node answers); the state then, or None on timeout."""
        wanted = tuple(sorted(isr))

        def ask():
            vias = self.alive() if everywhere else [None]
            states = [self.partition(topic, partition, via) for via in vias]
            if states and all(s is not None and s.isr == wanted for s in states):
                return states[0]
            return None

        return wait_until(ask, timeout_s)

    def watermarks(self, topic: str, partition: int = 0, timeout_s: float = 10.0) -> tuple[int, int]:
        """(log start, high watermark) from the partition's leader (ListOffsets).
        A retriable error (a new leader whose high watermark has not reached its
        epoch's start yet answers OFFSET_NOT_AVAILABLE, KIP-207) is asked again,
        as a client would, until ``timeout_s``."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap(), "group.id": f"wm-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    left_s = max(0.5, deadline - time.monotonic())
                    return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=left_s, cached=False)
                except KafkaException as exc:
                    error = exc.args[0]
                    if not (error.retriable() or error.code() in LEADER_CHANGE_ERRORS) or time.monotonic() >= deadline:
                        raise
                time.sleep(0.1)
        finally:
            consumer.close()

    # ------------------------------------------------------------------ segments

    def partition_dir(self, node: int, topic: str, partition: int) -> Path:
        """In whichever of the node's log.dirs holds it (the first when none does)."""
        candidates = [Path(d) / f"{topic}-{partition}" for d in self.nodes[node].overrides["log.dirs"].split(",")]
        return next((c for c in candidates if c.is_dir()), candidates[0])

    def replica_batches(self, node: int, topic: str, partition: int) -> list[tuple[int, int, bytes]]:
        """(base offset, last offset, bytes) of every complete batch of the node's
        replica, over its segments in offset order."""
        directory = self.partition_dir(node, topic, partition)
        batches = []
        for segment in sorted(directory.glob("*.log")):
            data = segment.read_bytes()
            position = 0
            while position + BATCH_HEADER <= len(data):
                base, length = struct.unpack_from(">qi", data, position)
                end = position + BATCH_PREFIX + length
                # A batch still being written (or zeros past the end) ends the segment.
                if length < BATCH_HEADER - BATCH_PREFIX or end > len(data):
                    break
                (last_delta,) = struct.unpack_from(">i", data, position + LAST_OFFSET_DELTA_AT)
                batches.append((base, base + last_delta, bytes(data[position:end])))
                position = end
        return batches

    def segments_identical(self, topic: str, partition: int, hw: int, nodes=NODE_IDS, quiescent: bool = False) -> tuple[bool, str]:
        """Whether the nodes' replicas hold the same batch bytes for every batch
        below ``hw`` and each covers offsets up to ``hw``; with a description of
        the first difference. Segment boundaries may differ (each replica rolls
        on its own), so batches are compared, not files. With ``quiescent`` (no
        producer running, every replica in the ISR) no replica may hold a batch
        at or past ``hw`` either: a follower's uncommitted tail from an older
        epoch must have been truncated, and the leader's log end is the HW."""
        everything = {node: self.replica_batches(node, topic, partition) for node in nodes}
        per_node = {node: [b for b in batches if b[0] < hw] for node, batches in everything.items()}
        problems = []
        for node, batches in per_node.items():
            end = batches[-1][1] + 1 if batches else 0
            if end < hw:
                problems.append(f"node {node} holds offsets up to {end}, below the high watermark {hw}")
            beyond = [b[0] for b in everything[node] if b[0] >= hw]
            if quiescent and beyond:
                problems.append(f"node {node} holds {len(beyond)} batches at or past the high watermark {hw} (from {beyond[0]})")
        reference_node = nodes[0]
        reference = per_node[reference_node]
        for node in nodes[1:]:
            other = per_node[node]
            for index, (mine, theirs) in enumerate(zip(reference, other)):
                if mine != theirs:
                    problems.append(
                        f"batch #{index} differs: node {reference_node} base {mine[0]} ({len(mine[2])} bytes) vs "
                        f"node {node} base {theirs[0]} ({len(theirs[2])} bytes)"
                    )
                    break
            else:
                if len(reference) != len(other):
                    problems.append(f"node {reference_node} has {len(reference)} batches below {hw}, node {node} {len(other)}")
        summary = ", ".join(f"node {n}: {len(b)} batches" for n, b in per_node.items())
        return (not problems, "; ".join(problems) or summary)


def wait_until(predicate, timeout_s: float, interval_s: float = 0.1):
    """Poll ``predicate`` until it returns something truthy, at most
    ``timeout_s`` seconds and ``timeout_s / interval_s + 1`` calls; connection
    errors count as a falsy answer. Returns the last value."""
    deadline = time.monotonic() + timeout_s
    value = None
    for _ in range(int(timeout_s / interval_s) + 1):
        try:
            value = predicate()
        except (TimeoutError, OSError, ConnectionError, asyncio.TimeoutError, KafkaException):
            value = None
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)
    return value


# ---------------------------------------------------------------------- history


@dataclass
class Op:
    """One produce: invoked, then ok (with its offset) or fail (with the error)."""

    n: int
    value: str
    invoke_t: float
    outcome: str = "invoke"
    complete_t: float | None = None
    offset: int | None = None
    error: str | None = None
    ack_seq: int | None = None  # the order delivery reports came in


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    client_errors: list[tuple[float, str, bool]] = field(default_factory=list)  # (time, error, fatal)
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, label: str) -> float:
        self.marks[label] = time.monotonic()
        return self.marks[label]

    @property
    def acked(self) -> list[Op]:
        return [op for op in self.ops if op.outcome == "ok"]

    @property
    def failed(self) -> list[Op]:
        return [op for op in self.ops if op.outcome == "fail"]

    @property
    def indeterminate(self) -> list[Op]:
        return [op for op in self.ops if op.outcome == "invoke"]

    def acked_between(self, start: float, end: float) -> list[Op]:
        return [op for op in self.acked if start <= op.complete_t < end]

    def fatal_errors(self) -> list[str]:
        return [error for _, error, fatal in self.client_errors if fatal]

    def summary(self) -> str:
        errors: dict[str, int] = {}
        for op in self.failed:
            errors[op.error] = errors.get(op.error, 0) + 1
        return (
            f"{len(self.ops)} invoked, {len(self.acked)} ok, {len(self.failed)} failed {errors or ''}, "
            f"{len(self.indeterminate)} indeterminate; fatal client errors: {self.fatal_errors() or 'none'}"
        )


class StreamProducer:
    """A thread producing ``<prefix>-<n>`` at about ``rate`` msg/s to one
    partition with confluent-kafka (acks=all, idempotent), recording a History.

    ``message_timeout_ms`` bounds how long a record may stay unacknowledged
    (the client retries within it, across leader changes)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partition: int = 0,
        *,
        rate: float = 2000.0,
        prefix: str = "v",
        message_timeout_ms: int = 20000,
        config: dict | None = None,
    ):
        self.topic = topic
        self.partition = partition
        self.rate = rate
        self.prefix = prefix
        self.history = History()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": message_timeout_ms,
                "request.timeout.ms": min(5000, message_timeout_ms),
                "retry.backoff.ms": 50,
                # Metadata is refreshed promptly after a leader change, as a
                # client would see it with Kafka's NOT_LEADER answers.
                "topic.metadata.refresh.interval.ms": 1000,
                "error_cb": self._on_error,
                **(config or {}),
            }
        )
        self._reports = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"stream-{topic}")
        self.message_timeout_ms = message_timeout_ms

    def _on_error(self, error: KafkaError) -> None:
        self.history.client_errors.append((time.monotonic(), error.name(), error.fatal()))

    def _on_delivery(self, op: Op):
        def report(error, message):
            op.complete_t = time.monotonic()
            op.ack_seq = self._reports
            self._reports += 1
            if error is None:
                op.outcome, op.offset = "ok", message.offset()
            else:
                op.outcome, op.error = "fail", error.name()

        return report

    def produce_one(self) -> Op | None:
        """Invoke the next op; None when the producer refuses (fatal state)."""
        n = len(self.history.ops)
        value = f"{self.prefix}-{n}"
        op = Op(n, value, time.monotonic())
        for _ in range(200):  # a full local queue drains within the message timeout
            try:
                self.producer.produce(self.topic, value=value.encode(), partition=self.partition, on_delivery=self._on_delivery(op))
                self.history.ops.append(op)
                return op
            except BufferError:
                self.producer.poll(0.05)
            except KafkaException as exc:
                self.history.client_errors.append((time.monotonic(), str(exc), True))
                return None
        return None

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate) - len(self.history.ops)
            for _ in range(min(due, 500)):
                if self.produce_one() is None:
                    self._stop.set()
                    break
            self.producer.poll(0)
            time.sleep(0.002)

    def start(self) -> "StreamProducer":
        self._thread.start()
        return self

    def stop(self, drain_s: float | None = None) -> History:
        """Stop invoking and wait (bounded) for the outcome of every op."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        drain_s = self.message_timeout_ms / 1000 + 5 if drain_s is None else drain_s
        deadline = time.monotonic() + drain_s
        while len(self.producer) and time.monotonic() < deadline:
            self.producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
        self.producer.poll(0)
        return self.history


def produce_batch(bootstrap: str, topic: str, count: int, *, prefix: str = "b", partition: int = 0, message_timeout_ms: int = 20000) -> History:
    """Produce ``count`` values at once (acks=all, idempotent) and wait for
    every outcome (bounded by the message timeout); the History."""
    stream = StreamProducer(bootstrap, topic, partition, prefix=prefix, message_timeout_ms=message_timeout_ms)
    for _ in range(count):
        if stream.produce_one() is None:
            break
        stream.producer.poll(0)
    return stream.stop()


def read_partition(
    bootstrap: str,
    topic: str,
    partition: int = 0,
    timeout_s: float = 30.0,
    client_rack: str | None = None,
    served_by: set[int] | None = None,
) -> list[tuple[int, str]]:
    """Every (offset, value) of the partition below its high watermark, read
    with a fresh consumer (from the leader, or the rack's replica with
    ``client_rack``). ``served_by`` collects the ids of the brokers the client
    received the partition's messages from (from librdkafka's statistics). Raises
    AssertionError when it cannot read up to the high watermark in time."""
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": f"reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
    }
    if client_rack is not None:
        config["client.rack"] = client_rack
    if served_by is not None:

        received = [0]  # messages librdkafka had received at the last report

        def on_stats(text: str) -> None:
            # The partition's "broker" is the one it fetches from now: the leader
            # until the leader's first answer names the rack's replica (KIP-392),
            # an answer without records. Only a broker in place while messages
            # arrived served them.
            stats = json.loads(text).get("topics", {}).get(topic, {}).get("partitions", {}).get(str(partition), {})
            broker, messages = stats.get("broker", -1), stats.get("rxmsgs", 0)
            if broker >= 0 and messages > received[0]:
                served_by.add(broker)
            received[0] = max(received[0], messages)

        config.update({"statistics.interval.ms": 100, "stats_cb": on_stats})
    consumer = Consumer(config)
    records: list[tuple[int, str]] = []
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s, cached=False)
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        next_offset = low
        while next_offset < high and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            records.append((message.offset(), message.value().decode()))
            next_offset = message.offset() + 1
        if next_offset < high:
            raise AssertionError(f"read {topic}-{partition} only up to {next_offset} of high watermark {high} in {timeout_s} s")
        consumer.poll(0.3)  # one more statistics report, naming the broker that served the last fetch
        return records
    finally:
        consumer.close()


@dataclass
class CheckResult:
    attempted: int
    acked: int
    read: int
    lost: list[str]
    duplicated: dict[str, int]
    moved: list[tuple[str, int, int]]  # value, acknowledged offset, offset read at
    reordered: list[tuple[str, str]]  # (earlier acknowledged, later acknowledged) read the other way round
    phantom: list[str]

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.moved or self.reordered or self.phantom)

    def report(self) -> str:
        def examples(items):
            items = list(items)
            return f"{len(items)} {items[:5]}"

        return (
            f"attempted {self.attempted}, acknowledged {self.acked}, read {self.read}; "
            f"lost {examples(self.lost)}, duplicated {examples(self.duplicated.items())}, "
            f"moved {examples(self.moved)}, reordered {examples(self.reordered)}, never attempted {examples(self.phantom)}"
        )


def check_history(records: list[tuple[int, str]], *histories: History) -> CheckResult:
    """Kafka's promises for acknowledged writes, checked against what was read
    (every value in the partition must come from one of ``histories``).

    - lost: acknowledged but not read;
    - duplicated: read more than once (the producers are idempotent, so no
      value, acknowledged or not, may appear twice);
    - moved: read at another offset than the one it was acknowledged with;
    - reordered: a producer's value acknowledged after another of its values
      but read before it (one partition, so acknowledgements come in offset order);
    - phantom: read but never attempted.
    """
    attempted = {op.value for history in histories for op in history.ops}
    read_at: dict[str, int] = {}
    counts: dict[str, int] = {}
    for offset, value in records:
        counts[value] = counts.get(value, 0) + 1
        read_at.setdefault(value, offset)
    acked = [op for history in histories for op in history.acked]
    lost = [op.value for op in acked if op.value not in read_at]
    duplicated = {value: count for value, count in counts.items() if count > 1}
    moved = [(op.value, op.offset, read_at[op.value]) for op in acked if op.value in read_at and read_at[op.value] != op.offset]
    reordered = []
    for history in histories:
        previous = None
        for op in sorted(history.acked, key=lambda o: o.ack_seq):
            if op.value not in read_at:
                continue
            if previous is not None and read_at[op.value] <= read_at[previous.value]:
                reordered.append((previous.value, op.value))
            previous = op
    phantom = [value for value in counts if value not in attempted]
    return CheckResult(len(attempted), len(acked), len(records), lost, duplicated, moved, reordered, phantom)
