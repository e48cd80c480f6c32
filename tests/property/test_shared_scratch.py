"""FrameReceivers sharing one scratch buffer, as the connections of one event
loop thread do: streams of random frames, cut at random points, read by many
receivers in a random interleaving, come out intact and in order; frames
handed out never change afterwards; a receiver between frames holds nothing;
with an admission budget, refused frames are held back and handed out on
``resume``, and the admitted bytes never pass the budget by more than one frame.
"""

from __future__ import annotations

import struct
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.exceptions import ProtocolError
from protocol.framing import (
    SIZE_PREFIX_BYTES,
    FrameReceiver,
    FrameSplitter,
    FrameTooLarge,
    ReceiveScratch,
    thread_scratch,
)

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class TinyReceiver(FrameReceiver):
    # Small enough that short streams reach every path: frames split in the
    # scratch, compaction, carried tails, tails moved to their own buffer,
    # frames over half the scratch, chunked frames.
    FRAME_CHUNK_BYTES = 7
    CARRY_BYTES_MAX = 10


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


streams_st = st.lists(st.lists(st.binary(max_size=120), max_size=8), min_size=1, max_size=8)
schedule_st = st.lists(st.tuples(st.integers(0, 7), st.integers(1, 200), st.booleans()), min_size=1, max_size=40)


class Reader:
    """One connection: its stream, its receiver, the frames it got."""

    def __init__(self, receiver: FrameReceiver, payloads: list[bytes]):
        self.receiver = receiver
        self.payloads = payloads
        self.stream = b"".join(framed(p) for p in payloads)
        self.position = 0
        self.frames: list = []
        self.copies: list[bytes] = []

    @property
    def done(self) -> bool:
        return self.position == len(self.stream)

    def read(self, wanted: int, max_bytes: int | None = None, fail: bool = False) -> list:
        buffer = self.receiver.get_buffer(max_bytes)
        assert len(buffer) > 0
        if max_bytes is not None:
            assert len(buffer) <= max_bytes
        if fail:
            return []  # the read found nothing (EAGAIN): no buffer_updated follows
        count = min(len(buffer), wanted, len(self.stream) - self.position)
        buffer[:count] = self.stream[self.position : self.position + count]
        self.position += count
        return self.take(self.receiver.buffer_updated(count))

    def take(self, frames: list) -> list:
        self.frames += frames
        self.copies += [bytes(frame) for frame in frames]
        return frames


def make_receivers(count: int, tiny: bool, shared: ReceiveScratch | None) -> list[FrameReceiver]:
    if tiny:
        scratch = shared or ReceiveScratch(48)
        return [TinyReceiver(1000, scratch=scratch) for _ in range(count)]
    return [FrameReceiver(1000) for _ in range(count)]  # the thread's own scratch


@SETTINGS
@given(streams=streams_st, schedule=schedule_st, tiny=st.booleans())
def test_interleaved_receivers_yield_every_frame_intact_and_in_order(streams, schedule, tiny):
    readers = [Reader(r, p) for r, p in zip(make_receivers(len(streams), tiny, None), streams)]
    step = 0
    while not all(reader.done for reader in readers):
        assert step < 100_000
        index, size, fail = schedule[step % len(schedule)]
        step += 1
        pending = [reader for reader in readers if not reader.done]
        pending[index % len(pending)].read(size, fail=fail and step % 3 == 0)
    for reader in readers:
        assert reader.frames == reader.payloads
        # Later reads into the shared scratch changed none of the frames handed out.
        assert [bytes(frame) for frame in reader.frames] == reader.copies
        # Between frames a receiver holds nothing, and not the scratch either.
        assert reader.receiver.buffered_bytes == 0
        assert reader.receiver._scratch.owner is not reader.receiver


@SETTINGS
@given(streams=streams_st, schedule=schedule_st, splitter_chunk=st.integers(1, 50))
def test_a_splitter_and_receivers_on_the_same_thread(streams, schedule, splitter_chunk):
    # FrameSplitter is a receiver on the thread's scratch too; feeding it between
    # the reads of the connections must not disturb either.
    readers = [Reader(FrameReceiver(1000), p) for p in streams[1:]]
    splitter, split_stream = FrameSplitter(1000), b"".join(framed(p) for p in streams[0])
    split_frames, split_position, step = [], 0, 0
    while split_position < len(split_stream) or not all(reader.done for reader in readers):
        assert step < 100_000
        index, size, _ = schedule[step % len(schedule)]
        step += 1
        pending = [reader for reader in readers if not reader.done]
        if pending and (index % 2 or split_position >= len(split_stream)):
            pending[index % len(pending)].read(size)
        elif split_position < len(split_stream):
            split_frames += splitter.feed(split_stream[split_position : split_position + splitter_chunk])
            split_position += splitter_chunk
    assert split_frames == streams[0]
    for reader in readers:
        assert reader.frames == reader.payloads


