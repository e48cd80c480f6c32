"""Multi-master topics in a ring and in a full mesh: three pybroker processes
A, B and C (origins 1, 2, 3), the topic written in all three at once by
idempotent confluent-kafka producers, links copying it around.

Each cluster must end with exactly the union of the writes, each record once
(amplification factor 1), each origin's records in the order they were
written, every batch still carrying its producer's id (whose origin is the
cluster it was written in) and a valid CRC.
"""

from __future__ import annotations

import threading
import time

import pytest

from controller.producer_origins import origin_of
from protocol.errors import ErrorCode
from protocol.records import build_batch, decode_records, iter_batches
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.interop._support import RawConnection, create_topic, list_offset, produce_raw, unique_topic
from tests.interop.test_metrics import metrics_port, scrape
from tests.links._mirror_support import raw_log

confluent_kafka = pytest.importorskip("confluent_kafka")

CREATE_LINKS = APIS_BY_NAME["CreateClusterLinks"]
_CL = struct_classes(CREATE_LINKS.request)
PARTITIONS = 2
RECORDS_PER_CLUSTER = 300
ORIGINS = {"A": 1, "B": 2, "C": 3}
WAIT_S = 90
LATEST = -1


def wait_until(predicate, timeout_s: float = WAIT_S, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


def create_multi_master_link(bootstrap: str, name: str, source_bootstrap: str, topic: str, extra: dict[str, str] | None = None) -> None:
    configs = {"bootstrap.servers": source_bootstrap, "multi.master.topics": topic, "retry.backoff.ms": "200", **(extra or {})}
    body = _CL.CreateClusterLinksRequest(
        links=[
            _CL.CreatableLink(
                link_name=name, configs=[_CL.CreatableLinkConfig(name=k, value=v) for k, v in configs.items()]
            )
        ],
        validate_only=False,
        timeout_ms=30000,
    )
    with RawConnection(bootstrap) as conn:
        [result] = conn.request(CREATE_LINKS, 0, body).results
    assert result.error_code == 0, (result.error_code, result.error_message)


def record_count(bootstrap: str, topic: str) -> int:
    return sum(list_offset(bootstrap, topic, p, LATEST).offset for p in range(PARTITIONS))


def write(bootstrap: str, topic: str, cluster: str, failures: list) -> None:
    """RECORDS_PER_CLUSTER records, value ``<cluster>-<i>``, record i to partition i % PARTITIONS."""
    try:
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2, "batch.num.messages": 7}
        )
        errors = []
        for i in range(RECORDS_PER_CLUSTER):
            producer.produce(
                topic, value=f"{cluster}-{i}".encode(), partition=i % PARTITIONS,
                on_delivery=lambda err, msg: err is not None and errors.append(err),
            )
            if i % 25 == 0:
                producer.poll(0.01)  # spread the writes over time, so the copies run meanwhile
        left = producer.flush(WAIT_S)
        if left or errors:
            failures.append(f"{cluster}: {left} undelivered, errors {errors[:3]}")
    except Exception as exc:  # noqa: BLE001 - reported by the test, not lost in the thread
        failures.append(f"{cluster}: {exc!r}")


def partition_records(bootstrap: str, topic: str, partition: int) -> list[tuple[int, str]]:
    """(producer id, value) of every record in the partition, in offset order (CRCs checked)."""
    data, _ = raw_log(bootstrap, topic, partition)
    out = []
    for position, size, header in iter_batches(data):
        for record in decode_records(data[position : position + size], verify_crc=True):
            out.append((header.producer_id, record.value.decode()))
    return out


def check_cluster(name: str, bootstrap: str, topic: str) -> None:
    expected_total = RECORDS_PER_CLUSTER * len(ORIGINS)
    seen = []
    for p in range(PARTITIONS):
        records = partition_records(bootstrap, topic, p)
        for producer_id, value in records:
            writer = value.split("-")[0]
            assert origin_of(producer_id) == ORIGINS[writer], f"{name}-{p}: {value} has producer id {producer_id}"
        for writer in ORIGINS:
            order = [int(v.split("-")[1]) for _, v in records if v.startswith(f"{writer}-")]
            written = [i for i in range(RECORDS_PER_CLUSTER) if i % PARTITIONS == p]
            assert order == written, f"{name}-{p}: records of {writer} out of order, missing or repeated"
        seen.extend(v for _, v in records)
    written = {f"{c}-{i}" for c in ORIGINS for i in range(RECORDS_PER_CLUSTER)}
    # The figures of the issue (shown with -s): duplicates, missing, amplification.
    print(
        f"{name}: {len(seen)} records held of {expected_total} written; duplicates {len(seen) - len(set(seen))}, "
        f"missing {len(written - set(seen))}, amplification {len(seen) / expected_total:.3f}"
    )
    assert len(seen) == expected_total, f"{name}: {len(seen)} records, not {expected_total}"
    assert set(seen) == written


