"""``pybroker topics --describe`` partition filters on three combined nodes.

Topics made with the tool (RF=3, a replica assignment of two and of one node,
min.insync.replicas=3); with node 3 killed, --under-replicated-partitions,
--unavailable-partitions, --under-min-isr-partitions and
--at-min-isr-partitions each print exactly the partitions Kafka's rules pick
(only partition lines, no topic lines, as Kafka prints them)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid

import pytest

from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until
from tests.conftest import PROJECT_ROOT

pytest.importorskip("confluent_kafka")

BOUND_S = 30.0


def topics(cluster: ReplicatedCluster, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "topics", "--bootstrap-server", cluster.bootstrap([1]), *args],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )


def described(cluster, prefix: str, flag: str) -> list[tuple[str, int, str]]:
    """(topic, partition, leader) of each line the filter prints."""
    out = topics(cluster, "--describe", "--topic", f"{prefix}.*", flag)
    assert out.returncode == 0, out.stderr
    rows = []
    for line in out.stdout.splitlines():
        match = re.match(r"^\tTopic: (\S+)\tPartition: (\d+)\tLeader: (\S+)\tReplicas: [\d,]+\tIsr: [\d,]*", line)
        assert match, f"not a partition line: {line!r}"
        rows.append((match.group(1), int(match.group(2)), match.group(3)))
    return sorted(rows)


def test_partition_filters_with_a_node_down(tmp_path):
    cluster = ReplicatedCluster(tmp_path, session_timeout_ms=1800)
    cluster.start()
    try:
        prefix = f"flt{uuid.uuid4().hex[:6]}"
        full, pair, single, strict = (f"{prefix}-full", f"{prefix}-pair", f"{prefix}-single", f"{prefix}-strict")
        for args in (
            ["--topic", full, "--partitions", "1", "--replication-factor", "3"],
            ["--topic", pair, "--replica-assignment", "1:2"],
            ["--topic", single, "--replica-assignment", "3"],
            ["--topic", strict, "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=3"],
        ):
            created = topics(cluster, "--create", *args)
            assert created.returncode == 0, created.stderr
        for name, isr in ((full, NODE_IDS), (pair, (1, 2)), (strict, NODE_IDS)):
            assert cluster.wait_for_isr(name, 0, isr, BOUND_S) is not None, cluster.describe(name)
        assert described(cluster, prefix, "--under-replicated-partitions") == []
        assert described(cluster, prefix, "--unavailable-partitions") == []
        # RF 3 with min.isr 2 has one to spare; a pair with min.isr 2 and RF 3 with min.isr 3 are at
        # their minimum; one replica (min.isr 2) is under it.
        assert described(cluster, prefix, "--under-min-isr-partitions") == [(single, 0, "3")]
        assert [(t, p) for t, p, _ in described(cluster, prefix, "--at-min-isr-partitions")] == [(pair, 0), (strict, 0)]

        cluster.kill(3)
        assert cluster.wait_for_isr(full, 0, (1, 2), BOUND_S) is not None, cluster.describe(full)
        assert cluster.wait_for_isr(strict, 0, (1, 2), BOUND_S) is not None, cluster.describe(strict)
        assert wait_until(lambda: cluster.partition(single, 0) and cluster.partition(single, 0).leader == -1, BOUND_S)

        under = described(cluster, prefix, "--under-replicated-partitions")
        assert [(t, p) for t, p, _ in under] == [(full, 0), (strict, 0)]
        assert described(cluster, prefix, "--unavailable-partitions") == [(single, 0, "none")]
        # A partition without a leader is unavailable, not under min ISR (Kafka's rules need a leader).
        assert [(t, p) for t, p, _ in described(cluster, prefix, "--under-min-isr-partitions")] == [(strict, 0)]
        assert [(t, p) for t, p, _ in described(cluster, prefix, "--at-min-isr-partitions")] == [(full, 0), (pair, 0)]

        as_json = json.loads(topics(cluster, "--describe", "--topic", f"{prefix}.*", "--unavailable-partitions",
                                    "--output", "json").stdout)
        by_name = {t["name"]: t["partitions"] for t in as_json["topics"]}
        assert by_name[single] == [{"partition": 0, "leader": None, "replicas": [3], "isr": by_name[single][0]["isr"]}]
        assert by_name[full] == [] and by_name[pair] == []

        # Without a filter: every topic line, and Leader: none for the partition of the dead node.
        everything = topics(cluster, "--describe", "--topic", single).stdout.splitlines()
        assert everything[0].startswith(f"Topic: {single}\tTopicId: ") and "\tPartitionCount: 1\tReplicationFactor: 1\t" in everything[0]
        assert everything[1].startswith(f"\tTopic: {single}\tPartition: 0\tLeader: none\tReplicas: 3\tIsr: ")
    finally:
        cluster.save_output()
        cluster.stop()
