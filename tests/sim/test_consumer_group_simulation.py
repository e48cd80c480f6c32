"""Deterministic simulation of the KIP-848 consumer group coordinator (pure core)
with consumers that heartbeat over a lossy network, crash, leave and come back,
and a coordinator that fails over; and (at the end of the file) a mixed group,
converted from a classic one, whose classic members rejoin as eager clients do.

One seed is one run. Time is simulated; nothing sleeps, so a failing seed
replays exactly:

    CG_SIM_SEED=<n> pytest tests/sim/test_consumer_group_simulation.py

``CG_SIM_SEEDS=<count>`` runs that many seeds from ``CG_SIM_FIRST_SEED`` (0);
``CG_SIM_TRACE=1`` prints every event.

The world:
  * a coordinator running :class:`ConsumerGroupCoordinator`, its stores going
    to an in-memory ``__consumer_offsets`` partition. A store may fail (the
    records are not appended, the member is answered NOT_COORDINATOR). The
    coordinator crashes at random: its memory is gone, requests on their way
    to it are lost, and a new one is rebuilt only from the stored records;
  * topics whose partitions grow, and a topic created later that a regular
    expression subscription picks up;
  * consumers, as Kafka's consumer behaves with ``group.protocol=consumer``:
    one heartbeat in flight, answers of abandoned requests ignored, a full
    heartbeat after an error or a timeout, partitions revoked as soon as an
    assignment no longer has them and taken as soon as it has them, all
    partitions given up when fenced (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID)
    or when no heartbeat was answered within the session (or rebalance)
    timeout. They join, leave (-1), crash silently, and static ones leave for
    a while (-2) and come back under a new member id. Messages are delayed
    (in order per consumer), sometimes by much, or lost.

Invariants, checked after every event:
  * no partition is owned by two live consumers at once, as they believe it
    after applying the answers they got;
  * in the coordinator no partition is held (assigned or pending revocation)
    by two members, and its view of the owners agrees with its members;
  * epochs never go back: the group epoch, the assignment epoch (never past
    the group epoch), and each consumer's member epoch while it stays a member;
  * a failover keeps the group: what the new coordinator replays is the group
    the old one had (none, after an admin deleted it while it was empty);
  * DeleteGroups is refused while the group has members and changes nothing
    then; an empty group it deletes is gone (its epochs start again).
Liveness: once the chaos stops, within a bounded time the group is Stable and
every partition of the subscribed topics is owned by exactly one live
consumer, the one the coordinator assigned it to.
"""

from __future__ import annotations

import heapq
import itertools
import os
import random
import uuid
from dataclasses import dataclass

import pytest

from broker.coordinators.consumer_groups.coordinator import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    HeartbeatRequest,
    HeartbeatResponse,
)
from broker.coordinators.consumer_groups.model import TopicInfo
from protocol.errors import ErrorCode

GROUP = "sim-group"
SESSION_TIMEOUT_MS = 3000
HEARTBEAT_INTERVAL_MS = 300
REBALANCE_TIMEOUT_MS = 2000
REQUEST_TIMEOUT_MS = 1000
CHAOS_MS = 20_000
SETTLE_MS = 15_000
MAX_CONSUMERS = 7
DEFAULT_SEEDS = 100
TRACE = bool(os.environ.get("CG_SIM_TRACE"))

FENCED = {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID}


class Violation(AssertionError):
    pass


@dataclass
class Consumer:
    name: str
    member_id: str
    instance_id: str | None
    subscription: tuple[str, ...] | None
    regex: str | None
    rack: str | None
    assignor: str | None
    epoch: int = 0
    owned: frozenset = frozenset()
    live: bool = True
    in_flight: int | None = None  # the request whose answer is awaited
    full: bool = True  # the next heartbeat carries every field
    # It must say what it owns in its next heartbeat: it applied an assignment
    # (maybe the same partitions at a new epoch, as Kafka's consumer compares
    # its local assignment with its epoch) or gave its partitions up since it
    # last said so.
    owned_dirty: bool = False
    # When it sent the last answered heartbeat whose answer did not take
    # partitions from it (from what it owned when it sent it): the
    # coordinator's session and rebalance timeouts cannot have started before.
    safe_since_ms: int = 0
    next_heartbeat_ms: int = 0
    cut_until_ms: int = 0  # its network is down until then


