"""The REST proxy as a client of the whole cluster: what another node must answer goes to it.

A broker answers Produce and ListOffsets only for the partitions it leads, the
group APIs only for the groups it coordinates, ListGroups with its own groups
and DescribeConfigs of a BROKER resource only for itself. ``ClusterKafka``
sends each such part to the node that answers it, as a Kafka client of the
cluster does: a partition's leader (from this broker's metadata image), a
group's coordinator (the leader of its ``__consumer_offsets`` partition,
``broker.groups.coordinator_of``), every unfenced broker for ListGroups, the
named broker for its configs. The part this broker answers goes through its own
dispatcher in-process (broker/http/rest/kafka.py); the others over the node-to-node
connection to the other node's inter-broker listener, with that listener's
security (``broker.node_connection``).

Authorization: there the other node sees this node's principal, a super user
(broker/config.py requires it with an authorizer), so each part is first
authorized here, for the HTTP caller's principal and host, as the handler would:
WRITE on the topic for Produce, DESCRIBE on the topic for ListOffsets, DESCRIBE
on the group for DescribeGroups, ConsumerGroupDescribe (whose answer is then
refused when the group uses a topic the caller may not DESCRIBE) and OffsetFetch
(whose answer then leaves out the topics the caller may not DESCRIBE, as the
handlers' do), DESCRIBE on the
cluster or else on each group for ListGroups, DESCRIBE_CONFIGS on the cluster
for broker configs. A refused part is never sent to another node: it goes to
this broker's own handler, which answers the refusal with its usual error code
(TOPIC_, GROUP_, CLUSTER_AUTHORIZATION_FAILED) before looking at leadership.

Retries, as a client's: a partition answered NOT_LEADER_OR_FOLLOWER or
LEADER_NOT_AVAILABLE (or UNKNOWN_TOPIC_OR_PARTITION by a node the image names as
its leader: that node has not seen the topic yet), a group answered
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE, and a
node that could not be connected to (nothing was sent) are tried again, routed
by the image of that moment, after Kafka's retry backoff (100 ms doubling to
1 s), at most ``ATTEMPTS_MAX`` times within ``RETRY_DEADLINE_S``. A request
whose connection broke after it was sent, or that timed out, is not resent: a
Produce may have been appended, and the proxy's producer is not idempotent, so
it would be written twice; its records are answered NETWORK_EXCEPTION or
REQUEST_TIMED_OUT (500) saying the outcome is unknown. Produce keeps acks=all.

Connections: one per node, pipelined, made on first use, at most
``NODE_CONNECTIONS_MAX`` (the least recently used is closed past that), all
closed when the proxy stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from broker.http.rest.errors import RestError, kafka_error
from broker.http.rest.kafka import REQUESTS, VERSIONS, InProcessKafka
from broker.net.node_client import AuthenticationFailed, ConnectionFailed, KafkaClientConnection
from broker.security.authorization import GROUP, TOPIC, allowed, cluster_allowed, config_refusal, denied
from controller.authorizer import AclOperation
from controller.metadata.records import RESOURCE_BROKER
from protocol.errors import ErrorCode
from protocol.leader_offsets import group_by_leader, list_offsets_answers, list_offsets_fields
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

log = logging.getLogger(__name__)

CLIENT_ID = "pybroker-rest"
NODE_CONNECTIONS_MAX = 64
CONNECT_TIMEOUT_MS = 5_000
REQUEST_TIMEOUT_MS = 30_000
# On top of a Produce's own timeout_ms, for its answer to travel back.
ANSWER_MARGIN_MS = 5_000
# Kafka's retry.backoff.ms and retry.backoff.max.ms defaults.
RETRY_BACKOFF_MS = 100
RETRY_BACKOFF_MAX_MS = 1_000
ATTEMPTS_MAX = 40
RETRY_DEADLINE_S = 30.0

LEADERSHIP_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE})
COORDINATOR_ERRORS = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE}
)
RESPONSES = {name: struct_classes(APIS_BY_NAME[name].response) for name in VERSIONS}
LOCAL = None  # the route of what this broker answers itself
NO_LEADER = -1  # the route of a partition without a leader now


class _Unsent(Exception):
    """Nothing reached the node (no address, connection refused): safe to try again."""


class _Lost(Exception):
    """The request was sent and no answer came (its outcome is unknown: a read may be
    asked again, a Produce may not), or the node refused our credentials (``again``
    False: asking again would only fail again)."""

    def __init__(self, message: str, error: ErrorCode, again: bool = True):
        super().__init__(message)
        self.error = error
        self.again = again


class _Asker:
    """The HTTP caller as broker/security/authorization.py reads a request's context."""

    __slots__ = ("host", "principal")

    def __init__(self, principal: str, host: str):
        self.principal = principal
        self.host = host


