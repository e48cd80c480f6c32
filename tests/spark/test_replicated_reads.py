"""The pybroker data source over replicated partitions: one replica per partition, never past the high watermark.

Planning tests build the log dirs of three brokers with ``PartitionLog``
(byte-identical batches appended as a follower does) and
``replication-offset-checkpoint`` files, and look at the planned pieces
without running Spark. One test runs three combined nodes as processes, kills
a partition's leader between acknowledged writes and reads the three log dirs
with Spark.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from protocol.records import build_batch
from spark_jobs import segment_reader
from spark_jobs.datasource import PybrokerReader
from storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT, write_offsets
from storage.log import LogConfig, PartitionLog
from tests.cluster.test_quorum_processes import free_ports, start_together
from tests.conftest import BrokerProcess

TOPIC = "orders"
SEGMENT_BYTES = 700  # a few batches per segment
T0_MS = 1_700_000_000_000


def batch(first: int, count: int, leader_epoch: int, tag: str = "") -> bytes:
    records = [(b"k%d" % o, f"v{o}{tag}".encode(), [], T0_MS + o) for o in range(first, first + count)]
    return build_batch(records, base_offset=first, partition_leader_epoch=leader_epoch)


def replica(log_dir: Path, batches: list[bytes], partition: int = 0) -> Path:
    """A partition directory holding ``batches`` exactly as given (as a follower appends)."""
    plog = PartitionLog(log_dir / f"{TOPIC}-{partition}", LogConfig(segment_bytes=SEGMENT_BYTES))
    for data in batches:
        plog.append_as_follower(data)
    plog.close()
    return plog.directory


def checkpoint(log_dir: Path, high_watermarks: dict[tuple[str, int], int]) -> None:
    write_offsets(log_dir / REPLICATION_OFFSET_CHECKPOINT, high_watermarks)


def plan(log_dirs, **options) -> list[segment_reader.SegmentPiece]:
    """The pieces the data source plans, in offset order."""
    reader = PybrokerReader(
        {"path": ",".join(str(d) for d in log_dirs), "subscribe": TOPIC, **{k.lower(): v for k, v in options.items()}}
    )
    pieces = [piece for partition in reader.partitions() for piece in partition.pieces]
    return sorted(pieces, key=lambda piece: (piece.partition, piece.start))


def planned_values(pieces) -> list[bytes]:
    return [value for piece in pieces for value in segment_reader.read_piece(piece).value]


def replica_of(pieces) -> set[Path]:
    return {Path(piece.log_path).parent.parent for piece in pieces}


COMMITTED = [batch(0, 10, 0), batch(10, 10, 0), batch(20, 10, 0)]


@pytest.fixture
def brokers(tmp_path) -> list[Path]:
    """Log dirs of three brokers: b1 led epoch 0 and now leads epoch 1 (10 more
    records, 5 of them committed); b2 is a follower that has everything up to 30;
    b3 led epoch 0 before, and was cut off with 20 records no one else got."""
    b1, b2, b3 = (tmp_path / name for name in ("b1", "b2", "b3"))
    replica(b1, [*COMMITTED, batch(30, 10, 1)])
    replica(b2, COMMITTED)
    replica(b3, [*COMMITTED, batch(30, 20, 0, tag="-lost")])
    checkpoint(b1, {(TOPIC, 0): 35})
    checkpoint(b2, {(TOPIC, 0): 30})
    checkpoint(b3, {(TOPIC, 0): 30})
    return [b1, b2, b3]


def test_one_replica_is_read_up_to_the_largest_checkpointed_high_watermark(brokers):
    b1, b2, b3 = brokers
    pieces = plan(brokers)
    assert replica_of(pieces) == {b1}
    assert (pieces[0].start, pieces[-1].end) == (0, 35)
    # b3 reaches furthest (50), but with a tail of epoch 0 that epoch 1 replaced.
    assert planned_values(pieces) == [b"v%d" % o for o in range(35)]
    everything_on_disk = plan(brokers, highWatermark="log")
    assert replica_of(everything_on_disk) == {b1} and everything_on_disk[-1].end == 40
    # Without the leader's log dir: its checkpoint is gone too, and of the two
    # replicas on epoch 0 the one reaching furthest is read, only up to 30.
    pieces = plan([b2, b3])
    assert replica_of(pieces) == {b3} and pieces[-1].end == 30
    assert planned_values(pieces) == [b"v%d" % o for o in range(30)]


def test_an_ending_offset_past_the_high_watermark_ends_there(brokers):
    pieces = plan(brokers, endingOffsets='{"orders":{"0":38}}')
    assert pieces[-1].end == 35
    pieces = plan(brokers, startingOffsets='{"orders":{"0":12}}', endingOffsets='{"orders":{"0":33}}')
    assert (pieces[0].start, pieces[-1].end) == (12, 33)


def test_a_start_only_an_older_replica_still_holds_is_read_from_it(tmp_path):
    b1, b2 = tmp_path / "b1", tmp_path / "b2"
    leader = replica(b1, [*COMMITTED, batch(30, 10, 1)])
    replica(b2, COMMITTED)
    oldest = min(leader.glob("*.log"))
    first_kept = int(min(p for p in leader.glob("*.log") if p != oldest).stem)
    for path in leader.glob(f"{oldest.stem}.*"):
        path.unlink()  # as retention would, on the leader only
    checkpoint(b1, {(TOPIC, 0): 40})
    assert first_kept > 2
    # "earliest" is the preferred replica's (b1): it starts later, reaches further.
    pieces = plan([b1, b2])
    assert replica_of(pieces) == {b1} and (pieces[0].start, pieces[-1].end) == (first_kept, 40)
    # Offset 2 is only in b2, which is read then, up to its own end.
    pieces = plan([b1, b2], startingOffsets='{"orders":{"0":2}}')
    assert replica_of(pieces) == {b2} and (pieces[0].start, pieces[-1].end) == (2, 30)
    assert planned_values(pieces) == [b"v%d" % o for o in range(2, 30)]


def test_without_a_checkpoint_naming_the_partition_the_whole_log_is_read(tmp_path):
    """A single broker that has not checkpointed yet: its log has one replica, all committed."""
    single = tmp_path / "single"
    replica(single, [*COMMITTED, batch(30, 10, 0)])
    assert plan([single])[-1].end == 40
    checkpoint(single, {("other", 0): 3})
    assert plan([single])[-1].end == 40
    checkpoint(single, {(TOPIC, 0): 25})
    assert plan([single])[-1].end == 25
    assert plan([single], highWatermark="log")[-1].end == 40


def test_partitions_are_planned_each_from_its_own_replica(tmp_path):
    b1, b2 = tmp_path / "b1", tmp_path / "b2"
    replica(b1, COMMITTED, partition=0)
    replica(b2, [*COMMITTED, batch(30, 5, 1)], partition=0)
    replica(b1, [*COMMITTED, batch(30, 5, 1)], partition=1)
    replica(b2, COMMITTED, partition=1)
    checkpoint(b1, {(TOPIC, 0): 30, (TOPIC, 1): 35})
    checkpoint(b2, {(TOPIC, 0): 32, (TOPIC, 1): 30})
    pieces = plan([b1, b2])
    by_partition = {p: [piece for piece in pieces if piece.partition == p] for p in (0, 1)}
    assert replica_of(by_partition[0]) == {b2} and by_partition[0][-1].end == 32
    assert replica_of(by_partition[1]) == {b1} and by_partition[1][-1].end == 35


def test_high_watermark_options_are_checked(brokers):
    path = ",".join(str(d) for d in brokers)
    with pytest.raises(ValueError, match="highWatermark must be one of checkpoint, bootstrap, log"):
        PybrokerReader({"path": path, "subscribe": TOPIC, "highwatermark": "leader"})
    with pytest.raises(ValueError, match="needs the option kafka.bootstrap.servers"):
        PybrokerReader({"path": path, "subscribe": TOPIC, "highwatermark": "bootstrap"})
    with pytest.raises(ValueError, match="kafka.bootstrap.servers"):
        PybrokerReader({"path": path, "subscribe": TOPIC, "kafka.bootstrap.servers": "no-port"})
    (brokers[0] / REPLICATION_OFFSET_CHECKPOINT).write_text("0\n5\norders 0 1\n")  # torn: 1 entry of 5
    with pytest.raises(ValueError, match="cannot read the high watermarks"):
        plan(brokers)


def test_bootstrap_servers_that_do_not_answer_fail_within_the_api_timeout(brokers):
    from spark_jobs.kafka_offsets import HighWatermarkError

    (port,) = free_ports(1)  # nothing listens there
    started = time.monotonic()
    with pytest.raises(HighWatermarkError, match="no high watermark within 500 ms for orders-0"):
        plan(brokers, **{"kafka.bootstrap.servers": f"127.0.0.1:{port}", "kafka.default.api.timeout.ms": "500"})
    assert time.monotonic() - started < 5
    # highWatermark=checkpoint ignores the servers
    assert plan(brokers, highWatermark="checkpoint", **{"kafka.bootstrap.servers": f"127.0.0.1:{port}"})[-1].end == 35


# --------------------------------------------------------------------------- a real cluster

CLUSTER_ID = "c3BhcmstcmVwbGljYXRlZA"
# Long enough for a job to run while a follower is stopped, short for the failover after the kill.
SESSION_TIMEOUT_MS = 4000
WAIT_S = 60
RECORDS_BEFORE_KILL = 300
RECORDS_AFTER_KILL = 200
RECORDS_PENDING = 50


class ThreeNodes:
    """Three combined nodes (controller + broker each) as processes."""

    def __init__(self, root: Path):
        controller_ports = dict(zip((1, 2, 3), free_ports(3)))
        voters = ",".join(f"{node}@127.0.0.1:{port}" for node, port in controller_ports.items())
        self.nodes: dict[int, BrokerProcess] = {}
        for node, port in controller_ports.items():
            data_dir = root / f"node{node}"
            data_dir.mkdir()
            self.nodes[node] = BrokerProcess(
                data_dir,
                {
                    "node.id": str(node),
                    "cluster.id": CLUSTER_ID,
                    "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}",
                    "controller.listener.names": "CONTROLLER",
                    "controller.quorum.voters": voters,
                    "controller.quorum.election.timeout.ms": "500",
                    "controller.quorum.fetch.timeout.ms": "1000",
                    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                    "broker.heartbeat.interval.ms": "200",
                    "offsets.topic.replication.factor": "1",
                    # The follower stopped below must stay in the ISR while the job reads.
                    "replica.lag.time.max.ms": "60000",
                },
            )
        start_together(list(self.nodes.values()))

    def log_dirs(self) -> list[Path]:
        return [process.data_dir / "logs" for process in self.nodes.values()]

    def bootstrap(self, nodes) -> str:
        return ",".join(self.nodes[node].bootstrap for node in nodes)

    def stop(self) -> None:
        # SIGKILL: nothing is checked after the test, and a controlled shutdown
        # of each node in turn costs seconds.
        for process in self.nodes.values():
            process.stop(signal.SIGKILL)


def wait_for(predicate, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = predicate()
        except Exception:  # a node being killed or electing: ask again
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def three_nodes(tmp_path):
    cluster = ThreeNodes(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_after_a_leader_kill_a_job_reads_exactly_the_acknowledged_records(spark, three_nodes):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "replicated"
    admin = AdminClient({"bootstrap.servers": three_nodes.bootstrap([1, 2, 3])})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(WAIT_S)

    def partition(client):
        metadata = client.list_topics(topic, timeout=5).topics[topic]
        return None if metadata.error is not None else metadata.partitions.get(0)

    first = wait_for(lambda: (p := partition(admin)) is not None and len(p.isrs) == 3 and p, "an ISR of three")
    acknowledged: list[bytes] = []
    errors = []

    def delivered(error, message):
        if error is None:
            acknowledged.append(message.value())
        else:
            errors.append(error)

    def produce(client, values) -> None:
        for value in values:
            client.produce(topic, value, partition=0, on_delivery=delivered)
            client.poll(0)
        assert client.flush(WAIT_S) == 0, "records still unacknowledged"
        assert not errors, errors

    producer = Producer(
        {
            "bootstrap.servers": three_nodes.bootstrap([1, 2, 3]),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.num.messages": 25,
            "message.timeout.ms": WAIT_S * 1000,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    produce(producer, [b"before-%d" % i for i in range(RECORDS_BEFORE_KILL)])

    three_nodes.nodes[first.leader].stop(signal.SIGKILL)
    survivors = [node for node in three_nodes.nodes if node != first.leader]
    live_admin = AdminClient({"bootstrap.servers": three_nodes.bootstrap(survivors)})
    leader = wait_for(
        lambda: (p := partition(live_admin)) is not None and p.leader in survivors and p.leader, "a new leader"
    )
    produce(producer, [b"after-%d" % i for i in range(RECORDS_AFTER_KILL)])
    assert len(acknowledged) == RECORDS_BEFORE_KILL + RECORDS_AFTER_KILL

    def read(**options) -> list[tuple[int, bytes]]:
        reader = spark.read.format("pybroker").option("path", ",".join(map(str, three_nodes.log_dirs())))
        for key, value in {"subscribe": topic, **options}.items():
            reader = reader.option(key, value)
        return [(row.offset, row.value) for row in reader.load().orderBy("offset").collect()]

    bootstrap = three_nodes.bootstrap([leader, *(node for node in survivors if node != leader)])
    rows = read(**{"kafka.bootstrap.servers": bootstrap})
    offsets = [offset for offset, _ in rows]
    assert len(set(offsets)) == len(offsets), "an offset read twice"
    assert [value for _, value in rows] == acknowledged  # each once, in the order they were sent
    # Offline, from the checkpoints (which lag): a prefix of the same records.
    offline = [value for _, value in read()]
    assert offline == acknowledged[: len(offline)]

    # The last follower stops fetching: the leader appends what it is sent but
    # cannot commit it, so its log ends in records no one was told about. The
    # read must be over before the follower misses its session and is fenced
    # (the ISR would shrink to the leader alone, and commit them).
    follower = next(node for node in survivors if node != leader)
    leader_log = segment_reader.find_partitions([three_nodes.nodes[leader].data_dir / "logs"])[(topic, 0)]
    three_nodes.nodes[follower].process.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        for i in range(RECORDS_PENDING):
            producer.produce(topic, b"pending-%d" % i, partition=0, on_delivery=delivered)
        producer.poll(0)
        wait_for(lambda: segment_reader.latest_offset(leader_log) > len(acknowledged), "uncommitted records", 2)
        rows = read(**{"kafka.bootstrap.servers": bootstrap})  # the leader first: the follower does not answer
        stopped_s = time.monotonic() - stopped_at
    finally:
        three_nodes.nodes[follower].process.send_signal(signal.SIGCONT)
    assert stopped_s < SESSION_TIMEOUT_MS / 1000, f"the follower was stopped {stopped_s:.1f} s: maybe fenced"
    assert [value for _, value in rows] == acknowledged
    # Back in step, the follower lets the leader commit and acknowledge the rest.
    assert producer.flush(WAIT_S) == 0 and not errors, errors
    assert len(acknowledged) == RECORDS_BEFORE_KILL + RECORDS_AFTER_KILL + RECORDS_PENDING
    assert [value for _, value in read(**{"kafka.bootstrap.servers": bootstrap})] == acknowledged
