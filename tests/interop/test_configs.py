"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs through confluent-kafka's
AdminClient and kafka-python's KafkaAdminClient, plus raw requests for what the
clients hide (synonym order, every version, errors they never send).

The module's broker sets ``message.max.bytes`` in its config, so that topic
config shows the STATIC_BROKER_CONFIG source; everything else is at Kafka's
defaults.
"""

from __future__ import annotations

import time

import pytest

from protocol.records import build_batch
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from storage.topic_config import TOPIC_CONFIG_KEYS
from tests.conftest import BrokerProcess, wait_until
from tests.interop._support import RawConnection, create_topic, produce_raw, topic_partition_dirs, unique_topic

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_CONFIG = 40
INVALID_REQUEST = 42

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
# DescribeConfigsResponse.ConfigSource ids.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
# DescribeConfigsResponse.ConfigType ids.
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 3, 5, 6, 7

STATIC_MESSAGE_MAX_BYTES = "2000000"

# Kafka 4.0's topic config defaults (LogConfig / ServerLogConfigs).
KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": str(2**63 - 1),
    "flush.ms": str(2**63 - 1),
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
    "max.compaction.lag.ms": str(2**63 - 1),
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": str(2**63 - 1),
    "message.timestamp.after.max.ms": "3600000",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}
# Schema validation on produce: Confluent Server's and Redpanda's topic configs, and pybroker's mode.
SCHEMA_VALIDATION_DEFAULTS = {
    "confluent.key.schema.validation": "false",
    "confluent.value.schema.validation": "false",
    "redpanda.key.schema.id.validation": "false",
    "redpanda.value.schema.id.validation": "false",
    "confluent.key.subject.name.strategy": "io.confluent.kafka.serializers.subject.TopicNameStrategy",
    "confluent.value.subject.name.strategy": "io.confluent.kafka.serializers.subject.TopicNameStrategy",
    "redpanda.key.subject.name.strategy": "io.confluent.kafka.serializers.subject.TopicNameStrategy",
    "redpanda.value.subject.name.strategy": "io.confluent.kafka.serializers.subject.TopicNameStrategy",
    "schema.validation.mode": "id",
}

DESCRIBE = APIS_BY_NAME["DescribeConfigs"]
ALTER = APIS_BY_NAME["AlterConfigs"]
INCREMENTAL = APIS_BY_NAME["IncrementalAlterConfigs"]
DQ = struct_classes(DESCRIBE.request)
AQ = struct_classes(ALTER.request)
IQ = struct_classes(INCREMENTAL.request)


@pytest.fixture(scope="module")
def cfg_broker(tmp_path_factory):
    broker = BrokerProcess(
        tmp_path_factory.mktemp("configs-broker"), {"message.max.bytes": STATIC_MESSAGE_MAX_BYTES}
    ).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def cadmin(cfg_broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cfg_broker.bootstrap})


@pytest.fixture(scope="module")
def kadmin(cfg_broker):
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cfg_broker.bootstrap, request_timeout_ms=30000)
    yield admin
    admin.close()


# --------------------------------------------------------------------------- helpers


def c_describe(cadmin, resource_type, name) -> dict:
    """confluent describe_configs of one resource: {key: ConfigEntry}."""
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(resource_type, name)
    return cadmin.describe_configs([resource], request_timeout=30)[resource].result(30)


def c_error(future) -> int:
    """The Kafka error code a confluent admin future ends with (0 for success)."""
    from confluent_kafka import KafkaException

    try:
        future.result(30)
        return NONE
    except KafkaException as exc:
        return exc.args[0].code()


def c_incremental(cadmin, topic, ops, *, validate_only=False, resource_type=None) -> int:
    """ops: [(name, op name, value)]; returns the resource's error code."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType[op]) for name, op, value in ops]
    resource = ConfigResource(resource_type or ResourceType.TOPIC, topic, incremental_configs=entries)
    futures = cadmin.incremental_alter_configs([resource], validate_only=validate_only, request_timeout=30)
    return c_error(futures[resource])


def raw_describe(bootstrap, resources, *, version=4, synonyms=True, documentation=True):
    """resources: [(type, name, keys or None)]; returns the response's results."""
    body = DQ.DescribeConfigsRequest(
        resources=[
            DQ.DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=k) for t, n, k in resources
        ],
        include_synonyms=synonyms,
        include_documentation=documentation,
    )
    with RawConnection(bootstrap) as conn:
        return conn.request(DESCRIBE, version, body).results


