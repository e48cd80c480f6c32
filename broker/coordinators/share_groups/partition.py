"""A share-partition: one share group's delivery state of one topic partition (pure).

As Kafka's SharePartition on the partition leader, on offset ranges, never
record by record. Offsets below the share-partition start offset (SPSO) are
done with; offsets from the end offset (SPEO, exclusive here) on have never
been delivered. Between them every offset is in exactly one in-flight range
with one state:

- AVAILABLE: may be acquired (again);
- ACQUIRED: delivered to one member, under an acquisition lock that ends at
  its deadline (``group.share.record.lock.duration.ms`` after acquisition);
- ACKNOWLEDGED: accepted, never delivered again;
- ARCHIVED: rejected, a gap, or delivered ``group.share.delivery.count.limit``
  times; never delivered again.

Acquiring raises a range's delivery count; a range released (RELEASE, its
lock expired, its member left) goes back to AVAILABLE, or to ARCHIVED once its
count reached the limit. The start offset moves past leading ACKNOWLEDGED and
ARCHIVED ranges; the span start..end is capped by
``group.share.partition.max.record.locks``.

Every change returns the ShareUpdate that makes it durable, or a
ShareSnapshot every ``snapshot_every_updates`` writes, as Kafka's share
coordinator does. ``__share_group_state`` is compacted, and its keys are per
share-partition and kind: compaction keeps only the latest snapshot and the
latest update. So an update carries every range changed since the last
snapshot (not only this change's), and both carry the snapshot epoch: an
update of an older snapshot than the one replayed is skipped. What is
durable is :meth:`durable_batches`: acquisition locks are not (they die with
the leader), so an ACQUIRED range is written as what its lock's expiry would
make of it: AVAILABLE, or ARCHIVED at the limit. A leader that loses its
memory and rebuilds from the records (:class:`DurableShareState`) therefore
delivers no record more than the limit, and redelivers no ACKNOWLEDGED one.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass

from protocol.errors import ErrorCode
from protocol.share_state_records import StateBatch


class RecordState(enum.IntEnum):
    """Kafka's RecordState values, as written in state batches."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    """ShareFetch/ShareAcknowledge v1 acknowledge types (RENEW, 4, is v2's)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


@dataclass(frozen=True)
class SharePartitionConfig:
    record_lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_record_locks: int = 2000  # group.share.partition.max.record.locks
    snapshot_every_updates: int = 500  # share.coordinator.snapshot.update.records.per.snapshot


@dataclass
class _Range:
    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None  # ACQUIRED only
    deadline_ms: int = 0  # ACQUIRED only

    def same_as(self, other: _Range) -> bool:
        return (self.state, self.delivery_count, self.member_id, self.deadline_ms) == (
            other.state, other.delivery_count, other.member_id, other.deadline_ms,
        )


