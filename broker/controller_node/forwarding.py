"""Requests a broker passes on to the active controller.

A Kafka broker in KRaft mode is not the controller; it forwards the admin
requests that change metadata (CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs, IncrementalAlterConfigs, ElectLeaders, AlterPartitionReassignments,
AlterUserScramCredentials, AlterClientQuotas, UpdateFeatures) and ListPartitionReassignments to the active controller and relays the
answer, and asks it for producer-id blocks and internal topics. pybroker does
the same over the controller listener of the quorum's leader, with the
request's own API and version (the controller serves the same handlers), so
the client sees the controller's answer unchanged.

When this node is the leader, or no leader is known, or the leader does not
answer, nothing is forwarded: the local handler runs and answers
NOT_CONTROLLER where it cannot act, which clients retry after refreshing
metadata.

A controller that does not answer is not asked again at once: attempts to it
back off exponentially (from ``RECONNECT_BACKOFF_MS`` to
``RECONNECT_BACKOFF_MAX_MS`` with 20% jitter, the defaults of Kafka's clients'
``reconnect.backoff.ms`` and ``reconnect.backoff.max.ms``) until one succeeds;
``send`` answers None meanwhile without trying. The backoff is kept per
controller, so a newly elected one is asked at once. Failures are logged as a
WARNING at the first one, then at most every ``FAILURE_LOG_INTERVAL_S`` with
the count since, so a controller that is down for long does not flood the log.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random

from broker.handlers.cluster_links import FORWARDED_LINK_API_KEYS
from broker.net.dispatch import AnswerLater, RequestContext
from broker.net.node_client import KafkaClientConnection
from controller.topic_commands import CreateTopicResult, CreateTopicSpec
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes

log = logging.getLogger(__name__)

# The admin APIs a broker forwards (Kafka's ForwardingManager list, as far as pybroker serves them).
# ListPartitionReassignments (46) only reads, but the controller answers it in
# Kafka too: its view of running reassignments is the authoritative one.
# pybroker's cluster link APIs that change metadata go too, and
# the balancer's DescribeBalancerStatus and AlterBrokerPlacements (16010, 16011):
# only the active controller runs the balancer.
FORWARDED_API_KEYS = frozenset({19, 20, 33, 37, 43, 44, 45, 46, 49, 51, 57, 16010, 16011}) | FORWARDED_LINK_API_KEYS
CREATE_TOPICS = APIS_BY_NAME["CreateTopics"]
ALLOCATE_PRODUCER_IDS = APIS_BY_NAME["AllocateProducerIds"]
CREATE_TOPICS_VERSION = 7
# How long a forwarded request waits for a leader to answer (across a failover).
FORWARD_TIMEOUT_MS = 15000
FORWARD_RETRY_MS = 100
RECONNECT_BACKOFF_MS = 50
RECONNECT_BACKOFF_MAX_MS = 1000
RECONNECT_BACKOFF_JITTER = 0.2
FAILURE_LOG_INTERVAL_S = 10.0
_CT = struct_classes(CREATE_TOPICS.request)
_APID = struct_classes(ALLOCATE_PRODUCER_IDS.request)


class ControllerBackoff:
    """One controller's failed attempts: when the next may be made, and what to log.

    Pure bookkeeping over the times it is given (loop seconds), so the policy
    is tested without a network."""

    def __init__(self, controller_id: int, rng: random.Random | None = None):
        self.controller_id = controller_id
        self._rng = rng or random.Random()
        self.failures = 0  # in a row, since the last answer
        self.retry_at_s = 0.0
        self._logged_at_s: float | None = None
        self._unlogged = 0

    def ready(self, now_s: float) -> bool:
        return now_s >= self.retry_at_s

    def backoff_ms(self) -> float:
        """The wait after the current run of failures (0 before the first)."""
        if self.failures == 0:
            return 0.0
        base = min(RECONNECT_BACKOFF_MS * 2 ** (self.failures - 1), RECONNECT_BACKOFF_MAX_MS)
        return base * self._rng.uniform(1 - RECONNECT_BACKOFF_JITTER, 1 + RECONNECT_BACKOFF_JITTER)

    def failed(self, now_s: float, what: str, error: object) -> str | None:
        """Count a failure; the WARNING to log now, or None (rate-limited)."""
        self.failures += 1
        self.retry_at_s = now_s + self.backoff_ms() / 1000
        if self._logged_at_s is None:
            self._logged_at_s, self._unlogged = now_s, 0
            return (
                f"cannot reach controller {self.controller_id} ({what}: {error}); retrying with backoff "
                f"up to {RECONNECT_BACKOFF_MAX_MS} ms, logging at most every {FAILURE_LOG_INTERVAL_S:.0f} s"
            )
        self._unlogged += 1
        if now_s - self._logged_at_s < FAILURE_LOG_INTERVAL_S:
            return None
        message = (
            f"still cannot reach controller {self.controller_id}: {self._unlogged} more failed attempt(s) "
            f"in {now_s - self._logged_at_s:.0f} s ({what}: {error})"
        )
        self._logged_at_s, self._unlogged = now_s, 0
        return message

    def answered(self) -> str | None:
        """Reset after an answer; the line to log when it ends a run of failures."""
        failures, self.failures = self.failures, 0
        self.retry_at_s = 0.0
        self._logged_at_s, self._unlogged = None, 0
        return f"controller {self.controller_id} answers again after {failures} failed attempt(s)" if failures else None

    def retry_now(self) -> None:
        """The next attempt goes out at once (a new phase, such as a controlled
        shutdown, should not inherit a long wait); the failure count and the
        log's rate limit stay."""
        self.retry_at_s = 0.0


