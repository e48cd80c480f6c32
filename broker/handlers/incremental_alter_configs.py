"""IncrementalAlterConfigs (key 44), versions 0-1 (Kafka 4's range).

Per key: SET (0) sets the topic override, DELETE (1) removes it (deleting a
key that is not set, even an unknown one, is a no-op), APPEND (2) and
SUBTRACT (3) add or remove comma-separated items of a LIST config
(``cleanup.policy``), starting from its default when there is no override;
on any other key they answer INVALID_CONFIG. The resulting overrides are
validated as for CreateTopics (INVALID_CONFIG), written to the metadata log
as ConfigRecords and applied to the topic's partition logs at once.
A resource that fails changes nothing: unknown topic
UNKNOWN_TOPIC_OR_PARTITION; duplicate keys, a null value for SET/APPEND/SUBTRACT,
an unknown operation or a resource given twice INVALID_REQUEST. BROKER
resources (a broker id, or "" cluster-wide) take the dynamic broker configs
pybroker applies at run time (controller.dynamic_broker_configs; APPEND/SUBTRACT
on ``log.cleanup.policy``); other keys and bad values answer INVALID_REQUEST
with the reason, as Kafka's broker does. BROKER_LOGGER (log levels) and other
types are not supported (INVALID_REQUEST). validate_only checks everything and writes
nothing. Authorization as AlterConfigs' (broker/handlers/alter_configs.py).
"""

from __future__ import annotations

from broker.handlers.alter_configs import authorize_resources
from controller.config_commands import ConfigChange, ConfigOp
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["IncrementalAlterConfigs"]
R = struct_classes(API.response)


def register(dispatcher, broker, *, forwarded: bool = False) -> None:
    # On the controller listener the requests come forwarded by the broker a client
    # asked, so a BROKER resource names that broker, not this node.
    local_node_id = None if forwarded else broker.node_id


    async def handle(ctx, request):
        changes = [
            ConfigChange(
                r.resource_type, r.resource_name, [ConfigOp(c.name, c.config_operation, c.value) for c in r.configs]
            )
            for r in request.resources
        ]
        results = await broker.controller.alter_configs(
            changes, incremental=True, validate_only=request.validate_only, local_node_id=local_node_id
        )
        responses = [
            R.AlterConfigsResourceResponse(
                error_code=result.error_code,
                error_message=result.error_message,
                resource_type=result.resource_type,
                resource_name=result.resource_name,
            )
            for result in results
        ]
        return R.IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)

    def authorize(ctx, request):
        return authorize_resources(
            broker, ctx, request, R, lambda: R.IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[])
        )

    dispatcher.register(API.key, 0, 1, handle, authorize=authorize)
