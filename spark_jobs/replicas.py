"""Which replica of a partition a job reads, and up to which offset.

Pure (no Spark, no sockets): the data source plans with these functions.

Replicas: the log dirs a job is given may belong to several brokers, so one
partition may have a directory in several of them. Replicas hold the same
bytes at the same offsets below the high watermark (followers copy their
leader's batches as they are), but each may end differently: a follower lags,
and a log may end in batches no in-sync replica has yet, which a new leader
can replace by other batches at the same offsets. So a partition is read
from ONE replica, never a mix, chosen by :func:`replica_for`: among the
replicas that hold the range's start, the one whose newest batch has the
newest leader epoch, and of those the one whose log reaches furthest. The
newest epoch comes first because a replica that stopped at an older epoch
(a leader killed with appends its followers never got) may reach further
than the current leader with batches that were never committed; any replica
that wrote or fetched a batch of the newest epoch has dropped such a tail.

The committed end: nothing at or above the partition's high watermark is
read, since a batch there may still be truncated. Where the high watermark
comes from is the data source's choice (the leader through ListOffsets, or
:func:`checkpointed_high_watermarks`); :func:`committed_end` caps it by the
chosen replica's own log end.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spark_jobs.segment_reader import LogEnd, PartitionDir, earliest_offset, log_end
from storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT, CheckpointError, read_offsets


@dataclass(frozen=True, slots=True)
class ReplicaLog:
    """One replica's files as planning sees them: its first offset and where it ends."""

    pdir: PartitionDir
    earliest: int
    end: LogEnd


def replica_logs(pdirs) -> list[ReplicaLog]:
    """The replicas' first offsets and ends, read from their files now (in the order given)."""
    logs = []
    for pdir in pdirs:
        end = log_end(pdir)
        logs.append(ReplicaLog(pdir, min(earliest_offset(pdir), end.offset), end))
    return logs


def _rank(replica: ReplicaLog) -> tuple[int, int, int]:
    return replica.end.leader_epoch, replica.end.offset, -replica.earliest


def preferred_replica(replicas: list[ReplicaLog]) -> ReplicaLog:
    """The replica on the newest leader epoch that reaches furthest (then the one that
    starts earliest; then the first given): where "earliest" and timestamps are resolved."""
    return max(replicas, key=_rank)  # max keeps the first of equals


def replica_for(replicas: list[ReplicaLog], start: int) -> ReplicaLog | None:
    """The replica to read from ``start`` on: the preferred one among those whose log
    holds ``start`` (their first offset is at or below it); None when none does."""
    holding = [replica for replica in replicas if replica.earliest <= start]
    return preferred_replica(holding) if holding else None


def committed_end(replica: ReplicaLog, high_watermark: int | None) -> int:
    """Where a read of ``replica`` must stop: at the high watermark, or at the
    replica's log end when that comes first; at the log end when no high
    watermark is known (a single broker's log, all of it committed)."""
    if high_watermark is None:
        return replica.end.offset
    return max(min(high_watermark, replica.end.offset), 0)


def checkpointed_high_watermarks(log_dirs) -> dict[tuple[str, int], int]:
    """The largest high watermark any of the log dirs' ``replication-offset-checkpoint``
    files holds, per partition (partitions no file names are left out).

    Each broker checkpoints its own view every
    ``replica.high.watermark.checkpoint.interval.ms``: a follower's lags its
    leader's, and every one lags the live value a little. The largest is the
    closest to the truth and still below it. A malformed file fails the
    read: without it a partition might be read past its high watermark.
    """
    high_watermarks: dict[tuple[str, int], int] = {}
    for log_dir in log_dirs:
        try:
            offsets = read_offsets(Path(log_dir) / REPLICATION_OFFSET_CHECKPOINT)
        except (CheckpointError, OSError) as exc:
            raise ValueError(f"cannot read the high watermarks of {log_dir}: {exc}") from None
        for key, offset in offsets.items():
            high_watermarks[key] = max(offset, high_watermarks.get(key, offset))
    return high_watermarks


__all__ = [
    "ReplicaLog",
    "checkpointed_high_watermarks",
    "committed_end",
    "preferred_replica",
    "replica_for",
    "replica_logs",
]
