"""``pybroker groups``: list consumer groups and describe one, as kafka-consumer-groups.sh 4.x does.

It is a Kafka client like any other: it speaks the wire protocol to a running
broker (``--bootstrap-server``), asks the group's coordinator for the group
(ConsumerGroupDescribe for a KIP-848 consumer group; DescribeGroups for a
classic one, as Kafka's admin client falls back when the first answers
GROUP_ID_NOT_FOUND) and its committed offsets (OffsetFetch), asks each
partition's leader for the log end offset (ListOffsets), and prints per
partition the committed offset, the log end offset, the lag between them and
the member the partition is assigned to.

The output is kafka-consumer-groups.sh's, column for column: ``--offsets``
(the default of ``--describe``; ``--verbose`` adds LEADER-EPOCH),
``--members`` (``--verbose``: each member's epoch and current assignment, the
group's target assignment epoch and the member's target assignment; ``-`` for
a classic group, which has neither) and ``--state`` (``--verbose`` adds
GROUP-EPOCH and TARGET-ASSIGNMENT-EPOCH) each print a block per group, a blank
line then a header, columns padded to their widest value (at least Kafka's
minimum widths), ``-`` for a missing value. Notes about a group (no active
members, rebalancing) go to stderr, as Kafka's tool writes them. ``--list``
with ``--type`` and/or ``--state`` prints GROUP, TYPE (Classic or Consumer)
and STATE columns.
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


# Kafka's GroupType names, as its tool prints them in the TYPE column.
GROUP_TYPE_NAMES = {"classic": "Classic", "consumer": "Consumer", "share": "Share"}
# The types kafka-consumer-groups.sh lists (share groups have their own tool).
CONSUMER_GROUP_TYPES = ("classic", "consumer")


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str  # as ListGroups v5 says it: classic, consumer, share

    @property
    def is_consumer_group(self) -> bool:
        """What Kafka's tool lists: classic groups of the consumer protocol (or offsets
        only) and KIP-848 consumer groups."""
        return self.group_type in CONSUMER_GROUP_TYPES and self.protocol_type in ("consumer", "")


@dataclass
class PartitionRow:
    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int | None
    member_id: str = "-"
    host: str = "-"
    client_id: str = "-"
    leader_epoch: int | None = None  # of the committed offset

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
    # Consumer groups (KIP-848) only: the member's epoch and the target assignment it moves toward.
    target_assignment: list[tuple[str, int]] = field(default_factory=list)
    member_epoch: int | None = None


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignor: the classic group's protocol name, or the consumer group's server assignor
    coordinator: str
    partitions: list[PartitionRow]
    members: list[MemberRow]
    coordinator_id: int = -1
    group_type: str = "classic"
    # Consumer groups (KIP-848) only.
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None


class GroupTool(ToolClient):

    def _coordinator(self, group_id: str) -> tuple[str, int]:
        return self._find_coordinator(group_id)[:2]

    def _find_coordinator(self, group_id: str) -> tuple[str, int, int]:
        """(host, port, node id) of the group's coordinator."""
        response = self._connection(self._bootstrap).call("FindCoordinator", 3, key=group_id, key_type=0)
        if response.error_code != ErrorCode.NONE:
            raise ToolError(f"no coordinator for group {group_id!r}: {ErrorCode(response.error_code).name}")
        return response.host, response.port, response.node_id

    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None) -> list[GroupListing]:
        """Every group the broker lists (ListGroups v5, filtered by state and type), sorted by group id."""
        response = self._connection(self._bootstrap).call(
            "ListGroups", 5, states_filter=states or [], types_filter=types or []
        )
        if response.error_code != ErrorCode.NONE:
            raise ToolError(f"ListGroups: {ErrorCode(response.error_code).name}")
        return sorted(
            (GroupListing(g.group_id, g.protocol_type, g.group_state, g.group_type or "classic") for g in response.groups),
            key=lambda g: g.group_id,
        )

    def describe_group(self, group_id: str) -> GroupDescription | None:
        """None when the coordinator has neither the group nor offsets of it."""
        host, port, coordinator_id = self._find_coordinator(group_id)
        connection = self._connection((host, port))
        description = self._describe_consumer_group(connection, group_id)
        if description is None:
            description = self._describe_classic_group(connection, group_id)
        description.coordinator, description.coordinator_id = f"{host}:{port}", coordinator_id
        fetched = connection.call("OffsetFetch", 7, group_id=group_id, topics=None, require_stable=False)
        if fetched.error_code != ErrorCode.NONE:
            raise ToolError(f"OffsetFetch: {ErrorCode(fetched.error_code).name}")
        committed = {
            (t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch)
            for t in fetched.topics
            for p in t.partitions
            if p.error_code == ErrorCode.NONE and p.committed_offset >= 0
        }
        if description.state == "Dead" and not committed:
            return None
        members = description.members
        owned = {tp for m in members for tp in m.assignment}
        end_offsets = self._log_end_offsets(sorted(set(committed) | owned))

        def row(tp, member: MemberRow | None) -> PartitionRow:
            offset, epoch = committed.get(tp, (None, None))
            who = (member.member_id, member.host, member.client_id) if member else (MISSING, MISSING, MISSING)
            return PartitionRow(tp[0], tp[1], offset, end_offsets.get(tp), *who,
                                leader_epoch=epoch if epoch is not None and epoch >= 0 else None)

        # Kafka's order: members holding the most partitions first (each one's partitions
        # sorted), then the partitions with a committed offset that no member holds.
        description.partitions = [
            row(tp, member)
            for member in sorted((m for m in members if m.assignment), key=lambda m: -len(m.assignment))
            for tp in member.assignment
        ] + [row(tp, None) for tp in sorted(set(committed) - owned)]
        return description

    def _describe_consumer_group(self, connection, group_id: str) -> GroupDescription | None:
        """The KIP-848 consumer group (ConsumerGroupDescribe), or None when the group is not
        one (GROUP_ID_NOT_FOUND: unknown or classic) or the broker does not serve the API."""
        if not self.supports("ConsumerGroupDescribe"):
            return None
        described = connection.call(
            "ConsumerGroupDescribe", 0, group_ids=[group_id], include_authorized_operations=False
        ).groups[0]
        if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        if described.error_code != ErrorCode.NONE:
            raise ToolError(f"ConsumerGroupDescribe: {described.error_message or ErrorCode(described.error_code).name}")

        def partitions(assignment) -> list[tuple[str, int]]:
            return sorted((t.topic_name, p) for t in assignment.topic_partitions for p in t.partitions)

        members = [
            MemberRow(m.member_id, m.instance_id, m.client_host, m.client_id, partitions(m.assignment),
                      partitions(m.target_assignment), m.member_epoch)
            for m in described.members
        ]
        return GroupDescription(
            group_id, described.group_state, "consumer", described.assignor_name, "", [], members,
            group_type="consumer", group_epoch=described.group_epoch,
            target_assignment_epoch=described.assignment_epoch,
        )

    def _describe_classic_group(self, connection, group_id: str) -> GroupDescription:
        described = connection.call("DescribeGroups", 5, groups=[group_id], include_authorized_operations=False).groups[0]
        if described.error_code != ErrorCode.NONE:
            raise ToolError(f"DescribeGroups: {ErrorCode(described.error_code).name}")
        members = []
        for m in described.members:
            row = MemberRow(m.member_id, m.group_instance_id, m.client_host, m.client_id)
            if described.protocol_type == "consumer" and m.member_assignment:
                row.assignment = decode_assignment(m.member_assignment)
            members.append(row)
        return GroupDescription(
            group_id, described.group_state, described.protocol_type, described.protocol_data, "", [], members,
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


def offsets_lines(description: GroupDescription, verbose: bool = False) -> list[str]:
    """``--describe [--offsets] [--verbose]``: a row per partition (none when the group has no rows);
    ``--verbose`` adds the committed offset's LEADER-EPOCH, as Kafka 4's tool does."""
    if not description.partitions:
        return []
    g = description.group_id
    epoch = (lambda r: [_text(r.leader_epoch)]) if verbose else (lambda r: [])
    rows = [
        [g, r.topic, str(r.partition), *epoch(r), _text(r.committed_offset), _text(r.log_end_offset), _text(r.lag),
         _text(r.member_id), _text(r.host), _text(r.client_id)]
        for r in description.partitions
    ]
    header = ["GROUP", "TOPIC", "PARTITION", *(["LEADER-EPOCH"] if verbose else []), "CURRENT-OFFSET",
              "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    member_column = 7 if verbose else 6
    widths = [max(15, *(len(r[0]) for r in rows)), max(15, *(len(r[1]) for r in rows)), 10,
              *([15] if verbose else []), 15, 15, 15,
              max(15, *(len(r[member_column]) for r in rows)), max(15, *(len(r[member_column + 1]) for r in rows))]
    return ["", _aligned(widths, header)] + [_aligned(widths, r) for r in rows]


def assignment_text(assignment: list[tuple[str, int]]) -> str:
    """Kafka 4's assignment cell: ``topic:0,1;other:2`` (partitions sorted, then the
    per-topic parts sorted); ``-`` when empty."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    if not by_topic:
        return MISSING
    return ";".join(sorted(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in by_topic.items()))


def members_lines(description: GroupDescription, verbose: bool = False) -> list[str]:
    """``--describe --members [--verbose]``: a row per member (none when it has none).
    ``--verbose`` adds, as Kafka 4's tool: CURRENT-EPOCH (the member's epoch),
    CURRENT-ASSIGNMENT, TARGET-EPOCH (the group's target assignment epoch) and
    TARGET-ASSIGNMENT; a classic group has no epochs and no target (``-``)."""
    members = description.members
    if not members:
        return []
    with_instance = any(m.group_instance_id for m in members)
    header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + ["HOST", "CLIENT-ID", "#PARTITIONS"]
    rows = []
    for m in members:
        row = [description.group_id, m.member_id] + ([_text(m.group_instance_id)] if with_instance else [])
        rows.append(row + [_text(m.host), _text(m.client_id), str(len(m.assignment))])
    # Kafka's widths: the text columns widen to their longest value, #PARTITIONS is 15.
    minimums = [15, 15] + ([17] if with_instance else []) + [15, 15]
    widths = [max(minimum, *(len(r[i]) for r in rows)) for i, minimum in enumerate(minimums)] + [15]
    if verbose:
        header += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        for row, m in zip(rows, members):
            row += [_text(m.member_epoch), assignment_text(m.assignment), _text(description.target_assignment_epoch),
                    assignment_text(m.target_assignment)]
        widths += [15, max(20, *(len(r[len(widths) + 1]) for r in rows)), 15]
    return ["", _aligned(widths, header)] + [_aligned(widths, r) for r in rows]


def state_lines(description: GroupDescription, verbose: bool = False) -> list[str]:
    """``--describe --state [--verbose]``: the group's coordinator, assignor, state and member
    count; ``--verbose`` adds GROUP-EPOCH and TARGET-ASSIGNMENT-EPOCH (``-`` for a classic group)."""
    coordinator = f"{description.coordinator}  ({description.coordinator_id})"
    widths = [max(15, len(description.group_id)), max(25, len(coordinator)), 20, 20]
    header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
    row = [description.group_id, coordinator, _text(description.protocol), description.state]
    if verbose:
        widths += [15, 25]
        header += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        row += [_text(description.group_epoch), _text(description.target_assignment_epoch)]
    return ["", _aligned(widths, header + ["#MEMBERS"]), _aligned(widths, row + [str(len(description.members))])]


def list_lines(groups: list[GroupListing], with_type: bool, with_state: bool) -> list[str]:
    """``--list`` with ``--type`` and/or ``--state``: GROUP padded to the longest id (at
    least 15) + 10, then TYPE (Kafka's names: Classic, Consumer) and STATE, 20 wide each."""
    width = max([15] + [len(g.group_id) for g in groups]) + 10
    header = ["GROUP"] + (["TYPE"] if with_type else []) + (["STATE"] if with_state else [])
    widths = [width] + [20] * (len(header) - 1)
    rows = [
        [g.group_id] + ([GROUP_TYPE_NAMES.get(g.group_type, "Unknown")] if with_type else [])
        + ([g.state] if with_state else [])
        for g in groups
    ]
    return [_aligned(widths, header)] + [_aligned(widths, r) for r in rows]


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
        lines = DESCRIBE_VIEWS[view](description, verbose)
        for line in lines:
            print(line)
    return code
