"""The balancer's decisions over time (pure): what the active controller writes, tick after tick.

The planner (``planner``) says where replicas should be; this state machine says
when to ask it and how to carry a plan out. The active controller calls
:meth:`BalancerDriver.tick` about once a second with the image its next
records will be planned against, the time, and the brokers it has heard from;
the driver answers with the metadata records to write (reassignments and their
cancellations, throttle configs, preferred elections) and keeps a
:class:`BalancerStatus`. It keeps no IO and reads no clock, so a seeded
simulation drives it exactly as the controller does.

States (``status().state``):

* ``off``: ``balancer.mode=off``.
* ``ready``: no balancer move runs; nothing to do, or waiting (for the first
  heartbeat of a broker after a failover, which might be alive).
* ``in_progress``: moves of one plan run. The next plan is made only once all
  of them are over (completed, cancelled, or replaced by someone else's
  reassignment), so at most ``max_moves_per_broker`` data moves touch any
  broker at a time (the planner's cost bound is per plan).
* ``stalled``: nothing is moving and something keeps the balancer from
  acting: a reassignment it did not start is running (an operator's: the
  balancer waits for it, as Confluent's does), the cluster cannot meet a
  hard goal (fewer brokers than a replication factor), or ``balancer.version``
  1 is not finalized (controller/features.py: the balancer's throttle records
  could not be read by every node, and it moves nothing unthrottled).

Triggers, checked only when no balancer move runs:

* broker failure (every mode but off): a broker fenced for
  ``broker_failure_threshold_ms`` that still holds replicas is DEAD to the
  planner, which re-creates its replicas from the in-sync survivors. The time
  is counted from when this driver first saw it fenced, so after a failover it
  starts again (later rather than too early: the broker may be restarting).
* remove_broker (every mode but off): a draining broker (``pybroker cluster
  remove-broker``, controller/balancer/placement_commands.py) still holds
  replicas: the planner moves them all off it. Cordoned brokers keep theirs
  and take none.
* disk (every mode but off): a broker's log dirs' file systems are more than
  ``disk_threshold_percent`` full (the brokers report their use in their
  heartbeats: controller/balancer/load_reports.py): the planner's disk goal
  moves replicas off it, the largest first, before it fills up. It waits for
  the replica sizes of the brokers it concerns (a new active controller has
  none until their next reports); a broker that is full of something else than
  its replicas cannot be helped, and the balancer says so (``stalled``).
* node_add (every mode but off): an unfenced broker that is not cordoned or
  draining holds no replica while others have some, or fewer than half the
  mean of those brokers (a new broker a previous active controller had
  started to fill: the trigger itself is not in the log).
* imbalance (continuous): the replica or leader counts of the brokers that
  take replicas differ by more than ``imbalance_threshold_percent`` of their
  mean.

A trigger holds until a plan finds nothing more to move: one plan is bounded
(moves per broker), so a new broker is filled over several plans.

Moves are AlterPartitionReassignments records (``controller.reassignment``),
written together with throttles in one batch so no byte copies unthrottled:
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate``
on every broker a move copies from or to (a broker's own dynamic config), and
the topics' ``leader.replication.throttled.replicas`` (the current replicas of
the moved partitions) and ``follower.replication.throttled.replicas`` (the
added ones). A config an operator already set is left as it is (theirs wins)
and not removed afterwards; the balancer removes only what it set (noted in
the log with BalancerThrottleRecords, so a new active controller removes what
its predecessor set), once no reassignment runs, and elects the preferred
leaders the plan chose.

A move is cancelled when the cluster changes under it: a broker it adds a
replica to is fenced or gone (it cannot catch up), or the partition has no
leader (nothing copies); the trigger is then checked anew, with a fresh plan.

A tick that finds no move running, no trigger, no fenced broker and the same
image and live brokers as the last such tick does nothing: an idle balancer
costs nothing per tick, however many partitions there are.

Bytes to move are the sizes the brokers reported of the moved partitions
(each partition's largest replica: what a new replica copies); the time a
plan takes is estimated as the most bytes any one broker sends or receives
in it divided by ``throttle_bytes_per_second`` (throttles are per broker and
brokers copy in parallel; the moves of one broker share its throttle), so a
lower bound: it is reported as -1 (unknown) until the brokers have reported
their sizes.

What it does not do yet: knowing its own moves across a controller failover
(a reassignment the previous active controller started counts as someone
else's until it ends; its throttles are removed after that).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from controller.balancer.image_input import cluster_state_from_image
from controller.balancer.load_reports import BrokerLoadReport, planner_inputs
from controller.balancer.model import GoalConfig, Move, MoveKind, Plan
from controller.balancer.placement_commands import cordoned_brokers, draining_brokers
from controller.balancer.planner import plan as make_plan
from controller.features import BALANCER_VERSION_NEEDED, balancer_records_enabled
from controller.leader_election import plan_preferred_elections
from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import (
    BALANCER_THROTTLE_RECORD,
    CONFIG_RECORD,
    NO_LEADER,
    PLACEMENT_STATE_NAMES,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    record_api_key,
)
from controller.reassignment import is_reassigning, plan_alter_partition_reassignments
from protocol.errors import ErrorCode

MODES = ("off", "node_add", "continuous")
# The throttle keys (replication.throttle's names; the controller layer may not import replication).
LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
THROTTLE_RATES = (LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE)
# Unknown, in the status and the plan: no broker has reported partition sizes yet.
UNKNOWN = -1


@dataclass(frozen=True)
class BalancerSettings:
    """The ``balancer.*`` broker configs (broker/config.py documents them).
    Defaults are Confluent Self-Balancing's: heal a broker after an hour
    (confluent.balancer.heal.broker.failure.threshold.ms), throttle at 10 MiB/s
    (confluent.balancer.throttle.bytes.per.second); 5 concurrent moves per
    broker is Cruise Control's."""

    mode: str = "node_add"
    broker_failure_threshold_ms: int = 3_600_000
    throttle_bytes_per_second: int = 10_485_760
    max_moves_per_broker: int = 5
    imbalance_threshold_percent: int = 10
    disk_threshold_percent: int = 80

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"balancer mode must be one of {', '.join(MODES)}")
        if self.broker_failure_threshold_ms < 0:
            raise ValueError("the broker failure threshold must not be negative")
        if self.throttle_bytes_per_second < 1:
            raise ValueError("the throttle must be at least 1 byte per second")
        if self.max_moves_per_broker < 1:
            raise ValueError("max moves per broker must be at least 1")
        if self.imbalance_threshold_percent < 0:
            raise ValueError("the imbalance threshold must not be negative")
        if not 1 <= self.disk_threshold_percent <= 100:
            raise ValueError("the disk threshold must be between 1 and 100 percent")


