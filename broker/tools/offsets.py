"""Offsets from the command line: ``get-offsets`` (like kafka-get-offsets.sh) and
``delete-records`` (like kafka-delete-records.sh).

- ``get-offsets [--topic REGEX] [--partitions 0,2-4] [--time -1|-2|-3|latest|earliest|max-timestamp|MS]
  [--exclude-internal-topics]``: ListOffsets at each partition's leader; one
  ``topic:partition:offset`` line per partition, sorted. -1 (latest) is the log
  end offset, -2 (earliest) the log start offset, -3 the offset of the record
  with the largest timestamp, a number of milliseconds the first offset whose
  record's timestamp is at least that (the offset is empty when there is none,
  as Kafka prints it).
- ``delete-records --offset-json-file F``: Kafka's file,
  ``{"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}``
  (offset -1: the high watermark); DeleteRecords at each leader, then per
  partition ``partition: t-0<TAB>low_watermark: 5`` or ``partition: t-0<TAB>error: ...``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from broker.tools.client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    NotFound,
    Refused,
    ToolClient,
    ToolError,
)
from broker.tools.topics import ClusterMetadata, error_text, fetch_metadata, topic_filter
from protocol import leader_offsets
from protocol.errors import ErrorCode
from protocol.leader_offsets import LIST_OFFSETS, LIST_OFFSETS_VERSION, list_offsets_answers, list_offsets_request
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

_DELETE_RECORDS = struct_classes(APIS_BY_NAME["DeleteRecords"].request)
DELETE_RECORDS_VERSION = 2
REQUEST_TIMEOUT_MS = 30_000
TIME_WORDS = {"latest": LATEST_TIMESTAMP, "earliest": EARLIEST_TIMESTAMP, "max-timestamp": MAX_TIMESTAMP}


def parse_time(text: str) -> int:
    if text.lower() in TIME_WORDS:
        return TIME_WORDS[text.lower()]
    try:
        value = int(text)
    except ValueError:
        raise ToolError(f"--time: expected -1, -2, -3, latest, earliest, max-timestamp or milliseconds, got {text!r}") from None
    if value < MAX_TIMESTAMP:
        raise ToolError(f"--time: {value} is neither a timestamp nor -1, -2 or -3")
    return value


def parse_partitions(text: str | None) -> set[int] | None:
    """Kafka's ``0,2-4`` list of partition ids and ranges."""
    if text is None:
        return None
    wanted: set[int] = set()
    for part in text.split(","):
        low, sep, high = part.strip().partition("-")
        try:
            first, last = (int(low), int(high)) if sep else (int(low), int(low))
        except ValueError:
            raise ToolError(f"--partitions: {part!r} is not a partition id or a range like 2-4") from None
        if first < 0 or last < first:
            raise ToolError(f"--partitions: {part!r} is not a valid range")
        wanted.update(range(first, last + 1))
    return wanted


def group_by_leader(metadata: ClusterMetadata, partitions) -> dict[int, list[tuple[str, int]]]:
    """Partitions by their leader's node id; a partition without a live leader raises."""

    def live_leader(key: tuple[str, int]) -> int | None:
        info = metadata.topics.get(key[0])
        leader = next((p.leader for p in info.partitions if p.partition == key[1]), -1) if info else -1
        return leader if leader >= 0 and leader in metadata.brokers else None

    by_leader, leaderless = leader_offsets.group_by_leader(partitions, live_leader)
    if leaderless:
        raise Refused(f"{leaderless[0][0]}-{leaderless[0][1]} has no live leader")
    return by_leader


def list_offsets(client: ToolClient, metadata: ClusterMetadata, partitions, timestamp: int,
                 isolation_level: int = 0) -> dict[tuple[str, int], int]:
    """The offset ``timestamp`` names (-1 latest, -2 earliest, -3 max timestamp, or ms) per partition;
    -1 where no record's timestamp is that late."""
    offsets: dict[tuple[str, int], int] = {}
    for leader, tps in group_by_leader(metadata, partitions).items():
        response = client.broker_connection(leader, metadata.brokers).request(
            LIST_OFFSETS, LIST_OFFSETS_VERSION, list_offsets_request(tps, timestamp, isolation_level=isolation_level)
        )
        for (topic, partition), p in list_offsets_answers(response).items():
            if p.error_code != ErrorCode.NONE:
                raise Refused(f"ListOffsets of {topic}-{partition}: {error_text(p.error_code)}")
            offsets[(topic, partition)] = p.offset
    return offsets


