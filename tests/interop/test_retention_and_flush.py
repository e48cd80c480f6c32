"""Retention, checkpoints, the clean-shutdown marker and flushing, through a real broker.

- Retention by time (``retention.ms``) and by size (``retention.bytes``)
  deletes whole closed segments; ListOffsets earliest (``beginning_offsets``)
  moves up to the first remaining segment and a consumer from the earliest
  offset starts there; the active segment is never deleted, however old or
  large it is. That is pybroker's rule, not Kafka's: Kafka's
  ``UnifiedLog.deleteSegments`` rolls a non-empty active segment that
  retention selects ("we must always have at least one segment") and deletes
  it, so an idle topic's data does expire there.
- The broker keys ``log.retention.ms`` / ``minutes`` / ``hours`` / ``bytes``
  supply the topic defaults (ms wins over minutes over hours).
- A clean shutdown leaves ``recovery-point-offset-checkpoint``,
  ``log-start-offset-checkpoint`` and ``replication-offset-checkpoint`` in
  Kafka's text format and the ``.kafka_cleanshutdown`` marker; the marker is
  gone while the broker runs and after a SIGKILL.
- The log start offset, moved by retention or by DeleteRecords, survives
  restarts (clean and killed) and the one in the checkpoint is honoured.
- Durable mode (``log.flush.interval.messages=1``) and flushing by time
  (``log.flush.interval.ms``) move the recovery point while the broker runs.

Records are written with raw Produce requests of one batch each, so segment
sizes, and thus which segments exist, are exact.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.records import build_batch
from storage.checkpoint import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    write_offsets,
)
from tests.conftest import wait_until
from tests.interop._support import (
    Msg,
    consume,
    create_topic,
    fetch_partition,
    list_offset,
    produce,
    produce_raw,
    unique_topic,
)

EARLIEST = -2
LATEST = -1
CHECK_MS = 200  # log.retention.check.interval.ms of these brokers
SEGMENT_BYTES = 1024
RECORDS = 40
VALUE_BYTES = 100
HOUR_MS = 3_600_000
CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT)


def now_ms() -> int:
    return int(time.time() * 1000)


def log_dir_of(broker) -> Path:
    return broker.data_dir / "logs"


def produce_records(
    bootstrap: str, topic: str, count: int, *, timestamp_ms: int, partition: int = 0, first: int = 0
) -> list[int]:
    """``count`` one-record batches (so every segment holds whole, equal batches); returns their offsets."""
    offsets = []
    for i in range(first, first + count):
        batch = build_batch([(b"k%d" % i, (b"v%05d-" % i).ljust(VALUE_BYTES, b"x"), [], timestamp_ms)])
        response = produce_raw(bootstrap, topic, batch, partition)
        assert response.error_code == 0, f"produce {i}: error {response.error_code} {response.error_message}"
        offsets.append(response.base_offset)
    return offsets


def segments(broker, topic: str, partition: int = 0) -> list[tuple[int, int]]:
    """(base offset, size) of each ``.log`` file of a partition, oldest first
    (a file that retention deletes while we look is left out)."""
    pdir = log_dir_of(broker) / f"{topic}-{partition}"
    found = []
    for path in pdir.glob("*.log"):
        if not path.stem.isdigit():
            continue
        try:
            found.append((int(path.stem), path.stat().st_size))
        except FileNotFoundError:
            continue
    return sorted(found)


def earliest(broker, topic: str, partition: int = 0) -> int:
    response = list_offset(broker.bootstrap, topic, partition, EARLIEST)
    assert response.error_code == 0
    return response.offset


def latest(broker, topic: str, partition: int = 0) -> int:
    response = list_offset(broker.bootstrap, topic, partition, LATEST)
    assert response.error_code == 0
    return response.offset


def consumed_offsets(broker, topic: str, expected: int, *, client: str, start_offset: int) -> list[int]:
    got = consume(client, broker.bootstrap, topic, expected, start_offset=start_offset, timeout_s=20, settle_s=0.3)
    return [g.offset for g in got]


def check_served_from(broker, topic: str, start: int, end: int) -> None:
    """The log serves exactly [start, end): earliest/latest offsets, consumers
    from the beginning (confluent: OFFSET_BEGINNING; kafka-python: offset 0,
    reset to the earliest as it is out of range) and a raw Fetch below the start."""
    assert earliest(broker, topic) == start
    assert latest(broker, topic) == end
    expected = list(range(start, end))
    assert consumed_offsets(broker, topic, len(expected), client="confluent", start_offset=EARLIEST) == expected
    assert consumed_offsets(broker, topic, len(expected), client="kafka-python", start_offset=0) == expected
    if start > 0:
        data = fetch_partition(broker.bootstrap, topic, 0, start - 1)
        assert data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert data.log_start_offset == start


def parse_checkpoint_strictly(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's format: version 0, the entry count, then ``topic partition offset`` lines."""
    text = path.read_text()
    assert text.endswith("\n"), f"{path.name}: no final newline"
    lines = text.split("\n")[:-1]
    assert lines[0] == "0", f"{path.name}: version line {lines[0]!r}"
    assert lines[1].isdigit() and int(lines[1]) == len(lines) - 2, (
        f"{path.name}: count {lines[1]!r} for {len(lines) - 2} entries"
    )
    entries = {}
    for line in lines[2:]:
        match = re.fullmatch(r"(\S+) (\d+) (\d+)", line)
        assert match, f"{path.name}: malformed entry {line!r}"
        entries[(match.group(1), int(match.group(2)))] = int(match.group(3))
    return entries