class BalancerState(enum.Enum):
    OFF = "off"
    READY = "ready"
    IN_PROGRESS = "in_progress"
    STALLED = "stalled"


@dataclass(frozen=True)
class BalancerStatus:
    state: BalancerState
    reason: str | None = None  # why stalled, or what a ready balancer waits for
    trigger: str | None = None  # what the running (or last) plan was made for
    moves_in_flight: int = 0
    # Of the moves in flight, as planned (the bytes already copied are not subtracted).
    bytes_to_move: int = UNKNOWN
    estimated_ms: int = UNKNOWN
    # When a plan last found nothing to move (None: not since this controller became active).
    balanced_since_ms: int | None = None
    failed_brokers: tuple[int, ...] = ()
    # (broker id, replicas, leaders) when the current or last balancing run started
    # (its first plan), and that time; () and None before this driver started one.
    distribution_before: tuple[tuple[int, int, int], ...] = ()
    distribution_before_ms: int | None = None


@dataclass(frozen=True)
class _InFlight:
    move: Move
    adding: tuple[int, ...]


class BalancerDriver:
    def __init__(self, settings: BalancerSettings):
        self.settings = settings
        self._fenced_since_ms: dict[int, int] = {}
        self._in_flight: dict[tuple[str, int], _InFlight] = {}
        self._to_elect: set[tuple[str, int]] = set()
        self._trigger: str | None = None
        self._last_trigger: str | None = None
        self._balanced_since_ms: int | None = None
        self._failed: tuple[int, ...] = ()
        self._before: tuple[tuple[int, int, int], ...] = ()
        self._before_ms: int | None = None
        self._stalled: str | None = None
        self._waiting: str | None = None
        # The assignment a plan found nothing to do for: not planned again until it changes.
        self._settled_on: tuple | None = None
        self._settled_stalled: str | None = None
        # (image offset, live brokers) of the last tick that found nothing to do and nothing
        # that time alone could change (no fenced broker): the next such tick is free.
        self._idle_on: tuple | None = None
        # (level, message) for the controller's log, taken with take_events().
        self._events: list[tuple[str, str]] = []
        # The brokers' latest measurements, as the last tick was given them.
        self._loads: dict[int, BrokerLoadReport] = {}
        # The running plan's bytes and estimated time (UNKNOWN without sizes).
        self._plan_bytes = UNKNOWN
        self._plan_estimated_ms = UNKNOWN

    def _note(self, level: str, message: str) -> None:
        self._events.append((level, message))

    def take_events(self) -> list[tuple[str, str]]:
        """What happened since the last call, as (``info`` or ``warning``, message)."""
        events, self._events = self._events, []
        return events

    # ------------------------------------------------------------------ inputs

    def failed_brokers(self, image: MetadataImage, now_ms: int) -> set[int]:
        """Brokers fenced for at least the failure threshold (as this driver saw them)."""
        threshold = self.settings.broker_failure_threshold_ms
        return {b for b, since in self._fenced_since_ms.items() if b in image.brokers and now_ms - since >= threshold}

    def _observe(self, image: MetadataImage, now_ms: int) -> None:
        for broker_id, broker in image.brokers.items():
            if broker.fenced:
                self._fenced_since_ms.setdefault(broker_id, now_ms)
            else:
                self._fenced_since_ms.pop(broker_id, None)
        for broker_id in [b for b in self._fenced_since_ms if b not in image.brokers]:
            del self._fenced_since_ms[broker_id]

    # ------------------------------------------------------------------ the tick

    def tick(
        self,
        image: MetadataImage,
        now_ms: int,
        live_brokers: Collection[int],
        loads: Mapping[int, BrokerLoadReport] | None = None,
    ) -> list:
        """The records to write now (possibly none). ``live_brokers``: the unfenced
        brokers the controller has heard from within their session; ``loads``:
        their latest measurements (controller/balancer/load_reports.py)."""
        self._observe(image, now_ms)
        self._loads = dict(loads or {})
        if self.settings.mode == "off":
            return []
        if not balancer_records_enabled(image):
            # Nothing of the balancer's can be in flight: the level is never lowered.
            self._stalled = BALANCER_VERSION_NEEDED
            return []
        if self._stalled == BALANCER_VERSION_NEEDED:
            self._stalled = None
        records: list = []
        self._follow_moves(image, records)
        if self._in_flight:
            self._stalled = None
            return records
        # The plan's moves are over: its leaders, and its throttles off once no
        # reassignment runs (a predecessor's moves may still be copying under
        # them). A next plan is made in the same tick, on the image these records
        # (and any cancellations) leave: they are written in one batch, so the
        # throttles a next plan needs again are never off in between.
        if self._to_elect:
            records.extend(plan_preferred_elections(_applied(image, records), sorted(self._to_elect)))
            self._to_elect.clear()
        image = _applied(image, records)
        if image.balancer_throttles and not _reassigning(image):
            removed = self._remove_throttles(image)
            records.extend(removed)
            image = _applied(image, removed)
        if records:
            self._idle_on = None
            if self._trigger is None:
                return records
        live = frozenset(live_brokers)
        # An image's offset names its content (the planned image too: the offset its
        # records end at); disk use changes without it, so which brokers are full counts too.
        idle_key = (image.offset, live, self._over_disk(image))
        if self._idle_on is not None and self._idle_on == idle_key:
            return records
        records.extend(self._maybe_plan(image, now_ms, set(live)))
        # Not while waiting (for heartbeats, or sizes): what it waits for may come without a new image.
        idle = (not records and self._trigger is None and not self._fenced_since_ms and self._stalled is None
                and self._waiting is None)
        self._idle_on = idle_key if idle else None
        return records

    def _over_disk(self, image: MetadataImage) -> frozenset[int]:
        """Live brokers whose file systems are fuller than the disk threshold."""
        limit = self.settings.disk_threshold_percent
        return frozenset(
            b for b, report in self._loads.items()
            if b in image.brokers and not image.brokers[b].fenced and report.above(limit)
        )

    def _follow_moves(self, image: MetadataImage, records: list) -> None:
        cancel: list[tuple[str, int]] = []
        for key, flight in list(self._in_flight.items()):
            topic = image.topics.get(key[0])
            partition = topic.partitions.get(key[1]) if topic is not None else None
            if partition is None:
                del self._in_flight[key]
                continue
            if not is_reassigning(partition):
                del self._in_flight[key]
                if partition.replicas == flight.move.new_replicas:
                    self._to_elect.add(key)
                continue
            if tuple(sorted(partition.adding_replicas)) != tuple(sorted(flight.adding)):
                # Someone else's reassignment replaced ours: it is theirs now.
                del self._in_flight[key]
                continue
            lost = [b for b in flight.adding if b not in image.brokers or image.brokers[b].fenced]
            if lost:
                self._note("info", f"cancelling the move of {key[0]}-{key[1]}: broker(s) {lost} it copies to are down")
                cancel.append(key)
            elif partition.leader == NO_LEADER:
                # Nothing copies without a leader: waiting would hold every later plan back.
                self._note("info", f"cancelling the move of {key[0]}-{key[1]}: the partition has no leader")
                cancel.append(key)
        if cancel:
            results, cancel_records = plan_alter_partition_reassignments(image, _by_topic((k, None) for k in cancel))
            records.extend(cancel_records)
            for name, answers in results:
                for answer in answers:
                    if answer.error != ErrorCode.NONE:
                        self._note("warning", f"the move of {name}-{answer.partition_id} cannot be cancelled "
                                   f"({answer.message}): it is left to finish")
                    else:
                        del self._in_flight[(name, answer.partition_id)]
            # The cluster changed under the plan: plan again once the rest is over.
            self._trigger = self._trigger or "cluster_changed"
            self._settled_on = None

    def _maybe_plan(self, image: MetadataImage, now_ms: int, live: set[int]) -> list:
        failed = self.failed_brokers(image, now_ms)
        held = Counter(b for t in image.topics.values() for p in t.partitions.values() for b in p.replicas)
        holders = set(held)
        self._failed = tuple(sorted(failed & holders))
        self._waiting = None
        if _reassigning(image):
            self._stalled = "a partition reassignment the balancer did not start is running: it waits for it to end"
            return []
        self._stalled = None
        usable = {b for b, r in image.brokers.items() if not r.fenced and not r.in_controlled_shutdown}
        takers = usable - set(image.broker_placement)
        unheard = sorted(usable - live)
        if unheard:
            # Right after a failover: they may be alive; placing on them or not
            # would be a guess, so wait for their heartbeats (or their fencing).
            self._waiting = f"waiting for the first heartbeat of broker(s) {unheard}"
            return []
        trigger = self._trigger
        if self._failed:
            trigger = "broker_failure"
        elif draining_brokers(image) & holders:
            trigger = "remove_broker"
        elif over_disk := self._over_disk(image) & holders:
            unsized = sorted(b for b in over_disk if self._loads[b].partition_sizes is None)
            if unsized:
                # Planning without sizes would take every byte for something no move frees.
                self._waiting = f"waiting for the replica sizes of broker(s) {unsized}, above the disk threshold"
                return []
            trigger = "disk"
        elif trigger is None:
            if self._underfilled(held, takers):
                trigger = "node_add"
            elif self.settings.mode == "continuous" and self._imbalanced(image, takers):
                trigger = "imbalance"
        if trigger is None:
            if self._balanced_since_ms is None:
                self._balanced_since_ms = now_ms
            return []
        # New sizes may let a plan that found nothing find something: they count, at their pace.
        sized = tuple(sorted((b, r.sizes_received_ms) for b, r in self._loads.items())) if trigger == "disk" else ()
        fingerprint = (_fingerprint(image, failed, live), sized)
        if fingerprint == self._settled_on:
            self._stalled = self._settled_stalled  # what that plan could not do still holds
            return []
        result = self.plan(image, failed=failed)
        data_moves = [m for m in result.moves if m.kind is MoveKind.REPLICA_MOVE]
        if not result.moves:
            self._trigger = None
            self._settled_on = fingerprint
            self._settled_stalled = None
            if result.violations:
                v = result.violations[0]
                where = f"{v.topic}-{v.partition}" if v.topic is not None else f"broker {v.broker}"
                more = f" (and {len(result.violations) - 1} more)" if len(result.violations) > 1 else ""
                self._stalled = self._settled_stalled = f"{v.goal} cannot be met for {where}: {v.reason}{more}"
            else:
                self._balanced_since_ms = now_ms
            return []
        self._last_trigger = trigger
        if self._trigger is None:
            # A run starts (a later plan of the same trigger continues it): what it started from.
            self._before = distribution(image)
            self._before_ms = now_ms
        # Keep planning while the bound held moves back or data moved (the next
        # plan confirms nothing is left); a plan of leader moves alone finishes it.
        self._trigger = trigger if (result.cost_bound_reached or data_moves) else None
        self._balanced_since_ms = None
        self._plan_bytes, self._plan_estimated_ms = self.estimates(result)
        return self._start(image, result.moves, trigger)

    @staticmethod
    def _underfilled(held: Counter, takers: set[int]) -> bool:
        """A broker that takes replicas holds none while another holds some, or
        fewer than half the mean: a new broker, or one a previous controller
        had started to fill (the trigger itself is not in the log)."""
        if not takers or not any(held[b] for b in takers):
            return False
        mean = sum(held[b] for b in takers) / len(takers)
        return any(held[b] == 0 or 2 * held[b] < mean for b in takers)

    def _imbalanced(self, image: MetadataImage, usable: set[int]) -> bool:
        takers = sorted(usable)
        if len(takers) < 2:
            return False
        replicas = dict.fromkeys(takers, 0)
        leaders = dict.fromkeys(takers, 0)
        for topic in image.topics.values():
            for p in topic.partitions.values():
                for b in p.replicas:
                    if b in replicas:
                        replicas[b] += 1
                if p.leader in leaders:
                    leaders[p.leader] += 1
        limit = self.settings.imbalance_threshold_percent
        for counts in (replicas, leaders):
            mean = sum(counts.values()) / len(counts)
            if mean > 0 and (max(counts.values()) - min(counts.values())) * 100 > limit * mean:
                return True
        return False

    # ------------------------------------------------------------------ plans and moves

    def plan(self, image: MetadataImage, *, failed: Collection[int] = ()) -> Plan:
        """The plan the balancer would carry out now (also ``--dry-run``'s), with
        the brokers' measurements as the last tick was given them."""
        disk_bytes, broker_rates, partition_sizes = planner_inputs(self._loads)
        state = cluster_state_from_image(
            image, failed=failed, draining=draining_brokers(image), cordoned=cordoned_brokers(image),
            disk_bytes=disk_bytes, broker_rates=broker_rates, partition_sizes=partition_sizes,
        )
        goals = GoalConfig(
            max_moves_per_broker=self.settings.max_moves_per_broker,
            disk_threshold_fraction=self.settings.disk_threshold_percent / 100,
        )
        return make_plan(state, goals)

    def sizes_known(self) -> bool:
        """Whether every broker heard from has reported its replicas' sizes (else
        bytes and times are not claimed: a missing size counts as 0)."""
        return bool(self._loads) and all(r.partition_sizes is not None for r in self._loads.values())

    def estimates(self, plan: Plan) -> tuple[int, int]:
        """(bytes the plan copies, estimated ms), UNKNOWN without sizes: the busiest
        broker's bytes in or out at the per-broker throttle (see the module doc)."""
        if not self.sizes_known():
            return UNKNOWN, UNKNOWN
        seconds = plan.estimated_seconds(self.settings.throttle_bytes_per_second)
        return plan.total_bytes, int(seconds * 1000 + 0.5)

    def _start(self, image: MetadataImage, moves: tuple[Move, ...], trigger: str) -> list:
        targets = [((m.topic, m.partition), m.new_replicas) for m in moves]
        results, reassign_records = plan_alter_partition_reassignments(image, _by_topic(targets))
        refused = {(name, a.partition_id): a.message for name, answers in results for a in answers if a.error != ErrorCode.NONE}
        for (name, partition_id), message in sorted(refused.items()):
            self._note("warning", f"the move of {name}-{partition_id} was refused: {message}")
        started = [m for m in moves if (m.topic, m.partition) not in refused]
        for move in started:
            self._in_flight[(move.topic, move.partition)] = _InFlight(move, tuple(sorted(move.added)))
        copying = [m for m in started if m.kind is MoveKind.REPLICA_MOVE]
        self._note("info", f"{trigger}: starting {len(started)} move(s), {len(copying)} copying data")
        # The throttles first, in the same batch, so no byte of the moves goes unthrottled.
        return [*self._set_throttles(image, copying), *reassign_records]

    def _set_throttles(self, image: MetadataImage, moves: list[Move]) -> list:
        records = []
        rate = str(self.settings.throttle_bytes_per_second)
        brokers = sorted({b for m in moves for b in (*m.old_replicas, *m.added)})
        for broker_id in brokers:
            own = image.configs_of(RESOURCE_BROKER, str(broker_id))
            if any(key in own for key in THROTTLE_RATES):
                continue  # an operator's throttle on this broker: theirs stays
            for key in THROTTLE_RATES:
                records.extend(_owned_config(RESOURCE_BROKER, str(broker_id), key, rate))
        lists: dict[str, dict[str, list[str]]] = {}
        for move in moves:
            entry = lists.setdefault(move.topic, {LEADER_THROTTLED_REPLICAS: [], FOLLOWER_THROTTLED_REPLICAS: []})
            entry[LEADER_THROTTLED_REPLICAS].extend(f"{move.partition}:{b}" for b in move.old_replicas)
            entry[FOLLOWER_THROTTLED_REPLICAS].extend(f"{move.partition}:{b}" for b in move.added)
        for name, entry in sorted(lists.items()):
            configs = image.topics[name].configs
            for key, values in entry.items():
                if key in configs or not values:
                    continue
                records.extend(_owned_config(RESOURCE_TOPIC, name, key, ",".join(values)))
        return records

    def _remove_throttles(self, image: MetadataImage) -> list:
        """The throttles the balancer set (this driver or a predecessor: the log
        says which) removed, and forgotten; a value changed since is an
        operator's and stays."""
        records = []
        for (resource_type, name, key), value in sorted(image.balancer_throttles.items()):
            exists = resource_type != RESOURCE_TOPIC or name in image.topics
            if exists and image.configs_of(resource_type, name).get(key) == value:
                records.append(_config(resource_type, name, key, None))
            records.append(
                BALANCER_THROTTLE_RECORD(resource_type=resource_type, resource_name=name, name=key, value=value, owned=False)
            )
        return records

    # ------------------------------------------------------------------ status

    def status(self) -> BalancerStatus:
        if self.settings.mode == "off":
            return BalancerStatus(BalancerState.OFF)
        common = dict(
            trigger=self._last_trigger, balanced_since_ms=self._balanced_since_ms, failed_brokers=self._failed,
            distribution_before=self._before, distribution_before_ms=self._before_ms,
        )
        if self._in_flight or (self._trigger is not None and self._stalled is None and self._waiting is None):
            # Between two plans of one trigger too: it is not balanced yet.
            moving = [f.move for f in self._in_flight.values()]
            known = self._plan_bytes != UNKNOWN
            return BalancerStatus(
                BalancerState.IN_PROGRESS,
                moves_in_flight=len(self._in_flight),
                bytes_to_move=sum(m.bytes_to_move for m in moving) if known and moving else UNKNOWN,
                estimated_ms=self._plan_estimated_ms if known and moving else UNKNOWN,
                **common,
            )
        # No move of the balancer's runs: nothing to copy, and that is known.
        common.update(bytes_to_move=0, estimated_ms=0)
        if self._stalled is not None:
            return BalancerStatus(BalancerState.STALLED, reason=self._stalled, **common)
        return BalancerStatus(BalancerState.READY, reason=self._waiting, **common)


