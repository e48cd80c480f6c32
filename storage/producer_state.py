"""Per-partition state of idempotent and transactional producers: sequence checks,
deduplication, open and completed transactions.

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

Transactions (Kafka's ProducerStateManager): a producer's first
transactional batch opens a transaction on the partition
(``current_txn_first_offset``); its COMMIT or ABORT marker (a control batch
the coordinator has written) closes it. A non-transactional batch while one
is open is INVALID_TXN_STATE; a marker whose producer epoch is older than
the producer's is INVALID_PRODUCER_EPOCH, one whose coordinator epoch is
older than the last marker's TRANSACTION_COORDINATOR_FENCED (a newer
producer epoch on a marker is the coordinator's bump, and is taken). Open
transactions are kept in order of their first offset, so the first
*undecided* offset is at hand; completed ones stay *unreplicated* until the
high watermark passes their marker, and the first *unstable* offset (the
last stable offset's bound) is the earliest first offset of either kind. A
completed transaction carries the partition's last stable offset at its
completion (the first offset of the oldest other open transaction, else
the marker's offset + 1), which the aborted-transaction index stores.
Producers with an open transaction never expire (they go only when the
log start passes their last batch, their transaction with them).

KIP-890 verification guards: before asking the transaction coordinator
whether a producer's transaction includes this partition, the broker takes
an opaque guard (:meth:`ProducerStateManager.verification_guard_for`); the
first transactional batch is appended only if the guard is still the
producer's. A marker, a newer producer epoch or the producer's removal
replaces it, so a verification that raced with an abort cannot open a
transaction nobody knows about.

Pure: no IO, no clock (times are passed in). The log feeds it headers as it
appends and as it re-reads batches when opening; storage.producer_snapshot
persists it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from protocol.errors import ErrorCode

BATCHES_REMEMBERED = 5
INT32_MAX = 2**31 - 1
NO_SEQUENCE = -1
NO_COORDINATOR_EPOCH = -1
NO_TXN = -1  # current_txn_first_offset of a producer without an open transaction


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
    # The coordinator epoch of the last marker written for this producer.
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    # First offset of the producer's open transaction on this partition, or NO_TXN.
    current_txn_first_offset: int = NO_TXN

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1

    @property
    def in_transaction(self) -> bool:
        return self.current_txn_first_offset >= 0


class CompletedTxn(NamedTuple):
    """A transaction that a marker closed."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool
    # The partition's last stable offset once the marker is written (see the module docstring).
    last_stable_offset: int


class VerificationGuard:
    """An opaque token: only its identity matters."""

    __slots__ = ("producer_id",)

    def __init__(self, producer_id: int):
        self.producer_id = producer_id

    def __repr__(self) -> str:
        return f"VerificationGuard(producer {self.producer_id}, {id(self):#x})"


