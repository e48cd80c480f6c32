"""Records of ``__transaction_state``: one transactional id's coordinator state.

The key is TransactionLogKey version 0 (the transactional id); the value is
TransactionLogValue version 0 or 1, each prefixed with its int16 version like
every internal-topic record. A record without a value is a tombstone: the
transactional id expired, and compaction will drop the key. Version 1 is the
first flexible version and adds three tagged fields (the previous and next
producer ids and the client's transaction version, all for transactions
version 2); a value is written as version 0 unless one of them differs from
its default, which is what Kafka does while the ``transaction.version``
feature is below 2. Reading accepts both versions.

A transaction's partitions are stored only outside the Empty state (Kafka
writes a null list for Empty and ignores any list it finds there).

Pure codec over the declarations below, shared by the transaction coordinator
(broker/transactions) and any tool that prints the topic.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from protocol.codec import decode_struct, encode_struct
from protocol.exceptions import ProtocolError
from protocol.schema import INT8, INT16, INT32, INT64, STRING, Array, DataMessage, F, Struct

TRANSACTION_STATE_TOPIC = "__transaction_state"

TRANSACTION_LOG_KEY = DataMessage(
    "TransactionLogKey", "0", flexible="none",
    fields=[F("transactional_id", STRING, "0")],
)

TRANSACTION_LOG_VALUE = DataMessage(
    "TransactionLogValue", "0-1", flexible="1+",
    fields=[
        F("producer_id", INT64),
        # Tagged fields of version 1 exist only as tagged fields (their versions
        # default to their tagged versions, as in Kafka's message generator).
        F("previous_producer_id", INT64, "1+", tagged="1+", tag=0, default=-1),
        F("next_producer_id", INT64, "1+", tagged="1+", tag=1, default=-1),
        F("producer_epoch", INT16),
        F("transaction_timeout_ms", INT32),
        F("transaction_status", INT8),
        F("transaction_partitions", Array(Struct("PartitionsSchema", [
            F("topic", STRING),
            F("partition_ids", Array(INT32)),
        ])), nullable="0+"),
        F("transaction_last_update_timestamp_ms", INT64),
        F("transaction_start_timestamp_ms", INT64),
        F("client_transaction_version", INT16, "1+", tagged="1+", tag=2, default=0),
    ],
)

# The declarations of this topic's records, by name (the conformance test reads them).
MESSAGES = {m.name: m for m in (TRANSACTION_LOG_KEY, TRANSACTION_LOG_VALUE)}

KEY_VERSION = 0
VALUE_VERSION = 0
VALUE_VERSION_WITH_TAGGED_FIELDS = 1

_INT16 = struct.Struct(">h")
_VALUE_CLASS = TRANSACTION_LOG_VALUE.struct.cls
_PARTITIONS_CLASS = TRANSACTION_LOG_VALUE.struct.fields[6].type.item.cls


class TxnState(enum.IntEnum):
    """Kafka's transaction states, by the id stored in ``transaction_status``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use ("PrepareCommit")."""
        return _DISPLAY_NAMES[self]

    @classmethod
    def from_display_name(cls, name: str) -> TxnState | None:
        return _BY_DISPLAY_NAME.get(name)


_DISPLAY_NAMES = {state: "".join(part.title() for part in state.name.split("_")) for state in TxnState}
_BY_DISPLAY_NAME = {name: state for state, name in _DISPLAY_NAMES.items()}


@dataclass(frozen=True)
class TransactionValue:
    """One TransactionLogValue, with partitions as (topic, partition) pairs."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def key_bytes(transactional_id: str) -> bytes:
    out = bytearray(_INT16.pack(KEY_VERSION))
    encode_struct(TRANSACTION_LOG_KEY.struct, KEY_VERSION, False, TRANSACTION_LOG_KEY.struct.cls(transactional_id=transactional_id), out)
    return bytes(out)


def decode_key(data: bytes) -> str:
    """The transactional id of a key; ProtocolError for anything else."""
    if len(data) < 2:
        raise ProtocolError("__transaction_state key without a version")
    version = _INT16.unpack_from(data)[0]
    if version not in TRANSACTION_LOG_KEY.versions:
        raise ProtocolError(f"__transaction_state key version {version} is unknown")
    key, _ = decode_struct(TRANSACTION_LOG_KEY.struct, version, False, data, 2)
    return key.transactional_id


def value_bytes(value: TransactionValue) -> bytes:
    tagged = (
        value.previous_producer_id != -1 or value.next_producer_id != -1 or value.client_transaction_version != 0
    )
    version = VALUE_VERSION_WITH_TAGGED_FIELDS if tagged else VALUE_VERSION
    partitions = None
    if value.state != TxnState.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(value.partitions):
            by_topic.setdefault(topic, []).append(partition)
        partitions = [_PARTITIONS_CLASS(topic=topic, partition_ids=ids) for topic, ids in by_topic.items()]
    record = _VALUE_CLASS(
        producer_id=value.producer_id,
        previous_producer_id=value.previous_producer_id,
        next_producer_id=value.next_producer_id,
        producer_epoch=value.producer_epoch,
        transaction_timeout_ms=value.timeout_ms,
        transaction_status=int(value.state),
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=value.last_update_ms,
        transaction_start_timestamp_ms=value.start_ms,
        client_transaction_version=value.client_transaction_version,
    )
    out = bytearray(_INT16.pack(version))
    encode_struct(TRANSACTION_LOG_VALUE.struct, version, version in TRANSACTION_LOG_VALUE.flexible, record, out)
    return bytes(out)


def decode_value(data: bytes | None) -> TransactionValue | None:
    """A value, or None for a tombstone; ProtocolError for bad bytes or an unknown state."""
    if data is None:
        return None
    if len(data) < 2:
        raise ProtocolError("__transaction_state value without a version")
    version = _INT16.unpack_from(data)[0]
    if version not in TRANSACTION_LOG_VALUE.versions:
        raise ProtocolError(f"__transaction_state value version {version} is unknown")
    record, _ = decode_struct(TRANSACTION_LOG_VALUE.struct, version, version in TRANSACTION_LOG_VALUE.flexible, data, 2)
    try:
        state = TxnState(record.transaction_status)
    except ValueError:
        raise ProtocolError(f"__transaction_state value with unknown state {record.transaction_status}") from None
    partitions: frozenset[tuple[str, int]] = frozenset()
    if state != TxnState.EMPTY and record.transaction_partitions:
        partitions = frozenset((p.topic, i) for p in record.transaction_partitions for i in p.partition_ids)
    return TransactionValue(
        producer_id=record.producer_id,
        producer_epoch=record.producer_epoch,
        timeout_ms=record.transaction_timeout_ms,
        state=state,
        partitions=partitions,
        last_update_ms=record.transaction_last_update_timestamp_ms,
        start_ms=record.transaction_start_timestamp_ms,
        previous_producer_id=record.previous_producer_id,
        next_producer_id=record.next_producer_id,
        client_transaction_version=record.client_transaction_version,
    )


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    encoded = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(encoded), 2):
        h = (31 * h + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(transactional_id: str, partition_count: int) -> int:
    """Kafka's placement of a transactional id: ``Utils.abs(id.hashCode) % count``,
    where Utils.abs maps Integer.MIN_VALUE to 0 (it is Math.abs otherwise: a
    negative hash is negated, not masked)."""
    h = java_string_hash(transactional_id)
    magnitude = 0 if h == -(1 << 31) else abs(h)
    return magnitude % partition_count
