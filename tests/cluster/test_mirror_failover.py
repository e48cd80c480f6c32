"""The failover drill between two three-node pybroker clusters (issue 31).

A is the source, B the destination; each is a ``ReplicatedCluster`` (three
combined nodes, its own controller quorum). A 6-partition topic on A (RF=3,
min.insync.replicas=2) is written all along by one idempotent acks=all
confluent-kafka producer that records, per partition, the offset every record
was acknowledged with. B has a link with consumer offset sync for the test's
group and an RF=3 mirror of the topic, both made with ``pybroker
cluster-links`` and ``pybroker mirrors`` as a user makes them.

1. While the producer writes: at 200 sampled (partition, offset) pairs below
   B's high watermark, the batch holding that offset is byte for byte A's;
   a group that consumed part of the topic on A and committed has the same
   offsets on B (never past what B's mirror holds); the same group's consumer
   on B starts at the committed offset of each partition (no gap, no repeat).
2. Every node of A is SIGKILLed while the producer writes; ``pybroker mirrors
   --failover`` stops the mirror. Every record A acknowledged below B's stop
   offset is on B at its offset with the bytes the producer sent; the lost
   window ((A's last acknowledged offset + 1) - B's stop offset) and the time
   from the command's start to the first acknowledged write on B are printed
   (``-s`` shows them); B's own writes land at the stop offsets.

3. A comes back and takes writes of its own (a client still pointed at it);
   one of its nodes dies again, holding them. On A, a link towards B and
   ``pybroker mirrors --failback`` (after its ``--dry-run``) while that node
   is down: the report names, per partition, B's stop offset, A's log end and
   the records removed (log end - stop offset); A's topic ends exactly at the
   stop offset, then copies B's writes (same offsets, same bytes: the whole
   log is B's) and refuses producers. The node that was down comes back, cuts
   its own log to the stop offset and converges (every replica the same
   batches). The failback's time and the records removed are printed.

The drill knows two ways of losing A: ``killed`` (SIGKILL: B's
connections are refused or reset at once) and ``frozen`` (SIGSTOP on every
node: connections stay open and nothing answers, as when the network to A is
cut without a reset; B's fetch in flight must not hold up the failover). The
tests of a run share its clusters and producer (module scope: starting the
clusters for each test would double the run time); the second ends A and
hands its stop offsets to the third (``FAILED_OVER``), which brings A back,
so they run in this order.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from protocol.records import iter_batches
from storage.checkpoint import MIRROR_CUT_CHECKPOINT, read_mirror_cut
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until
from tests.conftest import PROJECT_ROOT
from tests.interop._support import fetch_partition, unique_topic
from tests.links._mirror_support import raw_log

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

PARTITIONS = 6
LINK = "from-a"
RATE_PER_S = 1000  # records per second over all partitions
SAMPLES = 200
WAIT_S = 45
TOOL_TIMEOUT_S = 60
CONSUMED_PER_PARTITION = 40  # what the group reads on A before it commits
FAILOVER_GOAL_S = 5.0
BACK_LINK = "to-b"
DOWN_NODE = 3  # the node of A that is down while the failback runs
# What the failover test hands to the failback test, by way of losing A: B's
# stop offset per partition. Empty when the failover did not run or failed.
FAILED_OVER: dict[str, dict[int, int]] = {}
# The brokers log each failback cut at INFO; a run at a quieter level checks the cuts by their marks only.
INFO_LOGGED = os.environ.get("PYBROKER_TEST_LOG_LEVEL", "INFO").upper() in ("DEBUG", "INFO")


def pybroker(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "broker", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=TOOL_TIMEOUT_S,
    )
    assert done.returncode == 0, f"pybroker {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


class AckedProducer:
    """One idempotent acks=all producer writing ``RATE_PER_S`` records a second
    round-robin over the partitions until stopped. ``sent`` holds every value
    handed to the client per partition; ``acked`` the value acknowledged at
    each offset, per partition."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 30000,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.sent: dict[int, set[bytes]] = {p: set() for p in range(PARTITIONS)}
        self.acked: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
        self.failed: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"drill-{topic}")

    def _report(self, error, message) -> None:
        with self._lock:
            if error is None:
                self.acked[message.partition()][message.offset()] = message.value()
            else:
                self.failed.append(error.name())

    def _run(self) -> None:
        started = time.monotonic()
        n = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * RATE_PER_S)
            for _ in range(min(due - n, 500)):
                partition = n % PARTITIONS
                value = f"p{partition}-{n:08d}-{uuid.uuid4().hex}".encode()
                try:
                    self.producer.produce(
                        self.topic, value=value, key=b"k%d" % n, partition=partition, on_delivery=self._report
                    )
                except BufferError:
                    break
                self.sent[partition].add(value)
                n += 1
            self.producer.poll(0.005)

    def start(self) -> AckedProducer:
        self._thread.start()
        return self

    def acked_count(self) -> int:
        with self._lock:
            return sum(len(offsets) for offsets in self.acked.values())

    def acked_copy(self) -> dict[int, dict[int, bytes]]:
        with self._lock:
            return {p: dict(offsets) for p, offsets in self.acked.items()}

    def stop(self, drain_s: float) -> None:
        """Stop writing; wait up to ``drain_s`` for outstanding reports, then drop
        what is still queued (its reports come as errors: not acknowledged)."""
        self._stop.set()
        self._thread.join(10)
        if self.producer is None:
            return
        self.producer.flush(drain_s)
        self.producer.purge()
        self.producer.flush(5)
        # Dropped: a client of a dead cluster would go on reconnecting until destroyed.
        self.producer = None


