"""Finding batches that went bad on disk after they were written.

A batch is CRC-checked when it arrives (a producer's, or a leader's on a
follower), and the log's recovery re-checks what an unclean stop may have
torn. Nothing else reads a batch's CRC before serving it: a consumer fetch is
a file slice sent unread, as in Kafka, and clients check CRCs themselves. A
byte that flips on disk later (a bad sector, a stray write) would otherwise
reach a follower, a Spark job or a consumer. Two readers look for it here:

* :func:`first_corrupt_batch` checks the bytes of one read: the broker runs
  it on what it is about to send to a follower replica, so that a corrupt
  batch never spreads to another replica;
* :class:`SegmentScrubber` re-reads segment files in the background (the
  broker paces it, ``log.scrub.bytes.per.second``), so that corruption in
  data no follower reads again (a closed segment every replica already holds)
  is found before a consumer meets it.

Nothing here changes a log: what the broker does about a corrupt batch is
broker/replica/corruption.py's.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

from protocol.exceptions import ProtocolError
from protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    MIN_BATCH_LENGTH_BYTES,
    iter_batches,
    parse_batch_header,
    validate_batch,
)

# One read of the scrubber: whole batches are checked, so a read holds at
# least one batch (a larger batch is read whole on its own).
SCRUB_CHUNK_BYTES = 256 * 1024
# A batch's header up to its last offset delta: base offset, batch length,
# partition leader epoch, magic, CRC32C (of every byte from the attributes on).
_FRAME = struct.Struct(">qiibIhi")  # ... then attributes and last offset delta


class CorruptBatch(NamedTuple):
    """A batch that fails its checks: at ``position`` of the bytes read (of the
    segment file, for the scrubber); ``offset`` is where the log must be cut so
    that it holds nothing from this batch on: the batch's base offset when its
    header is readable and plausible, else the offset after the batch before it."""

    position: int
    offset: int
    reason: str


def first_corrupt_batch(data, first_offset: int) -> CorruptBatch | None:
    """The first batch of ``data`` (whole batches, as a read of a log returns
    them; a trailing partial batch is ignored) that fails its framing or CRC
    check, or None when every batch is sound. ``first_offset`` is an offset
    at or below the first batch's base offset (a cut point if the first
    batch's own header is unreadable).

    The leader runs this on every read for a follower, so the walk is lean:
    one header unpack and one CRC32C per batch (about a microsecond and a
    half for a one-record batch); only a batch that fails goes through
    ``validate_batch`` again, for the reason."""
    return walk_batches(data, first_offset)[2]


def walk_batches(data, first_offset: int) -> tuple[int, int, CorruptBatch | None]:
    """``(end of the sound batches, the offset after them, the first corrupt
    batch or None)`` of ``data``, as :func:`first_corrupt_batch` checks it."""
    view = memoryview(data)
    end = len(view)
    position = 0
    next_offset = first_offset
    unpack = _FRAME.unpack_from
    while end - position >= BATCH_HEADER_BYTES:
        base_offset, length, _epoch, magic, stored_crc, _attributes, last_delta = unpack(view, position)
        size = length + LOG_OVERHEAD_BYTES
        if length < MIN_BATCH_LENGTH_BYTES or magic != 2:
            break  # bad framing: the detailed walk says where and why
        if size > end - position:
            return position, next_offset, None  # a trailing partial batch
        if crc32c(view[position + ATTRIBUTES_OFFSET : position + size]) != stored_crc:
            break
        position += size
        next_offset = base_offset + last_delta + 1
    else:
        return position, next_offset, None
    return position, next_offset, _explain_corrupt_batch(data, first_offset)


def _explain_corrupt_batch(data, first_offset: int) -> CorruptBatch | None:
    next_offset = first_offset
    position = 0
    try:
        for position, size, header in iter_batches(data, allow_truncated_tail=True):
            try:
                validate_batch(data, position, size)
            except ProtocolError as exc:
                offset = header.base_offset if header.base_offset >= next_offset else next_offset
                return CorruptBatch(position, offset, _reason(exc, position))
            next_offset = header.base_offset + header.last_offset_delta + 1
            position += size
    except ProtocolError as exc:  # the framing itself (length, magic)
        return CorruptBatch(position, next_offset, _reason(exc, position))
    return None


def _reason(exc: ProtocolError, position: int) -> str:
    """The check's message without its position in the bytes read, which the
    caller states in its own terms (a file position, an offset)."""
    return str(exc).replace(f" at position {position}", "")


@dataclass
class ScrubStep:
    """What one :meth:`SegmentScrubber.step` found: ``verified_to``, the file
    position up to which every batch checked out, and ``next_offset``, the
    offset after the last of them; ``corrupt``, the bad batch at
    ``verified_to`` (None if none); ``bytes_read``, for the pacing."""

    verified_to: int
    next_offset: int
    corrupt: CorruptBatch | None
    bytes_read: int


class SegmentScrubber:
    """Checks one segment file's batches from a position up to an end, a chunk
    at a time. Reads with ``pread`` on its own descriptor (never mmapped), so a
    file the broker truncates or deletes meanwhile only ends the walk: the
    caller confirms a finding against the live log before acting on it."""

    def __init__(self, path, base_offset: int):
        self.path = path
        self.base_offset = base_offset

    def step(self, position: int, end: int, next_offset: int, chunk_bytes: int = SCRUB_CHUNK_BYTES) -> ScrubStep:
        """Check the whole batches in ``[position, end)`` (at most about
        ``chunk_bytes`` of them, at least one); ``position`` is a batch start
        and ``next_offset`` the offset after the batch before it (the
        segment's base offset at position 0)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:  # deleted meanwhile (retention, a swap): the live log says what is next
            return ScrubStep(position, next_offset, None, 0)
        try:
            want = min(chunk_bytes, end - position)
            if want <= 0:
                return ScrubStep(position, next_offset, None, 0)
            head = os.pread(fd, min(max(want, BATCH_HEADER_BYTES), end - position), position)
            if len(head) >= BATCH_HEADER_BYTES:
                try:
                    first_size = parse_batch_header(head).size_bytes
                except ProtocolError as exc:
                    return ScrubStep(position, next_offset, CorruptBatch(position, next_offset, str(exc)), len(head))
                if first_size > len(head) and position + first_size <= end:
                    head = os.pread(fd, first_size, position)  # one batch larger than the chunk
            data = head
        finally:
            os.close(fd)
        checked, after, found = walk_batches(data, next_offset)
        if found is not None:
            corrupt = found._replace(position=position + found.position)
            return ScrubStep(corrupt.position, after, corrupt, len(data))
        return ScrubStep(position + checked, after, None, len(data))
