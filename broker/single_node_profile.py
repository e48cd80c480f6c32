"""The single-node development profile: what ``pybroker start`` runs with when
it is given no ``--config``.

It is the settings of ``configs/server.properties`` (one combined node that is
its own metadata quorum, data under ``./data`` of the directory it is started
from, internal topics with one replica), kept here because ``configs/`` is not
part of the installed package; ``tests/unit/test_single_node_profile.py``
fails when the two differ. Without it the built-in defaults are Kafka's, whose
internal topics want three replicas: on one node ``__consumer_offsets`` could
never be created and group consumers would wait for brokers that never come.

Where the profile's value is Kafka's default, the key is left unset, so
DescribeConfigs reports it as a default (DEFAULT_CONFIG), as it would on a
broker whose file did not name it. ``--override`` values go on top; a
``listeners`` override without ``advertised.listeners`` drops the profile's
advertised address (port 9092), so that clients are told the port the broker
listens on, as Kafka does when ``advertised.listeners`` is not set.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from broker.config import KEYS, BrokerConfig, load_config

# configs/server.properties, key for key (the comments are in that file).
SINGLE_NODE_PROFILE: dict[str, str] = {
    "node.id": "1",
    "process.roles": "broker,controller",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "advertised.listeners": "PLAINTEXT://127.0.0.1:9092",
    "log.dirs": "data/kafka-logs",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "log.segment.bytes": "1073741824",
    "log.index.interval.bytes": "4096",
    "message.max.bytes": "1048588",
    "socket.request.max.bytes": "104857600",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "1",
    "offsets.retention.minutes": "10080",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "schema.registry.topic.replication.factor": "1",
}


def _is_builtin_default(name: str, value: str) -> bool:
    key = KEYS[name]
    default = key.default
    if isinstance(default, str):
        return value == default
    return key.parse(name, value) == default


def single_node_settings(overrides: dict[str, str]) -> dict[str, str]:
    """The raw settings a start without ``--config`` uses: the profile's where they
    differ from Kafka's defaults and no override names the key (or a synonym of
    it), then the overrides."""
    settings: dict[str, str] = {}
    for name, value in SINGLE_NODE_PROFILE.items():
        names = (name, *KEYS[name].synonyms)
        if any(n in overrides for n in names) or _is_builtin_default(name, value):
            continue
        settings[name] = value
    if "listeners" in overrides and "advertised.listeners" not in overrides:
        settings.pop("advertised.listeners", None)
    settings.update(overrides)
    return settings


def load_single_node_config(
    overrides: dict[str, str], *, base_dir: Path | None = None, warn: Callable[[str], None] | None = None
) -> BrokerConfig:
    """The profile with ``overrides`` on top; relative paths against ``base_dir`` (the cwd)."""
    return load_config(single_node_settings(overrides), base_dir=base_dir or Path.cwd(), warn=warn)


def single_node_hint(config: BrokerConfig, key_name: str, replication_factor: int) -> str:
    """What to do when an internal topic wants more replicas than there can ever be
    brokers: on a quorum of one (no controller listener, so no other broker can
    register) only one replica exists. Empty where more brokers may still come."""
    if not config.single_node_quorum or replication_factor <= 1:
        return ""
    return f"; this node is its own metadata quorum and the only broker there can be: set {key_name}=1"
