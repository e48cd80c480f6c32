"""Helpers shared by the interop tests: one produce/consume API over three clients,
and a raw-protocol connection built on the project's own ``protocol`` package.

Every loop here is bounded by a count and a deadline, and every client is
closed before a helper returns (also when it raises).
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from dataclasses import dataclass
from itertools import count

from protocol.framing import decode_response, encode_request
from protocol.primitives import INT32
from protocol.records import decode_batch_records, iter_batches
from protocol.registry import APIS_BY_KEY, APIS_BY_NAME
from protocol.schema import struct_classes

CLIENTS = ("kafka-python", "confluent", "aiokafka")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CREATE_TIME = 0
LOG_APPEND_TIME = 1
# confluent-kafka's timestamp types (TIMESTAMP_CREATE_TIME=1, TIMESTAMP_LOG_APPEND_TIME=2).
_CONFLUENT_TS_TYPES = {1: CREATE_TIME, 2: LOG_APPEND_TIME}

CLIENT_TIMEOUT_S = 30


def unique_topic(prefix: str) -> str:
    """A topic name no other test uses (legal characters only)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Msg:
    """A record to produce. ``headers`` values may be None where the client allows it."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None


@dataclass(frozen=True)
class Got:
    """A consumed record, normalised over the three clients."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    timestamp_type: int


def _acks_for(client: str, acks: int):
    if client == "confluent":
        return {0: "0", 1: "1", -1: "all"}[acks]
    return {0: 0, 1: 1, -1: "all"}[acks]


# --------------------------------------------------------------------------- produce


def produce(
    client: str,
    bootstrap: str,
    topic: str,
    msgs: list[Msg],
    *,
    partition: int | None = 0,
    acks: int = -1,
    codec: str = "none",
    extra: dict | None = None,
    timeout_s: float = CLIENT_TIMEOUT_S,
) -> list[int]:
    """Produce ``msgs`` in order; returns the offsets the producer was told
    (as the client reports them: -1/negative for acks=0)."""
    if client == "kafka-python":
        return _produce_kafka_python(bootstrap, topic, msgs, partition, acks, codec, extra or {}, timeout_s)
    if client == "confluent":
        return _produce_confluent(bootstrap, topic, msgs, partition, acks, codec, extra or {}, timeout_s)
    if client == "aiokafka":
        return asyncio.run(_produce_aiokafka(bootstrap, topic, msgs, partition, acks, codec, extra or {}, timeout_s))
    raise ValueError(client)


def _produce_kafka_python(bootstrap, topic, msgs, partition, acks, codec, extra, timeout_s):
    from kafka import KafkaProducer

    config = dict(
        bootstrap_servers=bootstrap,
        enable_idempotence=False,
        acks=_acks_for("kafka-python", acks),
        compression_type=None if codec == "none" else codec,
        request_timeout_ms=int(timeout_s * 1000),
        max_block_ms=int(timeout_s * 1000),
    )
    config.update(extra)
    producer = KafkaProducer(**config)
    try:
        futures = [
            producer.send(
                topic,
                key=m.key,
                value=m.value,
                headers=list(m.headers),
                partition=partition,
                timestamp_ms=m.timestamp,
            )
            for m in msgs
        ]
        producer.flush(timeout=timeout_s)
        return [f.get(timeout=timeout_s).offset for f in futures]
    finally:
        producer.close(timeout=10)


def _produce_confluent(bootstrap, topic, msgs, partition, acks, codec, extra, timeout_s):
    from confluent_kafka import KafkaException, Producer

    config = {
        "bootstrap.servers": bootstrap,
        "acks": _acks_for("confluent", acks),
        "compression.type": codec,
        "enable.idempotence": False,
        "message.timeout.ms": int(timeout_s * 1000),
    }
    config.update(extra)
    producer = Producer(config)
    results: dict[int, tuple] = {}
    try:
        for i, m in enumerate(msgs):
            kwargs = {}
            if partition is not None:
                kwargs["partition"] = partition
            if m.timestamp is not None:
                kwargs["timestamp"] = m.timestamp
            if m.headers:
                kwargs["headers"] = list(m.headers)
            producer.produce(
                topic,
                key=m.key,
                value=m.value,
                on_delivery=lambda err, rec, i=i: results.__setitem__(i, (err, rec.offset() if rec is not None else None)),
                **kwargs,
            )
            producer.poll(0)
        remaining = producer.flush(timeout_s)
        assert remaining == 0, f"{remaining} messages still queued after {timeout_s}s"
        errors = [err for err, _ in results.values() if err is not None]
        if errors:
            raise KafkaException(errors[0])
        assert len(results) == len(msgs)
        return [results[i][1] for i in range(len(msgs))]
    finally:
        producer.flush(1)


