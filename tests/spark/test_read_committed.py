"""isolationLevel=read_committed with real transactions: a broker process and
confluent-kafka's transactional producer committing and aborting.

Small segments make the markers, the aborted data and the producer snapshots
fall into different segments; a transaction left open at the end holds the
last stable offset. The data source must return exactly the committed records
(and the plain ones below the open transaction) with read_committed, and
every record with read_uncommitted; its planning must agree with the full
header walk of the same files.
"""

from __future__ import annotations

import pytest

from spark_jobs.segment_reader import PartitionDir, earliest_offset, latest_offset
from spark_jobs.txn_state import snapshot_offsets, transaction_state, walked_transaction_state
from tests.conftest import BrokerProcess
from tests.interop._support import create_topic, unique_topic
from tests.spark._support import stopped_log_dir
from tests.spark.test_datasource import read

confluent_kafka = pytest.importorskip("confluent_kafka")

SEGMENT_BYTES = 2048
PARTITIONS = 2
TRANSACTIONS = 12
RECORDS_PER_PARTITION = 4  # per transaction
TIMEOUT_S = 30


def values(df) -> list[bytes]:
    return sorted(bytes(row["value"]) for row in df.select("value").collect())


@pytest.fixture(scope="module")
def transactional_log(tmp_path_factory):
    """(log dir, topic, {kind: values}) after committed and aborted transactions, plain
    records between them, one open transaction and plain records after its start
    ("late") were produced, and the broker stopped cleanly."""
    broker = BrokerProcess(
        tmp_path_factory.mktemp("spark-txn-broker"), {"log.segment.bytes": str(SEGMENT_BYTES)}
    ).start()
    try:
        topic = unique_topic("spark-txn")
        create_topic(broker.bootstrap, topic, PARTITIONS)
        written: dict[str, list[bytes]] = {"committed": [], "aborted": [], "plain": [], "open": [], "late": []}
        transactional = confluent_kafka.Producer(
            {"bootstrap.servers": broker.bootstrap, "transactional.id": topic, "linger.ms": 5}
        )
        plain = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        transactional.init_transactions(TIMEOUT_S)

        def send(producer, kind: str, txn: int, count: int) -> None:
            for partition in range(PARTITIONS):
                for i in range(count):
                    value = b"%s-%d-%d-%d-" % (kind.encode(), txn, partition, i) + b"x" * 60
                    producer.produce(topic, value=value, partition=partition)
                    written[kind].append(value)

        for txn in range(TRANSACTIONS):
            aborted = txn % 3 == 1
            transactional.begin_transaction()
            send(transactional, "aborted" if aborted else "committed", txn, RECORDS_PER_PARTITION)
            assert transactional.flush(TIMEOUT_S) == 0
            send(plain, "plain", txn, 1)  # between a transaction's data and its marker
            assert plain.flush(TIMEOUT_S) == 0
            if aborted:
                transactional.abort_transaction(TIMEOUT_S)
            else:
                transactional.commit_transaction(TIMEOUT_S)
        transactional.begin_transaction()
        send(transactional, "open", TRANSACTIONS, 2)
        assert transactional.flush(TIMEOUT_S) == 0  # in the log, never committed
        send(plain, "late", TRANSACTIONS, 1)  # after the open transaction began: not stable
        assert plain.flush(TIMEOUT_S) == 0
        # Both clients go before the broker does (no reconnecting noise); destroying
        # the transactional one leaves its transaction open, as a crashed client would.
        del plain, transactional
        log_dir = stopped_log_dir(broker)
        yield log_dir, topic, written
    finally:
        broker.stop()


def test_read_committed_returns_exactly_the_committed_records(spark, transactional_log):
    log_dir, topic, written = transactional_log
    everything = sorted(v for kind in written.values() for v in kind)
    assert values(read(spark, log_dir, subscribe=topic)) == everything
    assert values(read(spark, log_dir, subscribe=topic, isolationLevel="read_uncommitted")) == everything
    committed = sorted(written["committed"] + written["plain"])
    assert values(read(spark, log_dir, subscribe=topic, isolationLevel="read_committed")) == committed
    # Split into many small input partitions, each carrying its aborted ranges.
    assert (
        values(read(spark, log_dir, subscribe=topic, isolationLevel="read_committed", maxRecordsPerPartition="3"))
        == committed
    )


def test_planning_uses_the_brokers_files_and_agrees_with_the_full_walk(transactional_log):
    log_dir, topic, _written = transactional_log
    for partition in range(PARTITIONS):
        pdir = PartitionDir(topic, partition, log_dir / f"{topic}-{partition}")
        names = sorted(p.name for p in pdir.path.iterdir())
        indexes = [n for n in names if n.endswith(".txnindex")]
        assert len([n for n in names if n.endswith(".log")]) > 3, names
        assert indexes and snapshot_offsets(pdir.path), names  # the reader has the broker's files to use
        start, end = earliest_offset(pdir), latest_offset(pdir)
        aborted, last_stable_offset = transaction_state(pdir, start, end)
        aborted_transactions = sum(1 for txn in range(TRANSACTIONS) if txn % 3 == 1)
        assert len(aborted) == aborted_transactions
        assert last_stable_offset is not None and last_stable_offset < end  # the open transaction
        assert (aborted, last_stable_offset) == walked_transaction_state(pdir, start, end)