def distribution(image: MetadataImage) -> tuple[tuple[int, int, int], ...]:
    """(broker id, replicas, leaders) of every registered broker, and of any other
    broker still named as a replica, by id."""
    replicas = Counter(dict.fromkeys(image.brokers, 0))
    leaders = Counter(dict.fromkeys(image.brokers, 0))
    for topic in image.topics.values():
        for partition in topic.partitions.values():
            replicas.update(partition.replicas)
            if partition.leader != NO_LEADER:
                leaders[partition.leader] += 1
    return tuple((b, replicas[b], leaders[b]) for b in sorted(replicas))


def placement_summary(image: MetadataImage) -> tuple[tuple[int, str, int], ...]:
    """(broker id, cordoned or draining, replicas it holds) of every broker not in
    the normal placement state: a draining broker holding 0 may be stopped."""
    held = dict.fromkeys(image.broker_placement, 0)
    for topic in image.topics.values():
        for partition in topic.partitions.values():
            for b in partition.replicas:
                if b in held:
                    held[b] += 1
    return tuple((b, PLACEMENT_STATE_NAMES[s], held[b]) for b, s in sorted(image.broker_placement.items()))


def _config(resource_type: int, name: str, key: str, value: str | None):
    return CONFIG_RECORD(resource_type=resource_type, resource_name=name, name=key, value=value)


