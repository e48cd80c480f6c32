"""What a mirror's source topic watcher decides from one look at the source (pure).

The broker that leads a mirror topic's partition 0 looks at the source topic
every ``topic.config.sync.ms``: its Metadata (does it exist, its topic id, its
partition count) and its DescribeConfigs. :func:`decide` turns one look, the
mirror's state in the destination's image and what the watcher remembers of
earlier looks into the UpdateMirrorTopic (16008) to send, if any:

- the source topic is missing (UNKNOWN_TOPIC_OR_PARTITION) in two looks in a
  row: the mirror becomes SOURCE_DELETED. One missing look is not enough: a
  source broker that has not caught up with its own metadata yet answers the
  same for a topic that exists.
- the source topic's id is not the one seen before (deleted and created again
  with the same name): the mirror becomes FAILED. Its offsets would restart at
  0 and copying on would mix two topics' records.
- more partitions at the source: the mirror gets them (a partition count never
  shrinks in Kafka, so fewer is ignored).
- a synced config whose source value differs from the mirror's: the mirror
  takes the source's. A source config that is not set on the topic itself (a
  default of the source cluster) removes the mirror's override, so the
  mirror falls back to its own cluster's default, as Cluster Linking does.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.link_configs import LINK_CONFIGS, MIRROR_SYNCED_TOPIC_CONFIGS
from controller.metadata.records import (
    MIRROR_ACTIVE,
    MIRROR_FAILED,
    MIRROR_PAUSED,
    MIRROR_PENDING_PROMOTE,
    MIRROR_SOURCE_DELETED,
)
from protocol.schema import ZERO_UUID

# The link setting that paces the watcher, and its default (controller/link_configs.py).
TOPIC_CONFIG_SYNC_MS = "topic.config.sync.ms"
DEFAULT_TOPIC_CONFIG_SYNC_MS = int(LINK_CONFIGS[TOPIC_CONFIG_SYNC_MS].default)

# The topic configs a mirror takes from its source: the controller refuses to
# set any other through UpdateMirrorTopic.
SYNCED_TOPIC_CONFIGS = tuple(sorted(MIRROR_SYNCED_TOPIC_CONFIGS))

# Mirror states whose source topic is watched: those that still follow the source.
WATCHED_STATES = frozenset({MIRROR_ACTIVE, MIRROR_PAUSED, MIRROR_PENDING_PROMOTE})

# DescribeConfigs config_source of a value set on the topic itself.
DYNAMIC_TOPIC_CONFIG = 1
# Looks in a row that must find the source topic missing before the mirror says so.
MISSING_LOOKS_FOR_DELETED = 2


@dataclass(frozen=True)
class SourceLook:
    """One look at the source topic.

    ``missing``: Metadata answered UNKNOWN_TOPIC_OR_PARTITION for it.
    ``topic_id``: its id (ZERO_UUID when the source's Metadata version has none).
    ``configs``: the synced keys the source described, each with its value
    when set on the topic, None when the topic takes the source's default;
    None when DescribeConfigs was not answered (configs are then left alone).
    """

    missing: bool = False
    topic_id: uuid.UUID = ZERO_UUID
    partition_count: int = 0
    configs: Mapping[str, str | None] | None = None


@dataclass(frozen=True)
class WatchMemory:
    """What the watcher keeps of a mirror between looks (in memory only)."""

    missing_looks: int = 0
    source_topic_id: uuid.UUID = ZERO_UUID


@dataclass(frozen=True)
class MirrorUpdate:
    """The fields of one UpdateMirrorTopic request (``state`` -1: unchanged;
    ``source_partition_count`` -1: unchanged; a config value None: remove)."""

    expected_state: int
    state: int = -1
    reason: str | None = None
    source_partition_count: int = -1
    configs: Mapping[str, str | None] = field(default_factory=dict)


def synced_configs_of(described, *, version: int) -> dict[str, str | None]:
    """The synced keys of a DescribeConfigs result's ``configs``: the value when
    the topic sets it, None when the source's default applies. Keys the source
    did not describe are absent (nothing is decided about them)."""
    found: dict[str, str | None] = {}
    for entry in described:
        if entry.name not in SYNCED_TOPIC_CONFIGS:
            continue
        explicit = (not entry.is_default) if version == 0 else entry.config_source == DYNAMIC_TOPIC_CONFIG
        found[entry.name] = entry.value if explicit else None
    return found


def config_changes(source: Mapping[str, str | None], mirror: Mapping[str, str]) -> dict[str, str | None]:
    """Synced keys whose mirror override differs from the source (None: remove the override)."""
    changes: dict[str, str | None] = {}
    for key in SYNCED_TOPIC_CONFIGS:
        if key not in source:
            continue
        wanted = source[key]
        if mirror.get(key) != wanted:
            changes[key] = wanted
    return changes


def decide(
    *,
    source_topic: str,
    mirror_state: int,
    mirror_partition_count: int,
    mirror_configs: Mapping[str, str],
    memory: WatchMemory,
    look: SourceLook,
) -> tuple[MirrorUpdate | None, WatchMemory]:
    """The update one look calls for (None: nothing) and what to remember."""
    if mirror_state not in WATCHED_STATES:
        return None, WatchMemory()
    if look.missing:
        missing = memory.missing_looks + 1
        kept = WatchMemory(missing, memory.source_topic_id)
        if missing < MISSING_LOOKS_FOR_DELETED:
            return None, kept
        reason = f"the source topic {source_topic} was deleted"
        return MirrorUpdate(expected_state=mirror_state, state=MIRROR_SOURCE_DELETED, reason=reason), kept
    known_id = memory.source_topic_id
    seen_id = look.topic_id
    if known_id != ZERO_UUID and seen_id != ZERO_UUID and seen_id != known_id:
        reason = (
            f"the source topic {source_topic} was deleted and created again "
            f"(topic id {known_id} is now {seen_id}); its records are not the ones mirrored"
        )
        return MirrorUpdate(expected_state=mirror_state, state=MIRROR_FAILED, reason=reason), WatchMemory(0, known_id)
    remembered = WatchMemory(0, known_id if known_id != ZERO_UUID else seen_id)
    partitions = look.partition_count if look.partition_count > mirror_partition_count else -1
    changes = {} if look.configs is None else config_changes(look.configs, mirror_configs)
    if partitions == -1 and not changes:
        return None, remembered
    return MirrorUpdate(expected_state=mirror_state, source_partition_count=partitions, configs=changes), remembered
