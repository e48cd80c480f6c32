"""Producer state snapshots (storage/producer_snapshot.py) and their use by PartitionLog.

Covers the file format byte by byte (against a hand-built file and
kafka-python's independent CRC32C), corrupt and truncated snapshots, opening
after a clean shutdown without reading batches, opening after a crash from a
snapshot plus the tail, deduplication of a batch in an older segment after a
reopen, the snapshots truncation and retention delete, producer id expiry,
and a hypothesis state machine that checks the producer state against a
model through appends, rolls, reopens, truncations and DeleteRecords.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from collections import deque
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kafka.record.util import calc_crc32c

from protocol.errors import ErrorCode
from protocol.records import build_batch
from storage.dump import DumpOptions, DumpStats, dump_file
from storage.log import AppendError, LogConfig, PartitionLog
from storage.manager import LogManager
from storage.producer_snapshot import (
    ENTRY_BYTES,
    HEADER_BYTES,
    CorruptSnapshotError,
    decode_snapshot,
    encode_snapshot,
    snapshot_file_name,
    snapshot_offset,
    write_snapshot,
)
from storage.producer_state import INT32_MAX, BatchMetadata, ProducerEntry
from storage.segment import LogSegment

T0 = 1_700_000_000_000
SMALL_SEGMENTS = LogConfig(segment_bytes=600, index_interval_bytes=64)


class Clock:
    def __init__(self, now_ms: int = T0):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def idempotent_batch(pid: int, seq: int, count: int = 2, *, epoch: int = 0, ts: int = T0, size: int = 60) -> bytes:
    return build_batch(
        [(b"k", b"v" * size, [], ts + i) for i in range(count)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def plain_batch(count: int = 2, ts: int = T0, size: int = 60) -> bytes:
    return build_batch([(b"k", b"p" * size, [], ts + i) for i in range(count)])


def snapshots(directory: Path) -> list[int]:
    return sorted(o for o in (snapshot_offset(p.name) for p in directory.iterdir()) if o is not None)


def entry(pid, epoch, first_seq, last_seq, first_offset, last_offset, ts):
    batches = deque([BatchMetadata(first_seq, last_seq, first_offset, last_offset, ts)], maxlen=5)
    return ProducerEntry(pid, epoch, batches, ts)


def last_batches(plog: PartitionLog) -> dict[int, tuple]:
    """Each producer's epoch and last batch: what a snapshot keeps."""
    return {
        pid: (e.epoch, e.batches[-1] if e.batches else None, e.last_timestamp_ms)
        for pid, e in plog.producer_state.producers.items()
    }


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "idem-0"


def reopen(plog: PartitionLog, *, clean: bool, recovery_point=None, config=SMALL_SEGMENTS, **kwargs) -> PartitionLog:
    """Close the log (clean) or abandon it as a killed process would, and open it again."""
    start = plog.log_start_offset
    if clean:
        plog.close()
        recovery_point = plog.log_end_offset
    else:
        plog.flush(fsync=False)  # the page cache survives a killed process; nothing else is done
    return PartitionLog(
        plog.directory,
        config,
        recovery_point=recovery_point,
        log_start_offset=start,
        clean_shutdown=clean,
        **kwargs,
    )


# --------------------------------------------------------------------------- the file format


def test_round_trip_keeps_each_producers_last_batch():
    producers = {
        9: entry(9, 3, 10, 14, 100, 104, T0 + 5),
        2: entry(2, 0, 0, 0, 7, 7, T0),
        # A batch whose sequences wrap after INT32_MAX: 2 records before the wrap, 3 after.
        5: entry(5, 1, INT32_MAX - 1, 2, 200, 204, T0 + 9),
        6: ProducerEntry(6, 4, deque(maxlen=5), -1),  # an epoch known, no batch
    }
    producers[2].batches.appendleft(BatchMetadata(0, 0, 1, 1, T0))  # older batches are not kept
    data = encode_snapshot(producers)
    assert len(data) == HEADER_BYTES + 4 * ENTRY_BYTES
    decoded = {e.producer_id: e for e in decode_snapshot(data)}
    assert list(decoded) == [2, 5, 6, 9], "entries are written by producer id"
    for pid, original in producers.items():
        got = decoded[pid]
        assert (got.epoch, got.last_timestamp_ms, got.last_sequence) == (original.epoch, original.last_timestamp_ms, original.last_sequence)
        assert list(got.batches) == list(original.batches)[-1:]
    assert decoded[5].batches[0].first_sequence == INT32_MAX - 1


