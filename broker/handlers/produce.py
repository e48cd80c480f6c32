"""Produce (key 0), versions 3-11 (Kafka 4 dropped 0-2 and their legacy message sets).

acks=0 gets no response at all, acks=1 and acks=-1 are answered after the
append (this broker is the whole ISR of its partitions). Batches are checked
and appended at the batch level (see storage.log). Errors per partition:
UNKNOWN_TOPIC_OR_PARTITION, INVALID_RECORD (not exactly one v2 batch),
CORRUPT_MESSAGE (CRC or framing), MESSAGE_TOO_LARGE, INVALID_TIMESTAMP
(message.timestamp.after/before.max.ms), INVALID_REQUIRED_ACKS, INVALID_TOPIC_EXCEPTION
for the internal topics (``__consumer_offsets``); for idempotent producers
OUT_OF_ORDER_SEQUENCE_NUMBER and INVALID_PRODUCER_EPOCH, while a retried
batch is answered with the offset it was first written at (see
storage.producer_state). Transactional batches: INVALID_TXN_STATE, as
transactions are not implemented yet.
"""

from __future__ import annotations

from controller.topic_commands import INTERNAL_TOPICS
from protocol.errors import ErrorCode
from protocol.primitives import INT32
from protocol.records import BATCH_LENGTH_OFFSET, LOG_OVERHEAD_BYTES
from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes
from storage.log import AppendError

API = APIS_BY_KEY[0]
R = struct_classes(API.response)
_VALID_ACKS = (-1, 0, 1)


def single_batch_problem(records) -> str | None:
    """Produce v3+ carries exactly one v2 batch per partition (Kafka refuses
    anything else with INVALID_RECORD before looking inside)."""
    if not records or len(records) < LOG_OVERHEAD_BYTES:
        return "Produce requests must contain exactly one record batch"
    batch_bytes = INT32.unpack_from(records, BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD_BYTES
    if batch_bytes < len(records):
        return "Produce requests must contain exactly one record batch"
    return None


def register(dispatcher, broker) -> None:
    notify = broker.partition_watch.notify

    def handle(ctx, request):
        acks = request.acks
        responses = []
        for topic_data in request.topic_data:
            name = topic_data.name
            topic = broker.image.topics.get(name)
            partition_responses = []
            for pdata in topic_data.partition_data:
                index = pdata.index
                plog = broker.partition_log(name, index) if topic is not None and index in topic.partitions else None
                error = ErrorCode.NONE
                message = None
                base_offset = -1
                append_time = -1
                log_start = -1
                if acks not in _VALID_ACKS:
                    error = ErrorCode.INVALID_REQUIRED_ACKS
                elif plog is None:
                    error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif name in INTERNAL_TOPICS:
                    # Only the broker's coordinators write there.
                    error, message = ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {name}"
                elif (problem := single_batch_problem(pdata.records)) is not None:
                    error, message = ErrorCode.INVALID_RECORD, problem
                else:
                    try:
                        result = plog.append(pdata.records, leader_epoch=topic.partitions[index].leader_epoch)
                    except AppendError as exc:
                        error, message = exc.error_code, str(exc)
                    else:
                        base_offset = result.base_offset
                        append_time = result.log_append_time_ms
                        log_start = plog.log_start_offset
                        if not result.duplicate:
                            notify((name, index))
                partition_responses.append(
                    R.PartitionProduceResponse(
                        index=index,
                        error_code=error,
                        base_offset=base_offset,
                        log_append_time_ms=append_time,
                        log_start_offset=log_start,
                        error_message=message,
                    )
                )
            responses.append(R.TopicProduceResponse(name=name, partition_responses=partition_responses))
        if acks == 0:
            return None
        return R.ProduceResponse(responses=responses, throttle_time_ms=0)

    dispatcher.register(API.key, 3, 11, handle)