def raw_topic_configs(bootstrap, topic, **kwargs) -> dict:
    [result] = raw_describe(bootstrap, [(TOPIC, topic, None)], **kwargs)
    assert result.error_code == NONE, (result.error_code, result.error_message)
    return {c.name: c for c in result.configs}


def raw_incremental(bootstrap, resources, *, validate_only=False, version=1):
    """resources: [(type, name, [(key, op, value)])]; returns the responses."""
    body = IQ.IncrementalAlterConfigsRequest(
        resources=[
            IQ.AlterConfigsResource(
                resource_type=t,
                resource_name=n,
                configs=[IQ.AlterableConfig(name=k, config_operation=o, value=v) for k, o, v in entries],
            )
            for t, n, entries in resources
        ],
        validate_only=validate_only,
    )
    with RawConnection(bootstrap) as conn:
        return conn.request(INCREMENTAL, version, body).responses


def raw_alter(bootstrap, resources, *, validate_only=False, version=2):
    """Legacy AlterConfigs; resources: [(type, name, {key: value})]."""
    body = AQ.AlterConfigsRequest(
        resources=[
            AQ.AlterConfigsResource(
                resource_type=t, resource_name=n, configs=[AQ.AlterableConfig(name=k, value=v) for k, v in cfg.items()]
            )
            for t, n, cfg in resources
        ],
        validate_only=validate_only,
    )
    with RawConnection(bootstrap) as conn:
        return conn.request(ALTER, version, body).responses


def batch_of(size: int) -> bytes:
    return build_batch([(None, b"x" * size, [], int(time.time() * 1000))])


def overrides(cadmin, topic) -> dict[str, str]:
    from confluent_kafka.admin import ConfigSource, ResourceType

    return {
        k: e.value
        for k, e in c_describe(cadmin, ResourceType.TOPIC, topic).items()
        if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }


# --------------------------------------------------------------------------- DescribeConfigs


def test_confluent_describe_topic_lists_every_config_with_its_source(cfg_broker, cadmin):
    from confluent_kafka.admin import ConfigSource, ResourceType

    topic = unique_topic("cfg-all")
    create_topic(cfg_broker.bootstrap, topic, configs={"retention.ms": "1000"})
    entries = c_describe(cadmin, ResourceType.TOPIC, topic)
    assert set(entries) == set(TOPIC_CONFIG_KEYS) == set(KAFKA_TOPIC_DEFAULTS) | set(SCHEMA_VALIDATION_DEFAULTS)
    got = {k: (e.value, e.source, e.is_default, e.is_read_only, e.is_sensitive) for k, e in entries.items()}
    defaults = {**KAFKA_TOPIC_DEFAULTS, **SCHEMA_VALIDATION_DEFAULTS}
    want = {k: (v, ConfigSource.DEFAULT_CONFIG.value, True, False, False) for k, v in defaults.items()}
    want["retention.ms"] = ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False, False, False)
    want["max.message.bytes"] = (STATIC_MESSAGE_MAX_BYTES, ConfigSource.STATIC_BROKER_CONFIG.value, False, False, False)
    assert got == want


