"""The leader's replica rules (replication.partition): high watermark, ISR
changes, acks=all outcomes, and the follower's truncation decisions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ErrorCode
from replication.partition import (
    LeaderPartition,
    Truncation,
    diverging_epoch_for_fetch,
    truncation_for_divergence,
)

LAG_MS = 1000


def leader(isr=(1, 2, 3), *, leo=10, hw=10, now_ms=0, min_isr=2, replicas=(1, 2, 3), ineligible=()):
    return LeaderPartition(
        local_id=1,
        replicas=replicas,
        isr=isr,
        leader_epoch=5,
        partition_epoch=7,
        log_end_offset=leo,
        high_watermark=hw,
        now_ms=now_ms,
        lag_max_ms=LAG_MS,
        min_insync_replicas=min_isr,
        ineligible=ineligible,
    )


def test_high_watermark_waits_for_every_isr_member_after_election():
    p = leader(leo=10, hw=4)
    assert p.high_watermark == 4
    assert p.leader_appended(15, now_ms=1) is False  # followers' offsets unknown
    assert p.follower_fetched(2, 15, now_ms=2) is False
    assert p.high_watermark == 4
    assert p.follower_fetched(3, 12, now_ms=3) is True
    assert p.high_watermark == 12
    assert p.follower_fetched(3, 15, now_ms=4) is True
    assert p.high_watermark == 15


def test_a_follower_is_sent_each_high_watermark_once():
    """A follower's fetch answers at once while the leader's mark is past the one
    it was last sent (Kafka's lastSentHighWatermark): else the follower, and a
    consumer reading from it, or the partition's next leader, would lag behind."""
    p = leader(leo=10, hw=4)
    assert p.send_high_watermark(2) is True  # nothing sent in this leadership yet
    assert p.send_high_watermark(2) is False  # it has 4: nothing new to tell
    p.follower_fetched(2, 10, now_ms=1)
    assert p.follower_fetched(3, 10, now_ms=1) is True
    assert p.high_watermark == 10
    assert p.send_high_watermark(2) is True  # 10 is news to it
    assert p.send_high_watermark(2) is False
    assert p.send_high_watermark(3) is True  # each follower for itself
    # The same leader in a new epoch keeps what it sent each follower.
    successor = leader(leo=10, hw=10)
    successor.carry_over(p, now_ms=2)
    assert successor.send_high_watermark(2) is False
    fresh = leader(leo=10, hw=10)  # a new leader: no follower was sent anything
    assert fresh.send_high_watermark(2) is True


def test_high_watermark_never_moves_back():
    p = leader(leo=10, hw=10)
    p.follower_fetched(2, 3, now_ms=1)
    p.follower_fetched(3, 3, now_ms=1)
    assert p.high_watermark == 10


def test_single_member_isr_commits_on_append():
    p = leader(isr=(1,), leo=0, hw=0, min_isr=1)
    assert p.leader_appended(5, now_ms=0) is True
    assert p.high_watermark == 5
    assert p.produce_outcome(5) == ErrorCode.NONE


def test_caught_up_follower_outside_the_isr_holds_the_high_watermark():
    # Kafka waits for a replica about to join, so that joining never lowers the HW.
    p = leader(isr=(1, 2), leo=10, hw=0)
    p.follower_fetched(3, 8, now_ms=0)  # not caught up, but within the lag time
    p.follower_fetched(2, 10, now_ms=0)
    assert p.high_watermark == 8
    # An ineligible (fenced) follower does not hold it back.
    q = leader(isr=(1, 2), leo=10, hw=0, ineligible=(3,))
    q.follower_fetched(2, 10, now_ms=0)
    q.follower_fetched(3, 8, now_ms=0)
    assert q.high_watermark == 10


def test_acks_all_outcomes():
    p = leader(leo=10, hw=10)
    assert p.check_enough_replicas() == ErrorCode.NONE
    p.leader_appended(20, now_ms=1)
    assert p.produce_outcome(20) is None
    p.follower_fetched(2, 20, now_ms=2)
    assert p.produce_outcome(20) is None
    p.follower_fetched(3, 20, now_ms=2)
    assert p.produce_outcome(20) == ErrorCode.NONE
    small = leader(isr=(1,), min_isr=2)
    assert small.check_enough_replicas() == ErrorCode.NOT_ENOUGH_REPLICAS
    # The ISR shrank below the minimum while the produce waited.
    shrinking = leader(isr=(1, 2), leo=10, hw=10, min_isr=2)
    shrinking.leader_appended(12, now_ms=0)
    shrinking.committed((1,), 8, now_ms=0)
    assert shrinking.produce_outcome(12) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_lagging_follower_is_proposed_out_after_the_lag_time():
    p = leader(leo=10, hw=10, now_ms=0)
    p.follower_fetched(2, 10, now_ms=100)
    p.follower_fetched(3, 10, now_ms=100)
    p.leader_appended(20, now_ms=200)
    p.follower_fetched(2, 20, now_ms=300)
    assert p.proposed_shrink(now_ms=100 + LAG_MS) is None
    assert p.proposed_shrink(now_ms=101 + LAG_MS) == (1, 2)
    p.begin_change((1, 2))
    assert p.maximal_isr == (1, 2, 3)  # still counted until committed
    assert p.proposed_shrink(now_ms=5000) is None  # one change at a time
    p.committed((1, 2), 8, now_ms=5000)
    assert p.isr == (1, 2) and p.partition_epoch == 8 and not p.change_in_flight
    assert p.high_watermark == 20


def test_follower_that_fetched_what_the_leader_had_at_its_last_fetch_is_caught_up_then():
    p = leader(leo=10, hw=10, now_ms=0)
    p.follower_fetched(2, 10, now_ms=0)
    p.follower_fetched(3, 10, now_ms=0)
    p.leader_appended(15, now_ms=500)
    p.follower_fetched(2, 10, now_ms=600)  # behind: leader had 15 at this fetch
    p.leader_appended(20, now_ms=700)
    p.follower_fetched(2, 15, now_ms=900)  # reached what the leader had at 600
    assert p.followers[2].last_caught_up_ms == 600


def test_expansion_needs_the_high_watermark_and_the_epoch_start():
    p = leader(isr=(1, 2), leo=10, hw=10)
    p.follower_fetched(2, 10, now_ms=0)
    p.follower_fetched(3, 9, now_ms=0)
    assert p.proposed_expansion() is None
    p.follower_fetched(3, 10, now_ms=1)
    assert p.proposed_expansion() == (1, 2, 3)
    p.begin_change((1, 2, 3))
    assert p.maximal_isr == (1, 2, 3)
    assert p.proposed_expansion() is None
    ineligible = leader(isr=(1, 2), leo=10, hw=10, ineligible=(3,))
    ineligible.follower_fetched(3, 10, now_ms=0)
    assert ineligible.proposed_expansion() is None


def test_progress_of_an_earlier_incarnation_does_not_let_a_restarted_follower_join():
    # Follower 3 caught up as broker epoch 4, was fenced and dropped, and came back
    # as epoch 9 with a shorter log (its unflushed tail died with it).
    p = leader(isr=(1, 2), leo=10, hw=10, ineligible=(3,))
    p.follower_fetched(2, 10, now_ms=0, broker_epoch=5)
    p.follower_fetched(3, 10, now_ms=0, broker_epoch=4)
    assert p.set_ineligible((), now_ms=1, registered_epochs={1: 1, 2: 5, 3: 9}) is False
    assert p.proposed_expansion() is None
    assert p.isr_broker_epoch(3) == 4  # what the controller would refuse
    # Nor does that stale progress hold up or move the high watermark.
    p.leader_appended(12, now_ms=2)
    p.follower_fetched(2, 12, now_ms=2, broker_epoch=5)
    assert p.high_watermark == 12
    # A fetch from the new incarnation replaces it; a late one from the old is ignored.
    p.follower_fetched(3, 8, now_ms=3, broker_epoch=9)
    p.follower_fetched(3, 12, now_ms=3, broker_epoch=4)
    assert p.proposed_expansion() is None
    p.follower_fetched(3, 12, now_ms=4, broker_epoch=9)
    assert p.proposed_expansion() == (1, 2, 3)
    assert p.isr_broker_epoch(3) == 9


def test_older_partition_epochs_are_ignored():
    p = leader()
    assert p.committed((1, 2), 6, now_ms=0) is False
    assert p.isr == (1, 2, 3)


def test_leader_checks_the_followers_last_fetched_epoch():
    assert diverging_epoch_for_fetch(-1, 50, (-1, -1)) is None
    assert diverging_epoch_for_fetch(3, 50, (3, 80)) is None
    assert diverging_epoch_for_fetch(3, 50, (3, 40)) == (3, 40)
    assert diverging_epoch_for_fetch(4, 50, (3, 40)) == (3, 40)


def test_follower_truncation_rules():
    # It has the epoch: cut at the smaller end.
    assert truncation_for_divergence(3, 40, (3, 55), 60, 30) == Truncation(40, True)
    # It has only an older epoch: cut where that ends, ask again.
    assert truncation_for_divergence(4, 40, (2, 35), 60, 30) == Truncation(35, False)
    # It has no epoch at or below.
    assert truncation_for_divergence(1, 40, (-1, -1), 60, 30) == Truncation(40, True)
    # The leader has nothing to offer: back to the high watermark.
    assert truncation_for_divergence(-1, -1, (-1, -1), 60, 30) == Truncation(30, True)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "fetch2", "fetch3", "shrink", "commit"]), st.integers(0, 50)), max_size=60))
