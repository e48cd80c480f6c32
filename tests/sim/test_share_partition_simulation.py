"""Deterministic simulation of a share-partition (pure core) with members that
fetch, acknowledge late or never, leave, and a leader that crashes.

One seed is one run; time is simulated, so a failing seed replays exactly:

    SP_SIM_SEED=<n> pytest tests/sim/test_share_partition_simulation.py

``SP_SIM_SEEDS=<count>`` runs that many seeds from ``SP_SIM_FIRST_SEED`` (0).

The world: a log whose high watermark grows; a leader holding a
:class:`SharePartition` whose every change is written to an in-memory
``__share_group_state`` partition (encoded ShareSnapshot/ShareUpdate records)
before the member is answered. A write may fail: the member is answered an
error (the acquired records are not delivered, the acknowledgement is not
confirmed) and the leader writes a full snapshot next. The leader crashes at
random: its memory, the acquisition locks with it, is gone, and a new one is
rebuilt only from the records. Members acquire with random batch sizes and
settle what they hold with ACCEPT, RELEASE, REJECT or GAP, sometimes after
their lock expired, sometimes never; members leave (their records are
released).

At a crash the log is compacted half the time (the last record of each key
kept), as the log cleaner may have done: the latest snapshot and the latest
update must still say everything.

Invariants, checked after every event, against an oracle that sees only what
members were told:
  * no offset is held by two members at once while its lock holds (a crash
    ends every lock);
  * an offset whose ACCEPT was confirmed is never delivered again;
  * no offset is delivered more than ``delivery_count_limit`` times, and the
    delivery count a member is told is at least the deliveries it has seen;
  * the state rebuilt from the records after a crash is the state the leader
    had made durable (when no write failed since its last snapshot, exactly
    its durable view).
Liveness: once the chaos stops and members accept all they get, every offset
below the high watermark ends acknowledged or archived and the start offset
reaches the high watermark.
"""

from __future__ import annotations

import os
import random

import pytest

from broker.coordinators.share_groups.partition import (
    AcknowledgeType,
    DurableShareState,
    Persist,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)
from protocol.errors import ErrorCode
from protocol.share_state_records import ShareRecordKind, ShareStateRecord, decode_record, encode_record

TOPIC_ID = __import__("uuid").UUID(int=7)


def _seeds() -> list[int]:
    if "SP_SIM_SEED" in os.environ:
        return [int(os.environ["SP_SIM_SEED"])]
    first = int(os.environ.get("SP_SIM_FIRST_SEED", "0"))
    return list(range(first, first + int(os.environ.get("SP_SIM_SEEDS", "40"))))


