"""The ``pybroker`` command line.

Past 700 lines on purpose: it is the one entry point, and the parsers of the
broker-side subcommands (start, dump-log, storage, groups, transactions,
metadata-quorum, reassign, healthcheck) stay together with their help texts;
the client admin tools have theirs in broker/tools/commands.py.

``pybroker start [--config FILE] [--override key=value ...]`` runs a broker until
SIGTERM or SIGINT, then shuts down cleanly: listeners close, requests already
received are answered, logs are flushed and closed. A start-up problem the
user can fix ends in one line on stderr and an exit code of its kind
(``START_EXIT_CODES``, shown by ``pybroker start --help``). Without ``--config``
it runs the single-node development profile (broker/single_node_profile.py).

``pybroker dump-log FILE...`` prints segment, index and checkpoint files in a
readable form (like Kafka's kafka-dump-log.sh); see storage/FORMAT.md, "Tools".

``pybroker groups [--bootstrap-server HOST:PORT] list|describe GROUP`` lists
consumer groups and shows one's members, assignments, committed offsets and
lag per partition (like kafka-consumer-groups.sh); see broker/tools/groups.py.
``--reset-offsets``, ``--delete`` and ``--delete-offsets`` are in
broker/tools/group_admin.py. ``pybroker share-groups --list|--describe --group G``
does the same for share groups (broker/tools/share_groups.py).

``pybroker transactions --bootstrap-server HOST:PORT list|describe|describe-producers|abort``
lists and describes transactions and aborts one left hanging on a partition
(like kafka-transactions.sh); see broker/tools/transactions.py.

``pybroker storage format|info|random-uuid`` prepares log directories for a
multi-node cluster (like kafka-storage.sh); see storage/meta_properties.py.

``pybroker metadata-quorum (--bootstrap-server|--bootstrap-controller) HOST:PORT
describe --status|--replication`` shows the metadata quorum (like
kafka-metadata-quorum.sh); see broker/tools/metadata_quorum.py.

``pybroker reassign --bootstrap-server HOST:PORT --execute|--verify|--cancel
--reassignment-json-file FILE`` moves partitions to other brokers (like
kafka-reassign-partitions.sh); see broker/tools/reassign.py.

``pybroker topics|configs|console-producer|console-consumer|get-offsets|delete-records``
are the admin tools of kafka-topics.sh, kafka-configs.sh and friends; see
broker/tools/commands.py. Every tool that talks to brokers takes
``--command-config FILE`` (TLS, SASL; broker/tools/client.py).

``pybroker dev-cluster --nodes N`` runs a local cluster of combined nodes as
child processes until Ctrl-C; see broker/tools/dev_cluster.py.

``pybroker healthcheck --bootstrap-server HOST:PORT`` exits 0 when the broker
answers and lists itself among the live brokers (the Docker image's
HEALTHCHECK); see `healthcheck`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
import time
from pathlib import Path

from broker.config import ConfigError, load_config_file
from broker.single_node_profile import load_single_node_config
from storage.dir_lock import LogDirLocked, LogDirUnusable
from storage.meta_properties import MetaPropertiesError

log = logging.getLogger("pybroker")

# `pybroker start`'s exit codes. A problem the user can fix ends in one line on
# stderr and a code saying which kind it is; only a crash prints a traceback.
EXIT_CRASHED = 1
EXIT_CONFIG = 2
EXIT_STORAGE = 3
EXIT_LISTENER = 4
EXIT_INTERRUPTED = 130
START_EXIT_CODES = f"""exit codes:
  0    stopped cleanly (SIGTERM or SIGINT)
  {EXIT_CRASHED}    crashed (a bug: the traceback is on stderr)
  {EXIT_CONFIG}    configuration or usage error: a bad key value, --override, config file
  {EXIT_STORAGE}    storage error: a log dir that cannot be made or written, a read-only file
       system, a log dir another process holds, a cluster or node id that does not
       match meta.properties, storage of a multi-node cluster not formatted
  {EXIT_LISTENER}    a listener cannot be bound (port in use, address not on this host)
