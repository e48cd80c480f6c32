"""The nemesis: when faults happen (a pure, seeded schedule) and what each
does to the cluster and how it is healed.

Kinds:
  kill                    SIGKILL a broker (often a partition leader); heal: restart it
  pause                   SIGSTOP a broker; heal: SIGCONT
  isolate-leader          cut a partition leader off from every other host, clients too
  split                   the hosts in two sides, majority and minority; clients stay with the majority
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

Not in the schedule: ``upgrade`` (tests/faults/upgrade.py), a rolling upgrade
from an older build and back, one long process whose steps are its windows;
it runs alone.
"""

from __future__ import annotations

import random
import threading
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
)
UPGRADE = "upgrade"  # runs alone, instead of the schedule
FLAKY_DOWN_S = (0.05, 0.4)
FLAKY_UP_S = (0.25, 0.9)
SLOW_LINK_RATE = "1mbit"
NETEM_ARGS = ("delay", "50ms", "20ms", "loss", "5%")
CLOCK_JUMP_S = (120.0, 900.0)


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
        cluster.net.netem("client", "delay", "1ms")
    except NetemUnavailable as exc:
        return f"tc netem is not available on this kernel: {exc}"
    cluster.net.clear_qdisc("client")
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
        return [h for h in [*self.cluster.nodes, "client"] if h != node.hostname]

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
            majority = [h for h in hosts if h not in minority] + ["client"]
            cluster.cut(minority, majority)
            hurt = [cluster.nodes[h] for h in minority]
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
        if self._flapping is not None:
            thread, stop = self._flapping
            stop.set()
            thread.join(10)
            self._flapping = None
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
            if self.cluster.restart_if_down(node):
                restarted.append(node.hostname)
        return restarted

    def heal_everything(self) -> list[str]:
        """After the schedule: every host back, whatever happened to it."""
        restarted = self.heal()
        self.cluster.heal_network()
        for node in self.cluster.nodes.values():
            if node.filler is not None:
                self.cluster.free_disk(node)
            if node.clock_offset_s:
                self.cluster.jump_clock(node, 0.0)
            if self.cluster.restart_if_down(node):
                restarted.append(node.hostname)
        return restarted