def retention_broker(broker_factory, extra: dict[str, str] | None = None, **kwargs):
    return broker_factory({"log.retention.check.interval.ms": str(CHECK_MS), **(extra or {})}, **kwargs)


# --------------------------------------------------------------------------- retention by time


def test_retention_by_time_deletes_closed_segments_and_moves_the_log_start(broker_factory):
    broker = retention_broker(broker_factory)
    topic = unique_topic("ret-time")
    create_topic(broker.bootstrap, topic, configs={"retention.ms": "1000", "segment.bytes": str(SEGMENT_BYTES)})
    # Timestamps a little ahead of the clock: nothing can expire before we looked.
    offsets = produce_records(broker.bootstrap, topic, RECORDS, timestamp_ms=now_ms() + 1500)
    assert offsets == list(range(RECORDS))
    before = segments(broker, topic)
    assert len(before) >= 5, f"segment.bytes={SEGMENT_BYTES} should have rolled: {before}"
    assert earliest(broker, topic) == 0

    # Every closed segment expires ~2.5 s from now; the active one stays.
    assert wait_until(lambda: len(segments(broker, topic)) == 1, timeout_s=15), segments(broker, topic)
    active_base = before[-1][0]
    assert segments(broker, topic) == [before[-1]], "the active segment changed or went"
    assert wait_until(lambda: earliest(broker, topic) == active_base, timeout_s=5)
    check_served_from(broker, topic, active_base, RECORDS)

    # Long after everything expired the active segment is still there and takes appends.
    time.sleep(5 * CHECK_MS / 1000)
    assert segments(broker, topic) == [before[-1]]
    assert produce_records(broker.bootstrap, topic, 1, timestamp_ms=now_ms(), first=RECORDS) == [RECORDS]
    # That append did not fit: it rolled the segment, so the expired one is closed now and goes.
    bases = lambda: [base for base, _ in segments(broker, topic)]
    assert wait_until(lambda: bases() == [RECORDS], timeout_s=5), segments(broker, topic)
    assert wait_until(lambda: earliest(broker, topic) == RECORDS, timeout_s=5)
    check_served_from(broker, topic, RECORDS, RECORDS + 1)


