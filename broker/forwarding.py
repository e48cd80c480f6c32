"""Requests a broker passes on to the active controller.

A Kafka broker in KRaft mode is not the controller; it forwards the admin
requests that change metadata (CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs, IncrementalAlterConfigs, ElectLeaders, AlterPartitionReassignments)
and ListPartitionReassignments to the active controller and relays the
answer, and asks it for producer-id blocks and internal topics. pybroker does
the same over the controller listener of the quorum's leader, with the
request's own API and version (the controller serves the same handlers), so
the client sees the controller's answer unchanged.

When this node is the leader, or no leader is known, or the leader does not
answer, nothing is forwarded: the local handler runs and answers
NOT_CONTROLLER where it cannot act, which clients retry after refreshing
metadata.
"""

from __future__ import annotations

import asyncio
import logging

from broker.kafka_client import KafkaClientConnection
from controller.topic_commands import CreateTopicResult, CreateTopicSpec
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_KEY
from protocol.schema import ZERO_UUID, struct_classes

log = logging.getLogger(__name__)

# The admin APIs a broker forwards (Kafka's ForwardingManager list, as far as pybroker serves them).
# ListPartitionReassignments (46) only reads, but the controller answers it in
# Kafka too: its view of running reassignments is the authoritative one.
FORWARDED_API_KEYS = frozenset({19, 20, 33, 37, 43, 44, 45, 46})
CREATE_TOPICS = APIS_BY_KEY[19]
ALLOCATE_PRODUCER_IDS = APIS_BY_KEY[67]
CREATE_TOPICS_VERSION = 7
# How long a forwarded request waits for a leader to answer (across a failover).
FORWARD_TIMEOUT_MS = 15000
FORWARD_RETRY_MS = 100
_CT = struct_classes(CREATE_TOPICS.request)
_APID = struct_classes(ALLOCATE_PRODUCER_IDS.request)


class ControllerChannel:
    """Connections to the active controller's controller listener."""

    def __init__(self, broker):
        self.broker = broker
        self._connections: dict[int, KafkaClientConnection] = {}

    def _leader_address(self) -> tuple[str, int] | None:
        leader = self.broker.raft.leader_id
        return None if leader is None else self.broker.config.quorum_voters.get(leader)

    async def send(self, api, api_version: int, body, *, timeout_ms: int | None = None):
        """The leader's response body, or None when there is no leader to ask or it did not answer."""
        leader = self.broker.raft.leader_id
        address = self._leader_address()
        if address is None:
            return None
        connection = self._connections.get(leader)
        if connection is None:
            connection = KafkaClientConnection(address[0], address[1], f"broker-{self.broker.node_id}")
            self._connections[leader] = connection
        timeout_ms = timeout_ms or self.broker.config.raft_config.request_timeout_ms * 5
        try:
            return await connection.request(api, api_version, body, timeout_ms=timeout_ms)
        except (TimeoutError, OSError, ConnectionError) as exc:
            log.info("forwarding %s to controller %s failed: %s", api.name, leader, exc)
            return None

    async def send_to_leader(self, api, api_version: int, body):
        """``send``, waiting out a leader change: while no leader is known, or the one
        we know does not answer, ask again until ``FORWARD_TIMEOUT_MS`` has passed
        (as a Kafka broker keeps a forwarded request queued). None when this node
        became the leader meanwhile (the caller acts locally) or time ran out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FORWARD_TIMEOUT_MS / 1000
        while not self.broker.raft.is_leader:
            response = await self.send(api, api_version, body)
            if response is not None:
                return response
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(FORWARD_RETRY_MS / 1000)
        return None

    async def forward(self, api, api_version: int, body):
        """For the dispatcher: the controller's answer to a client's admin request, or
        None to let the local handler answer."""
        if api.key not in FORWARDED_API_KEYS or self.broker.raft.is_leader:
            return None
        return await self.send_to_leader(api, api_version, body)

    # -- the broker's own requests ---------------------------------------------------

    async def create_topics(self, specs: list[CreateTopicSpec]) -> list[CreateTopicResult] | None:
        """Auto-created and internal topics, created by the active controller."""
        topics = [
            _CT.CreatableTopic(
                name=spec.name,
                num_partitions=spec.num_partitions if not spec.assignments else -1,
                replication_factor=spec.replication_factor if not spec.assignments else -1,
                assignments=[
                    _CT.CreatableReplicaAssignment(partition_index=p, broker_ids=list(b)) for p, b in sorted(spec.assignments.items())
                ],
                configs=[_CT.CreatableTopicConfig(name=k, value=v) for k, v in spec.configs.items()],
            )
            for spec in specs
        ]
        body = _CT.CreateTopicsRequest(topics=topics, timeout_ms=30000, validate_only=False)
        response = await self.send_to_leader(CREATE_TOPICS, CREATE_TOPICS_VERSION, body)
        if response is None:
            return None
        return [
            CreateTopicResult(
                t.name,
                ErrorCode(t.error_code),
                t.error_message,
                topic_id=t.topic_id if t.topic_id is not None else ZERO_UUID,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                configs={c.name: c.value for c in (t.configs or [])},
            )
            for t in response.topics
        ]

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> range | None:
        body = _APID.AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=broker_epoch)
        response = await self.send_to_leader(ALLOCATE_PRODUCER_IDS, 0, body)
        if response is None or response.error_code != ErrorCode.NONE:
            return None
        return range(response.producer_id_start, response.producer_id_start + response.producer_id_len)

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
