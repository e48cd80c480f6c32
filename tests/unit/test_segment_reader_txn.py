"""spark_jobs.txn_state: read_committed's aborted transactions and last stable
offset from the ``.txnindex`` files and producer snapshots the broker writes.

Logs are written through storage.log.PartitionLog (transactional batches,
markers, rolls, clean closes), and the answers are checked against a model of
what was written, against the full header walk the reader used before, and
against the broker's own last stable offset; damaged, deleted or half-written
files must not change them (or change them only as they change the broker's).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.records import build_batch
from spark_jobs import txn_state
from spark_jobs.segment_reader import AbortedRange, PartitionDir, read_piece, split_by_segment, with_aborted
from spark_jobs.txn_state import (
    open_transactions_at,
    read_txn_index,
    snapshot_offsets,
    transaction_state,
    walked_transaction_state,
)
from storage.log import LogConfig, PartitionLog
from storage.producer_snapshot import snapshot_file_name
from storage.txn_index import ENTRY_BYTES, AbortedTxn, decode_entries, encode_entry

T0 = 1_700_000_000_000


def clock_ms() -> int:
    return T0


@dataclass
class History:
    """A partition written through PartitionLog, and a model of what it holds."""

    plog: PartitionLog
    records: dict[int, int | None] = field(default_factory=dict)  # data offset -> producer id if transactional
    txns: list[list] = field(default_factory=list)  # [producer id, first offset, marker offset or None, aborted]
    open_txn: dict[int, list] = field(default_factory=dict)  # producer id -> its entry in txns
    sequences: dict[int, int] = field(default_factory=dict)

    @property
    def pdir(self) -> PartitionDir:
        return PartitionDir("t", 0, self.plog.directory)

    @property
    def end(self) -> int:
        return self.plog.log_end_offset

    def data(self, producer_id: int | None, count: int = 1) -> None:
        sequence = self.sequences.get(producer_id, 0)
        batch = build_batch(
            [(b"k", b"v%d" % i, [], T0) for i in range(count)],
            producer_id=-1 if producer_id is None else producer_id,
            producer_epoch=-1 if producer_id is None else 0,
            base_sequence=-1 if producer_id is None else sequence,
            is_transactional=producer_id is not None,
        )
        result = self.plog.append(batch)
        if producer_id is not None:
            self.sequences[producer_id] = sequence + count
            if producer_id not in self.open_txn:
                self.open_txn[producer_id] = [producer_id, result.base_offset, None, False]
                self.txns.append(self.open_txn[producer_id])
        for offset in range(result.base_offset, result.last_offset + 1):
            self.records[offset] = producer_id

    def end_txn(self, producer_id: int, commit: bool) -> None:
        result = self.plog.append_marker(producer_id, 0, 0, commit, leader_epoch=0)
        txn = self.open_txn.pop(producer_id, None)
        if txn is not None:
            txn[2], txn[3] = result.base_offset, not commit

    def roll(self) -> None:
        self.plog.roll()

    def reopen(self) -> None:
        """A clean close (a snapshot at the log end) and an open."""
        self.plog.close()
        end = self.plog.log_end_offset
        self.plog = PartitionLog(
            self.plog.directory, self.plog.config, clock_ms=clock_ms, recovery_point=end, clean_shutdown=True
        )

    # ------------------------------------------------------------------ the model's answers

    def open_at(self, end: int) -> list[list]:
        return [t for t in self.txns if t[1] < end and (t[2] is None or t[2] >= end)]

    def last_stable_offset(self, start: int, end: int) -> int | None:
        """The first offset of the earliest transaction open at ``end``, at least
        ``start``; None when none is (or the range is empty)."""
        open_txns = self.open_at(end) if end > start else []
        return max(start, min(t[1] for t in open_txns)) if open_txns else None

    def aborted(self, start: int, end: int) -> set[AbortedRange]:
        return {AbortedRange(t[0], t[1], t[2]) for t in self.txns if t[3] and start <= t[2] < end}

    def committed_offsets(self, start: int, end: int) -> list[int]:
        """What read_committed returns of [start, end)."""
        lso = self.last_stable_offset(start, end)
        stop = end if lso is None else lso
        aborted_offsets = set()
        for producer_id, first, marker, was_aborted in self.txns:
            if was_aborted and marker < end:
                aborted_offsets.update(o for o in range(first, marker) if self.records.get(o) == producer_id)
        return [o for o in sorted(self.records) if start <= o < stop and o not in aborted_offsets]


def new_history(directory: Path, segment_bytes: int = 1 << 30) -> History:
    return History(PartitionLog(directory / "t-0", LogConfig(segment_bytes=segment_bytes), clock_ms=clock_ms))


def committed_read(pdir: PartitionDir, start: int, end: int, state) -> list[int]:
    aborted, lso = state
    stop = end if lso is None else min(end, lso)
    offsets = []
    for piece in with_aborted(split_by_segment(pdir, start, stop), aborted):
        offsets.extend(read_piece(piece).offset)
    return offsets


def txn_index_paths(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.txnindex"))


def write_sample(history: History) -> None:
    """Producers 1-3 over four segments (rolls at 6, 11 and 16, so snapshots there):

    0-1 P1 | 2 plain | 3 P2 | 4 P3 | 5 ABORT P1 || 6 COMMIT P2 | 7 P1 | 8 plain | 9 P2 |
    10 ABORT P3 || 11 ABORT P2 | 12 COMMIT P1 | 13 P1 | 14 plain | 15 P3 || 16 ABORT P1 | 17 P2
    (P3 and P2 open at the end; P3 was open at the snapshot at 16)
    """
    h = history
    h.data(1, 2)
    h.data(None)
    h.data(2)
    h.data(3)
    h.end_txn(1, commit=False)
    h.roll()
    h.end_txn(2, commit=True)
    h.data(1)
    h.data(None)
    h.data(2)
    h.end_txn(3, commit=False)
    h.roll()
    h.end_txn(2, commit=False)
    h.end_txn(1, commit=True)
    h.data(1)
    h.data(None)
    h.data(3)
    h.roll()
    h.end_txn(1, commit=False)
    h.data(2)


SAMPLE_ABORTED = (AbortedRange(1, 0, 5), AbortedRange(3, 4, 10), AbortedRange(2, 9, 11), AbortedRange(1, 13, 16))


# --------------------------------------------------------------------------- examples


def test_the_sample_log_from_indexes_and_snapshots(tmp_path):
    h = new_history(tmp_path)
    write_sample(h)
    assert snapshot_offsets(h.plog.directory) == [6, 11, 16]
    assert [p.name for p in txn_index_paths(h.plog.directory)] == [f"{b:020d}.txnindex" for b in (0, 6, 11, 16)]
    assert transaction_state(h.pdir, 0, 18) == (SAMPLE_ABORTED, 15)
    assert h.plog.last_stable_offset == 15  # the broker agrees
    assert committed_read(h.pdir, 0, 18, transaction_state(h.pdir, 0, 18)) == [2, 3, 7, 8, 14]
    # An end inside the log: markers at or after it do not count, their transactions are open.
    assert transaction_state(h.pdir, 0, 11) == (SAMPLE_ABORTED[:2], 7)
    assert transaction_state(h.pdir, 0, 10) == (SAMPLE_ABORTED[:1], 4)
    # A start inside a transaction still open at the end: the read stops at the start.
    assert transaction_state(h.pdir, 16, 18) == (SAMPLE_ABORTED[3:], 16)
    # Ranges from the index keep the transaction's true first offset.
    assert transaction_state(h.pdir, 3, 12) == (SAMPLE_ABORTED[:3], 7)
    assert transaction_state(h.pdir, 7, 7) == ((), None)


def test_aborted_transactions_of_rolled_segments_are_not_walked(tmp_path, monkeypatch):
    h = new_history(tmp_path)
    write_sample(h)
    walked, decoded = [], []
    real_walk, real_decode = txn_state._iter_file_headers, txn_state._decode_batch_at

    def counting_walk(path, position=0):
        for item in real_walk(path, position):
            walked.append(int(Path(path).stem))
            yield item

    def counting_decode(path, position, size_bytes):
        decoded.append(int(Path(path).stem))
        return real_decode(path, position, size_bytes)

    monkeypatch.setattr(txn_state, "_iter_file_headers", counting_walk)
    monkeypatch.setattr(txn_state, "_decode_batch_at", counting_decode)
    assert transaction_state(h.pdir, 0, 18) == (SAMPLE_ABORTED, 15)
    assert set(walked) == {16} and decoded == [16]  # only the batches after the newest snapshot
    walked.clear()
    decoded.clear()
    assert walked_transaction_state(h.pdir, 0, 18) == (SAMPLE_ABORTED, 15)
    assert set(walked) == {0, 6, 11, 16} and len(decoded) == 6  # the old way: every segment, every closing marker


def test_the_snapshot_of_a_clean_close_leaves_nothing_to_walk(tmp_path, monkeypatch):
    h = new_history(tmp_path)
    write_sample(h)
    h.reopen()
    assert snapshot_offsets(h.plog.directory)[-1] == 18
    monkeypatch.setattr(txn_state, "_iter_file_headers", lambda *a: pytest.fail("walked"))
    assert transaction_state(h.pdir, 0, 18) == (SAMPLE_ABORTED, 15)


def test_after_a_snapshot_inside_a_segment_each_abort_is_counted_once(tmp_path):
    """A clean close leaves a snapshot at the log end, inside the active segment:
    markers after it are in that segment's .txnindex and in the walk."""
    h = new_history(tmp_path)
    write_sample(h)
    h.reopen()
    h.data(3)
    h.end_txn(3, commit=False)  # 19, the active segment (base 16) goes on after the snapshot at 18
    assert snapshot_offsets(h.plog.directory)[-1] == 18
    assert len(read_txn_index(h.plog.directory / f"{16:020d}.txnindex", 16, None)) == 2
    assert transaction_state(h.pdir, 0, 20) == ((*SAMPLE_ABORTED, AbortedRange(3, 15, 19)), 17)
    assert transaction_state(h.pdir, 0, 20) == walked_transaction_state(h.pdir, 0, 20)


