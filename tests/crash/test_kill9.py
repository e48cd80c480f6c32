"""SIGKILL a durable broker again and again while it acknowledges writes.

A real ``pybroker start`` process runs in durable mode
(``log.flush.interval.messages=1``: every append is fsynced before it is
acknowledged) with 64 KiB segments, so segments roll all the time. Each round
a fresh idempotent confluent-kafka producer (``acks=all``) sends uniquely
numbered messages from a background thread and records which were
ACKNOWLEDGED (delivery report without error) and at which offset; at a random
moment (seeded: the seed is printed, set ``PYBROKER_CRASH_SEED`` to replay it)
the broker is killed with SIGKILL and restarted on the same data directory.

A fresh producer per round means no retry crosses a kill, so:

- every acknowledged message must be in the log exactly once, at the offset
  its acknowledgement gave;
- a message that was not acknowledged may be missing, but may appear at most
  once (no message is ever sent by two producers, and each producer's retries
  are deduplicated by the idempotence checks);
- offsets are contiguous from 0, every batch on disk passes its CRC, and the
  index files always agree with the ``.log`` files.

While the broker is down after each kill the segment, index and checkpoint
files are checked as the crash left them (durability at the file level: all
acknowledged messages must already be on disk). One round also tears the
tails by hand (half a batch, and garbage) while the broker is down: it must
start, cut exactly those bytes and serve everything acknowledged; another
deletes a closed segment's indexes and scribbles over the active segment's
index, which the restart must rebuild. Some rounds also kill a broker during
its start-up (recovery), before the round's own broker starts. At the end
the broker is stopped cleanly and the files are checked strictly, read back
offset by offset through ``PartitionLog`` and recovered once more in full.

Set ``PYBROKER_CRASH_ROUNDS`` to change the number of kills (default 14 in the suite; longer runs by hand, e.g. 100).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import pytest

from protocol.exceptions import ProtocolError
from protocol.records import decode_records, iter_batches, patch_base_offset, update_crc, validate_batch
from storage.checkpoint import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offsets,
)
from storage.dump import DumpOptions, DumpStats, dump_offset_index, dump_time_index
from storage.handle_pool import FileHandlePool
from storage.log import LogConfig, PartitionLog
from tests.conftest import PROJECT_ROOT, wait_until
from tests.interop._support import create_topic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

TOPIC = "crash"
PARTITIONS = 2
SEGMENT_BYTES = 64 * 1024
ROUNDS = int(os.environ.get("PYBROKER_CRASH_ROUNDS", "14"))
MAX_KILL_DELAY_S = 1.2  # after the round's first acknowledgement
FIRST_ACK_TIMEOUT_S = 30.0
ROUND_PRODUCE_LIMIT = 60_000  # messages one round's producer may send at most
ROUND_TIME_LIMIT_S = 60.0
FINAL_MESSAGES = 500
KILL_ROUND_MESSAGE_TIMEOUT_MS = 5000
EARLY_KILL_CHANCE = 0.25  # of also killing a broker during its start-up before a round

OVERRIDES = {
    "offsets.topic.replication.factor": "1",  # one broker
    "log.flush.interval.messages": "1",  # durable mode: fsync before acknowledging
    "log.segment.bytes": str(SEGMENT_BYTES),
    "log.index.interval.bytes": "1024",  # enough index entries to check
    # Checkpoints move while producing, so recovery starts from a recovery point
    # (and sometimes from none at all, right after the topic was created).
    "log.flush.offset.checkpoint.interval.ms": "300",
    "auto.create.topics.enable": "false",
}

VALUE_RE = re.compile(rb"^m(\d{9})\|")


def message_value(msg_id: int, rng: random.Random) -> bytes:
    return b"m%09d|" % msg_id + bytes(rng.randrange(97, 123) for _ in range(rng.randrange(20, 300)))


def message_id(value: bytes) -> int:
    match = VALUE_RE.match(value or b"")
    assert match, f"a record with a foreign value {value[:40]!r}"
    return int(match.group(1))


# --------------------------------------------------------------------------- producing


@dataclass
class Ledger:
    """What every producer was told, over all rounds."""

    acked: dict[int, tuple[int, int]] = field(default_factory=dict)  # id -> (partition, offset)
    failed: dict[int, str] = field(default_factory=dict)  # id -> error name (not acknowledged)
    sent: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_delivery(self, msg_id: int, err, msg) -> None:
        with self.lock:
            if err is None:
                assert msg_id not in self.acked, f"message {msg_id} acknowledged twice"
                self.acked[msg_id] = (msg.partition(), msg.offset())
            else:
                self.failed[msg_id] = err.name()


class RoundProducer(threading.Thread):
    """One round's producer: sends ids from ``first_id`` on until stopped, then
    purges whatever is still queued or in flight so nothing outlives the round."""

    def __init__(
        self,
        bootstrap: str,
        first_id: int,
        ledger: Ledger,
        seed: int,
        *,
        limit: int = ROUND_PRODUCE_LIMIT,
        drain: bool = False,
    ):
        super().__init__(daemon=True, name=f"producer-{first_id}")
        self.bootstrap = bootstrap
        self.first_id = first_id
        self.limit = limit
        self.drain = drain  # wait for every delivery report before purging (no kill coming)
        self.next_id = first_id
        self.ledger = ledger
        self.rng = random.Random(seed)
        self.stop_event = threading.Event()
        self.acked_this_round = 0
        self.error: BaseException | None = None
        self.fatal: str | None = None
        self.left_in_queue = -1

    def run(self) -> None:
        from confluent_kafka import Producer

        def on_error(err):
            # A fatal error while the broker serves is a finding; once the round
            # is being torn down (broker killed, queue purged) it is the client's.
            if err.fatal() and not self.stop_event.is_set():
                self.fatal = str(err)

        try:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 2,
                    # A killed round's leftovers must resolve soon: librdkafka does not
                    # always fail in-flight messages of an idempotent producer at once
                    # when purged, but it does fail them when they time out.
                    "message.timeout.ms": 30000 if self.drain else KILL_ROUND_MESSAGE_TIMEOUT_MS,
                    "reconnect.backoff.ms": 20,
                    "reconnect.backoff.max.ms": 200,
                    "error_cb": on_error,
                }
            )
        except Exception as exc:  # noqa: BLE001 - surfaces in the main thread
            self.error = exc
            return
        deadline = time.monotonic() + ROUND_TIME_LIMIT_S
        try:
            while (
                not self.stop_event.is_set()
                and time.monotonic() < deadline
                and self.next_id - self.first_id < self.limit
            ):
                for _ in range(min(20, self.limit - (self.next_id - self.first_id))):
                    msg_id = self.next_id
                    try:
                        producer.produce(
                            TOPIC,
                            key=b"k%d" % msg_id,
                            value=message_value(msg_id, self.rng),
                            partition=msg_id % PARTITIONS,
                            on_delivery=lambda err, msg, msg_id=msg_id: self._delivered(msg_id, err, msg),
                        )
                    except BufferError:
                        break
                    with self.ledger.lock:
                        self.ledger.sent.add(msg_id)
                    self.next_id += 1
                producer.poll(0.005)
        except Exception as exc:  # noqa: BLE001 - surfaces in the main thread
            self.error = exc
        finally:
            if self.drain:
                producer.flush(30)
            # The broker is gone (or going): fail everything this producer still
            # holds, so no retry of it can reach the next broker incarnation.
            producer.purge(in_queue=True, in_flight=True)
            self.left_in_queue = producer.flush(KILL_ROUND_MESSAGE_TIMEOUT_MS / 1000 + 10)
            del producer

    def _delivered(self, msg_id: int, err, msg) -> None:
        self.ledger.on_delivery(msg_id, err, msg)
        if err is None:
            self.acked_this_round += 1


# --------------------------------------------------------------------------- on-disk checks


@dataclass
class DiskState:
    """Records found in a partition's segment files: id -> offset, plus the log end."""

    ids: dict[int, int]
    next_offset: int
    torn_tail_bytes: int
    segments: int