def test_an_idle_receiver_holds_no_buffer():
    scratch = ReceiveScratch(64 * 1024)
    busy, idle = FrameReceiver(1 << 20, scratch=scratch), FrameReceiver(1 << 20, scratch=scratch)
    assert Reader(idle, [b"api versions"]).read(1000) == [b"api versions"]
    assert scratch.owner is None and idle.buffered_bytes == 0
    # An unfinished frame stays in place while no one else reads...
    big, small = b"x" * 20_000, b"y" * 5
    partial = Reader(busy, [big, small])
    partial.read(50)
    assert scratch.owner is busy
    # ...and moves out when another receiver needs the scratch: to a buffer of
    # exactly the frame's size when it is over CARRY_BYTES_MAX...
    Reader(idle, [b"z"]).read(10)
    assert scratch.owner is None and busy.buffered_bytes == 50 - SIZE_PREFIX_BYTES
    assert len(busy.get_buffer()) == len(big) - (50 - SIZE_PREFIX_BYTES)
    assert partial.read(100_000) == [big]
    # ...else as a copy, put back in front of the scratch for the next read.
    partial.read(6)
    Reader(idle, [b"z"]).read(10)
    assert scratch.owner is None and busy.buffered_bytes == 6
    # (The read after a large frame is kept short: LEAD_BYTES_AFTER_LARGE.)
    assert len(busy.get_buffer()) == FrameReceiver.LEAD_BYTES_AFTER_LARGE and scratch.owner is busy
    assert partial.read(1000) == [small]
    assert partial.frames == [big, small] and busy.buffered_bytes == 0 and scratch.owner is None
    # A small frame ends the short reads.
    assert len(busy.get_buffer()) == len(scratch.buffer)


def test_after_a_large_frame_the_next_one_is_read_mostly_into_its_own_buffer():
    scratch = ReceiveScratch(64 * 1024)
    receiver = FrameReceiver(1 << 20, scratch=scratch)
    first, second = b"a" * 200_000, b"b" * 200_000
    stream = b"".join(len(f).to_bytes(4, "big") + f for f in (first, second))
    frames, position, reads_into_scratch = [], 0, []
    while position < len(stream):
        buffer = receiver.get_buffer()
        into_scratch = buffer.obj is scratch.buffer
        count = min(len(buffer), len(stream) - position)
        buffer[:count] = stream[position : position + count]
        position += count
        if into_scratch:
            reads_into_scratch.append(count)
        frames += receiver.buffer_updated(count)
    assert frames == [first, second]
    # The first frame's start came through the whole scratch; the second's
    # through a short read only, the rest straight into its own buffer.
    assert reads_into_scratch == [len(scratch.buffer), FrameReceiver.LEAD_BYTES_AFTER_LARGE]


def test_errors_are_raised_through_a_shared_scratch():
    scratch = ReceiveScratch(64)
    other = Reader(FrameReceiver(1000, scratch=scratch), [b"a" * 30])
    other.read(20)
    with pytest.raises(FrameTooLarge):
        Reader(FrameReceiver(10, scratch=scratch), [b"b" * 11]).read(100)
    with pytest.raises(ProtocolError):
        bad = FrameReceiver(10, scratch=scratch)
        bad.get_buffer()[:4] = struct.pack(">i", -5)
        bad.buffer_updated(4)
    assert other.read(100) == [b"a" * 30]


def test_buffer_updated_must_follow_its_own_get_buffer():
    scratch = ReceiveScratch(64)
    first, second = FrameReceiver(100, scratch=scratch), FrameReceiver(100, scratch=scratch)
    first.get_buffer()
    second.get_buffer()
    with pytest.raises(RuntimeError):
        first.buffer_updated(4)


def test_thread_scratch_is_one_per_size():
    assert thread_scratch(4096) is thread_scratch(4096)
    assert thread_scratch(4096) is not thread_scratch(8192)


# --------------------------------------------------------------------------- admission


