"""AlterConfigs (key 33), versions 0-2 (Kafka 4's range; deprecated by Kafka in favour of
IncrementalAlterConfigs).

Each resource's entries become its complete set of overrides: overrides not
named are deleted. TOPIC resources only: changes are validated as for
CreateTopics (unknown names and bad values: INVALID_CONFIG), written to the
metadata log as ConfigRecords and applied to the topic's partition logs at
once. A resource that fails changes nothing: unknown topic
UNKNOWN_TOPIC_OR_PARTITION, duplicate keys or null values INVALID_REQUEST,
a resource given twice INVALID_REQUEST for both copies. BROKER resources answer
INVALID_REQUEST: pybroker has no dynamic broker configs (set them in
server.properties). BROKER_LOGGER and other types: INVALID_REQUEST, as in
Kafka. validate_only checks everything and writes nothing.
"""

from __future__ import annotations

import weakref

from controller.config_commands import OP_SET, ConfigChange, ConfigOp
from protocol.registry import APIS_BY_KEY
from protocol.schema import struct_classes
from storage.topic_config import log_config_from

API = APIS_BY_KEY[33]
R = struct_classes(API.response)

_LIVE_CONFIG_BROKERS: weakref.WeakSet = weakref.WeakSet()


def install_live_topic_configs(broker) -> None:
    """Make committed topic config changes reach the partition logs at once.

    ``Broker._on_metadata_change`` reacts only to partition-set changes; until it
    also handles config changes, this listener gives every partition log of a
    topic whose overrides changed its new LogConfig. Installed once per broker.
    """
    if broker in _LIVE_CONFIG_BROKERS:
        return
    _LIVE_CONFIG_BROKERS.add(broker)

    def on_metadata_change(old, new) -> None:
        for name, topic in new.topics.items():
            previous = old.topics.get(name)
            if previous is None or previous.topic_id != topic.topic_id or previous.configs == topic.configs:
                continue
            log_config = log_config_from(broker.topic_config(topic))
            set_config = getattr(broker.logs, "set_config", None)
            for partition in topic.partitions:
                if set_config is not None:
                    # Also reaches a registered log that is not open yet.
                    set_config(name, partition, log_config)
                elif (plog := broker.partition_log(name, partition)) is not None:
                    plog.config = log_config

    broker.controller.subscribe(on_metadata_change)


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


def register(dispatcher, broker) -> None:
    install_live_topic_configs(broker)

    def handle(ctx, request):
        changes = [
            ConfigChange(r.resource_type, r.resource_name, [ConfigOp(c.name, OP_SET, c.value) for c in r.configs])
            for r in request.resources
        ]
        results = broker.controller.alter_configs(
            changes, incremental=False, validate_only=request.validate_only, local_node_id=broker.node_id
        )
        return R.AlterConfigsResponse(throttle_time_ms=0, responses=responses(results))

    dispatcher.register(API.key, 0, 2, handle)
