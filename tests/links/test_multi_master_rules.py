"""The multi-master copy's decisions per batch and the producers it refuses (broker/links/multi_master_rules.py)."""

import uuid

import pytest

from broker.links.multi_master_rules import (
    Decision,
    ProducerHere,
    is_multi_master,
    link_batch_decision,
    link_group_id,
    multi_master_links,
    produce_refusal,
)
from controller.link_configs import LinkConfigError, parse_multi_master_topics, validate_link_configs
from controller.metadata.image import ClusterLink, MetadataImage

OWN = 2
OTHER_PID = (1 << 48) + 7  # a producer of origin 1
OWN_PID = (2 << 48) + 7


def decide(producer_id=OTHER_PID, epoch=0, base_sequence=0, last_offset_delta=4, *, control=False, transactional=False, here=None):
    return link_batch_decision(OWN, producer_id, epoch, base_sequence, last_offset_delta, control, transactional, here).decision


def test_batches_that_cannot_be_placed_or_came_back_are_skipped():
    assert decide(producer_id=-1) == Decision.SKIP_NO_PRODUCER
    assert decide(control=True) == Decision.SKIP_CONTROL
    assert decide(producer_id=OWN_PID) == Decision.SKIP_OWN_ORIGIN
    # Even when this cluster's own producer is unknown to the partition.
    assert decide(producer_id=OWN_PID, here=ProducerHere(0, 100)) == Decision.SKIP_OWN_ORIGIN


def test_a_producer_new_here_is_appended():
    assert decide(base_sequence=0) == Decision.APPEND
    assert decide(base_sequence=50) == Decision.APPEND  # its earlier batches were deleted at the source


def test_the_next_sequence_is_appended():
    assert decide(base_sequence=5, here=ProducerHere(0, 4)) == Decision.APPEND


def test_sequences_at_or_below_the_last_are_already_here():
    assert decide(base_sequence=0, last_offset_delta=4, here=ProducerHere(0, 4)) == Decision.ALREADY_HERE
    assert decide(base_sequence=5, last_offset_delta=4, here=ProducerHere(0, 20)) == Decision.ALREADY_HERE
    assert decide(epoch=0, base_sequence=30, here=ProducerHere(1, 2)) == Decision.ALREADY_HERE  # an older epoch


def test_a_gap_stops_the_copy():
    verdict = link_batch_decision(OWN, OTHER_PID, 0, 10, 4, False, False, ProducerHere(0, 4))
    assert verdict.decision == Decision.GAP
    assert "sequences 10..14 after 4 here (expected 5)" in verdict.reason
    # Overlapping the last batch without matching it: not the same batches.
    assert decide(base_sequence=3, last_offset_delta=4, here=ProducerHere(0, 4)) == Decision.GAP


def test_a_new_epoch_starts_at_sequence_zero():
    assert decide(epoch=1, base_sequence=0, here=ProducerHere(0, 40)) == Decision.APPEND
    assert decide(epoch=1, base_sequence=3, here=ProducerHere(0, 40)) == Decision.GAP


def test_transactional_batches_of_another_origin_stop_the_copy():
    assert decide(transactional=True) == Decision.GAP


def test_produce_refusals_name_the_fix():
    assert "enable idempotence" in produce_refusal("T", -1, False)
    assert "transactions are not supported on multi-master topics" in produce_refusal("T", OTHER_PID, True)
    assert produce_refusal("T", OTHER_PID, False) is None


def _image(*links):
    return MetadataImage(cluster_links={link.name: link for link in links})


def _link(name, **configs):
    return ClusterLink(link_id=uuid.uuid4(), name=name, configs=configs)


def test_a_topic_is_multi_master_when_a_link_here_lists_it():
    a = _link("from-a", **{"bootstrap.servers": "a:9092", "multi.master.topics": "T,orders"})
    b = _link("from-b", **{"bootstrap.servers": "b:9092"})
    image = _image(a, b)
    assert is_multi_master(image, "T") and is_multi_master(image, "orders")
    assert not is_multi_master(image, "other")
    assert [link.name for link in multi_master_links(image, "orders")] == ["from-a"]


def test_the_setting_is_checked():
    assert parse_multi_master_topics(" T , orders ") == ["T", "orders"]
    assert validate_link_configs({"bootstrap.servers": "a:1", "multi.master.topics": "T, U"})["multi.master.topics"] == "T,U"
    for bad, says in (("a b", "not a valid topic name"), ("__consumer_offsets", "internal topic"), ("T,T", "named twice")):
        with pytest.raises(LinkConfigError, match=says):
            parse_multi_master_topics(bad)


def test_positions_live_in_a_group_named_after_the_link():
    assert link_group_id("a-to-b") == "_pybroker-link-a-to-b"
