"""``pybroker leader-election`` (like kafka-leader-election.sh): ElectLeaders
through any broker, which forwards it to the active controller
(broker/handlers/elect_leaders.py, controller/leader_election.py).

- ``--election-type PREFERRED|UNCLEAN`` (any case): PREFERRED makes each
  partition's first replica its leader again where it is in the ISR and
  usable; UNCLEAN gives a partition without a leader one, out of the ISR if
  need be (data may be lost).
- The partitions: ``--all-topic-partitions`` (the request's null list; the
  controller answers only partitions where an election happened or failed),
  ``--topic T --partition P``, or ``--path-to-json-file F`` with Kafka's
  ``{"partitions": [{"topic": "t", "partition": 0}]}`` (a partition named
  twice is refused, as Kafka refuses it).
- Output, as Kafka's tool prints it (partitions as ``topic-partition``, here
  sorted): ``Successfully completed leader election (PREFERRED) for partitions
  t-0, t-1``, ``Valid replica already elected for partitions t-2`` (the
  controller's ELECTION_NOT_NEEDED), and one ``Error completing leader
  election (PREFERRED) for partition: t-3: ERROR_NAME: message`` line per
  failure, then ``N replica(s) could not be elected`` on stderr and exit code 1.
- NOT_CONTROLLER (a controller failover) is retried until ``--timeout``.
"""

from __future__ import annotations

import json
import sys
import time

from broker.tools.client import Refused, ToolClient, ToolError
from broker.tools.options import COMMAND_CONFIG_HELP, EXIT_CODES, settings_of
from broker.tools.topics import error_text
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

_REQUEST = struct_classes(APIS_BY_NAME["ElectLeaders"].request)

ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}
ELECT_LEADERS_VERSION = 1  # v1 has election_type and a top-level error code; v2 only adds tagged fields
ELECTION_TIMEOUT_MS = 30_000  # Kafka's tool gives the admin client 30 s
RETRY_BACKOFF_S = 0.2

TopicPartition = tuple[str, int]


def parse_election_type(text: str) -> int:
    try:
        return ELECTION_TYPES[text.strip().upper()]
    except KeyError:
        raise ToolError(f"--election-type: expected PREFERRED or UNCLEAN, got {text!r}") from None


def parse_election_json(text: str) -> list[TopicPartition]:
    """Kafka's replica election file: ``{"partitions": [{"topic": .., "partition": ..}]}``."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ToolError(f"the replica election file is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ToolError("Replica election data is empty")
    if "partitions" not in data:
        raise ToolError('Replica election data is missing "partitions" field')
    entries = data["partitions"]
    if not isinstance(entries, list):
        raise ToolError('"partitions" must be a list of {"topic": ..., "partition": ...}')
    partitions: list[TopicPartition] = []
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool):
            raise ToolError(f'each partition needs a "topic" string and a "partition" number, got {entry!r}')
        partitions.append((topic, partition))
    duplicates = sorted({p for p in partitions if partitions.count(p) > 1})
    if duplicates:
        named = ",".join(f"{t}-{p}" for t, p in duplicates)
        raise ToolError(f"Replica election data contains duplicate partitions: {named}")
    return partitions


def election_report(election_type: int, results: dict[TopicPartition, tuple[int, str | None]]) -> tuple[list[str], int]:
    """Kafka's lines for the results, and how many partitions failed."""
    name = next(k for k, v in ELECTION_TYPES.items() if v == election_type)
    succeeded = sorted(tp for tp, (error, _) in results.items() if error == ErrorCode.NONE)
    noop = sorted(tp for tp, (error, _) in results.items() if error == ErrorCode.ELECTION_NOT_NEEDED)
    failed = sorted(tp for tp, (error, _) in results.items() if error not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED))
    lines = []
    if succeeded:
        lines.append(f"Successfully completed leader election ({name}) for partitions {_joined(succeeded)}")
    if noop:
        lines.append(f"Valid replica already elected for partitions {_joined(noop)}")
    for topic, partition in failed:
        error, message = results[(topic, partition)]
        lines.append(f"Error completing leader election ({name}) for partition: {topic}-{partition}: {error_text(error, message)}")
    return lines, len(failed)


