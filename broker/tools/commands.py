"""The admin subcommands of ``pybroker`` (topics, configs, console-producer,
console-consumer, get-offsets, delete-records) and the options every tool
shares: ``--bootstrap-server``, ``--command-config FILE`` and ``--timeout``.

broker/cli.py calls :func:`register` with its subparsers; each ``cmd_*``
returns the exit code. Errors are one line on stderr, ``pybroker <command>:
<what was wrong>``, with exit code 1 when the broker refused or the named
thing does not exist and 2 for usage and connection problems (the
``exit_code`` of the ToolError raised).

A little past 700 lines: the parsers of every admin subcommand sit together so
that their shared options read alike; the tools move into their own
sub-package with the broker's layout change, which splits this file by tool.
"""

from __future__ import annotations

import argparse
import json
import sys

from broker.tools.client import ToolError

# Shared with the tools registered elsewhere (broker/tools/acls.py), so they need not import this module.
from broker.tools.options import COMMAND_CONFIG_HELP, EXIT_CODES, add_client_options, settings_of


def _fail(command: str, exc: ToolError) -> int:
    print(f"pybroker {command}: {exc}", file=sys.stderr)
    return exc.exit_code


def _print_json(value) -> None:
    print(json.dumps(value, sort_keys=False))


# --------------------------------------------------------------------- topics


def cmd_topics(args) -> int:
    from broker.tools.client import Refused
    from broker.tools.topics import (
        PARTITION_FILTERS,
        TopicsTool,
        describe_json,
        describe_lines,
        list_json,
        parse_configs,
        parse_replica_assignment,
        parse_uuid,
    )

    tool = None
    try:
        if args.output == "json" and not (args.list or args.describe):
            raise ToolError("--output json goes with --list or --describe")
        assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None
        configs = parse_configs(args.config)
        if configs and not args.create:
            raise ToolError("--config goes with --create (change a topic's configs with pybroker configs --alter)")
        if args.topics_with_overrides and not args.describe:
            raise ToolError("--topics-with-overrides goes with --describe")
        topic_id = parse_uuid(args.topic_id) if args.topic_id else None
        tool = TopicsTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        if args.create:
            if not args.topic:
                raise ToolError("--create needs --topic")
            if tool.create(args.topic, args.partitions, args.replication_factor, assignment, configs, args.if_not_exists):
                if "." in args.topic or "_" in args.topic:
                    print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
                          "could collide. To avoid issues it is best to use either, but not both.")
                print(f"Created topic {args.topic}.")
            return 0
        if args.list:
            metadata = tool.matching(args.topic, args.exclude_internal, True, listing=True)
            if args.output == "json":
                _print_json(list_json(metadata))
            else:
                for name in metadata.topics:
                    print(name)
            return 0
        if args.describe:
            metadata = tool.matching(args.topic, args.exclude_internal, args.if_exists, topic_id=topic_id)
            tool.load_configs(list(metadata.topics.values()))
            wanted = {name for name in PARTITION_FILTERS if getattr(args, name)}
            if args.output == "json":
                _print_json(describe_json(metadata, wanted, args.topics_with_overrides))
            else:
                for line in describe_lines(metadata, wanted, args.topics_with_overrides):
                    print(line)
            return 0
        if not args.topic:
            raise ToolError(f"--{'alter' if args.alter else 'delete'} needs --topic")
        metadata = tool.matching(args.topic, False, args.if_exists)
        if args.alter:
            if args.partitions is None:
                raise ToolError("--alter needs --partitions (the new number of partitions)")
            if metadata.topics:
                tool.alter_partitions(metadata, args.partitions, assignment)
            return 0
        internal = [t.name for t in metadata.topics.values() if t.internal]
        if internal:
            raise Refused(f"internal topics cannot be deleted: {', '.join(internal)}")
        if metadata.topics:
            tool.delete(list(metadata.topics))
        return 0
    except ToolError as exc:
        return _fail("topics", exc)
    finally:
        if tool is not None:
            tool.close()