def test_byte_layout_is_kafkas_version_1():
    producers = {0x0102030405060708: entry(0x0102030405060708, 0x0A0B, 5, 7, 0x1122334455, 0x1122334457, 0x0000018BCFE56800)}
    body = bytes.fromhex(
        "00000001"  # entry count
        "0102030405060708"  # producer id
        "0a0b"  # producer epoch
        "00000007"  # last sequence
        "0000001122334457"  # last offset
        "00000002"  # offset delta: last offset - first offset
        "0000018bcfe56800"  # timestamp
        "ffffffff"  # coordinator epoch: none
        "ffffffffffffffff"  # current transaction's first offset: none
    )
    # CRC32C of everything after the CRC field, computed by kafka-python's own CRC32C.
    expected = bytes.fromhex("0001") + struct.pack(">I", calc_crc32c(body)) + body
    assert encode_snapshot(producers) == expected
    assert len(expected) == 10 + 46
    assert encode_snapshot({}) == bytes.fromhex("0001") + struct.pack(">I", calc_crc32c(b"\0\0\0\0")) + b"\0\0\0\0"


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[:-1],  # truncated inside an entry
        lambda d: d[:7],  # truncated inside the header
        lambda d: b"",
        lambda d: d + b"\0",  # a trailing byte
        lambda d: d[:20] + bytes([d[20] ^ 1]) + d[21:],  # a flipped bit: CRC mismatch
        lambda d: b"\0\2" + d[2:],  # an unknown version
        lambda d: d[:6] + struct.pack(">i", -1) + d[10:],  # a negative count
    ],
)
def test_damaged_snapshot_bytes_are_refused(damage):
    data = encode_snapshot({1: entry(1, 0, 0, 1, 0, 1, T0), 2: entry(2, 0, 0, 0, 2, 2, T0)})
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(damage(data))


def test_file_names():
    assert snapshot_file_name(1234) == "00000000000000001234.snapshot"
    assert snapshot_offset("00000000000000001234.snapshot") == 1234
    assert snapshot_offset("00000000000000001234.snapshot.tmp") is None
    assert snapshot_offset("00000000000000001234.log") is None


def test_dump_log_prints_a_snapshot(tmp_path):
    write_snapshot(tmp_path, 42, {3: entry(3, 1, 4, 6, 30, 32, T0)})
    stats = DumpStats()
    lines = list(dump_file(tmp_path / snapshot_file_name(42), DumpOptions(verify=True, deep=True), stats))
    assert lines[1] == (
        f"producerId: 3 producerEpoch: 1 coordinatorEpoch: -1 currentTxnFirstOffset: -1 lastTimestamp: {T0} "
        f"firstSequence: 4 lastSequence: 6 lastOffset: 32 offsetDelta: 2 timestamp: {T0}"
    )
    assert lines[-1].endswith("1 producers, no problems") and stats.exit_code == 0
    path = tmp_path / snapshot_file_name(42)
    path.write_bytes(path.read_bytes()[:-3])
    assert any(line.startswith("Corrupt ") for line in dump_file(path, DumpOptions(verify=True), stats))
    assert stats.exit_code == 1


# --------------------------------------------------------------------------- writing and loading


def fill(plog: PartitionLog, rounds: int, pids=(1, 2, 3), seqs=None) -> dict[int, int]:
    """Batches of several producers and some non-idempotent ones, over several segments."""
    seqs = {pid: 0 for pid in pids} if seqs is None else seqs
    for r in range(rounds):
        for pid in pids:
            plog.append(idempotent_batch(pid, seqs[pid], count=1 + (r + pid) % 3, ts=T0 + r))
            seqs[pid] += 1 + (r + pid) % 3
        if r % 3 == 0:
            plog.append(plain_batch(ts=T0 + r))
    return seqs


def test_a_roll_writes_a_snapshot_at_the_new_base_and_close_one_at_the_end(log_dir):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    fill(plog, 6)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) > 3
    assert snapshots(log_dir) == bases[1:]
    # Each roll snapshot holds exactly the state of the batches below it.
    for base in bases[1:]:
        state = {e.producer_id: e for e in decode_snapshot((log_dir / snapshot_file_name(base)).read_bytes())}
        for e in state.values():
            assert e.batches[-1].last_offset < base
    end = plog.log_end_offset
    expected = last_batches(plog)
    plog.close()
    assert snapshots(log_dir) == [*bases[1:], end]
    loaded = {e.producer_id: e for e in decode_snapshot((log_dir / snapshot_file_name(end)).read_bytes())}
    assert {pid: (e.epoch, e.batches[-1], e.last_timestamp_ms) for pid, e in loaded.items()} == expected


