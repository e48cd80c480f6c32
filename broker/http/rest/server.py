"""The REST proxy's HTTP server (``rest.listener=http://HOST:PORT``), on the broker's event loop.

aiohttp serves HTTP/1.1 (keep-alive, chunked request and response bodies), under
the limits every endpoint has (broker/http/server.py: connections at once,
request head size and time, the idle time of a kept-alive connection);
routes come from ``ROUTES``, which also makes the OpenAPI document served at
``GET /v3/openapi.json`` (broker/http/rest/openapi.py), so the document says
exactly what is served.

Authentication: ``rest.authentication.method=NONE`` (default) makes every
caller User:ANONYMOUS; ``BASIC`` requires HTTP basic credentials checked
against the PLAIN users (``user_<name>="<password>"``) of a SASL listener's
``listener.name.<l>.plain.sasl.jaas.config`` (``rest.authentication.listener``,
else the first listener that has one); the caller is then User:<name>, and the
broker's authorizer decides what it may do, as for any Kafka client. A request
without valid credentials is answered 401 with a ``WWW-Authenticate`` header.

Errors are Confluent's ``{"error_code", "message"}`` (broker/http/rest/errors.py),
unknown paths and methods included; under ``/consumers/`` (the v2 consumer API,
broker/http/rest/consumer_routes.py) in ``application/vnd.kafka.v2+json``, as
Confluent's proxy answers them. ``GET /v3`` says where the clusters and the
OpenAPI document are.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from broker.http.rest import balancer_resources, cluster_resources, consumer_routes, link_resources, openapi, resources
from broker.http.rest.cluster import ClusterKafka, NodeConnections
from broker.http.rest.consumer_instances import ConsumerInstances
from broker.http.rest.consumer_routes import V2_REQUEST_TYPES, V2_TYPE
from broker.http.rest.errors import RestError, bad_request
from broker.http.rest.kafka import KafkaCallFailed
from broker.http.rest.records import ROUND_RECORDS_MAX, Producer, RecordStream, answer_of
from broker.http.rest.resources import Call
from broker.http.server import HttpServer, application

log = logging.getLogger(__name__)

# Bodies of the non-streaming resources (topic creation, config changes): small.
REQUEST_BODY_MAX_BYTES = 1 << 20
# A streaming produce may last as long as its client sends; a body that stops
# arriving is ended after this long, so a stalled client does not hold it forever.
BODY_IDLE_TIMEOUT_S = 60.0
JSON_TYPE = "application/json"


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    operation_id: str
    summary: str
    handle: Callable[[Call], Awaitable[Any]] | None
    response: str | None  # the schema name of a 200/201 answer; None: 204 No Content
    request: str | None = None  # the schema name of the JSON body
    status: int = 200
    query: tuple[str, ...] = ()  # the query parameters it reads
    media: str = "application/json"  # of its bodies and errors (v2: application/vnd.kafka.v2+json)
    body_optional: bool = False  # v2: a body may be left out
    answers: tuple[str, ...] = ()  # the content types of its 200 answer, when not ``media``


C = "/v3/clusters/{cluster_id}"
ROUTES = (
    Route("GET", "/v3/clusters", "listKafkaClusters", "The cluster (one per proxy).", resources.list_clusters, "ClusterList"),
    Route("GET", C, "getKafkaCluster", "The cluster.", resources.get_cluster, "Cluster"),
    Route("GET", C + "/brokers", "listKafkaBrokers", "The cluster's brokers.", resources.list_brokers, "BrokerList"),
    Route("GET", C + "/brokers/{broker_id}", "getKafkaBroker", "One broker.", resources.get_broker, "Broker"),
    Route("DELETE", C + "/brokers/{broker_id}", "deleteKafkaBroker",
          "Remove a broker: the balancer moves its replicas off (never shuts it down; ?should_shutdown=true is refused).",
          balancer_resources.remove_broker, "BrokerTask", status=202, query=("should_shutdown",)),
    Route("GET", C + "/brokers/-/tasks", "listKafkaBrokerTasks", "The remove-broker tasks (brokers being drained).",
          balancer_resources.list_all_tasks, "BrokerTaskList"),
    Route("GET", C + "/brokers/{broker_id}/tasks", "getKafkaBrokerTasks", "A broker's remove-broker task, if it has one.",
          balancer_resources.list_broker_tasks, "BrokerTaskList"),
    Route("GET", C + "/balancer", "getKafkaBalancerStatus",
          "The balancer of the active controller: state, moves in flight, per-broker distribution now and before.",
          balancer_resources.get_balancer, "BalancerStatus"),
    Route("GET", C + "/brokers/{broker_id}/configs", "listKafkaBrokerConfigs", "A broker's configs.",
          resources.list_broker_configs, "BrokerConfigList"),
    Route("GET", C + "/brokers/{broker_id}/configs/{name}", "getKafkaBrokerConfig", "One broker config.",
          cluster_resources.get_broker_config, "BrokerConfig"),
    Route("GET", C + "/brokers/{broker_id}/partition-replicas", "searchReplicasByBroker",
          "The partition replicas a broker holds.", cluster_resources.list_broker_replicas, "ReplicaList"),
    Route("GET", C + "/broker-configs", "listKafkaClusterConfigs", "The dynamic cluster-wide broker configs that are set.",
          cluster_resources.list_cluster_broker_configs, "ClusterConfigList"),
    Route("GET", C + "/broker-configs/{name}", "getKafkaClusterConfig", "One dynamic cluster-wide broker config.",
          cluster_resources.get_cluster_broker_config, "ClusterConfig"),
    Route("GET", C + "/acls", "getKafkaAcls", "The ACLs matching a filter (query parameters).",
          cluster_resources.search_acls, "AclList", query=("resource_type", "resource_name", "pattern_type", "principal",
                                                           "host", "operation", "permission")),
    Route("GET", C + "/topics/-/partitions/-/reassignment", "listKafkaPartitionReassignments",
          "Every ongoing partition reassignment.", cluster_resources.list_all_reassignments, "ReassignmentList"),
    Route("GET", C + "/topics", "listKafkaTopics", "The topics.", resources.list_topics, "TopicList"),
    Route("POST", C + "/topics", "createKafkaTopic", "Create a topic.", resources.create_topic, "Topic",
          request="CreateTopicRequest", status=201),
    Route("GET", C + "/topics/{topic_name}", "getKafkaTopic", "One topic.", resources.get_topic, "Topic"),
    Route("DELETE", C + "/topics/{topic_name}", "deleteKafkaTopic", "Delete a topic.", resources.delete_topic, None),
    Route("GET", C + "/topics/{topic_name}/configs", "listKafkaTopicConfigs", "A topic's configs.",
          resources.list_topic_configs, "TopicConfigList"),
    Route("POST", C + "/topics/{topic_name}/configs:alter", "updateKafkaTopicConfigBatch",
          "Set or delete several of a topic's configs.", resources.alter_topic_configs, None, request="AlterConfigBatchRequest"),
    Route("GET", C + "/topics/{topic_name}/configs/{name}", "getKafkaTopicConfig", "One topic config.",
          resources.get_topic_config, "TopicConfig"),
    Route("PUT", C + "/topics/{topic_name}/configs/{name}", "updateKafkaTopicConfig", "Set a topic config.",
          resources.update_topic_config, None, request="UpdateConfigRequest"),
    Route("DELETE", C + "/topics/{topic_name}/configs/{name}", "resetKafkaTopicConfig",
          "Reset a topic config to its default.", resources.reset_topic_config, None),
    Route("GET", C + "/topics/{topic_name}/partitions", "listKafkaPartitions", "A topic's partitions.",
          resources.list_partitions, "PartitionList"),
    Route("GET", C + "/topics/{topic_name}/partitions/{partition_id}", "getKafkaPartition", "One partition.",
          resources.get_partition, "Partition"),
    Route("GET", C + "/topics/{topic_name}/partitions/-/reassignment", "searchKafkaReassignmentsByTopic",
          "A topic's ongoing partition reassignments.", cluster_resources.list_topic_reassignments, "ReassignmentList"),
    Route("GET", C + "/topics/{topic_name}/partitions/{partition_id}/reassignment", "getKafkaPartitionReassignment",
          "A partition's ongoing reassignment.", cluster_resources.get_reassignment, "Reassignment"),
    Route("GET", C + "/topics/{topic_name}/partitions/{partition_id}/replicas", "listKafkaReplicas",
          "A partition's replicas.", cluster_resources.list_replicas, "ReplicaList"),
    Route("GET", C + "/topics/{topic_name}/partitions/{partition_id}/replicas/{broker_id}", "getKafkaReplica",
          "One replica of a partition.", cluster_resources.get_replica, "Replica"),
    Route("POST", C + "/topics/{topic_name}/records", "produceRecord",
          "Produce records: one JSON record, or several concatenated (streaming mode).", None, "ProduceResponse",
          request="ProduceRequest"),
    Route("GET", C + "/links", "listKafkaLinks", "The cluster links of this (destination) cluster.",
          link_resources.list_links, "LinkList"),
    Route("POST", C + "/links", "createKafkaLink", "Create a cluster link (?link_name=NAME).", link_resources.create_link,
          None, request="CreateLinkRequest", query=("link_name", "validate_only")),
    Route("GET", C + "/links/{link_name}", "getKafkaLink", "One cluster link.", link_resources.get_link, "Link"),
    Route("DELETE", C + "/links/{link_name}", "deleteKafkaLink", "Delete a cluster link (?force=true: with its mirrors).",
          link_resources.delete_link, None, query=("force", "validate_only")),
    Route("GET", C + "/links/{link_name}/configs", "listKafkaLinkConfigs", "A cluster link's settings.",
          link_resources.list_link_configs, "LinkConfigList"),
    Route("GET", C + "/links/{link_name}/mirrors", "listKafkaMirrorTopicsUnderLink", "A link's mirror topics.",
          link_resources.list_mirrors, "MirrorList"),
    Route("POST", C + "/links/{link_name}/mirrors", "createKafkaMirrorTopic", "Create a mirror topic.",
          link_resources.create_mirror, "Mirror", request="CreateMirrorRequest", status=201, query=("validate_only",)),
    Route("POST", C + "/links/{link_name}/mirrors:promote", "updateKafkaMirrorTopicsPromote",
          "Promote mirror topics (caught up first, then writable).", link_resources.promote_mirrors, "AlterMirrorsResult",
          request="AlterMirrorsRequest", query=("validate_only",)),
    Route("POST", C + "/links/{link_name}/mirrors:failover", "updateKafkaMirrorTopicsFailover",
          "Fail mirror topics over (stopped where they are, writable).", link_resources.failover_mirrors,
          "AlterMirrorsResult", request="AlterMirrorsRequest", query=("validate_only",)),
    Route("POST", C + "/links/{link_name}/mirrors:pause", "updateKafkaMirrorTopicsPause", "Pause mirror topics.",
          link_resources.pause_mirrors, "AlterMirrorsResult", request="AlterMirrorsRequest", query=("validate_only",)),
    Route("POST", C + "/links/{link_name}/mirrors:resume", "updateKafkaMirrorTopicsResume", "Resume paused mirror topics.",
          link_resources.resume_mirrors, "AlterMirrorsResult", request="AlterMirrorsRequest", query=("validate_only",)),
    Route("GET", C + "/consumer-groups", "listKafkaConsumerGroups", "The consumer groups.", resources.list_groups,
          "ConsumerGroupList"),
    Route("GET", C + "/consumer-groups/{consumer_group_id}", "getKafkaConsumerGroup", "One consumer group.",
          resources.get_group, "ConsumerGroup"),
    Route("GET", C + "/consumer-groups/{consumer_group_id}/consumers", "listKafkaConsumers", "A group's consumers.",
          resources.list_consumers, "ConsumerList"),
    Route("GET", C + "/consumer-groups/{consumer_group_id}/consumers/{consumer_id}", "getKafkaConsumer", "One consumer.",
          resources.get_consumer, "Consumer"),
    Route("GET", C + "/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments",
          "listKafkaConsumerAssignment", "A consumer's partitions.", resources.list_consumer_assignments,
          "ConsumerAssignmentList"),
    Route("GET", C + "/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments/{topic_name}/partitions/{partition_id}",
          "getKafkaConsumerAssignment", "One partition of a consumer.", resources.get_consumer_assignment,
          "ConsumerAssignment"),
    Route("GET", C + "/consumer-groups/{consumer_group_id}/lags/{topic_name}/partitions/{partition_id}",
          "getKafkaConsumerLag", "A group's lag on one partition.", resources.get_lag, "ConsumerLag"),
    Route("GET", C + "/consumer-groups/{consumer_group_id}/lag-summary", "getKafkaConsumerGroupLagSummary",
          "A group's total and largest lag.", resources.lag_summary, "ConsumerGroupLagSummary"),
    Route("GET", C + "/consumer-groups/{consumer_group_id}/lags", "listKafkaConsumerLags",
          "A group's lag per partition.", resources.list_lags, "ConsumerLagList"),
)

G = "/consumers/{group_name}"
I = G + "/instances/{instance}"


def _v2(method: str, path: str, operation_id: str, summary: str, handle, response: str | None, request: str | None = None,
        **more) -> Route:
    return Route(method, path, operation_id, summary, handle, response, request=request, media=V2_TYPE, **more)


# Confluent REST Proxy's v2 consumer API (broker/http/rest/consumer_routes.py).
V2_ROUTES = (
    _v2("POST", G, "createConsumerInstance", "Create a consumer instance in a group.", consumer_routes.create_instance,
        "ConsumerInstance", "CreateConsumerInstanceRequest", body_optional=True),
    _v2("DELETE", I, "deleteConsumerInstance", "Close a consumer instance (it leaves its group).",
        consumer_routes.delete_instance, None),
    _v2("POST", I + "/subscription", "subscribe", "Subscribe to topics or a topic pattern.", consumer_routes.subscribe, None,
        "SubscriptionRequest"),
    _v2("GET", I + "/subscription", "getSubscription", "The topics subscribed.", consumer_routes.get_subscription,
        "Subscription"),
    _v2("DELETE", I + "/subscription", "unsubscribe", "Unsubscribe (leave the group).", consumer_routes.unsubscribe, None),
    _v2("POST", I + "/assignments", "assignPartitions", "Assign partitions by hand.", consumer_routes.assign, None,
        "PartitionsRequest"),
    _v2("GET", I + "/assignments", "getAssignments", "The partitions assigned.", consumer_routes.get_assignments,
        "PartitionsRequest"),
    _v2("POST", I + "/positions", "seek", "Set positions.", consumer_routes.seek, None, "OffsetsRequest"),
    _v2("POST", I + "/positions/beginning", "seekToBeginning", "Move positions to the log start.",
        consumer_routes.seek_to_beginning, None, "PartitionsRequest"),
    _v2("POST", I + "/positions/end", "seekToEnd", "Move positions to the log end.", consumer_routes.seek_to_end, None,
        "PartitionsRequest"),
    _v2("POST", I + "/offsets", "commitOffsets", "Commit the positions, or the given offsets (each + 1).",
        consumer_routes.commit_offsets, None, "OffsetsRequest", body_optional=True),
    _v2("GET", I + "/committed/offsets", "getCommittedOffsets", "The group's committed offsets.",
        consumer_routes.committed_offsets, "CommittedOffsets", "PartitionsRequest", body_optional=True),
    _v2("GET", I + "/records", "readRecords", "Read records (Accept names the instance's format).",
        consumer_routes.read_records, "Records", query=("timeout", "max_bytes"),
        answers=tuple(consumer_routes.RECORD_TYPES.values())),
)


def plain_users(config):
    """The PLAIN users BASIC authentication checks; ConfigError naming the key when there are none."""
    from broker.config import ConfigError
    from broker.security.jaas import JaasConfigError
    from broker.security.plain_server import PlainUsers

    named = config["rest.authentication.listener"]
    candidates = [named] if named else [l.name for l in config.broker_listeners]
    for name in candidates:
        key = f"listener.name.{name.lower()}.plain.sasl.jaas.config"
        text = config.sasl.get(key)
        if text is None:
            continue
        try:
            users = PlainUsers.from_jaas_config(text)
        except JaasConfigError as exc:
            raise ConfigError(f"{key}: {exc}") from None
        if len(users):
            return users
    where = f"listener {named} has no" if named else "no broker listener has"
    raise ConfigError(
        f"rest.authentication.method=BASIC: {where} PLAIN users "
        "(listener.name.<listener>.plain.sasl.jaas.config with user_<name>=\"<password>\" options)"
    )


def _json(status: int, body, media: str = JSON_TYPE) -> web.Response:
    return web.Response(status=status, body=json.dumps(body).encode(), content_type=media)


def _error(exc: RestError, media: str = JSON_TYPE) -> web.Response:
    headers = {"WWW-Authenticate": 'Basic realm="pybroker"'} if exc.status == 401 else None
    response = _json(exc.status, exc.body(), media)
    if headers:
        response.headers.update(headers)
    return response


class RestProxy:
    """The aiohttp application and its site; ``start``/``stop`` from broker/app.py."""

    def __init__(self, broker, listener, *, plain_users=None):
        self.broker = broker
        self.listener = listener
        # None: no authentication (everyone is User:ANONYMOUS); else a PlainUsers check.
        self.plain_users = plain_users
        self.bound_port: int | None = None
        # To the other nodes, for what this broker cannot answer (broker/http/rest/cluster.py).
        self.nodes = NodeConnections(broker)
        self.openapi_document = openapi.document(ROUTES + V2_ROUTES)
        app = application(middlewares=[self._errors], client_max_size=REQUEST_BODY_MAX_BYTES)
        app.router.add_get("/v3/openapi.json", self._openapi)
        app.router.add_get("/v3", self._v3)
        for route in ROUTES + V2_ROUTES:
            app.router.add_route(route.method, route.path, self._handler(route))
        self.consumers = ConsumerInstances(broker, broker.config["rest.consumer.instance.timeout.ms"])
        self.app = app
        self.http = HttpServer(app, listener)

    @classmethod
    def from_config(cls, broker) -> RestProxy | None:
        listener = broker.config["rest.listener"]
        if listener is None:
            return None
        if not broker.is_broker:
            from broker.config import ConfigError

            raise ConfigError("rest.listener: the REST proxy needs a broker (process.roles with broker)")
        users = None
        if broker.config["rest.authentication.method"] == "BASIC":
            users = plain_users(broker.config)
        return cls(broker, listener, plain_users=users)

    async def start(self) -> None:
        self.bound_port = await self.http.start()
        host = f"[{self.listener.host}]" if ":" in self.listener.host else (self.listener.host or "0.0.0.0")
        log.info("rest: serving the REST proxy on http://%s:%d/v3", host, self.bound_port)

    async def stop(self) -> None:
        await self.http.stop()
        await self.consumers.close()
        self.nodes.close()

    # ------------------------------------------------------------------ plumbing

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        # The v2 API answers its errors in its own content type, as Confluent's proxy.
        media = V2_TYPE if request.path.startswith("/consumers/") else JSON_TYPE
        try:
            return await handler(request)
        except RestError as exc:
            return _error(exc, media)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return _error(RestError(exc.status, exc.status, f"HTTP {exc.status} {exc.reason}"), media)
        except KafkaCallFailed as exc:
            return _error(RestError(500, 50003, str(exc)), media)
        except Exception:
            # A bug of ours: logged, and answered in Confluent's shape rather than aiohttp's page.
            log.exception("REST proxy: %s %s failed", request.method, request.path)
            return _error(RestError(500, 500, "Internal Server Error"), media)

    def _principal(self, request: web.Request) -> str:
        if self.plain_users is None:
            return "User:ANONYMOUS"
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic" or not token:
            raise RestError(401, 401, "Unauthorized: basic credentials are required.")
        try:
            user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, ValueError):
            raise RestError(401, 401, "Unauthorized: malformed basic credentials.") from None
        if not sep or not self.plain_users.authenticate(user, password):
            raise RestError(401, 401, "Unauthorized: invalid username or password.")
        return f"User:{user}"

    def _call(self, request: web.Request) -> Call:
        principal = self._principal(request)
        host = request.remote or ""
        base = f"{request.scheme}://{request.host}"
        return Call(self.broker, ClusterKafka(self.broker, self.nodes, principal, host), base, dict(request.match_info),
                    query=dict(request.query), principal=principal, host=host, headers=request.headers,
                    consumers=self.consumers)

    def _handler(self, route: Route):
        types = V2_REQUEST_TYPES if route.media == V2_TYPE else (JSON_TYPE,)

        async def handle(request: web.Request) -> web.StreamResponse:
            call = self._call(request)
            has_body = request.body_exists and (request.content_length != 0)
            if route.request is not None and (has_body or not route.body_optional):
                _check_content_type(request, types)
            if route.handle is None:
                return await self._produce(request, call)
            if route.request is not None:
                raw = await request.read()
                if raw.strip() or not route.body_optional:
                    try:
                        call.body = json.loads(raw)
                    except (ValueError, UnicodeDecodeError) as exc:
                        raise bad_request(f"Malformed JSON: {exc}") from None
            answer = await route.handle(call)
            if isinstance(answer, tuple):
                status, body, *media = answer
                return _json(status, body, media[0] if media else route.media)
            if answer is None:
                return web.Response(status=204)
            return _json(route.status, answer, route.media)

        return handle

    async def _openapi(self, request: web.Request) -> web.Response:
        return _json(200, self.openapi_document)

    async def _v3(self, request: web.Request) -> web.Response:
        """What a client finds at the API's root: where the clusters and the API's description are."""
        self._principal(request)
        base = f"{request.scheme}://{request.host}/v3"
        return _json(200, {
            "kind": "KafkaRestApi", "metadata": {"self": base},
            "clusters": {"related": base + "/clusters"}, "openapi": {"related": base + "/openapi.json"},
        })

    async def _produce(self, request: web.Request, call: Call) -> web.StreamResponse:
        """Single or streaming produce (broker/http/rest/records.py): answer with the one
        record's status, or stream 200 with one result per record as they are acknowledged."""
        resources.check_cluster(call)
        producer = Producer(call)
        if producer.partitions == 0:
            # Not in this broker's image: Metadata says, as to any client, whether it is
            # unknown (404) or not the caller's to see (403), before anything is streamed.
            # A known topic goes straight to Produce, which authorizes each write itself.
            await resources.require_topic(call, call.params["topic_name"])
        stream = RecordStream(record_text_max=producer.size_max * 8 + 65536)
        held: list = []  # answers not written yet (the first waits to see whether more come)
        response: web.StreamResponse | None = None
        stream_error: RestError | None = None

        async def flush(final: bool) -> None:
            nonlocal response
            if response is None:
                if len(held) <= 1 and not final:
                    return
                if len(held) == 1 and final:
                    return
                response = web.StreamResponse(status=200, headers={"Content-Type": JSON_TYPE})
                response.enable_chunked_encoding()
                await response.prepare(request)
            out = b"".join(json.dumps(answer_of(r)[1] if not isinstance(r, RestError) else r.body()).encode() + b"\n" for r in held)
            held.clear()
            if out:
                await response.write(out)

        async def produce(values: list) -> None:
            for start in range(0, len(values), ROUND_RECORDS_MAX):
                records = [producer.parse(v) for v in values[start:start + ROUND_RECORDS_MAX]]
                await producer.produce(records)
                held.extend(records)
                await flush(False)

        final = False
        chunks = request.content.iter_any()
        while stream_error is None and not final:
            try:
                chunk = await asyncio.wait_for(anext(chunks, None), BODY_IDLE_TIMEOUT_S)
            except TimeoutError:
                stream_error = RestError(408, 408, f"No part of the request body came for {BODY_IDLE_TIMEOUT_S:.0f} s.")
                break
            final = chunk is None
            values, stream_error = stream.feed(chunk or b"", final=final)
            await produce(values)
        if stream_error is not None:
            if response is None and not held:
                raise stream_error
            held.append(stream_error)
        if response is None:
            if not held:
                raise bad_request("The request body has no record.")
            if len(held) == 1:
                only = held[0]
                if isinstance(only, RestError):
                    return _error(only)
                return _json(*answer_of(only))
        await flush(True)
        await response.write_eof()
        return response


def _check_content_type(request: web.Request, types: tuple[str, ...] = (JSON_TYPE,)) -> None:
    if request.content_type not in types:
        raise RestError(415, 415, "HTTP 415 Unsupported Media Type")
