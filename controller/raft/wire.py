"""The Raft core's messages as Kafka's KRaft requests and responses (sans-IO).

Vote (52), BeginQuorumEpoch (53), EndQuorumEpoch (54), Fetch (1) and
FetchSnapshot (59) all name one topic partition, ``__cluster_metadata-0``;
the core's messages name none, so this module adds it going out and checks it
coming in. A request that names anything else, or another cluster, gets a
ready error response (:func:`request_from_wire` returns a response body
instead of a core message), as Kafka's Raft client answers it.

Two things the wire does not carry are filled in here:

* a response's sender is the node the request went to, so
  :func:`response_from_wire` takes it, and the echo fields the core uses to
  spot stale responses (fetch offset, snapshot position, pre-vote) come from
  the request it answers;
* Fetch up to v17 has no field for the fetcher's high watermark, which the
  leader uses to decide whether to park a fetch; the leader's driver passes
  what it last told that fetcher (``known_high_watermark``).

Batches travel as Kafka v2 record batches: one record batch per core batch,
the Raft epoch as the partition leader epoch.
"""

from __future__ import annotations

import uuid

from controller.raft.log import LEADER_CHANGE_CONTROL_KEY, Batch, OffsetAndEpoch, SnapshotId
from controller.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from controller.raft.node import QuorumInfo, ReplicaState
from protocol.errors import ErrorCode
from protocol.records import build_batch, decode_batch_records, iter_batches
from protocol.registry import APIS_BY_KEY, APIS_BY_NAME
from protocol.schema import struct_classes

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
# Kafka's fixed id of the metadata topic (Uuid(0, 1)).
METADATA_TOPIC_ID = uuid.UUID(int=1)

FETCH_KEY, VOTE_KEY, BEGIN_QUORUM_EPOCH_KEY, END_QUORUM_EPOCH_KEY, DESCRIBE_QUORUM_KEY, FETCH_SNAPSHOT_KEY = (
    APIS_BY_NAME[name].key for name in ("Fetch", "Vote", "BeginQuorumEpoch", "EndQuorumEpoch", "DescribeQuorum", "FetchSnapshot")
)

# The versions this node sends.
VOTE_VERSION = 2
BEGIN_QUORUM_EPOCH_VERSION = 0
END_QUORUM_EPOCH_VERSION = 0
FETCH_VERSION = 17
FETCH_SNAPSHOT_VERSION = 0
# The versions the controller listener answers: every declared version this
# module maps (Raft fetches began at v12, with last_fetched_epoch).
SERVED_VERSIONS = {
    FETCH_KEY: (12, 17),
    VOTE_KEY: (0, 2),
    BEGIN_QUORUM_EPOCH_KEY: (0, 1),
    END_QUORUM_EPOCH_KEY: (0, 1),
    FETCH_SNAPSHOT_KEY: (0, 1),
}

_VOTE, _BEGIN, _END, _FETCH, _SNAP, _DESCRIBE = (
    APIS_BY_KEY[k] for k in (VOTE_KEY, BEGIN_QUORUM_EPOCH_KEY, END_QUORUM_EPOCH_KEY, FETCH_KEY, FETCH_SNAPSHOT_KEY, DESCRIBE_QUORUM_KEY)
)
_VoteQ, _VoteR = struct_classes(_VOTE.request), struct_classes(_VOTE.response)
_BeginQ, _BeginR = struct_classes(_BEGIN.request), struct_classes(_BEGIN.response)
_EndQ, _EndR = struct_classes(_END.request), struct_classes(_END.response)
_FetchQ, _FetchR = struct_classes(_FETCH.request), struct_classes(_FETCH.response)
_SnapQ, _SnapR = struct_classes(_SNAP.request), struct_classes(_SNAP.response)
_DescQ, _DescR = struct_classes(_DESCRIBE.request), struct_classes(_DESCRIBE.response)

_CORE_REQUESTS = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest, FetchSnapshotRequest)
_API_KEY_OF = {
    VoteRequest: VOTE_KEY,
    VoteResponse: VOTE_KEY,
    BeginQuorumEpochRequest: BEGIN_QUORUM_EPOCH_KEY,
    BeginQuorumEpochResponse: BEGIN_QUORUM_EPOCH_KEY,
    EndQuorumEpochRequest: END_QUORUM_EPOCH_KEY,
    EndQuorumEpochResponse: END_QUORUM_EPOCH_KEY,
    FetchRequest: FETCH_KEY,
    FetchResponse: FETCH_KEY,
    FetchSnapshotRequest: FETCH_SNAPSHOT_KEY,
    FetchSnapshotResponse: FETCH_SNAPSHOT_KEY,
}


