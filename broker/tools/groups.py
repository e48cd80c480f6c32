"""``pybroker groups``: list consumer groups and describe one, as kafka-consumer-groups.sh does.

It is a Kafka client like any other: it speaks the wire protocol to a running
broker (``--bootstrap-server``), asks the group's coordinator for the group
(DescribeGroups) and its committed offsets (OffsetFetch), asks each partition's
leader for the log end offset (ListOffsets), and prints per partition the
committed offset, the log end offset, the lag between them and the member the
partition is assigned to.

The output is kafka-consumer-groups.sh's, column for column: ``--offsets``
(the default of ``--describe``), ``--members`` (``--verbose``: with the
assignments) and ``--state`` each print a block per group, a blank line then
a header, columns padded to their widest value (at least Kafka's minimum
widths), ``-`` for a missing value. Notes about a group (no active members,
rebalancing) go to stderr, as Kafka's tool writes them.
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
from protocol.leader_offsets import (
    LIST_OFFSETS,
    LIST_OFFSETS_VERSION,
    group_by_leader,
    list_offsets_answers,
    list_offsets_request,
)
from protocol.registry import APIS_BY_NAME, DATA_MESSAGES
from protocol.schema import struct_classes

_ASSIGNMENT = DATA_MESSAGES["ConsumerProtocolAssignment"]
_METADATA = struct_classes(APIS_BY_NAME["Metadata"].request)


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
    coordinator_id: int = -1


class GroupTool(ToolClient):

    def _coordinator(self, group_id: str) -> tuple[str, int]:
        return self._find_coordinator(group_id)[:2]

    def _find_coordinator(self, group_id: str) -> tuple[str, int, int]:
        """(host, port, node id) of the group's coordinator."""
        response = self._connection(self._bootstrap).call("FindCoordinator", 3, key=group_id, key_type=0)
        if response.error_code != ErrorCode.NONE:
            raise ToolError(f"no coordinator for group {group_id!r}: {ErrorCode(response.error_code).name}")
        return response.host, response.port, response.node_id

    def list_groups(self, states: list[str] | None = None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state), sorted by group id."""
        response = self._connection(self._bootstrap).call("ListGroups", 4, states_filter=states or [])
        if response.error_code != ErrorCode.NONE:
            raise ToolError(f"ListGroups: {ErrorCode(response.error_code).name}")
        return sorted((g.group_id, g.protocol_type, g.group_state) for g in response.groups)

    def describe_group(self, group_id: str) -> GroupDescription | None:
        """None when the coordinator has neither the group nor offsets of it."""
        host, port, coordinator_id = self._find_coordinator(group_id)
        coordinator = (host, port)
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
        end_offsets = self._log_end_offsets(sorted(set(committed) | set(owner)))
        # Kafka's order: members holding the most partitions first (each one's partitions
        # sorted), then the partitions with a committed offset that no member holds.
        rows = []
        for member in sorted((m for m in members if m.assignment), key=lambda m: -len(m.assignment)):
            for tp in member.assignment:
                rows.append(PartitionRow(tp[0], tp[1], committed.get(tp), end_offsets.get(tp),
                                         member.member_id, member.host, member.client_id))
        for tp in sorted(set(committed) - set(owner)):
            rows.append(PartitionRow(tp[0], tp[1], committed[tp], end_offsets.get(tp)))
        return GroupDescription(
            group_id,
            described.group_state,
            described.protocol_type,
            described.protocol_data,
            f"{coordinator[0]}:{coordinator[1]}",
            rows,
            members,
            coordinator_id,
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
        by_leader, _ = group_by_leader(partitions, lambda tp: leaders[tp] if leaders.get(tp) in brokers else None)
        end_offsets = {}
        for leader, tps in by_leader.items():
            response = self._connection(brokers[leader]).request(
                LIST_OFFSETS, LIST_OFFSETS_VERSION, list_offsets_request(tps, LATEST_TIMESTAMP)
            )
            for key, p in list_offsets_answers(response).items():
                if p.error_code == ErrorCode.NONE:
                    end_offsets[key] = p.offset
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


MISSING = "-"
REBALANCING_STATES = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


def _text(value) -> str:
    return MISSING if value is None or value == "" else str(value)


def _aligned(widths: list[int], cells: list[str]) -> str:
    """Kafka's ``%-Ns`` columns separated by one space; the last column is not padded."""
    padded = [cell.ljust(width) for cell, width in zip(cells, widths)] + cells[len(widths):]
    return " ".join(padded).rstrip()


