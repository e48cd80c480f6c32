"""A failing disk under one log dir of one broker (JBOD, KIP-112/KIP-858), with
real processes and real clients: three combined nodes with two log dirs each
(and the metadata log in a third), all under the EIO shim (tests/faults/eio.py).
Writes and syncs under one dir of the leader of partition 0 fail with EIO; that
dir goes offline, its leaderships move, acks=all produce to every partition
keeps succeeding, nothing acknowledged is lost, DescribeLogDirs answers the dir
KAFKA_STORAGE_ERROR, the metric counts it, the broker's other dir keeps
serving, and a restart (writes working again) brings it back into every ISR."""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402

from broker.tools.groups import KafkaConnection  # noqa: E402
from protocol.errors import ErrorCode  # noqa: E402
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, free_ports, wait_until  # noqa: E402
from tests.faults.eio import EioShimUnavailable, build_eio_shim, preload_env, set_failing  # noqa: E402

TOPIC = "eio"
PARTITIONS = 4
PRODUCE_INTERVAL_S = 0.005


def describe_log_dirs(cluster, node: int) -> dict[str, int]:
    connection = KafkaConnection("127.0.0.1", cluster.client_ports[node], 3.0)
    try:
        body = connection.call("DescribeLogDirs", 1, topics=None)
    finally:
        connection.close()
    return {r.log_dir: r.error_code for r in body.results}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


class Produced:
    """acks=all idempotent produce, round robin over the partitions, until stopped:
    every acknowledged value with its partition, and every failure."""

    def __init__(self, bootstrap: str):
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000}
        )
        self.acked: dict[str, int] = {}
        self.acked_at: list[tuple[float, int]] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked[message.value().decode()] = message.partition()
            self.acked_at.append((time.monotonic(), message.partition()))
        else:
            self.failed.append(str(error))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            self.producer.produce(TOPIC, value=f"v-{n}".encode(), partition=n % PARTITIONS, on_delivery=self._delivered)
            self.producer.poll(0)
            n += 1
            time.sleep(PRODUCE_INTERVAL_S)
        self.producer.flush(60)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)

    def acked_since(self, since_s: float, partition: int) -> int:
        return sum(1 for at, p in list(self.acked_at) if at > since_s and p == partition)


def read_all(bootstrap: str) -> dict[str, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        ends = {}
        for p in range(PARTITIONS):
            _, ends[p] = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        seen: dict[str, int] = {}
        positions = {p: 0 for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        while any(positions[p] < ends[p] for p in positions) and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=1):
                if message.error() is None:
                    seen[message.value().decode()] = message.partition()
                    positions[message.partition()] = message.offset() + 1
        return seen
    finally:
        consumer.close()


@pytest.mark.timeout(240)
def test_one_failing_log_dir_moves_its_leaders_and_loses_nothing(tmp_path, monkeypatch):
    try:
        shim = build_eio_shim(tmp_path / "shim")
    except EioShimUnavailable as exc:
        pytest.skip(str(exc))
    control = tmp_path / "eio-control"
    set_failing(control, [])
    # Every broker process starts under the shim; this test process does not.
    for key, value in preload_env(shim, control).items():
        monkeypatch.setenv(key, value)
    metrics_ports = dict(zip(NODE_IDS, free_ports(len(NODE_IDS))))
    cluster = ReplicatedCluster(tmp_path / "cluster")
    for node in NODE_IDS:
        data = cluster.nodes[node].data_dir
        jbod = {
            "log.dirs": f"{data / 'logs'},{data / 'logs2'}",
            "metadata.log.dir": str(data / "metadata"),
            "metrics.listener": f"http://127.0.0.1:{metrics_ports[node]}",
        }
        cluster.overrides[node].update(jbod)
        cluster.nodes[node].overrides.update(jbod)
    produced = None
    try:
        cluster.start()
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
        for p in range(PARTITIONS):
            assert cluster.wait_for_isr(TOPIC, p, NODE_IDS, 30), cluster.describe(TOPIC)
        victim = cluster.leader_of(TOPIC, 0)
        failing_dir = cluster.partition_dir(victim, TOPIC, 0).parent
        other_dir = next(d for d in (failing_dir.parent / "logs", failing_dir.parent / "logs2") if d != failing_dir)
        in_failing = [p for p in range(PARTITIONS) if cluster.partition_dir(victim, TOPIC, p).parent == failing_dir]
        in_other = [p for p in range(PARTITIONS) if cluster.partition_dir(victim, TOPIC, p).parent == other_dir]
        produced = Produced(cluster.bootstrap())
        produced.start()
        assert wait_until(lambda: len(produced.acked) > 200, 30), produced.failed[:5]

        set_failing(control, [failing_dir])
        failed_at = time.monotonic()

        def dir_offline():
            return describe_log_dirs(cluster, victim).get(str(failing_dir)) == ErrorCode.KAFKA_STORAGE_ERROR

        assert wait_until(dir_offline, 20), describe_log_dirs(cluster, victim)
        assert describe_log_dirs(cluster, victim)[str(other_dir)] == ErrorCode.NONE
        # Its leaderships in the failed dir move; the broker itself stays up and unfenced.
        for p in in_failing:
            assert cluster.leader_of(TOPIC, p, 20, exclude=(victim,)) is not None, cluster.describe(TOPIC)
        assert cluster.running(victim) and victim in cluster.brokers(victim)
        text = scrape(metrics_ports[victim])
        assert "kafka_log_logmanager_offlinelogdirectorycount 1.0" in text
        assert f'kafka_log_logmanager_logdirectoryoffline{{logdirectory="{failing_dir}"}} 1.0' in text
        # acks=all produce to every partition goes on, those led here before included.
        moved_at = time.monotonic()
        assert wait_until(lambda: all(produced.acked_since(moved_at, p) > 20 for p in range(PARTITIONS)), 30), {
            p: produced.acked_since(moved_at, p) for p in range(PARTITIONS)
        }
        # The other dir keeps serving: the victim's replicas there stay in their ISRs.
        states = cluster.describe(TOPIC)
        for p in in_other:
            assert victim in states[p].isr, states
        for p in in_failing:
            assert victim not in states[p].isr, states
        produced.stop()
        assert not produced.failed, produced.failed[:5]
        seen = read_all(cluster.bootstrap())
        lost = [v for v, p in produced.acked.items() if seen.get(v) != p]
        assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"

        # Writes work again and the broker restarts: the dir is back, recovered, and in sync.
        set_failing(control, [])
        cluster.terminate(victim)
        cluster.restart(victim)
        assert wait_until(lambda: victim in (cluster.brokers(victim) or []), 60)
        for p in range(PARTITIONS):
            assert cluster.wait_for_isr(TOPIC, p, NODE_IDS, 60), cluster.describe(TOPIC)
        assert set(describe_log_dirs(cluster, victim).values()) == {ErrorCode.NONE}
        assert "kafka_log_logmanager_offlinelogdirectorycount 0.0" in scrape(metrics_ports[victim])
        assert time.monotonic() - failed_at < 120
    finally:
        if produced is not None and produced._thread.is_alive():
            produced.stop()
        cluster.stop()
        cluster.save_output()