def test_alter_shows_the_override_first_in_the_synonyms(cfg_broker, cadmin):
    topic = unique_topic("cfg-syn")
    create_topic(cfg_broker.bootstrap, topic)
    assert (
        c_incremental(cadmin, topic, [("max.message.bytes", "SET", "5000"), ("segment.bytes", "SET", "2097152")])
        == NONE
    )
    configs = raw_topic_configs(cfg_broker.bootstrap, topic)

    def chain(name):
        return [(s.name, s.value, s.source) for s in configs[name].synonyms]

    assert (configs["max.message.bytes"].value, configs["max.message.bytes"].config_source) == (
        "5000",
        DYNAMIC_TOPIC_CONFIG,
    )
    assert chain("max.message.bytes") == [
        ("max.message.bytes", "5000", DYNAMIC_TOPIC_CONFIG),
        ("message.max.bytes", STATIC_MESSAGE_MAX_BYTES, STATIC_BROKER_CONFIG),
        ("message.max.bytes", "1048588", DEFAULT_CONFIG),
    ]
    assert chain("segment.bytes") == [
        ("segment.bytes", "2097152", DYNAMIC_TOPIC_CONFIG),
        ("log.segment.bytes", "1073741824", DEFAULT_CONFIG),
    ]
    assert chain("compression.type") == [("compression.type", "producer", DEFAULT_CONFIG)]
    # Kafka drops synonyms ahead of the primary broker key: log.roll.ms has no default.
    assert chain("segment.ms") == []
    assert configs["segment.ms"].config_source == DEFAULT_CONFIG
    types = {
        name: configs[name].config_type
        for name in (
            "cleanup.policy",
            "segment.bytes",
            "segment.ms",
            "preallocate",
            "min.cleanable.dirty.ratio",
            "compression.type",
        )
    }
    assert types == {
        "cleanup.policy": TYPE_LIST,
        "segment.bytes": TYPE_INT,
        "segment.ms": TYPE_LONG,
        "preallocate": TYPE_BOOLEAN,
        "min.cleanable.dirty.ratio": TYPE_DOUBLE,
        "compression.type": TYPE_STRING,
    }
    assert all(c.documentation for c in configs.values())
    # Without the flags: no synonyms, no documentation.
    bare = raw_topic_configs(cfg_broker.bootstrap, topic, synonyms=False, documentation=False)
    assert all(c.synonyms == [] and c.documentation is None for c in bare.values())
    assert bare["max.message.bytes"].config_source == DYNAMIC_TOPIC_CONFIG

    assert c_incremental(cadmin, topic, [("max.message.bytes", "DELETE", None)]) == NONE
    after = raw_topic_configs(cfg_broker.bootstrap, topic)["max.message.bytes"]
    assert (after.value, after.config_source, after.synonyms[0].source) == (
        STATIC_MESSAGE_MAX_BYTES,
        STATIC_BROKER_CONFIG,
        STATIC_BROKER_CONFIG,
    )


@pytest.mark.parametrize("version", range(5))
def test_describe_configs_every_version(cfg_broker, version):
    topic = unique_topic("cfg-ver")
    create_topic(cfg_broker.bootstrap, topic, configs={"segment.ms": "60000"})
    configs = raw_topic_configs(cfg_broker.bootstrap, topic, version=version)
    assert set(configs) == set(TOPIC_CONFIG_KEYS)
    assert configs["segment.ms"].value == "60000"
    if version == 0:
        # v0 has no source, only is_default.
        assert (configs["segment.ms"].is_default, configs["retention.ms"].is_default) == (False, True)
        assert configs["max.message.bytes"].is_default is False  # set in the broker's config
    else:
        assert configs["segment.ms"].config_source == DYNAMIC_TOPIC_CONFIG
        assert configs["retention.ms"].config_source == DEFAULT_CONFIG
        assert configs["segment.ms"].synonyms[0].name == "segment.ms"
    if version >= 3:
        assert configs["segment.ms"].config_type == TYPE_LONG and configs["segment.ms"].documentation


def test_configuration_keys_select_entries(cfg_broker):
    topic = unique_topic("cfg-keys")
    create_topic(cfg_broker.bootstrap, topic)
    [picked, everything] = raw_describe(
        cfg_broker.bootstrap, [(TOPIC, topic, ["segment.ms", "no.such.config", "cleanup.policy"]), (TOPIC, topic, [])]
    )
    assert picked.error_code == NONE
    assert sorted(c.name for c in picked.configs) == ["cleanup.policy", "segment.ms"]
    assert {c.name for c in everything.configs} == set(TOPIC_CONFIG_KEYS)


def test_describe_errors(cfg_broker, cadmin):
    from confluent_kafka.admin import ConfigResource, ResourceType

    missing = ConfigResource(ResourceType.TOPIC, unique_topic("cfg-missing"))
    assert c_error(cadmin.describe_configs([missing], request_timeout=30)[missing]) == UNKNOWN_TOPIC_OR_PARTITION
    results = raw_describe(
        cfg_broker.bootstrap,
        [
            (TOPIC, "bad/name", None),
            (BROKER, "2", None),
            (BROKER, "one", None),
            (BROKER_LOGGER, "1", None),
            (99, "x", None),
        ],
    )
    assert [(r.resource_type, r.resource_name, r.error_code, r.configs) for r in results] == [
        (TOPIC, "bad/name", INVALID_TOPIC_EXCEPTION, []),
        (BROKER, "2", INVALID_REQUEST, []),
        (BROKER, "one", INVALID_REQUEST, []),
        (BROKER_LOGGER, "1", INVALID_REQUEST, []),
        (99, "x", INVALID_REQUEST, []),
    ]
    assert "expected 1" in results[1].error_message


