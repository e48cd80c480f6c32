"""The checks of batches appended to a partition's log, apart from the log itself.

What a produce request's batches must satisfy before any byte of them is
written: batch-level framing (v2 only, CRC32C, max.message.bytes, no markers
from clients), the checks of single records (a key on compacted topics,
CreateTime timestamps within message.timestamp.before/after.max.ms), and the
idempotence and transaction rules checked against the producer state; and
what a follower checks of its leader's batches. Refusals are AppendError with
Kafka's error code (and, per KIP-467, the records at fault).

Separate from storage.log because none of it changes anything: these
functions read the request's bytes and the producer state and raise or
return; appending, offset assignment and the producer state's updates stay
with PartitionLog. Each runs once per request and loops over the request's
batches itself, so the append path pays one call per request, none per batch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import MAGIC_OFFSET, decode_batch_records, iter_batches, validate_batch
from storage.producer_state import ProducerStateError, ProducerStateManager, last_sequence_of, next_sequence

_INT32 = struct.Struct(">i")
_LEGACY_MESSAGE_MIN_BYTES = 14  # crc + magic + attributes + key and value lengths (magic 0)


class RecordError(NamedTuple):
    """One record that made its batch be refused (KIP-467)."""

    batch_index: int  # the record's position among the appended records, 0-based
    message: str


class AppendError(Exception):
    """A produce request's records were refused; carries Kafka's error code.

    ``record_errors`` names the records at fault, ascending by index, when the
    refusal comes from checks of single records (keys, timestamps): Produce
    v8+ returns them so that a client fails those records with the error and
    the rest of the batch as collateral. Empty for batch-level refusals.
    """

    def __init__(self, error_code: ErrorCode, message: str, record_errors: tuple[RecordError, ...] = ()):
        super().__init__(message)
        self.error_code = error_code
        self.record_errors = record_errors


@dataclass(frozen=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    duplicate: bool = False  # a retried idempotent batch: nothing was written
    # flush.messages was reached by an append that left the flush to its caller
    # (``defer_flush``): the batch is durable only after begin/end_flush.
    flush_due: bool = False


def check_produced_batches(data, max_message_bytes: int) -> list:
    """The ``(position, size, header)`` of each v2 batch of a produce request's
    ``data``, after the batch-level checks: no magic 0/1 message sets
    (INVALID_RECORD), no markers from clients and no transactional batch without
    a producer id (INVALID_RECORD), no batch over ``max_message_bytes``
    (MESSAGE_TOO_LARGE), each batch's CRC, and no partial batch at the end
    (CORRUPT_MESSAGE)."""
    if len(data) > MAGIC_OFFSET and data[MAGIC_OFFSET] in (0, 1) and _INT32.unpack_from(data, 8)[0] >= _LEGACY_MESSAGE_MIN_BYTES:
        # Produce v3+ may only carry v2 batches (Kafka answers INVALID_RECORD).
        raise AppendError(ErrorCode.INVALID_RECORD, f"magic {data[MAGIC_OFFSET]} message sets are not accepted")
    batches = []
    consumed = 0
    try:
        for position, size, header in iter_batches(data):
            if header.is_control and (header.is_transactional or header.producer_id >= 0):
                raise AppendError(ErrorCode.INVALID_RECORD, "transaction markers are written by the broker only")
            if header.is_transactional and header.producer_id < 0:
                raise AppendError(ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id")
            if size > max_message_bytes:
                raise AppendError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"batch of {size} bytes exceeds max.message.bytes={max_message_bytes}",
                )
            validate_batch(data, position, size)
            batches.append((position, size, header))
            consumed = position + size
    except ProtocolError as exc:
        raise AppendError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    if consumed != len(data) or not batches:
        raise AppendError(ErrorCode.CORRUPT_MESSAGE, "records end with a partial batch")
    return batches


def check_follower_batches(data, log_end_offset: int) -> tuple[list, int, int]:
    """The batches of a leader's fetched ``data`` a follower may append: each of
    magic 2, CRC-checked, starting at or after the end of the one before it
    (``log_end_offset`` for the first); a trailing partial batch is left out.
    Returns ``(batches, consumed bytes, next offset)``, batches as
    ``(position, size, header)``; AppendError (CORRUPT_MESSAGE) for a bad one."""
    batches = []
    next_offset = log_end_offset
    consumed = 0
    try:
        for position, size, header in iter_batches(data, allow_truncated_tail=True):
            if header.magic != 2:
                raise AppendError(ErrorCode.CORRUPT_MESSAGE, f"batch of magic {header.magic} from the leader")
            validate_batch(data, position, size)
            if header.base_offset < next_offset:
                raise AppendError(
                    ErrorCode.CORRUPT_MESSAGE,
                    f"batch at offset {header.base_offset} is below the log end offset {next_offset}",
                )
            batches.append((position, size, header))
            next_offset = header.base_offset + header.last_offset_delta + 1
            consumed = position + size
    except ProtocolError as exc:
        raise AppendError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    return batches, consumed, next_offset


def check_records(
    data,
    batches,
    now_ms: int,
    *,
    check_timestamps: bool,
    compacted: bool,
    timestamp_after_max_ms: int,
    timestamp_before_max_ms: int,
    partition_name: str,
) -> None:
    """The checks of single records, all or nothing: a compacted topic refuses
    records without a key (compaction keeps the latest record per key), and
    CreateTime timestamps must lie within message.timestamp.before.max.ms /
    after.max.ms of the broker's clock. Every bad record is reported in
    AppendError.record_errors, once (a record without a key for its key);
    the error is INVALID_TIMESTAMP when any timestamp is bad, else
    INVALID_RECORD, as Kafka answers. Indexes count the records of all
    ``batches`` (Produce v3+ sends one batch: its record positions).

    Records are decoded only where a check needs them: for compacted topics,
    when a batch header's max timestamp is too new, and when before.max.ms
    is set (the oldest record may be anywhere in a batch). Other topics stay
    on the batch-level path."""
    after_max = timestamp_after_max_ms
    before_max = timestamp_before_max_ms
    before_limited = check_timestamps and before_max < 2**63 - 1
    record_errors: list[RecordError] = []
    any_bad_timestamp = False
    first_index = 0  # of the batch's first record among all appended records
    for position, _, header in batches:
        check_keys = compacted and not header.is_control
        too_new = check_timestamps and header.max_timestamp_ms - now_ms > after_max
        if check_keys or too_new or before_limited:
            try:
                # validate_batch checked the CRC already.
                _, records = decode_batch_records(data, position, verify_crc=False)
            except ProtocolError as exc:
                raise AppendError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
            too_new_record_seen = False
            for index, record in enumerate(records, first_index):
                timestamp_problem = None
                if check_timestamps:
                    if record.timestamp_ms - now_ms > after_max:
                        too_new_record_seen = True
                        timestamp_problem = (
                            f"timestamp {record.timestamp_ms} is more than {after_max} ms"
                            f" after the broker's time {now_ms}"
                        )
                    elif now_ms - record.timestamp_ms > before_max:
                        timestamp_problem = (
                            f"timestamp {record.timestamp_ms} is more than {before_max} ms"
                            f" before the broker's time {now_ms}"
                        )
                # One error per record; a missing key is named first, as Kafka does.
                if check_keys and record.key is None:
                    # partition_name is <topic>-<partition>, as Kafka names a partition.
                    record_errors.append(RecordError(
                        index,
                        "Compacted topic cannot accept message without key"
                        f" in topic partition {partition_name}.",
                    ))
                elif timestamp_problem is not None:
                    any_bad_timestamp = True
                    record_errors.append(RecordError(index, timestamp_problem))
            if too_new and not too_new_record_seen:
                # The header's max timestamp is what the log and its time
                # index keep, so a header newer than all of its records is
                # refused too, for the batch as a whole.
                raise AppendError(
                    ErrorCode.INVALID_TIMESTAMP,
                    f"timestamp {header.max_timestamp_ms} is more than {after_max} ms"
                    f" after the broker's time {now_ms}",
                )
        first_index += header.records_count
    if not record_errors:
        return
    error_code = ErrorCode.INVALID_TIMESTAMP if any_bad_timestamp else ErrorCode.INVALID_RECORD
    first = record_errors[0]
    if len(record_errors) == 1:
        summary = first.message
    else:
        summary = (
            f"{len(record_errors)} records were refused,"
            f" the first at batch index {first.batch_index}: {first.message}"
        )
    raise AppendError(error_code, summary, tuple(record_errors))


def check_producers(producer_state: ProducerStateManager, headers) -> AppendResult | None:
    """Sequence checks for idempotent batches; a retried batch returns its first result."""
    if len(headers) == 1:
        h = headers[0]
        try:
            duplicate = producer_state.check(h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta)
        except ProducerStateError as exc:
            raise AppendError(exc.error_code, str(exc)) from None
        if duplicate is not None:
            return AppendResult(duplicate.first_offset, duplicate.last_offset, -1, duplicate=True)
        return None
    # Several batches of one request: each must follow the one before it.
    seen: dict[int, tuple[int, int]] = {}
    for h in headers:
        previous = seen.get(h.producer_id)
        try:
            if previous is None:
                duplicate = producer_state.check(h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta)
                if duplicate is not None:
                    raise AppendError(ErrorCode.DUPLICATE_SEQUENCE_NUMBER, "a retried batch inside a multi-batch request")
            elif h.producer_epoch != previous[0] or h.base_sequence != previous[1]:
                raise AppendError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "batches of one request are not consecutive")
        except ProducerStateError as exc:
            raise AppendError(exc.error_code, str(exc)) from None
        seen[h.producer_id] = (h.producer_epoch, next_sequence(last_sequence_of(h.base_sequence, h.last_offset_delta)))
    return None


def check_producer(check, *args) -> None:
    """Run a producer state check, its refusal as an AppendError."""
    try:
        check(*args)
    except ProducerStateError as exc:
        raise AppendError(exc.error_code, str(exc)) from None


def check_transactions(producer_state: ProducerStateManager, headers, verification_guard: object | None) -> None:
    """The transaction rules of the producers' batches (see PartitionLog.append); a
    request's later batches of a producer count the transaction its earlier
    ones open."""
    open_after: dict[int, bool] = {}  # producer id -> in a transaction after its batches so far
    for h in headers:
        producer_id = h.producer_id
        if producer_id in open_after:
            if open_after[producer_id] and not h.is_transactional:
                raise AppendError(ErrorCode.INVALID_TXN_STATE, f"producer {producer_id} mixed batches inside a transaction")
            open_after[producer_id] = open_after[producer_id] or h.is_transactional
            continue
        check_producer(
            producer_state.check_transaction, producer_id, h.producer_epoch, h.is_transactional, verification_guard
        )
        open_after[producer_id] = h.is_transactional or producer_state.has_ongoing_transaction(producer_id)