class Simulation:
    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self.queue: list = []
        self.order = itertools.count()
        self.requests = itertools.count(1)
        self.topics = {
            "a": TopicInfo(uuid.UUID(int=0xA), "a", self._racks(3)),
            "b": TopicInfo(uuid.UUID(int=0xB), "b", self._racks(2)),
        }
        self.log: list[tuple[bytes, bytes | None]] = []
        self.coordinator = self._new_coordinator()
        self.consumers: dict[str, Consumer] = {}
        self.names = itertools.count()
        self.away_instances: list[str] = []  # static members away (-2), to come back
        self.client_network_free_ms: dict[tuple[str, str], int] = {}
        self.store_failure_rate = 0.0
        self.loss_rate = 0.0
        self.chaos = True
        self.last_group_epoch = 0
        self.last_assignment_epoch = 0
        self.seen: dict[str, int] = {}
        self.trace: list[str] = []

    # ------------------------------------------------------------- plumbing

    def _racks(self, count: int) -> tuple[frozenset[str], ...]:
        return tuple(frozenset({f"rack-{p % 2}"}) for p in range(count))

    def _new_coordinator(self) -> ConsumerGroupCoordinator:
        coordinator = ConsumerGroupCoordinator(ConsumerGroupConfig(
            session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, offsets_partitions=1,
        ))
        coordinator.set_topics(self.topics)
        return coordinator

    def show(self, partitions) -> str:
        names = {info.topic_id: name for name, info in self.topics.items()}
        return " ".join(sorted(f"{names[t]}{p}" for t, p in partitions)) or "nothing"

    def note(self, what: str) -> None:
        self.seen[what] = self.seen.get(what, 0) + 1

    def log_event(self, text: str) -> None:
        line = f"[{self.now:6d}] {text}"
        self.trace.append(line)
        if len(self.trace) > 400:
            del self.trace[:200]
        if TRACE:
            print(line)

    def at(self, when_ms: int, action, *args) -> None:
        heapq.heappush(self.queue, (when_ms, next(self.order), action, args))

    def send(self, consumer: Consumer, direction: str, action, *args) -> None:
        """Deliver in order per consumer and direction, after a delay; maybe lost."""
        if self.rng.random() < self.loss_rate or self.now < consumer.cut_until_ms:
            self.note(f"lost {direction}")
            return
        delay = self.rng.randint(1, 40) if self.rng.random() > 0.05 else self.rng.randint(200, 1500)
        key = (consumer.name, direction)
        when = max(self.now + delay, self.client_network_free_ms.get(key, 0))
        self.client_network_free_ms[key] = when
        self.at(when, action, *args)

    # ------------------------------------------------------------- consumers

    def new_consumer(self, instance_id: str | None = None) -> None:
        rng = self.rng
        name = f"c{next(self.names)}"
        by_regex = rng.random() < 0.3
        consumer = Consumer(
            name=name,
            member_id=f"{name}-{rng.getrandbits(32):08x}",
            instance_id=instance_id if instance_id is not None else (f"static-{name}" if rng.random() < 0.4 else None),
            subscription=None if by_regex else ("a", "b"),
            regex="[a-c]" if by_regex else None,
            rack=rng.choice([None, "rack-0", "rack-1"]),
            assignor=rng.choice([None, None, "uniform", "range"]) if not self.consumers else None,
            next_heartbeat_ms=self.now,
        )
        self.consumers[name] = consumer
        self.log_event(f"{name} starts as {consumer.member_id} (instance {consumer.instance_id})")

    def heartbeat(self, consumer: Consumer) -> None:
        if not consumer.live or consumer.in_flight is not None:
            return
        request_id = next(self.requests)
        consumer.in_flight = request_id
        full = consumer.full or consumer.epoch == 0
        request = HeartbeatRequest(
            GROUP,
            consumer.member_id,
            consumer.epoch,
            instance_id=consumer.instance_id,
            rack_id=consumer.rack if full else None,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS if full else -1,
            subscribed_topic_names=consumer.subscription if full else None,
            subscribed_topic_regex=consumer.regex if full else None,
            server_assignor=consumer.assignor if full else None,
            owned=(frozenset() if consumer.epoch == 0 else consumer.owned) if full or consumer.owned_dirty else None,
        )
        self.send(consumer, "request", self.arrive, consumer.name, request_id, request, self.coordinator, self.now, consumer.owned)
        self.at(self.now + REQUEST_TIMEOUT_MS, self.request_timeout, consumer.name, request_id)

    def request_timeout(self, name: str, request_id: int) -> None:
        consumer = self.consumers[name]
        if consumer.in_flight == request_id:
            consumer.in_flight = None
            consumer.full = True
            self.note("request timed out")

    def answer(self, name: str, request_id: int, sent_ms: int, owned_at_send: frozenset, request: HeartbeatRequest,
               response: HeartbeatResponse) -> None:
        consumer = self.consumers[name]
        if not consumer.live or consumer.in_flight != request_id:
            return  # abandoned
        consumer.in_flight = None
        consumer.next_heartbeat_ms = self.now + HEARTBEAT_INTERVAL_MS
        if response.error in FENCED:
            self.note(f"fenced {response.error.name}")
            self.log_event(f"{name} fenced ({response.error.name}): gives up {len(consumer.owned)} partitions")
            self.rejoin(consumer)
            return
        if response.error != ErrorCode.NONE:
            self.note(f"error {response.error.name}")
            consumer.full = True
            return
        if response.member_epoch < consumer.epoch:
            raise Violation(f"{name}: member epoch went back from {consumer.epoch} to {response.member_epoch}")
        consumer.epoch = response.member_epoch
        # What the answered request said holds unless the consumer changed since
        # it sent it (it gave its partitions up meanwhile).
        if request.rebalance_timeout_ms != -1 and request.owned == consumer.owned:
            consumer.full = False
        if response.assignment is None or response.assignment >= owned_at_send:
            consumer.safe_since_ms = sent_ms
        if request.owned is not None and request.owned == consumer.owned:
            consumer.owned_dirty = False
        if response.assignment is not None:
            consumer.owned_dirty = True
            # Revoke what is gone at once, then take what is new.
            consumer.owned = response.assignment
        self.log_event(f"{name} epoch {consumer.epoch} owns {self.show(consumer.owned)}")

    def rejoin(self, consumer: Consumer) -> None:
        consumer.owned = frozenset()
        consumer.owned_dirty = False
        consumer.epoch = 0
        consumer.full = True
        consumer.in_flight = None

    def check_session(self, consumer: Consumer) -> None:
        """A consumer not answered for its session (or rebalance) timeout gives up
        its partitions before the coordinator can give them to someone else: a
        lost answer is followed by a full heartbeat, whose answer would have
        told it to revoke, so the coordinator's timeouts started after
        ``safe_since_ms``."""
        limit = min(SESSION_TIMEOUT_MS, REBALANCE_TIMEOUT_MS) - 1
        if consumer.live and consumer.owned and self.now - consumer.safe_since_ms >= limit:
            # Its partitions are lost; it stays a member as far as it knows, and
            # learns otherwise (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH) if it is not.
            self.note("consumer gave up on its session")
            self.log_event(f"{consumer.name} unanswered too long: gives up its partitions")
            consumer.owned = frozenset()
            consumer.owned_dirty = consumer.full = True

    # ------------------------------------------------------------- coordinator

    def arrive(self, name: str, request_id: int, request: HeartbeatRequest, coordinator: ConsumerGroupCoordinator,
               sent_ms: int, owned_at_send: frozenset) -> None:
        if coordinator is not self.coordinator:
            self.note("request to a crashed coordinator")
            return
        consumer = self.consumers[name]
        answers: list[HeartbeatResponse] = []
        effects = coordinator.heartbeat(self.now, request, answers.append)
        self.carry_out(effects)
        if request.member_epoch in (-1, -2):
            self.note(f"leave {request.member_epoch} {answers[0].error.name}")
            return
        if answers[0].error == ErrorCode.UNRELEASED_INSTANCE_ID:
            self.note("unreleased instance id")
        self.send(consumer, "response", self.answer, name, request_id, sent_ms, owned_at_send, request, answers[0])

    def carry_out(self, effects) -> None:
        for effect in effects:
            if self.rng.random() < self.store_failure_rate:
                self.note("store failed")
                self.coordinator.store_done(effect.token, ErrorCode.NOT_COORDINATOR)
            else:
                self.log.extend(effect.records)
                self.coordinator.store_done(effect.token, ErrorCode.NONE)

    def fail_over(self) -> None:
        old = self.coordinator
        self.coordinator = self._new_coordinator()
        for key, value in self.log:
            self.coordinator.load_record(key, value)
        self.coordinator.finish_loading(self.now)
        if self.coordinator.groups != old.groups:
            raise Violation("the replayed group differs from the group before the failover")
        self.note("failover")
        self.log_event("coordinator fails over")

    # ------------------------------------------------------------- chaos

    def chaos_event(self) -> None:
        rng = self.rng
        live = [c for c in self.consumers.values() if c.live]
        roll = rng.random()
        if roll < 0.2 and len(live) < MAX_CONSUMERS:
            self.new_consumer()
        elif roll < 0.3 and live:
            consumer = rng.choice(live)
            consumer.live, consumer.owned = False, frozenset()
            self.note("crash")
            self.log_event(f"{consumer.name} crashes")
            if consumer.instance_id is not None and rng.random() < 0.6:
                # Restarted at once under the same instance id: refused until the
                # crashed one's session ends.
                self.away_instances.append(consumer.instance_id)
        elif roll < 0.36 and live:
            consumer = rng.choice(live)
            consumer.cut_until_ms = self.now + rng.randint(500, 5000)
            self.note("network cut")
            self.log_event(f"{consumer.name} cut off until {consumer.cut_until_ms}")
        elif roll < 0.44 and live:
            consumer = rng.choice(live)
            self.leave(consumer, -2 if consumer.instance_id and rng.random() < 0.7 else -1)
        elif roll < 0.54 and self.away_instances:
            self.new_consumer(self.away_instances.pop(0))
            self.note("static member back")
        elif roll < 0.6:
            self.fail_over()
        elif roll < 0.65:
            self.grow_topics()
        elif roll < 0.7:
            self.delete_group()
        elif roll < 0.72 and live:
            # Everyone leaves; the admin deletes the group once the sessions of
            # those whose leave was lost have ended (unless someone joined since).
            for consumer in live:
                self.leave(consumer, -1)
            self.note("everyone leaves")
            self.at(self.now + SESSION_TIMEOUT_MS + 500, self.delete_group)

    def delete_group(self) -> None:
        """An admin's DeleteGroups: refused while the group has members; an empty
        group goes, tombstones and all, and a member joining later starts a new
        one from epoch 0, as in Kafka."""
        group = self.coordinator.groups.get(GROUP)
        had_members = group is not None and bool(group.members)
        if group is not None:
            group = group.copy()  # as it was: the coordinator changes its own at once
        answers: list[ErrorCode] = []
        self.carry_out(self.coordinator.delete_group(GROUP, answers.append))
        (error,) = answers
        self.note(f"delete group {error.name}")
        self.log_event(f"admin deletes the group: {error.name}")
        expected = {ErrorCode.GROUP_ID_NOT_FOUND} if group is None else {ErrorCode.NON_EMPTY_GROUP} if had_members else {
            ErrorCode.NONE, ErrorCode.NOT_COORDINATOR}
        if error not in expected:
            raise Violation(f"DeleteGroups answered {error.name}, expected one of {sorted(e.name for e in expected)}")
        if error == ErrorCode.NONE:
            if GROUP in self.coordinator.groups:
                raise Violation("the deleted group is still there")
            self.last_group_epoch = self.last_assignment_epoch = 0
        elif group is not None and self.coordinator.groups.get(GROUP) != group:
            raise Violation("a refused or failed DeleteGroups changed the group")

    def leave(self, consumer: Consumer, epoch: int) -> None:
        consumer.owned = frozenset()
        consumer.live = False
        if consumer.epoch > 0 or epoch == -2:
            request = HeartbeatRequest(GROUP, consumer.member_id, epoch, instance_id=consumer.instance_id)
            self.send(consumer, "request", self.arrive, consumer.name, -1, request, self.coordinator, self.now, frozenset())
        if epoch == -2:
            self.away_instances.append(consumer.instance_id)
        self.log_event(f"{consumer.name} leaves with epoch {epoch}")

    def grow_topics(self) -> None:
        name = self.rng.choice(["a", "b", "c"])
        info = self.topics.get(name)
        count = 1 if info is None else min(info.partition_count + 1, 8)
        self.topics[name] = TopicInfo(info.topic_id if info else uuid.UUID(int=0xC), name, self._racks(count))
        self.coordinator.set_topics(self.topics)
        self.note("topics changed")
        self.log_event(f"topic {name} now has {count} partitions")

    # ------------------------------------------------------------- invariants

    def check(self) -> None:
        owners: dict = {}
        for consumer in self.consumers.values():
            if not consumer.live:
                continue
            for tp in consumer.owned:
                if tp in owners:
                    raise Violation(f"{tp} owned by both {owners[tp]} and {consumer.name}")
                owners[tp] = consumer.name
        group = self.coordinator.groups.get(GROUP)
        if group is None:
            return
        held: dict = {}
        for member in group.members.values():
            for tp in member.assigned | member.pending_revocation:
                if tp in held:
                    raise Violation(f"coordinator: {tp} held by {held[tp]} and {member.member_id}")
                held[tp] = member.member_id
        if held != group.owners:
            raise Violation("coordinator: its owners disagree with its members")
        if group.group_epoch < self.last_group_epoch or group.assignment_epoch < self.last_assignment_epoch:
            raise Violation("coordinator: the group or assignment epoch went back")
        if group.assignment_epoch > group.group_epoch:
            raise Violation("coordinator: the assignment epoch is past the group epoch")
        self.last_group_epoch, self.last_assignment_epoch = group.group_epoch, group.assignment_epoch

    def settled(self) -> bool:
        group = self.coordinator.groups.get(GROUP)
        live = [c for c in self.consumers.values() if c.live]
        if group is None or not live or group.state != "Stable" or len(group.members) != len(live):
            return False
        subscribed = {n for n in self.topics if any(n in (c.subscription or ()) or (c.regex and n in "abc") for c in live)}
        expected = {(self.topics[n].topic_id, p) for n in subscribed for p in range(self.topics[n].partition_count)}
        believed = {tp: c.member_id for c in live for tp in c.owned}
        assigned = {tp: m.member_id for m in group.members.values() for tp in m.assigned}
        return set(believed) == expected and believed == assigned

    # ------------------------------------------------------------- run

    def run(self) -> None:
        rng = self.rng
        for _ in range(3):
            self.new_consumer()
        self.loss_rate, self.store_failure_rate = 0.05, 0.03
        end_ms = CHAOS_MS + SETTLE_MS
        next_chaos_ms = 0
        step_ms = 10
        while self.now < end_ms:
            if self.chaos and self.now >= CHAOS_MS:
                self.chaos = False
                self.loss_rate = self.store_failure_rate = 0.0
                for instance_id in self.away_instances:
                    self.new_consumer(instance_id)
                self.away_instances.clear()
                if not any(c.live for c in self.consumers.values()):
                    self.new_consumer()
                self.log_event("chaos ends")
            while self.queue and self.queue[0][0] <= self.now:
                _, _, action, args = heapq.heappop(self.queue)
                action(*args)
                self.check()
            for consumer in list(self.consumers.values()):
                self.check_session(consumer)
                if consumer.live and consumer.in_flight is None and consumer.next_heartbeat_ms <= self.now:
                    self.heartbeat(consumer)
            group = self.coordinator.groups.get(GROUP)
            before = set(group.members) if group else set()
            self.carry_out(self.coordinator.tick(self.now))
            group = self.coordinator.groups.get(GROUP)
            if group is not None and before - set(group.members):
                self.note("member removed by a timeout")
            self.check()
            if self.chaos and self.now >= next_chaos_ms:
                self.chaos_event()
                self.check()
                next_chaos_ms = self.now + rng.randint(100, 900)
            if not self.chaos and self.settled():
                self.log_event("settled")
                return
            self.now += step_ms
        raise Violation("the group did not settle after the chaos")


