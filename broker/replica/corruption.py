"""What the broker does about a batch that went bad on its own disk, and the
background scrubber that looks for one (storage/scrub.py checks the bytes).

A corrupt batch is found two ways: the leader checks the CRC of each batch it
is about to send a follower replica (broker/replica/read.py), and the
scrubber re-reads every segment, paced at ``log.scrub.bytes.per.second``, one
pass every ``log.scrub.interval.ms``. Consumer fetches stay unchecked file
slices, as in Kafka: clients check CRCs (librdkafka's ``check.crcs``).

Either way the partition's local log is bad from that batch on, while the
other replicas hold it whole (every replica CRC-checked it when it arrived).
What happens next depends on what the log is to the partition:

* a follower outside the ISR counts for nothing: its log is cut before the
  batch (``PartitionLog.truncate_to``) and it fetches from there again, at
  once, without a restart;
* the leader, or a follower in the ISR, with another ISR member: the log is
  cut before the batch, durably, and the broker halts as for a failed log dir
  (``Broker.log_dir_failed``). Cutting a log the ISR counts on while it goes
  on would let it be elected leader without records the high watermark
  covered; halting hands the partition to the controller's machinery
  instead: the session expires, the broker is fenced and leaves every ISR, a
  leader is elected among the others, and the restarted broker fetches the
  missing records from it and rejoins the ISR once caught up, under its new
  broker epoch. Kafka halts a broker whose only log dir failed the same way;
* the only ISR member: no other replica is known to hold the records, so
  nothing is cut and nobody is halted (the partition would have no leader).
  The leader stops sending followers anything from the batch on (they are
  answered KAFKA_STORAGE_ERROR there) and logs the offset: an operator's
  decision (an unclean election of a follower, or DeleteRecords past it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from storage.scrub import CorruptBatch, SegmentScrubber

log = logging.getLogger(__name__)

Key = tuple[str, int]


def _halt() -> None:
    logging.shutdown()
    os._exit(1)


class CorruptionHandler:
    def __init__(self, broker, halt=_halt):
        self.broker = broker
        self.halt = halt  # as Broker.log_dir_failed: at once, no clean-shutdown marker
        # key -> (leader epoch, offset from which this leader sends followers
        # nothing): its only in-sync copy is corrupt there. For that epoch only:
        # under a later one the log may have been cut and fetched whole again,
        # and if not, the next read for a follower finds the batch again.
        self.refused_from: dict[Key, tuple[int, int]] = {}
        self.found = 0  # corrupt batches found, for the log and the tests

    def refuses(self, key: Key, offset: int, leader_epoch: int) -> bool:
        refused = self.refused_from.get(key)
        return refused is not None and refused[0] == leader_epoch and offset >= refused[1]

    def batch_found(self, key: Key, plog, corrupt: CorruptBatch, where: str) -> None:
        """``corrupt`` was found in ``key``'s log (``where``: the read, or which
        segment file): act as the module says."""
        broker = self.broker
        topic = broker.image.topics.get(key[0])
        partition = topic.partitions.get(key[1]) if topic is not None else None
        if partition is None:
            log.error("%s-%d: corrupt batch at offset %d (%s) of a partition being deleted", key[0], key[1], corrupt.offset, where)
            return
        leader_epoch = partition.leader_epoch
        if self.refuses(key, corrupt.offset, leader_epoch):
            return
        self.found += 1
        replicas = broker.replicas
        node_id = broker.node_id
        leader = replicas.leaders.get(key)
        isr = tuple(leader.isr if leader is not None else partition.isr)
        usable = {b for b, r in broker.image.brokers.items() if not r.fenced}
        others = [b for b in isr if b != node_id and b in usable]
        log.error(
            "%s-%d: corrupt batch at offset %d (%s, %s); leader: %s, isr %s",
            key[0], key[1], corrupt.offset, where, corrupt.reason, leader is not None, list(isr),
        )
        if leader is None and node_id not in isr and partition.leader != node_id:
            end = plog.truncate_to(corrupt.offset)
            log.warning("%s-%d: out of the isr: log cut to %d, fetching the rest from the leader again", key[0], key[1], end)
            replicas.restart_following(key)
            return
        if others:
            end = plog.truncate_to(corrupt.offset)
            log.critical(
                "%s-%d: log cut to %d before the corrupt batch; halting so that the controller moves the partition "
                "to another in-sync replica (%s) and this broker fetches it back after its restart",
                key[0], key[1], end, others,
            )
            self.halt()
            return
        self.refused_from[key] = (leader_epoch, corrupt.offset)
        log.critical(
            "%s-%d: the only in-sync replica's batch at offset %d is corrupt: followers are sent nothing from there; "
            "an unclean election or DeleteRecords past it is an operator's decision",
            key[0], key[1], corrupt.offset,
        )

    # ----------------------------------------------------------------- scrubber

    async def scrub_forever(self, bytes_per_s: int, interval_ms: int) -> None:
        """Passes over every hosted log, one every ``interval_ms`` at most; the
        first an interval after the start (a start after a crash has just
        checked what was written since the last checkpoint, and a broker of
        many partitions has its start-up work to do first)."""
        await asyncio.sleep(interval_ms / 1000)
        while True:
            started = time.monotonic()
            try:
                await self.scrub_pass(bytes_per_s)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug of ours must not end scrubbing for good
                log.exception("log scrubber pass failed")
            await asyncio.sleep(max(interval_ms / 1000 - (time.monotonic() - started), 0.05))

    async def scrub_pass(self, bytes_per_s: int) -> int:
        """Check every batch of every segment of every hosted log once (up to each
        segment's size when its turn comes); the bytes checked."""
        total = 0
        for key, plog in list(self.broker.logs.logs.items()):
            for segment in list(plog.segments):
                total += await self._scrub_segment(key, plog, segment, bytes_per_s)
        return total

    async def _scrub_segment(self, key: Key, plog, segment, bytes_per_s: int) -> int:
        scrubber = SegmentScrubber(segment.log_path, segment.base_offset)
        position, next_offset, total = 0, segment.base_offset, 0
        deadline = time.monotonic() + 3600  # a bound: even a huge segment is done within an hour of pacing
        while time.monotonic() < deadline:
            end = segment.size_bytes
            if position >= end or segment not in plog.segments:
                return total
            step = await asyncio.to_thread(scrubber.step, position, end, next_offset)
            total += step.bytes_read
            if step.corrupt is not None:
                # Confirmed on the loop, where nothing appends or truncates
                # meanwhile: a read racing a truncation may have seen a mix.
                again = scrubber.step(step.verified_to, segment.size_bytes, step.next_offset) if segment in plog.segments else None
                if again is not None and again.corrupt is not None and again.corrupt.position == step.corrupt.position:
                    self.batch_found(key, plog, again.corrupt, f"{segment.log_path.name} position {again.corrupt.position}")
                return total
            if step.verified_to <= position:
                return total  # a torn tail, or the file shrank: the next pass looks again
            position, next_offset = step.verified_to, step.next_offset
            if bytes_per_s > 0:
                await asyncio.sleep(step.bytes_read / bytes_per_s)
        return total
