"""Where the replicas of new partitions go: rack-aware, leader-balanced placement.

The algorithm (pure; the only source of variety is the ``rng`` passed in):

1. Group the usable brokers by rack (brokers without a rack form one group of
   their own), shuffle the order of the racks and the order of the brokers in
   each rack with ``rng``.
2. Deal the brokers out one rack at a time, round-robin over the racks, into
   the *leader order*: consecutive entries are on different racks for as long
   as every rack still has brokers to deal.
3. Partition ``p`` (counting from ``start_partition``, so that partitions added
   later continue the same rotation) is led by ``leader_order[(p + shift) % n]``
   for one random ``shift``: over any ``n`` consecutive partitions every broker
   leads exactly once.
4. Its followers are picked rack by rack, starting with the rack after the
   leader's and going round the racks: each pass takes one broker from every
   rack the partition does not use yet, so a partition's replicas cover
   ``min(replication_factor, racks)`` racks. Within a rack a cursor moves on
   after each pick, so follower load spreads over the rack's brokers.

This follows what Kafka documents for its rack-aware placement (leaders spread
evenly, replicas on as many racks as possible) without reproducing its exact
assignment, which no client depends on.

Which brokers are usable is decided before: registered, unfenced, not in
controlled shutdown, not cordoned or draining (``MetadataImage.broker_placement``:
``pybroker cluster cordon`` / ``remove-broker``, KIP-1066's cordon), and, when
the active controller passes the brokers it has heard from (``live``), one of
those. Replicas named by hand (a replica assignment) may still go to a cordoned
broker: the operator chose it. A newly active controller grants every
unfenced broker a session without knowing whether it still runs; a broker that
died just before the failover stays unfenced until that session runs out and
must not receive new replicas meanwhile.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from controller.metadata.image import MetadataImage


class PlacementError(ValueError):
    """The placement cannot be made (Kafka's INVALID_REPLICATION_FACTOR)."""


def usable_brokers(
    image: MetadataImage, live: Collection[int] | None = None, *, cordoned_too: bool = False
) -> list[tuple[int, str | None]]:
    """(broker id, rack) of every broker new replicas may go to: registered, unfenced,
    not in controlled shutdown, not cordoned or draining (unless ``cordoned_too``:
    a cordoned broker still serves and follows) and, when ``live`` is given, in
    it; by broker id."""
    return [
        (broker_id, broker.rack)
        for broker_id, broker in sorted(image.brokers.items())
        if not broker.fenced and not broker.in_controlled_shutdown
        and (cordoned_too or broker_id not in image.broker_placement)
        and (live is None or broker_id in live)
    ]


def place_replicas_error(broker_count: int, replication_factor: int) -> str:
    return (
        f"The target replication factor of {replication_factor} cannot be reached because only "
        f"{broker_count} broker(s) are registered."
    )


def place_replicas(
    brokers: Sequence[tuple[int, str | None]],
    num_partitions: int,
    replication_factor: int,
    *,
    start_partition: int = 0,
    rng: random.Random,
) -> list[list[int]]:
    """One replica list per partition (the first replica is the intended leader).

    ``brokers`` are (id, rack) of the usable brokers. Raises :class:`PlacementError`
    when ``replication_factor`` is below 1 or above the number of brokers.
    """
    if replication_factor < 1:
        raise PlacementError("Replication factor must be larger than 0.")
    broker_count = len({broker_id for broker_id, _ in brokers})
    if replication_factor > broker_count:
        raise PlacementError(place_replicas_error(broker_count, replication_factor))
    if num_partitions < 0:
        raise PlacementError("The number of partitions cannot be negative.")

    # Sorted before shuffling, so the result depends on the rng and not on the input order.
    by_rack: dict[str | None, list[int]] = {}
    for broker_id, rack in sorted(set(brokers), key=lambda pair: pair[0]):
        by_rack.setdefault(rack, []).append(broker_id)
    rack_names = sorted(by_rack, key=lambda name: (name is not None, name or ""))
    rng.shuffle(rack_names)
    racks = [by_rack[name] for name in rack_names]
    for rack_brokers in racks:
        rng.shuffle(rack_brokers)
    rack_index_of = {broker_id: index for index, rack_brokers in enumerate(racks) for broker_id in rack_brokers}

    leader_order: list[int] = []
    for depth in range(max(len(rack_brokers) for rack_brokers in racks)):
        leader_order.extend(rack_brokers[depth] for rack_brokers in racks if depth < len(rack_brokers))
    shift = rng.randrange(len(leader_order))
    # Where each rack's next follower pick starts.
    follower_cursors = [0] * len(racks)

    assignments = []
    for partition in range(start_partition, start_partition + num_partitions):
        leader = leader_order[(partition + shift) % len(leader_order)]
        replicas = [leader]
        chosen = {leader}
        first_rack = rack_index_of[leader] + 1
        while len(replicas) < replication_factor:
            # One pass: at most one new broker from each rack not used in this pass yet.
            used_racks = {rack_index_of[b] for b in replicas} if len(replicas) < len(racks) else set()
            for step in range(len(racks)):
                if len(replicas) == replication_factor:
                    break
                rack = (first_rack + step) % len(racks)
                if rack in used_racks:
                    continue
                pick = _next_unchosen(racks[rack], follower_cursors, rack, chosen)
                if pick is not None:
                    replicas.append(pick)
                    chosen.add(pick)
                    used_racks.add(rack)
        assignments.append(replicas)
    return assignments


def _next_unchosen(rack_brokers: list[int], cursors: list[int], rack: int, chosen: set[int]) -> int | None:
    for offset in range(len(rack_brokers)):
        index = (cursors[rack] + offset) % len(rack_brokers)
        if rack_brokers[index] not in chosen:
            cursors[rack] = index + 1
            return rack_brokers[index]
    return None
