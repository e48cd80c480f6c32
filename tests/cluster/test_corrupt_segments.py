"""A leader's closed segment corrupted on disk, with three real nodes
(tests/cluster/replication_harness.py) and an idempotent acks=all producer
writing throughout (broker/replica/corruption.py has the design):

- found by the scrubber: the leader cuts its log before the corrupt batch and
  halts; another in-sync replica leads; the restarted node fetches the rest
  back and rejoins the ISR;
- found by the leader's CRC check of what it sends a follower (scrubber off):
  a follower that was down comes back and fetches the corrupt range; it is
  never sent the corrupt batch, the leader cuts its log and halts, and the
  follower catches up from the new leader.

Either way every acknowledged record is read back once, at its offset, and the
three replicas end with byte-identical batches. A consumer reading a corrupt
batch gets librdkafka's CRC error (check.crcs) and the broker serves on.
"""

from __future__ import annotations

import random
import time

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from protocol.records import BATCH_HEADER_BYTES, iter_batches
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, StreamProducer, check_history, read_partition, wait_until

REPLICA_LAG_TIME_MAX_MS = 2000
SESSION_TIMEOUT_MS = 1800
SCRUB_INTERVAL_MS = 500
# Small segments, so that a few seconds of the stream roll several of them.
SEGMENT_BYTES = 20_000
# The leader halts within a scrubber pass or a follower fetch; a new leader is
# elected after the session timeout; margins for a loaded 2-core machine.
HALT_BOUND_S = 20.0
FAILOVER_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 10.0
REJOIN_BOUND_S = 30.0
STREAM_RATE = 1000


def start_cluster(root, scrub: bool) -> ReplicatedCluster:
    extra = {"log.scrub.interval.ms": str(SCRUB_INTERVAL_MS)}
    if not scrub:
        extra["log.scrub.bytes.per.second"] = "0"
    cluster = ReplicatedCluster(
        root, replica_lag_time_max_ms=REPLICA_LAG_TIME_MAX_MS, session_timeout_ms=SESSION_TIMEOUT_MS, extra=extra
    )
    cluster.start()
    return cluster


