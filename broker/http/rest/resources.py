"""Confluent REST Proxy v3 resources over the in-process Kafka client (broker/http/rest/kafka.py).

Each resource answers Confluent's JSON: ``kind``, ``metadata`` (``self``, the
resource's own URL, and ``resource_name``, its CRN), its fields, and
``related`` links to the resources under it; lists are ``{"kind": "...List",
"metadata": {"self", "next": null}, "data": [...]}``. Every answer comes from
Kafka requests the broker handles as it would a client's, so authorization,
validation and errors are the broker's own (mapped by broker/http/rest/errors.py).
On a cluster, what only another node can answer (a group it coordinates, its
partitions' end offsets, its broker configs) is asked of that node
(broker/http/rest/cluster.py), so every broker's proxy serves the whole cluster.

Produce (``POST .../topics/{t}/records``) is in records.py.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from urllib.parse import quote
from typing import Any

from broker.http.rest.cluster import ClusterKafka
from broker.http.rest.errors import RestError, bad_request, kafka_error, not_found
from broker.http.rest.kafka import REQUESTS
from protocol.errors import ErrorCode

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
CONFIG_SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}
# IncrementalAlterConfigs operations by Confluent's names.
ALTER_OPERATIONS = {"SET": 0, "DELETE": 1, "APPEND": 2, "SUBTRACT": 3}
LATEST_TIMESTAMP = -1
REQUEST_TIMEOUT_MS = 30_000
ZERO_UUID = uuid.UUID(int=0)
# RFC 3986's pchar beside the unreserved characters: left as they are in a path segment.
PATH_SEGMENT_SAFE = "!$&'()*+,;=:@"


@dataclass
class Call:
    """One HTTP request's view: its Kafka client, base URL and the path's parameters."""

    broker: Any
    kafka: ClusterKafka
    base_url: str
    params: dict[str, str]
    body: Any = None
    query: dict[str, str] = field(default_factory=dict)
    principal: str = "User:ANONYMOUS"
    host: str = ""
    headers: Any = field(default_factory=dict)
    consumers: Any = None  # the v2 consumer instances (broker/http/rest/consumer_instances.py)

    @property
    def cluster_id(self) -> str:
        return self.broker.cluster_id

    def url(self, *parts) -> str:
        """A resource's URL; each part percent-encoded as a path segment, as a KIP-848
        member id (base64: ``+`` and ``/``) or a group id may hold any character."""
        segments = (quote(str(p), safe=PATH_SEGMENT_SAFE) for p in (self.cluster_id, *parts))
        return self.base_url + "/v3/clusters/" + "/".join(segments)

    def crn(self, *pairs) -> str:
        return "crn:///kafka=" + self.cluster_id + "".join(f"/{k}={v}" for k, v in pairs)

    def related(self, *parts) -> dict:
        return {"related": self.url(*parts)}


def _resource(call: Call, kind: str, parts: tuple, crn: tuple, **fields) -> dict:
    return {"kind": kind, "metadata": {"self": call.url(*parts), "resource_name": call.crn(*crn)}, **fields}


def _list(call: Call, kind: str, parts: tuple, data: list) -> dict:
    return {"kind": kind, "metadata": {"self": call.url(*parts), "next": None}, "data": data}


def check_cluster(call: Call) -> None:
    if call.params["cluster_id"] != call.cluster_id:
        raise not_found(f"Cluster {call.params['cluster_id']} cannot be found.")


def _int_param(call: Call, name: str) -> int:
    raw = call.params[name]
    try:
        value = int(raw)
    except ValueError:
        raise not_found(f"{name} {raw!r} is not a number") from None
    if not -(2**31) <= value < 2**31:
        raise not_found(f"{name} {raw} is out of range")
    return value


# ----------------------------------------------------------------- clusters, brokers


async def _metadata(call: Call, topics: list[str] | None):
    wanted = None if topics is None else [REQUESTS["Metadata"].MetadataRequestTopic(topic_id=ZERO_UUID, name=t) for t in topics]
    return await call.kafka.call(
        "Metadata", topics=wanted, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


def _cluster(call: Call, controller_id: int) -> dict:
    return _resource(
        call, "KafkaCluster", (), (),
        cluster_id=call.cluster_id,
        controller=call.related("brokers", controller_id) if controller_id >= 0 else None,
        acls=call.related("acls"),
        brokers=call.related("brokers"),
        broker_configs=call.related("broker-configs"),
        consumer_groups=call.related("consumer-groups"),
        topics=call.related("topics"),
        partition_reassignments=call.related("topics", "-", "partitions", "-", "reassignment"),
    )


async def list_clusters(call: Call) -> dict:
    metadata = await _metadata(call, [])
    cluster = _cluster(call, metadata.controller_id)
    return {"kind": "KafkaClusterList", "metadata": {"self": call.base_url + "/v3/clusters", "next": None}, "data": [cluster]}


async def get_cluster(call: Call) -> dict:
    check_cluster(call)
    metadata = await _metadata(call, [])
    return _cluster(call, metadata.controller_id)


def _broker(call: Call, b) -> dict:
    return _resource(
        call, "KafkaBroker", ("brokers", b.node_id), (("broker", b.node_id),),
        cluster_id=call.cluster_id, broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack,
        configs=call.related("brokers", b.node_id, "configs"),
        partition_replicas=call.related("brokers", b.node_id, "partition-replicas"),
    )


async def list_brokers(call: Call) -> dict:
    check_cluster(call)
    metadata = await _metadata(call, [])
    return _list(call, "KafkaBrokerList", ("brokers",), [_broker(call, b) for b in sorted(metadata.brokers, key=lambda b: b.node_id)])


async def _find_broker(call: Call):
    broker_id = _int_param(call, "broker_id")
    metadata = await _metadata(call, [])
    for b in metadata.brokers:
        if b.node_id == broker_id:
            return b
    raise not_found(f"Broker {broker_id} cannot be found.")


async def get_broker(call: Call) -> dict:
    check_cluster(call)
    return _broker(call, await _find_broker(call))


# ----------------------------------------------------------------- configs


async def _describe_configs(call: Call, resource_type: int, resource_name: str, names: list[str] | None):
    response = await call.kafka.call(
        "DescribeConfigs",
        resources=[REQUESTS["DescribeConfigs"].DescribeConfigsResource(
            resource_type=resource_type, resource_name=resource_name, configuration_keys=names)],
        include_synonyms=True, include_documentation=False,
    )
    result = response.results[0]
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message, resource_name)
    return result.configs


def _config(call: Call, kind: str, parts: tuple, crn: tuple, owner: dict, entry) -> dict:
    return _resource(
        call, kind, parts, crn,
        cluster_id=call.cluster_id, **owner,
        name=entry.name, value=entry.value,
        is_default=entry.config_source == 5, is_read_only=bool(entry.read_only), is_sensitive=bool(entry.is_sensitive),
        source=CONFIG_SOURCES.get(entry.config_source, "UNKNOWN"),
        synonyms=[{"name": s.name, "value": s.value, "source": CONFIG_SOURCES.get(s.source, "UNKNOWN")} for s in entry.synonyms or []],
    )


def _broker_config(call: Call, broker_id: int, entry) -> dict:
    return _config(call, "KafkaBrokerConfig", ("brokers", broker_id, "configs", entry.name),
                   (("broker", broker_id), ("config", entry.name)), {"broker_id": broker_id}, entry)


def _topic_config(call: Call, topic: str, entry) -> dict:
    return _config(call, "KafkaTopicConfig", ("topics", topic, "configs", entry.name),
                   (("topic", topic), ("config", entry.name)), {"topic_name": topic}, entry)


async def list_broker_configs(call: Call) -> dict:
    check_cluster(call)
    broker = await _find_broker(call)
    result = await call.kafka.describe_broker_configs(broker.node_id)
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message, str(broker.node_id))
    entries = result.configs
    return _list(call, "KafkaBrokerConfigList", ("brokers", broker.node_id, "configs"),
                 [_broker_config(call, broker.node_id, e) for e in sorted(entries, key=lambda e: e.name)])


async def list_topic_configs(call: Call) -> dict:
    check_cluster(call)
    topic = call.params["topic_name"]
    entries = await _describe_configs(call, RESOURCE_TOPIC, topic, None)
    return _list(call, "KafkaTopicConfigList", ("topics", topic, "configs"),
                 [_topic_config(call, topic, e) for e in sorted(entries, key=lambda e: e.name)])


async def get_topic_config(call: Call) -> dict:
    check_cluster(call)
    topic, name = call.params["topic_name"], call.params["name"]
    entries = await _describe_configs(call, RESOURCE_TOPIC, topic, [name])
    for entry in entries:
        if entry.name == name:
            return _topic_config(call, topic, entry)
    raise not_found(f"Config {name} cannot be found for topic {topic}.")


async def _alter_topic_configs(call: Call, topic: str, changes: list[tuple[str, int, str | None]], validate_only: bool = False) -> None:
    R = REQUESTS["IncrementalAlterConfigs"]
    response = await call.kafka.call(
        "IncrementalAlterConfigs",
        resources=[R.AlterConfigsResource(
            resource_type=RESOURCE_TOPIC, resource_name=topic,
            configs=[R.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in changes],
        )],
        validate_only=validate_only,
    )
    result = response.responses[0]
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message, topic)


async def require_topic(call: Call, topic: str) -> None:
    """IncrementalAlterConfigs of an unknown topic is refused by the controller;
    checked first so the answer is Confluent's 404."""
    metadata = await _metadata(call, [topic])
    t = metadata.topics[0]
    if t.error_code != ErrorCode.NONE:
        raise kafka_error(t.error_code, None, topic)


