"""The Fetch requests a cluster link sends as a consumer, and how their answers are read.

Every reader of another cluster's partitions in broker/links (the mirror
fetcher, its byte comparison of a last batch, the multi-master copy, the
consumer group translation) reads as a consumer does: ``replica_id`` -1,
read_uncommitted, by topic id from Fetch v13 on (by name before). One
builder makes their requests, so a change of what a link asks of a source
(an isolation level, a rack id) is made once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes

FETCH = APIS_BY_NAME["Fetch"]
_F = struct_classes(FETCH.request)
CONSUMER_REPLICA_ID = -1
# Fetch v13 names topics by id only.
FETCH_BY_TOPIC_ID_MIN_VERSION = 13


class FetchWanted(NamedTuple):
    """One partition of a Fetch: where to read, the epoch of the last batch read (-1: none), and how much."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    last_fetched_epoch: int = -1


def consumer_fetch_request(
    version: int,
    wanted: Iterable[FetchWanted],
    topic_ids: Mapping[str, uuid.UUID],
    *,
    max_wait_ms: int,
    response_max_bytes: int,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Iterable[tuple[str, int]] = (),
):
    """A consumer's FetchRequest body at ``version``: by default a full fetch
    outside any session (every partition named each time)."""
    by_id = version >= FETCH_BY_TOPIC_ID_MIN_VERSION
    topics: dict[str, list] = {}
    for want in wanted:
        topics.setdefault(want.topic, []).append(
            _F.FetchPartition(
                partition=want.partition,
                current_leader_epoch=-1,
                fetch_offset=want.fetch_offset,
                last_fetched_epoch=want.last_fetched_epoch,
                log_start_offset=-1,
                partition_max_bytes=want.partition_max_bytes,
            )
        )
    dropped: dict[str, list[int]] = {}
    for topic, partition in forgotten:
        dropped.setdefault(topic, []).append(partition)
    return _F.FetchRequest(
        replica_id=CONSUMER_REPLICA_ID,
        replica_state=_F.ReplicaState(replica_id=CONSUMER_REPLICA_ID, replica_epoch=-1),
        # Not 0: some sources answer a Fetch that may not wait with no partitions at all.
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=response_max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[
            _F.FetchTopic(topic=t, topic_id=topic_ids.get(t, ZERO_UUID) if by_id else ZERO_UUID, partitions=parts)
            for t, parts in topics.items()
        ],
        forgotten_topics_data=[
            _F.ForgottenTopic(topic=t, topic_id=topic_ids.get(t, ZERO_UUID) if by_id else ZERO_UUID, partitions=parts)
            for t, parts in dropped.items()
        ],
        rack_id="",
    )


def fetched_partitions(version: int, response, topic_names: Mapping[uuid.UUID, str]) -> Iterator[tuple[str | None, object]]:
    """``(topic name, partition data)`` of each partition a FetchResponse
    answers; the name is None for a topic id not in ``topic_names``."""
    by_id = version >= FETCH_BY_TOPIC_ID_MIN_VERSION
    for topic_response in response.responses:
        name = topic_names.get(topic_response.topic_id) if by_id else topic_response.topic
        for data in topic_response.partitions:
            yield name, data


def topic_leaders(metadata_topic, leaders: dict[tuple[str, int], int], topic_ids: dict[str, uuid.UUID]) -> None:
    """Note a MetadataResponse topic's partition leaders and topic id (when it has one)."""
    topic_id = getattr(metadata_topic, "topic_id", None)
    if topic_id is not None and topic_id != ZERO_UUID:
        topic_ids[metadata_topic.name] = topic_id
    for p in metadata_topic.partitions:
        if p.leader_id >= 0:
            leaders[(metadata_topic.name, p.partition_index)] = p.leader_id