def _register_topics(commands) -> None:
    topics = commands.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics (like kafka-topics.sh)",
        description="Exactly one of --create, --list, --describe, --alter, --delete. --topic is a regular "
        "expression (whole name; commas separate alternatives) except with --create. " + EXIT_CODES,
    )
    add_client_options(topics)
    action = topics.add_mutually_exclusive_group(required=True)
    for flag, text in (
        ("--create", "create a topic"), ("--list", "list topic names"), ("--describe", "describe topics"),
        ("--alter", "add partitions to topics"), ("--delete", "delete topics"),
    ):
        action.add_argument(flag, action="store_true", help=text)
    topics.add_argument("--topic", metavar="TOPIC", help="the topic (a regular expression for list/describe/alter/delete)")
    topics.add_argument("--topic-id", metavar="ID", help="with --describe: the topic of this id")
    topics.add_argument("--partitions", type=int, metavar="N", help="partitions (create: default the broker's num.partitions)")
    topics.add_argument(
        "--replication-factor", type=int, metavar="N", help="replicas per partition (default the broker's default)"
    )
    topics.add_argument(
        "--replica-assignment", metavar="B:B,B:B",
        help="per partition, colon-separated broker ids, partitions separated by commas (e.g. 0:1,1:2)",
    )
    topics.add_argument("--config", action="append", metavar="KEY=VALUE", help="with --create: a topic config (repeatable)")
    topics.add_argument("--if-exists", action="store_true", help="alter/delete/describe: no error when no topic matches")
    topics.add_argument("--if-not-exists", action="store_true", help="create: no error when the topic exists")
    topics.add_argument("--exclude-internal", action="store_true", help="list/describe: leave out internal topics")
    topics.add_argument(
        "--under-replicated-partitions", action="store_true", help="describe: only partitions whose ISR is smaller than their replicas"
    )
    topics.add_argument(
        "--unavailable-partitions", action="store_true", help="describe: only partitions without a live leader"
    )
    topics.add_argument(
        "--under-min-isr-partitions", action="store_true", help="describe: only partitions whose ISR < min.insync.replicas"
    )
    topics.add_argument(
        "--at-min-isr-partitions", action="store_true", help="describe: only partitions whose ISR = min.insync.replicas"
    )
    topics.add_argument(
        "--topics-with-overrides", action="store_true",
        help="describe: only topics with configs not at their default, without their partitions",
    )
    topics.add_argument("--output", choices=("text", "json"), default="text", help="list/describe: text (default) or json")
    topics.set_defaults(func=cmd_topics)


# --------------------------------------------------------------------- configs


def cmd_configs(args) -> int:
    from broker.tools.configs import (
        QUOTA_ENTITY_TYPES,
        ConfigsTool,
        config_lines,
        configs_json,
        is_scram_key,
        split_config_list,
        split_names,
    )

    tool = None
    entity_type = args.entity_type
    name = None if args.entity_default else args.entity_name
    try:
        if args.entity_default and args.entity_name is not None:
            raise ToolError("give --entity-name or --entity-default, not both")
        if args.entity_default and entity_type == "topics":
            raise ToolError("--entity-default is for brokers, users, clients and ips, not topics")
        if args.output == "json" and not args.describe:
            raise ToolError("--output json goes with --describe")
        add = split_config_list(",".join(args.add_config or []))
        delete = split_names(args.delete_config)
        tool = ConfigsTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        if args.alter:
            if not add and not delete:
                raise ToolError("--alter needs --add-config and/or --delete-config")
            if name is None and not args.entity_default:
                raise ToolError("--alter needs --entity-name (or --entity-default)")
            if entity_type in QUOTA_ENTITY_TYPES:
                scram_add = [(k, v) for k, v in add if is_scram_key(k)]
                scram_delete = [k for k in delete if is_scram_key(k)]
                if (scram_add or scram_delete) and entity_type != "users":
                    raise ToolError("SCRAM credentials belong to users (--entity-type users)")
                if (scram_add or scram_delete) and name is None:
                    raise ToolError("SCRAM credentials need a user name (--entity-name)")
                quota_add = [(k, v) for k, v in add if not is_scram_key(k)]
                quota_delete = [k for k in delete if not is_scram_key(k)]
                if quota_add or quota_delete:
                    tool.alter_quotas(entity_type, name, quota_add, quota_delete)
                if scram_add or scram_delete:
                    tool.alter_scram(name, scram_add, scram_delete)
            else:
                tool.alter_configs(entity_type, name, add, delete)
            if name is None:
                print(f"Completed updating default config for {entity_type} in the cluster.")
            else:
                print(f"Completed updating config for {entity_type[:-1]} {name}.")
            return 0
        if entity_type in QUOTA_ENTITY_TYPES:
            return _describe_quota_entities(tool, args, entity_type, name)
        names = [name] if (name is not None or args.entity_default) else tool.entity_names(entity_type)
        described = tool.describe_configs(entity_type, names, args.all)
        if args.output == "json":
            _print_json(configs_json(described))
        else:
            for entry in described:
                for line in config_lines(entry):
                    print(line)
        errors = [d for d in described if d.error is not None]
        for d in errors:
            print(f"pybroker configs: {d.entity_type[:-1]} {d.entity_name or '(default)'}: {d.error}", file=sys.stderr)
        return 1 if errors else 0
    except ToolError as exc:
        return _fail("configs", exc)
    finally:
        if tool is not None:
            tool.close()