class NodeConnections:
    """Connections of the proxy to the other nodes' inter-broker listeners, by node id."""

    def __init__(self, broker, limit: int = NODE_CONNECTIONS_MAX):
        self._broker = broker
        self._limit = limit
        self._connections: OrderedDict[int, tuple[tuple[str, int], KafkaClientConnection]] = OrderedDict()
        self._closed = False

    def address(self, node_id: int) -> tuple[str, int] | None:
        registration = self._broker.image.brokers.get(node_id)
        name = self._broker.config.inter_broker_listener_name
        endpoint = None if registration is None or name is None else registration.endpoint(name)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def get(self, node_id: int) -> KafkaClientConnection:
        if self._closed:
            raise _Unsent("the REST proxy is stopping")
        address = self.address(node_id)
        if address is None:
            raise _Unsent(f"broker {node_id} has no inter-broker endpoint in the metadata")
        held = self._connections.get(node_id)
        if held is not None and held[0] == address:
            self._connections.move_to_end(node_id)
            return held[1]
        if held is not None:
            held[1].close()  # the node came back on another address
        connection = self._broker.node_connection(
            address[0], address[1], f"{CLIENT_ID}-{self._broker.node_id}", to="broker", connect_timeout_ms=CONNECT_TIMEOUT_MS
        )
        self._connections[node_id] = (address, connection)
        while len(self._connections) > self._limit:
            _, (_, oldest) = self._connections.popitem(last=False)
            oldest.close()
        return connection

    def close(self) -> None:
        self._closed = True
        for _, connection in self._connections.values():
            connection.close()
        self._connections.clear()


