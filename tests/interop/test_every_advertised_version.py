"""Every (api, version) the broker advertises, exercised with a meaningful request.

Real clients pick one version each; this walks the whole advertised range with
our own codec over TCP, so a version that is advertised but broken fails here.

Longer than ~700 lines on purpose: one request per advertised API in one
place, so a newly advertised version without a test here is easy to spot.
"""

from __future__ import annotations

import socket
import uuid

import pytest

from protocol.framing import decode_response, encode_request
from protocol.primitives import INT32
from protocol.records import build_batch, decode_records
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes


class RawClient:
    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), timeout=15)
        self.correlation_id = 0

    def call(self, api_name: str, version: int, **fields):
        api = APIS_BY_NAME[api_name]
        self.correlation_id += 1
        self.sock.sendall(encode_request(api, version, self.correlation_id, "every-version", api.request.cls(**fields)))
        size = INT32.unpack(self._recv(4))[0]
        correlation_id, body = decode_response(api, version, self._recv(size))
        assert correlation_id == self.correlation_id
        return body

    def _recv(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            data += chunk
        return bytes(data)

    def close(self):
        self.sock.close()


@pytest.fixture
def client(shared_broker):
    c = RawClient(shared_broker.host, shared_broker.port)
    yield c
    c.close()


def advertised(client) -> dict[str, tuple[int, int]]:
    response = client.call("ApiVersions", 0)
    names = {api.key: name for name, api in APIS_BY_NAME.items()}
    return {names[k.api_key]: (k.min_version, k.max_version) for k in response.api_keys}


def versions_of(client, name):
    low, high = advertised(client)[name]
    return range(low, high + 1)


def create_topic(client, name: str, partitions: int = 1):
    C = struct_classes(APIS_BY_NAME["CreateTopics"].request)
    response = client.call(
        "CreateTopics", 5, topics=[C.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000
    )
    assert response.topics[0].error_code == 0, response
    return response


def test_api_versions_every_version(client):
    for version in versions_of(client, "ApiVersions"):
        fields = {"client_software_name": "t", "client_software_version": "1"} if version >= 3 else {}
        response = client.call("ApiVersions", version, **fields)
        assert response.error_code == 0
        assert {k.api_key for k in response.api_keys} >= {0, 1, 2, 3, 18, 19, 20}


def test_create_metadata_produce_fetch_list_delete_every_version(client):
    Q = struct_classes(APIS_BY_NAME["CreateTopics"].request)
    for version in versions_of(client, "CreateTopics"):
        name = f"every-create-v{version}"
        response = client.call(
            "CreateTopics",
            version,
            topics=[
                Q.CreatableTopic(
                    name=name, num_partitions=2, replication_factor=1, configs=[Q.CreatableTopicConfig(name="retention.ms", value="3600000")]
                )
            ],
            timeout_ms=5000,
        )
        result = response.topics[0]
        assert (result.name, result.error_code) == (name, 0)
        if version >= 5:
            assert (result.num_partitions, result.replication_factor) == (2, 1)
            assert {c.name: c.value for c in result.configs}["retention.ms"] == "3600000"
        if version >= 7:
            assert result.topic_id != uuid.UUID(int=0)
        again = client.call("CreateTopics", version, topics=[Q.CreatableTopic(name=name, num_partitions=1, replication_factor=1)], timeout_ms=5000)
        assert again.topics[0].error_code == 36  # TOPIC_ALREADY_EXISTS

    M = struct_classes(APIS_BY_NAME["Metadata"].request)
    topic_id = None
    for version in versions_of(client, "Metadata"):
        fields = {"topics": [M.MetadataRequestTopic(name="every-create-v5")]}
        if version >= 4:
            fields["allow_auto_topic_creation"] = False
        response = client.call("Metadata", version, **fields)
        assert len(response.brokers) == 1
        [topic] = response.topics
        assert topic.error_code == 0 and len(topic.partitions) == 2
        if version >= 10:
            topic_id = topic.topic_id
            assert topic_id != uuid.UUID(int=0)
    # Lookup by topic id (v10+ allows a null name).
    response = client.call("Metadata", 12, topics=[M.MetadataRequestTopic(topic_id=topic_id, name=None)], allow_auto_topic_creation=False)
    assert response.topics[0].name == "every-create-v5"

    create_topic(client, "every-produce")
    P = struct_classes(APIS_BY_NAME["Produce"].request)
    expected_values = []
    for version in versions_of(client, "Produce"):
        value = f"v{version}".encode()
        expected_values.append(value)
        batch = build_batch([(b"key", value, [("h", b"1")], 1_700_000_000_000 + version)])
        response = client.call(
            "Produce",
            version,
            acks=-1,
            timeout_ms=5000,
            topic_data=[P.TopicProduceData(name="every-produce", partition_data=[P.PartitionProduceData(index=0, records=batch)])],
        )
        partition = response.responses[0].partition_responses[0]
        assert partition.error_code == 0, partition
        assert partition.base_offset == len(expected_values) - 1

    Fq = struct_classes(APIS_BY_NAME["Fetch"].request)
    metadata = client.call("Metadata", 12, topics=[M.MetadataRequestTopic(name="every-produce")], allow_auto_topic_creation=False)
    produce_topic_id = metadata.topics[0].topic_id
    for version in versions_of(client, "Fetch"):
        fetch_topic = Fq.FetchTopic(
            topic="every-produce" if version < 13 else "",
            topic_id=produce_topic_id if version >= 13 else uuid.UUID(int=0),
            partitions=[Fq.FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=1 << 20)],
        )
        response = client.call("Fetch", version, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, topics=[fetch_topic])
        [topic] = response.responses
        [partition] = topic.partitions
        assert partition.error_code == 0
        assert partition.high_watermark == len(expected_values)
        records = decode_records(partition.records)
        assert [r.value for r in records if r.offset >= 1] == expected_values[1:]

    L = struct_classes(APIS_BY_NAME["ListOffsets"].request)
    for version in versions_of(client, "ListOffsets"):
        answers = {}
        for ts in (-2, -1, 1_700_000_000_000 + 5):
            response = client.call(
                "ListOffsets",
                version,
                replica_id=-1,
                topics=[L.ListOffsetsTopic(name="every-produce", partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=ts)])],
            )
            partition = response.topics[0].partitions[0]
            assert partition.error_code == 0
            answers[ts] = partition.offset
        # Produce v3 wrote timestamp ..003, so ..005 is the record of Produce v5: offset 2.
        assert answers == {-2: 0, -1: len(expected_values), 1_700_000_000_000 + 5: 2}

    D = struct_classes(APIS_BY_NAME["DeleteTopics"].request)
    for version in versions_of(client, "DeleteTopics"):
        name = f"every-create-v{max(2, min(version + 1, 7))}"
        if version >= 6:
            response = client.call("DeleteTopics", version, topics=[D.DeleteTopicState(name=name)], timeout_ms=5000)
        else:
            response = client.call("DeleteTopics", version, topic_names=[name], timeout_ms=5000)
        result = response.responses[0]
        assert (result.name, result.error_code) == (name, 0), result
        gone = client.call("DeleteTopics", version, **({"topics": [D.DeleteTopicState(name=name)]} if version >= 6 else {"topic_names": [name]}), timeout_ms=5000)
        assert gone.responses[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_init_producer_id_every_version(client):
    ids = set()
    for version in versions_of(client, "InitProducerId"):
        response = client.call("InitProducerId", version, transactional_id=None, transaction_timeout_ms=60000)
        assert response.error_code == 0 and response.producer_epoch == 0
        ids.add(response.producer_id)
    assert len(ids) == len(versions_of(client, "InitProducerId"))


def test_find_coordinator_every_version(client, shared_broker):
    for version in versions_of(client, "FindCoordinator"):
        if version < 4:
            response = client.call("FindCoordinator", version, key="group-a", key_type=0)
            assert (response.error_code, response.host, response.port) == (0, shared_broker.host, shared_broker.port)
            if version >= 1:
                txn = client.call("FindCoordinator", version, key="txn-a", key_type=1)
                assert (txn.error_code, txn.port) == (0, shared_broker.port)
        else:
            response = client.call("FindCoordinator", version, key_type=0, coordinator_keys=["g1", "g2"])
            assert [(c.key, c.error_code, c.port) for c in response.coordinators] == [
                ("g1", 0, shared_broker.port),
                ("g2", 0, shared_broker.port),
            ]


def test_delete_records_every_version(client, shared_broker):
    create_topic(client, "every-delete-records")
    P = struct_classes(APIS_BY_NAME["Produce"].request)
    for i in range(6):
        batch = build_batch([(None, f"r{i}".encode(), [], 1_700_000_000_000 + i)])
        client.call(
            "Produce", 9, acks=-1, timeout_ms=5000,
            topic_data=[P.TopicProduceData(name="every-delete-records", partition_data=[P.PartitionProduceData(index=0, records=batch)])],
        )
    D = struct_classes(APIS_BY_NAME["DeleteRecords"].request)
    L = struct_classes(APIS_BY_NAME["ListOffsets"].request)
    for version, target in zip(versions_of(client, "DeleteRecords"), (2, 4, -1)):
        response = client.call(
            "DeleteRecords", version, timeout_ms=5000,
            topics=[D.DeleteRecordsTopic(name="every-delete-records", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=target)])],
        )
        result = response.topics[0].partitions[0]
        expected = 6 if target == -1 else target
        assert (result.error_code, result.low_watermark) == (0, expected)
        earliest = client.call(
            "ListOffsets", 7, replica_id=-1,
            topics=[L.ListOffsetsTopic(name="every-delete-records", partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-2)])],
        )
        assert earliest.topics[0].partitions[0].offset == expected
    beyond = client.call(
        "DeleteRecords", 2, timeout_ms=5000,
        topics=[D.DeleteRecordsTopic(name="every-delete-records", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=99)])],
    )
    assert beyond.topics[0].partitions[0].error_code == 1  # OFFSET_OUT_OF_RANGE
    Fq = struct_classes(APIS_BY_NAME["Fetch"].request)
    fetched = client.call(
        "Fetch", 12, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
        topics=[Fq.FetchTopic(topic="every-delete-records", partitions=[Fq.FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=1 << 20)])],
    )
    assert fetched.responses[0].partitions[0].error_code == 1  # below the log start: OFFSET_OUT_OF_RANGE


