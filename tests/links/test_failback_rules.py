"""The failback rules, pure: each replica's one-time cut and the controller's plan."""

from __future__ import annotations

import uuid

from controller.link_commands import FailbackSpec, mirror_record, plan_failback
from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage, MirrorTopic
from controller.metadata.records import (
    CLUSTER_LINK_CONFIG,
    CLUSTER_LINK_RECORD,
    MIRROR_ACTIVE,
    MIRROR_FAILED_OVER,
    PARTITION_RECORD,
    TOPIC_RECORD,
    record_api_key,
)
from protocol.errors import ErrorCode
from replication.mirror_core import FailbackCut, failback_cut

MARK = (100, 4)


def test_a_replica_past_the_mark_cuts_back_once():
    assert failback_cut(MARK, 107, None) == FailbackCut(100, MARK)


def test_a_replica_at_or_below_the_mark_keeps_its_log_but_records_the_mark():
    assert failback_cut(MARK, 100, None) == FailbackCut(None, MARK)
    assert failback_cut(MARK, 40, None) == FailbackCut(None, MARK)


def test_a_replica_that_applied_the_mark_never_cuts_again():
    # After the cut it copied the new primary's records past the mark: they stay.
    assert failback_cut(MARK, 160, MARK) == FailbackCut(None, None)


def test_a_replica_that_was_down_cuts_on_its_return():
    # It never saw the mark (nothing applied) and holds the old source's longer log.
    assert failback_cut(MARK, 130, None) == FailbackCut(100, MARK)


def test_a_new_failback_mark_is_acted_on_again():
    assert failback_cut((150, 9), 170, MARK) == FailbackCut(150, (150, 9))


def test_no_mark_no_cut():
    assert failback_cut(None, 170, None) == FailbackCut(None, None)
    assert failback_cut(None, 170, MARK) == FailbackCut(None, None)


def _image(partitions: int = 2):
    topic_id, link_id = uuid.uuid4(), uuid.uuid4()
    records = [
        TOPIC_RECORD(name="t", topic_id=topic_id),
        *(
            PARTITION_RECORD(partition_id=p, topic_id=topic_id, replicas=[1], isr=[1], leader=1, leader_epoch=3, partition_epoch=0)
            for p in range(partitions)
        ),
        CLUSTER_LINK_RECORD(link_id=link_id, link_name="to-b", configs=[
            CLUSTER_LINK_CONFIG.cls(name="bootstrap.servers", value="b:9092")
        ]),
    ]
    return apply_records(MetadataImage(), [(record_api_key(r), r) for r in records], 0), topic_id, link_id


def _apply(image, records):
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset + 1)


def test_failback_makes_the_topic_an_active_mirror_with_the_marks_and_moves_each_leader_epoch():
    image, _topic_id, link_id = _image()
    result, records = plan_failback(image, FailbackSpec("t", "to-b", "t", {0: (50, 2), 1: (50, 2)}))
    assert result.error_code == ErrorCode.NONE and result.num_partitions == 2
    after = _apply(image, records)
    mirror = after.mirror_of("t")
    assert (mirror.state, mirror.link_id, mirror.source_topic) == (MIRROR_ACTIVE, link_id, "t")
    assert dict(mirror.partition_marks) == {0: (50, 2), 1: (50, 2)}
    assert {p.partition_id: (p.leader, p.leader_epoch) for p in after.topics["t"].partitions.values()} == {0: (1, 4), 1: (1, 4)}


def test_failback_refuses_other_partition_counts_unknown_links_and_following_mirrors():
    image, topic_id, link_id = _image()
    result, records = plan_failback(image, FailbackSpec("t", "to-b", "t", {0: (50, 2)}))
    assert result.error_code == ErrorCode.INVALID_REQUEST and "same partitions" in result.error_message and not records
    result, _ = plan_failback(image, FailbackSpec("t", "nope", "t", {0: (1, 1), 1: (1, 1)}))
    assert result.error_code == ErrorCode.RESOURCE_NOT_FOUND
    result, _ = plan_failback(image, FailbackSpec("missing", "to-b", "t", {}))
    assert result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    following = _apply(image, [mirror_record(MirrorTopic(topic_id, link_id, "t", MIRROR_ACTIVE), marks={})])
    result, _ = plan_failback(following, FailbackSpec("t", "to-b", "t", {0: (1, 1), 1: (1, 1)}))
    assert result.error_code == ErrorCode.INVALID_REQUEST and "already a mirror" in result.error_message
    # A mirror that was failed over here may be failed back (it is writable).
    writable = _apply(image, [mirror_record(MirrorTopic(topic_id, link_id, "t", MIRROR_FAILED_OVER), marks={0: (9, 1), 1: (9, 1)})])
    result, _ = plan_failback(writable, FailbackSpec("t", "to-b", "t", {0: (1, 1), 1: (1, 1)}))
    assert result.error_code == ErrorCode.NONE