def leader_bootstrap(cluster: ReplicatedCluster, topic: str, partition: int) -> str:
    leader = cluster.leader_of(topic, partition, timeout_s=WAIT_S)
    assert leader is not None, f"{topic}-{partition} has no leader"
    return cluster.bootstrap([leader])


def batch_at(bootstrap: str, topic: str, partition: int, offset: int) -> bytes | None:
    """The bytes of the batch holding ``offset`` (one Fetch at that offset), or None."""
    data = fetch_partition(bootstrap, topic, partition, offset)
    assert data.error_code == 0, (bootstrap, topic, partition, offset, data.error_code)
    records = bytes(data.records or b"")
    for position, size, header in iter_batches(records, allow_truncated_tail=True):
        if position + size > len(records):
            break
        if header.base_offset <= offset <= header.base_offset + header.last_offset_delta:
            return records[position : position + size]
    return None


def committed(bootstrap: str, group: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=20).values()
    return {tp.partition: tp.offset for tp in future.result(20).topic_partitions if tp.offset >= 0}


def high_watermarks(cluster: ReplicatedCluster, topic: str) -> dict[int, int]:
    return {p: cluster.watermarks(topic, p)[1] for p in range(PARTITIONS)}


def report_rows(out: str) -> dict[int, dict[str, int]]:
    """The per-partition lines of a ``pybroker mirrors`` report, by partition."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("\tPartition: "):
            fields = {key: int(value) for key, value in (item.split(": ") for item in line.strip().split("\t"))}
            rows[fields["Partition"]] = fields
    return rows


def disk_log_end(cluster: ReplicatedCluster, node: int, topic: str, partition: int) -> int:
    """The offset after the last complete batch of ``node``'s replica, read from its files."""
    batches = cluster.replica_batches(node, topic, partition)
    return batches[-1][1] + 1 if batches else 0


def cut_lines(cluster: ReplicatedCluster, node: int, topic: str) -> dict[int, tuple[int, int]]:
    """(log end before, log end after) of each failback cut ``node``'s current process logged for ``topic``."""
    cuts = {}
    for line in cluster.nodes[node].output:
        marker = f"failback: {topic}-"
        if marker in line and " cut back from " in line:
            head, _, tail = line.partition(marker)[2].partition(" cut back from ")
            before, _, after = tail.partition(" to ")
            cuts[int(head)] = (int(before), int(after.split()[0]))
    return cuts