def partition_count(client, name: str) -> int:
    M = struct_classes(APIS_BY_NAME["Metadata"].request)
    response = client.call("Metadata", 12, topics=[M.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)
    assert response.topics[0].error_code == 0
    return len(response.topics[0].partitions)


def test_create_partitions_every_version(client):
    Q = struct_classes(APIS_BY_NAME["CreatePartitions"].request)
    create_topic(client, "every-create-partitions")
    count = 1
    for version in versions_of(client, "CreatePartitions"):
        # validate_only answers success and changes nothing; then the real change.
        for validate_only in (True, False):
            assignments = None if version % 2 == 0 else [Q.CreatePartitionsAssignment(broker_ids=[1])]
            response = client.call(
                "CreatePartitions",
                version,
                topics=[Q.CreatePartitionsTopic(name="every-create-partitions", count=count + 1, assignments=assignments)],
                timeout_ms=5000,
                validate_only=validate_only,
            )
            assert [(r.name, r.error_code, r.error_message) for r in response.results] == [("every-create-partitions", 0, None)]
            assert partition_count(client, "every-create-partitions") == (count if validate_only else count + 1)
        count += 1
        shrink = client.call(
            "CreatePartitions",
            version,
            topics=[Q.CreatePartitionsTopic(name="every-create-partitions", count=1, assignments=None)],
            timeout_ms=5000,
            validate_only=False,
        )
        assert shrink.results[0].error_code == 37  # INVALID_PARTITIONS
        assert shrink.results[0].error_message.endswith("1 would not be an increase.")
    # The newest partition takes records.
    P = struct_classes(APIS_BY_NAME["Produce"].request)
    batch = build_batch([(None, b"new", [], 1_700_000_000_000)])
    response = client.call(
        "Produce", 9, acks=-1, timeout_ms=5000,
        topic_data=[P.TopicProduceData(name="every-create-partitions", partition_data=[P.PartitionProduceData(index=count - 1, records=batch)])],
    )
    assert response.responses[0].partition_responses[0].error_code == 0


def test_describe_cluster_every_version(client, shared_broker):
    for version in versions_of(client, "DescribeCluster"):
        for include in (False, True):
            response = client.call("DescribeCluster", version, include_cluster_authorized_operations=include)
            assert (response.error_code, response.controller_id) == (0, 1)
            assert response.cluster_id
            assert [(b.broker_id, b.host, b.port, b.rack) for b in response.brokers] == [(1, shared_broker.host, shared_broker.port, None)]
            # Every CLUSTER operation (codes 5, 7-12) when asked for, else INT32_MIN.
            assert response.cluster_authorized_operations == (0b1_1111_1010_0000 if include else -(2**31))
        if version >= 1:
            assert response.endpoint_type == 1
            controllers = client.call("DescribeCluster", version, include_cluster_authorized_operations=False, endpoint_type=2)
            assert controllers.error_code == 114  # MISMATCHED_ENDPOINT_TYPE


def test_describe_topic_partitions_every_version(client):
    create_topic(client, "every-dtp", partitions=3)
    Q = struct_classes(APIS_BY_NAME["DescribeTopicPartitions"].request)
    for version in versions_of(client, "DescribeTopicPartitions"):
        topics = [Q.TopicRequest(name="every-dtp"), Q.TopicRequest(name="every-dtp-missing")]
        first = client.call("DescribeTopicPartitions", version, topics=topics, response_partition_limit=2)
        [topic] = first.topics
        assert (topic.name, topic.error_code, [p.partition_index for p in topic.partitions]) == ("every-dtp", 0, [0, 1])
        assert topic.topic_id != uuid.UUID(int=0)
        assert [(p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes, p.eligible_leader_replicas) for p in topic.partitions] == [
            (1, 0, [1], [1], [])
        ] * 2
        assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == ("every-dtp", 2)
        rest = client.call("DescribeTopicPartitions", version, topics=topics, response_partition_limit=2, cursor=first.next_cursor)
        assert [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in rest.topics] == [
            ("every-dtp", 0, [2]),
            ("every-dtp-missing", 3, []),
        ]
        assert rest.next_cursor is None


def test_describe_log_dirs_every_version(client, shared_broker):
    create_topic(client, "every-log-dirs", partitions=2)
    P = struct_classes(APIS_BY_NAME["Produce"].request)
    batch = build_batch([(None, b"x" * 100, [], 1_700_000_000_000)])
    client.call(
        "Produce", 9, acks=-1, timeout_ms=5000,
        topic_data=[P.TopicProduceData(name="every-log-dirs", partition_data=[P.PartitionProduceData(index=1, records=batch)])],
    )
    Q = struct_classes(APIS_BY_NAME["DescribeLogDirs"].request)
    log_dir = shared_broker.data_dir / "logs"
    for version in versions_of(client, "DescribeLogDirs"):
        response = client.call("DescribeLogDirs", version, topics=[Q.DescribableLogDirTopic(topic="every-log-dirs", partitions=[0, 1, 5])])
        [result] = response.results
        assert (result.error_code, result.log_dir) == (0, str(log_dir))
        [topic] = result.topics
        sizes = {p.partition_index: p.partition_size for p in topic.partitions}
        assert sizes == {0: 0, 1: len(batch)}
        if version >= 4:
            assert 0 < result.usable_bytes <= result.total_bytes
        else:
            assert (result.total_bytes, result.usable_bytes) == (-1, -1)  # not in the version: defaults
        everything = client.call("DescribeLogDirs", version, topics=None)
        assert ("every-log-dirs", 1) in {(t.name, p.partition_index) for r in everything.results for t in r.topics for p in t.partitions}


def test_offset_for_leader_epoch_every_version(client):
    create_topic(client, "every-epochs")
    P = struct_classes(APIS_BY_NAME["Produce"].request)
    for i in range(3):
        client.call(
            "Produce", 9, acks=-1, timeout_ms=5000,
            topic_data=[P.TopicProduceData(name="every-epochs", partition_data=[P.PartitionProduceData(index=0, records=build_batch([(None, b"e", [], 1_700_000_000_000 + i)]))])],
        )
    Q = struct_classes(APIS_BY_NAME["OffsetForLeaderEpoch"].request)

    def ask(version, current_leader_epoch, leader_epoch, partition=0):
        response = client.call(
            "OffsetForLeaderEpoch",
            version,
            replica_id=-1,
            topics=[
                Q.OffsetForLeaderTopic(
                    topic="every-epochs",
                    partitions=[Q.OffsetForLeaderPartition(partition=partition, current_leader_epoch=current_leader_epoch, leader_epoch=leader_epoch)],
                )
            ],
        )
        [topic] = response.topics
        [answer] = topic.partitions
        return answer.error_code, answer.leader_epoch, answer.end_offset

    for version in versions_of(client, "OffsetForLeaderEpoch"):
        epoch_in_answer = 0 if version >= 1 else -1  # v0 has no leader_epoch field
        assert ask(version, -1, 0) == (0, epoch_in_answer, 3)
        assert ask(version, -1, 4) == (0, -1, -1)
        assert ask(version, -1, 0, partition=1)[0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        if version >= 2:
            assert ask(version, 0, 0) == (0, 0, 3)
            assert ask(version, 1, 0)[0] == 75  # UNKNOWN_LEADER_EPOCH


def test_elect_leaders_every_version(client):
    create_topic(client, "every-elect", partitions=2)
    Q = struct_classes(APIS_BY_NAME["ElectLeaders"].request)
    for version in versions_of(client, "ElectLeaders"):
        for election_type in ((0, 1) if version >= 1 else (0,)):
            response = client.call(
                "ElectLeaders",
                version,
                election_type=election_type,
                topic_partitions=[Q.TopicPartitions(topic="every-elect", partitions=[0, 1, 2])],
                timeout_ms=5000,
            )
            assert response.error_code == 0
            [result] = response.replica_election_results
            assert [(p.partition_id, p.error_code) for p in result.partition_result] == [(0, 84), (1, 84), (2, 3)]
            every = client.call("ElectLeaders", version, election_type=election_type, topic_partitions=None, timeout_ms=5000)
            assert every.replica_election_results == []


def test_partition_reassignments_every_version(client):
    """One broker (node 1): a move to the current replicas is a no-op, the other
    answers are refusals; nothing is ever listed as running."""
    create_topic(client, "every-reassign", partitions=2)
    Q = struct_classes(APIS_BY_NAME["AlterPartitionReassignments"].request)
    for version in versions_of(client, "AlterPartitionReassignments"):
        fields = {"allow_replication_factor_change": False} if version >= 1 else {}
        response = client.call(
            "AlterPartitionReassignments",
            version,
            timeout_ms=5000,
            topics=[
                Q.ReassignableTopic(name="every-reassign", partitions=[
                    Q.ReassignablePartition(partition_index=0, replicas=[1]),
                    Q.ReassignablePartition(partition_index=1, replicas=None),
                    Q.ReassignablePartition(partition_index=1, replicas=[1, 99]),
                    Q.ReassignablePartition(partition_index=5, replicas=[1]),
                ]),
                Q.ReassignableTopic(name="every-reassign-none", partitions=[Q.ReassignablePartition(partition_index=0, replicas=[1])]),
            ],
            **fields,
        )
        assert (response.error_code, response.error_message) == (0, None)
        if version >= 1:
            assert response.allow_replication_factor_change is False
        answers = [(t.name, p.partition_index, p.error_code) for t in response.responses for p in t.partitions]
        # NONE, NO_REASSIGNMENT_IN_PROGRESS, INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION x2
        assert answers == [
            ("every-reassign", 0, 0), ("every-reassign", 1, 85), ("every-reassign", 1, 39), ("every-reassign", 5, 3),
            ("every-reassign-none", 0, 3),
        ], answers
    L = struct_classes(APIS_BY_NAME["ListPartitionReassignments"].request)
    for version in versions_of(client, "ListPartitionReassignments"):
        every = client.call("ListPartitionReassignments", version, timeout_ms=5000, topics=None)
        assert (every.error_code, every.topics) == (0, [])
        named = client.call(
            "ListPartitionReassignments", version, timeout_ms=5000,
            topics=[L.ListPartitionReassignmentsTopics(name="every-reassign", partition_indexes=[0, 1, 9])],
        )
        assert (named.error_code, named.topics) == (0, [])


def test_describe_producers_every_version(client):
    create_topic(client, "every-producers")
    P = struct_classes(APIS_BY_NAME["Produce"].request)
    producer = client.call("InitProducerId", 4, transactional_id=None, transaction_timeout_ms=60000)
    for sequence in (0, 2):
        batch = build_batch(
            [(None, b"a", [], 1_700_000_000_000 + sequence), (None, b"b", [], 1_700_000_000_001 + sequence)],
            producer_id=producer.producer_id,
            producer_epoch=producer.producer_epoch,
            base_sequence=sequence,
        )
        response = client.call(
            "Produce", 9, acks=-1, timeout_ms=5000,
            topic_data=[P.TopicProduceData(name="every-producers", partition_data=[P.PartitionProduceData(index=0, records=batch)])],
        )
        assert response.responses[0].partition_responses[0].error_code == 0
    Q = struct_classes(APIS_BY_NAME["DescribeProducers"].request)
    for version in versions_of(client, "DescribeProducers"):
        response = client.call("DescribeProducers", version, topics=[Q.TopicRequest(name="every-producers", partition_indexes=[0, 1])])
        [topic] = response.topics
        first, second = topic.partitions
        assert (first.partition_index, first.error_code, second.error_code) == (0, 0, 3)
        [state] = first.active_producers
        assert (state.producer_id, state.producer_epoch, state.last_sequence, state.last_timestamp) == (
            producer.producer_id, producer.producer_epoch, 3, 1_700_000_000_003,
        )
        assert (state.coordinator_epoch, state.current_txn_start_offset) == (-1, -1)


# --------------------------------------------------------------------------- classic consumer groups

GROUP_SESSION_MS = 10000  # above the default group.min.session.timeout.ms
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE


def _group_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _subscription(topics) -> bytes:
    """ConsumerProtocolSubscription v0."""
    out = INT32.pack(len(topics))
    for topic in topics:
        out += len(topic).to_bytes(2, "big") + topic.encode()
    return b"\x00\x00" + out + INT32.pack(-1)


def _assignment(topic: str, partitions) -> bytes:
    """ConsumerProtocolAssignment v0 with one topic."""
    parts = b"".join(INT32.pack(p) for p in partitions)
    return b"\x00\x00" + INT32.pack(1) + len(topic).to_bytes(2, "big") + topic.encode() + INT32.pack(len(partitions)) + parts + INT32.pack(-1)


def _join(client, version: int, group: str, member_id: str = "", instance: str | None = None, topics=("every-groups",)):
    J = struct_classes(APIS_BY_NAME["JoinGroup"].request)
    fields = {
        "group_id": group,
        "session_timeout_ms": GROUP_SESSION_MS,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": [J.JoinGroupRequestProtocol(name="range", metadata=_subscription(list(topics)))],
    }
    if version >= 1:
        fields["rebalance_timeout_ms"] = GROUP_SESSION_MS
    if version >= 5:
        fields["group_instance_id"] = instance
    return client.call("JoinGroup", version, **fields)


def _sync(client, version: int, group: str, generation: int, member_id: str, assignments: dict[str, bytes], protocol_name: str = "range"):
    S = struct_classes(APIS_BY_NAME["SyncGroup"].request)
    fields = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member_id,
        "assignments": [S.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments.items()],
    }
    if version >= 5:
        fields.update(protocol_type="consumer", protocol_name=protocol_name)
    return client.call("SyncGroup", version, **fields)


def _stable_group(client, group: str, topic: str = "every-groups", instance: str | None = None):
    """A one-member group, joined (v9) and synced (v5): (member id, generation, assignment bytes)."""
    response = _join(client, 9, group, instance=instance, topics=[topic])
    if response.error_code == 79:  # MEMBER_ID_REQUIRED
        response = _join(client, 9, group, member_id=response.member_id, instance=instance, topics=[topic])
    assert response.error_code == 0, response
    assigned = _assignment(topic, [0])
    synced = _sync(client, 5, group, response.generation_id, response.member_id, {response.member_id: assigned})
    assert synced.error_code == 0, synced
    return response.member_id, response.generation_id, assigned


def _commit_simple(client, group: str, topic: str, offsets: dict[int, int], version: int = 8):
    C = struct_classes(APIS_BY_NAME["OffsetCommit"].request)
    response = client.call(
        "OffsetCommit", version, group_id=group, generation_id_or_member_epoch=-1, member_id="",
        topics=[C.OffsetCommitRequestTopic(name=topic, partitions=[
            C.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_metadata="") for p, o in offsets.items()
        ])],
    )
    assert {p.error_code for t in response.topics for p in t.partitions} == {0}, response