def batch_outcomes(broker, topic: str) -> dict[str, float]:
    """The multi-master copy's batches on ``broker`` by outcome, summed over links and partitions."""
    totals: dict[str, float] = {}
    for (name, labels), count in scrape(metrics_port(broker)).items():
        labels = dict(labels)
        if name == "pybroker_multi_master_batches_total" and labels["topic"] == topic:
            totals[labels["outcome"]] = totals.get(labels["outcome"], 0) + count
    return totals


def three_clusters(broker_factory, topic: str) -> dict[str, object]:
    clusters = {}
    for name, origin in ORIGINS.items():
        clusters[name] = broker_factory({"cluster.link.origin.id": str(origin), "metrics.listener": "http://127.0.0.1:0"})
    for broker in clusters.values():
        create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    return clusters


def write_everywhere_and_check(clusters: dict, topic: str) -> None:
    failures: list[str] = []
    writers = [threading.Thread(target=write, args=(b.bootstrap, topic, n, failures)) for n, b in clusters.items()]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join(WAIT_S + 30)
    assert not failures, failures
    expected_total = RECORDS_PER_CLUSTER * len(ORIGINS)
    for name, broker in clusters.items():
        reached = wait_until(lambda b=broker: record_count(b.bootstrap, topic) >= expected_total)
        assert reached, f"{name} holds {record_count(broker.bootstrap, topic)} records, not {expected_total}"
    # A batch copied once too often would land after the union: give the copies
    # time to go round once more (every link fetches again within its wait).
    settle = time.monotonic() + 3
    while time.monotonic() < settle:
        for name, broker in clusters.items():
            assert record_count(broker.bootstrap, topic) == expected_total, f"{name}: more records than written"
        time.sleep(0.2)
    for name, broker in clusters.items():
        check_cluster(name, broker.bootstrap, topic)


def test_ring_delivers_the_union_once_in_every_cluster(broker_factory):
    topic = unique_topic("ring")
    clusters = three_clusters(broker_factory, topic)
    a, b, c = clusters["A"].bootstrap, clusters["B"].bootstrap, clusters["C"].bootstrap
    # A -> B -> C -> A: each destination names its source.
    create_multi_master_link(b, "from-a", a, topic)
    create_multi_master_link(c, "from-b", b, topic)
    create_multi_master_link(a, "from-c", c, topic)
    write_everywhere_and_check(clusters, topic)
    # Around a ring each batch reaches every other cluster by one path: the
    # origin check stops it when it comes back, so none arrives twice.
    for name, broker in clusters.items():
        # The copy reads on past the union: the cluster's own batches come back.
        outcomes = wait_until(lambda b=broker: (o := batch_outcomes(b, topic)).get("own_origin", 0) > 0 and o)
        assert outcomes, (name, batch_outcomes(broker, topic))
        assert outcomes.get("already_here", 0) == 0, (name, outcomes)
        assert outcomes.get("gap", 0) == 0, (name, outcomes)
    # Producers that cannot be placed are refused, saying how to fix it.
    answer = produce_raw(a, topic, build_batch([(None, b"no id")]), 0)
    assert answer.error_code == ErrorCode.INVALID_REQUEST
    assert "enable idempotence" in answer.error_message
    transactional = confluent_kafka.Producer({"bootstrap.servers": a, "transactional.id": f"txn-{topic}"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce(topic, value=b"txn", partition=0)
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_REQUEST|InvalidRequest|Broker: Invalid request"):
        transactional.commit_transaction(30)
    assert record_count(a, topic) == RECORDS_PER_CLUSTER * len(ORIGINS)


def test_full_mesh_delivers_the_union_once_in_every_cluster(broker_factory):
    topic = unique_topic("mesh")
    clusters = three_clusters(broker_factory, topic)
    for destination in ORIGINS:
        for source in ORIGINS:
            if source != destination:
                create_multi_master_link(
                    clusters[destination].bootstrap, f"from-{source.lower()}", clusters[source].bootstrap, topic
                )
    write_everywhere_and_check(clusters, topic)