class ControllerChannel:
    """Connections to the active controller's controller listener."""

    def __init__(self, broker):
        self.broker = broker
        self._connections: dict[int, KafkaClientConnection] = {}
        self._backoffs: dict[int, ControllerBackoff] = {}

    def _leader_address(self) -> tuple[str, int] | None:
        leader = self.broker.raft.leader_id
        return None if leader is None else self.broker.config.quorum_voters.get(leader)

    def _backoff(self, controller_id: int) -> ControllerBackoff:
        backoff = self._backoffs.get(controller_id)
        if backoff is None:
            backoff = self._backoffs[controller_id] = ControllerBackoff(controller_id)
        return backoff

    def retry_now(self) -> None:
        for backoff in self._backoffs.values():
            backoff.retry_now()

    async def send(self, api, api_version: int, body, *, timeout_ms: int | None = None):
        """The leader's response body, or None when there is no leader to ask, it did
        not answer, or it is still in its backoff after failed attempts."""
        leader = self.broker.raft.leader_id
        address = self._leader_address()
        if address is None:
            return None
        loop = asyncio.get_running_loop()
        backoff = self._backoff(leader)
        if not backoff.ready(loop.time()):
            return None
        connection = self._connections.get(leader)
        if connection is None:
            connection = self.broker.node_connection(address[0], address[1], f"broker-{self.broker.node_id}", to="controller")
            self._connections[leader] = connection
        timeout_ms = timeout_ms or self.broker.config.raft_config.request_timeout_ms * 5
        try:
            response = await connection.request(api, api_version, body, timeout_ms=timeout_ms)
        except (TimeoutError, OSError, ConnectionError) as exc:
            log.debug("forwarding %s to controller %s failed: %s", api.name, leader, exc)
            message = backoff.failed(loop.time(), api.name, str(exc) or type(exc).__name__)
            if message is not None:
                log.warning("%s", message)
            return None
        message = backoff.answered()
        if message is not None:
            log.info("%s", message)
        return response

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

    async def to_active_controller(self, api, api_version: int, body):
        """A request of this broker's own (not a client's) to the active controller:
        answered in-process when this node is it (the handler its controller
        listener registered, without authorization: the broker asks itself),
        else sent as ``send`` does. None when there is no answer."""
        if not self.broker.raft.is_leader:
            return await self.send(api, api_version, body)
        spec = self.broker.controller_dispatcher.handlers.get(api.key)
        if spec is None or not spec.min_version <= api_version <= spec.max_version:
            log.debug("the controller listener does not serve %s v%d", api.name, api_version)
            return None
        context = RequestContext(
            api_key=api.key, api_version=api_version, correlation_id=0,
            client_id=f"broker-{self.broker.node_id}", peer="in-process",
        )
        answer = spec.handle(context, body)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, AnswerLater):
            answer = await answer.answer
        return answer

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
