"""Mirror fetchers: the destination's leaders copy their mirror partitions from a link's source.

One :class:`LinkMirrorFetcher` per cluster link on each destination broker
covers every mirror partition this broker leads whose mirror copies (ACTIVE,
PENDING_PROMOTE) or is stopping (PENDING_FAILOVER). It reads the source as a
consumer does (broker/links/source.py's client: ``replica_id`` -1,
read_uncommitted, so up to the source's high watermark with transaction
markers): one Fetch per source partition leader covering its partitions,
with an incremental fetch session when the source keeps one, by topic id
(v13+) or by name (older sources). Fetched batches go into the local log
unchanged through ``ReplicaManager.mirror_appended``; the destination's
followers then replicate them as for any topic (their path does not know
mirrors).

What to do with each answer is decided by :mod:`replication.mirror_core`
(append, start over at the source's log start, stop on a divergence, back
off, check a new source epoch first); this module carries it out:
OffsetForLeaderEpoch and ListOffsets on the source when the core asks (and,
where the source cannot place an epoch, a Fetch of our last batch to compare),
MirrorPartitionsStopped (16007) to the active controller once a stopping
partition's in-sync replicas hold everything copied, and UpdateMirrorTopic
(16008, state FAILED with the reason) when the source truncated records
already copied.

broker/links/mirrors.py's ``MirrorManager`` starts and stops the fetchers
from the metadata image and sends what they report to the controller.

Throttle: a mirror partition listed in its topic's
``follower.replication.throttled.replicas`` for this broker is held to the
broker's ``follower.replication.throttled.rate``, as the replica fetcher
does (the mirror fetch is this cluster's inbound replication).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import NamedTuple

from broker.clock import monotonic_ms
from broker.links.source import (
    NoCommonVersion,
    SourceCluster,
    SourceConfigError,
    SourceUnavailable,
    positive_int_setting,
)
from broker.links.source_fetch import CONSUMER_REPLICA_ID, FetchWanted, consumer_fetch_request, fetched_partitions
from controller.metadata.image import ClusterLink
from controller.metadata.records import (
    MIRROR_ACTIVE,
    MIRROR_PENDING_FAILOVER,
    MIRROR_PENDING_PROMOTE,
)
from protocol.errors import ErrorCode
from protocol.records import iter_batches
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes
from replication.fetch_session import FetchSessionBuilder
from replication.mirror_core import (
    Append,
    Backoff,
    Diverged,
    MirrorPartition,
    StartOver,
    stop_mark,
)
from replication.throttle import FOLLOWER_THROTTLED_RATE, FOLLOWER_THROTTLED_REPLICAS
from storage.append_checks import AppendError

log = logging.getLogger(__name__)

FETCH = APIS_BY_NAME["Fetch"]
LIST_OFFSETS = APIS_BY_NAME["ListOffsets"]
OFFSET_FOR_LEADER_EPOCH = APIS_BY_NAME["OffsetForLeaderEpoch"]
MIRROR_PARTITIONS_STOPPED = APIS_BY_NAME["MirrorPartitionsStopped"]
_LO = struct_classes(LIST_OFFSETS.request)
_OE = struct_classes(OFFSET_FOR_LEADER_EPOCH.request)
_MS = struct_classes(MIRROR_PARTITIONS_STOPPED.request)

# States in which the leader copies (or, PENDING_FAILOVER, stops and reports).
FETCHER_STATES = frozenset({MIRROR_ACTIVE, MIRROR_PENDING_PROMOTE, MIRROR_PENDING_FAILOVER})
FETCH_MAX_WAIT_MS = 500
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
# How long a fetcher waits before it asks the source again after an error.
DEFAULT_BACKOFF_MS = 500
THROTTLED_WAIT_MS = 100
_SESSION_ERRORS = {
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
    ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _last_epoch(plog) -> int:
    return plog.leader_epochs[-1][0] if plog.leader_epochs else -1


def _max_producer_id(plog) -> int:
    return max(plog.producer_state.producers, default=-1)


class MirrorSpec(NamedTuple):
    """A mirror partition this broker leads, as the image gives it."""

    topic_id: uuid.UUID
    source_topic: str
    state: int
    leader_epoch: int


@dataclass
class _Entry:
    """The fetcher's view of one mirror partition it copies."""

    key: tuple[str, int]
    spec: MirrorSpec
    core: MirrorPartition
    backoff_until: float = 0.0
    failure_sent: bool = False