async def _produce_aiokafka(bootstrap, topic, msgs, partition, acks, codec, extra, timeout_s):
    from aiokafka import AIOKafkaProducer

    config = dict(
        bootstrap_servers=bootstrap,
        acks=_acks_for("aiokafka", acks),
        compression_type=None if codec == "none" else codec,
        request_timeout_ms=int(timeout_s * 1000),
    )
    config.update(extra)
    producer = AIOKafkaProducer(**config)
    await asyncio.wait_for(producer.start(), timeout_s)
    try:
        futures = []
        for m in msgs:
            futures.append(
                await producer.send(
                    topic,
                    key=m.key,
                    value=m.value,
                    headers=list(m.headers),
                    partition=partition,
                    timestamp_ms=m.timestamp,
                )
            )
        metadata = await asyncio.wait_for(asyncio.gather(*futures), timeout_s)
        # With acks=0 aiokafka resolves the send futures with None.
        return [md.offset if md is not None else None for md in metadata]
    finally:
        await producer.stop()


# --------------------------------------------------------------------------- consume


def consume(
    client: str,
    bootstrap: str,
    topic: str,
    expected_count: int,
    *,
    partitions=(0,),
    start_offset: int = 0,
    extra: dict | None = None,
    timeout_s: float = CLIENT_TIMEOUT_S,
    settle_s: float = 0.0,
) -> list[Got]:
    """Assign ``partitions`` (no group management) from ``start_offset`` and read
    until ``expected_count`` records arrived or ``timeout_s`` passed; then keep
    polling for ``settle_s`` more to catch unexpected extra records."""
    if client == "kafka-python":
        return _consume_kafka_python(bootstrap, topic, expected_count, partitions, start_offset, extra or {}, timeout_s, settle_s)
    if client == "confluent":
        return _consume_confluent(bootstrap, topic, expected_count, partitions, start_offset, extra or {}, timeout_s, settle_s)
    if client == "aiokafka":
        return asyncio.run(
            _consume_aiokafka(bootstrap, topic, expected_count, partitions, start_offset, extra or {}, timeout_s, settle_s)
        )
    raise ValueError(client)


def _bounded_poll(poll_once, expected_count, timeout_s, settle_s):
    out: list[Got] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < expected_count and time.monotonic() < deadline:
        out.extend(poll_once())
    settle_deadline = time.monotonic() + settle_s
    while time.monotonic() < settle_deadline:
        out.extend(poll_once())
    return out


def _consume_kafka_python(bootstrap, topic, expected_count, partitions, start_offset, extra, timeout_s, settle_s):
    from kafka import KafkaConsumer, TopicPartition

    config = dict(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=int(timeout_s * 1000) + 5000,
    )
    config.update(extra)
    consumer = KafkaConsumer(**config)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, start_offset)

        def poll_once():
            batch = consumer.poll(timeout_ms=200)
            got = []
            for records in batch.values():
                for r in records:
                    got.append(
                        Got(r.partition, r.offset, r.key, r.value, tuple(r.headers or ()), r.timestamp, r.timestamp_type)
                    )
            return got

        return _bounded_poll(poll_once, expected_count, timeout_s, settle_s)
    finally:
        consumer.close()


def confluent_consumer(bootstrap: str, extra: dict | None = None):
    from confluent_kafka import Consumer

    config = {
        "bootstrap.servers": bootstrap,
        # Required by librdkafka; never used: we only assign and never commit.
        "group.id": "interop-unused-group",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
    }
    config.update(extra or {})
    return Consumer(config)