async def update_topic_config(call: Call) -> None:
    check_cluster(call)
    body = call.body
    if not isinstance(body, dict) or not isinstance(body.get("value"), (str, type(None))):
        raise bad_request("The request body must be an object with a string 'value'.")
    topic, name = call.params["topic_name"], call.params["name"]
    await require_topic(call, topic)
    await _alter_topic_configs(call, topic, [(name, ALTER_OPERATIONS["SET"], body.get("value"))])


async def reset_topic_config(call: Call) -> None:
    check_cluster(call)
    topic, name = call.params["topic_name"], call.params["name"]
    await require_topic(call, topic)
    await _alter_topic_configs(call, topic, [(name, ALTER_OPERATIONS["DELETE"], None)])


async def alter_topic_configs(call: Call) -> None:
    check_cluster(call)
    body = call.body
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not all(isinstance(d, dict) and isinstance(d.get("name"), str) for d in data):
        raise bad_request("The request body must be an object with a 'data' list of {name, value, operation}.")
    changes = []
    for d in data:
        operation = str(d.get("operation") or "SET").upper()
        if operation not in ALTER_OPERATIONS:
            raise bad_request(f"Unknown operation {d.get('operation')!r}: one of {', '.join(ALTER_OPERATIONS)}.")
        value = d.get("value")
        if value is not None and not isinstance(value, str):
            raise bad_request(f"Config {d['name']}: 'value' must be a string.")
        changes.append((d["name"], ALTER_OPERATIONS[operation], value))
    topic = call.params["topic_name"]
    await require_topic(call, topic)
    await _alter_topic_configs(call, topic, changes, validate_only=bool(body.get("validate_only")))


