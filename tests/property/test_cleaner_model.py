"""The log cleaner against a flat model of Kafka's compaction rules.

Hypothesis appends batches of records (keys from a small set, sometimes none,
as if written before the topic became compacted; values or tombstones; random
codecs) over several phases into a log with small segments, cleaning after
each phase at a growing ``now_ms``, with or without the previous checkpoint
and sometimes with a tiny offset map. The model is a list of batches (base
offset, last offset, records, delete horizon) to which the documented rules
are applied directly; after every cleaning the segment files, a consumer's
reads and, at the end, a reopened log must match it, and the general
guarantees of compaction must hold: each kept record is an original one at
its original offset, offsets only grow, and the latest record of every key
is still there unless it is a tombstone whose delete horizon has passed.
"""

from __future__ import annotations

import shutil
import tempfile
from bisect import bisect_right
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import event, given, settings
from hypothesis import strategies as st

from protocol.compression import CompressionType
from protocol.records import build_batch, decode_batch_records, iter_batches, validate_batch
from storage.cleaner import clean_log
from storage.handle_pool import FileHandlePool
from storage.log import LogConfig, PartitionLog

T0 = 1_700_000_000_000
PHASE_MS = 1000

KEYS = [b"a", b"b", b"c", b"d", b"e"]
record_st = st.tuples(
    st.one_of(st.sampled_from(KEYS), st.sampled_from(KEYS), st.sampled_from(KEYS), st.none()),  # key, rarely none
    st.one_of(st.none(), st.binary(min_size=0, max_size=8)),  # value or tombstone
    st.integers(min_value=0, max_value=PHASE_MS - 1),  # timestamp within the phase
)
batch_st = st.tuples(
    st.lists(record_st, min_size=1, max_size=4),
    st.sampled_from(list(CompressionType)),
    st.booleans() | st.just(False),  # roll after this batch
)
phase_st = st.tuples(
    st.lists(batch_st, min_size=1, max_size=12),
    st.integers(min_value=0, max_value=2 * PHASE_MS),  # now_ms offset past the phase start
    st.booleans(),  # pass the previous checkpoint (else clean from the log start)
    st.sampled_from([1, 2, 3, 1 << 20, 1 << 20]),  # max_map_entries
)
config_st = st.builds(
    LogConfig,
    cleanup_policy=st.just("compact"),
    segment_bytes=st.sampled_from([256, 512, 1024]),
    index_interval_bytes=st.just(100),
    delete_retention_ms=st.sampled_from([0, 500, 1500]),
    min_compaction_lag_ms=st.sampled_from([0, 0, 400]),
)


@dataclass
class Batch:
    base: int
    last: int
    records: list  # (offset, key, value, timestamp)
    max_ts: int
    horizon: int | None = None


def read_files(plog: PartitionLog) -> list[tuple]:
    """(base, last, horizon, records) of every batch in the segment files."""
    out = []
    for segment in plog.segments:
        if not segment.log_path.exists():
            continue
        data = segment.log_path.read_bytes()
        for pos, size, header in iter_batches(data):
            validate_batch(data, pos, size)
            _, records = decode_batch_records(data, pos)
            horizon = header.base_timestamp_ms if header.has_delete_horizon else None
            out.append((header.base_offset, header.last_offset, horizon, [(r.offset, r.key, r.value, r.timestamp_ms) for r in records]))
    return out


def model_view(batches: list[Batch]) -> list[tuple]:
    return [(b.base, b.last, b.horizon, list(b.records)) for b in batches]


def consume(plog: PartitionLog) -> list[tuple]:
    offset = plog.log_start_offset
    out = []
    while offset < plog.high_watermark:
        data = plog.read(offset, 1 << 20)
        assert data, f"nothing to read at {offset}"
        for pos, _, header in iter_batches(data):
            _, records = decode_batch_records(data, pos)
            out.extend((r.offset, r.key, r.value, r.timestamp_ms) for r in records if r.offset >= offset)
            offset = max(offset, header.next_offset)
    return out


def model_uncleanable(plog: PartitionLog, batches: list[Batch], first_dirty: int, now_ms: int) -> int:
    """First uncleanable offset from the documented rule, with segment timestamps from the model."""
    segments = plog.segments
    bases = [s.base_offset for s in segments]
    upper = min(plog.high_watermark, bases[-1])
    lag = plog.config.min_compaction_lag_ms
    if lag > 0:
        first = max(bisect_right(bases, first_dirty) - 1, 0)
        for i in range(first, len(segments) - 1):
            inside = [b.max_ts for b in batches if bases[i] <= b.base < bases[i + 1]]
            if max(inside, default=-1) > now_ms - lag:
                upper = min(upper, bases[i])
                break
    return upper


def model_clean(batches: list[Batch], plog_bases: list[int], first_dirty: int, end: int, upper: int, now_ms: int, retention_ms: int) -> list[Batch]:
    """Kafka's rules applied to the model: map over [first_dirty, end), recopy the
    segments below ``end`` keeping the latest record per key, tombstones until
    their horizon, and a bare header for the batch ending at ``upper``."""
    latest_offset = end - 1
    offsets = {}
    for b in batches:
        for offset, key, _, _ in b.records:
            if key is not None and first_dirty <= offset < end:
                offsets[key] = offset
    cleaned_below = min(base for base in plog_bases if base >= end)  # first segment left alone
    out = []
    for b in batches:
        if b.base >= cleaned_below:
            out.append(b)
            continue
        kept = []
        for record in b.records:
            offset, key, value, _ = record
            if offset > latest_offset:
                keep = True
            elif key is None or offset < offsets.get(key, -1):
                keep = False
            else:
                keep = value is not None or b.horizon is None or now_ms < b.horizon
            if keep:
                kept.append(record)
        if kept:
            horizon = b.horizon
            if horizon is None and any(r[2] is None for r in kept):
                horizon = now_ms + retention_ms
            max_ts = b.max_ts if len(kept) == len(b.records) else max(r[3] for r in kept)
            out.append(Batch(b.base, b.last, kept, max_ts, horizon))
        elif b.last + 1 == upper:
            out.append(Batch(b.base, b.last, [], b.max_ts, None))
    return out