def _consume_confluent(bootstrap, topic, expected_count, partitions, start_offset, extra, timeout_s, settle_s):
    from confluent_kafka import KafkaException, TopicPartition

    consumer = confluent_consumer(bootstrap, extra)
    try:
        consumer.assign([TopicPartition(topic, p, start_offset) for p in partitions])

        def poll_once():
            m = consumer.poll(0.2)
            if m is None:
                return []
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF, only if enabled
                    return []
                raise KafkaException(m.error())
            ts_type, ts = m.timestamp()
            return [
                Got(m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()), ts, _CONFLUENT_TS_TYPES.get(ts_type, -1))
            ]

        return _bounded_poll(poll_once, expected_count, timeout_s, settle_s)
    finally:
        consumer.close()


async def _consume_aiokafka(bootstrap, topic, expected_count, partitions, start_offset, extra, timeout_s, settle_s):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    config = dict(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=int(timeout_s * 1000) + 5000,
    )
    config.update(extra)
    consumer = AIOKafkaConsumer(**config)
    await asyncio.wait_for(consumer.start(), timeout_s)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, start_offset)
        out: list[Got] = []
        deadline = time.monotonic() + timeout_s
        settle_deadline = None
        while True:
            now = time.monotonic()
            if len(out) >= expected_count and settle_deadline is None:
                settle_deadline = now + settle_s
            if now >= deadline or (settle_deadline is not None and now >= settle_deadline):
                break
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for r in records:
                    out.append(Got(r.partition, r.offset, r.key, r.value, tuple(r.headers or ()), r.timestamp, r.timestamp_type))
        return out
    finally:
        await consumer.stop()


# --------------------------------------------------------------------------- raw protocol

API_VERSIONS = APIS_BY_NAME["ApiVersions"]
METADATA = APIS_BY_NAME["Metadata"]
PRODUCE = APIS_BY_NAME["Produce"]
FETCH = APIS_BY_NAME["Fetch"]
LIST_OFFSETS = APIS_BY_NAME["ListOffsets"]
CREATE_TOPICS = APIS_BY_NAME["CreateTopics"]
DELETE_TOPICS = APIS_BY_NAME["DeleteTopics"]

REQ = {key: struct_classes(APIS_BY_KEY[key].request) for key in (0, 1, 2, 3, 18, 19, 20)}


class ConnectionClosed(Exception):
    pass