class WireError(ValueError):
    """A response that carries no answer for the core (a top-level error, the wrong partition)."""

    def __init__(self, error: ErrorCode, detail: str):
        super().__init__(f"{error.name}: {detail}")
        self.error = error


def api_key_of(message) -> int:
    return _API_KEY_OF[type(message)]


def is_core_request(value) -> bool:
    return isinstance(value, _CORE_REQUESTS)


def _leader(leader_id: int | None) -> int:
    return -1 if leader_id is None else leader_id


def _leader_or_none(leader_id: int) -> int | None:
    return None if leader_id < 0 else leader_id


# -- record batches ------------------------------------------------------------


def encode_batches(batches) -> bytes:
    out = bytearray()
    for batch in batches:
        key = LEADER_CHANGE_CONTROL_KEY if batch.control else None
        out += build_batch(
            [(key, record, (), -1) for record in batch.records],
            base_offset=batch.base_offset,
            is_control=batch.control,
            partition_leader_epoch=batch.epoch,
            base_timestamp_ms=-1,
        )
    return bytes(out)


def decode_batches(data) -> tuple[Batch, ...]:
    if not data:
        return ()
    view = memoryview(data)
    batches = []
    for position, size, header in iter_batches(view):
        _, records = decode_batch_records(view[position : position + size])
        batches.append(
            Batch(
                header.base_offset,
                header.partition_leader_epoch,
                tuple(b"" if r.value is None else bytes(r.value) for r in records),
                header.is_control,
            )
        )
    return tuple(batches)


# -- requests out ----------------------------------------------------------------


def request_to_wire(message, cluster_id: str):
    """(api_key, api_version, request body) for a core request."""
    if isinstance(message, VoteRequest):
        partition = _VoteQ.PartitionData(
            partition_index=METADATA_PARTITION,
            candidate_epoch=message.epoch,
            candidate_id=message.source_id,
            last_offset_epoch=message.last_epoch,
            last_offset=message.last_end_offset,
            pre_vote=message.pre_vote,
        )
        body = _VoteQ.VoteRequest(cluster_id=cluster_id, topics=[_VoteQ.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])])
        return VOTE_KEY, VOTE_VERSION, body
    if isinstance(message, BeginQuorumEpochRequest):
        partition = _BeginQ.PartitionData(partition_index=METADATA_PARTITION, leader_id=message.source_id, leader_epoch=message.epoch)
        body = _BeginQ.BeginQuorumEpochRequest(
            cluster_id=cluster_id, topics=[_BeginQ.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])]
        )
        return BEGIN_QUORUM_EPOCH_KEY, BEGIN_QUORUM_EPOCH_VERSION, body
    if isinstance(message, EndQuorumEpochRequest):
        partition = _EndQ.PartitionData(
            partition_index=METADATA_PARTITION,
            leader_id=message.source_id,
            leader_epoch=message.epoch,
            preferred_successors=list(message.preferred_successors),
        )
        body = _EndQ.EndQuorumEpochRequest(cluster_id=cluster_id, topics=[_EndQ.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])])
        return END_QUORUM_EPOCH_KEY, END_QUORUM_EPOCH_VERSION, body
    if isinstance(message, FetchRequest):
        partition = _FetchQ.FetchPartition(
            partition=METADATA_PARTITION,
            current_leader_epoch=message.epoch,
            fetch_offset=message.fetch_offset,
            last_fetched_epoch=message.last_fetched_epoch,
            partition_max_bytes=0x7FFFFFFF,
        )
        body = _FetchQ.FetchRequest(
            cluster_id=cluster_id,
            replica_state=_FetchQ.ReplicaState(replica_id=message.source_id, replica_epoch=-1),
            max_wait_ms=message.max_wait_ms,
            min_bytes=0,
            topics=[_FetchQ.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=[partition])],
            forgotten_topics_data=[],
        )
        return FETCH_KEY, FETCH_VERSION, body
    if isinstance(message, FetchSnapshotRequest):
        partition = _SnapQ.PartitionSnapshot(
            partition=METADATA_PARTITION,
            current_leader_epoch=message.epoch,
            snapshot_id=_SnapQ.SnapshotId(end_offset=message.snapshot_id.end_offset, epoch=message.snapshot_id.epoch),
            position=message.position,
        )
        body = _SnapQ.FetchSnapshotRequest(
            cluster_id=cluster_id,
            replica_id=message.source_id,
            topics=[_SnapQ.TopicSnapshot(name=METADATA_TOPIC, partitions=[partition])],
        )
        return FETCH_SNAPSHOT_KEY, FETCH_SNAPSHOT_VERSION, body
    raise TypeError(f"not a core request: {message!r}")


