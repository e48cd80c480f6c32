"""ISR replication between three real nodes, checked as Kafka promises it.

One cluster of three combined nodes (tests/cluster/replication_harness.py)
serves the whole module; every test starts from three running, unfenced
nodes (``healthy`` heals what the previous test left) and uses its own topic.
Topics have RF=3 and min.insync.replicas=2. What is checked:

- an RF=3 topic has three replicas and an ISR of three, and every replica
  serves what an acks=all producer wrote (KIP-392 reads from each rack);
- SIGKILL of the leader in the middle of a stream: every acknowledged record
  is read back once, at its acknowledged offset, in order; the restarted node
  rejoins the ISR and the replicas' batches are byte-identical below the HW;
- SIGSTOP of one follower shrinks the ISR and acks=all goes on; of both,
  nothing new is acknowledged; SIGCONT brings them back into the ISR;
- kafka-python and aiokafka produce acks=all and consume across a leader SIGKILL.

Bounds are derived from the cluster's timings (see the constants below).
"""

from __future__ import annotations

import asyncio
import signal
import struct
import threading
import time
import uuid

import pytest

pytest.importorskip("confluent_kafka")

from tests.cluster.replication_harness import (
    NODE_IDS,
    History,
    Op,
    ReplicatedCluster,
    StreamProducer,
    check_history,
    produce_batch,
    read_partition,
    wait_until,
)

