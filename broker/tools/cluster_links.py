"""``pybroker cluster-links`` and ``pybroker mirrors``: cluster links and mirror topics,
in the shape of Confluent's kafka-cluster-links and kafka-mirrors.

``pybroker cluster-links --bootstrap-server DEST``:

- ``--create --link NAME --config bootstrap.servers=SRC[,key=value...]`` (and/or
  ``--config-file F``, Java properties): CreateClusterLinks; a value may hold
  commas (``bootstrap.servers=a:9092,b:9092``): an item without ``=`` continues
  the value before it;
- ``--alter --link NAME --add-config k=v,... --delete-config k,...``;
- ``--list``, ``--describe [--link NAME]`` (DescribeClusterLinks; secrets show
  as ``(sensitive)``, in JSON as null), ``--output json``; ``--describe`` adds,
  for a link with ``multi.master.topics``, each partition's copy as the broker
  leading it describes it (DescribeMultiMasterCopies asked of every broker);
- ``--delete --link NAME [--force]`` (force: the link's following mirrors
  become FAILED).

``pybroker mirrors --bootstrap-server DEST``:

- ``--create --mirror-topic T --link NAME [--source-topic S]
  [--replication-factor N] [--config k=v,...]``: CreateMirrorTopics;
- ``--list [--link NAME]``: the mirror topics of every link (or of one);
- ``--describe [--topics T,...] [--output json]``: DescribeMirrors asked of
  every broker, the answers joined by partition (each partition from the
  broker that leads it);
- ``--pause``, ``--resume``, ``--promote``, ``--failover`` ``--topics T,...``:
  AlterMirrors. Promote and failover then wait until every topic is PROMOTED
  or FAILED_OVER (DescribeMirrors, at most ``--timeout-ms``, default 60000;
  0: do not wait) and print where each partition stopped; running out of
  time is exit code 1 with the states reached.

- ``--failback --mirror-topic T --link NAME [--source-topic S] [--dry-run]
  [--output json]`` (alias ``--truncate-and-restore``, Confluent's name):
  CreateMirrorTopics with ``failback``: the topic T of this cluster (the old
  source) becomes a mirror of S (default T) on the link's source (the new
  primary, where S was failed over or promoted), each partition cut back to
  where S stopped copying; prints per partition the stop offset, the log end
  here before the cut and the records removed, and their total. ``--dry-run``
  prints the report and changes nothing.

Exit codes as for every tool: 1 when the broker refuses, 2 on usage or connection problems.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field

from broker.tools.client import Refused, ToolClient, ToolError, read_properties
from broker.tools.options import EXIT_CODES, add_client_options, settings_of
from broker.tools.topics import error_text, fetch_metadata
from controller.metadata.records import MIRROR_STATE_NAMES
from protocol.errors import ErrorCode
from protocol.messages.cluster_links import (
    LINK_CONFIG_DELETE,
    LINK_CONFIG_SET,
    MIRROR_OP_FAILOVER,
    MIRROR_OP_PAUSE,
    MIRROR_OP_PROMOTE,
    MIRROR_OP_RESUME,
)
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

_CL = struct_classes(APIS_BY_NAME["CreateClusterLinks"].request)
_AL = struct_classes(APIS_BY_NAME["AlterClusterLinks"].request)
_CM = struct_classes(APIS_BY_NAME["CreateMirrorTopics"].request)
VERSION = 0
DONE_STATES = {MIRROR_OP_PROMOTE: "PROMOTED", MIRROR_OP_FAILOVER: "FAILED_OVER"}
WAIT_POLL_S = 0.2
OPERATIONS = {"pause": MIRROR_OP_PAUSE, "resume": MIRROR_OP_RESUME, "promote": MIRROR_OP_PROMOTE, "failover": MIRROR_OP_FAILOVER}


def parse_config_items(text: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` as a dict; an item without ``=`` continues the value before it
    (``bootstrap.servers=a:1,b:2``)."""
    configs: dict[str, str] = {}
    last = None
    for item in (text or "").split(","):
        if "=" in item:
            key, _, value = item.partition("=")
            key = key.strip()
            if not key:
                raise ToolError(f"--config: expected key=value, got {item!r}")
            configs[key] = value.strip()
            last = key
        elif item.strip():
            if last is None:
                raise ToolError(f"--config: expected key=value, got {item!r}")
            configs[last] += "," + item.strip()
    return configs


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


