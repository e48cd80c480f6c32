"""The read path of Fetch: what this broker's replica of one partition answers
a reader (Kafka's ``ReplicaManager.readFromLocalLog``).

broker/handlers/fetch.py decodes the request, authorizes it, keeps fetch
sessions and client quotas, and assembles and long-polls the answer; for each
partition it asks :meth:`ReplicaReader.read_partition`, which decides
everything that depends on replication state, in Kafka's order:

1. whether this broker serves the reader (leader, or a follower for a v11+
   consumer, KIP-392), and the reader's leader epoch
   (``replication.fetch_read.serving_error``);
2. for a follower replica, whether its log diverged (KIP-320), then whether
   the fetch offset is in the log (``replication.fetch_read.position_error``);
3. a follower replica's fetch is recorded (it moves the high watermark and the
   ISR, ``ReplicaManager.follower_fetched``), and whether the replication
   throttle (KIP-73) holds it back (only a follower out of the ISR, of a
   partition whose throttle list names this leader); a consumer naming its
   rack, with Kafka's RackAwareReplicaSelector configured, may be sent to a
   replica in its rack instead (``preferred_read_replica``, answered at once
   without records);
4. the read itself, up to the bound the reader may see
   (``replication.fetch_read.read_upper_offset``), with the aborted
   transactions a read_committed consumer needs; what a follower replica is
   sent is CRC-checked first, so that a batch gone bad on this disk never
   reaches another replica (broker/replica/corruption.py); a consumer's read
   is sent unchecked, as Kafka sends it, and its client checks the CRCs.

The answer is a :class:`PartitionRead`. A long-polling fetch calls this again
for each re-read: the decisions are made afresh each time.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import ErrorCode
from replication.fetch_read import (
    DIVERGING_EPOCH_MIN_VERSION,
    FOLLOWER_READ_MIN_VERSION,
    LEADER_ERRORS,
    position_error,
    read_upper_offset,
    serving_error,
)
from replication.throttle import LEADER_THROTTLED_RATE, LEADER_THROTTLED_REPLICAS, is_throttled, leader_holds_back
from storage.file_slice import FileSlice
from storage.scrub import first_corrupt_batch


@dataclass(frozen=True, slots=True)
class FetchReader:
    """Who reads, as the request says: a follower replica (``replica_id`` >= 0,
    with its broker epoch from v15) or a consumer (its isolation level and
    rack)."""

    api_version: int
    replica_id: int = -1
    replica_epoch: int = -1
    read_committed: bool = False
    rack_id: str | None = None

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0


@dataclass(slots=True)
class PartitionRead:
    """One partition's answer. ``served``: this replica serves the reader, so the
    marks are set and an append to the partition may complete a waiting fetch;
    otherwise only ``error`` (and, for errors that send the reader to the
    leader, ``current_leader`` as (leader id, leader epoch)) is meant.
    ``answer_now``: the fetch must be answered without waiting for more data
    (an error, a divergence, a preferred read replica, a follower's news of
    the high watermark). ``records`` is a file
    slice the caller sends and then closes."""

    error: ErrorCode = ErrorCode.NONE
    served: bool = False
    answer_now: bool = False
    current_leader: tuple[int, int] | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    diverging_epoch: tuple[int, int] | None = None
    preferred_read_replica: int = -1
    records: FileSlice | None = None
    aborted_transactions: list[tuple[int, int]] | None = None


class ReplicaReader:
    """Reads partitions for Fetch from this broker's replicas."""

    def __init__(self, broker):
        self.broker = broker
        self.replicas = broker.replicas
        self.rack_aware = broker.config["replica.selector.class"] is not None

    def read_partition(
        self, topic, fetch_partition, reader: FetchReader, *, max_bytes: int, first: bool, now_ms: int
    ) -> PartitionRead:
        """Read ``fetch_partition`` (a Fetch request's partition: its ``partition``,
        ``fetch_offset``, ``current_leader_epoch``, ``last_fetched_epoch`` and
        ``log_start_offset``) of ``topic`` (a metadata image topic) for
        ``reader``: at most ``max_bytes`` of whole batches, except that with
        ``first`` (nothing read yet for this response) the first batch is sent
        whole however large (KIP-74); with ``max_bytes`` <= 0 and not ``first``
        nothing is read."""
        broker = self.broker
        replicas = self.replicas
        partition_id = fetch_partition.partition
        partition = topic.partitions.get(partition_id)
        if partition is None:
            return PartitionRead(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, answer_now=True)
        key = (topic.name, partition_id)
        plog = broker.partition_log(*key)
        if plog is None and broker.logs.is_offline(*key):
            # Its log dir went offline here (broker/replica/log_dirs.py): Kafka's answer,
            # on which clients and followers look for the new leader.
            return PartitionRead(ErrorCode.KAFKA_STORAGE_ERROR, answer_now=True)
        from_follower = reader.is_follower
        leader = replicas.leader_for(*key) if plog is not None else None
        error = serving_error(
            leads=leader is not None,
            follows=plog is not None and replicas.is_follower(*key),
            from_follower=from_follower,
            is_replica=leader is not None and leader.is_replica(reader.replica_id),
            api_version=reader.api_version,
            requested_epoch=fetch_partition.current_leader_epoch,
            current_epoch=partition.leader_epoch,
        )
        if error != ErrorCode.NONE:
            current_leader = (partition.leader, partition.leader_epoch) if error in LEADER_ERRORS else None
            return PartitionRead(error, answer_now=True, current_leader=current_leader)
        offset = fetch_partition.fetch_offset
        read = PartitionRead(
            served=True,
            log_start_offset=plog.log_start_offset,
            aborted_transactions=[] if reader.read_committed else None,
        )
        error, diverging = position_error(
            plog,
            offset,
            check_divergence=from_follower and reader.api_version >= DIVERGING_EPOCH_MIN_VERSION,
            last_fetched_epoch=fetch_partition.last_fetched_epoch,
            current_epoch=partition.leader_epoch,
        )
        if error != ErrorCode.NONE or diverging is not None:
            # A diverged follower must truncate first; an offset out of range
            # needs the reader to reset: both are answered at once, without records.
            read.error, read.diverging_epoch, read.answer_now = error, diverging, True
            read.high_watermark, read.last_stable_offset = plog.high_watermark, plog.last_stable_offset
            return read
        throttled = held_back = False
        if from_follower:
            replicas.follower_fetched(
                key, leader, plog, reader.replica_id, offset, reader.replica_epoch, fetch_partition.log_start_offset
            )
            # A high watermark this follower has not heard of is news enough to answer.
            read.answer_now = leader.send_high_watermark(reader.replica_id)
            # The topic lists this leader's own replica: what it sends counts
            # against the leader rate, and a follower out of the ISR waits
            # while the rate is exceeded.
            listed = topic.configs.get(LEADER_THROTTLED_REPLICAS, "")
            throttled = is_throttled(listed, partition_id, replicas.node_id)
            held_back = leader_holds_back(listed, partition_id, replicas.node_id, reader.replica_id in leader.isr)
        elif (
            self.rack_aware and leader is not None and reader.api_version >= FOLLOWER_READ_MIN_VERSION and reader.rack_id
        ):
            racks = {b: r.rack for b, r in broker.image.brokers.items()}
            preferred = leader.preferred_read_replica(reader.rack_id, racks, offset)
            if preferred != leader.local_id:
                # Kafka answers at once, without records, naming the replica to read from.
                read.preferred_read_replica, read.answer_now = preferred, True
                read.high_watermark, read.last_stable_offset = plog.high_watermark, plog.last_stable_offset
                return read
        read.high_watermark = plog.high_watermark
        read.last_stable_offset = plog.last_stable_offset
        if max_bytes <= 0 and not first:
            return read
        if held_back and replicas.leader_quota.exceeded(replicas.throttle_rate(LEADER_THROTTLED_RATE), now_ms):
            return read  # over leader.replication.throttled.rate: this replica waits
        upper = read_upper_offset(
            from_follower=from_follower,
            read_committed=reader.read_committed,
            log_end_offset=plog.log_end_offset,
            high_watermark=read.high_watermark,
            last_stable_offset=read.last_stable_offset,
        )
        if from_follower and broker.corruption.refuses(key, offset, partition.leader_epoch):
            read.error, read.answer_now = ErrorCode.KAFKA_STORAGE_ERROR, True
            return read
        file_slice = plog.read_slice(offset, max(max_bytes, 0), upper_offset=upper, oversized_first_batch=first)
        if file_slice is not None and from_follower:
            file_slice = self._checked_for_follower(key, plog, offset, file_slice, read)
        if file_slice is not None:
            if reader.read_committed and not from_follower:
                read.aborted_transactions = plog.aborted_transactions(offset, file_slice.next_offset)
            read.records = file_slice
            if throttled:
                replicas.leader_quota.record(len(file_slice), now_ms)
        return read

    def _checked_for_follower(self, key, plog, offset: int, file_slice: FileSlice, read: PartitionRead) -> FileSlice | None:
        """``file_slice`` with its batches CRC-checked before a follower replica
        gets them: a corrupt batch must not spread to another replica. The
        batches before a corrupt one are still sent; from it on, nothing (the
        follower is answered KAFKA_STORAGE_ERROR when it is the first), and
        broker/replica/corruption.py decides what this replica does about it.
        Consumers' reads are not checked here, as in Kafka: clients check CRCs."""
        corrupt = first_corrupt_batch(file_slice.read_all(), offset)
        if corrupt is None:
            return file_slice
        self.broker.corruption.batch_found(key, plog, corrupt, f"a read for a follower at offset {offset}")
        if corrupt.position > 0:
            file_slice.length = corrupt.position
            file_slice.next_offset = corrupt.offset
            return file_slice
        file_slice.close()
        read.error, read.answer_now = ErrorCode.KAFKA_STORAGE_ERROR, True
        return None
