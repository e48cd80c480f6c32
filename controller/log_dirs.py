"""Replicas' log directories and offline directories (KIP-858, JBOD in KRaft),
as pure functions of the image.

* A broker registers the ids of its online log dirs (BrokerRegistration
  ``log_dirs``, the ``directory.id`` of each dir's meta.properties); the image
  keeps them on its registration.
* A broker with more than one log dir tells the active controller which dir
  holds each of its replicas (AssignReplicasToDirs); the partition's
  ``directories`` then name it, one entry per replica.
  :func:`plan_assign_replicas_to_dirs` answers that request.
* A broker whose log dir failed lists it in ``offline_log_dirs`` of its
  heartbeats. :func:`plan_directories_offline` writes the broker's remaining
  online dirs (BrokerRegistrationChangeRecord) and takes its replicas in the
  failed dir out of every ISR and leadership, as fencing does for a whole
  broker, at most ``limit`` partition changes in one proposal; the rest are
  found by ``iter_unfinished_partitions`` and made by ``plan_partition_fixes``
  (controller/broker_lifecycle.py), which never elect an offline replica.

A replica is offline when its directory is a real one (not Kafka's reserved
UNASSIGNED, LOST or MIGRATING ids) that its broker's registration does not
list as online. A restart registers the directory again: its replicas are
online from then on and rejoin the ISR by fetching, as any follower does.
"""

from __future__ import annotations

import dataclasses
import uuid
from types import MappingProxyType

from controller.broker_lifecycle import _leave_change, usable_broker_ids
from controller.directories import UNASSIGNED, offline_replicas, replica_directory
from controller.metadata.image import MetadataImage, PartitionImage
from controller.metadata.records import BROKER_REGISTRATION_CHANGE_RECORD, PARTITION_CHANGE_RECORD
from protocol.errors import ErrorCode

def offline_leave_change(image: MetadataImage, topic, partition: PartitionImage, usable: set[int], unclean: list):
    """The change that takes the partition's offline replicas out of its ISR and
    leadership (as fencing them would), or None. Candidates for leader are the
    usable brokers whose replica of it is online."""
    offline = offline_replicas(image, partition)
    if not offline:
        return None
    return _leave_change(image, topic, partition, offline, usable - offline, unclean)


def _with_log_dirs(image: MetadataImage, broker_id: int, log_dirs: tuple[uuid.UUID, ...]) -> MetadataImage:
    brokers = dict(image.brokers)
    brokers[broker_id] = dataclasses.replace(brokers[broker_id], log_dirs=log_dirs)
    return dataclasses.replace(image, brokers=MappingProxyType(brokers))


def plan_directories_offline(
    image: MetadataImage, broker_id: int, broker_epoch: int, offline_dirs, limit: int | None = None
) -> tuple[list, MetadataImage, bool]:
    """A heartbeat listed ``offline_dirs``: for those the broker had registered
    online, a BrokerRegistrationChangeRecord with the dirs left online, then the
    changes that take its replicas there out of ISRs and leaderships, at most
    ``limit`` (None: all). Returns ``(records, the image as the registration
    change leaves it, whether changes were left for plan_partition_fixes)``.
    Nothing when no dir is newly offline (Kafka's handleDirectoriesOffline)."""
    registration = image.brokers.get(broker_id)
    if registration is None or registration.epoch != broker_epoch or not registration.log_dirs:
        return [], image, False
    newly = {d for d in offline_dirs if d in registration.log_dirs}
    if not newly:
        return [], image, False
    online = tuple(d for d in registration.log_dirs if d not in newly)
    if not online:
        # Every dir offline: the broker halts (as Kafka's does); its session
        # expiry fences it. The registration keeps its dirs, since the record
        # cannot say "none" (an empty list means unchanged).
        return [], image, False
    records: list = [BROKER_REGISTRATION_CHANGE_RECORD(broker_id=broker_id, broker_epoch=broker_epoch, log_dirs=list(online))]
    after = _with_log_dirs(image, broker_id, online)
    usable = set(usable_broker_ids(after))
    for topic in after.topics.values():
        unclean: list = []
        for partition in topic.partitions.values():
            if broker_id not in partition.replicas or replica_directory(partition, broker_id) not in newly:
                continue
            if partition.leader != broker_id and broker_id not in partition.isr:
                continue
            if limit is not None and len(records) - 1 >= limit:
                return records, after, True
            change = offline_leave_change(after, topic, partition, usable, unclean)
            if change is not None:
                records.append(change)
    return records, after, False


def plan_assign_replicas_to_dirs(image: MetadataImage, request) -> tuple[dict, list]:
    """AssignReplicasToDirs: the partitions' ``directories`` name the broker's dir
    for its replica. Returns ``(error per (directory id, topic id, partition),
    records)``, or a top-level error under the key ``None``. A replica assigned
    to a dir its broker has not registered online leaves ISR and leadership in
    the same change (Kafka's controller does the same)."""
    registration = image.brokers.get(request.broker_id)
    if registration is None:
        return {None: ErrorCode.BROKER_ID_NOT_REGISTERED}, []
    if registration.epoch != request.broker_epoch:
        return {None: ErrorCode.STALE_BROKER_EPOCH}, []
    errors: dict = {}
    records: list = []
    usable = set(usable_broker_ids(image))
    for directory in request.directories:
        for topic_data in directory.topics:
            name = image.topic_names_by_id.get(topic_data.topic_id)
            topic = image.topics.get(name) if name is not None else None
            for partition_data in topic_data.partitions:
                key = (directory.id, topic_data.topic_id, partition_data.partition_index)
                partition = topic.partitions.get(partition_data.partition_index) if topic is not None else None
                if topic is None:
                    errors[key] = ErrorCode.UNKNOWN_TOPIC_ID
                    continue
                if partition is None:
                    errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                if request.broker_id not in partition.replicas:
                    errors[key] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    continue
                errors[key] = ErrorCode.NONE
                if replica_directory(partition, request.broker_id) == directory.id:
                    continue
                directories = list(partition.directories) or [UNASSIGNED] * len(partition.replicas)
                directories[partition.replicas.index(request.broker_id)] = directory.id
                fields = {"directories": directories}
                assigned = partition._replace(directories=tuple(directories))
                change = offline_leave_change(image, topic, assigned, usable, [])
                if change is not None:
                    fields.update(
                        {k: getattr(change, k) for k in ("isr", "leader", "leader_recovery_state")}
                    )
                records.append(
                    PARTITION_CHANGE_RECORD(partition_id=partition.partition_id, topic_id=topic.topic_id, **fields)
                )
    return errors, records
