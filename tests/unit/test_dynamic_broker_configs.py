"""Dynamic broker configs: the controller's checks (controller.dynamic_broker_configs
through controller.config_commands) and how broker-level layers resolve into
topic config defaults (storage.topic_config.topic_defaults_from)."""

from __future__ import annotations

import pytest

from controller.config_commands import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    ConfigChange,
    ConfigOp,
    plan_alter_configs,
)
from controller.dynamic_broker_configs import HONOURED, TOPIC_DEFAULT_CONFIGS
from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import RESOURCE_BROKER, record_api_key
from protocol.errors import ErrorCode
from storage.topic_config import TOPIC_CONFIG_KEYS, topic_defaults_from


def plan(image, ops, *, name="", incremental=True):
    change = ConfigChange(RESOURCE_BROKER, name, [ConfigOp(*op) for op in ops])
    return plan_alter_configs(image, change, incremental=incremental, local_node_id=1)


def applied(image, records) -> MetadataImage:
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset + 1)


@pytest.mark.parametrize("name", ["", "1"])
def test_topic_defaults_are_stored_per_broker_and_cluster_wide(name):
    image = MetadataImage()
    result, records = plan(image, [("log.retention.ms", OP_SET, " 1000 "), ("message.max.bytes", OP_SET, "2048")], name=name)
    assert result.error_code == ErrorCode.NONE, result
    image = applied(image, records)
    assert dict(image.configs_of(RESOURCE_BROKER, name)) == {"log.retention.ms": "1000", "message.max.bytes": "2048"}
    # A later change keeps what it does not name; DELETE removes.
    result, records = plan(image, [("log.retention.ms", OP_DELETE, None)], name=name)
    assert result.error_code == ErrorCode.NONE
    assert dict(applied(image, records).configs_of(RESOURCE_BROKER, name)) == {"message.max.bytes": "2048"}


@pytest.mark.parametrize("incremental", [True, False])
@pytest.mark.parametrize(
    "ops, fragment",
    [
        ([("log.dirs", OP_SET, "/x")], "Cannot update these configs dynamically: Set(log.dirs)"),
        ([("node.id", OP_SET, "3"), ("listeners", OP_SET, "x")], "Cannot update these configs dynamically: Set(node.id)"),
        # Kafka makes only the first synonym dynamic.
        ([("log.retention.hours", OP_SET, "1")], "Cannot update these configs dynamically: Set(log.retention.hours)"),
        ([("no.such.key", OP_SET, "1")], "Cannot update these configs dynamically: Set(no.such.key)"),
        ([("compression.type", OP_SET, "gzip")], "compression.type cannot be updated dynamically by pybroker: "),
        ([("num.io.threads", OP_SET, "4")], "num.io.threads cannot be updated dynamically by pybroker: "),
        ([("listener.name.sasl_ssl.plain.sasl.jaas.config", OP_SET, "x")], "per-listener configs cannot be updated"),
        # Listener TLS files: per broker, with the listener prefix only (as Kafka).
        ([("listener.name.ssl.ssl.keystore.location", OP_SET, "/k")],
         ("Cannot update these configs at default cluster level, broker id must be specified: "
          "Set(listener.name.ssl.ssl.keystore.location)")),
        ([("ssl.keystore.location", OP_SET, "/k")],
         "These security configs can be dynamically updated only per-listener using the listener prefix"),
        ([("log.retention.ms", OP_SET, "soon")], "Invalid value soon for configuration log.retention.ms: "),
        ([("min.insync.replicas", OP_SET, "0")], "Invalid value 0 for configuration min.insync.replicas: "),
        ([("log.cleanup.policy", OP_SET, "forever")], "Invalid value forever for configuration log.cleanup.policy"),
    ],
)
def test_refused_keys_and_values_answer_invalid_request(incremental, ops, fragment):
    result, records = plan(MetadataImage(), ops, incremental=incremental)
    assert (result.error_code, records) == (ErrorCode.INVALID_REQUEST, [])
    assert fragment in result.error_message, result.error_message


def test_unclean_leader_election_is_cluster_wide_only():
    result, records = plan(MetadataImage(), [("unclean.leader.election.enable", OP_SET, "TRUE")], name="")
    assert result.error_code == ErrorCode.NONE
    assert [(r.name, r.value) for r in records] == [("unclean.leader.election.enable", "true")]
    result, records = plan(MetadataImage(), [("unclean.leader.election.enable", OP_SET, "true")], name="1")
    assert (result.error_code, records) == (ErrorCode.INVALID_REQUEST, [])
    assert "only be set cluster-wide" in result.error_message


def test_deleting_any_key_is_allowed_and_a_no_op_when_unset():
    result, records = plan(MetadataImage(), [("log.dirs", OP_DELETE, None)])
    assert (result.error_code, records) == (ErrorCode.NONE, [])


def test_append_and_subtract_on_log_cleanup_policy():
    image = MetadataImage()
    result, records = plan(image, [("log.cleanup.policy", OP_APPEND, "compact")])
    assert result.error_code == ErrorCode.NONE
    image = applied(image, records)  # from Kafka's default, delete
    assert image.broker_configs["log.cleanup.policy"] == "compact,delete"
    result, records = plan(image, [("log.cleanup.policy", OP_SUBTRACT, "delete")])
    assert dict(applied(image, records).broker_configs) == {"log.cleanup.policy": "compact"}
    result, _ = plan(image, [("log.retention.ms", OP_APPEND, "5")])
    assert result.error_code == ErrorCode.INVALID_CONFIG


def test_every_honoured_topic_default_supplies_a_known_topic_config():
    for broker_key, topic_key in TOPIC_DEFAULT_CONFIGS.items():
        assert topic_key in TOPIC_CONFIG_KEYS and broker_key in HONOURED


def test_layers_resolve_per_key_then_synonym():
    per_broker = {"log.retention.ms": "1000"}
    cluster = {"log.retention.ms": "2000", "message.max.bytes": "4096", "log.segment.bytes": "100000"}
    static = {"log.segment.bytes": "200000", "log.retention.hours": "1", "min.insync.replicas": "2"}
    assert topic_defaults_from([per_broker, cluster, static]) == {
        "retention.ms": "1000",
        "max.message.bytes": "4096",
        "segment.bytes": "100000",
        "min.insync.replicas": "2",
    }
    # Without dynamic values the static synonyms count, in Kafka's units.
    assert topic_defaults_from([{}, {}, static])["retention.ms"] == "3600000"
    assert topic_defaults_from([{"log.retention.minutes": "-1"}])["retention.ms"] == "-1"
    assert topic_defaults_from([{"log.roll.hours": "2"}])["segment.ms"] == "7200000"
    # log.retention.ms set anywhere beats a higher layer's .hours (Kafka merges per key first).
    assert topic_defaults_from([{"log.retention.hours": "5"}, {"log.retention.ms": "7"}])["retention.ms"] == "7"
    # A value that does not parse is skipped, never applied.
    assert "segment.bytes" not in topic_defaults_from([{"log.segment.bytes": "lots"}])
