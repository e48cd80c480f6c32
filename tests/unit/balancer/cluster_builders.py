"""Cluster states for the planner's tests, and the hard goals checked from scratch.

The checks here do not use ``controller.balancer.goals``: they restate the
hard goals directly, so that a mistake shared by the planner and its own
measures still shows.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import strategies as st

from controller.balancer.model import BrokerLoad, BrokerState, ClusterState, GoalConfig, PartitionLoad, Plan

ALIVE, CORDONED, DRAINING, DEAD = BrokerState.ALIVE, BrokerState.CORDONED, BrokerState.DRAINING, BrokerState.DEAD
UNBOUNDED = GoalConfig(max_moves_per_broker=None)


def even_cluster(brokers: int, partitions: int, rf: int = 3, *, empty: int = 0, size: int = 1000, rate: int = 0,
                 racks: int = 0, topics: int = 1) -> ClusterState:
    """``partitions`` partitions placed round-robin over the first ``brokers``
    brokers, plus ``empty`` brokers holding nothing."""
    broker_list = tuple(
        BrokerLoad(b, rack=None if racks == 0 else f"rack-{b % racks}") for b in range(brokers + empty)
    )
    parts = []
    for i in range(partitions):
        replicas = tuple((i + k) % brokers for k in range(rf))
        parts.append(PartitionLoad(f"topic-{i % topics}", i // topics, replicas, replicas[0], replicas, size, rate))
    return with_disk_use(ClusterState(broker_list, tuple(parts)))


def with_disk_use(state: ClusterState, extra: dict[int, int] | None = None) -> ClusterState:
    """The brokers' used bytes set to their replicas' sizes (plus ``extra``)."""
    used = Counter()
    for p in state.partitions:
        for b in p.replicas:
            used[b] += p.size_bytes
    extra = extra or {}
    brokers = tuple(
        BrokerLoad(b.broker_id, b.rack, b.state, b.disk_capacity_bytes, used[b.broker_id] + extra.get(b.broker_id, 0),
                   b.bytes_in_per_second, b.bytes_out_per_second)
        for b in state.brokers
    )
    return ClusterState(brokers, state.partitions)


@st.composite
def clusters(draw, max_brokers: int = 12, max_partitions: int = 30) -> ClusterState:
    """Random clusters: 1-12 brokers in 0-4 racks (0: no racks), some dead,
    cordoned or draining, with or without a disk capacity; partitions of RF 1-3
    over 1-4 topics with sizes and rates, some with an ISR short of a replica."""
    broker_count = draw(st.integers(1, max_brokers))
    rack_count = draw(st.integers(0, 4))
    brokers = []
    for b in range(broker_count):
        brokers.append(BrokerLoad(
            broker_id=b,
            rack=None if rack_count == 0 else f"r{draw(st.integers(0, rack_count - 1))}",
            state=draw(st.sampled_from([ALIVE, ALIVE, ALIVE, ALIVE, ALIVE, DEAD, CORDONED, DRAINING])),
            disk_capacity_bytes=draw(st.sampled_from([0, 0, 8_000, 20_000, 100_000])),
            bytes_in_per_second=draw(st.sampled_from([0, 0, 500])),
            bytes_out_per_second=draw(st.sampled_from([0, 0, 800])),
        ))
    topics = draw(st.integers(1, 4))
    partitions = []
    for i in range(draw(st.integers(0, max_partitions))):
        rf = draw(st.integers(1, min(3, broker_count)))
        replicas = tuple(draw(st.permutations(range(broker_count)))[:rf])
        isr = replicas if draw(st.integers(0, 3)) else replicas[:max(1, rf - 1)]
        partitions.append(PartitionLoad(
            topic=f"t{i % topics}",
            partition=i // topics,
            replicas=replicas,
            leader=isr[0],
            isr=isr,
            size_bytes=draw(st.sampled_from([0, 100, 1_000, 3_000])),
            bytes_in_per_second=draw(st.sampled_from([0, 0, 100, 1_000])),
        ))
    return with_disk_use(ClusterState(tuple(brokers), tuple(partitions)))


# --------------------------------------------------------------------------- hard goals restated


def takers(state: ClusterState) -> list[int]:
    return sorted(b.broker_id for b in state.brokers if b.state is ALIVE)


def states_of(state: ClusterState) -> dict[int, BrokerState]:
    return {b.broker_id: b.state for b in state.brokers}


def has_live_in_sync_replica(state: ClusterState, partition: PartitionLoad) -> bool:
    states = states_of(state)
    return any(b in partition.replicas and states.get(b, DEAD) is not DEAD for b in partition.isr)


def misplaced(state: ClusterState, partition: PartitionLoad) -> list[int]:
    """Replicas on brokers that must not hold them."""
    states = states_of(state)
    return [b for b in partition.replicas if states.get(b, DEAD) in (DEAD, DRAINING)]


def racks_short(state: ClusterState, partition: PartitionLoad) -> int:
    """How many racks short of min(RF, racks of the ALIVE brokers) the live replicas are."""
    rack = {b.broker_id: b.rack for b in state.brokers}
    states = states_of(state)
    racks = {rack[b] for b in takers(state)}
    covered = {rack[b] for b in partition.replicas if states.get(b, DEAD) is not DEAD}
    return max(0, min(len(partition.replicas), len(racks)) - len(covered))


def over_disk_threshold(state: ClusterState, config: GoalConfig) -> list[int]:
    return [
        b.broker_id for b in state.brokers
        if b.state is not DEAD and b.disk_capacity_bytes > 0
        and b.disk_used_bytes > int(b.disk_capacity_bytes * config.disk_threshold_fraction)
    ]


def replica_counts(state: ClusterState) -> dict[int, int]:
    counts = {b: 0 for b in takers(state)}
    for p in state.partitions:
        for b in p.replicas:
            if b in counts:
                counts[b] += 1
    return counts


def leader_counts(state: ClusterState) -> dict[int, int]:
    counts = {b: 0 for b in takers(state)}
    for p in state.partitions:
        if p.replicas[0] in counts:
            counts[p.replicas[0]] += 1
    return counts


def touches_per_broker(state: ClusterState, plan: Plan) -> Counter:
    """Data moves adding or removing a replica on each live broker."""
    states = states_of(state)
    touched = Counter()
    for move in plan.moves:
        for b in set(move.added) | set(move.removed):
            if states.get(b, DEAD) is not DEAD:
                touched[b] += 1
    return touched
