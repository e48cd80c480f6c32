"""Replica placement: properties that hold for any set of usable brokers and racks."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.metadata.image import BrokerRegistration, MetadataImage
from controller.placement import PlacementError, place_replicas, usable_brokers

RACK_NAMES = st.sampled_from([None, "r1", "r2", "r3", "r4"])


@st.composite
def layouts(draw):
    """(brokers with racks, replication factor, partition count, seed), the factor placeable."""
    ids = draw(st.lists(st.integers(0, 50), min_size=1, max_size=12, unique=True))
    brokers = [(broker_id, draw(RACK_NAMES)) for broker_id in ids]
    replication_factor = draw(st.integers(1, len(brokers)))
    num_partitions = draw(st.integers(0, 40))
    return brokers, replication_factor, num_partitions, draw(st.integers(0, 2**32))


@settings(max_examples=300, deadline=None)
@given(layouts(), st.integers(0, 20))
def test_every_partition_gets_distinct_usable_brokers_on_as_many_racks_as_it_can(layout, start_partition):
    brokers, replication_factor, num_partitions, seed = layout
    rack_of = dict(brokers)
    rack_count = len(set(rack_of.values()))
    placed = place_replicas(
        brokers, num_partitions, replication_factor, start_partition=start_partition, rng=random.Random(seed)
    )
    assert len(placed) == num_partitions
    for replicas in placed:
        assert len(replicas) == replication_factor == len(set(replicas))
        assert set(replicas) <= set(rack_of)
        assert len({rack_of[b] for b in replicas}) == min(replication_factor, rack_count)


@settings(max_examples=200, deadline=None)
@given(layouts(), st.integers(1, 4), st.integers(0, 30))
def test_leaders_are_balanced_and_placement_is_deterministic(layout, rounds, start_partition):
    brokers, replication_factor, _, seed = layout
    num_partitions = rounds * len(brokers)
    placed = place_replicas(brokers, num_partitions, replication_factor, start_partition=start_partition, rng=random.Random(seed))
    leaders = Counter(replicas[0] for replicas in placed)
    assert set(leaders) == {b for b, _ in brokers}
    assert max(leaders.values()) - min(leaders.values()) <= 1
    assert placed == place_replicas(
        brokers, num_partitions, replication_factor, start_partition=start_partition, rng=random.Random(seed)
    )


@settings(max_examples=100, deadline=None)
@given(layouts())
def test_added_partitions_continue_the_rotation(layout):
    brokers, replication_factor, num_partitions, seed = layout
    whole = place_replicas(brokers, num_partitions, replication_factor, rng=random.Random(seed))
    split = num_partitions // 2
    first = place_replicas(brokers, split, replication_factor, rng=random.Random(seed))
    rest = place_replicas(brokers, num_partitions - split, replication_factor, start_partition=split, rng=random.Random(seed))
    assert [r[0] for r in first + rest] == [r[0] for r in whole]


@pytest.mark.parametrize("replication_factor", [0, -1, 4])
def test_an_impossible_replication_factor_is_refused(replication_factor):
    with pytest.raises(PlacementError):
        place_replicas([(1, None), (2, "a"), (3, "b")], 3, replication_factor, rng=random.Random(0))


def test_usable_brokers_leave_out_fenced_and_shutting_down_ones():
    registrations = {
        1: BrokerRegistration(1, None, 1, rack="a", fenced=False),
        2: BrokerRegistration(2, None, 2, rack="b", fenced=True),
        3: BrokerRegistration(3, None, 3, rack=None, fenced=False, in_controlled_shutdown=True),
        4: BrokerRegistration(4, None, 4, rack=None, fenced=False),
    }
    assert usable_brokers(MetadataImage(brokers=registrations)) == [(1, "a"), (4, None)]
