"""Every partition-scoped request sent to a partition's leader, to a follower
and to a broker that does not host it, on three combined nodes: each answers
with Kafka's error code, and no request changes or reveals a follower's state
as if it led the partition (issue: a DeleteRecords sent to a follower moved
that follower's log start offset alone, and its ListOffsets answered with it).

After the sweep every replica's log start offset, log end offset and batch
bytes equal the leader's; the replicas' own positions are read with ListOffsets
as a debugging tool (``replica_id`` -2), which Kafka serves from any replica.

The second test deletes records through the admin clients (confluent-kafka,
kafka-python) while preferred-leader elections move the leadership back and
forth: a call that succeeds has reached every live replica before it answers,
one that fails is retried by the test as an application would, and at the end
all replicas agree.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

pytest.importorskip("confluent_kafka")

from protocol.errors import ErrorCode  # noqa: E402
from protocol.records import build_batch  # noqa: E402
from protocol.registry import APIS_BY_NAME  # noqa: E402
from protocol.schema import struct_classes  # noqa: E402
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, produce_batch, wait_until  # noqa: E402

BOUND_S = 60.0
RECORDS_PER_PARTITION = 20
DELETE_OFFSET = 5
CONSUMER = -1
DEBUGGING = -2

NONE = ErrorCode.NONE
NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER
FENCED = ErrorCode.FENCED_LEADER_EPOCH
UNKNOWN_EPOCH = ErrorCode.UNKNOWN_LEADER_EPOCH


def request(cluster: ReplicatedCluster, node: int, api_name: str, version: int, **fields):
    """One raw request to ``node``'s client listener; the response body."""
    api = APIS_BY_NAME[api_name]
    Q = struct_classes(api.request)
    body = getattr(Q, f"{api.name}Request")(**fields)
    return cluster.request(node, api, version, body, 30000, "leadership-checks")


def _q(api_name: str):
    return struct_classes(APIS_BY_NAME[api_name].request)


def list_offsets(cluster, node, topic, partition, timestamp, *, replica_id=CONSUMER, epoch=-1):
    Q = _q("ListOffsets")
    body = request(
        cluster, node, "ListOffsets", 7, replica_id=replica_id, isolation_level=0,
        topics=[Q.ListOffsetsTopic(name=topic, partitions=[
            Q.ListOffsetsPartition(partition_index=partition, current_leader_epoch=epoch, timestamp=timestamp)
        ])],
    )
    answer = body.topics[0].partitions[0]
    return answer.error_code, answer.offset


def delete_records(cluster, node, topic, partition, offset):
    Q = _q("DeleteRecords")
    body = request(
        cluster, node, "DeleteRecords", 2, timeout_ms=20000,
        topics=[Q.DeleteRecordsTopic(name=topic, partitions=[Q.DeleteRecordsPartition(partition_index=partition, offset=offset)])],
    )
    answer = body.topics[0].partitions[0]
    return answer.error_code, answer.low_watermark


def offset_for_leader_epoch(cluster, node, topic, partition, leader_epoch, *, epoch=-1):
    Q = _q("OffsetForLeaderEpoch")
    body = request(
        cluster, node, "OffsetForLeaderEpoch", 4, replica_id=CONSUMER,
        topics=[Q.OffsetForLeaderTopic(topic=topic, partitions=[
            Q.OffsetForLeaderPartition(partition=partition, current_leader_epoch=epoch, leader_epoch=leader_epoch)
        ])],
    )
    answer = body.topics[0].partitions[0]
    return answer.error_code, answer.end_offset


def describe_producers(cluster, node, topic, partition):
    Q = _q("DescribeProducers")
    body = request(cluster, node, "DescribeProducers", 0, topics=[Q.TopicRequest(name=topic, partition_indexes=[partition])])
    return body.topics[0].partitions[0].error_code


def produce(cluster, node, topic, partition, value: bytes):
    Q = _q("Produce")
    batch = build_batch([(b"k", value)])
    body = request(
        cluster, node, "Produce", 9, transactional_id=None, acks=-1, timeout_ms=20000,
        topic_data=[Q.TopicProduceData(name=topic, partition_data=[Q.PartitionProduceData(index=partition, records=batch)])],
    )
    return body.responses[0].partition_responses[0].error_code


