"""``pybroker metadata-quorum``: the state of the metadata quorum, like kafka-metadata-quorum.sh.

It asks a controller (``--bootstrap-controller``, a controller listener) or a
broker (``--bootstrap-server``, which passes the request on to the active
controller) for DescribeQuorum of ``__cluster_metadata-0``, at the highest
version both sides know (ApiVersions first). Only the quorum's leader knows
every replica's progress, so a node that cannot reach it answers
NOT_LEADER_OR_FOLLOWER and the tool says so.

DescribeQuorum carries no cluster id; ``--status`` asks the same node for it
with a Metadata request, which only brokers answer.

The formatting functions are pure: they take a decoded DescribeQuorum response
(and the clock) and return lines, so they are tested without a broker.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.tools.client import KafkaConnection, ToolError, parse_bootstrap
from controller.raft import wire
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME

DESCRIBE_QUORUM_MAX_VERSION = 2  # the newest DescribeQuorum pybroker declares
METADATA_VERSION = 12  # the oldest with everything needed would do; cluster_id came in v2
API_VERSIONS_VERSION = 3
STATUS_LABEL_WIDTH = 24  # Kafka's tool lines the values of --status up in this column


class QuorumError(ToolError):
    """The quorum answered, with an error (e.g. NOT_LEADER_OR_FOLLOWER)."""


@dataclass
class ReplicaRow:
    node_id: int
    log_end_offset: int
    lag: int
    last_fetch_timestamp_ms: int
    last_caught_up_timestamp_ms: int
    status: str  # Leader, Follower or Observer


# --------------------------------------------------------------------------- talking to a node


def _api_version_ranges(connection: KafkaConnection) -> dict[int, tuple[int, int]]:
    response = connection.call(
        "ApiVersions", API_VERSIONS_VERSION, client_software_name="pybroker-metadata-quorum", client_software_version="1"
    )
    if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
        # The node is older than ApiVersions v3; v0 has no fields to send.
        response = connection.call("ApiVersions", 0)
    if response.error_code != ErrorCode.NONE:
        raise ToolError(f"ApiVersions failed: {_error_name(response.error_code)}")
    return {entry.api_key: (entry.min_version, entry.max_version) for entry in response.api_keys}


def _usable_version(ranges: dict[int, tuple[int, int]], api_name: str, newest_known: int) -> int | None:
    supported = ranges.get(APIS_BY_NAME[api_name].key)
    if supported is None or supported[0] > newest_known:
        return None
    return min(supported[1], newest_known)


def describe_quorum(bootstrap: str, timeout_s: float, *, want_cluster_id: bool = False, settings=None):
    """(DescribeQuorum response, cluster id or None, why there is no cluster id or None).

    ``settings``: the ``--command-config`` ClientSettings (TLS, SASL), or None for plaintext."""
    host, port = parse_bootstrap(bootstrap)
    connection = KafkaConnection(host, port, timeout_s, settings)
    try:
        ranges = _api_version_ranges(connection)
        version = _usable_version(ranges, "DescribeQuorum", DESCRIBE_QUORUM_MAX_VERSION)
        if version is None:
            raise ToolError(f"{host}:{port} does not answer DescribeQuorum")
        request = wire.describe_quorum_request()
        response = connection.call("DescribeQuorum", version, topics=request.topics)
        cluster_id, cluster_id_error = None, None
        if want_cluster_id:
            cluster_id, cluster_id_error = _cluster_id(connection, ranges)
    finally:
        connection.close()
    return response, cluster_id, cluster_id_error


def _cluster_id(connection: KafkaConnection, ranges) -> tuple[str | None, str | None]:
    version = _usable_version(ranges, "Metadata", METADATA_VERSION)
    if version is None or version < 2:
        return None, "the node does not answer Metadata with a cluster id (a controller listener does not)"
    try:
        # An empty topic list asks for brokers and the cluster id only.
        response = connection.call("Metadata", version, topics=[], allow_auto_topic_creation=False)
    except ToolError as exc:
        return None, str(exc)
    if response.cluster_id is None:
        return None, "the node answered Metadata without a cluster id"
    return response.cluster_id, None


# --------------------------------------------------------------------------- the response


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _error_text(code: int, message: str | None) -> str:
    return _error_name(code) + (f": {message}" if message else "")


def metadata_partition(response):
    """The ``__cluster_metadata-0`` entry of a DescribeQuorum response; its
    errors (top level or partition level) raise QuorumError."""
    if response.error_code != ErrorCode.NONE:
        raise QuorumError(f"DescribeQuorum failed: {_error_text(response.error_code, getattr(response, 'error_message', None))}")
    for topic in response.topics:
        if topic.topic_name != wire.METADATA_TOPIC:
            continue
        for partition in topic.partitions:
            if partition.partition_index != wire.METADATA_PARTITION:
                continue
            if partition.error_code != ErrorCode.NONE:
                message = getattr(partition, "error_message", None)
                raise QuorumError(f"DescribeQuorum failed: {_error_text(partition.error_code, message)}")
            return partition
    raise QuorumError(f"DescribeQuorum: the response has no {wire.METADATA_TOPIC}-{wire.METADATA_PARTITION}")


def replica_rows(response) -> list[ReplicaRow]:
    """The leader, then the other voters, then the observers (each by node id).
    Lag is counted from the leader's log end offset, as Kafka's tool does."""
    partition = metadata_partition(response)
    leader = next((v for v in partition.current_voters if v.replica_id == partition.leader_id), None)
    leader_end_offset = leader.log_end_offset if leader is not None else partition.high_watermark

    def row(replica, status: str) -> ReplicaRow:
        return ReplicaRow(
            replica.replica_id,
            replica.log_end_offset,
            leader_end_offset - replica.log_end_offset,
            replica.last_fetch_timestamp,
            replica.last_caught_up_timestamp,
            status,
        )

    rows = [row(leader, "Leader")] if leader is not None else []
    followers = sorted((v for v in partition.current_voters if v is not leader), key=lambda v: v.replica_id)
    rows += [row(v, "Follower") for v in followers]
    rows += [row(o, "Observer") for o in sorted(partition.observers, key=lambda o: o.replica_id)]
    return rows


def format_status(response, cluster_id: str | None = None) -> list[str]:
    """The ``describe --status`` lines. MaxFollowerLag is how far the voter with
    the shortest log is behind the leader; MaxFollowerLagTimeMs how long ago,
    by the leader's clock, that voter was last caught up (-1 when unknown).
    Without a cluster id the ClusterId line is left out."""
    partition = metadata_partition(response)
    rows = replica_rows(response)
    leader = rows[0] if rows and rows[0].status == "Leader" else None
    voters = [r for r in rows if r.status != "Observer"]
    slowest = min(voters, key=lambda r: r.log_end_offset, default=None)
    if leader is None or slowest is None:
        max_lag, max_lag_time_ms = -1, -1
    elif slowest.log_end_offset >= leader.log_end_offset:
        max_lag, max_lag_time_ms = 0, 0
    else:
        max_lag = leader.log_end_offset - slowest.log_end_offset
        known = leader.last_caught_up_timestamp_ms >= 0 and slowest.last_caught_up_timestamp_ms >= 0
        max_lag_time_ms = leader.last_caught_up_timestamp_ms - slowest.last_caught_up_timestamp_ms if known else -1
    fields = [("ClusterId", cluster_id)] if cluster_id is not None else []
    fields += [
        ("LeaderId", partition.leader_id),
        ("LeaderEpoch", partition.leader_epoch),
        ("HighWatermark", partition.high_watermark),
        ("MaxFollowerLag", max_lag),
        ("MaxFollowerLagTimeMs", max_lag_time_ms),
        ("CurrentVoters", _id_list(v.replica_id for v in partition.current_voters)),
        ("CurrentObservers", _id_list(o.replica_id for o in partition.observers)),
    ]
    return [f"{name + ':':<{STATUS_LABEL_WIDTH}}{value}" for name, value in fields]


def _id_list(ids) -> str:
    return "[" + ",".join(str(i) for i in sorted(ids)) + "]"


def format_replication(response, *, now_ms: int | None = None, human_readable: bool = False) -> list[str]:
    """The ``describe --replication`` table, columns padded to their widest cell.
    Timestamps are epoch milliseconds, or with ``human_readable`` "N ms ago"
    from ``now_ms``; -1 (never) stays -1."""
    if human_readable and now_ms is None:
        raise ValueError("human_readable needs now_ms")

    def timestamp(ms: int) -> str:
        if ms < 0 or not human_readable:
            return str(ms)
        return f"{max(now_ms - ms, 0)} ms ago"

    table = [("NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status")]
    for row in replica_rows(response):
        table.append(
            (
                str(row.node_id),
                str(row.log_end_offset),
                str(row.lag),
                timestamp(row.last_fetch_timestamp_ms),
                timestamp(row.last_caught_up_timestamp_ms),
                row.status,
            )
        )
    widths = [max(len(line[column]) for line in table) for column in range(len(table[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table]