def _fetch_offsets(client, group: str, topic: str | None = None, partitions=None) -> dict[tuple[str, int], tuple[int, int, str]]:
    """OffsetFetch v8 of one group: {(topic, partition): (offset, leader epoch, metadata)}."""
    F = struct_classes(APIS_BY_NAME["OffsetFetch"].request)
    topics = None if topic is None else [F.OffsetFetchRequestTopics(name=topic, partition_indexes=list(partitions))]
    response = client.call("OffsetFetch", 8, groups=[F.OffsetFetchRequestGroup(group_id=group, topics=topics)])
    [result] = response.groups
    assert result.error_code == 0
    return {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata) for t in result.topics for p in t.partitions}


def _describe_group(client, group: str):
    return client.call("DescribeGroups", 5, groups=[group], include_authorized_operations=False).groups[0]


def test_join_group_every_version(client):
    for version in versions_of(client, "JoinGroup"):
        group = _group_name(f"every-join-v{version}")
        response = _join(client, version, group)
        if version >= 4:
            assert (response.error_code, response.generation_id) == (79, -1), response  # MEMBER_ID_REQUIRED
            assert response.member_id
            response = _join(client, version, group, member_id=response.member_id)
        assert response.error_code == 0, (version, response)
        assert response.generation_id == 1
        assert response.leader == response.member_id != ""
        assert response.protocol_name == "range"
        assert [(m.member_id, m.metadata) for m in response.members] == [(response.member_id, _subscription(["every-groups"]))]
        if version >= 7:
            assert response.protocol_type == "consumer"
        if version >= 9:
            assert response.skip_assignment is False
        assert _describe_group(client, group).group_state == "CompletingRebalance"
        if version >= 5:
            # A static member joins at once, without the MEMBER_ID_REQUIRED round.
            static_group = _group_name(f"every-join-static-v{version}")
            static = _join(client, version, static_group, instance="every-instance")
            assert static.error_code == 0, static
            assert [(m.member_id, m.group_instance_id) for m in static.members] == [(static.member_id, "every-instance")]