def test_describe_broker(cfg_broker, cadmin, kadmin):
    from confluent_kafka.admin import ConfigSource, ResourceType
    from kafka.admin import ConfigResource, ConfigResourceType

    entries = c_describe(cadmin, ResourceType.BROKER, "1")
    assert entries["message.max.bytes"].value == STATIC_MESSAGE_MAX_BYTES
    assert entries["message.max.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert entries["listeners"].value == "PLAINTEXT://127.0.0.1:0"
    assert entries["listeners"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert (entries["num.partitions"].value, entries["num.partitions"].source) == (
        "1",
        ConfigSource.DEFAULT_CONFIG.value,
    )
    assert entries["auto.create.topics.enable"].value == "true"
    # Only the dynamic broker configs pybroker applies at run time are writable.
    from controller.dynamic_broker_configs import HONOURED

    assert {name for name, e in entries.items() if not e.is_read_only} == set(HONOURED)
    dynamic = {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}
    for name in dynamic:
        assert (entries[name].value, entries[name].source, entries[name].is_read_only) == (
            str(2**63 - 1), ConfigSource.DEFAULT_CONFIG.value, False
        )

    result = kadmin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, "1", ["node.id", "log.segment.bytes", "bogus"])], config_filter="all"
    )
    got = result["broker"]["1"]
    assert set(got) == {"node.id", "log.segment.bytes"}
    assert (got["node.id"]["value"], got["node.id"]["config_type"]) == ("1", "INT")
    assert got["log.segment.bytes"]["config_source"] == "DEFAULT_CONFIG"

    # The cluster-wide resource lists dynamic defaults only: pybroker has none.
    [cluster] = raw_describe(cfg_broker.bootstrap, [(BROKER, "", None)])
    assert (cluster.error_code, cluster.configs) == (NONE, [])


# --------------------------------------------------------------------------- IncrementalAlterConfigs / AlterConfigs


def test_confluent_incremental_set_delete_append_subtract(cfg_broker, cadmin):
    topic = unique_topic("cfg-incr")
    create_topic(cfg_broker.bootstrap, topic, configs={"retention.ms": "1000"})
    assert (
        c_incremental(cadmin, topic, [("segment.ms", "SET", "60000"), ("cleanup.policy", "APPEND", "compact")]) == NONE
    )
    got = overrides(cadmin, topic)
    assert set(got["cleanup.policy"].split(",")) == {"compact", "delete"}
    assert (got["segment.ms"], got["retention.ms"]) == ("60000", "1000")
    assert (
        c_incremental(cadmin, topic, [("cleanup.policy", "SUBTRACT", "delete"), ("retention.ms", "DELETE", None)])
        == NONE
    )
    assert overrides(cadmin, topic) == {"cleanup.policy": "compact", "segment.ms": "60000"}
    assert c_incremental(cadmin, topic, [("segment.ms", "DELETE", None), ("cleanup.policy", "DELETE", None)]) == NONE
    assert overrides(cadmin, topic) == {}


def test_confluent_legacy_alter_configs_replaces_every_override(cfg_broker, cadmin):
    from confluent_kafka.admin import ConfigResource, ResourceType

    topic = unique_topic("cfg-legacy")
    create_topic(cfg_broker.bootstrap, topic, configs={"retention.ms": "1000", "segment.ms": "5000"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "7000", "cleanup.policy": "compact"})
    with pytest.warns(DeprecationWarning):
        futures = cadmin.alter_configs([resource], request_timeout=30)
    assert c_error(futures[resource]) == NONE
    assert overrides(cadmin, topic) == {"segment.ms": "7000", "cleanup.policy": "compact"}


def test_validate_only_changes_nothing(cfg_broker, cadmin):
    topic = unique_topic("cfg-validate")
    create_topic(cfg_broker.bootstrap, topic, configs={"retention.ms": "1000"})
    assert c_incremental(cadmin, topic, [("segment.ms", "SET", "60000")], validate_only=True) == NONE
    assert c_incremental(cadmin, topic, [("segment.ms", "SET", "soon")], validate_only=True) == INVALID_CONFIG
    [legacy] = raw_alter(cfg_broker.bootstrap, [(TOPIC, topic, {"segment.ms": "60000"})], validate_only=True)
    assert legacy.error_code == NONE
    assert overrides(cadmin, topic) == {"retention.ms": "1000"}