def corrupt_closed_segment(cluster: ReplicatedCluster, node: int, topic: str, at_or_after: int, seed: int) -> int:
    """Flip a byte of the last record's value in a batch (seeded) of one of
    ``node``'s closed segments whose base offset is at least ``at_or_after``
    (its records still parse: only the CRC tells); that base offset."""
    rng = random.Random(seed)
    segments = sorted(cluster.partition_dir(node, topic, 0).glob("*.log"))[:-1]
    candidates = []
    for path in segments:
        data = path.read_bytes()
        for position, size, header in iter_batches(data, allow_truncated_tail=True):
            if header.base_offset >= at_or_after and size > BATCH_HEADER_BYTES + 2:
                candidates.append((path, position, size, header.base_offset))
    assert candidates, f"node {node} has no closed segment batch at or after {at_or_after}: {segments}"
    path, position, size, base_offset = rng.choice(candidates[: max(1, len(candidates) // 2)])
    at = position + size - 2  # the batch ends with the last value's byte, then its header count (0)
    with open(path, "r+b") as f:
        f.seek(at)
        original = f.read(1)
        f.seek(at)
        f.write(bytes([original[0] ^ 0x01]))  # another digit: a value that was never sent
    return base_offset


def wait_for_rolls(cluster: ReplicatedCluster, node: int, topic: str, segments: int, bound_s: float = 30.0) -> None:
    assert wait_until(lambda: len(list(cluster.partition_dir(node, topic, 0).glob("*.log"))) >= segments, bound_s), (
        f"node {node} rolled no {segments} segments of {topic} in {bound_s} s"
    )


def finish(cluster: ReplicatedCluster, topic: str, stream: StreamProducer, halted: int) -> None:
    """Heal, stop the stream, and check the promises and the replicas' bytes."""
    cluster.heal()
    assert cluster.wait_for_isr(topic, 0, NODE_IDS, REJOIN_BOUND_S), f"node {halted} did not rejoin the isr: {cluster.partition(topic)}"
    history = stream.stop()
    records = read_partition(cluster.bootstrap(), topic)
    result = check_history(records, history)
    assert result.ok, result.report()
    assert len(history.acked) > 3 * STREAM_RATE, result.report()
    _, high = cluster.watermarks(topic)
    # Nothing is written any more: every replica holds the same batches up to the
    # high watermark and nothing past it (the halted node's cut tail was fetched back).
    identical = wait_until(lambda: cluster.segments_identical(topic, 0, high, quiescent=True)[0], 20)
    assert identical, cluster.segments_identical(topic, 0, high, quiescent=True)[1]


def test_the_scrubber_finds_a_leaders_corrupt_closed_segment_and_the_data_recovers(tmp_path):
    cluster = start_cluster(tmp_path, scrub=True)
    topic = "corrupt-scrubbed"
    try:
        cluster.create_topic(topic, config={"segment.bytes": str(SEGMENT_BYTES)})
        stream = StreamProducer(cluster.bootstrap(), topic, rate=STREAM_RATE).start()
        leader = cluster.leader_of(topic)
        wait_for_rolls(cluster, leader, topic, 4)
        offset = corrupt_closed_segment(cluster, leader, topic, 0, seed=36)
        assert wait_until(lambda: not cluster.running(leader), HALT_BOUND_S), f"node {leader} did not halt:\n{cluster.tail(leader)}"
        output = "".join(cluster.nodes[leader].output)
        assert f"corrupt batch at offset {offset}" in output and f"log cut to {offset}" in output, output[-3000:]
        assert wait_until(lambda: cluster.leader_of(topic, exclude=(leader,), timeout_s=1), FAILOVER_BOUND_S)
        time.sleep(2)  # acknowledged writes under the new leader
        finish(cluster, topic, stream, leader)
    finally:
        cluster.save_output()
        cluster.stop()


def test_a_follower_is_never_sent_the_leaders_corrupt_batch_and_the_data_recovers(tmp_path):
    cluster = start_cluster(tmp_path, scrub=False)
    topic = "corrupt-fetched"
    try:
        cluster.create_topic(topic, config={"segment.bytes": str(SEGMENT_BYTES)})
        stream = StreamProducer(cluster.bootstrap(), topic, rate=STREAM_RATE).start()
        leader = cluster.leader_of(topic)
        behind = next(n for n in NODE_IDS if n != leader)
        wait_for_rolls(cluster, leader, topic, 2)
        cluster.kill(behind)
        behind_end = max((b[1] + 1 for b in cluster.replica_batches(behind, topic, 0)), default=0)
        wait_for_rolls(cluster, leader, topic, 6)
        offset = corrupt_closed_segment(cluster, leader, topic, behind_end, seed=7)
        cluster.restart(behind)  # it fetches from behind_end, through the corrupt batch
        assert wait_until(lambda: not cluster.running(leader), HALT_BOUND_S), f"node {leader} did not halt:\n{cluster.tail(leader)}"
        output = "".join(cluster.nodes[leader].output)
        assert "a read for a follower" in output and f"log cut to {offset}" in output, output[-3000:]
        # The follower never appended the corrupt bytes: it would have refused them.
        assert "failed its checks" not in "".join(cluster.nodes[behind].output)
        assert wait_until(lambda: cluster.leader_of(topic, exclude=(leader,), timeout_s=1), FAILOVER_BOUND_S)
        time.sleep(2)
        finish(cluster, topic, stream, leader)
    finally:
        cluster.save_output()
        cluster.stop()


def test_a_consumer_reading_a_corrupt_batch_gets_librdkafkas_crc_error_and_the_broker_serves_on(tmp_path):
    """Consumer fetches are file slices sent unchecked, as in Kafka: the client
    checks the CRC (librdkafka's check.crcs) and reports the batch; the broker
    neither crashes nor acts (the scrubber is off here, and no follower reads
    the range again)."""
    cluster = start_cluster(tmp_path, scrub=False)
    topic = "corrupt-consumed"
    try:
        cluster.create_topic(topic, config={"segment.bytes": str(SEGMENT_BYTES)})
        stream = StreamProducer(cluster.bootstrap(), topic, rate=STREAM_RATE).start()
        leader = cluster.leader_of(topic)
        wait_for_rolls(cluster, leader, topic, 3)
        history = stream.stop()
        offset = corrupt_closed_segment(cluster, leader, topic, 0, seed=5)
        errors, values = consume_all(cluster, topic, check_crcs=True)
        assert any(code == KafkaError._BAD_MSG for code, _ in errors), errors
        assert all(at != offset for at, _ in values)  # the corrupt batch's records are not delivered
        assert cluster.running(leader) and cluster.leader_of(topic) == leader
        # Without check.crcs librdkafka hands the damaged record over as it is.
        errors, values = consume_all(cluster, topic, check_crcs=False)
        acked = {op.offset: op.value for op in history.acked}
        assert any(acked.get(at) != value for at, value in values), "no damaged record was delivered"
        assert cluster.running(leader)
    finally:
        cluster.save_output()
        cluster.stop()


def consume_all(cluster: ReplicatedCluster, topic: str, *, check_crcs: bool, bound_s: float = 20.0):
    """(errors as (code, text), records as (offset, value)) of a read of the
    whole partition from the leader, until its end or ``bound_s``."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap(),
            "group.id": f"crc-{check_crcs}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "check.crcs": check_crcs,
        }
    )
    errors, values = [], []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is None:
                values.append((message.offset(), message.value().decode(errors="replace")))
            elif message.error().code() == KafkaError._PARTITION_EOF:
                break
            else:
                errors.append((message.error().code(), str(message.error())))
    finally:
        consumer.close()
    return errors, values
