"""Metadata snapshots between real processes: a node that was down while the
leader snapshotted and dropped the log prefix catches up with FetchSnapshot."""

from __future__ import annotations

import signal

from controller.raft.disk_log import SNAPSHOT_SUFFIX
from protocol.errors import ErrorCode
from tests.cluster.test_quorum_processes import Cluster, create_topic, find_leader, topic_names, wait_until_true
from tests.conftest import BrokerProcess

SNAPSHOT_BYTES = 2048


def snapshot_files(process: BrokerProcess) -> list[str]:
    directory = process.data_dir / "logs" / "__cluster_metadata-0"
    return sorted(p.name for p in directory.glob(f"*{SNAPSHOT_SUFFIX}"))


def test_a_lagging_node_installs_the_leaders_snapshot(tmp_path):
    cluster = Cluster(tmp_path)
    for process in cluster.nodes.values():
        process.overrides["metadata.log.max.record.bytes.between.snapshots"] = str(SNAPSHOT_BYTES)
    try:
        cluster.start()
        leader, _ = find_leader(cluster, cluster.nodes, 15)
        assert leader is not None
        lagging = next(n for n in cluster.nodes if n != leader)
        cluster.nodes[lagging].stop(signal.SIGTERM)

        names = [f"while-down-{i}" for i in range(60)]
        for name in names:
            assert create_topic(cluster.nodes[leader], name) == ErrorCode.NONE
        assert wait_until_true(lambda: len(snapshot_files(cluster.nodes[leader])) > 0, 10)

        process = cluster.nodes[lagging]
        cluster.nodes[lagging] = BrokerProcess(process.data_dir, process.overrides)
        cluster.start([lagging])
        assert wait_until_true(lambda: set(names) <= topic_names(cluster.nodes[lagging]), 15)
        # It caught up from a snapshot the leader wrote, fetched whole.
        leader_snapshots = set(snapshot_files(cluster.nodes[leader]))
        assert leader_snapshots & set(snapshot_files(cluster.nodes[lagging])), "no snapshot was fetched"
        assert "metadata: loaded snapshot" in cluster.nodes[lagging].log_text()
    finally:
        cluster.stop()