def group_notice(description: GroupDescription) -> str | None:
    """The line Kafka's tool writes on stderr before a group's block, if any."""
    if description.state == "Empty":
        return f"Consumer group '{description.group_id}' has no active members."
    if description.state in REBALANCING_STATES:
        return f"Warning: Consumer group '{description.group_id}' is rebalancing."
    return None


def offsets_lines(description: GroupDescription) -> list[str]:
    """``--describe [--offsets]``: a row per partition (none when the group has no rows)."""
    if not description.partitions:
        return []
    g = description.group_id
    rows = [
        [g, r.topic, str(r.partition), _text(r.committed_offset), _text(r.log_end_offset), _text(r.lag),
         _text(r.member_id), _text(r.host), _text(r.client_id)]
        for r in description.partitions
    ]
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    widths = [max(15, *(len(r[0]) for r in rows)), max(15, *(len(r[1]) for r in rows)), 10, 15, 15, 15,
              max(15, *(len(r[6]) for r in rows)), max(15, *(len(r[7]) for r in rows))]
    return ["", _aligned(widths, header)] + [_aligned(widths, r) for r in rows]


def assignment_text(assignment: list[tuple[str, int]]) -> str:
    """Kafka's ASSIGNMENT cell: ``topic(0,1), other(2)``, topics sorted; ``-`` when empty."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    if not by_topic:
        return MISSING
    return ", ".join(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in sorted(by_topic.items()))


def members_lines(description: GroupDescription, verbose: bool = False) -> list[str]:
    """``--describe --members [--verbose]``: a row per member (none when it has none)."""
    members = description.members
    if not members:
        return []
    with_instance = any(m.group_instance_id for m in members)
    header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + ["HOST", "CLIENT-ID", "#PARTITIONS"]
    rows = []
    for m in members:
        row = [description.group_id, m.member_id] + ([_text(m.group_instance_id)] if with_instance else [])
        rows.append(row + [_text(m.host), _text(m.client_id), str(len(m.assignment))])
    minimums = [15, 15] + ([17] if with_instance else []) + [15, 15, 15]
    widths = [max(minimum, *(len(r[i]) for r in rows)) for i, minimum in enumerate(minimums)]
    if verbose:
        header.append("ASSIGNMENT")
        for row, m in zip(rows, members):
            row.append(assignment_text(m.assignment))
    return ["", _aligned(widths, header)] + [_aligned(widths, r) for r in rows]


def state_lines(description: GroupDescription) -> list[str]:
    """``--describe --state``: the group's coordinator, assignor, state and member count."""
    coordinator = f"{description.coordinator}  ({description.coordinator_id})"
    widths = [max(15, len(description.group_id)), max(25, len(coordinator)), 20, 20]
    return [
        "",
        _aligned(widths, ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]),
        _aligned(widths, [description.group_id, coordinator, _text(description.protocol), description.state,
                          str(len(description.members))]),
    ]


DESCRIBE_VIEWS = {"offsets": offsets_lines, "members": members_lines, "state": state_lines}


def print_descriptions(tool: GroupTool, group_ids: list[str], view: str, verbose: bool) -> int:
    """kafka-consumer-groups.sh ``--describe``: each group's block, in group id order, on stdout;
    notes and unknown groups on stderr. Exit code 1 when a group does not exist."""
    import sys

    code = 0
    for group_id in sorted(set(group_ids)):
        description = tool.describe_group(group_id)
        if description is None:
            print(f"Consumer group '{group_id}' does not exist.", file=sys.stderr)
            code = 1
            continue
        notice = group_notice(description)
        if notice is not None:
            sys.stdout.flush()  # the note comes before its block when both streams are one terminal
            print(notice, file=sys.stderr)
        lines = members_lines(description, verbose) if view == "members" else DESCRIBE_VIEWS[view](description)
        for line in lines:
            print(line)
    return code
