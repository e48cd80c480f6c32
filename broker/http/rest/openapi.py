"""The OpenAPI 3 document of the REST proxy, made from its route table (broker/http/rest/server.py).

Only what is served is described: each route's path parameters, JSON body and
answer schema (Confluent's v3 shapes, as pybroker fills them), and every
operation's error answers in Confluent's ``{"error_code", "message"}`` shape.
"""

from __future__ import annotations

import re

_STR = {"type": "string"}
_INT = {"type": "integer"}
_BOOL = {"type": "boolean"}
_NULLABLE_STR = {"type": "string", "nullable": True}
_RELATED = {"type": "object", "required": ["related"], "properties": {"related": _STR}}
_NULLABLE_RELATED = {**_RELATED, "nullable": True}
_RESOURCE_METADATA = {
    "type": "object", "required": ["self", "resource_name"],
    "properties": {"self": _STR, "resource_name": _NULLABLE_STR},
}
_LIST_METADATA = {"type": "object", "required": ["self"], "properties": {"self": _STR, "next": _NULLABLE_STR}}


def _resource(kind: str, fields: dict) -> dict:
    return {
        "type": "object",
        "required": ["kind", "metadata", *fields],
        "properties": {"kind": {"type": "string", "enum": [kind]}, "metadata": {"$ref": "#/components/schemas/ResourceMetadata"}, **fields},
    }


