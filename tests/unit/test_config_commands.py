"""Config changes: the pure planning of controller.config_commands, the
MetadataController commands that commit it, and the DescribeConfigs metadata
tables (types, documentation) that must cover every key.
"""

from __future__ import annotations

import uuid

import pytest

from broker.config import BROKER_CONFIG_INFO
from broker.config import KEYS as BROKER_KEYS
from controller.config_commands import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    RESOURCE_BROKER_LOGGER,
    ConfigChange,
    ConfigOp,
    plan_alter_configs,
)
from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import CONFIG_RECORD, RESOURCE_BROKER, RESOURCE_TOPIC, record_api_key
from controller.topic_commands import ClusterDefaults, CreateTopicSpec, plan_create_topic
from protocol.errors import ErrorCode
from storage.topic_config import CONFIG_TYPE_IDS, TOPIC_CONFIG_DOCS, TOPIC_CONFIG_KEYS, TOPIC_CONFIG_TYPES
from tests.quorum_harness import SingleVoterController as MetadataController

ONE_BROKER = ClusterDefaults(broker_ids=(1,), num_partitions=1, replication_factor=1)
NODE = 1


def image_with(name: str = "t", configs: dict | None = None) -> MetadataImage:
    result, records = plan_create_topic(
        MetadataImage(), CreateTopicSpec(name, configs=configs or {}), ONE_BROKER, uuid.UUID(int=7)
    )
    assert result.error_code == ErrorCode.NONE, result
    return apply_records(MetadataImage(), [(record_api_key(r), r) for r in records], len(records) - 1)


def plan(image, ops, *, name="t", kind=RESOURCE_TOPIC, incremental=True):
    change = ConfigChange(kind, name, [ConfigOp(*op) for op in ops])
    return plan_alter_configs(image, change, incremental=incremental, local_node_id=NODE)


def applied(image, records) -> dict:
    new = apply_records(image, [(record_api_key(r), r) for r in records], image.offset + 1)
    return dict(new.topics["t"].configs)


def as_changes(records) -> dict:
    return {(r.resource_type, r.resource_name, r.name): r.value for r in records}


# --------------------------------------------------------------------------- incremental


def test_set_writes_one_config_record_per_changed_key():
    image = image_with(configs={"retention.ms": "1000"})
    result, records = plan(image, [("segment.bytes", OP_SET, "1048576"), ("retention.ms", OP_SET, "1000")])
    assert result.error_code == ErrorCode.NONE and result.error_message is None
    # retention.ms keeps its value: no record for it.
    assert as_changes(records) == {(RESOURCE_TOPIC, "t", "segment.bytes"): "1048576"}
    assert all(record_api_key(r) == CONFIG_RECORD.api_key for r in records)
    assert applied(image, records) == {"retention.ms": "1000", "segment.bytes": "1048576"}


def test_set_normalises_like_create_topics():
    image = image_with()
    _, records = plan(image, [("cleanup.policy", OP_SET, "delete, compact"), ("segment.ms", OP_SET, " 60000 ")])
    assert applied(image, records) == {"cleanup.policy": "compact,delete", "segment.ms": "60000"}


def test_delete_removes_the_override_and_deleting_an_absent_key_is_a_no_op():
    image = image_with(configs={"retention.ms": "1000", "segment.ms": "5000"})
    result, records = plan(
        image,
        [("retention.ms", OP_DELETE, None), ("max.message.bytes", OP_DELETE, None), ("no.such.key", OP_DELETE, None)],
    )
    assert result.error_code == ErrorCode.NONE
    assert as_changes(records) == {(RESOURCE_TOPIC, "t", "retention.ms"): None}
    assert applied(image, records) == {"segment.ms": "5000"}


def test_append_starts_from_the_default_and_skips_items_already_present():
    image = image_with()
    _, records = plan(image, [("cleanup.policy", OP_APPEND, "compact")])
    assert applied(image, records) == {"cleanup.policy": "compact,delete"}
    image = image_with(configs={"cleanup.policy": "compact"})
    result, records = plan(image, [("cleanup.policy", OP_APPEND, "compact")])
    assert result.error_code == ErrorCode.NONE and records == []