REPLICA_LAG_TIME_MAX_MS = 2000
SESSION_TIMEOUT_MS = 1800
# A fenced leader is replaced within: a new active controller if the dead node
# was it (fetch timeout + up to two election timeouts), which grants every
# broker a fresh session, then a session timeout; plus a margin for a loaded
# 2-core machine.
FAILOVER_BOUND_S = (
    ReplicatedCluster.FETCH_TIMEOUT_MS + 2 * ReplicatedCluster.ELECTION_TIMEOUT_MS + SESSION_TIMEOUT_MS
) / 1000 + 4.0
# A follower that stops fetching leaves the ISR after replica.lag.time.max.ms
# (or sooner, when fenced after the session timeout); the margin covers the
# leader's periodic check, AlterPartition's commit and metadata propagation.
ISR_SHRINK_BOUND_S = REPLICA_LAG_TIME_MAX_MS / 1000 + 4.0
# A restarted node (already unfenced when its start line appears) catches up
# and is added back by the leader's AlterPartition.
REJOIN_BOUND_S = 15.0
CONTROLLED_SHUTDOWN_BOUND_S = 10.0
STREAM_RATE = 2500  # msg/s: "a few thousand" on a 2-core machine running three brokers
# A stream is "flowing" once this many records are acknowledged, waited for at most this long.
STREAM_FLOWING_ACKS = 1000
STREAM_FLOWING_BOUND_S = 15.0
NOT_ENOUGH_REPLICAS_ERRORS = {"NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND"}
TIMEOUT_ERRORS = {"_MSG_TIMED_OUT", "_TIMED_OUT", "REQUEST_TIMED_OUT"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = ReplicatedCluster(
        tmp_path_factory.mktemp("replication"),
        replica_lag_time_max_ms=REPLICA_LAG_TIME_MAX_MS,
        session_timeout_ms=SESSION_TIMEOUT_MS,
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        cluster.save_output()  # every node's output, under the module's tmp dir


@pytest.fixture
def healthy(cluster):
    """Three running, unfenced nodes, whatever the previous test left."""
    cluster.heal()
    return cluster


def new_topic(cluster: ReplicatedCluster, stem: str) -> str:
    """An RF=3 topic known to every node with a leader and a full ISR."""
    topic = f"{stem}-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic)
    state = cluster.wait_for_isr(topic, 0, NODE_IDS, 15, everywhere=True)
    assert state is not None, f"{topic}: ISR never {NODE_IDS} on every node: {[cluster.partition(topic, 0, n) for n in NODE_IDS]}"
    assert state.leader in NODE_IDS
    return topic


def assert_history_ok(cluster: ReplicatedCluster, topic: str, *histories: History, bootstrap: str | None = None, client_rack=None):
    records = read_partition(bootstrap or cluster.bootstrap(), topic, timeout_s=30, client_rack=client_rack)
    result = check_history(records, *histories)
    assert result.ok, result.report() + " | " + " | ".join(h.summary() for h in histories)
    return result


def assert_replicas_identical(cluster: ReplicatedCluster, topic: str, timeout_s: float = 10.0) -> int:
    """With no producer running and a full ISR: the replicas' batches are the
    same bytes below the high watermark and nothing lies past it; the HW."""
    last = {}

    def compare():
        _, hw = cluster.watermarks(topic)
        last["hw"], (ok, last["detail"]) = hw, cluster.segments_identical(topic, 0, hw, quiescent=True)
        return ok

    assert wait_until(compare, timeout_s, interval_s=0.5), f"high watermark {last.get('hw')}: {last.get('detail')}"
    return last["hw"]


@pytest.mark.timeout(10)
def test_the_checker_and_the_segment_comparison_see_violations(tmp_path):
    """The checks the process tests rely on fail on the anomalies they claim to find."""
    history = History()
    for n in range(6):
        op = Op(n, f"v-{n}", float(n))
        if n < 5:
            op.outcome, op.offset, op.complete_t, op.ack_seq = "ok", n, float(n), n
        history.ops.append(op)
    assert check_history([(i, f"v-{i}") for i in range(6)], history).ok  # v-5 unacknowledged: may appear
    assert check_history([(i, f"v-{i}") for i in range(5)], history).ok
    lost = check_history([(0, "v-0"), (1, "v-1"), (2, "v-3"), (3, "v-4")], history)
    assert "v-2" in lost.lost and not lost.ok
    assert check_history([(i, f"v-{i}") for i in range(5)] + [(5, "v-4")], history).duplicated == {"v-4": 2}
    swapped = check_history([(0, "v-0"), (1, "v-2"), (2, "v-1"), (3, "v-3"), (4, "v-4")], history)
    assert swapped.reordered and swapped.moved and not swapped.ok
    assert check_history([(i, f"v-{i}") for i in range(5)] + [(5, "x-1")], history).phantom == ["x-1"]

    # Three fake replicas of one partition: equal, then one byte different, then a short one.
    def batch(base: int, records: int, payload: bytes) -> bytes:
        body = bytearray(49 + len(payload))
        struct.pack_into(">i", body, 0, 0)  # partition leader epoch
        body[4] = 2  # magic
        struct.pack_into(">i", body, 11, records - 1)  # last offset delta
        body[49:] = payload
        return struct.pack(">qi", base, len(body)) + bytes(body)

    segment = batch(0, 2, b"ab") + batch(2, 3, b"cde") + batch(5, 1, b"f")
    fake = ReplicatedCluster.__new__(ReplicatedCluster)
    fake.nodes = {}
    for node, data in ((1, segment), (2, segment), (3, segment)):
        directory = tmp_path / f"n{node}" / "t-0"
        directory.mkdir(parents=True)
        (directory / "00000000000000000000.log").write_bytes(data)
        fake.nodes[node] = type("P", (), {"overrides": {"log.dirs": str(tmp_path / f"n{node}")}})()
    assert fake.segments_identical("t", 0, 6, quiescent=True)[0]
    (tmp_path / "n3" / "t-0" / "00000000000000000000.log").write_bytes(segment[:-1] + b"g")
    assert fake.segments_identical("t", 0, 5)[0] and not fake.segments_identical("t", 0, 6)[0]
    assert not fake.segments_identical("t", 0, 5, quiescent=True)[0]  # every node holds a batch past the HW
    (tmp_path / "n2" / "t-0" / "00000000000000000000.log").write_bytes(segment[: len(batch(0, 2, b"ab"))])
    ok, detail = fake.segments_identical("t", 0, 5)
    assert not ok and "node 2 holds offsets up to 2" in detail


@pytest.mark.timeout(90)
def test_rf3_topic_has_three_in_sync_replicas_and_every_replica_serves_the_data(healthy):
    cluster = healthy
    topic = f"rf3-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, replication_factor=3)
    # Every node's Metadata: three replicas, a leader among them, and (followers
    # having caught up with an empty log) an ISR of all three.
    state = cluster.wait_for_isr(topic, 0, NODE_IDS, 15, everywhere=True)
    views = {n: cluster.partition(topic, 0, n) for n in NODE_IDS}
    assert state is not None, f"ISR never {NODE_IDS} on every node: {views}"
    for node, view in views.items():
        assert sorted(view.replicas) == list(NODE_IDS), f"node {node}: {view}"
        assert view.leader in view.replicas and view.leader_epoch >= 0, f"node {node}: {view}"
    # A real admin client sees the same (DescribeTopicPartitions or Metadata).
    leader, replicas, isr = cluster.describe_admin(topic)[0]
    assert (leader, sorted(replicas), isr) == (state.leader, list(NODE_IDS), NODE_IDS)

    history = produce_batch(cluster.bootstrap(), topic, 500, prefix="rf3")
    assert len(history.acked) == 500, history.summary()
    # acks=all returned only once the ISR had the records: still three in sync.
    assert cluster.wait_for_isr(topic, 0, NODE_IDS, 5) is not None, cluster.partition(topic, 0)
    # Bootstrapped at each broker alone, naming its rack: the consumer is sent to
    # that broker's replica (KIP-392), so each replica must serve every record.
    for node in NODE_IDS:
        served_by: set[int] = set()
        records = read_partition(cluster.bootstrap([node]), topic, timeout_s=30, client_rack=f"rack-{node}", served_by=served_by)
        result = check_history(records, history)
        assert result.ok and result.read == 500, f"node {node}: {result.report()}"
        assert served_by == {node}, f"a consumer in rack-{node} fetched from {served_by}, not from node {node}'s replica"
    assert assert_replicas_identical(cluster, topic) == 500


def acked_after(stream, since: float, count: int, bound_s: float) -> bool:
    """Whether ``count`` records invoked after ``since`` (monotonic s) are acknowledged
    within ``bound_s``: a wait on the stream's progress rather than a guessed sleep,
    which a loaded machine outlasts."""
    return wait_until(lambda: sum(op.invoke_t > since for op in stream.history.acked) >= count, bound_s)


@pytest.mark.timeout(120)
def test_sigkill_of_the_leader_mid_stream_loses_no_acknowledged_record(healthy):
    cluster = healthy
    topic = new_topic(cluster, "kill-leader")
    before = cluster.partition(topic, 0)
    leader = before.leader

    stream = StreamProducer(cluster.bootstrap(), topic, rate=STREAM_RATE, prefix="k").start()
    assert acked_after(stream, 0.0, STREAM_FLOWING_ACKS, STREAM_FLOWING_BOUND_S), stream.history.summary()
    killed_at = stream.history.mark("kill")
    cluster.kill(leader)
    # A new leader from the ISR, at a higher leader epoch, within the bound.
    new_leader = cluster.leader_of(topic, 0, FAILOVER_BOUND_S, exclude={leader})
    failover_s = time.monotonic() - killed_at
    # Keep producing until the new leader has acknowledged a good many records
    # invoked after the kill (the client must first learn of the new leader).
    acked_after(stream, killed_at, STREAM_FLOWING_ACKS, FAILOVER_BOUND_S + STREAM_FLOWING_BOUND_S)
    history = stream.stop()
    assert new_leader is not None, f"no new leader within {FAILOVER_BOUND_S} s: {cluster.describe(topic)}"
    after = cluster.partition(topic, 0)
    assert new_leader in before.isr and after.leader_epoch > before.leader_epoch, (before, after)

    # The stream carried on across the failover: records invoked after the kill were acknowledged.
    assert any(op.invoke_t > killed_at for op in history.acked), history.summary()
    # Every acknowledged record, once, at its offset, in order, from the new leader.
    assert_history_ok(cluster, topic, history)
    # A leader change within message.timeout.ms is retriable: nothing fails.
    assert not history.failed and not history.indeterminate and not history.fatal_errors(), history.summary()
    print(f"kill: new leader {new_leader} after {failover_s:.2f} s; {history.summary()}")

    # The killed node comes back, truncates whatever was not committed, catches up, rejoins.
    cluster.restart(leader)
    restarted_at = time.monotonic()
    rejoined = cluster.wait_for_isr(topic, 0, NODE_IDS, REJOIN_BOUND_S)
    assert rejoined is not None, f"node {leader} not back in the ISR within {REJOIN_BOUND_S} s: {cluster.partition(topic, 0)}"
    print(f"kill: node {leader} back in the ISR {time.monotonic() - restarted_at:.2f} s after its restart")
    # Below the HW the replicas hold the same bytes, and the restarted node kept
    # nothing of what it had appended but never committed.
    assert assert_replicas_identical(cluster, topic) >= len(history.acked)
    # Its replica serves the same history (read from its rack).
    served_by: set[int] = set()
    records = read_partition(cluster.bootstrap([leader]), topic, client_rack=f"rack-{leader}", served_by=served_by)
    result = check_history(records, history)
    assert result.ok and served_by == {leader}, f"served by {served_by}: {result.report()}"


def test_sigterm_of_the_leader_under_load_moves_leadership_first_and_exits_promptly(healthy):
    """Controlled shutdown: the broker asks the controller to move its leaderships
    away before it stops serving, so a producer sees a leader change, not an
    outage, and the process exits within a few seconds even with acks=all
    requests waiting on it."""
    cluster = healthy
    topic = new_topic(cluster, "term-leader")
    before = cluster.partition(topic, 0)
    leader = before.leader
    stream = StreamProducer(cluster.bootstrap(), topic, rate=STREAM_RATE, prefix="t").start()
    try:
        assert acked_after(stream, 0.0, STREAM_FLOWING_ACKS, STREAM_FLOWING_BOUND_S), stream.history.summary()
        terminated_at = stream.history.mark("sigterm")
        cluster.signal(leader, signal.SIGTERM)
        exited = wait_until(lambda: not cluster.running(leader), CONTROLLED_SHUTDOWN_BOUND_S)
        exit_s = time.monotonic() - terminated_at
        assert exited, f"node {leader} still running {CONTROLLED_SHUTDOWN_BOUND_S} s after SIGTERM:\n{cluster.tail(leader)}"
        new_leader = cluster.leader_of(topic, 0, FAILOVER_BOUND_S, exclude={leader})
        # Keep producing until the new leader has acknowledged records invoked after the exit.
        acked_after(stream, terminated_at + exit_s, STREAM_FLOWING_ACKS, FAILOVER_BOUND_S + STREAM_FLOWING_BOUND_S)
    finally:
        history = stream.stop()
    assert cluster.nodes[leader].process.returncode == 0, cluster.tail(leader)
    assert new_leader is not None and new_leader in before.isr, cluster.describe(topic)
    assert any(op.invoke_t > terminated_at + exit_s for op in history.acked), history.summary()
    assert_history_ok(cluster, topic, history)
    assert not history.failed and not history.indeterminate and not history.fatal_errors(), history.summary()
    print(f"sigterm: node {leader} exited {exit_s:.2f} s after SIGTERM, new leader {new_leader}; {history.summary()}")
    cluster.restart(leader)
    assert cluster.wait_for_isr(topic, 0, NODE_IDS, REJOIN_BOUND_S) is not None, cluster.partition(topic, 0)
    assert assert_replicas_identical(cluster, topic) >= len(history.acked)


@pytest.mark.timeout(150)
def test_sigstop_of_followers_shrinks_the_isr_and_stops_acks_all_below_min_insync(healthy):
    cluster = healthy
    topic = new_topic(cluster, "pause-followers")
    leader = cluster.partition(topic, 0).leader
    followers = [n for n in NODE_IDS if n != leader]
    # Pause the follower that is not the active controller first, so that the
    # quorum keeps its leader and the shrink goes through AlterPartition.
    controller = cluster.active_controller()
    first, second = sorted(followers, key=lambda n: n == controller)

    stream = StreamProducer(cluster.bootstrap(), topic, rate=1000, prefix="p").start()
    try:
        time.sleep(1.0)
        paused_at = stream.history.mark("pause-first")
        cluster.pause(first)
        shrunk = cluster.wait_for_isr(topic, 0, {leader, second}, ISR_SHRINK_BOUND_S)
        shrink_s = time.monotonic() - paused_at
        assert shrunk is not None, f"node {first} still in the ISR {ISR_SHRINK_BOUND_S} s after SIGSTOP: {cluster.partition(topic, 0)}"
        assert shrunk.leader == leader
        # Which rule removed it: the leader's lag check, or fencing by the
        # controller (session timeout) when that came first.
        listed = cluster.brokers(leader)
        path = "unknown" if listed is None else "lag check" if first in listed else "fenced first"
        # acks=all goes on with two in sync (min.insync.replicas=2).
        progressed = wait_until(lambda: sum(op.invoke_t > paused_at + shrink_s for op in stream.history.acked) >= 100, 10)
        assert progressed, f"acks=all stalled with ISR {shrunk.isr}: {stream.history.summary()}"
    finally:
        steady = stream.stop()
    assert not steady.failed and not steady.fatal_errors(), steady.summary()
    print(f"pause: node {first} left the ISR {shrink_s:.2f} s after SIGSTOP ({path})")

    # The second follower too: one replica left of min.insync.replicas=2. Nothing
    # invoked from now on may be acknowledged: either NOT_ENOUGH_REPLICAS or a timeout.
    blocked_at = time.monotonic()
    cluster.pause(second)
    try:
        blocked_stream = StreamProducer(cluster.bootstrap([leader]), topic, rate=100, prefix="blocked", message_timeout_ms=4000).start()
        time.sleep(1.0)
        blocked = blocked_stream.stop(drain_s=10)
        resumed_at = time.monotonic()
    finally:
        cluster.resume(first)
        cluster.resume(second)
    acked_while_blocked = [op for op in blocked.acked if op.invoke_t > blocked_at and op.complete_t < resumed_at]
    assert not acked_while_blocked, f"acknowledged with one replica alive: {acked_while_blocked[:5]}; {blocked.summary()}"
    assert blocked.ops and not blocked.indeterminate, blocked.summary()
    unexpected = {op.error for op in blocked.failed} - NOT_ENOUGH_REPLICAS_ERRORS - TIMEOUT_ERRORS
    assert not unexpected, f"unexpected errors: {unexpected}; {blocked.summary()}"
    print(f"pause: with both followers stopped: {blocked.summary()}")

    # SIGCONT: both come back into the ISR and acks=all succeeds again.
    rejoined = cluster.wait_for_isr(topic, 0, NODE_IDS, FAILOVER_BOUND_S + REJOIN_BOUND_S)
    assert rejoined is not None, f"ISR not back to {NODE_IDS}: {cluster.partition(topic, 0)}"
    after = produce_batch(cluster.bootstrap(), topic, 200, prefix="after")
    assert len(after.acked) == 200, after.summary()
    assert_history_ok(cluster, topic, steady, blocked, after)
    assert_replicas_identical(cluster, topic)


def _kafka_python_round(cluster: ReplicatedCluster, topic: str, leader: int) -> History:
    kafka = pytest.importorskip("kafka")
    history = History()
    reports = [0]
    lock = threading.Lock()

    def record(op: Op, ok: bool, result):
        with lock:
            op.complete_t, op.ack_seq = time.monotonic(), reports[0]
            reports[0] += 1
            if ok:
                op.outcome, op.offset = "ok", result.offset
            else:
                op.outcome, op.error = "fail", type(result).__name__

    producer = kafka.KafkaProducer(
        bootstrap_servers=cluster.bootstrap().split(","),
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        request_timeout_ms=5000,
        delivery_timeout_ms=30000,
        retry_backoff_ms=100,
        metadata_max_age_ms=1000,
    )
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap().split(","), enable_auto_commit=False, group_id=None, fetch_max_wait_ms=100)
    tp = kafka.TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    read: list[tuple[int, str]] = []

    def send(count: int):
        for _ in range(count):
            n = len(history.ops)
            op = Op(n, f"kp-{n}", time.monotonic())
            history.ops.append(op)
            future = producer.send(topic, value=op.value.encode(), partition=0)
            future.add_callback(lambda meta, op=op: record(op, True, meta))
            future.add_errback(lambda exc, op=op: record(op, False, exc))
        producer.flush(timeout=40)

    def consume_until(count: int, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        while len(read) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                read.extend((r.offset, r.value.decode()) for r in records)

    try:
        send(300)
        consume_until(300, 20)
        assert len(read) == 300, f"read {len(read)} of 300 before the kill"
        history.mark("kill")
        cluster.kill(leader)
        send(300)
        consume_until(len(history.acked), 40)
    finally:
        producer.close(timeout=10)
        consumer.close()
    result = check_history(read, history)
    assert result.ok, result.report() + " | " + history.summary()
    return history


def _aiokafka_round(cluster: ReplicatedCluster, topic: str, leader: int) -> History:
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.structs import TopicPartition as AioTopicPartition

    history = History()
    read: list[tuple[int, str]] = []

    async def run():
        reports = [0]
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap(),
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=5000,
            retry_backoff_ms=100,
            metadata_max_age_ms=1000,
        )
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap(), enable_auto_commit=False, group_id=None, fetch_max_wait_ms=100)
        tp = AioTopicPartition(topic, 0)
        await producer.start()
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)

            async def send(count: int):
                pending = []
                for _ in range(count):
                    n = len(history.ops)
                    op = Op(n, f"aio-{n}", time.monotonic())
                    history.ops.append(op)
                    pending.append((op, await producer.send(topic, value=op.value.encode(), partition=0)))
                for op, future in pending:
                    try:
                        metadata = await asyncio.wait_for(future, 40)
                        op.outcome, op.offset = "ok", metadata.offset
                    except Exception as exc:  # the outcome is recorded, and judged below
                        op.outcome, op.error = "fail", type(exc).__name__
                    op.complete_t, op.ack_seq = time.monotonic(), reports[0]
                    reports[0] += 1

            async def consume_until(count: int, timeout_s: float):
                deadline = time.monotonic() + timeout_s
                while len(read) < count and time.monotonic() < deadline:
                    batches = await consumer.getmany(tp, timeout_ms=200)
                    for records in batches.values():
                        read.extend((r.offset, r.value.decode()) for r in records)

            await send(300)
            await consume_until(300, 20)
            assert len(read) == 300, f"read {len(read)} of 300 before the kill"
            history.mark("kill")
            await asyncio.get_running_loop().run_in_executor(None, cluster.kill, leader)
            await send(300)
            await consume_until(len(history.acked), 40)
        finally:
            await producer.stop()
            await consumer.stop()

    asyncio.run(asyncio.wait_for(run(), 100))
    result = check_history(read, history)
    assert result.ok, result.report() + " | " + history.summary()
    return history


@pytest.mark.timeout(120)
@pytest.mark.parametrize("library", ["kafka-python", "aiokafka"])
def test_other_clients_produce_acks_all_and_consume_across_a_leader_sigkill(healthy, library):
    cluster = healthy
    topic = new_topic(cluster, library)
    leader = cluster.partition(topic, 0).leader
    run = _kafka_python_round if library == "kafka-python" else _aiokafka_round
    history = run(cluster, topic, leader)
    # Both halves acknowledged: the client found the new leader and retried there.
    assert len(history.acked) == 600 and not history.failed, history.summary()
    after = cluster.partition(topic, 0)
    assert after.leader != leader and after.leader in NODE_IDS, after
    cluster.restart(leader)
    assert cluster.wait_for_isr(topic, 0, NODE_IDS, REJOIN_BOUND_S) is not None, cluster.partition(topic, 0)