def fetch(cluster, node, topic, partition, version: int):
    Q = _q("Fetch")
    body = request(
        cluster, node, "Fetch", version, replica_id=CONSUMER, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=[Q.FetchTopic(topic=topic, partitions=[
            Q.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                             log_start_offset=-1, partition_max_bytes=1 << 20)
        ])],
        forgotten_topics_data=[], rack_id="",
    )
    return body.responses[0].partitions[0].error_code


def write_txn_marker(cluster, node, topic, partition):
    Q = _q("WriteTxnMarkers")
    body = request(
        cluster, node, "WriteTxnMarkers", 1,
        markers=[Q.WritableTxnMarker(producer_id=999_999, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
                                     topics=[Q.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])])],
    )
    return body.markers[0].topics[0].partitions[0].error_code


def replica_positions(cluster, node, topic, partition) -> tuple[int, int]:
    """(log start, log end) of ``node``'s own replica, asked as a debugging tool."""
    start_error, start = list_offsets(cluster, node, topic, partition, -2, replica_id=DEBUGGING)
    end_error, end = list_offsets(cluster, node, topic, partition, -1, replica_id=DEBUGGING)
    assert start_error == NONE and end_error == NONE, (node, start_error, end_error)
    return start, end


def replicas_agree(cluster, topic, partition, replicas) -> tuple[bool, str]:
    positions = {node: replica_positions(cluster, node, topic, partition) for node in replicas}
    if len(set(positions.values())) != 1:
        return False, f"positions differ: {positions}"
    start, end = next(iter(positions.values()))
    same, detail = cluster.segments_identical(topic, partition, end, nodes=tuple(replicas), quiescent=True)
    return same, f"{positions}; {detail}"


@pytest.fixture
def cluster(tmp_path):
    cluster = ReplicatedCluster(tmp_path, extra={"auto.leader.rebalance.enable": "false"})
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _roles(cluster, topic, partitions):
    """partition -> (leader, followers, non-hosts, leader epoch), once every replica is in the ISR."""
    roles = {}
    for partition in range(partitions):
        state = wait_until(
            lambda: (s := cluster.partition(topic, partition)) is not None and s.leader in s.replicas
            and len(s.isr) == len(s.replicas) and s,
            BOUND_S,
        )
        assert state, f"{topic}-{partition} never had its full ISR"
        followers = [r for r in state.replicas if r != state.leader]
        outsiders = [n for n in NODE_IDS if n not in state.replicas]
        roles[partition] = (state.leader, followers, outsiders, state.leader_epoch)
    return roles


