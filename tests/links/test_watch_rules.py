"""The source topic watcher's decisions (broker/links/watch_rules.py), pure."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from broker.links.watch_rules import (
    SYNCED_TOPIC_CONFIGS,
    SourceLook,
    WatchMemory,
    config_changes,
    decide,
    synced_configs_of,
)
from controller.metadata.records import (
    MIRROR_ACTIVE,
    MIRROR_FAILED,
    MIRROR_FAILED_OVER,
    MIRROR_PAUSED,
    MIRROR_PENDING_PROMOTE,
    MIRROR_PROMOTED,
    MIRROR_SOURCE_DELETED,
)
from protocol.schema import ZERO_UUID

SOURCE_ID = uuid.UUID(int=7)


def run(look, *, state=MIRROR_ACTIVE, partitions=2, configs=None, memory=None):
    return decide(
        source_topic="orders", mirror_state=state, mirror_partition_count=partitions,
        mirror_configs=configs or {}, memory=memory or WatchMemory(), look=look,
    )


def test_nothing_changed_means_no_update_and_the_source_id_is_remembered():
    update, memory = run(SourceLook(topic_id=SOURCE_ID, partition_count=2, configs={}))
    assert update is None and memory == WatchMemory(0, SOURCE_ID)


def test_one_missing_look_is_not_enough_two_in_a_row_are():
    update, memory = run(SourceLook(missing=True), memory=WatchMemory(0, SOURCE_ID))
    assert update is None and memory.missing_looks == 1
    update, memory = run(SourceLook(missing=True), state=MIRROR_PAUSED, memory=memory)
    assert (update.state, update.expected_state) == (MIRROR_SOURCE_DELETED, MIRROR_PAUSED)
    assert "orders" in update.reason and update.source_partition_count == -1 and not update.configs


def test_a_found_look_between_missing_ones_starts_counting_again():
    _, memory = run(SourceLook(missing=True))
    _, memory = run(SourceLook(topic_id=SOURCE_ID, partition_count=2, configs={}), memory=memory)
    update, memory = run(SourceLook(missing=True), memory=memory)
    assert update is None and memory.missing_looks == 1


def test_a_recreated_source_topic_fails_the_mirror():
    other = uuid.UUID(int=8)
    update, memory = run(SourceLook(topic_id=other, partition_count=2, configs={}), state=MIRROR_PENDING_PROMOTE,
                         memory=WatchMemory(0, SOURCE_ID))
    assert (update.state, update.expected_state) == (MIRROR_FAILED, MIRROR_PENDING_PROMOTE)
    assert str(SOURCE_ID) in update.reason and str(other) in update.reason
    assert memory.source_topic_id == SOURCE_ID


def test_a_source_without_topic_ids_is_never_taken_for_recreated():
    update, memory = run(SourceLook(topic_id=ZERO_UUID, partition_count=2, configs={}), memory=WatchMemory(0, SOURCE_ID))
    assert update is None and memory.source_topic_id == SOURCE_ID


def test_more_partitions_at_the_source_grow_the_mirror_fewer_are_ignored():
    update, _ = run(SourceLook(topic_id=SOURCE_ID, partition_count=5, configs={}))
    assert (update.source_partition_count, update.state, update.expected_state) == (5, -1, MIRROR_ACTIVE)
    update, _ = run(SourceLook(topic_id=SOURCE_ID, partition_count=1, configs={}))
    assert update is None


def test_synced_configs_follow_the_source_and_a_source_default_removes_the_override():
    source = {"retention.ms": "1000", "cleanup.policy": None, "segment.bytes": "4096"}
    mirror = {"retention.ms": "5000", "cleanup.policy": "compact", "segment.bytes": "4096", "min.insync.replicas": "2"}
    update, _ = run(SourceLook(topic_id=SOURCE_ID, partition_count=3, configs=source), configs=mirror)
    assert update.configs == {"retention.ms": "1000", "cleanup.policy": None}
    assert update.source_partition_count == 3


def test_keys_the_source_did_not_describe_and_unanswered_configs_change_nothing():
    assert config_changes({}, {"retention.ms": "5"}) == {}
    update, _ = run(SourceLook(topic_id=SOURCE_ID, partition_count=2, configs=None), configs={"retention.ms": "5"})
    assert update is None


def test_stopped_mirrors_are_not_watched():
    for state in (MIRROR_PROMOTED, MIRROR_FAILED_OVER, MIRROR_SOURCE_DELETED, MIRROR_FAILED):
        update, memory = run(SourceLook(missing=True), state=state, memory=WatchMemory(1, SOURCE_ID))
        assert update is None and memory == WatchMemory()


def test_describe_configs_entries_read_as_set_or_default():
    entries = [
        SimpleNamespace(name="retention.ms", value="1000", config_source=1, is_default=False),
        SimpleNamespace(name="cleanup.policy", value="delete", config_source=5, is_default=True),
        SimpleNamespace(name="min.insync.replicas", value="2", config_source=1, is_default=False),
    ]
    assert synced_configs_of(entries, version=4) == {"retention.ms": "1000", "cleanup.policy": None}
    entries_v0 = [SimpleNamespace(name="segment.ms", value="10", config_source=-1, is_default=False)]
    assert synced_configs_of(entries_v0, version=0) == {"segment.ms": "10"}


def test_the_synced_list_is_cluster_linkings_allow_list():
    assert len(SYNCED_TOPIC_CONFIGS) == 13 and "min.insync.replicas" not in SYNCED_TOPIC_CONFIGS
