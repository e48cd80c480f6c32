"""Helpers for the consumer group interop tests: group members of the three
clients, each polled by its own thread (or its own process, to be killed).

A :class:`GroupMember` subscribes to topics in a group and keeps, under a lock,
what a test checks: its current assignment (read from the client after each
poll and in the rebalance callbacks), every rebalance callback it got, and the
records it consumed. Work that must run on the consumer's own thread (commits,
reading the generation) goes through :meth:`GroupMember.call`.

``python -m tests.interop._groups '<json>'`` runs one member in a child
process that prints its assignment as a JSON line whenever it changes, so a
test can SIGKILL a member that then never sends LeaveGroup.

Every loop is bounded by a deadline; every client is closed when its member
stops (also when it fails).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from protocol.records import build_batch
from tests.interop._support import PRODUCE, RawConnection, produce_request

PROJECT_ROOT = Path(__file__).resolve().parents[2]
KINDS = ("kafka-python", "confluent", "aiokafka")
# Short enough that rebalances are noticed quickly, long enough for a loaded 2-core machine.
HEARTBEAT_INTERVAL_MS = 300
REBALANCE_TIMEOUT_MS = 20000
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30


def produce_values(bootstrap: str, topic: str, partitions, count: int, tag: str) -> dict[tuple[str, int], list[bytes]]:
    """Produce ``count`` records ``<tag>-<partition>-<i>`` to each partition
    (one raw acks=-1 Produce); returns the values per (topic, partition)."""
    produced: dict[tuple[str, int], list[bytes]] = {}
    batches = {}
    for p in partitions:
        values = [f"{tag}-{p}-{i}".encode() for i in range(count)]
        produced[(topic, p)] = values
        batches[p] = build_batch([(None, v, [], int(time.time() * 1000)) for v in values])
    with RawConnection(bootstrap) as conn:
        response = conn.request(PRODUCE, 9, produce_request(topic, batches))
    for topic_response in response.responses:
        for partition in topic_response.partition_responses:
            assert partition.error_code == 0, f"produce to {topic}-{partition.index}: error {partition.error_code}"
    return produced


def wait_for(predicate, timeout_s: float, describe) -> float:
    """Poll ``predicate`` until true; returns the seconds it took, or fails with ``describe()``."""
    start = time.monotonic()
    deadline = start + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout_s}s: {describe() if callable(describe) else describe}")
        time.sleep(0.05)
    return time.monotonic() - start


class GroupMember:
    """One consumer of ``group`` subscribed to ``topics``, polled by its own thread.

    ``kind`` is one of :data:`KINDS`; ``strategy`` names an assignor
    (``range``, ``roundrobin``, ``cooperative-sticky``; None: the client's default).
    """

    def __init__(
        self,
        kind: str,
        bootstrap: str,
        group: str,
        topics: list[str],
        *,
        name: str = "member",
        instance_id: str | None = None,
        strategy: str | None = None,
        session_timeout_ms: int = 6000,
        extra: dict | None = None,
        on_change=None,
    ):
        assert kind in KINDS, kind
        self.kind = kind
        self.bootstrap = bootstrap
        self.group = group
        self.topics = list(topics)
        self.name = name
        self.instance_id = instance_id
        self.strategy = strategy
        self.session_timeout_ms = session_timeout_ms
        # Clients require max.poll.interval.ms (the rebalance timeout) >= the session timeout.
        self.rebalance_timeout_ms = max(REBALANCE_TIMEOUT_MS, session_timeout_ms)
        self.extra = dict(extra or {})  # client-specific configuration on top of ours
        self._on_change = on_change
        self._lock = threading.Lock()
        self._assignment: frozenset = frozenset()
        self._history: list[frozenset] = []  # every assignment the member had, in order
        self._events: list[tuple[str, frozenset]] = []  # rebalance callbacks: (kind, partitions given)
        self._records: list[tuple[str, int, int, bytes]] = []
        self._calls: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"group-member-{name}", daemon=True)

    # ---------------------------------------------------------------- state seen by tests

    @property
    def assignment(self) -> frozenset:
        self.raise_error()  # a dead member fails the wait at once, not at its timeout
        with self._lock:
            return self._assignment

    def partitions(self, topic: str | None = None) -> set[int]:
        topic = topic or self.topics[0]
        return {p for t, p in self.assignment if t == topic}

    @property
    def history(self) -> list[frozenset]:
        with self._lock:
            return list(self._history)

    @property
    def events(self) -> list[tuple[str, frozenset]]:
        with self._lock:
            return list(self._events)

    @property
    def records(self) -> list[tuple[str, int, int, bytes]]:
        self.raise_error()
        with self._lock:
            return list(self._records)

    def values(self) -> list[bytes]:
        return [r[3] for r in self.records]

    def clear_records(self) -> None:
        with self._lock:
            self._records.clear()

    def _set_assignment(self, tps) -> None:
        new = frozenset((t, p) for t, p in tps)
        with self._lock:
            if new == self._assignment and self._history:
                return
            self._assignment = new
            self._history.append(new)
        if self._on_change is not None:
            self._on_change(new)

    def _event(self, kind: str, tps) -> None:
        with self._lock:
            self._events.append((kind, frozenset((t, p) for t, p in tps)))

    def _add_records(self, records) -> None:
        with self._lock:
            self._records.extend(records)

    def __repr__(self) -> str:
        return f"<{self.name} {self.kind} {sorted(self._assignment)} error={self.error!r}>"

    # ---------------------------------------------------------------- control

    def start(self) -> GroupMember:
        self._thread.start()
        return self

    def call(self, op: str, timeout_s: float = 30):
        """Run ``op`` (``commit``, ``generation``) on the consumer's thread and return its result."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((op, future))
        return future.result(timeout_s)

    def commit(self) -> None:
        self.call("commit")

    def generation(self) -> tuple[int | None, str]:
        """(generation id, member id); confluent-kafka tells no generation (None)."""
        return self.call("generation")

    def close(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Close the consumer the client's usual way (a dynamic member sends LeaveGroup)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"{self.name} did not stop within {timeout_s}s"

    def raise_error(self) -> None:
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}") from self.error

    def _run(self) -> None:
        try:
            if self.kind == "kafka-python":
                self._run_kafka_python()
            elif self.kind == "confluent":
                self._run_confluent()
            else:
                asyncio.run(self._run_aiokafka())
        except Exception as exc:  # noqa: BLE001 - surfaces through .error / raise_error()
            self.error = exc
        finally:
            while not self._calls.empty():
                _, future = self._calls.get_nowait()
                future.set_exception(RuntimeError(f"{self.name} stopped"))

    def _serve_calls(self, handle) -> None:
        while True:
            try:
                op, future = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                future.set_result(handle(op))
            except Exception as exc:  # noqa: BLE001 - raised by the caller's future.result()
                future.set_exception(exc)

    # ---------------------------------------------------------------- kafka-python

    def _run_kafka_python(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}
        member = self
        config = {
            "bootstrap_servers": self.bootstrap,
            "group_id": self.group,
            "client_id": self.name,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "max_poll_interval_ms": self.rebalance_timeout_ms,
            "request_timeout_ms": self.rebalance_timeout_ms + 10000,
        }
        if self.instance_id is not None:
            config["group_instance_id"] = self.instance_id
        if self.strategy is not None:
            config["partition_assignment_strategy"] = (assignors[self.strategy],)
        config.update(self.extra)
        consumer = KafkaConsumer(**config)

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                member._event("revoked", [(tp.topic, tp.partition) for tp in revoked])

            def on_partitions_assigned(self, assigned):
                member._event("assigned", [(tp.topic, tp.partition) for tp in assigned])
                member._set_assignment((tp.topic, tp.partition) for tp in consumer.assignment())

            def on_partitions_lost(self, lost):
                member._event("lost", [(tp.topic, tp.partition) for tp in lost])

        def handle(op):
            if op == "commit":
                return consumer.commit()
            if op == "generation":
                generation = consumer._coordinator._generation
                return generation.generation_id, generation.member_id
            raise ValueError(op)

        try:
            # kafka-python 3.0.12 loses a finished join when the leader's JoinGroup was
            # started by a metadata change and a poll timed out meanwhile (need_rejoin()
            # turns false once the leader assigned, so the finished join is never
            # completed: no assignment, no heartbeats, removed at the next rebalance).
            # A metadata refresh after subscribing, before the first join, fills the
            # coordinator's metadata snapshot and so avoids that metadata-triggered rejoin.
            consumer.subscribe(self.topics, listener=Listener())
            consumer.topics()
            while not self._stop.is_set():
                batch = consumer.poll(timeout_ms=100)
                got = [(r.topic, r.partition, r.offset, r.value) for records in batch.values() for r in records]
                if got:
                    self._add_records(got)
                self._set_assignment((tp.topic, tp.partition) for tp in consumer.assignment())
                self._serve_calls(handle)
        finally:
            consumer.close()

    # ---------------------------------------------------------------- confluent-kafka

    def _run_confluent(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        config = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "client.id": self.name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": self.session_timeout_ms,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "max.poll.interval.ms": self.rebalance_timeout_ms,
        }
        if self.instance_id is not None:
            config["group.instance.id"] = self.instance_id
        if self.strategy is not None:
            config["partition.assignment.strategy"] = self.strategy
        config.update(self.extra)
        consumer = Consumer(config)
        current: set = set()

        def cooperative() -> bool:
            # This binding does not expose rd_kafka_rebalance_protocol(); the strategy decides it.
            return self.strategy == "cooperative-sticky"

        # The client applies the (incremental) assignment itself after these return.
        def on_assign(c, partitions):
            tps = [(tp.topic, tp.partition) for tp in partitions]
            self._event("assigned", tps)
            if not cooperative():
                current.clear()
            current.update(tps)
            self._set_assignment(current)

        def on_revoke(c, partitions):
            tps = [(tp.topic, tp.partition) for tp in partitions]
            self._event("revoked", tps)
            if cooperative():
                current.difference_update(tps)
            else:
                current.clear()
            self._set_assignment(current)

        def on_lost(c, partitions):
            tps = [(tp.topic, tp.partition) for tp in partitions]
            self._event("lost", tps)
            current.difference_update(tps)
            self._set_assignment(current)

        def handle(op):
            if op == "commit":
                return consumer.commit(asynchronous=False)
            if op == "generation":
                return None, consumer.memberid()
            raise ValueError(op)

        try:
            consumer.subscribe(self.topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
            while not self._stop.is_set():
                message = consumer.poll(0.1)
                if message is not None:
                    if message.error():
                        raise KafkaException(message.error())
                    self._add_records([(message.topic(), message.partition(), message.offset(), message.value())])
                self._serve_calls(handle)
        finally:
            consumer.close()

    # ---------------------------------------------------------------- aiokafka

    async def _run_aiokafka(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.abc import ConsumerRebalanceListener
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

        assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor, "sticky": StickyPartitionAssignor}
        member = self
        config = {
            "bootstrap_servers": self.bootstrap,
            "group_id": self.group,
            "client_id": self.name,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            "max_poll_interval_ms": self.rebalance_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "request_timeout_ms": self.rebalance_timeout_ms + 10000,
        }
        if self.instance_id is not None:
            config["group_instance_id"] = self.instance_id
        if self.strategy is not None:
            config["partition_assignment_strategy"] = (assignors[self.strategy],)
        config.update(self.extra)
        consumer = AIOKafkaConsumer(**config)

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                member._event("revoked", [(tp.topic, tp.partition) for tp in revoked])

            def on_partitions_assigned(self, assigned):
                member._event("assigned", [(tp.topic, tp.partition) for tp in assigned])
                member._set_assignment((tp.topic, tp.partition) for tp in assigned)

        await asyncio.wait_for(consumer.start(), START_TIMEOUT_S)
        try:
            consumer.subscribe(self.topics, listener=Listener())
            while not self._stop.is_set():
                batch = await consumer.getmany(timeout_ms=100)
                got = [(r.topic, r.partition, r.offset, r.value) for records in batch.values() for r in records]
                if got:
                    self._add_records(got)
                self._set_assignment((tp.topic, tp.partition) for tp in consumer.assignment())
                while True:
                    try:
                        op, future = self._calls.get_nowait()
                    except queue.Empty:
                        break
                    try:
                        if op == "commit":
                            future.set_result(await consumer.commit())
                        elif op == "generation":
                            coordinator = consumer._coordinator
                            future.set_result((coordinator.generation, coordinator.member_id))
                        else:
                            raise ValueError(op)
                    except Exception as exc:  # noqa: BLE001 - raised by the caller's future.result()
                        future.set_exception(exc)
        finally:
            await asyncio.wait_for(consumer.stop(), STOP_TIMEOUT_S)


class ChildMember:
    """A :class:`GroupMember` in a child process (to be SIGKILLed); its
    assignment is read from the JSON lines it prints."""

    def __init__(self, kind: str, bootstrap: str, group: str, topics: list[str], **kwargs):
        spec = {"kind": kind, "bootstrap": bootstrap, "group": group, "topics": topics, **kwargs}
        env = dict(os.environ)
        env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.interop._groups", json.dumps(spec)],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self._lock = threading.Lock()
        self._assignment: frozenset = frozenset()
        self._killed = False
        self.output: list[str] = []
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            if line.startswith("ASSIGNMENT "):
                tps = frozenset(tuple(tp) for tp in json.loads(line[len("ASSIGNMENT "):]))
                with self._lock:
                    self._assignment = tps

    @property
    def assignment(self) -> frozenset:
        self.raise_error()
        with self._lock:
            return self._assignment

    def partitions(self, topic: str) -> set[int]:
        return {p for t, p in self.assignment if t == topic}

    def raise_error(self) -> None:
        """Fail if the child died before it was killed."""
        if not self._killed and self.process.poll() is not None:
            self._reader.join(5)
            raise AssertionError(f"group member process exited with {self.process.returncode}: {''.join(self.output[-30:])}")

    def kill(self) -> None:
        self._killed = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(STOP_TIMEOUT_S)
        self._reader.join(5)

    def __repr__(self) -> str:
        return f"<child {sorted(self._assignment)} rc={self.process.poll()} output={''.join(self.output[-20:])!r}>"


def _child_main(spec_json: str) -> None:
    spec = json.loads(spec_json)

    def report(assignment) -> None:
        print("ASSIGNMENT " + json.dumps(sorted(assignment)), flush=True)

    member = GroupMember(
        spec.pop("kind"), spec.pop("bootstrap"), spec.pop("group"), spec.pop("topics"), on_change=report, **spec
    ).start()
    # Runs until killed (or for at most two minutes, should the test forget it).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and member.error is None:
        time.sleep(0.1)
    if member.error is not None:
        print(f"ERROR {member.error!r}", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    _child_main(sys.argv[1])
