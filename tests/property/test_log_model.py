"""PartitionLog against a plain in-memory model: a list of records with offsets.

A hypothesis state machine appends batches (1-5 small records, random codec,
random and possibly out-of-order timestamps), reads from random offsets with
random max_bytes, rolls segments, truncates the tail, moves the log start
(DeleteRecords), applies size-based retention, reopens the log from disk
(after a clean or an unclean stop) and looks up offsets by timestamp; after
every step the log must agree with the model.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol.compression import CompressionType
from protocol.records import build_batch, decode_records, iter_batches
from storage.log import LogConfig, PartitionLog

T0 = 1_700_000_000_000

record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=6)),  # key
    st.one_of(st.none(), st.binary(max_size=12)),  # value
    st.integers(min_value=0, max_value=500),  # timestamp offset from T0
)
batch_st = st.lists(record_st, min_size=1, max_size=5)
codec_st = st.sampled_from(list(CompressionType))


class LogModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="pybroker-logmodel-"))
        self.config = LogConfig(segment_bytes=400, index_interval_bytes=64)
        self.plog = PartitionLog(self.tmp / "model-0", self.config)
        # The model: (offset, key, value, timestamp) in offset order, of every
        # record still on disk; batches as (base, last) offsets.
        self.model: list[tuple[int, bytes | None, bytes | None, int]] = []
        self.batches: list[tuple[int, int]] = []
        self.end = 0
        self.start = 0

    def _add_batch(self, records):
        base = self.end
        for i, (k, v, t) in enumerate(records):
            self.model.append((base + i, k, v, T0 + t))
        self.end = base + len(records)
        self.batches.append((base, self.end - 1))
        return base

    def _visible(self):
        return [r for r in self.model if r[0] >= self.start]

    def teardown(self):
        try:
            self.plog.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------ rules

    @rule(records=batch_st, codec=codec_st)
    def append(self, records, codec):
        batch = build_batch([(k, v, [], T0 + t) for k, v, t in records], codec=codec)
        result = self.plog.append(batch)
        base = self._add_batch(records)
        assert result.base_offset == base
        assert result.last_offset == base + len(records) - 1

    @rule(records=st.lists(batch_st, min_size=2, max_size=3))
    def append_several_batches(self, records):
        payload = b"".join(build_batch([(k, v, [], T0 + t) for k, v, t in batch]) for batch in records)
        result = self.plog.append(payload)
        base = self.end
        for batch in records:
            self._add_batch(batch)
        assert result.base_offset == base
        assert result.last_offset == self.end - 1

    @rule(data=st.data(), max_bytes=st.sampled_from([1, 100, 300, 1 << 20]))
    def read(self, data, max_bytes):
        offset = data.draw(st.integers(min_value=self.start, max_value=self.end + 2), label="offset")
        raw = self.plog.read(offset, max_bytes)
        if offset >= self.end:
            assert raw == b""
            return
        assert raw, f"read({offset}, {max_bytes}) returned nothing below the end {len(self.model)}"
        if len(raw) > max_bytes:
            # Only a single oversized first batch may exceed max_bytes.
            assert len(list(iter_batches(raw))) == 1
        decoded = decode_records(raw)
        assert decoded[0].offset <= offset, "the first batch returned must hold the offset"
        by_offset = {r[0]: r for r in self.model}
        got = [(r.offset, r.key, r.value, r.timestamp_ms) for r in decoded]
        assert any(r[0] >= offset for r in got), "no record at or after the requested offset"
        assert got == [by_offset[r[0]] for r in got]
        offsets = [r[0] for r in got]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), "records are contiguous"

    @rule()
    def roll(self):
        self.plog.roll()

    @rule(clean=st.booleans())
    def reopen(self, clean):
        start = self.plog.log_start_offset
        if clean:
            self.plog.close()
            recovery_point = self.plog.recovery_point
        else:
            # An unclean stop: nothing flushed, no recovery point known.
            self.plog.flush(fsync=False)
            recovery_point = None
        self.plog = PartitionLog(
            self.tmp / "model-0", self.config, recovery_point=recovery_point, log_start_offset=start, clean_shutdown=clean
        )

    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(min_value=self.start, max_value=self.end + 1), label="truncate_to")
        if offset < self.end:
            # The batch holding the offset goes whole, even if it starts below
            # the log start; the log start then follows the end down.
            target = max(offset, self.start)
            new_end = next(b for b, last in self.batches if b <= target <= last)
        else:
            new_end = self.end
        assert self.plog.truncate_to(offset) == new_end
        self.model = [r for r in self.model if r[0] < new_end]
        self.batches = [(b, last) for b, last in self.batches if last < new_end]
        self.end = new_end
        self.start = min(self.start, new_end)

    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(min_value=0, max_value=self.end), label="delete_before")
        assert self.plog.delete_records(offset) == max(self.start, offset)
        self.start = max(self.start, offset)
        self._forget_deleted_segments()

    @rule(retention_bytes=st.integers(min_value=0, max_value=1500))
    def size_retention(self, retention_bytes):
        self.plog.config = replace(self.config, retention_bytes=retention_bytes)
        try:
            self.plog.apply_retention(now_ms=T0)
        finally:
            self.plog.config = self.config
        assert self.plog.size_bytes - self.plog.segments[0].size_bytes < retention_bytes or len(self.plog.segments) == 1
        self.start = max(self.start, self.plog.segments[0].base_offset)
        self._forget_deleted_segments()

    def _forget_deleted_segments(self):
        first_base = self.plog.segments[0].base_offset
        self.model = [r for r in self.model if r[0] >= first_base]
        self.batches = [(b, last) for b, last in self.batches if b >= first_base]

    @rule(target_ts=st.integers(min_value=-5, max_value=510))
    def offset_for_timestamp(self, target_ts):
        target = T0 + target_ts
        expected = next(((o, t) for o, _, _, t in self._visible() if t >= target), None)
        assert self.plog.offset_for_timestamp(target) == expected

    @precondition(lambda self: self._visible())
    @rule()
    def max_timestamp_offset(self):
        best = max(self._visible(), key=lambda r: (r[3], -r[0]))
        assert self.plog.max_timestamp_offset() == (best[0], best[3])

    # ------------------------------------------------------------------ invariants

    @invariant()
    def ends_agree(self):
        assert self.plog.log_end_offset == self.end
        assert self.plog.high_watermark == self.end
        assert self.plog.log_start_offset == self.start

    @invariant()
    def segments_are_ordered(self):
        bases = [s.base_offset for s in self.plog.segments]
        assert bases == sorted(bases)
        assert bases[0] <= self.start
        assert all(b <= self.end for b in bases)


LogModel.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=40,
    deadline=None,
    database=None,  # leave no example database in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLogModel = LogModel.TestCase
