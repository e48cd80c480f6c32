"""Share groups (KIP-932) on three combined nodes: acknowledgements survive the
loss of the partition's leader.

The delivery state is written to ``__share_group_state`` (3 replicas, its own
leaders, so usually through WriteShareGroupState to another broker) and
replicated before a member hears its acknowledgement was taken: the next
leader rebuilds the share-partition from it and never delivers an accepted
record again. A new cluster finalizes ``share.version`` 1 at formation.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster
from tests.conftest import PROJECT_ROOT

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("this confluent-kafka has no ShareConsumer", allow_module_level=True)

from confluent_kafka import AcknowledgeType, Producer  # noqa: E402

from tests.interop.test_share_groups import Member, enable_share_groups  # noqa: E402

WAIT_S = 60
EXTRA = {
    # Three replicas, two in sync for a write (the test brokers' defaults are one node's).
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "share.coordinator.state.topic.num.partitions": "3",
    "group.share.heartbeat.interval.ms": "300",
    "share.auto.offset.reset": "earliest",
}


def test_accepted_records_are_not_delivered_again_after_the_leader_is_killed(tmp_path):
    cluster = ReplicatedCluster(tmp_path, extra=EXTRA)
    cluster.start()
    members: list[Member] = []
    try:
        for node in NODE_IDS:
            enable_share_groups(cluster.bootstrap([node]))
        topic, group = f"share-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, partitions=1)
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
        values = [f"v{i}".encode() for i in range(20)]
        for value in values:
            producer.produce(topic, value=value, partition=0)
        assert producer.flush(30) == 0
        first = Member(cluster.bootstrap(), group, topic, explicit=True, max_records=10)
        members.append(first)
        accepted: set[bytes] = set()
        deadline = time.monotonic() + WAIT_S
        # Accept the first ten offsets, release anything past them.
        while len(accepted) < 10:
            assert time.monotonic() < deadline, "the first member did not get ten records"
            for message in first.poll(0.2):
                if message.offset() < 10:
                    first.consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                    accepted.add(message.value())
                else:
                    first.consumer.acknowledge(message, AcknowledgeType.RELEASE)
            results = first.consumer.commit_sync(20)
            assert all(error is None for error in results.values()), results
        first.close()
        leader = cluster.leader_of(topic, 0)
        assert leader is not None
        cluster.kill(leader)
        alive = [n for n in NODE_IDS if n != leader]
        second = Member(cluster.bootstrap(alive), group, topic, max_records=20)
        members.append(second)
        deadline = time.monotonic() + WAIT_S
        while {v for v, _ in second.got} < set(values) - accepted:
            assert time.monotonic() < deadline, f"got {sorted(v for v, _ in second.got)}"
            second.poll(0.2)
        end = time.monotonic() + 2
        while time.monotonic() < end:
            second.poll(0.2)
        assert not accepted & {v for v, _ in second.got}, "an accepted record was delivered again"
    finally:
        for member in members:
            try:
                member.close()
            except Exception:  # a consumer of a killed node: closing is best effort
                pass
        cluster.stop()


def _tool(bootstrap: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "share-groups", "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )


def test_offsets_are_described_reset_and_deleted_across_share_coordinators(tmp_path):
    """The group's coordinator asks the share coordinators of the share-partitions
    (three state partitions on three nodes: mostly other brokers) with
    ReadShareGroupStateSummary, InitializeShareGroupState and DeleteShareGroupState;
    partition leaders on other brokers build their share-partitions again from the
    reset state."""
    cluster = ReplicatedCluster(tmp_path, extra=EXTRA)
    cluster.start()
    members: list[Member] = []
    try:
        for node in NODE_IDS:
            enable_share_groups(cluster.bootstrap([node]))
        topic, group = f"share-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, partitions=3)
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
        values = {f"p{p}-{i}".encode() for p in range(3) for i in range(5)}
        for value in sorted(values):
            producer.produce(topic, value=value, partition=int(value[1:2]))
        assert producer.flush(30) == 0

        def consume(expected: set[bytes]) -> set[bytes]:
            member = Member(cluster.bootstrap(), group, topic, max_records=20)
            members.append(member)
            deadline = time.monotonic() + WAIT_S
            while {v for v, _ in member.got} < expected:
                assert time.monotonic() < deadline, f"got {sorted(v for v, _ in member.got)}"
                member.poll(0.2)
            member.consumer.commit_sync(20)
            member.close()
            deadline = time.monotonic() + WAIT_S
            while True:  # the group is empty once the member's leave is stored
                state = _tool(cluster.bootstrap(), "--describe", "--group", group, "--state")
                if state.returncode == 0 and state.stdout.split()[-1] == "0":
                    break
                assert time.monotonic() < deadline, state.stdout + state.stderr
                time.sleep(0.2)
            return {v for v, _ in member.got}

        def start_offsets() -> list[list[str]]:
            shown = _tool(cluster.bootstrap(), "--describe", "--group", group, "--offsets")
            assert shown.returncode == 0, shown.stderr
            return [line.split()[1:] for line in shown.stdout.split("\n")[2:] if line]

        assert consume(values) == values
        assert start_offsets() == [[topic, str(p), "5"] for p in range(3)]
        reset = _tool(cluster.bootstrap(), "--reset-offsets", "--group", group, "--all-topics", "--to-offset", "2", "--execute")
        assert reset.returncode == 0, reset.stderr
        assert start_offsets() == [[topic, str(p), "2"] for p in range(3)]
        # Each partition's leader (mostly not the share coordinator) delivers from offset 2 again.
        again = {f"p{p}-{i}".encode() for p in range(3) for i in range(2, 5)}
        assert consume(again) == again
        deleted = _tool(cluster.bootstrap(), "--delete", "--group", group)
        assert deleted.returncode == 0, deleted.stdout + deleted.stderr
        listed = _tool(cluster.bootstrap(), "--list")
        assert listed.returncode == 0 and group not in listed.stdout.split()
    finally:
        for member in members:
            try:
                member.close()
            except Exception:  # closing is best effort at teardown
                pass
        cluster.stop()