def _check(results, name_field: str, what: str) -> None:
    failed = [r for r in results if r.error_code != ErrorCode.NONE]
    if failed:
        raise Refused("; ".join(f"{what} {getattr(r, name_field)}: {error_text(r.error_code, r.error_message)}" for r in failed))


def state_name(state: int) -> str:
    return MIRROR_STATE_NAMES.get(state, str(state))


# ----------------------------------------------------------------------------- joining DescribeMirrors answers


@dataclass
class MirrorView:
    topic: str
    link: str
    source_topic: str
    state: str
    reason: str | None
    partitions: dict[int, object] = field(default_factory=dict)  # partition -> DescribedMirrorPartition
    errors: list[str] = field(default_factory=list)


def join_mirror_answers(answers: dict[int, object]) -> dict[str, MirrorView]:
    """DescribeMirrors answers by broker id, joined: per topic, each partition as
    the broker leading it describes it (else the first answer without an error,
    else the first answer)."""
    views: dict[str, MirrorView] = {}
    rank: dict[tuple[str, int], int] = {}  # 2: from its leader, 1: without error, 0: an error
    broker_errors: list[str] = []  # a broker that answered nothing leaves every topic incomplete
    for broker_id in sorted(answers):
        response = answers[broker_id]
        if response.error_code != ErrorCode.NONE:
            broker_errors.append(f"broker {broker_id}: {error_text(response.error_code)}")
            continue
        for t in response.topics:
            view = views.get(t.mirror_topic)
            if view is None:
                view = views[t.mirror_topic] = MirrorView(
                    t.mirror_topic, t.link_name, t.source_topic, state_name(t.state), t.reason
                )
            if t.error_code != ErrorCode.NONE:
                view.errors.append(f"broker {broker_id}: {error_text(t.error_code)}")
                continue
            for p in t.partitions:
                ok = p.error_code == ErrorCode.NONE
                score = 2 if ok and p.leader_id == broker_id else int(ok)
                key = (t.mirror_topic, p.partition_index)
                if key not in rank or score > rank[key]:
                    rank[key] = score
                    view.partitions[p.partition_index] = p
    for view in views.values():
        view.errors.extend(broker_errors)
    return views


def mirror_json(view: MirrorView) -> dict:
    return {
        "mirror_topic": view.topic, "link_name": view.link, "source_topic": view.source_topic, "state": view.state,
        "reason": view.reason, "errors": view.errors,
        "partitions": [
            {
                "partition": p.partition_index, "leader": p.leader_id,
                "error": None if p.error_code == ErrorCode.NONE else error_text(p.error_code, p.error_message),
                "local_log_end_offset": p.local_log_end_offset, "local_high_watermark": p.local_high_watermark,
                "source_high_watermark": p.source_high_watermark, "lag_records": p.lag_records, "lag_ms": p.lag_ms,
                "last_fetch_ms": p.last_fetch_ms, "stop_offset": p.stop_offset,
            }
            for _, p in sorted(view.partitions.items())
        ],
    }


def mirror_lines(view: MirrorView) -> list[str]:
    reason = f"\tReason: {view.reason}" if view.reason else ""
    lines = [f"Topic: {view.topic}\tLinkName: {view.link}\tSourceTopic: {view.source_topic}\tState: {view.state}{reason}"]
    for _, p in sorted(view.partitions.items()):
        if p.error_code != ErrorCode.NONE:
            lines.append(f"\tPartition: {p.partition_index}\tLeader: {p.leader_id}\tError: {error_text(p.error_code, p.error_message)}")
            continue
        lines.append(
            f"\tPartition: {p.partition_index}\tLeader: {p.leader_id}\tSourceHighWatermark: {p.source_high_watermark}"
            f"\tLogEndOffset: {p.local_log_end_offset}\tHighWatermark: {p.local_high_watermark}"
            f"\tLagRecords: {p.lag_records}\tLagMs: {p.lag_ms}\tLastFetchMs: {p.last_fetch_ms}\tStopOffset: {p.stop_offset}"
        )
    lines.extend(f"\t{error}" for error in view.errors)
    return lines


# ----------------------------------------------------------------------------- the tool