def _owned_config(resource_type: int, name: str, key: str, value: str) -> list:
    """A throttle config set, and noted in the log as the balancer's."""
    return [
        _config(resource_type, name, key, value),
        BALANCER_THROTTLE_RECORD(resource_type=resource_type, resource_name=name, name=key, value=value, owned=True),
    ]


def _applied(image: MetadataImage, records: list) -> MetadataImage:
    """``image`` as ``records`` leave it (what the controller will plan the next
    command against once they are proposed)."""
    if not records:
        return image
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset)


def _reassigning(image: MetadataImage) -> bool:
    return any(is_reassigning(p) for t in image.topics.values() for p in t.partitions.values())


def _by_topic(targets: Iterable[tuple[tuple[str, int], tuple[int, ...] | None]]):
    by_topic: dict[str, list] = {}
    for (name, partition_id), replicas in targets:
        by_topic.setdefault(name, []).append((partition_id, None if replicas is None else list(replicas)))
    return list(by_topic.items())


def _fingerprint(image: MetadataImage, failed: Collection[int], live: Collection[int]) -> tuple:
    """What a plan depends on: the brokers' states and every partition's replicas and leader."""
    brokers = tuple(sorted((b, r.fenced, r.in_controlled_shutdown, r.rack) for b, r in image.brokers.items()))
    partitions = tuple(
        (name, pid, p.replicas, p.isr, p.leader)
        for name in sorted(image.topics)
        for pid, p in sorted(image.topics[name].partitions.items())
    )
    return brokers, partitions, tuple(sorted(failed)), tuple(sorted(live))