def test_retention_by_time_keeps_segments_with_recent_records(broker_factory):
    """Segments are judged by their newest record: old records sharing a segment
    with a recent one stay; segments of only old records go."""
    broker = retention_broker(broker_factory)
    topic = unique_topic("ret-mixed")
    create_topic(broker.bootstrap, topic, configs={"retention.ms": str(HOUR_MS), "segment.bytes": str(SEGMENT_BYTES)})
    old = 23  # not a multiple of the records per segment: one segment holds old and new
    produce_records(broker.bootstrap, topic, old, timestamp_ms=now_ms() - 2 * HOUR_MS)
    produce_records(broker.bootstrap, topic, RECORDS - old, timestamp_ms=now_ms(), first=old)
    before = segments(broker, topic)
    bases = [base for base, _ in before]
    # The first segment holding a recent record: the one holding offset `old`.
    keep_from = max(b for b in bases if b <= old)
    assert 0 < keep_from < old, f"the layout should mix old and new in one segment: {before}"
    assert wait_until(lambda: earliest(broker, topic) == keep_from, timeout_s=10), (earliest(broker, topic), before)
    time.sleep(3 * CHECK_MS / 1000)
    assert segments(broker, topic) == [s for s in before if s[0] >= keep_from]
    check_served_from(broker, topic, keep_from, RECORDS)


# --------------------------------------------------------------------------- retention by size


def check_size_retention(broker, topic: str, retention_bytes: int, before: list[tuple[int, int]]) -> int:
    """Kafka's rule: the oldest segment goes while the log without it still holds
    retention.bytes. So what is left holds at least retention.bytes, and would not
    without its oldest segment. Returns the new log start."""

    def settled():
        now = segments(broker, topic)
        total = sum(size for _, size in now)
        # The retention pass may already have run before ``before`` was taken.
        return now[0][0] > 0 and len(now) <= len(before) and (len(now) == 1 or total - now[0][1] < retention_bytes)

    assert wait_until(settled, timeout_s=10), (segments(broker, topic), before)
    time.sleep(3 * CHECK_MS / 1000)  # and it stays so
    after = segments(broker, topic)
    total = sum(size for _, size in after)
    assert total >= retention_bytes, f"deleted too much: {after} for retention.bytes={retention_bytes}"
    assert total - after[0][1] < retention_bytes, f"not deleted enough: {after}"
    assert after == before[len(before) - len(after) :], "only the oldest segments may go"
    assert wait_until(lambda: earliest(broker, topic) == after[0][0], timeout_s=5)
    return after[0][0]


def test_retention_by_size(broker_factory):
    broker = retention_broker(broker_factory)
    topic = unique_topic("ret-size")
    retention_bytes = 2500
    create_topic(
        broker.bootstrap, topic, configs={"retention.bytes": str(retention_bytes), "segment.bytes": str(SEGMENT_BYTES)}
    )
    produce_records(broker.bootstrap, topic, RECORDS, timestamp_ms=now_ms())
    before = segments(broker, topic)  # retention may already have run while we produced
    start = check_size_retention(broker, topic, retention_bytes, before)
    assert start > 0
    check_served_from(broker, topic, start, RECORDS)


def test_the_active_segment_is_never_deleted(broker_factory):
    """One big segment, expired by time and over the size limit, stays."""
    broker = retention_broker(broker_factory)
    topic = unique_topic("ret-active")
    create_topic(broker.bootstrap, topic, configs={"retention.ms": "1", "retention.bytes": "1"})
    produce_records(broker.bootstrap, topic, 10, timestamp_ms=now_ms() - HOUR_MS)
    before = segments(broker, topic)
    assert len(before) == 1
    time.sleep(6 * CHECK_MS / 1000)
    assert segments(broker, topic) == before
    check_served_from(broker, topic, 0, 10)


# --------------------------------------------------------------------------- broker defaults


