"""MetadataDelta: records accumulated on top of an image, then turned into the next image.

A delta copies on write: the first record that touches a topic copies that
topic's partition map (once, however many of its partitions change), the
first broker change copies the broker map, and so on; :meth:`MetadataDelta.apply`
wraps only the copied maps into the new image and shares everything else with
the old one. Replaying a long log through one delta therefore costs one small
step per record plus one copy per touched map, not a copy of the image per
record.

Replay semantics follow Kafka's metadata image (``PartitionRegistration.merge``,
``ClusterDelta``, ``FeaturesDelta``):

- PartitionChangeRecord: a null list, leader -2 (``NO_LEADER_CHANGE``) and
  leader recovery state -1 mean "unchanged". Any leader value other than -2,
  even the current leader or -1 (``NO_LEADER``), bumps the leader epoch;
  every change record bumps the partition epoch.
- Fence/Unfence/BrokerRegistrationChange/Unregister apply only to the broker
  registration whose epoch they name; a record about another incarnation is
  stale and ignored (Kafka's controller refuses to write one, so a valid log
  has none).
- A record about a topic, partition or broker the image does not have is
  ignored: a partition of a topic removed earlier in the same batch is the
  legitimate case.
- FeatureLevelRecord at level 0 removes the feature; ProducerIdsRecord never
  moves the next producer id backwards.
- ClientQuotaRecord sets or removes one key of an entity (Kafka's
  ClientQuotasDelta); an entity left without keys leaves the image.
- AccessControlEntryRecord adds (or replaces) the ACL of its id,
  UserScramCredentialRecord the credential of its (user, mechanism); their
  Remove* records drop it, and one about an id or credential the image does not
  have is ignored (Kafka's controller never writes one).
- ClusterLinkRecord replaces the link of its id (by name in the image);
  RemoveClusterLinkRecord drops it. MirrorTopicRecord replaces its topic's
  mirror state (one about a topic the image does not have is ignored), and a
  topic's RemoveTopicRecord drops its mirror state. A MirrorTopicRecord that
  makes a mirror writable (PROMOTED or FAILED_OVER, from another state of the
  same mirror; a snapshot's first record about a mirror moves nothing) also
  moves each marked partition's leader epoch past both its own and the epoch
  of the last mirrored batch (``max(leader epoch, mark epoch) + 1``, partition
  epoch + 1): the mirrored batches carry the source's leader epochs, and the
  destination's first own batch must carry a larger one for the epoch cache
  to stay ordered. These record types are pybroker's own (api keys 10000+).
- Records between BeginTransactionRecord and EndTransactionRecord apply all
  together at the end marker; an AbortTransactionRecord drops them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from types import MappingProxyType

from controller.metadata.image import (
    AclBinding,
    BrokerRegistration,
    ClusterLink,
    ControllerRegistration,
    Endpoint,
    MetadataImage,
    MirrorTopic,
    PartitionImage,
    ScramCredential,
    SupportedFeature,
    TopicImage,
    quota_entity,
)
from controller.metadata.records import (
    ABORT_TRANSACTION_RECORD,
    ACCESS_CONTROL_ENTRY_RECORD,
    BALANCER_THROTTLE_RECORD,
    BEGIN_TRANSACTION_RECORD,
    BROKER_PLACEMENT_RECORD,
    BROKER_REGISTRATION_CHANGE_RECORD,
    CLIENT_QUOTA_RECORD,
    CLUSTER_LINK_RECORD,
    CONFIG_RECORD,
    CONTROLLED_SHUTDOWN_CHANGE_ENTER,
    END_TRANSACTION_RECORD,
    FEATURE_LEVEL_RECORD,
    FENCE_BROKER_RECORD,
    FENCING_CHANGE_FENCE,
    FENCING_CHANGE_UNFENCE,
    MIRROR_TOPIC_RECORD,
    MIRROR_WRITABLE_STATES,
    NO_LEADER_CHANGE,
    NO_LEADER_RECOVERY_STATE_CHANGE,
    NO_OP_RECORD,
    PARTITION_CHANGE_RECORD,
    PARTITION_RECORD,
    PLACEMENT_NORMAL,
    PRODUCER_IDS_RECORD,
    REGISTER_BROKER_RECORD,
    REGISTER_CONTROLLER_RECORD,
    REMOVE_ACCESS_CONTROL_ENTRY_RECORD,
    REMOVE_CLUSTER_LINK_RECORD,
    REMOVE_TOPIC_RECORD,
    REMOVE_USER_SCRAM_CREDENTIAL_RECORD,
    RESOURCE_TOPIC,
    TOPIC_RECORD,
    UNFENCE_BROKER_RECORD,
    UNREGISTER_BROKER_RECORD,
    USER_SCRAM_CREDENTIAL_RECORD,
    record_api_key,
)


class MetadataLogError(ValueError):
    """The records break the metadata log's own rules (transaction markers out of order)."""