def _describe_quota_entities(tool, args, entity_type: str, name: str | None) -> int:
    quotas = []
    if entity_type == "users" and not tool.supports("DescribeClientQuotas"):
        # Users have SCRAM credentials too: say what is missing and show those.
        print("pybroker configs: the broker does not serve DescribeClientQuotas (client quotas): no quotas shown",
              file=sys.stderr)
    else:
        quotas = tool.describe_quotas(entity_type, name, args.entity_default)
    scram = tool.describe_scram(name) if entity_type == "users" and not args.entity_default else []
    if args.output == "json":
        _print_json({
            "quotas": [{"entity": entity, "values": values} for entity, values in quotas],
            "scram_credentials": [
                {"user": user, "credentials": [{"mechanism": m, "iterations": i} for m, i in infos]} for user, infos in scram
            ],
        })
        return 0
    for entity, values in quotas:
        print(f"Quota configs for {entity} are {', '.join(f'{k}={v}' for k, v in sorted(values.items()))}")
    for user, infos in scram:
        print(f"SCRAM credential configs for user-principal '{user}' are "
              f"{', '.join(f'{m}=iterations={i}' for m, i in infos)}")
    return 0


def _register_configs(commands) -> None:
    configs = commands.add_parser(
        "configs",
        help="describe and alter topic/broker configs, client quotas and SCRAM users (like kafka-configs.sh)",
        description="--describe prints the dynamic configs (all of them with --all) of topics or brokers, the "
        "quotas and SCRAM credentials of users/clients, or the connection_creation_rate quotas of ips; --alter sets (--add-config k=v,k2=[a,b]) and removes "
        "(--delete-config k) them. Users' SCRAM credentials: --add-config "
        "'SCRAM-SHA-256=[iterations=8192,password=secret]', --delete-config SCRAM-SHA-256. " + EXIT_CODES,
    )
    add_client_options(configs)
    action = configs.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show configs")
    action.add_argument("--alter", action="store_true", help="change configs")
    configs.add_argument("--entity-type", required=True, choices=("topics", "brokers", "users", "clients", "ips"))
    configs.add_argument("--entity-name", metavar="NAME", help="the topic, broker id, user, client id or IP address")
    configs.add_argument(
        "--entity-default", action="store_true", help="the cluster-wide default (brokers, users, clients, ips)"
    )
    configs.add_argument("--add-config", action="append", metavar="K=V,K2=[A,B]", help="configs to set")
    configs.add_argument("--delete-config", action="append", metavar="K,K2", help="configs to remove")
    configs.add_argument("--all", action="store_true", help="with --describe: every config, not only dynamic ones")
    configs.add_argument("--output", choices=("text", "json"), default="text", help="--describe: text (default) or json")
    configs.set_defaults(func=cmd_configs)




# --------------------------------------------------------------------- console producer / consumer


