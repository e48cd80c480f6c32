"""Every (api, version) the broker advertises, exercised with a meaningful request.

Real clients pick one version each; this walks the whole advertised range with
our own codec over TCP, so a version that is advertised but broken fails here.
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
                assert txn.error_code == 15  # COORDINATOR_NOT_AVAILABLE
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