# Building the tuple directly skips the named tuple's argument parsing, which
# is most of the cost of a partition change.
_new_partition = tuple.__new__


def partition_from_record(record) -> PartitionImage:
    return _new_partition(
        PartitionImage,
        (
            record.partition_id,
            tuple(record.replicas),
            tuple(record.isr),
            record.leader,
            record.leader_epoch,
            record.partition_epoch,
            tuple(record.removing_replicas),
            tuple(record.adding_replicas),
            record.leader_recovery_state,
            tuple(record.directories),
            tuple(record.eligible_leader_replicas or ()),
            tuple(record.last_known_elr or ()),
        ),
    )


def merge_partition_change(old: PartitionImage, change) -> PartitionImage:
    """``old`` with a PartitionChangeRecord applied (Kafka's PartitionRegistration.merge)."""
    (
        partition_id,
        replicas,
        isr,
        leader,
        leader_epoch,
        partition_epoch,
        removing,
        adding,
        recovery,
        directories,
        elr,
        last_known_elr,
    ) = old
    if change.replicas is not None:
        replicas = tuple(change.replicas)
        if change.directories is None and len(directories) != len(replicas):
            # New replicas without their directories: unknown rather than misaligned.
            directories = ()
    if change.directories is not None:
        directories = tuple(change.directories)
    if change.isr is not None:
        isr = tuple(change.isr)
    if change.leader != NO_LEADER_CHANGE:
        leader = change.leader
        leader_epoch += 1
    if change.removing_replicas is not None:
        removing = tuple(change.removing_replicas)
    if change.adding_replicas is not None:
        adding = tuple(change.adding_replicas)
    if change.leader_recovery_state != NO_LEADER_RECOVERY_STATE_CHANGE:
        recovery = change.leader_recovery_state
    if change.eligible_leader_replicas is not None:
        elr = tuple(change.eligible_leader_replicas)
    if change.last_known_elr is not None:
        last_known_elr = tuple(change.last_known_elr)
    return _new_partition(
        PartitionImage,
        (
            partition_id,
            replicas,
            isr,
            leader,
            leader_epoch,
            partition_epoch + 1,
            removing,
            adding,
            recovery,
            directories,
            elr,
            last_known_elr,
        ),
    )


def _endpoints(items) -> tuple[Endpoint, ...]:
    return tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in items)


def _supported_features(items) -> MappingProxyType:
    return MappingProxyType({f.name: SupportedFeature(f.min_supported_version, f.max_supported_version) for f in items})