class SegmentCache:
    """Decoded records of sealed segments, so each round only decodes what changed."""

    def __init__(self):
        self._cache: dict[Path, tuple[tuple[int, int], list]] = {}

    def decode(self, path: Path, data: bytes):
        """The records of a segment's whole batches (CRCs checked)."""
        key = (len(data), hash(data[-4096:]))
        cached = self._cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        records = decode_records(data, verify_crc=True)
        self._cache[path] = (key, records)
        return records


def check_partition_files(pdir: Path, cache: SegmentCache, *, strict: bool) -> DiskState:
    """Walk every segment of a partition as it is on disk.

    Every batch must pass its CRC, offsets must be contiguous inside and across
    segments from 0, each segment must start at its base offset, and every
    ``.index`` / ``.timeindex`` entry must agree with the ``.log``. Only with
    ``strict=False`` (right after a kill) may the last segment end in a torn
    batch; its size is reported.
    """
    logs = sorted(pdir.glob("*.log"), key=lambda p: int(p.stem))
    assert logs, f"{pdir}: no segment"
    assert int(logs[0].stem) == 0, f"{pdir}: the first segment is {logs[0].name} (no retention here)"
    expected = 0
    ids: dict[int, int] = {}
    torn = 0
    for i, path in enumerate(logs):
        base = int(path.stem)
        assert base == expected, f"{path}: base offset {base}, but the previous segment ended at {expected}"
        data = path.read_bytes()
        last = i == len(logs) - 1
        valid_end = 0
        try:
            for pos, size, header in iter_batches(data, allow_truncated_tail=not strict and last):
                validate_batch(data, pos, size)
                assert header.base_offset == expected, (
                    f"{path} @{pos}: batch base offset {header.base_offset}, expected {expected}"
                )
                assert header.records_count == header.last_offset_delta + 1
                expected = header.base_offset + header.last_offset_delta + 1
                valid_end = pos + size
        except ProtocolError as exc:
            raise AssertionError(f"{path}: {exc}") from None
        if valid_end < len(data):
            assert not strict and last, f"{path}: {len(data) - valid_end} bytes after the last whole batch"
            torn = len(data) - valid_end
        if i < len(logs) - 1:
            assert data, f"{path}: an empty segment that is not the last one"
        for record in cache.decode(path, data[:valid_end]):
            msg_id = message_id(record.value)
            assert msg_id not in ids, f"{pdir.name}: message {msg_id} at offsets {ids[msg_id]} and {record.offset}"
            ids[msg_id] = record.offset
        check_indexes(path)
    return DiskState(ids, expected, torn, len(logs))


