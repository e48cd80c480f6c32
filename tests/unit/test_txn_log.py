"""Transactions in PartitionLog (storage/log.py): the log side of Kafka's transactions.

Appending transactional batches and markers, the checks of both, the last
stable offset as transactions open, close and replicate, the aborted
transactions a read_committed fetch gets (across segments), and the
``.txnindex`` files through reopening (clean, after a crash, with a damaged
index), truncation, retention, DeleteRecords and a follower's copy.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.records import ControlType, build_batch, build_control_batch, iter_batches
from storage.deferred_io import DeferredFileDeleter
from storage.log import AppendError, LogConfig, PartitionLog
from storage.producer_snapshot import read_snapshot, snapshot_file_name
from storage.txn_index import AbortedTxn, decode_entries, encode_entry

T0 = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=500, index_interval_bytes=64)


class Clock:
    def __init__(self, now_ms: int = T0):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def txn_batch(pid: int, seq: int, count: int = 2, *, epoch: int = 0, transactional: bool = True, size: int = 40) -> bytes:
    return build_batch(
        [(b"k", b"v" * size, [], T0 + i) for i in range(count)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )


def plain_batch(count: int = 2) -> bytes:
    return build_batch([(b"k", b"p" * 40, [], T0 + i) for i in range(count)])


def open_log(directory: Path, config: LogConfig = SMALL, **kwargs) -> PartitionLog:
    return PartitionLog(directory, config, clock_ms=kwargs.pop("clock_ms", Clock()), **kwargs)


def reopen(plog: PartitionLog, *, clean: bool, recovery_point: int | None = None, config: LogConfig = SMALL) -> PartitionLog:
    """Close cleanly, or abandon the log as a killed process would, and open it again."""
    start = plog.log_start_offset
    if clean:
        plog.close()
        recovery_point = plog.log_end_offset
    else:
        plog.flush(fsync=False)  # the page cache survives a killed process
    return open_log(plog.directory, config, recovery_point=recovery_point, log_start_offset=start, clean_shutdown=clean)


def txn_files(directory: Path) -> dict[int, list[AbortedTxn]]:
    return {
        int(p.name.split(".")[0]): decode_entries(p.read_bytes())
        for p in sorted(directory.iterdir())
        if p.name.endswith(".txnindex")
    }


def index_entries(plog: PartitionLog) -> dict[int, list[AbortedTxn]]:
    return {s.base_offset: list(s.txn_index.entries) for s in plog.segments if s.txn_index.entries}


def refused(call, *args, **kwargs) -> ErrorCode:
    with pytest.raises(AppendError) as info:
        call(*args, **kwargs)
    return info.value.error_code


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "txn-0"


# --------------------------------------------------------------------------- appending


def test_commit_and_abort_move_the_last_stable_offset(log_dir):
    plog = open_log(log_dir, LogConfig())
    plog.append(txn_batch(1, 0))  # 0-1
    plog.append(plain_batch())  # 2-3
    plog.append(txn_batch(2, 0))  # 4-5
    assert plog.ongoing_transactions() == {1: 0, 2: 4}
    assert plog.first_unstable_offset == 0 and plog.last_stable_offset == 0
    result = plog.append_marker(1, 0, 0, True, leader_epoch=0)  # 6
    assert (result.base_offset, result.last_offset) == (6, 6)
    assert plog.last_stable_offset == 4
    plog.append_marker(2, 0, 0, False, leader_epoch=0)  # 7
    assert plog.first_unstable_offset is None and plog.last_stable_offset == plog.high_watermark == 8
    assert plog.aborted_transactions(0, 8) == [(2, 4)]
    assert index_entries(plog) == {0: [AbortedTxn(2, 4, 7, 8)]}
    assert plog.aborted_transactions(6, 8) == [(2, 4)]  # the marker at 7 is still ahead
    assert plog.aborted_transactions(0, 4) == []  # starts at the upper bound
    headers = [h for _, _, h in iter_batches(plog.read(0, 1 << 20))]
    markers = [h for h in headers if h.is_control]
    assert [(h.base_offset, h.producer_id, h.is_transactional) for h in markers] == [(6, 1, True), (7, 2, True)]


def test_the_last_stable_offset_waits_for_the_high_watermark_on_replicated_logs(log_dir):
    plog = open_log(log_dir, LogConfig())
    plog.replicated = True
    plog.high_watermark = 0
    plog.append(txn_batch(1, 0))  # 0-1
    plog.append(plain_batch())  # 2-3
    plog.append_marker(1, 0, 0, False, leader_epoch=0)  # 4
    assert plog.last_stable_offset == 0
    plog.high_watermark = 3
    assert plog.last_stable_offset == 0  # decided, but the marker is not replicated
    plog.high_watermark = 4
    assert plog.last_stable_offset == 0
    plog.high_watermark = 5
    assert plog.first_unstable_offset is None and plog.last_stable_offset == 5


def test_transaction_rules_of_data_batches(log_dir):
    plog = open_log(log_dir, LogConfig())
    no_producer = build_batch([(b"k", b"v", [], T0)], is_transactional=True)
    assert refused(plog.append, no_producer) == ErrorCode.INVALID_RECORD
    forged = build_control_batch(ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp_ms=T0)
    assert refused(plog.append, forged) == ErrorCode.INVALID_RECORD
    plog.append(txn_batch(1, 0, epoch=3))
    assert refused(plog.append, txn_batch(1, 2, epoch=3, transactional=False)) == ErrorCode.INVALID_TXN_STATE
    assert refused(plog.append, txn_batch(1, 2, epoch=2)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert plog.log_end_offset == 2
    assert plog.append(txn_batch(1, 0, epoch=3)).duplicate  # a retry is still a duplicate
    plog.append(txn_batch(1, 2, epoch=3))
    plog.append_marker(1, 3, 0, True, leader_epoch=0)
    plog.append(txn_batch(1, 4, epoch=3, transactional=False))  # after its end


def test_a_control_batch_without_a_producer_is_still_accepted(log_dir):
    # The metadata log writes its LEADER_CHANGE control batches through append.
    plog = open_log(log_dir, LogConfig())
    leader_change = build_batch([(b"\x00\x00\x00\x02", b"x", [], T0)], is_control=True)
    assert plog.append(leader_change).base_offset == 0


def test_a_request_that_opens_a_transaction_cannot_leave_it(log_dir):
    plog = open_log(log_dir, LogConfig())
    request = txn_batch(1, 0) + txn_batch(1, 2, transactional=False)
    assert refused(plog.append, request) == ErrorCode.INVALID_TXN_STATE
    assert plog.log_end_offset == 0 and not plog.has_ongoing_transaction(1)
    plog.append(txn_batch(1, 0) + txn_batch(1, 2))
    assert plog.ongoing_transactions() == {1: 0}


def test_verification_guards_through_append(log_dir):
    plog = open_log(log_dir, LogConfig())
    guard = plog.verification_guard_for(1)
    assert refused(plog.append, txn_batch(1, 0), verification_guard=object()) == ErrorCode.INVALID_TXN_STATE
    plog.append(txn_batch(1, 0), verification_guard=guard)
    plog.append(txn_batch(1, 2), verification_guard=object())  # inside the transaction: not checked
    plog.append_marker(1, 0, 0, False, leader_epoch=0)
    # The marker replaced the guard: a verification taken before it is stale.
    assert refused(plog.append, txn_batch(1, 4), verification_guard=guard) == ErrorCode.INVALID_TXN_STATE
    plog.append(txn_batch(1, 4), verification_guard=plog.verification_guard_for(1))
    # Without verification, nothing is asked.
    plog.append(txn_batch(2, 0))


def test_coordinator_batches_are_checked_for_their_epoch_only(log_dir):
    plog = open_log(log_dir, LogConfig())
    offsets = build_batch(
        [(b"key", b"commit", [], T0)], producer_id=4, producer_epoch=2, base_sequence=-1, is_transactional=True
    )
    plog.append(offsets, from_coordinator=True)
    plog.append(offsets, from_coordinator=True)  # no sequence: never a duplicate
    assert plog.log_end_offset == 2 and plog.ongoing_transactions() == {4: 0}
    old = build_batch([(b"key", b"c", [], T0)], producer_id=4, producer_epoch=1, base_sequence=-1, is_transactional=True)
    assert refused(plog.append, old, from_coordinator=True) == ErrorCode.INVALID_PRODUCER_EPOCH
    plog.append_marker(4, 2, 0, True, leader_epoch=0)
    assert plog.last_stable_offset == 3


def test_marker_checks(log_dir):
    plog = open_log(log_dir, LogConfig())
    plog.append(txn_batch(1, 0, epoch=5))
    plog.append_marker(1, 5, 7, True, leader_epoch=0)
    end = plog.log_end_offset
    assert refused(plog.append_marker, 1, 5, 6, True, leader_epoch=0) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert refused(plog.append_marker, 1, 4, 7, True, leader_epoch=0) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert plog.log_end_offset == end  # nothing written
    # A bumped epoch from the coordinator is taken; the producer's older epoch is then fenced.
    plog.append_marker(1, 6, 7, False, leader_epoch=0)
    assert plog.producer_state.producers[1].epoch == 6
    assert refused(plog.append, txn_batch(1, 0, epoch=5)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_marker_without_a_transaction_is_written_and_indexes_nothing(log_dir):
    plog = open_log(log_dir, LogConfig())
    result = plog.append_marker(9, 0, 1, False, leader_epoch=3)
    assert result.base_offset == 0 and plog.log_end_offset == 1
    assert index_entries(plog) == {} and plog.aborted_transactions(0, 1) == []
    header = next(iter_batches(plog.read(0, 1000)))[2]
    assert header.is_control and header.partition_leader_epoch == 3
    assert plog.leader_epochs == [(3, 0)]
    assert plog.producer_state.producers[9].coordinator_epoch == 1


def test_markers_on_log_append_time_topics_carry_the_append_time(log_dir):
    clock = Clock()
    plog = open_log(log_dir, LogConfig(message_timestamp_type="LogAppendTime"), clock_ms=clock)
    plog.append(txn_batch(1, 0))
    clock.now_ms += 5
    assert plog.append_marker(1, 0, 0, True, leader_epoch=0).log_append_time_ms == T0 + 5


def test_read_slices_name_the_offset_after_them(log_dir):
    plog = open_log(log_dir, LogConfig())
    plog.append(txn_batch(1, 0, count=3))
    plog.append(plain_batch())
    file_slice = plog.read_slice(1, 1 << 20)
    try:
        assert file_slice.next_offset == 5
    finally:
        file_slice.close()
    file_slice = plog.read_slice(0, 1 << 20, upper_offset=3)
    try:
        assert file_slice.next_offset == 3
    finally:
        file_slice.close()


def test_expiry_spares_producers_inside_a_transaction(log_dir):
    clock = Clock()
    plog = open_log(log_dir, LogConfig(), clock_ms=clock)
    plog.append(txn_batch(1, 0))
    plog.append(txn_batch(2, 0, transactional=False))
    clock.now_ms += 10_000
    assert plog.remove_expired_producers(clock.now_ms, 1_000) == 1
    assert plog.ongoing_transactions() == {1: 0}


# --------------------------------------------------------------------------- across segments


def fill_across_segments(plog: PartitionLog) -> None:
    """Producer 1 aborts a transaction whose batches span segments; producer 2
    commits one; producer 3 aborts one while 4's is open; 4 stays open."""
    seq = {1: 0, 2: 0, 3: 0, 4: 0}

    def send(pid, transactional=True):
        plog.append(txn_batch(pid, seq[pid], transactional=transactional))
        seq[pid] += 2

    send(1)
    send(2)
    for _ in range(4):
        send(1)
        plog.append(plain_batch())
    plog.append_marker(2, 0, 0, True, leader_epoch=0)
    plog.append_marker(1, 0, 0, False, leader_epoch=0)
    send(4)
    send(3)
    for _ in range(4):
        plog.append(plain_batch())
    plog.append_marker(3, 0, 0, False, leader_epoch=0)
    for _ in range(3):
        plog.append(plain_batch())


