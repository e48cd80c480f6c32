"""The planner's working copy of the assignment (pure): the partitions'
replicas as planned so far, the per-broker figures every goal reads (replica,
leader and per-topic counts, disk use, bytes in and out) kept up to date move by
move, the cost bound's accounting, and each goal's delta for a candidate move.

The deltas restate, for the few brokers a move touches, the distances that
``controller.balancer.goals`` measures from scratch; the planner's tests hold
the two to agreeing step by step.
"""

from __future__ import annotations

from collections import defaultdict

from controller.balancer.goals import (
    DISK,
    LEADERS,
    NETWORK,
    PLACEMENT,
    RACK,
    REPLICAS,
    band,
    outside,
    rack_deficit,
    static_view,
)
from controller.balancer.model import ClusterState, GoalConfig


class WorkingAssignment:
    """What the planner's goal passes (``controller.balancer.planner``) work on."""

    def __init__(self, state: ClusterState, config: GoalConfig):
        self.state = state
        self.config = config
        self.view = view = static_view(state, config)
        parts = state.partitions
        self.original = [list(p.replicas) for p in parts]
        self.planned = [list(p.replicas) for p in parts]
        self.isr = [frozenset(p.isr) for p in parts]
        self.size = [p.size_bytes for p in parts]
        self.rate = [p.bytes_in_per_second for p in parts]
        self.frozen = view.frozen
        topic_names = sorted({p.topic for p in parts})
        topic_index = {name: i for i, name in enumerate(topic_names)}
        self.topic = [topic_index[p.topic] for p in parts]
        self.partitions_of_topic: list[list[int]] = [[] for _ in topic_names]
        for index, t in enumerate(self.topic):
            self.partitions_of_topic[t].append(index)
        self.takers = view.takers
        self.taker_set = frozenset(view.takers)
        self.alive = view.alive
        self.disk_limit = view.disk_limit
        self.taker_racks = {view.rack_of[b] for b in view.takers}

        self.hosted: dict[int, set[int]] = defaultdict(set)
        self.led: dict[int, set[int]] = defaultdict(set)
        self.replica_counts = {b: 0 for b in self.takers}
        self.leader_counts = {b: 0 for b in self.takers}
        self.disk = dict(view.disk_baseline)
        self.bytes_in = {b: view.in_baseline.get(b, 0) for b in self.takers}
        self.bytes_out = {b: view.out_baseline.get(b, 0) for b in self.takers}
        self.topic_counts: dict[tuple[int, int], int] = defaultdict(int)
        self.topic_total = [0] * len(topic_names)
        for index, replicas in enumerate(self.planned):
            self._account(index, replicas, +1)

        self.touches: dict[int, int] = defaultdict(int)
        self.plan_bytes = 0
        self.cost_bound_reached = False
        self.blocked_partitions: set[int] = set()
        self.blocked_brokers: set[int] = set()
        self.steps: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = []
        self.bands: dict[int, tuple[int, int]] = {}
        self.network_bands = (0, 0, 0, 0)  # in low, in high, out low, out high
        self.topic_bands: list[tuple[int, int]] = []

    # ------------------------------------------------------------------ bookkeeping

    def _account(self, p: int, replicas, sign: int) -> None:
        """Add (+1) or remove (-1) partition ``p`` under ``replicas`` from the per-broker figures."""
        size, rate, t = self.size[p], self.rate[p], self.topic[p]
        for b in replicas:
            (self.hosted[b].add if sign > 0 else self.hosted[b].discard)(p)
            self.disk[b] = self.disk.get(b, 0) + sign * size
            if b in self.taker_set:
                self.replica_counts[b] += sign
                self.bytes_in[b] += sign * rate
                self.topic_counts[(t, b)] += sign
                self.topic_total[t] += sign
        leader = replicas[0]
        (self.led[leader].add if sign > 0 else self.led[leader].discard)(p)
        if leader in self.taker_set:
            self.leader_counts[leader] += sign
            self.bytes_out[leader] += sign * rate * (len(replicas) - 1)

    def _touched(self, p: int, replicas) -> set[int]:
        return {b for b in set(self.original[p]).symmetric_difference(replicas) if b in self.alive}

    def _copied(self, p: int, replicas) -> int:
        return self.size[p] * sum(1 for b in replicas if b not in self.original[p])

    def _fits(self, p: int, new) -> bool:
        limit = self.config.max_moves_per_broker
        if limit is not None:
            before = self._touched(p, self.planned[p])
            for b in self._touched(p, new) - before:
                if self.touches[b] >= limit:
                    return False
        cap = self.config.max_plan_bytes
        if cap is not None and self.plan_bytes > 0:
            growth = self._copied(p, new) - self._copied(p, self.planned[p])
            if growth > 0 and self.plan_bytes + growth > cap:
                return False
        return True

    def _allowed_racks(self, p: int, src: int) -> set | None:
        """The racks a replacement of ``p``'s replica on ``src`` may come from without
        raising the rack goal's distance (None: any). A filter that saves asking the
        goals about destinations that cannot be accepted."""
        if self.view.rack_count < 2:
            return None
        old = self.planned[p]
        rack_of, alive = self.view.rack_of, self.alive
        covered = {rack_of[b] for b in old if b != src and b in alive}
        wanted = min(len(old), self.view.rack_count)
        if len(covered) >= wanted or src not in alive or rack_of[src] in covered:
            return None  # src adds no rack the goal needs: any replacement keeps the distance
        return self.taker_racks - covered  # a rack not covered yet, src's own among them

    def _dst_blocked(self, p: int, dst: int) -> bool:
        """Would adding a replica of ``p`` on ``dst`` break the per-broker bound? (A
        cheap filter before the goals are asked; ``_fits`` has the last word.)"""
        limit = self.config.max_moves_per_broker
        if limit is None or self.touches[dst] < limit or dst in self.original[p] or dst not in self.alive:
            return False
        self.cost_bound_reached = True
        return True

    def _src_blocked(self, p: int, src: int) -> bool:
        """Would any move of ``p``'s replica off ``src`` break the per-broker bound?"""
        limit = self.config.max_moves_per_broker
        if limit is None or self.touches[src] < limit or src not in self.original[p] or src not in self.alive:
            return False
        self.cost_bound_reached = True
        return True

    def _try_move(self, goal: int, p: int, new) -> bool:
        """Make the move if the cost bound lets it in."""
        if not self._fits(p, new):
            self.cost_bound_reached = True
            return False
        old = self.planned[p]
        for b in self._touched(p, old):
            self.touches[b] -= 1
        for b in self._touched(p, new):
            self.touches[b] += 1
        self.plan_bytes += self._copied(p, new) - self._copied(p, old)
        self._account(p, old, -1)
        self._account(p, new, +1)
        self.planned[p] = new
        self.steps.append((goal, p, tuple(old), tuple(new)))
        return True

    def _compute_bands(self) -> None:
        n = len(self.takers)
        ratio = self.config.balance_ratio_max
        self.bands[REPLICAS] = band(sum(self.replica_counts.values()), n, ratio)
        self.bands[LEADERS] = band(sum(self.leader_counts.values()), n, ratio)
        net_ratio = self.config.network_balance_ratio_max
        self.network_bands = (
            *band(sum(self.bytes_in.values()), n, net_ratio),
            *band(sum(self.bytes_out.values()), n, net_ratio),
        )
        self.topic_bands = [band(total, n, ratio) for total in self.topic_total]

    # ------------------------------------------------------------------ goal deltas

    def _can_lead(self, p: int, b: int, soft: bool) -> bool:
        """May ``b`` be made the preferred leader of ``p``? It must be in sync: in the
        ISR, or any replica once the partition is being reassigned (a
        reassignment completes only with every target replica in the ISR)."""
        if b not in self.alive or (soft and b not in self.taker_set):
            return False
        return b in self.isr[p] or self.planned[p] != self.original[p]

    def _delta(self, goal: int, p: int, old, new, removed, added) -> int:
        if goal == PLACEMENT:
            bad = self.view.bad
            return sum(1 for b in added if bad(b)) - sum(1 for b in removed if bad(b))
        if goal == RACK:
            if not removed or self.view.rack_count < 2:
                return 0
            rack_of = self.view.rack_of
            if len(removed) == 1 and removed[0] in self.alive and rack_of[removed[0]] == rack_of[added[0]]:
                return 0  # a replica replaced within its rack
            return rack_deficit(self.view, new) - rack_deficit(self.view, old)
        if goal == DISK:
            size, total = self.size[p], 0
            for sign, brokers in ((-1, removed), (1, added)):
                for b in brokers:
                    limit = self.disk_limit.get(b)
                    if limit is not None:
                        used = self.disk.get(b, 0)
                        total += max(0, used + sign * size - limit) - max(0, used - limit)
            return total
        if goal == REPLICAS:
            return self._count_delta(self.replica_counts, self.bands[REPLICAS], removed, added)
        if goal == LEADERS:
            if old[0] == new[0]:
                return 0
            return self._count_delta(self.leader_counts, self.bands[LEADERS], (old[0],), (new[0],))
        if goal == NETWORK:
            return self._network_delta(p, old, new, removed, added)
        low, high = self.topic_bands[self.topic[p]]
        t, total = self.topic[p], 0
        for sign, brokers in ((-1, removed), (1, added)):
            for b in brokers:
                if b in self.taker_set:
                    c = self.topic_counts[(t, b)]
                    total += outside(c + sign, low, high) - outside(c, low, high)
        return total

    def _count_delta(self, counts, bounds, minus, plus) -> int:
        low, high = bounds
        total = 0
        for b in minus:
            if b in counts:
                c = counts[b]
                total += outside(c - 1, low, high) - outside(c, low, high)
        for b in plus:
            if b in counts:
                c = counts[b]
                total += outside(c + 1, low, high) - outside(c, low, high)
        return total

    def _network_delta(self, p: int, old, new, removed, added) -> int:
        rate = self.rate[p]
        if rate == 0:
            return 0
        change_in: dict[int, int] = {}
        for b in removed:
            change_in[b] = -rate
        for b in added:
            change_in[b] = rate
        change_out: dict[int, int] = {}
        if old[0] != new[0]:
            sent = rate * (len(old) - 1)
            change_out[old[0]] = -sent
            change_out[new[0]] = sent
        in_low, in_high, out_low, out_high = self.network_bands
        total = 0
        for changes, loads, low, high in (
            (change_in, self.bytes_in, in_low, in_high),
            (change_out, self.bytes_out, out_low, out_high),
        ):
            for b, change in changes.items():
                if b in loads:
                    v = loads[b]
                    total += outside(v + change, low, high) - outside(v, low, high)
        return total

    # The order higher goals are checked in: the cheap and selective ones first.
    CHECK_ORDER = (REPLICAS, LEADERS, RACK, DISK, PLACEMENT, NETWORK)

    def _accepts(self, goal: int, p: int, new) -> int | None:
        """Goal ``goal``'s delta for ``p`` -> ``new`` when it is negative and no
        goal before it gets worse; else None."""
        old = self.planned[p]
        removed = [b for b in old if b not in new]
        added = [b for b in new if b not in old]
        own = self._delta(goal, p, old, new, removed, added)
        if own >= 0:
            return None
        for higher in self.CHECK_ORDER:
            if higher < goal and self._delta(higher, p, old, new, removed, added) > 0:
                return None
        return own

    def _rank(self, goal: int, p: int, new) -> tuple | None:
        """For the hard goals, whose candidates are few: the deltas of the goal
        and of every later one up to leader_count (lower is better), or None."""
        old = self.planned[p]
        removed = [b for b in old if b not in new]
        added = [b for b in new if b not in old]
        deltas = [self._delta(g, p, old, new, removed, added) for g in range(LEADERS + 1)]
        if deltas[goal] >= 0 or any(deltas[g] > 0 for g in range(goal)):
            return None
        return tuple(deltas[goal:])

    def _variants(self, p: int, src: int, dst: int, soft: bool) -> list[list[int]]:
        """The replica lists with ``src`` replaced by ``dst``: in its place (not for
        a dead preferred leader), and for a preferred leader's replica also with the
        first eligible survivor leading and ``dst`` in that survivor's place."""
        old = self.planned[p]
        i = old.index(src)
        variants = []
        if i > 0 or src in self.alive:
            new = old.copy()
            new[i] = dst
            variants.append(new)
        if i == 0:
            for j in range(1, len(old)):
                if self._can_lead(p, old[j], soft):
                    new = old.copy()
                    new[0], new[j] = old[j], dst
                    variants.append(new)
                    break
        return variants

    def _improvable(self, counts, bounds, src: int) -> bool:
        """Can moving one unit off ``src`` to some other taker lower the count distance?"""
        low, high = bounds
        c = counts[src]
        if c > high:
            return True
        return c > low and any(counts[b] < low for b in self.takers if b != src)

    def _network_distance(self) -> int:
        in_low, in_high, out_low, out_high = self.network_bands
        return sum(outside(self.bytes_in[b], in_low, in_high) + outside(self.bytes_out[b], out_low, out_high)
                   for b in self.takers)