class LinksTool:
    def __init__(self, bootstrap: str, *, timeout_s: float, settings):
        self.client = ToolClient(bootstrap, timeout_s, settings)

    def close(self) -> None:
        self.client.close()

    def _call(self, api_name: str, **fields):
        self.client.require(api_name, "cluster links")
        return self.client.bootstrap_connection().call(api_name, VERSION, **fields)

    # links

    def create_link(self, name: str, configs: dict[str, str], validate_only: bool = False):
        response = self._call("CreateClusterLinks", links=[
            _CL.CreatableLink(link_name=name, configs=[_CL.CreatableLinkConfig(name=k, value=v) for k, v in configs.items()])
        ], validate_only=validate_only, timeout_ms=30000)
        _check(response.results, "link_name", "link")
        return response.results[0]

    def describe_links(self, names: list[str] | None):
        response = self._call("DescribeClusterLinks", link_names=names)
        if response.error_code != ErrorCode.NONE:
            raise Refused(f"DescribeClusterLinks: {error_text(response.error_code, response.error_message)}")
        _check(response.results, "link_name", "link")
        return response.results

    def alter_link(self, name: str, add: dict[str, str], delete: list[str]):
        ops = [_AL.AlterableLinkConfig(name=k, value=v, operation=LINK_CONFIG_SET) for k, v in add.items()]
        ops += [_AL.AlterableLinkConfig(name=k, value=None, operation=LINK_CONFIG_DELETE) for k in delete]
        response = self._call("AlterClusterLinks", links=[_AL.AlterableLink(link_name=name, configs=ops)], validate_only=False)
        _check(response.results, "link_name", "link")

    def delete_link(self, name: str, force: bool):
        response = self._call("DeleteClusterLinks", link_names=[name], force=force, validate_only=False)
        _check(response.results, "link_name", "link")

    # mirrors

    def create_mirror(self, topic: str, link: str, source_topic: str | None, replication_factor: int, configs: dict[str, str]):
        response = self._call("CreateMirrorTopics", topics=[_CM.CreatableMirror(
            mirror_topic=topic, link_name=link, source_topic=source_topic, replication_factor=replication_factor,
            configs=[_CM.CreatableMirrorConfig(name=k, value=v) for k, v in configs.items()],
        )], validate_only=False, timeout_ms=30000)
        _check(response.results, "mirror_topic", "mirror topic")
        return response.results[0]

    def failback(self, topic: str, link: str, source_topic: str | None, dry_run: bool):
        response = self._call("CreateMirrorTopics", topics=[_CM.CreatableMirror(
            mirror_topic=topic, link_name=link, source_topic=source_topic, replication_factor=-1, configs=[],
            failback=True,
        )], validate_only=dry_run, timeout_ms=30000)
        _check(response.results, "mirror_topic", "mirror topic")
        return response.results[0]

    def alter_mirrors(self, operation: int, topics: list[str]):
        response = self._call("AlterMirrors", operation=operation, topics=topics, validate_only=False)
        _check(response.results, "mirror_topic", "mirror topic")

    def describe_mirrors(self, topics: list[str] | None) -> dict[str, MirrorView]:
        self.client.require("DescribeMirrors", "mirror topic states")
        metadata = fetch_metadata(self.client)
        answers = {}
        for broker_id in sorted(metadata.brokers):
            connection = self.client.broker_connection(broker_id, metadata.brokers)
            answers[broker_id] = connection.call("DescribeMirrors", VERSION, topics=topics)
        views = join_mirror_answers(answers)
        missing = [t for t in topics or [] if t not in views]
        if missing:
            raise Refused(f"not mirror topics (or not known): {', '.join(missing)}")
        return views

    def describe_copies(self, links: list[str]) -> dict[str, list]:
        """The multi-master copies of ``links``, each as the broker leading its partition describes it."""
        self.client.require("DescribeMultiMasterCopies", "multi-master copy states")
        metadata = fetch_metadata(self.client)
        found: dict[str, list] = {name: [] for name in links}
        for broker_id in sorted(metadata.brokers):
            connection = self.client.broker_connection(broker_id, metadata.brokers)
            answer = connection.call("DescribeMultiMasterCopies", VERSION, links=links)
            for copy in answer.copies:
                found.setdefault(copy.link_name, []).append(copy)
        for rows in found.values():
            rows.sort(key=lambda c: (c.topic, c.partition_index))
        return found

    def wait_stopped(self, operation: int, topics: list[str], timeout_ms: int) -> dict[str, MirrorView]:
        """Wait until every topic reached the final state of ``operation``; Refused on timeout."""
        wanted = DONE_STATES[operation]
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            views = self.describe_mirrors(topics)
            pending = {t: v.state for t, v in views.items() if v.state != wanted}
            if not pending:
                return views
            if time.monotonic() >= deadline:
                states = ", ".join(f"{t} is {s}" for t, s in sorted(pending.items()))
                raise Refused(f"timed out after {timeout_ms} ms waiting for {wanted}: {states}")
            time.sleep(WAIT_POLL_S)


