"""Producer id ranges per origin cluster (cluster links, multi-master topics).

Clusters that all take writes to one topic and copy each other's batches
(broker/links/multi_master.py) tell whose batch is whose by its producer id:
each cluster has a distinct origin number (``cluster.link.origin.id``,
0-1023) and its active controller hands out producer ids only inside
``[origin << 48, (origin + 1) << 48)``. A batch's origin is then
``producer_id >> 48`` wherever it was copied to, with nothing added to the
batch (its bytes and CRC stay the producer's). 2**48 ids per origin outlast
any cluster: a block of 1,000 ids per second would take 8,900 years.

Origin 0 is the range every cluster used before origins existed (ids from
0), so a cluster that never sets the key is unchanged.

A controller whose origin disagrees with the ids already handed out (the
image's next producer id lies in another origin's range) refuses to
allocate: a node configured differently from the others would otherwise
hand out ids of another cluster, and its producers' batches would be taken
for that cluster's and skipped by the links.
"""

from __future__ import annotations

ORIGIN_SHIFT_BITS = 48
MAX_ORIGIN_ID = 1023


class ProducerIdOriginError(ValueError):
    """This controller's origin does not match the producer ids handed out so far."""


def origin_of(producer_id: int) -> int:
    """The origin cluster of a producer id (-1 for a batch without one)."""
    return producer_id >> ORIGIN_SHIFT_BITS if producer_id >= 0 else -1


def origin_range(origin_id: int) -> range:
    """The producer ids of ``origin_id``."""
    if not 0 <= origin_id <= MAX_ORIGIN_ID:
        raise ValueError(f"origin id {origin_id} is not in 0..{MAX_ORIGIN_ID}")
    return range(origin_id << ORIGIN_SHIFT_BITS, (origin_id + 1) << ORIGIN_SHIFT_BITS)


def next_block(next_producer_id: int, origin_id: int, block_size: int) -> range:
    """The block a controller of ``origin_id`` hands out when the image's next
    producer id is ``next_producer_id`` (0: none handed out yet, so the block
    starts at the origin's first id). ProducerIdOriginError when the next id
    belongs to another origin or the origin's range is used up."""
    ids = origin_range(origin_id)
    start = ids.start if next_producer_id == 0 else next_producer_id
    if start not in ids:
        raise ProducerIdOriginError(
            f"cluster.link.origin.id is {origin_id} (producer ids {ids.start}..{ids.stop - 1}), but this cluster "
            f"has handed out producer ids up to {next_producer_id - 1} (origin {origin_of(next_producer_id - 1)}): "
            "every controller of a cluster must have the same cluster.link.origin.id, and it cannot change once "
            "producer ids were handed out"
        )
    if start + block_size > ids.stop:
        raise ProducerIdOriginError(f"the producer ids of origin {origin_id} are used up")
    return range(start, start + block_size)