def check_indexes(log_path: Path) -> None:
    stats = DumpStats()
    options = DumpOptions(verify=True)
    lines = []
    for suffix, dump in ((".index", dump_offset_index), (".timeindex", dump_time_index)):
        index = log_path.with_suffix(suffix)
        if index.exists():
            lines += list(dump(index, options, stats))
    problems = [line for line in lines if line.startswith(("Mismatch", "Corrupt", "Error"))]
    assert stats.problems == 0 and stats.errors == 0, "\n".join(problems[:20])


def check_checkpoints(log_dir: Path) -> dict[str, dict]:
    out = {}
    for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT):
        out[name] = read_offsets(log_dir / name)  # raises on a torn or malformed file
    return out


def partition_dirs(log_dir: Path) -> list[Path]:
    return [log_dir / f"{TOPIC}-{p}" for p in range(PARTITIONS)]


def check_disk(log_dir: Path, ledger: Ledger, cache: SegmentCache, *, strict: bool, seed: int) -> list[DiskState]:
    states = [check_partition_files(pdir, cache, strict=strict) for pdir in partition_dirs(log_dir)]
    checkpoints = check_checkpoints(log_dir)
    for p, state in enumerate(states):
        for name, table in checkpoints.items():
            offset = table.get((TOPIC, p))
            if offset is not None:
                assert 0 <= offset <= state.next_offset, f"{name}: {TOPIC}-{p} at {offset}, log end {state.next_offset}"
    with ledger.lock:
        acked = dict(ledger.acked)
    missing = []
    for msg_id, (partition, offset) in acked.items():
        got = states[partition].ids.get(msg_id)
        if got != offset:
            missing.append((msg_id, partition, offset, got))
    assert not missing, (
        f"seed {seed}: {len(missing)} acknowledged messages are not on disk where their acknowledgement "
        f"put them, (id, partition, acked offset, offset on disk): {missing[:10]}"
    )
    for state in states:
        foreign = set(state.ids) - ledger.sent
        assert not foreign, f"messages never sent: {sorted(foreign)[:10]}"
    return states


