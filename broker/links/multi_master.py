"""Multi-master copy: a link's ``multi.master.topics`` copied batch by batch with new offsets.

For every link of this cluster whose ``multi.master.topics`` is set, each
broker copies the partitions of those topics it leads: it reads the
source's topic of the same name as a consumer does (Fetch, ``replica_id``
-1, read_uncommitted, no fetch session), and for each batch
:func:`broker.links.multi_master_rules.link_batch_decision` says skip (no
producer id, a control batch, or written here first: its origin is this
cluster's ``cluster.link.origin.id``), already here, append, or stop. An
appended batch goes through the leader's write path
(``broker.replica.leader_append.append_as_leader``) unchanged: the leader
gives it new offsets and its leader epoch, both outside the CRC, and keeps
its producer id, epoch and sequences, so the batch still names its origin
in every cluster it reaches.

The source position of each partition is the committed offset of the
consumer group ``_pybroker-link-<link name>`` on this cluster, for the
topic and partition (OffsetCommit with generation -1 and no member, at the
group's coordinator): it survives a restart and a move of the partition's
leader. It is committed once the appended batches are replicated to the
in-sync replicas (the high watermark passed them), so a new leader never
holds a position past batches it lacks. Copying again from an older
position is harmless: the idempotence rule finds those batches already
here.

A partition whose copy met a sequence gap stops (an error in the log and in
``status``) until its leadership or the link's settings change.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from broker.links.clients import SourceClients
from broker.links.multi_master_rules import (
    Decision,
    ProducerHere,
    link_batch_decision,
    link_group_id,
    link_multi_master_topics,
)
from broker.links.offset_sync import _LinkCaller
from broker.links.source import SourceConfigError, SourceUnavailable
from broker.links.source_fetch import FetchWanted, consumer_fetch_request, fetched_partitions, topic_leaders
from broker.net.in_process_client import RequestRefused
from broker.replica.leader_append import ACKS_ALL, append_as_leader, replication_outcome
from controller.link_configs import link_setting_ms
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import iter_batches
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

log = logging.getLogger(__name__)

FETCH = APIS_BY_NAME["Fetch"]
OFFSET_FETCH = APIS_BY_NAME["OffsetFetch"]
OFFSET_COMMIT = APIS_BY_NAME["OffsetCommit"]
_OF = struct_classes(OFFSET_FETCH.request)
_OC = struct_classes(OFFSET_COMMIT.request)
OFFSET_FETCH_VERSION = 8
OFFSET_COMMIT_VERSION = 8
FETCH_MAX_WAIT_MS = 500
# How long a round waits for the in-sync replicas before it commits positions.
REPLICATION_WAIT_MS = 30_000
GROUP_REQUEST_TIMEOUT_MS = 30_000
IDLE_WAIT_S = 1.0


@dataclass
class PartitionCopy:
    """One led partition of a multi-master topic, as its link copies it."""

    leader_epoch: int
    position: int = -1  # the next source offset to copy; -1 until read from the group
    committed: int = -1
    error: str | None = None  # the copy stopped (a sequence gap)
    problem: str | None = None  # a passing failure (the source, the group)
    copied_batches: int = 0
    skipped_batches: dict[str, int] = field(default_factory=dict)
    last_copy_ms: int = -1
    source_high_watermark: int = -1  # from the source's last answer
    last_fetch_ms: int = -1  # wall-clock time of that answer
    caught_up_ms: int = -1  # the last time the position reached the source's high watermark

    def lag_records(self) -> int:
        """Source offsets not read yet (-1: not known)."""
        if self.source_high_watermark < 0 or self.position < 0:
            return -1
        return max(0, self.source_high_watermark - self.position)

    def lag_ms(self, now_ms: int) -> int:
        """0 while the copy has read all the source had; else the time since it last had (-1: never)."""
        lag = self.lag_records()
        if lag == 0:
            return 0
        return -1 if lag < 0 or self.caught_up_ms < 0 else max(0, now_ms - self.caught_up_ms)


class MultiMasterCopier:
    """This broker's multi-master copies: one task per link with multi.master.topics."""

    def __init__(self, broker, client, principal: str):
        self.broker = broker
        self._client = client
        listeners = broker.config.broker_listeners
        self._caller = _LinkCaller(principal, broker.config.inter_broker_listener_name or (listeners[0].name if listeners else None))
        self._clients = SourceClients(f"pybroker-link-multi-master-{broker.node_id}")
        self._tasks: dict[uuid.UUID, tuple[dict, asyncio.Task]] = {}
        # (link name, topic, partition) -> its copy, for the partitions led here.
        self.partitions: dict[tuple[str, str, int], PartitionCopy] = {}
        self._connections: dict[tuple[int, str, int], object] = {}
        self._wakeup = asyncio.Event()
        self.running = False

    @property
    def origin_id(self) -> int:
        return self.broker.config["cluster.link.origin.id"]

    def start(self) -> None:
        self.running = True
        self.metadata_changed()

    def metadata_changed(self) -> None:
        """Start, restart (new settings) or stop the links' tasks as the image says."""
        if not self.running:
            return
        links = {link.link_id: link for link in self.broker.image.cluster_links.values() if link_multi_master_topics(link)}
        for link_id in list(self._tasks):
            configs, task = self._tasks[link_id]
            link = links.get(link_id)
            if link is None or dict(link.configs) != configs:
                task.cancel()
                del self._tasks[link_id]
        for link_id, link in links.items():
            if link_id not in self._tasks:
                task = asyncio.get_running_loop().create_task(self._run(link_id), name=f"multi-master copy {link.name}")
                self._tasks[link_id] = (dict(link.configs), task)
        self._clients.keep_only(links)
        self._wakeup.set()

    async def stop(self) -> None:
        self.running = False
        tasks = [task for _, task in self._tasks.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._clients.close()
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # ----------------------------------------------------------------- one link

    async def _run(self, link_id: uuid.UUID) -> None:
        while True:
            link = self.broker.image.link_by_id(link_id)
            if link is None:
                return
            try:
                busy = await self._round(link)
            except asyncio.CancelledError:
                raise
            except (SourceUnavailable, SourceConfigError, ConnectionError, OSError, TimeoutError) as exc:
                self._set_problem(link, f"{exc or type(exc).__name__}")
                busy = False
            except Exception:  # a bug of ours must not end the copy for good
                log.exception("multi-master copy of link %s failed", link.name)
                busy = False
            if not busy:
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), IDLE_WAIT_S if busy is None else self._backoff_s(link))
                except TimeoutError:
                    pass

    def _backoff_s(self, link) -> float:
        return link_setting_ms(link.configs, "retry.backoff.ms") / 1000

    def _set_problem(self, link, problem: str) -> None:
        for (name, _, _), copy in self.partitions.items():
            if name == link.name and copy.problem != problem:
                copy.problem = problem
        log.warning("link %s: multi-master copy: %s", link.name, problem)

    def _led(self, link) -> dict[tuple[str, int], PartitionCopy]:
        """The partitions of ``link``'s multi-master topics led here, their copies kept or made."""
        image = self.broker.image
        led: dict[tuple[str, int], PartitionCopy] = {}
        for name in link_multi_master_topics(link):
            topic = image.topics.get(name)
            if topic is None or image.mirror_of(name) is not None:
                continue
            for index in topic.partitions:
                leader = self.broker.replicas.leader_for(name, index)
                if leader is None:
                    continue
                key = (link.name, name, index)
                copy = self.partitions.get(key)
                if copy is None or copy.leader_epoch != leader.leader_epoch:
                    copy = self.partitions[key] = PartitionCopy(leader.leader_epoch)
                led[(name, index)] = copy
        for key in [k for k in self.partitions if k[0] == link.name and (k[1], k[2]) not in led]:
            del self.partitions[key]
        return led

    async def _round(self, link) -> bool | None:
        """One fetch of every led partition. None: nothing to copy here; False: back off."""
        led = self._led(link)
        copying = {key: copy for key, copy in led.items() if copy.error is None}
        if not copying:
            return None
        if not self.broker.groups.offsets_topic_exists():
            await self.broker.groups.ensure_offsets_topic()
            return False
        group = link_group_id(link.name)
        unknown = [key for key, copy in copying.items() if copy.position < 0]
        if unknown:
            committed = await self._committed(group, unknown)
            if committed is None:
                return False
            for key in unknown:
                copying[key].position = copying[key].committed = committed.get(key, 0)
        source = self._clients.for_link(link)
        metadata = await source.metadata(sorted({name for name, _ in copying}))
        leaders: dict[tuple[str, int], int] = {}
        topic_ids: dict[str, uuid.UUID] = {}
        image = self.broker.image
        mismatched: dict[str, str] = {}
        for topic in metadata.topics:
            if topic.error_code != ErrorCode.NONE:
                continue
            here = image.topics.get(topic.name)
            if here is not None and len(topic.partitions) != len(here.partitions):
                # Partition p copies into partition p: with other counts some
                # records would never arrive, so nothing is copied until they match.
                mismatched[topic.name] = f"the source's {topic.name} has {len(topic.partitions)} partitions, this cluster's {len(here.partitions)}"
                log.warning("link %s: multi-master copy: %s", link.name, mismatched[topic.name])
                continue
            topic_leaders(topic, leaders, topic_ids)
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for key, copy in copying.items():
            leader = leaders.get(key)
            if leader is None:
                copy.problem = mismatched.get(key[0], "the source has no leader for this partition (or not the topic)")
                continue
            by_leader.setdefault(leader, []).append(key)
        if not by_leader:
            return False
        results = await asyncio.gather(
            *(self._fetch(link, source, leader, keys, copying, topic_ids) for leader, keys in by_leader.items()),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        await self._commit(group, copying)
        return True

    async def _fetch(self, link, source, leader: int, keys: list[tuple[str, int]], copying, topic_ids) -> None:
        max_bytes = self.broker.config["replica.fetch.max.bytes"]

        wanted = [FetchWanted(name, index, copying[(name, index)].position, max_bytes) for name, index in keys]

        def body(version: int):
            return consumer_fetch_request(
                version,
                wanted,
                topic_ids,
                max_wait_ms=FETCH_MAX_WAIT_MS,
                response_max_bytes=self.broker.config["replica.fetch.response.max.bytes"],
            )

        version, response = await source.request_node(leader, FETCH, body, timeout_ms=FETCH_MAX_WAIT_MS + source.request_timeout_ms)
        names = {v: k for k, v in topic_ids.items()}
        waits = []
        for name, data in fetched_partitions(version, response, names):
            key = (name, data.partition_index)
            copy = copying.get(key)
            if copy is None:
                continue
            error = ErrorCode(data.error_code)
            if error == ErrorCode.OFFSET_OUT_OF_RANGE and version >= 5 and copy.position < data.log_start_offset:
                log.warning(
                    "link %s: %s-%d: the source's log starts at %d, past position %d: records deleted there "
                    "before they were copied are missing here", link.name, name, data.partition_index,
                    data.log_start_offset, copy.position,
                )
                copy.position = data.log_start_offset
                continue
            if error != ErrorCode.NONE:
                copy.problem = f"Fetch from the source: {error.name}"
                continue
            copy.problem = None
            copy.source_high_watermark = data.high_watermark
            copy.last_fetch_ms = int(time.time() * 1000)
            if data.records:
                wait = self._copy_batches(link, key, copy, data.records)
                if wait is not None:
                    waits.append(wait)
            if copy.position >= copy.source_high_watermark:
                copy.caught_up_ms = copy.last_fetch_ms
        for key, copy, leader_state, required in waits:
            outcome = await replication_outcome(self.broker.replicas, key, leader_state, required, REPLICATION_WAIT_MS)
            if outcome != ErrorCode.NONE:
                copy.problem = f"appended batches not replicated: {outcome.name}"
                copy.position = copy.committed  # copy again from there; repeats are dropped

    def _copy_batches(self, link, key: tuple[str, int], copy: PartitionCopy, records):
        """Append what the rules say of ``records`` (one partition's fetched
        batches); the (key, copy, leader, offset) to wait for, or None."""
        plog = self.broker.partition_log(*key)
        leader_state = self.broker.replicas.leader_for(*key)
        if plog is None or leader_state is None or leader_state.leader_epoch != copy.leader_epoch:
            return None
        buffer = memoryview(records)
        required = None
        for position, size, header in iter_batches(buffer, allow_truncated_tail=True):
            next_offset = header.base_offset + header.last_offset_delta + 1
            if next_offset <= copy.position:
                continue  # before the position: a fetch may start inside an earlier batch
            entry = plog.producer_state.producers.get(header.producer_id) if header.producer_id >= 0 else None
            here = None if entry is None or not entry.batches else ProducerHere(entry.epoch, entry.last_sequence)
            verdict = link_batch_decision(
                self.origin_id,
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.last_offset_delta,
                header.is_control,
                header.is_transactional,
                here,
            )
            if verdict.decision == Decision.GAP:
                copy.error = f"partition {key[1]}: copy stopped: {verdict.reason}"
                log.error("link %s: %s-%d: multi-master %s", link.name, key[0], key[1], copy.error)
                break
            if verdict.decision == Decision.APPEND:
                written = append_as_leader(
                    self.broker, key, bytes(buffer[position:position + size]), plog=plog, acks=ACKS_ALL,
                    leader_epoch=copy.leader_epoch,
                )
                if written.error != ErrorCode.NONE:
                    # Not written: try again from here next round.
                    copy.problem = f"append refused: {written.error.name}: {written.message or ''}"
                    break
                copy.copied_batches += 1
                copy.last_copy_ms = int(time.time() * 1000)
                required = written.last_offset + 1
            else:
                reason = verdict.decision.value
                copy.skipped_batches[reason] = copy.skipped_batches.get(reason, 0) + 1
            copy.position = next_offset
        if required is None:
            return None
        return key, copy, leader_state, required

    # ----------------------------------------------------------------- positions

    async def _committed(self, group: str, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int] | None:
        """The committed positions of ``keys`` (absent: none yet); None when the coordinator did not answer."""
        body = _OF.OffsetFetchRequest(
            groups=[_OF.OffsetFetchRequestGroup(group_id=group, member_id=None, member_epoch=-1, topics=None)],
            require_stable=False,
        )
        answer = await self._group_request(group, OFFSET_FETCH, OFFSET_FETCH_VERSION, body)
        if answer is None:
            return None
        (result,) = answer.groups
        if result.error_code != ErrorCode.NONE:
            log.debug("OffsetFetch of %s: %s", group, ErrorCode(result.error_code).name)
            return None
        return {
            (topic.name, p.partition_index): p.committed_offset
            for topic in result.topics
            for p in topic.partitions
            if p.error_code == ErrorCode.NONE and p.committed_offset >= 0
        }

    async def _commit(self, group: str, copying: dict[tuple[str, int], PartitionCopy]) -> None:
        due = {key: copy for key, copy in copying.items() if copy.position > copy.committed}
        if not due:
            return
        by_topic: dict[str, list] = {}
        for (name, index), copy in sorted(due.items()):
            by_topic.setdefault(name, []).append(
                _OC.OffsetCommitRequestPartition(
                    partition_index=index, committed_offset=copy.position, committed_leader_epoch=-1, committed_metadata=""
                )
            )
        body = _OC.OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[_OC.OffsetCommitRequestTopic(name=name, partitions=parts) for name, parts in by_topic.items()],
        )
        positions = {key: copy.position for key, copy in due.items()}
        answer = await self._group_request(group, OFFSET_COMMIT, OFFSET_COMMIT_VERSION, body)
        if answer is None:
            return
        for topic in answer.topics:
            for p in topic.partitions:
                copy = due.get((topic.name, p.partition_index))
                if copy is not None and p.error_code == ErrorCode.NONE:
                    copy.committed = positions[(topic.name, p.partition_index)]

    async def _group_request(self, group: str, api, version: int, body):
        """``body`` at the group's coordinator: this broker's dispatcher when it is
        the coordinator, else its inter-broker listener. None without an answer."""
        error, coordinator = self.broker.groups.coordinator_of(group)
        if error != ErrorCode.NONE:
            return None
        try:
            if coordinator == self.broker.node_id:
                return await self._client.request(api, version, body, self._caller)
            connection = self._coordinator_connection(coordinator)
            if connection is None:
                return None
            return await connection.request(api, version, body, timeout_ms=GROUP_REQUEST_TIMEOUT_MS)
        except (RequestRefused, ProtocolError, ConnectionError, OSError, TimeoutError) as exc:
            log.debug("%s for %s: %s", api.name, group, exc)
            return None

    def _coordinator_connection(self, node: int):
        registration = self.broker.image.brokers.get(node)
        listener = self.broker.config.inter_broker_listener_name
        endpoint = None if registration is None or listener is None else registration.endpoint(listener)
        if endpoint is None:
            return None
        key = (node, endpoint.host, endpoint.port)
        connection = self._connections.get(key)
        if connection is None:
            for old in [k for k in self._connections if k[0] == node]:
                self._connections.pop(old).close()
            connection = self.broker.node_connection(endpoint.host, endpoint.port, f"pybroker-link-multi-master-{self.broker.node_id}", to="broker")
            self._connections[key] = connection
        return connection
