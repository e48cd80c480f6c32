"""The group coordinator's asyncio shell: timers, futures and ``__consumer_offsets``.

Owns the one :class:`~broker.coordinators.groups.coordinator.GroupCoordinator` of the
broker. It creates the internal topic ``__consumer_offsets`` (compacted,
``offsets.topic.num.partitions`` partitions, ``offsets.topic.replication.factor``
replicas) the first time a group needs it, and fires the coordinator's
deadlines from one timer on the event loop. Everything runs on the event loop,
so the coordinator needs no locks. What it shares with the transaction
coordinator (the topic, following leadership, replay, writes as the leader) is
broker.coordinators.shell's.

A group is coordinated by the leader of its ``__consumer_offsets`` partition,
as in Kafka. The service follows that leadership in the metadata: when this
broker becomes a partition's leader (and may lead: the controller unfenced it)
it replays the partition's log into the coordinator; when it stops, it drops
those groups, and requests waiting on them are answered NOT_COORDINATOR. Writes
go to the partition as the leader's appends and are answered only once every
in-sync replica has them (acks=all, ``offsets.commit.timeout.ms``), so a
committed offset or a completed rebalance survives the leader's loss.

Transactional offset commits (TxnOffsetCommit) are appended as one
transactional batch carrying the producer's id and epoch, as the coordinator's
own write (the log checks the epoch, not sequences, and tracks the open
transaction); they stay pending until the transaction's marker lands in the
partition, when :meth:`GroupService.complete_transaction` is called. Loading a
partition replays them the same way: records of transactional batches are
pending for their producer, and each COMMIT/ABORT marker completes them;
whatever is still pending at the log end belongs to a transaction whose marker
is still to come.

KIP-848 consumer groups (``group.protocol=consumer``) share the partitions,
the writes and the timer: the service holds a
:class:`~broker.coordinators.consumer_groups.coordinator.ConsumerGroupCoordinator`
beside the classic coordinator. Replay sends the records of key versions 3-8
and 16 to it and the rest to the classic one; its stores are written as the classic
ones are (acks=all, answered once replicated); its ``tick`` runs on the same
timer; loading and unloading a partition loads and unloads both. It learns
the topics (ids, partitions, replica racks) from the metadata image on every
metadata change, and a group sees a change of its subscribed topics at its
next heartbeat. A group id is one or the other: a consumer group's committed
offsets are kept by the classic coordinator (they are the same records) but
make no classic group there. A ConsumerGroupHeartbeat joining an empty classic
group (a group known by its offsets only, or whose members all left) makes the
consumer group, which takes the id over, as Kafka upgrades an empty classic
group; a JoinGroup to an empty consumer group makes a classic one. With
``group.consumer.migration.policy=upgrade`` a consumer-protocol member joining
a Stable classic group with members converts it, its classic members staying
in the consumer group (broker/coordinators/consumer_groups/classic_members.py);
otherwise a ConsumerGroupHeartbeat to a classic group with members answers
GROUP_ID_NOT_FOUND. There is no downgrade of a group with members.

KIP-932 share groups are a third kind beside them, the same way: a
:class:`~broker.coordinators.share_groups.membership.ShareGroupCoordinator`
whose records (key versions 10-14) replay to it, whose stores are written and
answered as the others', whose ``tick`` runs on the same timer. A share
group's id is its own: a ShareGroupHeartbeat for a classic group with members
or a consumer group answers GROUP_ID_NOT_FOUND, a JoinGroup or
ConsumerGroupHeartbeat for a share group INCONSISTENT_GROUP_PROTOCOL /
GROUP_ID_NOT_FOUND, as Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from broker.clock import monotonic_ms, wall_ms
from broker.coordinators.consumer_groups.classic_members import (
    ClassicGroupView,
    ClassicJoin,
    ClassicMemberView,
    upgrade_refusal,
)
from broker.coordinators.consumer_groups.coordinator import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    HeartbeatRequest,
    HeartbeatResponse,
)
from broker.coordinators.consumer_groups.model import TopicInfo
from broker.coordinators.effects import Store, carry_out_stores_at_once
from broker.coordinators.groups.coordinator import GroupConfig, GroupCoordinator, JoinRequest, JoinResult, SyncResult
from broker.coordinators.groups.group import GroupState
from broker.coordinators.share_groups.membership import (
    ShareGroupConfig,
    ShareGroupCoordinator,
    ShareHeartbeatRequest,
    ShareHeartbeatResponse,
)
from broker.coordinators.shell import CoordinatorShell, InternalTopic
from broker.replica.leader_append import replication_outcome
from controller.topic_commands import INTERNAL_TOPICS
from protocol.consumer_group_records import is_consumer_group_key
from protocol.consumer_offsets import group_key_bytes
from protocol.errors import ErrorCode
from protocol.share_group_records import is_share_group_key

# What an offsets-partition append or its replication failed with, as the group
# APIs report it (Kafka's coordinator maps them the same way); anything else is
# UNKNOWN_SERVER_ERROR. The leader's own refusals come first: not led here (or
# the partition not loaded), a failed disk, too few in-sync replicas.
_STORE_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}
# What the log refuses a transactional write with because of the producer or its
# transaction: told to the producer as it is (Kafka passes these through too).
_PRODUCER_ERRORS = frozenset({
    ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.PRODUCER_FENCED,
    ErrorCode.INVALID_TXN_STATE,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    ErrorCode.UNKNOWN_PRODUCER_ID,
    ErrorCode.TRANSACTION_ABORTABLE,
    ErrorCode.CONCURRENT_TRANSACTIONS,
})

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
# Timers are checked at least this often even when no deadline is due sooner.
_MAX_TIMER_SLEEP_MS = 1000


class GroupService:
    def __init__(self, broker):
        self._broker = broker
        config = broker.config
        self.config = GroupConfig(
            offsets_partitions=config["offsets.topic.num.partitions"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_size=config["group.max.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
        )
        self.consumer_config = ConsumerGroupConfig(
            session_timeout_ms=config["group.consumer.session.timeout.ms"],
            heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
            max_size=config["group.consumer.max.size"],
            assignors=tuple(config["group.consumer.assignors"]),
            offsets_partitions=self.config.offsets_partitions,
        )
        self.consumer_groups = ConsumerGroupCoordinator(self.consumer_config, wall_clock_ms=wall_ms)
        self.share_config = ShareGroupConfig(
            session_timeout_ms=config["group.share.session.timeout.ms"],
            heartbeat_interval_ms=config["group.share.heartbeat.interval.ms"],
            max_size=config["group.share.max.size"],
            offsets_partitions=self.config.offsets_partitions,
        )
        self.share_groups = ShareGroupCoordinator(self.share_config)
        self.migration_policy = config["group.consumer.migration.policy"]
        self.coordinator = GroupCoordinator(
            self.config, self._new_member_id, is_consumer_group=self.is_consumer_group, wall_clock_ms=wall_ms
        )
        # The image's topics and brokers the consumer groups' topics were last taken from.
        self._topics_from: tuple[object, object] | None = None
        # Per topic, the TopicImage its TopicInfo was made from, and the racks then.
        self._topic_infos: dict[str, tuple[object, TopicInfo]] = {}
        self._topic_infos_racks: dict[int, str] | None = None
        topic = InternalTopic(
            OFFSETS_TOPIC,
            num_partitions=self.config.offsets_partitions,
            replication_factor=config["offsets.topic.replication.factor"],
            replication_factor_config="offsets.topic.replication.factor",
            configs={
                "cleanup.policy": "compact",
                "segment.bytes": str(config["offsets.topic.segment.bytes"]),
                "compression.type": "producer",
            },
        )
        self.shell = CoordinatorShell(broker, topic, self, log)
        self.commit_timeout_ms = config["offsets.commit.timeout.ms"]
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms: int | None = None
        # __consumer_offsets partitions whose groups are in the coordinator, with
        # the leader epoch they were loaded at.
        self.loaded = self.shell.loaded
        # partition -> its log end after this broker's last append to it: what
        # a request must see replicated before it is answered.
        self._written_offsets: dict[int, int] = {}

    @staticmethod
    def now_ms() -> int:
        """The coordinators' clock: sessions, rebalance and join timeouts, timers.
        Monotonic, so a wall clock stepped by minutes neither expires every
        member at once nor keeps a dead one."""
        return monotonic_ms()

    @staticmethod
    def wall_ms() -> int:
        """Record timestamps, offset commit and expiry timestamps, offsets.retention."""
        return wall_ms()

    @staticmethod
    def _new_member_id(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4()}"

    # ----------------------------------------------------------------- the internal topic

    def offsets_topic_exists(self) -> bool:
        return self.shell.topic_exists()

    async def ensure_offsets_topic(self) -> ErrorCode:
        """Create ``__consumer_offsets`` if it is missing (Kafka does it on the first
        FindCoordinator for a group, or the first Metadata request naming it)."""
        return await self.shell.ensure_topic()

    def coordinator_of(self, group_id: str) -> tuple[ErrorCode, int]:
        """(error, broker id) of the group's coordinator: the leader of its
        ``__consumer_offsets`` partition, as in Kafka. COORDINATOR_NOT_AVAILABLE
        while that partition has no leader or its leader is not serving."""
        return self.shell.leader_of(self.coordinator.partition_for(group_id))

    def not_coordinator(self, group_id: str) -> ErrorCode | None:
        """The error for a group request that reached a broker other than the
        group's coordinator (NOT_COORDINATOR: the client looks it up again; or
        COORDINATOR_LOAD_IN_PROGRESS while this broker is loading the group's
        partition), or None when this broker coordinates the group. Before
        ``__consumer_offsets`` exists there are no groups anywhere, and reads are
        answered here."""
        if not self.offsets_topic_exists():
            return None
        return self.shell.not_coordinator(self.coordinator.partition_for(group_id))

    def not_writable(self, group_id: str) -> ErrorCode | None:
        """``not_coordinator`` for a request that writes: it needs the topic."""
        if not self.offsets_topic_exists():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return self.not_coordinator(group_id)

    # ----------------------------------------------------------------- writes

    def execute(self, effects: list[Store]) -> None:
        """Carry out the coordinator's stores in order, each reported back as soon
        as it is appended (its replication is waited for before the answer)."""
        carry_out_stores_at_once(effects, self._write, self.coordinator.store_done)

    def execute_share(self, effects: list[Store]) -> None:
        """``execute`` for the share group coordinator's stores."""
        carry_out_stores_at_once(effects, self._write, self.share_groups.store_done)

    def execute_consumer(self, effects: list[Store]) -> None:
        """``execute`` for the consumer group coordinator's stores."""
        carry_out_stores_at_once(effects, self._write, self.consumer_groups.store_done)

    def run(self, operation, *args):
        """Run a coordinator operation that answers through its last argument, a
        reply; carry out its stores and return its answer (which the outcomes
        reported at once have made known)."""
        answers = []
        self.execute(operation(*args, answers.append))
        (answer,) = answers
        return answer

    def _write(self, store: Store) -> ErrorCode:
        """Append one store's records; the error the client is told if that fails."""
        partition = store.partition
        written = self.shell.write_store(store, self.wall_ms())
        error = written.error
        if error == ErrorCode.NONE:
            self._written_offsets[partition] = written.last_offset + 1
            return error
        if store.producer_id >= 0 and error in _PRODUCER_ERRORS:
            return error
        if written.refused_by_log:
            # Kafka tells the client to retry elsewhere or later, never the storage detail.
            log.error("appending to %s-%d failed: %s", OFFSETS_TOPIC, partition, written.message)
        return _STORE_ERRORS.get(error, ErrorCode.UNKNOWN_SERVER_ERROR)

    async def replicated(self, group_id: str) -> ErrorCode:
        """Wait until every in-sync replica has what this broker last wrote to the
        group's partition; the error to answer with if that cannot be."""
        partition = self.coordinator.partition_for(group_id)
        if partition not in self.loaded:
            # Unloaded while the request waited (a leadership change): what it
            # wrote may never reach the new leader, and this is not the coordinator.
            return ErrorCode.NOT_COORDINATOR
        required_offset = self._written_offsets.get(partition)
        if required_offset is None:
            return ErrorCode.NONE
        replicas = self._broker.replicas
        key = (OFFSETS_TOPIC, partition)
        leader = replicas.leaders.get(key)
        if leader is None or self.loaded.get(partition) != leader.leader_epoch:
            return ErrorCode.NOT_COORDINATOR
        outcome = await replication_outcome(replicas, key, leader, required_offset, self.commit_timeout_ms)
        if outcome == ErrorCode.NONE:
            if self._written_offsets.get(partition) == required_offset:
                del self._written_offsets[partition]
            return ErrorCode.NONE
        return _STORE_ERRORS.get(outcome, ErrorCode.UNKNOWN_SERVER_ERROR)

    async def answer_after_replication(self, group_id: str, results: dict) -> dict:
        """Per-partition commit results, once every in-sync replica holds what the
        commit wrote; the partitions that were written get the replication error
        if that failed."""
        if any(error == ErrorCode.NONE for error in results.values()):
            replicated = await self.replicated(group_id)
            if replicated != ErrorCode.NONE:
                return {tp: replicated if error == ErrorCode.NONE else error for tp, error in results.items()}
        return results

    def complete_transaction(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` is in ``offsets_partition`` (and
        replicated): its pending offsets there take effect or go. A partition not
        loaded here replays the marker when it is loaded."""
        if offsets_partition in self.loaded:
            self.coordinator.complete_transaction(offsets_partition, producer_id, commit)

    # ----------------------------------------------------------------- leadership

    def follow_leadership(self) -> None:
        """Load the groups of the ``__consumer_offsets`` partitions this broker now
        leads (at a new leader epoch) and drop those of partitions it stopped leading.
        Called on every metadata change: the consumer groups' topics follow it too."""
        self._refresh_topics()
        self.shell.follow_leadership()

    def _refresh_topics(self) -> None:
        """Give the consumer group coordinator the image's topics: ids, partitions
        and the racks of each partition's replicas. Internal topics are left out:
        a regular expression never subscribes to them, as in Kafka."""
        image = self._broker.image
        if self._topics_from is not None and self._topics_from[0] is image.topics and self._topics_from[1] is image.brokers:
            return
        self._topics_from = (image.topics, image.brokers)
        racks = {b.broker_id: b.rack for b in image.brokers.values() if b.rack}
        # Each topic's info is made again only when its image or the racks changed:
        # an image change (a leader election, say) replaces the changed topics'
        # objects only, and remaking every topic's racks on each of them held the
        # loop for most of a second with 100,000 partitions.
        made_before = self._topic_infos if self._topic_infos_racks == racks else {}
        self._topic_infos_racks = racks
        topics = {}
        infos = {}
        # Partitions share few replica lists (a handful per broker set): each
        # list's racks are made once (the first view of 100,000 partitions, at
        # a start, held the loop for 1.6 s making one set per partition).
        racks_by_replicas: dict[tuple, frozenset] = {}

        def racks_of(replicas) -> frozenset:
            found = racks_by_replicas.get(replicas)
            if found is None:
                found = racks_by_replicas[replicas] = frozenset(racks[r] for r in replicas if r in racks)
            return found

        for name, topic in image.topics.items():
            if name in INTERNAL_TOPICS:
                continue
            before = made_before.get(name)
            if before is not None and before[0] is topic:
                info = before[1]
            else:
                partitions = topic.partitions
                partition_racks = tuple(racks_of(tuple(partitions[p].replicas)) for p in sorted(partitions))
                info = TopicInfo(topic.topic_id, name, partition_racks)
            topics[name] = info
            infos[name] = (topic, info)
        self._topic_infos = infos
        self.consumer_groups.set_topics(topics, image.offset)
        self.share_groups.set_topics({name: (info.topic_id, info.partition_count) for name, info in topics.items()})

    def is_consumer_group(self, group_id: str) -> bool:
        return group_id in self.consumer_groups.groups

    def is_share_group(self, group_id: str) -> bool:
        return group_id in self.share_groups.groups

    # What the shell replays and the leadership changes it makes.

    def replay_record(self, partition: int, producer_id: int, key, value) -> None:
        if is_consumer_group_key(key):
            self.consumer_groups.load_record(key, value)
        elif is_share_group_key(key):
            self.share_groups.load_record(key, value)
        else:
            self.coordinator.load_record(key, value, producer_id)

    def replay_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        self.coordinator.complete_transaction(partition, producer_id, commit)

    def partition_loaded(self, partition: int, epoch: int, records: int) -> None:
        # Consumer groups first: the classic coordinator makes no group of their offsets.
        self.consumer_groups.finish_loading(self.now_ms(), partition)
        self.share_groups.finish_loading(self.now_ms(), partition)
        self.coordinator.finish_loading(self.now_ms())
        if records:
            partition_for = self.coordinator.partition_for
            groups = sum(1 for group_id in self.coordinator.groups if partition_for(group_id) == partition)
            consumer = sum(1 for group_id in self.consumer_groups.groups if partition_for(group_id) == partition)
            log.info(
                "groups: loaded %s-%d at leader epoch %d: %d records, %d classic groups, %d consumer groups",
                OFFSETS_TOPIC, partition, epoch, records, groups, consumer,
            )  # fmt: skip
        self.after_operation()

    def partition_unloaded(self, partition: int, epoch: int) -> None:
        self._written_offsets.pop(partition, None)
        dropped = self.coordinator.unload_partition(partition)
        self.consumer_groups.unload_partition(partition)
        self.share_groups.unload_partition(partition)
        log.info("groups: %s-%d no longer led here at epoch %d: %d groups unloaded", OFFSETS_TOPIC, partition, epoch, dropped)

    # ----------------------------------------------------------------- timers

    def after_operation(self, group_id: str | None = None) -> None:
        """Re-arm the timer if ``group_id``'s (default: any group's) next deadline is
        earlier than it. Operations that only push deadlines later (Heartbeat,
        OffsetCommit) need not call this: the timer fires at least once a second."""
        loop = asyncio.get_running_loop()
        deadlines = [
            self.coordinator.next_deadline_ms(None if group_id is None else [group_id]),
            self.consumer_groups.next_deadline_ms(),
            self.share_groups.next_deadline_ms(),
        ]
        deadline_ms = min((d for d in deadlines if d is not None), default=None)
        now_ms = self.now_ms()
        wake_ms = now_ms + _MAX_TIMER_SLEEP_MS if deadline_ms is None else min(deadline_ms, now_ms + _MAX_TIMER_SLEEP_MS)
        if self._timer is not None and self._timer_at_ms is not None and self._timer_at_ms <= wake_ms:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at_ms = wake_ms
        self._timer = loop.call_later(max(wake_ms - now_ms, 0) / 1000, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at_ms = None
        try:
            self.execute(self.coordinator.tick(self.now_ms()))
        except Exception:  # keep the timer alive; log the bug
            log.exception("group coordinator tick failed")
        try:
            self.execute_consumer(self.consumer_groups.tick(self.now_ms()))
        except Exception:  # keep the timer alive; log the bug
            log.exception("consumer group coordinator tick failed")
        try:
            self.execute_share(self.share_groups.tick(self.now_ms()))
        except Exception:  # keep the timer alive; log the bug
            log.exception("share group coordinator tick failed")
        self.after_operation()

    def consumer_group_topics(self, group_id: str) -> set[str]:
        """The topics a consumer group's members subscribe to (names and resolved
        regular expressions), among the image's topics."""
        return self.consumer_groups.groups[group_id].subscribed_topic_names() & self.consumer_groups.topics.keys()

    def expire_offsets(self) -> None:
        """Offset retention for both kinds of group; then, as Kafka does, an empty
        consumer group left with no offsets is deleted."""
        self._refresh_topics()
        topics = {group_id: self.consumer_group_topics(group_id) for group_id in self.consumer_groups.groups}
        # Commit timestamps against the wall clock, as Kafka's offsets.retention.
        expired = self.run(self.coordinator.expire_offsets, self.wall_ms())
        expired += self.run(self.coordinator.expire_consumer_group_offsets, self.wall_ms(), topics)
        if expired:
            log.info("expired %d committed offsets", expired)
        for group_id in self.consumer_groups.empty_group_ids():
            if not self.coordinator.has_offsets(group_id):
                error = self._run_consumer(self.consumer_groups.delete_group, group_id)
                if error == ErrorCode.NONE:
                    log.info("groups: removed empty consumer group %s with no offsets left", group_id)

    def _run_consumer(self, operation, *args):
        """``run`` for an operation of the consumer group coordinator."""
        answers = []
        self.execute_consumer(operation(*args, answers.append))
        (answer,) = answers
        return answer

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """DeleteGroups of groups this broker coordinates: classic ones by the
        classic coordinator, share groups by theirs; a consumer group (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP
        while it has members) loses its offsets' records first, then its own, as
        Kafka writes them. The outcome of each store is known; the caller waits
        for replication."""
        consumer = [g for g in group_ids if self.is_consumer_group(g)]
        share = [g for g in group_ids if self.is_share_group(g)]
        results = self.run(self.coordinator.delete_groups, self.now_ms(), [g for g in group_ids if g not in consumer and g not in share])
        for group_id in share:  # its share-partition state is deleted first (broker/handlers/delete_groups.py)
            answers: list[ErrorCode] = []
            self.execute_share(self.share_groups.delete_group(group_id, answers.append))
            results[group_id] = answers[0]
        for group_id in consumer:
            if self.consumer_groups.groups[group_id].members:
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
                continue
            error = self.run(self.coordinator.delete_all_offsets, group_id)
            if error == ErrorCode.NONE:
                error = self._run_consumer(self.consumer_groups.delete_group, group_id)
            results[group_id] = error
        return results

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]):
        """OffsetDelete: (group error, error of each partition). A consumer group's
        offsets of the topics it subscribes to answer GROUP_SUBSCRIBED_TO_TOPIC."""
        if self.is_consumer_group(group_id):
            self._refresh_topics()
            return self.run(self.coordinator.delete_consumer_group_offsets, group_id, partitions, self.consumer_group_topics(group_id))
        return self.run(self.coordinator.delete_offsets, group_id, partitions)

    def start(self) -> None:
        self.after_operation()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.coordinator.shutdown()

    # ----------------------------------------------------------------- waiting requests

    async def join_group(self, request: JoinRequest):
        # A group's state is stored in __consumer_offsets; Kafka creates it on
        # the first FindCoordinator, but a client may skip that.
        await self.ensure_offsets_topic()
        error = self.not_writable(request.group_id)
        if error is not None:
            return JoinResult(error, member_id=request.member_id)
        if self.is_share_group(request.group_id):
            # No classic members in a share group, as Kafka answers a protocol the
            # group does not support.
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id="")
        if self.is_consumer_group(request.group_id):
            if self.consumer_groups.groups[request.group_id].members:
                # A classic member in a consumer group, as Kafka takes it in.
                return await self.classic_join_consumer_group(request)
            # An empty consumer group becomes a classic one (its offsets stay), as
            # Kafka converts an empty group whatever the migration policy.
            error = self._run_consumer(self.consumer_groups.delete_group, request.group_id)
            if error != ErrorCode.NONE:
                return JoinResult(error, member_id=request.member_id)
            log.info("groups: the empty consumer group %s is a classic group now", request.group_id)
        future = asyncio.get_running_loop().create_future()
        self.execute(self.coordinator.join_group(self.now_ms(), request, _resolver(future)))
        self.after_operation(request.group_id)
        result = await future
        if result.error == ErrorCode.NONE:
            error = await self.replicated(request.group_id)
            if error != ErrorCode.NONE:
                return JoinResult(error, member_id=request.member_id)
        return result

    async def sync_group(self, group_id: str, *args):
        await self.ensure_offsets_topic()
        error = self.not_writable(group_id)
        if error is not None:
            return SyncResult(error)
        if self.is_consumer_group(group_id):
            generation_id, member_id, _instance_id, protocol_type, protocol_name, _assignments = args
            error, name, assignment = self.consumer_groups.classic_sync(
                self.now_ms(), group_id, generation_id, member_id, protocol_type, protocol_name)
            if error == ErrorCode.NONE:
                error = await self.replicated(group_id)
            if error != ErrorCode.NONE:
                return SyncResult(error)
            return SyncResult(ErrorCode.NONE, "consumer", name, assignment)
        future = asyncio.get_running_loop().create_future()
        self.execute(self.coordinator.sync_group(self.now_ms(), group_id, *args, _resolver(future)))
        self.after_operation(group_id)
        result = await future
        if result.error == ErrorCode.NONE:
            # The assignment is answered once it is stored on every in-sync replica.
            error = await self.replicated(group_id)
            if error != ErrorCode.NONE:
                return SyncResult(error)
        return result

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        """ConsumerGroupHeartbeat, answered once what it stored is on every in-sync replica."""
        await self.ensure_offsets_topic()
        error = self.not_writable(request.group_id)
        if error is not None:
            return HeartbeatResponse(error)
        classic = self.coordinator.groups.get(request.group_id)
        if self.is_share_group(request.group_id):
            return HeartbeatResponse(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a consumer group.")
        upgrading = None
        self._refresh_topics()
        if classic is not None and (not classic.is_(GroupState.EMPTY) or classic.pending_members):
            refusal = self._upgrade_refusal(classic, request)
            if refusal is not None:
                return refusal
            upgrading = self._classic_view(classic)
        answers: list[HeartbeatResponse] = []
        self.execute_consumer(self.consumer_groups.heartbeat(
            self.now_ms(), request, answers.append, upgrading, (group_key_bytes(request.group_id), None)))
        (response,) = answers
        if response.error != ErrorCode.NONE:
            return response
        if classic is not None and self.is_consumer_group(request.group_id):
            # The classic group (its offsets stay) is the consumer group now.
            self.coordinator.forget_empty_group(request.group_id)
            if upgrading is not None:
                log.info("groups: classic group %s upgraded to a consumer group with its %d members",
                         request.group_id, len(upgrading.members))
        self.after_operation()
        error = await self.replicated(request.group_id)
        if error != ErrorCode.NONE:
            return HeartbeatResponse(error)
        return response

    async def share_group_heartbeat(self, request: ShareHeartbeatRequest) -> ShareHeartbeatResponse:
        """ShareGroupHeartbeat, answered once what it stored is on every in-sync replica."""
        await self.ensure_offsets_topic()
        error = self.not_writable(request.group_id)
        if error is not None:
            return ShareHeartbeatResponse(error, member_epoch=-1)
        classic = self.coordinator.groups.get(request.group_id)
        if (classic is not None and (not classic.is_(GroupState.EMPTY) or classic.pending_members)) or self.is_consumer_group(request.group_id):
            return ShareHeartbeatResponse(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a share group.", member_epoch=-1)
        self._refresh_topics()
        answers: list[ShareHeartbeatResponse] = []
        self.execute_share(self.share_groups.heartbeat(self.now_ms(), request, answers.append))
        (response,) = answers
        if response.error != ErrorCode.NONE:
            return response
        if classic is not None and self.is_share_group(request.group_id):
            self.coordinator.forget_empty_group(request.group_id)
        self.after_operation()
        error = await self.replicated(request.group_id)
        if error != ErrorCode.NONE:
            return ShareHeartbeatResponse(error, member_epoch=-1)
        return response

    def _upgrade_refusal(self, classic, request: HeartbeatRequest) -> HeartbeatResponse | None:
        """The answer to a consumer-protocol member joining a classic group with
        members when the group is not converted (Kafka's validateOnlineUpgrade
        answers GROUP_ID_NOT_FOUND), or None to convert it."""
        group_id = request.group_id
        not_consumer = HeartbeatResponse(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if self.migration_policy not in ("upgrade", "bidirectional") or request.member_epoch != 0:
            return not_consumer
        if classic.protocol_type != "consumer":
            log.info("groups: classic group %s not upgraded: it does not use the consumer embedded protocol", group_id)
            return not_consumer
        refusal = upgrade_refusal(self._classic_view(classic), self.consumer_config.max_size)
        if refusal is not None:
            log.info("groups: classic group %s not upgraded: %s", group_id, refusal)
            return not_consumer
        if not classic.is_(GroupState.STABLE) or classic.pending_members:
            # Its members are between JoinGroup and SyncGroup: their assignments are
            # about to change. A retriable answer; the member asks again shortly.
            return HeartbeatResponse(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                     f"Classic group {group_id} is rebalancing; it is upgraded once it is stable.")
        return None

    @staticmethod
    def _classic_view(classic) -> ClassicGroupView:
        return ClassicGroupView(
            classic.group_id,
            classic.generation_id,
            classic.protocol_name or "",
            tuple(
                ClassicMemberView(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                                  m.rebalance_timeout_ms, tuple(m.protocols), m.assignment)
                for m in classic.members.values()
            ),
        )

    # ----------------------------------------------------------------- classic members of consumer groups

    async def classic_join_consumer_group(self, request: JoinRequest) -> JoinResult:
        """JoinGroup of a classic member to a consumer group with members."""
        self._refresh_topics()
        answers = []
        self.execute_consumer(self.consumer_groups.classic_join(self.now_ms(), ClassicJoin(
            request.group_id, request.member_id, request.group_instance_id, request.client_id, request.client_host,
            request.session_timeout_ms, request.rebalance_timeout_ms, request.protocol_type, tuple(request.protocols),
            request.require_known_member_id,
        ), answers.append))
        (answer,) = answers
        self.after_operation()
        if answer.error != ErrorCode.NONE:
            return JoinResult(answer.error, member_id=answer.member_id)
        error = await self.replicated(request.group_id)
        if error != ErrorCode.NONE:
            return JoinResult(error, member_id=answer.member_id)
        # It leads nothing (no members to assign to): the server assigns.
        return JoinResult(ErrorCode.NONE, member_id=answer.member_id, generation_id=answer.generation_id,
                          protocol_type="consumer", protocol_name=answer.protocol_name, leader="", members=[])

    def classic_heartbeat(self, group_id: str, generation_id: int, member_id: str) -> ErrorCode:
        return self.consumer_groups.classic_heartbeat(self.now_ms(), group_id, generation_id, member_id)

    async def classic_leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        error, errors = self._run_consumer(self.consumer_groups.classic_leave, self.now_ms(), group_id, leaving)
        if error == ErrorCode.NONE and any(e == ErrorCode.NONE for e in errors):
            error = await self.replicated(group_id)
        return error, errors

    def consumer_member_error(
        self, group_id: str, member_id: str | None, member_epoch: int, commit_version: int | None, transactional: bool = False
    ) -> ErrorCode | None:
        """Whether a consumer group's member may commit (``commit_version``: the
        OffsetCommit version) or fetch offsets, as Kafka's ConsumerGroup checks it:
        a commit with no epoch (-1) is accepted while the group has no members, a
        fetch with neither member id nor epoch always; otherwise the member must be
        in the group (UNKNOWN_MEMBER_ID) at that epoch (FENCED_MEMBER_EPOCH ahead of
        it, STALE_MEMBER_EPOCH behind), and commit with OffsetCommit v9+
        (UNSUPPORTED_VERSION; a ``transactional`` commit, TxnOffsetCommit, at any
        version)."""
        group = self.consumer_groups.groups[group_id]
        if commit_version is not None and member_epoch < 0 and not group.members:
            return None
        if commit_version is None and member_id is None and member_epoch < 0:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member.classic is not None:
            # A classic member commits with its member epoch as its generation, at any version.
            return None if member_epoch == member.member_epoch else ErrorCode.ILLEGAL_GENERATION
        if commit_version is not None and commit_version < 9 and not transactional:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch > member.member_epoch:
            return ErrorCode.FENCED_MEMBER_EPOCH
        if member_epoch < member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None


def _resolver(future: asyncio.Future):
    def resolve(result) -> None:
        if not future.done():
            future.set_result(result)

    return resolve
