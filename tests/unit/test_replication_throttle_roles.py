"""Where the replication throttles act (Kafka's semantics): a leader holds back
followers out of the ISR of partitions whose ``leader.replication.throttled.replicas``
names the leader's own replica; a follower holds back its fetches of partitions
whose ``follower.replication.throttled.replicas`` names its replica, only until it
is caught up. Through the broker's read path (``ReplicaReader``) and a fetcher's
request building, with a replica manager over one real log."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

from broker.replica.manager import ReplicaManager
from broker.replica.read import FetchReader, ReplicaReader
from controller.metadata.image import MetadataImage, PartitionImage, TopicImage
from controller.metadata.records import RESOURCE_BROKER
from protocol.records import build_batch
from replication.throttle import (
    FOLLOWER_THROTTLED_RATE,
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_RATE,
    LEADER_THROTTLED_REPLICAS,
)
from tests.unit.test_replica_manager_roles import fake_broker

KEY = ("t", 0)
TOPIC_ID = uuid.UUID(int=12)
RATE_BYTES_PER_S = 1_000
LEADER_EPOCH = 3


def image(replicas, isr, leader: int, topic_configs: dict, broker_configs: dict) -> MetadataImage:
    partition = PartitionImage(0, tuple(replicas), tuple(isr), leader, LEADER_EPOCH, LEADER_EPOCH)
    topic = TopicImage("t", TOPIC_ID, {0: partition}, topic_configs)
    return MetadataImage(
        topics={"t": topic}, topic_names_by_id={TOPIC_ID: "t"}, resource_configs={(RESOURCE_BROKER, "1"): broker_configs}
    )


def manager_over(tmp_path, first: MetadataImage):
    broker, plog = fake_broker(tmp_path, first)
    broker.config["replica.selector.class"] = None
    broker.replicas = ReplicaManager(broker)
    broker.replicas.registration_caught_up()
    return broker, plog


def follower_fetch(reader: ReplicaReader, broker, follower: int, now_ms: int):
    fetch_partition = SimpleNamespace(
        partition=0, fetch_offset=0, current_leader_epoch=LEADER_EPOCH, last_fetched_epoch=-1, log_start_offset=0
    )
    read = reader.read_partition(
        broker.image.topics["t"], fetch_partition, FetchReader(17, replica_id=follower), max_bytes=1 << 20, first=True, now_ms=now_ms
    )
    if read.records is not None:
        read.records.close()
    return read


def leader_over_its_rate(tmp_path, listed: str):
    """Broker 1 leads t-0 over (1, 2, 3) with 2 in the ISR and 3 out of it, its
    leader rate already exceeded."""
    broker, plog = manager_over(
        tmp_path,
        image((1, 2, 3), (1, 2), 1, {LEADER_THROTTLED_REPLICAS: listed}, {LEADER_THROTTLED_RATE: str(RATE_BYTES_PER_S)}),
    )
    plog.append(build_batch([(b"k", b"v" * 100, [], 1_000)]), leader_epoch=LEADER_EPOCH)
    replicas = broker.replicas
    replicas.leader_appended(KEY, replicas.leader_for(*KEY), plog)
    now_ms = 1_000_000
    replicas.leader_quota.record(100 * RATE_BYTES_PER_S, now_ms)
    return broker, plog, ReplicaReader(broker), now_ms


def test_a_leader_named_in_the_list_holds_back_only_followers_out_of_the_isr(tmp_path):
    broker, plog, reader, now_ms = leader_over_its_rate(tmp_path, "0:1,0:2")
    rate_before = broker.replicas.leader_quota.rate_bytes_per_s(now_ms)
    in_sync = follower_fetch(reader, broker, 2, now_ms)
    assert in_sync.records is not None  # acks=all waits for it: never held back
    # Its bytes count against the rate all the same (the partition is throttled here).
    assert broker.replicas.leader_quota.rate_bytes_per_s(now_ms) > rate_before
    out_of_sync = follower_fetch(reader, broker, 3, now_ms)
    assert out_of_sync.served and out_of_sync.records is None
    plog.close()


def test_a_leader_not_named_in_the_list_throttles_nothing(tmp_path):
    # The list names the fetching follower (3), not this leader (1): as in Kafka,
    # broker 1 throttles no partition of this topic on the leader side.
    broker, plog, reader, now_ms = leader_over_its_rate(tmp_path, "0:3")
    rate_before = broker.replicas.leader_quota.rate_bytes_per_s(now_ms)
    assert follower_fetch(reader, broker, 3, now_ms).records is not None
    assert broker.replicas.leader_quota.rate_bytes_per_s(now_ms) == rate_before
    plog.close()


def test_a_follower_holds_back_a_listed_partition_until_it_is_caught_up(tmp_path):
    broker, plog = manager_over(
        tmp_path,
        image((2, 1), (2,), 2, {FOLLOWER_THROTTLED_REPLICAS: "0:1"}, {FOLLOWER_THROTTLED_RATE: str(RATE_BYTES_PER_S)}),
    )
    replicas = broker.replicas
    assert replicas.is_follower(*KEY)
    fetcher = replicas.fetchers[(2, 0)]
    replicas.follower_quota.record(100 * RATE_BYTES_PER_S, int(time.time() * 1000))
    _, sent, throttled = fetcher._build_request([KEY])
    assert KEY in throttled and KEY not in sent  # not caught up, over the rate: left out
    state = replicas.followers[KEY]
    behind = SimpleNamespace(error_code=0, diverging_epoch=None, high_watermark=5, log_start_offset=0, records=None)
    assert replicas.follower_response(KEY, state, behind)
    assert not state.caught_up
    caught_up = SimpleNamespace(error_code=0, diverging_epoch=None, high_watermark=0, log_start_offset=0, records=None)
    assert replicas.follower_response(KEY, state, caught_up)
    assert state.caught_up
    _, sent, throttled = fetcher._build_request([KEY])
    assert KEY in throttled and KEY in sent  # caught up: fetched, its bytes still counted
    plog.close()


def test_a_follower_not_named_in_the_list_is_not_throttled(tmp_path):
    broker, plog = manager_over(
        tmp_path,
        image((2, 1), (2,), 2, {FOLLOWER_THROTTLED_REPLICAS: "0:2"}, {FOLLOWER_THROTTLED_RATE: str(RATE_BYTES_PER_S)}),
    )
    replicas = broker.replicas
    replicas.follower_quota.record(100 * RATE_BYTES_PER_S, int(time.time() * 1000))
    _, sent, throttled = replicas.fetchers[(2, 0)]._build_request([KEY])
    assert KEY in sent and KEY not in throttled
    plog.close()