def test_without_snapshots_the_walk_starts_at_the_first_segment(tmp_path):
    h = new_history(tmp_path)
    write_sample(h)
    for offset in snapshot_offsets(h.plog.directory):
        (h.plog.directory / snapshot_file_name(offset)).unlink()
    assert transaction_state(h.pdir, 0, 18) == (SAMPLE_ABORTED, 15)
    assert transaction_state(h.pdir, 5, 18) == (SAMPLE_ABORTED, 15)
    # The old walk from 5 on knew nothing of P1's and P3's transactions begun before.
    assert walked_transaction_state(h.pdir, 5, 18) == (SAMPLE_ABORTED[2:], 15)


def test_damaged_snapshots_are_passed_over(tmp_path):
    h = new_history(tmp_path)
    write_sample(h)
    newest = h.plog.directory / snapshot_file_name(16)
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF  # the CRC no longer matches
    newest.write_bytes(bytes(data))
    (h.plog.directory / snapshot_file_name(11)).write_bytes(b"\x00\x01")  # torn
    assert open_transactions_at(h.plog.directory, snapshot_offsets(h.plog.directory), 18) == (6, {2: 3, 3: 4})
    assert transaction_state(h.pdir, 0, 18) == (SAMPLE_ABORTED, 15)


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: encode_entry(AbortedTxn(3, 4, 10, 11))[:1] + b"\x01" + data[2:],  # version 1
        lambda data: data + encode_entry(AbortedTxn(9, 1, 1, 2)),  # a marker going backwards
        lambda data: encode_entry(AbortedTxn(3, 4, 99, 100)),  # a marker in another segment
        lambda data: encode_entry(AbortedTxn(3, 8, 7, 100)),  # first offset after the marker
    ],
)
def test_a_corrupt_txnindex_falls_back_to_walking_its_segment(tmp_path, damage):
    h = new_history(tmp_path)
    write_sample(h)
    path = h.plog.directory / f"{6:020d}.txnindex"
    path.write_bytes(damage(path.read_bytes()))
    assert read_txn_index(path, 6, 11) is None
    assert transaction_state(h.pdir, 0, 18) == (SAMPLE_ABORTED, 15)
    assert transaction_state(h.pdir, 7, 18) == (SAMPLE_ABORTED[1:], 15)
    # Without a snapshot at or below the segment's base, the walk starts at the first segment.
    (h.plog.directory / snapshot_file_name(6)).unlink()
    assert transaction_state(h.pdir, 0, 18) == (SAMPLE_ABORTED, 15)
    assert transaction_state(h.pdir, 7, 18) == (SAMPLE_ABORTED[1:], 15)