def _link_json(link) -> dict:
    return {
        "link_name": link.link_name, "link_id": str(link.link_id),
        "configs": {c.name: {"value": c.value, "sensitive": c.sensitive} for c in link.configs},
        "mirror_topics": list(link.mirror_topics),
    }


def copy_json(copy) -> dict:
    return {
        "topic": copy.topic, "partition": copy.partition_index, "leader": copy.leader_id,
        "state": "STOPPED" if copy.stopped else "COPYING", "error": copy.error_message,
        "source_position": copy.source_position, "source_high_watermark": copy.source_high_watermark,
        "lag_records": copy.lag_records, "lag_ms": copy.lag_ms, "last_fetch_ms": copy.last_fetch_ms,
        "copied_batches": copy.copied_batches, "skipped_batches": copy.skipped_batches,
    }


def copy_line(copy) -> str:
    state = "STOPPED" if copy.stopped else "COPYING"
    line = (
        f"    Topic: {copy.topic}\tPartition: {copy.partition_index}\tLeader: {copy.leader_id}\tState: {state}"
        f"\tSourcePosition: {copy.source_position}\tSourceHighWatermark: {copy.source_high_watermark}"
        f"\tLagRecords: {copy.lag_records}\tLagMs: {copy.lag_ms}\tCopiedBatches: {copy.copied_batches}"
    )
    return line + (f"\tError: {copy.error_message}" if copy.error_message else "")


def _multi_master_links(links) -> list[str]:
    return [link.link_name for link in links if any(c.name == "multi.master.topics" and c.value for c in link.configs)]


