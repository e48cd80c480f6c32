"""What a mirror needs to know of its source topic: partition count and configs.

Read with public APIs only (Metadata, DescribeConfigs), so the source may be
any Kafka-API cluster. The configs are those set on the source topic itself
(DescribeConfigs' DYNAMIC_TOPIC_CONFIG, or not ``is_default`` from a v0-only
source): a source broker's own defaults are not the topic's, and copying them
would pin the mirror to another cluster's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.links.source import SourceCluster, SourceUnavailable
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

DESCRIBE_CONFIGS = APIS_BY_NAME["DescribeConfigs"]
_DC = struct_classes(DESCRIBE_CONFIGS.request)
RESOURCE_TOPIC = 2
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs' config_source of a topic's own setting


class SourceTopicMissing(LookupError):
    """The source has no such topic (or does not let the link see it)."""

    def __init__(self, message: str, error_code: ErrorCode):
        super().__init__(message)
        self.error_code = error_code


@dataclass
class SourceTopic:
    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # set on the topic itself


async def describe_source_topic(source: SourceCluster, topic: str) -> SourceTopic:
    """The source topic's partition count and own configs. SourceTopicMissing when
    it is not there; SourceUnavailable when the source does not answer."""
    metadata = await source.metadata([topic])
    found = next((t for t in metadata.topics if t.name == topic), None)
    if found is None or found.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise SourceTopicMissing(
            f"topic {topic} does not exist on the source of link {source.link_name}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
    if found.error_code != ErrorCode.NONE:
        code = ErrorCode(found.error_code)
        raise SourceTopicMissing(f"the source of link {source.link_name} answered {code.name} for topic {topic}", code)

    def body(version: int):
        return _DC.DescribeConfigsRequest(
            resources=[_DC.DescribeConfigsResource(resource_type=RESOURCE_TOPIC, resource_name=topic, configuration_keys=None)],
            include_synonyms=False, include_documentation=False,
        )

    version, response = await source.request_any(DESCRIBE_CONFIGS, body)
    result = next((r for r in response.results if r.resource_name == topic), None)
    if result is None:
        raise SourceUnavailable(f"link {source.link_name}: DescribeConfigs of {topic} came back without it")
    if result.error_code != ErrorCode.NONE:
        code = ErrorCode(result.error_code)
        raise SourceTopicMissing(
            f"the source of link {source.link_name} answered DescribeConfigs of {topic} with {code.name}"
            + (f": {result.error_message}" if result.error_message else ""),
            code,
        )
    own = {}
    for config in result.configs:
        if config.value is None:
            continue
        set_here = config.config_source == DYNAMIC_TOPIC_CONFIG if version >= 1 else not config.is_default
        if set_here:
            own[config.name] = config.value
    return SourceTopic(topic, len(found.partitions), own)
