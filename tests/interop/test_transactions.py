"""Transactions with real clients, over TCP, against one broker.

Each client library's transactional producer commits and aborts
transactions across two partitions; every library's consumer then reads the
topic with ``read_committed`` (only committed records, markers and aborted
batches skipped) and ``read_uncommitted`` (everything the producers wrote).
The last stable offset holds read_committed consumers and ListOffsets
behind an open transaction and lets them go when it ends;
``send_offsets_to_transaction`` (confluent-kafka, kafka-python, aiokafka)
commits a group's offsets atomically with the output; a second producer with
the same transactional id fences the first; the coordinator aborts a
transaction that outlives its timeout; a marker from a deposed coordinator
(an older coordinator epoch) is refused and writes nothing; after a SIGKILL
and restart, aborted transactions stay hidden (the ``.txnindex`` survives) and
an open one still holds the last stable offset until its producer's
successor aborts it. The raw-protocol checks of the
coordinator's and the group's APIs are in test_txn_coordinator_api.py and
test_txn_offset_commit.py.
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.conftest import wait_until
from tests.interop._support import CLIENTS, RawConnection, consume, create_topic, list_offset, unique_topic

TXN_OVERRIDES = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    # Timed-out transactions are looked for every 200 ms (Kafka: 10 s).
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}
TIMEOUT_S = 30
READ_COMMITTED = {
    "kafka-python": {"isolation_level": "read_committed"},
    "confluent": {"isolation.level": "read_committed"},
    "aiokafka": {"isolation_level": "read_committed"},
}
READ_UNCOMMITTED = {
    "kafka-python": {"isolation_level": "read_uncommitted"},
    "confluent": {"isolation.level": "read_uncommitted"},
    "aiokafka": {"isolation_level": "read_uncommitted"},
}
LATEST = -1


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    from tests.conftest import BrokerProcess

    broker = BrokerProcess(tmp_path_factory.mktemp("txn-broker"), TXN_OVERRIDES).start()
    yield broker
    broker.stop()


# --------------------------------------------------------------------------- one driver per client


class ConfluentTxnProducer:
    def __init__(self, bootstrap: str, transactional_id: str, extra: dict | None = None):
        from confluent_kafka import Producer

        config = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
        config.update(extra or {})
        self.producer = Producer(config)
        self.producer.init_transactions(TIMEOUT_S)

    def begin(self):
        self.producer.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes):
        self.producer.produce(topic, value=value, partition=partition)

    def flush(self):
        assert self.producer.flush(TIMEOUT_S) == 0

    def send_offsets(self, group_id: str, offsets: dict[tuple[str, int], int], consumer=None):
        from confluent_kafka import TopicPartition

        metadata = consumer.consumer_group_metadata()
        self.producer.send_offsets_to_transaction(
            [TopicPartition(t, p, o) for (t, p), o in offsets.items()], metadata, TIMEOUT_S
        )

    def commit(self):
        self.producer.commit_transaction(TIMEOUT_S)

    def abort(self):
        self.producer.abort_transaction(TIMEOUT_S)

    def close(self):
        self.producer.flush(1)


class KafkaPythonTxnProducer:
    def __init__(self, bootstrap: str, transactional_id: str):
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=transactional_id,
            linger_ms=5,
            request_timeout_ms=TIMEOUT_S * 1000,
            max_block_ms=TIMEOUT_S * 1000,
        )
        self.producer.init_transactions()

    def begin(self):
        self.producer.begin_transaction()

    def send(self, topic: str, partition: int, value: bytes):
        self.producer.send(topic, value=value, partition=partition)

    def flush(self):
        self.producer.flush(TIMEOUT_S)

    def send_offsets(self, group_id: str, offsets: dict[tuple[str, int], int], consumer=None):
        from kafka import OffsetAndMetadata, TopicPartition

        self.producer.send_offsets_to_transaction(
            {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}, group_id
        )

    def commit(self):
        self.producer.commit_transaction()

    def abort(self):
        self.producer.abort_transaction()

    def close(self):
        self.producer.close(timeout=5)


class AiokafkaTxnProducer:
    """aiokafka's producer on a private event loop, driven synchronously."""

    def __init__(self, bootstrap: str, transactional_id: str):
        from aiokafka import AIOKafkaProducer

        self.loop = asyncio.new_event_loop()

        async def start():
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap, transactional_id=transactional_id, linger_ms=5, request_timeout_ms=TIMEOUT_S * 1000
            )
            await producer.start()
            return producer

        self.producer = self.run(start())
        self.pending = []

    def run(self, coroutine):
        return self.loop.run_until_complete(asyncio.wait_for(coroutine, TIMEOUT_S))

    def begin(self):
        self.run(self.producer.begin_transaction())

    def send(self, topic: str, partition: int, value: bytes):
        self.pending.append(self.run(self.producer.send(topic, value=value, partition=partition)))

    def flush(self):
        self.run(self.producer.flush())
        for future in self.pending:
            assert future.done() and future.exception() is None
        self.pending.clear()

    def send_offsets(self, group_id: str, offsets: dict[tuple[str, int], int], consumer=None):
        from aiokafka import TopicPartition
        from aiokafka.structs import OffsetAndMetadata

        self.run(
            self.producer.send_offsets_to_transaction(
                {TopicPartition(t, p): OffsetAndMetadata(o, "") for (t, p), o in offsets.items()}, group_id
            )
        )

    def commit(self):
        self.run(self.producer.commit_transaction())

    def abort(self):
        self.run(self.producer.abort_transaction())

    def close(self):
        try:
            self.run(self.producer.stop())
        finally:
            self.loop.close()


