"""The nemesis: when faults happen (a pure, seeded schedule) and what each
does to the cluster and how it is healed.

Kinds:
  kill                    SIGKILL a broker (often a partition leader); heal: restart it
  pause                   SIGSTOP a broker; heal: SIGCONT
  isolate-leader          cut a partition leader off from every other host, clients too
  split                   the hosts in two sides, majority and minority; the first client host stays with
                          the majority, any others (the five topology's client-b) go with the minority
  one-way                 a partition leader's outgoing frames are lost, what it receives arrives
  kill-controller-leader  SIGKILL the metadata quorum's leader; heal: restart it
  disk-full               fill a broker's log dir (its tmpfs); heal: free it, restart the broker if it halted
  slow-link               a broker's link through a 1 Mbit/s token bucket (queueing latency)
  flaky-link              a broker's link drops everything in random bursts (50-400 ms out of
                          every 0.3-1.3 s): packet loss and retransmission delays without netem
  latency-loss            tc netem delay and loss on a broker's link, where the kernel has sch_netem
  clock-jump              a broker's wall clock (often a leader's) jumps 2-15 minutes forward or back;
                          heal: back to the true time, itself a jump (tests/faults/clock.py)
  corrupt                 flip a few bytes inside a record batch of a partition's closed or active
                          segment on its leader's or a follower's disk; the broker finds it (its
                          follower reads and scrubber check CRCs), cuts its log and, if it halted,
                          is restarted at the heal and fetches the rest back
  eio                     writes and syncs under one log dir of a broker (JBOD: it has two; one
                          holding a partition leader when it can) fail with EIO (tests/faults/eio.py):
                          the dir goes offline, its leaderships move, the other dir keeps serving;
                          heal: writes work again and the broker restarts (an offline dir comes
                          back only with a restart). Evidence in its detail: when DescribeLogDirs
                          showed the dir offline and when its partitions had other leaders

Not in the schedule: ``upgrade`` (tests/faults/upgrade.py), a rolling upgrade
from an older build and back, one long process whose steps are its windows;
it runs alone.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from tests.netns import NetemUnavailable

KINDS = (
    "kill",
    "pause",
    "isolate-leader",
    "split",
    "one-way",
    "kill-controller-leader",
    "disk-full",
    "slow-link",
    "flaky-link",
    "latency-loss",
    "clock-jump",
    "corrupt",
    "eio",
)
UPGRADE = "upgrade"  # runs alone, instead of the schedule
FLAKY_DOWN_S = (0.05, 0.4)
FLAKY_UP_S = (0.25, 0.9)
SLOW_LINK_RATE = "1mbit"
NETEM_ARGS = ("delay", "50ms", "20ms", "loss", "5%")
CLOCK_JUMP_S = (120.0, 900.0)
# The run topics' retention.ms: at least an hour, and longer than the run by
# more than the largest clock jump. Retention measures a segment's age on the
# broker's wall clock, as Kafka's does, so a broker whose clock the clock-jump
# nemesis moved J forward deletes what is older than retention.ms - J: with
# retention at least the run, the heal and the final read plus the largest J
# (CLOCK_JUMP_S), no record of the run is ever due, and a deletion
# (checker: log starts moved) is a bug. An hour was that margin for runs of up
# to 40 minutes; the one-hour soak's first segments were deleted by a broker
# 11 minutes ahead, 52 minutes into the run.
RETENTION_MS_MIN = 3_600_000
RETENTION_MARGIN_S = 1_800.0  # the largest jump (900 s), the heal and final read (under 300 s), and room
# How often the eio window looks for its evidence (DescribeLogDirs, leaders).
EIO_OBSERVE_INTERVAL_S = 0.25


def retention_ms_for(seconds: float) -> int:
    """The run topics' retention.ms for a run of ``seconds`` (see RETENTION_MS_MIN)."""
    return max(RETENTION_MS_MIN, int((seconds + RETENTION_MARGIN_S) * 1000))


@dataclass(frozen=True)
class Window:
    kind: str
    start_s: float
    end_s: float


def schedule(
    seed: int, seconds: float, kinds=KINDS, *, fault_s=(4.0, 9.0), gap_s=(3.0, 6.0), warmup_s: float = 5.0
) -> list[Window]:
    """Non-overlapping fault windows within ``[warmup_s, seconds]``. Kinds come
    in seeded shuffles of ``kinds`` so that a short run still meets each of
    them once before any repeats."""
    rng = random.Random(seed)
    windows: list[Window] = []
    deck: list[str] = []
    at = warmup_s
    while True:
        if not deck:
            deck = list(kinds)
            rng.shuffle(deck)
        length = rng.uniform(*fault_s)
        if at + length > seconds:
            return windows
        windows.append(Window(deck.pop(), round(at, 3), round(at + length, 3)))
        at += length + rng.uniform(*gap_s)


def netem_available(cluster) -> str | None:
    """None if tc netem works on this kernel, else why not."""
    try:
        cluster.net.netem(cluster.client_hosts[0], "delay", "1ms")
    except NetemUnavailable as exc:
        return f"tc netem is not available on this kernel: {exc}"
    cluster.net.clear_qdisc(cluster.client_hosts[0])
    return None


