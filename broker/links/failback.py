"""Failback: the old source's topic becomes a mirror of the new primary.

After a mirror on cluster B was failed over (or promoted), its marks say per
partition where copying from cluster A stopped: the offset after the last
copied record and that batch's leader epoch. A failback on A (CreateMirrorTopics
with ``failback``, over a link on A whose source is B) does three things:

1. :func:`read_stop_marks` asks every broker of B for the topic
   (DescribeMirrors, pybroker's own API: B must be a pybroker cluster) and
   takes each partition's ``stop_offset`` and ``stop_epoch``; the mirror there
   must be FAILED_OVER or PROMOTED, with a mark for every partition.
2. :func:`local_log_ends` reads A's log end per partition (this node's log
   when it leads the partition, else ListOffsets to the leader as a debugging
   tool, ``replica_id`` -2, which answers the log end): the records past the
   mark are what the cut removes, and the report says how many.
3. The controller makes the topic an ACTIVE mirror with the marks
   (controller/link_commands.py ``plan_failback``).

Then every replica of the topic, on this metadata change or on its next start
(a replica that was down), applies :func:`apply_failback_cuts` before its
leader or follower role starts: the pure rule is
``replication.mirror_core.failback_cut``, the mark it acted on is kept in the
partition directory (``mirror-cut-checkpoint``) so that the cut is made once.
The leader's mirror fetcher then copies B's records from the mark.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from broker.links.source import SourceCluster, SourceUnavailable
from controller.metadata.image import MetadataImage
from controller.metadata.records import MIRROR_FAILED_OVER, MIRROR_PROMOTED, MIRROR_STATE_NAMES
from protocol.errors import ErrorCode
from protocol.leader_offsets import LATEST_TIMESTAMP, LIST_OFFSETS, LIST_OFFSETS_VERSION, list_offsets_answers
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from replication.mirror_core import failback_cut
from storage.checkpoint import MIRROR_CUT_CHECKPOINT, read_mirror_cut, write_mirror_cut

log = logging.getLogger(__name__)

DESCRIBE_MIRRORS = APIS_BY_NAME["DescribeMirrors"]
_DM = struct_classes(DESCRIBE_MIRRORS.request)
_LO = struct_classes(LIST_OFFSETS.request)
# ListOffsets' replica id of a debugging tool: any replica answers, with its log end.
DEBUGGING_REPLICA_ID = -2
# States of the new primary's mirror whose marks are where copying stopped for good.
STOPPED_STATES = frozenset({MIRROR_FAILED_OVER, MIRROR_PROMOTED})
# Mirror states in which replicas follow their source (cuts apply only then).
_FOLLOWING = frozenset({0, 1, 2, 3})  # ACTIVE, PAUSED, PENDING_PROMOTE, PENDING_FAILOVER


class FailbackRefused(Exception):
    def __init__(self, message: str, error_code: ErrorCode = ErrorCode.INVALID_REQUEST):
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True)
class ReportRow:
    partition: int
    stop_offset: int
    stop_epoch: int
    log_end_offset: int

    @property
    def records_removed(self) -> int:
        return max(0, self.log_end_offset - self.stop_offset)


async def read_stop_marks(source: SourceCluster, source_topic: str, timeout_ms: int) -> dict[int, tuple[int, int]]:
    """(stop offset, stop epoch) by partition of ``source_topic``'s stopped mirror on the link's source."""
    metadata = await source.metadata([source_topic], timeout_ms=timeout_ms)
    found = next((t for t in metadata.topics if t.name == source_topic), None)
    if found is None or found.error_code != ErrorCode.NONE:
        code = ErrorCode(found.error_code) if found is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        raise FailbackRefused(f"topic {source_topic} is not on the source of link {source.link_name} ({code.name})", code)
    partitions = {p.partition_index for p in found.partitions}

    def body(version: int):
        return _DM.DescribeMirrorsRequest(topics=[source_topic])

    marks: dict[int, tuple[int, int]] = {}
    node_ids = sorted(source.brokers)
    answers = await asyncio.gather(
        *(source.request_node(node_id, DESCRIBE_MIRRORS, body, timeout_ms=timeout_ms) for node_id in node_ids),
        return_exceptions=True,
    )
    for node_id, answer in zip(node_ids, answers):
        if isinstance(answer, BaseException):
            if isinstance(answer, (SourceUnavailable, ConnectionError, OSError, TimeoutError)):
                raise FailbackRefused(
                    f"source broker {node_id} of link {source.link_name} did not answer DescribeMirrors: {answer}",
                    ErrorCode.NETWORK_EXCEPTION,
                )
            raise answer
        _, response = answer
        described = next((t for t in response.topics if t.mirror_topic == source_topic), None)
        if described is None or described.error_code != ErrorCode.NONE:
            code = ErrorCode(described.error_code) if described is not None else ErrorCode.RESOURCE_NOT_FOUND
            raise FailbackRefused(
                f"topic {source_topic} on the source of link {source.link_name} is not a mirror topic "
                f"({code.name}): failback needs the mirror that was failed over or promoted there"
            )
        if described.state not in STOPPED_STATES:
            state = MIRROR_STATE_NAMES.get(described.state, str(described.state))
            raise FailbackRefused(
                f"mirror topic {source_topic} on the source of link {source.link_name} is {state}: "
                "failback needs it FAILED_OVER or PROMOTED"
            )
        for p in described.partitions:
            if p.stop_offset >= 0:
                marks[p.partition_index] = (p.stop_offset, p.stop_epoch)
    missing = sorted(partitions - set(marks))
    if missing:
        raise FailbackRefused(
            f"mirror topic {source_topic} on the source of link {source.link_name} gave no stop offset for "
            f"partitions {missing} (their leaders did not answer with one)",
            ErrorCode.LEADER_NOT_AVAILABLE,
        )
    return {p: marks[p] for p in sorted(partitions)}


async def local_log_ends(broker, topic: str, timeout_ms: int) -> dict[int, int]:
    """This cluster's log end offset by partition of ``topic`` (each partition's leader's)."""
    image = broker.image
    partitions = image.topics[topic].partitions
    ends: dict[int, int] = {}
    by_leader: dict[int, list[int]] = {}
    for p in sorted(partitions.values(), key=lambda p: p.partition_id):
        plog = broker.partition_log(topic, p.partition_id) if p.leader == broker.node_id else None
        if plog is not None:
            ends[p.partition_id] = plog.log_end_offset
        elif p.leader < 0:
            raise FailbackRefused(f"{topic}-{p.partition_id} has no leader", ErrorCode.LEADER_NOT_AVAILABLE)
        else:
            by_leader.setdefault(p.leader, []).append(p.partition_id)
    listener = broker.config.inter_broker_listener_name
    for leader, ids in by_leader.items():
        registration = image.brokers.get(leader)
        endpoint = registration.endpoint(listener) if registration is not None and listener else None
        if endpoint is None:
            raise FailbackRefused(f"broker {leader} (leader of {topic}) has no inter-broker endpoint", ErrorCode.LEADER_NOT_AVAILABLE)
        connection = broker.node_connection(endpoint.host, endpoint.port, f"pybroker-failback-{broker.node_id}", to="broker")
        try:
            body = _LO.ListOffsetsRequest(
                replica_id=DEBUGGING_REPLICA_ID, isolation_level=0,
                topics=[_LO.ListOffsetsTopic(name=topic, partitions=[
                    _LO.ListOffsetsPartition(partition_index=i, current_leader_epoch=-1, timestamp=LATEST_TIMESTAMP) for i in ids
                ])],
            )
            response = await connection.request(LIST_OFFSETS, LIST_OFFSETS_VERSION, body, timeout_ms=timeout_ms)
        except (ConnectionError, OSError, TimeoutError) as exc:
            raise FailbackRefused(f"broker {leader} (leader of {topic}) did not answer ListOffsets: {exc}", ErrorCode.NETWORK_EXCEPTION) from None
        finally:
            connection.close()
        for (_, partition), answer in list_offsets_answers(response).items():
            if answer.error_code != ErrorCode.NONE:
                code = ErrorCode(answer.error_code)
                raise FailbackRefused(f"{topic}-{partition}: its leader {leader} answered {code.name}", code)
            ends[partition] = answer.offset
    return ends