def test_subtract_removes_items_and_refuses_an_empty_policy():
    image = image_with(configs={"cleanup.policy": "compact,delete"})
    _, records = plan(image, [("cleanup.policy", OP_SUBTRACT, "delete")])
    assert applied(image, records) == {"cleanup.policy": "compact"}
    # Subtracting what is not there changes nothing.
    result, records = plan(
        image_with(configs={"cleanup.policy": "compact"}), [("cleanup.policy", OP_SUBTRACT, "delete")]
    )
    assert result.error_code == ErrorCode.NONE and records == []
    result, records = plan(image, [("cleanup.policy", OP_SUBTRACT, "compact,delete")])
    assert result.error_code == ErrorCode.INVALID_CONFIG and records == []
    assert "cleanup.policy" in result.error_message


@pytest.mark.parametrize("op, label", [(OP_APPEND, "APPEND"), (OP_SUBTRACT, "SUBTRACT")])
@pytest.mark.parametrize("key", ["segment.bytes", "no.such.key"])
def test_append_and_subtract_only_apply_to_list_configs(op, label, key):
    result, records = plan(image_with(), [(key, op, "1")])
    assert (result.error_code, records) == (ErrorCode.INVALID_CONFIG, [])
    assert result.error_message == f"Can't {label} to key {key} because its type is not LIST."


@pytest.mark.parametrize(
    "ops, fragment",
    [
        ([("segment.bytes", OP_SET, "lots")], "segment.bytes"),
        ([("segment.bytes", OP_SET, "-5")], "segment.bytes"),
        ([("message.timestamp.type", OP_SET, "Yesterday")], "message.timestamp.type"),
        ([("no.such.key", OP_SET, "1")], "no.such.key"),
    ],
)
def test_invalid_names_and_values_are_invalid_config(ops, fragment):
    image = image_with(configs={"retention.ms": "1000"})
    result, records = plan(image, ops)
    assert result.error_code == ErrorCode.INVALID_CONFIG and records == []
    assert fragment in result.error_message


def test_one_bad_entry_fails_the_whole_resource():
    result, records = plan(image_with(), [("segment.ms", OP_SET, "1000"), ("segment.bytes", OP_SET, "x")])
    assert result.error_code == ErrorCode.INVALID_CONFIG and records == []


@pytest.mark.parametrize(
    "ops, message",
    [
        ([("segment.ms", OP_SET, "1"), ("segment.ms", OP_DELETE, None)], "Error due to duplicate config keys"),
        ([("segment.ms", OP_SET, None)], "Null value not supported for : segment.ms"),
        ([("cleanup.policy", OP_APPEND, None)], "Null value not supported for : cleanup.policy"),
        ([("segment.ms", 9, "1")], "Unknown operation type 9"),
    ],
)
def test_malformed_entries_are_invalid_request(ops, message):
    result, records = plan(image_with(), ops)
    assert (result.error_code, result.error_message, records) == (ErrorCode.INVALID_REQUEST, message, [])


