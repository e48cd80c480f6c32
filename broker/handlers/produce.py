"""Produce (key 0), versions 3-12 (Kafka 4 dropped 0-2 and their legacy message sets).

acks=0 gets no response at all and acks=1 is answered after the leader's
append. acks=-1 (all) needs ``min.insync.replicas`` in the ISR before the
append (NOT_ENOUGH_REPLICAS) and is answered once every in-sync replica has
the batch, i.e. the high watermark passed it (see broker.replica.manager), or
with REQUEST_TIMED_OUT after the request's ``timeout_ms``;
NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the minimum
meanwhile, NOT_LEADER_OR_FOLLOWER when leadership moved. Only the partition's
leader appends (NOT_LEADER_OR_FOLLOWER on a follower and on a broker that does
not host the partition, naming the leader for v10+, KIP-951). Batches are checked
and appended at the batch level (see storage.log and storage.append_checks). Errors per partition:
UNKNOWN_TOPIC_OR_PARTITION, INVALID_RECORD (not exactly one v2 batch),
CORRUPT_MESSAGE (CRC or framing), MESSAGE_TOO_LARGE, INVALID_TIMESTAMP
(message.timestamp.after/before.max.ms), INVALID_RECORD (a record without a
key on a compacted topic; a control batch, which only the broker writes), INVALID_REQUIRED_ACKS, INVALID_TOPIC_EXCEPTION
for the internal topics (``__consumer_offsets``); for idempotent producers
OUT_OF_ORDER_SEQUENCE_NUMBER and INVALID_PRODUCER_EPOCH, while a retried
batch is answered with the offset it was first written at (see
storage.producer_state). Transactional batches need the request's
``transactional_id`` (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka
answers a request it cannot tie to a transaction); the first batch of a
transaction on a partition is verified with the transaction coordinator
first (KIP-890 part 1: AddPartitionsToTxn with ``verify_only``): a partition
the transaction never added is refused with INVALID_TXN_STATE, a fenced
producer with INVALID_PRODUCER_EPOCH, and a coordinator that cannot answer
now with NOT_ENOUGH_REPLICAS, which every client retries. Such a request
holds its connection until it has appended, so later requests cannot
overtake it. Version 12 (KIP-890 part 2) comes from transactions version 2
producers, which send no AddPartitionsToTxn: with ``transaction.version`` 2
finalized, the leader adds the partition to the transaction itself (the
local coordinator, or AddPartitionsToTxn v5 without ``verify_only`` to the
coordinator's broker) before it appends, with the same error mapping (a
transaction still completing answers NOT_ENOUGH_REPLICAS until its markers
are written, which the client retries). Below that level v12 is verified as
v11 is. A partition counts as having the producer's transaction open only at
the batch's epoch, so the first batch of the next transaction (at the epoch
the last EndTxn bumped to) is added even while the last one's marker is
still on its way here. A non-transactional batch from a producer inside a
transaction: INVALID_TXN_STATE. Records refused one by one (a missing
key, a timestamp out of range) refuse their whole batch; v8+ lists them in
``record_errors`` (KIP-467: index in the batch, reason), which clients use
to fail the other records of the batch as collateral. When an append
reaches the topic's ``flush.messages``, the response (acks 1 or all) also
waits for the fsync, which broker.replica.flusher runs off the event loop, grouped
with other partitions'.

Schema validation (topics with ``confluent.value.schema.validation`` and
the like, broker/schemas/validation.py): each record's key or value must
name a schema registered under its subject; the batch is refused with
INVALID_RECORD and ``record_errors`` naming the records at fault (none
when the batch's records cannot be read at all). An id
this broker's registry does not know yet first catches the registry up to
its leader (the request then holds its connection, as a transactional one
does), and only then is refused.

Authorization (with an authorizer, as Kafka 3+): a request with
transactional batches needs WRITE on its transactional id (else every
partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED); each topic needs WRITE
(else its partitions TOPIC_AUTHORIZATION_FAILED, whether or not it exists).
Kafka no longer asks for IDEMPOTENT_WRITE here (KIP-679): an idempotent
producer's InitProducerId is where that is checked.

Client quotas (broker/net/quotas.py): the request's bytes count towards the
client's ``producer_byte_rate`` when it arrives; over the quota, the request is
still served and its answer carries ``throttle_time_ms`` while the connection
is muted for that time (for acks=0 there is no answer, the muting alone slows
the producer, as in Kafka).
"""

