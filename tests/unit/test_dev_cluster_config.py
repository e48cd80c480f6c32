"""What ``pybroker dev-cluster`` writes before it starts anything: the port
scheme, a combined node's keys, the RF defaults for small clusters, storage
formatted with one cluster id, and a data dir reused as it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import load_config_file, parse_properties
from broker.tools.dev_cluster import DevClusterError, plan_ports, prepare
from storage.meta_properties import describe_storage


def test_ports_are_consecutive_by_kind_from_the_base_port():
    ports = plan_ports(3, 9092)
    assert [p["client"] for p in ports] == [9092, 9093, 9094]
    assert [p["controller"] for p in ports] == [9095, 9096, 9097]
    assert [p["console"] for p in ports] == [9098, 9099, 9100]
    assert [p["rest"] for p in ports] == [9101, 9102, 9103]
    assert [p["metrics"] for p in ports] == [9104, 9105, 9106]
    free = plan_ports(2, None)
    assert len({port for p in free for port in p.values()}) == 10
    with pytest.raises(DevClusterError, match="do not fit"):
        plan_ports(3, 65530)


@pytest.mark.parametrize("nodes, replicas, min_isr", [(1, 1, 1), (2, 2, 2), (3, 3, 2), (5, 3, 2)])
def test_each_node_is_a_combined_node_with_rf_defaults_for_the_cluster_size(tmp_path, nodes, replicas, min_isr):
    plans = prepare(tmp_path, nodes, "127.0.0.1", 20000, lambda text: None)
    cluster_ids = set()
    for plan in plans:
        raw = parse_properties(plan.config_file.read_text())
        config = load_config_file(plan.config_file)
        assert config.node_id == plan.node_id and raw["process.roles"] == "broker,controller"
        assert sorted(config.quorum_voters) == list(range(1, nodes + 1))
        assert raw["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{20000 + plan.node_id - 1}"
        assert (raw["default.replication.factor"], raw["offsets.topic.replication.factor"],
                raw["transaction.state.log.replication.factor"]) == (str(replicas),) * 3
        assert (raw["min.insync.replicas"], raw["transaction.state.log.min.isr"]) == (str(min_isr),) * 2
        assert Path(raw["log.dirs"]) == tmp_path / f"node-{plan.node_id}" / "data"
        found, problems = describe_storage([Path(raw["log.dirs"])], plan.node_id)
        assert problems == [] and found[0][1]["node.id"] == str(plan.node_id)
        cluster_ids.add(found[0][1]["cluster.id"])
    assert len(cluster_ids) == 1 and cluster_ids == {raw["cluster.id"]}


def test_an_earlier_run_is_reused_as_it_is(tmp_path):
    first = prepare(tmp_path, 3, "127.0.0.1", None, lambda text: None)
    said = []
    again = prepare(tmp_path, 3, "127.0.0.1", 9092, said.append)
    assert [p.ports for p in again] == [p.ports for p in first]
    assert {p.host for p in again} == {"127.0.0.1"}
    assert "again" in said[0]
    with pytest.raises(DevClusterError, match="of 3 node"):
        prepare(tmp_path, 2, "127.0.0.1", None, lambda text: None)


def test_files_that_are_not_dev_clusters_are_refused(tmp_path):
    (tmp_path / "node-1.properties").write_text("node.id=1\n")
    with pytest.raises(DevClusterError, match="not dev-cluster's"):
        prepare(tmp_path, 1, "127.0.0.1", None, lambda text: None)
