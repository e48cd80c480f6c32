"""The balancer.* broker configs: defaults, what start-up refuses, and the key not acted on yet."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, load_config


def test_defaults_are_confluent_like():
    config = load_config({})
    assert (config["balancer.mode"], config["balancer.broker.failure.threshold.ms"], config["balancer.throttle.bytes.per.second"],
            config["balancer.max.moves.per.broker"], config["balancer.imbalance.threshold.percent"]) == (
        "node_add", 3_600_000, 10_485_760, 5, 10)


@pytest.mark.parametrize("key, value", [
    ("balancer.mode", "sometimes"),
    ("balancer.broker.failure.threshold.ms", "-1"),
    ("balancer.throttle.bytes.per.second", "0"),
    ("balancer.max.moves.per.broker", "0"),
    ("balancer.imbalance.threshold.percent", "ten"),
])
def test_start_up_refuses_values_it_cannot_honour(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config({key: value})


def test_the_disk_threshold_is_said_not_to_be_supported_yet():
    warnings: list[str] = []
    load_config({"balancer.disk.threshold": "0.8"}, warn=warnings.append)
    assert any("balancer.disk.threshold" in w and "not supported" in w for w in warnings), warnings