def cmd_console_producer(args) -> int:
    from broker.tools.console import ACKS, CODECS, ConsoleProducer, LineFormat, parse_properties, produce_lines

    producer = None
    try:
        props = parse_properties(args.property, "--property")
        producer_props = parse_properties(args.producer_property, "--producer-property")
        acks_text = str(producer_props.get("acks", args.request_required_acks)).strip().lower()
        if acks_text not in ACKS:
            raise ToolError(f"acks: expected all, -1, 1 or 0, got {acks_text!r}")
        codec_name = (args.compression_codec or producer_props.get("compression.type", "none")).lower()
        if codec_name not in CODECS:
            raise ToolError(f"--compression-codec: expected one of {', '.join(CODECS)}, got {codec_name!r}")
        linger_ms = int(producer_props.get("linger.ms", 1000))
        batch_bytes = int(producer_props.get("batch.size", 16384))
        producer = ConsoleProducer(
            args.bootstrap_server, args.topic, acks=ACKS[acks_text], codec=CODECS[codec_name], timeout_s=args.timeout,
            settings=settings_of(args),
        )
        produce_lines(producer, sys.stdin.fileno(), LineFormat.from_properties(props), sync=args.sync,
                      linger_ms=linger_ms, batch_bytes=batch_bytes)
        return 0
    except ValueError as exc:
        return _fail("console-producer", ToolError(f"--producer-property: {exc}"))
    except ToolError as exc:
        return _fail("console-producer", exc)
    except KeyboardInterrupt:
        return 130
    finally:
        if producer is not None:
            producer.close()


def cmd_console_consumer(args) -> int:
    from broker.tools.console import ConsoleConsumer, OutputFormat, consume, parse_properties

    consumer = None
    total = 0
    try:
        if args.group and args.partition is not None:
            raise ToolError("--group and --partition cannot be given together")
        if args.offset is not None and args.partition is None:
            raise ToolError("--offset needs --partition")
        if args.offset is not None and args.from_beginning:
            raise ToolError("--offset and --from-beginning cannot be given together")
        start = args.offset or ("earliest" if args.from_beginning else "latest")
        if start not in ("earliest", "latest") and not start.lstrip("-").isdigit():
            raise ToolError(f"--offset: expected a number, earliest or latest, got {start!r}")
        if start.startswith("-"):
            raise ToolError(f"--offset: {start} is negative")
        props = parse_properties(args.property, "--property")
        consumer_props = parse_properties(args.consumer_property, "--consumer-property")
        output = OutputFormat.from_properties(props)
        consumer = ConsoleConsumer(
            args.bootstrap_server, args.topic, isolation_level=1 if args.isolation_level == "read_committed" else 0,
            reset_earliest=args.from_beginning or consumer_props.get("auto.offset.reset") == "earliest",
            timeout_s=args.timeout, settings=settings_of(args),
        )
        metadata = consumer.refresh()
        group_args = None
        if args.group:
            group_args = (args.group, int(consumer_props.get("session.timeout.ms", 45000)))
            consumer.join(*group_args)
        else:
            partitions = [p.partition for p in metadata.topics[args.topic].partitions]
            if args.partition is not None:
                if args.partition not in partitions:
                    raise ToolError(f"--partition {args.partition}: topic {args.topic!r} has partitions 0-{len(partitions) - 1}")
                partitions = [args.partition]
            consumer.start_at(partitions, start)
        total = consume(consumer, sys.stdout.buffer, output, max_messages=args.max_messages,
                        timeout_ms=args.timeout_ms, group_args=group_args)
        return 0
    except ValueError as exc:
        return _fail("console-consumer", ToolError(f"--consumer-property: {exc}"))
    except ToolError as exc:
        return _fail("console-consumer", exc)
    finally:
        if consumer is not None:
            consumer.leave()
            consumer.close()
            print(f"Processed a total of {total} messages", file=sys.stderr)


