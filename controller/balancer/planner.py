"""The balancing planner: cluster state in, moves out (pure: no IO, no clock, no randomness).

``plan(state, config)`` returns a :class:`~controller.balancer.model.Plan`;
``apply(state, plan)`` is the state once its moves have completed (replicas as
planned, every new replica in the ISR, the preferred leaders elected).

Goals, in priority order (their distances are defined in ``goals``):

1. hard, replica_placement: no replica on a dead, draining or unknown broker.
   A dead broker's replica is replaced by a broker the later goals like best,
   the other replicas staying in place; when it was the preferred leader, the
   first in-sync survivor leads instead. A partition with no live in-sync
   replica cannot be copied and is reported, never moved. Only ALIVE brokers
   receive replicas; a cordoned broker keeps its own (only goals 2 and 3 move
   replicas off it) and the balancing goals do not count it.
2. hard, rack_awareness: a partition's replicas cover ``min(RF, racks)`` racks.
3. hard, disk_capacity: brokers above ``threshold * capacity`` shed their
   largest replicas first, to brokers that stay below it.
4. soft, replica_count; 5. soft, leader_count (leader-only moves first: the
   replicas reordered so that another in-sync replica is preferred, which copies
   nothing; data moves only when reordering cannot help); 6. soft, network
   (bytes in and out); 7. soft, topic_spread.

How: goal after goal, each repeats passes over its candidates until a pass
moves nothing. A candidate is one replica of one partition and a destination
broker (and for a preferred leader's replica, whether the leadership goes with
it or to the first eligible survivor). A move made for goal k must lower goal
k's distance and must not raise the distance of any goal before it, so a soft
goal never undoes a hard one nor an earlier soft one. Within a pass, sources are
taken most loaded first, a source's partitions in a fixed order (the smallest
first for counts, the largest first for disk, the busiest first for network),
destinations least loaded first, ties broken by ids: the plan is a function of
its input. When the last goal is done and any goal moved something, all goals
run again, until a round in which none moves.

Why it ends, and converges: each move lowers the vector of the seven distances
in lexicographic order (goal k down, goals before it not up). The brokers' totals
the balancing bands are computed from change only through hard moves, which lower
the hard part of that vector; so no state comes back, and the states are finite.
A pass that moves nothing has tried every candidate that could help (the source
and destination filters only drop candidates that cannot lower the goal), so the
final state admits no move: planning again from ``apply(state, plan)`` finds the
same, and returns no moves. (``apply`` puts every replica of a moved partition in
the ISR, which the planner already assumes of a partition it moved when it
picks a preferred leader.)

The cost bound: a data move may not add or remove a replica on a broker that
already has ``max_moves_per_broker`` such changes in the plan (dead brokers, which
do no work, are not counted), nor take the plan's copied bytes above
``max_plan_bytes`` (except the plan's first copy, so that a partition larger than
the bound still moves, alone). Leader-only moves are not bounded. A candidate the
bound refuses is skipped and left for the next plan; the plan says so
(``cost_bound_reached``, ``remaining_imbalance``), and a hard goal it left unmet
is not a violation.

Cost: candidate lists are sorted once per source and pass, destinations (brokers)
per candidate, and every distance changes by a small sum over the brokers a
move touches, so a plan costs about (replicas moved + replicas scanned) x brokers.
``benchmarks/balancer_planner.py`` measures it. The working assignment those
figures live in, and each goal's delta, are in ``controller.balancer.working``.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import replace

from controller.balancer.goals import (
    DISK,
    LEADERS,
    NETWORK,
    PLACEMENT,
    RACK,
    REPLICAS,
    TOPICS,
    broker_loads,
    measure,
    outside,
    rack_deficit,
    summaries,
)
from controller.balancer.model import (
    GOAL_NAMES,
    BrokerLoad,
    ClusterState,
    GoalConfig,
    Move,
    MoveKind,
    PartitionLoad,
    Plan,
    Step,
    Violation,
)
from controller.balancer.working import WorkingAssignment

# Bounds that only a bug could reach (each move lowers a finite potential): they
# keep a plan's time bounded whatever happens.
MAX_ROUNDS = 100
MAX_PASSES_PER_GOAL = 1000


def plan(state: ClusterState, config: GoalConfig | None = None) -> Plan:
    """The moves that bring ``state`` closest to the goals within the cost bound.
    The order brokers and partitions are given in does not matter."""
    brokers = tuple(sorted(state.brokers, key=lambda b: b.broker_id))
    partitions = tuple(sorted(state.partitions, key=lambda p: (p.topic, p.partition)))
    if any((a.topic, a.partition) == (b.topic, b.partition) for a, b in itertools.pairwise(partitions)):
        raise ValueError("a partition is given twice")
    return _Planner(ClusterState(brokers, partitions), config or GoalConfig()).run()


def apply(state: ClusterState, plan_: Plan) -> ClusterState:
    """``state`` after ``plan_``'s moves completed: the new replicas, all in the
    ISR, the first one leading; disk use and network rates per broker follow the
    load model of ``goals`` (a broker's baseline stays with it)."""
    new_replicas = {(m.topic, m.partition): m.new_replicas for m in plan_.moves}

    def moved_partition(p: PartitionLoad) -> PartitionLoad:
        replicas = new_replicas.get((p.topic, p.partition))
        return p if replicas is None else replace(p, replicas=replicas, isr=replicas, leader=replicas[0])

    partitions = tuple(moved_partition(p) for p in state.partitions)
    old_disk, old_in, old_out = broker_loads(state, [p.replicas for p in state.partitions])
    disk, rate_in, rate_out = broker_loads(state, [p.replicas for p in partitions])

    def moved_broker(broker: BrokerLoad) -> BrokerLoad:
        b = broker.broker_id
        return replace(
            broker,
            disk_used_bytes=max(0, broker.disk_used_bytes - old_disk.get(b, 0)) + disk.get(b, 0),
            bytes_in_per_second=max(0, broker.bytes_in_per_second - old_in.get(b, 0)) + rate_in.get(b, 0),
            bytes_out_per_second=max(0, broker.bytes_out_per_second - old_out.get(b, 0)) + rate_out.get(b, 0),
        )

    return ClusterState(brokers=tuple(moved_broker(b) for b in state.brokers), partitions=partitions)


class _Planner(WorkingAssignment):
    """The goal passes and the plan they make."""

    # ------------------------------------------------------------------ hard goals

    def _best_replacement(self, goal: int, p: int, src: int, blocked_broker: int | None = None):
        """The best ranked replica list replacing ``p``'s replica on ``src`` that the
        goals accept and the cost bound lets in, or None. When the bound refused
        every acceptable one, ``p`` (and ``blocked_broker``) are noted as left for
        the next plan."""
        best = None
        refused = False
        for dst in self.takers:
            if dst in self.planned[p]:
                continue
            for new in self._variants(p, src, dst, soft=False):
                ranked = self._rank(goal, p, new)
                if ranked is None:
                    continue
                if not self._fits(p, new):
                    refused = True
                    continue
                key = (ranked, self.replica_counts[dst], self.topic_counts[(self.topic[p], dst)], dst)
                if best is None or key < best[0]:
                    best = (key, new)
        if best is None and refused:
            self.cost_bound_reached = True
            self.blocked_partitions.add(p)
            if blocked_broker is not None:
                self.blocked_brokers.add(blocked_broker)
        return None if best is None else best[1]

    def _pass_placement(self) -> bool:
        bad = self.view.bad
        candidates = sorted({p for b in list(self.hosted) if bad(b) for p in self.hosted[b]})
        moved = False
        for p in candidates:
            if self.frozen[p]:
                continue
            for src in [b for b in self.planned[p] if bad(b)]:
                new = self._best_replacement(PLACEMENT, p, src)
                if new is not None and self._try_move(PLACEMENT, p, new):
                    moved = True
        return moved

    def _pass_racks(self) -> bool:
        if self.view.rack_count < 2:
            return False
        moved = False
        for p, replicas in enumerate(self.planned):
            if self.frozen[p] or rack_deficit(self.view, replicas) == 0:
                continue
            best = None
            for src in replicas:
                if src not in self.alive:
                    continue
                new = self._best_replacement(RACK, p, src)
                if new is not None:
                    key = (self._rank(RACK, p, new), src)
                    if best is None or key < best[0]:
                        best = (key, new)
            if best is not None and self._try_move(RACK, p, best[1]):
                moved = True
        return moved

    def _pass_disk(self) -> bool:
        over = [b for b, limit in self.disk_limit.items() if self.disk.get(b, 0) > limit]
        moved = False
        for src in sorted(over, key=lambda b: (self.disk_limit[b] - self.disk.get(b, 0), b)):
            for p in sorted(self.hosted[src], key=lambda p: (-self.size[p], p)):
                if self.disk.get(src, 0) <= self.disk_limit[src]:
                    break
                if self.frozen[p] or self.size[p] == 0:
                    continue
                new = self._best_replacement(DISK, p, src, blocked_broker=src)
                if new is not None and self._try_move(DISK, p, new):
                    moved = True
        return moved

    # ------------------------------------------------------------------ soft goals

    def _pass_replica_count(self) -> bool:
        moved = False
        for src in sorted(self.takers, key=lambda b: (-self.replica_counts[b], b)):
            destinations = self._destinations(REPLICAS, src, self.replica_counts)
            for p in sorted(self.hosted[src], key=lambda p: (self.size[p], p)):
                if not destinations:
                    break
                if not self.frozen[p] and self._move_to_least(REPLICAS, p, src, destinations):
                    moved = True
                    destinations = self._destinations(REPLICAS, src, self.replica_counts)
        return moved

    def _destinations(self, goal: int, src: int, counts, topic: int | None = None) -> list[int]:
        """The takers a unit moved off ``src`` could go to and lower ``goal``'s count
        distance (``counts``: replica counts, or the topic's), least counted first;
        for the topic goal, only those that keep the replica count distance too.
        Empty when ``src`` has nothing to give. Valid until the next move."""
        low, high = self.bands[REPLICAS] if topic is None else self.topic_bands[topic]
        c_src = counts[src]
        gain_src = outside(c_src - 1, low, high) - outside(c_src, low, high)
        order = [
            b for b in self.takers
            if b != src and gain_src + outside(counts[b] + 1, low, high) - outside(counts[b], low, high) < 0
        ]
        if goal == TOPICS and order:
            replica_counts, bounds = self.replica_counts, self.bands[REPLICAS]
            order = [b for b in order if self._count_delta(replica_counts, bounds, (src,), (b,)) <= 0]
            order.sort(key=lambda b: (counts[b], replica_counts[b], b))
        else:
            order.sort(key=lambda b: (counts[b], b))
        return order

    def _move_to_least(self, goal: int, p: int, src: int, destinations: list[int]) -> bool:
        """Move ``p``'s replica on ``src`` to the first of ``destinations`` (see
        ``_destinations``) for which ``goal`` gets lower and no goal before it higher."""
        if self._src_blocked(p, src):
            return False
        replicas = self.planned[p]
        racks = self._allowed_racks(p, src)
        for dst in destinations:
            if dst in replicas or (racks is not None and self.view.rack_of[dst] not in racks):
                continue
            if self._dst_blocked(p, dst):
                continue
            best = None
            for new in self._variants(p, src, dst, soft=True):
                own = self._accepts(goal, p, new)
                if own is not None:
                    key = (own, self._delta(LEADERS, p, replicas, new, [src], [dst]) if goal < LEADERS else 0)
                    if best is None or key < best[0]:
                        best = (key, new)
            if best is not None and self._try_move(goal, p, best[1]):
                return True
        return False

    def _pass_leaders_reorder(self) -> bool:
        bounds = self.bands[LEADERS]
        moved = False
        for src in sorted(self.takers, key=lambda b: (-self.leader_counts[b], b)):
            if not self._improvable(self.leader_counts, bounds, src):
                continue
            for p in sorted(self.led[src]):
                if not self._improvable(self.leader_counts, bounds, src):
                    break
                if self.frozen[p]:
                    continue
                replicas = self.planned[p]
                options = sorted(
                    (b for b in replicas[1:] if self._can_lead(p, b, soft=True)), key=lambda b: (self.leader_counts[b], b)
                )
                for b in options:
                    new = replicas.copy()
                    j = new.index(b)
                    new[0], new[j] = b, src
                    if self._accepts(LEADERS, p, new) is not None and self._try_move(LEADERS, p, new):
                        moved = True
                        break
        return moved

    def _pass_leaders_data(self) -> bool:
        bounds = self.bands[LEADERS]
        moved = False
        for src in sorted(self.takers, key=lambda b: (-self.leader_counts[b], b)):
            if not self._improvable(self.leader_counts, bounds, src):
                continue
            for p in sorted(self.led[src], key=lambda p: (self.size[p], p)):
                if not self._improvable(self.leader_counts, bounds, src):
                    break
                if self.frozen[p] or self._src_blocked(p, src):
                    continue
                replicas = self.planned[p]
                low, high = bounds
                c_src = self.leader_counts[src]
                gain_src = outside(c_src - 1, low, high) - outside(c_src, low, high)
                racks = self._allowed_racks(p, src)
                for dst in sorted((b for b in self.takers if b not in replicas), key=lambda b: (self.leader_counts[b], b)):
                    c_dst = self.leader_counts[dst]
                    if gain_src + outside(c_dst + 1, low, high) - outside(c_dst, low, high) >= 0:
                        break
                    if (racks is not None and self.view.rack_of[dst] not in racks) or self._dst_blocked(p, dst):
                        continue
                    new = replicas.copy()
                    new[0] = dst
                    if self._accepts(LEADERS, p, new) is not None and self._try_move(LEADERS, p, new):
                        moved = True
                        break
        return moved

    def _pass_network(self) -> bool:
        if self._network_distance() == 0:
            return False
        moved = False
        for src in sorted(self.takers, key=lambda b: (-(self.bytes_in[b] + self.bytes_out[b]), b)):
            candidates = sorted((p for p in self.hosted[src] if self.rate[p] > 0), key=lambda p: (-self.rate[p], p))
            in_ok, out_ok, in_takers = self._network_sources(src)
            for p in candidates:
                if not (in_ok or out_ok):
                    break
                if self.frozen[p] or self._src_blocked(p, src):
                    continue
                replicas = self.planned[p]
                leads = replicas[0] == src
                # Moving leadership changes bytes out too; otherwise only bytes in can get closer.
                pool = self.takers if out_ok and leads else in_takers
                options = []
                if out_ok and leads:
                    for b in replicas[1:]:
                        if self._can_lead(p, b, soft=True):
                            new = replicas.copy()
                            j = new.index(b)
                            new[0], new[j] = b, src
                            options.append((b, new))
                racks = self._allowed_racks(p, src) if pool else None
                for dst in pool:
                    if dst in replicas or (racks is not None and self.view.rack_of[dst] not in racks):
                        continue
                    if not self._dst_blocked(p, dst):
                        options.extend((dst, new) for new in self._variants(p, src, dst, soft=True))
                best = None
                for dst, new in options:
                    own = self._accepts(NETWORK, p, new)
                    if own is not None:
                        key = (own, self.bytes_in[dst] + self.bytes_out[dst], dst, new)
                        if best is None or key < best[0]:
                            best = (key, new)
                if best is not None and self._try_move(NETWORK, p, best[1]):
                    moved = True
                    in_ok, out_ok, in_takers = self._network_sources(src)
        return moved

    def _network_sources(self, src: int) -> tuple[bool, bool, list[int]]:
        """(may bytes in get closer by moving some off ``src``, may bytes out, the
        takers that could take bytes in from it). ``src`` is the only broker any
        candidate takes load from, so a component can only get closer if ``src``
        may give some away, and bytes in only to a taker below the band's top
        (and below its bottom unless ``src`` is above the top)."""
        in_low, in_high, out_low, out_high = self.network_bands
        in_ok = self._improvable(self.bytes_in, (in_low, in_high), src)
        out_ok = self._improvable(self.bytes_out, (out_low, out_high), src)
        s_in = self.bytes_in[src]
        in_takers = [
            b for b in self.takers
            if in_ok and b != src and self.bytes_in[b] < in_high and (s_in > in_high or self.bytes_in[b] < in_low)
        ]
        return in_ok, out_ok, in_takers

    def _pass_topics(self) -> bool:
        moved = False
        for t, partitions in enumerate(self.partitions_of_topic):
            bounds = self.topic_bands[t]
            counts = {b: self.topic_counts[(t, b)] for b in self.takers}
            if all(outside(c, *bounds) == 0 for c in counts.values()):
                continue
            for src in sorted(self.takers, key=lambda b: (-counts[b], b)):
                destinations = self._destinations(TOPICS, src, counts, topic=t)
                for p in partitions:
                    if not destinations:
                        break
                    if self.frozen[p] or src not in self.planned[p]:
                        continue
                    if self._move_to_least(TOPICS, p, src, destinations):
                        moved = True
                        counts = {b: self.topic_counts[(t, b)] for b in self.takers}
                        destinations = self._destinations(TOPICS, src, counts, topic=t)
        return moved

    # ------------------------------------------------------------------ driver

    def _run_goal(self, goal: int) -> bool:
        passes = {
            PLACEMENT: (self._pass_placement,),
            RACK: (self._pass_racks,),
            DISK: (self._pass_disk,),
            REPLICAS: (self._pass_replica_count,),
            LEADERS: (self._pass_leaders_reorder, self._pass_leaders_data),
            NETWORK: (self._pass_network,),
            TOPICS: (self._pass_topics,),
        }[goal]
        if goal >= REPLICAS and not self.takers:
            return False
        moved_any = False
        for _ in range(MAX_PASSES_PER_GOAL):
            self._compute_bands()
            # Cheaper passes first (leader-only before data moves): a later one runs
            # only when every earlier one has nothing left.
            if not any(one_pass() for one_pass in passes):
                break
            moved_any = True
        return moved_any

    def run(self) -> Plan:
        before = measure(self.state, self.config, self.view, self.original)
        for _ in range(MAX_ROUNDS):
            moved = False
            for goal in range(len(GOAL_NAMES)):
                if self._run_goal(goal):
                    moved = True
            if not moved:
                break
        after = measure(self.state, self.config, self.view, self.planned)
        return Plan(
            moves=self._moves(),
            goals=summaries(before, after),
            violations=self._violations(),
            remaining_imbalance=tuple((name, d) for name, d in zip(GOAL_NAMES, after[0]) if d > 0),
            cost_bound_reached=self.cost_bound_reached,
            steps=tuple(
                Step(GOAL_NAMES[goal], self.state.partitions[p].topic, self.state.partitions[p].partition, old, new)
                for goal, p, old, new in self.steps
            ),
            broker_copy_bytes=self._copy_bytes(),
        )

    def _moves(self) -> tuple[Move, ...]:
        moves = []
        for p, (old, new) in enumerate(zip(self.original, self.planned)):
            if old == new:
                continue
            part = self.state.partitions[p]
            kind = MoveKind.LEADER_ONLY if set(old) == set(new) else MoveKind.REPLICA_MOVE
            moves.append(Move(part.topic, part.partition, tuple(old), tuple(new), self._copied(p, new), kind))
        moves.sort(key=lambda m: (m.kind is not MoveKind.LEADER_ONLY, m.topic, m.partition))
        return tuple(moves)

    def _copy_bytes(self) -> tuple[tuple[int, int], ...]:
        received: dict[int, int] = defaultdict(int)
        sent: dict[int, int] = defaultdict(int)
        for p, (old, new) in enumerate(zip(self.original, self.planned)):
            added = [b for b in new if b not in old]
            if not added:
                continue
            for b in added:
                received[b] += self.size[p]
            source = _copy_source(self.state.partitions[p], self.alive, self.isr[p])
            if source is not None:
                sent[source] += self.size[p] * len(added)
        return tuple(sorted((b, max(received[b], sent[b])) for b in set(received) | set(sent)))

    def _violations(self) -> tuple[Violation, ...]:
        found = []
        view, parts = self.view, self.state.partitions
        for p, replicas in enumerate(self.planned):
            part = parts[p]
            if not part.movable:
                continue
            stuck = [b for b in replicas if view.bad(b)]
            if stuck and p not in self.blocked_partitions:
                if self.frozen[p]:
                    reason = "no in-sync replica is alive: restoring it needs an unclean leader election"
                elif all(b in replicas for b in self.takers):
                    reason = (f"only {len(self.takers)} broker(s) take replicas, for replication factor "
                              f"{len(replicas)}")
                else:
                    reason = "no broker can take the replica without breaking a higher goal"
                found.extend(Violation("replica_placement", reason, part.topic, part.partition, b) for b in stuck)
            deficit = rack_deficit(view, replicas)
            if deficit and p not in self.blocked_partitions and not (self.frozen[p] and stuck):
                wanted = min(len(replicas), view.rack_count)
                reason = f"its replicas cover {wanted - deficit} of the {wanted} racks wanted"
                reason += (", and some wait on brokers that cannot keep them" if stuck
                           else ", and no move fixes it without breaking a higher goal")
                found.append(Violation("rack_awareness", reason, part.topic, part.partition))
        for b, limit in sorted(self.disk_limit.items()):
            used = self.disk.get(b, 0)
            if used > limit and b not in self.blocked_brokers:
                if view.disk_baseline.get(b, 0) > limit:
                    reason = "its data outside the partitions' replicas is already above the threshold"
                else:
                    reason = ("no replica can move off it without breaking a higher goal or putting "
                              "another broker above its threshold")
                found.append(Violation("disk_capacity", f"{used} bytes used, {limit} allowed: {reason}", broker=b))
        return tuple(found)


def _copy_source(partition: PartitionLoad, alive, isr) -> int | None:
    """The broker new replicas copy from: the current leader, else the first live in-sync replica."""
    if partition.leader in alive:
        return partition.leader
    return next((b for b in partition.replicas if b in alive and b in isr), None)