# ----------------------------------------------------------------- topics, partitions


def _topic(call: Call, t) -> dict:
    name = t.name
    return _resource(
        call, "KafkaTopic", ("topics", name), (("topic", name),),
        cluster_id=call.cluster_id, topic_name=name, is_internal=bool(t.is_internal),
        replication_factor=len(t.partitions[0].replica_nodes) if t.partitions else 0,
        partitions_count=len(t.partitions),
        partitions=call.related("topics", name, "partitions"),
        configs=call.related("topics", name, "configs"),
        partition_reassignments=call.related("topics", name, "partitions", "-", "reassignment"),
        authorized_operations=[],
    )


async def list_topics(call: Call) -> dict:
    check_cluster(call)
    metadata = await _metadata(call, None)
    topics = sorted((t for t in metadata.topics if t.error_code == ErrorCode.NONE), key=lambda t: t.name)
    return _list(call, "KafkaTopicList", ("topics",), [_topic(call, t) for t in topics])


async def _one_topic(call: Call):
    topic = call.params["topic_name"]
    metadata = await _metadata(call, [topic])
    t = metadata.topics[0]
    if t.error_code != ErrorCode.NONE:
        raise kafka_error(t.error_code, None, topic)
    return t


async def get_topic(call: Call) -> dict:
    check_cluster(call)
    return _topic(call, await _one_topic(call))


