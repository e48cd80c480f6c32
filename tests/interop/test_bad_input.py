"""Hostile and unusual bytes on raw sockets: the broker closes the offending
connection (or answers, where Kafka answers), never crashes, and keeps serving
everyone else. Also request pipelining and response ordering on one connection.
"""

from __future__ import annotations

import random
import socket
import struct

import pytest

from protocol.framing import decode_response, encode_request
from protocol.records import CRC_OFFSET, build_batch
from protocol.registry import APIS_BY_NAME
from tests.interop._support import (
    API_VERSIONS,
    FETCH,
    METADATA,
    PRODUCE,
    REQ,
    Msg,
    RawConnection,
    api_versions_ok,
    consume,
    create_topic,
    fetch_partition,
    fetch_request,
    list_offset,
    produce,
    produce_request,
    unique_topic,
)

T = 1_700_000_000_000
CORRUPT_MESSAGE = 2
UNSUPPORTED_VERSION = 35


def metadata_body(topics=None):
    R = REQ[3]
    return R.MetadataRequest(
        topics=None if topics is None else [R.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def api_versions_body():
    return REQ[18].ApiVersionsRequest(client_software_name="interop", client_software_version="1.0")


def assert_broker_healthy(broker):
    assert broker.process.poll() is None, "broker process died:\n" + broker.log_text()[-3000:]
    assert api_versions_ok(broker.bootstrap)


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# --------------------------------------------------------------------------- frames


def test_frame_over_socket_request_max_bytes_closes_only_that_connection(broker_factory):
    from kafka import KafkaProducer

    broker = broker_factory({"socket.request.max.bytes": "1048576"})
    topic = unique_topic("oversize")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, max_request_size=1_000_000)
    try:
        assert producer.send(topic, b"before", partition=0).get(timeout=30).offset == 0
        for size in (1_048_577, 2_000_000, 2**31 - 1):
            with RawConnection(broker) as conn:
                conn.send_bytes(struct.pack(">i", size) + b"\x00" * 1000)
                assert conn.closed_by_peer(), f"frame of {size} bytes over a 1 MiB limit"
        # A request just under the limit is fine, on the same broker, from the same client.
        assert producer.send(topic, b"x" * 900_000, partition=0).get(timeout=30).offset == 1
        assert producer.send(topic, b"after", partition=0).get(timeout=30).offset == 2
    finally:
        producer.close(timeout=10)
    got = consume("kafka-python", broker.bootstrap, topic, 3)
    assert [g.value for g in got] == [b"before", b"x" * 900_000, b"after"]
    assert_broker_healthy(broker)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_garbage_frame_closes_connection(shared_broker, seed):
    rng = random.Random(seed)
    payload = bytes(rng.getrandbits(8) for _ in range(rng.randint(8, 400)))
    if struct.unpack(">h", payload[:2])[0] == 18:  # would be an ApiVersions request, which is answered
        payload = b"\x7f\x7f" + payload[2:]
    with RawConnection(shared_broker) as conn:
        conn.send_bytes(frame(payload))
        assert conn.closed_by_peer()
    assert_broker_healthy(shared_broker)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_valid_header_with_garbage_body_closes_connection(shared_broker, seed):
    rng = random.Random(seed)
    header = struct.pack(">hhih", 0, 9, 7, 3) + b"abc" + b"\x00"  # Produce v9, header v2
    body = bytes(rng.getrandbits(8) for _ in range(200))
    with RawConnection(shared_broker) as conn:
        conn.send_bytes(frame(header + body))
        assert conn.closed_by_peer()
    assert_broker_healthy(shared_broker)


@pytest.mark.parametrize("raw", [struct.pack(">i", -1), struct.pack(">i", 0), struct.pack(">i", 3) + b"\x00\x12\x00"])
def test_impossible_frames_close_connection(shared_broker, raw):
    """Negative size, empty frame, frame too short for a request header."""
    with RawConnection(shared_broker) as conn:
        conn.send_bytes(raw)
        assert conn.closed_by_peer()
    assert_broker_healthy(shared_broker)


@pytest.mark.parametrize(
    "api_key,version",
    [(9999, 0), (-1, 0), (10, 4), (0, 2), (1, 3), (3, 99)],
    ids=["unknown-9999", "negative-key", "FindCoordinator-not-served", "Produce-v2", "Fetch-v3", "Metadata-v99"],
)
def test_unknown_api_or_version_closes_connection(shared_broker, api_key, version):
    payload = struct.pack(">hhih", api_key, version, 42, 4) + b"test" + b"\x00" * 16
    with RawConnection(shared_broker) as conn:
        conn.send_bytes(frame(payload))
        assert conn.closed_by_peer()
    assert_broker_healthy(shared_broker)


def test_truncated_frame_then_close_does_not_hurt_the_broker(shared_broker):
    for partial in (b"\x00\x00", struct.pack(">i", 100) + b"\x00\x03\x00\x0c" + b"\x00" * 6):
        sock = socket.create_connection((shared_broker.host, shared_broker.port), timeout=10)
        sock.sendall(partial)
        sock.close()
    # And a truncated frame followed by a half-close: the broker waits no more.
    with RawConnection(shared_broker) as conn:
        conn.send_bytes(struct.pack(">i", 100) + b"\x00" * 10)
        conn.sock.shutdown(socket.SHUT_WR)
        assert conn.closed_by_peer()
    assert_broker_healthy(shared_broker)
    topic = unique_topic("after-truncated")
    assert produce("kafka-python", shared_broker.bootstrap, topic, [Msg(None, b"ok")]) == [0]


# --------------------------------------------------------------------------- answered oddities


def test_api_versions_too_new_is_answered_in_v0(shared_broker):
    with RawConnection(shared_broker) as conn:
        conn.send_bytes(encode_request(API_VERSIONS, 99, 777, "future-client", api_versions_body()))
        correlation_id, body = decode_response(APIS_BY_NAME["ApiVersions"], 0, conn.read_frame())
    assert correlation_id == 777
    assert body.error_code == UNSUPPORTED_VERSION
    ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert ranges[18] == (0, 4)
    assert ranges[0] == (3, 12) and ranges[1] == (4, 17) and ranges[3] == (0, 12)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_every_version(shared_broker, version):
    with RawConnection(shared_broker) as conn:
        body = conn.request(API_VERSIONS, version, api_versions_body())
    assert body.error_code == 0
    assert {k.api_key for k in body.api_keys} >= {0, 1, 2, 3, 18, 19, 20}


def test_null_client_id_is_accepted(shared_broker):
    with RawConnection(shared_broker, client_id=None) as conn:
        assert conn.request(API_VERSIONS, 3, api_versions_body()).error_code == 0
        assert conn.request(METADATA, 9, metadata_body([])).topics == []


def test_trailing_bytes_after_request_body_are_ignored(shared_broker):
    """Kafka's request parser reads the fields it knows and ignores anything
    after them. librdkafka 2.x relies on it: its all-topics Metadata v12
    request (AdminClient.list_topics()) carries 3 extra bytes after the body."""
    topic = unique_topic("trailing")
    create_topic(shared_broker.bootstrap, topic)
    request = encode_request(METADATA, 12, 5, "rdkafka", metadata_body(None))
    padded = request + b"\x01\x00\x00"
    padded = struct.pack(">i", len(padded) - 4) + padded[4:]
    with RawConnection(shared_broker) as conn:
        conn.send_bytes(padded)
        correlation_id, body = conn.read_response(METADATA, 12)
    assert correlation_id == 5
    assert topic in {t.name for t in body.topics}
    # librdkafka's exact frame, as captured from confluent-kafka 2.16.1 list_topics().
    librdkafka_frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    with RawConnection(shared_broker) as conn:
        conn.send_bytes(frame(librdkafka_frame))
        correlation_id, body = conn.read_response(METADATA, 12)
    assert correlation_id == 3
    assert topic in {t.name for t in body.topics}


# --------------------------------------------------------------------------- corrupt produce


def corrupt(batch: bytes, position: int) -> bytes:
    data = bytearray(batch)
    data[position] ^= 0xFF
    return bytes(data)


# Byte positions in the batch header (see protocol.records); flipping any byte
# the CRC covers, or the CRC itself, must be caught. Kafka checks the CRC
# (UnifiedLog.analyzeAndValidateRecords) before any producer-id state.
CORRUPT_AT = {"record-bytes": -2, "crc-field": CRC_OFFSET + 1, "base-timestamp": 34, "producer-id": 50}


@pytest.mark.parametrize("where", list(CORRUPT_AT))
def test_corrupt_batch_crc_is_refused(shared_broker, where):
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("crc")
    create_topic(bootstrap, topic, partitions=2)
    good = build_batch([(b"k", f"v{i}".encode(), [], T + i) for i in range(3)])
    bad = corrupt(good, CORRUPT_AT[where] % len(good))

    with RawConnection(bootstrap) as conn:
        response = conn.request(PRODUCE, 9, produce_request(topic, {0: bad, 1: good}))
        results = {p.index: p for p in response.responses[0].partition_responses}
        assert results[0].error_code == CORRUPT_MESSAGE
        assert results[0].base_offset == -1
        assert (results[1].error_code, results[1].base_offset) == (0, 0), "the other partition is appended"
        # The connection stays usable.
        again = conn.request(PRODUCE, 9, produce_request(topic, {0: good}))
        assert (again.responses[0].partition_responses[0].error_code, again.responses[0].partition_responses[0].base_offset) == (0, 0)

    assert list_offset(bootstrap, topic, 0, -1).offset == 3, "nothing of the corrupt batch was appended"
    got = consume("kafka-python", bootstrap, topic, 3, settle_s=0.3)
    assert [(g.offset, g.value) for g in got] == [(i, f"v{i}".encode()) for i in range(3)]


# --------------------------------------------------------------------------- pipelining


def test_pipelined_requests_are_answered_in_order(shared_broker):
    topic = unique_topic("pipeline")
    create_topic(shared_broker.bootstrap, topic)
    requests = []
    for i in range(50):
        cid = 1000 + i
        if i % 2:
            requests.append((cid, API_VERSIONS, 3, encode_request(API_VERSIONS, 3, cid, "pipe", api_versions_body())))
        else:
            requests.append((cid, METADATA, 12, encode_request(METADATA, 12, cid, "pipe", metadata_body([topic]))))
    with RawConnection(shared_broker, timeout_s=30) as conn:
        conn.send_bytes(b"".join(r[3] for r in requests))
        for cid, api, version, _ in requests:
            got_cid, body = conn.read_response(api, version)
            assert got_cid == cid
            if api is METADATA:
                assert [(t.name, t.error_code) for t in body.topics] == [(topic, 0)]
            else:
                assert body.error_code == 0


def test_slow_request_does_not_let_later_answers_overtake(shared_broker):
    """A long-polling Fetch followed by ApiVersions on one connection: the
    Fetch is answered first even though ApiVersions could be answered at once."""
    topic = unique_topic("ordering")
    create_topic(shared_broker.bootstrap, topic)
    with RawConnection(shared_broker, timeout_s=30) as conn:
        conn.send_bytes(
            encode_request(FETCH, 12, 1, "order", fetch_request(topic, 0, 0, max_wait_ms=700, min_bytes=1))
            + encode_request(API_VERSIONS, 3, 2, "order", api_versions_body())
        )
        first_cid, _ = conn.read_response(FETCH, 12)
        second_cid, _ = conn.read_response(API_VERSIONS, 3)
    assert (first_cid, second_cid) == (1, 2)


def test_acks0_produce_gets_no_response(shared_broker):
    topic = unique_topic("acks0-raw")
    create_topic(shared_broker.bootstrap, topic)
    batch = build_batch([(None, b"fire-and-forget", [], T)])
    with RawConnection(shared_broker) as conn:
        conn.send_bytes(
            encode_request(PRODUCE, 9, 1, "acks0", produce_request(topic, {0: batch}, acks=0))
            + encode_request(METADATA, 12, 2, "acks0", metadata_body([topic]))
        )
        cid, body = conn.read_response(METADATA, 12)
        assert cid == 2, "the acks=0 Produce must not be answered"
        # Nothing else is pending on the connection.
        conn.sock.settimeout(0.5)
        with pytest.raises(socket.timeout):
            conn.sock.recv(1)
    data = fetch_partition(shared_broker.bootstrap, topic)
    from protocol.records import decode_records

    assert [r.value for r in decode_records(data.records)] == [b"fire-and-forget"]


def test_many_concurrent_connections(shared_broker):
    conns = [RawConnection(shared_broker) for _ in range(50)]
    try:
        for i, conn in enumerate(conns):
            conn.send(API_VERSIONS, 3, api_versions_body(), correlation_id=i)
        for i, conn in enumerate(conns):
            cid, body = conn.read_response(API_VERSIONS, 3)
            assert (cid, body.error_code) == (i, 0)
    finally:
        for conn in conns:
            conn.close()
    assert_broker_healthy(shared_broker)


# --------------------------------------------------------------------------- unusual produce payloads

INVALID_RECORD = 87


@pytest.mark.parametrize(
    "records,partition,acks,code",
    [
        ("two-batches", 0, -1, INVALID_RECORD),  # "only allowed to contain exactly one record batch per partition"
        ("empty", 0, -1, INVALID_RECORD),  # "must have at least one record batch per partition"
        ("one-batch", 5, -1, 3),  # UNKNOWN_TOPIC_OR_PARTITION
        ("one-batch", 0, 2, 21),  # INVALID_REQUIRED_ACKS
    ],
    ids=["two-batches", "empty-records", "missing-partition", "acks-2"],
)
def test_produce_payloads_kafka_refuses(shared_broker, records, partition, acks, code):
    """ProduceRequest.validateRecords (v3+) and the acks/partition checks."""
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("refused")
    create_topic(bootstrap, topic)
    batch = build_batch([(None, b"a", [], T)])
    payload = {"two-batches": batch + batch, "empty": b"", "one-batch": batch}[records]
    with RawConnection(bootstrap) as conn:
        response = conn.request(PRODUCE, 9, produce_request(topic, {partition: payload}, acks=acks))
    result = response.responses[0].partition_responses[0]
    assert (result.index, result.error_code, result.base_offset) == (partition, code, -1)
    assert list_offset(bootstrap, topic, 0, -1).offset == 0, "nothing appended"
