"""Consumer offset sync over a cluster link: which groups, and what to commit (pure).

A link with ``consumer.offset.sync.enable=true`` copies the committed offsets
of the source's consumer groups that ``consumer.offset.group.filters`` selects
to the destination, every ``consumer.offset.sync.ms``. Mirror topics keep the
source's offsets, so an offset needs no translation; these rules only decide
which offsets may be written:

- only partitions of topics mirrored over this link, under the mirror's name;
- only while the mirror still follows its source (ACTIVE, PAUSED,
  PENDING_PROMOTE): once it is promoted or failed over, the destination's
  groups commit their own offsets there, which a sync must never move back;
- only for a group without members on the destination: a group in use there
  is the destination's own (Cluster Linking's rule);
- never past the mirror partition's high watermark: a consumer handed that
  offset would wait for records the mirror does not hold yet, or skip them
  once they arrive under a reset policy. A capped offset is raised by later
  syncs as the mirror catches up.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from controller.metadata.records import MIRROR_ACTIVE, MIRROR_PAUSED, MIRROR_PENDING_PROMOTE

# Cluster Linking's link settings for offset sync, with its defaults. These must
# match the keys controller/link_configs.py knows.
OFFSET_SYNC_ENABLE = "consumer.offset.sync.enable"
OFFSET_SYNC_MS = "consumer.offset.sync.ms"
OFFSET_GROUP_FILTERS = "consumer.offset.group.filters"
DEFAULT_OFFSET_SYNC_MS = 30000

# Mirror states whose partitions take synced offsets.
SYNCED_MIRROR_STATES = frozenset({MIRROR_ACTIVE, MIRROR_PAUSED, MIRROR_PENDING_PROMOTE})

LITERAL = "LITERAL"
PREFIXED = "PREFIXED"
INCLUDE = "INCLUDE"
EXCLUDE = "EXCLUDE"
WILDCARD = "*"


class GroupFilterError(ValueError):
    """consumer.offset.group.filters that cannot be read (the message says why)."""


@dataclass(frozen=True)
class GroupFilter:
    name: str
    pattern_type: str = LITERAL
    filter_type: str = INCLUDE

    def matches(self, group_id: str) -> bool:
        if self.pattern_type == LITERAL:
            return self.name == WILDCARD or self.name == group_id
        return group_id.startswith(self.name)


@dataclass(frozen=True)
class GroupFilters:
    """Include and exclude filters: a group is selected when an INCLUDE filter
    matches it and no EXCLUDE filter does. No filters select no group."""

    filters: tuple[GroupFilter, ...] = ()

    def selects(self, group_id: str) -> bool:
        included = False
        for group_filter in self.filters:
            if not group_filter.matches(group_id):
                continue
            if group_filter.filter_type == EXCLUDE:
                return False
            included = True
        return included


def parse_group_filters(text: str | None) -> GroupFilters:
    """Cluster Linking's JSON, ``{"groupFilters": [{"name": "*", "patternType":
    "LITERAL", "filterType": "INCLUDE"}, ...]}`` (patternType defaults to
    LITERAL, filterType to INCLUDE; case does not matter). Empty or unset:
    no filters."""
    key = OFFSET_GROUP_FILTERS
    if text is None or not text.strip():
        return GroupFilters()
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GroupFilterError(f"{key}: not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(document, dict) or not isinstance(document.get("groupFilters"), list):
        raise GroupFilterError(f'{key}: expected {{"groupFilters": [...]}}')
    filters = []
    for index, entry in enumerate(document["groupFilters"]):
        where = f"{key}: groupFilters[{index}]"
        if not isinstance(entry, dict):
            raise GroupFilterError(f"{where}: expected an object")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise GroupFilterError(f"{where}: name must be a group name, a prefix or *")
        pattern_type = str(entry.get("patternType", LITERAL)).upper()
        filter_type = str(entry.get("filterType", INCLUDE)).upper()
        if pattern_type not in (LITERAL, PREFIXED):
            raise GroupFilterError(f"{where}: patternType must be LITERAL or PREFIXED, got {entry.get('patternType')!r}")
        if filter_type not in (INCLUDE, EXCLUDE):
            raise GroupFilterError(f"{where}: filterType must be INCLUDE or EXCLUDE, got {entry.get('filterType')!r}")
        filters.append(GroupFilter(name, pattern_type, filter_type))
    return GroupFilters(tuple(filters))


@dataclass(frozen=True)
class SourceOffset:
    """A committed offset at the source: the offset, its batch's leader epoch (-1: unknown), metadata."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


@dataclass(frozen=True)
class MirroredTopic:
    """A mirror topic over this link: its name on the destination and its state."""

    name: str
    state: int


def offsets_to_commit(
    source_offsets: Mapping[tuple[str, int], SourceOffset],
    mirrors: Mapping[str, MirroredTopic],
    high_watermarks: Mapping[tuple[str, int], int],
    destination_offsets: Mapping[tuple[str, int], int],
    *,
    group_has_members: bool,
) -> dict[tuple[str, int], SourceOffset]:
    """What to commit for one group on the destination, by (mirror topic, partition).

    ``source_offsets``: the group's committed offsets at the source, by (source
    topic, partition); ``mirrors``: the link's mirror topics by source topic;
    ``high_watermarks``: the mirror partitions' high watermarks (a partition
    without one is skipped this time); ``destination_offsets``: what the
    destination group has committed (equal offsets are not written again)."""
    if group_has_members:
        return {}
    commits: dict[tuple[str, int], SourceOffset] = {}
    for (source_topic, partition), committed in source_offsets.items():
        mirror = mirrors.get(source_topic)
        if mirror is None or mirror.state not in SYNCED_MIRROR_STATES or committed.offset < 0:
            continue
        key = (mirror.name, partition)
        high_watermark = high_watermarks.get(key)
        if high_watermark is None:
            continue
        current = destination_offsets.get(key)
        if committed.offset > high_watermark:
            if current is not None and current >= high_watermark:
                continue  # a cap never moves the group back
            # The epoch belongs to the source's offset, not to the cap.
            committed = SourceOffset(high_watermark, -1, committed.metadata)
        if current == committed.offset:
            continue
        commits[key] = committed
    return commits
