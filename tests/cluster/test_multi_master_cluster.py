"""A multi-master topic between a single-node cluster A and a three-node
cluster B, with B's leader of a partition SIGKILLed while both clusters are
written and copied (issue 31).

B copies A's batches into the partitions it leads and keeps its source
positions as a group's committed offsets, committed once its in-sync
replicas hold what was copied; A copies B's batches from whichever node of
B leads. When B's leader dies mid-copy, another node takes the partition
over, reads the committed position and goes on: batches copied again from
there are recognised by their producer's sequence. Both clusters must end
with exactly the union of the writes, each record once, in each origin's
order.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

from controller.producer_origins import origin_of
from protocol.records import decode_records, iter_batches
from tests.cluster.replication_harness import ReplicatedCluster
from tests.interop._support import create_topic, unique_topic
from tests.links._mirror_support import raw_log
from tests.links.test_multi_master_ring import create_multi_master_link, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 3
RECORDS_PER_CLUSTER = 600
ORIGINS = {"A": 1, "B": 2}
WAIT_S = 90


def write(bootstrap: str, topic: str, cluster: str, failures: list, started: threading.Event) -> None:
    """RECORDS_PER_CLUSTER records ``<cluster>-<i>``, record i to partition i % PARTITIONS, over a few seconds."""
    try:
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "batch.num.messages": 10,
                "message.timeout.ms": WAIT_S * 1000,
            }
        )
        errors = []
        for i in range(RECORDS_PER_CLUSTER):
            producer.produce(
                topic, value=f"{cluster}-{i}".encode(), partition=i % PARTITIONS,
                on_delivery=lambda err, msg: err is not None and errors.append(err),
            )
            if i % 20 == 0:
                producer.poll(0.05)
            if i == RECORDS_PER_CLUSTER // 3:
                started.set()
        left = producer.flush(WAIT_S)
        if left or errors:
            failures.append(f"{cluster}: {left} undelivered, errors {errors[:3]}")
    except Exception as exc:  # noqa: BLE001 - reported by the test, not lost in the thread
        failures.append(f"{cluster}: {exc!r}")
    finally:
        started.set()


def partition_values(bootstrap, topic: str, partition: int) -> list[tuple[int, str]]:
    """``bootstrap``: host:port, or a function of the partition giving its leader's."""
    data, _ = raw_log(bootstrap(partition) if callable(bootstrap) else bootstrap, topic, partition)
    out = []
    for position, size, header in iter_batches(data):
        if header.is_control:
            continue
        for record in decode_records(data[position : position + size], verify_crc=True):
            out.append((header.producer_id, record.value.decode()))
    return out


def total(bootstrap, topic: str) -> int:
    return sum(len(partition_values(bootstrap, topic, p)) for p in range(PARTITIONS))


def check(name: str, bootstrap, topic: str) -> None:
    seen = []
    for p in range(PARTITIONS):
        records = partition_values(bootstrap, topic, p)
        for producer_id, value in records:
            assert origin_of(producer_id) == ORIGINS[value.split("-")[0]], f"{name}-{p}: {value} has producer id {producer_id}"
        for writer in ORIGINS:
            order = [int(v.split("-")[1]) for _, v in records if v.startswith(f"{writer}-")]
            assert order == [i for i in range(RECORDS_PER_CLUSTER) if i % PARTITIONS == p], (
                f"{name}-{p}: records of {writer} out of order, missing or repeated"
            )
        seen.extend(v for _, v in records)
    assert sorted(seen) == sorted(f"{c}-{i}" for c in ORIGINS for i in range(RECORDS_PER_CLUSTER)), name


def test_a_leader_of_the_three_node_cluster_dies_mid_copy(broker_factory, tmp_path):
    topic = unique_topic("mm-cluster")
    a = broker_factory({"cluster.link.origin.id": str(ORIGINS["A"])})
    b = ReplicatedCluster(tmp_path / "b", extra={"cluster.link.origin.id": str(ORIGINS["B"])})
    try:
        b.start()
        create_topic(a.bootstrap, topic, partitions=PARTITIONS)
        b.create_topic(topic, PARTITIONS, 3)
        create_multi_master_link(b.bootstrap([1]), "from-a", a.bootstrap, topic)
        create_multi_master_link(a.bootstrap, "from-b", b.bootstrap(), topic)
        failures: list[str] = []
        started = {name: threading.Event() for name in ORIGINS}
        writers = [
            threading.Thread(target=write, args=(a.bootstrap, topic, "A", failures, started["A"])),
            threading.Thread(target=write, args=(b.bootstrap(), topic, "B", failures, started["B"])),
        ]
        for thread in writers:
            thread.start()
        assert all(event.wait(WAIT_S) for event in started.values())
        victim = b.leader_of(topic, 0)
        assert victim is not None
        b.signal(victim, signal.SIGKILL)
        b.kill(victim)
        new_leader = b.leader_of(topic, 0, timeout_s=30, exclude=(victim,))
        assert new_leader is not None and new_leader != victim
        for thread in writers:
            thread.join(WAIT_S + 30)
        assert not failures, failures
        b.restart(victim)
        expected = RECORDS_PER_CLUSTER * len(ORIGINS)

        def b_leader(partition: int) -> str:
            return b.bootstrap([b.leader_of(topic, partition, timeout_s=30)])

        for name, bootstrap in (("A", a.bootstrap), ("B", b_leader)):
            assert wait_until(lambda bs=bootstrap: total(bs, topic) >= expected, WAIT_S), (
                f"{name} holds {total(bootstrap, topic)} records, not {expected}"
            )
        time.sleep(2)  # a batch copied twice would land after the union
        check("A", a.bootstrap, topic)
        check("B", b_leader, topic)
    finally:
        b.stop()
        b.save_output()