def check_guarantees(all_written: list[tuple], files: list[tuple], now_ms: int, horizons_seen: dict[int, int]) -> None:
    """What compaction promises, whatever the details. ``horizons_seen`` maps the
    offset of each tombstone seen in a batch with a delete horizon to that horizon."""
    original = {r[0]: r for r in all_written}
    kept = [r for _, _, _, records in files for r in records]
    offsets = [r[0] for r in kept]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    for record in kept:
        assert original[record[0]] == record, "a kept record must be an original one at its offset"
    latest = {}
    for record in all_written:
        if record[1] is not None:
            latest[record[1]] = record
    present = set(offsets)
    for key, record in latest.items():
        if record[0] not in present:
            # Only a tombstone goes, and only once a cleaning saw it with a passed horizon.
            assert record[2] is None, f"the latest value of {key!r} is gone"
            assert record[0] in horizons_seen, f"tombstone {record} removed before it got a delete horizon"
            assert horizons_seen[record[0]] <= now_ms, f"tombstone {record} removed before its horizon"
    for _, _, horizon, records in files:
        for record in records:
            if record[2] is None and horizon is not None:
                assert horizons_seen.setdefault(record[0], horizon) == horizon, "a horizon moved"


@settings(max_examples=40, deadline=None)
@given(config=config_st, phases=st.lists(phase_st, min_size=1, max_size=3))
def test_cleaner_matches_the_model(config, phases):
    tmp = Path(tempfile.mkdtemp(prefix="pybroker-cleaner-"))
    pool = FileHandlePool()
    plog = PartitionLog(tmp / "model-0", config, pool=pool)
    try:
        batches: list[Batch] = []
        written: list[tuple] = []
        checkpoint = None
        now_ms = T0
        horizons_seen: dict[int, int] = {}
        for phase, (phase_batches, now_offset, use_checkpoint, max_map_entries) in enumerate(phases):
            phase_start = T0 + phase * PHASE_MS
            for records, codec, roll in phase_batches:
                items = [(key, value, [], phase_start + ts) for key, value, ts in records]
                if any(key is None for key, _, _ in records):
                    # A compacted topic refuses records without a key: these come
                    # from before the topic was switched to compaction.
                    plog.config = replace(config, cleanup_policy="delete")
                result = plog.append(build_batch(items, codec=codec))
                plog.config = config
                recs = [(result.base_offset + i, key, value, ts) for i, (key, value, _, ts) in enumerate(items)]
                batches.append(Batch(result.base_offset, result.last_offset, recs, max(r[3] for r in recs)))
                written.extend(recs)
                if roll:
                    plog.roll()
            now_ms = max(now_ms, phase_start + now_offset)

            first_dirty = checkpoint if use_checkpoint and checkpoint is not None else 0
            upper = model_uncleanable(plog, batches, first_dirty, now_ms)
            bases = [s.base_offset for s in plog.segments]
            result = clean_log(
                plog, now_ms, first_dirty_offset=first_dirty if use_checkpoint else None,
                max_map_entries=max_map_entries, force=True,
            )
            assert result.first_uncleanable_offset == upper
            if first_dirty >= upper:
                assert not result.cleaned
                assert result.first_dirty_offset == first_dirty
            else:
                assert result.cleaned, result.skipped
                end = result.first_dirty_offset
                assert first_dirty < end <= upper
                if not result.map_full:
                    assert end == upper
                mapped_keys = {r[1] for b in batches for r in b.records if r[1] is not None and first_dirty <= r[0] < end}
                assert len(mapped_keys) <= max_map_entries
                batches = model_clean(batches, bases, first_dirty, end, upper, now_ms, config.delete_retention_ms)
                event("cleaned")
                for name in ("map_full", "tombstones_removed", "delete_horizons_set", "empty_batches_kept", "keyless_removed"):
                    if getattr(result, name):
                        event(name)
                if result.segments_written < result.segments_cleaned:
                    event("segments merged")
                checkpoint = end

            files = read_files(plog)
            assert files == model_view(batches)
            assert consume(plog) == [r for b in batches for r in b.records]
            check_guarantees(written, files, now_ms, horizons_seen)
            assert plog.log_end_offset == len(written) == plog.high_watermark

        # The cleaned log reads the same after a reopen, and so do the timestamps.
        expected = model_view(batches)
        plog.close()
        pool.close_all()
        plog = PartitionLog(tmp / "model-0", config, pool=pool)
        assert read_files(plog) == expected
        kept = [r for b in batches for r in b.records]
        assert consume(plog) == kept
        for target in {r[3] for r in kept} | {T0 - 1}:
            want = next(((r[0], r[3]) for r in kept if r[3] >= target), None)
            assert plog.offset_for_timestamp(target) == want
    finally:
        plog.close()
        pool.close_all()
        shutil.rmtree(tmp, ignore_errors=True)
