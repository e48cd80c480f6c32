"""The balancer's disk trigger, as real processes on small file systems.

Nodes 1-3 (combined) and a broker-only node 4 each keep their log dir on a
tmpfs of their own (mounted here: root only; skipped when mounting fails),
node 4's small (16 MiB) and the others' large, so what the brokers report is
known exactly and no other file system's use plays in. A topic of 4
partitions (RF=2) is spread evenly, then its two partitions on node 4 are
filled past ``balancer.disk.threshold.percent`` (50) of node 4's tmpfs:
the balancer moves a filled replica off node 4 before it is full (and may
bring an empty one to even the replica counts), its use falls back under
the threshold, and ``cluster balance --describe`` showed the
trigger and the brokers' loads.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until  # noqa: E402
from tests.cluster.test_balancer import NEW_BROKER, balancer_cli, layout, start_broker_only  # noqa: E402

SMALL_MIB = 16
LARGE_MIB = 256
THRESHOLD = 50
VALUE = b"v" * 10_000
SETTLE_BOUND_S = 30
MOVE_BOUND_S = 40
BALANCER = {
    "balancer.mode": "node_add",
    "balancer.disk.threshold.percent": str(THRESHOLD),
    "balancer.throttle.bytes.per.second": "50000000",
}


def mount_tmpfs(path, mib: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(path)],
                            capture_output=True, text=True, timeout=20, check=False)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for a small log dir (needs root): {result.stderr.strip()}")


def unmount(path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True, timeout=20, check=False)


def use_percent(path) -> float:
    stats = os.statvfs(path)
    return 100 * (stats.f_blocks - stats.f_bfree) / stats.f_blocks


def test_a_broker_filling_past_the_disk_threshold_has_replicas_moved_off_before_it_is_full(tmp_path):
    mounts = []
    cluster = None
    node4 = None
    try:
        for node in (*NODE_IDS, NEW_BROKER):
            path = tmp_path / f"fs{node}"
            mount_tmpfs(path, SMALL_MIB if node == NEW_BROKER else LARGE_MIB)
            mounts.append(path)
        cluster = ReplicatedCluster(tmp_path, extra=BALANCER)
        for node in NODE_IDS:
            cluster.nodes[node].overrides["log.dirs"] = str(tmp_path / f"fs{node}" / "logs")
        cluster.start()
        small = tmp_path / f"fs{NEW_BROKER}"
        node4 = start_broker_only(cluster, tmp_path, {**BALANCER, "log.dirs": str(small / "logs")})
        everyone = [*NODE_IDS, NEW_BROKER]
        assert wait_until(lambda: all(cluster.brokers(n) == everyone for n in NODE_IDS), SETTLE_BOUND_S)
        topic = "fill"
        admin = cluster.admin()
        # Evenly spread by hand (2 replicas each): no other trigger has a reason to move anything.
        assignment = [[4, 1], [4, 2], [1, 3], [2, 3]]
        for future in admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)], request_timeout=20).values():
            future.result(timeout=30)
        assert wait_until(lambda: (s := layout(cluster)) and all(len(s[(topic, p)][2]) == 2 for p in range(4)),
                          SETTLE_BOUND_S)

        # About 5 MiB into each of the two partitions node 4 holds: over 60% of its 16 MiB.
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "linger.ms": 20})
        failures = []
        peak = [0.0]

        def delivered(err, _msg):
            if err is not None:
                failures.append(err)

        started = time.monotonic()
        for i in range(1000):
            producer.produce(topic, VALUE, partition=i % 2, on_delivery=delivered)
            producer.poll(0)
            if i % 100 == 0:
                peak[0] = max(peak[0], use_percent(small))
        assert producer.flush(30) == 0 and not failures, failures[:3]
        assert use_percent(small) > THRESHOLD, use_percent(small)
        described = []

        def moved_off():
            peak[0] = max(peak[0], use_percent(small))
            state = layout(cluster)
            if state is None:
                return None
            if len(described) < 3:
                out = balancer_cli(cluster.bootstrap(), "--describe").stdout
                if "Trigger: disk" in out:
                    described.append(out)
            # Of the two filled partitions, one at most stays (the empty ones may come to even the counts).
            filled_on_4 = [p for p in (0, 1) if NEW_BROKER in state[(topic, p)][1]]
            done = len(filled_on_4) < 2 and all(len(state[(topic, p)][2]) == 2 for p in range(4))
            return done and use_percent(small) <= THRESHOLD

        assert wait_until(moved_off, MOVE_BOUND_S, interval_s=0.5), (
            f"node 4 at {use_percent(small):.0f}%: {layout(cluster)}\n" + balancer_cli(cluster.bootstrap(), "--describe").stdout
        )
        took_s = time.monotonic() - started
        assert peak[0] < 100, peak  # moved before it was full
        assert described, "cluster balance --describe never showed the disk trigger"
        loads = [line for line in described[0].splitlines() if line.startswith(f"Broker {NEW_BROKER} load:")]
        assert loads and "%)" in loads[0], described[0]
        print(f"node 4 peaked at {peak[0]:.0f}% and was back under {THRESHOLD}% in {took_s:.1f} s")
    finally:
        if node4 is not None:
            node4.stop()
            (tmp_path / f"node{NEW_BROKER}.out").write_text(node4.log_text())
        if cluster is not None:
            cluster.save_output()
            cluster.stop()
        for path in mounts:
            unmount(path)
