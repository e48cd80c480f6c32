"""controller.raft.quorum_config: Kafka's controller.quorum.* keys."""

from __future__ import annotations

import pytest

from controller.raft.node import RaftConfig
from controller.raft.quorum_config import (
    QuorumConfigError,
    VoterAddress,
    check_node_in_quorum,
    parse_bootstrap_servers,
    parse_voters,
    raft_config,
)


def test_voters_parse_in_order():
    assert parse_voters("3@c3:9093, 1@c1:9093,2@[::1]:19093") == (
        VoterAddress(3, "c3", 9093),
        VoterAddress(1, "c1", 9093),
        VoterAddress(2, "::1", 19093),
    )
    assert parse_voters("") == ()


@pytest.mark.parametrize(
    "value, complaint",
    [
        ("1@c1:9093,1@c2:9093", "appears twice"),
        ("c1:9093", "id@host:port"),
        ("x@c1:9093", "node id"),
        ("-1@c1:9093", "node id"),
        ("1@c1", "host:port"),
        ("1@:9093", "host:port"),
        ("1@c1:0", "port"),
        ("1@c1:65536", "port"),
        ("1@c1:port", "port"),
    ],
)
def test_bad_voters_are_refused_naming_the_entry(value, complaint):
    with pytest.raises(QuorumConfigError, match=complaint) as exc:
        parse_voters(value)
    assert str(exc.value).startswith("controller.quorum.voters: ")


def test_bootstrap_servers():
    assert parse_bootstrap_servers("c1:9093,c2:9094") == (("c1", 9093), ("c2", 9094))
    with pytest.raises(QuorumConfigError, match="host:port"):
        parse_bootstrap_servers("c1")


def test_timings_keep_kafka_defaults_unless_set():
    assert raft_config({}) == RaftConfig()
    config = raft_config({"controller.quorum.election.timeout.ms": 300, "controller.quorum.fetch.timeout.ms": "700"})
    assert (config.election_timeout_ms, config.fetch_timeout_ms) == (300, 700)
    assert config.request_timeout_ms == RaftConfig().request_timeout_ms


@pytest.mark.parametrize("key", ["controller.quorum.election.timeout.ms", "controller.quorum.retry.backoff.ms"])
def test_timings_must_be_positive(key):
    with pytest.raises(QuorumConfigError, match=key):
        raft_config({key: 0})


def test_backoff_cap_below_its_base_is_refused():
    with pytest.raises(QuorumConfigError, match="backoff.max"):
        raft_config({"controller.quorum.election.backoff.max.ms": 10})


def test_controllers_must_be_voters_and_brokers_must_not():
    voters = parse_voters("1@c1:9093,2@c2:9093,3@c3:9093")
    check_node_in_quorum(1, {"broker", "controller"}, voters)
    check_node_in_quorum(4, {"broker"}, voters)
    with pytest.raises(QuorumConfigError, match="not a voter"):
        check_node_in_quorum(4, {"controller"}, voters)
    with pytest.raises(QuorumConfigError, match="no controller"):
        check_node_in_quorum(2, {"broker"}, voters)