class OffsetsTool(ToolClient):

    def get_offsets(self, pattern: str | None, partitions: set[int] | None, timestamp: int,
                    exclude_internal: bool) -> list[tuple[str, int, int]]:
        metadata = fetch_metadata(self)
        accept = topic_filter(pattern)
        selected = sorted(
            (t.name, p.partition)
            for t in metadata.topics.values()
            if accept(t.name) and not (exclude_internal and t.internal)
            for p in t.partitions
            if partitions is None or p.partition in partitions
        )
        if not selected and pattern is not None:
            raise NotFound(f"no partitions of topics matching {pattern!r}" + (" in --partitions" if partitions else ""))
        offsets = list_offsets(self, metadata, selected, timestamp)
        return [(t, p, offsets[(t, p)]) for t, p in selected]

    def delete_records(self, wanted: list[tuple[str, int, int]]) -> list[tuple[str, int, int | None, str | None]]:
        """(topic, partition, low watermark, error) per partition of the file, in its order."""
        metadata = fetch_metadata(self, sorted({t for t, _, _ in wanted}))
        results: dict[tuple[str, int], tuple[int | None, str | None]] = {}
        offsets = {(t, p): o for t, p, o in wanted}
        reachable = []
        for topic, partition, _ in wanted:
            info = metadata.topics.get(topic)
            if info is None or all(p.partition != partition for p in info.partitions):
                results[(topic, partition)] = (None, "UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition.")
            else:
                reachable.append((topic, partition))
        for leader, tps in group_by_leader(metadata, reachable).items():
            by_topic: dict[str, list[int]] = {}
            for topic, partition in tps:
                by_topic.setdefault(topic, []).append(partition)
            response = self.broker_connection(leader, metadata.brokers).call(
                "DeleteRecords", DELETE_RECORDS_VERSION, timeout_ms=REQUEST_TIMEOUT_MS,
                topics=[
                    _DELETE_RECORDS.DeleteRecordsTopic(name=topic, partitions=[
                        _DELETE_RECORDS.DeleteRecordsPartition(partition_index=p, offset=offsets[(topic, p)]) for p in ps
                    ])
                    for topic, ps in by_topic.items()
                ],
            )
            for topic in response.topics:
                for p in topic.partitions:
                    key = (topic.name, p.partition_index)
                    if p.error_code == ErrorCode.NONE:
                        results[key] = (p.low_watermark, None)
                    else:
                        results[key] = (None, error_text(p.error_code))
        return [(t, p, *results[(t, p)]) for t, p, _ in wanted]


@dataclass(frozen=True)
class _Entry:
    topic: str
    partition: int
    offset: int


def parse_offset_json(text: str) -> list[tuple[str, int, int]]:
    """Kafka's delete-records file; a partition named twice is an error, as Kafka's tool says."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolError(f"--offset-json-file: not JSON: {exc}") from None
    partitions = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(partitions, list) or not partitions:
        raise ToolError('--offset-json-file: expected {"partitions": [{"topic": ..., "partition": ..., "offset": ...}], "version": 1}')
    out, seen = [], set()
    for number, entry in enumerate(partitions):
        if not isinstance(entry, dict):
            raise ToolError(f"--offset-json-file: partitions[{number}] is not an object")
        topic, partition, offset = entry.get("topic"), entry.get("partition"), entry.get("offset")
        if not isinstance(topic, str) or not isinstance(partition, int) or not isinstance(offset, int):
            raise ToolError(f"--offset-json-file: partitions[{number}] needs a string topic, an int partition and an int offset")
        if (topic, partition) in seen:
            raise ToolError(f"--offset-json-file: offset json file contains duplicate topic partitions: {topic}-{partition}")
        seen.add((topic, partition))
        out.append((topic, partition, offset))
    return out