def _register_console(commands) -> None:
    producer = commands.add_parser(
        "console-producer",
        help="send stdin lines as records (like kafka-console-producer.sh)",
        description="One record per line of standard input, batched (--sync: one at a time). --property "
        "parse.key=true key.separator=SEP parse.headers=true headers.delimiter=SEP headers.separator=, "
        "headers.key.separator=: null.marker=M. " + EXIT_CODES,
    )
    add_client_options(producer)
    producer.add_argument("--topic", required=True)
    producer.add_argument("--property", action="append", metavar="KEY=VALUE", help="line parsing (repeatable)")
    producer.add_argument(
        "--producer-property", action="append", metavar="KEY=VALUE",
        help="acks (all, 1, 0), linger.ms, batch.size, compression.type (repeatable)",
    )
    producer.add_argument("--request-required-acks", default="all", metavar="ACKS", help="acks (default all)")
    producer.add_argument(
        "--compression-codec", nargs="?", const="gzip", metavar="CODEC",
        help="none, gzip (when given without a value), snappy, lz4 or zstd",
    )
    producer.add_argument("--sync", action="store_true", help="send each line on its own and wait for it")
    producer.set_defaults(func=cmd_console_producer)
    consumer = commands.add_parser(
        "console-consumer",
        help="print records, one value a line (like kafka-console-consumer.sh)",
        description="Prints each record's value on a line (stdout), optionally prefixed as --property says: "
        "print.timestamp, print.partition, print.offset, print.headers, print.key (=true), key.separator, "
        "line.separator, headers.separator, headers.key.separator, null.literal, print.value=false. Ends after "
        "--max-messages, after --timeout-ms without a record, or on Ctrl-C; then prints 'Processed a total of N "
        "messages' on stderr. " + EXIT_CODES,
    )
    add_client_options(consumer)
    consumer.add_argument("--topic", required=True)
    consumer.add_argument("--partition", type=int, metavar="P", help="only this partition")
    consumer.add_argument("--offset", metavar="OFFSET", help="with --partition: a number, earliest or latest")
    consumer.add_argument("--from-beginning", action="store_true", help="start at the earliest offset (default: the end)")
    consumer.add_argument("--group", metavar="GROUP", help="join this consumer group and commit what is printed")
    consumer.add_argument("--max-messages", type=int, metavar="N", help="stop after N records")
    consumer.add_argument("--timeout-ms", type=int, metavar="MS", help="stop when no record came for MS milliseconds")
    consumer.add_argument(
        "--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted",
        help="read_committed: only committed transactional records",
    )
    consumer.add_argument("--property", action="append", metavar="KEY=VALUE", help="output format (repeatable)")
    consumer.add_argument(
        "--consumer-property", action="append", metavar="KEY=VALUE",
        help="auto.offset.reset, session.timeout.ms (repeatable)",
    )
    consumer.set_defaults(func=cmd_console_consumer)


# --------------------------------------------------------------------- get-offsets / delete-records


def cmd_get_offsets(args) -> int:
    from broker.tools.offsets import OffsetsTool, parse_partitions, parse_time

    tool = None
    try:
        timestamp = parse_time(args.time)
        partitions = parse_partitions(args.partitions)
        tool = OffsetsTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        for topic, partition, offset in tool.get_offsets(args.topic, partitions, timestamp, args.exclude_internal_topics):
            print(f"{topic}:{partition}:{offset if offset >= 0 else ''}")
        return 0
    except ToolError as exc:
        return _fail("get-offsets", exc)
    finally:
        if tool is not None:
            tool.close()


def cmd_delete_records(args) -> int:
    from broker.tools.offsets import OffsetsTool, parse_offset_json

    tool = None
    try:
        try:
            with open(args.offset_json_file, encoding="utf-8") as file:
                text = file.read()
        except OSError as exc:
            raise ToolError(f"cannot read {args.offset_json_file}: {exc.strerror or exc}") from None
        wanted = parse_offset_json(text)
        tool = OffsetsTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        print("Executing records delete operation")
        results = tool.delete_records(wanted)
        print("Records delete operation completed:")
        for topic, partition, low_watermark, error in results:
            if error is None:
                print(f"partition: {topic}-{partition}\tlow_watermark: {low_watermark}")
            else:
                print(f"partition: {topic}-{partition}\terror: {error}")
        return 1 if any(error is not None for *_, error in results) else 0
    except ToolError as exc:
        return _fail("delete-records", exc)
    finally:
        if tool is not None:
            tool.close()