def test_a_partial_entry_being_appended_is_left_out(tmp_path):
    h = new_history(tmp_path)
    write_sample(h)
    path = h.plog.directory / f"{6:020d}.txnindex"
    whole = path.read_bytes()
    path.write_bytes(whole + encode_entry(AbortedTxn(7, 8, 9, 10))[:20])
    assert read_txn_index(path, 6, 11) == decode_entries(whole) == [AbortedTxn(3, 4, 10, 7)]
    assert transaction_state(h.pdir, 0, 18) == (SAMPLE_ABORTED, 15)


def test_a_deleted_txnindex_reads_as_no_aborted_transaction_as_the_broker_reads_it(tmp_path):
    h = new_history(tmp_path)
    write_sample(h)
    (h.plog.directory / f"{6:020d}.txnindex").unlink()
    assert read_txn_index(h.plog.directory / f"{6:020d}.txnindex", 6, 11) == []
    aborted, lso = transaction_state(h.pdir, 0, 18)
    assert (aborted, lso) == (SAMPLE_ABORTED[:1] + SAMPLE_ABORTED[2:], 15)
    h.reopen()  # a clean open trusts the files too
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in h.plog.aborted_transaction_entries(0, 18)] == [
        (r.producer_id, r.first_offset, r.last_offset) for r in aborted
    ]


