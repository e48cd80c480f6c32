"""The transaction coordinator's data: configuration, effects, results and the
metadata of one transactional id (Kafka's TransactionMetadata), with the
pending transition that waits for its record to be stored.

Pure data; the rules that change it are in ``coordinator``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.coordinators.effects import Store  # shared with the group coordinator; re-exported here
from protocol.errors import ErrorCode
from protocol.transaction_state import TransactionValue, TxnState

OFFSETS_TOPIC = "__consumer_offsets"
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
EPOCH_MAX = 32767
# Kafka never lets a client reach Short.MaxValue, so a fence can always bump once more.
EPOCH_EXHAUSTED = EPOCH_MAX - 1

Reply = Callable[[object], None]


# Transactions version 2 (KIP-890 part 2): the client's transaction version a
# transaction runs under, as Kafka stores it (TransactionLogValue's
# ClientTransactionVersion). Kafka derives it from the request versions:
# EndTxn v5+ and AddPartitionsToTxn v4+ (a partition leader adding for
# Produce v12 / TxnOffsetCommit v5) are version 2, the others version 0.
TRANSACTION_VERSION_1 = 0
TRANSACTION_VERSION_2 = 2


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= EPOCH_EXHAUSTED


@dataclass(frozen=True)
class TxnConfig:
    transaction_partitions: int = 50  # transaction.state.log.num.partitions
    offsets_partitions: int = 50  # offsets.topic.num.partitions: AddOffsetsToTxn's group partition
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    # A completion record that failed to store is retried after this, doubling up to the max.
    store_retry_backoff_ms: int = 100
    store_retry_backoff_max_ms: int = 5_000


# --------------------------------------------------------------------------- effects
# Store (broker.coordinators.effects) and these two.


@dataclass(frozen=True)
class SendMarkers:
    transactional_id: str
    partition: int  # of __transaction_state
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class AllocateProducerId:
    token: int


Effect = Store | SendMarkers | AllocateProducerId


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class EndResult:
    """EndTxn's answer under transactions version 2: the producer id and epoch
    the producer continues with (the epoch bumped at every transaction end, a
    new producer id once the epoch is exhausted)."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class TxnDescription:
    transactional_id: str
    state: TxnState
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class TxnListing:
    transactional_id: str
    producer_id: int
    state: TxnState


# --------------------------------------------------------------------------- state


class Kind(enum.Enum):
    INIT = "InitProducerId"
    ADD = "AddPartitionsToTxn"
    END = "EndTxn"
    FENCE = "fence"  # InitProducerId found the transaction ongoing
    TIMEOUT = "timeout"  # the coordinator aborts an expired transaction
    COMPLETE = "complete"  # markers, then CompleteCommit/CompleteAbort
    DEAD = "expiration"


@dataclass(eq=False)
class Pending:
    """A transition waiting for its record (or, COMPLETE, first for its markers)."""

    kind: Kind
    target: TransactionValue
    last_producer_epoch: int
    previous_producer_id: int
    reply: Reply | None = None
    token: int | None = None
    remaining: set[tuple[str, int]] = field(default_factory=set)
    attempts: int = 0
    # An EndTxn of transactions version 2: answered with an EndResult.
    answers_identity: bool = False


@dataclass(eq=False)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    start_ms: int
    last_update_ms: int
    # Not stored: the epoch before the last bump (a retried bump gets the same
    # epoch back) and the producer id before the last InitProducerId (a retry
    # across a producer id rotation), as Kafka keeps them (in memory only).
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    # False for an id created by an InitProducerId whose record is not stored yet.
    stored: bool = True
    pending: Pending | None = None
    # Transactions version 2, stored (tagged fields of TransactionLogValue v1) so
    # that a new coordinator completes the transaction as the old one would:
    # the client's transaction version, and the producer id a completion moves
    # to when the end of the transaction exhausted the epoch.
    client_transaction_version: int = TRANSACTION_VERSION_1
    next_producer_id: int = NO_PRODUCER_ID

    def value(self) -> TransactionValue:
        v2 = self.client_transaction_version >= TRANSACTION_VERSION_2
        return TransactionValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms,
            state=self.state,
            partitions=self.partitions,
            last_update_ms=self.last_update_ms,
            start_ms=self.start_ms,
            # Version 1 records (the tagged fields) only for version 2
            # transactions, as Kafka writes version 0 below transaction.version 2.
            previous_producer_id=self.previous_producer_id if v2 else NO_PRODUCER_ID,
            next_producer_id=self.next_producer_id if v2 else NO_PRODUCER_ID,
            client_transaction_version=self.client_transaction_version,
        )

    def apply(self, pending: Pending) -> None:
        target = pending.target
        self.producer_id = target.producer_id
        self.producer_epoch = target.producer_epoch
        self.timeout_ms = target.timeout_ms
        self.state = target.state
        self.partitions = target.partitions
        self.start_ms = target.start_ms
        self.last_update_ms = target.last_update_ms
        self.last_producer_epoch = pending.last_producer_epoch
        self.previous_producer_id = pending.previous_producer_id
        self.client_transaction_version = target.client_transaction_version
        self.next_producer_id = target.next_producer_id
        self.stored = True


@dataclass(eq=False)
class StoreWaiter:
    partition: int
    coordinator_epoch: int
    entries: list[tuple[str, Pending]]


@dataclass(eq=False)
class Allocation:
    partition: int
    reply: Reply
    resume: Callable[[int, int], list]  # (now_ms, producer_id) -> effects


PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
COMPLETED = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