def _joined(partitions: list[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in partitions)


class LeaderElectionTool:
    def __init__(self, bootstrap: str, timeout_s: float = 30.0, settings=None):
        self.timeout_s = timeout_s
        self.client = ToolClient(bootstrap, timeout_s=timeout_s, settings=settings)

    def close(self) -> None:
        self.client.close()

    def elect(self, election_type: int, partitions: list[TopicPartition] | None) -> dict[TopicPartition, tuple[int, str | None]]:
        """ElectLeaders for ``partitions`` (None: all); per partition (error code, message)."""
        self.client.require("ElectLeaders", "leader elections")
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            topics = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
        deadline = time.monotonic() + self.timeout_s
        while True:
            response = self.client.bootstrap_connection().call(
                "ElectLeaders", ELECT_LEADERS_VERSION, election_type=election_type,
                topic_partitions=None if topics is None else [_REQUEST.TopicPartitions(**t) for t in topics],
                timeout_ms=ELECTION_TIMEOUT_MS,
            )
            if response.error_code == ErrorCode.NOT_CONTROLLER and time.monotonic() < deadline:
                time.sleep(RETRY_BACKOFF_S)  # a controller failover: Kafka's admin client retries too
                continue
            if response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
                raise Refused("Not authorized to perform leader election")
            if response.error_code != ErrorCode.NONE:
                raise Refused(f"ElectLeaders: {error_text(response.error_code)}")
            return {
                (r.topic, p.partition_id): (p.error_code, p.error_message)
                for r in response.replica_election_results
                for p in r.partition_result
            }



def cmd_leader_election(args) -> int:
    tool = None
    try:
        election_type = parse_election_type(args.election_type)
        chosen = [flag for flag, given in (
            ("--all-topic-partitions", args.all_topic_partitions),
            ("--topic", args.topic is not None),
            ("--path-to-json-file", args.path_to_json_file is not None),
        ) if given]
        if len(chosen) != 1:
            raise ToolError("give one of --all-topic-partitions, --topic with --partition, --path-to-json-file"
                            + (f" (not {' and '.join(chosen)})" if chosen else ""))
        if (args.partition is not None) != (args.topic is not None):
            raise ToolError("--topic and --partition go together")
        partitions: list[TopicPartition] | None = None
        if args.topic is not None:
            partitions = [(args.topic, args.partition)]
        elif args.path_to_json_file is not None:
            try:
                with open(args.path_to_json_file, encoding="utf-8") as file:
                    partitions = parse_election_json(file.read())
            except OSError as exc:
                raise ToolError(f"cannot read {args.path_to_json_file}: {exc.strerror or exc}") from None
        tool = LeaderElectionTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        lines, failed = election_report(election_type, tool.elect(election_type, partitions))
        for line in lines:
            print(line)
        if failed:
            print(f"{failed} replica(s) could not be elected", file=sys.stderr)
            return 1
        return 0
    except ToolError as exc:
        print(f"pybroker leader-election: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        if tool is not None:
            tool.close()


def register(commands) -> None:
    parser = commands.add_parser(
        "leader-election",
        help="elect preferred leaders again, or leaders of leaderless partitions (like kafka-leader-election.sh)",
        description="PREFERRED makes each partition's first replica its leader again where it is in sync and its "
        "broker is up; UNCLEAN gives a partition without a leader one, out of the ISR if need be (records the ISR "
        'had may be lost). The JSON file is Kafka\'s: {"partitions": [{"topic": "t", "partition": 0}]}. ' + EXIT_CODES,
    )
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="a broker to ask")
    parser.add_argument(
        "--election-type", required=True, metavar="TYPE", help="PREFERRED or UNCLEAN (any case)"
    )
    parser.add_argument("--all-topic-partitions", action="store_true", help="every partition that needs an election")
    parser.add_argument("--topic", metavar="TOPIC", help="one topic (with --partition)")
    parser.add_argument("--partition", type=int, metavar="ID", help="its partition")
    parser.add_argument("--path-to-json-file", metavar="FILE", help="the partitions, as Kafka's JSON file")
    parser.add_argument(
        "--admin.config", "--command-config", dest="command_config", metavar="FILE",
        help="(either spelling) " + COMMAND_CONFIG_HELP,
    )
    parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help="socket timeout, and how long a controller failover is waited out (default 30)")
    parser.set_defaults(func=cmd_leader_election)