async def create_topic(call: Call) -> tuple[int, dict]:
    check_cluster(call)
    body = call.body
    if not isinstance(body, dict) or not isinstance(body.get("topic_name"), str):
        raise bad_request("The request body must be an object with a string 'topic_name'.")
    name = body["topic_name"]
    partitions = body.get("partitions_count", -1)
    replication = body.get("replication_factor", -1)
    configs = body.get("configs") or []
    if not _is_int(partitions, 32) or not _is_int(replication, 16):
        raise bad_request("'partitions_count' and 'replication_factor' must be integers.")
    if not isinstance(configs, list) or not all(
        isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("value"), (str, type(None))) for c in configs
    ):
        raise bad_request("'configs' must be a list of {name, value} with string values.")
    R = REQUESTS["CreateTopics"]
    response = await call.kafka.call(
        "CreateTopics",
        topics=[R.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=replication, assignments=[],
            configs=[R.CreatableTopicConfig(name=c["name"], value=c.get("value")) for c in configs],
        )],
        timeout_ms=REQUEST_TIMEOUT_MS, validate_only=bool(body.get("validate_only")),
    )
    result = response.topics[0]
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message, name)
    created = _resource(
        call, "KafkaTopic", ("topics", name), (("topic", name),),
        cluster_id=call.cluster_id, topic_name=name, is_internal=False,
        replication_factor=result.replication_factor, partitions_count=result.num_partitions,
        partitions=call.related("topics", name, "partitions"),
        configs=call.related("topics", name, "configs"),
        partition_reassignments=call.related("topics", name, "partitions", "-", "reassignment"),
        authorized_operations=[],
    )
    return 201, created


def _is_int(value, bits: int) -> bool:
    return type(value) is int and -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)


async def delete_topic(call: Call) -> None:
    check_cluster(call)
    name = call.params["topic_name"]
    R = REQUESTS["DeleteTopics"]
    response = await call.kafka.call(
        "DeleteTopics", topics=[R.DeleteTopicState(name=name, topic_id=ZERO_UUID)], timeout_ms=REQUEST_TIMEOUT_MS
    )
    result = response.responses[0]
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message, name)


def _partition(call: Call, topic: str, p) -> dict:
    index = p.partition_index
    return _resource(
        call, "KafkaPartition", ("topics", topic, "partitions", index), (("topic", topic), ("partition", index)),
        cluster_id=call.cluster_id, topic_name=topic, partition_id=index,
        leader=call.related("topics", topic, "partitions", index, "replicas", p.leader_id) if p.leader_id >= 0 else None,
        replicas=call.related("topics", topic, "partitions", index, "replicas"),
        reassignment=call.related("topics", topic, "partitions", index, "reassignment"),
    )


async def list_partitions(call: Call) -> dict:
    check_cluster(call)
    t = await _one_topic(call)
    return _list(call, "KafkaPartitionList", ("topics", t.name, "partitions"),
                 [_partition(call, t.name, p) for p in sorted(t.partitions, key=lambda p: p.partition_index)])