from __future__ import annotations


from broker.coordinators.transactions.service import transactions_v2
from broker.links.multi_master_rules import is_multi_master, produce_refusal
from broker.net.dispatch import AnswerLater
from broker.replica.leader_append import append_as_leader
from broker.schemas.validation import WHOLE_BATCH, NeedsRefresh
from broker.security.authorization import TOPIC, TRANSACTIONAL_ID, allowed, denied
from controller.authorizer import AclOperation
from controller.topic_commands import INTERNAL_TOPICS
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.primitives import INT32
from protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_BYTES,
    BATCH_LENGTH_OFFSET,
    CONTROL_MASK,
    LOG_OVERHEAD_BYTES,
    MAGIC_OFFSET,
    TRANSACTIONAL_MASK,
    parse_batch_header,
)
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["Produce"]
R = struct_classes(API.response)
_VALID_ACKS = (-1, 0, 1)
# What a failed verification answers a Produce with (Kafka's mapping): the
# coordinator's transient errors become NOT_ENOUGH_REPLICAS, which clients of
# every version retry; a fenced producer is told its epoch is stale.
_VERIFICATION_ERRORS = {
    ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.NOT_ENOUGH_REPLICAS,
}


def transactional_header(records):
    """The batch header when ``records`` starts with a transactional data batch, else None."""
    # Two byte reads decide for nearly every batch: attributes are big-endian,
    # and the transactional and control bits are in their low byte.
    if (
        not records
        or len(records) < BATCH_HEADER_BYTES
        or records[MAGIC_OFFSET] != 2
        or records[ATTRIBUTES_OFFSET + 1] & (TRANSACTIONAL_MASK | CONTROL_MASK) != TRANSACTIONAL_MASK
    ):
        return None
    try:
        header = parse_batch_header(records, 0)
    except ProtocolError:
        return None  # the append reports it
    if header.magic != 2 or not header.is_transactional or header.is_control:
        return None
    return header