def test_a_marker_written_before_its_index_entry_is_found_by_the_walk(tmp_path):
    """The broker appends a marker to the .log, then its .txnindex entry: a reader
    between the two sees the marker without the entry."""
    h = new_history(tmp_path)
    write_sample(h)
    h.data(3)
    h.end_txn(3, commit=False)  # 19, in the active segment (base 16)
    active_index = h.plog.directory / f"{16:020d}.txnindex"
    active_index.write_bytes(active_index.read_bytes()[:ENTRY_BYTES])  # the entry of 19 not written yet
    assert transaction_state(h.pdir, 0, 20) == ((*SAMPLE_ABORTED, AbortedRange(3, 15, 19)), 17)


def test_vanished_files_do_not_crash_the_reader(tmp_path):
    h = new_history(tmp_path)
    write_sample(h)
    directory = h.plog.directory
    assert open_transactions_at(directory, [6, 99], 200) == (6, {2: 3, 3: 4})  # 99 is gone
    assert open_transactions_at(directory, [5], 200) is None
    for path in list(directory.iterdir()):
        path.unlink()
    assert transaction_state(h.pdir, 0, 18) == ((), None)
    os.rmdir(directory)
    assert transaction_state(h.pdir, 0, 18) == ((), None)


# --------------------------------------------------------------------------- random histories

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("data"), st.sampled_from([None, 1, 2, 3]), st.integers(1, 3)),
        st.tuples(st.just("end"), st.sampled_from([1, 2, 3]), st.booleans()),
        st.tuples(st.just("roll")),
        st.tuples(st.just("reopen")),
    ),
    max_size=30,
)
DAMAGE = st.sampled_from(["none", "corrupt index", "partial entry", "no snapshots", "bad newest snapshot"])


