"""The metadata image: an immutable view of the cluster built by replaying records.

Brokers read images; only :func:`apply_records` makes a new one, and only from
records that were written to the metadata log first.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Iterable, Mapping

from controller.metadata.records import (
    CONFIG_RECORD,
    FEATURE_LEVEL_RECORD,
    PARTITION_RECORD,
    PRODUCER_IDS_RECORD,
    REMOVE_TOPIC_RECORD,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    TOPIC_RECORD,
)


def _empty() -> Mapping:
    return MappingProxyType({})


@dataclass(frozen=True)
class PartitionImage:
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage] = field(default_factory=_empty)
    configs: Mapping[str, str] = field(default_factory=_empty)


@dataclass(frozen=True)
class MetadataImage:
    topics: Mapping[str, TopicImage] = field(default_factory=_empty)
    topic_names_by_id: Mapping[uuid.UUID, str] = field(default_factory=_empty)
    broker_configs: Mapping[str, str] = field(default_factory=_empty)
    features: Mapping[str, int] = field(default_factory=_empty)
    next_producer_id: int = 0
    offset: int = -1  # the last metadata log offset this image includes

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        name = self.topic_names_by_id.get(topic_id)
        return None if name is None else self.topics.get(name)


def apply_records(image: MetadataImage, records: Iterable[tuple[int, object]], offset: int) -> MetadataImage:
    """A new image with ``records`` ((api_key, value) pairs) applied.

    Topics touched by the records get fresh partition and config maps, built
    once per call (not once per record), so applying a topic with thousands of
    partitions stays linear.
    """
    topics = dict(image.topics)
    names_by_id = dict(image.topic_names_by_id)
    broker_configs = dict(image.broker_configs)
    features = dict(image.features)
    next_producer_id = image.next_producer_id
    partitions_of: dict[str, dict[int, PartitionImage]] = {}
    configs_of: dict[str, dict[str, str]] = {}

    def partitions(name: str) -> dict[int, PartitionImage]:
        if name not in partitions_of:
            partitions_of[name] = dict(topics[name].partitions)
        return partitions_of[name]

    def configs(name: str) -> dict[str, str]:
        if name not in configs_of:
            configs_of[name] = dict(topics[name].configs)
        return configs_of[name]

    for api_key, value in records:
        if api_key == TOPIC_RECORD.api_key:
            topics[value.name] = TopicImage(value.name, value.topic_id)
            names_by_id[value.topic_id] = value.name
            partitions_of[value.name] = {}
            configs_of[value.name] = {}
        elif api_key == PARTITION_RECORD.api_key:
            name = names_by_id.get(value.topic_id)
            if name is None:
                continue  # a partition of a topic removed in the same batch
            partitions(name)[value.partition_id] = PartitionImage(
                value.partition_id, tuple(value.replicas), tuple(value.isr), value.leader, value.leader_epoch, value.partition_epoch
            )
        elif api_key == REMOVE_TOPIC_RECORD.api_key:
            name = names_by_id.pop(value.topic_id, None)
            if name is not None:
                topics.pop(name, None)
                partitions_of.pop(name, None)
                configs_of.pop(name, None)
        elif api_key == CONFIG_RECORD.api_key:
            if value.resource_type == RESOURCE_TOPIC:
                if value.resource_name not in topics:
                    continue
                topic_configs = configs(value.resource_name)
                if value.value is None:
                    topic_configs.pop(value.name, None)
                else:
                    topic_configs[value.name] = value.value
            elif value.resource_type == RESOURCE_BROKER:
                if value.value is None:
                    broker_configs.pop(value.name, None)
                else:
                    broker_configs[value.name] = value.value
        elif api_key == FEATURE_LEVEL_RECORD.api_key:
            features[value.name] = value.feature_level
        elif api_key == PRODUCER_IDS_RECORD.api_key:
            next_producer_id = max(next_producer_id, value.next_producer_id)
    for name in partitions_of.keys() | configs_of.keys():
        topic = topics.get(name)
        if topic is None:
            continue
        topics[name] = replace(
            topic,
            partitions=MappingProxyType(partitions_of[name]) if name in partitions_of else topic.partitions,
            configs=MappingProxyType(configs_of[name]) if name in configs_of else topic.configs,
        )
    return MetadataImage(
        topics=MappingProxyType(topics),
        topic_names_by_id=MappingProxyType(names_by_id),
        broker_configs=MappingProxyType(broker_configs),
        features=MappingProxyType(features),
        next_producer_id=next_producer_id,
        offset=offset,
    )
