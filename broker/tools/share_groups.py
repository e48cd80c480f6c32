"""``pybroker share-groups``: list, describe, reset and delete share groups, as kafka-share-groups.sh does.

A Kafka client like the other tools: ListGroups (v5, types ``share``) for
``--list``, FindCoordinator then ShareGroupDescribe (v1) for ``--describe``.
``--describe`` prints the members (``--members``, the default here) with
their assignments, the group's coordinator, assignor, state and member count
(``--state``), or with ``--offsets`` each share-partition's start offset
(DescribeShareGroupOffsets v0: ``GROUP TOPIC PARTITION START-OFFSET``, ``-``
for a partition the group has no state of yet; Kafka 4.2's lag is not
printed: the broker serves v0, which has none), columns padded as
kafka-share-groups.sh pads them.

- ``--reset-offsets --group G (--topic T[:P,...] ... | --all-topics)`` with one
  of ``--to-earliest``, ``--to-latest``, ``--to-offset N``, ``--to-datetime
  YYYY-MM-DDTHH:mm:SS[.sss]``; ``--dry-run`` (the default, with a warning
  when neither is given) or ``--execute`` (AlterShareGroupOffsets v0). New
  offsets are clamped to [log start, log end] (ListOffsets at each leader); a
  datetime with no record that late gives the log end. Refused while the group
  has members, as Kafka. ``--all-topics``: the topics the group has state of.
  Prints ``GROUP TOPIC PARTITION NEW-OFFSET``.
- ``--delete-offsets --group G --topic T ...``: DeleteShareGroupOffsets v0 (whole
  topics); prints ``TOPIC STATUS``.
- ``--delete --group G ...``: DeleteGroups at each group's coordinator.
"""

from __future__ import annotations

import argparse
import sys

from broker.tools.client import Refused, ToolClient, ToolError
from broker.tools.group_admin import named_partitions, new_offsets, parse_datetime_ms, reset_table
from broker.tools.options import EXIT_CODES, add_client_options, settings_of
from broker.tools.topics import error_text, fetch_metadata
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

_DESCRIBE_OFFSETS = struct_classes(APIS_BY_NAME["DescribeShareGroupOffsets"].request)
_ALTER_OFFSETS = struct_classes(APIS_BY_NAME["AlterShareGroupOffsets"].request)
_DELETE_OFFSETS = struct_classes(APIS_BY_NAME["DeleteShareGroupOffsets"].request)
DELETE_GROUPS_VERSION = 2