def _list(kind: str, item: str) -> dict:
    return {
        "type": "object",
        "required": ["kind", "metadata", "data"],
        "properties": {
            "kind": {"type": "string", "enum": [kind]},
            "metadata": {"$ref": "#/components/schemas/ListMetadata"},
            "data": {"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}},
        },
    }


_SYNONYMS = {"type": "array", "items": {"type": "object", "required": ["name", "source"],
                                        "properties": {"name": _STR, "value": _NULLABLE_STR, "source": _STR}}}
_CONFIG_FIELDS = {
    "cluster_id": _STR, "name": _STR, "value": _NULLABLE_STR, "is_default": _BOOL, "is_read_only": _BOOL,
    "is_sensitive": _BOOL, "source": _STR, "synonyms": _SYNONYMS,
}
_TOPIC_FIELDS = {
    "cluster_id": _STR, "topic_name": _STR, "is_internal": _BOOL, "replication_factor": _INT, "partitions_count": _INT,
    "partitions": _RELATED, "configs": _RELATED, "partition_reassignments": _RELATED,
    "authorized_operations": {"type": "array", "items": _STR},
}
_BROKER_SHARES = {"type": "array", "items": {"type": "object", "required": ["broker_id", "replicas", "leaders"],
                                           "properties": {"broker_id": _INT, "replicas": _INT, "leaders": _INT}}}
_PAYLOAD_INFO = {"type": "object", "nullable": True, "required": ["type", "size"],
                 "properties": {"type": {"type": "string", "enum": ["BINARY", "JSON", "STRING"]}, "size": _INT}}
_PAYLOAD = {
    "type": "object", "nullable": True,
    "properties": {"type": {"type": "string", "enum": ["BINARY", "JSON", "STRING"]}, "data": {}},
}

SCHEMAS = {
    "Error": {"type": "object", "required": ["error_code", "message"], "properties": {"error_code": _INT, "message": _NULLABLE_STR}},
    "ResourceMetadata": _RESOURCE_METADATA,
    "RestApi": {
        "type": "object", "required": ["kind", "metadata", "clusters", "openapi"],
        "properties": {"kind": {"type": "string", "enum": ["KafkaRestApi"]},
                       "metadata": {"type": "object", "required": ["self"], "properties": {"self": _STR}},
                       "clusters": _RELATED, "openapi": _RELATED},
    },
    "ListMetadata": _LIST_METADATA,
    "Cluster": _resource("KafkaCluster", {
        "cluster_id": _STR, "controller": _NULLABLE_RELATED, "acls": _RELATED, "brokers": _RELATED,
        "broker_configs": _RELATED, "consumer_groups": _RELATED, "topics": _RELATED, "partition_reassignments": _RELATED,
    }),
    "ClusterList": _list("KafkaClusterList", "Cluster"),
    "Broker": _resource("KafkaBroker", {
        "cluster_id": _STR, "broker_id": _INT, "host": _STR, "port": _INT, "rack": _NULLABLE_STR,
        "configs": _RELATED, "partition_replicas": _RELATED,
    }),
    "BrokerList": _list("KafkaBrokerList", "Broker"),
    "BrokerConfig": _resource("KafkaBrokerConfig", {"broker_id": _INT, **_CONFIG_FIELDS}),
    "BrokerConfigList": _list("KafkaBrokerConfigList", "BrokerConfig"),
    "Topic": _resource("KafkaTopic", _TOPIC_FIELDS),
    "TopicList": _list("KafkaTopicList", "Topic"),
    "TopicConfig": _resource("KafkaTopicConfig", {"topic_name": _STR, **_CONFIG_FIELDS}),
    "TopicConfigList": _list("KafkaTopicConfigList", "TopicConfig"),
    "Partition": _resource("KafkaPartition", {
        "cluster_id": _STR, "topic_name": _STR, "partition_id": _INT, "leader": _NULLABLE_RELATED,
        "replicas": _RELATED, "reassignment": _RELATED,
    }),
    "PartitionList": _list("KafkaPartitionList", "Partition"),
    "ConsumerGroup": _resource("KafkaConsumerGroup", {
        "cluster_id": _STR, "consumer_group_id": _STR, "is_simple": _BOOL, "partition_assignor": _STR,
        "state": _STR, "type": _STR, "is_mixed_consumer_group": _BOOL, "coordinator": _RELATED,
        "consumers": _RELATED, "lag_summary": _RELATED,
    }),
    "ConsumerGroupList": _list("KafkaConsumerGroupList", "ConsumerGroup"),
    "Consumer": _resource("KafkaConsumer", {
        "cluster_id": _STR, "consumer_group_id": _STR, "consumer_id": _STR, "instance_id": _NULLABLE_STR,
        "client_id": _STR, "assignments": _RELATED,
    }),
    "ConsumerList": _list("KafkaConsumerList", "Consumer"),
    "ConsumerLag": _resource("KafkaConsumerLag", {
        "cluster_id": _STR, "consumer_group_id": _STR, "topic_name": _STR, "partition_id": _INT,
        "current_offset": _INT, "log_end_offset": _INT, "lag": _INT, "consumer_id": _STR,
        "instance_id": _NULLABLE_STR, "client_id": _STR,
    }),
    "ConsumerLagList": _list("KafkaConsumerLagList", "ConsumerLag"),
    "ConsumerGroupLagSummary": _resource("KafkaConsumerGroupLagSummary", {
        "cluster_id": _STR, "consumer_group_id": _STR, "max_lag_consumer_id": _STR, "max_lag_instance_id": _NULLABLE_STR,
        "max_lag_client_id": _STR, "max_lag_topic_name": _STR, "max_lag_partition_id": _INT, "max_lag": _INT,
        "total_lag": _INT, "max_lag_consumer": _NULLABLE_RELATED, "max_lag_partition": _NULLABLE_RELATED,
    }),
    "ClusterConfig": _resource("KafkaClusterConfig", {"config_type": {"type": "string", "enum": ["BROKER"]}, **_CONFIG_FIELDS}),
    "ClusterConfigList": _list("KafkaClusterConfigList", "ClusterConfig"),
    "Replica": _resource("KafkaReplica", {
        "cluster_id": _STR, "topic_name": _STR, "partition_id": _INT, "broker_id": _INT, "is_leader": _BOOL,
        "is_in_sync": _BOOL, "broker": _RELATED,
    }),
    "ReplicaList": _list("KafkaReplicaList", "Replica"),
    "Reassignment": _resource("KafkaReassignment", {
        "cluster_id": _STR, "topic_name": _STR, "partition_id": _INT, "adding_replicas": {"type": "array", "items": _INT},
        "removing_replicas": {"type": "array", "items": _INT}, "replicas": _RELATED,
    }),
    "ReassignmentList": _list("KafkaReassignmentList", "Reassignment"),
    "BalancerStatus": _resource("KafkaBalancerStatus", {
        "cluster_id": _STR, "state": {"type": "string", "enum": ["off", "ready", "in_progress", "stalled"]},
        "reason": _NULLABLE_STR, "trigger": _NULLABLE_STR, "moves_in_flight": _INT,
        "bytes_to_move": {"type": "integer", "nullable": True}, "balanced_since_ms": {"type": "integer", "nullable": True},
        "failed_brokers": {"type": "array", "items": _INT},
        "broker_placements": {"type": "array", "items": {"type": "object", "required": ["broker_id", "state", "replicas"],
                                                         "properties": {"broker_id": _INT, "state": _STR, "replicas": _INT}}},
        "distribution": _BROKER_SHARES, "distribution_before_ms": {"type": "integer", "nullable": True},
        "distribution_before": _BROKER_SHARES, "broker_tasks": _RELATED,
    }),
    "BrokerTask": _resource("KafkaBrokerTask", {
        "cluster_id": _STR, "broker_id": _INT, "task_type": {"type": "string", "enum": ["remove-broker"]},
        "task_status": {"type": "string", "enum": ["IN_PROGRESS", "SUCCESS"]}, "replicas": _INT, "should_shutdown": _BOOL,
        "broker": _RELATED,
    }),
    "BrokerTaskList": _list("KafkaBrokerTaskList", "BrokerTask"),
    "Acl": {
        "type": "object",
        "required": ["kind", "metadata", "cluster_id", "resource_type", "resource_name", "pattern_type", "principal", "host",
                     "operation", "permission"],
        "properties": {
            "kind": {"type": "string", "enum": ["KafkaAcl"]},
            "metadata": {"type": "object", "required": ["self"], "properties": {"self": _STR}},
            "cluster_id": _STR, "resource_type": _STR, "resource_name": _STR, "pattern_type": _STR, "principal": _STR,
            "host": _STR, "operation": _STR, "permission": _STR,
        },
    },
    "AclList": _list("KafkaAclList", "Acl"),
    "ConsumerAssignment": _resource("KafkaConsumerAssignment", {
        "cluster_id": _STR, "consumer_group_id": _STR, "consumer_id": _STR, "topic_name": _STR, "partition_id": _INT,
        "partition": _RELATED, "lag": _RELATED,
    }),
    "ConsumerAssignmentList": _list("KafkaConsumerAssignmentList", "ConsumerAssignment"),
    "CreateTopicRequest": {
        "type": "object", "required": ["topic_name"],
        "properties": {
            "topic_name": _STR, "partitions_count": _INT, "replication_factor": _INT, "validate_only": _BOOL,
            "configs": {"type": "array", "items": {"type": "object", "required": ["name"],
                                                   "properties": {"name": _STR, "value": _NULLABLE_STR}}},
        },
    },
    "UpdateConfigRequest": {"type": "object", "properties": {"value": _NULLABLE_STR}},
    "AlterConfigBatchRequest": {
        "type": "object", "required": ["data"],
        "properties": {
            "validate_only": _BOOL,
            "data": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
                "name": _STR, "value": _NULLABLE_STR, "operation": {"type": "string", "enum": ["SET", "DELETE", "APPEND", "SUBTRACT"]},
            }}},
        },
    },
    "ProduceRequest": {
        "type": "object",
        "properties": {
            "partition_id": {"type": "integer", "nullable": True},
            "headers": {"type": "array", "items": {"type": "object", "required": ["name"],
                                                   "properties": {"name": _STR, "value": {"type": "string", "format": "byte", "nullable": True}}}},
            "key": _PAYLOAD, "value": _PAYLOAD,
            "timestamp": {"type": "string", "format": "date-time", "nullable": True},
        },
    },
    "ProduceResponse": {
        "type": "object", "required": ["error_code"],
        "properties": {
            "error_code": _INT, "cluster_id": _STR, "topic_name": _STR, "partition_id": _INT, "offset": _INT,
            "timestamp": {"type": "string", "format": "date-time"}, "key": _PAYLOAD_INFO, "value": _PAYLOAD_INFO,
            "message": _NULLABLE_STR,
        },
    },
}

