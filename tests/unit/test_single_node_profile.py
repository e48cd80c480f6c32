"""The single-node profile ``pybroker start`` runs without ``--config``: the same
settings as configs/server.properties, applied under the overrides."""

from __future__ import annotations

from broker.config import load_config, parse_properties
from broker.single_node_profile import (
    SINGLE_NODE_PROFILE,
    load_single_node_config,
    single_node_hint,
    single_node_settings,
)
from tests.conftest import PROJECT_ROOT


def test_the_profile_is_configs_server_properties_key_for_key():
    from_file = parse_properties((PROJECT_ROOT / "configs" / "server.properties").read_text())
    assert SINGLE_NODE_PROFILE == from_file


def test_keys_at_kafkas_default_stay_defaults_and_the_rest_are_set():
    settings = single_node_settings({})
    # Kafka's defaults are not named (DescribeConfigs reports them as DEFAULT_CONFIG) ...
    for name in ("node.id", "process.roles", "listeners", "num.partitions", "log.segment.bytes", "message.max.bytes"):
        assert name not in settings
    # ... the single-node choices are.
    assert settings == {
        "advertised.listeners": "PLAINTEXT://127.0.0.1:9092",
        "log.dirs": "data/kafka-logs",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "schema.registry.topic.replication.factor": "1",
    }


def test_overrides_win_and_a_moved_listener_is_the_one_advertised(tmp_path):
    settings = single_node_settings({"listeners": "PLAINTEXT://127.0.0.1:19092", "log.dir": "elsewhere"})
    # A listeners override alone: advertised.listeners follows it (Kafka's rule when unset).
    assert "advertised.listeners" not in settings
    # log.dir is a synonym of log.dirs: the profile's value does not shadow it.
    assert "log.dirs" not in settings and settings["log.dir"] == "elsewhere"
    both = single_node_settings({"listeners": "PLAINTEXT://0.0.0.0:19092", "advertised.listeners": "PLAINTEXT://h:19092"})
    assert both["advertised.listeners"] == "PLAINTEXT://h:19092"
    config = load_single_node_config({"listeners": "PLAINTEXT://127.0.0.1:19092"}, base_dir=tmp_path)
    assert config["advertised.listeners"] is None
    assert config.log_dirs == [tmp_path / "data" / "kafka-logs"]
    assert config["offsets.topic.replication.factor"] == 1
    assert config["offsets.topic.replication.factor"] != load_config({})["offsets.topic.replication.factor"]
    assert load_single_node_config({"offsets.topic.replication.factor": "3"}, base_dir=tmp_path)["offsets.topic.replication.factor"] == 3


def test_the_hint_names_the_key_only_where_no_other_broker_can_come(tmp_path):
    alone = load_single_node_config({}, base_dir=tmp_path)
    assert single_node_hint(alone, "offsets.topic.replication.factor", 3).endswith("set offsets.topic.replication.factor=1")
    assert single_node_hint(alone, "offsets.topic.replication.factor", 1) == ""
    cluster = load_config(
        {
            "process.roles": "broker",
            "node.id": "4",
            "controller.quorum.voters": "1@127.0.0.1:9093",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(tmp_path / "logs"),
        }
    )
    assert single_node_hint(cluster, "offsets.topic.replication.factor", 3) == ""