def test_open_after_a_clean_shutdown_reads_no_batch_of_older_segments(log_dir, monkeypatch):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    fill(plog, 8)
    expected = last_batches(plog)
    plog.close()
    active_base = plog.segments[-1].base_offset
    headers_read = []
    original = LogSegment._read_at

    def counting(self, position, length):
        headers_read.append((self.base_offset, position))
        return original(self, position, length)

    monkeypatch.setattr(LogSegment, "_read_at", counting)
    replays = []
    monkeypatch.setattr(PartitionLog, "_replay_producers", lambda self, start, end: replays.append((start, end)))
    reopened = PartitionLog(log_dir, SMALL_SEGMENTS, recovery_point=plog.log_end_offset, clean_shutdown=True)
    assert replays == [], "the producer state came from the snapshot at the log end"
    assert {base for base, _ in headers_read} <= {active_base}, "only the active segment's tail is read (for its end)"
    assert last_batches(reopened) == expected
    reopened.close()


def test_open_after_a_clean_shutdown_takes_the_state_from_the_snapshot(log_dir):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    fill(plog, 4)
    plog.close()
    end = plog.log_end_offset
    # A producer that appears in no batch: only the snapshot can bring it back.
    producers = dict(plog.producer_state.producers)
    producers[77] = entry(77, 2, 40, 41, end - 2, end - 1, T0 + 99)
    write_snapshot(log_dir, end, producers)
    reopened = PartitionLog(log_dir, SMALL_SEGMENTS, recovery_point=end, clean_shutdown=True)
    assert reopened.producer_state.producers[77].epoch == 2
    assert reopened.append(idempotent_batch(77, 40, epoch=2)).duplicate
    reopened.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_corrupt_snapshot_is_deleted_and_an_older_one_used(log_dir, damage, caplog):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    fill(plog, 8)
    expected = last_batches(plog)
    plog.close()
    end = plog.log_end_offset
    newest = log_dir / snapshot_file_name(end)
    data = newest.read_bytes()
    newest.write_bytes({"flip": data[:12] + bytes([data[12] ^ 0x40]) + data[13:], "truncate": data[:-5], "empty": b""}[damage])
    older = snapshots(log_dir)[-2]
    reopened = PartitionLog(log_dir, SMALL_SEGMENTS, recovery_point=end, clean_shutdown=True)
    assert "ignoring producer snapshot" in caplog.text
    assert last_batches(reopened) == expected, f"rebuilt from the snapshot at {older} and the batches after it"
    # The replay ended with a fresh snapshot at the log end, so the next open is fast again.
    assert decode_snapshot(newest.read_bytes())
    reopened.close()


def test_without_any_valid_snapshot_the_whole_log_is_replayed(log_dir):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    fill(plog, 8)
    expected = last_batches(plog)
    plog.close()
    for offset in snapshots(log_dir):
        (log_dir / snapshot_file_name(offset)).write_bytes(b"garbage")
    reopened = PartitionLog(log_dir, SMALL_SEGMENTS, recovery_point=plog.log_end_offset, clean_shutdown=True)
    assert last_batches(reopened) == expected
    reopened.close()


@pytest.mark.parametrize("recovery_point", ["none", "checkpointed", "end"])
def test_open_after_a_crash_rebuilds_from_snapshot_and_tail(log_dir, recovery_point):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    seqs = fill(plog, 5)
    checkpointed = plog.log_end_offset
    fill(plog, 4, seqs=seqs)  # more batches and rolls after the "checkpoint"
    expected = last_batches(plog)
    assert len(plog.segments) > 3
    point = {"none": None, "checkpointed": checkpointed, "end": plog.log_end_offset}[recovery_point]
    crashed = reopen(plog, clean=False, recovery_point=point)
    assert crashed.log_end_offset == plog.log_end_offset
    assert last_batches(crashed) == expected
    # Every producer continues where it was.
    for pid, seq in seqs.items():
        assert not crashed.append(idempotent_batch(pid, seq)).duplicate
    crashed.close()