_NAME_VALUES = {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {"name": _STR, "value": _NULLABLE_STR}}}
_MIRROR_LAGS = {"type": "array", "nullable": True, "items": {"type": "object", "properties": {
    "partition": _INT, "lag": _INT, "lag_ms": _INT, "last_source_fetch_offset": _INT, "stop_offset": _INT,
}}}
SCHEMAS.update({
    "Link": _resource("KafkaLinkData", {
        "link_name": _STR, "link_id": _STR, "cluster_link_id": _STR, "topic_names": {"type": "array", "items": _STR},
        "configs": _RELATED, "mirrors": _RELATED,
    }),
    "LinkList": _list("KafkaLinkDataList", "Link"),
    "CreateLinkRequest": {"type": "object", "properties": {"configs": _NAME_VALUES}},
    "LinkConfig": _resource("KafkaLinkConfigData", {
        "cluster_id": _STR, "link_name": _STR, "name": _STR, "value": _NULLABLE_STR, "sensitive": _BOOL,
        "read_only": _BOOL, "is_default": _BOOL, "source": _STR, "synonyms": {"type": "array", "items": {}},
    }),
    "LinkConfigList": _list("KafkaLinkConfigDataList", "LinkConfig"),
    "Mirror": _resource("KafkaMirrorData", {
        "link_name": _STR, "mirror_topic_name": _STR, "source_topic_name": _STR, "num_partitions": _INT,
        "mirror_status": _STR, "reason": _NULLABLE_STR, "mirror_lags": _MIRROR_LAGS,
    }),
    "MirrorList": _list("KafkaMirrorDataList", "Mirror"),
    "CreateMirrorRequest": {"type": "object", "required": ["source_topic_name"], "properties": {
        "source_topic_name": _STR, "mirror_topic_name": _STR, "replication_factor": _INT, "configs": _NAME_VALUES,
    }},
    "AlterMirrorsRequest": {"type": "object", "required": ["mirror_topic_names"],
                            "properties": {"mirror_topic_names": {"type": "array", "items": _STR}}},
    "AlterMirrorsResult": {"type": "object", "required": ["kind", "metadata", "data"], "properties": {
        "kind": {"type": "string", "enum": ["AlterMirrorStatusResponseDataList"]},
        "metadata": {"$ref": "#/components/schemas/ListMetadata"},
        "data": {"type": "array", "items": {"type": "object", "required": ["mirror_topic_name", "error_code"], "properties": {
            "kind": _STR, "mirror_topic_name": _STR, "error_code": _INT, "error_message": _NULLABLE_STR,
        }}},
    }},
})