Errors 2-4 are one line on stderr: "pybroker: <what is wrong>; <what to do>"."""


def _parse_overrides(pairs: list[str]) -> dict[str, str]:
    overrides = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--override expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        overrides[key.strip()] = value
    return overrides


async def _run(config, *, single_node_profile: bool = False) -> None:
    from broker.app import Broker

    # The cyclic garbage collector stays off while the start builds the heap it
    # would otherwise walk again and again: with 100,000 partitions its full
    # collections took 15 of a start's 64 CPU seconds, up to 2.1 s each on the
    # loop, and found next to nothing. What the start built then lives as long
    # as the broker, so it is frozen out of later collections (gc.freeze), which
    # walk only what came after it.
    gc.disable()
    broker = Broker(config)
    try:
        await broker.start()
    finally:
        gc.freeze()
        gc.enable()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    host, port = broker.advertised_endpoint()
    if single_node_profile:
        # Said once it serves (a refused start stays one line): where the data goes.
        log.info(
            "no --config: started with the single-node defaults of configs/server.properties; data in %s",
            ", ".join(str(d) for d in config.log_dirs),
        )
    # Tests and scripts wait for this line to know the broker is serving.
    print(f"pybroker started: node.id={broker.node_id} cluster.id={broker.cluster_id} listening on {host}:{port}", flush=True)
    await stop.wait()
    log.info("shutting down")
    await broker.stop()
    print("pybroker stopped", flush=True)


def _install_event_loop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def cmd_start(args) -> int:
    overrides = _parse_overrides(args.override or [])
    if args.config:
        config = load_config_file(Path(args.config), overrides)
    else:
        config = load_single_node_config(overrides, base_dir=Path.cwd())
    if not args.no_uvloop:
        _install_event_loop()
    from broker.allocator import keep_request_buffers_in_heap

    keep_request_buffers_in_heap()
    asyncio.run(_run(config, single_node_profile=not args.config))
    return 0


def _format_metadata_value(value: bytes) -> str:
    """A ``__cluster_metadata`` record value as the record it encodes."""
    from controller.metadata.records import decode_record
    from protocol.exceptions import ProtocolError

    try:
        _, record = decode_record(value)
    except (ProtocolError, ValueError, IndexError) as exc:
        return f"<not a metadata record: {exc}> {bytes(value).decode('utf-8', 'replace')}"
    return repr(record)


def _value_formatter_for(path: Path):
    from broker.app import METADATA_PARTITION_DIR as METADATA_DIR_NAME

    return _format_metadata_value if path.absolute().parent.name == METADATA_DIR_NAME else None


def cmd_dump_log(args) -> int:
    from storage.dump import DumpOptions, DumpStats, dump_files

    options = DumpOptions(
        deep=args.deep_iteration, print_data=args.print_data_log, verify=args.verify, offsets_decoder=args.offsets_decoder
    )
    stats = DumpStats()
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="backslashreplace")  # payloads are arbitrary text
    from broker.tools.progress import track_dump

    # A stdout closed early (piped into head) is handled by main, as for every command.
    lines = dump_files(args.files, options, stats, format_value_for=_value_formatter_for)
    for line in track_dump(lines, args.files):  # a bar on stderr for large files (a TTY only)
        print(line)
    return stats.exit_code


def cmd_groups(args) -> int:
    from broker.tools.commands import cmd_group_admin, group_usage_error, settings_of
    from broker.tools.groups import CONSUMER_GROUP_TYPES, GroupTool, ToolError, list_lines, print_descriptions

    problem = group_usage_error(args)
    if problem is not None:
        print(f"pybroker groups: {problem}", file=sys.stderr)
        return 2
    if args.reset_offsets or args.delete_groups or args.delete_offsets:
        return cmd_group_admin(args)
    tool = None
    try:
        tool = GroupTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        if args.list_groups or args.groups_command == "list":
            # Names checked and spelled as Kafka's by group_usage_error; consumer groups only, as Kafka's tool.
            groups = [g for g in tool.list_groups(args.state, args.type or list(CONSUMER_GROUP_TYPES))
                      if g.is_consumer_group]
            if args.state is not None or args.type is not None:
                for line in list_lines(groups, with_type=args.type is not None, with_state=args.state is not None):
                    print(line)
            else:
                for group in groups:
                    print(group.group_id)
            return 0
        # --describe --group G... | --all-groups, or the subcommand `describe GROUP`.
        if args.all_groups:
            group_ids = [g.group_id for g in tool.list_groups(types=list(CONSUMER_GROUP_TYPES)) if g.is_consumer_group]
        else:
            group_ids = [args.group] if args.groups_command == "describe" else args.group
        return print_descriptions(tool, group_ids, args.describe_view, args.verbose)
    except ToolError as exc:
        print(f"pybroker groups: {exc}", file=sys.stderr)
        return 2
    finally:
        if tool is not None:
            tool.close()


def cmd_transactions(args) -> int:
    from broker.tools.client import ToolError
    from broker.tools.commands import settings_of
    from broker.tools.transactions import TransactionsTool, table

    tool = None
    try:
        tool = TransactionsTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        command = args.transactions_command
        if command == "list":
            listed = tool.list_transactions(args.state, args.duration_filter)
            rows = [[t.transactional_id, t.coordinator_id, t.producer_id, t.state] for t in listed]
            lines = table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)
        elif command == "describe":
            d = tool.describe_transaction(args.transactional_id)
            start = d.start_time_ms if d.start_time_ms >= 0 else "None"
            duration = int(time.time() * 1000) - d.start_time_ms if d.start_time_ms >= 0 else "None"
            partitions = ",".join(f"{t}-{p}" for t, p in d.partitions)
            lines = table(
                ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                 "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
                [[d.coordinator_id, d.transactional_id, d.producer_id, d.producer_epoch, d.state, d.timeout_ms,
                  start, duration, partitions]],
            )
        elif command == "describe-producers":
            producers = tool.describe_producers(args.topic, args.partition)
            lines = table(
                ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                 "CurrentTransactionStartOffset"],
                [[p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp_ms,
                  p.current_txn_start_offset if p.current_txn_start_offset >= 0 else "None"] for p in producers],
            )
        else:
            producer_id, producer_epoch, coordinator_epoch = tool.abort(
                args.topic, args.partition, start_offset=args.start_offset, producer_id=args.producer_id,
                producer_epoch=args.producer_epoch, coordinator_epoch=args.coordinator_epoch,
            )
            lines = [
                f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}, coordinator epoch "
                f"{coordinator_epoch}) on {args.topic}-{args.partition}."
            ]
        for line in lines:
            print(line)
        return 0
    except ToolError as exc:
        print(f"pybroker transactions: {exc}", file=sys.stderr)
        return 1
    finally:
        if tool is not None:
            tool.close()


def cmd_metadata_quorum(args) -> int:
    import time

    from broker.tools.client import ToolError
    from broker.tools.commands import settings_of
    from broker.tools.metadata_quorum import describe_quorum, format_replication, format_status

    bootstrap = args.bootstrap_controller or args.bootstrap_server
    try:
        response, cluster_id, cluster_id_error = describe_quorum(
            bootstrap, args.timeout, want_cluster_id=args.status, settings=settings_of(args)
        )
        if args.status:
            if cluster_id_error is not None:
                print(f"pybroker metadata-quorum: no cluster id: {cluster_id_error}", file=sys.stderr)
            lines = format_status(response, cluster_id)
        else:
            lines = format_replication(response, now_ms=int(time.time() * 1000), human_readable=args.human_readable)
    except ToolError as exc:
        print(f"pybroker metadata-quorum: {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0


def cmd_reassign(args) -> int:
    from broker.tools.client import ToolError
    from broker.tools.commands import settings_of
    from broker.tools.reassign import ReassignTool, parse_reassignment_json

    def fail(message: str) -> int:
        print(f"pybroker reassign: {message}", file=sys.stderr)
        return 2

    throttle = None
    if args.throttle is not None:
        try:
            throttle = int(args.throttle)
        except ValueError:
            throttle = -1
        if throttle < 0:
            return fail(f"--throttle: {args.throttle!r} is not a number of bytes per second >= 0")
        if not args.execute:
            return fail("--throttle goes with --execute (--verify removes the throttle once every move is completed)")
    paths = [p for p in (args.reassignment_json_file, args.file) if p is not None]
    if not paths:
        return fail("name the reassignment file with --reassignment-json-file FILE (or as the last argument)")
    if len(paths) == 2 and paths[0] != paths[1]:
        return fail(f"two reassignment files given: {paths[0]} and {paths[1]}")
    try:
        text = Path(paths[0]).read_text()
    except OSError as exc:
        return fail(f"cannot read {paths[0]}: {exc.strerror or exc}")
    tool = None
    try:
        moves = parse_reassignment_json(text)
        tool = ReassignTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        if args.execute:
            tool.execute(
                moves, lambda line: print(line, flush=True), additional=args.additional,
                allow_replication_factor_change=not args.disallow_replication_factor_change,
                throttle_bytes_per_s=throttle,
            )
            return 0
        if args.cancel:
            for line in tool.cancel(moves):
                print(line)
            return 0
        lines, done = tool.verify(moves)
        for line in lines:
            print(line)
        # On a terminal, how far the whole reassignment is, as a bar on stderr.
        from broker.tools.progress import progress

        completed = sum(1 for line in lines if line.endswith(" is completed."))
        with progress(len(moves), "reassigned", total_min=1, leave=True) as bar:
            bar.update(completed)
        return 0 if done else 1
    except ToolError as exc:
        return fail(str(exc))
    finally:
        if tool is not None:
            tool.close()


HEALTHCHECK_METADATA_VERSION = 9


def healthcheck(bootstrap: str, timeout_s: float, node_id: int | None, settings=None) -> str:
    """What the broker at ``bootstrap`` says about itself; ToolError when it is not healthy.

    Answering ApiVersions shows the process serves requests; listing itself in
    Metadata shows it is registered with the controller and unfenced (a broker
    still catching up on the metadata log, or fenced, is not listed). Metadata
    does not say which broker answered, so "itself" is ``node_id`` when known;
    otherwise the broker advertising the port it was reached on, or the only
    broker of a single-node cluster."""
    from broker.tools.groups import KafkaConnection, ToolError, parse_bootstrap
    from protocol.errors import ErrorCode

    host, port = parse_bootstrap(bootstrap)
    connection = KafkaConnection(host, port, timeout_s, settings)  # settings: --command-config (TLS, SASL)
    try:
        versions = connection.call("ApiVersions", 0)
        if versions.error_code != ErrorCode.NONE:
            raise ToolError(f"ApiVersions answered error code {versions.error_code}")
        metadata = connection.call(
            "Metadata", HEALTHCHECK_METADATA_VERSION, topics=[], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    finally:
        connection.close()
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
    if node_id is not None:
        me = [node_id] if node_id in brokers else []
        who = f"node {node_id}"
    else:
        me = [b.node_id for b in metadata.brokers if b.port == port]
        if not me and len(brokers) == 1:
            me = list(brokers)
        who = f"a broker on port {port}"
    if not me:
        listed = ", ".join(f"{i}={a}" for i, a in sorted(brokers.items())) or "none"
        raise ToolError(f"{host}:{port} answers but does not list {who} among the live brokers ({listed})")
    return f"{host}:{port} is healthy: node {me[0]} of cluster {metadata.cluster_id}, {len(brokers)} live broker(s)"


def cmd_healthcheck(args) -> int:
    from broker.tools.groups import ToolError

    node_id = args.node_id
    if node_id is None and os.environ.get("KAFKA_NODE_ID", "").strip().isdigit():
        # Inside the container the node's variables are set: its id is known.
        node_id = int(os.environ["KAFKA_NODE_ID"])
    try:
        from broker.tools.commands import settings_of

        line = healthcheck(args.bootstrap_server, args.timeout, node_id, settings_of(args))
    except ToolError as exc:
        print(f"pybroker healthcheck: {exc}", file=sys.stderr)
        return 1
    print(line)
    return 0


def _storage_dirs(config) -> list[Path]:
    """Every directory a node keeps data in: its log dirs and the metadata log dir."""
    return list(dict.fromkeys([*config.log_dirs, config.metadata_log_dir]))


def cmd_storage(args) -> int:
    from controller.metadata.bootstrap import (
        BOOTSTRAP_FILE,
        BootstrapError,
        feature_records,
        scram_records,
        write_bootstrap_file,
    )
    from protocol.scram import ScramMechanism
    from storage.meta_properties import check_cluster_id, describe_storage, format_storage, new_cluster_id

    if args.storage_command == "random-uuid":
        print(new_cluster_id())
        return 0
    try:
        config = load_config_file(Path(args.config))
        if args.storage_command == "info":
            return _print_storage_info(config, describe_storage(_storage_dirs(config), config.node_id))
        cluster_id = check_cluster_id(args.cluster_id)
        if config["cluster.id"] is not None and config["cluster.id"] != cluster_id:
            raise ConfigError(f"cluster.id: the config says {config['cluster.id']}, not --cluster-id {cluster_id}")
        if args.standalone:
            _check_standalone(config)
        # --add-scram and --feature: parsed (and the passwords salted) before anything is written.
        features = feature_records(args.feature or [])
        scram = scram_records(args.add_scram or [])
        bootstrap = features + scram
        metadata_dir = Path(config.metadata_log_dir)

        def write_bootstrap(directory: Path) -> None:
            if bootstrap and directory == metadata_dir:
                write_bootstrap_file(directory, bootstrap)

        outcome = format_storage(
            _storage_dirs(config),
            config.node_id,
            cluster_id,
            ignore_formatted=args.ignore_formatted,
            before_meta_properties=write_bootstrap,
        )
    except (ConfigError, MetaPropertiesError, BootstrapError) as exc:
        print(f"pybroker storage: {exc}", file=sys.stderr)
        return 1
    for directory, what in outcome:
        if what == "formatted":
            print(f"Formatting {directory} with cluster.id {cluster_id} and node.id {config.node_id}")
            if scram and directory == metadata_dir:
                users = ", ".join(f"{r.name} ({ScramMechanism.for_type_code(r.mechanism).value})" for r in scram)
                print(f"Bootstrap metadata in {directory / BOOTSTRAP_FILE}: SCRAM credentials of {users}")
            if features and directory == metadata_dir:
                levels = ", ".join(f"{r.name}={r.feature_level}" for r in features)
                print(f"Bootstrap metadata in {directory / BOOTSTRAP_FILE}: feature levels {levels}")
        else:
            print(f"{directory} is already formatted; left as it is")
    if bootstrap and "controller" not in config.roles:
        # As kafka-storage.sh, accepted on any node; only a controller ever reads it.
        print(
            "pybroker storage: note: process.roles has no controller, so this node never applies its --add-scram "
            "credentials or --feature levels; format the controllers with them",
            file=sys.stderr,
        )
    return 0


def _check_standalone(config) -> None:
    """Kafka's --standalone makes this controller the one voter of a new dynamic
    quorum. pybroker's voter set is static, so the flag is only accepted where
    the config already describes that quorum of one."""
    if "controller" not in config.roles:
        raise ConfigError("--standalone: process.roles has no controller, and only a controller can be a voter")
    if set(config.quorum_voters) != {config.node_id}:
        raise ConfigError(
            "--standalone: pybroker's quorum is the static controller.quorum.voters, which must then name this "
            f"node only (node.id {config.node_id}), not {sorted(config.quorum_voters)}"
        )


def _print_storage_info(config, described) -> int:
    found, problems = described
    for directory, values in found:
        if values is None:
            print(f"{directory}: not formatted")
        else:
            fields = ", ".join(f"{key}={values[key]}" for key in sorted(values))
            print(f"{directory}: {fields}")
    if problems:
        print("Problems:")
        for problem in problems:
            print(f"  {problem}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    from broker.tools.cli_common import exit_quietly_on_broken_pipe

    # `pybroker ... | head`: a closed stdout ends the command quietly (exit code 141).
    return exit_quietly_on_broken_pipe(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    from broker.tools.cli_common import parse_args

    args = parse_args(build_parser(), argv)  # an unknown flag: the usage of the subcommand given it
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except (ConfigError, MetaPropertiesError, LogDirLocked, LogDirUnusable) as exc:
        # Start-up problems the user can fix: one line and the code of their
        # kind (START_EXIT_CODES), never a traceback.
        print(f"pybroker: {exc}", file=sys.stderr)
        return _exit_code_of(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    """``pybroker``'s parser with every subcommand (each has --version)."""
    from broker.tools.cli_common import add_version_flags
    from broker.tools.commands import COMMAND_CONFIG_HELP, add_describe_views, add_group_admin_options, add_type_option
    from broker.tools.commands import register as register_admin_commands

    parser = argparse.ArgumentParser(prog="pybroker", description="A Kafka-compatible broker.")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser(
        "start", help="run a broker", epilog=START_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    start.add_argument(
        "--config", "-c",
        help="a server.properties file (without it: the single-node defaults of configs/server.properties, "
        "data in ./data/kafka-logs)",
    )
    start.add_argument(
        "--override", "-o", action="append", metavar="KEY=VALUE", help="set a config key, overriding the file (repeatable)"
    )
    start.add_argument("--no-uvloop", action="store_true", help="use the standard asyncio event loop")
    start.set_defaults(func=cmd_start)
    dump = commands.add_parser(
        "dump-log",
        help="print .log, .index, .timeindex, .txnindex, .snapshot and checkpoint files (like kafka-dump-log.sh)",
        description="Print log segments, their indexes and checkpoint files in a readable form. "
        "Exit code: 0, 1 when a Mismatch or Corrupt line was printed, 2 when a file could not be dumped.",
    )
    dump.add_argument("files", nargs="+", metavar="FILE", help="files to dump")
    dump.add_argument(
        "--print-data-log",
        "-d",
        action="store_true",
        help="print keys and payloads of records (implies --deep-iteration)",
    )
    dump.add_argument("--deep-iteration", action="store_true", help="print a line per record, not only per batch")
    dump.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="the files are __consumer_offsets segments: print each record's key and payload decoded as JSON "
        "(offset commits: group, topic, partition, offset, leader epoch, metadata, commit timestamp; group "
        "metadata: protocol type, generation, protocol, leader, members); implies --print-data-log",
    )
    dump.add_argument(
        "--verify",
        "--verify-index-only",
        dest="verify",
        action="store_true",
        help="check CRCs, offsets and index entries instead of printing entries "
        "(add -d or --deep-iteration to print them too)",
    )
    dump.set_defaults(func=cmd_dump_log)
    groups = commands.add_parser(
        "groups",
        aliases=["consumer-groups"],
        help="list, describe, reset offsets of and delete consumer groups, classic and KIP-848 "
        "(like kafka-consumer-groups.sh)",
        description="Talks to a running broker; prints what kafka-consumer-groups.sh 4.x prints. 'list' (or --list) "
        "prints the group ids (with --type, their types, Classic or Consumer; with --state, their states); "
        "'describe GROUP' (or --describe --group GROUP, or "
        "--describe --all-groups) prints per partition the committed offset, log end offset, lag and owning member "
        "(--offsets, the default), or the members (--members; --verbose adds their epochs and current and target "
        "assignments), or the group's coordinator, assignor, state and member count (--state; --verbose adds the "
        "group and target assignment epochs). --reset-offsets (--group G | --all-groups) "
        "(--topic T[:P,..] | --all-topics) --to-earliest|--to-latest|--to-current|--to-offset N|--shift-by N|"
        "--to-datetime D|--by-duration PnDTnHnMnS (--dry-run | --execute) prints the new offsets (refused while the "
        "group has members; --export prints them as CSV); --delete (--group G | --all-groups) deletes groups; "
        "--delete-offsets --group G --topic T[:P] deletes "
        "committed offsets. Exit code: 0; 1 when the group does not exist or the broker refuses; 2 on usage or "
        "connection errors.",
    )
    groups.add_argument(
        "--bootstrap-server", default="localhost:9092", metavar="HOST:PORT", help="a broker to ask (default localhost:9092)"
    )
    groups.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS", help="socket timeout (default 15)")
    add_group_admin_options(groups)
    group_commands = groups.add_subparsers(dest="groups_command", required=False)
    group_list = group_commands.add_parser("list", help="list the groups")
    group_list.add_argument(
        "--state", nargs="*", metavar="STATE",
        help="show states; with names (Stable, Empty, ...), only groups in those states",
    )
    add_type_option(group_list)
    group_describe = group_commands.add_parser("describe", help="describe one group")
    group_describe.add_argument("group", metavar="GROUP")
    add_describe_views(group_describe, "describe_")
    groups.set_defaults(func=cmd_groups)
    from broker.tools.share_groups import add_parser as add_share_groups_parser

    add_share_groups_parser(commands)
    txns = commands.add_parser(
        "transactions",
        help="list and describe transactions, abort a hanging one (like kafka-transactions.sh)",
        description="Talks to running brokers. Exit code: 0, or 1 on errors.",
    )
    txns.add_argument(
        "--bootstrap-server", default="localhost:9092", metavar="HOST:PORT", help="a broker to ask (default localhost:9092)"
    )
    txns.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS", help="socket timeout (default 15)")
    txns.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    txn_commands = txns.add_subparsers(dest="transactions_command", required=True)
    txn_list = txn_commands.add_parser("list", help="the transactional ids every coordinator knows")
    txn_list.add_argument("--state", nargs="+", metavar="STATE", help="only these states (Ongoing, PrepareCommit, ...)")
    txn_list.add_argument(
        "--duration-filter", type=int, metavar="MS", help="only transactions running longer than this many milliseconds"
    )
    txn_describe = txn_commands.add_parser("describe", help="one transactional id's state at its coordinator")
    txn_describe.add_argument("--transactional-id", required=True, metavar="ID")
    txn_producers = txn_commands.add_parser(
        "describe-producers", help="the producers a partition's leader knows, with their open transactions"
    )
    txn_abort = txn_commands.add_parser(
        "abort", help="write an ABORT marker for a transaction left open on one partition"
    )
    for sub in (txn_producers, txn_abort):
        sub.add_argument("--topic", required=True)
        sub.add_argument("--partition", type=int, required=True)
    txn_abort.add_argument("--start-offset", type=int, metavar="OFFSET", help="the first offset of the open transaction")
    txn_abort.add_argument("--producer-id", type=int)
    txn_abort.add_argument("--producer-epoch", type=int)
    txn_abort.add_argument("--coordinator-epoch", type=int)
    txns.set_defaults(func=cmd_transactions)
    quorum = commands.add_parser(
        "metadata-quorum",
        help="describe the metadata quorum (like kafka-metadata-quorum.sh)",
        description="Asks the active controller, through a broker or a controller listener, for the quorum's "
        "leader, epoch, high watermark and each voter's and observer's progress. Exit code: 0, or 1 on errors.",
    )
    target = quorum.add_mutually_exclusive_group(required=True)
    target.add_argument("--bootstrap-server", metavar="HOST:PORT", help="a broker listener to ask")
    target.add_argument("--bootstrap-controller", metavar="HOST:PORT", help="a controller listener to ask")
    quorum.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS", help="socket timeout (default 15)")
    quorum.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    quorum_commands = quorum.add_subparsers(dest="quorum_command", required=True)
    quorum_describe = quorum_commands.add_parser("describe", help="print the quorum's state")
    shown = quorum_describe.add_mutually_exclusive_group(required=True)
    shown.add_argument(
        "--status", action="store_true", help="cluster id, leader, epoch, high watermark, lag, voters, observers"
    )
    shown.add_argument("--replication", action="store_true", help="one row per voter and observer")
    quorum_describe.add_argument(
        "--human-readable", action="store_true", help="with --replication: timestamps as 'N ms ago'"
    )
    quorum.set_defaults(func=cmd_metadata_quorum)
    reassign = commands.add_parser(
        "reassign",
        help="move partitions to other brokers, check or cancel the moves (like kafka-reassign-partitions.sh)",
        description="The reassignment file is Kafka's JSON: "
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3,4]}]} '
        '("log_dirs" only as "any"). --execute prints the current assignment (save it to roll back) and starts '
        "the moves; --verify tells per partition whether its move is completed; --cancel sends the partitions "
        "back to their original replicas. Exit code: 0; 1 when --verify finds a move not completed; 2 on errors.",
    )
    reassign.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="a broker to ask")
    action = reassign.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true", help="start the reassignments of the file")
    action.add_argument("--verify", action="store_true", help="report whether they are completed")
    action.add_argument("--cancel", action="store_true", help="cancel those still running")
    reassign.add_argument("--reassignment-json-file", metavar="FILE", help="the reassignment file")
    reassign.add_argument("file", nargs="?", metavar="FILE", help="the reassignment file (instead of the option)")
    reassign.add_argument(
        "--additional", action="store_true", help="with --execute: start even while other reassignments run"
    )
    reassign.add_argument(
        "--disallow-replication-factor-change", action="store_true",
        help="with --execute: refuse moves that change a partition's replica count (KIP-860)",
    )
    reassign.add_argument(
        "--throttle", metavar="BYTES_PER_SECOND",
        help="with --execute: limit the moves' replication to this many bytes/s (leader and follower "
        "throttles); --verify removes it once every move is completed",
    )
    reassign.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS", help="socket timeout (default 30)")
    reassign.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    reassign.set_defaults(func=cmd_reassign)
    health = commands.add_parser(
        "healthcheck",
        help="exit 0 when a broker answers and lists itself among the live brokers (for HEALTHCHECK)",
        description="Sends ApiVersions, then Metadata, and checks that the broker is among the brokers it lists "
        "(registered and not fenced). The node is --node-id, else KAFKA_NODE_ID, else the broker advertising the "
        "port it was reached on (or the only broker). Exit code: 0 when healthy, 1 otherwise (one line on stderr).",
    )
    health.add_argument(
        "--bootstrap-server", default="localhost:9092", metavar="HOST:PORT", help="the broker (default localhost:9092)"
    )
    health.add_argument("--node-id", type=int, metavar="ID", help="the broker's node.id (default: KAFKA_NODE_ID)")
    health.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="socket timeout (default 5)")
    health.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    health.set_defaults(func=cmd_healthcheck)
    storage = commands.add_parser(
        "storage",
        help="format log directories for a cluster, or show how they are formatted (like kafka-storage.sh)",
        description="'format' writes meta.properties with the cluster id and node.id into every log dir and the "
        "metadata log dir; every node of a cluster is formatted with the same cluster id before it first starts. "
        "'info' prints what is formatted; 'random-uuid' prints a new cluster id. Exit code: 0, or 1 on errors.",
    )
    storage_commands = storage.add_subparsers(dest="storage_command", required=True)
    storage_format = storage_commands.add_parser("format", help="write meta.properties into the node's directories")
    storage_format.add_argument("--config", "-c", required=True, help="the node's server.properties file")
    storage_format.add_argument(
        "--cluster-id", "-t", required=True, metavar="ID", help="the cluster id (22 characters, see random-uuid)"
    )
    storage_format.add_argument(
        "--ignore-formatted", "-g", action="store_true", help="leave already formatted directories alone, format the rest"
    )
    storage_format.add_argument(
        "--standalone", "-s", action="store_true", help="check that this controller is the quorum's only voter"
    )
    storage_format.add_argument(
        "--add-scram",
        "-S",
        action="append",
        metavar="SCRAM_CREDENTIAL",
        help="a SCRAM credential the quorum starts with (repeatable; controllers apply it to a new metadata log), "
        "e.g. 'SCRAM-SHA-256=[name=alice,password=alice-secret]' or "
        "'SCRAM-SHA-512=[name=alice,iterations=8192,salt=\"N3E=\",saltedpassword=\"YCE=\"]'",
    )
    storage_format.add_argument(
        "--feature",
        "-f",
        action="append",
        metavar="NAME=LEVEL",
        help="a feature level a new cluster finalizes instead of the default (repeatable), e.g. group.version=0; "
        "see 'pybroker features describe' for the supported levels",
    )
    storage_info = storage_commands.add_parser("info", help="print each directory's meta.properties")
    storage_info.add_argument("--config", "-c", required=True, help="the node's server.properties file")
    storage_commands.add_parser("random-uuid", help="print a new cluster id")
    storage.set_defaults(func=cmd_storage)
    register_admin_commands(commands)
    from broker.tools.dev_cluster import register as register_dev_cluster

    register_dev_cluster(commands)
    add_version_flags(parser)
    return parser


def _exit_code_of(exc: Exception) -> int:
    from broker.app import ListenerUnavailable

    if isinstance(exc, ListenerUnavailable):  # a ConfigError too: checked first
        return EXIT_LISTENER
    if isinstance(exc, (MetaPropertiesError, LogDirLocked, LogDirUnusable)):
        return EXIT_STORAGE
    return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
