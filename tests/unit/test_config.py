"""Broker configuration (broker/config.py) and topic configs (storage/topic_config.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import (
    NOT_YET_SUPPORTED,
    ConfigError,
    Listener,
    load_config,
    load_config_file,
    parse_properties,
)
from storage.log import LogConfig
from storage.topic_config import (
    TOPIC_CONFIG_KEYS,
    TopicConfigError,
    effective_topic_config,
    log_config_from,
    validate_topic_configs,
)


def load(values: dict[str, str], **kwargs):
    warnings: list[str] = []
    config = load_config(values, warn=warnings.append, **kwargs)
    return config, warnings


# --------------------------------------------------------------------------- parse_properties


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a=b", {"a": "b"}),
        ("a = b", {"a": "b"}),
        ("a:b", {"a": "b"}),
        ("a : b", {"a": "b"}),
        ("a b", {"a": "b"}),
        ("a\t\tb", {"a": "b"}),
        ("   a=b", {"a": "b"}),
        ("a=b=c", {"a": "b=c"}),
        ("a:=b", {"a": "=b"}),  # the first separator ends the key; the second is value
        ("a=:b", {"a": ":b"}),
        ("key", {"key": ""}),
        ("key=", {"key": ""}),
        ("a=1\na=2", {"a": "2"}),  # the last one wins
        ("k = v # not a comment", {"k": "v # not a comment"}),
        ("log.dirs=/var/lib/kafka/data", {"log.dirs": "/var/lib/kafka/data"}),
        ("listeners=PLAINTEXT://:9092", {"listeners": "PLAINTEXT://:9092"}),
    ],
)
def test_parse_properties_separators(text, expected):
    assert parse_properties(text) == expected


def test_parse_properties_comments_and_blank_lines():
    text = "# a comment\n! another comment\n\n   \n  # indented comment\nnum.partitions=3\n#num.partitions=9\n"
    assert parse_properties(text) == {"num.partitions": "3"}


def test_parse_properties_continuation_lines():
    text = "listeners=PLAINTEXT://a:1,\\\n          PLAINTEXT2://b:2\nnext=1\n"
    assert parse_properties(text) == {"listeners": "PLAINTEXT://a:1,PLAINTEXT2://b:2", "next": "1"}
    # Several continuations in a row; leading whitespace of each is dropped.
    assert parse_properties("a=1\\\n  2\\\n\t3\nb=4") == {"a": "123", "b": "4"}
    # An escaped backslash at the end of a line does not continue it.
    assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}
    # Three backslashes: one escaped backslash plus a continuation.
    assert parse_properties("a=x\\\\\\\n  y") == {"a": "x\\y"}
    # A continued line that looks like a comment is part of the value.
    assert parse_properties("a=1\\\n#2\nb=3") == {"a": "1#2", "b": "3"}
    # A comment line ending in a backslash does not swallow the next line.
    assert parse_properties("#c\\\nb=3") == {"b": "3"}


def test_parse_properties_trailing_backslash_at_end_of_input():
    """java.util.Properties drops a line-continuation backslash on the last line."""
    assert parse_properties("k=v\\") == {"k": "v"}


def test_parse_properties_escapes():
    assert parse_properties("a\\=b=c") == {"a=b": "c"}
    assert parse_properties("a\\:b:c") == {"a:b": "c"}
    assert parse_properties("a\\ b = c") == {"a b": "c"}
    assert parse_properties("k=\\t\\n\\r\\f") == {"k": "\t\n\r\f"}
    assert parse_properties("k=C:\\\\kafka\\\\logs") == {"k": "C:\\kafka\\logs"}
    assert parse_properties("k=\\q") == {"k": "q"}  # an unknown escape is the character itself
    assert parse_properties("k=\\#not a comment") == {"k": "#not a comment"}


def test_parse_properties_unicode_escapes():
    """java.util.Properties decodes \\uXXXX escapes in keys and values."""
    assert parse_properties("k=\\u0041\\u00e9") == {"k": "A\u00e9"}


def test_parse_properties_crlf_line_endings():
    assert parse_properties("a=1\r\nb=2\r\n") == {"a": "1", "b": "2"}


def test_load_config_file(tmp_path, monkeypatch):
    path = tmp_path / "server.properties"
    path.write_text("# test\nnode.id=4\nlog.dirs=data\nnum.partitions : 5\n")
    monkeypatch.chdir(tmp_path)
    warnings: list[str] = []
    config = load_config_file(path, {"num.partitions": "7"}, warn=warnings.append)
    assert config.node_id == 4
    assert config["num.partitions"] == 7  # the override wins over the file
    assert config.log_dirs == [tmp_path / "data"]  # relative to the working directory
    assert warnings == []


def test_load_config_file_missing(tmp_path):
    with pytest.raises(ConfigError) as exc:
        load_config_file(tmp_path / "nope.properties")
    assert "nope.properties" in str(exc.value)


def test_shipped_server_properties_loads_cleanly():
    path = Path(__file__).resolve().parents[2] / "configs" / "server.properties"
    if not path.exists():
        pytest.skip("no configs/server.properties")
    warnings: list[str] = []
    config = load_config(parse_properties(path.read_text()), warn=warnings.append)
    assert config.listeners
    assert not [w for w in warnings if w.startswith("unknown")], warnings


# --------------------------------------------------------------------------- defaults


def test_defaults_match_kafka_documentation():
    config, warnings = load({})
    assert warnings == []
    # Documented Kafka broker defaults.
    assert config["num.partitions"] == 1
    assert config["default.replication.factor"] == 1
    assert config["log.segment.bytes"] == 1073741824
    assert config["message.max.bytes"] == 1048588
    assert config["socket.request.max.bytes"] == 104857600
    assert config["auto.create.topics.enable"] is True
    assert config["delete.topic.enable"] is True
    assert config["log.index.interval.bytes"] == 4096
    assert config["log.roll.hours"] == 168
    assert config["log.roll.ms"] is None
    assert config.log_roll_ms == 168 * 3_600_000 == 604800000
    assert config["log.message.timestamp.type"] == "CreateTime"
    assert config["replica.fetch.max.bytes"] == 1048576
    assert config["fetch.max.bytes"] == 57671680
    assert config["queued.max.requests"] == 500
    assert config["process.roles"] == ["broker", "controller"]
    assert config.explicit == {}


def test_log_roll_ms_wins_over_hours():
    config, _ = load({"log.roll.hours": "2"})
    assert config.log_roll_ms == 7_200_000
    config, _ = load({"log.roll.hours": "2", "log.roll.ms": "1234"})
    assert config.log_roll_ms == 1234
    config, _ = load({"log.roll.ms": ""})  # empty optional key: not set
    assert config.log_roll_ms == 604800000


def test_explicit_values_are_recorded():
    config, _ = load({"num.partitions": "3", "log.segment.bytes": "1048576"})
    assert config.explicit == {"num.partitions": "3", "log.segment.bytes": "1048576"}
    assert config["num.partitions"] == 3
    assert config["log.segment.bytes"] == 1048576


# --------------------------------------------------------------------------- synonyms


def test_broker_id_is_a_synonym_of_node_id():
    config, warnings = load({"broker.id": "5"})
    assert warnings == []
    assert config.node_id == 5
    assert config["broker.id"] == 5
    assert config["node.id"] == 5


@pytest.mark.parametrize(
    "values",
    [
        {"node.id": "3", "broker.id": "9"},
        {"broker.id": "9", "node.id": "3"},
    ],
)
def test_node_id_wins_over_broker_id_in_any_order(values):
    config, _ = load(values)
    assert config.node_id == 3


def test_log_dir_is_a_synonym_of_log_dirs(tmp_path):
    config, _ = load({"log.dir": "/data/a"})
    assert config.log_dirs == [Path("/data/a")]
    config, _ = load({"log.dir": "/data/a", "log.dirs": "/data/b,/data/c"})
    assert config.log_dirs == [Path("/data/b"), Path("/data/c")]
    config, _ = load({"log.dirs": "/data/b", "log.dir": "/data/a"})
    assert config.log_dirs == [Path("/data/b")]


def test_relative_log_dirs_resolve_against_base_dir(tmp_path):
    config, _ = load({"log.dirs": "a, /abs/b ,c"}, base_dir=tmp_path)
    assert config.log_dirs == [tmp_path / "a", Path("/abs/b"), tmp_path / "c"]


def test_log_dirs_default():
    config, _ = load({})
    assert config.log_dirs and all(isinstance(d, Path) for d in config.log_dirs)


# --------------------------------------------------------------------------- warnings


def test_unknown_key_warns_and_is_ignored():
    config, warnings = load({"num.partitons": "3", "num.partitions": "2"})
    assert config["num.partitions"] == 2
    assert len(warnings) == 1
    assert "num.partitons" in warnings[0]
    assert "unknown" in warnings[0]
    assert "num.partitons" not in config.explicit


@pytest.mark.parametrize("key", ["num.io.threads", "num.network.threads", "socket.send.buffer.bytes"])
def test_not_yet_supported_key_warns_differently(key):
    assert key in NOT_YET_SUPPORTED
    config, warnings = load({key: "whatever"})
    assert len(warnings) == 1
    assert key in warnings[0]
    assert "not supported" in warnings[0]
    assert "unknown" not in warnings[0]
    _, unknown = load({"definitely.not.a.kafka.key": "1"})
    assert unknown[0] != warnings[0].replace(key, "definitely.not.a.kafka.key")


def test_not_yet_supported_values_are_not_validated():
    # They are ignored, so a value Kafka would reject must not stop start-up.
    _, warnings = load({"num.io.threads": "not-a-number"})
    assert len(warnings) == 1


def test_message_max_bytes_above_socket_limit_warns():
    _, warnings = load({"message.max.bytes": "2000", "socket.request.max.bytes": "1000"})
    assert any("message.max.bytes" in w for w in warnings)
    _, warnings = load({"message.max.bytes": "1000", "socket.request.max.bytes": "2000"})
    assert warnings == []


# --------------------------------------------------------------------------- invalid values


@pytest.mark.parametrize(
    "key, value",
    [
        ("num.partitions", "abc"),
        ("num.partitions", "1.5"),
        ("num.partitions", ""),
        ("num.partitions", "0"),
        ("num.partitions", "-1"),
        ("node.id", "-1"),
        ("node.id", "2147483648"),
        ("broker.id", "x"),
        ("log.segment.bytes", "13"),
        ("log.segment.bytes", "2147483648"),
        ("message.max.bytes", "-1"),
        ("socket.request.max.bytes", "0"),
        ("fetch.max.bytes", "1023"),
        ("default.replication.factor", "0"),
        ("log.roll.hours", "0"),
        ("log.roll.ms", "0"),
        ("queued.max.requests", "0"),
        ("auto.create.topics.enable", "yes"),
        ("auto.create.topics.enable", "1"),
        ("delete.topic.enable", ""),
        ("log.message.timestamp.type", "createtime"),
        ("listeners", "127.0.0.1:9092"),
        ("listeners", "PLAINTEXT://localhost"),
        ("listeners", "PLAINTEXT://localhost:99999"),
        ("listeners", "PLAINTEXT://a:1,PLAINTEXT://b:2"),
        ("listeners", ""),
        ("advertised.listeners", "garbage"),
        ("process.roles", "controller"),
        ("process.roles", "broker,controller,observer"),
    ],
)
def test_invalid_values_raise_config_error_naming_the_key(key, value):
    with pytest.raises(ConfigError) as exc:
        load_config({key: value}, warn=lambda _: None)
    canonical = {"broker.id": "node.id", "log.dir": "log.dirs"}.get(key, key)
    assert key in str(exc.value) or canonical in str(exc.value), str(exc.value)


def test_process_roles_take_any_order_and_broker_alone_needs_a_quorum():
    """Both roles in any order; "broker" alone has no controller to join unless
    the quorum keys say where it is, and the message points at process.roles."""
    config, _ = load({"process.roles": "controller,broker"})
    assert sorted(config["process.roles"]) == ["broker", "controller"]
    with pytest.raises(ConfigError) as exc:
        load_config({"process.roles": "broker"}, warn=lambda _: None)
    assert "process.roles" in str(exc.value)


def test_integer_values_tolerate_surrounding_whitespace():
    config, _ = load({"num.partitions": " 4 ", "auto.create.topics.enable": " FALSE "})
    assert config["num.partitions"] == 4
    assert config["auto.create.topics.enable"] is False


def test_boundary_values_are_accepted():
    config, _ = load({"log.segment.bytes": "14", "node.id": "0", "fetch.max.bytes": "1024", "message.max.bytes": "0"})
    assert config["log.segment.bytes"] == 14
    assert config.node_id == 0
    config, _ = load({"log.segment.bytes": str(2**31 - 1), "node.id": str(2**31 - 1)})
    assert config["log.segment.bytes"] == 2**31 - 1


def test_advertised_listener_must_name_a_listener():
    with pytest.raises(ConfigError) as exc:
        load_config({"listeners": "PLAINTEXT://127.0.0.1:9092", "advertised.listeners": "OTHER://h:1"}, warn=lambda _: None)
    assert "advertised.listeners" in str(exc.value)


# --------------------------------------------------------------------------- listeners


def test_listeners_parse():
    config, _ = load(
        {
            "listeners": "PLAINTEXT://0.0.0.0:9092, internal://[::1]:9093,EXT://:0",
            # Kafka's rule: a listener not named after a protocol must be mapped.
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,EXT:PLAINTEXT",
        }
    )
    assert config.listeners == [
        Listener("PLAINTEXT", "0.0.0.0", 9092),
        Listener("INTERNAL", "::1", 9093),
        Listener("EXT", "", 0),
    ]
    assert str(config.listeners[0]) == "PLAINTEXT://0.0.0.0:9092"


def test_default_listener():
    config, _ = load({})
    assert config.listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    assert config.advertised_listeners == config.listeners


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::"])
def test_advertised_listeners_default_from_listeners_with_loopback_for_wildcards(host):
    shown = f"[{host}]" if ":" in host else host
    config, _ = load({"listeners": f"PLAINTEXT://{shown}:9094"})
    assert config["advertised.listeners"] is None
    assert config.advertised_listeners == [Listener("PLAINTEXT", "127.0.0.1", 9094)]


def test_advertised_listeners_keep_concrete_hosts_and_explicit_values():
    config, _ = load({"listeners": "PLAINTEXT://10.1.2.3:9092"})
    assert config.advertised_listeners == [Listener("PLAINTEXT", "10.1.2.3", 9092)]
    config, _ = load({"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://broker.example:19092"})
    assert config.advertised_listeners == [Listener("PLAINTEXT", "broker.example", 19092)]
    config, _ = load({"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": ""})
    assert config.advertised_listeners == [Listener("PLAINTEXT", "127.0.0.1", 9092)]


# --------------------------------------------------------------------------- topic configs


def test_validate_topic_configs_accepts_and_normalises():
    result = validate_topic_configs(
        {
            "cleanup.policy": "compact",
            "retention.ms": " 1000 ",
            "segment.bytes": "1048576",
            "min.cleanable.dirty.ratio": "0.25",
            "preallocate": "TRUE",
            "message.timestamp.type": "LogAppendTime",
            "compression.type": "zstd",
        }
    )
    assert result == {
        "cleanup.policy": "compact",
        "retention.ms": "1000",
        "segment.bytes": "1048576",
        "min.cleanable.dirty.ratio": "0.25",
        "preallocate": "TRUE",
        "message.timestamp.type": "LogAppendTime",
        "compression.type": "zstd",
    }


@pytest.mark.parametrize(
    "raw, normalised",
    [
        ("delete", "delete"),
        (" compact ", "compact"),
        ("delete,compact", "compact,delete"),
        ("compact, delete", "compact,delete"),
        ("delete,delete", "delete"),
        ("compact,,delete,", "compact,delete"),
    ],
)
def test_cleanup_policy_normalisation(raw, normalised):
    assert validate_topic_configs({"cleanup.policy": raw}) == {"cleanup.policy": normalised}


@pytest.mark.parametrize(
    "configs, name",
    [
        ({"no.such.config": "1"}, "no.such.config"),
        ({"retention.ms": "abc"}, "retention.ms"),
        ({"retention.ms": "-2"}, "retention.ms"),
        ({"segment.bytes": "13"}, "segment.bytes"),
        ({"segment.bytes": "2147483648"}, "segment.bytes"),
        ({"segment.ms": "0"}, "segment.ms"),
        ({"max.message.bytes": "-1"}, "max.message.bytes"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
        ({"min.cleanable.dirty.ratio": "x"}, "min.cleanable.dirty.ratio"),
        ({"preallocate": "yes"}, "preallocate"),
        ({"cleanup.policy": "remove"}, "cleanup.policy"),
        ({"cleanup.policy": "delete,remove"}, "cleanup.policy"),
        ({"cleanup.policy": ""}, "cleanup.policy"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"message.timestamp.type": "logappendtime"}, "message.timestamp.type"),
        ({"retention.ms": None}, "retention.ms"),
        ({"retention.bytes": "1e9"}, "retention.bytes"),
    ],
)
def test_validate_topic_configs_rejects(configs, name):
    with pytest.raises(TopicConfigError) as exc:
        validate_topic_configs(configs)
    assert name in str(exc.value)


def test_validate_topic_configs_boundaries():
    assert validate_topic_configs({"retention.ms": "-1", "retention.bytes": "-1"}) == {"retention.ms": "-1", "retention.bytes": "-1"}
    assert validate_topic_configs({"segment.bytes": "14", "segment.ms": "1", "max.message.bytes": "0"})
    assert validate_topic_configs({"min.cleanable.dirty.ratio": "0"}) and validate_topic_configs({"min.cleanable.dirty.ratio": "1"})
    assert validate_topic_configs({}) == {}


def test_effective_topic_config_precedence():
    values = effective_topic_config({}, {})
    assert set(values) == set(TOPIC_CONFIG_KEYS)
    # Kafka's documented topic defaults, parsed.
    assert values["segment.bytes"] == 1073741824
    assert values["segment.ms"] == 604800000
    assert values["retention.ms"] == 604800000
    assert values["retention.bytes"] == -1
    assert values["max.message.bytes"] == 1048588
    assert values["index.interval.bytes"] == 4096
    assert values["cleanup.policy"] == "delete"
    assert values["compression.type"] == "producer"
    assert values["message.timestamp.type"] == "CreateTime"
    assert values["min.insync.replicas"] == 1
    assert values["min.cleanable.dirty.ratio"] == 0.5
    assert values["preallocate"] is False
    assert values["unclean.leader.election.enable"] is False

    values = effective_topic_config({"segment.bytes": "5000", "retention.ms": "10"}, {"segment.bytes": "7000"})
    assert values["segment.bytes"] == 7000  # the topic override wins
    assert values["retention.ms"] == 10  # the broker default wins over Kafka's
    assert values["segment.ms"] == 604800000


def test_log_config_from_effective_values():
    values = effective_topic_config(
        {"segment.ms": "3600000"},
        {"segment.bytes": "4096", "index.interval.bytes": "10", "max.message.bytes": "999", "message.timestamp.type": "LogAppendTime"},
    )
    assert log_config_from(values) == LogConfig(
        segment_bytes=4096,
        segment_ms=3600000,
        index_interval_bytes=10,
        max_message_bytes=999,
        message_timestamp_type="LogAppendTime",
    )
    assert log_config_from(effective_topic_config({}, {})) == LogConfig()


def test_every_topic_config_default_is_valid():
    for name, key in TOPIC_CONFIG_KEYS.items():
        assert validate_topic_configs({name: key.default}), name


def test_replica_selector_accepts_only_kafkas_rack_aware_selector():
    from broker.config import RACK_AWARE_REPLICA_SELECTOR, ConfigError, load_config

    assert load_config({"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR})["replica.selector.class"] == RACK_AWARE_REPLICA_SELECTOR
    with pytest.raises(ConfigError):
        load_config({"replica.selector.class": "com.example.MySelector"})


def test_group_consumer_migration_policy_serves_upgrade_and_disabled():
    """Kafka's key parses; the policies this broker follows are accepted (the
    online upgrade, or none), those needing the downgrade are refused by name."""
    assert load_config({})["group.consumer.migration.policy"] == "upgrade"
    assert load_config({"group.consumer.migration.policy": "DISABLED"})["group.consumer.migration.policy"] == "disabled"
    for policy in ("bidirectional", "downgrade"):
        with pytest.raises(ConfigError, match="not served"):
            load_config({"group.consumer.migration.policy": policy})
    with pytest.raises(ConfigError, match="expected upgrade or disabled"):
        load_config({"group.consumer.migration.policy": "sideways"})
