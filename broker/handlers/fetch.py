"""Fetch (key 1), versions 4-17 (Kafka 4 dropped 0-3 and down-conversion).

Consumers and follower replicas. This handler decodes, authorizes, keeps the
fetch sessions and client quotas, and assembles and long-polls the answer;
what each partition's replica serves (the rules below on leaders, followers,
epochs, throttles and read bounds) is decided by broker/replica/read.py.
A follower names itself with ``replica_id``
(before v15) or ``replica_state`` (v15+); only the partition's leader serves
it, only for a replica of the partition (else NOT_LEADER_OR_FOLLOWER), and it
reads up to the log end, not the high watermark. Its ``last_fetched_epoch``
is checked against the leader's epochs first: a follower whose log diverged
gets ``diverging_epoch`` and no records (KIP-320); otherwise its fetch offset
tells the leader what it holds, which moves the high watermark and the ISR
(see broker.replica.manager). Consumers read up to the high watermark from
the leader, or from a follower (its own high watermark) for v11+ requests, as
Kafka allows since KIP-392; with ``replica.selector.class`` set to Kafka's
RackAwareReplicaSelector, a consumer naming its ``rack_id`` is sent to a
replica in its rack (``preferred_read_replica``, no records). Errors name the current leader and epoch for v12+
(KIP-951). Each partition returns whole batches from the one holding
``fetch_offset``, at most ``partition_max_bytes``; the response stays within
``max_bytes`` except that the first batch of the first non-empty partition is
returned whole however large (KIP-74), so a consumer always makes progress.
Long poll: without ``min_bytes`` of data the request waits up to
``max_wait_ms`` for appends to its partitions. Fetch sessions (KIP-227, v7+):
a full fetch with ``session_epoch`` 0 gets a session (when the broker's
``max.incremental.fetch.session.cache.slots`` allow), later incremental
fetches name only changed and forgotten partitions and are answered with only
the partitions that have news; the rules are in replication.fetch_session.
Topic ids are used from v13, with UNKNOWN_TOPIC_ID for unknown ones.
Transactions: every answer carries the partition's last stable offset (the
high watermark, or the first offset of the oldest transaction still open or
not yet replicated to its end); a ``read_committed`` consumer reads up to it
only, and gets the aborted transactions (producer id, first offset) that
overlap what it was sent, from the segments' ``.txnindex`` files, so that it
can drop their batches; markers (control batches) are sent to every reader,
as Kafka does, and clients skip them.
Replication throttles: a follower out of the ISR of a partition whose
``leader.replication.throttled.replicas`` names this broker's replica gets no
records while this broker's ``leader.replication.throttled.rate`` is exceeded
(see replication.throttle).
Authorization (with an authorizer, as Kafka): a follower needs CLUSTER_ACTION
on the cluster, a consumer READ on each topic; a partition refused is answered
TOPIC_AUTHORIZATION_FAILED (by name whether or not the topic exists; an
unknown topic id stays UNKNOWN_TOPIC_ID).
Client quotas (broker/net/quotas.py): a consumer under a ``consumer_byte_rate``
gets at most what the quota allows in one sample per response (``max_bytes``
lowered, as Kafka does, by a smaller bound); the record bytes it is sent
count towards the rate, and over it the response carries ``throttle_time_ms``
and the connection is muted for that time. Unlike Kafka, which answers a
throttled fetch with no records and forgets its bytes, the records already
read are sent and the throttle makes up for them. Followers are never
throttled by client quotas.
"""

from __future__ import annotations

import time

from broker.clock import monotonic_ms
from broker.replica.read import FetchReader, ReplicaReader
from broker.security.authorization import TOPIC, allowed, cluster_allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes
from replication.fetch_session import FetchContext

API = APIS_BY_NAME["Fetch"]
R = struct_classes(API.response)
READ_COMMITTED = 1


def replica_id_of(request, api_version: int) -> int:
    if api_version >= 15:
        state = request.replica_state
        return -1 if state is None else state.replica_id
    return request.replica_id