def test_a_crash_uses_no_snapshot_above_the_recovery_point(log_dir):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    fill(plog, 8)
    expected = last_batches(plog)
    bases = [s.base_offset for s in plog.segments]
    # A bogus snapshot above the recovery point must not be loaded.
    write_snapshot(log_dir, bases[-1] + 1, {99: entry(99, 0, 0, 0, 0, 0, T0)})
    crashed = reopen(plog, clean=False, recovery_point=bases[-1])
    assert 99 not in crashed.producer_state.producers
    assert last_batches(crashed) == expected
    crashed.close()


def test_a_torn_tail_after_a_crash_takes_its_batch_out_of_the_state(log_dir):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    seqs = fill(plog, 6)
    before = last_batches(plog)
    plog.append(idempotent_batch(1, seqs[1]))
    plog.flush(fsync=False)
    active = plog.segments[-1].log_path
    active.write_bytes(active.read_bytes()[:-10])  # the last batch is torn
    crashed = reopen(plog, clean=False, recovery_point=plog.segments[-1].base_offset)
    assert last_batches(crashed) == before
    assert not crashed.append(idempotent_batch(1, seqs[1])).duplicate, "the torn batch is appended again"
    crashed.close()


@pytest.mark.parametrize("clean", [True, False])
def test_a_retry_of_a_batch_in_an_older_segment_is_a_duplicate_after_reopen(log_dir, clean):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    first = plog.append(idempotent_batch(5, 0, count=3))
    for i in range(12):  # another producer fills several segments
        plog.append(idempotent_batch(6, 2 * i, epoch=1))
    assert plog._segment_for(first.base_offset) < len(plog.segments) - 2, "the batch is in an older segment"
    end = plog.log_end_offset
    reopened = reopen(plog, clean=clean, recovery_point=plog.segments[-1].base_offset if not clean else None)
    retried = reopened.append(idempotent_batch(5, 0, count=3))
    assert retried.duplicate and (retried.base_offset, retried.last_offset) == (first.base_offset, first.last_offset)
    assert reopened.log_end_offset == end, "nothing was written"
    with pytest.raises(AppendError) as info:
        reopened.append(idempotent_batch(5, 7))
    assert info.value.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(AppendError) as info:
        reopened.append(idempotent_batch(6, 24, epoch=0))  # a zombie of the epoch before
    assert info.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert not reopened.append(idempotent_batch(6, 24, epoch=1)).duplicate
    reopened.close()


def test_only_the_last_batch_survives_a_restart(log_dir):
    """The documented consequence of Kafka's snapshot format."""
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    plog.append(idempotent_batch(5, 0))
    plog.append(idempotent_batch(5, 2))
    plog.roll()
    plog.append(plain_batch())
    reopened = reopen(plog, clean=True)
    assert reopened.append(idempotent_batch(5, 2)).duplicate
    with pytest.raises(AppendError) as info:
        reopened.append(idempotent_batch(5, 0))
    assert info.value.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    reopened.close()


# --------------------------------------------------------------------------- bounded number of files


def test_truncation_deletes_the_snapshots_above_the_new_end_and_reloads(log_dir):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    a = [plog.append(idempotent_batch(1, 2 * i)) for i in range(10)]
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) > 3
    cut = a[5].base_offset  # batches 5.. of producer 1 go
    plog.truncate_to(cut)
    assert plog.log_end_offset == cut
    assert all(o <= cut for o in snapshots(log_dir))
    assert [o for o in snapshots(log_dir) if o < cut] == [b for b in bases[1:] if b < cut]
    last = plog.producer_state.producers[1].batches[-1]
    assert (last.first_sequence, last.first_offset) == (8, a[4].base_offset)
    assert plog.append(idempotent_batch(1, 8)).duplicate
    assert plog.append(idempotent_batch(1, 10)).base_offset == cut
    reopened = reopen(plog, clean=True)
    assert reopened.append(idempotent_batch(1, 10)).duplicate
    reopened.close()


def test_retention_and_delete_records_delete_old_snapshots_and_producers(log_dir):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    plog.append(idempotent_batch(1, 0))  # producer 1 writes only at the start
    for i in range(12):
        plog.append(idempotent_batch(2, 2 * i))
    bases = [s.base_offset for s in plog.segments]
    assert snapshots(log_dir) == bases[1:]
    # DeleteRecords into the third segment: two segments go, and producer 1's only batch.
    plog.delete_records(bases[2] + 1)
    assert [s.base_offset for s in plog.segments] == bases[2:]
    assert snapshots(log_dir) == bases[2:]
    assert set(plog.producer_state.producers) == {2}
    assert not plog.append(idempotent_batch(1, 17)).duplicate, "an unknown producer is accepted at any sequence"
    # Size retention down to the active segment.
    plog.config = LogConfig(segment_bytes=SMALL_SEGMENTS.segment_bytes, retention_bytes=1)
    plog.apply_retention(T0)
    assert len(plog.segments) == 1
    assert snapshots(log_dir) == [plog.segments[0].base_offset]


