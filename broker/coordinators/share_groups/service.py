"""Share-partitions served on the partition leader: the asyncio shell of
:mod:`broker.coordinators.share_groups.partition`.

For every (share group, topic partition) this broker leads and a member
fetches, it holds one :class:`SharePartition`: the in-flight ranges, their
acquisition locks and delivery counts. Its durable state lives in the
compacted internal topic ``__share_group_state`` (ShareSnapshot and
ShareUpdate records, protocol/share_state_records.py), on the partition the
key ``group:topic id:partition`` hashes to, through the same coordinator
shell as ``__consumer_offsets`` and ``__transaction_state``
(broker/coordinators/shell.py: the topic is created on first need, its led
partitions are replayed into :class:`DurableShareState` per share-partition).

Every change is written before the member hears of it and answered only once
every in-sync replica has it: records are delivered once their acquisition
(with its delivery count) is stored, an acknowledgement is confirmed once
stored. A write that fails leaves the change in memory (the records are not
delivered, the acknowledgement is answered with the error) and the next write
of that share-partition is a full ShareSnapshot. A share-partition is built on
the first fetch after this broker became the partition's leader: from its
durable state, or, for a group that never read the partition, at the offset
``share.auto.offset.reset`` says (latest: the high watermark; earliest: the
log start) with a snapshot written first. Leadership lost drops it (its locks
die with it, as in Kafka); the next leader rebuilds it from the records.

Where the ``__share_group_state`` partition of the key is led by another
broker (its share coordinator), the state is read from it with
ReadShareGroupState and written with WriteShareGroupState (v0, the batches
changed since its last snapshot, or all of them, laid over what it holds;
it writes a ShareSnapshot of the result, so its records stay complete under
compaction, and fences writes from an older leader epoch of the topic
partition with FENCED_LEADER_EPOCH). A share-partition follows its state
partition's leadership at each write; after a move it writes a full snapshot
first.

Share sessions (KIP-932) are kept per (group, member): epoch 0 opens one
(replacing an older one), each next request must carry the next epoch
(INVALID_SHARE_SESSION_EPOCH), -1 closes it and releases what the member
holds here; a request for a session that does not exist answers
SHARE_SESSION_NOT_FOUND. Locks that end are released by a timer.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field

from broker.clock import monotonic_ms, wall_ms
from broker.coordinators.effects import Store
from broker.coordinators.shell import CoordinatorShell, InternalTopic
from broker.coordinators.transactions.peers import REQUEST_TIMEOUT_MS, Peers
from broker.coordinators.share_groups.partition import (
    Acquired,
    DurableShareState,
    Persist,
    SharePartition,
    SharePartitionConfig,
)
from broker.replica.leader_append import replication_outcome
from protocol.consumer_offsets import partition_for_group
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import iter_batches
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from protocol.share_state_records import ShareRecordKind, ShareStateRecord, decode_record, encode_record

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"
# How long a write of share state waits for the in-sync replicas.
STORE_TIMEOUT_MS = 5000
# Timers are checked at least this often.
_MAX_TIMER_SLEEP_MS = 1000
# The first read of a share fetch (see SharePartitionService.acquire).
_SHARE_READ_START_BYTES = 1 << 20

Key = tuple[str, uuid.UUID, int]  # group id, topic id, partition
READ_STATE = APIS_BY_NAME["ReadShareGroupState"]
WRITE_STATE = APIS_BY_NAME["WriteShareGroupState"]
# What a coordinator answers for a share-partition without state (its next state epoch beside it).
NO_STATE = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
_READ = struct_classes(READ_STATE.request)
_WRITE = struct_classes(WRITE_STATE.request)


@dataclass
class _Live:
    partition: SharePartition
    topic: str
    leader_epoch: int
    state_partition: int
    snapshot_owed: bool = False
    # Whether its state was last written to another broker's share coordinator.
    remote: bool = False
    # The state epoch of the durable state it was built from (writes of an older one are fenced).
    state_epoch: int = 0


@dataclass
class ShareSession:
    next_epoch: int = 1
    # (topic id, partition) the member fetches from this broker.
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)


class SharePartitionService:
    def __init__(self, broker):
        self._broker = broker
        config = broker.config
        self.config = SharePartitionConfig(
            record_lock_duration_ms=config["group.share.record.lock.duration.ms"],
            delivery_count_limit=config["group.share.delivery.count.limit"],
            max_record_locks=config["group.share.partition.max.record.locks"],
            snapshot_every_updates=config["share.coordinator.snapshot.update.records.per.snapshot"],
        )
        self.auto_offset_reset = config["share.auto.offset.reset"]
        self.state_partitions = config["share.coordinator.state.topic.num.partitions"]
        topic = InternalTopic(
            SHARE_STATE_TOPIC,
            num_partitions=self.state_partitions,
            replication_factor=config["share.coordinator.state.topic.replication.factor"],
            replication_factor_config="share.coordinator.state.topic.replication.factor",
            configs={
                "cleanup.policy": "compact",
                "min.insync.replicas": str(config["share.coordinator.state.topic.min.isr"]),
                "segment.bytes": str(config["share.coordinator.state.topic.segment.bytes"]),
                "unclean.leader.election.enable": "false",
                "compression.type": "producer",
            },
        )
        self.shell = CoordinatorShell(broker, topic, self, log)
        # state partition -> key -> durable state, as replayed and written.
        self.durable: dict[int, dict[Key, DurableShareState]] = {}
        self.partitions: dict[Key, _Live] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._initializing: dict[Key, asyncio.Lock] = {}
        # The highest leader epoch of each share-partition's topic partition that
        # wrote or read its state here (as its share coordinator): older ones are fenced.
        self.state_leader_epochs: dict[Key, int] = {}
        # The state epoch the next state of a deleted share-partition must have, so
        # that a partition leader still holding the deleted state cannot write it back.
        self.deleted_state_epochs: dict[Key, int] = {}
        self.peers = Peers(broker, "share-partition-leader")
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms: int | None = None
        self._stopped = False

    @staticmethod
    def now_ms() -> int:
        # Record locks and the timer are durations: monotonic. The state
        # records' write timestamps are wall-clock (wall_ms).
        return monotonic_ms()

    def state_partition_for(self, key: Key) -> int:
        group_id, topic_id, partition = key
        return partition_for_group(f"{group_id}:{topic_id}:{partition}", self.state_partitions)

    # ----------------------------------------------------------------- the shell's owner

    def replay_record(self, partition: int, producer_id: int, key, value) -> None:
        record = decode_record(key, value)
        states = self.durable.setdefault(partition, {})
        share_key = (record.group_id, record.topic_id, record.partition)
        if record.is_tombstone:
            if record.kind == ShareRecordKind.SNAPSHOT:
                deleted = states.pop(share_key, None)
                if deleted is not None:
                    self._fence_deleted(share_key, deleted)
            return
        state = states.get(share_key)
        if state is None:
            state = states[share_key] = DurableShareState(state_epoch=self.deleted_state_epochs.pop(share_key, 0))
        snapshot = record.kind == ShareRecordKind.SNAPSHOT
        state.apply(Persist(snapshot, record.start_offset, record.state_batches, record.snapshot_epoch))
        if snapshot:
            state.state_epoch = record.state_epoch
        self.state_leader_epochs[share_key] = max(self.state_leader_epochs.get(share_key, -1), record.leader_epoch)

    def replay_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """No transactions write to this topic."""

    def partition_loaded(self, partition: int, epoch: int, records: int) -> None:
        if records:
            log.info("share state: loaded %s-%d at leader epoch %d: %d records, %d share-partitions",
                     SHARE_STATE_TOPIC, partition, epoch, records, len(self.durable.get(partition, {})))

    def partition_unloaded(self, partition: int, epoch: int) -> None:
        self.durable.pop(partition, None)
        for held in (self.state_leader_epochs, self.deleted_state_epochs):
            for key in [k for k in held if self.state_partition_for(k) == partition]:
                del held[key]
        # Share-partitions led here keep their locks: their next write goes to the new coordinator, whole.
        for live in self.partitions.values():
            if live.state_partition == partition:
                live.snapshot_owed = True

    # ----------------------------------------------------------------- leadership

    def follow_leadership(self) -> None:
        """Load the state partitions led here; drop the share-partitions of topic
        partitions no longer led here at the epoch they were built at."""
        self.shell.follow_leadership()
        replicas = self._broker.replicas
        for key, live in list(self.partitions.items()):
            leader = replicas.leader_for(live.topic, key[2])
            if leader is None or leader.leader_epoch != live.leader_epoch:
                del self.partitions[key]

    # ----------------------------------------------------------------- sessions

    def session(self, group_id: str, member_id: str, epoch: int) -> tuple[ErrorCode, ShareSession | None]:
        """The member's share session for a request at ``epoch`` (0 opens a new one,
        -1 is the last request of the current one)."""
        if epoch == 0:
            session = self.sessions[(group_id, member_id)] = ShareSession()
            self._drop_idle(group_id)
            return ErrorCode.NONE, session
        session = self.sessions.get((group_id, member_id))
        if session is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None
        if epoch != -1 and epoch != session.next_epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
        if epoch != -1:
            session.next_epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        return ErrorCode.NONE, session

    async def close_session(self, group_id: str, member_id: str) -> None:
        """The member's session ends: what it holds here is released."""
        self.sessions.pop((group_id, member_id), None)
        for key, live in list(self.partitions.items()):
            if key[0] == group_id and live.partition.acquired_by(member_id):
                await self._persist(key, live, live.partition.release_member(member_id))

    # ----------------------------------------------------------------- share-partitions

    async def share_partition(self, group_id: str, topic: str, topic_id: uuid.UUID, partition: int) -> tuple[ErrorCode, _Live | None]:
        """The share-partition, built on first need from its durable state."""
        key = (group_id, topic_id, partition)
        local = self._broker.replicas.local_replica(topic, partition)
        if local.error != ErrorCode.NONE:
            return local.error, None
        leader = local.leader
        live = self.partitions.get(key)
        if live is not None and live.leader_epoch == leader.leader_epoch:
            return ErrorCode.NONE, live
        lock = self._initializing.setdefault(key, asyncio.Lock())
        async with lock:
            live = self.partitions.get(key)
            if live is not None and live.leader_epoch == leader.leader_epoch:
                return ErrorCode.NONE, live
            error = await self.shell.ensure_topic()
            if error != ErrorCode.NONE:
                return error, None
            state_partition = self.state_partition_for(key)
            plog = local.plog
            error = self.shell.not_coordinator(state_partition)
            remote = error == ErrorCode.NOT_COORDINATOR
            if remote:
                error, durable, state_epoch = await self._read_remote(key, state_partition, leader.leader_epoch)
                if error != ErrorCode.NONE:
                    return error, None
            elif error is not None:
                return error, None
            else:
                durable = self.durable.setdefault(state_partition, {}).get(key)
                state_epoch = durable.state_epoch if durable is not None else self.deleted_state_epochs.get(key, 0)
            if durable is None:
                start = plog.high_watermark if self.auto_offset_reset == "latest" else plog.log_start_offset
                share_partition = SharePartition(self.config, start)
                live = _Live(share_partition, topic, leader.leader_epoch, state_partition, snapshot_owed=True, remote=remote,
                             state_epoch=state_epoch)
            else:
                share_partition = SharePartition.from_durable(self.config, durable.start_offset, durable.batches(), durable.snapshot_epoch)
                live = _Live(share_partition, topic, leader.leader_epoch, state_partition, remote=remote, state_epoch=state_epoch)
            persist = share_partition.advance_start(plog.log_start_offset)
            error = await self._persist(key, live, persist)
            if error != ErrorCode.NONE:
                return error, None
            self.partitions[key] = live
            return ErrorCode.NONE, live

    async def _persist(self, key: Key, live: _Live, persist: Persist | None) -> ErrorCode:
        """Write what a change needs (a full snapshot when one is owed) and wait for
        the in-sync replicas; the error to answer with if that fails."""
        if persist is None and not live.snapshot_owed:
            return ErrorCode.NONE
        error = self.shell.not_coordinator(live.state_partition)
        remote = error == ErrorCode.NOT_COORDINATOR
        if error is not None and not remote:
            live.snapshot_owed = True
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if remote != live.remote:
            # The state moved: the new coordinator gets all of it, at an epoch past what it holds.
            live.remote = remote
            live.snapshot_owed = True
            if not remote:
                held = self.durable.get(live.state_partition, {}).get(key)
                if held is not None:
                    live.partition.snapshot_epoch = max(live.partition.snapshot_epoch, held.snapshot_epoch)
        if live.snapshot_owed:
            persist = live.partition.snapshot()
        if remote:
            error = await self._write_remote(key, live, persist)
            live.snapshot_owed = error != ErrorCode.NONE
            return error
        if self._stale_state_epoch(key, live.state_epoch):
            self._drop(key, live)
            return _coordinator_error(ErrorCode.FENCED_STATE_EPOCH)
        now_ms = wall_ms()
        group_id, topic_id, partition = key
        record = ShareStateRecord(
            ShareRecordKind.SNAPSHOT if persist.snapshot else ShareRecordKind.UPDATE,
            group_id, topic_id, partition, persist.start_offset, persist.state_batches,
            snapshot_epoch=persist.snapshot_epoch, state_epoch=live.state_epoch, leader_epoch=live.leader_epoch,
            write_timestamp_ms=now_ms,
        )
        written = self.shell.write_store(Store(live.state_partition, -1, (encode_record(record),)), now_ms)
        if written.error != ErrorCode.NONE:
            live.snapshot_owed = True
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        live.snapshot_owed = False
        states = self.durable.setdefault(live.state_partition, {})
        if key not in states:
            self.deleted_state_epochs.pop(key, None)
            states[key] = DurableShareState(state_epoch=live.state_epoch)
        states[key].apply(persist)
        self.state_leader_epochs[key] = max(self.state_leader_epochs.get(key, -1), live.leader_epoch)
        replicas = self._broker.replicas
        state_key = (SHARE_STATE_TOPIC, live.state_partition)
        leader = replicas.leaders.get(state_key)
        if leader is None:
            live.snapshot_owed = True
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        outcome = await replication_outcome(replicas, state_key, leader, written.last_offset + 1, STORE_TIMEOUT_MS)
        if outcome != ErrorCode.NONE:
            # The record may not survive this leader: the next write says it all again.
            live.snapshot_owed = True
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    # ----------------------------------------------------------------- another broker's share coordinator

    async def call_coordinator(self, state_partition: int, api, body):
        """(error, response) of a request to the leader of ``state_partition``."""
        error, leader_id = self.shell.leader_of(state_partition)
        if error != ErrorCode.NONE:
            return error, None
        peer = self.peers.get(leader_id)
        if peer is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        try:
            version = await peer.version_for(api)
            if version is None:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
            return ErrorCode.NONE, await peer.connection.request(api, version, body, timeout_ms=REQUEST_TIMEOUT_MS)
        except (OSError, TimeoutError, ProtocolError) as exc:
            peer.failed()
            log.info("%s to broker %d failed: %s", api.name, leader_id, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None

    async def _read_remote(self, key: Key, state_partition: int, leader_epoch: int) -> tuple[ErrorCode, DurableShareState | None, int]:
        """(error, the durable state at the key's share coordinator, its state epoch);
        no state for a share-partition it has none of (the state epoch its next
        state must have beside)."""
        group_id, topic_id, partition = key
        body = _READ.ReadShareGroupStateRequest(group_id=group_id, topics=[_READ.ReadStateData(
            topic_id=topic_id, partitions=[_READ.PartitionData(partition=partition, leader_epoch=leader_epoch)])])
        error, response = await self.call_coordinator(state_partition, READ_STATE, body)
        if response is None:
            return error, None, 0
        result = response.results[0].partitions[0]
        if result.error_code == NO_STATE:
            return ErrorCode.NONE, None, max(result.state_epoch, 0)
        if result.error_code != ErrorCode.NONE:
            return _coordinator_error(ErrorCode(result.error_code)), None, 0
        batches = tuple((b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in result.state_batches)
        return ErrorCode.NONE, DurableShareState(result.start_offset, batches, state_epoch=result.state_epoch), result.state_epoch

    async def _write_remote(self, key: Key, live: _Live, persist: Persist) -> ErrorCode:
        group_id, topic_id, partition = key
        body = _WRITE.WriteShareGroupStateRequest(group_id=group_id, topics=[_WRITE.WriteStateData(
            topic_id=topic_id, partitions=[_WRITE.PartitionData(
                partition=partition, state_epoch=live.state_epoch, leader_epoch=live.leader_epoch, start_offset=persist.start_offset,
                state_batches=[_WRITE.StateBatch(first_offset=f, last_offset=l, delivery_state=s, delivery_count=c)
                               for f, l, s, c in persist.state_batches],
            )])])
        error, response = await self.call_coordinator(live.state_partition, WRITE_STATE, body)
        if response is None:
            return error
        result = response.results[0].partitions[0].error_code
        if result == ErrorCode.FENCED_STATE_EPOCH:
            self._drop(key, live)
        return ErrorCode.NONE if result == ErrorCode.NONE else _coordinator_error(ErrorCode(result))

    async def _coordinating(self, key: Key, leader_epoch: int) -> ErrorCode | None:
        """The error for a state request about ``key`` this broker cannot answer as
        its share coordinator (or from a fenced leader epoch); None when it can."""
        error = await self.shell.ensure_topic()
        if error != ErrorCode.NONE:
            return error
        error = self.shell.not_coordinator(self.state_partition_for(key))
        if error is not None:
            return error
        if leader_epoch < self.state_leader_epochs.get(key, -1):
            return ErrorCode.FENCED_LEADER_EPOCH
        self.state_leader_epochs[key] = leader_epoch
        return None

    async def read_state(self, key: Key, leader_epoch: int) -> tuple[ErrorCode, DurableShareState | None]:
        """ReadShareGroupState as this share coordinator: UNKNOWN_TOPIC_OR_PARTITION
        for a share-partition without state."""
        error = await self._coordinating(key, leader_epoch)
        if error is not None:
            return error, None
        durable = self.durable.get(self.state_partition_for(key), {}).get(key)
        if durable is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        return ErrorCode.NONE, durable

    async def write_state(self, key: Key, leader_epoch: int, start_offset: int, batches: tuple, state_epoch: int = 0) -> ErrorCode:
        """WriteShareGroupState as this share coordinator: the batches laid over what
        is held, stored as one ShareSnapshot (acks=all) before the answer. A
        writer built from an older state epoch is fenced (FENCED_STATE_EPOCH)."""
        error = await self._coordinating(key, leader_epoch)
        if error is not None:
            return error
        if self._stale_state_epoch(key, state_epoch):
            return ErrorCode.FENCED_STATE_EPOCH
        state_partition = self.state_partition_for(key)
        held = self.durable.setdefault(state_partition, {}).get(key)
        merged = DurableShareState(snapshot_epoch=-1) if held is None else DurableShareState(held.start_offset, held.batches(), held.snapshot_epoch)
        merged.state_epoch = max(state_epoch, held.state_epoch if held is not None else 0)
        merged.apply(Persist(False, start_offset, batches, merged.snapshot_epoch))
        snapshot = Persist(True, merged.start_offset, merged.batches(), merged.snapshot_epoch + 1)
        merged.apply(snapshot)
        return await self._store_state(key, merged, leader_epoch)

    async def _store_state(self, key: Key, state: DurableShareState | None, leader_epoch: int) -> ErrorCode:
        """Store ``state`` as the key's ShareSnapshot (None: tombstones of its
        snapshot and update), hold it, and wait for the in-sync replicas."""
        now_ms = wall_ms()
        group_id, topic_id, partition = key
        state_partition = self.state_partition_for(key)
        if state is None:
            records = tuple(encode_record(ShareStateRecord(kind, group_id, topic_id, partition)) for kind in ShareRecordKind)
        else:
            records = (encode_record(ShareStateRecord(
                ShareRecordKind.SNAPSHOT, group_id, topic_id, partition, state.start_offset, state.batches(),
                snapshot_epoch=state.snapshot_epoch, state_epoch=state.state_epoch, leader_epoch=leader_epoch,
                write_timestamp_ms=now_ms)),)
        written = self.shell.write_store(Store(state_partition, -1, records), now_ms)
        if written.error != ErrorCode.NONE:
            return _coordinator_error(written.error)
        states = self.durable.setdefault(state_partition, {})
        if state is None:
            deleted = states.pop(key, None)
            if deleted is not None:
                self._fence_deleted(key, deleted)
        else:
            self.deleted_state_epochs.pop(key, None)
            states[key] = state
        replicas = self._broker.replicas
        state_key = (SHARE_STATE_TOPIC, state_partition)
        leader = replicas.leaders.get(state_key)
        if leader is None:
            return ErrorCode.NOT_COORDINATOR
        outcome = await replication_outcome(replicas, state_key, leader, written.last_offset + 1, STORE_TIMEOUT_MS)
        return ErrorCode.NONE if outcome == ErrorCode.NONE else _coordinator_error(outcome)

    # ----------------------------------------------------------------- state epochs

    def next_state_epoch(self, key: Key) -> int:
        """The state epoch of the key's state here, or for a key without state the
        one its next state must have."""
        held = self.durable.get(self.state_partition_for(key), {}).get(key)
        return held.state_epoch if held is not None else self.deleted_state_epochs.get(key, 0)

    def _stale_state_epoch(self, key: Key, state_epoch: int) -> bool:
        return state_epoch < self.next_state_epoch(key)

    def _fence_deleted(self, key: Key, deleted: DurableShareState) -> None:
        self.deleted_state_epochs[key] = max(self.deleted_state_epochs.get(key, 0), deleted.state_epoch + 1)

    def _drop(self, key: Key, live: _Live | None = None) -> None:
        """Forget the share-partition led here (``live``, or whichever is held):
        its next fetch builds it again from the durable state."""
        if live is None or self.partitions.get(key) is live:
            self.partitions.pop(key, None)

    def _drop_idle(self, group_id: str) -> None:
        """Forget the group's share-partitions led here that hold nothing the durable
        state lacks (no acquisition lock, no snapshot owed). An administrator may
        have reset or deleted their state at another broker's share coordinator
        while the group was empty, which a leader that does not write would never
        hear of; a new share session builds them again from the stored state."""
        for key, live in list(self.partitions.items()):
            if key[0] == group_id and not live.snapshot_owed and live.partition.next_deadline_ms() is None:
                del self.partitions[key]

    # ----------------------------------------------------------------- admin (the share coordinator's side)

    async def _administering(self, key: Key) -> ErrorCode | None:
        error = await self.shell.ensure_topic()
        if error != ErrorCode.NONE:
            return error
        return self.shell.not_coordinator(self.state_partition_for(key))

    async def read_summary(self, key: Key) -> tuple[ErrorCode, int, int, int]:
        """ReadShareGroupStateSummary as this share coordinator: (error, state epoch,
        leader epoch, start offset); NO_STATE with the next state epoch for a
        share-partition without state. The start offset is past what is done."""
        error = await self._administering(key)
        if error is not None:
            return error, 0, -1, -1
        held = self.durable.get(self.state_partition_for(key), {}).get(key)
        if held is None:
            return NO_STATE, self.next_state_epoch(key), -1, -1
        return ErrorCode.NONE, held.state_epoch, self.state_leader_epochs.get(key, -1), held.view()[0]

    async def initialize_state(self, key: Key, state_epoch: int, start_offset: int) -> ErrorCode:
        """InitializeShareGroupState as this share coordinator: the state set anew
        at ``start_offset`` with nothing in flight, at a state epoch above the held
        one (FENCED_STATE_EPOCH otherwise), so that its partition leader builds the
        share-partition again from it."""
        error = await self._administering(key)
        if error is not None:
            return error
        held = self.durable.get(self.state_partition_for(key), {}).get(key)
        if (held is not None and state_epoch <= held.state_epoch) or state_epoch < self.next_state_epoch(key):
            return ErrorCode.FENCED_STATE_EPOCH
        if start_offset < 0:
            return ErrorCode.INVALID_REQUEST
        self._drop(key)
        return await self._store_state(key, DurableShareState.initialized(held, start_offset, state_epoch),
                                       self.state_leader_epochs.get(key, -1))

    async def delete_state(self, key: Key) -> ErrorCode:
        """DeleteShareGroupState as this share coordinator: the key's records
        tombstoned (nothing to do without state); its next state starts where
        ``share.auto.offset.reset`` says, at a state epoch that fences a leader
        still holding the deleted one."""
        error = await self._administering(key)
        if error is not None:
            return error
        self._drop(key)
        if self.durable.get(self.state_partition_for(key), {}).get(key) is None:
            return ErrorCode.NONE
        return await self._store_state(key, None, -1)

    # ----------------------------------------------------------------- fetch and acknowledge

    async def acknowledge(self, group_id: str, member_id: str, topic: str, topic_id: uuid.UUID, partition: int,
                          batches: list[tuple[int, int, list[int]]]) -> ErrorCode:
        key = (group_id, topic_id, partition)
        error, live = await self.share_partition(group_id, topic, topic_id, partition)
        if live is None:
            return error
        error, persist = live.partition.acknowledge(member_id, batches)
        if error != ErrorCode.NONE:
            return error
        return await self._persist(key, live, persist)

    async def acquire(self, group_id: str, member_id: str, topic: str, topic_id: uuid.UUID, partition: int,
                      max_records: int, max_bytes: int) -> tuple[ErrorCode, list[Acquired], bytes | None]:
        """Acquire records for ``member_id``: (error, the acquired ranges, the
        record batches that hold them). The acquisition is stored first."""
        key = (group_id, topic_id, partition)
        error, live = await self.share_partition(group_id, topic, topic_id, partition)
        if live is None:
            return error, [], None
        plog = self._broker.partition_log(topic, partition)
        if plog is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, [], None
        share_partition = live.partition
        persist = share_partition.advance_start(plog.log_start_offset)
        if persist is not None:
            error = await self._persist(key, live, persist)
            if error != ErrorCode.NONE:
                return error, [], None
        high_watermark = plog.high_watermark
        position = share_partition.next_acquirable_offset(high_watermark)
        if position is None:
            return ErrorCode.NONE, [], None
        # Read what max_records needs, not max_bytes (a share fetch's 50 MB by
        # default): start small and grow while the bytes read hold fewer
        # offsets than asked for and the log has more.
        max_bytes = max(max_bytes, 1)
        read_bytes = min(max_bytes, _SHARE_READ_START_BYTES)
        while True:
            data = plog.read(position, read_bytes, upper_offset=high_watermark)
            batch_ends = [
                (pos + size, header.base_offset + header.last_offset_delta + 1) for pos, size, header in iter_batches(data)
            ]
            data_end = batch_ends[-1][1] if batch_ends else position
            if data_end - position >= max_records or data_end >= high_watermark or read_bytes >= max_bytes:
                break
            read_bytes = min(max_bytes, read_bytes * 4)
        if data_end <= position:
            return ErrorCode.NONE, [], None
        acquired, persist = share_partition.acquire(member_id, self.now_ms(), min(high_watermark, data_end), max_records)
        if not acquired:
            return ErrorCode.NONE, [], None
        # Answer with the batches up to the one holding the last acquired offset.
        last_acquired = max(a.last_offset for a in acquired)
        cut = next(byte_end for byte_end, offset_end in batch_ends if offset_end > last_acquired)
        data = data[:cut]
        self.after_operation()
        error = await self._persist(key, live, persist)
        if error != ErrorCode.NONE:
            # Not delivered: the records stay acquired by no one who knows it, until their lock ends.
            return error, [], None
        return ErrorCode.NONE, acquired, data

    # ----------------------------------------------------------------- timers

    def after_operation(self) -> None:
        if self._stopped:
            return
        deadline_ms = min((d for live in self.partitions.values() if (d := live.partition.next_deadline_ms()) is not None), default=None)
        now_ms = self.now_ms()
        wake_ms = now_ms + _MAX_TIMER_SLEEP_MS if deadline_ms is None else min(deadline_ms, now_ms + _MAX_TIMER_SLEEP_MS)
        if self._timer is not None and self._timer_at_ms is not None and self._timer_at_ms <= wake_ms:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at_ms = wake_ms
        self._timer = asyncio.get_running_loop().call_later(max(wake_ms - now_ms, 0) / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at_ms = None
        now_ms = self.now_ms()
        for key, live in list(self.partitions.items()):
            deadline = live.partition.next_deadline_ms()
            if (deadline is not None and deadline <= now_ms) or live.snapshot_owed:
                persist = live.partition.expire_locks(now_ms)
                asyncio.get_running_loop().create_task(self._persist_logged(key, live, persist))
        self.after_operation()

    async def _persist_logged(self, key: Key, live: _Live, persist: Persist | None) -> None:
        error = await self._persist(key, live, persist)
        if error != ErrorCode.NONE:
            log.debug("share state of %s not stored (%s); the next write snapshots it", key, error.name)

    def start(self) -> None:
        self._stopped = False
        self.after_operation()

    def stop(self) -> None:
        self._stopped = True
        self.peers.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def share_groups_enabled(broker) -> bool:
    """Share groups are served once the cluster finalized ``share.version`` 1 or
    more, as in Kafka: before that their APIs are not offered."""
    return broker.image.features.get("share.version", 0) >= 1


def _coordinator_error(error: ErrorCode) -> ErrorCode:
    """What a share-partition's fetch or acknowledgement answers for a failed state
    read or write: the coordinator moved or is loading (clients retry)."""
    if error in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        return error
    if error in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH):
        # The share-partition is built again at its next fetch (the client retries).
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.COORDINATOR_NOT_AVAILABLE