def test_sync_group_every_version(client):
    for version in versions_of(client, "SyncGroup"):
        group = _group_name(f"every-sync-v{version}")
        joined = _join(client, 9, group)
        joined = _join(client, 9, group, member_id=joined.member_id)
        assigned = _assignment("every-groups", [0, 1])
        response = _sync(client, version, group, joined.generation_id, joined.member_id, {joined.member_id: assigned})
        assert (response.error_code, response.assignment) == (0, assigned), (version, response)
        if version >= 5:
            assert (response.protocol_type, response.protocol_name) == ("consumer", "range")
            wrong = _sync(client, version, group, joined.generation_id, joined.member_id, {}, protocol_name="roundrobin")
            assert wrong.error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
        assert _describe_group(client, group).group_state == "Stable"
        # In a Stable group SyncGroup answers the member's assignment again.
        again = _sync(client, version, group, joined.generation_id, joined.member_id, {})
        assert (again.error_code, again.assignment) == (0, assigned)
        stale = _sync(client, version, group, joined.generation_id - 1, joined.member_id, {})
        assert stale.error_code == 22  # ILLEGAL_GENERATION


def test_heartbeat_every_version(client):
    group = _group_name("every-heartbeat")
    member_id, generation, _ = _stable_group(client, group, instance="every-hb-instance")
    for version in versions_of(client, "Heartbeat"):
        fields = {"group_instance_id": "every-hb-instance"} if version >= 3 else {}
        ok = client.call("Heartbeat", version, group_id=group, generation_id=generation, member_id=member_id, **fields)
        assert ok.error_code == 0, (version, ok)
        stale = client.call("Heartbeat", version, group_id=group, generation_id=generation + 1, member_id=member_id, **fields)
        assert stale.error_code == 22  # ILLEGAL_GENERATION
        unknown = client.call("Heartbeat", version, group_id=group, generation_id=generation, member_id="nobody")
        assert unknown.error_code == 25  # UNKNOWN_MEMBER_ID