class Budget:
    """What broker.net.connection's budget does, for the receivers alone: admit a
    frame while less than ``limit`` bytes are admitted and not answered."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self.peak = 0
        self.refused = 0

    def admit(self, size: int) -> bool:
        if self.used >= self.limit:
            self.refused += 1
            return False
        self.used += size
        self.peak = max(self.peak, self.used)
        return True


@SETTINGS
@given(
    streams=streams_st,
    schedule=schedule_st,
    limit=st.integers(1, 400),
    tiny=st.booleans(),
    answer_every=st.integers(1, 5),
    read_while_blocked=st.booleans(),
)
def test_admission_holds_frames_back_and_passes_the_budget_by_one_frame_at_most(
    streams, schedule, limit, tiny, answer_every, read_while_blocked
):
    budget = Budget(limit)
    scratch = ReceiveScratch(48) if tiny else None
    cls = TinyReceiver if tiny else FrameReceiver
    readers = [Reader(cls(1000, scratch=scratch, admit=budget.admit), p) for p in streams]
    unanswered: deque = deque()
    largest = max((len(p) for s in streams for p in s), default=0)
    step = 0
    while not all(reader.done for reader in readers) or any(reader.receiver.blocked for reader in readers):
        assert step < 100_000
        index, size, answer = schedule[step % len(schedule)]
        step += 1
        # A blocked receiver's connection stops reading, but a read already under
        # way may still arrive: the receiver keeps those bytes behind the others.
        readable = [r for r in readers if not r.done and (read_while_blocked or not r.receiver.blocked)]
        if readable and not (answer and step % answer_every == 0 and unanswered):
            reader = readable[index % len(readable)]
            # As the connection does: while the budget is used up, read no more
            # than the rest of a frame already admitted, or a size prefix.
            max_bytes = (reader.receiver.admitted_bytes_due or SIZE_PREFIX_BYTES) if budget.used >= limit else None
            unanswered.extend(reader.read(size, max_bytes))
        elif unanswered:
            budget.used -= len(unanswered.popleft())
            for reader in readers:
                if reader.receiver.blocked and budget.used < limit:
                    unanswered.extend(reader.take(reader.receiver.resume()))
        else:
            # Nothing is readable or waiting for an answer: then nothing is admitted
            # either, so no receiver can be refused.
            assert not any(reader.receiver.blocked for reader in readers)
        assert budget.used <= limit - 1 + largest
    for reader in readers:
        assert reader.frames == reader.payloads
        assert [bytes(frame) for frame in reader.frames] == reader.copies
        assert reader.receiver.buffered_bytes == 0
    assert budget.peak <= limit - 1 + largest
    assert budget.used == sum(len(frame) for frame in unanswered)


def test_admission_is_asked_once_per_frame():
    asked = []
    payloads = [b"a" * 10, b"", b"b" * 300, b"c" * 3]
    reader = Reader(FrameReceiver(1000, scratch=ReceiveScratch(64), admit=lambda size: asked.append(size) or True), payloads)
    while not reader.done:
        reader.read(5)
    assert reader.frames == payloads
    assert asked == [10, 0, 300, 3]


def test_a_refused_frame_waits_for_resume():
    allowed = [False]
    receiver = FrameReceiver(1000, admit=lambda size: allowed[0])
    reader = Reader(receiver, [b"one", b"two"])
    assert reader.read(1000) == []
    assert receiver.blocked and receiver.buffered_bytes == len(reader.stream)
    assert receiver.resume() == []  # still refused
    allowed[0] = True
    assert reader.take(receiver.resume()) == [b"one", b"two"]
    assert not receiver.blocked and receiver.buffered_bytes == 0


def test_bytes_read_while_blocked_and_release():
    allowed = [False]
    scratch = ReceiveScratch(64)
    receiver = FrameReceiver(1000, scratch=scratch, admit=lambda size: allowed[0])
    reader = Reader(receiver, [b"one", b"two", b"three" * 20])
    assert reader.read(9) == [] and receiver.blocked
    assert reader.read(3) == [] and scratch.owner is None
    assert receiver.buffered_bytes == 12
    allowed[0] = True
    assert reader.take(receiver.resume()) == [b"one"]
    assert receiver.resume() == []  # not blocked: nothing held back
    reader.read(40)
    assert receiver.buffered_bytes > 0
    receiver.release()
    assert receiver.buffered_bytes == 0 and scratch.owner is None and not receiver.blocked