def apply(history: History, operations) -> None:
    for operation in operations:
        if operation[0] == "data":
            history.data(operation[1], operation[2])
        elif operation[0] == "end":
            history.end_txn(operation[1], operation[2])
        elif operation[0] == "roll":
            history.roll()
        else:
            history.reopen()


def damage_files(directory: Path, damage: str, choice: int) -> None:
    indexes = txn_index_paths(directory)
    snapshots = snapshot_offsets(directory)
    if damage == "corrupt index" and indexes:
        path = indexes[choice % len(indexes)]
        path.write_bytes(b"\x00\x07" + path.read_bytes()[2:])
    elif damage == "partial entry" and indexes:
        path = indexes[choice % len(indexes)]
        path.write_bytes(path.read_bytes() + b"\x00" * (choice % ENTRY_BYTES or 1))
    elif damage == "no snapshots":
        for offset in snapshots:
            (directory / snapshot_file_name(offset)).unlink()
    elif damage == "bad newest snapshot" and snapshots:
        (directory / snapshot_file_name(snapshots[-1])).write_bytes(b"\x00\x01\x00\x00\x00\x00")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    operations=OPERATIONS,
    segment_bytes=st.sampled_from([250, 600, 1 << 30]),
    damage=DAMAGE,
    choice=st.integers(0, 1000),
    bounds=st.tuples(st.integers(0, 200), st.integers(0, 200)),
)
def test_random_histories_match_the_model_the_old_walk_and_the_broker(
    operations, segment_bytes, damage, choice, bounds
):
    with tempfile.TemporaryDirectory() as tmp:
        h = new_history(Path(tmp), segment_bytes)
        apply(h, operations)
        log_end = h.end
        broker_lso = h.plog.last_stable_offset
        damage_files(h.plog.directory, damage, choice)
        pdir = h.pdir
        start, end = sorted(b % (log_end + 1) for b in bounds)

        # The whole log, as the data source plans it (from the log start to the end).
        state = transaction_state(pdir, 0, log_end)
        assert state[1] == h.last_stable_offset(0, log_end)
        assert (log_end if state[1] is None else state[1]) == broker_lso
        assert set(state[0]) == h.aborted(0, log_end)
        assert list(state[0]) == sorted(state[0], key=lambda txn: txn.last_offset)
        assert state == walked_transaction_state(pdir, 0, log_end)
        assert committed_read(pdir, 0, log_end, state) == h.committed_offsets(0, log_end)

        # Any range: the same records as the model; the old walk's aborted ranges
        # skip the same batches (it may see less of a transaction begun before the start).
        state = transaction_state(pdir, start, end)
        assert state[1] == h.last_stable_offset(start, end)
        assert set(state[0]) == h.aborted(start, end) and len(state[0]) == len(set(state[0]))
        expected = h.committed_offsets(start, end)
        assert committed_read(pdir, start, end, state) == expected
        old_aborted, old_lso = walked_transaction_state(pdir, start, end)
        assert committed_read(pdir, start, end, (old_aborted, state[1])) == expected
        assert {(t.producer_id, t.last_offset) for t in old_aborted} <= {
            (t.producer_id, t.last_offset) for t in state[0]
        }
        if old_lso is not None:  # the old walk saw less of the open transactions: it stopped no earlier
            assert state[1] is not None and state[1] <= max(start, old_lso)
        h.plog.close()