def test_high_watermark_is_monotonic_and_below_every_maximal_isr_offset(steps):
    p = leader(leo=0, hw=0)
    now_ms = 0
    leo = 0
    for action, amount in steps:
        now_ms += 97
        before = p.high_watermark
        if action == "append":
            leo += amount
            p.leader_appended(leo, now_ms)
        elif action in ("fetch2", "fetch3"):
            replica = int(action[-1])
            offset = min(leo, p.followers[replica].log_end_offset + amount if p.followers[replica].log_end_offset >= 0 else amount)
            p.follower_fetched(replica, max(offset, p.followers[replica].log_end_offset, 0), now_ms)
        elif action == "shrink":
            proposal = p.proposed_shrink(now_ms) or p.proposed_expansion()
            if proposal is not None:
                p.begin_change(proposal)
        elif action == "commit" and p.pending_isr is not None:
            p.committed(p.pending_isr, p.partition_epoch + 1, now_ms)
        assert p.high_watermark >= before
        assert p.high_watermark <= leo or p.high_watermark == 0
        for replica in p.maximal_isr:
            if replica != 1 and p.followers[replica].log_end_offset >= 0 and p.high_watermark > before:
                assert p.followers[replica].log_end_offset >= p.high_watermark


def test_rack_aware_preferred_read_replica():
    racks = {1: "a", 2: "b", 3: "b"}
    p = leader(leo=20, hw=20)
    p.follower_fetched(2, 15, now_ms=5)
    p.follower_fetched(3, 20, now_ms=6)
    assert p.preferred_read_replica("", racks, 10) == 1  # no rack: the leader
    assert p.preferred_read_replica("a", racks, 10) == 1  # the leader's own rack
    assert p.preferred_read_replica("b", racks, 10) == 3  # the follower furthest ahead
    assert p.preferred_read_replica("b", racks, 18) == 3
    assert p.preferred_read_replica("c", racks, 10) == 1  # no replica in that rack
    fenced = leader(leo=20, hw=20, ineligible=(2, 3))
    fenced.follower_fetched(3, 20, now_ms=6)
    assert fenced.preferred_read_replica("b", racks, 10) == 1
    behind = leader(leo=20, hw=20)
    behind.follower_fetched(2, 5, now_ms=5)
    assert behind.preferred_read_replica("b", {1: "a", 2: "b", 3: "c"}, 10) == 1