def txn_producer(client: str, bootstrap: str, transactional_id: str):
    if client == "confluent":
        return ConfluentTxnProducer(bootstrap, transactional_id)
    if client == "kafka-python":
        return KafkaPythonTxnProducer(bootstrap, transactional_id)
    if client == "aiokafka":
        return AiokafkaTxnProducer(bootstrap, transactional_id)
    raise ValueError(client)


def latest(bootstrap: str, topic: str, partition: int, *, read_committed: bool = False) -> int:
    answer = list_offset(bootstrap, topic, partition, LATEST, isolation_level=1 if read_committed else 0)
    assert answer.error_code == 0
    return answer.offset


def values_of(records) -> list[bytes]:
    return [r.value for r in records]


def committed_group_offsets(bootstrap: str, group_id: str, topic: str, partitions) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=TIMEOUT_S)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_and_abort_seen_by_every_consumer(txn_broker, client):
    bootstrap = txn_broker.bootstrap
    topic = unique_topic(f"txn-{client}")
    create_topic(bootstrap, topic, partitions=2)
    producer = txn_producer(client, bootstrap, f"txn-{topic}")
    committed: dict[int, list[bytes]] = {0: [], 1: []}
    everything: dict[int, list[bytes]] = {0: [], 1: []}
    try:
        for round_number, outcome in enumerate(["commit", "abort", "commit", "abort", "commit"]):
            producer.begin()
            for i in range(6):
                partition = i % 2
                value = f"{outcome}-{round_number}-{i}".encode()
                producer.send(topic, partition, value)
                everything[partition].append(value)
                if outcome == "commit":
                    committed[partition].append(value)
            producer.flush()
            producer.commit() if outcome == "commit" else producer.abort()
    finally:
        producer.close()

    for reader in CLIENTS:
        for partition in (0, 1):
            got = consume(reader, bootstrap, topic, len(committed[partition]), partitions=(partition,),
                          extra=READ_COMMITTED[reader], settle_s=0.5)
            assert values_of(got) == committed[partition], (reader, partition)
            got = consume(reader, bootstrap, topic, len(everything[partition]), partitions=(partition,),
                          extra=READ_UNCOMMITTED[reader], settle_s=0.3)
            assert values_of(got) == everything[partition], (reader, partition)
    # Every transaction is over: both ends agree.
    for partition in (0, 1):
        assert latest(bootstrap, topic, partition, read_committed=True) == latest(bootstrap, topic, partition)


