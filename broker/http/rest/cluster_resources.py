"""Confluent REST Proxy v3 resources of the cluster's administration, read-only:
ACLs (search), cluster-wide broker configs, a broker's single config, replicas,
a broker's partition replicas and partition reassignments.

These are the resources the v3 answers link to (``acls``, ``broker_configs``,
``partition_reassignments``, ``replicas``, ``partition_replicas``, a config's
``self``), so every link a client follows answers. Each is read through the
broker's own handlers (broker/http/rest/kafka.py), so authorization and errors are
theirs: DescribeAcls (DESCRIBE on the cluster; without an authorizer Kafka's
SECURITY_DISABLED, answered 400 as "No Authorizer is configured."),
DescribeConfigs of BROKER ``""`` (the dynamic cluster-wide defaults, as
Kafka's ``kafka-configs --entity-default``), Metadata (replicas and ISR, the
caller's view) and ListPartitionReassignments (the active controller's, KIP-455).
Writing ACLs, configs or reassignments is not served here (the Kafka APIs and
``pybroker acls|configs|reassign`` do it).
"""

from __future__ import annotations

from broker.http.rest.errors import RestError, bad_request, kafka_error, not_found
from broker.http.rest.kafka import REQUESTS
from broker.http.rest.resources import (
    Call,
    _broker_config,
    _config,
    _describe_configs,
    _find_broker,
    _int_param,
    _list,
    _metadata,
    _one_topic,
    _resource,
    check_cluster,
)
from controller.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType
from protocol.errors import ErrorCode

RESOURCE_BROKER = 4
CLUSTER_WIDE = ""  # DescribeConfigs' name of the cluster-wide broker defaults

# ------------------------------------------------------------------ ACLs

# Confluent's query parameters of GET .../acls and the Kafka enum each one names.
_ACL_FILTERS = {
    "resource_type": ResourceType,
    "pattern_type": PatternType,
    "operation": AclOperation,
    "permission": AclPermissionType,
}


def _acl_enum(call: Call, name: str) -> int:
    raw = call.query.get(name)
    kind = _ACL_FILTERS[name]
    if raw is None or raw == "":
        return kind.ANY
    try:
        value = kind[raw.upper()]
    except KeyError:
        raise bad_request(f"'{name}' must be one of {', '.join(m.name for m in kind if m.name != 'UNKNOWN')}.") from None
    if value == kind.UNKNOWN:
        raise bad_request(f"'{name}' UNKNOWN is not a filter.")
    return value


async def search_acls(call: Call) -> dict:
    """``GET /v3/clusters/{id}/acls?resource_type=&resource_name=&pattern_type=&principal=&host=&operation=&permission=``:
    the ACLs matching the filter (each parameter left out matches anything)."""
    check_cluster(call)
    response = await call.kafka.call(
        "DescribeAcls",
        resource_type_filter=_acl_enum(call, "resource_type"),
        resource_name_filter=call.query.get("resource_name") or None,
        pattern_type_filter=_acl_enum(call, "pattern_type"),
        principal_filter=call.query.get("principal") or None,
        host_filter=call.query.get("host") or None,
        operation=_acl_enum(call, "operation"),
        permission_type=_acl_enum(call, "permission"),
    )
    if response.error_code == ErrorCode.SECURITY_DISABLED:
        raise RestError(400, 40002, response.error_message or "No Authorizer is configured.")
    if response.error_code != ErrorCode.NONE:
        raise kafka_error(response.error_code, response.error_message)
    data = []
    for r in response.resources:
        for a in r.acls:
            data.append({
                "kind": "KafkaAcl",
                "metadata": {"self": call.url("acls")},
                "cluster_id": call.cluster_id,
                "resource_type": _name(ResourceType, r.resource_type),
                "resource_name": r.resource_name,
                "pattern_type": _name(PatternType, r.pattern_type),
                "principal": a.principal,
                "host": a.host,
                "operation": _name(AclOperation, a.operation),
                "permission": _name(AclPermissionType, a.permission_type),
            })
    return {"kind": "KafkaAclList", "metadata": {"self": call.url("acls"), "next": None}, "data": data}


def _name(kind, code: int) -> str:
    try:
        return kind(code).name
    except ValueError:
        return "UNKNOWN"


# ------------------------------------------------------------------ configs


def _cluster_config(call: Call, entry) -> dict:
    return _config(call, "KafkaClusterConfig", ("broker-configs", entry.name),
                   (("broker-config", entry.name),), {"config_type": "BROKER"}, entry)


async def list_cluster_broker_configs(call: Call) -> dict:
    """The dynamic cluster-wide broker configs that are set (BROKER resource ``""``)."""
    check_cluster(call)
    entries = await _describe_configs(call, RESOURCE_BROKER, CLUSTER_WIDE, None)
    return _list(call, "KafkaClusterConfigList", ("broker-configs",),
                 [_cluster_config(call, e) for e in sorted(entries, key=lambda e: e.name)])


async def get_cluster_broker_config(call: Call) -> dict:
    check_cluster(call)
    name = call.params["name"]
    for entry in await _describe_configs(call, RESOURCE_BROKER, CLUSTER_WIDE, [name]):
        if entry.name == name:
            return _cluster_config(call, entry)
    raise not_found(f"Config {name} cannot be found for the cluster.")


