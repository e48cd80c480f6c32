"""What the mirror tests share: a source topic written by confluent-kafka, and a
partition's whole log read raw (the bytes of every batch) for byte comparisons."""

from __future__ import annotations

from protocol.records import iter_batches
from tests.interop._support import fetch_partition

PARTITIONS = 3
WAIT_S = 30


def produce_source(bootstrap: str, topic: str) -> None:
    """Idempotent records in every partition, then one committed and one aborted transaction."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(60):
        producer.produce(topic, value=f"plain-{i}".encode(), key=f"k{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(WAIT_S) == 0
    txn = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"txn-{topic}"})
    txn.init_transactions(WAIT_S)
    for commit in (True, False):
        txn.begin_transaction()
        for p in range(PARTITIONS):
            txn.produce(topic, value=f"{'committed' if commit else 'aborted'}-{p}".encode(), partition=p)
        if commit:
            txn.commit_transaction(WAIT_S)
        else:
            txn.abort_transaction(WAIT_S)


def raw_log(bootstrap: str, topic: str, partition: int) -> tuple[bytes, int]:
    """The partition's whole log up to its high watermark, as bytes, and that high watermark."""
    out = bytearray()
    offset = 0
    for _ in range(1000):
        data = fetch_partition(bootstrap, topic, partition, offset)
        assert data.error_code == 0
        records = bytes(data.records or b"")
        if not records:
            return bytes(out), data.high_watermark
        for position, size, header in iter_batches(records, allow_truncated_tail=True):
            if position + size > len(records):
                break
            out += records[position : position + size]
            offset = header.base_offset + header.last_offset_delta + 1
        if offset >= data.high_watermark:
            return bytes(out), data.high_watermark
    raise AssertionError("the source log did not end")