class ShareGroupTool(ToolClient):
    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every share group, sorted by id."""
        self.require("ListGroups", "listing groups")
        response = self.bootstrap_connection().call("ListGroups", 5, states_filter=[], types_filter=["share"])
        if response.error_code != ErrorCode.NONE:
            raise ToolError(f"ListGroups: {ErrorCode(response.error_code).name}")
        return sorted((g.group_id, g.group_state) for g in response.groups)

    def _coordinator(self, group_id: str):
        """(the coordinator's ``host:port (id)``, a connection to it)."""
        found = self.bootstrap_connection().call("FindCoordinator", 3, key=group_id, key_type=0)
        if found.error_code != ErrorCode.NONE:
            raise ToolError(f"no coordinator for group {group_id!r}: {ErrorCode(found.error_code).name}")
        return f"{found.host}:{found.port} ({found.node_id})", self._connection((found.host, found.port))

    def describe_group(self, group_id: str):
        """(the coordinator's ``host:port (id)``, the described group)."""
        self.require("ShareGroupDescribe", "describing share groups (the cluster has not finalized share.version)")
        coordinator, connection = self._coordinator(group_id)
        described = connection.call("ShareGroupDescribe", 1, group_ids=[group_id], include_authorized_operations=False).groups[0]
        if described.error_code != ErrorCode.NONE:
            raise ToolError(f"group {group_id!r}: {ErrorCode(described.error_code).name}"
                            + (f" ({described.error_message})" if described.error_message else ""))
        return coordinator, described

    def describe_offsets(self, group_id: str, topics: list[tuple[str, list[int] | None]] | None = None) -> list[tuple[str, int, int]]:
        """(topic, partition, start offset or -1) of the group's share-partitions:
        ``topics`` (a topic without partitions: all of them), or None for every one
        the group reads or has state of."""
        self.require("DescribeShareGroupOffsets", "describing share group offsets")
        _, connection = self._coordinator(group_id)
        asked = None
        if topics is not None:
            metadata = fetch_metadata(self, sorted({t for t, _ in topics}))
            asked = [_DESCRIBE_OFFSETS.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=list(
                ps if ps is not None else sorted(p.partition for p in metadata.topics[t].partitions) if t in metadata.topics else []))
                for t, ps in topics]
        group = connection.call("DescribeShareGroupOffsets", 0, groups=[
            _DESCRIBE_OFFSETS.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=asked)]).groups[0]
        if group.error_code != ErrorCode.NONE:
            raise Refused(f"group {group_id!r}: {error_text(group.error_code, group.error_message)}")
        rows = []
        for t in group.topics:
            for p in t.partitions:
                if p.error_code != ErrorCode.NONE:
                    raise Refused(f"{t.topic_name}-{p.partition_index}: {error_text(p.error_code, p.error_message)}")
                rows.append((t.topic_name, p.partition_index, p.start_offset))
        return sorted(rows)

    def reset_offsets(self, group_id: str, topics: list[tuple[str, list[int] | None]], all_topics: bool, spec: tuple[str, int],
                      execute: bool) -> list[tuple[str, int, int]]:
        """The new start offsets of the partitions asked for ((topic, partition,
        offset)), set with AlterShareGroupOffsets when ``execute``."""
        self.require("AlterShareGroupOffsets", "resetting share group offsets")
        _, described = self.describe_group(group_id)
        if described.members:
            raise Refused(f"Share group '{group_id}' is not empty.")
        if all_topics:
            partitions = [(t, p) for t, p, _ in self.describe_offsets(group_id)]
        else:
            partitions = named_partitions(fetch_metadata(self, sorted({t for t, _ in topics})), topics)
        partitions = sorted(set(partitions))
        if not partitions:
            return []
        metadata = fetch_metadata(self, sorted({t for t, _ in partitions}))
        kind, argument = spec
        new = new_offsets(self, metadata, partitions, {}, kind, argument)
        if execute:
            by_topic: dict[str, list] = {}
            for (topic, partition), offset in sorted(new.items()):
                by_topic.setdefault(topic, []).append(
                    _ALTER_OFFSETS.AlterShareGroupOffsetsRequestPartition(partition_index=partition, start_offset=offset))
            _, connection = self._coordinator(group_id)
            answer = connection.call("AlterShareGroupOffsets", 0, group_id=group_id, topics=[
                _ALTER_OFFSETS.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in by_topic.items()])
            if answer.error_code != ErrorCode.NONE:
                raise Refused(f"cannot reset offsets of group {group_id!r}: {error_text(answer.error_code, answer.error_message)}")
            for t in answer.responses:
                for p in t.partitions:
                    if p.error_code != ErrorCode.NONE:
                        raise Refused(f"AlterShareGroupOffsets of {t.topic_name}-{p.partition_index}: {error_text(p.error_code, p.error_message)}")
        return [(t, p, new[(t, p)]) for t, p in partitions]

    def delete_offsets(self, group_id: str, topics: list[str]) -> list[tuple[str, str | None]]:
        """(topic, error or None) per topic."""
        self.require("DeleteShareGroupOffsets", "deleting share group offsets")
        _, connection = self._coordinator(group_id)
        answer = connection.call("DeleteShareGroupOffsets", 0, group_id=group_id, topics=[
            _DELETE_OFFSETS.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])
        if answer.error_code != ErrorCode.NONE:
            raise Refused(f"cannot delete offsets of group {group_id!r}: {error_text(answer.error_code, answer.error_message)}")
        return [(t.topic_name, None if t.error_code == ErrorCode.NONE else error_text(t.error_code, t.error_message))
                for t in answer.responses]

    def delete_group(self, group_id: str) -> str | None:
        """None when deleted, else the error."""
        _, connection = self._coordinator(group_id)
        result = connection.call("DeleteGroups", DELETE_GROUPS_VERSION, groups_names=[group_id]).results[0]
        return None if result.error_code == ErrorCode.NONE else error_text(result.error_code)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(len(header))]
    return [" ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [header, *rows]]


def _assignment(member) -> str:
    parts = [f"{tp.topic_name}:{','.join(str(p) for p in sorted(tp.partitions))}" for tp in member.assignment.topic_partitions]
    return ";".join(sorted(parts)) or "-"


def offsets_lines(group_id: str, rows: list[tuple[str, int, int]]) -> list[str]:
    return _table(["GROUP", "TOPIC", "PARTITION", "START-OFFSET"],
                  [[group_id, t, str(p), str(o) if o >= 0 else "-"] for t, p, o in rows])


def parse_topic(text: str) -> tuple[str, list[int] | None]:
    """``T`` or ``T:0,1`` (kafka-share-groups.sh's --topic)."""
    name, _, partitions = text.partition(":")
    if not partitions:
        return name, None
    try:
        return name, sorted({int(p) for p in partitions.split(",")})
    except ValueError:
        raise ToolError(f"--topic {text!r}: partitions must be numbers, as in {name}:0,1") from None


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
        help="list, describe, reset and delete share groups (like kafka-share-groups.sh)",
        description="Talks to a running broker. --list prints the share group ids; --describe --group G prints the "
        "members with their assignments (--members, the default), the group's coordinator, state, epochs and member "
        "count (--state) or each share-partition's start offset (--offsets). --reset-offsets sets the start offsets "
        "of an empty group (--dry-run shows them, --execute sets them), --delete-offsets deletes its state of whole "
        "topics, --delete deletes empty groups. " + EXIT_CODES,
    )
    add_client_options(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list the share groups")
    action.add_argument("--describe", action="store_true", help="describe the groups given with --group")
    action.add_argument("--reset-offsets", action="store_true", help="set the start offsets of an empty group")
    action.add_argument("--delete-offsets", action="store_true", help="delete an empty group's state of the --topic topics")
    action.add_argument("--delete", action="store_true", help="delete the empty groups given with --group")
    parser.add_argument("--group", action="append", default=[], metavar="GROUP", help="a share group (repeatable)")
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,...]", help="a topic (repeatable)")
    parser.add_argument("--all-topics", action="store_true", help="reset: every topic the group has state of")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--members", dest="view", action="store_const", const="members", help="the members (default)")
    view.add_argument("--state", dest="view", action="store_const", const="state", help="the group's state")
    view.add_argument("--offsets", dest="view", action="store_const", const="offsets", help="the start offsets")
    spec = parser.add_mutually_exclusive_group()
    spec.add_argument("--to-earliest", action="store_true", help="reset to the log start")
    spec.add_argument("--to-latest", action="store_true", help="reset to the log end")
    spec.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N (clamped to the log)")
    spec.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="reset to the first record at or after it")
    run = parser.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="reset: show the new offsets only (the default)")
    run.add_argument("--execute", action="store_true", help="reset: set the new offsets")
    parser.set_defaults(func=cmd_share_groups, view="members")


