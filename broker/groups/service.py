"""The group coordinator's asyncio shell: timers, futures and ``__consumer_offsets``.

Owns the one :class:`~broker.groups.coordinator.GroupCoordinator` of the
broker. It creates the internal topic ``__consumer_offsets`` (compacted,
``offsets.topic.num.partitions`` partitions) the first time a group needs it,
replays it into the coordinator at start-up, appends the coordinator's records
to it, and fires the coordinator's deadlines from one timer on the event loop.
Everything runs on the event loop, so the coordinator needs no locks.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from broker.groups.coordinator import GroupConfig, GroupCoordinator, JoinRequest, JoinResult, StoreError, SyncResult
from controller.topic_commands import CreateTopicSpec
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import build_batch, decode_batch_records, iter_batches
from storage.log import AppendError

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
        self.coordinator = GroupCoordinator(self.config, self._store, self._new_member_id)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms: int | None = None
        self._loaded = False

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    @staticmethod
    def _new_member_id(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4()}"

    # ----------------------------------------------------------------- the internal topic

    def offsets_topic_exists(self) -> bool:
        return OFFSETS_TOPIC in self._broker.image.topics

    async def ensure_offsets_topic(self) -> ErrorCode:
        """Create ``__consumer_offsets`` if it is missing (Kafka does it on the first
        FindCoordinator for a group, or the first Metadata request naming it)."""
        if self.offsets_topic_exists():
            return ErrorCode.NONE
        config = self._broker.config
        spec = CreateTopicSpec(
            OFFSETS_TOPIC,
            num_partitions=self.config.offsets_partitions,
            replication_factor=1,
            configs={
                "cleanup.policy": "compact",
                "segment.bytes": str(config["offsets.topic.segment.bytes"]),
                "compression.type": "producer",
            },
        )
        (result,) = await self._broker.controller.create_topics([spec], internal=True)
        if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.error("cannot create %s: %s %s", OFFSETS_TOPIC, result.error_code.name, result.error_message)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        log.info("created %s with %d partitions", OFFSETS_TOPIC, self.config.offsets_partitions)
        return ErrorCode.NONE

    def coordinator_of(self, group_id: str) -> tuple[ErrorCode, int]:
        """(error, broker id) of the group's coordinator: the leader of its
        ``__consumer_offsets`` partition, as in Kafka. COORDINATOR_NOT_AVAILABLE
        while that partition has no leader or its leader is not serving."""
        topic = self._broker.image.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1
        partition = topic.partitions.get(self.coordinator.partition_for(group_id))
        if partition is None or partition.leader < 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1
        return ErrorCode.NONE, partition.leader

    def not_coordinator(self, group_id: str) -> ErrorCode | None:
        """The error for a group request that reached a broker other than the
        group's coordinator (NOT_COORDINATOR: the client looks it up again), or
        None when this broker coordinates the group. Before ``__consumer_offsets``
        exists the request is served here, which creates it."""
        if not self.offsets_topic_exists():
            return None
        error, leader = self.coordinator_of(group_id)
        if error != ErrorCode.NONE:
            return error
        return None if leader == self._broker.node_id else ErrorCode.NOT_COORDINATOR

    def _store(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        if not self.offsets_topic_exists():
            # Created by the group's FindCoordinator before any write can come.
            raise StoreError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        plog = self._broker.partition_log(OFFSETS_TOPIC, partition)
        if plog is None:
            raise StoreError(ErrorCode.NOT_COORDINATOR, f"{OFFSETS_TOPIC}-{partition} is not hosted here")
        now_ms = self.now_ms()
        batch = build_batch([(key, value, [], now_ms) for key, value in records])
        topic = self._broker.image.topics[OFFSETS_TOPIC]
        try:
            plog.append(batch, leader_epoch=topic.partitions[partition].leader_epoch)
        except AppendError as exc:
            # Kafka tells the client to retry elsewhere or later, never the storage detail.
            log.error("appending to %s-%d failed: %s", OFFSETS_TOPIC, partition, exc)
            code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE if exc.error_code == ErrorCode.MESSAGE_TOO_LARGE else ErrorCode.UNKNOWN_SERVER_ERROR
            raise StoreError(code, str(exc)) from None
        except OSError as exc:
            log.error("appending to %s-%d failed: %s", OFFSETS_TOPIC, partition, exc)
            raise StoreError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)) from None
        self._broker.partition_watch.notify((OFFSETS_TOPIC, partition))

    def load(self) -> None:
        """Replay ``__consumer_offsets`` into the coordinator (at start-up, before serving)."""
        now_ms = self.now_ms()
        records = 0
        if self.offsets_topic_exists():
            for partition in sorted(self._broker.image.topics[OFFSETS_TOPIC].partitions):
                plog = self._broker.partition_log(OFFSETS_TOPIC, partition)
                if plog is None:
                    continue
                records += self._replay_partition(plog)
        self.coordinator.finish_loading(now_ms)
        self._loaded = True
        if records:
            log.info(
                "groups: replayed %d records of %s: %d groups, %d with committed offsets",
                records, OFFSETS_TOPIC, len(self.coordinator.groups), len(self.coordinator.offsets),
            )

    def _replay_partition(self, plog) -> int:
        count = 0
        offset = plog.log_start_offset
        while offset < plog.log_end_offset:
            data = plog.read(offset, 1 << 20)
            if not data:
                break
            for position, size, header in iter_batches(data):
                last = header.base_offset + header.last_offset_delta
                if last < offset or header.is_control:
                    offset = max(offset, last + 1)
                    continue
                _, batch_records = decode_batch_records(data[position : position + size])
                for record in batch_records:
                    if record.offset < offset or record.key is None:
                        continue
                    try:
                        self.coordinator.load_record(record.key, record.value)
                    except ProtocolError as exc:  # one bad record must not stop the broker from starting
                        log.warning("skipping unreadable %s record at offset %d: %s", OFFSETS_TOPIC, record.offset, exc)
                    count += 1
                offset = last + 1
        return count

    # ----------------------------------------------------------------- timers

    def after_operation(self, group_id: str | None = None) -> None:
        """Re-arm the timer if ``group_id``'s (default: any group's) next deadline is
        earlier than it. Operations that only push deadlines later (Heartbeat,
        OffsetCommit) need not call this: the timer fires at least once a second."""
        loop = asyncio.get_running_loop()
        deadline_ms = self.coordinator.next_deadline_ms(None if group_id is None else [group_id])
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
            self.coordinator.tick(self.now_ms())
        except Exception:  # keep the timer alive; log the bug
            log.exception("group coordinator tick failed")
        self.after_operation()

    def expire_offsets(self) -> None:
        expired = self.coordinator.expire_offsets(self.now_ms())
        if expired:
            log.info("expired %d committed offsets", expired)

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
        error = self.not_coordinator(request.group_id)
        if error is not None:
            return JoinResult(error, member_id=request.member_id)
        future = asyncio.get_running_loop().create_future()
        self.coordinator.join_group(self.now_ms(), request, _resolver(future))
        self.after_operation(request.group_id)
        return await future

    async def sync_group(self, group_id: str, *args):
        await self.ensure_offsets_topic()
        error = self.not_coordinator(group_id)
        if error is not None:
            return SyncResult(error)
        future = asyncio.get_running_loop().create_future()
        self.coordinator.sync_group(self.now_ms(), group_id, *args, _resolver(future))
        self.after_operation(group_id)
        return await future


def _resolver(future: asyncio.Future):
    def resolve(result) -> None:
        if not future.done():
            future.set_result(result)

    return resolve
