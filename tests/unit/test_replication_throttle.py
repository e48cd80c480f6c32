"""Replication throttles (replication/throttle.py): which replicas are
throttled, and the sliding-window rate they are held to."""

from __future__ import annotations

import pytest

from replication.throttle import (
    UNLIMITED_RATE,
    WINDOW_MS,
    WINDOWS,
    ReplicationQuota,
    follower_holds_back,
    is_throttled,
    leader_holds_back,
)
from storage.topic_config import TopicConfigError, validate_topic_configs


def test_throttled_replicas_lists_are_validated_and_normalised():
    assert validate_topic_configs({"leader.replication.throttled.replicas": " 0:1, 1:2 "}) == {
        "leader.replication.throttled.replicas": "0:1,1:2"
    }
    assert validate_topic_configs({"follower.replication.throttled.replicas": "*"})["follower.replication.throttled.replicas"] == "*"
    for bad in ("0", "a:1", "0:1,", "0:-1"):
        with pytest.raises(TopicConfigError):
            validate_topic_configs({"leader.replication.throttled.replicas": bad})


def test_a_replica_is_throttled_when_listed_or_by_star():
    assert is_throttled("*", 3, 7)
    assert is_throttled("0:1,3:7", 3, 7)
    assert not is_throttled("0:1,3:7", 3, 1)
    assert not is_throttled("13:7", 3, 7)  # whole pairs, not substrings
    assert not is_throttled("", 0, 1)


def test_the_rate_is_bytes_over_the_windows_kept():
    quota = ReplicationQuota()
    assert not quota.exceeded(1000, 0)
    quota.record(1500, 0)
    assert quota.exceeded(1000, 10)  # 1,500 bytes in the first second
    assert not quota.exceeded(2000, 10)
    assert not quota.exceeded(1000, 1500)  # 1,500 bytes over 1.5 s
    quota.record(3000, 2500)
    assert quota.rate_bytes_per_s(3000) == pytest.approx(4500 / 3)
    # Once the windows holding them pass, old bytes stop counting.
    assert quota.rate_bytes_per_s(WINDOW_MS * (WINDOWS + 3)) == 0.0
    assert not quota.exceeded(UNLIMITED_RATE, 10)


def test_a_leader_holds_back_out_of_sync_followers_of_partitions_listed_for_itself():
    # Kafka's reassignment tool lists the partition's current replicas (any may
    # lead) in leader.replication.throttled.replicas: the entry names the leader.
    assert leader_holds_back("0:1,0:2", 0, leader_id=1, follower_in_isr=False)
    assert leader_holds_back("*", 0, leader_id=1, follower_in_isr=False)
    # Not the fetching follower's entry: a leader not listed throttles nothing.
    assert not leader_holds_back("0:3", 0, leader_id=1, follower_in_isr=False)
    assert not leader_holds_back("1:1", 0, leader_id=1, follower_in_isr=False)
    # In-sync followers are never held back (acks=all waits for them).
    assert not leader_holds_back("0:1", 0, leader_id=1, follower_in_isr=True)
    assert not leader_holds_back("*", 0, leader_id=1, follower_in_isr=True)


def test_a_follower_holds_back_its_listed_partitions_until_caught_up():
    assert follower_holds_back("0:4", 0, follower_id=4, caught_up=False)
    assert follower_holds_back("*", 0, follower_id=4, caught_up=False)
    assert not follower_holds_back("0:4", 0, follower_id=4, caught_up=True)
    assert not follower_holds_back("0:1,0:2", 0, follower_id=4, caught_up=False)
    assert not follower_holds_back("", 0, follower_id=4, caught_up=False)
