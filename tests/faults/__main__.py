"""``python -m tests.faults --seconds S --seed N --out DIR [--unsafe] [--workload txn] [--topology five]``: one
fault run; prints the results table, writes DIR/summary.json and
DIR/timeline.png, and exits 1 when anything acknowledged was lost, duplicated
or read inconsistently, or a transaction anomaly was found (2 when the run
itself could not be made)."""

import argparse
import signal
import sys
from pathlib import Path

from tests.faults.cluster import TOPOLOGIES
from tests.faults.nemesis import KINDS, UPGRADE
from tests.faults.run import WORKLOADS, passed, run_faults, table
from tests.faults.upgrade import OLD_REF, OldBuildUnavailable
from tests.netns import NamespaceUnavailable


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120, help="length of the fault schedule (default 120)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the schedule and of the nemesis' choices")
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="records",
        help="records: plain and idempotent producers, consumers in a group (default); txn: transactional "
        "producers, consume-transform-produce with send_offsets_to_transaction, read_committed readers",
    )
    parser.add_argument(
        "--unsafe",
        action="store_true",
        help="records: unclean.leader.election.enable=true and acks=1 producers, settings Kafka documents as "
        "lossy; txn: read_uncommitted readers and processors (the cluster stays safe)",
    )
    parser.add_argument("--txn-rate", type=float, default=10.0, help="txn: transactions per second per producer (2)")
    parser.add_argument(
        "--nemeses",
        default=",".join(KINDS),
        help=f"comma-separated kinds (default all: {','.join(KINDS)}); or '{UPGRADE}' alone: a rolling upgrade "
        "from --upgrade-from to this tree and back, its steps spread over --seconds",
    )
    parser.add_argument(
        "--upgrade-from", default=OLD_REF, metavar="REF", help=f"upgrade: the git ref of the old build (default {OLD_REF[:10]})"
    )
    parser.add_argument("--rate", type=float, default=100.0, help="records per second per producer (3 producers)")
    parser.add_argument(
        "--idempotent-message-timeout-ms",
        type=int,
        help="message.timeout.ms of the idempotent producers (default librdkafka's 300000; a timeout shorter than a "
        "failover shows librdkafka's epoch bump re-sending records that were already written: docs/RELIABILITY.md)",
    )
    parser.add_argument(
        "--topology",
        choices=sorted(TOPOLOGIES),
        default="default",
        help="default: docker/compose.yaml (3 controllers, 3 brokers) and one client host; five: "
        "docker/compose.five.yaml (5 combined nodes) and client hosts client-a and client-b, which a split puts "
        "on its majority and minority side (records workload only)",
    )
    args = parser.parse_args(argv)
    if args.topology != "default" and args.workload == "txn":
        parser.error(f"the {args.topology} topology runs the records workload only")
    kinds = tuple(k for k in args.nemeses.split(",") if k)
    unknown = [k for k in kinds if k not in KINDS and k != UPGRADE]
    if unknown:
        parser.error(f"unknown nemeses: {', '.join(unknown)}")
    if UPGRADE in kinds and len(kinds) > 1:
        parser.error(f"{UPGRADE} runs alone (it is one long process, not a window of the schedule)")
    # SIGTERM (a CI timeout, kill) ends the run through its cleanup: the
    # namespaces, tmpfs mounts and broker processes it made go with it.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        summary = run_faults(
            args.seconds,
            args.seed,
            args.out,
            unsafe=args.unsafe,
            kinds=kinds,
            rate_per_producer=args.rate,
            idempotent_message_timeout_ms=args.idempotent_message_timeout_ms,
            workload_name=args.workload,
            txn_rate_per_producer=args.txn_rate,
            topology=args.topology,
            upgrade_from=args.upgrade_from,
        )
    except (NamespaceUnavailable, OldBuildUnavailable) as exc:
        print(f"cannot run: {exc}", file=sys.stderr)
        return 2
    print(table(summary))
    print(f"results in {args.out}")
    return 0 if passed(summary) else 1


if __name__ == "__main__":
    sys.exit(main())