def single_batch_problem(records) -> str | None:
    """Produce v3+ carries exactly one v2 batch per partition (Kafka refuses
    anything else with INVALID_RECORD before looking inside)."""
    if not records or len(records) < LOG_OVERHEAD_BYTES:
        return "Produce requests must contain exactly one record batch"
    batch_bytes = INT32.unpack_from(records, BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD_BYTES
    if batch_bytes < len(records):
        return "Produce requests must contain exactly one record batch"
    return None


def multi_master_problem(image, topic: str, records) -> str | None:
    """Why a multi-master topic (cluster links) refuses this batch: it needs a
    producer id (its origin) and takes no transactions; None otherwise."""
    if not image.cluster_links or not is_multi_master(image, topic):
        return None
    try:
        header = parse_batch_header(records, 0)
    except ProtocolError:
        return None  # the append reports it
    return produce_refusal(topic, header.producer_id, header.is_transactional)


def register(dispatcher, broker) -> None:
    replicas = broker.replicas
    quotas = broker.quotas
    validator = broker.schema_validator

    def schema_checks(request) -> list:
        """(partition, validation, records) of the partitions whose topic validates schemas."""
        checks = []
        image = broker.image
        for topic_data in request.topic_data:
            topic = image.topics.get(topic_data.name)
            if topic is None or not topic.configs:
                continue
            validation = validator.validation_of(topic_data.name, topic.configs)
            if validation is None:
                continue
            for pdata in topic_data.partition_data:
                if pdata.records:
                    checks.append(((topic_data.name, pdata.index), validation, pdata.records))
        return checks

    def schema_problems(checks, *, fresh: bool) -> dict:
        """partition -> its records that break the topic's schema validation (NeedsRefresh unless ``fresh``)."""
        problems = {}
        for key, validation, records in checks:
            found = validator.check(validation, key[0], records, fresh=fresh)
            if found:
                problems[key] = found
        return problems

    async def _refresh_then_append(ctx, request, verify, checks):
        # A schema id this broker's registry does not know yet: catch it up
        # (another broker may have registered it a moment ago), then decide.
        try:
            await validator.refresh()
        except Exception as exc:  # noqa: BLE001 - the records are then checked against what is here
            note = f" (the schema registry could not be caught up: {exc})"
        else:
            note = ""
        invalid = {
            key: [(index, reason + note) for index, reason in found]
            for key, found in schema_problems(checks, fresh=True).items()
        }
        if verify:
            return await _verify_then_append(ctx, request, verify, invalid)
        answer = _append_all(ctx, request, {}, {}, invalid)
        if type(answer) is AnswerLater:
            return await answer.answer
        return answer

    def handle(ctx, request):
        throttle_ms = quotas.record_produce(ctx.principal, ctx.client_id, ctx.frame_bytes)
        ctx.throttle_time_ms = max(ctx.throttle_time_ms, throttle_ms)
        transactional_id = request.transactional_id
        verify = []  # (key, plog, header) of first batches of a transaction here
        authorized_transactional = None  # asked at the first transactional batch
        for topic_data in request.topic_data:
            for pdata in topic_data.partition_data:
                header = transactional_header(pdata.records)
                if header is None:
                    continue
                if authorized_transactional is None:
                    authorized_transactional = transactional_id is not None and allowed(
                        broker, ctx, AclOperation.WRITE, TRANSACTIONAL_ID, transactional_id
                    )
                if not authorized_transactional:
                    return _refuse_all(ctx, request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                plog = broker.partition_log(topic_data.name, pdata.index)
                if (
                    plog is not None
                    and replicas.leader_for(topic_data.name, pdata.index) is not None
                    and not plog.has_ongoing_transaction(header.producer_id, header.producer_epoch)
                ):
                    verify.append(((topic_data.name, pdata.index), plog, header))
        checks = schema_checks(request)
        invalid = {}
        if checks:
            try:
                invalid = schema_problems(checks, fresh=False)
            except NeedsRefresh:
                return AnswerLater(_refresh_then_append(ctx, request, verify, checks), overlappable=False)
        if verify:
            return AnswerLater(_verify_then_append(ctx, request, verify, invalid), overlappable=False)
        return _append_all(ctx, request, {}, {}, invalid)

    async def _verify_then_append(ctx, request, verify, invalid):
        add = ctx.api_version >= 12 and transactions_v2(broker.image)
        plogs = {key: plog for key, plog, _ in verify}
        # Guards first: a marker or an epoch bump arriving while the coordinator
        # answers voids them, and the append is then refused (INVALID_TXN_STATE).
        # An add (transactions version 2) takes them once the coordinator has
        # added the partitions: until then the last transaction's marker may
        # still land here, and it is not one the new batch must be fenced by.
        guards = {} if add else {key: plog.verification_guard_for(header.producer_id) for key, plog, header in verify}
        by_producer: dict[tuple[int, int], list] = {}
        for key, _, header in verify:
            by_producer.setdefault((header.producer_id, header.producer_epoch), []).append(key)
        refused = {}
        for (producer_id, producer_epoch), keys in by_producer.items():
            outcome = await broker.transactions.verify_partitions(
                request.transactional_id, producer_id, producer_epoch, keys, add=add
            )
            if add:
                guards.update((key, plogs[key].verification_guard_for(producer_id)) for key in keys)
            for key in keys:
                error = outcome.get(key, ErrorCode.UNKNOWN_SERVER_ERROR)
                if error != ErrorCode.NONE:
                    refused[key] = _VERIFICATION_ERRORS.get(error, error)
        answer = _append_all(ctx, request, guards, refused, invalid)
        if type(answer) is AnswerLater:
            return await answer.answer
        return answer

    def _refuse_all(ctx, request, error):
        if request.acks == 0:
            return None
        responses = [
            R.TopicProduceResponse(
                name=topic_data.name,
                partition_responses=[
                    R.PartitionProduceResponse(index=p.index, error_code=error, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1, record_errors=[])
                    for p in topic_data.partition_data
                ],
            )
            for topic_data in request.topic_data
        ]
        return _response(ctx, responses, set())

    def _append_all(ctx, request, guards, refused, invalid):
        # The appends happen here, in request order; what is left is waiting
        # (fsyncs, followers), which a pipelining connection overlaps with its
        # next Produce requests (see broker/net/connection.py).
        acks = request.acks
        responses = []
        waits = []
        unwritable = denied(broker, ctx, AclOperation.WRITE, TOPIC, (t.name for t in request.topic_data))
        durable = []  # flushes (flush.messages) the response waits for
        leaders_named: set[int] = set()
        for topic_data in request.topic_data:
            name = topic_data.name
            topic = broker.image.topics.get(name)
            partition_responses = []
            for pdata in topic_data.partition_data:
                index = pdata.index
                plog = broker.partition_log(name, index) if topic is not None and index in topic.partitions else None
                error = ErrorCode.NONE
                message = None
                record_errors = []
                base_offset = -1
                append_time = -1
                log_start = -1
                if acks not in _VALID_ACKS:
                    error = ErrorCode.INVALID_REQUIRED_ACKS
                elif unwritable and name in unwritable:
                    error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif plog is None:
                    # An existing partition this broker does not host: Kafka says
                    # NOT_LEADER_OR_FOLLOWER, so the client refreshes its metadata;
                    # one whose log dir went offline here, KAFKA_STORAGE_ERROR (also retriable).
                    known = topic is not None and index in topic.partitions
                    if known and broker.logs.is_offline(name, index):
                        error = ErrorCode.KAFKA_STORAGE_ERROR
                    else:
                        error = ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif name in INTERNAL_TOPICS:
                    # Only the broker's coordinators write there.
                    error, message = ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {name}"
                elif (problem := single_batch_problem(pdata.records)) is not None:
                    error, message = ErrorCode.INVALID_RECORD, problem
                elif len(pdata.records) > ATTRIBUTES_OFFSET + 1 and pdata.records[ATTRIBUTES_OFFSET + 1] & CONTROL_MASK:
                    # Markers are the coordinator's to write (WriteTxnMarkers), as in Kafka.
                    error, message = ErrorCode.INVALID_RECORD, "clients may not write control batches"
                elif (problem := multi_master_problem(broker.image, name, pdata.records)) is not None:
                    error, message = ErrorCode.INVALID_REQUEST, problem
                elif (name, index) in invalid:
                    # Schema validation (KIP-467 record errors: the client fails the
                    # other records of the batch as collateral, not as invalid).
                    found = invalid[(name, index)]
                    error, message = ErrorCode.INVALID_RECORD, found[0][1]
                    # Records that cannot be read (WHOLE_BATCH) name no record, as Kafka's
                    # InvalidRecordException of a record it cannot parse; non-retriable either way.
                    record_errors = [
                        R.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                        for i, m in found
                        if i != WHOLE_BATCH
                    ]
                elif (name, index) in refused:
                    error = refused[(name, index)]
                    message = "the transaction coordinator did not verify this partition for the transaction (or, version 2, add it)"
                else:
                    written = append_as_leader(
                        broker,
                        (name, index),
                        pdata.records,
                        plog=plog,
                        acks=acks,
                        timeout_ms=request.timeout_ms,
                        defer_flush=True,
                        verification_guard=guards.get((name, index)),
                    )
                    error = written.error
                    if error == ErrorCode.NONE:
                        if written.flush is not None:
                            durable.append((len(responses), len(partition_responses), written.flush))
                        base_offset = written.base_offset
                        append_time = written.log_append_time_ms
                        log_start = written.log_start_offset
                        if written.acks_future is not None:
                            waits.append((len(responses), len(partition_responses), written.acks_future))
                        elif written.acks_error != ErrorCode.NONE:
                            error = written.acks_error
                    else:
                        message = written.message
                        # KIP-467 (v8+; older versions leave the field out): the
                        # records at fault, so that a client fails the others of
                        # the batch as collateral rather than as invalid.
                        record_errors = [
                            R.BatchIndexAndErrorMessage(batch_index=e.batch_index, batch_index_error_message=e.message)
                            for e in written.record_errors
                        ]
                response = R.PartitionProduceResponse(
                    index=index,
                    error_code=error,
                    base_offset=base_offset,
                    log_append_time_ms=append_time,
                    log_start_offset=log_start,
                    record_errors=record_errors,
                    error_message=message,
                )
                if error == ErrorCode.NOT_LEADER_OR_FOLLOWER and ctx.api_version >= 10 and topic is not None:
                    _name_leader(response, topic.partitions.get(index), leaders_named)
                partition_responses.append(response)
            responses.append(R.TopicProduceResponse(name=name, partition_responses=partition_responses))
        if acks == 0:
            return None
        if durable or waits:
            return AnswerLater(_answer(ctx, responses, durable, waits, leaders_named))
        return _response(ctx, responses, leaders_named)

    async def _answer(ctx, responses, durable, waits, leaders_named):
        # Acknowledged only once durable. A failed fsync takes the log dir
        # offline (or halts the broker: see Broker.log_dir_failed), and its
        # writes are answered KAFKA_STORAGE_ERROR, never acknowledged.
        for topic_index, partition_index, flushed in durable:
            try:
                await flushed
            except OSError:
                pr = responses[topic_index].partition_responses[partition_index]
                pr.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                pr.base_offset = -1
                pr.log_append_time_ms = -1
                pr.log_start_offset = -1
        if waits:
            for topic_index, partition_index, future in waits:
                error = await future
                pr = responses[topic_index].partition_responses[partition_index]
                if error == ErrorCode.NONE and pr.error_code != ErrorCode.NONE:
                    continue  # its flush failed above: never acknowledged
                if error != ErrorCode.NONE:
                    pr.error_code = error
                    pr.base_offset = -1
                    pr.log_append_time_ms = -1
                    pr.log_start_offset = -1
                    if error == ErrorCode.NOT_LEADER_OR_FOLLOWER and ctx.api_version >= 10:
                        topic = broker.image.topics.get(responses[topic_index].name)
                        if topic is not None:
                            _name_leader(pr, topic.partitions.get(pr.index), leaders_named)
        return _response(ctx, responses, leaders_named)

    def _response(ctx, responses, leaders_named):
        response = R.ProduceResponse(responses=responses, throttle_time_ms=ctx.throttle_time_ms)
        if leaders_named and ctx.api_version >= 10:
            response.node_endpoints = [
                R.NodeEndpoint(node_id=b, host=host, port=port, rack=rack)
                for b, host, port, rack in broker.alive_brokers(ctx.listener)
                if b in leaders_named
            ]
        return response

    dispatcher.register(API.key, 3, 12, handle)


def _name_leader(partition_response, partition, leaders_named: set[int]) -> None:
    """KIP-951: a NOT_LEADER_OR_FOLLOWER answer carries the leader the client should use."""
    if partition is None or partition.leader < 0:
        return
    partition_response.current_leader = R.LeaderIdAndEpoch(leader_id=partition.leader, leader_epoch=partition.leader_epoch)
    leaders_named.add(partition.leader)
