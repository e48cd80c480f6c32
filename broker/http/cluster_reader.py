"""Reads of other nodes' partitions and groups, for the web console and the metrics.

The console and the metrics endpoint read this broker's state in-process; what
lives on other brokers (partitions led there, groups coordinated there) they
ask for over the node-to-node connection (``broker.node_connection(...,
to="broker")``, the inter-broker listener with its security protocol), the
requests a Kafka admin client or consumer would send:

- ``Fetch`` (read_uncommitted, as a consumer: replica id -1, bounded bytes,
  no waiting) and ``ListOffsets`` (earliest, latest = high watermark, by
  timestamp) to a partition's leader;
- ``ListGroups``, ``DescribeGroups`` and ``OffsetFetch`` (v8: several groups
  in one request) to a group's coordinator;
- ``DescribeLogDirs`` to a node for the sizes of the partitions it hosts;
- ``DescribeMirrors`` to a node for the mirror partitions it leads.

One connection per node (the client pipelines requests), at most
``MAX_NODE_CONNECTIONS`` (the least recently used closed first), all closed by
:meth:`ClusterReader.close`. Every request has a timeout
(``REQUEST_TIMEOUT_MS``); a node that is not registered, not reachable, or does
not answer in time raises :class:`NodeUnavailable`, which the callers show as
"unavailable" rather than wait. Everything runs on the event loop and never
blocks it; nothing here knows about HTTP.

:class:`HighWatermarkCache` keeps the high watermarks of a set of remote
partitions, refreshed in the background (one ListOffsets per leader per
round), so that a Prometheus scrape reads a dict and sends nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable

from broker.net.node_client import KafkaClientConnection
from protocol.errors import ErrorCode
from protocol.leader_offsets import (
    LIST_OFFSETS,
    LIST_OFFSETS_VERSION,
    group_by_leader,
    list_offsets_answers,
    list_offsets_request,
)
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

log = logging.getLogger(__name__)

MAX_NODE_CONNECTIONS = 64
REQUEST_TIMEOUT_MS = 5000
CONNECT_TIMEOUT_MS = 3000

FETCH = APIS_BY_NAME["Fetch"]
LIST_GROUPS = APIS_BY_NAME["ListGroups"]
DESCRIBE_GROUPS = APIS_BY_NAME["DescribeGroups"]
CONSUMER_GROUP_DESCRIBE = APIS_BY_NAME["ConsumerGroupDescribe"]
OFFSET_FETCH = APIS_BY_NAME["OffsetFetch"]
DESCRIBE_LOG_DIRS = APIS_BY_NAME["DescribeLogDirs"]
DESCRIBE_MIRRORS = APIS_BY_NAME["DescribeMirrors"]
DESCRIBE_MULTI_MASTER = APIS_BY_NAME["DescribeMultiMasterCopies"]
# Fetch v12: topics by name, no session (session id 0, epoch -1: a one-off full fetch).
FETCH_VERSION = 12
LIST_GROUPS_VERSION = 5  # with each group's type (classic, consumer)
DESCRIBE_GROUPS_VERSION = 5
OFFSET_FETCH_VERSION = 8
DESCRIBE_LOG_DIRS_VERSION = 4
DESCRIBE_MIRRORS_VERSION = 0
LATEST, EARLIEST = -1, -2
CONSUMER_REPLICA_ID = -1

_F = struct_classes(FETCH.request)
_OF = struct_classes(OFFSET_FETCH.request)
_DLD = struct_classes(DESCRIBE_LOG_DIRS.request)

TopicPartition = tuple[str, int]


class NodeUnavailable(Exception):
    """A node is not registered, not reachable, or did not answer in time."""


class ClusterReader:
    def __init__(self, broker, client_id: str, *, request_timeout_ms: int = REQUEST_TIMEOUT_MS):
        self.broker = broker
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        # node id -> (address, connection), least recently used first.
        self._connections: OrderedDict[int, tuple[tuple[str, int], KafkaClientConnection]] = OrderedDict()
        self._closed = False

    # ------------------------------------------------------------- connections

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        registration = self.broker.image.brokers.get(node_id)
        name = self.broker.config.inter_broker_listener_name
        if registration is None or name is None:
            return None
        endpoint = registration.endpoint(name)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def _connection(self, node_id: int) -> KafkaClientConnection:
        if self._closed:
            raise NodeUnavailable("the reader is closed")
        address = self.address_of(node_id)
        if address is None:
            raise NodeUnavailable(f"node {node_id} is not a registered broker with an inter-broker endpoint")
        held = self._connections.get(node_id)
        if held is not None and held[0] == address:
            self._connections.move_to_end(node_id)
            return held[1]
        if held is not None:
            held[1].close()
        connection = self.broker.node_connection(
            address[0], address[1], self.client_id, to="broker", connect_timeout_ms=CONNECT_TIMEOUT_MS
        )
        self._connections[node_id] = (address, connection)
        while len(self._connections) > MAX_NODE_CONNECTIONS:
            _, (_, oldest) = self._connections.popitem(last=False)
            oldest.close()
        return connection

    async def request(self, node_id: int, api, version: int, body):
        connection = self._connection(node_id)
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the
            # cancellation HighWatermarkCache.stop() waits on (see broker/net/node_client.py).
            async with asyncio.timeout(self.request_timeout_ms / 1000):
                return await connection.request(api, version, body, timeout_ms=self.request_timeout_ms)
        except (TimeoutError, OSError, ConnectionError) as exc:
            # The next request reconnects (a fresh connection, not the broken one).
            held = self._connections.pop(node_id, None)
            if held is not None:
                held[1].close()
            raise NodeUnavailable(f"node {node_id} did not answer {api.name}: {exc or type(exc).__name__}") from None

    def close(self) -> None:
        self._closed = True
        for _, connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # ------------------------------------------------------------- partitions

    def leader_of(self, topic: str, partition: int) -> int:
        image_topic = self.broker.image.topics.get(topic)
        p = image_topic.partitions.get(partition) if image_topic is not None else None
        return p.leader if p is not None else -1

    async def list_offsets(
        self, node_id: int, partitions: Iterable[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, tuple[int, int]]:
        """(error code, offset) per partition, from one ListOffsets (read_uncommitted) to ``node_id``."""
        response = await self.request(node_id, LIST_OFFSETS, LIST_OFFSETS_VERSION, list_offsets_request(partitions, timestamp))
        return {key: (p.error_code, p.offset) for key, p in list_offsets_answers(response).items()}

    async def offsets_by_leader(
        self, partitions: Iterable[TopicPartition], timestamp: int = LATEST
    ) -> tuple[dict[TopicPartition, int], set[TopicPartition]]:
        """Offsets (the high watermark for LATEST) of ``partitions``: one ListOffsets per
        leader, all at once. Returns (offset by partition, partitions left unknown:
        no leader, the leader unavailable, or an error in its answer)."""
        by_leader, leaderless = group_by_leader(partitions, lambda key: leader if (leader := self.leader_of(*key)) >= 0 else None)
        unknown: set[TopicPartition] = set(leaderless)
        leaders = list(by_leader)
        answers = await asyncio.gather(
            *(self.list_offsets(leader, by_leader[leader], timestamp) for leader in leaders), return_exceptions=True
        )
        found: dict[TopicPartition, int] = {}
        for leader, answer in zip(leaders, answers):
            if isinstance(answer, BaseException):
                if not isinstance(answer, NodeUnavailable):
                    log.warning("ListOffsets to node %d failed: %r", leader, answer)
                unknown.update(by_leader[leader])
                continue
            for key in by_leader[leader]:
                error, offset = answer.get(key, (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1))
                if error == ErrorCode.NONE and offset >= 0:
                    found[key] = offset
                else:
                    unknown.add(key)
        return found, unknown

    async def fetch(self, topic: str, partition: int, offset: int, max_bytes: int):
        """One Fetch of the partition from its leader, as a read_uncommitted consumer that
        does not wait: the partition's answer (error_code, high_watermark,
        log_start_offset, records)."""
        leader = self.leader_of(topic, partition)
        if leader < 0:
            raise NodeUnavailable(f"{topic}-{partition} has no leader")
        request = _F.FetchRequest(
            cluster_id=None,
            replica_id=CONSUMER_REPLICA_ID,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                _F.FetchTopic(
                    topic=topic,
                    partitions=[
                        _F.FetchPartition(
                            partition=partition,
                            current_leader_epoch=-1,
                            fetch_offset=offset,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=max_bytes,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        response = await self.request(leader, FETCH, FETCH_VERSION, request)
        if response.error_code != ErrorCode.NONE:
            raise NodeUnavailable(f"node {leader} answered Fetch with {ErrorCode(response.error_code).name}")
        for topic_response in response.responses:
            for data in topic_response.partitions:
                if data.partition_index == partition:
                    return data
        raise NodeUnavailable(f"node {leader} left {topic}-{partition} out of its Fetch answer")

    async def log_dir_sizes(
        self, node_id: int, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """Bytes of each partition log on ``node_id`` (DescribeLogDirs; None: every partition there)."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            topics = [_DLD.DescribableLogDirTopic(topic=t, partitions=ps) for t, ps in by_topic.items()]
        response = await self.request(
            node_id, DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, _DLD.DescribeLogDirsRequest(topics=topics)
        )
        if response.error_code != ErrorCode.NONE:
            raise NodeUnavailable(f"node {node_id} answered DescribeLogDirs with {ErrorCode(response.error_code).name}")
        sizes: dict[TopicPartition, int] = {}
        for result in response.results:
            for topic in result.topics:
                for p in topic.partitions:
                    if not p.is_future_key:
                        sizes[(topic.name, p.partition_index)] = p.partition_size
        return sizes

    async def describe_mirrors(self, node_id: int, topics: list[str] | None = None):
        """The DescribeMirrors answer of ``node_id`` (the mirror partitions it leads; every
        mirror topic when ``topics`` is None), as broker/tools/cluster_links.py joins them."""
        return await self.request(
            node_id, DESCRIBE_MIRRORS, DESCRIBE_MIRRORS_VERSION, DESCRIBE_MIRRORS.request.cls(topics=topics)
        )

    async def describe_multi_master(self, node_id: int, links: list[str] | None = None):
        """The DescribeMultiMasterCopies answer of ``node_id`` (the multi-master copies it runs)."""
        return await self.request(node_id, DESCRIBE_MULTI_MASTER, 0, DESCRIBE_MULTI_MASTER.request.cls(links=links))

    # ------------------------------------------------------------- groups

    def coordinator_of(self, group_id: str) -> int:
        error, node_id = self.broker.groups.coordinator_of(group_id)
        return node_id if error == ErrorCode.NONE else -1

    async def list_groups(self, node_id: int) -> list:
        """The groups ``node_id`` coordinates (ListGroups): entries with group_id, group_state,
        protocol_type and group_type."""
        response = await self.request(
            node_id, LIST_GROUPS, LIST_GROUPS_VERSION, LIST_GROUPS.request.cls(states_filter=[], types_filter=[])
        )
        if response.error_code != ErrorCode.NONE:
            raise NodeUnavailable(f"node {node_id} answered ListGroups with {ErrorCode(response.error_code).name}")
        return list(response.groups)

    async def describe_groups(self, node_id: int, group_ids: list[str]) -> dict[str, object]:
        response = await self.request(
            node_id,
            DESCRIBE_GROUPS,
            DESCRIBE_GROUPS_VERSION,
            DESCRIBE_GROUPS.request.cls(groups=group_ids, include_authorized_operations=False),
        )
        return {g.group_id: g for g in response.groups}

    async def describe_consumer_groups(self, node_id: int, group_ids: list[str]) -> dict[str, object]:
        """KIP-848 consumer groups (ConsumerGroupDescribe v0), by group id."""
        response = await self.request(
            node_id, CONSUMER_GROUP_DESCRIBE, 0,
            CONSUMER_GROUP_DESCRIBE.request.cls(group_ids=group_ids, include_authorized_operations=False),
        )
        return {g.group_id: g for g in response.groups}

    async def committed_offsets(self, node_id: int, group_ids: list[str]) -> dict[str, dict[TopicPartition, int]]:
        """Every committed offset of each group (one OffsetFetch v8 to its coordinator);
        a group the node answers with an error (not its coordinator any more...) is left out."""
        request = _OF.OffsetFetchRequest(
            groups=[_OF.OffsetFetchRequestGroup(group_id=g, topics=None) for g in group_ids], require_stable=False
        )
        response = await self.request(node_id, OFFSET_FETCH, OFFSET_FETCH_VERSION, request)
        result: dict[str, dict[TopicPartition, int]] = {}
        for group in response.groups:
            if group.error_code != ErrorCode.NONE:
                continue
            result[group.group_id] = {
                (t.name, p.partition_index): p.committed_offset
                for t in group.topics
                for p in t.partitions
                if p.error_code == ErrorCode.NONE and p.committed_offset >= 0
            }
        return result


class HighWatermarkCache:
    """High watermarks of the remote partitions ``wanted()`` names, refreshed every
    ``interval_ms`` in a background task (one ListOffsets per leader per round, all
    at once, each with the reader's timeout). A partition whose leader did not
    answer the last round is dropped from the cache (no stale value is served)."""

    def __init__(self, reader: ClusterReader, wanted: Callable[[], set[TopicPartition]], interval_ms: int):
        self.reader = reader
        self.wanted = wanted
        self.interval_ms = interval_ms
        self.values: dict[TopicPartition, int] = {}
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="remote high watermarks")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task  # its loop catches everything else
            self._task = None
        self.reader.close()

    async def refresh(self) -> None:
        wanted = self.wanted()
        if not wanted:
            self.values = {}
            return
        found, _ = await self.reader.offsets_by_leader(wanted, LATEST)
        self.values = found

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not end the refreshes for good
                log.exception("refreshing remote high watermarks failed")
            await asyncio.sleep(self.interval_ms / 1000)