def test_every_partition_scoped_request_checks_leadership(cluster):
    layouts = {"rf2": 2, "rf3": 3}
    for topic, rf in layouts.items():
        cluster.create_topic(topic, partitions=3, replication_factor=rf)
    for topic in layouts:
        for partition in range(3):
            history = produce_batch(cluster.bootstrap(), topic, RECORDS_PER_PARTITION, partition=partition)
            assert len(history.acked) == RECORDS_PER_PARTITION, history.summary()
    # A leader epoch above 0 somewhere, so that an older epoch can be sent.
    state = wait_until(lambda: (s := cluster.partition("rf3", 0)) is not None and len(s.isr) == 3 and s, BOUND_S)
    _rotate_and_elect(cluster, "rf3", 0, state.replicas)
    assert wait_until(lambda: (s := cluster.partition("rf3", 0)) is not None and s.leader_epoch > 0, BOUND_S)

    fenced_checked = 0
    for topic in layouts:
        roles = _roles(cluster, topic, 3)
        for partition, (leader, followers, outsiders, epoch) in roles.items():
            where = f"{topic}-{partition} (leader {leader}, followers {followers}, not hosted on {outsiders})"
            others = followers + outsiders
            # The wait for the high watermark: every replica holds every record.
            assert wait_until(lambda: replicas_agree(cluster, topic, partition, [leader, *followers])[0], BOUND_S), where
            log_end = RECORDS_PER_PARTITION

            # ListOffsets: the leader only; a stale or future epoch is refused first.
            assert list_offsets(cluster, leader, topic, partition, -1) == (NONE, log_end), where
            assert list_offsets(cluster, leader, topic, partition, -2) == (NONE, 0), where
            assert list_offsets(cluster, leader, topic, partition, -1, epoch=epoch) == (NONE, log_end), where
            if epoch > 0:  # -1 means "no check", so epoch 0 has no older one to send
                assert list_offsets(cluster, leader, topic, partition, -1, epoch=epoch - 1)[0] == FENCED, where
                fenced_checked += 1
            assert list_offsets(cluster, leader, topic, partition, -1, epoch=epoch + 1)[0] == UNKNOWN_EPOCH, where
            assert list_offsets(cluster, leader, topic, partition, -1, replica_id=followers[0])[0] == NONE, where
            for node in followers:
                for timestamp in (-1, -2, 0):
                    assert list_offsets(cluster, node, topic, partition, timestamp)[0] == NOT_LEADER, (where, node, timestamp)
                assert list_offsets(cluster, node, topic, partition, -1, replica_id=leader)[0] == NOT_LEADER, (where, node)
                if epoch > 0:
                    assert list_offsets(cluster, node, topic, partition, -1, epoch=epoch - 1)[0] == FENCED, (where, node)
                # A debugging tool may read a follower's own replica, as Kafka allows.
                assert list_offsets(cluster, node, topic, partition, -1, replica_id=DEBUGGING) == (NONE, log_end), (where, node)
            for node in outsiders:
                assert list_offsets(cluster, node, topic, partition, -1)[0] == NOT_LEADER, (where, node)
                assert list_offsets(cluster, node, topic, partition, -1, replica_id=DEBUGGING)[0] == NOT_LEADER, (where, node)

            # OffsetForLeaderEpoch and DescribeProducers: the leader only.
            assert offset_for_leader_epoch(cluster, leader, topic, partition, epoch) == (NONE, log_end), where
            assert describe_producers(cluster, leader, topic, partition) == NONE, where
            for node in others:
                assert offset_for_leader_epoch(cluster, node, topic, partition, epoch)[0] == NOT_LEADER, (where, node)
                assert describe_producers(cluster, node, topic, partition) == NOT_LEADER, (where, node)

            # Fetch: consumers read from a follower from v11 on (KIP-392), never from a non-host.
            assert fetch(cluster, leader, topic, partition, 12) == NONE, where
            for node in followers:
                assert fetch(cluster, node, topic, partition, 12) == NONE, (where, node)
                assert fetch(cluster, node, topic, partition, 10) == NOT_LEADER, (where, node)
            for node in outsiders:
                assert fetch(cluster, node, topic, partition, 12) == NOT_LEADER, (where, node)

            # Writes: Produce and WriteTxnMarkers refused off the leader, changing nothing.
            for node in others:
                assert produce(cluster, node, topic, partition, b"refused") == NOT_LEADER, (where, node)
                assert write_txn_marker(cluster, node, topic, partition) == NOT_LEADER, (where, node)
            assert produce(cluster, leader, topic, partition, b"accepted") == NONE, where
            log_end += 1

            # DeleteRecords: refused off the leader; on the leader, answered once every replica has it.
            for node in others:
                assert delete_records(cluster, node, topic, partition, DELETE_OFFSET)[0] == NOT_LEADER, (where, node)
            for node in (leader, *followers):
                assert replica_positions(cluster, node, topic, partition) == (0, log_end), (where, node)
            assert delete_records(cluster, leader, topic, partition, DELETE_OFFSET) == (NONE, DELETE_OFFSET), where
            for node in followers:
                # Answered means done everywhere: no waiting needed here.
                assert replica_positions(cluster, node, topic, partition)[0] == DELETE_OFFSET, (where, node)
            assert list_offsets(cluster, leader, topic, partition, -2) == (NONE, DELETE_OFFSET), where

    assert fenced_checked > 0
    # After the sweep: every replica equals its leader.
    for topic in layouts:
        roles = _roles(cluster, topic, 3)
        for partition, (leader, followers, _, _) in roles.items():
            outcome = wait_until(lambda: replicas_agree(cluster, topic, partition, [leader, *followers])[0], BOUND_S)
            assert outcome, f"{topic}-{partition}: {replicas_agree(cluster, topic, partition, [leader, *followers])[1]}"
            assert replica_positions(cluster, leader, topic, partition) == (DELETE_OFFSET, RECORDS_PER_PARTITION + 1)