def test_open_transaction_holds_back_read_committed(txn_broker):
    from confluent_kafka import Producer

    bootstrap = txn_broker.bootstrap
    topic = unique_topic("txn-lso")
    create_topic(bootstrap, topic)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(TIMEOUT_S)
    producer = ConfluentTxnProducer(bootstrap, f"txn-{topic}")
    producer.begin()
    producer.send(topic, 0, b"inside")
    producer.flush()
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(TIMEOUT_S)

    # The open transaction starts at offset 1: the last stable offset.
    assert latest(bootstrap, topic, 0, read_committed=True) == 1
    assert latest(bootstrap, topic, 0) == 3
    for reader in CLIENTS:
        got = consume(reader, bootstrap, topic, 2, extra=READ_COMMITTED[reader], timeout_s=2)
        assert values_of(got) == [b"before"], reader

    producer.commit()
    producer.close()
    assert latest(bootstrap, topic, 0, read_committed=True) == 4  # past the marker
    for reader in CLIENTS:
        got = consume(reader, bootstrap, topic, 3, extra=READ_COMMITTED[reader], settle_s=0.3)
        assert values_of(got) == [b"before", b"inside", b"after"], reader


@pytest.mark.parametrize("client", CLIENTS)
def test_send_offsets_to_transaction(txn_broker, client):
    """Consume-transform-produce: the group's offsets move only with committed output."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap = txn_broker.bootstrap
    source = unique_topic("txn-in")
    sink = unique_topic("txn-out")
    group_id = f"group-{source}"
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        plain.produce(source, value=f"in-{i}".encode(), partition=0)
    plain.flush(TIMEOUT_S)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(source, 0, 0)])
    producer = txn_producer(client, bootstrap, f"txn-{sink}")
    try:
        records = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(records) < 20 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                records.append(message)
        assert len(records) == 20
        # First half committed with its offsets, second half aborted.
        for chunk, outcome in ((records[:10], "commit"), (records[10:], "abort")):
            producer.begin()
            for message in chunk:
                producer.send(sink, 0, message.value().replace(b"in", b"out"))
            producer.flush()
            producer.send_offsets(group_id, {(source, 0): chunk[-1].offset() + 1}, consumer)
            producer.commit() if outcome == "commit" else producer.abort()
    finally:
        producer.close()
        consumer.close()

    assert committed_group_offsets(bootstrap, group_id, source, [0]) == {0: 10}
    got = consume("confluent", bootstrap, sink, 10, extra=READ_COMMITTED["confluent"], settle_s=0.5)
    assert values_of(got) == [f"out-{i}".encode() for i in range(10)]


def test_second_producer_fences_the_first(txn_broker):
    from confluent_kafka import KafkaException

    bootstrap = txn_broker.bootstrap
    topic = unique_topic("txn-fence")
    create_topic(bootstrap, topic)
    transactional_id = f"txn-{topic}"
    first = ConfluentTxnProducer(bootstrap, transactional_id)
    first.begin()
    first.send(topic, 0, b"zombie")
    first.flush()
    second = ConfluentTxnProducer(bootstrap, transactional_id)  # aborts the first's transaction
    second.begin()
    second.send(topic, 0, b"winner")
    second.flush()
    second.commit()
    with pytest.raises(KafkaException) as failure:
        first.commit()
    assert failure.value.args[0].fatal()
    got = consume("confluent", bootstrap, topic, 1, extra=READ_COMMITTED["confluent"], settle_s=0.5)
    assert values_of(got) == [b"winner"]


def test_the_coordinator_aborts_a_timed_out_transaction(txn_broker):
    from confluent_kafka import KafkaException

    bootstrap = txn_broker.bootstrap
    topic = unique_topic("txn-timeout")
    create_topic(bootstrap, topic)
    producer = ConfluentTxnProducer(bootstrap, f"txn-{topic}", {"transaction.timeout.ms": 1000})
    producer.begin()
    producer.send(topic, 0, b"too slow")
    producer.flush()
    assert latest(bootstrap, topic, 0, read_committed=True) == 0
    # Aborted by the coordinator: an ABORT marker at offset 1 makes the partition stable.
    assert wait_until(lambda: latest(bootstrap, topic, 0, read_committed=True) == 2, 15)
    with pytest.raises(KafkaException):
        producer.commit()
    assert consume("confluent", bootstrap, topic, 1, extra=READ_COMMITTED["confluent"], timeout_s=1) == []


def test_a_marker_from_a_deposed_coordinator_is_refused(txn_broker):
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("txn-fenced-marker")
    create_topic(bootstrap, topic)
    producer = ConfluentTxnProducer(bootstrap, f"txn-{topic}")
    producer.begin()
    producer.send(topic, 0, b"committed")
    producer.flush()
    producer.commit()
    producer.close()
    end = latest(bootstrap, topic, 0)
    # The producer id as the partition's producers show it, with its real epoch.
    R = struct_classes(APIS_BY_NAME["DescribeProducers"].request)
    with RawConnection(bootstrap) as conn:
        described = conn.request(APIS_BY_NAME["DescribeProducers"], 0, R.DescribeProducersRequest(
            topics=[R.TopicRequest(name=topic, partition_indexes=[0])]))
    (state,) = described.topics[0].partitions[0].active_producers
    assert state.coordinator_epoch >= 0
    W = struct_classes(APIS_BY_NAME["WriteTxnMarkers"].request)
    marker = W.WritableTxnMarker(
        producer_id=state.producer_id, producer_epoch=state.producer_epoch, transaction_result=False,
        topics=[W.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])], coordinator_epoch=state.coordinator_epoch - 1,
    )
    with RawConnection(bootstrap) as conn:
        answer = conn.request(APIS_BY_NAME["WriteTxnMarkers"], 1, W.WriteTxnMarkersRequest(markers=[marker]))
    assert answer.markers[0].topics[0].partitions[0].error_code == 52  # TRANSACTION_COORDINATOR_FENCED
    assert latest(bootstrap, topic, 0) == end  # nothing written


def test_transactions_after_a_sigkill_and_restart(broker_factory):
    bootstrap_overrides = dict(TXN_OVERRIDES)
    broker = broker_factory(bootstrap_overrides)
    topic = unique_topic("txn-restart")
    create_topic(broker.bootstrap, topic)
    aborting = ConfluentTxnProducer(broker.bootstrap, f"txn-a-{topic}")
    aborting.begin()
    aborting.send(topic, 0, b"aborted")
    aborting.flush()
    aborting.abort()
    aborting.close()
    committing = ConfluentTxnProducer(broker.bootstrap, f"txn-c-{topic}")
    committing.begin()
    committing.send(topic, 0, b"committed")
    committing.flush()
    committing.commit()
    hanging_id = f"txn-h-{topic}"
    hanging = ConfluentTxnProducer(broker.bootstrap, hanging_id)
    hanging.begin()
    hanging.send(topic, 0, b"open at the crash")
    hanging.flush()
    open_at = latest(broker.bootstrap, topic, 0, read_committed=True)
    assert open_at == 4  # aborted, ABORT, committed, COMMIT: the open transaction starts at 4

    broker.stop(signal.SIGKILL)
    broker = broker_factory(bootstrap_overrides, data_dir=broker.data_dir)
    bootstrap = broker.bootstrap
    assert latest(bootstrap, topic, 0, read_committed=True) == open_at
    got = consume("confluent", bootstrap, topic, 1, extra=READ_COMMITTED["confluent"], settle_s=0.5)
    assert values_of(got) == [b"committed"]
    # The producer's successor aborts what its predecessor left open.
    successor = ConfluentTxnProducer(bootstrap, hanging_id)
    successor.close()
    assert wait_until(lambda: latest(bootstrap, topic, 0, read_committed=True) == latest(bootstrap, topic, 0), 15)
    got = consume("confluent", bootstrap, topic, 1, extra=READ_COMMITTED["confluent"], settle_s=0.5)
    assert values_of(got) == [b"committed"]
    got = consume("confluent", bootstrap, topic, 3, extra=READ_UNCOMMITTED["confluent"], settle_s=0.3)
    assert values_of(got) == [b"aborted", b"committed", b"open at the crash"]