def seeds() -> list[int]:
    if os.environ.get("CG_SIM_SEED"):
        return [int(os.environ["CG_SIM_SEED"])]
    first = int(os.environ.get("CG_SIM_FIRST_SEED", "0"))
    return list(range(first, first + int(os.environ.get("CG_SIM_SEEDS", str(DEFAULT_SEEDS)))))


def run_seed(seed: int) -> Simulation:
    sim = Simulation(seed)
    try:
        sim.run()
    except Violation as violation:
        tail = "\n".join(sim.trace[-60:])
        raise AssertionError(
            f"seed {seed}: {violation}\n{tail}\nreplay: CG_SIM_SEED={seed} pytest tests/sim/test_consumer_group_simulation.py"
        ) from None
    return sim


@pytest.mark.parametrize("seed", seeds())
def test_consumer_group_simulation(seed):
    run_seed(seed)


def test_simulation_exercises_the_interesting_paths():
    """The chaos reaches the paths the invariants are about, over some seeds."""
    seen: dict[str, int] = {}
    # Some paths (a fenced epoch, an empty group deleted) come up in a few seeds in ten.
    for seed in range(30):
        for what, count in run_seed(1000 + seed).seen.items():
            seen[what] = seen.get(what, 0) + count
    for what in ("failover", "store failed", "crash", "static member back", "fenced UNKNOWN_MEMBER_ID", "topics changed",
                 "consumer gave up on its session", "unreleased instance id", "member removed by a timeout", "fenced FENCED_MEMBER_EPOCH",
                 "request timed out", "leave -2 NONE", "leave -1 NONE", "error NOT_COORDINATOR",
                 "delete group NON_EMPTY_GROUP", "delete group NONE"):
        assert seen.get(what, 0) > 0, (what, seen)


