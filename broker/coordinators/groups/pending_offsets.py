"""Transactional offset commits that wait for their transaction to end (KIP-98, KIP-447).

A TxnOffsetCommit stores its offsets in ``__consumer_offsets`` inside the
producer's transaction; they take effect only when the transaction's COMMIT
marker reaches that partition, and vanish on ABORT. Until then they are
*pending*: kept per producer id, per group, per topic partition, and invisible
to OffsetFetch (which, asked for stable offsets, answers
UNSTABLE_OFFSET_COMMIT for a partition that has any), to offset expiry and to
lag reports.

Each pending offset remembers the *write position* of its record: the order
in which the coordinator wrote or replayed the records of its partition, which
is the order of their log offsets. Kafka compares log offsets when a commit
marker lands, so that a plain OffsetCommit written after a transactional one
(but before the marker) stays in force; the positions give the same answer.

Pure data: :mod:`broker.coordinators.groups.coordinator` decides what goes in and out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from protocol.consumer_offsets import OffsetAndMetadata

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PendingOffset:
    offset: OffsetAndMetadata
    write_position: int


class PendingTxnOffsets:
    """Pending transactional offsets, indexed two ways: by producer (what a marker
    completes) and by group and partition (what fetches, expiry and tombstones ask)."""

    def __init__(self) -> None:
        # producer id -> group id -> partition -> its pending offset
        self._by_producer: dict[int, dict[str, dict[TopicPartition, PendingOffset]]] = {}
        # group id -> partition -> producer ids with a pending offset there (never empty)
        self._open: dict[str, dict[TopicPartition, set[int]]] = {}

    def add(self, producer_id: int, group_id: str, tp: TopicPartition, pending: PendingOffset) -> None:
        """A later commit of the same producer for the same partition replaces the earlier one."""
        self._by_producer.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = pending
        self._open.setdefault(group_id, {}).setdefault(tp, set()).add(producer_id)

    def has_group(self, group_id: str) -> bool:
        return group_id in self._open

    def has(self, group_id: str, tp: TopicPartition) -> bool:
        return tp in self._open.get(group_id, {})

    def partitions_of(self, group_id: str) -> set[TopicPartition]:
        return set(self._open.get(group_id, {}))

    def group_ids(self) -> list[str]:
        return list(self._open)

    def producer_ids(self) -> list[int]:
        return list(self._by_producer)

    def get(self, producer_id: int, group_id: str, tp: TopicPartition) -> PendingOffset | None:
        return self._by_producer.get(producer_id, {}).get(group_id, {}).get(tp)

    def discard(self, group_id: str, tp: TopicPartition) -> None:
        """A tombstone for the partition: every producer's pending offset there goes."""
        producers = self._open.get(group_id, {}).pop(tp, set())
        for producer_id in producers:
            groups = self._by_producer.get(producer_id)
            if groups is None:
                continue
            offsets = groups.get(group_id)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del groups[group_id]
            if not groups:
                del self._by_producer[producer_id]
        if group_id in self._open and not self._open[group_id]:
            del self._open[group_id]

    def discard_groups(self, group_ids: Iterable[str]) -> None:
        for group_id in list(group_ids):
            for tp in self.partitions_of(group_id):
                self.discard(group_id, tp)

    def take(self, producer_id: int, wanted: Callable[[str], bool]) -> dict[str, dict[TopicPartition, PendingOffset]]:
        """Remove and return the producer's pending offsets of the groups ``wanted``
        accepts (those of one ``__consumer_offsets`` partition: a marker completes
        the transaction there only)."""
        groups = self._by_producer.get(producer_id)
        if not groups:
            return {}
        taken = {group_id: offsets for group_id, offsets in groups.items() if wanted(group_id)}
        for group_id, offsets in taken.items():
            del groups[group_id]
            open_partitions = self._open.get(group_id, {})
            for tp in offsets:
                producers = open_partitions.get(tp)
                if producers is not None:
                    producers.discard(producer_id)
                    if not producers:
                        del open_partitions[tp]
            if group_id in self._open and not open_partitions:
                del self._open[group_id]
        if not groups:
            del self._by_producer[producer_id]
        return taken
