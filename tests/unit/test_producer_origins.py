"""Producer id ranges per origin (controller/producer_origins.py) and the controller's allocation in them."""

import pytest

from controller.metadata.image import MetadataImage
from controller.metadata_commands import allocate_producer_ids
from controller.producer_origins import ProducerIdOriginError, next_block, origin_of, origin_range

ORIGIN_1 = 1 << 48


def test_origin_of_a_producer_id():
    assert origin_of(0) == 0
    assert origin_of((1 << 48) - 1) == 0
    assert origin_of(ORIGIN_1) == 1
    assert origin_of((3 << 48) + 12345) == 3
    assert origin_of(-1) == -1


def test_origin_ranges_do_not_overlap():
    assert origin_range(0) == range(1 << 48)
    assert origin_range(1).start == origin_range(0).stop
    assert origin_range(1023).stop == 1024 << 48
    with pytest.raises(ValueError):
        origin_range(1024)


def test_origin_zero_is_what_clusters_always_did():
    assert next_block(0, 0, 1000) == range(1000)
    assert next_block(5000, 0, 1000) == range(5000, 6000)


def test_a_fresh_cluster_starts_at_its_origin():
    assert next_block(0, 2, 1000) == range(2 << 48, (2 << 48) + 1000)
    assert next_block((2 << 48) + 1000, 2, 1000) == range((2 << 48) + 1000, (2 << 48) + 2000)


def test_a_controller_of_another_origin_refuses():
    with pytest.raises(ProducerIdOriginError, match="cluster.link.origin.id is 2"):
        next_block(ORIGIN_1 + 1000, 2, 1000)
    # Ids of origin 0 handed out already: the origin cannot change afterwards.
    with pytest.raises(ProducerIdOriginError, match="origin 0"):
        next_block(1000, 1, 1000)
    with pytest.raises(ProducerIdOriginError, match="origin 1"):
        next_block(ORIGIN_1 + 1000, 0, 1000)


def test_an_origin_range_used_up_is_refused():
    with pytest.raises(ProducerIdOriginError, match="used up"):
        next_block((2 << 48) - 10, 1, 1000)


def test_the_controller_allocates_inside_its_origin():
    image = MetadataImage()
    block, records = allocate_producer_ids(image, 1, 5, 1000, origin_id=3)
    assert block == range(3 << 48, (3 << 48) + 1000)
    assert records[0].next_producer_id == (3 << 48) + 1000
    block, _ = allocate_producer_ids(image, 1, 5, 1000)
    assert block == range(1000)