def test_leave_group_every_version(client):
    L = struct_classes(APIS_BY_NAME["LeaveGroup"].request)
    for version in versions_of(client, "LeaveGroup"):
        group = _group_name(f"every-leave-v{version}")
        member_id, _, _ = _stable_group(client, group)
        if version < 3:
            response = client.call("LeaveGroup", version, group_id=group, member_id=member_id)
            assert response.error_code == 0, (version, response)
            again = client.call("LeaveGroup", version, group_id=group, member_id=member_id)
            assert again.error_code == 25  # UNKNOWN_MEMBER_ID
        else:
            extra = {"reason": "every-version test"} if version >= 5 else {}
            members = [L.MemberIdentity(member_id=member_id, group_instance_id=None, **extra), L.MemberIdentity(member_id="nobody", group_instance_id=None)]
            response = client.call("LeaveGroup", version, group_id=group, members=members)
            assert response.error_code == 0, (version, response)
            assert [(m.member_id, m.error_code) for m in response.members] == [(member_id, 0), ("nobody", 25)]
        described = _describe_group(client, group)
        assert (described.group_state, described.members) == ("Empty", [])


def test_offset_commit_every_version(client):
    topic = f"every-commit-{uuid.uuid4().hex[:8]}"
    create_topic(client, topic, partitions=2)
    C = struct_classes(APIS_BY_NAME["OffsetCommit"].request)
    for version in versions_of(client, "OffsetCommit"):
        # A consumer without group membership (generation -1; v0 has no generation).
        group = _group_name(f"every-commit-v{version}")
        partition = {"partition_index": 0, "committed_offset": 10 + version, "committed_metadata": f"v{version}"}
        if version >= 6:
            partition["committed_leader_epoch"] = 0
        fields = {}
        if version >= 1:
            fields.update(generation_id_or_member_epoch=-1, member_id="")
        if 2 <= version <= 4:
            fields["retention_time_ms"] = -1
        response = client.call(
            "OffsetCommit", version, group_id=group,
            topics=[C.OffsetCommitRequestTopic(name=topic, partitions=[
                C.OffsetCommitRequestPartition(**partition),
                C.OffsetCommitRequestPartition(partition_index=7, committed_offset=1, committed_metadata=""),
            ])],
            **fields,
        )
        assert [(p.partition_index, p.error_code) for p in response.topics[0].partitions] == [(0, 0), (7, 3)], (version, response)
        expected_epoch = 0 if version >= 6 else -1
        assert _fetch_offsets(client, group) == {(topic, 0): (10 + version, expected_epoch, f"v{version}")}
        if version >= 1:
            # A member commits with its member id and generation.
            member_group = _group_name(f"every-commit-member-v{version}")
            member_id, generation, _ = _stable_group(client, member_group, topic=topic)
            member_fields = {"generation_id_or_member_epoch": generation, "member_id": member_id}
            if 2 <= version <= 4:
                member_fields["retention_time_ms"] = -1
            topics = [C.OffsetCommitRequestTopic(name=topic, partitions=[C.OffsetCommitRequestPartition(partition_index=1, committed_offset=5, committed_metadata=None)])]
            ok = client.call("OffsetCommit", version, group_id=member_group, topics=topics, **member_fields)
            assert ok.topics[0].partitions[0].error_code == 0, (version, ok)
            member_fields["generation_id_or_member_epoch"] = generation + 1
            stale = client.call("OffsetCommit", version, group_id=member_group, topics=topics, **member_fields)
            assert stale.topics[0].partitions[0].error_code == 22  # ILLEGAL_GENERATION
            assert _fetch_offsets(client, member_group) == {(topic, 1): (5, -1, "")}