# -- requests in -----------------------------------------------------------------


def fetch_replica_id(api_version: int, body) -> int:
    return body.replica_state.replica_id if api_version >= 15 else body.replica_id


def error_response(api_key: int, error: ErrorCode):
    """A request-level error answer to a Raft request (Vote, BeginQuorumEpoch, EndQuorumEpoch,
    Fetch, FetchSnapshot), with no partitions: Kafka's getErrorResponse of these requests."""
    return _error_response(api_key, error)


def _error_response(api_key: int, error: ErrorCode):
    if api_key == VOTE_KEY:
        return _VoteR.VoteResponse(error_code=error, topics=[])
    if api_key == BEGIN_QUORUM_EPOCH_KEY:
        return _BeginR.BeginQuorumEpochResponse(error_code=error, topics=[])
    if api_key == END_QUORUM_EPOCH_KEY:
        return _EndR.EndQuorumEpochResponse(error_code=error, topics=[])
    if api_key == FETCH_KEY:
        return _FetchR.FetchResponse(error_code=error, session_id=0, responses=[])
    return _SnapR.FetchSnapshotResponse(error_code=error, topics=[])


def _only_partition(topics, name_of, partitions_of, index_of, api_version: int, api_key: int):
    """The one partition data of ``__cluster_metadata-0``, or None when the request names anything else."""
    if len(topics) != 1:
        return None
    topic = topics[0]
    if api_key == FETCH_KEY and api_version >= 13:
        if topic.topic_id != METADATA_TOPIC_ID:
            return None
    elif name_of(topic) != METADATA_TOPIC:
        return None
    partitions = partitions_of(topic)
    if len(partitions) != 1 or index_of(partitions[0]) != METADATA_PARTITION:
        return None
    return partitions[0]


def request_from_wire(api_key: int, api_version: int, body, cluster_id: str, *, known_high_watermark: int = 0):
    """The core request in ``body``, or a ready error response body (see :func:`is_core_request`)."""
    if body.cluster_id is not None and body.cluster_id != cluster_id:
        return _error_response(api_key, ErrorCode.INCONSISTENT_CLUSTER_ID)
    if api_key == VOTE_KEY:
        p = _only_partition(body.topics, lambda t: t.topic_name, lambda t: t.partitions, lambda p: p.partition_index, api_version, api_key)
        if p is None:
            return _error_response(api_key, ErrorCode.INVALID_REQUEST)
        return VoteRequest(p.candidate_id, p.candidate_epoch, p.last_offset_epoch, p.last_offset, pre_vote=bool(api_version >= 2 and p.pre_vote))
    if api_key == BEGIN_QUORUM_EPOCH_KEY:
        p = _only_partition(body.topics, lambda t: t.topic_name, lambda t: t.partitions, lambda p: p.partition_index, api_version, api_key)
        if p is None:
            return _error_response(api_key, ErrorCode.INVALID_REQUEST)
        return BeginQuorumEpochRequest(p.leader_id, p.leader_epoch)
    if api_key == END_QUORUM_EPOCH_KEY:
        p = _only_partition(body.topics, lambda t: t.topic_name, lambda t: t.partitions, lambda p: p.partition_index, api_version, api_key)
        if p is None:
            return _error_response(api_key, ErrorCode.INVALID_REQUEST)
        if api_version >= 1:
            successors = tuple(c.candidate_id for c in p.preferred_candidates)
        else:
            successors = tuple(p.preferred_successors)
        return EndQuorumEpochRequest(p.leader_id, p.leader_epoch, successors)
    if api_key == FETCH_KEY:
        p = _only_partition(body.topics, lambda t: t.topic, lambda t: t.partitions, lambda p: p.partition, api_version, api_key)
        if p is None:
            return _error_response(api_key, ErrorCode.INVALID_REQUEST)
        return FetchRequest(
            fetch_replica_id(api_version, body),
            p.current_leader_epoch,
            p.fetch_offset,
            p.last_fetched_epoch,
            high_watermark=known_high_watermark,
            max_wait_ms=max(body.max_wait_ms, 0),
        )
    if api_key == FETCH_SNAPSHOT_KEY:
        p = _only_partition(body.topics, lambda t: t.name, lambda t: t.partitions, lambda p: p.partition, api_version, api_key)
        if p is None:
            return _error_response(api_key, ErrorCode.INVALID_REQUEST)
        return FetchSnapshotRequest(
            body.replica_id, p.current_leader_epoch, SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch), p.position
        )
    raise ValueError(f"api key {api_key} is not a Raft API")