@pytest.mark.parametrize(
    "broker_keys, age_ms, deleted",
    [
        ({"log.retention.ms": "1000"}, -1500, True),  # records 1.5 s in the future: they expire during the test
        ({"log.retention.minutes": "30"}, HOUR_MS, True),
        ({"log.retention.hours": "1"}, 2 * HOUR_MS, True),
        ({"log.retention.hours": "1", "log.retention.ms": str(3 * HOUR_MS)}, 2 * HOUR_MS, False),  # ms wins
        ({"log.retention.hours": "1", "log.retention.minutes": "180"}, 2 * HOUR_MS, False),  # minutes win
        ({"log.retention.ms": "-1", "log.retention.hours": "1"}, 2 * HOUR_MS, False),  # -1: forever
    ],
    ids=["ms", "minutes", "hours", "ms-over-hours", "minutes-over-hours", "ms-unlimited"],
)
def test_broker_retention_time_keys_are_the_topic_default(broker_factory, broker_keys, age_ms, deleted):
    broker = retention_broker(broker_factory, {"log.segment.bytes": str(SEGMENT_BYTES), **broker_keys})
    topic = unique_topic("ret-default")
    create_topic(broker.bootstrap, topic)  # no topic configs: the broker's keys decide
    produce_records(broker.bootstrap, topic, RECORDS, timestamp_ms=now_ms() - age_ms)
    if deleted:
        # Retention may already be deleting while we produce, so only the end state is checked:
        # the active segment alone remains, and it does not start at offset 0.
        assert wait_until(lambda: len(segments(broker, topic)) == 1, timeout_s=15), segments(broker, topic)
        (active_base, _), = segments(broker, topic)
        assert active_base > 0
        check_served_from(broker, topic, active_base, RECORDS)
    else:
        before = segments(broker, topic)
        assert len(before) >= 5
        time.sleep(6 * CHECK_MS / 1000)
        assert segments(broker, topic) == before
        check_served_from(broker, topic, 0, RECORDS)


def test_broker_retention_bytes_key_is_the_topic_default(broker_factory):
    retention_bytes = 2500
    broker = retention_broker(
        broker_factory, {"log.segment.bytes": str(SEGMENT_BYTES), "log.retention.bytes": str(retention_bytes)}
    )
    topic = unique_topic("ret-default-size")
    other = unique_topic("ret-override-size")
    create_topic(broker.bootstrap, topic)
    create_topic(broker.bootstrap, other, configs={"retention.bytes": "-1"})  # a topic override wins
    produce_records(broker.bootstrap, topic, RECORDS, timestamp_ms=now_ms())
    produce_records(broker.bootstrap, other, RECORDS, timestamp_ms=now_ms())
    before = segments(broker, topic)
    start = check_size_retention(broker, topic, retention_bytes, before)
    check_served_from(broker, topic, start, RECORDS)
    assert earliest(broker, other) == 0
    kept = segments(broker, other)
    assert kept[0][0] == 0 and sum(size for _, size in kept) > 2 * retention_bytes, "the override kept everything"


# --------------------------------------------------------------------------- checkpoints and the marker


