"""broker.replica.partition_watch: long-polling fetches wait in the broker's one purgatory,
beside acks=all produces, under its one limit and timer."""

from __future__ import annotations

import asyncio
import time

from broker.replica.partition_watch import PartitionWatch
from protocol.errors import ErrorCode
from replication.delayed import DelayedProduce


def test_a_fetch_wakes_on_news_of_one_of_its_partitions():
    async def scenario():
        watch = PartitionWatch()
        waiting = asyncio.ensure_future(watch.wait_any([("t", 0), ("t", 1)], 5))
        await asyncio.sleep(0)
        assert len(watch) == 1
        watch.notify(("u", 0))  # another partition's news
        await asyncio.sleep(0)
        assert not waiting.done()
        watch.notify(("t", 1))
        assert await waiting is True
        assert len(watch) == 0

    asyncio.run(scenario())


def test_a_fetch_answers_at_its_deadline_and_when_the_broker_stops():
    async def scenario():
        watch = PartitionWatch()
        started = time.monotonic()
        assert await watch.wait_any([("t", 0)], 0.05) is False
        assert time.monotonic() - started >= 0.045
        waiting = asyncio.ensure_future(watch.wait_any([("t", 0)], 30))
        await asyncio.sleep(0)
        watch.wake_all()
        assert await waiting is True
        watch.close()

    asyncio.run(scenario())


def test_fetches_and_produces_share_one_limit_and_wake_separately():
    async def scenario():
        watch = PartitionWatch(max_operations=2)
        answers = []

        class Waiting:
            high_watermark = 0

            def produce_outcome(self, required_offset):
                return None if self.high_watermark < required_offset else ErrorCode.NONE

        leader = Waiting()
        produce = DelayedProduce(lambda: leader, 1, answers.append)
        assert watch.add(produce, [("t", 0)], 30_000) is False
        fetch = asyncio.ensure_future(watch.wait_any([("t", 0)], 30))
        await asyncio.sleep(0)
        assert len(watch) == 2
        # Full: a third waiter does not wait (a fetch answers at once).
        assert await watch.wait_any([("t", 1)], 30) is False
        watch.notify(("t", 0))  # news for fetches re-tests no produce
        assert await fetch is True and answers == []
        leader.high_watermark = 1
        watch.check(("t", 0))
        assert answers == [ErrorCode.NONE] and len(watch) == 0
        watch.close()

    asyncio.run(scenario())


def test_an_append_below_an_unmoved_high_watermark_wakes_followers_only():
    async def scenario():
        watch = PartitionWatch()
        consumer = asyncio.ensure_future(watch.wait_any([("t", 0)], 5))
        follower = asyncio.ensure_future(watch.wait_any([("t", 0)], 5, follower=True))
        await asyncio.sleep(0)
        watch.notify_log_end(("t", 0))
        assert await follower is True
        await asyncio.sleep(0)
        assert not consumer.done()
        watch.notify(("t", 0))  # the high watermark moved: both kinds read again
        assert await consumer is True
        watch.close()

    asyncio.run(scenario())