class LinkMirrorFetcher:
    """Copies the mirror partitions of one link that this broker leads."""

    def __init__(self, manager, link: ClusterLink):
        """``manager``: the broker's ``MirrorManager`` (broker/links/mirrors.py),
        which sends the stops and failures to the controller."""
        self.manager = manager
        self.broker = manager.broker
        self.link = link
        config = self.broker.config
        self.partition_max_bytes = config["replica.fetch.max.bytes"]
        self.response_max_bytes = config["replica.fetch.response.max.bytes"]
        self.config_error: str | None = None
        try:
            # The Kafka client's setting: how long to wait before asking the source again.
            self.backoff_ms = positive_int_setting(link.configs, "retry.backoff.ms", DEFAULT_BACKOFF_MS)
        except SourceConfigError as exc:
            self.backoff_ms = DEFAULT_BACKOFF_MS
            self.config_error = f"link {link.name}: {exc}"
        self.entries: dict[tuple[str, int], _Entry] = {}
        self.source: SourceCluster | None = None
        self._sessions: dict[int, FetchSessionBuilder] = {}
        # From the source's Metadata: (topic, partition) -> leader id; topic -> id, and back.
        self._leaders: dict[tuple[str, int], int] = {}
        self._source_topic_ids: dict[str, uuid.UUID] = {}
        self._source_topic_names: dict[uuid.UUID, str] = {}
        self._missing: dict[tuple[str, int], ErrorCode] = {}
        self._metadata_stale = True
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None

    # ----------------------------------------------------------------- partitions

    def update(self, wanted: dict[tuple[str, int], MirrorSpec]) -> None:
        """Copy exactly ``wanted`` from now on: a partition new here, or led at a
        new epoch, starts a new leadership (checked against the source first
        when its log holds records); a promote applies to the next round. A
        failover does not wait for a round in flight: a source that went
        silent (a network cut) would hold it for the whole request timeout, so
        the round is abandoned and a new one stops the partitions."""
        now_ms = _now_ms()
        failover = False
        for key in [k for k in self.entries if k not in wanted]:
            del self.entries[key]
        for key, spec in wanted.items():
            entry = self.entries.get(key)
            if entry is not None and entry.spec.leader_epoch == spec.leader_epoch and entry.spec.topic_id == spec.topic_id:
                failover |= spec.state == MIRROR_PENDING_FAILOVER and entry.spec.state != MIRROR_PENDING_FAILOVER
                entry.spec = spec
                continue
            plog = self.broker.partition_log(*key)
            log_end = plog.log_end_offset if plog is not None else 0
            last_epoch = _last_epoch(plog) if plog is not None else -1
            self.entries[key] = _Entry(key, spec, MirrorPartition.for_leadership(key[0], key[1], log_end, last_epoch, now_ms))
        self._wakeup.set()
        if failover and self._task is not None:
            self._task.cancel()
            # The abandoned requests' answers are lost: every session starts over.
            self._sessions.clear()
            self._task = None
            self.start()

    # ----------------------------------------------------------------- task

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"mirror fetcher {self.link.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        if self.source is not None:
            self.source.close()
            self.source = None

    async def _run(self) -> None:
        while True:
            try:
                waited = await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug of ours must not end mirroring for good
                log.exception("mirror fetcher of link %s failed", self.link.name)
                waited = False
            if waited is False:
                await asyncio.sleep(self.backoff_ms / 1000)

    def _client(self) -> SourceCluster | None:
        if self.source is None and self.config_error is None:
            try:
                self.source = SourceCluster(
                    self.link.name, self.link.configs, client_id=f"pybroker-link-{self.link.name}-{self.broker.node_id}"
                )
            except SourceConfigError as exc:
                self.config_error = f"link {self.link.name}: {exc}"
                log.warning("%s", self.config_error)
        return self.source

    async def _round(self) -> bool | None:
        """One round: stops reported, then checks and fetches per source leader.
        False: back off before the next round."""
        loop = asyncio.get_running_loop()
        await self._report_stops()
        now = loop.time()
        active = [e for e in self.entries.values() if not e.core.stopped and not e.core.failure]
        # Only as the leader: the image may name this broker before it may lead
        # (after a restart, until it is unfenced); its log is then a follower's.
        leads = self.broker.replicas.leader_for
        led = [e for e in active if leads(*e.key) is not None]
        ready = [e for e in led if e.backoff_until <= now]
        if not ready:
            self._wakeup.clear()
            pending = [e.backoff_until for e in led if e.backoff_until > now]
            # Stops wait for the followers, leaderships for the controller: look again then.
            polling = len(led) < len(active) or any(e.core.stopped and not e.core.reported for e in self.entries.values())
            timeout_s = (min(pending) - now) if pending else (self.backoff_ms / 1000 if polling else None)
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout_s)
            except TimeoutError:
                pass
            return None
        now_ms = _now_ms()
        # A failover stops at what the partition holds now, without the source.
        for entry in ready:
            plog = self.broker.partition_log(*entry.key)
            if plog is not None and entry.spec.state == MIRROR_PENDING_FAILOVER:
                entry.core.stop_due(entry.spec.state, plog.log_end_offset)
        ready = [e for e in ready if not e.core.stopped]
        if not ready:
            return None
        source = self._client()
        if source is None:
            for entry in ready:
                entry.core.on_unavailable(self.config_error or "no client", now_ms)
            return False
        unknown = any(
            (e.spec.source_topic, e.key[1]) not in self._leaders and (e.spec.source_topic, e.key[1]) not in self._missing
            for e in ready
        )
        if self._metadata_stale or unknown:
            if not await self._refresh_metadata(source, ready):
                return False
        by_leader: dict[int, list[_Entry]] = {}
        for entry in ready:
            source_key = (entry.spec.source_topic, entry.key[1])
            missing = self._missing.get(source_key)
            if missing is not None:
                self._backoff(entry, entry.core.on_source_missing(missing, now_ms, "metadata"))
                continue
            leader = self._leaders.get(source_key, -1)
            if leader < 0:
                self._backoff(entry, entry.core.on_source_missing(ErrorCode.LEADER_NOT_AVAILABLE, now_ms, "metadata"))
                continue
            by_leader.setdefault(leader, []).append(entry)
        if not by_leader:
            return None
        await asyncio.gather(*(self._leader_round(source, leader, entries) for leader, entries in by_leader.items()))
        return True

    def _backoff(self, entry: _Entry, step) -> None:
        if isinstance(step, Backoff):
            entry.backoff_until = asyncio.get_running_loop().time() + self.backoff_ms / 1000
            if step.refresh_metadata:
                self._metadata_stale = True

    async def _refresh_metadata(self, source: SourceCluster, entries: list[_Entry]) -> bool:
        topics = sorted({e.spec.source_topic for e in self.entries.values()})
        now_ms = _now_ms()
        try:
            response = await source.metadata(topics)
        except SourceUnavailable as exc:
            for entry in entries:
                self._backoff(entry, entry.core.on_unavailable(str(exc), now_ms))
            return False
        leaders: dict[tuple[str, int], int] = {}
        missing: dict[tuple[str, int], ErrorCode] = {}
        ids: dict[str, uuid.UUID] = {}
        for topic in response.topics:
            error = ErrorCode(topic.error_code)
            topic_id = getattr(topic, "topic_id", None)
            if topic_id is not None and topic_id != ZERO_UUID:
                ids[topic.name] = topic_id
            if error != ErrorCode.NONE:
                for entry in entries:
                    if entry.spec.source_topic == topic.name:
                        missing[(topic.name, entry.key[1])] = error
                continue
            for partition in topic.partitions:
                leaders[(topic.name, partition.partition_index)] = partition.leader_id
        for entry in self.entries.values():
            source_key = (entry.spec.source_topic, entry.key[1])
            if source_key not in leaders and source_key not in missing:
                missing[source_key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        self._leaders, self._missing = leaders, missing
        self._source_topic_ids = ids
        self._source_topic_names = {v: k for k, v in ids.items()}
        self._metadata_stale = False
        return True

    # ----------------------------------------------------------------- one source leader

    async def _leader_round(self, source: SourceCluster, leader: int, entries: list[_Entry]) -> None:
        epoch_checks = [e for e in entries if e.core.needs_epoch_check]
        offset_checks = [e for e in entries if e.core.needs_offsets]
        try:
            if epoch_checks:
                await self._check_epochs(source, leader, epoch_checks)
            if offset_checks:
                await self._check_offsets(source, leader, offset_checks)
            # After the epoch checks: an answer of -1 there asks for a comparison now.
            compares = [e for e in entries if e.core.needs_batch_compare and not e.core.needs_offsets]
            if compares:
                await self._compare_last_batches(source, leader, compares)
            fetches = [e for e in entries if e.core.fetchable]
            if fetches:
                await self._fetch(source, leader, fetches)
        except SourceUnavailable as exc:
            now_ms = _now_ms()
            self._sessions.pop(leader, None)
            for entry in entries:
                self._backoff(entry, entry.core.on_unavailable(str(exc), now_ms))

    async def _check_epochs(self, source: SourceCluster, leader: int, entries: list[_Entry]) -> None:
        asked = {}
        for entry in entries:
            plog = self.broker.partition_log(*entry.key)
            if plog is not None:
                asked[(entry.spec.source_topic, entry.key[1])] = (entry, plog, _last_epoch(plog))
        by_topic: dict[str, list] = {}
        for (topic, partition), (_, _, epoch) in asked.items():
            by_topic.setdefault(topic, []).append(_OE.OffsetForLeaderPartition(partition=partition, current_leader_epoch=-1, leader_epoch=epoch))

        def body(version: int):
            return _OE.OffsetForLeaderEpochRequest(
                replica_id=CONSUMER_REPLICA_ID,
                topics=[_OE.OffsetForLeaderTopic(topic=t, partitions=parts) for t, parts in by_topic.items()],
            )

        try:
            _, response = await source.request_node(leader, OFFSET_FOR_LEADER_EPOCH, body)
        except NoCommonVersion:
            # The source cannot place an epoch: our last batch is compared with its own instead.
            for entry, _, _ in asked.values():
                entry.core.on_epoch_unsupported()
            return
        now_ms = _now_ms()
        for topic in response.topics:
            for p in topic.partitions:
                found = asked.get((topic.topic, p.partition))
                if found is None:
                    continue
                entry, plog, epoch = found
                step = entry.core.on_epoch_answer(plog.log_end_offset, epoch, ErrorCode(p.error_code), p.end_offset, now_ms)
                self._carry_out(entry, plog, step)

    async def _compare_last_batches(self, source: SourceCluster, leader: int, entries: list[_Entry]) -> None:
        """A Fetch (outside the fetch session) from where each entry's last local
        batch begins; the core compares the source's batch there with ours."""
        asked = {}
        for entry in entries:
            plog = self.broker.partition_log(*entry.key)
            if plog is None or plog.log_end_offset <= plog.log_start_offset:
                entry.core.needs_batch_compare = False  # nothing held: nothing to compare
                continue
            end = plog.log_end_offset
            local_batch = plog.read(end - 1, 1, upper_offset=end)
            if not local_batch:
                entry.core.needs_batch_compare = False
                continue
            base = max(next(iter_batches(local_batch, allow_truncated_tail=False))[2].base_offset, entry.core.compare_from)
            asked[(entry.spec.source_topic, entry.key[1])] = (entry, plog, end, _last_epoch(plog), local_batch, base)
        if not asked:
            return
        ids = self._source_topic_ids

        wanted = [
            FetchWanted(topic, partition, base, len(local_batch))
            for (topic, partition), (_, _, _, _, local_batch, base) in asked.items()
        ]

        def body(version: int):
            return consumer_fetch_request(
                version, wanted, ids, max_wait_ms=FETCH_MAX_WAIT_MS, response_max_bytes=self.response_max_bytes
            )

        version, response = await source.request_node(leader, FETCH, body, timeout_ms=FETCH_MAX_WAIT_MS + source.request_timeout_ms)
        now_ms = _now_ms()
        for name, data in fetched_partitions(version, response, self._source_topic_names):
            found = asked.get((name, data.partition_index))
            if found is None:
                continue
            entry, plog, end, epoch, local_batch, _ = found
            if plog.log_end_offset != end or self.entries.get(entry.key) is not entry:
                continue
            step = entry.core.on_last_batch_answer(
                end, epoch, local_batch, ErrorCode(data.error_code), data.high_watermark, data.records, now_ms
            )
            self._carry_out(entry, plog, step)
            del asked[(name, data.partition_index)]
        # Left out of the answer (or the whole request refused): asked again after the backoff.
        error = ErrorCode(response.error_code) if version >= 7 else ErrorCode.NONE
        for entry, *_ in asked.values():
            if self.entries.get(entry.key) is entry:
                self._backoff(entry, entry.core.on_unanswered(error, now_ms, "Fetch of our last batch"))

    async def _check_offsets(self, source: SourceCluster, leader: int, entries: list[_Entry]) -> None:
        answers: dict[int, dict] = {}
        for timestamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP):
            by_topic: dict[str, list] = {}
            for entry in entries:
                by_topic.setdefault(entry.spec.source_topic, []).append(
                    _LO.ListOffsetsPartition(partition_index=entry.key[1], current_leader_epoch=-1, timestamp=timestamp)
                )

            def body(version: int, by_topic=by_topic):
                return _LO.ListOffsetsRequest(
                    replica_id=CONSUMER_REPLICA_ID,
                    isolation_level=0,
                    topics=[_LO.ListOffsetsTopic(name=t, partitions=parts) for t, parts in by_topic.items()],
                    timeout_ms=30000,
                )

            version, response = await source.request_node(leader, LIST_OFFSETS, body)
            found = {}
            for topic in response.topics:
                for p in topic.partitions:
                    offset = p.offset if version >= 1 else (p.old_style_offsets[0] if p.old_style_offsets else -1)
                    found[(topic.name, p.partition_index)] = (ErrorCode(p.error_code), offset)
            answers[timestamp] = found
        now_ms = _now_ms()
        for entry in entries:
            source_key = (entry.spec.source_topic, entry.key[1])
            start = answers[EARLIEST_TIMESTAMP].get(source_key, (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1))
            end = answers[LATEST_TIMESTAMP].get(source_key, (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1))
            error = start[0] if start[0] != ErrorCode.NONE else end[0]
            if error != ErrorCode.NONE:
                self._backoff(entry, entry.core.on_source_missing(error, now_ms, "ListOffsets"))
                continue
            plog = self.broker.partition_log(*entry.key)
            if plog is None:
                continue
            step = entry.core.on_offsets(plog.log_end_offset, _last_epoch(plog), start[1], end[1], now_ms)
            self._carry_out(entry, plog, step)

    async def _fetch(self, source: SourceCluster, leader: int, entries: list[_Entry]) -> None:
        manager = self.broker.replicas
        image = self.broker.image
        now_ms = _now_ms()
        over_quota = None
        wanted = {}
        fetched_from = {}
        throttled = set()
        for entry in entries:
            plog = self.broker.partition_log(*entry.key)
            if plog is None:
                continue
            topic = image.topics.get(entry.key[0])
            if topic is not None and manager.throttled(topic, FOLLOWER_THROTTLED_REPLICAS, entry.key[1], self.broker.node_id):
                if over_quota is None:
                    over_quota = manager.follower_quota.exceeded(manager.throttle_rate(FOLLOWER_THROTTLED_RATE), monotonic_ms())
                if over_quota:
                    continue
                throttled.add(entry.key)
            source_key = (entry.spec.source_topic, entry.key[1])
            fetched_from[source_key] = (entry, plog, plog.log_end_offset, _last_epoch(plog))
            wanted[source_key] = (plog.log_end_offset, _last_epoch(plog))
        if not wanted:
            if over_quota:
                await asyncio.sleep(THROTTLED_WAIT_MS / 1000)
            return
        session = self._sessions.setdefault(leader, FetchSessionBuilder())
        plan = session.build(wanted)
        ids = self._source_topic_ids

        to_send = [
            FetchWanted(topic, partition, fetch_offset, self.partition_max_bytes, last_epoch)
            for (topic, partition), (fetch_offset, last_epoch) in plan.to_send
        ]

        def body(version: int):
            return consumer_fetch_request(
                version,
                to_send,
                ids,
                max_wait_ms=FETCH_MAX_WAIT_MS,
                response_max_bytes=self.response_max_bytes,
                session_id=plan.session_id,
                session_epoch=plan.session_epoch,
                forgotten=plan.forgotten,
            )

        try:
            version, response = await source.request_node(
                leader, FETCH, body, timeout_ms=FETCH_MAX_WAIT_MS + source.request_timeout_ms
            )
        except SourceUnavailable:
            session.handle_error()
            raise
        session_id = response.session_id if version >= 7 else 0
        error = ErrorCode(response.error_code) if version >= 7 else ErrorCode.NONE
        if not session.handle_response(error, session_id):
            if error in _SESSION_ERRORS:
                return  # asked again at once, in full
            if error != ErrorCode.NONE:
                for entry, *_ in fetched_from.values():
                    self._backoff(entry, entry.core.on_fetch_answer(0, -1, error, -1, -1, None, None, now_ms))
            return
        now_ms = _now_ms()
        for name, data in fetched_partitions(version, response, self._source_topic_names):
            found = fetched_from.get((name, data.partition_index))
            if found is None:
                continue
            entry, plog, fetch_offset, last_epoch = found
            if plog.log_end_offset != fetch_offset or self.entries.get(entry.key) is not entry:
                continue  # the log or the leadership changed while the fetch was out
            if entry.key in throttled and data.records:
                manager.follower_quota.record(len(data.records), monotonic_ms())
            diverging = None
            if version >= 12 and data.diverging_epoch is not None and data.diverging_epoch.end_offset >= 0:
                diverging = (data.diverging_epoch.epoch, data.diverging_epoch.end_offset)
            step = entry.core.on_fetch_answer(
                fetch_offset,
                last_epoch,
                ErrorCode(data.error_code),
                data.high_watermark,
                data.log_start_offset if version >= 5 else -1,
                data.records,
                diverging,
                now_ms,
            )
            self._carry_out(entry, plog, step)
        # A partition left out of an incremental answer has no news: the source's
        # high watermark it last named still holds, so a promote may stop on it.
        for entry, plog, _, _ in fetched_from.values():
            if self.entries.get(entry.key) is entry:
                entry.core.stop_due(entry.spec.state, plog.log_end_offset)

    # ----------------------------------------------------------------- steps

    def _carry_out(self, entry: _Entry, plog, step) -> None:
        key = entry.key
        if isinstance(step, Append):
            try:
                self.broker.replicas.mirror_appended(key, step.records)
            except AppendError as exc:
                entry.core.failure = f"partition {key[1]}: a batch fetched from the source failed its checks: {exc}"
                log.error("%s-%d: mirror stopped: %s", key[0], key[1], entry.core.failure)
                return
            entry.core.observe(plog.log_end_offset, _now_ms())
        elif isinstance(step, StartOver):
            log.warning(
                "%s-%d: the source's log starts at %d, past our log end: %d records were deleted there before they "
                "could be copied; starting over at %d", key[0], key[1], step.offset, step.skipped_records, step.offset,
            )
            plog.truncate_fully_and_start_at(step.offset)
            self.broker.partition_watch.notify(key)
        elif isinstance(step, Diverged):
            log.error("%s-%d: mirror stopped: %s", key[0], key[1], step.reason)
        elif isinstance(step, Backoff):
            self._backoff(entry, step)

    async def _report_stops(self) -> None:
        """Stopped partitions whose in-sync replicas hold everything copied are
        reported to the controller; failures once, with the reason."""
        stopped: dict[uuid.UUID, list] = {}
        reporting = []
        for entry in self.entries.values():
            if entry.core.failure and not entry.failure_sent:
                if await self.manager.send_failure(entry.spec, entry.core.failure):
                    entry.failure_sent = True
            if not entry.core.stopped or entry.core.reported:
                continue
            plog = self.broker.partition_log(*entry.key)
            if plog is None:
                continue
            mark = stop_mark(plog.high_watermark, plog.log_end_offset, _last_epoch(plog), _max_producer_id(plog))
            if mark is None:
                continue
            stopped.setdefault(entry.spec.topic_id, []).append(
                _MS.StoppedMirrorPartition(
                    partition_index=entry.key[1],
                    leader_epoch=entry.spec.leader_epoch,
                    offset=mark.offset,
                    last_epoch=mark.last_epoch,
                    max_producer_id=mark.max_producer_id,
                )
            )
            reporting.append(entry)
        if stopped and await self.manager.send_stopped(stopped):
            for entry in reporting:
                entry.core.reported = True
