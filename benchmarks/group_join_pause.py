"""How long a consumer group stops consuming when one member joins: classic eager
(``range``), classic cooperative (``cooperative-sticky``) and KIP-848
(``group.protocol=consumer``), one after the other against one fresh broker.

For each protocol: N confluent-kafka consumers (threads of this process) join
a group on a topic of P partitions while a producer writes R records per
second spread over every partition. Once every member holds partitions, has
received records since its last assignment change and nothing has moved for a
few seconds, one more member joins. From then on each existing member's
assignment (from its rebalance callbacks) and the times it receives records
are recorded until the group is quiet again.

A member *stops* from the moment it holds no partition (eager rebalancing
revokes everything first) until the first record it receives after it holds
partitions again. Printed per protocol: how many existing members stopped, the
longest and median stop, the group's pause (from the first member stopping
until the last stopped one consumes again, 0 when none stopped), the time from
the join until every stopped member consumes again (0 when none stopped:
eager members consume on until their next heartbeat tells them), the longest
gap between two receptions of any existing member after the join against the
same in the quiet seconds before it (a check that does not depend on
callbacks; its floor is the produce rate's spacing and the fetch wait), and
when the new member first consumed.

    python benchmarks/group_join_pause.py --members 50 --partitions 100 --rounds 3

Client and broker settings are the defaults (heartbeat 3 s for classic
members, ``group.consumer.heartbeat.interval.ms`` 5 s for consumer-protocol
ones); the figures move with them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.produce_consume import start_broker  # noqa: E402

PROTOCOLS = {
    "eager": {"group.protocol": "classic", "partition.assignment.strategy": "range"},
    "cooperative": {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"},
    "consumer": {"group.protocol": "consumer"},
}
SETTLE_QUIET_S = 3.0
SETTLE_LIMIT_S = 180.0
AFTER_JOIN_QUIET_S = 3.0
AFTER_JOIN_LIMIT_S = 90.0


@dataclass
class MemberLog:
    # (monotonic time, partitions held after the change)
    assignment_changes: list[tuple[float, int]] = field(default_factory=list)
    receive_times: list[float] = field(default_factory=list)


class Member(threading.Thread):
    """One consumer polled from its own thread; it only notes times, so that it stays light."""

    def __init__(self, ck, bootstrap: str, group: str, topic: str, protocol_config: dict, stop: threading.Event):
        super().__init__(daemon=True)
        self.stop = stop
        self.log = MemberLog()
        self.held: set[tuple[str, int]] = set()
        self.lock = threading.Lock()
        self.consumer = ck.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
            "enable.auto.commit": False, "enable.partition.eof": False, **protocol_config,
        })
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)

    def _assigned(self, consumer, partitions) -> None:
        with self.lock:
            self.held |= {(p.topic, p.partition) for p in partitions}
            self.log.assignment_changes.append((time.monotonic(), len(self.held)))

    def _revoked(self, consumer, partitions) -> None:
        with self.lock:
            self.held -= {(p.topic, p.partition) for p in partitions}
            self.log.assignment_changes.append((time.monotonic(), len(self.held)))

    def run(self) -> None:
        while not self.stop.is_set():
            messages = self.consumer.consume(num_messages=1000, timeout=0.1)
            if any(m.error() is None for m in messages):
                self.log.receive_times.append(time.monotonic())

    def holds(self) -> int:
        with self.lock:
            return len(self.held)

    def consuming_since_last_change(self) -> bool:
        with self.lock:
            last_change = self.log.assignment_changes[-1][0] if self.log.assignment_changes else None
        return bool(self.held) and last_change is not None and any(t > last_change for t in self.log.receive_times[-5:])

    def last_change(self) -> float:
        with self.lock:
            return self.log.assignment_changes[-1][0] if self.log.assignment_changes else 0.0


def produce(ck, bootstrap: str, topic: str, partitions: int, rate: int, stop: threading.Event) -> None:
    """R records a second, round robin over the partitions, in ticks of 10 ms."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1})
    per_tick = max(1, rate // 100)
    partition = 0
    next_tick = time.monotonic()
    while not stop.is_set():
        for _ in range(per_tick):
            producer.produce(topic, b"x", partition=partition)
            partition = (partition + 1) % partitions
        producer.poll(0)
        next_tick += 0.01
        delay = next_tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    producer.flush(10)


def wait_until(predicate, limit_s: float, what: str) -> None:
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {limit_s:.0f} s")
        time.sleep(0.1)


def close_all(members: list[Member]) -> None:
    """Closes every consumer at once (one after the other would rebalance the rest each time)."""
    for m in members:
        m.stop.set()
    for m in members:
        m.join(10)
    closers = [threading.Thread(target=m.consumer.close, daemon=True) for m in members]
    for c in closers:
        c.start()
    for c in closers:
        c.join(30)


@dataclass
class Outcome:
    protocol: str
    stopped: int
    longest_stop_s: float
    median_stop_s: float
    group_pause_s: float
    join_to_all_consuming_s: float
    gap_before_s: float
    gap_after_s: float
    new_member_consuming_s: float | None
    unresumed: int


def stops_after(log: MemberLog, join: float, end: float) -> list[tuple[float, float | None]]:
    """(stop start, first reception after partitions came back, or None) for each time
    after ``join`` the member held no partition."""
    stops = []
    changes = log.assignment_changes
    for i, (at, held) in enumerate(changes):
        if at < join or at > end or held != 0 or (i > 0 and changes[i - 1][1] == 0 and changes[i - 1][0] >= join):
            continue
        back = next((t for t, h in changes[i + 1:] if h > 0), None)
        resumed = None if back is None else next((t for t in log.receive_times if t >= back), None)
        stops.append((at, resumed if resumed is None or resumed <= end else None))
    return stops


def longest_gap(times: list[float], start: float, end: float) -> float:
    inside = [start] + [t for t in times if start <= t <= end] + [end]
    return max(b - a for a, b in zip(inside, inside[1:]))


def measure(ck, bootstrap: str, topic: str, protocol: str, members_count: int) -> Outcome:
    group = f"join-pause-{protocol}-{int(time.time())}"
    stop = threading.Event()
    members = [Member(ck, bootstrap, group, topic, PROTOCOLS[protocol], stop) for _ in range(members_count)]
    joiner = None
    try:
        for m in members:
            m.start()

        def settled() -> bool:
            if not all(m.consuming_since_last_change() for m in members):
                return False
            return time.monotonic() - max(m.last_change() for m in members) > SETTLE_QUIET_S

        started = time.monotonic()
        wait_until(settled, SETTLE_LIMIT_S, f"{protocol}: {members_count} members consuming")
        print(f"  {protocol}: {members_count} members consuming after {time.monotonic() - started:.1f} s", flush=True)
        join = time.monotonic()
        joiner = Member(ck, bootstrap, group, topic, PROTOCOLS[protocol], stop)
        joiner.start()

        def quiet_again() -> bool:
            if not joiner.consuming_since_last_change():
                return False
            if any(m.holds() == 0 for m in members):
                return False
            latest = max(m.last_change() for m in members + [joiner])
            return time.monotonic() - latest > AFTER_JOIN_QUIET_S and all(
                m.consuming_since_last_change() or m.last_change() < join for m in members
            )

        try:
            wait_until(quiet_again, AFTER_JOIN_LIMIT_S, f"{protocol}: the group after the join")
        except RuntimeError as exc:
            print(f"  {exc}", flush=True)
        end = time.monotonic()
    finally:
        close_all(members + ([joiner] if joiner else []))
    durations, starts, resumes, unresumed = [], [], [], 0
    for m in members:
        for at, resumed in stops_after(m.log, join, end):
            starts.append(at)
            if resumed is None:
                unresumed += 1
                durations.append(end - at)
            else:
                durations.append(resumed - at)
                resumes.append(resumed)
    first = next((t for t in joiner.log.receive_times if t >= join), None) if joiner else None
    return Outcome(
        protocol=protocol,
        stopped=len({id(m) for m in members if stops_after(m.log, join, end)}),
        longest_stop_s=max(durations, default=0.0),
        median_stop_s=statistics.median(durations) if durations else 0.0,
        group_pause_s=(max(resumes) - min(starts) if resumes else 0.0) if not unresumed else end - min(starts),
        join_to_all_consuming_s=(max(resumes) - join if resumes else 0.0) if not unresumed else end - join,
        gap_before_s=max(longest_gap(m.log.receive_times, join - SETTLE_QUIET_S, join) for m in members),
        gap_after_s=max(longest_gap(m.log.receive_times, join, end) for m in members),
        new_member_consuming_s=None if first is None else first - join,
        unresumed=unresumed,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=50, help="members before the join (default 50)")
    parser.add_argument("--partitions", type=int, default=100, help="partitions of the topic (default 100)")
    parser.add_argument("--rate", type=int, default=1000, help="records produced per second (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="joins measured per protocol (default 3)")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS),
                        help="eager,cooperative,consumer (default all, in that order)")
    args = parser.parse_args()
    import confluent_kafka as ck
    import confluent_kafka.admin  # noqa: F401  (ck.admin)

    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, bootstrap = start_broker(Path(tmp))
        stop_producing = threading.Event()
        producer = None
        try:
            topic = "join-pause"
            admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([ck.admin.NewTopic(topic, args.partitions, 1)])[topic].result(30)
            producer = threading.Thread(
                target=produce, args=(ck, bootstrap, topic, args.partitions, args.rate, stop_producing), daemon=True
            )
            producer.start()
            print(f"confluent-kafka {ck.__version__} (librdkafka {ck.libversion()[0]}); {args.members} members, "
                  f"{args.partitions} partitions, {args.rate} records/s", flush=True)
            for round_number in range(args.rounds):
                for protocol in protocols:
                    outcomes.append((round_number + 1, measure(ck, bootstrap, topic, protocol, args.members)))
        finally:
            stop_producing.set()
            if producer is not None:
                producer.join(30)
            proc.terminate()
            proc.wait(30)
    print()
    print("| protocol | round | existing members that stopped | longest stop | median stop | group pause "
          "| join until every member consumes again "
          "| longest gap between receptions, before / after the join | new member consuming after |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for round_number, o in sorted(outcomes, key=lambda item: (protocols.index(item[1].protocol), item[0])):
        new = "-" if o.new_member_consuming_s is None else f"{o.new_member_consuming_s:.2f} s"
        note = f" ({o.unresumed} not resumed)" if o.unresumed else ""
        print(f"| {o.protocol} | {round_number} | {o.stopped} of {args.members}{note} | {o.longest_stop_s:.2f} s "
              f"| {o.median_stop_s:.2f} s | {o.group_pause_s:.2f} s | {o.join_to_all_consuming_s:.2f} s "
              f"| {o.gap_before_s:.2f} s / {o.gap_after_s:.2f} s | {new} |")


if __name__ == "__main__":
    main()
