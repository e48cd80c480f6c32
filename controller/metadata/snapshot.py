"""Metadata snapshots: the records that recreate an image from nothing.

A KRaft snapshot at offset N holds, instead of the log up to N, the fewest
records whose replay into an empty image gives the image at N. The order
follows Kafka's image writer, because a reader relies on it:

1. FeatureLevelRecords, ``metadata.version`` first (it decides how every
   later record is read);
2. RegisterBrokerRecords (with the current fenced/controlled-shutdown state
   and the registration's epoch), RegisterControllerRecords;
3. per topic, its TopicRecord then its PartitionRecords (with the current
   leader and partition epochs, so no PartitionChangeRecord is needed);
4. ConfigRecords, topics' after every topic exists (replay ignores configs of
   unknown topics), then every other resource's;
5. ClientQuotaRecords, one per entity and key;
6. one ProducerIdsRecord carrying the next producer id;
7. AccessControlEntryRecords (each under its id);
8. UserScramCredentialRecords;
9. ClusterLinkRecords (by name), then MirrorTopicRecords (by topic id),
   after their topics.

Each group is sorted (brokers by id, topics by name, configs by key, quota
entities by type and name, ACLs by id, credentials by mechanism then user) so
that one image always gives the same bytes. Records are written at their latest
version; the snapshot file's framing (batches, header and footer control
records) belongs to the Raft layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from controller.metadata.delta import MetadataDelta, MetadataLogError
from controller.metadata.image import MetadataImage, PartitionImage, acl_entry_record, quota_entity_sort_key
from controller.metadata.records import (
    BALANCER_THROTTLE_RECORD,
    BROKER_ENDPOINT,
    BROKER_FEATURE,
    BROKER_PLACEMENT_RECORD,
    CLIENT_QUOTA_ENTITY,
    CLIENT_QUOTA_RECORD,
    CLUSTER_LINK_CONFIG,
    CLUSTER_LINK_RECORD,
    CONFIG_RECORD,
    CONTROLLER_ENDPOINT,
    CONTROLLER_FEATURE,
    FEATURE_LEVEL_RECORD,
    METADATA_VERSION_FEATURE,
    MIRROR_PARTITION_MARK,
    MIRROR_TOPIC_RECORD,
    PARTITION_RECORD,
    PRODUCER_IDS_RECORD,
    REGISTER_BROKER_RECORD,
    REGISTER_CONTROLLER_RECORD,
    RESOURCE_TOPIC,
    TOPIC_RECORD,
    USER_SCRAM_CREDENTIAL_RECORD,
    decode_record,
    encode_record,
)


def _partition_record(topic_id, partition: PartitionImage):
    return PARTITION_RECORD(
        partition_id=partition.partition_id,
        topic_id=topic_id,
        replicas=list(partition.replicas),
        isr=list(partition.isr),
        removing_replicas=list(partition.removing_replicas),
        adding_replicas=list(partition.adding_replicas),
        leader=partition.leader,
        leader_recovery_state=partition.leader_recovery_state,
        leader_epoch=partition.leader_epoch,
        partition_epoch=partition.partition_epoch,
        directories=list(partition.directories),
        # Tagged and null by default: an empty list would cost bytes for nothing.
        eligible_leader_replicas=list(partition.eligible_leader_replicas) or None,
        last_known_elr=list(partition.last_known_elr) or None,
    )


def _config_records(resource_type: int, resource_name: str, configs) -> Iterator:
    for name in sorted(configs):
        yield CONFIG_RECORD(resource_type=resource_type, resource_name=resource_name, name=name, value=configs[name])


def iter_snapshot_records(image: MetadataImage) -> Iterator:
    """The record values of ``image``'s snapshot, in snapshot order."""
    features = image.features
    if METADATA_VERSION_FEATURE in features:
        yield FEATURE_LEVEL_RECORD(name=METADATA_VERSION_FEATURE, feature_level=features[METADATA_VERSION_FEATURE])
    for name in sorted(features):
        if name != METADATA_VERSION_FEATURE:
            yield FEATURE_LEVEL_RECORD(name=name, feature_level=features[name])

    for broker_id in sorted(image.brokers):
        broker = image.brokers[broker_id]
        yield REGISTER_BROKER_RECORD(
            broker_id=broker.broker_id,
            is_migrating_zk_broker=broker.is_migrating_zk_broker,
            incarnation_id=broker.incarnation_id,
            broker_epoch=broker.epoch,
            end_points=[
                BROKER_ENDPOINT(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                for e in broker.endpoints
            ],
            features=[
                BROKER_FEATURE(name=name, min_supported_version=f.min_version, max_supported_version=f.max_version)
                for name, f in sorted(broker.features.items())
            ],
            rack=broker.rack,
            fenced=broker.fenced,
            in_controlled_shutdown=broker.in_controlled_shutdown,
            log_dirs=list(broker.log_dirs),
        )
    for controller_id in sorted(image.controllers):
        controller = image.controllers[controller_id]
        yield REGISTER_CONTROLLER_RECORD(
            controller_id=controller.controller_id,
            incarnation_id=controller.incarnation_id,
            zk_migration_ready=controller.zk_migration_ready,
            end_points=[
                CONTROLLER_ENDPOINT(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                for e in controller.endpoints
            ],
            features=[
                CONTROLLER_FEATURE(name=name, min_supported_version=f.min_version, max_supported_version=f.max_version)
                for name, f in sorted(controller.features.items())
            ],
        )

    topic_names = sorted(image.topics)
    for name in topic_names:
        topic = image.topics[name]
        yield TOPIC_RECORD(name=topic.name, topic_id=topic.topic_id)
        for partition_id in sorted(topic.partitions):
            yield _partition_record(topic.topic_id, topic.partitions[partition_id])

    for name in topic_names:
        yield from _config_records(RESOURCE_TOPIC, name, image.topics[name].configs)
    for resource_type, resource_name in sorted(image.resource_configs):
        yield from _config_records(resource_type, resource_name, image.resource_configs[(resource_type, resource_name)])

    for entity in sorted(image.client_quotas, key=quota_entity_sort_key):
        quotas = image.client_quotas[entity]
        for key in sorted(quotas):
            yield CLIENT_QUOTA_RECORD(
                entity=[CLIENT_QUOTA_ENTITY(entity_type=kind, entity_name=name) for kind, name in entity],
                key=key,
                value=quotas[key],
                remove=False,
            )

    if image.next_producer_id:
        # Kafka's snapshot names no broker: the block's owner no longer matters.
        yield PRODUCER_IDS_RECORD(broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id)

    for acl_id in sorted(image.acls):
        yield acl_entry_record(acl_id, image.acls[acl_id])

    for name, mechanism in sorted(image.scram_credentials, key=lambda key: (key[1], key[0])):
        credential = image.scram_credentials[(name, mechanism)]
        yield USER_SCRAM_CREDENTIAL_RECORD(
            name=name,
            mechanism=mechanism,
            salt=credential.salt,
            stored_key=credential.stored_key,
            server_key=credential.server_key,
            iterations=credential.iterations,
        )

    for name in sorted(image.cluster_links):
        link = image.cluster_links[name]
        yield CLUSTER_LINK_RECORD(
            link_id=link.link_id,
            link_name=link.name,
            configs=[CLUSTER_LINK_CONFIG(name=key, value=link.configs[key]) for key in sorted(link.configs)],
        )
    for topic_id in sorted(image.mirror_topics):
        mirror = image.mirror_topics[topic_id]
        yield MIRROR_TOPIC_RECORD(
            topic_id=mirror.topic_id,
            link_id=mirror.link_id,
            source_topic=mirror.source_topic,
            state=mirror.state,
            reason=mirror.reason,
            partition_marks=[
                MIRROR_PARTITION_MARK(partition_id=p, offset=offset, last_epoch=epoch)
                for p, (offset, epoch) in sorted(mirror.partition_marks.items())
            ],
        )


    for broker_id, state in sorted(image.broker_placement.items()):
        yield BROKER_PLACEMENT_RECORD(broker_id=broker_id, state=state)
    for (resource_type, resource_name, name), value in sorted(image.balancer_throttles.items()):
        yield BALANCER_THROTTLE_RECORD(
            resource_type=resource_type, resource_name=resource_name, name=name, value=value, owned=True
        )


def snapshot_records(image: MetadataImage) -> list:
    """The record values whose replay into an empty image recreates ``image``."""
    return list(iter_snapshot_records(image))


def encode_snapshot(image: MetadataImage) -> list[bytes]:
    """The snapshot's records as framed metadata record values (as they are stored)."""
    return [encode_record(record) for record in iter_snapshot_records(image)]


def image_from_snapshot_records(records: Iterable, offset: int) -> MetadataImage:
    """Replay snapshot record values into an empty image at ``offset`` (the snapshot's end)."""
    delta = MetadataDelta(MetadataImage())
    delta.replay_values(records)
    if delta.in_transaction:
        raise MetadataLogError("a snapshot ends inside a metadata transaction")
    return delta.apply(offset)


def decode_snapshot(values: Iterable[bytes], offset: int) -> MetadataImage:
    """The image of a snapshot given as framed record values; bad bytes raise ProtocolError."""
    delta = MetadataDelta(MetadataImage())
    delta.replay_all(decode_record(value) for value in values)
    if delta.in_transaction:
        raise MetadataLogError("a snapshot ends inside a metadata transaction")
    return delta.apply(offset)