def test_producers_whose_batches_are_deleted_stay_gone_after_a_restart(log_dir):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    plog.append(idempotent_batch(1, 0))
    for i in range(6):
        plog.append(idempotent_batch(2, 2 * i))
    plog.delete_records(plog.log_end_offset - 1)  # inside the active segment: no segment deleted before it
    assert set(plog.producer_state.producers) == {2}
    reopened = reopen(plog, clean=False, recovery_point=plog.segments[-1].base_offset)
    assert set(reopened.producer_state.producers) == {2}
    reopened.close()


def test_the_number_of_snapshots_stays_bounded_over_restarts(log_dir):
    plog = PartitionLog(log_dir, SMALL_SEGMENTS)
    seq = 0
    for round_no in range(12):
        plog.append(idempotent_batch(1, seq, size=10))
        seq += 2
        plog = reopen(plog, clean=round_no % 2 == 0, recovery_point=plog.segments[-1].base_offset)
        assert len(snapshots(log_dir)) <= len(plog.segments) + 1
    plog.close()


# --------------------------------------------------------------------------- expiry


def test_expiry_drops_exactly_the_idle_producers(log_dir):
    clock = Clock(T0 + 1000)
    plog = PartitionLog(log_dir, SMALL_SEGMENTS, clock_ms=clock)
    plog.append(idempotent_batch(1, 0, count=1, ts=T0))  # idle for 1000 ms
    plog.append(idempotent_batch(2, 0, count=3, ts=T0 + 600))  # max timestamp T0 + 602 ...
    plog.append(idempotent_batch(2, 3, count=1, ts=T0 + 400))  # ... but the last batch's counts: idle 600 ms
    plog.append(idempotent_batch(3, 0, count=1, ts=T0 + 1))  # idle 999 ms
    assert plog.producer_state.producers[2].last_timestamp_ms == T0 + 400
    # now - lastTimestamp >= expiration: only producer 1, idle for exactly 1000 ms, goes.
    assert plog.remove_expired_producers(clock.now_ms, 1000) == 1
    assert set(plog.producer_state.producers) == {2, 3}
    assert plog.remove_expired_producers(clock.now_ms, 601) == 1
    assert set(plog.producer_state.producers) == {2}
    assert plog.remove_expired_producers(clock.now_ms, 600) == 1
    assert not plog.producer_state.producers
    # The expired producer's next batch is accepted at any sequence.
    assert not plog.append(idempotent_batch(1, 12345, ts=clock.now_ms)).duplicate
    plog.close()


def test_log_append_time_topics_expire_from_the_append_time(log_dir):
    clock = Clock(T0 + 10_000)
    config = LogConfig(message_timestamp_type="LogAppendTime")
    plog = PartitionLog(log_dir, config, clock_ms=clock)
    plog.append(idempotent_batch(1, 0, ts=T0 - 10**9))  # an ancient CreateTime, stamped with now
    assert plog.remove_expired_producers(clock.now_ms + 999, 1000) == 0
    assert plog.remove_expired_producers(clock.now_ms + 1000, 1000) == 1
    plog.close()


def test_expired_producers_are_left_out_of_a_loaded_snapshot(log_dir):
    clock = Clock(T0)
    plog = PartitionLog(log_dir, SMALL_SEGMENTS, clock_ms=clock)
    plog.append(idempotent_batch(1, 0, ts=T0 - 5000))
    plog.append(idempotent_batch(2, 0, ts=T0))
    plog.close()
    reopened = PartitionLog(
        log_dir, SMALL_SEGMENTS, clock_ms=clock, recovery_point=plog.log_end_offset, clean_shutdown=True,
        producer_id_expiration_ms=3000,
    )
    assert set(reopened.producer_state.producers) == {2}
    reopened.close()