def test_aborted_transactions_across_segment_rolls(log_dir):
    plog = open_log(log_dir)
    fill_across_segments(plog)
    assert len(plog.segments) > 4
    entries = [t for ts in index_entries(plog).values() for t in ts]
    assert [(t.producer_id, t.first_offset) for t in entries] == [(1, 0), (3, 24)]
    first, second = entries
    assert first.last_stable_offset == first.last_offset + 1
    assert second.last_stable_offset == 22  # producer 4's transaction was open from 22
    end = plog.log_end_offset
    assert plog.aborted_transactions(0, end) == [(1, 0), (3, 24)]
    # From a segment after producer 1's data: its marker is still ahead.
    assert plog.aborted_transactions(10, 12) == [(1, 0)]
    # Past producer 1's marker: only producer 3's transaction.
    assert plog.aborted_transactions(first.last_offset + 1, end) == [(3, 24)]
    # The walk stops at the first entry whose stable offset reaches the upper bound.
    assert plog.aborted_transactions(0, 5) == [(1, 0)]
    assert plog.ongoing_transactions() == {4: 22} and plog.last_stable_offset == 22
    assert txn_files(log_dir) == index_entries(plog)


def test_a_clean_reopen_trusts_the_index_and_restores_open_transactions(log_dir):
    plog = open_log(log_dir)
    fill_across_segments(plog)
    expected_index, end = index_entries(plog), plog.log_end_offset
    reopened = reopen(plog, clean=True)
    assert reopened.ongoing_transactions() == {4: 22}
    assert index_entries(reopened) == expected_index
    assert reopened.aborted_transactions(0, end) == [(1, 0), (3, 24)]
    # The close snapshot carries the open transaction and the coordinator epochs.
    entries = {e.producer_id: e for e in read_snapshot(log_dir / snapshot_file_name(end))}
    assert entries[4].current_txn_first_offset == 22 and entries[1].current_txn_first_offset == -1
    reopened.append_marker(4, 0, 0, False, leader_epoch=0)
    assert reopened.aborted_transactions(22, reopened.log_end_offset) == [(3, 24), (4, 22)]
    reopened.close()


