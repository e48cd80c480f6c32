"""Where a consumer group resumes in another cluster, for multi-master topics (pure).

A multi-master topic holds the same batches in every cluster, each cluster
numbering them its own way (broker/links/multi_master_rules.py), so a
group's committed offset in one cluster names no place in another. What
does carry over is *which batches the group has consumed*: every batch
keeps its producer id, epoch and sequence numbers in every cluster, and
every cluster's log holds each producer's batches in sequence order, a
prefix of the producer's writes. The batches a group consumed in the source
(those wholly below its committed offset there) are therefore, per
producer, every batch up to one (epoch, last sequence): the group's
*frontier*, one entry per producer, which carries the producer's origin
cluster in its id.

The place in the destination is the offset of the first batch there that is
not within the frontier. Nothing unconsumed lies before it, so no record is
skipped. Batches after it that are within the frontier (consumed in the
source, numbered later here) are delivered again; their records are
counted and reported. Batches consumed in the source that have not reached
the destination yet arrive after the place and are delivered again too.

Both sides are read incrementally. :class:`ConsumedFrontier` folds the
source's batches from where the last translation stopped, as long as the
group's committed offset only grows (a smaller one starts over from the
source's log start). The frontier only grows then, so every batch below an
earlier place stays consumed and :class:`DestinationScan` resumes from the
earlier place; it reads from the destination's log start whenever the
frontier started over.

Batches without a producer id are local to the cluster holding them (they
are never copied), so one in the destination was not consumed in the
source. Control batches are never delivered, so they are passed over.
A batch the group consumed in part (its committed offset inside the batch)
is not in the frontier: the whole batch is delivered again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.links.multi_master_rules import ProducerHere
from storage.producer_state import last_sequence_of


def within(frontier: dict[int, ProducerHere], header) -> bool:
    """Whether the batch of ``header`` (a protocol.records.BatchHeader) was
    consumed, by ``frontier``; control batches count as consumed."""
    if header.is_control:
        return True
    if header.producer_id < 0:
        return False
    consumed = frontier.get(header.producer_id)
    if consumed is None:
        return False
    if header.producer_epoch != consumed.epoch:
        return header.producer_epoch < consumed.epoch
    return last_sequence_of(header.base_sequence, header.last_offset_delta) <= consumed.last_sequence


def _next_offset(header) -> int:
    return header.base_offset + header.last_offset_delta + 1


@dataclass
class ConsumedFrontier:
    """The batches of a source partition below ``offset``, as a frontier.

    ``offset`` only moves forward while the group's committed offset does;
    ``generation`` counts the times it started over (a destination scan made
    under another generation is no longer a lower bound)."""

    offset: int = 0
    frontier: dict[int, ProducerHere] = field(default_factory=dict)
    generation: int = 0

    def target(self, committed_offset: int) -> bool:
        """Prepare to fold up to ``committed_offset``; True when it is already
        folded. A committed offset below what is folded starts over."""
        if committed_offset < self.offset:
            self.offset = 0
            self.frontier = {}
            self.generation += 1
        return self.offset >= committed_offset

    def start_at(self, log_start_offset: int) -> None:
        """The source's log starts past ``offset`` (retention): the batches
        before it cannot be read, and their producers are missing from the
        frontier, which only makes the place earlier (more delivered again)."""
        self.offset = max(self.offset, log_start_offset)

    def fold(self, headers, committed_offset: int) -> bool:
        """Fold fetched batches (headers in offset order, from ``offset`` on);
        True when everything below ``committed_offset`` is folded."""
        for header in headers:
            end = _next_offset(header)
            if end <= self.offset:
                continue  # before offset: a fetch may start inside an earlier batch
            if end > committed_offset:
                # Consumed in part or not at all: not in the frontier. Read
                # again from the committed offset when that grows.
                self.offset = committed_offset
                return True
            if not header.is_control and header.producer_id >= 0:
                last = last_sequence_of(header.base_sequence, header.last_offset_delta)
                known = self.frontier.get(header.producer_id)
                if known is None or header.producer_epoch > known.epoch or (
                    header.producer_epoch == known.epoch and last > known.last_sequence
                ):
                    self.frontier[header.producer_id] = ProducerHere(header.producer_epoch, last)
            self.offset = end
        return self.offset >= committed_offset


@dataclass
class DestinationScan:
    """The search for the first destination batch outside a frontier.

    ``offset``: every batch below it is within the frontier; ``place``: the
    offset of the first batch outside it once found (-1 until then);
    ``again_records``: records within the frontier after ``place`` seen so
    far (they will be delivered again)."""

    generation: int = -1
    offset: int = 0
    place: int = -1
    again_records: int = 0
    again_scan_offset: int = 0

    def restart(self, generation: int) -> None:
        """A new translation under the frontier's ``generation``: resume at the
        last place when the frontier only grew since, else start over."""
        if generation != self.generation:
            self.generation = generation
            self.offset = 0
        elif self.place >= 0:
            self.offset = self.place
        self.place = -1
        self.again_records = 0
        self.again_scan_offset = self.offset

    def start_over(self) -> None:
        """The destination's log ends before ``offset`` (a leader change lost
        records there): no offset is a lower bound any more."""
        self.offset = self.again_scan_offset = 0
        self.place = -1
        self.again_records = 0

    def start_at(self, log_start_offset: int) -> None:
        """The destination's log starts past ``offset``: nothing before it can be delivered anyway."""
        if self.place < 0:
            self.offset = max(self.offset, log_start_offset)
        self.again_scan_offset = max(self.again_scan_offset, log_start_offset)

    def scan(self, headers, frontier: dict[int, ProducerHere]) -> None:
        """Scan fetched batches (headers in offset order, from ``next_fetch_offset`` on)."""
        for header in headers:
            end = _next_offset(header)
            if end <= self.next_fetch_offset:
                continue
            if self.place < 0:
                if within(frontier, header):
                    self.offset = end
                else:
                    self.place = header.base_offset
                self.again_scan_offset = end
                continue
            if within(frontier, header) and not header.is_control:
                self.again_records += header.last_offset_delta + 1
            self.again_scan_offset = end

    @property
    def next_fetch_offset(self) -> int:
        return self.again_scan_offset

    def answer(self, high_watermark: int) -> int:
        """The place once the scan reached ``high_watermark`` without finding a
        batch outside the frontier: every batch there was consumed."""
        return self.place if self.place >= 0 else max(self.offset, high_watermark)
