"""``pybroker share-groups``: list share groups and describe one, as kafka-share-groups.sh does.

A Kafka client like the other tools: ListGroups (v5, types ``share``) for
``--list``, FindCoordinator then ShareGroupDescribe (v1) for ``--describe``.
``--describe`` prints the members (``--members``, the default here) with
their assignments, or the group's coordinator, assignor, state and member
count (``--state``), columns padded as kafka-share-groups.sh pads them.
``--offsets`` (the share-partitions' start offsets and lag) needs
DescribeShareGroupOffsets, which the broker does not serve yet: it is refused
with a message rather than printed wrong.
"""

from __future__ import annotations

import argparse
import sys

from broker.tools.client import ToolClient, ToolError
from broker.tools.options import EXIT_CODES, add_client_options, settings_of
from protocol.errors import ErrorCode


class ShareGroupTool(ToolClient):
    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every share group, sorted by id."""
        self.require("ListGroups", "listing groups")
        response = self.bootstrap_connection().call("ListGroups", 5, states_filter=[], types_filter=["share"])
        if response.error_code != ErrorCode.NONE:
            raise ToolError(f"ListGroups: {ErrorCode(response.error_code).name}")
        return sorted((g.group_id, g.group_state) for g in response.groups)

    def describe_group(self, group_id: str):
        """(the coordinator's ``host:port (id)``, the described group)."""
        self.require("ShareGroupDescribe", "describing share groups (the cluster has not finalized share.version)")
        found = self.bootstrap_connection().call("FindCoordinator", 3, key=group_id, key_type=0)
        if found.error_code != ErrorCode.NONE:
            raise ToolError(f"no coordinator for group {group_id!r}: {ErrorCode(found.error_code).name}")
        connection = self._connection((found.host, found.port))
        described = connection.call("ShareGroupDescribe", 1, group_ids=[group_id], include_authorized_operations=False).groups[0]
        if described.error_code != ErrorCode.NONE:
            raise ToolError(f"group {group_id!r}: {ErrorCode(described.error_code).name}"
                            + (f" ({described.error_message})" if described.error_message else ""))
        return f"{found.host}:{found.port} ({found.node_id})", described


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(len(header))]
    return [" ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [header, *rows]]


def _assignment(member) -> str:
    parts = [f"{tp.topic_name}:{','.join(str(p) for p in sorted(tp.partitions))}" for tp in member.assignment.topic_partitions]
    return ";".join(sorted(parts)) or "-"


def describe_lines(coordinator: str, group, view: str) -> list[str]:
    if view == "state":
        return _table(
            ["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"],
            [[group.group_id, coordinator, group.group_state, str(group.group_epoch), str(group.assignment_epoch), str(len(group.members))]],
        )
    return _table(
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"],
        [
            [group.group_id, m.member_id, m.client_host, m.client_id,
             str(sum(len(tp.partitions) for tp in m.assignment.topic_partitions)), str(m.member_epoch), _assignment(m)]
            for m in group.members
        ],
    )


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "share-groups",
        help="list and describe share groups (like kafka-share-groups.sh)",
        description="Talks to a running broker. --list prints the share group ids; --describe --group G prints the "
        "members with their assignments (--members, the default) or the group's coordinator, state, epochs and member "
        "count (--state). --offsets is not served yet (it needs DescribeShareGroupOffsets). " + EXIT_CODES,
    )
    add_client_options(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list the share groups")
    action.add_argument("--describe", action="store_true", help="describe the groups given with --group")
    parser.add_argument("--group", action="append", default=[], metavar="GROUP", help="a share group (repeatable)")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--members", dest="view", action="store_const", const="members", help="the members (default)")
    view.add_argument("--state", dest="view", action="store_const", const="state", help="the group's state")
    view.add_argument("--offsets", dest="view", action="store_const", const="offsets", help="not served yet")
    parser.set_defaults(func=cmd_share_groups, view="members")


def cmd_share_groups(args: argparse.Namespace) -> int:
    if args.describe and not args.group:
        print("pybroker share-groups: --describe needs --group", file=sys.stderr)
        return 2
    if args.view == "offsets":
        print("pybroker share-groups: --offsets is not served yet (DescribeShareGroupOffsets)", file=sys.stderr)
        return 2
    tool = None
    try:
        tool = ShareGroupTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        if args.list:
            for group_id, _ in tool.list_groups():
                print(group_id)
            return 0
        status = 0
        for group_id in args.group:
            try:
                coordinator, described = tool.describe_group(group_id)
            except ToolError as exc:
                print(f"pybroker share-groups: {exc}", file=sys.stderr)
                status = 1
                continue
            print()
            for line in describe_lines(coordinator, described, args.view):
                print(line)
        return status
    except ToolError as exc:
        print(f"pybroker share-groups: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    finally:
        if tool is not None:
            tool.close()
