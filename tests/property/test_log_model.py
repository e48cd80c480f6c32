"""PartitionLog against a plain in-memory model: a list of records with offsets.

A hypothesis state machine appends batches (1-5 small records, random codec,
random and possibly out-of-order timestamps), reads from random offsets with
random max_bytes, rolls segments, reopens the log from disk and looks up
offsets by timestamp; after every step the log must agree with the model.
"""

from __future__ import annotations

import shutil
import tempfile
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
        # The model: (offset, key, value, timestamp) in offset order.
        self.model: list[tuple[int, bytes | None, bytes | None, int]] = []

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
        base = len(self.model)
        assert result.base_offset == base
        assert result.last_offset == base + len(records) - 1
        for i, (k, v, t) in enumerate(records):
            self.model.append((base + i, k, v, T0 + t))

    @rule(records=st.lists(batch_st, min_size=2, max_size=3))
    def append_several_batches(self, records):
        payload = b"".join(build_batch([(k, v, [], T0 + t) for k, v, t in batch]) for batch in records)
        result = self.plog.append(payload)
        base = len(self.model)
        assert result.base_offset == base
        for batch in records:
            for k, v, t in batch:
                self.model.append((len(self.model), k, v, T0 + t))
        assert result.last_offset == len(self.model) - 1

    @rule(data=st.data(), max_bytes=st.sampled_from([1, 100, 300, 1 << 20]))
    def read(self, data, max_bytes):
        offset = data.draw(st.integers(min_value=0, max_value=len(self.model) + 2), label="offset")
        raw = self.plog.read(offset, max_bytes)
        if offset >= len(self.model):
            assert raw == b""
            return
        assert raw, f"read({offset}, {max_bytes}) returned nothing below the end {len(self.model)}"
        if len(raw) > max_bytes:
            # Only a single oversized first batch may exceed max_bytes.
            assert len(list(iter_batches(raw))) == 1
        decoded = decode_records(raw)
        assert decoded[0].offset <= offset, "the first batch returned must hold the offset"
        got = [(r.offset, r.key, r.value, r.timestamp_ms) for r in decoded if r.offset >= offset]
        assert got, "no record at or after the requested offset"
        assert got == self.model[offset : offset + len(got)]
        # Records before the offset come from the same batch and match too.
        before = [(r.offset, r.key, r.value, r.timestamp_ms) for r in decoded if r.offset < offset]
        assert before == self.model[offset - len(before) : offset]

    @rule()
    def roll(self):
        self.plog.roll()

    @rule()
    def reopen(self):
        self.plog.close()
        self.plog = PartitionLog(self.tmp / "model-0", self.config)

    @rule(target_ts=st.integers(min_value=-5, max_value=510))
    def offset_for_timestamp(self, target_ts):
        target = T0 + target_ts
        expected = next(((o, t) for o, _, _, t in self.model if t >= target), None)
        assert self.plog.offset_for_timestamp(target) == expected

    @precondition(lambda self: self.model)
    @rule()
    def max_timestamp_offset(self):
        best = max(self.model, key=lambda r: (r[3], -r[0]))
        assert self.plog.max_timestamp_offset() == (best[0], best[3])

    # ------------------------------------------------------------------ invariants

    @invariant()
    def ends_agree(self):
        assert self.plog.log_end_offset == len(self.model)
        assert self.plog.high_watermark == len(self.model)
        assert self.plog.log_start_offset == 0

    @invariant()
    def segments_are_ordered(self):
        bases = [s.base_offset for s in self.plog.segments]
        assert bases == sorted(bases)
        assert bases[0] == 0
        assert all(b <= len(self.model) for b in bases)


LogModel.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    database=None,  # leave no example database in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLogModel = LogModel.TestCase