def register(dispatcher, broker) -> None:
    read_partition = ReplicaReader(broker).read_partition

    sessions = broker.fetch_sessions
    quotas = broker.quotas

    def new_context(request, api_version: int) -> FetchContext:
        by_id = api_version >= 13
        requested = [
            ((fetch_topic.topic_id if by_id else fetch_topic.topic, fp.partition), fp)
            for fetch_topic in request.topics
            for fp in fetch_topic.partitions
        ]
        forgotten = [
            (forgotten_topic.topic_id if by_id else forgotten_topic.topic, partition)
            for forgotten_topic in (request.forgotten_topics_data or ())
            for partition in forgotten_topic.partitions
        ]
        return sessions.new_context(
            request.session_id if api_version >= 7 else 0,
            request.session_epoch if api_version >= 7 else -1,
            requested,
            forgotten,
            privileged=replica_id_of(request, api_version) >= 0,
            now_ms=monotonic_ms(),  # fetch session eviction: a duration
            uses_topic_ids=by_id,
        )

    def build(request, api_version, context: FetchContext, ctx):
        """Read the context's partitions: ((key, PartitionData) pairs, total bytes,
        whether to answer at once, partition keys to wait on, file slices)."""
        image = broker.image
        by_id = api_version >= 13
        replica_id = replica_id_of(request, api_version)
        from_follower = replica_id >= 0
        reader = FetchReader(
            api_version,
            replica_id,
            request.replica_state.replica_epoch if api_version >= 15 and request.replica_state is not None else -1,
            read_committed=request.isolation_level == READ_COMMITTED,
            rack_id=request.rack_id if api_version >= 11 else None,
        )
        remaining_bytes = request.max_bytes
        total_bytes = 0
        has_error = False
        leaders_named: set[int] = set()
        keys = []
        results = []
        slices = []
        now_ms = monotonic_ms()  # the leader quota's windows: a duration
        # Topic name -> may read, asked once per build (None: no authorizer, all allowed).
        readable: dict[str, bool] | None = None
        if broker.authorizer is not None:
            readable = {}
            follower_allowed = from_follower and cluster_allowed(broker, ctx, AclOperation.CLUSTER_ACTION)
        for session_key, fp in context.partitions_to_read():
            topic = image.topic_by_id(session_key[0]) if by_id else image.topics.get(session_key[0])
            pd = R.PartitionData(
                partition_index=fp.partition, error_code=ErrorCode.NONE, high_watermark=-1, records=b""
            )
            results.append((session_key, pd))
            if readable is not None and (topic is not None or not by_id):
                name = topic.name if topic is not None else session_key[0]
                may = readable.get(name)
                if may is None:
                    may = readable[name] = follower_allowed if from_follower else allowed(broker, ctx, AclOperation.READ, TOPIC, name)
                if not may:
                    pd.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    has_error = True
                    continue
            if topic is None:
                pd.error_code = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                has_error = True
                continue
            limit = min(fp.partition_max_bytes, remaining_bytes)
            read = read_partition(topic, fp, reader, max_bytes=limit, first=total_bytes == 0, now_ms=now_ms)
            pd.error_code = read.error
            has_error = has_error or read.answer_now
            if read.current_leader is not None and api_version >= 12:
                leader_id, leader_epoch = read.current_leader
                pd.current_leader = R.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch)
                leaders_named.add(leader_id)
            if not read.served:
                continue
            keys.append((topic.name, fp.partition))
            pd.log_start_offset = read.log_start_offset
            pd.high_watermark, pd.last_stable_offset = read.high_watermark, read.last_stable_offset
            if read.diverging_epoch is not None:
                pd.diverging_epoch = R.EpochEndOffset(epoch=read.diverging_epoch[0], end_offset=read.diverging_epoch[1])
            if read.preferred_read_replica >= 0:
                pd.preferred_read_replica = read.preferred_read_replica
            pd.aborted_transactions = None if read.aborted_transactions is None else [
                R.AbortedTransaction(producer_id=producer_id, first_offset=first_offset)
                for producer_id, first_offset in read.aborted_transactions
            ]
            file_slice = read.records
            if file_slice is not None:
                # Sent from the file by the connection (sendfile when it can).
                pd.records = file_slice
                slices.append(file_slice)
                total_bytes += len(file_slice)
                remaining_bytes -= len(file_slice)
        return results, total_bytes, has_error, keys, slices, leaders_named

    def respond(request, api_version, context: FetchContext, results, slices, leaders_named, listener=None):
        reply = context.respond(results, now_ms=monotonic_ms())
        if reply.error != ErrorCode.NONE:
            for file_slice in slices:
                file_slice.close()
            return R.FetchResponse(throttle_time_ms=0, error_code=reply.error, session_id=0, responses=[])
        by_id = api_version >= 13
        image = broker.image
        responses = []
        last_topic_key = object()
        for (topic_key, _), pd in reply.partitions:
            if topic_key != last_topic_key:
                last_topic_key = topic_key
                if by_id:
                    responses.append(R.FetchableTopicResponse(topic="", topic_id=topic_key, partitions=[]))
                else:
                    topic = image.topics.get(topic_key)
                    responses.append(
                        R.FetchableTopicResponse(topic=topic_key, topic_id=topic.topic_id if topic else ZERO_UUID, partitions=[])
                    )
            responses[-1].partitions.append(pd)
        response = R.FetchResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=reply.session_id, responses=responses)
        if api_version >= 16 and leaders_named:
            response.node_endpoints = node_endpoints(broker, leaders_named, listener)
        return response

    def throttled(ctx, response, total_bytes: int):
        """The response, its bytes counted towards the consumer's consumer_byte_rate."""
        if not ctx.throttle_exempt:
            sent_bytes = total_bytes if response.error_code == ErrorCode.NONE else 0  # a session error sends none
            throttle_ms = quotas.record_fetch(ctx.principal, ctx.client_id, sent_bytes)
            if throttle_ms > 0:
                ctx.throttle_time_ms = max(ctx.throttle_time_ms, throttle_ms)
                response.throttle_time_ms = ctx.throttle_time_ms
        return response

    def wait_for_news(request, api_version: int, keys, timeout_s: float):
        """A follower replica's fetch is woken by appends and high watermark
        moves, a consumer's by what moves its high watermark (see
        broker.replica.partition_watch)."""
        follower = replica_id_of(request, api_version) >= 0
        return broker.partition_watch.wait_any(keys, timeout_s, follower=follower)

    async def handle(ctx, request):
        version = ctx.api_version
        if replica_id_of(request, version) >= 0:
            ctx.throttle_exempt = True
        else:
            limit = quotas.fetch_max_bytes(ctx.principal, ctx.client_id)
            if limit is not None and limit < request.max_bytes:
                request.max_bytes = limit
                request.min_bytes = min(request.min_bytes, limit)
        context = new_context(request, version)
        deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
        while True:
            results, total_bytes, has_error, keys, slices, leaders_named = build(request, version, context, ctx)
            remaining_s = deadline - time.monotonic()
            if total_bytes >= request.min_bytes or has_error or remaining_s <= 0 or not keys or broker.stopping:
                response = respond(request, version, context, results, slices, leaders_named, ctx.listener)
                return throttled(ctx, response, total_bytes)
            for file_slice in slices:  # not enough yet: this answer is dropped
                file_slice.close()
            if not await wait_for_news(request, version, keys, remaining_s):
                results, total_bytes, _, _, slices, leaders_named = build(request, version, context, ctx)
                response = respond(request, version, context, results, slices, leaders_named, ctx.listener)
                return throttled(ctx, response, total_bytes)

    dispatcher.register(API.key, 4, 17, handle)


def node_endpoints(broker, broker_ids, listener_name: str | None = None) -> list:
    """KIP-951: the endpoints of the leaders an answer names, so clients need no
    Metadata round trip to find them."""
    endpoints = []
    for broker_id, host, port, rack in broker.alive_brokers(listener_name):
        if broker_id in broker_ids:
            endpoints.append(R.NodeEndpoint(node_id=broker_id, host=host, port=port, rack=rack))
    return endpoints