def _elect_preferred(cluster, topic, partition):
    Q = _q("ElectLeaders")
    for node in cluster.alive():
        try:
            request(cluster, node, "ElectLeaders", 2, election_type=0, timeout_ms=10000,
                    topic_partitions=[Q.TopicPartitions(topic=topic, partitions=[partition])])
            return
        except (OSError, ConnectionError, TimeoutError, asyncio.TimeoutError):
            continue


def _rotate_and_elect(cluster, topic, partition, replicas) -> int:
    """Rotate the partition's replica order (a reassignment that moves no data)
    and elect the new first replica; returns it."""
    Q = _q("AlterPartitionReassignments")
    rotated = [*replicas[1:], replicas[0]]
    body = dict(timeout_ms=10000, topics=[Q.ReassignableTopic(name=topic, partitions=[
        Q.ReassignablePartition(partition_index=partition, replicas=rotated)])])
    for node in cluster.alive():
        try:
            request(cluster, node, "AlterPartitionReassignments", 0, **body)
            break
        except (OSError, ConnectionError, TimeoutError, asyncio.TimeoutError):
            continue
    _elect_preferred(cluster, topic, partition)
    return rotated[0]


def _move_leadership(cluster, topic, stop: threading.Event, moves: list[int]):
    """Move the leadership every few hundred milliseconds while the DeleteRecords
    calls run."""
    deadline = time.monotonic() + 4 * BOUND_S
    while not stop.is_set() and time.monotonic() < deadline:
        state = cluster.partition(topic, 0)
        if state is None or len(state.isr) < len(state.replicas):
            time.sleep(0.05)
            continue
        moves.append(_rotate_and_elect(cluster, topic, 0, state.replicas))
        time.sleep(0.2)


def _deleted_everywhere(cluster, topic, offset) -> tuple[bool, str]:
    state = cluster.partition(topic, 0)
    if state is None or len(state.isr) < len(state.replicas):
        return False, f"ISR not full: {state}"
    positions = {}
    for node in state.replicas:
        try:
            positions[node] = replica_positions(cluster, node, topic, 0)
        except AssertionError:
            return False, f"node {node} did not answer"
    return all(start == offset for start, _ in positions.values()), str(positions)


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_delete_records_while_leadership_moves(cluster, client):
    topic = f"moving-{client}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    total = 200
    assert len(produce_batch(cluster.bootstrap(), topic, total).acked) == total
    stop = threading.Event()
    moves: list[int] = []
    mover = threading.Thread(target=_move_leadership, args=(cluster, topic, stop, moves), daemon=True)
    mover.start()
    outcomes = []
    try:
        for offset in range(10, 110, 10):
            deadline = time.monotonic() + BOUND_S
            while True:
                assert time.monotonic() < deadline, f"DeleteRecords to {offset} never succeeded: {outcomes}"
                error = _delete_with(client, cluster, topic, offset)
                outcomes.append((offset, error))
                if error is None:
                    break
                time.sleep(0.1)
            # A success means every live replica moved its log start before the
            # answer; once the ISR is whole again all three agree.
            done = wait_until(lambda: _deleted_everywhere(cluster, topic, offset)[0], BOUND_S)
            assert done, f"after deleting to {offset}: {_deleted_everywhere(cluster, topic, offset)[1]}"
    finally:
        stop.set()
        mover.join(BOUND_S)
    assert len(moves) >= 3, f"leadership moved only {len(moves)} times"
    leader = cluster.leader_of(topic, 0)
    assert list_offsets(cluster, leader, topic, 0, -2) == (NONE, 100)


def _delete_with(client: str, cluster, topic: str, offset: int) -> str | None:
    """One DeleteRecords through a real admin client; None on success, else the error."""
    if client == "confluent-kafka":
        from confluent_kafka import TopicPartition

        admin = cluster.admin()
        try:
            futures = admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=20, operation_timeout=20)
            result = futures[TopicPartition(topic, 0, offset)].result(timeout=30)
        except Exception as exc:  # noqa: BLE001 - a client error is an outcome to retry
            return repr(exc)
        return None if result.low_watermark >= offset else f"low watermark {result.low_watermark}"
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=30000)
    try:
        admin.delete_records({KTopicPartition(topic, 0): offset}, timeout_ms=20000)
    except Exception as exc:  # noqa: BLE001 - a client error is an outcome to retry
        return repr(exc)
    finally:
        admin.close()
    return None