async def get_partition(call: Call) -> dict:
    check_cluster(call)
    t = await _one_topic(call)
    index = _int_param(call, "partition_id")
    for p in t.partitions:
        if p.partition_index == index:
            return _partition(call, t.name, p)
    raise RestError(404, 40403, f"Partition {index} of topic {t.name} cannot be found.")


# ----------------------------------------------------------------- consumer groups


@dataclass
class _Member:
    member_id: str
    instance_id: str | None
    client_id: str
    assigned: list[tuple[str, int]]  # sorted


@dataclass
class _GroupView:
    """A group as the resources show it, whether DescribeGroups (classic) or
    ConsumerGroupDescribe (KIP-848) described it."""

    group_id: str
    group_type: str  # Confluent's GroupType names: CLASSIC, CONSUMER
    state: str  # Kafka's state name
    is_simple: bool
    partition_assignor: str
    members: list[_Member]


def _classic_view(g) -> _GroupView:
    consumer = g.protocol_type == "consumer"
    return _GroupView(
        g.group_id, "CLASSIC", g.group_state, g.protocol_type == "", g.protocol_data or "",
        [_Member(m.member_id, m.group_instance_id, m.client_id,
                 sorted(_assignment(bytes(m.member_assignment or b""))) if consumer else []) for m in g.members],
    )