def test_offset_fetch_every_version(client):
    topic = f"every-fetch-{uuid.uuid4().hex[:8]}"
    create_topic(client, topic, partitions=2)
    group = _group_name("every-fetch")
    C = struct_classes(APIS_BY_NAME["OffsetCommit"].request)
    client.call(
        "OffsetCommit", 9, group_id=group, generation_id_or_member_epoch=-1, member_id="",
        topics=[C.OffsetCommitRequestTopic(name=topic, partitions=[C.OffsetCommitRequestPartition(partition_index=0, committed_offset=42, committed_leader_epoch=3, committed_metadata="m")])],
    )
    unknown_group = _group_name("every-fetch-none")
    F = struct_classes(APIS_BY_NAME["OffsetFetch"].request)
    for version in versions_of(client, "OffsetFetch"):
        epoch = 3 if version >= 5 else -1
        if version < 8:
            some = client.call("OffsetFetch", version, group_id=group, topics=[F.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])])
            got = {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code) for t in some.topics for p in t.partitions}
            assert got == {(topic, 0): (42, epoch, "m", 0), (topic, 1): (-1, -1, "", 0)}, (version, some)
            if version >= 2:
                assert some.error_code == 0
                every = client.call("OffsetFetch", version, group_id=group, topics=None, **({"require_stable": True} if version >= 7 else {}))
                assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions]) for t in every.topics] == [(topic, [(0, 42)])]
            unknown = client.call("OffsetFetch", version, group_id=unknown_group, topics=[F.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])
            assert [(p.committed_offset, p.error_code) for t in unknown.topics for p in t.partitions] == [(-1, 0)]
        else:
            extra = {"member_id": None, "member_epoch": -1} if version >= 9 else {}
            response = client.call(
                "OffsetFetch", version, require_stable=True,
                groups=[
                    F.OffsetFetchRequestGroup(group_id=group, topics=None, **extra),
                    F.OffsetFetchRequestGroup(group_id=unknown_group, topics=[F.OffsetFetchRequestTopics(name=topic, partition_indexes=[1])], **extra),
                ],
            )
            got = {
                g.group_id: (g.error_code, [(t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata) for t in g.topics for p in t.partitions])
                for g in response.groups
            }
            assert got == {group: (0, [(topic, 0, 42, 3, "m")]), unknown_group: (0, [(topic, 1, -1, -1, "")])}, (version, response)


