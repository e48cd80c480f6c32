"""``pybroker metadata-quorum describe``: the lines printed for a decoded DescribeQuorum response."""

from __future__ import annotations

import pytest

from broker.cli import main
from broker.tools.metadata_quorum import (
    QuorumError,
    format_replication,
    format_status,
    metadata_partition,
    replica_rows,
)
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

_R = struct_classes(APIS_BY_NAME["DescribeQuorum"].response)
NOW_MS = 1_700_000_010_000


def replica(node_id: int, end_offset: int, fetch_ms: int = -1, caught_up_ms: int = -1):
    return _R.ReplicaState(
        replica_id=node_id, log_end_offset=end_offset, last_fetch_timestamp=fetch_ms, last_caught_up_timestamp=caught_up_ms
    )


def response(voters, observers=(), *, leader_id=2, epoch=5, high_watermark=100, error=ErrorCode.NONE, message=None, top_error=ErrorCode.NONE):
    partition = _R.PartitionData(
        partition_index=0, error_code=error, error_message=message, leader_id=leader_id, leader_epoch=epoch,
        high_watermark=high_watermark, current_voters=list(voters), observers=list(observers),
    )
    topic = _R.TopicData(topic_name="__cluster_metadata", partitions=[partition])
    return _R.DescribeQuorumResponse(error_code=top_error, error_message=None, topics=[topic], nodes=[])


HEALTHY = response(
    [
        replica(3, 90, NOW_MS - 500, NOW_MS - 4000),
        replica(2, 100, NOW_MS, NOW_MS),
        replica(1, 100, NOW_MS - 100, NOW_MS - 100),
    ],
    [replica(5, 80, NOW_MS - 50, NOW_MS - 9000), replica(4, 100, NOW_MS - 20, NOW_MS - 20)],
)


def test_status_lines_up_like_kafkas_tool():
    assert format_status(HEALTHY, "MkU3OEVBNTcwNTJENDM2Qg") == [
        "ClusterId:              MkU3OEVBNTcwNTJENDM2Qg",
        "LeaderId:               2",
        "LeaderEpoch:            5",
        "HighWatermark:          100",
        "MaxFollowerLag:         10",
        "MaxFollowerLagTimeMs:   4000",
        "CurrentVoters:          [1,2,3]",
        "CurrentObservers:       [4,5]",
    ]


def test_status_without_a_cluster_id_leaves_its_line_out():
    lines = format_status(HEALTHY)
    assert lines[0] == "LeaderId:               2" and len(lines) == 7


def test_status_of_a_caught_up_quorum_has_no_lag():
    quorum = response([replica(2, 100, NOW_MS, NOW_MS), replica(1, 100, NOW_MS - 5, NOW_MS - 5)], leader_id=2)
    assert format_status(quorum)[3:5] == ["MaxFollowerLag:         0", "MaxFollowerLagTimeMs:   0"]


def test_status_of_a_single_voter():
    quorum = response([replica(1, 7, NOW_MS, NOW_MS)], leader_id=1, high_watermark=7)
    assert format_status(quorum)[3:] == [
        "MaxFollowerLag:         0",
        "MaxFollowerLagTimeMs:   0",
        "CurrentVoters:          [1]",
        "CurrentObservers:       []",
    ]


def test_an_unknown_catch_up_time_is_minus_one():
    quorum = response([replica(2, 100, NOW_MS, NOW_MS), replica(1, 40)], leader_id=2)
    assert format_status(quorum)[3:5] == ["MaxFollowerLag:         60", "MaxFollowerLagTimeMs:   -1"]


def test_replication_table_leader_first_then_followers_then_observers():
    lines = format_replication(HEALTHY)
    assert [line.split() for line in lines] == [
        ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"],
        ["2", "100", "0", str(NOW_MS), str(NOW_MS), "Leader"],
        ["1", "100", "0", str(NOW_MS - 100), str(NOW_MS - 100), "Follower"],
        ["3", "90", "10", str(NOW_MS - 500), str(NOW_MS - 4000), "Follower"],
        ["4", "100", "0", str(NOW_MS - 20), str(NOW_MS - 20), "Observer"],
        ["5", "80", "20", str(NOW_MS - 50), str(NOW_MS - 9000), "Observer"],
    ]
    # Columns are padded to a common width, so each column starts at the same place.
    starts = {line.index("Status") if i == 0 else line.rindex(line.split()[-1]) for i, line in enumerate(lines)}
    assert len(starts) == 1


def test_replication_table_human_readable():
    lines = format_replication(response([replica(2, 10, NOW_MS - 3, -1)], leader_id=2), now_ms=NOW_MS, human_readable=True)
    assert lines[1].split() == ["2", "10", "0", "3", "ms", "ago", "-1", "Leader"]


def test_rows_without_a_leader_count_lag_from_the_high_watermark():
    rows = replica_rows(response([replica(1, 50), replica(2, 40)], leader_id=-1, high_watermark=50))
    assert [(r.node_id, r.lag, r.status) for r in rows] == [(1, 0, "Follower"), (2, 10, "Follower")]


@pytest.mark.parametrize(
    "quorum, expected",
    [
        (response([], error=ErrorCode.NOT_LEADER_OR_FOLLOWER, leader_id=-1), "NOT_LEADER_OR_FOLLOWER"),
        (response([], error=ErrorCode.NOT_LEADER_OR_FOLLOWER, message="ask node 3"), "NOT_LEADER_OR_FOLLOWER: ask node 3"),
        (response([], top_error=ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "CLUSTER_AUTHORIZATION_FAILED"),
        (_R.DescribeQuorumResponse(error_code=0, error_message=None, topics=[], nodes=[]), "no __cluster_metadata-0"),
    ],
)
def test_errors_in_the_response_are_raised(quorum, expected):
    for render in (format_status, format_replication, metadata_partition):
        with pytest.raises(QuorumError) as exc:
            render(quorum)
        assert expected in str(exc.value)


def test_the_command_exits_1_when_nobody_answers(capsys):
    import socket

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    assert main(["metadata-quorum", "--bootstrap-server", f"127.0.0.1:{port}", "describe", "--status"]) == 1
    assert "cannot connect" in capsys.readouterr().err


def test_the_command_needs_one_target_and_one_view(capsys):
    with pytest.raises(SystemExit):
        main(["metadata-quorum", "describe", "--status"])
    with pytest.raises(SystemExit):
        main(["metadata-quorum", "--bootstrap-server", "h:1", "describe"])
    with pytest.raises(SystemExit):
        main(["metadata-quorum", "--bootstrap-server", "h:1", "--bootstrap-controller", "h:2", "describe", "--status"])