# -- responses out ---------------------------------------------------------------


def response_to_wire(message, api_key: int, api_version: int):
    """The wire body of a core response, for the version its request came with."""
    if isinstance(message, VoteResponse):
        partition = _VoteR.PartitionData(
            partition_index=METADATA_PARTITION,
            error_code=message.error,
            leader_id=_leader(message.leader_id),
            leader_epoch=message.epoch,
            vote_granted=message.vote_granted,
        )
        return _VoteR.VoteResponse(error_code=ErrorCode.NONE, topics=[_VoteR.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])])
    if isinstance(message, (BeginQuorumEpochResponse, EndQuorumEpochResponse)):
        R = _BeginR if isinstance(message, BeginQuorumEpochResponse) else _EndR
        top = R.BeginQuorumEpochResponse if R is _BeginR else R.EndQuorumEpochResponse
        partition = R.PartitionData(
            partition_index=METADATA_PARTITION, error_code=message.error, leader_id=_leader(message.leader_id), leader_epoch=message.epoch
        )
        return top(error_code=ErrorCode.NONE, topics=[R.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])])
    if isinstance(message, FetchResponse):
        diverging = message.diverging
        snapshot = message.snapshot_id
        partition = _FetchR.PartitionData(
            partition_index=METADATA_PARTITION,
            error_code=message.error,
            high_watermark=message.high_watermark,
            log_start_offset=message.log_start_offset,
            diverging_epoch=_FetchR.EpochEndOffset(
                epoch=diverging.epoch if diverging else -1, end_offset=diverging.offset if diverging else -1
            ),
            current_leader=_FetchR.LeaderIdAndEpoch(leader_id=_leader(message.leader_id), leader_epoch=message.epoch),
            snapshot_id=_FetchR.SnapshotId(end_offset=snapshot.end_offset if snapshot else -1, epoch=snapshot.epoch if snapshot else -1),
            records=encode_batches(message.batches),
        )
        topic = _FetchR.FetchableTopicResponse(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[partition])
        return _FetchR.FetchResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0, responses=[topic])
    if isinstance(message, FetchSnapshotResponse):
        partition = _SnapR.PartitionSnapshot(
            index=METADATA_PARTITION,
            error_code=message.error,
            snapshot_id=_SnapR.SnapshotId(end_offset=message.snapshot_id.end_offset, epoch=message.snapshot_id.epoch),
            current_leader=_SnapR.LeaderIdAndEpoch(leader_id=_leader(message.leader_id), leader_epoch=message.epoch),
            size=message.size,
            position=message.position,
            unaligned_records=bytes(message.data),
        )
        return _SnapR.FetchSnapshotResponse(
            throttle_time_ms=0, error_code=ErrorCode.NONE, topics=[_SnapR.TopicSnapshot(name=METADATA_TOPIC, partitions=[partition])]
        )
    raise TypeError(f"not a core response: {message!r}")


# -- responses in ----------------------------------------------------------------


def _response_partition(body, api_key: int, api_version: int, topics_of, name_of, partitions_of, index_of):
    error = ErrorCode(body.error_code)
    if error != ErrorCode.NONE:
        raise WireError(error, "top-level error")
    partition = _only_partition(topics_of(body), name_of, partitions_of, index_of, api_version, api_key)
    if partition is None:
        raise WireError(ErrorCode.INVALID_REQUEST, "the response is not for __cluster_metadata-0")
    return partition


