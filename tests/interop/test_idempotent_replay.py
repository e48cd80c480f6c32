"""A retried idempotent batch is answered with its first offset and not written twice."""

import socket

from kafka import KafkaConsumer

from protocol.framing import decode_response, encode_request
from protocol.primitives import INT32
from protocol.records import build_batch
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

PRODUCE = APIS_BY_NAME["Produce"]
INIT = APIS_BY_NAME["InitProducerId"]
CREATE = APIS_BY_NAME["CreateTopics"]


def roundtrip(sock, api, version, correlation_id, body):
    sock.sendall(encode_request(api, version, correlation_id, "replay-test", body))
    size = INT32.unpack(recv_exactly(sock, 4))[0]
    return decode_response(api, version, recv_exactly(sock, size))[1]


def recv_exactly(sock, n):
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return bytes(data)


def test_replayed_batch_is_deduplicated(shared_broker):
    host, port = shared_broker.host, shared_broker.port
    Q = struct_classes(PRODUCE.request)
    C = struct_classes(CREATE.request)
    with socket.create_connection((host, port), timeout=10) as sock:
        created = roundtrip(sock, CREATE, 7, 1, C.CreateTopicsRequest(topics=[C.CreatableTopic(name="replay", num_partitions=1, replication_factor=1)]))
        assert created.topics[0].error_code == 0
        init = roundtrip(sock, INIT, 4, 2, INIT.request.cls(transactional_id=None, transaction_timeout_ms=60000))
        assert init.error_code == 0 and init.producer_id >= 0
        batch = build_batch(
            [(b"k", b"v1", [], 1_700_000_000_000), (b"k", b"v2", [], 1_700_000_000_001)],
            producer_id=init.producer_id,
            producer_epoch=init.producer_epoch,
            base_sequence=0,
        )
        request = Q.ProduceRequest(
            acks=-1,
            timeout_ms=5000,
            topic_data=[Q.TopicProduceData(name="replay", partition_data=[Q.PartitionProduceData(index=0, records=batch)])],
        )
        offsets = []
        for correlation_id in (3, 4, 5):
            response = roundtrip(sock, PRODUCE, 9, correlation_id, request)
            partition = response.responses[0].partition_responses[0]
            assert partition.error_code == 0
            offsets.append(partition.base_offset)
        assert offsets == [0, 0, 0]
        # A gap in the sequence is refused.
        gap = build_batch([(b"k", b"v3", [], 1_700_000_000_002)], producer_id=init.producer_id, producer_epoch=init.producer_epoch, base_sequence=5)
        request.topic_data[0].partition_data[0].records = gap
        response = roundtrip(sock, PRODUCE, 9, 6, request)
        assert response.responses[0].partition_responses[0].error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    consumer = KafkaConsumer("replay", bootstrap_servers=shared_broker.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000)
    try:
        assert [m.value for m in consumer] == [b"v1", b"v2"]
    finally:
        consumer.close()