class Nemesis:
    """Applies and heals one window at a time on a ``FaultCluster``."""

    def __init__(self, cluster, topic: str, partitions: int, seed: int):
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.rng = random.Random(seed ^ 0x5EED)
        self.active: tuple[str, list] | None = None  # (kind, nodes hurt)
        self._flapping: tuple[threading.Thread, threading.Event] | None = None
        self._observing: tuple[threading.Thread, threading.Event] | None = None
        self.detail: str | dict | None = None  # what the last window did beyond its targets (a clock jump's size, the bytes flipped)

    def _leader(self):
        """The leader of a random partition of the topic, else a random broker."""
        states = self.cluster.partitions(self.topic) or {}
        partition = self.rng.randrange(self.partitions)
        leader_id = states.get(partition, (-1,))[0]
        node = self.cluster.by_id(leader_id) if leader_id >= 0 else None
        if node is None or not node.running() or node.paused:
            node = self._broker()
        return node

    def _broker(self):
        live = [n for n in self.cluster.brokers if n.running() and not n.paused]
        return self.rng.choice(live or self.cluster.brokers)

    def _others(self, node) -> list[str]:
        return [h for h in [*self.cluster.nodes, *self.cluster.client_hosts] if h != node.hostname]

    def start(self, kind: str) -> list[str]:
        """Apply ``kind``; the hostnames it targets."""
        cluster = self.cluster
        self.detail = None
        if kind == "kill":
            node = self._leader() if self.rng.random() < 0.6 else self._broker()
            cluster.kill(node)
            hurt = [node]
        elif kind == "pause":
            node = self._leader() if self.rng.random() < 0.5 else self._broker()
            cluster.pause(node)
            hurt = [node]
        elif kind == "isolate-leader":
            node = self._leader()
            cluster.cut([node.hostname], self._others(node))
            hurt = [node]
        elif kind == "split":
            hosts = list(cluster.nodes)
            self.rng.shuffle(hosts)
            minority = hosts[: (len(hosts) - 1) // 2]
            majority_clients, minority_clients = cluster.client_hosts[:1], cluster.client_hosts[1:]
            majority = [h for h in hosts if h not in minority] + list(majority_clients)
            cluster.cut(minority + list(minority_clients), majority)
            hurt = [cluster.nodes[h] for h in minority]
            if minority_clients:
                self.detail = f"{' '.join(minority_clients)} with the minority"
        elif kind == "one-way":
            node = self._leader()
            cluster.cut([node.hostname], self._others(node), one_way=True)
            hurt = [node]
        elif kind == "kill-controller-leader":
            node = cluster.active_controller() or self.rng.choice(cluster.controllers)
            cluster.kill(node)
            hurt = [node]
        elif kind == "disk-full":
            node = self._leader()
            cluster.fill_disk(node)
            hurt = [node]
        elif kind == "slow-link":
            node = self._leader()
            cluster.slow(node.hostname, SLOW_LINK_RATE)
            hurt = [node]
        elif kind == "flaky-link":
            node = self._leader()
            self._flap(node.hostname, self._others(node))
            hurt = [node]
        elif kind == "corrupt":
            node = self._corrupt()
            hurt = [node]
        elif kind == "eio":
            node = self._eio()
            hurt = [node]
        elif kind == "latency-loss":
            node = self._leader()
            cluster.netem(node.hostname, *NETEM_ARGS)
            hurt = [node]
        elif kind == "clock-jump":
            node = self._leader() if self.rng.random() < 0.6 else self._broker()
            jump_s = round(self.rng.uniform(*CLOCK_JUMP_S) * self.rng.choice((1, -1)), 3)
            cluster.jump_clock(node, jump_s)
            self.detail = f"wall clock {jump_s:+.0f} s"
            hurt = [node]
        else:
            raise ValueError(f"unknown nemesis kind {kind!r}")
        self.active = (kind, hurt)
        return [n.hostname for n in hurt]

    def _corrupt(self):
        """A seeded partition, its leader or a follower, a closed or the active
        segment: a few bytes flipped inside one batch's records."""
        states = self.cluster.partitions(self.topic) or {}
        partition = self.rng.randrange(self.partitions)
        leader_id, replicas, _ = states.get(partition, (-1, (), ()))
        on_leader = self.rng.random() < 0.5
        closed = self.rng.random() < 0.5
        followers = [r for r in replicas if r != leader_id]
        node_id = leader_id if on_leader or not followers else self.rng.choice(followers)
        node = self.cluster.by_id(node_id) or self._broker()
        self.detail = {
            "role": "leader" if node.node_id == leader_id else "follower",
            **self.cluster.corrupt_segment(node, self.topic, partition, self.rng, closed=closed),
        }
        return node

    def _eio(self):
        """A seeded partition's leader, and the log dir holding that partition
        there (else a random broker and dir): its writes and syncs fail with
        EIO from now on. A thread watches for the evidence meanwhile."""
        cluster = self.cluster
        states = self.cluster.partitions(self.topic) or {}
        partition = self.rng.randrange(self.partitions)
        leader_id = states.get(partition, (-1,))[0]
        node = cluster.by_id(leader_id) if leader_id >= 0 else None
        if node is None or not cluster.serving(node):
            # A broker still starting (restarted by the last heal) refuses to
            # start on a failing log dir: that is another fault than this one.
            serving = [n for n in cluster.brokers if cluster.serving(n)]
            node = self.rng.choice(serving) if serving else self._broker()
        held = cluster.partition_dir(node, self.topic, partition)
        directory = held.parent if held.is_dir() else self.rng.choice(cluster.log_dirs(node))
        # The run topic's partitions this broker leads from that dir: their leaders must move.
        led_there = sorted(
            p
            for p, (leader, _, _) in states.items()
            if leader == node.node_id and cluster.partition_dir(node, self.topic, p).parent == directory
        )
        cluster.fail_dir(node, directory)
        self.detail = {"node": node.hostname, "dir": directory.name, "led_there": led_there}
        self._observe_eio(node, directory, led_there)
        return node

    def _observe_eio(self, node, directory, led_there: list[int]) -> None:
        """Until healed: when the broker's DescribeLogDirs first answers the dir
        offline, and when every partition it led from there first has another
        leader (seconds since the fault), into ``detail``."""
        stop = threading.Event()
        started = time.monotonic()
        detail = self.detail
        want = str(directory)

        def observe() -> None:
            while not stop.is_set():
                now_s = round(time.monotonic() - started, 2)
                if "dir_offline_after_s" not in detail:
                    offline = self.cluster.offline_log_dirs(node)
                    if offline and any(d.endswith(want) or d == want for d in offline):
                        detail["dir_offline_after_s"] = now_s
                if "leaders_moved_after_s" not in detail:
                    states = self.cluster.partitions(self.topic) or {}
                    leaders = {p: states.get(p, (-1,))[0] for p in led_there}
                    if all(leader >= 0 and leader != node.node_id for leader in leaders.values()):
                        detail["leaders_moved_after_s"] = now_s
                        detail["new_leaders"] = leaders
                    else:
                        # What they have meanwhile: -1 while no other replica is in
                        # sync (it waits for this one's dir, as without unclean election).
                        detail["leaders_meanwhile"] = leaders
                if "dir_offline_after_s" in detail and "leaders_moved_after_s" in detail:
                    detail.pop("leaders_meanwhile", None)
                    return
                stop.wait(EIO_OBSERVE_INTERVAL_S)

        thread = threading.Thread(target=observe, name="eio evidence", daemon=True)
        thread.start()
        self._observing = (thread, stop)

    def _flap(self, hostname: str, others: list[str]) -> None:
        """Cut ``hostname`` off both ways in random bursts until healed."""
        stop = threading.Event()
        rng = random.Random(self.rng.random())

        def flap() -> None:
            while not stop.is_set():
                self.cluster.cut([hostname], others)
                stop.wait(rng.uniform(*FLAKY_DOWN_S))
                self.cluster.heal_network()
                stop.wait(rng.uniform(*FLAKY_UP_S))

        thread = threading.Thread(target=flap, name="flaky-link", daemon=True)
        thread.start()
        self._flapping = (thread, stop)

    def heal(self) -> list[str]:
        """Undo the active window; the hostnames restarted."""
        for running in (self._flapping, self._observing):
            if running is not None:
                thread, stop = running
                stop.set()
                thread.join(10)
        self._flapping = self._observing = None
        if self.active is None:
            return []
        kind, hurt = self.active
        self.active = None
        restarted = []
        self.cluster.heal_network()
        for node in hurt:
            if kind == "disk-full":
                self.cluster.free_disk(node)
            if kind == "clock-jump":
                self.cluster.jump_clock(node, 0.0)
            if node.failing_dirs:
                self.cluster.heal_dirs(node)
            if self._offline_dir(node, kind):
                # An offline log dir comes back only with a restart (KIP-112).
                self.cluster.restart(node)
                restarted.append(node.hostname)
            elif self.cluster.restart_if_down(node):
                restarted.append(node.hostname)
        return restarted

    def _offline_dir(self, node, kind: str) -> bool:
        """After an eio or a disk-full window: whether the broker (still running)
        has a log dir offline, which only a restart brings back."""
        if kind not in ("eio", "disk-full") or not node.is_broker or not node.running():
            return False
        return kind == "eio" or bool(self.cluster.offline_log_dirs(node))

    def heal_everything(self) -> list[str]:
        """After the schedule: every host back, whatever happened to it."""
        restarted = self.heal()
        self.cluster.heal_network()
        for node in self.cluster.nodes.values():
            if node.filler is not None:
                self.cluster.free_disk(node)
            if node.clock_offset_s:
                self.cluster.jump_clock(node, 0.0)
            if node.failing_dirs:
                self.cluster.heal_dirs(node)
            if self.cluster.restart_if_down(node):
                restarted.append(node.hostname)
        return restarted
