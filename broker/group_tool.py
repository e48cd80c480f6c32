"""``pybroker groups``: list consumer groups and describe one, as kafka-consumer-groups.sh does.

It is a Kafka client like any other: it speaks the wire protocol to a running
broker (``--bootstrap-server``), asks the group's coordinator for the group
(DescribeGroups) and its committed offsets (OffsetFetch), asks each partition's
leader for the log end offset (ListOffsets), and prints per partition the
committed offset, the log end offset, the lag between them and the member the
partition is assigned to, then the members with their assignments.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

# The client classes moved to broker/tools/client.py (shared by every tool);
# they are imported here too so that existing users keep working.
from broker.tools.client import (  # noqa: F401
    LATEST_TIMESTAMP,
    ClientSettings,
    KafkaConnection,
    ToolClient,
    ToolError,
    parse_bootstrap,
)
from protocol.codec import decode_struct
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.registry import APIS_BY_NAME, DATA_MESSAGES
from protocol.schema import struct_classes

_ASSIGNMENT = DATA_MESSAGES["ConsumerProtocolAssignment"]
_METADATA = struct_classes(APIS_BY_NAME["Metadata"].request)
_LIST_OFFSETS = struct_classes(APIS_BY_NAME["ListOffsets"].request)


@dataclass
class PartitionRow:
    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int | None
    member_id: str = "-"
    host: str = "-"
    client_id: str = "-"

    @property
    def lag(self) -> int | None:
        if self.committed_offset is None or self.log_end_offset is None:
            return None
        return max(self.log_end_offset - self.committed_offset, 0)


@dataclass
class MemberRow:
    member_id: str
    group_instance_id: str | None
    host: str
    client_id: str
    assignment: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: str
    partitions: list[PartitionRow]
    members: list[MemberRow]


class GroupTool(ToolClient):

    def _coordinator(self, group_id: str) -> tuple[str, int]:
        response = self._connection(self._bootstrap).call("FindCoordinator", 3, key=group_id, key_type=0)
        if response.error_code != ErrorCode.NONE:
            raise ToolError(f"no coordinator for group {group_id!r}: {ErrorCode(response.error_code).name}")
        return response.host, response.port

    def list_groups(self, states: list[str] | None = None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state), sorted by group id."""
        response = self._connection(self._bootstrap).call("ListGroups", 4, states_filter=states or [])
        if response.error_code != ErrorCode.NONE:
            raise ToolError(f"ListGroups: {ErrorCode(response.error_code).name}")
        return sorted((g.group_id, g.protocol_type, g.group_state) for g in response.groups)

    def describe_group(self, group_id: str) -> GroupDescription | None:
        """None when the coordinator has neither the group nor offsets of it."""
        coordinator = self._coordinator(group_id)
        connection = self._connection(coordinator)
        described = connection.call("DescribeGroups", 5, groups=[group_id], include_authorized_operations=False).groups[0]
        if described.error_code != ErrorCode.NONE:
            raise ToolError(f"DescribeGroups: {ErrorCode(described.error_code).name}")
        fetched = connection.call("OffsetFetch", 7, group_id=group_id, topics=None, require_stable=False)
        if fetched.error_code != ErrorCode.NONE:
            raise ToolError(f"OffsetFetch: {ErrorCode(fetched.error_code).name}")
        committed = {
            (t.name, p.partition_index): p.committed_offset
            for t in fetched.topics
            for p in t.partitions
            if p.error_code == ErrorCode.NONE and p.committed_offset >= 0
        }
        if described.group_state == "Dead" and not committed:
            return None
        members = []
        owner: dict[tuple[str, int], MemberRow] = {}
        for m in described.members:
            row = MemberRow(m.member_id, m.group_instance_id, m.client_host, m.client_id)
            if described.protocol_type == "consumer" and m.member_assignment:
                row.assignment = decode_assignment(m.member_assignment)
            for tp in row.assignment:
                owner[tp] = row
            members.append(row)
        partitions = sorted(set(committed) | set(owner))
        end_offsets = self._log_end_offsets(partitions)
        rows = []
        for tp in partitions:
            row = PartitionRow(tp[0], tp[1], committed.get(tp), end_offsets.get(tp))
            member = owner.get(tp)
            if member is not None:
                row.member_id, row.host, row.client_id = member.member_id, member.host, member.client_id
            rows.append(row)
        return GroupDescription(
            group_id,
            described.group_state,
            described.protocol_type,
            described.protocol_data,
            f"{coordinator[0]}:{coordinator[1]}",
            rows,
            members,
        )

    def _log_end_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if not partitions:
            return {}
        topics = sorted({t for t, _ in partitions})
        metadata = self._connection(self._bootstrap).call(
            "Metadata", 9, topics=[_METADATA.MetadataRequestTopic(name=t) for t in topics], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        brokers = {b.node_id: (b.host, b.port) for b in metadata.brokers}
        leaders: dict[tuple[str, int], int] = {}
        for topic in metadata.topics:
            for p in topic.partitions:
                if p.error_code == ErrorCode.NONE:
                    leaders[(topic.name, p.partition_index)] = p.leader_id
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in partitions:
            if tp in leaders and leaders[tp] in brokers:
                by_leader.setdefault(leaders[tp], []).append(tp)
        end_offsets = {}
        for leader, tps in by_leader.items():
            wanted: dict[str, list[int]] = {}
            for topic, partition in tps:
                wanted.setdefault(topic, []).append(partition)
            response = self._connection(brokers[leader]).call(
                "ListOffsets", 7, replica_id=-1, isolation_level=0,
                topics=[
                    _LIST_OFFSETS.ListOffsetsTopic(
                        name=topic,
                        partitions=[
                            _LIST_OFFSETS.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=LATEST_TIMESTAMP)
                            for p in ps
                        ],
                    )
                    for topic, ps in wanted.items()
                ],
            )
            for topic in response.topics:
                for p in topic.partitions:
                    if p.error_code == ErrorCode.NONE:
                        end_offsets[(topic.name, p.partition_index)] = p.offset
        return end_offsets


def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """A consumer member's assignment bytes as sorted (topic, partition); [] when they do not decode."""
    if len(data) < 2:
        return []
    version = min(struct.unpack_from(">h", data)[0], _ASSIGNMENT.versions.high)
    try:
        value, _ = decode_struct(_ASSIGNMENT.struct, version, False, data, 2, exact=False)
    except ProtocolError:
        return []
    return sorted((t.topic, p) for t in value.assigned_partitions for p in t.partitions)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return lines


def _text(value) -> str:
    return "-" if value is None else str(value)


def format_description(description: GroupDescription) -> list[str]:
    header = (
        f"GROUP {description.group_id}  STATE {description.state}  PROTOCOL-TYPE {description.protocol_type or '-'}"
        f"  ASSIGNOR {description.protocol or '-'}  COORDINATOR {description.coordinator}"
    )
    lines = [header, ""]
    lines += _table(
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
        [
            [r.topic, str(r.partition), _text(r.committed_offset), _text(r.log_end_offset), _text(r.lag), r.member_id, r.host, r.client_id]
            for r in description.partitions
        ],
    )
    lines.append("")
    lines += _table(
        ["CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
        [
            [
                m.member_id,
                _text(m.group_instance_id),
                m.host,
                m.client_id,
                str(len(m.assignment)),
                ",".join(f"{t}-{p}" for t, p in m.assignment) or "-",
            ]
            for m in description.members
        ],
    )
    return lines
