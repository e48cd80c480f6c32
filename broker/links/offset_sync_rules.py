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

from collections.abc import Mapping
from dataclasses import dataclass

from controller.link_configs import LINK_CONFIGS, GroupFilter, LinkConfigError, group_selected
from controller.link_configs import parse_group_filters as parse_link_group_filters
from controller.metadata.records import MIRROR_ACTIVE, MIRROR_PAUSED, MIRROR_PENDING_PROMOTE

# The link settings for offset sync (their meaning, types and defaults are
# controller/link_configs.py's, where a link's settings are checked).
OFFSET_SYNC_ENABLE = "consumer.offset.sync.enable"
OFFSET_SYNC_MS = "consumer.offset.sync.ms"
OFFSET_GROUP_FILTERS = "consumer.offset.group.filters"
DEFAULT_OFFSET_SYNC_MS = int(LINK_CONFIGS[OFFSET_SYNC_MS].default)

# Mirror states whose partitions take synced offsets.
SYNCED_MIRROR_STATES = frozenset({MIRROR_ACTIVE, MIRROR_PAUSED, MIRROR_PENDING_PROMOTE})

# consumer.offset.group.filters that cannot be read (the message starts with the key).
GroupFilterError = LinkConfigError


@dataclass(frozen=True)
class GroupFilters:
    """Include and exclude filters: a group is selected when an INCLUDE filter
    matches it and no EXCLUDE filter does. No filters select no group."""

    filters: tuple[GroupFilter, ...] = ()

    def selects(self, group_id: str) -> bool:
        return group_selected(list(self.filters), group_id)


def parse_group_filters(text: str | None) -> GroupFilters:
    """Cluster Linking's JSON, as :func:`controller.link_configs.parse_group_filters`
    reads it; empty or unset: no filters."""
    if text is None or not text.strip():
        return GroupFilters()
    return GroupFilters(tuple(parse_link_group_filters(text)))


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