# ----------------------------------------------------------------- mixed groups (the online upgrade)
#
# A second, simpler world for classic-protocol members inside a consumer group:
# requests reach the coordinator at once (no delays), members crash silently,
# stores fail, the coordinator fails over, and the group starts as a converted
# classic group. Classic members behave as librdkafka's eager ones: a heartbeat
# answered REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION makes them give up every
# partition and rejoin (JoinGroup, then SyncGroup), UNKNOWN_MEMBER_ID makes them
# join afresh; consumer-protocol members heartbeat as above. Invariants after
# every event: no partition owned by two live members as they believe it, the
# coordinator's owners agree with its members, replay gives the same group;
# once the chaos stops the group is Stable with every partition owned by the
# member the coordinator assigned it to.

MIXED_SESSION_MS = 3000
MIXED_CHAOS_MS = 15_000


@dataclass
class MixedMember:
    name: str
    classic: bool
    member_id: str = ""
    epoch: int = 0  # the generation of a classic member
    owned: frozenset = frozenset()
    live: bool = True
    joined: bool = False
    last_answered_ms: int = 0


class MixedSimulation:
    def __init__(self, seed: int):
        from broker.coordinators.consumer_groups.classic_members import ClassicGroupView, ClassicMemberView
        from protocol.consumer_offsets import encode_assignment

        self.rng = random.Random(seed)
        self.now = 0
        self.log: list = []
        self.topics = {"a": TopicInfo(uuid.UUID(int=0xA), "a", (frozenset(),) * 4),
                       "b": TopicInfo(uuid.UUID(int=0xB), "b", (frozenset(),) * 3)}
        self.ids = itertools.count()
        self.coordinator = self._new_coordinator()
        self.members: dict[str, MixedMember] = {}
        self.seen: dict[str, int] = {}
        self.store_failure_rate = 0.05
        # The classic group to convert: two eager members holding everything at generation 5.
        names = {info.topic_id: name for name, info in self.topics.items()}
        everything = sorted((t.topic_id, p) for t in self.topics.values() for p in range(t.partition_count))
        halves = [frozenset(everything[::2]), frozenset(everything[1::2])]
        views = []
        for i, half in enumerate(halves):
            member = MixedMember(f"k{i}", classic=True, member_id=f"classic-{i}", epoch=5, owned=half, joined=True)
            self.members[member.name] = member
            by_name: dict[str, list[int]] = {}
            for topic_id, partition in half:
                by_name.setdefault(names[topic_id], []).append(partition)
            views.append(ClassicMemberView(member.member_id, None, "c", "/h", MIXED_SESSION_MS, 2000,
                                           (("range", self._subscription()),), encode_assignment(by_name)))
        self.upgrading = ClassicGroupView(GROUP, 5, "range", tuple(views))

    @staticmethod
    def _subscription() -> bytes:
        from protocol.codec import encode_struct
        from protocol.registry import DATA_MESSAGES

        message = DATA_MESSAGES["ConsumerProtocolSubscription"]
        out = bytearray(b"\x00\x00")
        encode_struct(message.struct, 0, False, message.struct.cls(topics=["a", "b"], user_data=None), out)
        return bytes(out)

    def _new_coordinator(self) -> ConsumerGroupCoordinator:
        coordinator = ConsumerGroupCoordinator(
            ConsumerGroupConfig(session_timeout_ms=MIXED_SESSION_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, offsets_partitions=1),
            lambda: f"m{next(self.ids)}",
        )
        coordinator.set_topics(self.topics)
        return coordinator

    def note(self, what: str) -> None:
        self.seen[what] = self.seen.get(what, 0) + 1

    def carry_out(self, effects) -> None:
        for effect in effects:
            if self.rng.random() < self.store_failure_rate:
                self.note("store failed")
                self.coordinator.store_done(effect.token, ErrorCode.NOT_COORDINATOR)
            else:
                self.log.extend(effect.records)
                self.coordinator.store_done(effect.token, ErrorCode.NONE)

    def ask(self, operation, *args):
        answers = []
        self.carry_out(operation(*args, answers.append))
        (answer,) = answers
        return answer

    def give_up(self, member: MixedMember, why: str) -> None:
        member.owned = frozenset()
        member.joined = False
        self.note(why)

    # ------------------------------------------------------------- members

    def consumer_step(self, member: MixedMember) -> None:
        if not member.joined:
            request = HeartbeatRequest(GROUP, "", 0, rebalance_timeout_ms=2000, subscribed_topic_names=("a", "b"), owned=frozenset())
            if self.upgrading is not None:
                upgrading = self.upgrading
                answer = self.ask(lambda *args: self.coordinator.heartbeat(*args, upgrading), self.now, request)
                if answer.error == ErrorCode.NONE:
                    self.upgrading = None
                    self.note("converted")
            else:
                answer = self.ask(self.coordinator.heartbeat, self.now, request)
            if answer.error == ErrorCode.NONE:
                member.member_id, member.epoch, member.joined = answer.member_id, answer.member_epoch, True
                member.owned = answer.assignment or frozenset()
                member.last_answered_ms = self.now
            return
        request = HeartbeatRequest(GROUP, member.member_id, member.epoch, rebalance_timeout_ms=2000,
                                   subscribed_topic_names=("a", "b"), owned=member.owned)
        answer = self.ask(self.coordinator.heartbeat, self.now, request)
        if answer.error in FENCED:
            self.give_up(member, f"consumer fenced {answer.error.name}")
        elif answer.error == ErrorCode.NONE:
            member.epoch = answer.member_epoch
            member.last_answered_ms = self.now
            if answer.assignment is not None:
                member.owned = answer.assignment

    def classic_step(self, member: MixedMember) -> None:
        from broker.coordinators.consumer_groups.classic_members import ClassicJoin
        from protocol.consumer_offsets import decode_assignment

        if self.upgrading is not None:
            return  # still a classic group: the classic coordinator serves it (not simulated here)
        if member.joined:
            error = self.coordinator.classic_heartbeat(self.now, GROUP, member.epoch, member.member_id)
            if error == ErrorCode.NONE:
                member.last_answered_ms = self.now
                return
            self.note(f"classic heartbeat {error.name}")
            # An eager member revokes everything before it rejoins.
            member.owned, member.joined = frozenset(), False
            if error == ErrorCode.UNKNOWN_MEMBER_ID:
                member.member_id = ""
        group = self.coordinator.groups.get(GROUP)
        if group is None or not group.members:
            return  # an empty consumer group would become a classic one (not simulated here)
        join = ClassicJoin(GROUP, member.member_id, None, "c", "/h", MIXED_SESSION_MS, 2000, "consumer",
                           (("range", self._subscription()),), True)
        joined = self.ask(self.coordinator.classic_join, self.now, join)
        if joined.error == ErrorCode.MEMBER_ID_REQUIRED:
            member.member_id = joined.member_id
            joined = self.ask(self.coordinator.classic_join, self.now, replace_join(join, joined.member_id))
        if joined.error != ErrorCode.NONE:
            self.note(f"classic join {joined.error.name}")
            return
        member.member_id, member.epoch = joined.member_id, joined.generation_id
        error, _, assignment = self.coordinator.classic_sync(self.now, GROUP, member.epoch, member.member_id, "consumer", "range")
        if error != ErrorCode.NONE:
            self.note(f"classic sync {error.name}")
            return
        member.owned = frozenset((self.topics[entry.topic].topic_id, p)
                                 for entry in decode_assignment(assignment) for p in entry.partitions)
        member.joined, member.last_answered_ms = True, self.now
        self.note("classic rejoined")

    # ------------------------------------------------------------- world

    def fail_over(self) -> None:
        old = self.coordinator
        self.coordinator = self._new_coordinator()
        for key, value in self.log:
            self.coordinator.load_record(key, value)
        self.coordinator.finish_loading(self.now)
        if self.coordinator.groups != old.groups:
            raise Violation("the replayed mixed group differs from the group before the failover")
        self.note("failover")

    def check(self) -> None:
        owners: dict = {}
        for member in self.members.values():
            if not member.live:
                continue
            # A member that heard nothing for its session gives its partitions up (as clients do).
            if member.joined and self.now - member.last_answered_ms >= MIXED_SESSION_MS:
                self.give_up(member, "session lost")
            for tp in member.owned:
                if tp in owners:
                    raise Violation(f"{tp} owned by both {owners[tp]} and {member.name}")
                owners[tp] = member.name
        group = self.coordinator.groups.get(GROUP)
        if group is not None:
            held = {tp: m.member_id for m in group.members.values() for tp in m.assigned | m.pending_revocation}
            if held != group.owners:
                raise Violation("coordinator: its owners disagree with its members")

    def settled(self) -> bool:
        group = self.coordinator.groups.get(GROUP)
        live = [m for m in self.members.values() if m.live]
        if group is None or not live or group.state != "Stable" or len(group.members) != len(live):
            return False
        believed = {tp: m.member_id for m in live for tp in m.owned}
        assigned = {tp: m.member_id for m in group.members.values() for tp in m.assigned}
        everything = {(t.topic_id, p) for t in self.topics.values() for p in range(t.partition_count)}
        return set(believed) == everything and believed == assigned

    def run(self) -> None:
        rng = self.rng
        self.members["c0"] = MixedMember("c0", classic=False)  # the member that converts the group
        for step in range(4000):
            self.now += 50
            chaos = self.now < MIXED_CHAOS_MS
            if not chaos:
                self.store_failure_rate = 0.0
            if chaos and rng.random() < 0.04:
                roll = rng.random()
                live = [m for m in self.members.values() if m.live]
                # One consumer-protocol member always stays: an empty consumer group
                # would become a classic one, which this world does not simulate.
                consumers = [m for m in live if not m.classic]
                mortal = [m for m in live if m.classic or len(consumers) > 1]
                if roll < 0.3 and len(live) < 6:
                    name = f"n{len(self.members)}"
                    self.members[name] = MixedMember(name, classic=rng.random() < 0.5)
                elif roll < 0.5 and mortal:
                    member = rng.choice(mortal)
                    member.live, member.owned = False, frozenset()
                    self.note("crash")
                elif roll < 0.6 and mortal:
                    member = rng.choice([m for m in mortal if m.joined] or mortal)
                    if member.joined and member.classic:
                        self.ask(self.coordinator.classic_leave, self.now, GROUP, [(member.member_id, None)])
                    elif member.joined:
                        self.ask(self.coordinator.heartbeat, self.now, HeartbeatRequest(GROUP, member.member_id, -1))
                    member.live, member.owned = False, frozenset()
                    self.note("leave")
                elif roll < 0.8:
                    self.fail_over()
            for member in list(self.members.values()):
                if member.live and step % 6 == hash(member.name) % 6:
                    (self.classic_step if member.classic else self.consumer_step)(member)
                    self.check()
            self.carry_out(self.coordinator.tick(self.now))
            self.check()
            if not chaos and self.settled():
                return
        raise Violation("the mixed group did not settle after the chaos")


def replace_join(join, member_id: str):
    from dataclasses import replace

    return replace(join, member_id=member_id)


@pytest.mark.parametrize("seed", seeds())
def test_mixed_group_simulation(seed):
    simulation = MixedSimulation(seed)
    try:
        simulation.run()
    except Violation as violation:
        raise AssertionError(f"seed {seed}: {violation}\nreplay: pytest tests/sim/test_consumer_group_simulation.py -k \"mixed_group_simulation and {seed}]\"") from None


def test_mixed_simulation_exercises_the_interesting_paths():
    seen: dict[str, int] = {}
    for seed in range(20):
        simulation = MixedSimulation(2000 + seed)
        simulation.run()
        for what, count in simulation.seen.items():
            seen[what] = seen.get(what, 0) + count
    for what in ("converted", "classic rejoined", "classic heartbeat REBALANCE_IN_PROGRESS", "failover", "store failed",
                 "crash", "leave"):
        assert seen.get(what, 0) > 0, (what, seen)
