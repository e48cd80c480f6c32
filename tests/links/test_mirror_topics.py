"""Mirror topics end to end: two pybroker processes, A the source and B the
destination, a cluster link and a mirror topic made on B with the admin APIs
(CreateClusterLinks, CreateMirrorTopics, AlterMirrors), real clients.

These tests need the admin side of cluster links on the broker; they skip,
saying so, while B does not advertise CreateClusterLinks (API key 16000) in
its ApiVersions answer, and run as soon as it does.
"""

from __future__ import annotations

import time

import pytest

from protocol.errors import ErrorCode
from protocol.records import build_batch
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.interop._support import (
    API_VERSIONS,
    REQ,
    RawConnection,
    confluent_consumer,
    create_topic,
    list_offset,
    produce_raw,
    unique_topic,
)
from tests.links._mirror_support import PARTITIONS, WAIT_S, produce_source, raw_log

confluent_kafka = pytest.importorskip("confluent_kafka")

CREATE_LINKS = APIS_BY_NAME["CreateClusterLinks"]
CREATE_MIRRORS = APIS_BY_NAME["CreateMirrorTopics"]
ALTER_MIRRORS = APIS_BY_NAME["AlterMirrors"]
DESCRIBE_MIRRORS = APIS_BY_NAME["DescribeMirrors"]
_CL = struct_classes(CREATE_LINKS.request)
_CM = struct_classes(CREATE_MIRRORS.request)
_AM = struct_classes(ALTER_MIRRORS.request)
_DM = struct_classes(DESCRIBE_MIRRORS.request)
MIRROR_OP_FAILOVER = 3
STATE_ACTIVE, STATE_FAILED_OVER = 0, 5
LATEST = -1
READ_COMMITTED = 1


def advertises_cluster_links(bootstrap: str) -> bool:
    with RawConnection(bootstrap) as conn:
        response = conn.request(
            API_VERSIONS, 3, REQ[18].ApiVersionsRequest(client_software_name="mirror-test", client_software_version="1")
        )
    return any(k.api_key == CREATE_LINKS.key for k in response.api_keys)


