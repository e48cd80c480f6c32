"""PartitionLog.append_as_follower: a follower appends its leader's batches
unchanged, so replicas hold the same bytes at the same offsets."""

from __future__ import annotations

import time

import pytest

from protocol.records import build_batch, iter_batches
from storage.log import AppendError, LogConfig, PartitionLog

T0 = int(time.time() * 1000)


def batch(n: int, tag: str, *, producer_id: int = -1, sequence: int = -1) -> bytes:
    return build_batch(
        [(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode() * 4, [], T0 + i) for i in range(n)],
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence,
    )


def replicate(leader: PartitionLog, follower: PartitionLog, max_bytes: int = 1 << 20) -> int:
    """One fetch round: what the leader has past the follower's log end."""
    data = leader.read(follower.log_end_offset, max_bytes, upper_offset=leader.log_end_offset)
    return follower.append_as_follower(data) if data else 0


def segment_bytes(plog: PartitionLog) -> dict[str, bytes]:
    plog.flush()
    return {p.name: p.read_bytes() for p in sorted(plog.directory.glob("*.log"))}


@pytest.fixture
def logs(tmp_path):
    opened = []

    def open_log(name: str, segment_bytes: int = 1 << 20) -> PartitionLog:
        plog = PartitionLog(tmp_path / name, LogConfig(segment_bytes=segment_bytes))
        plog.replicated = True
        opened.append(plog)
        return plog

    yield open_log
    for plog in opened:
        plog.close()


def test_follower_segments_are_byte_identical_across_rolls(logs):
    leader = logs("leader-0", segment_bytes=600)
    follower = logs("follower-0", segment_bytes=600)
    for round_number in range(12):
        leader.append(batch(3, f"r{round_number}"), leader_epoch=2 if round_number < 6 else 3)
        if round_number % 3 == 2:
            while replicate(leader, follower, max_bytes=400):
                pass
    while replicate(leader, follower):
        pass
    assert follower.log_end_offset == leader.log_end_offset == 36
    assert segment_bytes(follower) == segment_bytes(leader)
    assert len(segment_bytes(leader)) > 1
    assert follower.leader_epochs == leader.leader_epochs == [(2, 0), (3, 18)]


def test_follower_keeps_producer_state_for_deduplication_after_failover(logs):
    leader = logs("leader-0")
    follower = logs("follower-0")
    leader.append(batch(2, "a", producer_id=7, sequence=0), leader_epoch=1)
    replicate(leader, follower)
    # The follower becomes leader: a retry of the same batch is recognised.
    result = follower.append(batch(2, "a", producer_id=7, sequence=0), leader_epoch=2)
    assert result.duplicate and result.base_offset == 0
    assert follower.append(batch(1, "b", producer_id=7, sequence=2), leader_epoch=2).base_offset == 2


def test_follower_does_not_move_its_high_watermark_on_append(logs):
    leader = logs("leader-0")
    follower = logs("follower-0")
    leader.append(batch(5, "a"))
    replicate(leader, follower)
    assert follower.log_end_offset == 5
    assert follower.high_watermark == 0


def test_corrupt_batch_appends_nothing(logs):
    leader = logs("leader-0")
    follower = logs("follower-0")
    leader.append(batch(2, "a"))
    leader.append(batch(2, "b"))
    data = bytearray(leader.read(0, 1 << 20, upper_offset=leader.log_end_offset))
    data[-3] ^= 0xFF  # inside the second batch's records: its CRC fails
    with pytest.raises(AppendError):
        follower.append_as_follower(bytes(data))
    assert follower.log_end_offset == 0
    assert segment_bytes(follower) == {"00000000000000000000.log": b""}


def test_batch_below_the_log_end_is_refused(logs):
    leader = logs("leader-0")
    follower = logs("follower-0")
    leader.append(batch(2, "a"))
    replicate(leader, follower)
    with pytest.raises(AppendError):
        follower.append_as_follower(leader.read(0, 1 << 20, upper_offset=leader.log_end_offset))


def test_trailing_partial_batch_is_left_for_the_next_fetch(logs):
    leader = logs("leader-0")
    follower = logs("follower-0")
    leader.append(batch(2, "a"))
    leader.append(batch(2, "b"))
    data = leader.read(0, 1 << 20, upper_offset=leader.log_end_offset)
    first_size = next(iter_batches(data))[1]
    assert follower.append_as_follower(data[: first_size + 10]) == first_size
    assert follower.log_end_offset == 2
    replicate(leader, follower)
    assert segment_bytes(follower) == segment_bytes(leader)


def test_truncate_then_catch_up_again(logs):
    leader = logs("leader-0")
    follower = logs("follower-0")
    leader.append(batch(2, "a"), leader_epoch=1)
    replicate(leader, follower)
    follower.append(batch(3, "stale"), leader_epoch=1)  # written while it led, never replicated
    assert follower.log_end_offset == 5
    follower.truncate_to(2)
    leader.append(batch(4, "b"), leader_epoch=2)
    replicate(leader, follower)
    assert segment_bytes(follower) == segment_bytes(leader)
    assert follower.leader_epochs == leader.leader_epochs


def test_gap_after_compaction_starts_a_segment_at_the_batch_offset(logs):
    follower = logs("follower-0")
    later = build_batch([(b"k", b"v", [], T0)], base_offset=40, partition_leader_epoch=3)
    follower.append_as_follower(later)
    assert follower.log_end_offset == 41
    assert follower.segments[-1].base_offset == 40
    assert follower.log_start_offset == 40