@dataclass(frozen=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class Persist:
    """What must be written to ``__share_group_state`` for a change to be durable."""

    snapshot: bool
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    # The snapshot this record is (or the one this update builds on).
    snapshot_epoch: int = 0


class SharePartition:
    def __init__(self, config: SharePartitionConfig, start_offset: int, ranges: list[_Range] | None = None, snapshot_epoch: int = -1):
        self.config = config
        self.start_offset = start_offset
        # Contiguous from start_offset: ranges[i].last + 1 == ranges[i + 1].first.
        self._ranges: list[_Range] = ranges or []
        self._updates_since_snapshot = 0
        self.snapshot_epoch = snapshot_epoch
        # Disjoint, sorted (first, last) ranges changed since the last snapshot.
        self._dirty: list[tuple[int, int]] = []

    # ----------------------------------------------------------------- views

    @property
    def end_offset(self) -> int:
        """The first offset never delivered (exclusive end of the in-flight span)."""
        return self._ranges[-1].last + 1 if self._ranges else self.start_offset

    def ranges(self) -> list[tuple[int, int, RecordState, int, str | None, int]]:
        return [(r.first, r.last, r.state, r.delivery_count, r.member_id, r.deadline_ms) for r in self._ranges]

    def durable_state(self, state: RecordState, count: int) -> RecordState:
        if state != RecordState.ACQUIRED:
            return state
        return RecordState.ARCHIVED if count >= self.config.delivery_count_limit else RecordState.AVAILABLE

    def durable_batches(self) -> tuple[StateBatch, ...]:
        """The in-flight ranges as they survive the loss of this leader, merged,
        without never-delivered ones."""
        return _normalize(
            (r.first, r.last, int(self.durable_state(r.state, r.delivery_count)), r.delivery_count) for r in self._ranges
        )

    def durable_view(self) -> tuple[int, tuple[StateBatch, ...]]:
        """What a leader rebuilt from the durable state would hold: the start offset
        and the durable batches, the start moved past what is done."""
        return canonical_view(self.start_offset, self.durable_batches())

    def next_acquirable_offset(self, fetchable_end: int) -> int | None:
        """The first offset an acquisition would take now, or None."""
        for r in self._ranges:
            if r.state == RecordState.AVAILABLE and r.first < fetchable_end:
                return r.first
        end = self.end_offset
        if end < fetchable_end and end < self.start_offset + self.config.max_record_locks:
            return end
        return None

    def acquired_by(self, member_id: str) -> int:
        return sum(r.last - r.first + 1 for r in self._ranges if r.state == RecordState.ACQUIRED and r.member_id == member_id)

    def next_deadline_ms(self) -> int | None:
        return min((r.deadline_ms for r in self._ranges if r.state == RecordState.ACQUIRED), default=None)

    # ----------------------------------------------------------------- ranges

    def _index(self, offset: int) -> int:
        """Index of the range holding ``offset`` (start_offset <= offset < end_offset)."""
        return bisect.bisect_right([r.first for r in self._ranges], offset) - 1

    def _split_at(self, offset: int) -> None:
        """Make ``offset`` the first offset of a range (when it is in flight)."""
        if offset <= self.start_offset or offset >= self.end_offset:
            return
        i = self._index(offset)
        r = self._ranges[i]
        if r.first == offset:
            return
        tail = _Range(offset, r.last, r.state, r.delivery_count, r.member_id, r.deadline_ms)
        r.last = offset - 1
        self._ranges.insert(i + 1, tail)

    def _slice(self, first: int, last: int) -> list[_Range]:
        """The ranges covering exactly first..last (in flight), split to fit."""
        self._split_at(first)
        self._split_at(last + 1)
        lo, hi = self._index(first), self._index(last)
        return self._ranges[lo : hi + 1]

    def _normalize(self) -> None:
        """Merge equal neighbours and move the start past what is done."""
        merged: list[_Range] = []
        for r in self._ranges:
            if merged and merged[-1].same_as(r):
                merged[-1].last = r.last
            else:
                merged.append(r)
        while merged and merged[0].state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
            self.start_offset = merged.pop(0).last + 1
        self._ranges = merged

    def _changed(self, changed: list[tuple[int, int]]) -> Persist | None:
        """The record that makes the changes of ``changed`` ranges durable."""
        self._normalize()
        if not changed:
            return None
        return self._update(changed)

    def _update(self, changed: list[tuple[int, int]]) -> Persist:
        self._updates_since_snapshot += 1
        if self._updates_since_snapshot >= self.config.snapshot_every_updates or self.snapshot_epoch < 0:
            return self.snapshot()
        self._dirty = _merge_ranges(self._dirty + changed, self.start_offset)
        batches = []
        for first, last in self._dirty:
            for r in self._ranges:
                if r.last < first or r.first > last:
                    continue
                batches.append((max(r.first, first), min(r.last, last), int(self.durable_state(r.state, r.delivery_count)), r.delivery_count))
        return Persist(False, self.start_offset, tuple(batches), self.snapshot_epoch)

    def snapshot(self) -> Persist:
        """The whole durable state, as a new snapshot (the next updates build on it)."""
        self._updates_since_snapshot = 0
        self._dirty = []
        self.snapshot_epoch += 1
        return Persist(True, self.start_offset, self.durable_batches(), self.snapshot_epoch)

    def _release(self, r: _Range) -> None:
        r.state = RecordState.ARCHIVED if r.delivery_count >= self.config.delivery_count_limit else RecordState.AVAILABLE
        r.member_id = None
        r.deadline_ms = 0

    # ----------------------------------------------------------------- operations

    def acquire(self, member_id: str, now_ms: int, fetchable_end: int, max_records: int) -> tuple[list[Acquired], Persist | None]:
        """Acquire up to ``max_records`` offsets for ``member_id``: available
        in-flight ranges first (redeliveries), then new offsets below
        ``fetchable_end`` (the high watermark) within the in-flight cap."""
        acquired: list[Acquired] = []
        changed: list[tuple[int, int]] = []
        budget = max(max_records, 1)
        deadline = now_ms + self.config.record_lock_duration_ms
        i = 0
        while i < len(self._ranges) and budget > 0:
            r = self._ranges[i]
            if r.state == RecordState.AVAILABLE and r.first < fetchable_end:
                last = min(r.last, r.first + budget - 1, fetchable_end - 1)
                if last < r.last:
                    self._split_at(last + 1)
                r.state, r.member_id, r.deadline_ms = RecordState.ACQUIRED, member_id, deadline
                r.delivery_count += 1
                acquired.append(Acquired(r.first, r.last, r.delivery_count))
                changed.append((r.first, r.last))
                budget -= r.last - r.first + 1
            i += 1
        first = self.end_offset
        last = min(fetchable_end, self.start_offset + self.config.max_record_locks, first + budget) - 1
        if last >= first:
            self._ranges.append(_Range(first, last, RecordState.ACQUIRED, 1, member_id, deadline))
            acquired.append(Acquired(first, last, 1))
            changed.append((first, last))
        acquired.sort(key=lambda a: a.first_offset)
        return acquired, self._changed(changed)

    def acknowledge(self, member_id: str, batches: list[tuple[int, int, list[int]]]) -> tuple[ErrorCode, Persist | None]:
        """Settle offsets ``member_id`` holds, all or none: INVALID_REQUEST for a
        malformed batch, INVALID_RECORD_STATE when an offset is not acquired by
        it (not in flight, another member's, its lock expired)."""
        plan: list[tuple[int, int, AcknowledgeType]] = []
        previous_last = None
        for first, last, types in batches:
            if first > last or (previous_last is not None and first <= previous_last):
                return ErrorCode.INVALID_REQUEST, None
            previous_last = last
            if any(t not in AcknowledgeType._value2member_map_ for t in types):
                return ErrorCode.INVALID_REQUEST, None
            if len(types) == 1:
                plan.append((first, last, AcknowledgeType(types[0])))
            elif len(types) == last - first + 1:
                plan.extend((first + k, first + k, AcknowledgeType(t)) for k, t in enumerate(types))
            else:
                return ErrorCode.INVALID_REQUEST, None
        for first, last, _ in plan:
            if first < self.start_offset or last >= self.end_offset:
                return ErrorCode.INVALID_RECORD_STATE, None
            lo, hi = self._index(first), self._index(last)
            if any(r.state != RecordState.ACQUIRED or r.member_id != member_id for r in self._ranges[lo : hi + 1]):
                return ErrorCode.INVALID_RECORD_STATE, None
        changed = []
        for first, last, kind in plan:
            for r in self._slice(first, last):
                if kind == AcknowledgeType.ACCEPT:
                    r.state = RecordState.ACKNOWLEDGED
                elif kind == AcknowledgeType.RELEASE:
                    self._release(r)
                    continue
                else:  # GAP, REJECT
                    r.state = RecordState.ARCHIVED
                r.member_id, r.deadline_ms = None, 0
            changed.append((first, last))
        return ErrorCode.NONE, self._changed(changed)

    def expire_locks(self, now_ms: int) -> Persist | None:
        """Release every range whose acquisition lock has ended."""
        changed = []
        for r in self._ranges:
            if r.state == RecordState.ACQUIRED and r.deadline_ms <= now_ms:
                self._release(r)
                changed.append((r.first, r.last))
        return self._changed(changed)

    def release_member(self, member_id: str) -> Persist | None:
        """Release what a member that left (or whose share session closed) holds."""
        changed = []
        for r in self._ranges:
            if r.state == RecordState.ACQUIRED and r.member_id == member_id:
                self._release(r)
                changed.append((r.first, r.last))
        return self._changed(changed)

    def advance_start(self, log_start_offset: int) -> Persist | None:
        """Records below the log start are gone (retention, DeleteRecords): the
        start offset moves up to it."""
        if log_start_offset <= self.start_offset:
            return None
        if log_start_offset >= self.end_offset:
            self._ranges = []
        else:
            self._split_at(log_start_offset)
            self._ranges = self._ranges[self._index(log_start_offset):]
        self.start_offset = log_start_offset
        self._normalize()
        return self._update([])

    # ----------------------------------------------------------------- rebuild

    @classmethod
    def from_durable(cls, config: SharePartitionConfig, start_offset: int, batches: tuple[StateBatch, ...],
                     snapshot_epoch: int = -1) -> SharePartition:
        """The share-partition as a new leader rebuilds it from its durable state."""
        ranges: list[_Range] = []
        position = start_offset
        for first, last, state, count in batches:
            if last < position:
                continue
            first = max(first, position)
            if first > position:
                ranges.append(_Range(position, first - 1, RecordState.AVAILABLE, 0))
            durable = RecordState(state) if state in RecordState._value2member_map_ else RecordState.AVAILABLE
            if durable == RecordState.ACQUIRED:  # written by another implementation: its lock is gone
                durable = RecordState.ARCHIVED if count >= config.delivery_count_limit else RecordState.AVAILABLE
            ranges.append(_Range(first, last, durable, count))
            position = last + 1
        # The first write of the new leader is a snapshot (at the next epoch): it
        # does not know which ranges the stored update covers.
        partition = cls(config, start_offset, ranges, snapshot_epoch)
        partition._updates_since_snapshot = config.snapshot_every_updates
        partition._normalize()
        return partition


def _merge_ranges(ranges: list[tuple[int, int]], start_offset: int) -> list[tuple[int, int]]:
    """``ranges`` clipped to ``start_offset``, sorted, overlapping and touching ones joined."""
    merged: list[list[int]] = []
    for first, last in sorted((max(f, start_offset), l) for f, l in ranges if l >= start_offset):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return [(f, l) for f, l in merged]


def _normalize(batches) -> tuple[StateBatch, ...]:
    """Merge equal neighbours and leave out never-delivered offsets (AVAILABLE,
    count 0): a gap between batches means just that."""
    out: list[list[int]] = []
    for first, last, state, count in batches:
        if state == RecordState.AVAILABLE and count == 0:
            continue
        if out and out[-1][1] + 1 == first and out[-1][2:] == [state, count]:
            out[-1][1] = last
        else:
            out.append([first, last, state, count])
    return tuple(tuple(b) for b in out)  # type: ignore[misc]


def canonical_view(start_offset: int, batches: tuple[StateBatch, ...]) -> tuple[int, tuple[StateBatch, ...]]:
    """``(start_offset, batches)`` with the start moved past leading done batches,
    so that equal states compare equal however they were written."""
    done = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
    batches = _normalize(batches)
    i = 0
    while i < len(batches) and batches[i][0] <= start_offset and batches[i][2] in done:
        start_offset = max(start_offset, batches[i][1] + 1)
        i += 1
    return start_offset, tuple(b for b in batches[i:] if b[1] >= start_offset)


class DurableShareState:
    """A share-partition's state as ``__share_group_state`` holds it: the last
    snapshot with the updates after it laid over, in write order.

    ``state_epoch`` goes up each time an administrator sets the state anew
    (AlterShareGroupOffsets through InitializeShareGroupState): a partition
    leader that built its share-partition from an older state epoch is fenced
    (FENCED_STATE_EPOCH) and builds it again from what is stored."""

    def __init__(self, start_offset: int = 0, batches: tuple[StateBatch, ...] = (), snapshot_epoch: int = -1, state_epoch: int = 0):
        self.start_offset = start_offset
        self._batches: list[StateBatch] = list(batches)
        self.snapshot_epoch = snapshot_epoch
        self.state_epoch = state_epoch

    @classmethod
    def initialized(cls, held: DurableShareState | None, start_offset: int, state_epoch: int) -> DurableShareState:
        """The state InitializeShareGroupState stores: nothing in flight, the start
        at ``start_offset``, a snapshot past ``held``'s so that updates written
        against the old snapshot are skipped on replay."""
        return cls(start_offset, (), (held.snapshot_epoch + 1) if held is not None else 0, state_epoch)

    def apply(self, persist: Persist) -> None:
        if persist.snapshot:
            self.start_offset = persist.start_offset
            self._batches = list(persist.state_batches)
            self.snapshot_epoch = persist.snapshot_epoch
        elif persist.snapshot_epoch != self.snapshot_epoch:
            return  # an update of another snapshot (compaction kept it): the snapshot has it all
        else:
            for batch in persist.state_batches:
                self._overlay(batch)
            self.start_offset = max(self.start_offset, persist.start_offset)
        self._batches = [
            (max(f, self.start_offset), l, s, c) for f, l, s, c in self._batches if l >= self.start_offset
        ]

    def _overlay(self, batch: StateBatch) -> None:
        first, last = batch[0], batch[1]
        kept: list[StateBatch] = []
        for f, l, s, c in self._batches:
            if l < first or f > last:
                kept.append((f, l, s, c))
                continue
            if f < first:
                kept.append((f, first - 1, s, c))
            if l > last:
                kept.append((last + 1, l, s, c))
        kept.append(batch)
        kept.sort()
        self._batches = kept

    def batches(self) -> tuple[StateBatch, ...]:
        """Normalized as :meth:`SharePartition.durable_batches` is, from the start offset."""
        return _normalize(b for b in self._batches if b[1] >= self.start_offset)

    def view(self) -> tuple[int, tuple[StateBatch, ...]]:
        return canonical_view(self.start_offset, self.batches())