def test_kafka_python_describe_and_alter(cfg_broker, kadmin):
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    topic = unique_topic("cfg-kp")
    create_topic(cfg_broker.bootstrap, topic)
    assert kadmin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)]) == {"topic": {topic: {}}}
    # IncrementalAlterConfigs (kafka-python's default when the broker has it).
    result = kadmin.alter_configs(
        [
            ConfigResource(
                ConfigResourceType.TOPIC,
                topic,
                {"segment.ms": "60000", "cleanup.policy": (AlterConfigOp.APPEND, "compact")},
            )
        ]
    )
    assert result == {"topic": {topic: "OK"}}
    # Legacy AlterConfigs: kafka-python re-sends the modified keys it read first.
    result = kadmin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "3600000"})], incremental=False
    )
    assert result == {"topic": {topic: "OK"}}
    modified = kadmin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True)[
        "topic"
    ][topic]
    assert {k: v["value"] for k, v in modified.items()} == {
        "segment.ms": "60000",
        "cleanup.policy": "compact,delete",
        "retention.ms": "3600000",
    }
    assert {v["config_source"] for v in modified.values()} == {"DYNAMIC_TOPIC_CONFIG"}
    assert modified["retention.ms"]["synonyms"][0] == {
        "name": "retention.ms",
        "value": "3600000",
        "source": "DYNAMIC_TOPIC_CONFIG",
    }
    everything = kadmin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")[
        "topic"
    ][topic]
    assert set(everything) == set(TOPIC_CONFIG_KEYS)
    assert everything["max.message.bytes"]["config_source"] == "STATIC_BROKER_CONFIG"

    bad = kadmin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "forever"})])
    assert bad["topic"][topic].startswith("[Error 40]")
    missing = unique_topic("cfg-kp-missing")
    result = kadmin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, missing, {"retention.ms": "1"})], raise_on_unknown=False
    )
    assert result["topic"][missing].startswith("[Error 3]")


def test_alter_errors(cfg_broker, cadmin):
    from confluent_kafka.admin import ResourceType

    topic = unique_topic("cfg-err")
    create_topic(cfg_broker.bootstrap, topic, configs={"retention.ms": "1000"})
    missing = unique_topic("cfg-err-missing")
    assert c_incremental(cadmin, missing, [("segment.ms", "SET", "60000")]) == UNKNOWN_TOPIC_OR_PARTITION
    assert c_incremental(cadmin, topic, [("segment.ms", "SET", "sixty")]) == INVALID_CONFIG
    assert c_incremental(cadmin, topic, [("segment.bytes", "SET", "-1")]) == INVALID_CONFIG
    assert c_incremental(cadmin, topic, [("no.such.config", "SET", "1")]) == INVALID_CONFIG
    assert c_incremental(cadmin, topic, [("segment.bytes", "APPEND", "1")]) == INVALID_CONFIG
    assert c_incremental(cadmin, topic, [("retention.ms", "SUBTRACT", "1000")]) == INVALID_CONFIG
    assert (
        c_incremental(cadmin, "1", [("num.partitions", "SET", "3")], resource_type=ResourceType.BROKER)
        == INVALID_REQUEST
    )
    # Nothing of the failed requests was applied.
    assert overrides(cadmin, topic) == {"retention.ms": "1000"}

    responses = raw_incremental(
        cfg_broker.bootstrap,
        [
            (TOPIC, topic, [("segment.bytes", 2, "1")]),
            (BROKER, "1", [("num.partitions", 0, "3")]),
            (BROKER, "", [("num.partitions", 0, "3")]),
            (BROKER_LOGGER, "1", [("root", 0, "DEBUG")]),
        ],
    )
    assert [(r.resource_type, r.resource_name, r.error_code) for r in responses] == [
        (TOPIC, topic, INVALID_CONFIG),
        (BROKER, "1", INVALID_REQUEST),
        (BROKER, "", INVALID_REQUEST),
        (BROKER_LOGGER, "1", INVALID_REQUEST),
    ]
    assert responses[0].error_message == "Can't APPEND to key segment.bytes because its type is not LIST."
    assert responses[1].error_message == "Cannot update these configs dynamically: Set(num.partitions)"
    [legacy_missing, legacy_broker] = raw_alter(
        cfg_broker.bootstrap, [(TOPIC, missing, {"segment.ms": "1"}), (BROKER, "1", {"num.partitions": "3"})]
    )
    assert (legacy_missing.error_code, legacy_broker.error_code) == (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST)