def cmd_cluster_links(args) -> int:
    tool = None
    try:
        if args.output == "json" and not (args.list or args.describe):
            raise ToolError("--output json goes with --list or --describe")
        if (args.create or args.alter or args.delete) and not args.link:
            raise ToolError("--create, --alter and --delete need --link")
        tool = LinksTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        if args.create:
            configs = read_properties(args.config_file) if args.config_file else {}
            configs.update(parse_config_items(args.config))
            if "bootstrap.servers" not in configs:
                raise ToolError("--create needs bootstrap.servers (in --config or --config-file)")
            tool.create_link(args.link, configs, args.validate_only)
            done = "validation" if args.validate_only else "creation"
            print(f"Cluster link '{args.link}' {done} successfully completed.")
        elif args.alter:
            add, delete = parse_config_items(args.add_config), _names(args.delete_config)
            if not add and not delete:
                raise ToolError("--alter needs --add-config or --delete-config")
            tool.alter_link(args.link, add, delete)
            print(f"Cluster link '{args.link}' alter successfully completed.")
        elif args.delete:
            tool.delete_link(args.link, args.force)
            print(f"Cluster link '{args.link}' deletion successfully completed.")
        else:
            links = tool.describe_links([args.link] if args.link else None)
            copying = _multi_master_links(links)
            copies = tool.describe_copies(copying) if copying and args.describe else {}
            if args.output == "json":
                described = []
                for link in links:
                    row = _link_json(link)
                    if link.link_name in copies:
                        row["multi_master_copies"] = [copy_json(c) for c in copies[link.link_name]]
                    described.append(row)
                print(json.dumps({"links": described}))
            elif args.list:
                for link in links:
                    print(f"Link name: '{link.link_name}', link ID: '{link.link_id}', mirror topics: {len(link.mirror_topics)}")
            else:
                for link in links:
                    print(f"Link name: '{link.link_name}', link ID: '{link.link_id}'")
                    print("  Configs:")
                    for c in link.configs:
                        print(f"    {c.name}={'(sensitive)' if c.sensitive else c.value}")
                    print(f"  Mirror topics: {', '.join(link.mirror_topics) or '(none)'}")
                    if link.link_name in copies:
                        print("  Multi-master copies (on the partitions' leaders here):")
                        for copy in copies[link.link_name]:
                            print(copy_line(copy))
                        if not copies[link.link_name]:
                            print("    (none yet: no leader here copies yet)")
        return 0
    except ToolError as exc:
        print(f"pybroker cluster-links: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        if tool is not None:
            tool.close()


def failback_json(topic: str, source_topic: str, link: str, dry_run: bool, rows) -> dict:
    return {
        "mirror_topic": topic,
        "source_topic": source_topic,
        "link": link,
        "dry_run": dry_run,
        "partitions": [
            {
                "partition": r.partition_index,
                "stop_offset": r.stop_offset,
                "stop_epoch": r.stop_epoch,
                "log_end_offset": r.log_end_offset,
                "records_removed": r.records_removed,
            }
            for r in rows
        ],
        "records_removed": sum(r.records_removed for r in rows),
    }


def failback_lines(topic: str, source_topic: str, link: str, dry_run: bool, rows) -> list[str]:
    head = (
        f"Dry run: failback of {topic} would make it a mirror of {source_topic} over link {link}; nothing changed."
        if dry_run else f"Topic {topic} is now a mirror of {source_topic} over link {link}."
    )
    verb = "RecordsToRemove" if dry_run else "RecordsRemoved"
    lines = [head]
    lines += [
        f"\tPartition: {r.partition_index}\tStopOffset: {r.stop_offset}\tLogEndOffset: {r.log_end_offset}\t{verb}: {r.records_removed}"
        for r in sorted(rows, key=lambda r: r.partition_index)
    ]
    lines.append(f"Total records {'to remove' if dry_run else 'removed'}: {sum(r.records_removed for r in rows)}")
    return lines


def cmd_mirrors(args) -> int:
    tool = None
    try:
        operation_name = next((name for name in OPERATIONS if getattr(args, name)), None)
        topics = _names(args.topics)
        if args.output == "json" and not (args.describe or args.failback):
            raise ToolError("--output json goes with --describe or --failback")
        if args.dry_run and not args.failback:
            raise ToolError("--dry-run goes with --failback")
        if args.failback and not (args.mirror_topic and args.link):
            raise ToolError("--failback needs --mirror-topic and --link")
        if operation_name is not None and not topics:
            raise ToolError(f"--{operation_name} needs --topics")
        if args.create and not (args.mirror_topic and args.link):
            raise ToolError("--create needs --mirror-topic and --link")
        tool = LinksTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        if args.create:
            result = tool.create_mirror(
                args.mirror_topic, args.link, args.source_topic, args.replication_factor, parse_config_items(args.config)
            )
            print(f"Created topic {args.mirror_topic} ({result.num_partitions} partitions), mirroring "
                  f"{args.source_topic or args.mirror_topic} over link {args.link}.")
        elif args.failback:
            result = tool.failback(args.mirror_topic, args.link, args.source_topic, args.dry_run)
            source_topic = args.source_topic or args.mirror_topic
            rows = result.failback_partitions
            if args.output == "json":
                print(json.dumps(failback_json(args.mirror_topic, source_topic, args.link, args.dry_run, rows)))
            else:
                for line in failback_lines(args.mirror_topic, source_topic, args.link, args.dry_run, rows):
                    print(line)
        elif args.list:
            links = tool.describe_links([args.link] if args.link else None)
            for name in sorted({t for link in links for t in link.mirror_topics}):
                print(name)
        elif args.describe:
            views = tool.describe_mirrors(topics or None)
            if args.output == "json":
                print(json.dumps({"mirrors": [mirror_json(v) for _, v in sorted(views.items())]}))
            else:
                for _, view in sorted(views.items()):
                    for line in mirror_lines(view):
                        print(line)
        elif operation_name is not None:
            operation = OPERATIONS[operation_name]
            if operation in DONE_STATES and args.timeout_ms != 0:
                # Asked before anything changes: without it the stop cannot be waited for.
                tool.client.require("DescribeMirrors", "waiting for the stop; --timeout-ms 0 does not wait")
            tool.alter_mirrors(operation, topics)
            if operation not in DONE_STATES or args.timeout_ms == 0:
                for topic in topics:
                    print(f"Mirror topic {topic}: {operation_name} requested.")
                return 0
            views = tool.wait_stopped(operation, topics, args.timeout_ms)
            for topic in topics:
                view = views[topic]
                print(f"Mirror topic {topic} is {view.state}.")
                for _, p in sorted(view.partitions.items()):
                    print(f"\tPartition: {p.partition_index}\tStopOffset: {p.stop_offset}")
        else:
            raise ToolError("give one of --create, --list, --describe, --pause, --resume, --promote, --failover, --failback")
        return 0
    except ToolError as exc:
        print(f"pybroker mirrors: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        if tool is not None:
            tool.close()


def register(commands) -> None:
    links = commands.add_parser(
        "cluster-links",
        help="create, list, describe, alter and delete cluster links (like Confluent's kafka-cluster-links)",
        description="A cluster link on this (the destination) cluster names a source cluster by bootstrap.servers "
        "and a Kafka client's settings (security.protocol, ssl.*, sasl.*) plus the link's own "
        "(consumer.offset.sync.*, topic.config.sync.ms, retry.backoff.ms). " + EXIT_CODES,
    )
    add_client_options(links, bootstrap_default=None)
    links.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="a broker of the destination cluster")
    action = links.add_mutually_exclusive_group(required=True)
    for flag, text in (("--create", "create a link"), ("--alter", "change a link's settings"), ("--list", "list the links"),
                       ("--describe", "describe the links (or --link)"), ("--delete", "delete a link")):
        action.add_argument(flag, action="store_true", help=text)
    links.add_argument("--link", metavar="NAME", help="the link")
    links.add_argument("--config", metavar="K=V,...", help="with --create: the link's settings (bootstrap.servers=SRC,...)")
    links.add_argument("--config-file", metavar="FILE", help="with --create: the link's settings as a properties file")
    links.add_argument("--add-config", metavar="K=V,...", help="with --alter: settings to set")
    links.add_argument("--delete-config", metavar="K,...", help="with --alter: settings to remove")
    links.add_argument("--force", action="store_true", help="with --delete: even with mirror topics (they become FAILED)")
    links.add_argument("--validate-only", action="store_true", help="with --create: check, create nothing")
    links.add_argument("--output", choices=("text", "json"), default="text", help="with --list/--describe")
    links.set_defaults(func=cmd_cluster_links)

    mirrors = commands.add_parser(
        "mirrors",
        help="create, describe, pause, resume, promote and fail over mirror topics (like Confluent's kafka-mirrors)",
        description="A mirror topic copies a topic of a link's source cluster with the same offsets; it is read-only "
        "until promoted (source reachable: caught up first) or failed over (source gone). " + EXIT_CODES,
    )
    add_client_options(mirrors, bootstrap_default=None)
    mirrors.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="a broker of the destination cluster")
    action = mirrors.add_mutually_exclusive_group(required=True)
    for flag, text in (("--create", "create a mirror topic"), ("--list", "list mirror topics"),
                       ("--describe", "describe mirror topics"), ("--pause", "stop copying"), ("--resume", "copy again"),
                       ("--promote", "catch up, then make writable"), ("--failover", "stop now, make writable")):
        action.add_argument(flag, action="store_true", help=text)
    action.add_argument("--failback", "--truncate-and-restore", dest="failback", action="store_true",
                        help="make --mirror-topic (the old source's topic) a mirror of the link's source again, "
                        "cut back to where that source's failed-over mirror stopped")
    mirrors.add_argument("--dry-run", action="store_true", help="with --failback: print the report, change nothing")
    mirrors.add_argument("--mirror-topic", metavar="TOPIC", help="with --create or --failback: the topic")
    mirrors.add_argument("--link", metavar="NAME", help="with --create, --failback or --list: the link")
    mirrors.add_argument("--source-topic", metavar="TOPIC", help="with --create or --failback: the source topic (default: the mirror's name)")
    mirrors.add_argument("--replication-factor", type=int, default=-1, metavar="N",
                         help="with --create: replicas (default: default.replication.factor)")
    mirrors.add_argument("--config", metavar="K=V,...", help="with --create: topic configs that are not synced")
    mirrors.add_argument("--topics", metavar="T,...", help="the mirror topics (--describe: default all)")
    mirrors.add_argument("--timeout-ms", type=int, default=60000, metavar="MS",
                         help="with --promote/--failover: how long to wait for the stop (default 60000; 0: do not wait)")
    mirrors.add_argument("--output", choices=("text", "json"), default="text", help="with --describe or --failback")
    mirrors.set_defaults(func=cmd_mirrors)
