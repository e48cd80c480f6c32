"""Where a group resumes in another cluster of a multi-master topic
(broker/links/group_translation_rules.py), checked against a direct
computation over seeded random logs: every cluster's log holds each
producer's batches in order (a prefix of its writes), interleaved its own
way, with control batches and local batches without a producer id.

The place must leave out no batch the group did not consume at the source,
be the first such batch, count exactly the consumed records after it, and be
the same when both logs are read in small pieces, as the sync reads them over
several rounds with the group's committed offset growing (or moved back).
"""

from __future__ import annotations

import random

import pytest

from broker.links.group_translation_rules import ConsumedFrontier, DestinationScan, within
from broker.links.multi_master_rules import ProducerHere
from protocol.records import BatchHeader

CONTROL = 0x20
SEEDS = range(300)


def header(base_offset: int, records: int, producer_id: int = -1, epoch: int = -1, base_sequence: int = -1, attributes: int = 0):
    return BatchHeader(base_offset, 0, 0, 2, 0, attributes, records - 1, 0, 0, producer_id, epoch, base_sequence, records)


def producer_batches(rng: random.Random, producer_id: int) -> list[tuple]:
    """(producer id, epoch, base sequence, records) of one producer's writes, epochs bumped now and then."""
    batches, epoch, sequence = [], 0, 0
    for _ in range(rng.randint(1, 12)):
        if rng.random() < 0.1:
            epoch, sequence = epoch + 1, 0
        records = rng.randint(1, 4)
        batches.append((producer_id, epoch, sequence, records))
        sequence += records
    return batches


def cluster_log(rng: random.Random, producers: dict[int, list[tuple]], local_batches: int) -> list:
    """A log holding a prefix of each producer's batches, in order, interleaved at random."""
    queues = {pid: list(batches[: rng.randint(0, len(batches))]) for pid, batches in producers.items()}
    items = [("local", None)] * local_batches + [("control", None)] * rng.randint(0, 3)
    order = []
    for pid, batches in queues.items():
        order.extend([pid] * len(batches))
    order.extend(kind for kind, _ in items)
    rng.shuffle(order)
    headers, offset = [], rng.choice([0, 0, 5])
    for item in order:
        if item == "local":
            records = rng.randint(1, 3)
            headers.append(header(offset, records))
        elif item == "control":
            records = 1
            headers.append(header(offset, 1, producer_id=999, epoch=0, base_sequence=-1, attributes=CONTROL))
        else:
            pid, epoch, sequence, records = queues[item].pop(0)
            headers.append(header(offset, records, pid, epoch, sequence))
        offset += records
    return headers


def fetch(log: list, offset: int, batches: int) -> list:
    """What a Fetch at ``offset`` returns: from the batch holding it on, up to ``batches`` batches."""
    return [h for h in log if h.next_offset > offset][:batches]


def expected_place(source: list, committed_offset: int, destination: list) -> tuple[int, int]:
    consumed = {
        (h.producer_id, h.producer_epoch, h.base_sequence)
        for h in source
        if h.next_offset <= committed_offset and not h.is_control and h.producer_id >= 0
    }

    def was_consumed(h) -> bool:
        return h.producer_id >= 0 and (h.producer_id, h.producer_epoch, h.base_sequence) in consumed

    place = None
    again = 0
    for h in destination:
        if h.is_control:
            continue
        if place is None:
            if not was_consumed(h):
                place = h.base_offset
        elif was_consumed(h):
            again += h.last_offset_delta + 1
    end = destination[-1].next_offset if destination else 0
    return (end if place is None else place), again


def translate(frontier: ConsumedFrontier, scan: DestinationScan, source, destination, committed_offset: int, rng) -> tuple[int, int]:
    high_watermark = destination[-1].next_offset if destination else 0
    log_start = destination[0].base_offset if destination else 0
    if not frontier.target(committed_offset):
        for _ in range(1000):
            if frontier.fold(fetch(source, frontier.offset, rng.randint(1, 3)), committed_offset):
                break
        else:
            pytest.fail("the fold did not end")
    scan.restart(frontier.generation)
    scan.start_at(log_start)
    for _ in range(1000):
        if scan.next_fetch_offset >= high_watermark:
            break
        scan.scan(fetch(destination, scan.next_fetch_offset, rng.randint(1, 3)), frontier.frontier)
    else:
        pytest.fail("the scan did not end")
    return scan.answer(high_watermark), scan.again_records


@pytest.mark.parametrize("seed", SEEDS)
def test_the_place_is_the_first_batch_not_consumed_at_the_source(seed):
    rng = random.Random(seed)
    producers = {(origin << 48) + n: producer_batches(rng, (origin << 48) + n) for origin in (1, 2) for n in range(rng.randint(1, 3))}
    source = cluster_log(rng, producers, local_batches=rng.randint(0, 2))
    destination = cluster_log(rng, producers, local_batches=rng.randint(0, 2))
    source_end = source[-1].next_offset if source else 0
    frontier, scan = ConsumedFrontier(), DestinationScan()
    committed = sorted(rng.randint(0, source_end) for _ in range(4))
    if rng.random() < 0.3:
        committed.append(rng.randint(0, source_end))  # moved back (or not) by an admin tool
    for committed_offset in committed:
        assert translate(frontier, scan, source, destination, committed_offset, rng) == expected_place(
            source, committed_offset, destination
        ), committed_offset


def test_a_partly_consumed_batch_is_delivered_again_whole():
    pid = 1 << 48
    source = [header(0, 3, pid, 0, 0), header(3, 3, pid, 0, 3)]
    destination = [header(10, 3, pid, 0, 0), header(13, 3, pid, 0, 3)]
    frontier = ConsumedFrontier()
    frontier.target(4)  # inside the second batch
    assert frontier.fold(source, 4)
    assert frontier.frontier == {pid: ProducerHere(0, 2)}
    scan = DestinationScan()
    scan.restart(frontier.generation)
    scan.scan(destination, frontier.frontier)
    assert scan.answer(16) == 13


def test_batches_without_producer_id_were_not_consumed_and_control_batches_were():
    frontier = {1 << 48: ProducerHere(0, 9)}
    assert not within(frontier, header(0, 1))
    assert within(frontier, header(0, 1, producer_id=5, epoch=0, base_sequence=-1, attributes=CONTROL))
    assert within(frontier, header(0, 2, 1 << 48, 0, 8))
    assert not within(frontier, header(0, 2, 1 << 48, 0, 9))


def test_an_older_epoch_is_consumed_and_a_newer_one_is_not():
    frontier = {7: ProducerHere(3, 4)}
    assert within(frontier, header(0, 5, 7, 2, 100))
    assert not within(frontier, header(0, 1, 7, 4, 0))