def _register_offsets(commands) -> None:
    offsets = commands.add_parser(
        "get-offsets",
        help="print topic:partition:offset for a time (like kafka-get-offsets.sh)",
        description="--time -1/latest (log end offset, the default), -2/earliest (log start offset), "
        "-3/max-timestamp (the record with the largest timestamp) or milliseconds since the epoch (the first "
        "record at or after it; nothing after the last colon when there is none). " + EXIT_CODES,
    )
    add_client_options(offsets)
    offsets.add_argument("--topic", metavar="REGEX", help="topics (a regular expression; default all)")
    offsets.add_argument("--partitions", metavar="LIST", help="partition ids and ranges, e.g. 0,2-4 (default all)")
    offsets.add_argument("--time", default="-1", metavar="TIME", help="-1, -2, -3, latest, earliest, max-timestamp or ms")
    offsets.add_argument("--exclude-internal-topics", action="store_true", help="leave out internal topics")
    offsets.set_defaults(func=cmd_get_offsets)
    delete = commands.add_parser(
        "delete-records",
        help="delete records up to offsets (like kafka-delete-records.sh)",
        description='The file is Kafka\'s: {"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1} '
        "(offset -1: up to the high watermark). Prints each partition's new low watermark or its error; "
        "exit code 1 when any partition failed. " + EXIT_CODES,
    )
    add_client_options(delete)
    delete.add_argument("--offset-json-file", required=True, metavar="FILE", help="the partitions and offsets")
    delete.set_defaults(func=cmd_delete_records)


# --------------------------------------------------------------------- groups: Kafka's flag spellings


def add_group_admin_options(groups: argparse.ArgumentParser) -> None:
    """kafka-consumer-groups.sh's flags on ``pybroker groups`` (beside its list/describe subcommands)."""
    groups.add_argument("--command-config", metavar="FILE", help=COMMAND_CONFIG_HELP)
    action = groups.add_mutually_exclusive_group()
    action.add_argument("--list", dest="list_groups", action="store_true", help="list the groups (as 'list')")
    action.add_argument("--describe", dest="describe_group", action="store_true", help="describe --group (as 'describe')")
    action.add_argument("--reset-offsets", action="store_true", help="reset an inactive group's committed offsets")
    action.add_argument("--delete", dest="delete_groups", action="store_true", help="delete --group groups")
    action.add_argument("--delete-offsets", action="store_true", help="delete a group's offsets of --topic")
    groups.add_argument(
        "--state", nargs="*", metavar="STATE",
        help="with --list: show states; with names (Stable,Empty,...), only groups in those states; "
        "with --describe (no names): the group's coordinator, assignor, state and member count",
    )
    add_type_option(groups)
    add_describe_views(groups, "")
    groups.add_argument("--group", action="append", metavar="GROUP", help="the group (repeatable with --describe, --delete)")
    groups.add_argument(
        "--all-groups", action="store_true", help="with --describe, --delete or --reset-offsets: every consumer group"
    )
    groups.add_argument("--topic", action="append", metavar="T[:P,...]", help="topic, or topic:partitions (repeatable)")
    groups.add_argument("--all-topics", action="store_true", help="reset: every topic the group has offsets for")
    spec = groups.add_mutually_exclusive_group()
    spec.add_argument("--to-earliest", action="store_true")
    spec.add_argument("--to-latest", action="store_true")
    spec.add_argument("--to-current", action="store_true")
    spec.add_argument("--to-offset", type=int, metavar="N")
    spec.add_argument("--shift-by", type=int, metavar="N")
    spec.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    spec.add_argument("--by-duration", metavar="PnDTnHnMnS")
    run = groups.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="reset: show the new offsets only (the default)")
    run.add_argument("--execute", action="store_true", help="reset: commit the new offsets")
    groups.add_argument(
        "--export", action="store_true",
        help="reset: print the new offsets as CSV lines, topic,partition,offset (group,topic,partition,offset "
        "unless one --group is given)",
    )


def add_type_option(parser: argparse.ArgumentParser) -> None:
    """kafka-consumer-groups.sh 4.x's ``--list --type [classic,consumer]``."""
    parser.add_argument(
        "--type", nargs="*", metavar="TYPE",
        help="with --list: show each group's type (Classic or Consumer); with names (classic,consumer), "
        "only groups of those types",
    )