# --------------------------------------------------------------------------- consuming


def consume_all(bootstrap: str, timeout_s: float = 60.0) -> dict[int, list[tuple[int, int]]]:
    """Every record of every partition from offset 0 to the high watermark:
    partition -> [(offset, id)]."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "crash-test-unused",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "fetch.max.bytes": 4 * 1024 * 1024,
        }
    )
    try:
        watermarks = {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10) for p in range(PARTITIONS)
        }
        for p, (low, high) in watermarks.items():
            assert low == 0, f"partition {p}: log start offset {low}, expected 0"
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        out: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
        done = {p for p, (_, high) in watermarks.items() if high == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            for msg in consumer.consume(10000, 0.5):
                if msg.error():
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        if msg.offset() >= watermarks[msg.partition()][1]:
                            done.add(msg.partition())
                        continue
                    raise KafkaException(msg.error())
                out[msg.partition()].append((msg.offset(), message_id(msg.value())))
        assert len(done) == PARTITIONS, f"not every partition read to its end within {timeout_s}s: {watermarks}"
        for p, (_, high) in watermarks.items():
            assert out[p] and out[p][-1][0] == high - 1 or high == 0, (
                f"partition {p}: read up to {out[p][-1:]} of {high}"
            )
        return out
    finally:
        consumer.close()


def check_consumed(consumed: dict[int, list[tuple[int, int]]], ledger: Ledger, seed: int) -> int:
    with ledger.lock:
        acked = dict(ledger.acked)
        sent = set(ledger.sent)
    where: dict[int, tuple[int, int]] = {}
    duplicates = []
    for partition, records in consumed.items():
        offsets = [offset for offset, _ in records]
        assert offsets == list(range(len(offsets))), (
            f"partition {partition}: offsets are not contiguous from 0 "
            f"(first gap after {next((a for a, b in pairwise(offsets) if b != a + 1), None)})"
        )
        for offset, msg_id in records:
            if msg_id in where:
                duplicates.append((msg_id, where[msg_id], (partition, offset), msg_id in acked))
            where[msg_id] = (partition, offset)
    assert not duplicates, (
        f"seed {seed}: {len(duplicates)} messages appear twice, (id, first, second, acknowledged): {duplicates[:10]}"
    )
    wrong = [(i, po, where.get(i)) for i, po in acked.items() if where.get(i) != po]
    assert not wrong, (
        f"seed {seed}: {len(wrong)} acknowledged messages missing or moved, (id, acked at, found at): {wrong[:10]}"
    )
    foreign = set(where) - sent
    assert not foreign, f"messages never sent: {sorted(foreign)[:10]}"
    return len(where)


# --------------------------------------------------------------------------- torn tails


def tear_tails(log_dir: Path, rng: random.Random) -> dict[str, int]:
    """While the broker is down: append half of a plausible next batch to
    partition 0's active segment and random garbage to partition 1's.
    Returns the bytes appended per partition directory."""
    appended = {}
    for p, pdir in enumerate(partition_dirs(log_dir)):
        logs = sorted(pdir.glob("*.log"), key=lambda x: int(x.stem))
        active = logs[-1]
        data = active.read_bytes()
        if p == 0:
            # A copy of the last whole batch (of any segment), renumbered as the
            # next batch with a valid CRC, cut in the middle: a torn write.
            source = data if data else logs[-2].read_bytes()
            last = None
            next_offset = int(active.stem)
            for pos, size, header in iter_batches(source, allow_truncated_tail=True):
                last = (pos, size)
                next_offset = max(next_offset, header.base_offset + header.last_offset_delta + 1)
            assert last is not None
            batch = bytearray(source[last[0] : last[0] + last[1]])
            patch_base_offset(batch, 0, next_offset)
            update_crc(batch, 0)
            tail = bytes(batch[: rng.randrange(len(batch) // 3, len(batch) - 1)])
        else:
            tail = bytes(rng.randrange(256) for _ in range(rng.randrange(30, 400)))
        with open(active, "ab") as f:
            f.write(tail)
        appended[pdir.name] = len(tail)
    return appended


def damage_indexes(log_dir: Path, rng: random.Random) -> list[Path]:
    """While the broker is down: delete both indexes of a random closed segment of
    partition 1 (to be rebuilt at start-up) and overwrite the start of partition
    0's active ``.index`` with garbage (the active segment is always recovered
    after a crash, its index reset). Returns the index files that must exist
    again, with entries that agree with their ``.log``, after the next restart."""
    damaged = []
    p1 = sorted((log_dir / f"{TOPIC}-1").glob("*.log"), key=lambda x: int(x.stem))
    if len(p1) > 1:
        victim = p1[rng.randrange(len(p1) - 1)]
        for suffix in (".index", ".timeindex"):
            victim.with_suffix(suffix).unlink()
            damaged.append(victim.with_suffix(suffix))
    p0 = sorted((log_dir / f"{TOPIC}-0").glob("*.log"), key=lambda x: int(x.stem))
    index = p0[-1].with_suffix(".index")
    with open(index, "r+b") as f:
        f.write(bytes(rng.randrange(1, 256) for _ in range(64)))
    damaged.append(index)
    return damaged


# --------------------------------------------------------------------------- the test


def test_kill9_rounds_keep_every_acknowledged_message(broker_factory, tmp_path):
    seed = int(os.environ.get("PYBROKER_CRASH_SEED", random.randrange(2**32)))
    print(f"\ncrash test seed: {seed} (PYBROKER_CRASH_SEED={seed} to replay), {ROUNDS} rounds")
    rng = random.Random(seed)
    data_dir = tmp_path / "crash-broker"
    log_dir = data_dir / "logs"
    ledger = Ledger()
    cache = SegmentCache()
    torn_round = ROUNDS // 2
    damage_round = min(torn_round + 3, ROUNDS - 1)
    damaged_indexes: list[Path] = []
    next_id = 0
    expected_cuts: dict[str, int] | None = None
    started = time.monotonic()

    for round_no in range(ROUNDS):
        # Not while damaged indexes await their check: a kill during start-up may come
        # before recovery rebuilt them, and only a completed start must have.
        if round_no > 0 and rng.random() < EARLY_KILL_CHANCE and expected_cuts is None and not damaged_indexes:
            # A kill while the broker is still starting (recovering) or has only just started.
            delay = rng.uniform(0.05, 0.8)
            early = kill_early(data_dir, delay)
            states = check_disk(log_dir, ledger, cache, strict=False, seed=seed)
            print(
                f"round {round_no:2d}: killed {delay:.2f}s after exec ({early}); log ends {[s.next_offset for s in states]}"
            )
        broker = broker_factory(OVERRIDES, data_dir=data_dir)
        assert not (log_dir / CLEAN_SHUTDOWN_MARKER).exists(), "the clean-shutdown marker exists while the broker runs"
        if round_no == 0:
            create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        if expected_cuts is not None:
            check_cuts(broker, expected_cuts, ledger, seed)
            expected_cuts = None

        producer = RoundProducer(broker.bootstrap, next_id, ledger, rng.randrange(2**32))
        producer.start()
        got_ack = wait_until(
            lambda p=producer: p.acked_this_round > 0 or p.error is not None or p.fatal is not None,
            FIRST_ACK_TIMEOUT_S,
        )
        assert producer.error is None, f"round {round_no}: producer failed: {producer.error!r}"
        assert producer.fatal is None, f"round {round_no}: fatal producer error: {producer.fatal}"
        assert got_ack, (
            f"round {round_no}: nothing acknowledged within {FIRST_ACK_TIMEOUT_S}s\n{broker.log_text()[-3000:]}"
        )
        time.sleep(rng.uniform(0.0, MAX_KILL_DELAY_S))
        assert broker.process.poll() is None, (
            f"round {round_no}: the broker died by itself:\n{broker.log_text()[-3000:]}"
        )
        broker.kill()
        assert broker.process.returncode == -signal.SIGKILL

        producer.stop_event.set()
        producer.join(30)
        assert not producer.is_alive(), f"round {round_no}: the producer thread did not finish"
        assert producer.error is None, f"round {round_no}: producer failed: {producer.error!r}"
        assert producer.fatal is None, f"round {round_no}: fatal producer error: {producer.fatal}"
        assert producer.left_in_queue == 0, f"round {round_no}: {producer.left_in_queue} messages left after the purge"
        next_id = producer.next_id

        # The files as the crash left them.
        assert not (log_dir / CLEAN_SHUTDOWN_MARKER).exists(), "a clean-shutdown marker after SIGKILL"
        states = check_disk(log_dir, ledger, cache, strict=False, seed=seed)
        if damaged_indexes:
            missing = [str(path) for path in damaged_indexes if not path.exists()]
            assert not missing, f"index files not rebuilt after a restart: {missing}"
            damaged_indexes = []  # check_disk verified their entries
        with ledger.lock:
            acked, failed, sent = len(ledger.acked), len(ledger.failed), len(ledger.sent)
        print(
            f"round {round_no:2d}: +{producer.acked_this_round:5d} acked this round; totals sent {sent} acked {acked} "
            f"not acked {failed}; log ends {[s.next_offset for s in states]}, segments {[s.segments for s in states]}, "
            f"torn tails {[s.torn_tail_bytes for s in states]} ({time.monotonic() - started:.0f}s)"
        )
        if round_no == torn_round:
            # Tails already torn by the kill itself would be cut too; keep the check exact.
            if all(s.torn_tail_bytes == 0 for s in states):
                expected_cuts = tear_tails(log_dir, rng)
                print(f"round {round_no:2d}: tore the tails by hand: {expected_cuts}")
            else:
                torn_round += 1
        elif round_no == damage_round:
            damaged_indexes = damage_indexes(log_dir, rng)
            print(f"round {round_no:2d}: damaged the indexes {[p.name for p in damaged_indexes]}")

    assert torn_round < ROUNDS, "the torn-tail round never ran"

    # A final incarnation: it must take writes normally, then stop cleanly.
    broker = broker_factory(OVERRIDES, data_dir=data_dir)
    if expected_cuts is not None:
        check_cuts(broker, expected_cuts, ledger, seed)
        expected_cuts = None
    final = RoundProducer(broker.bootstrap, next_id, ledger, rng.randrange(2**32), limit=FINAL_MESSAGES, drain=True)
    final.start()
    final.join(90)
    assert not final.is_alive(), "the final producer did not finish"
    assert final.error is None and final.fatal is None, f"final producer: {final.error!r} {final.fatal}"
    with ledger.lock:
        unresolved = ledger.sent - set(ledger.acked) - set(ledger.failed)
        final_failed = {i: e for i, e in ledger.failed.items() if i >= next_id}
    assert not unresolved, f"{len(unresolved)} messages without a delivery report"
    assert not final_failed, f"the final producer (no kill) got errors: {list(final_failed.items())[:10]}"

    consumed = consume_all(broker.bootstrap)
    total = check_consumed(consumed, ledger, seed)
    assert broker.stop() == 0, broker.log_text()[-3000:]
    assert (log_dir / CLEAN_SHUTDOWN_MARKER).exists(), "no clean-shutdown marker after SIGTERM"

    states = check_disk(log_dir, ledger, cache, strict=True, seed=seed)
    for p, state in enumerate(states):
        assert {i: o for o, i in consumed[p]} == state.ids, f"partition {p}: files and Fetch disagree"
    checkpoints = check_checkpoints(log_dir)
    for p, state in enumerate(states):
        assert checkpoints[RECOVERY_POINT_CHECKPOINT][(TOPIC, p)] == state.next_offset
        assert checkpoints[REPLICATION_OFFSET_CHECKPOINT][(TOPIC, p)] == state.next_offset
        assert checkpoints[LOG_START_OFFSET_CHECKPOINT][(TOPIC, p)] == 0
        read_every_offset(log_dir / f"{TOPIC}-{p}", state)

    with ledger.lock:
        acked, failed, sent = len(ledger.acked), len(ledger.failed), len(ledger.sent)
    print(
        f"crash test seed {seed}: {ROUNDS} kills, {sent} sent, {acked} acknowledged (all present once), "
        f"{failed} not acknowledged, of which {total - acked} were written anyway; "
        f"{sum(s.segments for s in states)} segments; {time.monotonic() - started:.0f}s"
    )


def kill_early(data_dir: Path, delay_s: float) -> str:
    """Start ``pybroker start`` on ``data_dir`` and SIGKILL it after ``delay_s``,
    whatever it is doing then; says whether it had announced itself."""
    cmd = [sys.executable, "-m", "broker", "start"]
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "advertised.listeners": "",
        "log.dirs": str(data_dir / "logs"),
        **OVERRIDES,
    }
    for key, value in overrides.items():
        cmd += ["--override", f"{key}={value}"]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PROJECT_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    with open(data_dir / "early-kill.out", "w+") as out:
        process = subprocess.Popen(cmd, cwd=data_dir, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            time.sleep(delay_s)
        finally:
            process.kill()
            process.wait(15)
        out.seek(0)
        text = out.read()
    if "pybroker started" in text:
        return "after start-up"
    return "during start-up"


def check_cuts(broker, expected_cuts: dict[str, int], ledger: Ledger, seed: int) -> None:
    """The tails torn by hand while the broker was down were cut, exactly, and
    everything acknowledged before is served."""
    text = broker.log_text()
    for name, count in expected_cuts.items():
        assert re.search(rf"{re.escape(name)}: cut {count} bytes of a torn or corrupt tail", text), (
            f"no report of cutting {count} bytes from {name}:\n{text[-3000:]}"
        )
    check_consumed(consume_all(broker.bootstrap), ledger, seed)


def read_every_offset(pdir: Path, state: DiskState) -> None:
    """Every offset is found through the (trusted, clean) indexes, then once more
    after a full recovery, which must find nothing to cut."""
    pool = FileHandlePool(16)
    config = LogConfig(segment_bytes=SEGMENT_BYTES, index_interval_bytes=1024)
    sizes = {p.name: p.stat().st_size for p in pdir.glob("*.log")}
    plog = PartitionLog(pdir, config, pool=pool, recovery_point=state.next_offset, clean_shutdown=True)
    try:
        assert plog.log_end_offset == state.next_offset
        by_offset = {o: i for i, o in state.ids.items()}
        offset = 0
        while offset < state.next_offset:
            data = plog.read(offset, 1)  # the one batch holding the offset
            batches = list(iter_batches(data))
            assert len(batches) == 1, f"{pdir.name}: read({offset}) returned {len(batches)} batches"
            _, _, header = batches[0]
            last = header.base_offset + header.last_offset_delta
            assert header.base_offset <= offset <= last, (
                f"{pdir.name}: read({offset}) returned {header.base_offset}..{last}"
            )
            records = decode_records(data)
            assert [r.offset for r in records] == list(range(header.base_offset, last + 1))
            for r in records:
                assert message_id(r.value) == by_offset[r.offset]
            # Every offset inside the batch must land on the same batch.
            for inner in range(offset + 1, last + 1):
                assert plog.read(inner, 1)[:12] == data[:12], f"{pdir.name}: read({inner}) missed its batch"
            offset = last + 1
    finally:
        plog.close()
        pool.close_all()
    pool = FileHandlePool(16)
    plog = PartitionLog(pdir, config, pool=pool, recovery_point=None, clean_shutdown=False)
    try:
        assert plog.log_end_offset == state.next_offset
        assert {p.name: p.stat().st_size for p in pdir.glob("*.log")} == sizes, "a full recovery changed clean files"
    finally:
        plog.close()
        pool.close_all()
    for path in pdir.glob("*.log"):
        check_indexes(path)
