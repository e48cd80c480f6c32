"""Adding partitions to a topic: the pure plan (plan_create_partitions) and the
single-node controller's create_partitions (commit, validate_only, replay).

Error codes and messages are Kafka's (ReplicationControlManager.createPartitions,
ControllerApis.createPartitions).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import record_api_key
from controller.topic_commands import (
    ClusterDefaults,
    CreatePartitionsSpec,
    CreateTopicSpec,
    plan_create_partitions,
    plan_create_topic,
)
from protocol.errors import ErrorCode
from tests.quorum_harness import METADATA_DIR_NAME
from tests.quorum_harness import SingleVoterController as MetadataController

ONE_BROKER = ClusterDefaults(broker_ids=(1,), num_partitions=1, replication_factor=1)
THREE_BROKERS = ClusterDefaults(broker_ids=(3, 1, 2), num_partitions=1, replication_factor=1)


def image_with(*topics: tuple[str, int, int], defaults: ClusterDefaults = ONE_BROKER) -> MetadataImage:
    """An image holding ``(name, partitions, replication_factor)`` topics."""
    image = MetadataImage()
    for i, (name, partitions, replication) in enumerate(topics, start=1):
        result, records = plan_create_topic(
            image, CreateTopicSpec(name, partitions, replication), defaults, uuid.UUID(int=i)
        )
        assert result.error_code == ErrorCode.NONE, result
        image = apply_records(image, [(record_api_key(r), r) for r in records], image.offset + len(records))
    return image


def plan(image, name, count, assignments=None, defaults=ONE_BROKER):
    return plan_create_partitions(image, CreatePartitionsSpec(name, count, assignments), defaults)


# --------------------------------------------------------------------------- plan_create_partitions


def test_new_partitions_get_the_next_ids_and_the_topics_replication_factor():
    image = image_with(("t", 2, 2), defaults=THREE_BROKERS)
    topic_id = image.topics["t"].topic_id
    result, records = plan(image, "t", 5, defaults=THREE_BROKERS)
    assert (result.name, result.error_code, result.error_message) == ("t", ErrorCode.NONE, None)
    assert [record_api_key(r) for r in records] == [3, 3, 3]
    assert [r.partition_id for r in records] == [2, 3, 4]
    for r in records:
        assert r.topic_id == topic_id
        assert len(r.replicas) == 2 and len(set(r.replicas)) == 2 and set(r.replicas) <= {1, 2, 3}
        assert r.isr == r.replicas and r.leader == r.replicas[0]
        assert (r.leader_epoch, r.partition_epoch) == (0, 0)
    # Leadership keeps being spread round-robin past the existing partitions.
    assert len({r.leader for r in records}) == 3
    applied = apply_records(image, [(3, r) for r in records], image.offset + 3)
    assert sorted(applied.topics["t"].partitions) == [0, 1, 2, 3, 4]
    assert applied.topics["t"].partitions[0] == image.topics["t"].partitions[0]  # old partitions untouched


def test_single_broker_places_every_new_partition_on_itself():
    image = image_with(("t", 1, 1))
    result, records = plan(image, "t", 3)
    assert result.error_code == ErrorCode.NONE
    assert [(r.partition_id, r.replicas, r.isr, r.leader) for r in records] == [(1, [1], [1], 1), (2, [1], [1], 1)]


def test_manual_assignments():
    image = image_with(("t", 1, 2), defaults=THREE_BROKERS)
    result, records = plan(image, "t", 3, [[3, 2], [2, 1]], defaults=THREE_BROKERS)
    assert result.error_code == ErrorCode.NONE
    assert [(r.partition_id, r.replicas, r.isr, r.leader) for r in records] == [(1, [3, 2], [3, 2], 3), (2, [2, 1], [2, 1], 2)]


def test_unknown_topic():
    result, records = plan(image_with(("t", 1, 1)), "nope", 3)
    assert (result.error_code, result.error_message, records) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, [])


@pytest.mark.parametrize(
    "count, message",
    [
        (3, "Topic already has 3 partition(s)."),
        (2, "The topic t currently has 3 partition(s); 2 would not be an increase."),
        (0, "The topic t currently has 3 partition(s); 0 would not be an increase."),
        (-1, "The topic t currently has 3 partition(s); -1 would not be an increase."),
    ],
)
def test_count_must_grow(count, message):
    result, records = plan(image_with(("t", 3, 1)), "t", count)
    assert (result.error_code, result.error_message, records) == (ErrorCode.INVALID_PARTITIONS, message, [])


INCONSISTENT = (
    "The manual partition assignment includes a partition with {} replica(s), but this is not "
    "consistent with previous partitions, which have 2 replica(s)."
)


@pytest.mark.parametrize(
    "assignments, message",
    [
        ([[1, 2]], "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
        ([], "Attempted to add 2 additional partition(s), but only 0 assignment(s) were specified."),
        ([[1, 2], [1, 2], [2, 3]], "Attempted to add 2 additional partition(s), but only 3 assignment(s) were specified."),
        ([[1, 2], [1]], INCONSISTENT.format(1)),
        ([[1, 2], [1, 2, 3]], INCONSISTENT.format(3)),
        ([[1, 2], [2, 7]], "The manual partition assignment includes broker 7, but no such broker is registered."),
        ([[2, 2], [1, 2]], "The manual partition assignment includes the broker 2 more than once."),
        ([[1, 2], []], "The manual partition assignment includes an empty replica list."),
    ],
)
def test_bad_manual_assignments(assignments, message):
    image = image_with(("t", 1, 2), defaults=THREE_BROKERS)
    result, records = plan(image, "t", 3, assignments, defaults=THREE_BROKERS)
    assert (result.error_code, result.error_message, records) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, message, [])


def test_replication_factor_beyond_the_registered_brokers():
    image = image_with(("t", 1, 3), defaults=THREE_BROKERS)
    result, records = plan(image, "t", 2, defaults=ClusterDefaults(broker_ids=(1, 2), num_partitions=1, replication_factor=1))
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR and records == []
    assert "replication factor of 3" in result.error_message


# --------------------------------------------------------------------------- MetadataController.create_partitions


@pytest.fixture
def controller(tmp_path):
    opened: list[MetadataController] = []

    def make(defaults: ClusterDefaults = ONE_BROKER) -> MetadataController:
        c = MetadataController(tmp_path, defaults)
        opened.append(c)
        return c

    yield make
    for c in opened:
        c.close()


def metadata_log_bytes(tmp_path: Path) -> int:
    return sum(p.stat().st_size for p in (tmp_path / METADATA_DIR_NAME).glob("*.log"))


def partitions_of(c: MetadataController, name: str) -> dict:
    return {p: (v.replicas, v.isr, v.leader, v.leader_epoch) for p, v in c.image.topics[name].partitions.items()}


def test_create_partitions_commits_then_applies_and_notifies_once(controller, tmp_path):
    c = controller()
    c.create_topics([CreateTopicSpec("a", 1), CreateTopicSpec("b", 2)])
    before_bytes, before_offset = metadata_log_bytes(tmp_path), c.image.offset
    seen = []
    c.subscribe(lambda old, new: seen.append(({n: len(t.partitions) for n, t in old.topics.items()}, {n: len(t.partitions) for n, t in new.topics.items()})))
    results = c.create_partitions([CreatePartitionsSpec("a", 3), CreatePartitionsSpec("b", 4)])
    assert [(r.name, r.error_code, r.error_message) for r in results] == [("a", ErrorCode.NONE, None), ("b", ErrorCode.NONE, None)]
    assert partitions_of(c, "a") == {p: ((1,), (1,), 1, 0) for p in range(3)}
    assert sorted(c.image.topics["b"].partitions) == [0, 1, 2, 3]
    assert seen == [({"a": 1, "b": 2}, {"a": 3, "b": 4})]  # one batch for the whole request
    assert c.image.offset == before_offset + 4
    assert metadata_log_bytes(tmp_path) > before_bytes


def test_validate_only_checks_everything_and_writes_nothing(controller, tmp_path):
    c = controller()
    c.create_topics([CreateTopicSpec("a", 1)])
    before_bytes, before_offset = metadata_log_bytes(tmp_path), c.image.offset
    calls = []
    c.subscribe(lambda old, new: calls.append(1))
    results = c.create_partitions([CreatePartitionsSpec("a", 4), CreatePartitionsSpec("a2", 2)], validate_only=True)
    assert [r.error_code for r in results] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    bad = c.create_partitions([CreatePartitionsSpec("a", 1)], validate_only=True)
    assert bad[0].error_code == ErrorCode.INVALID_PARTITIONS
    assert sorted(c.image.topics["a"].partitions) == [0]
    assert (metadata_log_bytes(tmp_path), c.image.offset, calls) == (before_bytes, before_offset, [])


def test_a_failing_topic_does_not_stop_the_others(controller):
    c = controller()
    c.create_topics([CreateTopicSpec("a", 2), CreateTopicSpec("b", 1)])
    results = c.create_partitions([CreatePartitionsSpec("a", 1), CreatePartitionsSpec("b", 2), CreatePartitionsSpec("zz", 9)])
    assert [r.error_code for r in results] == [
        ErrorCode.INVALID_PARTITIONS,
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    assert (len(c.image.topics["a"].partitions), len(c.image.topics["b"].partitions)) == (2, 2)


def test_a_topic_named_twice_is_answered_once_and_not_changed(controller):
    c = controller()
    c.create_topics([CreateTopicSpec("a", 1), CreateTopicSpec("b", 1)])
    results = c.create_partitions([CreatePartitionsSpec("a", 2), CreatePartitionsSpec("b", 3), CreatePartitionsSpec("a", 4)])
    assert [(r.name, r.error_code, r.error_message) for r in results] == [
        ("a", ErrorCode.INVALID_REQUEST, "Duplicate topic name."),
        ("b", ErrorCode.NONE, None),
    ]
    assert (len(c.image.topics["a"].partitions), len(c.image.topics["b"].partitions)) == (1, 3)


def test_nothing_to_commit_leaves_the_log_alone(controller, tmp_path):
    c = controller()
    c.create_topics([CreateTopicSpec("a", 1)])
    before = metadata_log_bytes(tmp_path)
    assert c.create_partitions([CreatePartitionsSpec("a", 1), CreatePartitionsSpec("nope", 2)])[0].error_code == ErrorCode.INVALID_PARTITIONS
    assert metadata_log_bytes(tmp_path) == before


def test_added_partitions_survive_a_restart(controller):
    c = controller()
    c.create_topics([CreateTopicSpec("a", 1, configs={"retention.ms": "5000"})])
    topic_id = c.image.topics["a"].topic_id
    c.create_partitions([CreatePartitionsSpec("a", 3)])
    c.create_partitions([CreatePartitionsSpec("a", 5)])
    expected = partitions_of(c, "a")
    c.close()
    reopened = controller()
    assert reopened.image.topics["a"].topic_id == topic_id
    assert partitions_of(reopened, "a") == expected and sorted(expected) == [0, 1, 2, 3, 4]
    assert dict(reopened.image.topics["a"].configs) == {"retention.ms": "5000"}
