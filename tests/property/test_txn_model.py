"""Transactions in PartitionLog against a naive model of the batches in the log.

A hypothesis state machine has producers write transactional and plain
batches, coordinators write COMMIT/ABORT markers, the log roll, the high
watermark move, the log reopen (cleanly or after a crash, from any recovery
point) and truncate. The model is just the list of batches still in the log:
open transactions, completed ones (with the last stable offset at their
completion) and the aborted transactions of any fetch range are recomputed
from it by replaying that list. After every step the log's open
transactions, last stable offset, ``.txnindex`` entries and
``aborted_transactions`` answers must agree with it.

Completed-but-unreplicated transactions are not persisted (as in Kafka), so
after a reopen or a truncation the high watermark is set to the log end, as
a leader whose followers are caught up would have it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from protocol.errors import ErrorCode
from protocol.records import build_batch
from storage.log import AppendError, LogConfig, PartitionLog

T0 = 1_700_000_000_000
PRODUCERS = st.integers(min_value=1, max_value=3)


def model_state(events, high_watermark):
    """(open transactions {pid: first}, completed [(pid, first, last, aborted, lso)],
    first unstable offset) of the batches in ``events`` (offset order)."""
    ongoing: dict[int, int] = {}
    completed = []
    for event in events:
        kind = event[0]
        if kind == "data":
            _, pid, first, _, transactional, _ = event
            if transactional and pid not in ongoing:
                ongoing[pid] = first
        elif kind == "marker":
            _, pid, offset, commit = event
            if pid in ongoing:
                others = [f for p, f in ongoing.items() if p != pid]
                completed.append((pid, ongoing.pop(pid), offset, not commit, min(others) if others else offset + 1))
    unstable = list(ongoing.values()) + [first for _, first, last, _, _ in completed if last >= high_watermark]
    return ongoing, completed, min(unstable) if unstable else None


class TxnLogModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="pybroker-txnmodel-"))
        self.config = LogConfig(segment_bytes=350, index_interval_bytes=64)
        self.plog = PartitionLog(self.tmp / "txn-0", self.config)
        self.plog.replicated = True
        self.plog.high_watermark = 0
        # ("data", pid, first, last, transactional, first sequence) | ("plain", first, last)
        # | ("marker", pid, offset, commit), in offset order.
        self.events: list[tuple] = []
        self.end = 0
        self.high_watermark = 0
        self.next_sequence: dict[int, int] = {}

    def teardown(self):
        try:
            self.plog.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _ongoing(self):
        return model_state(self.events, self.high_watermark)[0]

    # ------------------------------------------------------------------ rules

    @rule(pid=PRODUCERS, count=st.integers(min_value=1, max_value=3), transactional=st.booleans())
    def send(self, pid, count, transactional):
        sequence = self.next_sequence.get(pid, 0)
        batch = build_batch(
            [(b"k", b"v" * 20, [], T0) for _ in range(count)],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=sequence,
            is_transactional=transactional,
        )
        if not transactional and pid in self._ongoing():
            try:
                self.plog.append(batch)
            except AppendError as exc:
                assert exc.error_code == ErrorCode.INVALID_TXN_STATE
            else:
                raise AssertionError("a non-transactional batch inside a transaction was accepted")
            return
        result = self.plog.append(batch)
        assert result.base_offset == self.end
        self.events.append(("data", pid, self.end, result.last_offset, transactional, sequence))
        self.end = result.last_offset + 1
        self.next_sequence[pid] = sequence + count

    @rule(count=st.integers(min_value=1, max_value=3))
    def plain(self, count):
        result = self.plog.append(build_batch([(b"k", b"p" * 20, [], T0) for _ in range(count)]))
        self.events.append(("plain", result.base_offset, result.last_offset))
        self.end = result.last_offset + 1

    @rule(pid=PRODUCERS, commit=st.booleans())
    def end_transaction(self, pid, commit):
        result = self.plog.append_marker(pid, 0, 0, commit, leader_epoch=0)
        assert result.base_offset == self.end
        self.events.append(("marker", pid, self.end, commit))
        self.end += 1

    @rule()
    def roll(self):
        self.plog.roll()

    @rule(data=st.data())
    def move_high_watermark(self, data):
        self.high_watermark = data.draw(st.integers(min_value=self.high_watermark, max_value=self.end))
        self.plog.high_watermark = self.high_watermark

    @rule(clean=st.booleans(), data=st.data())
    def reopen(self, clean, data):
        bases = [s.base_offset for s in self.plog.segments]
        if clean:
            self.plog.close()
            recovery_point = self.end
        else:
            self.plog.flush(fsync=False)  # what a killed process leaves: the page cache
            recovery_point = data.draw(st.sampled_from([None, *bases]))
        self.plog = PartitionLog(self.plog.directory, self.config, recovery_point=recovery_point, clean_shutdown=clean)
        self._after_reload()

    @rule(data=st.data())
    def truncate(self, data):
        if self.end == 0:
            return
        cut = data.draw(st.integers(min_value=0, max_value=self.end - 1))
        new_end = self.plog.truncate_to(cut)
        self.events = [e for e in self.events if (e[3] if e[0] == "data" else e[2]) < cut]
        self.end = max([(e[3] if e[0] == "data" else e[2]) + 1 for e in self.events], default=0)
        assert new_end == self.end
        self.next_sequence = {}
        for event in self.events:
            if event[0] == "data":
                _, pid, first, last, _, sequence = event
                self.next_sequence[pid] = sequence + last - first + 1
        self._after_reload()

    def _after_reload(self):
        self.plog.replicated = True
        self.high_watermark = self.plog.high_watermark = self.end

    @rule(data=st.data())
    def fetch(self, data):
        fetch_offset = data.draw(st.integers(min_value=0, max_value=self.end))
        upper = data.draw(st.integers(min_value=fetch_offset, max_value=self.end + 1))
        _, completed, _ = model_state(self.events, self.high_watermark)
        expected = [(pid, first) for pid, first, last, aborted, _ in completed if aborted and last >= fetch_offset and first < upper]
        assert self.plog.aborted_transactions(fetch_offset, upper) == expected

    # ------------------------------------------------------------------ invariants

    @invariant()
    def agrees_with_the_model(self):
        ongoing, completed, unstable = model_state(self.events, self.high_watermark)
        plog = self.plog
        assert plog.log_end_offset == self.end
        assert plog.ongoing_transactions() == dict(sorted(ongoing.items(), key=lambda item: item[1]))
        assert plog.first_unstable_offset == unstable
        expected_lso = self.high_watermark if unstable is None or unstable >= self.high_watermark else unstable
        assert plog.last_stable_offset == expected_lso
        indexed = [tuple(t) for s in plog.segments for t in s.txn_index.entries]
        assert indexed == [(pid, first, last, lso) for pid, first, last, aborted, lso in completed if aborted]
        for segment in plog.segments:
            for txn in segment.txn_index.entries:
                assert segment.base_offset <= txn.last_offset < segment.next_offset
        everything = [(pid, first) for pid, first, _, aborted, _ in completed if aborted]
        assert plog.aborted_transactions(0, self.end + 1) == everything


TxnLogModel.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=50,
    deadline=None,
    database=None,  # leave no example database in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestTxnLogModel = TxnLogModel.TestCase