_TP = {"type": "object", "required": ["topic", "partition"], "properties": {"topic": _STR, "partition": _INT}}
_TP_OFFSET = {"type": "object", "required": ["topic", "partition", "offset"],
              "properties": {"topic": _STR, "partition": _INT, "offset": _INT, "metadata": _NULLABLE_STR}}
SCHEMAS.update({
    "CreateConsumerInstanceRequest": {"type": "object", "properties": {
        "name": _STR, "format": {"type": "string", "enum": ["binary", "json"]},
        "auto.offset.reset": {"type": "string", "enum": ["earliest", "latest", "none"]},
        "auto.commit.enable": {"type": "string", "enum": ["true", "false"]},
        "fetch.min.bytes": _STR, "consumer.request.timeout.ms": _STR,
    }},
    "ConsumerInstance": {"type": "object", "required": ["instance_id", "base_uri"],
                         "properties": {"instance_id": _STR, "base_uri": _STR}},
    "SubscriptionRequest": {"type": "object", "properties": {"topics": {"type": "array", "items": _STR}, "topic_pattern": _STR}},
    "Subscription": {"type": "object", "required": ["topics"], "properties": {"topics": {"type": "array", "items": _STR}}},
    "PartitionsRequest": {"type": "object", "required": ["partitions"],
                          "properties": {"partitions": {"type": "array", "items": _TP}}},
    "OffsetsRequest": {"type": "object", "required": ["offsets"], "properties": {"offsets": {"type": "array", "items": _TP_OFFSET}}},
    "CommittedOffsets": {"type": "object", "required": ["offsets"], "properties": {"offsets": {"type": "array", "items": _TP_OFFSET}}},
    "Records": {"type": "array", "items": {"type": "object", "required": ["topic", "key", "value", "partition", "offset"],
                                           "properties": {"topic": _STR, "key": {"nullable": True}, "value": {"nullable": True},
                                                          "partition": _INT, "offset": _INT}}},
})


def _error_response(media: str) -> dict:
    return {"description": "An error, in Confluent's shape.",
            "content": {media: {"schema": {"$ref": "#/components/schemas/Error"}}}}


_ERROR_RESPONSE = _error_response("application/json")
_INTEGER_PARAMS = {"broker_id", "partition_id"}


def document(routes) -> dict:
    paths: dict[str, dict] = {}
    for route in routes:
        operation = {
            "operationId": route.operation_id,
            "summary": route.summary,
            "parameters": [
                {"name": name, "in": "path", "required": True,
                 "schema": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1} if name in _INTEGER_PARAMS else {"type": "string", "minLength": 1}}
                for name in re.findall(r"{(\w+)}", route.path)
            ] + [{"name": name, "in": "query", "required": False, "schema": _STR} for name in route.query],
            "responses": {"default": _error_response(route.media)},
        }
        if route.response is None:
            operation["responses"]["204"] = {"description": "Done."}
        else:
            operation["responses"][str(route.status)] = {
                "description": "The resource.",
                "content": {media: {"schema": {"$ref": f"#/components/schemas/{route.response}"}} for media in route.answers or (route.media,)},
            }
        # A GET's body (v2's committed offsets takes one) is left out: OpenAPI gives it no meaning.
        if route.request is not None and route.method != "GET":
            operation["requestBody"] = {
                "required": not route.body_optional,
                "content": {route.media: {"schema": {"$ref": f"#/components/schemas/{route.request}"}}},
            }
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    paths["/v3"] = {"get": {
        "operationId": "getRestApi", "summary": "Where the clusters and this document are.",
        "responses": {"200": {"description": "The API's root.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RestApi"}}}},
                      "default": _ERROR_RESPONSE},
    }}
    paths["/v3/openapi.json"] = {"get": {
        "operationId": "getOpenApiDocument", "summary": "This document.",
        "responses": {"200": {"description": "The OpenAPI document.", "content": {"application/json": {"schema": {"type": "object"}}}}},
    }}
    return {
        "openapi": "3.0.3",
        "info": {"title": "pybroker REST proxy (Confluent REST Proxy v3 resources and v2 consumers)", "version": "3"},
        "paths": paths,
        "components": {"schemas": SCHEMAS},
    }
