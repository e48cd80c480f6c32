"""The Kafka client of one v2 consumer instance: its group's coordinator and its partitions' leaders.

A ``ClusterKafka`` (broker/http/rest/cluster.py: routing by the metadata image, the
caller authorized here before anything goes to another node, Kafka's retry
backoff) with the two kinds of requests a consumer sends:

- the group requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  OffsetCommit, OffsetFetch) to the group's coordinator, asked again while it
  answers NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or
  COORDINATOR_NOT_AVAILABLE (the coordinator moved or is loading) or could not
  be reached; these are all safe to send twice. A caller who may not READ the
  group (DESCRIBE for OffsetFetch), or may not READ a topic it commits (``read_topics``), is sent
  to this broker's own handler, which answers the refusal.
- Fetch (read_uncommitted, as Kafka's consumer by default) to each partition's
  leader, READ on the topic checked here first for a remote leader.

Connections of its own: a JoinGroup waits for the whole group to rejoin and a
Fetch waits for data, and a node answers one connection's requests in order, so
sharing the proxy's connections would hold every other REST call behind them.
Each instance has its own (at most one per node), closed with the instance.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from broker.http.rest.cluster import (
    COORDINATOR_ERRORS,
    LOCAL,
    REQUEST_TIMEOUT_MS,
    ClusterKafka,
    NodeConnections,
    _again,
    _Lost,
    _no_answer,
    _unreachable,
    _Unsent,
)
from broker.http.rest.kafka import REQUESTS
from broker.security.authorization import GROUP, TOPIC, allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# One per node the instance talks to: its coordinator and the leaders of its partitions.
INSTANCE_NODE_CONNECTIONS_MAX = 16
READ_UNCOMMITTED = 0
PARTITION_FETCH_BYTES_MAX = 1 << 20  # Kafka's max.partition.fetch.bytes default


def _error_of(response) -> int:
    """The error that decides whether to ask again: the top-level one, else OffsetCommit's first."""
    code = getattr(response, "error_code", None)
    if code is not None:
        return code
    for t in getattr(response, "topics", None) or []:
        for p in t.partitions:
            return p.error_code
    return ErrorCode.NONE


class ConsumerKafka(ClusterKafka):
    """Kafka requests of one consumer instance, as the principal that created it."""

    def __init__(self, broker, principal: str, host: str):
        super().__init__(broker, NodeConnections(broker, limit=INSTANCE_NODE_CONNECTIONS_MAX), principal, host)

    def close(self) -> None:
        self._nodes.close()

    def _group_route(self, group: str, operation: int, topics: list[str]):
        """LOCAL when the caller may not ``operation`` the group or READ one of ``topics``
        (the handler here refuses it), when this broker coordinates the group or knows no
        coordinator yet; else the coordinator's id."""
        if not allowed(self._broker, self._asker, operation, GROUP, group):
            return LOCAL
        if any(not allowed(self._broker, self._asker, AclOperation.READ, TOPIC, t) for t in topics):
            return LOCAL
        error, coordinator = self._broker.groups.coordinator_of(group)
        if error != ErrorCode.NONE or coordinator == self._broker.node_id:
            return LOCAL
        return coordinator

    async def group_call(self, group: str, api_name: str, *, read_topics: list[str] = (), wait_ms: int = REQUEST_TIMEOUT_MS,
                         **fields):
        """One group request to the coordinator of ``group``; its answer (the last one,
        coordinator errors included, when time ran out)."""
        operation = AclOperation.DESCRIBE if api_name == "OffsetFetch" else AclOperation.READ
        result: list = []

        async def attempt(last: bool) -> bool:
            node_id = self._group_route(group, operation, list(read_topics))
            try:
                response = await self._send(node_id, api_name, wait_ms=wait_ms, **fields)
            except (_Unsent, _Lost) as exc:
                if last or not _again(exc):
                    raise _unreachable(node_id, exc) from None
                return False
            if not last and _error_of(response) in COORDINATOR_ERRORS:
                return False
            result.append(response)
            return True

        await self._retrying(attempt)
        if not result:
            raise _no_answer(f"no coordinator answered {api_name} for group {group}")
        return result[0]

    async def fetch(self, positions: dict[tuple[str, int], int], *, max_wait_ms: int, min_bytes: int,
                    max_bytes: int) -> dict[tuple[str, int], Any]:
        """One Fetch per leader of ``positions`` (partition -> next offset), all at once;
        the FetchResponse partition of each partition that was answered. A partition
        without a leader, or whose leader could not be asked, is left out (the next
        fetch routes it again from the image)."""
        R = REQUESTS["Fetch"]
        routes: dict[Any, list[tuple[str, int]]] = {}
        for key in positions:
            node_id = self._leader_route(key[0], key[1], AclOperation.READ)
            if node_id is LOCAL or node_id >= 0:
                routes.setdefault(node_id, []).append(key)

        async def send(node_id, keys):
            by_topic: dict[str, list[int]] = {}
            for topic, index in keys:
                by_topic.setdefault(topic, []).append(index)
            response = await self._send(
                node_id, "Fetch", wait_ms=max_wait_ms, cluster_id=None, replica_id=-1,
                max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=READ_UNCOMMITTED,
                session_id=0, session_epoch=-1,
                topics=[R.FetchTopic(topic=t, partitions=[
                    R.FetchPartition(partition=i, current_leader_epoch=-1, fetch_offset=positions[(t, i)],
                                     last_fetched_epoch=-1, log_start_offset=-1,
                                     partition_max_bytes=PARTITION_FETCH_BYTES_MAX)
                    for i in ixs
                ]) for t, ixs in by_topic.items()],
                forgotten_topics_data=[], rack_id="",
            )
            if response.error_code != ErrorCode.NONE:
                log.info("rest: Fetch from broker %s: %s", node_id, ErrorCode(response.error_code).name)
                return {}
            return {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}

        outcomes = await asyncio.gather(*(self._settle(send(n, keys)) for n, keys in routes.items()))
        answers: dict[tuple[str, int], Any] = {}
        for node_id, outcome in zip(routes, outcomes):
            if isinstance(outcome, (_Unsent, _Lost)):
                log.info("rest: Fetch from broker %s: %s", node_id, outcome)
                continue
            answers.update(outcome)
        return answers