def test_unknown_topic_is_checked_after_the_configs():
    result, records = plan(image_with(), [("segment.ms", OP_SET, "1000")], name="missing")
    assert (result.error_code, records) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    assert "missing" in result.error_message
    # As in Kafka, a config error wins over the missing topic.
    result, _ = plan(image_with(), [("segment.ms", OP_SET, "soon")], name="missing")
    assert result.error_code == ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize(
    "name, code",
    [
        ("", ErrorCode.INVALID_REQUEST),
        ("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("a" * 250, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ],
)
def test_topic_resource_names_are_checked(name, code):
    result, records = plan(image_with(), [("segment.ms", OP_SET, "1000")], name=name)
    assert (result.error_code, records) == (code, [])


@pytest.mark.parametrize("incremental", [True, False])
@pytest.mark.parametrize(
    "kind, name, fragment",
    [
        (RESOURCE_BROKER, "", "Cannot update these configs dynamically: Set(num.partitions)"),
        (RESOURCE_BROKER, "1", "Cannot update these configs dynamically: Set(num.partitions)"),
        (RESOURCE_BROKER, "2", "Unexpected broker id, expected 1, but received 2"),
        (RESOURCE_BROKER, "one", "Node id must be an integer, but it is: one"),
        (16, "sub", "CLIENT_METRICS configs are not supported"),
        (32, "group", "GROUP configs are not supported"),
        (99, "x", "Unknown resource type 99"),
    ],
)
def test_other_resources_are_refused(incremental, kind, name, fragment):
    result, records = plan(
        image_with(), [("num.partitions", OP_SET, "3")], name=name, kind=kind, incremental=incremental
    )
    assert (result.error_code, records) == (ErrorCode.INVALID_REQUEST, [])
    assert fragment in result.error_message
    assert (result.resource_type, result.resource_name) == (kind, name)


@pytest.mark.parametrize("name", ["", "1"])
def test_replication_throttle_rates_are_dynamic_broker_configs(name):
    image = image_with()
    result, records = plan(image, [("leader.replication.throttled.rate", OP_SET, "1048576")], name=name, kind=RESOURCE_BROKER)
    assert result.error_code == ErrorCode.NONE
    assert [(r.resource_type, r.resource_name, r.name, r.value) for r in records] == [
        (RESOURCE_BROKER, name, "leader.replication.throttled.rate", "1048576")
    ]
    image = apply_records(image, [(record_api_key(r), r) for r in records], image.offset + 1)
    assert dict(image.configs_of(RESOURCE_BROKER, name)) == {"leader.replication.throttled.rate": "1048576"}
    result, records = plan(image, [("leader.replication.throttled.rate", OP_DELETE, None)], name=name, kind=RESOURCE_BROKER)
    assert result.error_code == ErrorCode.NONE and [r.value for r in records] == [None]
    result, records = plan(image, [("follower.replication.throttled.rate", OP_SET, "-5")], name=name, kind=RESOURCE_BROKER)
    assert (result.error_code, records) == (ErrorCode.INVALID_REQUEST, [])  # Kafka's answer for broker configs


def test_broker_logger_is_refused_and_unknown_to_legacy_alter_configs():
    result, _ = plan(image_with(), [("kafka", OP_SET, "DEBUG")], name="1", kind=RESOURCE_BROKER_LOGGER)
    assert result.error_code == ErrorCode.INVALID_REQUEST and "BROKER_LOGGER" in result.error_message
    result, _ = plan(
        image_with(), [("kafka", OP_SET, "DEBUG")], name="1", kind=RESOURCE_BROKER_LOGGER, incremental=False
    )
    assert (result.error_code, result.error_message) == (ErrorCode.INVALID_REQUEST, "Unknown resource type 8")


# --------------------------------------------------------------------------- legacy AlterConfigs


def test_legacy_alter_replaces_every_override():
    image = image_with(configs={"retention.ms": "1000", "segment.ms": "5000"})
    result, records = plan(
        image, [("segment.ms", OP_SET, "6000"), ("max.message.bytes", OP_SET, "2048")], incremental=False
    )
    assert result.error_code == ErrorCode.NONE
    assert as_changes(records) == {
        (RESOURCE_TOPIC, "t", "max.message.bytes"): "2048",
        (RESOURCE_TOPIC, "t", "retention.ms"): None,
        (RESOURCE_TOPIC, "t", "segment.ms"): "6000",
    }
    assert applied(image, records) == {"segment.ms": "6000", "max.message.bytes": "2048"}


def test_legacy_alter_with_no_entries_clears_the_overrides():
    image = image_with(configs={"retention.ms": "1000"})
    _, records = plan(image, [], incremental=False)
    assert applied(image, records) == {}


def test_legacy_alter_refuses_null_values_and_bad_values():
    result, records = plan(image_with(), [("segment.ms", OP_SET, None)], incremental=False)
    assert (result.error_code, records) == (ErrorCode.INVALID_REQUEST, [])
    result, records = plan(image_with(), [("segment.ms", OP_SET, "0")], incremental=False)
    assert (result.error_code, records) == (ErrorCode.INVALID_CONFIG, [])


# --------------------------------------------------------------------------- the controller


@pytest.fixture
def controllers(tmp_path):
    opened: list[MetadataController] = []

    def make() -> MetadataController:
        counter = [0]

        def new_uuid():
            counter[0] += 1
            return uuid.UUID(int=counter[0])

        c = MetadataController(tmp_path, ONE_BROKER, new_uuid=new_uuid)
        opened.append(c)
        return c

    yield make
    for c in opened:
        try:
            c.close()
        except Exception:
            pass


def topic_change(name, *ops):
    return ConfigChange(RESOURCE_TOPIC, name, [ConfigOp(*op) for op in ops])


def test_controller_commits_and_replays_config_changes(controllers):
    c = controllers()
    [created] = c.create_topics([CreateTopicSpec("t", configs={"retention.ms": "1000"})])
    assert created.error_code == ErrorCode.NONE
    seen = []
    c.subscribe(lambda old, new: seen.append((dict(old.topics["t"].configs), dict(new.topics["t"].configs))))
    [result] = c.alter_configs(
        [topic_change("t", ("segment.bytes", OP_SET, "1048576"), ("retention.ms", OP_DELETE, None))],
        incremental=True,
        local_node_id=NODE,
    )
    assert result.error_code == ErrorCode.NONE
    assert dict(c.image.topics["t"].configs) == {"segment.bytes": "1048576"}
    assert seen == [({"retention.ms": "1000"}, {"segment.bytes": "1048576"})]
    [result] = c.alter_configs(
        [topic_change("t", ("cleanup.policy", OP_SET, "compact"))], incremental=False, local_node_id=NODE
    )
    assert result.error_code == ErrorCode.NONE
    c.close()
    reopened = controllers()
    assert dict(reopened.image.topics["t"].configs) == {"cleanup.policy": "compact"}


def test_validate_only_checks_everything_and_writes_nothing(controllers):
    c = controllers()
    c.create_topics([CreateTopicSpec("t")])
    before_image, before_end = c.image, c.raft_log.end_offset
    seen = []
    c.subscribe(lambda old, new: seen.append(new))
    results = c.alter_configs(
        [topic_change("t", ("segment.ms", OP_SET, "1000")), topic_change("nope", ("segment.ms", OP_SET, "1000"))],
        incremental=True,
        validate_only=True,
        local_node_id=NODE,
    )
    assert [r.error_code for r in results] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert c.image is before_image and c.raft_log.end_offset == before_end and seen == []
    [result] = c.alter_configs(
        [topic_change("t", ("segment.ms", OP_SET, "x"))], incremental=False, validate_only=True, local_node_id=NODE
    )
    assert result.error_code == ErrorCode.INVALID_CONFIG


def test_resources_succeed_or_fail_independently_in_one_commit(controllers):
    c = controllers()
    c.create_topics([CreateTopicSpec("a"), CreateTopicSpec("b")])
    end = c.raft_log.end_offset
    results = c.alter_configs(
        [
            topic_change("a", ("segment.ms", OP_SET, "1000")),
            topic_change("b", ("segment.ms", OP_SET, "never")),
            ConfigChange(RESOURCE_BROKER, "1", [ConfigOp("num.partitions", OP_SET, "3")]),
        ],
        incremental=True,
        local_node_id=NODE,
    )
    assert [r.error_code for r in results] == [ErrorCode.NONE, ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_REQUEST]
    assert dict(c.image.topics["a"].configs) == {"segment.ms": "1000"}
    assert dict(c.image.topics["b"].configs) == {}
    assert c.image.broker_configs == {}
    assert c.raft_log.end_offset == end + 1  # one record, one batch


def test_a_resource_named_twice_is_refused_every_time(controllers):
    c = controllers()
    c.create_topics([CreateTopicSpec("t")])
    results = c.alter_configs(
        [topic_change("t", ("segment.ms", OP_SET, "1000")), topic_change("t", ("segment.ms", OP_SET, "2000"))],
        incremental=True,
        local_node_id=NODE,
    )
    assert [(r.error_code, r.error_message) for r in results] == [
        (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
    ] * 2
    assert dict(c.image.topics["t"].configs) == {}


def test_a_recreated_topic_starts_without_the_old_overrides(controllers):
    c = controllers()
    c.create_topics([CreateTopicSpec("t")])
    c.alter_configs([topic_change("t", ("segment.ms", OP_SET, "1000"))], incremental=True, local_node_id=NODE)
    c.delete_topics([("t", None)])
    c.create_topics([CreateTopicSpec("t")])
    assert dict(c.image.topics["t"].configs) == {}


# --------------------------------------------------------------------------- describe metadata


def test_every_topic_config_has_a_type_and_documentation():
    assert set(TOPIC_CONFIG_TYPES) == set(TOPIC_CONFIG_KEYS)
    assert set(TOPIC_CONFIG_DOCS) == set(TOPIC_CONFIG_KEYS)
    assert set(TOPIC_CONFIG_TYPES.values()) <= set(CONFIG_TYPE_IDS)
    assert all(doc.strip() for doc in TOPIC_CONFIG_DOCS.values())


def test_every_broker_key_has_a_type_and_documentation():
    canonical = {key.name for key in BROKER_KEYS.values()}
    missing = canonical - set(BROKER_CONFIG_INFO)
    assert not missing, f"add DescribeConfigs type and documentation for {sorted(missing)} to BROKER_CONFIG_INFO"
    assert set(BROKER_CONFIG_INFO) <= canonical
    assert {type_name for type_name, _ in BROKER_CONFIG_INFO.values()} <= set(CONFIG_TYPE_IDS)
