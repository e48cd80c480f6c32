"""A leader epoch that moves without the leader (a reassignment adding or removing
replicas, an ISR change that bumps the epoch) keeps the acks=all produces waiting
on the leader, as Kafka's DelayedProduce does: they complete once the high
watermark passes them under the new epoch, and end with NOT_LEADER_OR_FOLLOWER
only when the leadership leaves. Driven through the ReplicaManager with the
metadata images a controller would commit and a clock the test moves."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import broker.replica.manager as manager_module
from broker.replica.manager import ReplicaManager
from controller.metadata.image import MetadataImage, PartitionImage, TopicImage
from protocol.errors import ErrorCode
from protocol.records import build_batch
from tests.unit.test_replica_manager_roles import fake_broker

KEY = ("t", 0)
TOPIC_ID = uuid.UUID(int=11)


def image(replicas, isr, leader: int, leader_epoch: int, partition_epoch: int | None = None) -> MetadataImage:
    partition = PartitionImage(0, tuple(replicas), tuple(isr), leader, leader_epoch, partition_epoch or leader_epoch)
    topic = TopicImage("t", TOPIC_ID, {0: partition})
    return MetadataImage(topics={"t": topic}, topic_names_by_id={TOPIC_ID: "t"})


class Clock:
    def __init__(self, now_ms: int = 1_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(manager_module, "_now_ms", clock)
    return clock


class Cluster:
    """Broker 1's replica manager, and the images the controller commits."""

    def __init__(self, tmp_path, first: MetadataImage):
        self.broker, self.plog = fake_broker(tmp_path, first)
        self.broker.leadership_lost = lambda key: None
        self.replicas = ReplicaManager(self.broker)
        self.replicas.registration_caught_up()

    def commit(self, new: MetadataImage) -> None:
        old, self.broker.image = self.broker.image, new
        self.replicas.apply_image(old, new)

    def produce(self, count: int = 1) -> asyncio.Future:
        """An acks=all produce of ``count`` records, as the leader write path makes
        it: append, tell the leader state, wait for the high watermark."""
        leader = self.replicas.leader_for(*KEY)
        self.plog.append(build_batch([(b"k", b"v", [], 1_000)] * count), leader_epoch=leader.leader_epoch)
        self.replicas.leader_appended(KEY, leader, self.plog)
        assert leader.produce_outcome(self.plog.log_end_offset) is None, "acknowledged without waiting"
        return self.replicas.wait_for_acks(KEY, leader, self.plog.log_end_offset, 30_000)

    def fetch(self, follower: int, offset: int | None = None) -> None:
        leader = self.replicas.leader_for(*KEY)
        self.replicas.follower_fetched(KEY, leader, self.plog, follower, self.plog.log_end_offset if offset is None else offset)


async def settle() -> None:
    await asyncio.sleep(0)


def test_a_produce_waiting_through_an_epoch_bump_that_removes_a_replica_completes(tmp_path, clock):
    async def scenario():
        cluster = Cluster(tmp_path, image((1, 2, 3), (1, 2, 3), leader=1, leader_epoch=3))
        cluster.fetch(2, 0)
        cluster.fetch(3, 0)
        waiting = cluster.produce()
        cluster.fetch(2)  # 2 has it, 3 does not: the high watermark waits for 3
        await settle()
        assert not waiting.done()
        before = cluster.replicas.leader_for(*KEY)
        # A reassignment drops replica 3: same leader, next leader epoch.
        clock.now_ms += 100
        cluster.commit(image((1, 2), (1, 2), leader=1, leader_epoch=4))
        after = cluster.replicas.leader_for(*KEY)
        assert after is not before and after.leader_epoch == 4
        # What follower 2 was known to hold is carried over: with 3 gone from the
        # ISR the high watermark passes the batch at once, as Kafka's makeLeader
        # moves it, and the produce succeeds.
        assert cluster.plog.high_watermark == cluster.plog.log_end_offset
        assert await asyncio.wait_for(waiting, 1) == ErrorCode.NONE
        cluster.plog.close()

    asyncio.run(scenario())