def _consumer_view(g) -> _GroupView:
    return _GroupView(
        g.group_id, "CONSUMER", g.group_state, False, g.assignor_name,
        [_Member(m.member_id, m.instance_id, m.client_id,
                 sorted((t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions))
         for m in g.members],
    )


async def _describe_group(call: Call, group: str) -> _GroupView:
    """ConsumerGroupDescribe first, DescribeGroups when the group is not a consumer group,
    as Kafka's admin client describes a group of either type."""
    c = (await call.kafka.describe_consumer_groups([group]))[0]
    if c.error_code == ErrorCode.NONE:
        return _consumer_view(c)
    if c.error_code != ErrorCode.GROUP_ID_NOT_FOUND:
        raise kafka_error(c.error_code, c.error_message, group)
    g = (await call.kafka.describe_groups([group]))[0]
    if g.error_code != ErrorCode.NONE:
        raise kafka_error(g.error_code, None, group)
    if g.group_state == "Dead":
        raise not_found(f"Consumer group {group} could not be found.")
    return _classic_view(g)


def _group(call: Call, g: _GroupView) -> dict:
    group = g.group_id
    error, coordinator = call.broker.groups.coordinator_of(group)
    if error != ErrorCode.NONE:
        coordinator = call.broker.config.node_id  # no __consumer_offsets yet: this broker answered
    return _resource(
        call, "KafkaConsumerGroup", ("consumer-groups", group), (("consumer-group", group),),
        cluster_id=call.cluster_id, consumer_group_id=group,
        is_simple=g.is_simple,
        partition_assignor=g.partition_assignor,
        state=_STATES.get(g.state, "UNKNOWN"),
        type=g.group_type,
        # A consumer group with classic members (an online migration): never here, which
        # migrates no group with members.
        is_mixed_consumer_group=False,
        coordinator=call.related("brokers", coordinator),
        consumers=call.related("consumer-groups", group, "consumers"),
        lag_summary=call.related("consumer-groups", group, "lag-summary"),
    )


# Kafka's group states as Confluent's names (classic ones; Assigning and Reconciling are KIP-848's).
_STATES = {
    "Empty": "EMPTY", "Stable": "STABLE", "PreparingRebalance": "PREPARING_REBALANCE",
    "CompletingRebalance": "COMPLETING_REBALANCE", "Dead": "DEAD", "Assigning": "ASSIGNING",
    "Reconciling": "RECONCILING",
}


async def list_groups(call: Call) -> dict:
    """Classic and consumer groups (as Confluent's proxy lists them; share groups are not
    consumer groups), each described by the API of its type."""
    check_cluster(call)
    listed = sorted(await call.kafka.list_groups(), key=lambda g: g.group_id)
    consumer_ids = [g.group_id for g in listed if g.group_type == "consumer"]
    classic_ids = [g.group_id for g in listed if g.group_type in ("classic", "")]
    views = []
    if consumer_ids:
        described = await call.kafka.describe_consumer_groups(consumer_ids)
        views += [_consumer_view(g) for g in described if g.error_code == ErrorCode.NONE]
    if classic_ids:
        described = await call.kafka.describe_groups(classic_ids)
        views += [_classic_view(g) for g in described if g.error_code == ErrorCode.NONE and g.group_state != "Dead"]
    data = [_group(call, g) for g in sorted(views, key=lambda v: v.group_id)]
    return _list(call, "KafkaConsumerGroupList", ("consumer-groups",), data)


async def get_group(call: Call) -> dict:
    check_cluster(call)
    return _group(call, await _describe_group(call, call.params["consumer_group_id"]))


def _assignment(data: bytes) -> list[tuple[str, int]]:
    from protocol.codec import decode_struct
    from protocol.exceptions import ProtocolError
    from protocol.registry import DATA_MESSAGES

    message = DATA_MESSAGES["ConsumerProtocolAssignment"]
    if not data or len(data) < 2:
        return []
    # A newer version than ours is read as ours: later versions only add fields.
    version = min(int.from_bytes(data[:2], "big", signed=True), message.versions.high)
    try:
        body, _ = decode_struct(message.struct, version, False, data, 2, exact=False)
    except ProtocolError:
        return []
    return [(t.topic, p) for t in body.assigned_partitions for p in t.partitions]


async def list_consumers(call: Call) -> dict:
    check_cluster(call)
    g = await _describe_group(call, call.params["consumer_group_id"])
    group = g.group_id
    data = [_consumer(call, group, m) for m in sorted(g.members, key=lambda m: m.member_id)]
    return _list(call, "KafkaConsumerList", ("consumer-groups", group, "consumers"), data)


def _consumer(call: Call, group: str, m: _Member) -> dict:
    return _resource(
        call, "KafkaConsumer", ("consumer-groups", group, "consumers", m.member_id),
        (("consumer-group", group), ("consumer", m.member_id)),
        cluster_id=call.cluster_id, consumer_group_id=group, consumer_id=m.member_id,
        instance_id=m.instance_id, client_id=m.client_id,
        assignments=call.related("consumer-groups", group, "consumers", m.member_id, "assignments"),
    )


async def _member(call: Call) -> tuple[_GroupView, _Member]:
    g = await _describe_group(call, call.params["consumer_group_id"])
    consumer = call.params["consumer_id"]
    for m in g.members:
        if m.member_id == consumer:
            return g, m
    raise not_found(f"Consumer {consumer} cannot be found in group {g.group_id}.")


async def get_consumer(call: Call) -> dict:
    check_cluster(call)
    g, m = await _member(call)
    return _consumer(call, g.group_id, m)


def _consumer_assignment(call: Call, group: str, consumer: str, topic: str, index: int) -> dict:
    return _resource(
        call, "KafkaConsumerAssignment", ("consumer-groups", group, "consumers", consumer, "assignments", topic, "partitions", index),
        (("consumer-group", group), ("consumer", consumer), ("assignment", topic), ("partition", index)),
        cluster_id=call.cluster_id, consumer_group_id=group, consumer_id=consumer, topic_name=topic, partition_id=index,
        partition=call.related("topics", topic, "partitions", index),
        lag=call.related("consumer-groups", group, "lags", topic, "partitions", index),
    )


async def list_consumer_assignments(call: Call) -> dict:
    check_cluster(call)
    g, m = await _member(call)
    data = [_consumer_assignment(call, g.group_id, m.member_id, t, p) for t, p in m.assigned]
    return _list(call, "KafkaConsumerAssignmentList", ("consumer-groups", g.group_id, "consumers", m.member_id, "assignments"), data)


async def get_consumer_assignment(call: Call) -> dict:
    check_cluster(call)
    g, m = await _member(call)
    topic, index = call.params["topic_name"], _int_param(call, "partition_id")
    if (topic, index) not in m.assigned:
        raise not_found(f"Consumer {m.member_id} is not assigned {topic}-{index}.")
    return _consumer_assignment(call, g.group_id, m.member_id, topic, index)


async def _lags(call: Call) -> tuple[str, list[dict]]:
    group = call.params["consumer_group_id"]
    g = await _describe_group(call, group)
    fetched = await call.kafka.offset_fetch_all(group)
    if fetched.error_code != ErrorCode.NONE:
        raise kafka_error(fetched.error_code, None, group)
    committed = {
        (t.name, p.partition_index): p.committed_offset
        for t in fetched.topics for p in t.partitions
        if p.error_code == ErrorCode.NONE and p.committed_offset >= 0
    }
    owners = {tp: m for m in g.members for tp in m.assigned}
    # As Confluent's proxy: the partitions the group has committed offsets for.
    partitions = sorted(committed)
    ends = await _end_offsets(call, partitions)
    rows = []
    for topic, index in partitions:
        end = ends.get((topic, index))
        current = committed[(topic, index)]
        if end is None:
            continue  # gone, or its leader could not be asked: no end offset to measure against
        m = owners.get((topic, index))
        rows.append(_resource(
            call, "KafkaConsumerLag", ("consumer-groups", group, "lags", topic, "partitions", index),
            (("consumer-group", group), ("lag", topic), ("partition", index)),
            cluster_id=call.cluster_id, consumer_group_id=group, topic_name=topic, partition_id=index,
            current_offset=current, log_end_offset=end, lag=max(end - current, 0),
            consumer_id=m.member_id if m else "", instance_id=m.instance_id if m else None,
            client_id=m.client_id if m else "",
        ))
    return group, rows


async def _end_offsets(call: Call, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    answers = await call.kafka.list_offsets(partitions, LATEST_TIMESTAMP)
    return {key: p.offset for key, p in answers.items() if p.error_code == ErrorCode.NONE}


async def list_lags(call: Call) -> dict:
    check_cluster(call)
    group, rows = await _lags(call)
    rows.sort(key=lambda r: -r["lag"])
    return _list(call, "KafkaConsumerLagList", ("consumer-groups", group, "lags"), rows)


async def get_lag(call: Call) -> dict:
    """One partition's lag; 404 when the group has no committed offset for it (Confluent's list has no row then either)."""
    check_cluster(call)
    topic, index = call.params["topic_name"], _int_param(call, "partition_id")
    group, rows = await _lags(call)
    for row in rows:
        if row["topic_name"] == topic and row["partition_id"] == index:
            return row
    raise not_found(f"Consumer group {group} has no committed offset for {topic}-{index}.")


async def lag_summary(call: Call) -> dict:
    check_cluster(call)
    group, rows = await _lags(call)
    top = max(rows, key=lambda r: r["lag"], default=None)
    return _resource(
        call, "KafkaConsumerGroupLagSummary", ("consumer-groups", group, "lag-summary"),
        (("consumer-group", group), ("lag-summary", "")),
        cluster_id=call.cluster_id, consumer_group_id=group,
        max_lag_consumer_id=top["consumer_id"] if top else "",
        max_lag_instance_id=top["instance_id"] if top else None,
        max_lag_client_id=top["client_id"] if top else "",
        max_lag_topic_name=top["topic_name"] if top else "",
        max_lag_partition_id=top["partition_id"] if top else 0,
        max_lag=top["lag"] if top else 0,
        total_lag=sum(r["lag"] for r in rows),
        max_lag_consumer=call.related("consumer-groups", group, "consumers", top["consumer_id"]) if top and top["consumer_id"] else None,
        max_lag_partition=call.related("topics", top["topic_name"], "partitions", top["partition_id"]) if top else None,
    )