def response_from_wire(api_key: int, api_version: int, body, source_id: int, request):
    """The core response in ``body``, sent by ``source_id`` in answer to ``request``.
    Raises WireError when it carries nothing for the core."""
    if api_key == VOTE_KEY:
        p = _response_partition(body, api_key, api_version, lambda b: b.topics, lambda t: t.topic_name, lambda t: t.partitions, lambda p: p.partition_index)
        return VoteResponse(
            source_id, p.leader_epoch, _leader_or_none(p.leader_id), p.vote_granted, pre_vote=request.pre_vote, error=ErrorCode(p.error_code)
        )
    if api_key in (BEGIN_QUORUM_EPOCH_KEY, END_QUORUM_EPOCH_KEY):
        p = _response_partition(body, api_key, api_version, lambda b: b.topics, lambda t: t.topic_name, lambda t: t.partitions, lambda p: p.partition_index)
        cls = BeginQuorumEpochResponse if api_key == BEGIN_QUORUM_EPOCH_KEY else EndQuorumEpochResponse
        return cls(source_id, p.leader_epoch, _leader_or_none(p.leader_id), ErrorCode(p.error_code))
    if api_key == FETCH_KEY:
        p = _response_partition(body, api_key, api_version, lambda b: b.responses, lambda t: t.topic, lambda t: t.partitions, lambda p: p.partition_index)
        diverging = None
        if p.diverging_epoch.epoch >= 0 and p.diverging_epoch.end_offset >= 0:
            diverging = OffsetAndEpoch(p.diverging_epoch.end_offset, p.diverging_epoch.epoch)
        snapshot = None
        if p.snapshot_id.end_offset >= 0 and p.snapshot_id.epoch >= 0:
            snapshot = SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        return FetchResponse(
            source_id,
            p.current_leader.leader_epoch,
            _leader_or_none(p.current_leader.leader_id),
            request.fetch_offset,
            request.last_fetched_epoch,
            error=ErrorCode(p.error_code),
            high_watermark=p.high_watermark,
            log_start_offset=p.log_start_offset,
            batches=decode_batches(p.records),
            diverging=diverging,
            snapshot_id=snapshot,
        )
    if api_key == FETCH_SNAPSHOT_KEY:
        p = _response_partition(body, api_key, api_version, lambda b: b.topics, lambda t: t.name, lambda t: t.partitions, lambda p: p.index)
        return FetchSnapshotResponse(
            source_id,
            p.current_leader.leader_epoch,
            _leader_or_none(p.current_leader.leader_id),
            SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch),
            p.position,
            error=ErrorCode(p.error_code),
            size=p.size,
            data=bytes(p.unaligned_records or b""),
        )
    raise ValueError(f"api key {api_key} is not a Raft API")


# -- DescribeQuorum ----------------------------------------------------------------


def describe_quorum_request():
    partition = _DescQ.PartitionData(partition_index=METADATA_PARTITION)
    return _DescQ.DescribeQuorumRequest(topics=[_DescQ.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])])


def _replica(state: ReplicaState):
    return _DescR.ReplicaState(
        replica_id=state.replica_id,
        log_end_offset=state.end_offset,
        last_fetch_timestamp=-1 if state.last_fetch_ms is None else state.last_fetch_ms,
        last_caught_up_timestamp=-1 if state.last_caught_up_ms is None else state.last_caught_up_ms,
    )


def describe_quorum_response(info: QuorumInfo, api_version: int):
    partition = _DescR.PartitionData(
        partition_index=METADATA_PARTITION,
        error_code=ErrorCode.NONE,
        leader_id=_leader(info.leader_id),
        leader_epoch=info.leader_epoch,
        high_watermark=info.high_watermark,
        current_voters=[_replica(v) for v in info.voters],
        observers=[_replica(o) for o in info.observers],
    )
    return _DescR.DescribeQuorumResponse(
        error_code=ErrorCode.NONE, topics=[_DescR.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])], nodes=[]
    )


def describe_quorum_error(api_version: int, error: ErrorCode, request=None):
    """A partition-level error for ``__cluster_metadata-0`` (Kafka answers NOT_LEADER_OR_FOLLOWER there)."""
    if error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
        partition = _DescR.PartitionData(
            partition_index=METADATA_PARTITION, error_code=error, leader_id=-1, leader_epoch=-1, high_watermark=-1,
            current_voters=[], observers=[],
        )
        return _DescR.DescribeQuorumResponse(
            error_code=ErrorCode.NONE, topics=[_DescR.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])], nodes=[]
        )
    return _DescR.DescribeQuorumResponse(error_code=error, topics=[], nodes=[])
