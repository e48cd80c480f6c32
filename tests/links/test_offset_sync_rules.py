"""Consumer offset sync's rules (broker/links/offset_sync_rules.py), pure."""

from __future__ import annotations

import pytest

from broker.links.offset_sync_rules import (
    GroupFilterError,
    MirroredTopic,
    SourceOffset,
    offsets_to_commit,
    parse_group_filters,
)
from controller.metadata.records import (
    MIRROR_ACTIVE,
    MIRROR_FAILED_OVER,
    MIRROR_PAUSED,
    MIRROR_PENDING_PROMOTE,
    MIRROR_PROMOTED,
)


def filters(*entries):
    import json

    return parse_group_filters(json.dumps({"groupFilters": list(entries)}))


def test_literal_star_selects_every_group_and_exclude_wins():
    chosen = filters(
        {"name": "*", "patternType": "LITERAL", "filterType": "INCLUDE"},
        {"name": "test-", "patternType": "PREFIXED", "filterType": "EXCLUDE"},
    )
    assert chosen.selects("billing") and chosen.selects("*")
    assert not chosen.selects("test-1")


def test_prefixed_and_literal_names():
    chosen = filters({"name": "app-", "patternType": "prefixed"}, {"name": "billing"})
    assert chosen.selects("app-1") and chosen.selects("billing")
    assert not chosen.selects("billing-2") and not chosen.selects("ap")


def test_a_prefixed_star_is_a_prefix_not_a_wildcard():
    assert not filters({"name": "*", "patternType": "PREFIXED"}).selects("billing")


def test_no_filters_select_no_group():
    for text in (None, "", '{"groupFilters": []}'):
        assert not parse_group_filters(text).selects("billing")
    assert not filters({"name": "x", "filterType": "EXCLUDE"}).selects("billing")


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not JSON"),
        ("[]", "groupFilters"),
        ('{"groupFilters": [{"patternType": "LITERAL"}]}', "name"),
        ('{"groupFilters": [{"name": "a", "patternType": "MATCH"}]}', "patternType"),
        ('{"groupFilters": [{"name": "a", "filterType": "DENY"}]}', "filterType"),
    ],
)
def test_unreadable_filters_are_refused_naming_the_key(text, message):
    with pytest.raises(GroupFilterError, match=f"consumer.offset.group.filters.*{message}"):
        parse_group_filters(text)


MIRRORS = {"orders": MirroredTopic("orders", MIRROR_ACTIVE), "pay": MirroredTopic("payments-mirror", MIRROR_PAUSED)}


def test_offsets_of_mirrored_topics_are_committed_under_the_mirror_name():
    source = {
        ("orders", 0): SourceOffset(10, 3, "m"),
        ("pay", 1): SourceOffset(4),
        ("not-mirrored", 0): SourceOffset(7),
    }
    high = {("orders", 0): 20, ("payments-mirror", 1): 4}
    commits = offsets_to_commit(source, MIRRORS, high, {}, group_has_members=False)
    assert commits == {("orders", 0): SourceOffset(10, 3, "m"), ("payments-mirror", 1): SourceOffset(4)}


def test_an_offset_past_the_mirror_high_watermark_is_capped_without_its_epoch():
    commits = offsets_to_commit({("orders", 0): SourceOffset(50, 3, "m")}, MIRRORS, {("orders", 0): 20}, {}, group_has_members=False)
    assert commits == {("orders", 0): SourceOffset(20, -1, "m")}


def test_a_cap_never_moves_the_destination_group_back():
    commits = offsets_to_commit({("orders", 0): SourceOffset(50)}, MIRRORS, {("orders", 0): 20}, {("orders", 0): 20},
                                group_has_members=False)
    assert commits == {}


def test_a_partition_without_a_known_high_watermark_waits():
    assert offsets_to_commit({("orders", 0): SourceOffset(5)}, MIRRORS, {}, {}, group_has_members=False) == {}


def test_equal_offsets_are_not_written_again_and_a_moved_source_offset_is():
    high = {("orders", 0): 100}
    assert offsets_to_commit({("orders", 0): SourceOffset(5)}, MIRRORS, high, {("orders", 0): 5}, group_has_members=False) == {}
    # The source group was reset back: the mirror follows it while it is a mirror.
    assert offsets_to_commit({("orders", 0): SourceOffset(3)}, MIRRORS, high, {("orders", 0): 5}, group_has_members=False) == {
        ("orders", 0): SourceOffset(3)
    }


def test_a_group_with_members_on_the_destination_is_left_alone():
    assert offsets_to_commit({("orders", 0): SourceOffset(5)}, MIRRORS, {("orders", 0): 9}, {}, group_has_members=True) == {}


@pytest.mark.parametrize("state, synced", [
    (MIRROR_ACTIVE, True), (MIRROR_PAUSED, True), (MIRROR_PENDING_PROMOTE, True),
    (MIRROR_PROMOTED, False), (MIRROR_FAILED_OVER, False),
])
def test_sync_stops_once_the_mirror_is_writable(state, synced):
    mirrors = {"orders": MirroredTopic("orders", state)}
    # After a failover the destination group committed 30 itself; the source still says 10.
    commits = offsets_to_commit({("orders", 0): SourceOffset(10)}, mirrors, {("orders", 0): 40}, {("orders", 0): 30},
                                group_has_members=False)
    assert commits == ({("orders", 0): SourceOffset(10)} if synced else {})
