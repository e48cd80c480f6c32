"""The metadata image: an immutable view of the cluster built by replaying records.

Brokers read images; only a :class:`~controller.metadata.delta.MetadataDelta`
(or :func:`controller.metadata.delta.apply_records`, which uses one) makes a new one, and only from
records that were written to the metadata log first.

An image holds what Kafka's MetadataImage holds for brokers, controllers,
topics and their partitions, configs, finalized features, the producer-id
block, client quotas, ACLs and SCRAM credentials (salted keys only: a
password is never in the metadata). Every mapping is read-only (``MappingProxyType``) and every value is a
frozen dataclass, so an image may be shared between tasks without copying; a
new image shares every topic, partition and broker that did not change.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from controller.metadata.records import (
    ACCESS_CONTROL_ENTRY_RECORD,
    MIRROR_STATE_NAMES,
    MIRROR_WRITABLE_STATES,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
)
from protocol.scram import ScramCredential  # the image keeps what a SCRAM server needs, as the server reads it

_EMPTY: Mapping = MappingProxyType({})


def _empty() -> Mapping:
    return _EMPTY


class PartitionImage(NamedTuple):
    """One partition as the last PartitionRecord/PartitionChangeRecords left it.

    The first six fields keep their positions (callers build these positionally);
    the rest default to what a partition without reassignment, unclean election
    or ELR has. ``directories`` is empty (unknown) or one log dir per replica.

    A named tuple rather than a frozen dataclass: a cluster has up to millions
    of these and replay makes one per partition change, and a tuple is built
    about four times faster (measured by ``benchmarks/metadata_replay.py``).
    """

    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    directories: tuple[uuid.UUID, ...] = ()
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @property
    def has_leader(self) -> bool:
        return self.leader >= 0


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage] = field(default_factory=_empty)
    configs: Mapping[str, str] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener of a broker or controller."""

    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class SupportedFeature:
    """A feature's level range a broker or controller can run at."""

    min_version: int
    max_version: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker.

    ``epoch`` is the RegisterBrokerRecord's ``broker_epoch``, which the active
    controller sets to the offset it writes that record at (Kafka's rule); the
    image takes it from the record rather than from the replay offset so that
    a snapshot, replayed at other offsets, recreates the same epochs.
    """

    broker_id: int
    incarnation_id: uuid.UUID
    epoch: int
    endpoints: tuple[Endpoint, ...] = ()
    features: Mapping[str, SupportedFeature] = field(default_factory=_empty)
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    is_migrating_zk_broker: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()

    def endpoint(self, name: str) -> Endpoint | None:
        for endpoint in self.endpoints:
            if endpoint.name == name:
                return endpoint
        return None


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    controller_id: int
    incarnation_id: uuid.UUID
    zk_migration_ready: bool = False
    endpoints: tuple[Endpoint, ...] = ()
    features: Mapping[str, SupportedFeature] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL as an AccessControlEntryRecord stores it: a resource pattern and an entry.

    The codes are Kafka's (``controller.authorizer`` names them): ``resource_type``
    (TOPIC 2, GROUP 3, CLUSTER 4, ...), ``pattern_type`` (LITERAL 3, PREFIXED 4),
    ``operation`` (READ 3, ...), ``permission_type`` (DENY 2, ALLOW 3);
    ``principal`` is "Type:name" ("User:alice", "User:*"), ``host`` an address or "*".
    Two bindings with the same fields are the same ACL, whatever their ids.
    """

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


def acl_entry_record(acl_id: uuid.UUID, acl: AclBinding):
    """The AccessControlEntryRecord that stores ``acl`` under ``acl_id``."""
    return ACCESS_CONTROL_ENTRY_RECORD(
        id=acl_id,
        resource_type=acl.resource_type,
        resource_name=acl.resource_name,
        pattern_type=acl.pattern_type,
        principal=acl.principal,
        host=acl.host,
        operation=acl.operation,
        permission_type=acl.permission_type,
    )


@dataclass(frozen=True, slots=True)
class ClusterLink:
    """A link from this cluster to a source cluster (a ClusterLinkRecord):
    ``configs`` holds every setting given, secrets included (describing a link
    redacts them)."""

    link_id: uuid.UUID
    name: str
    configs: Mapping[str, str] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class MirrorTopic:
    """A topic of this cluster that mirrors ``source_topic`` of the link
    ``link_id`` (a MirrorTopicRecord). ``state`` is one of the ``MIRROR_*``
    codes of :mod:`controller.metadata.records`; ``partition_marks`` maps a
    partition to (offset, leader epoch of the batch before it): where a stopped
    mirror stopped, or where a restarted one's replicas were cut back to."""

    topic_id: uuid.UUID
    link_id: uuid.UUID
    source_topic: str
    state: int
    reason: str | None = None
    partition_marks: Mapping[int, tuple[int, int]] = field(default_factory=_empty)

    @property
    def state_name(self) -> str:
        return MIRROR_STATE_NAMES.get(self.state, str(self.state))

    @property
    def writable(self) -> bool:
        """Producers may write: the mirror was promoted or failed over."""
        return self.state in MIRROR_WRITABLE_STATES


# A client-quota entity: its (entity type, name) pairs sorted by type, a name of
# None meaning that type's default entity; e.g. (("client-id", None), ("user", "alice")).
QuotaEntity = tuple[tuple[str, str | None], ...]


def quota_entity(pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The canonical entity of (type, name) pairs (sorted by type; a type given twice keeps its last name,
    as Kafka's ClientQuotaEntity map does)."""
    return tuple(sorted(dict(pairs).items(), key=lambda pair: pair[0]))


def quota_entity_sort_key(entity: QuotaEntity) -> tuple:
    """A total order over entities (None names first within a type)."""
    return tuple((kind, name is not None, name or "") for kind, name in entity)


@dataclass(frozen=True)
class MetadataImage:
    """The whole cluster metadata at ``offset`` (the last log offset it includes).

    ``resource_configs`` holds the configs of every resource but topics (whose
    configs live in their :class:`TopicImage`), keyed by (resource type, name);
    ``broker_configs`` is the cluster-wide broker default (resource BROKER "").
    Features at level 0 are not finalized and so are absent, as in Kafka.
    ``client_quotas`` maps an entity to its quota values (never an empty map),
    ``acls`` an ACL's id to its binding, ``scram_credentials`` (user name,
    mechanism) to the credential. ``cluster_links`` maps a link's name to the
    link, ``mirror_topics`` a topic's id to its mirror state (a topic that was
    never a mirror has none).
    """

    topics: Mapping[str, TopicImage] = field(default_factory=_empty)
    topic_names_by_id: Mapping[uuid.UUID, str] = field(default_factory=_empty)
    features: Mapping[str, int] = field(default_factory=_empty)
    next_producer_id: int = 0
    offset: int = -1  # the last metadata log offset this image includes
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=_empty)
    controllers: Mapping[int, ControllerRegistration] = field(default_factory=_empty)
    resource_configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=_empty)
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=_empty)
    acls: Mapping[uuid.UUID, AclBinding] = field(default_factory=_empty)
    scram_credentials: Mapping[tuple[str, int], ScramCredential] = field(default_factory=_empty)
    cluster_links: Mapping[str, ClusterLink] = field(default_factory=_empty)
    mirror_topics: Mapping[uuid.UUID, MirrorTopic] = field(default_factory=_empty)
    # Broker id -> its placement state (records.PLACEMENT_CORDONED or _DRAINING);
    # a broker with no entry takes new replicas.
    broker_placement: Mapping[int, int] = field(default_factory=_empty)
    # (resource type, resource name, config name) -> the value the balancer set:
    # the throttle configs that are the balancer's to remove.
    balancer_throttles: Mapping[tuple[int, str, str], str] = field(default_factory=_empty)

    def link_by_id(self, link_id: uuid.UUID) -> ClusterLink | None:
        for link in self.cluster_links.values():
            if link.link_id == link_id:
                return link
        return None

    def mirror_of(self, topic_name: str) -> MirrorTopic | None:
        """The mirror state of the topic named ``topic_name`` (None: not a mirror)."""
        if not self.mirror_topics:
            return None
        topic = self.topics.get(topic_name)
        return None if topic is None else self.mirror_topics.get(topic.topic_id)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        name = self.topic_names_by_id.get(topic_id)
        return None if name is None else self.topics.get(name)

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionImage | None:
        topic = self.topic_by_id(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    @property
    def broker_configs(self) -> Mapping[str, str]:
        return self.resource_configs.get((RESOURCE_BROKER, ""), _EMPTY)

    def configs_of(self, resource_type: int, resource_name: str) -> Mapping[str, str]:
        """The dynamic configs of any resource (empty when it has none)."""
        if resource_type == RESOURCE_TOPIC:
            topic = self.topics.get(resource_name)
            return _EMPTY if topic is None else topic.configs
        return self.resource_configs.get((resource_type, resource_name), _EMPTY)

    def unfenced_broker_ids(self) -> list[int]:
        return sorted(b.broker_id for b in self.brokers.values() if not b.fenced)

    @property
    def is_empty(self) -> bool:
        return not (
            self.topics or self.brokers or self.controllers or self.features or self.resource_configs
            or self.next_producer_id or self.client_quotas or self.acls or self.scram_credentials
            or self.cluster_links or self.mirror_topics or self.broker_placement or self.balancer_throttles
        )