def wait_until(predicate, timeout_s: float = WAIT_S, interval_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


def create_link(bootstrap: str, name: str, source_bootstrap: str) -> None:
    body = _CL.CreateClusterLinksRequest(
        links=[_CL.CreatableLink(link_name=name, configs=[_CL.CreatableLinkConfig(name="bootstrap.servers", value=source_bootstrap)])],
        validate_only=False,
        timeout_ms=30000,
    )
    with RawConnection(bootstrap) as conn:
        [result] = conn.request(CREATE_LINKS, 0, body).results
    assert result.error_code == 0, (result.error_code, result.error_message)


def create_mirror(bootstrap: str, topic: str, link: str) -> None:
    create_mirror_of(bootstrap, topic, link, PARTITIONS)


def create_mirror_of(bootstrap: str, topic: str, link: str, partitions: int) -> None:
    body = _CM.CreateMirrorTopicsRequest(
        topics=[_CM.CreatableMirror(mirror_topic=topic, link_name=link, source_topic=None, replication_factor=-1, configs=[])],
        validate_only=False,
        timeout_ms=30000,
    )
    with RawConnection(bootstrap) as conn:
        [result] = conn.request(CREATE_MIRRORS, 0, body).results
    assert result.error_code == 0, (result.error_code, result.error_message)
    assert result.num_partitions == partitions


def describe_mirror(bootstrap: str, topic: str):
    with RawConnection(bootstrap) as conn:
        [described] = conn.request(DESCRIBE_MIRRORS, 0, _DM.DescribeMirrorsRequest(topics=[topic])).topics
    assert described.error_code == 0
    return described


def failover(bootstrap: str, topic: str) -> None:
    body = _AM.AlterMirrorsRequest(operation=MIRROR_OP_FAILOVER, topics=[topic], validate_only=False)
    with RawConnection(bootstrap) as conn:
        [result] = conn.request(ALTER_MIRRORS, 0, body).results
    assert result.error_code == 0, (result.error_code, result.error_message)


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    return {p: list_offset(bootstrap, topic, p, LATEST).offset for p in range(PARTITIONS)}


def read_values(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    consumer = confluent_consumer(bootstrap, {"isolation.level": isolation})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        values = []
        deadline = time.monotonic() + WAIT_S
        while len(values) < expected and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.5):
                if message.error() is None:
                    values.append(message.value())
        # A little longer: anything past the expected count would be a record too many.
        for message in consumer.consume(100, 1.0):
            if message.error() is None:
                values.append(message.value())
        return values
    finally:
        consumer.close()


@pytest.fixture
def clusters(broker_factory):
    """(source A, destination B, topic) with a link and a mirror of the topic on B."""
    destination = broker_factory()
    if not advertises_cluster_links(destination.bootstrap):
        pytest.skip("the broker does not offer CreateClusterLinks (API key 16000) yet: the admin side of cluster links is not built")
    source = broker_factory()
    topic = unique_topic("mirrored")
    create_topic(source.bootstrap, topic, partitions=PARTITIONS)
    produce_source(source.bootstrap, topic)
    create_link(destination.bootstrap, "from-a", source.bootstrap)
    create_mirror(destination.bootstrap, topic, "from-a")
    return source, destination, topic


def test_a_mirror_holds_the_source_byte_for_byte_and_is_read_only(clusters):
    source, destination, topic = clusters
    expected_hws = high_watermarks(source.bootstrap, topic)
    assert wait_until(lambda: high_watermarks(destination.bootstrap, topic) == expected_hws), (
        high_watermarks(destination.bootstrap, topic), expected_hws,
    )
    # Every batch, byte for byte, at the same offsets: the whole log of each partition.
    for p in range(PARTITIONS):
        assert raw_log(destination.bootstrap, topic, p) == raw_log(source.bootstrap, topic, p), f"partition {p}"
    # read_committed on the mirror: the committed transaction, never the aborted one.
    committed = read_values(destination.bootstrap, topic, "read_committed", 60 + PARTITIONS)
    assert sorted(committed) == sorted([f"plain-{i}".encode() for i in range(60)] + [f"committed-{p}".encode() for p in range(PARTITIONS)])
    # Producers are refused with a message that says why, at once (not retried until a timeout).
    answer = produce_raw(destination.bootstrap, topic, build_batch([(None, b"no")]), 0)
    assert answer.error_code == ErrorCode.INVALID_REQUEST
    assert answer.error_message == (
        f"topic {topic} is a read-only mirror (link from-a, state ACTIVE): promote or fail it over before writing"
    )
    producer = confluent_kafka.Producer({"bootstrap.servers": destination.bootstrap, "message.timeout.ms": 20000})
    reports = []
    started = time.monotonic()
    producer.produce(topic, value=b"no", partition=0, on_delivery=lambda err, msg: reports.append(err))
    producer.flush(WAIT_S)
    assert reports and reports[0] is not None and reports[0].code() == confluent_kafka.KafkaError.INVALID_REQUEST
    assert time.monotonic() - started < 10
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KafkaPythonError

    kp = KafkaProducer(bootstrap_servers=destination.bootstrap, retries=3, request_timeout_ms=20000)
    try:
        started = time.monotonic()
        with pytest.raises(KafkaPythonError) as refused:
            kp.send(topic, value=b"no", partition=0).get(timeout=WAIT_S)
        assert getattr(refused.value, "errno", None) == ErrorCode.INVALID_REQUEST and not refused.value.retriable
        assert time.monotonic() - started < 10
    finally:
        kp.close(timeout=5)
    assert high_watermarks(destination.bootstrap, topic) == expected_hws
    # Caught up: no lag, no error, the source's high watermark.
    described = describe_mirror(destination.bootstrap, topic)
    assert (described.link_name, described.source_topic, described.state) == ("from-a", topic, STATE_ACTIVE)
    assert sorted(p.partition_index for p in described.partitions) == list(range(PARTITIONS))
    for p in described.partitions:
        assert (p.error_code, p.lag_records, p.lag_ms) == (0, 0, 0), p
        assert p.source_high_watermark == p.local_log_end_offset == expected_hws[p.partition_index]
    # The source goes: the mirror keeps serving what it has and says the source does not answer.
    source.stop()

    def source_reported_down():
        d = describe_mirror(destination.bootstrap, topic)
        return all(p.error_code != 0 and p.error_message for p in d.partitions) and d

    down = wait_until(source_reported_down)
    assert down, describe_mirror(destination.bootstrap, topic)
    now_ms = int(time.time() * 1000)
    for p in down.partitions:
        assert 0 < p.last_fetch_ms <= now_ms
    for p in range(PARTITIONS):
        data, hw = raw_log(destination.bootstrap, topic, p)
        assert hw == expected_hws[p] and data


def test_a_failed_over_mirror_aborts_what_the_source_left_open_and_takes_writes(clusters):
    source, destination, topic = clusters
    # A transaction left open on the source: begun and written, never ended.
    hanging = confluent_kafka.Producer({"bootstrap.servers": source.bootstrap, "transactional.id": f"hanging-{topic}"})
    hanging.init_transactions(WAIT_S)
    hanging.begin_transaction()
    hanging.produce(topic, value=b"left-open", partition=1)
    assert hanging.flush(WAIT_S) == 0
    expected_hws = high_watermarks(source.bootstrap, topic)
    assert wait_until(lambda: high_watermarks(destination.bootstrap, topic) == expected_hws)
    # read_committed readers on the mirror are held at the open transaction.
    assert list_offset(destination.bootstrap, topic, 1, LATEST, isolation_level=READ_COMMITTED).offset < expected_hws[1]
    source.stop()
    failover(destination.bootstrap, topic)
    assert wait_until(lambda: describe_mirror(destination.bootstrap, topic).state == STATE_FAILED_OVER), (
        describe_mirror(destination.bootstrap, topic), destination.log_text()[-4000:],
    )
    described = describe_mirror(destination.bootstrap, topic)
    assert {p.partition_index: p.stop_offset for p in described.partitions} == expected_hws
    # The open transaction is aborted by the new leader: read_committed reaches the end.
    assert wait_until(
        lambda: list_offset(destination.bootstrap, topic, 1, LATEST, isolation_level=READ_COMMITTED).offset
        == list_offset(destination.bootstrap, topic, 1, LATEST).offset
    )
    values = read_values(destination.bootstrap, topic, "read_committed", 60 + PARTITIONS)
    assert b"left-open" not in values
    # Writable now.
    producer = confluent_kafka.Producer({"bootstrap.servers": destination.bootstrap, "enable.idempotence": True})
    reports = []
    producer.produce(
        topic, value=b"after-failover", partition=0,
        on_delivery=lambda err, msg: reports.append((err, msg.offset() if err is None else None)),
    )
    producer.flush(WAIT_S)
    # The first own record follows the mirrored ones; its producer id is one the mirrored records never used.
    assert reports and reports[0] == (None, expected_hws[0]), reports
