"""PartitionLog.read_slice skips the headers of batches the offset index vouches
for and reads the rest a window at a time (storage/log.py, storage/segment.py):
its slices must be exactly those of a walk over every batch header."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.records import LOG_OVERHEAD_BYTES, build_batch, iter_batches
from storage.log import LogConfig, PartitionLog

T0 = 1_700_000_000_000


def expected_slice(batches: list[tuple[int, int, int, int]], start_offset: int, max_bytes: int, upper: int, oversized: bool):
    """(position, length, next offset) by walking every batch of the one segment,
    batches as (position, size, base offset, last offset); None for no slice."""
    if start_offset >= upper:
        return None
    first = next((i for i, b in enumerate(batches) if b[3] >= start_offset), None)
    if first is None:
        return None
    start = batches[first][0]
    length, next_offset = 0, -1
    for position, size, base, last in batches[first:]:
        if base >= upper:
            break
        if length + size > max_bytes and (length or not oversized):
            if length:
                next_offset = base
            break
        length += size
        next_offset = last + 1
    return (start, length, next_offset) if length else None


@settings(max_examples=60, deadline=None)
@given(
    batch_shapes=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 300)), min_size=1, max_size=60),
    index_interval_bytes=st.sampled_from([1, 512, 4096, 1 << 20]),
    probes=st.lists(
        st.tuples(st.floats(0, 1), st.integers(0, 40_000), st.floats(0, 1.2), st.booleans()), min_size=1, max_size=25
    ),
)
def test_slices_are_those_of_a_walk_over_every_header(batch_shapes, index_interval_bytes, probes):
    with tempfile.TemporaryDirectory() as directory:
        plog = PartitionLog(Path(directory), LogConfig(index_interval_bytes=index_interval_bytes))
        try:
            for count, value_bytes in batch_shapes:
                plog.append(build_batch([(None, b"v" * value_bytes, [], T0)] * count))
            end = plog.log_end_offset
            plog.high_watermark = end
            data = plog.segments[0].read(0, plog.segments[0].size_bytes)
            batches = [
                (position, size, header.base_offset, header.base_offset + header.last_offset_delta)
                for position, size, header in iter_batches(data)
            ]
            assert batches[-1][0] + batches[-1][1] == len(data) and all(b[1] > LOG_OVERHEAD_BYTES for b in batches)
            for offset_fraction, max_bytes, upper_fraction, oversized in probes:
                offset = int(offset_fraction * end)
                upper = int(upper_fraction * end)
                file_slice = plog.read_slice(offset, max_bytes, upper_offset=upper, oversized_first_batch=oversized)
                got = None
                if file_slice is not None:
                    got = (file_slice.position, file_slice.length, file_slice.next_offset)
                    file_slice.close()
                assert got == expected_slice(batches, offset, max_bytes, upper, oversized), (offset, max_bytes, upper)
        finally:
            plog.close()