def test_producers_with_only_a_marker_survive_a_reopen(log_dir):
    plog = open_log(log_dir, LogConfig())
    plog.append_marker(9, 4, 2, True, leader_epoch=0)
    reopened = reopen(plog, clean=True, config=LogConfig())
    entry = reopened.producer_state.producers[9]
    assert (entry.epoch, entry.coordinator_epoch, len(entry.batches)) == (4, 2, 0)
    assert refused(reopened.append_marker, 9, 4, 1, True, leader_epoch=0) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    reopened.close()


@pytest.mark.parametrize("recovery_point", [None, 0, "middle"])
def test_a_crash_rebuilds_the_index_of_recovered_segments(log_dir, recovery_point):
    plog = open_log(log_dir)
    fill_across_segments(plog)
    expected, end = index_entries(plog), plog.log_end_offset
    if recovery_point == "middle":
        recovery_point = plog.segments[len(plog.segments) // 2].base_offset
    # A crash may leave index entries unwritten: lose all of them.
    for path in log_dir.glob("*.txnindex"):
        path.unlink()
    if recovery_point == plog.segments[len(plog.segments) // 2].base_offset:
        # Segments below the recovery point are trusted: give theirs back.
        for base, entries in expected.items():
            if base < recovery_point:
                (log_dir / f"{base:020d}.txnindex").write_bytes(b"".join(encode_entry(t) for t in entries))
    crashed = reopen(plog, clean=False, recovery_point=recovery_point)
    assert index_entries(crashed) == expected
    assert txn_files(log_dir) == expected
    assert crashed.ongoing_transactions() == {4: 22}
    assert crashed.aborted_transactions(0, end) == [(1, 0), (3, 24)]
    crashed.close()


def test_a_torn_marker_reopens_its_transaction(log_dir):
    plog = open_log(log_dir, LogConfig())
    plog.append(txn_batch(1, 0))
    plog.append_marker(1, 0, 0, False, leader_epoch=0)
    assert index_entries(plog)
    plog.flush(fsync=False)
    log_path = plog.active_segment.log_path
    os.truncate(log_path, log_path.stat().st_size - 5)
    crashed = open_log(log_dir, LogConfig(), recovery_point=0)
    assert crashed.log_end_offset == 2
    assert crashed.ongoing_transactions() == {1: 0} and index_entries(crashed) == {}
    assert not list(log_dir.glob("*.txnindex"))


@pytest.mark.parametrize("damage", [b"\x00" * 7, "version"])
def test_a_damaged_index_is_rebuilt_on_a_clean_open(log_dir, damage):
    plog = open_log(log_dir)
    fill_across_segments(plog)
    expected = index_entries(plog)
    base = next(iter(expected))
    plog.close()
    path = log_dir / f"{base:020d}.txnindex"
    if damage == "version":
        data = bytearray(path.read_bytes())
        data[1] = 9
        path.write_bytes(bytes(data))
    else:
        path.write_bytes(path.read_bytes() + damage)
    reopened = open_log(log_dir, recovery_point=plog.log_end_offset, clean_shutdown=True)
    assert index_entries(reopened) == expected
    assert txn_files(log_dir) == expected
    assert reopened.ongoing_transactions() == {4: 22}
    reopened.close()


# --------------------------------------------------------------------------- truncation, retention, followers


def test_truncation_cuts_markers_and_transactions(log_dir):
    plog = open_log(log_dir)
    fill_across_segments(plog)
    entries = [t for ts in index_entries(plog).values() for t in ts]
    producer_3_marker = entries[1].last_offset
    plog.truncate_to(producer_3_marker)
    assert plog.ongoing_transactions() == {4: 22, 3: 24}
    assert [t.producer_id for ts in index_entries(plog).values() for t in ts] == [1]
    assert txn_files(log_dir) == index_entries(plog)
    plog.truncate_to(23)  # the batch 22-23 goes whole, and with it 4's transaction (and 3's after it)
    assert plog.ongoing_transactions() == {}
    plog.truncate_to(entries[0].last_offset)
    assert plog.ongoing_transactions() == {1: 0} and index_entries(plog) == {}
    assert not list(log_dir.glob("*.txnindex"))
    reopened = reopen(plog, clean=True)
    assert reopened.ongoing_transactions() == {1: 0}
    reopened.close()


def test_truncate_fully_forgets_every_transaction(log_dir):
    plog = open_log(log_dir)
    fill_across_segments(plog)
    plog.truncate_fully_and_start_at(100)
    assert plog.ongoing_transactions() == {} and plog.last_stable_offset == 100
    assert not list(log_dir.glob("*.txnindex"))
    plog.append(txn_batch(5, 0))
    assert plog.first_unstable_offset == 100


@pytest.mark.parametrize("deferred", [False, True])
def test_retention_and_delete_records_delete_the_index_files(log_dir, deferred):
    plog = open_log(log_dir)
    if deferred:
        plog.file_deleter = DeferredFileDeleter()
    fill_across_segments(plog)
    bases = sorted(index_entries(plog))
    after_first = next(s.base_offset for s in plog.segments if s.base_offset > bases[0])
    assert after_first <= bases[1]
    plog.delete_records(after_first)  # the segment holding producer 1's marker goes
    if deferred:
        assert (log_dir / f"{bases[0]:020d}.txnindex").exists()
        plog.file_deleter.run()
    assert not (log_dir / f"{bases[0]:020d}.txnindex").exists()
    assert (log_dir / f"{bases[1]:020d}.txnindex").exists()
    assert plog.aborted_transactions(plog.log_start_offset, plog.log_end_offset) == [(3, 24)]
    plog.config = LogConfig(segment_bytes=500, index_interval_bytes=64, retention_ms=0)
    plog.apply_retention(T0 + 10**9)
    if deferred:
        plog.file_deleter.run()
    assert not list(log_dir.glob("*.txnindex"))


def test_the_log_start_passing_an_open_transaction_drops_it(log_dir):
    plog = open_log(log_dir)
    plog.append(txn_batch(1, 0))
    for _ in range(8):
        plog.append(plain_batch())
    plog.roll()
    assert plog.last_stable_offset == 0
    plog.delete_records(plog.high_watermark)
    # Its data is gone: it no longer holds the last stable offset back.
    assert plog.ongoing_transactions() == {} and plog.last_stable_offset == plog.high_watermark


def test_a_follower_copies_markers_and_builds_the_same_index(tmp_path):
    leader = open_log(tmp_path / "leader-0")
    fill_across_segments(leader)
    follower = open_log(tmp_path / "follower-0")
    follower.replicated = True
    follower.high_watermark = 0
    offset = 0
    while offset < leader.log_end_offset:
        data = leader.read(offset, 300, upper_offset=leader.log_end_offset)
        follower.append_as_follower(data)
        offset = follower.log_end_offset
    assert follower.ongoing_transactions() == {4: 22}
    end = leader.log_end_offset
    assert follower.aborted_transactions(0, end) == leader.aborted_transactions(0, end)
    follower_entries = [t for ts in index_entries(follower).values() for t in ts]
    leader_entries = [t for ts in index_entries(leader).values() for t in ts]
    assert follower_entries == leader_entries
    # The follower's stable offset waits for the high watermark it is told.
    assert follower.last_stable_offset == 0
    follower.high_watermark = end
    assert follower.last_stable_offset == 22
    # Become leader: the open transaction is closed here.
    follower.append_marker(4, 0, 0, True, leader_epoch=1)
    follower.high_watermark = follower.log_end_offset
    assert follower.last_stable_offset == follower.log_end_offset


def test_a_deferred_flush_syncs_the_index_with_its_segment(log_dir):
    plog = open_log(log_dir, LogConfig())
    plog.append(txn_batch(1, 0))
    plog.append_marker(1, 0, 0, False, leader_epoch=0)
    pending = plog.begin_flush()
    assert plog.active_segment.txn_index.path in pending.index_paths
    pending.sync()
    plog.end_flush(pending)
    assert plog.recovery_point == plog.log_end_offset
    plog.append(plain_batch())
    pending = plog.begin_flush()
    assert plog.active_segment.txn_index.path not in pending.index_paths  # nothing new in it
    pending.sync()
    plog.end_flush(pending)
