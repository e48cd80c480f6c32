"""AlterConfigs (key 33), versions 0-2 (Kafka 4's range; deprecated by Kafka in favour of
IncrementalAlterConfigs).

Each resource's entries become its complete set of overrides: overrides not
named are deleted. TOPIC resources: changes are validated as for
CreateTopics (unknown names and bad values: INVALID_CONFIG), written to the
metadata log as ConfigRecords and applied to the topic's partition logs at
once. A resource that fails changes nothing: unknown topic
UNKNOWN_TOPIC_OR_PARTITION, duplicate keys or null values INVALID_REQUEST,
a resource given twice INVALID_REQUEST for both copies. BROKER resources (a
broker id, or "" cluster-wide) take the dynamic broker configs pybroker applies
at run time (controller.dynamic_broker_configs); other keys and bad values
answer INVALID_REQUEST with the reason, as Kafka's broker does. BROKER_LOGGER
and other types: INVALID_REQUEST, as in Kafka. validate_only checks everything and writes nothing.

Authorization (with an authorizer), decided by the broker the client asked,
before the request is forwarded: ALTER_CONFIGS on the topic (else
TOPIC_AUTHORIZATION_FAILED), on the group for GROUP resources
(GROUP_AUTHORIZATION_FAILED), on the cluster for BROKER, BROKER_LOGGER and
CLIENT_METRICS (CLUSTER_AUTHORIZATION_FAILED); a refused resource is not sent
on. A resource given twice is left to the handler's INVALID_REQUEST.
"""

from __future__ import annotations

from broker.security.authorization import MESSAGES, config_refusal, split_entries
from controller.authorizer import AclOperation
from controller.config_commands import OP_SET, ConfigChange, ConfigOp
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["AlterConfigs"]
R = struct_classes(API.response)


def authorize_resources(broker, ctx, request, R, empty):
    """The pre-authorization hook of AlterConfigs and IncrementalAlterConfigs (their
    resources and answers have the same shape; ``R`` is the API's response classes)."""
    if broker.authorizer is None:
        return None
    counts: dict[tuple[int, str], int] = {}
    for r in request.resources:
        key = (r.resource_type, r.resource_name)
        counts[key] = counts.get(key, 0) + 1

    def refusal(r):
        if counts[(r.resource_type, r.resource_name)] > 1:
            return None
        error = config_refusal(broker, ctx, AclOperation.ALTER_CONFIGS, r.resource_type, r.resource_name)
        if error is None:
            return None
        return R.AlterConfigsResourceResponse(
            error_code=error, error_message=MESSAGES[error], resource_type=r.resource_type, resource_name=r.resource_name
        )

    return split_entries(request, "resources", refusal, "responses", empty)


def responses(results):
    return [
        R.AlterConfigsResourceResponse(
            error_code=result.error_code,
            error_message=result.error_message,
            resource_type=result.resource_type,
            resource_name=result.resource_name,
        )
        for result in results
    ]


def register(dispatcher, broker, *, forwarded: bool = False) -> None:
    # On the controller listener the requests come forwarded by the broker a client
    # asked, so a BROKER resource names that broker, not this node.
    local_node_id = None if forwarded else broker.node_id


    async def handle(ctx, request):
        changes = [
            ConfigChange(r.resource_type, r.resource_name, [ConfigOp(c.name, OP_SET, c.value) for c in r.configs])
            for r in request.resources
        ]
        results = await broker.controller.alter_configs(
            changes, incremental=False, validate_only=request.validate_only, local_node_id=local_node_id
        )
        return R.AlterConfigsResponse(throttle_time_ms=0, responses=responses(results))

    def authorize(ctx, request):
        return authorize_resources(
            broker, ctx, request, R, lambda: R.AlterConfigsResponse(throttle_time_ms=0, responses=[])
        )

    dispatcher.register(API.key, 0, 2, handle, authorize=authorize)
