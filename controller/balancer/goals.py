"""How far a cluster is from each balancing goal, measured from scratch (pure).

Every goal has a *distance*, a whole number that is 0 when the goal is met;
the planner keeps the same figures up to date move by move, and this module is
the definition they must agree with (the tests hold them to it).

1. replica_placement (hard): replicas on brokers that must not hold them
   (dead, draining or unknown brokers).
2. rack_awareness (hard): per partition, how many racks short of
   ``min(RF, racks of the brokers taking replicas)`` its replicas on live
   brokers are. Brokers without a rack form one rack, as in placement.
3. disk_capacity (hard): bytes above ``threshold * capacity``, summed over the
   live brokers whose capacity is known.
4. replica_count, 5. leader_count (preferred leaders, the first replicas),
   7. topic_spread (per topic): how far each count lies outside its band (below).
6. network: the same for bytes in and bytes out per second, each with its band.

The balancing goals (4-7) count only the brokers that take replicas (ALIVE):
cordoned, draining and dead brokers neither count nor receive.

A *band* is the range every broker's count must lie in. For a mean ``m`` and a
ratio ``r`` (max/min wanted), with ``d = (r - 1) / (r + 1)``:
``low = min(floor(m), ceil(m (1 - d)))`` and ``high = max(ceil(m), floor(m (1 + d)))``,
so ``high / low <= r`` whenever arithmetic permits, and the band is never
narrower than ``[floor(m), ceil(m)]``, which any total can reach.

The load model: a replica carries its partition's size on disk and its bytes-in
rate (the leader takes it from producers, followers from the leader); the
preferred leader also sends ``rate * (RF - 1)`` to its followers. What a
broker's measurements hold beyond that (consumers' reads, other files) is its
*baseline*, which stays with it whatever moves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller.balancer.model import GOALS, BrokerState, ClusterState, GoalConfig, GoalSummary

PLACEMENT, RACK, DISK, REPLICAS, LEADERS, NETWORK, TOPICS = range(7)


def band(total: int, count: int, ratio: float) -> tuple[int, int]:
    """(low, high) of the band for ``total`` spread over ``count`` brokers."""
    if count <= 0:
        return 0, 0
    mean = total / count
    slack = (ratio - 1) / (ratio + 1)
    low = min(math.floor(mean), math.ceil(mean * (1 - slack)))
    high = max(math.ceil(mean), math.floor(mean * (1 + slack)))
    return low, high


def outside(value: int, low: int, high: int) -> int:
    """How far ``value`` lies outside [low, high]."""
    if value > high:
        return value - high
    if value < low:
        return low - value
    return 0


def is_balanced(counts: Sequence[int], ratio: float) -> bool:
    """Every count inside the band of their total."""
    low, high = band(sum(counts), len(counts), ratio)
    return all(low <= count <= high for count in counts)


@dataclass(frozen=True)
class StaticView:
    """What does not change while planning: broker classes, racks, limits,
    baselines, partition sizes and rates."""

    takers: tuple[int, ...]  # brokers that take replicas (ALIVE), by id
    alive: frozenset[int]  # brokers that hold data (every state but DEAD)
    must_leave: frozenset[int]  # DRAINING (DEAD and unknown brokers are not in ``alive``)
    rack_of: Mapping[int, str | None]
    rack_count: int  # racks among the takers
    disk_limit: Mapping[int, int]  # broker -> bytes allowed (live brokers with a known capacity)
    disk_baseline: Mapping[int, int]
    in_baseline: Mapping[int, int]
    out_baseline: Mapping[int, int]
    frozen: tuple[bool, ...]  # per partition: never moved (not movable, or no live in-sync replica)

    def bad(self, broker_id: int) -> bool:
        """A replica here breaks goal 1."""
        return broker_id not in self.alive or broker_id in self.must_leave


def broker_loads(state: ClusterState, assignment: Sequence[Sequence[int]]):
    """Per broker: (bytes on disk, bytes in/s, bytes out/s) of the partitions'
    replicas under ``assignment`` (the load model, without baselines)."""
    disk: dict[int, int] = {}
    rate_in: dict[int, int] = {}
    rate_out: dict[int, int] = {}
    for partition, replicas in zip(state.partitions, assignment):
        for broker_id in replicas:
            disk[broker_id] = disk.get(broker_id, 0) + partition.size_bytes
            rate_in[broker_id] = rate_in.get(broker_id, 0) + partition.bytes_in_per_second
        if replicas:
            leader = replicas[0]
            rate_out[leader] = rate_out.get(leader, 0) + partition.bytes_in_per_second * (len(replicas) - 1)
    return disk, rate_in, rate_out


def static_view(state: ClusterState, config: GoalConfig) -> StaticView:
    brokers = sorted(state.brokers, key=lambda b: b.broker_id)
    ids = [b.broker_id for b in brokers]
    if len(set(ids)) != len(ids):
        raise ValueError("a broker id is given twice")
    for partition in state.partitions:
        if len(set(partition.replicas)) != len(partition.replicas) or not partition.replicas:
            raise ValueError(f"{partition.topic}-{partition.partition} has an empty or repeated replica list")
    takers = tuple(b.broker_id for b in brokers if b.state is BrokerState.ALIVE)
    alive = frozenset(b.broker_id for b in brokers if b.state is not BrokerState.DEAD)
    rack_of = {b.broker_id: b.rack for b in brokers}
    disk, rate_in, rate_out = broker_loads(state, [p.replicas for p in state.partitions])
    frozen = tuple(
        not p.movable or not any(b in alive for b in p.isr if b in p.replicas) for p in state.partitions
    )
    return StaticView(
        takers=takers,
        alive=alive,
        must_leave=frozenset(b.broker_id for b in brokers if b.state is BrokerState.DRAINING),
        rack_of=rack_of,
        rack_count=len({rack_of[b] for b in takers}),
        disk_limit={
            b.broker_id: int(b.disk_capacity_bytes * config.disk_threshold_fraction)
            for b in brokers
            if b.disk_capacity_bytes > 0 and b.broker_id in alive
        },
        disk_baseline={b.broker_id: max(0, b.disk_used_bytes - disk.get(b.broker_id, 0)) for b in brokers},
        in_baseline={b.broker_id: max(0, b.bytes_in_per_second - rate_in.get(b.broker_id, 0)) for b in brokers},
        out_baseline={b.broker_id: max(0, b.bytes_out_per_second - rate_out.get(b.broker_id, 0)) for b in brokers},
        frozen=frozen,
    )


def rack_deficit(view: StaticView, replicas: Sequence[int]) -> int:
    covered = {view.rack_of[b] for b in replicas if b in view.alive}
    return max(0, min(len(replicas), view.rack_count) - len(covered))


def measure(
    state: ClusterState, config: GoalConfig, view: StaticView, assignment: Sequence[Sequence[int]]
) -> tuple[list[int], list[tuple[int, int] | None]]:
    """(distance per goal, (lowest, highest) per goal or None) of ``assignment``
    (one replica list per partition of ``state``, in its order)."""
    disk, rate_in, rate_out = broker_loads(state, assignment)
    takers = view.takers
    distances = [0] * len(GOALS)
    spreads: list[tuple[int, int] | None] = [None] * len(GOALS)
    distances[PLACEMENT] = sum(1 for replicas in assignment for b in replicas if view.bad(b))
    distances[RACK] = sum(rack_deficit(view, replicas) for replicas in assignment)
    distances[DISK] = sum(
        max(0, view.disk_baseline.get(b, 0) + disk.get(b, 0) - limit) for b, limit in view.disk_limit.items()
    )
    if not takers:
        return distances, spreads
    replica_counts = {b: 0 for b in takers}
    leader_counts = {b: 0 for b in takers}
    topic_counts: dict[str, dict[int, int]] = {}
    for partition, replicas in zip(state.partitions, assignment):
        per_broker = topic_counts.setdefault(partition.topic, {})
        for b in replicas:
            if b in replica_counts:
                replica_counts[b] += 1
                per_broker[b] = per_broker.get(b, 0) + 1
        if replicas[0] in leader_counts:
            leader_counts[replicas[0]] += 1
    for goal, counts in ((REPLICAS, replica_counts), (LEADERS, leader_counts)):
        low, high = band(sum(counts.values()), len(takers), config.balance_ratio_max)
        distances[goal] = sum(outside(c, low, high) for c in counts.values())
        spreads[goal] = (min(counts.values()), max(counts.values()))
    loads_in = [view.in_baseline.get(b, 0) + rate_in.get(b, 0) for b in takers]
    loads_out = [view.out_baseline.get(b, 0) + rate_out.get(b, 0) for b in takers]
    for loads in (loads_in, loads_out):
        low, high = band(sum(loads), len(takers), config.network_balance_ratio_max)
        distances[NETWORK] += sum(outside(v, low, high) for v in loads)
    totals = [i + o for i, o in zip(loads_in, loads_out)]
    spreads[NETWORK] = (min(totals), max(totals))
    for per_broker in topic_counts.values():
        low, high = band(sum(per_broker.values()), len(takers), config.balance_ratio_max)
        distances[TOPICS] += sum(outside(per_broker.get(b, 0), low, high) for b in takers)
    return distances, spreads


def goal_distances(state: ClusterState, config: GoalConfig) -> dict[str, int]:
    """Goal name -> distance of ``state`` as it is."""
    view = static_view(state, config)
    distances, _ = measure(state, config, view, [p.replicas for p in state.partitions])
    return {name: distance for (name, _), distance in zip(GOALS, distances)}


def summaries(before, after) -> tuple[GoalSummary, ...]:
    """GoalSummary per goal from two ``measure`` results."""
    (d_before, s_before), (d_after, s_after) = before, after
    return tuple(
        GoalSummary(name, hard, d_before[i], d_after[i], s_before[i], s_after[i]) for i, (name, hard) in enumerate(GOALS)
    )