class MetadataDelta:
    """Records replayed on top of ``image``; :meth:`apply` makes the next image.

    After :meth:`apply` the delta starts over from the image it returned, so one
    delta can follow a log batch after batch (publishing an image whenever the
    caller likes). An open metadata transaction carries over to the next image.
    """

    def __init__(self, image: MetadataImage):
        self._pending: list | None = None  # records of an open metadata transaction
        self._rebase(image)

    def _rebase(self, image: MetadataImage) -> None:
        self.image = image
        # Copies of the image's maps, made on the first write; the *_view
        # attributes point at the copy once it exists, at the image's map before.
        self._topics: dict | None = None
        self._topics_view = image.topics
        self._names_by_id: dict | None = None
        self._names_view = image.topic_names_by_id
        self._brokers: dict | None = None
        self._controllers: dict | None = None
        self._features: dict | None = None
        # Working copies of the inner maps of touched topics and resources.
        self._partitions_of: dict[str, dict[int, PartitionImage]] = {}
        self._topic_configs_of: dict[str, dict[str, str]] = {}
        self._resource_configs_of: dict[tuple[int, str], dict[str, str]] = {}
        self._next_producer_id = image.next_producer_id
        self._quotas_of: dict[tuple, dict[str, float]] = {}  # working copies of touched entities
        self._acls: dict | None = None
        self._scram: dict | None = None
        self._links: dict | None = None
        self._mirrors: dict | None = None
        self._placement: dict | None = None
        self._balancer_throttles: dict | None = None

    @property
    def in_transaction(self) -> bool:
        return self._pending is not None

    # ------------------------------------------------------------------ replay

    def replay(self, api_key: int, record) -> None:
        """Apply one (api_key, record); see the module docstring for the rules."""
        if self._pending is not None and api_key not in _TRANSACTION_MARKERS:
            self._pending.append((api_key, record))
            return
        handler = _HANDLERS.get(api_key)
        if handler is None:
            raise MetadataLogError(f"no replay rule for metadata record type {api_key}")
        handler(self, record)

    def replay_all(self, records: Iterable[tuple[int, object]]) -> None:
        handlers = _HANDLERS
        for api_key, record in records:
            if self._pending is None:
                # The common case, kept to one dictionary lookup and one call.
                handler = handlers.get(api_key)
                if handler is not None:
                    handler(self, record)
                    continue
            self.replay(api_key, record)

    def replay_values(self, records: Iterable[object]) -> None:
        """Replay record values (as the controller builds them), finding each api key."""
        self.replay_all((record_api_key(r), r) for r in records)

    # ------------------------------------------------------------------ apply

    def apply(self, offset: int) -> MetadataImage:
        """The next image, including every record replayed so far (outside an open
        transaction), at log ``offset``; the delta then starts over from it."""
        base = self.image
        topics = self._topics_view
        if self._partitions_of or self._topic_configs_of:
            topics = self._own_topics()
            for name in self._partitions_of.keys() | self._topic_configs_of.keys():
                topic = topics[name]
                partitions = self._partitions_of.get(name)
                configs = self._topic_configs_of.get(name)
                topics[name] = TopicImage(
                    topic.name,
                    topic.topic_id,
                    topic.partitions if partitions is None else MappingProxyType(partitions),
                    topic.configs if configs is None else MappingProxyType(configs),
                )
        resource_configs = base.resource_configs
        if self._resource_configs_of:
            resource_configs = _copy(resource_configs)
            for key, configs in self._resource_configs_of.items():
                if configs:
                    resource_configs[key] = MappingProxyType(configs)
                else:
                    resource_configs.pop(key, None)
        client_quotas = base.client_quotas
        if self._quotas_of:
            client_quotas = _copy(client_quotas)
            for entity, quotas in self._quotas_of.items():
                if quotas:
                    client_quotas[entity] = MappingProxyType(quotas)
                else:
                    client_quotas.pop(entity, None)
        image = MetadataImage(
            topics=_frozen(topics, base.topics),
            topic_names_by_id=_frozen(self._names_view, base.topic_names_by_id),
            features=_frozen(self._features, base.features),
            next_producer_id=self._next_producer_id,
            offset=offset,
            brokers=_frozen(self._brokers, base.brokers),
            controllers=_frozen(self._controllers, base.controllers),
            resource_configs=_frozen(resource_configs, base.resource_configs),
            client_quotas=_frozen(client_quotas, base.client_quotas),
            acls=_frozen(self._acls, base.acls),
            scram_credentials=_frozen(self._scram, base.scram_credentials),
            cluster_links=_frozen(self._links, base.cluster_links),
            mirror_topics=_frozen(self._mirrors, base.mirror_topics),
            broker_placement=_frozen(self._placement, base.broker_placement),
            balancer_throttles=_frozen(self._balancer_throttles, base.balancer_throttles),
        )
        self._rebase(image)
        return image

    # ------------------------------------------------------------------ copy on write

    def _own_topics(self) -> dict:
        if self._topics is None:
            self._topics = _copy(self._topics_view)
            self._topics_view = self._topics
        return self._topics

    def _own_names(self) -> dict:
        if self._names_by_id is None:
            self._names_by_id = _copy(self._names_view)
            self._names_view = self._names_by_id
        return self._names_by_id

    def _own_brokers(self) -> dict:
        if self._brokers is None:
            self._brokers = _copy(self.image.brokers)
        return self._brokers

    def _current_brokers(self):
        return self.image.brokers if self._brokers is None else self._brokers

    # ------------------------------------------------------------------ topics and partitions

    def _replay_topic(self, record) -> None:
        topics = self._own_topics()
        names = self._own_names()
        previous = topics.get(record.name)
        if previous is not None:
            names.pop(previous.topic_id, None)
        topics[record.name] = TopicImage(record.name, record.topic_id)
        names[record.topic_id] = record.name
        self._partitions_of[record.name] = {}
        self._topic_configs_of[record.name] = {}

    def _replay_remove_topic(self, record) -> None:
        if record.topic_id not in self._names_view:
            return
        name = self._own_names().pop(record.topic_id)
        self._own_topics().pop(name, None)
        if record.topic_id in (self.image.mirror_topics if self._mirrors is None else self._mirrors):
            self._own_mirrors().pop(record.topic_id, None)
        self._partitions_of.pop(name, None)
        self._topic_configs_of.pop(name, None)

    def _partitions(self, topic_id) -> dict[int, PartitionImage] | None:
        name = self._names_view.get(topic_id)
        if name is None:
            return None
        partitions = self._partitions_of.get(name)
        if partitions is None:
            partitions = self._partitions_of[name] = _copy(self._topics_view[name].partitions)
        return partitions

    def _replay_partition(self, record) -> None:
        partitions = self._partitions(record.topic_id)
        if partitions is not None:
            partitions[record.partition_id] = partition_from_record(record)

    def _replay_partition_change(self, record) -> None:
        # The hot path of a long log: _partitions() inlined.
        name = self._names_view.get(record.topic_id)
        if name is None:
            return
        partitions = self._partitions_of.get(name)
        if partitions is None:
            partitions = self._partitions_of[name] = _copy(self._topics_view[name].partitions)
        old = partitions.get(record.partition_id)
        if old is not None:
            partitions[record.partition_id] = merge_partition_change(old, record)

    # ------------------------------------------------------------------ configs, features, producer ids

    def _replay_config(self, record) -> None:
        if record.resource_type == RESOURCE_TOPIC:
            name = record.resource_name
            configs = self._topic_configs_of.get(name)
            if configs is None:
                topic = self._topics_view.get(name)
                if topic is None:
                    return  # a config of a topic that does not exist (any more)
                configs = self._topic_configs_of[name] = _copy(topic.configs)
        else:
            key = (record.resource_type, record.resource_name)
            configs = self._resource_configs_of.get(key)
            if configs is None:
                configs = self._resource_configs_of[key] = _copy(self.image.resource_configs.get(key, _NO_CONFIGS))
        if record.value is None:
            configs.pop(record.name, None)
        else:
            configs[record.name] = record.value

    def _replay_feature_level(self, record) -> None:
        if self._features is None:
            self._features = _copy(self.image.features)
        if record.feature_level == 0:
            self._features.pop(record.name, None)
        else:
            self._features[record.name] = record.feature_level

    def _replay_producer_ids(self, record) -> None:
        self._next_producer_id = max(self._next_producer_id, record.next_producer_id)

    # ------------------------------------------------------------------ client quotas, ACLs, SCRAM credentials

    def _replay_client_quota(self, record) -> None:
        entity = quota_entity((e.entity_type, e.entity_name) for e in record.entity)
        quotas = self._quotas_of.get(entity)
        if quotas is None:
            quotas = self._quotas_of[entity] = _copy(self.image.client_quotas.get(entity, _NO_QUOTAS))
        if record.remove:
            quotas.pop(record.key, None)
        else:
            quotas[record.key] = record.value

    def _replay_access_control_entry(self, record) -> None:
        if self._acls is None:
            self._acls = _copy(self.image.acls)
        self._acls[record.id] = AclBinding(
            record.resource_type,
            record.resource_name,
            record.pattern_type,
            record.principal,
            record.host,
            record.operation,
            record.permission_type,
        )

    def _replay_remove_access_control_entry(self, record) -> None:
        current = self.image.acls if self._acls is None else self._acls
        if record.id in current:
            if self._acls is None:
                self._acls = _copy(self.image.acls)
            del self._acls[record.id]

    def _replay_user_scram_credential(self, record) -> None:
        if self._scram is None:
            self._scram = _copy(self.image.scram_credentials)
        self._scram[(record.name, record.mechanism)] = ScramCredential(
            bytes(record.salt), bytes(record.stored_key), bytes(record.server_key), record.iterations
        )

    def _replay_remove_user_scram_credential(self, record) -> None:
        key = (record.name, record.mechanism)
        current = self.image.scram_credentials if self._scram is None else self._scram
        if key in current:
            if self._scram is None:
                self._scram = _copy(self.image.scram_credentials)
            del self._scram[key]

    # ------------------------------------------------------------------ cluster links and mirror topics

    def _own_links(self) -> dict:
        if self._links is None:
            self._links = _copy(self.image.cluster_links)
        return self._links

    def _own_mirrors(self) -> dict:
        if self._mirrors is None:
            self._mirrors = _copy(self.image.mirror_topics)
        return self._mirrors

    def _replay_cluster_link(self, record) -> None:
        links = self._own_links()
        for name in [n for n, link in links.items() if link.link_id == record.link_id]:
            del links[name]
        links[record.link_name] = ClusterLink(
            record.link_id, record.link_name, MappingProxyType({c.name: c.value for c in record.configs})
        )

    def _replay_remove_cluster_link(self, record) -> None:
        current = self.image.cluster_links if self._links is None else self._links
        names = [n for n, link in current.items() if link.link_id == record.link_id]
        if names:
            links = self._own_links()
            for name in names:
                del links[name]

    def _replay_broker_placement(self, record) -> None:
        if self._placement is None:
            self._placement = _copy(self.image.broker_placement)
        if record.state == PLACEMENT_NORMAL:
            self._placement.pop(record.broker_id, None)
        else:
            self._placement[record.broker_id] = record.state

    def _replay_balancer_throttle(self, record) -> None:
        if self._balancer_throttles is None:
            self._balancer_throttles = _copy(self.image.balancer_throttles)
        key = (record.resource_type, record.resource_name, record.name)
        if record.owned:
            self._balancer_throttles[key] = record.value
        else:
            self._balancer_throttles.pop(key, None)

    def _replay_mirror_topic(self, record) -> None:
        name = self._names_view.get(record.topic_id)
        if name is None:
            return  # a mirror of a topic that does not exist (any more)
        mirrors = self._own_mirrors()
        previous = mirrors.get(record.topic_id)
        marks = {m.partition_id: (m.offset, m.last_epoch) for m in record.partition_marks}
        mirrors[record.topic_id] = MirrorTopic(
            record.topic_id, record.link_id, record.source_topic, record.state, record.reason, MappingProxyType(marks)
        )
        # Only a change of state moves epochs: a snapshot's record (no previous
        # state) finds its partitions' epochs already moved.
        becomes_writable = (
            record.state in MIRROR_WRITABLE_STATES
            and previous is not None
            and previous.state not in MIRROR_WRITABLE_STATES
        )
        if becomes_writable and marks:
            partitions = self._partitions(record.topic_id)
            for partition_id, (_, last_epoch) in marks.items():
                old = partitions.get(partition_id) if partitions is not None else None
                if old is not None:
                    partitions[partition_id] = old._replace(
                        leader_epoch=max(old.leader_epoch, last_epoch) + 1, partition_epoch=old.partition_epoch + 1
                    )

    # ------------------------------------------------------------------ brokers and controllers

    def _replay_register_broker(self, record) -> None:
        self._own_brokers()[record.broker_id] = BrokerRegistration(
            record.broker_id,
            record.incarnation_id,
            record.broker_epoch,
            _endpoints(record.end_points),
            _supported_features(record.features),
            record.rack,
            record.fenced,
            record.in_controlled_shutdown,
            record.is_migrating_zk_broker,
            tuple(record.log_dirs),
        )

    def _registration(self, broker_id: int, epoch: int) -> BrokerRegistration | None:
        current = self._current_brokers().get(broker_id)
        if current is None or current.epoch != epoch:
            return None
        return current

    def _replay_unregister_broker(self, record) -> None:
        if self._registration(record.broker_id, record.broker_epoch) is not None:
            del self._own_brokers()[record.broker_id]

    def _replay_fence_broker(self, record) -> None:
        current = self._registration(record.id, record.epoch)
        if current is not None:
            self._own_brokers()[record.id] = replace(current, fenced=True)

    def _replay_unfence_broker(self, record) -> None:
        current = self._registration(record.id, record.epoch)
        if current is not None:
            self._own_brokers()[record.id] = replace(current, fenced=False)

    def _replay_broker_registration_change(self, record) -> None:
        current = self._registration(record.broker_id, record.broker_epoch)
        if current is None:
            return
        changes = {}
        if record.fenced == FENCING_CHANGE_FENCE:
            changes["fenced"] = True
        elif record.fenced == FENCING_CHANGE_UNFENCE:
            changes["fenced"] = False
        if record.in_controlled_shutdown == CONTROLLED_SHUTDOWN_CHANGE_ENTER:
            changes["in_controlled_shutdown"] = True
        if record.log_dirs:
            changes["log_dirs"] = tuple(record.log_dirs)
        if changes:
            self._own_brokers()[record.broker_id] = replace(current, **changes)

    def _replay_register_controller(self, record) -> None:
        if self._controllers is None:
            self._controllers = _copy(self.image.controllers)
        self._controllers[record.controller_id] = ControllerRegistration(
            record.controller_id,
            record.incarnation_id,
            record.zk_migration_ready,
            _endpoints(record.end_points),
            _supported_features(record.features),
        )

    # ------------------------------------------------------------------ log bookkeeping

    def _replay_no_op(self, record) -> None:
        pass

    def _replay_begin_transaction(self, record) -> None:
        if self._pending is not None:
            raise MetadataLogError("BeginTransactionRecord inside an open metadata transaction")
        self._pending = []

    def _replay_end_transaction(self, record) -> None:
        if self._pending is None:
            raise MetadataLogError("EndTransactionRecord outside a metadata transaction")
        pending, self._pending = self._pending, None
        self.replay_all(pending)

    def _replay_abort_transaction(self, record) -> None:
        if self._pending is None:
            raise MetadataLogError("AbortTransactionRecord outside a metadata transaction")
        self._pending = None


