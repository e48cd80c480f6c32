"""Group coordinator figures through a real broker, over raw Kafka requests.

Starts a fresh pybroker (``group.initial.rebalance.delay.ms=0``) and measures:

- rebalance: N members, each on its own connection and thread, start at once
  and behave as clients do (MEMBER_ID_REQUIRED round, JoinGroup, SyncGroup,
  heartbeats every 50 ms, rejoin on REBALANCE_IN_PROGRESS); the time until
  DescribeGroups shows the group Stable with all N members assigned;
- OffsetCommit requests per second from one connection, committing P
  partitions per request (each commit is an append to __consumer_offsets);
- OffsetFetch requests per second for all of a group's P offsets.

    python benchmarks/groups.py --members 50 --partitions 100 --seconds 5
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.produce_consume import start_broker
from broker.tools.groups import KafkaConnection, parse_bootstrap
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

JOIN = struct_classes(APIS_BY_NAME["JoinGroup"].request)
SYNC = struct_classes(APIS_BY_NAME["SyncGroup"].request)
COMMIT = struct_classes(APIS_BY_NAME["OffsetCommit"].request)
CREATE = struct_classes(APIS_BY_NAME["CreateTopics"].request)
MEMBER_ID_REQUIRED = 79


class Member(threading.Thread):
    """A member as clients behave: join, sync, heartbeat, and rejoin when told to."""

    def __init__(self, address, group: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.address, self.group, self.stop = address, group, stop
        self.member_id = ""

    def run(self) -> None:
        connection = KafkaConnection(*self.address, timeout_s=120)
        try:
            while not self.stop.is_set():
                generation = self._join_and_sync(connection)
                while generation is not None and not self.stop.wait(0.05):
                    response = connection.call(
                        "Heartbeat", 4, group_id=self.group, generation_id=generation,
                        member_id=self.member_id, group_instance_id=None,
                    )
                    if response.error_code != 0:
                        break
        finally:
            connection.close()

    def _join_and_sync(self, connection) -> int | None:
        protocols = [JOIN.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff")]
        fields = {
            "group_id": self.group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 60000,
            "group_instance_id": None, "protocol_type": "consumer", "protocols": protocols, "reason": None,
        }
        joined = connection.call("JoinGroup", 9, member_id=self.member_id, **fields)
        if joined.error_code == MEMBER_ID_REQUIRED:
            self.member_id = joined.member_id
            joined = connection.call("JoinGroup", 9, member_id=self.member_id, **fields)
        if joined.error_code != 0:
            return None
        self.member_id = joined.member_id
        assignments = [SYNC.SyncGroupRequestAssignment(member_id=m.member_id, assignment=b"a") for m in joined.members]
        synced = connection.call(
            "SyncGroup", 5, group_id=self.group, generation_id=joined.generation_id, member_id=self.member_id,
            group_instance_id=None, protocol_type="consumer", protocol_name=joined.protocol_name, assignments=assignments,
        )
        return joined.generation_id if synced.error_code == 0 else None


def bench_rebalance(address, members: int) -> float:
    """Seconds until the group is Stable with every member holding an assignment
    (members that arrive during a rebalance cause further ones, as with real clients)."""
    group = f"bench-rebalance-{members}"
    stop = threading.Event()
    threads = [Member(address, group, stop) for _ in range(members)]
    admin = KafkaConnection(*address, timeout_s=30)
    start = time.perf_counter()
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            described = admin.call("DescribeGroups", 5, groups=[group], include_authorized_operations=False).groups[0]
            if described.group_state == "Stable" and len(described.members) == members and all(
                m.member_assignment for m in described.members
            ):
                return time.perf_counter() - start
            time.sleep(0.005)
        raise RuntimeError("the group did not settle within 120 s")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        admin.close()


def bench_commits(address, partitions: int, seconds: float, group: str) -> tuple[float, float]:
    connection = KafkaConnection(*address, timeout_s=30)
    topic = group
    connection.call(
        "CreateTopics", 7, timeout_ms=30000, validate_only=False,
        topics=[CREATE.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
    )
    commits = 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        parts = [COMMIT.OffsetCommitRequestPartition(partition_index=p, committed_offset=commits, committed_leader_epoch=-1,
                                                    committed_metadata="") for p in range(partitions)]
        response = connection.call(
            "OffsetCommit", 9, group_id=group, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=[COMMIT.OffsetCommitRequestTopic(name=topic, partitions=parts)],
        )
        assert response.topics[0].partitions[0].error_code == 0
        commits += 1
    commit_rate = commits / (time.perf_counter() - start)
    fetches = 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        response = connection.call("OffsetFetch", 7, group_id=group, topics=None, require_stable=False)
        assert len(response.topics[0].partitions) == partitions
        fetches += 1
    fetch_rate = fetches / (time.perf_counter() - start)
    connection.close()
    return commit_rate, fetch_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, bootstrap = start_broker(Path(tmp), overrides={"group.initial.rebalance.delay.ms": "0"})
        try:
            address = parse_bootstrap(bootstrap)
            elapsed = bench_rebalance(address, args.members)
            print(f"{args.members} members starting at once until the group is Stable with all assigned: {elapsed * 1000:.0f} ms")
            commit_rate, fetch_rate = bench_commits(address, 1, args.seconds, "bench-offsets-1")
            print(f"OffsetCommit of 1 partition: {commit_rate:,.0f} req/s; OffsetFetch of it: {fetch_rate:,.0f} req/s")
            commit_rate, fetch_rate = bench_commits(address, args.partitions, args.seconds, "bench-offsets-n")
            print(
                f"OffsetCommit of {args.partitions} partitions: {commit_rate:,.0f} req/s"
                f" ({commit_rate * args.partitions:,.0f} offsets/s); OffsetFetch of them: {fetch_rate:,.0f} req/s"
            )
        finally:
            proc.terminate()
            proc.wait(30)

if __name__ == "__main__":
    main()
