"""A balancing run seen over HTTP on a real three-node cluster: the REST balancer
resource and the console page of a node that is not the active controller show
the distribution the run started from ("before") and the one it left, and only
the active controller has the balancer's metric series.

Six partitions (RF=2) are placed by hand on nodes 1 and 2; node 3 holds none,
which is the balancer's node_add trigger (``balancer.mode=node_add``). The run
is small: it is over within seconds; the bound is generous for a busy machine.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka.admin import NewTopic  # noqa: E402

from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until  # noqa: E402
from tests.interop._rest import Rest, rest_port  # noqa: E402
from tests.interop.test_console import console_url, http  # noqa: E402
from tests.interop.test_metrics import metrics_port, scrape, value  # noqa: E402

PARTITIONS = 6
BALANCE_BOUND_S = 90
EXTRA = {
    "balancer.mode": "node_add",
    "rest.listener": "http://127.0.0.1:0",
    "console.listener": "http://127.0.0.1:0",
    "metrics.listener": "http://127.0.0.1:0",
}


def test_a_balancing_run_shows_before_and_after_over_rest_the_console_and_metrics(tmp_path):
    cluster = ReplicatedCluster(tmp_path, extra=EXTRA)
    try:
        cluster.start()
        assignment = [[1, 2] if p % 2 == 0 else [2, 1] for p in range(PARTITIONS)]
        admin = cluster.admin()
        for future in admin.create_topics([NewTopic("placed", num_partitions=PARTITIONS, replica_assignment=assignment)], request_timeout=20).values():
            future.result(timeout=30)

        active = {}

        def active_controller():
            for node in cluster.alive():
                samples = scrape(metrics_port(cluster.nodes[node]))
                if value(samples, "pybroker_balancer_state", state="ready") is not None:
                    active["node"] = node
                    return True
            return False
        assert wait_until(active_controller, 30)
        other = next(n for n in NODE_IDS if n != active["node"])
        rest = Rest(rest_port(cluster.nodes[other]))
        cluster_id = rest.cluster_id()
        seen = {}

        def balanced():
            status, body, _ = rest.get(f"/v3/clusters/{cluster_id}/balancer")
            if status != 200:
                return False
            seen["body"] = body
            now = {s["broker_id"]: s["replicas"] for s in body["distribution"]}
            return body["state"] == "ready" and body["distribution_before"] and now.get(3, 0) > 0 and body["moves_in_flight"] == 0
        assert wait_until(balanced, BALANCE_BOUND_S), seen
        body = seen["body"]
        # The run started from the hand placement: node 3 empty, nodes 1 and 2 with every replica.
        assert {s["broker_id"]: s["replicas"] for s in body["distribution_before"]} == {1: PARTITIONS, 2: PARTITIONS, 3: 0}
        assert {s["broker_id"]: s["leaders"] for s in body["distribution_before"]} == {1: PARTITIONS // 2, 2: PARTITIONS // 2, 3: 0}
        assert body["distribution_before_ms"] > 0 and body["trigger"] == "node_add"
        now = {s["broker_id"]: s["replicas"] for s in body["distribution"]}
        assert sum(now.values()) == 2 * PARTITIONS and max(now.values()) - min(now.values()) <= 1, now

        # The console of that node: a "before" bar for every broker, node 3's at 0.
        status, _, page = http(console_url(cluster.nodes[other]) + "/balancer")
        assert status == 200, page
        row = re.search(r'<tr data-broker="3">(.*?)</tr>', page, re.DOTALL).group(1)
        before = re.search(r'<td class="replicas-before">(.*?)</td>', row, re.DOTALL).group(1)
        assert '<rect class="bar-before"' in before and ">0</text>" in before, row
        assert f">{now[3]}</text>" in re.search(r'<td class="replicas">(.*?)</td>', row, re.DOTALL).group(1), row

        # Metrics: the active controller's series only (the others do not know the balancer's state).
        for node in NODE_IDS:
            samples = scrape(metrics_port(cluster.nodes[node]))
            has_state = [k for k in samples if k[0] == "pybroker_balancer_state"]
            replicas = value(samples, "pybroker_balancer_broker_replicas", broker="3")
            if node == active["node"]:
                assert has_state and replicas == now[3], samples
            else:
                assert not has_state and replicas is None, node
    finally:
        cluster.stop()
