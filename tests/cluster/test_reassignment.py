"""A partition reassignment as real processes, under load.

Three combined nodes (1, 2, 3) and a fourth, broker-only process (node 4).
Topic RF=3 on replicas [1, 2, 3] (leader 1); an idempotent acks=all producer
runs throughout while ``pybroker reassign --execute`` (sent to node 4, which
forwards it to the active controller) moves the partition to [2, 3, 4]:
node 4 copies the log as a follower, joins the ISR, the move completes (the
leadership leaves node 1), and node 1 deletes its copy. Afterwards every
acknowledged record must be read back exactly once, at its offset, in order,
and the three new replicas must hold the same batches.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

from tests.cluster.replication_harness import (  # noqa: E402
    NODE_IDS,
    ReplicatedCluster,
    StreamProducer,
    check_history,
    read_partition,
    wait_until,
)
from tests.conftest import PROJECT_ROOT, BrokerProcess  # noqa: E402

NEW_BROKER = 4
TARGET = (2, 3, NEW_BROKER)
MOVE_BOUND_S = 90
THROTTLE_BYTES_PER_S = 2_000_000
SETTLE_BOUND_S = 30
PRODUCE_RATE = 500  # records/s: load without starving four processes on a small machine


def start_broker_only(cluster: ReplicatedCluster, root) -> BrokerProcess:
    """Node 4: a broker of the same cluster that is not a controller voter."""
    overrides = dict(cluster.overrides[1])
    overrides.update(
        {
            "node.id": str(NEW_BROKER),
            "process.roles": "broker",
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "broker.rack": f"rack-{NEW_BROKER}",
        }
    )
    data_dir = root / f"node{NEW_BROKER}"
    data_dir.mkdir(parents=True, exist_ok=True)
    return BrokerProcess(data_dir, overrides).start()


def reassign(bootstrap: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "reassign", "--bootstrap-server", bootstrap, *args],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=90,
        check=False,
    )


def test_moving_a_partition_to_a_new_broker_under_load(tmp_path):
    cluster = ReplicatedCluster(tmp_path)
    node4: BrokerProcess | None = None
    stream: StreamProducer | None = None
    try:
        cluster.start()
        node4 = start_broker_only(cluster, tmp_path)
        everyone = [*NODE_IDS, NEW_BROKER]
        listed = wait_until(lambda: all(cluster.brokers(n) == everyone for n in NODE_IDS), SETTLE_BOUND_S)
        assert listed, {n: cluster.brokers(n) for n in NODE_IDS}

        topic = "moving"
        admin = cluster.admin()
        for future in admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]])], request_timeout=20).values():
            future.result(timeout=30)
        state = cluster.wait_for_isr(topic, 0, (1, 2, 3), SETTLE_BOUND_S)
        assert state is not None and (state.leader, state.replicas) == (1, (1, 2, 3)), state

        stream = StreamProducer(cluster.bootstrap(), topic, rate=PRODUCE_RATE).start()
        # Enough data that node 4 copies while the producer keeps appending.
        assert wait_until(lambda: len(stream.history.acked) >= 1000, SETTLE_BOUND_S), stream.history.summary()

        move = tmp_path / "move.json"
        move.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": list(TARGET)}]}))
        # Throttled (Kafka's way: leader and follower throttles on the moved
        # replicas), at a rate that still lets the move finish in the bound.
        executed = reassign(node4.bootstrap, "--execute", "--throttle", str(THROTTLE_BYTES_PER_S), "--reassignment-json-file", str(move))
        assert executed.returncode == 0, executed.stdout + executed.stderr
        lines = executed.stdout.splitlines()
        assert json.loads(lines[2])["partitions"] == [{"topic": topic, "partition": 0, "replicas": [1, 2, 3], "log_dirs": ["any"] * 3}]
        assert lines[-1] == f"Successfully started partition reassignments for {topic}-0"
        started_t = stream.history.mark("reassignment started")

        def completed():
            verified = reassign(node4.bootstrap, "--verify", str(move))
            if verified.returncode != 0:
                return None
            state = cluster.partition(topic, 0)
            if state is None or state.replicas != TARGET or state.isr != tuple(sorted(TARGET)) or state.leader not in TARGET:
                return None
            return verified

        verified = wait_until(completed, MOVE_BOUND_S, interval_s=0.5)
        assert verified is not None, f"not moved in {MOVE_BOUND_S} s: {cluster.partition(topic, 0)}\n" + cluster.tail(1) + node4.log_text()[-3000:]
        assert verified.stdout.splitlines()[-3:] == [
            f"Reassignment of partition {topic}-0 is completed.",
            "Clearing broker-level throttles",
            "Clearing topic-level throttles",
        ]
        done_t = stream.history.mark("reassignment completed")
        # Every node, node 4 included, sees the move completed.
        for via in NODE_IDS:
            assert wait_until(lambda via=via: (s := cluster.partition(topic, 0, via)) is not None and s.replicas == TARGET, SETTLE_BOUND_S)

        # Node 1 is no replica any more: its copy goes.
        old_copy = cluster.partition_dir(1, topic, 0)
        assert wait_until(lambda: not old_copy.exists(), SETTLE_BOUND_S), f"{old_copy} still exists"
        # Nothing is left running.
        cancelled = reassign(cluster.nodes[2].bootstrap, "--cancel", str(move))
        assert (cancelled.returncode, cancelled.stdout.strip()) == (0, "None of the specified partition reassignments are active.")

        # Keep producing to the new replicas for a while, then stop.
        acked_at_completion = len(stream.history.acked)
        assert wait_until(lambda: len(stream.history.acked) >= acked_at_completion + 200, SETTLE_BOUND_S), stream.history.summary()
        history = stream.stop()
        stream = None
        assert not history.fatal_errors(), history.summary()
        assert history.acked_between(started_t, done_t) or history.acked_between(done_t, time.monotonic()), history.summary()

        bootstrap = cluster.bootstrap() + "," + node4.bootstrap
        records = read_partition(bootstrap, topic, 0)
        result = check_history(records, history)
        assert result.ok, result.report() + "; " + history.summary()
        assert result.acked == len(history.acked) > 0
        assert not history.indeterminate, history.summary()

        # The new replica holds the leader's bytes: compare node 4's batches with node 2's.
        _, high_watermark = cluster.watermarks(topic, 0)
        reference = [b for b in cluster.replica_batches(2, topic, 0) if b[0] < high_watermark]
        cluster.nodes[NEW_BROKER] = node4  # replica_batches looks nodes up by id
        try:
            copied = [b for b in cluster.replica_batches(NEW_BROKER, topic, 0) if b[0] < high_watermark]
        finally:
            del cluster.nodes[NEW_BROKER]
        assert copied == reference, f"node 4 holds {len(copied)} batches below {high_watermark}, node 2 {len(reference)}"
    finally:
        if stream is not None:
            stream.stop(drain_s=5)
        if node4 is not None:
            node4.stop()
            (tmp_path / f"node{NEW_BROKER}.out").write_text(node4.log_text())
        cluster.save_output()
        cluster.stop()


def test_an_acks_all_produce_waiting_through_a_replica_removal_completes(tmp_path):
    """Found wiring the balancer: a reassignment that removes a replica bumps the
    leader epoch without moving the leader, and acks=all produces waiting on the
    leader then ended with NOT_LEADER_OR_FOLLOWER (librdkafka reported records
    acknowledged without an offset). As in Kafka, they go on waiting under the
    new epoch and succeed once the new ISR has them."""
    # A paused follower stays in the ISR (and registered) for the whole test, so
    # the produce waits for it until the reassignment removes it.
    cluster = ReplicatedCluster(tmp_path, replica_lag_time_max_ms=60_000, session_timeout_ms=60_000)
    producer = None
    try:
        cluster.start()
        topic = "shrinking"
        admin = cluster.admin()
        for future in admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]])], request_timeout=20).values():
            future.result(timeout=30)
        state = cluster.wait_for_isr(topic, 0, (1, 2, 3), SETTLE_BOUND_S, everywhere=True)
        assert state is not None, cluster.partition(topic, 0)
        leader = state.leader
        controller = cluster.active_controller()
        assert controller is not None
        # Not the metadata quorum's leader: the quorum goes on as it was.
        lagging = next(n for n in reversed(NODE_IDS) if n not in (leader, controller))
        kept = [leader, *(n for n in NODE_IDS if n not in (leader, lagging))]

        # No retries: the broker's first answer is the one reported.
        producer = Producer({
            "bootstrap.servers": cluster.bootstrap([leader]), "acks": "all", "enable.idempotence": False,
            "retries": 0, "linger.ms": 0, "request.timeout.ms": 60_000, "message.timeout.ms": 60_000,
        })  # fmt: skip
        outcomes = []

        def report(error, message):
            outcomes.append((error, message.offset()))

        # Without retries a first answer may still be an error (the client's
        # metadata is newer than the leader's, say): the first record is sent
        # until one is acknowledged.
        deadline = time.monotonic() + SETTLE_BOUND_S
        while True:
            outcomes.clear()
            producer.produce(topic, b"before", partition=0, on_delivery=report)
            assert producer.flush(10) == 0, outcomes
            if outcomes[-1][0] is None or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert len(outcomes) == 1 and outcomes[0][0] is None, outcomes
        cluster.pause(lagging)
        producer.produce(topic, b"waiting", partition=0, on_delivery=report)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            producer.poll(0.1)
        assert len(outcomes) == 1, f"answered while a replica of the ISR was stopped: {outcomes}"

        move = tmp_path / "shrink.json"
        move.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": kept}]}))
        executed = reassign(cluster.bootstrap(kept), "--execute", "--reassignment-json-file", str(move))
        assert executed.returncode == 0, executed.stdout + executed.stderr
        deadline = time.monotonic() + SETTLE_BOUND_S
        while len(outcomes) < 2 and time.monotonic() < deadline:
            producer.poll(0.1)
        shrunk = cluster.partition(topic, 0, via=leader)
        assert shrunk is not None and shrunk.replicas == tuple(kept) and shrunk.leader == leader, shrunk
        assert shrunk.leader_epoch > state.leader_epoch, (state, shrunk)  # the case in question
        assert len(outcomes) == 2, "the waiting produce was not answered"
        # Answered once, at the next offset: an error answer made the client send
        # the record again (a second copy, one offset further on).
        error, offset = outcomes[1]
        assert error is None and offset == outcomes[0][1] + 1, outcomes
    finally:
        if producer is not None:
            producer.flush(0)
        cluster.save_output()
        cluster.stop()
