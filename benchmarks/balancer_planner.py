"""How long the balancing planner takes for a cluster of ~10,000 replicas.

Builds clusters of ``--partitions`` partitions (default 3,334) at RF 3 over
``--brokers`` brokers (default 15) in 3 racks, each partition placed rack-aware
with a seeded random size and bytes-in rate, then times ``plan`` (the median of
``--rounds``) in four cases:

* add: the last 3 brokers are new and empty;
* dead: one broker is dead (its replicas re-created elsewhere);
* drain: one broker is draining (every replica moved off);
* skew: replicas placed with a preference for the low broker ids.

Each case is planned without a cost bound (the whole rebalance in one plan,
the worst case) and with the default bound (5 moves per broker), and prints
seconds, replicas, moves and bytes.

    python benchmarks/balancer_planner.py --partitions 3334 --brokers 15
    python benchmarks/balancer_planner.py --brokers 20

On a 2-core shared machine, 10,002 replicas over 10, 15 or 20 brokers plan in
0.1 to 0.5 s in every case (the median of 3 rounds).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.balancer.model import BrokerLoad, BrokerState, ClusterState, GoalConfig, PartitionLoad
from controller.balancer.planner import plan

RACKS = 3
GIB = 1 << 30


def cluster(partitions: int, brokers: int, case: str, seed: int) -> ClusterState:
    rng = random.Random(seed)
    broker_ids = list(range(1, brokers + 1))
    placed_on = broker_ids[:-3] if case == "add" else broker_ids
    by_rack: dict[int, list[int]] = {}
    for b in placed_on:
        by_rack.setdefault(b % RACKS, []).append(b)
    parts = []
    for index in range(partitions):
        racks = rng.sample(sorted(by_rack), 3)
        if case == "skew":
            replicas = tuple(min(rng.sample(by_rack[r], min(2, len(by_rack[r])))) for r in racks)
        else:
            replicas = tuple(rng.choice(by_rack[r]) for r in racks)
        parts.append(PartitionLoad(
            topic=f"topic-{index % 40}",
            partition=index // 40,
            replicas=replicas,
            leader=replicas[0],
            isr=replicas,
            size_bytes=rng.randrange(1 << 20, 1 << 28),
            bytes_in_per_second=rng.randrange(0, 200_000),
        ))
    states = {b: BrokerState.ALIVE for b in broker_ids}
    if case == "dead":
        states[1] = BrokerState.DEAD
    elif case == "drain":
        states[1] = BrokerState.DRAINING
    used: dict[int, int] = {}
    for p in parts:
        for b in p.replicas:
            used[b] = used.get(b, 0) + p.size_bytes
    broker_list = tuple(
        BrokerLoad(b, rack=f"rack-{b % RACKS}", state=states[b], disk_capacity_bytes=2000 * GIB,
                   disk_used_bytes=used.get(b, 0))
        for b in broker_ids
    )
    return ClusterState(brokers=broker_list, partitions=tuple(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=3334)
    parser.add_argument("--brokers", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=34)
    args = parser.parse_args()
    unbounded = GoalConfig(max_moves_per_broker=None)
    bounded = GoalConfig()
    print(f"{'case':<6} {'bound':<9} {'replicas':>8} {'seconds':>8} {'moves':>6} {'leader-only':>11} {'GiB':>7}")
    for case in ("add", "dead", "drain", "skew"):
        state = cluster(args.partitions, args.brokers, case, args.seed)
        replicas = sum(len(p.replicas) for p in state.partitions)
        for label, config in (("none", unbounded), ("5/broker", bounded)):
            timings = []
            result = None
            for _ in range(args.rounds):
                start = time.perf_counter()
                result = plan(state, config)
                timings.append(time.perf_counter() - start)
            leader_only = sum(1 for m in result.moves if not m.added)
            print(f"{case:<6} {label:<9} {replicas:>8} {statistics.median(timings):>8.3f} {len(result.moves):>6} "
                  f"{leader_only:>11} {result.total_bytes / GIB:>7.1f}")
            if result.violations:
                print(f"       violations: {len(result.violations)}, e.g. {result.violations[0]}")


if __name__ == "__main__":
    main()