def test_offset_delete_every_version(client):
    topic = f"every-offdel-{uuid.uuid4().hex[:8]}"
    create_topic(client, topic, partitions=2)
    D = struct_classes(APIS_BY_NAME["OffsetDelete"].request)
    for version in versions_of(client, "OffsetDelete"):
        group = _group_name(f"every-offdel-v{version}")
        _commit_simple(client, group, topic, {0: 4, 1: 5})
        request_topics = [D.OffsetDeleteRequestTopic(name=topic, partitions=[D.OffsetDeleteRequestPartition(partition_index=0)])]
        response = client.call("OffsetDelete", version, group_id=group, topics=request_topics)
        assert response.error_code == 0
        assert [(p.partition_index, p.error_code) for t in response.topics for p in t.partitions] == [(0, 0)]
        assert _fetch_offsets(client, group) == {(topic, 1): (5, -1, "")}
        unknown = client.call("OffsetDelete", version, group_id=_group_name("every-offdel-none"), topics=request_topics)
        assert unknown.error_code == 69  # GROUP_ID_NOT_FOUND
        # A live group consuming the topic keeps its offsets of that topic.
        live = _group_name(f"every-offdel-live-v{version}")
        member_id, generation, _ = _stable_group(client, live, topic=topic)
        C = struct_classes(APIS_BY_NAME["OffsetCommit"].request)
        committed = client.call(
            "OffsetCommit", 8, group_id=live, generation_id_or_member_epoch=generation, member_id=member_id,
            topics=[C.OffsetCommitRequestTopic(name=topic, partitions=[C.OffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_metadata="")])],
        )
        assert committed.topics[0].partitions[0].error_code == 0
        subscribed = client.call("OffsetDelete", version, group_id=live, topics=request_topics)
        assert subscribed.error_code == 0
        assert [p.error_code for t in subscribed.topics for p in t.partitions] == [86]  # GROUP_SUBSCRIBED_TO_TOPIC


def test_list_groups_every_version(client):
    stable = _group_name("every-list-stable")
    _stable_group(client, stable)
    empty = _group_name("every-list-empty")
    topic = f"every-list-{uuid.uuid4().hex[:8]}"
    create_topic(client, topic)
    _commit_simple(client, empty, topic, {0: 1})
    for version in versions_of(client, "ListGroups"):
        response = client.call("ListGroups", version)
        assert response.error_code == 0
        listed = {g.group_id: g for g in response.groups}
        assert (listed[stable].protocol_type, listed[empty].protocol_type) == ("consumer", "")
        if version >= 4:
            assert (listed[stable].group_state, listed[empty].group_state) == ("Stable", "Empty")
            only_stable = {g.group_id for g in client.call("ListGroups", version, states_filter=["stable"]).groups}
            assert stable in only_stable and empty not in only_stable
        if version >= 5:
            assert {listed[stable].group_type, listed[empty].group_type} == {"classic"}
            assert {stable, empty} <= {g.group_id for g in client.call("ListGroups", version, types_filter=["classic"]).groups}
            # (consumer-protocol groups of other tests on this broker may be listed)
            assert {stable, empty}.isdisjoint(g.group_id for g in client.call("ListGroups", version, types_filter=["consumer"]).groups)