def add_describe_views(parser: argparse.ArgumentParser, dest_prefix: str) -> None:
    """--offsets, --members, --verbose (and, on the ``describe`` subcommand, --state) of ``--describe``.
    ``dest_prefix`` keeps the subcommand's values apart from those given before it."""
    parser.add_argument("--offsets", dest=dest_prefix + "offsets", action="store_true",
                        help="with --describe: a row per partition with its offsets and lag (the default)")
    parser.add_argument("--members", dest=dest_prefix + "members", action="store_true",
                        help="with --describe: a row per member")
    parser.add_argument("--verbose", dest=dest_prefix + "verbose", action="store_true",
                        help="with --describe: --members adds each member's epoch, current and target assignment; "
                        "--state the group and target assignment epochs; --offsets the leader epochs")
    if dest_prefix:
        parser.add_argument("--state", dest=dest_prefix + "state", action="store_true",
                            help="the group's coordinator, assignor, state and member count")


GROUP_STATES = {
    state.lower(): state
    for state in ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling")
}
# What kafka-consumer-groups.sh's --type takes (share groups have their own tool, as in Kafka).
GROUP_TYPES = ("classic", "consumer")


def group_usage_error(args) -> str | None:
    """What is wrong with how ``pybroker groups`` was called (kafka-consumer-groups.sh's rules), or None.

    Also settles ``args.describe_view`` (offsets, members or state) and ``args.verbose`` for --describe."""
    describing = args.describe_group or args.groups_command == "describe"
    views = [name for name in ("offsets", "members") if getattr(args, name) or getattr(args, "describe_" + name, False)]
    if args.groups_command == "describe" and args.describe_state:
        views.append("state")
    elif args.describe_group and args.state is not None:
        if args.state:
            return "--state takes no value with --describe"
        views.append("state")
    args.verbose = args.verbose or getattr(args, "describe_verbose", False)
    args.describe_view = views[0] if views else "offsets"
    if (views or args.verbose) and not describing:
        return "--offsets, --members, --state (without names) and --verbose go with --describe"
    if len(views) > 1:
        return "--describe takes at most one of --offsets, --members, --state"
    if args.export and not args.reset_offsets:
        return "--export goes with --reset-offsets"
    if args.all_groups:
        if not (describing or args.delete_groups or args.reset_offsets):
            return "--all-groups goes with --describe, --delete or --reset-offsets"
        if args.group or args.groups_command == "describe":
            return "give --group or --all-groups, not both"
    if args.describe_group and not args.group and not args.all_groups:
        return "--describe needs --group GROUP (repeatable) or --all-groups"
    listing = args.list_groups or args.groups_command == "list"
    if args.type is not None and not listing:
        return "--type goes with --list"
    if args.type:
        names = [name.strip().lower() for value in args.type for name in value.split(",") if name.strip()]
        unknown = [name for name in names if name not in GROUP_TYPES]
        if unknown:
            return f"--type: {', '.join(unknown)}: the types are {', '.join(GROUP_TYPES)}"
        args.type = sorted(set(names))
    if listing and args.state:
        # Kafka's --state stable,empty: names in any case, commas or spaces between them.
        names = [name.strip() for value in args.state for name in value.split(",") if name.strip()]
        unknown = [name for name in names if name.lower() not in GROUP_STATES]
        if unknown:
            return f"--state: {', '.join(unknown)}: the states are {', '.join(GROUP_STATES.values())}"
        args.state = [GROUP_STATES[name.lower()] for name in names]
    actions = args.list_groups or describing or args.reset_offsets or args.delete_groups or args.delete_offsets
    if not actions and args.groups_command is None:
        return ("give list, describe GROUP, --list, --describe, --reset-offsets, --delete or --delete-offsets")
    return None