def test_a_produce_waits_under_the_new_epoch_until_the_isr_has_it(tmp_path, clock):
    async def scenario():
        cluster = Cluster(tmp_path, image((1, 2, 3), (1, 2, 3), leader=1, leader_epoch=3))
        waiting = cluster.produce(3)
        # A reassignment adds broker 4 and drops 3 in one leader epoch bump.
        clock.now_ms += 100
        cluster.commit(image((1, 2, 4), (1, 2), leader=1, leader_epoch=4))
        await settle()
        assert not waiting.done()
        leader = cluster.replicas.leader_for(*KEY)
        assert leader.isr == (1, 2) and set(leader.followers) == {2, 4}
        cluster.fetch(4, 0)  # the new replica, not in the ISR: holds nothing back
        clock.now_ms += 100
        cluster.fetch(2)
        assert await asyncio.wait_for(waiting, 1) == ErrorCode.NONE
        assert cluster.plog.high_watermark == 3
        cluster.plog.close()

    asyncio.run(scenario())


def test_a_produce_waiting_through_an_epoch_bump_still_ends_when_leadership_moves(tmp_path, clock):
    async def scenario():
        cluster = Cluster(tmp_path, image((1, 2, 3), (1, 2, 3), leader=1, leader_epoch=3))
        waiting = cluster.produce()
        cluster.commit(image((1, 2, 3), (1, 2), leader=1, leader_epoch=4))
        await settle()
        assert not waiting.done()
        cluster.commit(image((1, 2, 3), (1, 2), leader=2, leader_epoch=5))
        assert await asyncio.wait_for(waiting, 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert cluster.replicas.is_follower(*KEY)
        cluster.plog.close()

    asyncio.run(scenario())


def test_a_wait_never_completes_in_a_later_tenure(tmp_path, clock):
    """Leadership left and came back: the log may have been truncated meanwhile, so
    a wait made under the earlier leadership ends rather than waiting under the
    new one (a coordinator may ask for the outcome of an append long after it)."""

    async def scenario():
        cluster = Cluster(tmp_path, image((1, 2), (1, 2), leader=1, leader_epoch=3))
        earlier = cluster.replicas.leader_for(*KEY)
        cluster.plog.append(build_batch([(b"k", b"v", [], 1_000)]), leader_epoch=3)
        cluster.replicas.leader_appended(KEY, earlier, cluster.plog)
        cluster.commit(image((1, 2), (1, 2), leader=2, leader_epoch=4))
        cluster.commit(image((1, 2), (1, 2), leader=1, leader_epoch=5))
        assert cluster.replicas.leader_for(*KEY) is not earlier
        late = cluster.replicas.wait_for_acks(KEY, earlier, cluster.plog.log_end_offset, 30_000)
        assert await asyncio.wait_for(late, 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        cluster.plog.close()

    asyncio.run(scenario())


def test_the_carried_over_followers_start_their_lag_timers_afresh(tmp_path, clock):
    """Kafka's resetReplicaState for a leader that is not new: log end offsets
    stay known; ISR members count as caught up now, the rest as never."""

    async def scenario():
        cluster = Cluster(tmp_path, image((1, 2, 3), (1, 2, 3), leader=1, leader_epoch=3))
        cluster.produce()
        cluster.fetch(2)
        cluster.fetch(3, 0)
        clock.now_ms += 5_000
        cluster.commit(image((1, 2, 3), (1, 2), leader=1, leader_epoch=4))
        leader = cluster.replicas.leader_for(*KEY)
        two, three = leader.followers[2], leader.followers[3]
        assert (two.log_end_offset, three.log_end_offset) == (1, 0)
        assert two.last_caught_up_ms == clock.now_ms and three.last_caught_up_ms == 0
        assert leader.leader_epoch_start_offset == 1
        assert leader.proposed_shrink(clock.now_ms + 29_000) is None
        cluster.plog.close()

    asyncio.run(scenario())
