"""The balancing planner's input and output, as plain frozen values (pure).

Input: a :class:`ClusterState` (brokers with their state, disk and measured
network rates; partitions with their replicas, ISR, size and bytes-in rate) and
a :class:`GoalConfig`. Output: a :class:`Plan`. Tests build states directly;
``controller.balancer.image_input`` builds one from a metadata image.

Rates and sizes are whole bytes (per second for rates): the planner compares
sums of them, and integers make those sums exact whatever order they are added
in, so a plan does not depend on summation order.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class BrokerState(enum.Enum):
    """What the balancer may do with a broker.

    * ALIVE: holds replicas and takes new ones.
    * CORDONED: keeps what it holds and takes nothing new (KIP-1066's cordon);
      only the hard goals (rack, disk) move replicas off it.
    * DRAINING: being removed: every replica must move off it; it still serves
      its data meanwhile, so it may stay leader until its replicas have moved.
    * DEAD: gone (unreachable past the failure threshold): its replicas are
      re-created elsewhere from the in-sync survivors.
    """

    ALIVE = "alive"
    CORDONED = "cordoned"
    DRAINING = "draining"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """One broker. ``disk_capacity_bytes`` 0 means unknown: no disk limit is
    applied to it. The measured rates are what the broker reports; the part
    its partitions' own rates do not explain is taken to stay with it."""

    broker_id: int
    rack: str | None = None
    state: BrokerState = BrokerState.ALIVE
    disk_capacity_bytes: int = 0
    disk_used_bytes: int = 0
    bytes_in_per_second: int = 0
    bytes_out_per_second: int = 0


@dataclass(frozen=True, slots=True)
class PartitionLoad:
    """One partition: ``replicas`` in order (the first is the preferred
    leader), ``leader`` the current one (-1 for none). A partition that is not
    ``movable`` (e.g. a reassignment of it is running) is counted but never
    moved."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    isr: tuple[int, ...]
    size_bytes: int = 0
    bytes_in_per_second: int = 0
    movable: bool = True


@dataclass(frozen=True, slots=True)
class ClusterState:
    brokers: tuple[BrokerLoad, ...]
    partitions: tuple[PartitionLoad, ...]


@dataclass(frozen=True, slots=True)
class GoalConfig:
    """The goals' parameters and the cost bound of one plan.

    ``balance_ratio_max`` is the target max/min of replica, leader and per-topic
    counts over the brokers that take replicas (see ``goals.band``);
    ``network_balance_ratio_max`` the same for bytes in and out, looser because
    measured rates wander and moving data for noise costs more than it saves.
    ``max_moves_per_broker`` bounds the data moves (not leader-only moves) that
    add or remove a replica on any one broker in a plan; ``max_plan_bytes`` the
    bytes all of a plan's new replicas copy. None means unbounded.
    """

    disk_threshold_fraction: float = 0.8
    balance_ratio_max: float = 1.1
    network_balance_ratio_max: float = 1.2
    max_moves_per_broker: int | None = 5  # Cruise Control's default concurrent moves per broker
    max_plan_bytes: int | None = None

    def __post_init__(self):
        if not 0 < self.disk_threshold_fraction <= 1:
            raise ValueError("disk_threshold_fraction must be in (0, 1]")
        if self.balance_ratio_max < 1 or self.network_balance_ratio_max < 1:
            raise ValueError("balance ratios must be at least 1")
        if self.max_moves_per_broker is not None and self.max_moves_per_broker < 1:
            raise ValueError("max_moves_per_broker must be at least 1")
        if self.max_plan_bytes is not None and self.max_plan_bytes < 0:
            raise ValueError("max_plan_bytes must not be negative")


# The goals, in priority order: (name, hard).
GOALS: tuple[tuple[str, bool], ...] = (
    ("replica_placement", True),
    ("rack_awareness", True),
    ("disk_capacity", True),
    ("replica_count", False),
    ("leader_count", False),
    ("network", False),
    ("topic_spread", False),
)
GOAL_NAMES = tuple(name for name, _ in GOALS)


class MoveKind(enum.Enum):
    LEADER_ONLY = "leader_only"  # the same replicas in another order: no data moves
    REPLICA_MOVE = "replica_move"


@dataclass(frozen=True, slots=True)
class Move:
    """One partition's reassignment: ``new_replicas[0]`` is the new preferred
    leader; ``bytes_to_move`` what the added replicas copy."""

    topic: str
    partition: int
    old_replicas: tuple[int, ...]
    new_replicas: tuple[int, ...]
    bytes_to_move: int
    kind: MoveKind

    @property
    def added(self) -> tuple[int, ...]:
        return tuple(b for b in self.new_replicas if b not in self.old_replicas)

    @property
    def removed(self) -> tuple[int, ...]:
        return tuple(b for b in self.old_replicas if b not in self.new_replicas)


@dataclass(frozen=True, slots=True)
class GoalSummary:
    """A goal's distance (``goals.goal_distances``: 0 means met) before and
    after the plan, with the lowest and highest per-broker figure it balances
    (None for the goals that do not balance one)."""

    goal: str
    hard: bool
    before: int
    after: int
    spread_before: tuple[int, int] | None = None
    spread_after: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Violation:
    """A hard goal the plan leaves unmet, and why. ``broker`` names the broker
    concerned (disk) or the replica that cannot move (placement)."""

    goal: str
    reason: str
    topic: str | None = None
    partition: int | None = None
    broker: int | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """One decision of the planner, in order: which goal changed which
    partition's replicas from what to what. A partition changed twice shows
    twice here and once in the moves."""

    goal: str
    topic: str
    partition: int
    replicas_before: tuple[int, ...]
    replicas_after: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    """The moves (leader-only first, then by topic and partition), the goals'
    summaries, the hard goals left unmet that no plan can meet as the cluster
    stands (``violations``), the distance left of every goal not met
    (``remaining_imbalance``: what a next plan may reduce when
    ``cost_bound_reached`` says the bound held moves back, else the best the
    goals allow), and the decisions (``steps``).

    ``broker_copy_bytes`` is, per broker, the larger of the bytes it receives
    as a new replica and the bytes it sends as the current leader of a moved
    partition: the plan takes at least the largest of these divided by the
    per-broker throttle rate."""

    moves: tuple[Move, ...]
    goals: tuple[GoalSummary, ...]
    violations: tuple[Violation, ...] = ()
    remaining_imbalance: tuple[tuple[str, int], ...] = ()
    cost_bound_reached: bool = False
    steps: tuple[Step, ...] = ()
    broker_copy_bytes: tuple[tuple[int, int], ...] = field(default=())

    @property
    def total_bytes(self) -> int:
        return sum(move.bytes_to_move for move in self.moves)

    def estimated_seconds(self, throttle_bytes_per_second: int) -> float:
        """How long the copies take at a per-broker replication throttle
        (Kafka's throttles are per broker, so brokers copy in parallel)."""
        if throttle_bytes_per_second <= 0:
            raise ValueError("throttle_bytes_per_second must be positive")
        busiest = max((copied for _, copied in self.broker_copy_bytes), default=0)
        return busiest / throttle_bytes_per_second

    def summary(self, goal: str) -> GoalSummary:
        for summary in self.goals:
            if summary.goal == goal:
                return summary
        raise KeyError(goal)