def cmd_group_admin(args) -> int:
    """``groups --reset-offsets|--delete|--delete-offsets``."""
    from broker.tools.group_admin import (
        GroupAdmin,
        parse_datetime_ms,
        parse_duration_ms,
        parse_topic_partitions,
        reset_table,
    )

    tool = None
    try:
        groups = args.group or []
        if len(groups) != 1 and not args.delete_groups and not args.all_groups:
            raise ToolError("give one --group" + (" or --all-groups" if args.reset_offsets else ""))
        if not groups and not args.all_groups:
            raise ToolError("--delete needs --group or --all-groups")
        tool = GroupAdmin(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        if args.all_groups:
            groups = tool.consumer_group_ids()
        if args.delete_groups:
            results = tool.delete_groups(groups)
            failed = {g: e for g, e in results.items() if e is not None}
            if not failed:
                print(f"Deletion of requested consumer groups ({', '.join(repr(g) for g in groups)}) was successful.")
                return 0
            print("Deletion of some consumer groups failed:", file=sys.stderr)
            for group, error in failed.items():
                print(f"* Group '{group}' could not be deleted due to: {error}", file=sys.stderr)
            return 1
        topics = parse_topic_partitions(args.topic or [])
        if args.delete_offsets:
            if not topics:
                raise ToolError("--delete-offsets needs --topic")
            rows = tool.delete_offsets(groups[0], topics)
            print(f"Request succeed for deleting offsets with topic {', '.join(t for t, _ in topics)} group {groups[0]}")
            print()
            print(f"{'TOPIC':<30} {'PARTITION':<15} STATUS")
            for topic, partition, error in rows:
                print(f"{topic:<30} {partition:<15} {'Successful' if error is None else 'Error: ' + error}")
            return 1 if any(error is not None for *_, error in rows) else 0
        if bool(topics) == args.all_topics:
            raise ToolError("--reset-offsets needs --topic or --all-topics (one of them)")
        spec = _reset_spec(args, parse_datetime_ms, parse_duration_ms)
        if not args.dry_run and not args.execute:
            print("WARN: No action will be performed as the --execute option is missing. Add --dry-run to say so "
                  "explicitly, or --execute to commit the new offsets.", file=sys.stderr)
        return _reset_groups(tool, groups, topics, spec, args, reset_table)
    except ToolError as exc:
        return _fail("groups", exc)
    finally:
        if tool is not None:
            tool.close()


def _reset_groups(tool, groups: list[str], topics, spec, args, reset_table) -> int:
    """Resets each group's offsets; with --all-groups a group that cannot be reset (it has members)
    is reported and the others still are, as Kafka's tool does (exit code 1 then)."""
    from broker.tools.client import Refused

    rows, code = [], 0
    for group_id in groups:
        try:
            found = tool.reset_offsets(group_id, topics, args.all_topics, spec, execute=args.execute)
        except Refused as exc:
            if not args.all_groups:
                raise
            print(f"pybroker groups: {exc}", file=sys.stderr)
            code = exc.exit_code
            continue
        rows += [(group_id, t, p, o) for t, p, o in found]
    if args.export:
        # Kafka's CSV: without the group column when exactly one --group was named.
        single = not args.all_groups and len(args.group or []) == 1
        for group_id, topic, partition, offset in rows:
            print(f"{topic},{partition},{offset}" if single else f"{group_id},{topic},{partition},{offset}")
    else:
        for line in reset_table(rows):
            print(line)
    return code


def _reset_spec(args, parse_datetime_ms, parse_duration_ms) -> tuple[str, object]:
    if args.to_earliest:
        return ("to_earliest", None)
    if args.to_latest:
        return ("to_latest", None)
    if args.to_current:
        return ("to_current", None)
    if args.to_offset is not None:
        return ("to_offset", args.to_offset)
    if args.shift_by is not None:
        return ("shift_by", args.shift_by)
    if args.to_datetime is not None:
        return ("to_datetime", parse_datetime_ms(args.to_datetime))
    if args.by_duration is not None:
        return ("by_duration", parse_duration_ms(args.by_duration))
    raise ToolError("--reset-offsets needs one of --to-earliest, --to-latest, --to-current, --to-offset, "
                    "--shift-by, --to-datetime, --by-duration")


def register(commands) -> None:
    """Add the admin subcommands to ``pybroker``'s subparsers."""
    from broker.tools.acls import register as register_acls
    from broker.tools.balancer import register as register_balancer
    from broker.tools.cluster_links import register as register_cluster_links
    from broker.tools.features import register as register_features
    from broker.tools.leader_election import register as register_leader_election
    from broker.tools.schemas import register_command as register_schemas

    _register_topics(commands)
    _register_configs(commands)
    _register_console(commands)
    _register_offsets(commands)
    register_acls(commands)
    register_leader_election(commands)
    register_cluster_links(commands)
    register_schemas(commands)
    register_features(commands)
    register_balancer(commands)