class ClusterKafka:
    """The Kafka requests of one HTTP request, as ``principal`` from ``host``, each part
    answered by the node that owns it. ``call`` is the in-process client (this broker)."""

    def __init__(self, broker, nodes: NodeConnections, principal: str, host: str):
        self._broker = broker
        self._nodes = nodes
        self._local = InProcessKafka(broker, principal, host)
        self._asker = _Asker(principal, host)

    async def call(self, api_name: str, **fields):
        """One request to this broker's dispatcher (what any broker answers alike)."""
        return await self._local.call(api_name, **fields)

    # ------------------------------------------------------------------ plumbing

    async def _send(self, node_id, api_name: str, *, wait_ms: int = REQUEST_TIMEOUT_MS, **fields):
        """One request to ``node_id`` (LOCAL: this broker), its answer awaited ``wait_ms``
        plus a margin; _Unsent or _Lost when no answer came."""
        if node_id is LOCAL or node_id == self._broker.node_id:
            return await self._local.call(api_name, **fields)
        connection = self._nodes.get(node_id)
        api = APIS_BY_NAME[api_name]
        try:
            return await connection.request(api, VERSIONS[api_name], api.request.cls(**fields), timeout_ms=wait_ms + ANSWER_MARGIN_MS)
        except AuthenticationFailed as exc:
            raise _Lost(f"broker {node_id}: {exc}", ErrorCode.NETWORK_EXCEPTION, again=False) from None
        except ConnectionFailed as exc:
            # kafka_client raises the connect attempt's failure from its OSError; a
            # connection that broke later has no such cause (the request was written).
            if isinstance(exc.__cause__, OSError):
                raise _Unsent(str(exc)) from None
            raise _Lost(
                f"the connection to broker {node_id} broke after the request was sent: it may or may not have been applied ({exc})",
                ErrorCode.NETWORK_EXCEPTION,
            ) from None
        except TimeoutError:
            raise _Lost(
                f"broker {node_id} did not answer within {(wait_ms + ANSWER_MARGIN_MS) / 1000:.0f} s: "
                "the request may or may not have been applied",
                ErrorCode.REQUEST_TIMED_OUT,
            ) from None

    async def _retrying(self, attempt: Callable[[bool], Awaitable[bool]]) -> None:
        """Run ``attempt(last)`` until it says it is done (True), with the backoff between
        tries; ``last`` tells it to settle everything it still has."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RETRY_DEADLINE_S
        backoff_ms = RETRY_BACKOFF_MS
        for number in range(1, ATTEMPTS_MAX + 1):
            last = number == ATTEMPTS_MAX or loop.time() + backoff_ms / 1000 >= deadline
            if await attempt(last) or last:
                return
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, RETRY_BACKOFF_MAX_MS)

    def _leader_route(self, topic: str, index: int, operation: int):
        """Where a partition's request goes: LOCAL (this broker leads it, the image does not
        know it, or the caller may not ``operation`` the topic: the handler here answers the
        refusal), a node id, or -1 while it has no leader."""
        image_topic = self._broker.image.topics.get(topic)
        partition = None if image_topic is None else image_topic.partitions.get(index)
        if partition is None or partition.leader == self._broker.node_id:
            return LOCAL
        if not allowed(self._broker, self._asker, operation, TOPIC, topic):
            return LOCAL
        return partition.leader

    def _coordinator_route(self, group: str):
        """LOCAL when this broker coordinates ``group``, has no coordinator for it yet (its
        handler answers that), or the caller may not DESCRIBE it; else the coordinator's id."""
        if not allowed(self._broker, self._asker, AclOperation.DESCRIBE, GROUP, group):
            return LOCAL
        error, coordinator = self._broker.groups.coordinator_of(group)
        if error != ErrorCode.NONE or coordinator == self._broker.node_id:
            return LOCAL
        return coordinator

    def _stale(self, node_id, topic: str, index: int, error: int) -> bool:
        """Whether a partition's answer means: route again from the image."""
        if error in LEADERSHIP_ERRORS:
            return True
        if error != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or node_id is LOCAL:
            return False
        # Another node that has not seen the topic yet, while the image here has it.
        image_topic = self._broker.image.topics.get(topic)
        return image_topic is not None and index in image_topic.partitions

    # ------------------------------------------------------------------ Produce

    async def produce(self, topic: str, batches: dict[int, bytes], *, acks: int, timeout_ms: int) -> dict[int, Any]:
        """Each partition's record batch to its leader (acks, timeout_ms as a Produce's);
        the PartitionProduceResponse per partition."""
        R, A = REQUESTS["Produce"], RESPONSES["Produce"]
        answers: dict[int, Any] = {}
        pending = dict(batches)

        async def send(node_id, indexes: list[int]):
            response = await self._send(
                node_id, "Produce", wait_ms=timeout_ms, transactional_id=None, acks=acks, timeout_ms=timeout_ms,
                topic_data=[R.TopicProduceData(name=topic, partition_data=[R.PartitionProduceData(index=i, records=pending[i]) for i in indexes])],
            )
            return {p.index: p for t in response.responses if t.name == topic for p in t.partition_responses}

        def failed(index: int, error: ErrorCode, message: str):
            return A.PartitionProduceResponse(
                index=index, error_code=error, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
                record_errors=[], error_message=message,
            )

        async def attempt(last: bool) -> bool:
            routes: dict[Any, list[int]] = {}
            for index in pending:
                node_id = self._leader_route(topic, index, AclOperation.WRITE)
                if node_id is not LOCAL and node_id < 0:
                    if last:
                        answers[index] = failed(index, ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{index} has no leader")
                    continue
                routes.setdefault(node_id, []).append(index)
            outcomes = await asyncio.gather(*(self._settle(send(n, ix)) for n, ix in routes.items()))
            for (node_id, indexes), outcome in zip(routes.items(), outcomes):
                for index in indexes:
                    if isinstance(outcome, _Unsent):
                        if last:
                            answers[index] = failed(index, ErrorCode.NETWORK_EXCEPTION, f"cannot reach the leader of {topic}-{index}: {outcome}")
                    elif isinstance(outcome, _Lost):
                        answers[index] = failed(index, outcome.error, str(outcome))
                    else:
                        p = outcome.get(index)
                        if p is None:
                            answers[index] = failed(index, ErrorCode.UNKNOWN_SERVER_ERROR, "the leader did not answer for this partition")
                        elif last or not self._stale(node_id, topic, index, p.error_code):
                            answers[index] = p
            for index in answers:
                pending.pop(index, None)
            return not pending

        await self._retrying(attempt)
        return answers

    @staticmethod
    async def _settle(sending: Awaitable):
        """The answer, or the _Unsent/_Lost that stood for it."""
        try:
            return await sending
        except (_Unsent, _Lost) as exc:
            return exc

    # ------------------------------------------------------------------ ListOffsets

    async def list_offsets(self, wanted: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], Any]:
        """The ListOffsetsPartitionResponse of each (topic, partition), asked of its leader;
        a partition that could not be asked is left out."""
        answers: dict[tuple[str, int], Any] = {}
        pending = list(dict.fromkeys(wanted))

        async def send(node_id, keys):
            return list_offsets_answers(await self._send(node_id, "ListOffsets", **list_offsets_fields(keys, timestamp)))

        def route(key: tuple[str, int]):
            node_id = self._leader_route(key[0], key[1], AclOperation.DESCRIBE)
            return node_id if node_id is LOCAL or node_id >= 0 else NO_LEADER

        async def attempt(last: bool) -> bool:
            routes, _ = group_by_leader(pending, route, no_leader=NO_LEADER)
            outcomes = await asyncio.gather(*(self._settle(send(n, keys)) for n, keys in routes.items()))
            for (node_id, keys), outcome in zip(routes.items(), outcomes):
                if isinstance(outcome, (_Unsent, _Lost)):
                    if last or not _again(outcome):
                        log.info("rest: ListOffsets of %d partitions: %s", len(keys), outcome)
                        pending[:] = [k for k in pending if k not in keys]  # left out: no end offset to show
                    continue
                for key in keys:
                    p = outcome.get(key)
                    if p is not None and (last or not self._stale(node_id, key[0], key[1], p.error_code)):
                        answers[key] = p
            pending[:] = [k for k in pending if k not in answers]
            return not pending

        await self._retrying(attempt)
        return answers

    # ------------------------------------------------------------------ groups

    async def describe_groups(self, groups: list[str]) -> list[Any]:
        """The DescribedGroup of each group, in order, from its coordinator."""
        return await self._describe("DescribeGroups", "groups", groups)

    async def describe_consumer_groups(self, groups: list[str]) -> list[Any]:
        """The ConsumerGroupDescribe answer of each group, in order, from its coordinator
        (GROUP_ID_NOT_FOUND for a group that is not a KIP-848 consumer group)."""
        return await self._describe("ConsumerGroupDescribe", "group_ids", groups)

    async def _describe(self, api_name: str, ids_field: str, groups: list[str]) -> list[Any]:
        answers: dict[str, Any] = {}
        pending = list(dict.fromkeys(groups))

        async def attempt(last: bool) -> bool:
            routes: dict[Any, list[str]] = {}
            for group in pending:
                routes.setdefault(self._coordinator_route(group), []).append(group)
            outcomes = await asyncio.gather(*(
                self._settle(self._send(n, api_name, **{ids_field: ids}, include_authorized_operations=False))
                for n, ids in routes.items()
            ))
            for (node_id, ids), outcome in zip(routes.items(), outcomes):
                if isinstance(outcome, (_Unsent, _Lost)):
                    if last or not _again(outcome):
                        raise _unreachable(node_id, outcome)
                    continue
                for g in outcome.groups:
                    if last or g.error_code not in COORDINATOR_ERRORS:
                        if node_id is not LOCAL and api_name == "ConsumerGroupDescribe":
                            self._refuse_unseen_topics(g)
                        answers[g.group_id] = g
            pending[:] = [g for g in pending if g not in answers]
            return not pending

        await self._retrying(attempt)
        missing = [g for g in groups if g not in answers]
        if missing:
            raise _no_answer(f"no coordinator described group {missing[0]}")
        return [answers[g] for g in groups]

    def _refuse_unseen_topics(self, described) -> None:
        """What the ConsumerGroupDescribe handler answers the HTTP caller itself: a group
        whose members subscribe to or hold a topic it may not DESCRIBE is refused
        (TOPIC_AUTHORIZATION_FAILED, no members); the other node saw this node's principal."""
        if described.error_code != ErrorCode.NONE:
            return
        topics = set()
        for m in described.members:
            topics.update(m.subscribed_topic_names)
            for assignment in (m.assignment, m.target_assignment):
                topics.update(t.topic_name for t in assignment.topic_partitions)
        if denied(self._broker, self._asker, AclOperation.DESCRIBE, TOPIC, topics - {""}):
            described.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            described.error_message = "The described group uses topics that the client is not authorized to describe."
            described.members = []

    async def offset_fetch_all(self, group: str):
        """OffsetFetch of every committed offset of ``group``, from its coordinator,
        without the topics the caller may not DESCRIBE (as the handler answers)."""
        result: list = []

        async def attempt(last: bool) -> bool:
            node_id = self._coordinator_route(group)
            try:
                response = await self._send(node_id, "OffsetFetch", group_id=group, topics=None, require_stable=False)
            except (_Unsent, _Lost) as exc:
                if last or not _again(exc):
                    raise _unreachable(node_id, exc) from None
                return False
            if not last and response.error_code in COORDINATOR_ERRORS:
                return False
            if node_id is not LOCAL:
                refused = denied(self._broker, self._asker, AclOperation.DESCRIBE, TOPIC, (t.name for t in response.topics))
                if refused:
                    response.topics = [t for t in response.topics if t.name not in refused]
            result.append(response)
            return True

        await self._retrying(attempt)
        if not result:
            raise _no_answer(f"no coordinator answered for group {group}")
        return result[0]

    async def list_groups(self) -> list[Any]:
        """ListGroups of every unfenced broker (each lists the groups it coordinates),
        as the caller may see them; one entry per group id. A broker that cannot be
        asked is asked again, with the brokers the image then lists (a dead one drops
        out once the controller fences it), and fails the listing when time is up,
        rather than leaving its groups out unsaid."""
        see_all = cluster_allowed(self._broker, self._asker, AclOperation.DESCRIBE)
        listed: dict[str, Any] = {}
        answered: set = set()

        async def attempt(last: bool) -> bool:
            unfenced = self._broker.image.unfenced_broker_ids()
            nodes = [LOCAL] + [n for n in unfenced if n != self._broker.node_id]
            nodes = [n for n in nodes if n not in answered]
            outcomes = await asyncio.gather(*(
                self._settle(self._send(n, "ListGroups", states_filter=[], types_filter=[])) for n in nodes
            ))
            done = True
            for node_id, outcome in zip(nodes, outcomes):
                if isinstance(outcome, (_Unsent, _Lost)):
                    if last or not _again(outcome):
                        raise _unreachable(node_id, outcome)
                    done = False
                    continue
                if outcome.error_code in COORDINATOR_ERRORS and not last:
                    done = False  # still loading its __consumer_offsets partitions
                    continue
                if outcome.error_code != ErrorCode.NONE:
                    raise kafka_error(outcome.error_code)
                answered.add(node_id)
                for g in outcome.groups:
                    if node_id is LOCAL or see_all or allowed(self._broker, self._asker, AclOperation.DESCRIBE, GROUP, g.group_id):
                        listed.setdefault(g.group_id, g)
            return done

        await self._retrying(attempt)
        return list(listed.values())

    # ------------------------------------------------------------------ mirror topics

    async def describe_mirrors(self, topics: list[str]) -> list:
        """DescribeMirrors of ``topics`` asked of every live broker (each answers for the
        mirror partitions it leads); a broker that does not answer is an error, not
        a smaller answer."""
        image = self._broker.image
        live = sorted(b for b, r in image.brokers.items() if not r.fenced) or [self._broker.node_id]
        answers = []
        for node_id in live:
            answered: list = []

            async def attempt(last: bool, node_id=node_id, answered=answered) -> bool:
                try:
                    answered.append(await self._send(node_id, "DescribeMirrors", topics=topics))
                except (_Unsent, _Lost) as exc:
                    if last or not _again(exc):
                        raise _unreachable(node_id, exc) from None
                    return False
                return True

            await self._retrying(attempt)
            if not answered:
                raise _no_answer(f"broker {node_id} did not answer")
            answers.append(answered[0])
        return answers

    # ------------------------------------------------------------------ broker configs

    async def describe_broker_configs(self, broker_id: int):
        """DescribeConfigs of BROKER ``broker_id`` (every config, with synonyms), asked of
        that broker; the DescribeConfigsResult."""
        name = str(broker_id)
        node_id = broker_id
        if config_refusal(self._broker, self._asker, AclOperation.DESCRIBE_CONFIGS, RESOURCE_BROKER, name) is not None:
            node_id = LOCAL  # the handler here answers CLUSTER_AUTHORIZATION_FAILED
        fields = {
            "resources": [REQUESTS["DescribeConfigs"].DescribeConfigsResource(resource_type=RESOURCE_BROKER, resource_name=name, configuration_keys=None)],
            "include_synonyms": True, "include_documentation": False,
        }
        result: list = []

        async def attempt(last: bool) -> bool:
            try:
                result.append(await self._send(node_id, "DescribeConfigs", **fields))
            except (_Unsent, _Lost) as exc:
                if last or not _again(exc):
                    raise _unreachable(node_id, exc) from None
                return False
            return True

        await self._retrying(attempt)
        if not result:
            raise _no_answer(f"broker {broker_id} did not answer")
        return result[0].results[0]


def _again(exc: Exception) -> bool:
    """Whether a read that got no answer may be asked again."""
    return not isinstance(exc, _Lost) or exc.again


def _unreachable(node_id, exc: Exception) -> RestError:
    return RestError(500, 50003, f"NETWORK_EXCEPTION: broker {node_id}: {exc}")


def _no_answer(message: str) -> RestError:
    return RestError(500, 50003, message)
