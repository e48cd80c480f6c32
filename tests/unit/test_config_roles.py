"""process.roles, the quorum and the controller listener: Kafka's KRaft start-up rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BROKER_CONFIG_INFO, KEYS, NOT_YET_SUPPORTED, ConfigError, load_config

VOTERS = "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"
COMBINED = {
    "node.id": "1",
    "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": VOTERS,
}
CONTROLLER_ONLY = {**COMBINED, "process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093"}
BROKER_ONLY = {**COMBINED, "node.id": "4", "process.roles": "broker", "listeners": "PLAINTEXT://127.0.0.1:9092"}


def load(values: dict[str, str]):
    return load_config(values, warn=lambda _: None)


# --------------------------------------------------------------------------- the single-node default


def test_the_default_is_a_single_node_quorum():
    config = load({"listeners": "PLAINTEXT://127.0.0.1:0"})
    assert config.roles == {"broker", "controller"}
    assert config.single_node_quorum
    assert config.quorum_voters == {1: None}
    assert config.quorum_bootstrap_servers == []
    assert config.controller_listener_names == []
    assert config.controller_listeners == []
    assert [l.name for l in config.broker_listeners] == ["PLAINTEXT"]
    assert config.metadata_log_dir == config.log_dirs[0]


def test_the_single_node_quorum_takes_either_order_of_roles():
    config = load({"process.roles": "controller,broker", "node.id": "5"})
    assert config.single_node_quorum and config.quorum_voters == {5: None}


def test_kafkas_defaults_for_the_kraft_keys():
    config = load({})
    expected = {
        "controller.quorum.voters": (),
        "controller.quorum.bootstrap.servers": (),
        "controller.listener.names": None,
        "controller.quorum.election.timeout.ms": 1000,
        "controller.quorum.fetch.timeout.ms": 2000,
        "controller.quorum.election.backoff.max.ms": 1000,
        "controller.quorum.request.timeout.ms": 2000,
        "controller.quorum.retry.backoff.ms": 20,
        "broker.session.timeout.ms": 9000,
        "broker.heartbeat.interval.ms": 2000,
        "metadata.log.dir": None,
        "metadata.log.max.record.bytes.between.snapshots": 20971520,
        "metadata.log.max.snapshot.interval.ms": 3600000,
        "metadata.log.segment.bytes": 1073741824,
        "initial.broker.registration.timeout.ms": 60000,
    }
    assert {key: config[key] for key in expected} == expected
    for key in expected:
        assert key not in NOT_YET_SUPPORTED
        assert key in BROKER_CONFIG_INFO, key
    assert "combined only" not in BROKER_CONFIG_INFO["process.roles"][1]
    assert set(BROKER_CONFIG_INFO) <= set(KEYS)


def test_metadata_log_dir_is_resolved_like_log_dirs(tmp_path: Path):
    config = load_config({"log.dirs": "data", "metadata.log.dir": "meta"}, base_dir=tmp_path, warn=lambda _: None)
    assert config.log_dirs == [tmp_path / "data"]
    assert config.metadata_log_dir == tmp_path / "meta"


def test_raft_timings_come_from_kafkas_keys():
    config = load({**COMBINED, "controller.quorum.election.timeout.ms": "300", "controller.quorum.fetch.timeout.ms": "700"})
    raft = config.raft_config
    assert (raft.election_timeout_ms, raft.fetch_timeout_ms, raft.request_timeout_ms) == (300, 700, 2000)


# --------------------------------------------------------------------------- multi-node roles


def test_a_combined_node_of_a_three_voter_quorum():
    config = load(COMBINED)
    assert not config.single_node_quorum
    assert config.quorum_voters == {1: ("127.0.0.1", 9093), 2: ("127.0.0.1", 9094), 3: ("127.0.0.1", 9095)}
    assert [l.name for l in config.controller_listeners] == ["CONTROLLER"]
    assert [l.name for l in config.broker_listeners] == ["PLAINTEXT"]
    # Clients are never told of the controller listener.
    assert [l.name for l in config.advertised_listeners] == ["PLAINTEXT"]


def test_controller_listener_names_are_matched_like_listener_names():
    config = load({**COMBINED, "controller.listener.names": "controller"})
    assert config.controller_listener_names == ["CONTROLLER"]
    assert [l.name for l in config.controller_listeners] == ["CONTROLLER"]


def test_a_controller_only_node_has_only_controller_listeners():
    config = load(CONTROLLER_ONLY)
    assert config.roles == {"controller"} and not config.single_node_quorum
    assert config.broker_listeners == [] and config.advertised_listeners == []
    assert [l.name for l in config.controller_listeners] == ["CONTROLLER"]


def test_a_broker_only_node_is_an_observer():
    config = load(BROKER_ONLY)
    assert config.roles == {"broker"} and not config.single_node_quorum
    assert config.controller_listeners == [] and [l.name for l in config.broker_listeners] == ["PLAINTEXT"]
    assert 4 not in config.quorum_voters and config.quorum_voters[1] == ("127.0.0.1", 9093)


def test_a_broker_only_node_needs_the_voters_not_just_bootstrap_servers():
    with pytest.raises(ConfigError, match="no dynamic quorums"):
        load({**BROKER_ONLY, "controller.quorum.voters": "", "controller.quorum.bootstrap.servers": "c1:9093, c2:9093"})
    config = load({**BROKER_ONLY, "controller.quorum.bootstrap.servers": "c1:9093, c2:9093"})
    assert config.quorum_bootstrap_servers == [("c1", 9093), ("c2", 9093)]


@pytest.mark.parametrize(
    "base, overrides, message",
    [
        # process.roles itself
        (COMBINED, {"process.roles": "broker,broker"}, "process.roles: name each of broker and controller at most once"),
        (COMBINED, {"process.roles": "zookeeper"}, "process.roles: unknown role 'zookeeper'"),
        (COMBINED, {"process.roles": "Broker"}, "process.roles: unknown role 'Broker'"),
        (COMBINED, {"process.roles": ""}, "process.roles: name at least one"),
        # a controller role needs the quorum keys (except the single-node default)
        ({}, {"process.roles": "controller"}, "controller.quorum.voters: required when process.roles is controller"),
        (COMBINED, {"controller.quorum.voters": ""}, "controller.quorum.voters: required"),
        (COMBINED, {"controller.listener.names": ""}, "controller.listener.names: required"),
        (CONTROLLER_ONLY, {"controller.listener.names": ""}, "controller.listener.names: required"),
        (COMBINED, {"controller.quorum.voters": "", "controller.quorum.bootstrap.servers": "h:9093"}, "no dynamic quorums"),
        (COMBINED, {"controller.listener.names": "OTHER"}, "controller.listener.names: none of OTHER is one of listeners"),
        (COMBINED, {"node.id": "7"}, "controller.quorum.voters: node.id 7 has the controller role but is not a voter"),
        (CONTROLLER_ONLY, {"node.id": "7"}, "not a voter"),
        # the listeners of each kind of node
        (COMBINED, {"listeners": "CONTROLLER://127.0.0.1:9093"}, "listeners: a broker needs a listener"),
        (CONTROLLER_ONLY, {"listeners": COMBINED["listeners"]}, "listeners: a controller-only node may only have controller listeners, not PLAINTEXT"),
        (BROKER_ONLY, {"listeners": COMBINED["listeners"]}, "listeners: a broker-only node must not list a controller listener"),
        # a broker-only node must know how to reach the controllers
        ({}, {"process.roles": "broker"}, "controller.listener.names: required when process.roles is broker"),
        (BROKER_ONLY, {"controller.listener.names": ""}, "controller.listener.names: required"),
        (BROKER_ONLY, {"controller.quorum.voters": ""}, "controller.quorum.voters: a broker-only node needs"),
        (BROKER_ONLY, {"node.id": "2"}, "node.id 2 is a voter but process.roles has no controller"),
        # clients are not told of controller listeners
        (COMBINED, {"advertised.listeners": "CONTROLLER://127.0.0.1:9093"}, "advertised.listeners: CONTROLLER is a controller listener"),
        (CONTROLLER_ONLY, {"advertised.listeners": "CONTROLLER://10.0.0.1:9093"}, "advertised.listeners: CONTROLLER is a controller listener"),
        # malformed values
        (COMBINED, {"controller.quorum.voters": "1@host"}, "controller.quorum.voters: '1@host'"),
        (COMBINED, {"controller.quorum.voters": "1@h:1,1@h:2"}, "controller.quorum.voters: node id 1 appears twice"),
        (BROKER_ONLY, {"controller.quorum.bootstrap.servers": "nohost"}, "controller.quorum.bootstrap.servers: 'nohost'"),
        (COMBINED, {"controller.quorum.election.timeout.ms": "0"}, "controller.quorum.election.timeout.ms: 0 is below"),
        (COMBINED, {"metadata.log.segment.bytes": "11"}, "metadata.log.segment.bytes: 11 is below the minimum 12"),
        (COMBINED, {"metadata.log.max.snapshot.interval.ms": "-1"}, "metadata.log.max.snapshot.interval.ms"),
        (COMBINED, {"broker.session.timeout.ms": "soon"}, "broker.session.timeout.ms: expected an integer"),
    ],
)
def test_bad_role_configs_stop_start_up(base, overrides, message):
    with pytest.raises(ConfigError) as exc:
        load({**base, **overrides})
    assert message in str(exc.value)


def test_a_single_node_with_a_controller_listener_needs_voters():
    """Setting controller.listener.names opts out of the in-process quorum of one."""
    with pytest.raises(ConfigError, match="controller.quorum.voters: required"):
        load({"listeners": COMBINED["listeners"], "controller.listener.names": "CONTROLLER"})


def test_a_one_voter_quorum_over_a_controller_listener_is_not_the_single_node_default():
    config = load({**COMBINED, "controller.quorum.voters": "1@127.0.0.1:9093"})
    assert not config.single_node_quorum
    assert config.quorum_voters == {1: ("127.0.0.1", 9093)}


CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(
    "name, roles, single_node",
    [("server", {"broker", "controller"}, True), ("controller", {"controller"}, False), ("broker", {"broker"}, False)],
)
def test_the_example_configs_load(name, roles, single_node):
    from broker.config import load_config_file

    warnings = []
    config = load_config_file(CONFIGS / f"{name}.properties", warn=warnings.append)
    assert warnings == []
    assert config.roles == roles and config.single_node_quorum == single_node
    if not single_node:
        assert sorted(config.quorum_voters) == [1, 2, 3]
        assert all(port in (9093, 9094, 9095) for _, port in config.quorum_voters.values())


def test_describe_configs_shows_the_quorum_keys_as_they_were_written():
    from broker.config import format_broker_value

    config = load({**BROKER_ONLY, "controller.quorum.bootstrap.servers": "c1:9093,[::1]:9094"})
    assert format_broker_value(config["controller.quorum.voters"]) == VOTERS
    assert format_broker_value(config["controller.quorum.bootstrap.servers"]) == "c1:9093,[::1]:9094"
    assert format_broker_value(config["controller.listener.names"]) == "CONTROLLER"
