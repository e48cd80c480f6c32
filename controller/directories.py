"""Which log directory holds a replica, and whether it is offline (KIP-858):
pure predicates over the image, shared by the controller's planners
(controller/log_dirs.py, controller/broker_lifecycle.py)."""

from __future__ import annotations

import uuid

from controller.metadata.image import MetadataImage, PartitionImage

# Kafka's DirectoryId: not a directory, but what is known of one.
UNASSIGNED = uuid.UUID(int=0)  # no directory assigned yet
LOST = uuid.UUID(int=1)  # the directory that held it is gone
MIGRATING = uuid.UUID(int=2)  # a ZooKeeper broker's replica, not yet assigned
RESERVED_DIRECTORY_IDS = frozenset({UNASSIGNED, LOST, MIGRATING})


def replica_directory(partition: PartitionImage, broker_id: int) -> uuid.UUID:
    """The directory the image names for ``broker_id``'s replica, UNASSIGNED when none."""
    directories = partition.directories
    if not directories:
        return UNASSIGNED
    try:
        return directories[partition.replicas.index(broker_id)]
    except (ValueError, IndexError):
        return UNASSIGNED


def replica_offline(image: MetadataImage, partition: PartitionImage, broker_id: int) -> bool:
    """Whether ``broker_id``'s replica lives in a directory its broker reported offline."""
    if not partition.directories:
        return False
    directory = replica_directory(partition, broker_id)
    if directory in RESERVED_DIRECTORY_IDS:
        return False
    registration = image.brokers.get(broker_id)
    if registration is None or not registration.log_dirs:
        return False
    return directory not in registration.log_dirs


def offline_replicas(image: MetadataImage, partition: PartitionImage) -> set[int]:
    if not partition.directories:
        return set()
    return {b for b in partition.replicas if replica_offline(image, partition, b)}


def offline_still_named(image: MetadataImage, partition: PartitionImage) -> bool:
    """Whether an offline replica still leads the partition or shares its ISR with
    an online one: what a bounded :func:`plan_directories_offline` left to do."""
    offline = offline_replicas(image, partition)
    if not offline:
        return False
    if partition.leader in offline:
        return True
    return bool(offline.intersection(partition.isr)) and not offline.issuperset(partition.isr)