class World:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.config = SharePartitionConfig(
            record_lock_duration_ms=self.rng.choice([50, 200, 1000]),
            delivery_count_limit=self.rng.choice([1, 2, 3, 5]),
            max_record_locks=self.rng.choice([5, 20, 200]),
            snapshot_every_updates=self.rng.choice([3, 10, 500]),
        )
        self.now_ms = 0
        self.hwm = 0
        self.log: list[tuple[bytes, bytes | None]] = []  # the __share_group_state partition
        self.partition = SharePartition(self.config, 0)
        self.log.append(encode_record(self._record(self.partition.snapshot())))
        self.snapshot_owed = False
        self.members = [f"m{i}" for i in range(self.rng.randint(1, 4))]
        # member -> {offset: (delivery count told, lock deadline)} of what it holds.
        self.held: dict[str, dict[int, tuple[int, int]]] = {m: {} for m in self.members}
        # Oracle, from what members were told.
        self.deliveries: dict[int, int] = {}
        self.accepted: set[int] = set()
        self.holder: dict[int, tuple[str, int]] = {}  # offset -> (member, deadline) while the lock holds

    def _record(self, persist: Persist) -> ShareStateRecord:
        kind = ShareRecordKind.SNAPSHOT if persist.snapshot else ShareRecordKind.UPDATE
        return ShareStateRecord(kind, "g", TOPIC_ID, 0, persist.start_offset, persist.state_batches,
                                snapshot_epoch=persist.snapshot_epoch, leader_epoch=1)

    def write(self, persist: Persist | None) -> bool:
        """Write what a change needs; False when the write failed."""
        if persist is None and not self.snapshot_owed:
            return True
        if self.snapshot_owed:
            persist = self.partition.snapshot()
        if self.rng.random() < 0.05:
            self.snapshot_owed = True
            return False
        self.log.append(encode_record(self._record(persist)))
        self.snapshot_owed = False
        return True

    def rebuild(self) -> DurableShareState:
        durable = DurableShareState()
        for key, value in self.log:
            record = decode_record(key, value)
            durable.apply(Persist(record.kind == ShareRecordKind.SNAPSHOT, record.start_offset, record.state_batches, record.snapshot_epoch))
        return durable

    # ----------------------------------------------------------------- events

    def produce(self) -> None:
        self.hwm += self.rng.randint(1, 8)

    def fetch(self, member: str) -> None:
        acquired, persist = self.partition.acquire(member, self.now_ms, self.hwm, self.rng.randint(1, 12))
        if not self.write(persist):
            return
        deadline = self.now_ms + self.config.record_lock_duration_ms
        for a in acquired:
            for offset in range(a.first_offset, a.last_offset + 1):
                holder = self.holder.get(offset)
                assert holder is None or holder[1] <= self.now_ms, f"offset {offset} given to {member} while {holder} holds it"
                assert offset not in self.accepted, f"accepted offset {offset} delivered again"
                self.deliveries[offset] = self.deliveries.get(offset, 0) + 1
                assert self.deliveries[offset] <= self.config.delivery_count_limit, f"offset {offset} delivered {self.deliveries[offset]} times"
                assert a.delivery_count >= self.deliveries[offset]
                self.holder[offset] = (member, deadline)
                self.held[member][offset] = (a.delivery_count, deadline)

    def acknowledge(self, member: str, accept_only: bool = False) -> None:
        held = sorted(self.held[member])
        if not held:
            return
        chosen = held if accept_only else sorted(self.rng.sample(held, self.rng.randint(1, len(held))))
        kinds = {o: AcknowledgeType.ACCEPT if accept_only else self.rng.choice(list(AcknowledgeType)) for o in chosen}
        runs: list[list[int]] = []
        for offset in chosen:
            if runs and runs[-1][-1] + 1 == offset:
                runs[-1].append(offset)
            else:
                runs.append([offset])
        # A run is sent with one type per offset, or cut where the type changes
        # into batches of one type each: both are what clients send.
        batches = []
        for run in runs:
            if len(run) > 1 and self.rng.random() < 0.5:
                batches.append((run[0], run[-1], [int(kinds[o]) for o in run]))
                continue
            for offset in run:
                if batches and batches[-1][1] + 1 == offset and len(batches[-1][2]) == 1 and batches[-1][2][0] == kinds[offset]:
                    batches[-1] = (batches[-1][0], offset, batches[-1][2])
                else:
                    batches.append((offset, offset, [int(kinds[offset])]))
        error, persist = self.partition.acknowledge(member, batches)
        locked = all(self.held[member][o][1] > self.now_ms for o in chosen)
        if error != ErrorCode.NONE:
            assert error == ErrorCode.INVALID_RECORD_STATE and not locked, (error, batches)
            for offset in chosen:
                self.held[member].pop(offset, None)
            return
        written = self.write(persist)
        for f, l, types in batches:
            for offset in range(f, l + 1):
                kind = types[0] if len(types) == 1 else types[offset - f]
                self.held[member].pop(offset, None)
                if self.holder.get(offset, ("", 0))[0] == member:
                    del self.holder[offset]
                if written and kind == AcknowledgeType.ACCEPT:
                    self.accepted.add(offset)

    def leave(self, member: str) -> None:
        persist = self.partition.release_member(member)
        self.write(persist)  # a failed write: the records are released in memory all the same
        for offset in [o for o, (m, _) in self.holder.items() if m == member]:
            del self.holder[offset]
        self.held[member] = {}

    def tick(self) -> None:
        self.now_ms += self.rng.choice([1, 10, 100, 400])
        self.write(self.partition.expire_locks(self.now_ms))
        for member, held in self.held.items():
            for offset in [o for o, (_, deadline) in held.items() if deadline <= self.now_ms]:
                del held[offset]

    def compact(self) -> None:
        """What the log cleaner leaves of the compacted topic: the last record of each key, in log order."""
        last = {key: i for i, (key, _) in enumerate(self.log)}
        self.log = [record for i, record in enumerate(self.log) if last[record[0]] == i]

    def crash(self) -> None:
        if self.rng.random() < 0.5:
            self.compact()
        durable = self.rebuild()
        if not self.snapshot_owed:
            assert durable.view() == self.partition.durable_view()
        self.partition = SharePartition.from_durable(self.config, durable.start_offset, durable.batches(), durable.snapshot_epoch)
        self.snapshot_owed = False
        # Every lock dies with the leader; members find out when they acknowledge.
        self.holder.clear()
        for held in self.held.values():
            for offset, (count, _) in held.items():
                held[offset] = (count, -1)

    def check(self) -> None:
        ranges = self.partition.ranges()
        position = self.partition.start_offset
        for first, last, state, count, member, deadline in ranges:
            assert first == position and last >= first
            position = last + 1
            assert 0 <= count <= self.config.delivery_count_limit
            assert (member is not None) == (state == RecordState.ACQUIRED)
        assert self.partition.end_offset - self.partition.start_offset <= self.config.max_record_locks or not ranges
        if ranges:
            assert ranges[0][2] not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@pytest.mark.parametrize("seed", _seeds())
def test_share_partition_simulation(seed: int) -> None:
    world = World(seed)
    rng = world.rng
    for _ in range(600):
        event = rng.random()
        member = rng.choice(world.members)
        if event < 0.2:
            world.produce()
        elif event < 0.5:
            world.fetch(member)
        elif event < 0.75:
            world.acknowledge(member)
        elif event < 0.9:
            world.tick()
        elif event < 0.95:
            world.leave(member)
        else:
            world.crash()
        world.check()

    # Calm: no failures, members accept what they get, until everything is settled.
    world.rng = random.Random(seed + 1_000_000)
    world.write = _reliable(world)  # type: ignore[method-assign]
    for _ in range(2000):
        if world.partition.start_offset == world.hwm:
            break
        world.now_ms += world.config.record_lock_duration_ms + 1
        world.write(world.partition.expire_locks(world.now_ms))
        for held in world.held.values():
            held.clear()
        world.holder.clear()
        for member in world.members:
            world.fetch(member)
            world.acknowledge(member, accept_only=True)
        world.check()
    assert world.partition.start_offset == world.hwm, world.partition.ranges()
    world.crash()
    assert world.partition.start_offset == world.hwm


def _reliable(world: World):
    def write(persist: Persist | None) -> bool:
        if world.snapshot_owed:
            persist = world.partition.snapshot()
        if persist is not None:
            world.log.append(encode_record(world._record(persist)))
        world.snapshot_owed = False
        return True

    return write