class RawConnection:
    """A blocking socket speaking Kafka frames; correlation ids count up from 1."""

    def __init__(self, broker_or_bootstrap, timeout_s: float = 15.0, client_id: str | None = "interop-raw"):
        bootstrap = broker_or_bootstrap if isinstance(broker_or_bootstrap, str) else broker_or_bootstrap.bootstrap
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.client_id = client_id
        self._ids = count(1)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def next_id(self) -> int:
        return next(self._ids)

    def send(self, api, version: int, body, correlation_id: int | None = None) -> int:
        cid = self.next_id() if correlation_id is None else correlation_id
        self.sock.sendall(encode_request(api, version, cid, self.client_id, body))
        return cid

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exactly(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionClosed(f"connection closed after {len(data)} of {n} bytes")
            data += chunk
        return bytes(data)

    def read_frame(self) -> bytes:
        size = INT32.unpack(self._recv_exactly(4))[0]
        return self._recv_exactly(size)

    def read_response(self, api, version: int):
        """``(correlation_id, body)`` of the next response frame."""
        return decode_response(api, version, self.read_frame())

    def request(self, api, version: int, body):
        cid = self.send(api, version, body)
        got_cid, response = self.read_response(api, version)
        assert got_cid == cid, f"correlation id {got_cid} answered request {cid}"
        return response

    def closed_by_peer(self, timeout_s: float = 10.0) -> bool:
        """True when the broker closes the connection (EOF or reset) within the
        timeout without sending anything; False if it stays open or answers."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return data == b""


def api_versions_ok(bootstrap: str) -> bool:
    """A fresh connection gets a successful ApiVersions v3 answer."""
    with RawConnection(bootstrap) as conn:
        R = REQ[18]
        response = conn.request(
            API_VERSIONS, 3, R.ApiVersionsRequest(client_software_name="interop", client_software_version="1")
        )
        return response.error_code == 0 and any(k.api_key == 18 for k in response.api_keys)


def list_offset(bootstrap: str, topic: str, partition: int, timestamp: int, version: int = 7, isolation_level: int = 0):
    """One ListOffsets lookup; returns the partition response."""
    R = REQ[2]
    body = R.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[R.ListOffsetsTopic(name=topic, partitions=[R.ListOffsetsPartition(partition_index=partition, timestamp=timestamp)])],
    )
    with RawConnection(bootstrap) as conn:
        response = conn.request(LIST_OFFSETS, version, body)
    return response.topics[0].partitions[0]


def fetch_request(topic: str, partition: int, offset: int, *, max_wait_ms=0, min_bytes=1, max_bytes=50 * 2**20, partition_max_bytes=10 * 2**20):
    """A Fetch v12 request body (topics by name) for one partition."""
    R = REQ[1]
    return R.FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            R.FetchTopic(
                topic=topic,
                partitions=[R.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes)],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def fetch_partition(bootstrap: str, topic: str, partition: int = 0, offset: int = 0, **kwargs):
    """One Fetch v12; returns the partition data of the response."""
    with RawConnection(bootstrap) as conn:
        response = conn.request(FETCH, 12, fetch_request(topic, partition, offset, **kwargs))
    return response.responses[0].partitions[0]


def read_all_batches(bootstrap: str, topic: str, partition: int = 0, *, max_rounds: int = 1000):
    """Every batch of a partition as ``(header, records)``, fetching until the high watermark."""
    out = []
    offset = 0
    for _ in range(max_rounds):
        data = fetch_partition(bootstrap, topic, partition, offset)
        assert data.error_code == 0, f"fetch error {data.error_code}"
        records = data.records or b""
        if not records:
            break
        for pos, _size, header in iter_batches(records, allow_truncated_tail=True):
            full_header, decoded = decode_batch_records(records, pos)
            if full_header.last_offset < offset:
                continue
            out.append((full_header, decoded))
            offset = full_header.last_offset + 1
        if offset >= data.high_watermark:
            break
    return out


def topic_partition_dirs(log_dir, topic: str) -> list:
    """The partition directories ``<topic>-<n>`` of ``topic`` under a log dir."""
    import re
    from pathlib import Path

    pattern = re.compile(re.escape(topic) + r"-\d+")
    root = Path(log_dir)
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and pattern.fullmatch(p.name))


def create_topics_raw(bootstrap: str, topics: list[tuple], *, validate_only: bool = False, version: int = 7):
    """CreateTopics with ``(name, num_partitions, replication_factor[, configs])``
    tuples; returns the response's topic results in request order."""
    R = REQ[19]
    entries = []
    for item in topics:
        name, partitions, replication = item[:3]
        configs = item[3] if len(item) > 3 else {}
        entries.append(
            R.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=replication,
                assignments=[],
                configs=[R.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
            )
        )
    with RawConnection(bootstrap) as conn:
        response = conn.request(CREATE_TOPICS, version, R.CreateTopicsRequest(topics=entries, timeout_ms=30000, validate_only=validate_only))
    return response.topics


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict | None = None) -> None:
    result = create_topics_raw(bootstrap, [(name, partitions, 1, configs or {})])[0]
    assert result.error_code == 0, f"creating {name}: {result.error_code} {result.error_message}"


def produce_request(topic: str, partition_batches: dict[int, bytes], acks: int = -1):
    R = REQ[0]
    return R.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=30000,
        topic_data=[
            R.TopicProduceData(
                name=topic,
                partition_data=[R.PartitionProduceData(index=p, records=b) for p, b in partition_batches.items()],
            )
        ],
    )


def produce_raw(bootstrap: str, topic: str, batch: bytes, partition: int = 0, *, version: int = 9):
    """One acks=-1 Produce of ``batch`` (raw v2 batch bytes); returns the partition response."""
    with RawConnection(bootstrap) as conn:
        response = conn.request(PRODUCE, version, produce_request(topic, {partition: batch}))
    return response.responses[0].partition_responses[0]
