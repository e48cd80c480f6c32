"""ListOffsets to partition leaders, without the sending: group, build, read.

A broker answers ListOffsets only for the partitions it leads, so every client
that wants offsets of many partitions (the admin tools, the groups tool, the
node's cluster reader, the REST proxy, the Spark driver) does the same three
pure steps around its own transport: :func:`group_by_leader` (one request per
leader; partitions without one set apart), :func:`list_offsets_request` (one
request for a leader's partitions, grouped by topic in the order given), and
:func:`list_offsets_answers` (each partition's answer, by (topic, partition)).
What to do with partitions without a leader, errors and retries stays the
caller's: they differ by tool, as they do in Kafka's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

LIST_OFFSETS = APIS_BY_NAME["ListOffsets"]
# v7 is the first with the max-timestamp spec (-3); Kafka 2.5 on and pybroker serve it.
LIST_OFFSETS_VERSION = 7
_REQUEST = struct_classes(LIST_OFFSETS.request)
# Kafka's ListOffsets timestamp specs.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1  # a client, not a follower
NO_LEADER_EPOCH = -1  # the leader does not check the epoch it is asked with

TopicPartition = tuple[str, int]
Leader = TypeVar("Leader", bound=Hashable)


def group_by_leader(
    partitions: Iterable[TopicPartition], leader_of: Callable[[TopicPartition], Leader], *, no_leader: Any = None
) -> tuple[dict[Leader, list[TopicPartition]], list[TopicPartition]]:
    """(partitions by leader, partitions ``leader_of`` gives ``no_leader`` for), both
    in the order given. A leader is whatever the caller sends to: a node id, an
    address (``no_leader`` is for a caller whose own routes include None)."""
    by_leader: dict[Leader, list[TopicPartition]] = {}
    leaderless: list[TopicPartition] = []
    for key in partitions:
        leader = leader_of(key)
        if leader == no_leader:
            leaderless.append(key)
        else:
            by_leader.setdefault(leader, []).append(key)
    return by_leader, leaderless


def list_offsets_fields(
    partitions: Iterable[TopicPartition],
    timestamp: int,
    *,
    isolation_level: int = READ_UNCOMMITTED,
    leader_epochs: Mapping[TopicPartition, int] | None = None,
) -> dict[str, Any]:
    """The fields of one ListOffsets request for ``partitions`` (all at one leader),
    for callers whose transport takes fields. ``leader_epochs`` (from Metadata) makes
    a broker that lost the leadership meanwhile answer an error, not its own view."""
    by_topic: dict[str, list] = {}
    for topic, partition in partitions:
        epoch = NO_LEADER_EPOCH if leader_epochs is None else leader_epochs[(topic, partition)]
        by_topic.setdefault(topic, []).append(
            _REQUEST.ListOffsetsPartition(partition_index=partition, current_leader_epoch=epoch, timestamp=timestamp)
        )
    return {
        "replica_id": CONSUMER_REPLICA_ID,
        "isolation_level": isolation_level,
        "topics": [_REQUEST.ListOffsetsTopic(name=topic, partitions=parts) for topic, parts in by_topic.items()],
    }


def list_offsets_request(
    partitions: Iterable[TopicPartition],
    timestamp: int,
    *,
    isolation_level: int = READ_UNCOMMITTED,
    leader_epochs: Mapping[TopicPartition, int] | None = None,
):
    """One ListOffsets request body for ``partitions`` (see :func:`list_offsets_fields`)."""
    return _REQUEST.ListOffsetsRequest(
        **list_offsets_fields(partitions, timestamp, isolation_level=isolation_level, leader_epochs=leader_epochs)
    )


def list_offsets_answers(response) -> dict[TopicPartition, Any]:
    """Each partition's ListOffsetsPartitionResponse (``error_code``, ``offset``,
    ``timestamp``, ``leader_epoch``) by (topic, partition), in the response's order."""
    return {(topic.name, p.partition_index): p for topic in response.topics for p in topic.partitions}