_NO_CONFIGS: dict[str, str] = {}
_NO_QUOTAS: dict[str, float] = {}


def _copy(mapping) -> dict:
    """A mutable copy of an image's map. ``dict(proxy)`` walks the proxy key by
    key; ``proxy.copy()`` is the underlying dict's C-level copy, ~10x faster."""
    return mapping.copy()


def _frozen(mapping, original):
    """``original`` when nothing was copied, else the copy made read-only."""
    if mapping is None or mapping is original:
        return original
    return MappingProxyType(mapping)


_TRANSACTION_MARKERS = frozenset(
    {BEGIN_TRANSACTION_RECORD.api_key, END_TRANSACTION_RECORD.api_key, ABORT_TRANSACTION_RECORD.api_key}
)

_HANDLERS: dict[int, Callable[[MetadataDelta, object], None]] = {
    REGISTER_BROKER_RECORD.api_key: MetadataDelta._replay_register_broker,
    UNREGISTER_BROKER_RECORD.api_key: MetadataDelta._replay_unregister_broker,
    TOPIC_RECORD.api_key: MetadataDelta._replay_topic,
    PARTITION_RECORD.api_key: MetadataDelta._replay_partition,
    CONFIG_RECORD.api_key: MetadataDelta._replay_config,
    PARTITION_CHANGE_RECORD.api_key: MetadataDelta._replay_partition_change,
    FENCE_BROKER_RECORD.api_key: MetadataDelta._replay_fence_broker,
    UNFENCE_BROKER_RECORD.api_key: MetadataDelta._replay_unfence_broker,
    REMOVE_TOPIC_RECORD.api_key: MetadataDelta._replay_remove_topic,
    FEATURE_LEVEL_RECORD.api_key: MetadataDelta._replay_feature_level,
    PRODUCER_IDS_RECORD.api_key: MetadataDelta._replay_producer_ids,
    BROKER_REGISTRATION_CHANGE_RECORD.api_key: MetadataDelta._replay_broker_registration_change,
    NO_OP_RECORD.api_key: MetadataDelta._replay_no_op,
    BEGIN_TRANSACTION_RECORD.api_key: MetadataDelta._replay_begin_transaction,
    END_TRANSACTION_RECORD.api_key: MetadataDelta._replay_end_transaction,
    ABORT_TRANSACTION_RECORD.api_key: MetadataDelta._replay_abort_transaction,
    REGISTER_CONTROLLER_RECORD.api_key: MetadataDelta._replay_register_controller,
    CLIENT_QUOTA_RECORD.api_key: MetadataDelta._replay_client_quota,
    ACCESS_CONTROL_ENTRY_RECORD.api_key: MetadataDelta._replay_access_control_entry,
    REMOVE_ACCESS_CONTROL_ENTRY_RECORD.api_key: MetadataDelta._replay_remove_access_control_entry,
    USER_SCRAM_CREDENTIAL_RECORD.api_key: MetadataDelta._replay_user_scram_credential,
    REMOVE_USER_SCRAM_CREDENTIAL_RECORD.api_key: MetadataDelta._replay_remove_user_scram_credential,
    CLUSTER_LINK_RECORD.api_key: MetadataDelta._replay_cluster_link,
    REMOVE_CLUSTER_LINK_RECORD.api_key: MetadataDelta._replay_remove_cluster_link,
    MIRROR_TOPIC_RECORD.api_key: MetadataDelta._replay_mirror_topic,
    BROKER_PLACEMENT_RECORD.api_key: MetadataDelta._replay_broker_placement,
    BALANCER_THROTTLE_RECORD.api_key: MetadataDelta._replay_balancer_throttle,
}


def apply_records(image: MetadataImage, records: Iterable[tuple[int, object]], offset: int) -> MetadataImage:
    """A new image with ``records`` ((api_key, value) pairs) applied, at ``offset``.

    Topics touched by the records get fresh partition and config maps, built
    once per call (not once per record), so applying a topic with thousands of
    partitions stays linear; untouched topics and brokers are shared with
    ``image``. The records must not end inside a metadata transaction: its
    records would be lost with the delta (follow such a log with one
    :class:`MetadataDelta` instead).
    """
    delta = MetadataDelta(image)
    delta.replay_all(records)
    if delta.in_transaction:
        raise MetadataLogError("the records end inside a metadata transaction")
    return delta.apply(offset)