def test_checkpoints_and_clean_shutdown_marker(broker_factory, tmp_path):
    data_dir = tmp_path / "cp"
    broker = broker_factory(data_dir=data_dir)
    log_dir = log_dir_of(broker)
    marker = log_dir / CLEAN_SHUTDOWN_MARKER
    assert not marker.exists(), "the marker exists while the broker runs (first start)"
    topic = unique_topic("cp")
    create_topic(broker.bootstrap, topic, partitions=3)
    for partition, count in ((0, 7), (1, 3)):
        produce_records(broker.bootstrap, topic, count, timestamp_ms=now_ms(), partition=partition)

    assert broker.stop() == 0
    assert marker.exists(), "no clean-shutdown marker after SIGTERM"
    assert marker.stat().st_size == 0
    tables = {name: parse_checkpoint_strictly(log_dir / name) for name in CHECKPOINTS}
    expected_end = {0: 7, 1: 3, 2: 0}
    for partition, end in expected_end.items():
        key = (topic, partition)
        assert tables[RECOVERY_POINT_CHECKPOINT][key] == end
        assert tables[REPLICATION_OFFSET_CHECKPOINT][key] == end
        assert tables[LOG_START_OFFSET_CHECKPOINT][key] == 0
    assert not list(log_dir.glob("*.tmp")), "temporary checkpoint files left behind"

    # Running again: the marker goes at once (a crash from now on must look unclean).
    broker = broker_factory(data_dir=data_dir)
    assert not marker.exists(), "the marker exists while the broker runs"
    assert latest(broker, topic, 0) == 7 and latest(broker, topic, 1) == 3
    produce_records(broker.bootstrap, topic, 2, timestamp_ms=now_ms(), partition=2)
    broker.kill()
    assert not marker.exists(), "a clean-shutdown marker after SIGKILL"

    # After the kill the data is recovered and served, and a clean stop writes
    # the checkpoints again.
    broker = broker_factory(data_dir=data_dir)
    assert [latest(broker, topic, p) for p in range(3)] == [7, 3, 2]
    assert broker.stop() == 0
    assert marker.exists()
    assert parse_checkpoint_strictly(log_dir / RECOVERY_POINT_CHECKPOINT)[(topic, 2)] == 2


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["clean", "killed"])
def test_log_start_offset_survives_a_restart(broker_factory, tmp_path, stop_signal):
    data_dir = tmp_path / "lso"
    retention_bytes = 2500
    overrides = {"log.flush.offset.checkpoint.interval.ms": "200"}
    broker = retention_broker(broker_factory, overrides, data_dir=data_dir)
    topic = unique_topic("lso")
    create_topic(
        broker.bootstrap, topic, configs={"retention.bytes": str(retention_bytes), "segment.bytes": str(SEGMENT_BYTES)}
    )
    produce_records(broker.bootstrap, topic, RECORDS, timestamp_ms=now_ms())
    start = check_size_retention(broker, topic, retention_bytes, segments(broker, topic))
    assert start > 0
    # Let the checkpoint writer catch up before a kill.
    checkpoint = log_dir_of(broker) / LOG_START_OFFSET_CHECKPOINT
    assert wait_until(
        lambda: checkpoint.exists() and parse_checkpoint_strictly(checkpoint).get((topic, 0)) == start, timeout_s=5
    )
    broker.stop(stop_signal)

    broker = retention_broker(broker_factory, overrides, data_dir=data_dir)
    check_served_from(broker, topic, start, RECORDS)
    assert produce_records(broker.bootstrap, topic, 1, timestamp_ms=now_ms(), first=RECORDS) == [RECORDS]
    check_served_from(broker, topic, start, RECORDS + 1)


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["clean", "killed"])
def test_deleted_records_stay_deleted_after_a_restart(broker_factory, tmp_path, stop_signal):
    """DeleteRecords (confluent-kafka's AdminClient) moves the log start inside a
    segment; the restarted broker, clean or killed right after, keeps it."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    data_dir = tmp_path / "delete-records"
    broker = broker_factory(data_dir=data_dir)
    topic = unique_topic("delrec")
    create_topic(broker.bootstrap, topic)
    produce_records(broker.bootstrap, topic, 10, timestamp_ms=now_ms())
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 4)])
    (future,) = futures.values()
    assert future.result(timeout=20).low_watermark == 4
    check_served_from(broker, topic, 4, 10)
    assert len(segments(broker, topic)) == 1, "the start must lie inside the (only) segment"
    broker.stop(stop_signal)

    broker = broker_factory(data_dir=data_dir)
    check_served_from(broker, topic, 4, 10)
    assert produce_records(broker.bootstrap, topic, 1, timestamp_ms=now_ms(), first=10) == [10]
    check_served_from(broker, topic, 4, 11)


def test_log_start_offset_from_the_checkpoint_is_honoured(broker_factory, tmp_path):
    """A log start inside the first segment (as DeleteRecords leaves it) comes
    back from log-start-offset-checkpoint."""
    data_dir = tmp_path / "lso-cp"
    broker = broker_factory(data_dir=data_dir)
    topic = unique_topic("lso-cp")
    create_topic(broker.bootstrap, topic)
    produce_records(broker.bootstrap, topic, 10, timestamp_ms=now_ms())
    assert broker.stop() == 0
    log_dir = log_dir_of(broker)
    table = parse_checkpoint_strictly(log_dir / LOG_START_OFFSET_CHECKPOINT)
    assert table[(topic, 0)] == 0
    table[(topic, 0)] = 4
    write_offsets(log_dir / LOG_START_OFFSET_CHECKPOINT, table)

    broker = broker_factory(data_dir=data_dir)
    check_served_from(broker, topic, 4, 10)
    assert broker.stop() == 0
    assert parse_checkpoint_strictly(log_dir / LOG_START_OFFSET_CHECKPOINT)[(topic, 0)] == 4


# --------------------------------------------------------------------------- flushing


def recovery_point(broker, topic: str, partition: int = 0) -> int | None:
    path = log_dir_of(broker) / RECOVERY_POINT_CHECKPOINT
    if not path.exists():
        return None
    return parse_checkpoint_strictly(path).get((topic, partition))


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_durable_mode_produces_consumes_and_moves_the_recovery_point(broker_factory, client):
    broker = broker_factory({"log.flush.interval.messages": "1", "log.flush.offset.checkpoint.interval.ms": "200"})
    topic = unique_topic("durable")
    create_topic(broker.bootstrap, topic)
    msgs = [Msg(b"k%d" % i, b"durable-%d" % i) for i in range(300)]
    offsets = produce(
        client, broker.bootstrap, topic, msgs, extra={"linger.ms": 1} if client == "confluent" else {"linger_ms": 1}
    )
    assert offsets == list(range(300))
    got = consume(client, broker.bootstrap, topic, 300, timeout_s=20, settle_s=0.3)
    assert [(g.offset, g.value) for g in got] == [(i, b"durable-%d" % i) for i in range(300)]
    # Every append was fsynced: the recovery point written while running is the log end.
    assert wait_until(lambda: recovery_point(broker, topic) == 300, timeout_s=5), recovery_point(broker, topic)


def test_without_durable_mode_the_recovery_point_stays_until_shutdown(broker_factory):
    """The contrast to the test above: Kafka's defaults never fsync while running."""
    broker = broker_factory({"log.flush.offset.checkpoint.interval.ms": "200"})
    topic = unique_topic("lazy")
    create_topic(broker.bootstrap, topic)
    produce_records(broker.bootstrap, topic, 20, timestamp_ms=now_ms())
    assert wait_until(lambda: recovery_point(broker, topic) is not None, timeout_s=5)
    time.sleep(0.6)
    assert recovery_point(broker, topic) == 0
    assert broker.stop() == 0
    assert recovery_point(broker, topic) == 20


def test_flush_by_time_moves_the_recovery_point(broker_factory):
    broker = broker_factory(
        {
            "log.flush.interval.ms": "300",
            "log.flush.scheduler.interval.ms": "100",
            "log.flush.offset.checkpoint.interval.ms": "200",
        }
    )
    topic = unique_topic("flush-ms")
    create_topic(broker.bootstrap, topic)
    produce_records(broker.bootstrap, topic, 20, timestamp_ms=now_ms())
    assert wait_until(lambda: recovery_point(broker, topic) == 20, timeout_s=5), recovery_point(broker, topic)
    produce_records(broker.bootstrap, topic, 5, timestamp_ms=now_ms(), first=20)
    assert wait_until(lambda: recovery_point(broker, topic) == 25, timeout_s=5), recovery_point(broker, topic)
