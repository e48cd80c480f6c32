"""Compaction keeps what a read_committed consumer sees (storage/cleaner.py with transactions).

A hypothesis state machine writes keyed records to a compacted log: plain
ones and ones inside transactions that commit or abort, interleaved over
three producers, with tombstones; it rolls segments, cleans (with the clock
moving, so that delete horizons pass) and reopens. After every step the
latest value per key that a read_committed consumer reads (batches up to the
last stable offset, dropping those of the aborted transactions the log
lists, as Kafka's consumer does) must be the model's: the latest committed
or plain value of each key below the last stable offset, tombstones meaning
no value.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import deque
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from protocol.records import ControlType, build_batch, decode_batch_records, first_control_record, iter_batches
from storage.cleaner import clean_log
from storage.log import LogConfig, PartitionLog

T0 = 1_700_000_000_000
DAY = 86_400_000
KEYS = st.sampled_from([b"a", b"b", b"c", b"d"])
VALUES = st.one_of(st.none(), st.sampled_from([b"1", b"2", b"3"]))
PRODUCERS = st.integers(min_value=1, max_value=3)


def read_committed(plog: PartitionLog) -> dict[bytes, bytes]:
    """Latest value per key as a read_committed consumer ends with it."""
    upper = plog.last_stable_offset
    queue = deque(sorted(plog.aborted_transactions(plog.log_start_offset, upper), key=lambda txn: txn[1]))
    aborted_producers: set[int] = set()
    latest: dict[bytes, bytes | None] = {}
    offset = plog.log_start_offset
    while offset < upper:
        data = plog.read(offset, 1 << 20, upper_offset=upper)
        if not data:
            break
        for position, _, header in iter_batches(data):
            offset = header.base_offset + header.last_offset_delta + 1
            while queue and queue[0][1] <= header.base_offset + header.last_offset_delta:
                aborted_producers.add(queue.popleft()[0])
            if header.is_control:
                control = first_control_record(data, position)
                if control is not None and control.control_type == ControlType.ABORT:
                    aborted_producers.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborted_producers:
                continue
            for record in decode_batch_records(data, position)[1]:
                latest[record.key] = record.value
    return {key: value for key, value in latest.items() if value is not None}


class CompactedTxnModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="pybroker-txncleaner-"))
        self.config = LogConfig(
            cleanup_policy="compact", segment_bytes=300, index_interval_bytes=64, delete_retention_ms=DAY
        )
        self.now_ms = T0
        self.plog = self._open()
        self.checkpoint = None
        # Every write in offset order: (offset, producer or None, key, value).
        self.writes: list[tuple[int, int | None, bytes, bytes | None]] = []
        self.open: dict[int, list] = {}  # producer -> its open transaction's writes
        self.outcome: dict[tuple[int, int], bool] = {}  # (producer, first offset) -> committed
        self.sequence: dict[int, int] = {}

    def _open(self, **kwargs) -> PartitionLog:
        return PartitionLog(self.tmp / "c-0", self.config, clock_ms=lambda: self.now_ms, **kwargs)

    def teardown(self):
        try:
            self.plog.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(pid=PRODUCERS, key=KEYS, value=VALUES)
    def write_in_transaction(self, pid, key, value):
        sequence = self.sequence.get(pid, 0)
        batch = build_batch(
            [(key, value, [], self.now_ms)], producer_id=pid, producer_epoch=0, base_sequence=sequence, is_transactional=True
        )
        offset = self.plog.append(batch).base_offset
        self.sequence[pid] = sequence + 1
        self.open.setdefault(pid, []).append(offset)
        self.writes.append((offset, pid, key, value))

    @rule(key=KEYS, value=VALUES)
    def write_plain(self, key, value):
        offset = self.plog.append(build_batch([(key, value, [], self.now_ms)])).base_offset
        self.writes.append((offset, None, key, value))

    @rule(pid=PRODUCERS, commit=st.booleans())
    def end_transaction(self, pid, commit):
        self.plog.append_marker(pid, 0, 0, commit, leader_epoch=0)
        offsets = self.open.pop(pid, [])
        if offsets:
            self.outcome[(pid, offsets[0])] = commit
            for offset in offsets:
                self.outcome[(pid, offset)] = commit

    @rule()
    def roll(self):
        self.plog.roll()

    @rule(advance_ms=st.sampled_from([0, DAY // 2, 2 * DAY]))
    def clean(self, advance_ms):
        self.now_ms += advance_ms
        result = clean_log(self.plog, self.now_ms, first_dirty_offset=self.checkpoint, force=True)
        self.checkpoint = result.first_dirty_offset

    @rule(clean=st.booleans())
    def reopen(self, clean):
        end = self.plog.log_end_offset
        if clean:
            self.plog.close()
            self.plog = self._open(recovery_point=end, clean_shutdown=True)
        else:
            self.plog.flush(fsync=False)
            self.plog = self._open(recovery_point=0)

    @invariant()
    def read_committed_view_is_the_models(self):
        upper = self.plog.last_stable_offset
        open_firsts = [offsets[0] for offsets in self.open.values() if offsets]
        assert upper == min(open_firsts, default=self.plog.log_end_offset)
        latest: dict[bytes, bytes | None] = {}
        for offset, pid, key, value in self.writes:
            if offset >= upper:
                break
            if pid is None or self.outcome.get((pid, offset), False):
                latest[key] = value
        expected = {key: value for key, value in latest.items() if value is not None}
        assert read_committed(self.plog) == expected


CompactedTxnModel.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    database=None,  # leave no example database in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCompactedTxnModel = CompactedTxnModel.TestCase