def test_log_manager_expires_producers_of_open_logs(tmp_path):
    clock = Clock(T0)
    manager = LogManager([tmp_path / "logs"], clock_ms=clock, producer_id_expiration_ms=60_000)
    a = manager.get_or_create("a", 0, LogConfig())
    b = manager.get_or_create("b", 0, LogConfig())
    a.append(idempotent_batch(1, 0, count=1, ts=T0))
    b.append(idempotent_batch(2, 0, count=1, ts=T0 + 30_000))
    clock.now_ms = T0 + 60_000
    assert manager.remove_expired_producers(clock.now_ms) == 1
    assert (len(a.producer_state), len(b.producer_state)) == (0, 1)
    clock.now_ms = T0 + 90_000
    assert manager.remove_expired_producers(clock.now_ms) == 1
    manager.close()


# --------------------------------------------------------------------------- against a model


class ProducerStateModel(RuleBasedStateMachine):
    """Each producer's last batch still in the log (at or above the log start) is
    what the producer state must hold, whatever happened since it was written."""

    PIDS = (11, 12, 13)

    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="pybroker-snapshots-"))
        self.config = LogConfig(segment_bytes=400, index_interval_bytes=64)
        self.plog = PartitionLog(self.tmp / "m-0", self.config)
        self.batches: list[tuple[int, int, int, int, int]] = []  # (pid, first seq, count, base offset, last offset)
        self.next_seq = {pid: 0 for pid in self.PIDS}

    def teardown(self):
        try:
            self.plog.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def expected(self) -> dict[int, tuple[int, int, int, int]]:
        start = self.plog.log_start_offset
        last = {}
        for pid, seq, count, base, last_offset in self.batches:
            if pid >= 0 and last_offset >= start:
                last[pid] = (seq, seq + count - 1, base, last_offset)
        return last

    @rule(pid=st.sampled_from(PIDS), count=st.integers(1, 4))
    def append(self, pid, count):
        seq = self.next_seq[pid]
        result = self.plog.append(idempotent_batch(pid, seq, count=count, size=20))
        assert not result.duplicate
        self.batches.append((pid, seq, count, result.base_offset, result.last_offset))
        self.next_seq[pid] = seq + count

    @rule()
    def append_plain(self):
        result = self.plog.append(plain_batch(size=20))
        self.batches.append((-1, -1, 2, result.base_offset, result.last_offset))

    @rule(pid=st.sampled_from(PIDS))
    def retry_last_batch(self, pid):
        expected = self.expected().get(pid)
        if expected is None:
            return
        seq, last_seq, base, last_offset = expected
        result = self.plog.append(idempotent_batch(pid, seq, count=last_seq - seq + 1, size=20))
        assert result.duplicate and (result.base_offset, result.last_offset) == (base, last_offset)

    @rule()
    def roll(self):
        self.plog.roll()

    @rule(clean=st.booleans(), data=st.data())
    def reopen(self, clean, data):
        point = None
        if not clean:
            bases = [s.base_offset for s in self.plog.segments]
            point = data.draw(st.sampled_from([None, *bases, self.plog.log_end_offset]), label="recovery_point")
        self.plog = reopen(self.plog, clean=clean, recovery_point=point, config=self.config)

    @rule(data=st.data())
    def truncate(self, data):
        if not self.batches:
            return
        offset = data.draw(st.integers(self.plog.log_start_offset, self.plog.log_end_offset), label="truncate_to")
        end = self.plog.truncate_to(offset)
        self.batches = [b for b in self.batches if b[4] < end]
        self._resync()

    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(self.plog.log_start_offset, self.plog.log_end_offset), label="delete_before")
        self.plog.delete_records(offset)
        self._resync()

    def _resync(self):
        # A producer continues after its last batch still known; an unknown one may restart anywhere.
        for pid, (_, last_seq, _, _) in self.expected().items():
            self.next_seq[pid] = last_seq + 1

    @invariant()
    def state_matches_the_log(self):
        producers = self.plog.producer_state.producers
        expected = self.expected()
        assert set(producers) == set(expected)
        for pid, (seq, last_seq, base, last_offset) in expected.items():
            batch = producers[pid].batches[-1]
            assert (batch.first_sequence, batch.last_sequence, batch.first_offset, batch.last_offset) == (
                seq, last_seq, base, last_offset,
            )

    @invariant()
    def snapshots_are_bounded_and_in_range(self):
        offsets = snapshots(self.plog.directory)
        assert len(offsets) <= len(self.plog.segments) + 1
        assert all(o <= self.plog.log_end_offset for o in offsets)


ProducerStateModel.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestProducerStateModel = ProducerStateModel.TestCase