def failback_report(marks: dict[int, tuple[int, int]], log_ends: dict[int, int]) -> list[ReportRow]:
    return [ReportRow(p, offset, epoch, log_ends.get(p, -1)) for p, (offset, epoch) in sorted(marks.items())]


def apply_failback_cuts(broker, old: MetadataImage | None, new: MetadataImage) -> None:
    """Cut back this broker's replicas of failed-back mirrors (``old`` None: at start, every
    mirror; else only mirrors whose record changed). Runs before the replicas' roles apply."""
    for topic_id, mirror in new.mirror_topics.items():
        if mirror.state not in _FOLLOWING or not mirror.partition_marks:
            continue
        if old is not None and old.mirror_topics.get(topic_id) is mirror:
            continue
        name = new.topic_names_by_id.get(topic_id)
        topic = new.topics.get(name) if name is not None else None
        if topic is None:
            continue
        for partition in topic.partitions.values():
            if broker.node_id not in partition.replicas:
                continue
            plog = broker.partition_log(name, partition.partition_id)
            if plog is None:
                continue  # not created here yet: it starts empty, below any mark
            path = plog.directory / MIRROR_CUT_CHECKPOINT
            decision = failback_cut(mirror.partition_marks.get(partition.partition_id), plog.log_end_offset, read_mirror_cut(path))
            if decision.cut_to is not None:
                before = plog.log_end_offset
                plog.truncate_to(decision.cut_to)
                log.info(
                    "failback: %s-%d cut back from %d to %d (%d records of this cluster's own history removed)",
                    name, partition.partition_id, before, plog.log_end_offset, before - plog.log_end_offset,
                )
            if decision.record is not None:
                write_mirror_cut(path, decision.record)
