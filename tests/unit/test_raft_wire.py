"""The Raft core's messages survive the trip through Kafka's wire encodings."""

from __future__ import annotations

import pytest

from controller.raft import wire
from controller.raft.log import Batch, OffsetAndEpoch, SnapshotId
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
from protocol.framing import decode_request, decode_response, encode_request, encode_response
from protocol.registry import APIS_BY_KEY

CLUSTER = "pybroker-test-cluster"

REQUESTS = [
    VoteRequest(1, 5, 4, 100, pre_vote=True),
    VoteRequest(1, 5, 4, 100),
    BeginQuorumEpochRequest(2, 7),
    EndQuorumEpochRequest(2, 7, (3, 1)),
    FetchRequest(3, 7, 10, 6, high_watermark=9, max_wait_ms=500),
    FetchSnapshotRequest(3, 7, SnapshotId(10, 2), 20),
]


def through_wire_request(message, cluster_id=CLUSTER):
    api_key, api_version, body = wire.request_to_wire(message, CLUSTER)
    frame = encode_request(APIS_BY_KEY[api_key], api_version, 7, "raft", body)
    _, decoded = decode_request(frame[4:])
    return api_key, api_version, decoded


@pytest.mark.parametrize("message", REQUESTS, ids=lambda m: type(m).__name__)
def test_requests_round_trip(message):
    api_key, api_version, body = through_wire_request(message)
    known_hw = message.high_watermark if isinstance(message, FetchRequest) else 0
    assert wire.request_from_wire(api_key, api_version, body, CLUSTER, known_high_watermark=known_hw) == message


@pytest.mark.parametrize("message", REQUESTS, ids=lambda m: type(m).__name__)
def test_another_cluster_gets_inconsistent_cluster_id(message):
    api_key, api_version, body = through_wire_request(message)
    answer = wire.request_from_wire(api_key, api_version, body, "another-cluster")
    assert not wire.is_core_request(answer)
    assert answer.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID


@pytest.mark.parametrize("message", REQUESTS, ids=lambda m: type(m).__name__)
def test_a_request_for_another_partition_is_invalid(message):
    api_key, api_version, body = through_wire_request(message)
    topics = body.responses if hasattr(body, "responses") else body.topics
    partitions = topics[0].partitions
    for attribute in ("partition_index", "partition"):
        if hasattr(partitions[0], attribute):
            setattr(partitions[0], attribute, 1)
    answer = wire.request_from_wire(api_key, api_version, body, CLUSTER)
    assert not wire.is_core_request(answer)
    assert answer.error_code == ErrorCode.INVALID_REQUEST


def test_vote_versions_before_2_are_never_pre_votes():
    _, _, body = through_wire_request(VoteRequest(1, 5, 4, 100, pre_vote=True))
    assert wire.request_from_wire(wire.VOTE_KEY, 1, body, CLUSTER).pre_vote is False


RESPONSES = [
    (REQUESTS[0], VoteResponse(9, 5, None, True, pre_vote=True)),
    (REQUESTS[1], VoteResponse(9, 5, 4, False)),
    (REQUESTS[2], BeginQuorumEpochResponse(9, 7, 2)),
    (REQUESTS[3], EndQuorumEpochResponse(9, 7, None, ErrorCode.FENCED_LEADER_EPOCH)),
    (
        REQUESTS[4],
        FetchResponse(
            9, 7, 2, 10, 6, high_watermark=12, log_start_offset=3,
            batches=(Batch(10, 7, (b"a", b"")), Batch(12, 7, (b"L",), control=True)),
        ),
    ),
    (REQUESTS[4], FetchResponse(9, 7, 2, 10, 6, diverging=OffsetAndEpoch(8, 5))),
    (REQUESTS[4], FetchResponse(9, 7, 2, 10, 6, snapshot_id=SnapshotId(50, 6))),
    (REQUESTS[4], FetchResponse(9, 8, None, 10, 6, error=ErrorCode.FENCED_LEADER_EPOCH)),
    (REQUESTS[5], FetchSnapshotResponse(9, 7, 2, SnapshotId(10, 2), 20, size=100, data=b"abc")),
]


@pytest.mark.parametrize("request_message, response", RESPONSES, ids=lambda m: type(m).__name__)
def test_responses_round_trip_at_every_served_version(request_message, response):
    api_key = wire.api_key_of(response)
    api = APIS_BY_KEY[api_key]
    low, high = wire.SERVED_VERSIONS[api_key]
    for version in range(low, high + 1):
        body = wire.response_to_wire(response, api_key, version)
        _, decoded = decode_response(api, version, bytes(encode_response(api, version, 3, body))[4:])
        assert wire.response_from_wire(api_key, version, decoded, 9, request_message) == response


def test_a_top_level_error_carries_nothing_for_the_core():
    body = wire.request_from_wire(wire.VOTE_KEY, 2, through_wire_request(REQUESTS[0])[2], "other")
    with pytest.raises(wire.WireError):
        wire.response_from_wire(wire.VOTE_KEY, 2, body, 9, REQUESTS[0])


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_quorum_response_encodes(version):
    info = QuorumInfo(1, 4, 77, (ReplicaState(1, 77, 1000, 1000), ReplicaState(2, 70, None, None)), (ReplicaState(5, 60, 900, 800),))
    api = APIS_BY_KEY[wire.DESCRIBE_QUORUM_KEY]
    body = wire.describe_quorum_response(info, version)
    _, decoded = decode_response(api, version, bytes(encode_response(api, version, 3, body))[4:])
    partition = decoded.topics[0].partitions[0]
    assert (partition.leader_id, partition.leader_epoch, partition.high_watermark) == (1, 4, 77)
    assert [(v.replica_id, v.log_end_offset) for v in partition.current_voters] == [(1, 77), (2, 70)]
    assert [o.replica_id for o in partition.observers] == [5]
    if version >= 1:
        assert partition.current_voters[1].last_fetch_timestamp == -1