# --------------------------------------------------------------------------- live effect and durability


def test_max_message_bytes_change_takes_effect_at_once(cfg_broker, cadmin):
    topic = unique_topic("cfg-live-size")
    create_topic(cfg_broker.bootstrap, topic)
    assert produce_raw(cfg_broker.bootstrap, topic, batch_of(3000)).error_code == NONE
    assert c_incremental(cadmin, topic, [("max.message.bytes", "SET", "1000")]) == NONE
    assert produce_raw(cfg_broker.bootstrap, topic, batch_of(3000)).error_code == MESSAGE_TOO_LARGE
    assert produce_raw(cfg_broker.bootstrap, topic, batch_of(100)).error_code == NONE
    assert c_incremental(cadmin, topic, [("max.message.bytes", "DELETE", None)]) == NONE
    assert produce_raw(cfg_broker.bootstrap, topic, batch_of(3000)).error_code == NONE


def test_segment_bytes_change_rolls_segments(cfg_broker, cadmin):
    topic = unique_topic("cfg-live-roll")
    create_topic(cfg_broker.bootstrap, topic)
    # Made soon after the creation, by a worker thread.
    [partition_dir] = wait_until(lambda: topic_partition_dirs(cfg_broker.data_dir / "logs", topic), 10)

    def segments() -> int:
        return len(list(partition_dir.glob("*.log")))

    for _ in range(3):
        assert produce_raw(cfg_broker.bootstrap, topic, batch_of(400_000)).error_code == NONE
    assert segments() == 1
    assert c_incremental(cadmin, topic, [("segment.bytes", "SET", "1048576")]) == NONE
    for _ in range(3):
        assert produce_raw(cfg_broker.bootstrap, topic, batch_of(400_000)).error_code == NONE
    assert segments() >= 3


def test_configs_survive_a_restart(broker_factory, tmp_path):
    from confluent_kafka.admin import AdminClient

    data_dir = tmp_path / "restart"
    first = broker_factory(data_dir=data_dir)
    topic = unique_topic("cfg-restart")
    create_topic(first.bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    assert (
        c_incremental(admin, topic, [("max.message.bytes", "SET", "1000"), ("cleanup.policy", "SET", "compact")])
        == NONE
    )
    first.stop()

    second = broker_factory(data_dir=data_dir)
    configs = raw_topic_configs(second.bootstrap, topic)
    assert {k: (c.value, c.config_source) for k, c in configs.items() if c.config_source == DYNAMIC_TOPIC_CONFIG} == {
        "max.message.bytes": ("1000", DYNAMIC_TOPIC_CONFIG),
        "cleanup.policy": ("compact", DYNAMIC_TOPIC_CONFIG),
    }
    assert produce_raw(second.bootstrap, topic, batch_of(3000)).error_code == MESSAGE_TOO_LARGE


def test_message_format_version_is_refused_as_kafka_4_does(cfg_broker, cadmin):
    # Kafka 4.0 removed the key (KIP-724): AlterConfigs and CreateTopics give
    # INVALID_CONFIG, and the message says why (librdkafka's test 0092 still sets it).
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType

    topic = unique_topic("cfg-mfv")
    create_topic(cfg_broker.bootstrap, topic)
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"message.format.version": "0.10.0"})
    with pytest.raises(KafkaException) as refused:
        cadmin.alter_configs([resource], request_timeout=30)[resource].result(30)
    assert refused.value.args[0].code() == INVALID_CONFIG
    assert "KIP-724" in refused.value.args[0].str()
    assert c_incremental(cadmin, topic, [("message.format.version", "SET", "3.0")]) == INVALID_CONFIG
    new = unique_topic("cfg-mfv-new")
    futures = cadmin.create_topics([NewTopic(new, 1, 1, config={"message.format.version": "3.0"})], request_timeout=30)
    assert c_error(futures[new]) == INVALID_CONFIG
    assert overrides(cadmin, topic) == {}