def last_sequence_of(first_sequence: int, last_offset_delta: int) -> int:
    if first_sequence == NO_SEQUENCE:  # a coordinator's batch (TxnOffsetCommit) has no sequence
        return NO_SEQUENCE
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
        # Open transactions: first offset -> producer id, in ascending first offset
        # (appends come in offset order; loads and reloads keep the order).
        self._ongoing: dict[int, int] = {}
        # Completed transactions whose marker may not be replicated yet: marker
        # offset -> (producer id, first offset), in ascending marker offset.
        self._unreplicated: dict[int, tuple[int, int]] = {}
        # producer id -> (guard, when it was made, ms)
        self._guards: dict[int, tuple[VerificationGuard, int]] = {}

    def __len__(self) -> int:
        return len(self.producers)

    # ----------------------------------------------------------------- checks

    def check(self, producer_id: int, epoch: int, first_sequence: int, last_offset_delta: int) -> BatchMetadata | None:
        """Validate a batch about to be appended. Returns the remembered batch if it is
        a duplicate, None if it may be appended; raises ProducerStateError otherwise."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        last_sequence = last_sequence_of(first_sequence, last_offset_delta)
        self.check_epoch(producer_id, epoch)
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

    def check_epoch(self, producer_id: int, epoch: int) -> None:
        """INVALID_PRODUCER_EPOCH for an epoch older than the producer's (a zombie)."""
        entry = self.producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise ProducerStateError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch}",
            )

    def check_transaction(
        self, producer_id: int, epoch: int, transactional: bool, verification_guard: object | None
    ) -> None:
        """The transaction rules of a data batch (after its epoch and sequence checks):
        a non-transactional batch while the producer's transaction is open is
        INVALID_TXN_STATE; so is a transactional batch that would open one when
        ``verification_guard`` (not None: verification was asked for) is not the
        producer's current guard."""
        entry = self.producers.get(producer_id)
        open_here = entry is not None and entry.in_transaction
        if not transactional:
            if open_here:
                raise ProducerStateError(
                    ErrorCode.INVALID_TXN_STATE,
                    f"producer {producer_id} wrote a non-transactional batch inside its transaction"
                    f" started at offset {entry.current_txn_first_offset}",
                )
            return
        if verification_guard is None or (open_here and entry.epoch == epoch):
            return
        current = self._guards.get(producer_id)
        if current is None or current[0] is not verification_guard:
            raise ProducerStateError(
                ErrorCode.INVALID_TXN_STATE,
                f"producer {producer_id}: transactional batch without an open transaction or a valid verification",
            )

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """A marker the transaction coordinator asks to write: INVALID_PRODUCER_EPOCH for an
        older producer epoch, TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        self.check_epoch(producer_id, epoch)
        if coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"producer {producer_id}: marker of coordinator epoch {coordinator_epoch},"
                f" older than the current {entry.coordinator_epoch}",
            )

    # ----------------------------------------------------------------- updates

    def _entry_at_epoch(self, producer_id: int, epoch: int) -> ProducerEntry | None:
        """The producer's entry moved to ``epoch`` if that is newer (its batches
        belong to the old epoch and go); None when ``epoch`` is older."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, epoch)
        elif epoch > entry.epoch:
            entry.epoch = epoch
            entry.batches = deque(maxlen=BATCHES_REMEMBERED)
            self._guards.pop(producer_id, None)
        elif epoch < entry.epoch:
            return None
        return entry

    def update(
        self,
        producer_id: int,
        epoch: int,
        first_sequence: int,
        last_offset_delta: int,
        first_offset: int,
        timestamp_ms: int,
        *,
        transactional: bool = False,
    ) -> None:
        """Record a data batch that was appended (or found when re-reading the log)."""
        entry = self._entry_at_epoch(producer_id, epoch)
        if entry is None:
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
        if transactional and not entry.in_transaction:
            entry.current_txn_first_offset = first_offset
            self._add_ongoing(first_offset, producer_id)

    def apply_marker(
        self, producer_id: int, epoch: int, coordinator_epoch: int, offset: int, timestamp_ms: int, *, commit: bool
    ) -> CompletedTxn | None:
        """Record a COMMIT/ABORT marker written at ``offset`` (appended, replicated or
        re-read). Returns the transaction it closed, or None when the producer had
        none open here (Kafka writes such a marker but indexes nothing for it)."""
        entry = self._entry_at_epoch(producer_id, epoch)
        if entry is None:  # a follower or a replay takes what the leader wrote, older epoch or not
            entry = self.producers[producer_id]
        completed = None
        if entry.in_transaction:
            first = entry.current_txn_first_offset
            completed = CompletedTxn(producer_id, first, offset, not commit, self._stable_offset_at(producer_id, offset))
            self._ongoing.pop(first, None)
            self._unreplicated[offset] = (producer_id, first)
        entry.current_txn_first_offset = NO_TXN
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp_ms = timestamp_ms
        self._guards.pop(producer_id, None)
        return completed

    def _stable_offset_at(self, producer_id: int, marker_offset: int) -> int:
        """The LSO once ``producer_id``'s marker at ``marker_offset`` is written:
        the oldest other open transaction's first offset, else the marker's next."""
        for first, owner in self._ongoing.items():  # at most two steps: one transaction per producer
            if owner != producer_id:
                return first
        return marker_offset + 1

    def _add_ongoing(self, first_offset: int, producer_id: int) -> None:
        ongoing = self._ongoing
        out_of_order = bool(ongoing) and first_offset < next(reversed(ongoing))
        ongoing[first_offset] = producer_id
        if out_of_order:
            self._ongoing = dict(sorted(ongoing.items()))

    def load_entry(self, entry: ProducerEntry) -> None:
        """Add an entry read from a snapshot (its open transaction included)."""
        self.producers[entry.producer_id] = entry
        if entry.in_transaction:
            self._add_ongoing(entry.current_txn_first_offset, entry.producer_id)

    def clear(self) -> None:
        """Forget every producer and transaction (before a reload); guards stay, as
        verifications in flight do not depend on what the log holds."""
        self.producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()

    # ----------------------------------------------------------------- transactions

    def has_ongoing_transaction(self, producer_id: int, epoch: int | None = None) -> bool:
        """Whether the producer has a transaction open here (at ``epoch``, if given:
        under transactions version 2 the next transaction comes at the bumped
        epoch while the last one may still wait for its marker here)."""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.in_transaction and (epoch is None or entry.epoch == epoch)

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction, oldest first."""
        return {producer_id: first for first, producer_id in self._ongoing.items()}

    def first_undecided_offset(self) -> int | None:
        """First offset of the oldest open transaction."""
        return next(iter(self._ongoing), None)

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The earliest first offset of an open transaction or of a completed one whose
        marker is at or above ``high_watermark``; completed transactions whose marker
        is below it are forgotten here (the high watermark only moves up between truncations)."""
        unreplicated = self._unreplicated
        while unreplicated:
            marker = next(iter(unreplicated))
            if marker >= high_watermark:
                break
            del unreplicated[marker]
        first = next(iter(self._ongoing), None)
        for _, txn_first in unreplicated.values():
            if first is None or txn_first < first:
                first = txn_first
        return first

    # ----------------------------------------------------------------- verification

    def verification_guard_for(self, producer_id: int, now_ms: int) -> VerificationGuard:
        """The producer's current guard, made now if it has none."""
        current = self._guards.get(producer_id)
        if current is None:
            current = self._guards[producer_id] = (VerificationGuard(producer_id), now_ms)
        return current[0]

    def verification_guard(self, producer_id: int) -> VerificationGuard | None:
        current = self._guards.get(producer_id)
        return None if current is None else current[0]

    # ----------------------------------------------------------------- removal

    def _remove(self, producer_ids: list[int]) -> None:
        for producer_id in producer_ids:
            entry = self.producers.pop(producer_id)
            if entry.in_transaction:
                self._ongoing.pop(entry.current_txn_first_offset, None)
            self._guards.pop(producer_id, None)

    def truncate_from(self, offset: int) -> None:
        """Forget batches at or after ``offset`` (the log was cut there). Transactions
        that started there are gone; those whose marker was cut are open again. (The
        log itself reloads from a snapshot and replays instead, as Kafka does.)"""
        for marker in [m for m in self._unreplicated if m >= offset]:
            producer_id, first = self._unreplicated.pop(marker)
            entry = self.producers.get(producer_id)
            if first < offset and entry is not None and not entry.in_transaction:
                entry.current_txn_first_offset = first
                self._add_ongoing(first, producer_id)
        gone = []
        for producer_id, entry in self.producers.items():
            if entry.current_txn_first_offset >= offset:
                self._ongoing.pop(entry.current_txn_first_offset, None)
                entry.current_txn_first_offset = NO_TXN
            kept = [b for b in entry.batches if b.last_offset < offset]
            if not kept and not entry.in_transaction:
                gone.append(producer_id)
            elif len(kept) != len(entry.batches):
                entry.batches = deque(kept, maxlen=BATCHES_REMEMBERED)
        self._remove(gone)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Drop producers idle for ``expiration_ms`` or more (Kafka's
        ``currentTimeMs - lastTimestamp >= producerIdExpirationMs``) unless their
        transaction is open, and verification guards that old; returns the producers' ids."""
        expired = [
            pid
            for pid, entry in self.producers.items()
            if not entry.in_transaction and now_ms - entry.last_timestamp_ms >= expiration_ms
        ]
        self._remove(expired)
        for producer_id in [p for p, (_, made_ms) in self._guards.items() if now_ms - made_ms >= expiration_ms]:
            del self._guards[producer_id]
        return expired

    def remove_below(self, log_start_offset: int) -> list[int]:
        """Drop producers whose last batch ends below ``log_start_offset`` (deleted
        by retention or DeleteRecords), with their open transaction if any (its data
        is gone), and completed transactions whose marker is below it; returns the
        producers' ids."""
        gone = [
            pid for pid, entry in self.producers.items() if entry.batches and entry.batches[-1].last_offset < log_start_offset
        ]
        self._remove(gone)
        unreplicated = self._unreplicated
        while unreplicated and next(iter(unreplicated)) < log_start_offset:
            del unreplicated[next(iter(unreplicated))]
        return gone