def test_describe_groups_every_version(client):
    group = _group_name("every-describe")
    member_id, _, assigned = _stable_group(client, group, instance="every-describe-instance")
    unknown = _group_name("every-describe-none")
    for version in versions_of(client, "DescribeGroups"):
        fields = {"include_authorized_operations": True} if version >= 3 else {}
        response = client.call("DescribeGroups", version, groups=[group, unknown], **fields)
        described, missing = response.groups
        assert (described.error_code, described.group_id, described.group_state) == (0, group, "Stable")
        assert (described.protocol_type, described.protocol_data) == ("consumer", "range")
        [member] = described.members
        assert (member.member_id, member.client_id, member.client_host) == (member_id, "every-version", "/127.0.0.1")
        assert (member.member_metadata, member.member_assignment) == (_subscription(["every-groups"]), assigned)
        if version >= 4:
            assert member.group_instance_id == "every-describe-instance"
        if version >= 3:
            assert described.authorized_operations == GROUP_OPERATIONS
            plain = client.call("DescribeGroups", version, groups=[group], include_authorized_operations=False).groups[0]
            assert plain.authorized_operations == -(2**31)
        assert (missing.error_code, missing.group_id, missing.group_state, missing.members) == (0, unknown, "Dead", [])


def test_delete_groups_every_version(client):
    topic = f"every-delgroups-{uuid.uuid4().hex[:8]}"
    create_topic(client, topic)
    live = _group_name("every-delgroups-live")
    _stable_group(client, live)
    for version in versions_of(client, "DeleteGroups"):
        empty = _group_name(f"every-delgroups-v{version}")
        _commit_simple(client, empty, topic, {0: 3})
        unknown = _group_name("every-delgroups-none")
        response = client.call("DeleteGroups", version, groups_names=[empty, live, unknown])
        assert [(r.group_id, r.error_code) for r in response.results] == [(empty, 0), (live, 68), (unknown, 69)], (version, response)
        assert _fetch_offsets(client, empty) == {}
        assert empty not in {g.group_id for g in client.call("ListGroups", 4).groups}
        assert _describe_group(client, empty).group_state == "Dead"


def test_consumer_group_heartbeat_and_describe_every_version(client):
    topic = f"every-cg-{uuid.uuid4().hex[:8]}"
    create_topic(client, topic, partitions=2)
    for version in versions_of(client, "ConsumerGroupHeartbeat"):
        group = _group_name(f"every-cg-v{version}")
        fields = dict(group_id=group, member_id="", member_epoch=0, rebalance_timeout_ms=30000,
                      subscribed_topic_names=[topic], topic_partitions=[])
        joined = client.call("ConsumerGroupHeartbeat", version, **fields)
        assert joined.error_code == 0, (version, joined)
        assert joined.member_epoch >= 1 and joined.heartbeat_interval_ms > 0
        assert sorted(p for t in joined.assignment.topic_partitions for p in t.partitions) == [0, 1]
        owned = [struct_classes(APIS_BY_NAME["ConsumerGroupHeartbeat"].request).TopicPartitions(
            topic_id=t.topic_id, partitions=t.partitions) for t in joined.assignment.topic_partitions]
        again = client.call("ConsumerGroupHeartbeat", version, group_id=group, member_id=joined.member_id,
                            member_epoch=joined.member_epoch, topic_partitions=owned)
        assert (again.error_code, again.member_epoch, again.assignment) == (0, joined.member_epoch, None)
        for describe_version in versions_of(client, "ConsumerGroupDescribe"):
            (described,) = client.call("ConsumerGroupDescribe", describe_version, group_ids=[group],
                                       include_authorized_operations=False).groups
            assert (described.error_code, described.group_state, described.group_epoch) == (0, "Stable", joined.member_epoch)
            [member] = described.members
            assert (member.member_id, member.client_id, member.subscribed_topic_names) == (joined.member_id, "every-version", [topic])
            assert {t.topic_name for t in member.assignment.topic_partitions} == {topic}
        left = client.call("ConsumerGroupHeartbeat", version, group_id=group, member_id=joined.member_id, member_epoch=-1)
        assert (left.error_code, left.member_epoch) == (0, -1)


def test_update_features_every_version(client):
    """UpdateFeatures (57): group.version at the level a new cluster finalizes (written
    again, a no-op) succeeds; a level outside the range refuses the whole request."""
    Q = struct_classes(APIS_BY_NAME["UpdateFeatures"].request)

    def update(version, level):
        item = Q.FeatureUpdateKey(feature="group.version", max_version_level=level, allow_downgrade=False, upgrade_type=1)
        return client.call("UpdateFeatures", version, timeout_ms=5000, feature_updates=[item], validate_only=False)

    for version in versions_of(client, "UpdateFeatures"):
        done = update(version, 1)
        assert (done.error_code, done.error_message) == (0, None), (version, done)
        assert [(r.feature, r.error_code) for r in getattr(done, "results", None) or []] == (
            [("group.version", 0)] if version <= 1 else []
        )
        refused = update(version, 99)
        assert refused.error_code == 95 and "Invalid update version 99 for feature group.version" in refused.error_message
        finalized = client.call("ApiVersions", 3, client_software_name="t", client_software_version="1").finalized_features
        assert {f.name: f.max_version_level for f in finalized}["group.version"] == 1