def _reset_spec(args) -> tuple[str, int] | None:
    if args.to_earliest:
        return "to_earliest", 0
    if args.to_latest:
        return "to_latest", 0
    if args.to_offset is not None:
        return "to_offset", args.to_offset
    if args.to_datetime is not None:
        return "to_datetime", parse_datetime_ms(args.to_datetime)
    return None


def _admin(tool: ShareGroupTool, args) -> int:
    """--reset-offsets, --delete-offsets and --delete."""
    if args.delete:
        status = 0
        for group_id in args.group:
            error = tool.delete_group(group_id)
            if error is None:
                print(f"Deletion of requested share groups ('{group_id}') was successful.")
            else:
                print(f"Deletion of some share groups failed:\n* Share group '{group_id}' could not be deleted due to: {error}")
                status = 1
        return status
    (group_id,) = args.group
    if args.delete_offsets:
        results = tool.delete_offsets(group_id, [parse_topic(t)[0] for t in args.topic])
        for line in _table(["TOPIC", "STATUS"], [[t, "Successful" if e is None else f"Error: {e}"] for t, e in results]):
            print(line)
        return 0 if all(e is None for _, e in results) else 1
    spec = _reset_spec(args)
    if not args.dry_run and not args.execute:
        print("WARN: No action will be performed as the --execute option is missing. Add --dry-run to say so "
              "explicitly, or --execute to set the new offsets.", file=sys.stderr)
    rows = tool.reset_offsets(group_id, [parse_topic(t) for t in args.topic], args.all_topics, spec, execute=args.execute)
    for line in reset_table([(group_id, t, p, o) for t, p, o in rows]):
        print(line)
    return 0


def _usage_error(args) -> str | None:
    if (args.describe or args.delete) and not args.group:
        return f"--{'describe' if args.describe else 'delete'} needs --group"
    if args.reset_offsets or args.delete_offsets:
        if len(args.group) != 1:
            return f"--{'reset-offsets' if args.reset_offsets else 'delete-offsets'} needs exactly one --group"
        if args.delete_offsets and not args.topic:
            return "--delete-offsets needs --topic"
        if args.reset_offsets and bool(args.topic) == args.all_topics:
            return "--reset-offsets needs --topic or --all-topics (one of them)"
        if args.reset_offsets and _reset_spec(args) is None:
            return "--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, --to-datetime"
    return None


def cmd_share_groups(args: argparse.Namespace) -> int:
    try:
        usage = _usage_error(args)
    except ToolError as exc:
        usage = str(exc)
    if usage is not None:
        print(f"pybroker share-groups: {usage}", file=sys.stderr)
        return 2
    tool = None
    try:
        tool = ShareGroupTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        if args.list:
            for group_id, _ in tool.list_groups():
                print(group_id)
            return 0
        if not args.describe:
            return _admin(tool, args)
        status = 0
        for group_id in args.group:
            try:
                if args.view == "offsets":
                    if not tool.describe_group(group_id)[1].members:
                        print(f"\nShare group '{group_id}' has no active members.", file=sys.stderr)  # as Kafka says it
                    lines = offsets_lines(group_id, tool.describe_offsets(group_id))
                else:
                    lines = describe_lines(*tool.describe_group(group_id), args.view)
            except ToolError as exc:
                print(f"pybroker share-groups: {exc}", file=sys.stderr)
                status = 1
                continue
            print()
            for line in lines:
                print(line)
        return status
    except ToolError as exc:
        print(f"pybroker share-groups: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    finally:
        if tool is not None:
            tool.close()
