"""The balancer.* broker configs: defaults, and what start-up refuses."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, load_config


def test_defaults_are_confluent_like():
    config = load_config({})
    assert (config["balancer.mode"], config["balancer.broker.failure.threshold.ms"], config["balancer.throttle.bytes.per.second"],
            config["balancer.max.moves.per.broker"], config["balancer.imbalance.threshold.percent"],
            config["balancer.disk.threshold.percent"]) == ("node_add", 3_600_000, 10_485_760, 5, 10, 80)


@pytest.mark.parametrize("key, value", [
    ("balancer.mode", "sometimes"),
    ("balancer.broker.failure.threshold.ms", "-1"),
    ("balancer.throttle.bytes.per.second", "0"),
    ("balancer.max.moves.per.broker", "0"),
    ("balancer.imbalance.threshold.percent", "ten"),
    ("balancer.disk.threshold.percent", "0"),
    ("balancer.disk.threshold.percent", "101"),
])
def test_start_up_refuses_values_it_cannot_honour(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config({key: value})


def test_the_disk_threshold_reaches_the_driver_settings():
    from controller.balancer.driver import BalancerSettings

    assert load_config({"balancer.disk.threshold.percent": "65"})["balancer.disk.threshold.percent"] == 65
    with pytest.raises(ValueError):
        BalancerSettings(disk_threshold_percent=0)


def test_a_log_dir_cordon_is_said_not_supported():
    # KIP-1066's cordoned.log.dirs: pybroker cordons whole brokers only.
    warnings = []
    load_config({"cordoned.log.dirs": "/data/a"}, warn=warnings.append)
    assert any("cordoned.log.dirs" in w and "not supported" in w for w in warnings), warnings
