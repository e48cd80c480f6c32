"""The planner's input built from a metadata image and the brokers' measurements (pure).

Which brokers are dead is the caller's decision (a broker unreachable for the
failure threshold), not the image's: a fenced broker may be restarting, so one
that is fenced but not named failed is CORDONED: it keeps its replicas and
takes none. A broker in controlled shutdown is cordoned for the same reason.
Draining and cordoned brokers are named by the caller too (remove-broker,
cordon).

A partition being reassigned is given with its target replicas (where it is
going) and is not movable: the planner counts it where it will be and leaves
the running reassignment alone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from controller.balancer.model import BrokerLoad, BrokerState, ClusterState, PartitionLoad
from controller.metadata.image import MetadataImage


def cluster_state_from_image(
    image: MetadataImage,
    *,
    failed: Collection[int] = (),
    draining: Collection[int] = (),
    cordoned: Collection[int] = (),
    disk_bytes: Mapping[int, tuple[int, int]] | None = None,
    broker_rates: Mapping[int, tuple[int, int]] | None = None,
    partition_sizes: Mapping[tuple[str, int], int] | None = None,
    partition_rates: Mapping[tuple[str, int], int] | None = None,
) -> ClusterState:
    """``disk_bytes``: broker -> (capacity, used); ``broker_rates``: broker ->
    (bytes in/s, bytes out/s); ``partition_sizes`` and ``partition_rates`` are
    keyed by (topic, partition). What is not given counts as 0 (unknown)."""
    disk_bytes = disk_bytes or {}
    broker_rates = broker_rates or {}
    partition_sizes = partition_sizes or {}
    partition_rates = partition_rates or {}
    brokers = []
    for broker_id, broker in sorted(image.brokers.items()):
        if broker_id in failed:
            state = BrokerState.DEAD
        elif broker_id in draining:
            state = BrokerState.DRAINING
        elif broker_id in cordoned or broker.fenced or broker.in_controlled_shutdown:
            state = BrokerState.CORDONED
        else:
            state = BrokerState.ALIVE
        capacity, used = disk_bytes.get(broker_id, (0, 0))
        rate_in, rate_out = broker_rates.get(broker_id, (0, 0))
        brokers.append(BrokerLoad(broker_id, broker.rack, state, int(capacity), int(used), int(rate_in), int(rate_out)))
    partitions = []
    for name in sorted(image.topics):
        for partition_id, partition in sorted(image.topics[name].partitions.items()):
            reassigning = bool(partition.adding_replicas or partition.removing_replicas)
            leaving = set(partition.removing_replicas)
            replicas = tuple(b for b in partition.replicas if b not in leaving)
            if not replicas:
                continue
            key = (name, partition_id)
            partitions.append(PartitionLoad(
                topic=name,
                partition=partition_id,
                replicas=replicas,
                leader=partition.leader,
                isr=tuple(b for b in partition.isr if b in replicas),
                size_bytes=int(partition_sizes.get(key, 0)),
                bytes_in_per_second=int(partition_rates.get(key, 0)),
                movable=not reassigning,
            ))
    return ClusterState(brokers=tuple(brokers), partitions=tuple(partitions))
