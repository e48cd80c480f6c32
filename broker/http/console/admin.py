"""The console's changes and config reads, as Kafka requests through the broker's own dispatcher.

A form of the console (create or delete a topic, set or delete a topic config)
becomes the request a Kafka admin client would send (CreateTopics,
DeleteTopics, IncrementalAlterConfigs, DescribeConfigs), framed by the
project's client core and handed to ``broker.dispatcher.handle_frame``
in-process (broker/net/in_process_client.py):
the same authorization (as ``User:ANONYMOUS`` from the browser's address, the
principal of an unauthenticated PLAINTEXT client), the same forwarding to the
active controller and the same validation as over TCP. The answer's error code
and message are what the page shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.net.dispatch import ANONYMOUS
from broker.net.in_process_client import InProcessClient, RequestRefused
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

CREATE_TOPICS_VERSION = 7
DELETE_TOPICS_VERSION = 5
DESCRIBE_CONFIGS_VERSION = 4
ALTER_CONFIGS_VERSION = 1
REQUEST_TIMEOUT_MS = 30_000
RESOURCE_TOPIC = 2
OP_SET, OP_DELETE = 0, 1
# DescribeConfigs' config_source values (KIP-226) as the page names them.
CONFIG_SOURCES = {1: "dynamic topic", 2: "dynamic broker", 3: "dynamic default broker", 4: "static broker", 5: "default", 6: "dynamic broker logger"}

_CREATE = struct_classes(APIS_BY_NAME["CreateTopics"].request)
_DESCRIBE = struct_classes(APIS_BY_NAME["DescribeConfigs"].request)
_ALTER = struct_classes(APIS_BY_NAME["IncrementalAlterConfigs"].request)


class AdminRefused(Exception):
    """The broker answered with an error: the message names the error code and its text."""


@dataclass
class _ConsoleConnection:
    """What the dispatcher reads of a connection: who asks, from where, on which listener."""

    peer: str
    listener_name: str | None
    peer_host: str
    principal: str = ANONYMOUS

    def throttle(self, throttle_ms: int) -> None:
        # A console request is answered at once; a quota throttle is shown in no response here.
        pass


def error_text(code: int, message: str | None) -> str:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
    return f"{name}: {message}" if message else name


class Admin:
    def __init__(self, broker):
        self.broker = broker
        self._client = InProcessClient(broker, "pybroker-console")

    async def call(self, api_name: str, version: int, browser_host: str, **fields):
        api = APIS_BY_NAME[api_name]
        listeners = self.broker.config.broker_listeners
        connection = _ConsoleConnection(
            peer=f"console:{browser_host}", listener_name=listeners[0].name if listeners else None, peer_host=browser_host
        )
        try:
            return await self._client.request(api, version, api.request.cls(**fields), connection)
        except RequestRefused:
            raise AdminRefused(f"{api_name}: the broker closed the request (malformed or unsupported)") from None

    async def create_topic(self, host: str, name: str, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
        topic = _CREATE.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            assignments=[],
            configs=[_CREATE.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
        )
        response = await self.call(
            "CreateTopics", CREATE_TOPICS_VERSION, host, topics=[topic], timeout_ms=REQUEST_TIMEOUT_MS, validate_only=False
        )
        result = response.topics[0]
        if result.error_code != ErrorCode.NONE:
            raise AdminRefused(f"cannot create topic {name!r}: {error_text(result.error_code, result.error_message)}")

    async def delete_topic(self, host: str, name: str) -> None:
        response = await self.call("DeleteTopics", DELETE_TOPICS_VERSION, host, topic_names=[name], timeout_ms=REQUEST_TIMEOUT_MS)
        for result in response.responses:
            if result.error_code != ErrorCode.NONE:
                raise AdminRefused(f"cannot delete topic {name!r}: {error_text(result.error_code, result.error_message)}")

    async def alter_topic_config(self, host: str, name: str, key: str, value: str | None) -> None:
        """Set ``key`` to ``value``, or with None delete it (back to the broker's default)."""
        config = _ALTER.AlterableConfig(name=key, config_operation=OP_DELETE if value is None else OP_SET, value=value)
        response = await self.call(
            "IncrementalAlterConfigs", ALTER_CONFIGS_VERSION, host,
            resources=[_ALTER.AlterConfigsResource(resource_type=RESOURCE_TOPIC, resource_name=name, configs=[config])],
            validate_only=False,
        )
        for result in response.responses:
            if result.error_code != ErrorCode.NONE:
                raise AdminRefused(f"cannot alter {key} of topic {name!r}: {error_text(result.error_code, result.error_message)}")

    async def topic_configs(self, host: str, name: str) -> list[tuple[str, str, str, bool]]:
        """(name, value, source, read-only) of every config of the topic, by name."""
        response = await self.call(
            "DescribeConfigs", DESCRIBE_CONFIGS_VERSION, host,
            resources=[_DESCRIBE.DescribeConfigsResource(resource_type=RESOURCE_TOPIC, resource_name=name, configuration_keys=None)],
            include_synonyms=False, include_documentation=False,
        )
        result = response.results[0]
        if result.error_code != ErrorCode.NONE:
            raise AdminRefused(f"cannot describe the configs of topic {name!r}: {error_text(result.error_code, result.error_message)}")
        return sorted(
            (e.name, "" if e.value is None else ("(sensitive)" if e.is_sensitive else e.value), CONFIG_SOURCES.get(e.config_source, str(e.config_source)), e.read_only)
            for e in result.configs
        )