async def get_broker_config(call: Call) -> dict:
    check_cluster(call)
    broker = await _find_broker(call)
    name = call.params["name"]
    result = await call.kafka.describe_broker_configs(broker.node_id)
    if result.error_code != ErrorCode.NONE:
        raise kafka_error(result.error_code, result.error_message, str(broker.node_id))
    for entry in result.configs:
        if entry.name == name:
            return _broker_config(call, broker.node_id, entry)
    raise not_found(f"Config {name} cannot be found for broker {broker.node_id}.")


# ------------------------------------------------------------------ replicas


def _replica(call: Call, topic: str, p, broker_id: int) -> dict:
    index = p.partition_index
    return _resource(
        call, "KafkaReplica", ("topics", topic, "partitions", index, "replicas", broker_id),
        (("topic", topic), ("partition", index), ("replica", broker_id)),
        cluster_id=call.cluster_id, topic_name=topic, partition_id=index, broker_id=broker_id,
        is_leader=p.leader_id == broker_id, is_in_sync=broker_id in (p.isr_nodes or []),
        broker=call.related("brokers", broker_id),
    )


async def _one_partition(call: Call):
    t = await _one_topic(call)
    index = _int_param(call, "partition_id")
    for p in t.partitions:
        if p.partition_index == index:
            return t, p
    raise RestError(404, 40403, f"Partition {index} of topic {t.name} cannot be found.")


async def list_replicas(call: Call) -> dict:
    check_cluster(call)
    t, p = await _one_partition(call)
    return _list(call, "KafkaReplicaList", ("topics", t.name, "partitions", p.partition_index, "replicas"),
                 [_replica(call, t.name, p, b) for b in p.replica_nodes])


async def get_replica(call: Call) -> dict:
    check_cluster(call)
    t, p = await _one_partition(call)
    broker_id = _int_param(call, "broker_id")
    if broker_id not in p.replica_nodes:
        raise not_found(f"Broker {broker_id} holds no replica of {t.name}-{p.partition_index}.")
    return _replica(call, t.name, p, broker_id)


async def list_broker_replicas(call: Call) -> dict:
    """Every partition replica the broker holds, of the topics the caller may see."""
    check_cluster(call)
    broker_id = _int_param(call, "broker_id")
    metadata = await _metadata(call, None)
    if not any(b.node_id == broker_id for b in metadata.brokers):
        raise not_found(f"Broker {broker_id} cannot be found.")
    data = [
        _replica(call, t.name, p, broker_id)
        for t in sorted(metadata.topics, key=lambda t: t.name) if t.error_code == ErrorCode.NONE
        for p in sorted(t.partitions, key=lambda p: p.partition_index) if broker_id in p.replica_nodes
    ]
    return _list(call, "KafkaReplicaList", ("brokers", broker_id, "partition-replicas"), data)


# ------------------------------------------------------------------ reassignments


async def _reassignments(call: Call, topics: list[tuple[str, list[int]]] | None) -> list:
    R = REQUESTS["ListPartitionReassignments"]
    wanted = None if topics is None else [R.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps) for t, ps in topics]
    response = await call.kafka.call("ListPartitionReassignments", timeout_ms=30_000, topics=wanted)
    if response.error_code != ErrorCode.NONE:
        raise kafka_error(response.error_code, response.error_message)
    return [(t.name, p) for t in response.topics for p in t.partitions]


def _reassignment(call: Call, topic: str, p) -> dict:
    index = p.partition_index
    return _resource(
        call, "KafkaReassignment", ("topics", topic, "partitions", index, "reassignment"),
        (("topic", topic), ("partition", index)),
        cluster_id=call.cluster_id, topic_name=topic, partition_id=index,
        adding_replicas=list(p.adding_replicas), removing_replicas=list(p.removing_replicas),
        replicas=call.related("topics", topic, "partitions", index, "replicas"),
    )


def _reassignment_list(call: Call, parts: tuple, found: list) -> dict:
    return _list(call, "KafkaReassignmentList", parts,
                 [_reassignment(call, t, p) for t, p in sorted(found, key=lambda tp: (tp[0], tp[1].partition_index))])


async def list_all_reassignments(call: Call) -> dict:
    """``/topics/-/partitions/-/reassignment``: every ongoing reassignment."""
    check_cluster(call)
    return _reassignment_list(call, ("topics", "-", "partitions", "-", "reassignment"), await _reassignments(call, None))


async def list_topic_reassignments(call: Call) -> dict:
    """``/topics/{t}/partitions/-/reassignment``: the topic's ongoing reassignments."""
    check_cluster(call)
    t = await _one_topic(call)
    found = await _reassignments(call, [(t.name, [p.partition_index for p in t.partitions])])
    return _reassignment_list(call, ("topics", t.name, "partitions", "-", "reassignment"), found)


async def get_reassignment(call: Call) -> dict:
    """A partition's ongoing reassignment; 404 when it is not being reassigned (Confluent's answer)."""
    check_cluster(call)
    t, p = await _one_partition(call)
    for name, found in await _reassignments(call, [(t.name, [p.partition_index])]):
        if name == t.name and found.partition_index == p.partition_index:
            return _reassignment(call, t.name, found)
    raise not_found(f"No ongoing reassignment of partition {p.partition_index} of topic {t.name}.")
