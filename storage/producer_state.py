"""Per-partition state of idempotent producers: sequence checks and deduplication.

For each producer id the partition remembers its epoch and the sequence and
offset ranges of its last five batches (a producer keeps at most five
requests in flight, so a retry is always one of them). A batch is checked
with batch-header fields only:

- an epoch below the known one: INVALID_PRODUCER_EPOCH (a zombie);
- a new epoch must start at sequence 0;
- the same epoch: a batch equal to a remembered one is a duplicate and is
  answered with the offsets it got the first time; otherwise its first
  sequence must follow the last one (wrapping after INT32_MAX), or
  OUT_OF_ORDER_SEQUENCE_NUMBER;
- a producer this partition knows nothing about (its state was never seen, or
  was lost with the data that carried it) is accepted at any sequence, as
  Kafka does.

Idle producers expire (``producer.id.expiration.ms``, measured from the
max timestamp of a producer's last batch, as Kafka does), and producers
whose last batch lies below the log start offset are dropped when retention
or DeleteRecords move it; either way the producer's next batch is accepted
at any sequence, by the rule above.

Pure: no IO, no clock. The log feeds it headers as it appends and as it
re-reads batches when opening; storage.producer_snapshot persists it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from protocol.errors import ErrorCode

BATCHES_REMEMBERED = 5
INT32_MAX = 2**31 - 1


class ProducerStateError(Exception):
    def __init__(self, error_code: ErrorCode, message: str):
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=BATCHES_REMEMBERED))
    last_timestamp_ms: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


def last_sequence_of(first_sequence: int, last_offset_delta: int) -> int:
    last = first_sequence + last_offset_delta
    return last - INT32_MAX - 1 if last > INT32_MAX else last


def first_sequence_of(last_sequence: int, last_offset_delta: int) -> int:
    """The inverse of :func:`last_sequence_of` (Kafka's ``decrementSequence``)."""
    if last_sequence < last_offset_delta:
        return INT32_MAX - (last_offset_delta - last_sequence) + 1
    return last_sequence - last_offset_delta


def next_sequence(sequence: int) -> int:
    return 0 if sequence == INT32_MAX else sequence + 1


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def check(self, producer_id: int, epoch: int, first_sequence: int, last_offset_delta: int) -> BatchMetadata | None:
        """Validate a batch about to be appended. Returns the remembered batch if it is
        a duplicate, None if it may be appended; raises ProducerStateError otherwise."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        last_sequence = last_sequence_of(first_sequence, last_offset_delta)
        if epoch < entry.epoch:
            raise ProducerStateError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch}",
            )
        if epoch > entry.epoch:
            if first_sequence != 0:
                raise ProducerStateError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id} started epoch {epoch} at sequence {first_sequence}, not 0",
                )
            return None
        for remembered in entry.batches:
            if remembered.first_sequence == first_sequence and remembered.last_sequence == last_sequence:
                return remembered
        expected = next_sequence(entry.last_sequence)
        if entry.batches and first_sequence != expected:
            raise ProducerStateError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {producer_id} epoch {epoch}: sequence {first_sequence}, expected {expected}",
            )
        return None

    def update(self, producer_id: int, epoch: int, first_sequence: int, last_offset_delta: int, first_offset: int, timestamp_ms: int) -> None:
        """Record a batch that was appended (or found when re-reading the log)."""
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = ProducerEntry(producer_id, epoch)
            self.producers[producer_id] = entry
        elif epoch < entry.epoch:
            return  # an old batch re-read from disk; the newer epoch already superseded it
        entry.batches.append(
            BatchMetadata(
                first_sequence,
                last_sequence_of(first_sequence, last_offset_delta),
                first_offset,
                first_offset + last_offset_delta,
                timestamp_ms,
            )
        )
        # Kafka's lastTimestamp: the max timestamp of the producer's last batch.
        entry.last_timestamp_ms = timestamp_ms

    def truncate_from(self, offset: int) -> None:
        """Forget batches at or after ``offset`` (the log was cut there)."""
        for producer_id in list(self.producers):
            entry = self.producers[producer_id]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if not kept:
                del self.producers[producer_id]
            elif len(kept) != len(entry.batches):
                entry.batches = deque(kept, maxlen=BATCHES_REMEMBERED)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Drop producers idle for ``expiration_ms`` or more (Kafka's
        ``currentTimeMs - lastTimestamp >= producerIdExpirationMs``); returns their ids."""
        expired = [pid for pid, entry in self.producers.items() if now_ms - entry.last_timestamp_ms >= expiration_ms]
        for producer_id in expired:
            del self.producers[producer_id]
        return expired

    def remove_below(self, log_start_offset: int) -> list[int]:
        """Drop producers whose last batch ends below ``log_start_offset`` (deleted
        by retention or DeleteRecords); returns their ids."""
        gone = [
            pid for pid, entry in self.producers.items() if entry.batches and entry.batches[-1].last_offset < log_start_offset
        ]
        for producer_id in gone:
            del self.producers[producer_id]
        return gone