def cut_marks(cluster: ReplicatedCluster, node: int, topic: str) -> dict[int, int]:
    """The failback mark (offset) each of ``node``'s replicas recorded it acted on."""
    marks = {}
    for p in range(PARTITIONS):
        mark = read_mirror_cut(cluster.partition_dir(node, topic, p) / MIRROR_CUT_CHECKPOINT)
        if mark is not None:
            marks[p] = mark[0]
    return marks


def read_range(bootstrap: str, topic: str, starts: dict[int, int], ends: dict[int, int]) -> dict[int, dict[int, bytes]]:
    """The records at offsets ``starts[p]`` up to ``ends[p]`` of every partition, by offset."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                       "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    found: dict[int, dict[int, bytes]] = {p: {} for p in starts}
    try:
        reader.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and any(len(found[p]) < ends[p] - starts[p] for p in starts):
            for message in reader.consume(500, 0.5):
                if message.error() is None and message.offset() < ends[message.partition()]:
                    found[message.partition()][message.offset()] = message.value()
    finally:
        reader.close()
    return found


def produce_acked(bootstrap: str, topic: str, values: dict[int, list[bytes]]) -> dict[int, dict[int, bytes]]:
    """Write ``values`` (acks=all, idempotent) and wait for every acknowledgement; the offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": WAIT_S * 1000})
    acked: dict[int, dict[int, bytes]] = {p: {} for p in values}
    errors: list[str] = []

    def report(error, message):
        if error is None:
            acked[message.partition()][message.offset()] = message.value()
        else:
            errors.append(error.name())

    for partition, items in values.items():
        for value in items:
            producer.produce(topic, value=value, partition=partition, on_delivery=report)
    assert producer.flush(WAIT_S) == 0 and not errors, errors
    return acked


# The suite loses A by SIGKILL; the SIGSTOP drill doubles the module's time, so it
# runs when asked (PYBROKER_DRILL_WAYS=killed,frozen), as the longer fault runs
# do. A silent source's failover is also checked per partition, in every run,
# by tests/links/test_mirror_fetcher.py.
DRILL_WAYS = [w.strip() for w in os.environ.get("PYBROKER_DRILL_WAYS", "killed").split(",") if w.strip()]


@pytest.fixture(scope="module", params=DRILL_WAYS)
def drill(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"failover-drill-{request.param}")
    a, b = ReplicatedCluster(root / "a"), ReplicatedCluster(root / "b")
    producer = None
    try:
        a.start()
        b.start()
        topic, group = unique_topic("drill"), unique_topic("drill-group")
        a.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
        link_config = root / "link.properties"
        filters = {"groupFilters": [{"name": group, "patternType": "LITERAL", "filterType": "INCLUDE"}]}
        link_config.write_text(
            f"bootstrap.servers={a.bootstrap()}\n"
            "consumer.offset.sync.enable=true\n"
            "consumer.offset.sync.ms=1000\n"
            f"consumer.offset.group.filters={json.dumps(filters)}\n"
        )
        pybroker(
            "cluster-links",
            "--bootstrap-server",
            b.bootstrap(),
            "--create",
            "--link",
            LINK,
            "--config-file",
            str(link_config),
        )
        producer = AckedProducer(a.bootstrap(), topic).start()
        pybroker(
            "mirrors",
            "--bootstrap-server",
            b.bootstrap(),
            "--create",
            "--mirror-topic",
            topic,
            "--link",
            LINK,
            "--replication-factor",
            "3",
        )
        yield a, b, topic, group, producer, request.param
    finally:
        if producer is not None:
            producer.stop(drain_s=0)
        for cluster in (a, b):
            cluster.stop()
            cluster.save_output()


