"""A follower hears of its leader's high watermark at once, not at its next
append nor at the end of its long-polling fetch (Kafka's lastSentHighWatermark).

Followers fetch with ``replica.fetch.wait.max.ms`` of 10 s here, so a follower
told of the mark only when its waiting fetch ends would learn it seconds after
an acks=all write was acknowledged: a consumer reading from that follower
(KIP-392) would not see the record, and a leader elected meanwhile would start
from the old mark (a DeleteRecords to a committed offset then fails with
OFFSET_OUT_OF_RANGE until its followers have fetched from it). Each follower's
own mark is read with a consumer's Fetch sent to it, which a follower answers
up to its own high watermark.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("confluent_kafka")

from protocol.errors import ErrorCode  # noqa: E402
from protocol.registry import APIS_BY_NAME  # noqa: E402
from protocol.schema import struct_classes  # noqa: E402
from tests.cluster.replication_harness import ReplicatedCluster, produce_batch, wait_until  # noqa: E402

FOLLOWER_FETCH_WAIT_MS = 10_000
# Well under the followers' fetch wait: only a prompt answer gets there in time.
HEARD_BOUND_S = 3.0
FETCH = APIS_BY_NAME["Fetch"]
Q = struct_classes(FETCH.request)


def high_watermark_at(cluster: ReplicatedCluster, node: int, topic: str) -> int:
    """The high watermark ``node``'s replica of partition 0 answers a consumer with."""
    body = Q.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1024, isolation_level=0, session_id=0, session_epoch=-1,
        topics=[Q.FetchTopic(topic=topic, partitions=[Q.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1024,
        )])],
        forgotten_topics_data=[], rack_id="",
    )
    answer = cluster.request(node, FETCH, 12, body, 10000, "follower-high-watermark").responses[0].partitions[0]
    assert answer.error_code == ErrorCode.NONE, ErrorCode(answer.error_code).name
    return answer.high_watermark


def test_followers_hear_of_the_high_watermark_at_once(tmp_path):
    cluster = ReplicatedCluster(
        tmp_path,
        replica_lag_time_max_ms=30_000,
        extra={"replica.fetch.wait.max.ms": str(FOLLOWER_FETCH_WAIT_MS), "auto.leader.rebalance.enable": "false"},
    )
    try:
        cluster.start()
        topic = "heard"
        cluster.create_topic(topic, partitions=1, replication_factor=3)
        state = wait_until(lambda: (s := cluster.partition(topic, 0)) and s.leader >= 0 and len(s.isr) == 3 and s, 30)
        assert state, cluster.partition(topic, 0)
        followers = [node for node in state.replicas if node != state.leader]
        assert len(followers) == 2, state
        written = 0
        for count in (50, 1, 20):
            assert len(produce_batch(cluster.bootstrap(), topic, count).acked) == count
            written += count
            acknowledged_at = time.monotonic()
            heard = wait_until(
                lambda: all(high_watermark_at(cluster, node, topic) == written for node in followers),
                HEARD_BOUND_S,
                interval_s=0.05,
            )
            marks = {node: high_watermark_at(cluster, node, topic) for node in followers}
            assert heard, f"after {written} records the followers' marks were {marks} {time.monotonic() - acknowledged_at:.1f} s on"
    finally:
        cluster.stop()
