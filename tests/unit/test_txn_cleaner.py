"""The log cleaner and transactions (storage/cleaner.py), Kafka's rules.

Batches of aborted transactions are removed and never shadow a key; a marker
stays while its transaction has data, then gets a delete horizon and goes
after it; the cleaned segment's ``.txnindex`` keeps the aborts whose marker
it keeps; nothing at or past the first unstable offset is cleaned, and
markers not yet below the high watermark are left alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.records import build_batch, decode_batch_records, iter_batches, validate_batch
from storage.cleaner import clean_log, cleanable_range
from storage.log import LogConfig, PartitionLog
from storage.txn_index import decode_entries

T0 = 1_700_000_000_000
DAY = 86_400_000
COMPACT = LogConfig(cleanup_policy="compact", segment_bytes=1024, index_interval_bytes=128, delete_retention_ms=DAY)


class Clock:
    def __init__(self):
        self.now_ms = T0

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def plog(tmp_path):
    log = PartitionLog(tmp_path / "compacted-0", COMPACT, clock_ms=Clock())
    yield log
    if not log.closed:
        log.close()


class Producer:
    def __init__(self, plog: PartitionLog, producer_id: int):
        self.plog, self.producer_id, self.sequence = plog, producer_id, 0

    def send(self, *pairs: tuple[str, str | None], transactional: bool = True):
        batch = build_batch(
            [(k.encode(), None if v is None else v.encode(), [], T0) for k, v in pairs],
            producer_id=self.producer_id,
            producer_epoch=0,
            base_sequence=self.sequence,
            is_transactional=transactional,
        )
        self.sequence += len(pairs)
        return self.plog.append(batch)

    def end(self, commit: bool):
        return self.plog.append_marker(self.producer_id, 0, 0, commit, leader_epoch=0)


def plain(plog: PartitionLog, *pairs: tuple[str, str]):
    return plog.append(build_batch([(k.encode(), v.encode(), [], T0) for k, v in pairs]))


def batches(plog: PartitionLog):
    out = []
    for segment in plog.segments:
        if not segment.log_path.exists():
            continue
        data = segment.log_path.read_bytes()
        for pos, size, header in iter_batches(data):
            validate_batch(data, pos, size)
            out.append((header, decode_batch_records(data, pos)[1], data[pos : pos + size]))
    return out


def values(plog: PartitionLog) -> dict[str, str | None]:
    """What a read_uncommitted consumer would end with per key."""
    latest = {}
    for header, records, _ in batches(plog):
        if header.is_control:
            continue
        for record in records:
            latest[record.key.decode()] = None if record.value is None else record.value.decode()
    return latest


def markers(plog: PartitionLog):
    return [(h.base_offset, h.producer_id, h.has_delete_horizon, len(records)) for h, records, _ in batches(plog) if h.is_control]


def txn_files(directory: Path):
    return {int(p.name.split(".")[0]): decode_entries(p.read_bytes()) for p in sorted(directory.glob("*.txnindex"))}


def test_aborted_batches_are_removed_and_their_marker_goes_after_the_horizon(plog):
    aborting, committing = Producer(plog, 1), Producer(plog, 2)
    plain(plog, ("a", "good"))  # 0
    aborting.send(("a", "bad"), ("b", "bad"))  # 1-2
    committing.send(("c", "kept"))  # 3
    aborting.send(("d", "bad"))  # 4
    abort_at = aborting.end(False).base_offset  # 5
    commit_at = committing.end(True).base_offset  # 6
    plain(plog, ("e", "1"))  # 7
    # Producer 1 writes on: its aborted batch at 4 is not its last, which the
    # cleaner would keep as an empty header (and so the marker with it).
    aborting.send(("f", "1"), transactional=False)  # 8
    plog.roll()
    assert plog.aborted_transactions(0, plog.log_end_offset) == [(1, 1)]

    result = clean_log(plog, T0 + 1, force=True)
    assert result.aborted_batches_removed == 2
    # The aborted values never shadowed "a": the plain value survives.
    assert values(plog) == {"a": "good", "c": "kept", "e": "1", "f": "1"}
    # The abort marker stays while this cleaning removed its data, and its entry with it;
    # the commit marker stays: its transaction's batch is still there.
    assert markers(plog) == [(abort_at, 1, False, 1), (commit_at, 2, False, 1)]
    assert plog.aborted_transactions(0, plog.log_end_offset) == [(1, 1)]
    assert [t.producer_id for ts in txn_files(plog.directory).values() for t in ts] == [1]
    assert not list(plog.directory.glob("*.cleaned"))

    # Next time no batch of producer 1's transaction is left: its marker gets a delete horizon.
    clean_log(plog, T0 + 2, force=True)
    assert markers(plog) == [(abort_at, 1, True, 1), (commit_at, 2, False, 1)]
    assert txn_files(plog.directory) == {}
    clean_log(plog, T0 + 2 + DAY // 2, force=True)
    assert markers(plog)[0] == (abort_at, 1, True, 1)  # before the horizon: kept
    clean_log(plog, T0 + 3 + DAY, force=True)
    assert markers(plog) == [(commit_at, 2, False, 1)]
    assert values(plog) == {"a": "good", "c": "kept", "e": "1", "f": "1"}


def test_a_producers_last_marker_is_kept_as_an_empty_batch(plog):
    lonely = Producer(plog, 7)
    plain(plog, ("a", "1"))
    marker_at = lonely.end(False).base_offset  # a marker without a transaction
    plain(plog, ("a", "2"))
    plog.roll()
    clean_log(plog, T0, force=True)
    assert markers(plog) == [(marker_at, 7, True, 1)]
    clean_log(plog, T0 + 2 * DAY, force=True)
    # Producer 7's only record in the log: its header stays (RETAIN_EMPTY), without the record.
    assert markers(plog) == [(marker_at, 7, False, 0)]
    end = plog.log_end_offset
    plog.close()
    reopened = PartitionLog(plog.directory, COMPACT, recovery_point=end, clean_shutdown=True)
    assert reopened.producer_state.producers[7].epoch == 0
    reopened.close()


def test_a_commit_marker_in_a_later_segment_group_stays(tmp_path):
    config = LogConfig(cleanup_policy="compact", segment_bytes=200, index_interval_bytes=64, delete_retention_ms=DAY)
    plog = PartitionLog(tmp_path / "groups-0", config, clock_ms=Clock())
    committing = Producer(plog, 3)
    committing.send(("k", "v" * 60))
    for i in range(4):
        plain(plog, (f"p{i}", "x" * 60))
    commit_at = committing.end(True).base_offset
    plain(plog, ("z", "1"))
    plog.roll()
    assert plog.segments[0].base_offset == 0 and plog.segments[1].base_offset <= commit_at
    before = [data for h, _, data in batches(plog) if h.is_control]
    clean_log(plog, T0, force=True)
    assert [data for h, _, data in batches(plog) if h.is_control] == before
    plog.close()


def test_nothing_is_cleaned_at_or_past_the_first_unstable_offset(plog):
    plain(plog, ("a", "1"))
    plain(plog, ("a", "2"))
    open_txn = Producer(plog, 1)
    first = open_txn.send(("a", "txn")).base_offset
    plain(plog, ("a", "3"))
    plog.roll()
    plain(plog, ("a", "4"))
    plog.roll()
    cleanable = cleanable_range(plog, T0)
    assert cleanable.first_uncleanable_offset == first == plog.last_stable_offset
    clean_log(plog, T0, force=True)
    kept = [(r.offset, r.value) for h, records, _ in batches(plog) if not h.is_control for r in records]
    # Only "a"=1 is shadowed (by "a"=2 below the open transaction); the rest is untouched.
    assert kept == [(1, b"2"), (2, b"txn"), (3, b"3"), (4, b"4")]
    open_txn.end(False)
    assert cleanable_range(plog, T0).first_uncleanable_offset == plog.active_segment.base_offset


def test_markers_above_the_high_watermark_are_left_alone(plog):
    plog.replicated = True
    aborting = Producer(plog, 1)
    plain(plog, ("a", "1"))
    aborting.send(("a", "bad"))  # 1
    plain(plog, ("b", "1"))
    abort_at = aborting.end(False).base_offset  # 3
    plain(plog, ("c", "1"))
    plog.roll()
    plain(plog, ("d", "1"))
    plog.roll()
    plog.reset_high_watermark(abort_at)  # the marker is not replicated yet
    assert plog.last_stable_offset == 1
    clean_log(plog, T0, force=True)
    # The aborted batch stays until its marker is below the high watermark.
    assert ("a", "bad") in [(r.key.decode(), r.value.decode()) for h, rs, _ in batches(plog) for r in rs if not h.is_control]
    plog.high_watermark = plog.log_end_offset
    clean_log(plog, T0, force=True)
    assert values(plog)["a"] == "1"


def test_a_reopen_after_cleaning_trusts_the_swapped_index(plog):
    aborting = Producer(plog, 1)
    aborting.send(("a", "bad"))
    plain(plog, ("b", "1"))
    aborting.end(False)
    plain(plog, ("c", "1"))
    plog.roll()
    clean_log(plog, T0, force=True)
    end = plog.log_end_offset
    expected = plog.aborted_transactions(0, end)
    assert expected == [(1, 0)]
    plog.close()
    reopened = PartitionLog(plog.directory, COMPACT, recovery_point=end, clean_shutdown=True)
    assert reopened.aborted_transactions(0, end) == expected
    reopened.close()
    crashed = PartitionLog(plog.directory, COMPACT, recovery_point=0)
    # Rebuilt from the log: the aborted batch was producer 1's last, so its header
    # stays (empty) and still opens the transaction that the marker aborts.
    assert crashed.ongoing_transactions() == {} and crashed.aborted_transactions(0, end) == expected
    crashed.close()