def test_the_mirror_is_the_source_byte_for_byte_and_a_group_moves_to_it(drill):
    a, b, topic, group, producer, _ = drill
    # Copying while written: every partition of B holds a few hundred records.
    assert wait_until(lambda: min(high_watermarks(b, topic).values()) >= 2 * CONSUMED_PER_PARTITION, WAIT_S), (
        high_watermarks(b, topic)
    )
    # 1. Sampled batches, byte for byte.
    b_hws = high_watermarks(b, topic)
    rng = random.Random(31)
    samples = [(p, rng.randrange(b_hws[p])) for p in (rng.randrange(PARTITIONS) for _ in range(SAMPLES))]
    a_leaders = {p: leader_bootstrap(a, topic, p) for p in range(PARTITIONS)}
    b_leaders = {p: leader_bootstrap(b, topic, p) for p in range(PARTITIONS)}
    differing = []
    for p, offset in samples:
        mine, theirs = batch_at(b_leaders[p], topic, p, offset), batch_at(a_leaders[p], topic, p, offset)
        if mine is None or mine != theirs:
            differing.append((p, offset))
    identical = 100.0 * (SAMPLES - len(differing)) / SAMPLES
    print(f"\nbyte-identical batches at {SAMPLES} sampled offsets: {identical:.1f} %")
    assert not differing, f"B differs from A at {differing[:10]} ({len(differing)} of {SAMPLES})"

    # 2. A group consumes part of the topic on A and commits.
    consumer = Consumer(
        {
            "bootstrap.servers": a.bootstrap(),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    read: dict[int, int] = {}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and any(read.get(p, 0) < CONSUMED_PER_PARTITION for p in range(PARTITIONS)):
            for message in consumer.consume(100, 0.5):
                if message.error() is None and read.get(message.partition(), 0) < CONSUMED_PER_PARTITION:
                    read[message.partition()] = message.offset() + 1
        assert all(read.get(p, 0) == CONSUMED_PER_PARTITION for p in range(PARTITIONS)), read
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in read.items()], asynchronous=False)
    finally:
        consumer.close()
    assert committed(a.bootstrap(), group) == read

    # 3. B's group gets A's offsets, never past what B's mirror holds.
    seen_above_hw = []

    def synced():
        on_b = committed(b.bootstrap(), group)
        hws = high_watermarks(b, topic)  # read after the offsets: the cap at that time or later
        seen_above_hw.extend((p, o, hws[p]) for p, o in on_b.items() if o > hws[p])
        return on_b == read

    assert wait_until(synced, WAIT_S, interval_s=0.5), committed(b.bootstrap(), group)
    assert not seen_above_hw, f"B's group offsets past B's high watermark: {seen_above_hw[:5]}"

    # 4. The group's consumer on B starts where it committed: no gap, no repeat.
    moved = Consumer(
        {
            "bootstrap.servers": b.bootstrap(),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    first: dict[int, tuple[int, bytes]] = {}
    try:
        moved.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while len(first) < PARTITIONS and time.monotonic() < deadline:
            message = moved.poll(0.5)
            if message is not None and message.error() is None:
                first.setdefault(message.partition(), (message.offset(), message.value()))
    finally:
        moved.close()
    # The record at each committed offset is below B's high watermark, so A acknowledged it: its value is known.
    assert wait_until(lambda: all(o in producer.acked[p] for p, o in read.items()), WAIT_S)
    acked = producer.acked_copy()
    expected = {p: (o, acked[p][o]) for p, o in read.items()}
    assert first == expected


def test_failover_drill_under_load(drill):
    a, b, topic, _, producer, outage = drill
    # A has acknowledged writes in every partition and is still taking them.
    assert wait_until(lambda: all(producer.acked[p] for p in range(PARTITIONS)), WAIT_S)
    b_before = high_watermarks(b, topic)
    acked_before = producer.acked_count()
    assert wait_until(lambda: producer.acked_count() >= acked_before + RATE_PER_S // 2, WAIT_S)  # still writing

    # Every node of A at once, mid-stream.
    if outage == "killed":
        for node in NODE_IDS:
            a.signal(node, signal.SIGKILL)
        for node in NODE_IDS:
            a.kill(node)  # reaps the process
    else:
        for node in NODE_IDS:
            a.pause(node)
    producer.stop(drain_s=2)
    acked = producer.acked_copy()
    assert all(acked[p] for p in range(PARTITIONS))

    # Fail the mirror over; a new producer's first acknowledged write ends the clock.
    started = time.monotonic()
    out = pybroker(
        "mirrors",
        "--bootstrap-server",
        b.bootstrap(),
        "--failover",
        "--topics",
        topic,
        "--timeout-ms",
        str(WAIT_S * 1000),
    ).stdout
    command_s = time.monotonic() - started
    assert f"Mirror topic {topic} is FAILED_OVER." in out, out
    stop_offsets = {p: row["StopOffset"] for p, row in report_rows(out).items()}
    assert sorted(stop_offsets) == list(range(PARTITIONS)), out
    writer = Producer(
        {
            "bootstrap.servers": b.bootstrap(),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 0,
            "message.timeout.ms": WAIT_S * 1000,
        }
    )
    first_ack: list[float] = []
    landed: dict[int, int] = {}
    refused: list[str] = []

    def report(error, message):
        if error is not None:
            refused.append(error.name())
            return
        first_ack.append(time.monotonic())
        landed[message.partition()] = message.offset()

    for p in range(PARTITIONS):
        writer.produce(topic, value=b"after-failover-%d" % p, partition=p, on_delivery=report)
    assert writer.flush(WAIT_S) == 0
    assert not refused and first_ack, refused
    failover_s = min(first_ack) - started

    # The figures.
    lost = {p: (max(acked[p]) + 1) - stop_offsets[p] for p in range(PARTITIONS)}
    print(
        f"\nfailover ({outage} source): command {command_s:.2f} s; command start to first acknowledged write on B {failover_s:.2f} s "
        f"(goal <= {FAILOVER_GOAL_S:.0f} s)"
    )
    for p in range(PARTITIONS):
        print(
            f"partition {p}: last acknowledged on A {max(acked[p])}, stop offset on B {stop_offsets[p]}, "
            f"lost window {lost[p]} records"
        )
    print(
        f"lost window over all partitions: {sum(max(0, w) for w in lost.values())} records, "
        f"largest {max(lost.values())}"
    )

    # Nothing B had mirrored before the kill is dropped by the stop.
    assert all(stop_offsets[p] >= b_before[p] for p in range(PARTITIONS)), (stop_offsets, b_before)
    # B's own writes follow the mirrored records.
    assert landed == stop_offsets, (landed, stop_offsets)
    # Every record A acknowledged below the stop offset is on B, same offset, same bytes;
    # anything else below the stop offset is a record the producer sent (unacknowledged in time).
    reader = Consumer(
        {
            "bootstrap.servers": b.bootstrap(),
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    on_b: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    try:
        reader.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and any(len(on_b[p]) < stop_offsets[p] for p in range(PARTITIONS)):
            for message in reader.consume(500, 0.5):
                if message.error() is None and message.offset() < stop_offsets[message.partition()]:
                    on_b[message.partition()][message.offset()] = message.value()
    finally:
        reader.close()
    for p in range(PARTITIONS):
        assert sorted(on_b[p]) == list(range(stop_offsets[p])), (
            f"partition {p}: offsets on B are not 0..{stop_offsets[p] - 1}"
        )
        missing = [o for o, v in acked[p].items() if o < stop_offsets[p] and on_b[p].get(o) != v]
        assert not missing, f"partition {p}: acknowledged records not on B as sent at {missing[:10]}"
        unknown = [o for o, v in on_b[p].items() if o not in acked[p] and v not in producer.sent[p]]
        assert not unknown, f"partition {p}: records on B the producer never sent at {unknown[:10]}"
        assert len(set(on_b[p].values())) == len(on_b[p]), f"partition {p}: a record is on B twice"
    unacknowledged = {p: sum(1 for o in on_b[p] if o not in acked[p]) for p in range(PARTITIONS)}
    print(f"records on B below the stop offset that A never acknowledged to the producer: {unacknowledged}")
    FAILED_OVER[outage] = stop_offsets


def test_failback_of_the_old_source_while_one_of_its_nodes_is_down(drill):
    a, b, topic, _, producer, outage = drill
    stop_offsets = FAILED_OVER.get(outage)
    if stop_offsets is None:
        pytest.skip(f"the failover drill ({outage} source) did not run or failed: no stop offsets to fail back to")
    b_logs = {p: raw_log(leader_bootstrap(b, topic, p), topic, p) for p in range(PARTITIONS)}
    # B's log: the mirrored records, then the one record per partition the failover test wrote.
    assert {p: hw for p, (_, hw) in b_logs.items()} == {p: o + 1 for p, o in stop_offsets.items()}

    # A comes back from its disks (a frozen A is ended first) and takes writes of its own:
    # partition p gets p + 1 records that B never has.
    for node in NODE_IDS:
        if a.running(node):
            a.kill(node)
    a.heal(WAIT_S)
    late_values = {p: [b"a-late-%d-%d" % (p, i) for i in range(p + 1)] for p in range(PARTITIONS)}
    late = produce_acked(a.bootstrap(), topic, late_values)

    # Every replica holds all of it (the node that dies next too); then that node dies.
    def even_ends():
        ends = {p: {n: disk_log_end(a, n, topic, p) for n in NODE_IDS} for p in range(PARTITIONS)}
        return ends if all(len(set(by_node.values())) == 1 for by_node in ends.values()) else None

    ends = wait_until(even_ends, WAIT_S, interval_s=0.2)
    assert ends, {p: {n: disk_log_end(a, n, topic, p) for n in NODE_IDS} for p in range(PARTITIONS)}
    a_end = {p: ends[p][DOWN_NODE] for p in range(PARTITIONS)}
    assert a_end == {p: max(late[p]) + 1 for p in range(PARTITIONS)}, (a_end, late)
    a.signal(DOWN_NODE, signal.SIGKILL)
    a.kill(DOWN_NODE)
    live = [n for n in NODE_IDS if n != DOWN_NODE]

    # Until its session expires the dead node is a broker to the controller, which may even
    # hand it back the partitions it prefers: wait for the fence, as every live node sees it
    # (any of them may serve the tool's requests), and for live leaders.
    def led_by_live_nodes():
        if any(a.brokers(n) != live for n in live):
            return False
        states = [a.describe(topic, via=n) for n in live]
        return all(s is not None and all(s[p].leader in live for p in range(PARTITIONS)) for s in states)

    assert wait_until(led_by_live_nodes, WAIT_S, interval_s=0.2), {
        n: (a.brokers(n), a.describe(topic, via=n)) for n in live
    }
    removed = {p: a_end[p] - stop_offsets[p] for p in range(PARTITIONS)}
    # What A holds past the stop offset, read back: the drill producer's records B never
    # got, then the ones written since A came back.
    past_stop = read_range(a.bootstrap(), topic, stop_offsets, a_end)
    for p in range(PARTITIONS):
        assert sorted(past_stop[p]) == list(range(stop_offsets[p], a_end[p])), (p, sorted(past_stop[p]))
        assert {o: v for o, v in past_stop[p].items() if o in late[p]} == late[p], p
        strangers = [o for o, v in past_stop[p].items() if o not in late[p] and v not in producer.sent[p]]
        assert not strangers, f"partition {p}: records on A past the stop offset nobody sent at {strangers[:10]}"

    # On A, as docs/cluster-links.md#failback says: a link towards B, the dry run, the failback.
    link_config = a.root / "back-link.properties"
    link_config.write_text(f"bootstrap.servers={b.bootstrap()}\n")
    pybroker("cluster-links", "--bootstrap-server", a.bootstrap(), "--create", "--link", BACK_LINK,
             "--config-file", str(link_config))
    failback = ("mirrors", "--bootstrap-server", a.bootstrap(), "--failback", "--mirror-topic", topic,
                "--link", BACK_LINK)

    def expected(column: str) -> dict[int, dict[str, int]]:
        return {
            p: {"Partition": p, "StopOffset": stop_offsets[p], "LogEndOffset": a_end[p], column: removed[p]}
            for p in range(PARTITIONS)
        }

    dry = pybroker(*failback, "--dry-run").stdout
    assert report_rows(dry) == expected("RecordsToRemove"), dry
    assert f"Total records to remove: {sum(removed.values())}" in dry, dry
    started = time.monotonic()
    out = pybroker(*failback).stdout
    command_s = time.monotonic() - started
    assert f"Topic {topic} is now a mirror of {topic} over link {BACK_LINK}." in out, out
    assert report_rows(out) == expected("RecordsRemoved"), out
    assert f"Total records removed: {sum(removed.values())}" in out, out

    # Each live replica cut exactly its records past the stop offset; then A copies B's log, byte for byte.
    wanted_cuts = {p: (a_end[p], stop_offsets[p]) for p in range(PARTITIONS)}
    if INFO_LOGGED:
        assert wait_until(lambda: all(cut_lines(a, n, topic) == wanted_cuts for n in live), WAIT_S), {
            n: cut_lines(a, n, topic) for n in live
        }
    assert wait_until(lambda: all(cut_marks(a, n, topic) == stop_offsets for n in live), WAIT_S), {
        n: cut_marks(a, n, topic) for n in live
    }
    b_ends = {p: hw for p, (_, hw) in b_logs.items()}
    assert wait_until(lambda: high_watermarks(a, topic) == b_ends, WAIT_S, interval_s=0.2), high_watermarks(a, topic)
    mirrored_s = time.monotonic() - started
    for p in range(PARTITIONS):
        assert raw_log(leader_bootstrap(a, topic, p), topic, p) == b_logs[p], f"partition {p}: A's log is not B's"

    # A's topic is read-only for producers.
    refused: list[str] = []
    writer = Producer({"bootstrap.servers": a.bootstrap(), "acks": "all", "message.timeout.ms": WAIT_S * 1000})
    for p in range(PARTITIONS):
        writer.produce(topic, value=b"after-failback-%d" % p, partition=p,
                       on_delivery=lambda error, message: refused.append(error.name() if error else "accepted"))
    assert writer.flush(WAIT_S) == 0
    assert refused == ["INVALID_REQUEST"] * PARTITIONS, refused
    assert high_watermarks(a, topic) == b_ends

    # The node that was down comes back: it cuts its own records past the stop offset and converges.
    down_end = {p: disk_log_end(a, DOWN_NODE, topic, p) for p in range(PARTITIONS)}
    assert down_end == a_end, down_end
    assert cut_marks(a, DOWN_NODE, topic) == {}
    back = time.monotonic()
    a.restart_together([DOWN_NODE])

    def converged():
        states = a.describe(topic)
        return (
            states is not None
            and all(DOWN_NODE in states[p].isr for p in range(PARTITIONS))
            and all(a.segments_identical(topic, p, b_ends[p], quiescent=True)[0] for p in range(PARTITIONS))
        )

    assert wait_until(converged, WAIT_S, interval_s=0.2), {
        p: a.segments_identical(topic, p, b_ends[p], quiescent=True)[1] for p in range(PARTITIONS)
    }
    converge_s = time.monotonic() - back
    if INFO_LOGGED:
        assert cut_lines(a, DOWN_NODE, topic) == wanted_cuts, cut_lines(a, DOWN_NODE, topic)
    assert cut_marks(a, DOWN_NODE, topic) == stop_offsets
    assert {p: disk_log_end(a, DOWN_NODE, topic, p) for p in range(PARTITIONS)} == b_ends

    # The figures.
    print(
        f"\nfailback ({outage} source, node {DOWN_NODE} of A down): command {command_s:.2f} s; command start to A "
        f"holding B's log {mirrored_s:.2f} s; node {DOWN_NODE} back to converged {converge_s:.2f} s"
    )
    for p in range(PARTITIONS):
        print(
            f"partition {p}: A's log end {a_end[p]}, stop offset on B {stop_offsets[p]}, records removed {removed[p]} "
            f"({len(late[p])} written after A came back)"
        )
    print(f"records removed over all partitions: {sum(removed.values())}")
