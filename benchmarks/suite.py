"""Side-by-side benchmark suite: the same workloads against pybroker and Tansu, one table.

The workloads run in rounds (3 by default): in each round every broker kind gets a fresh
broker (one after the other, so they never compete for the CPU) and each workload a fresh
topic; the table shows the median of the rounds. Alternating the brokers round by round
spreads slow phases of the machine (page cache, memory the hypervisor hands back) over both.
Machine rows show the limit for the same bytes without any broker: a bare TCP sink, the same
sink appending to a file, and a bare file append.

    python benchmarks/suite.py                      # full run, both brokers
    python benchmarks/suite.py --quick              # smoke run, under a minute
    python benchmarks/suite.py --only produce,latency --brokers pybroker --json rows.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # after the sys.path lines: found in the benchmarks directory
import workloads

WORKLOAD_NAMES = ("produce", "consume", "keyed", "latency", "large", "kafka-python", "limits")
BROKER_NAMES = ("pybroker", "tansu")
MESSAGE_BYTES = 100
KEYED_PARTITIONS = 16
KEYED_PROCESSES = 4
LATENCY_RATE_PER_S = 5_000
LARGE_MESSAGE_SIZES_BYTES = (1_000, 10_000)
CONSUME_PASSES = 3
KAFKA_PYTHON_SHARE = 10  # kafka-python produces N / this: it is a pure-Python client, about 10x slower

DEFAULT_MESSAGES = 2_000_000
DEFAULT_LATENCY_S = 10.0
DEFAULT_LARGE_TOTAL_MB = 200
DEFAULT_ROUNDS = 3
QUICK_MESSAGES = 50_000
QUICK_LATENCY_S = 3.0
QUICK_LARGE_TOTAL_MB = 20


def deadline_for_s(messages: int) -> float:
    """Time allowed for one workload of `messages` messages: generous, but bounded."""
    return 60.0 + messages / 10_000


def machine_description() -> list[str]:
    import confluent_kafka

    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    lines = [
        f"CPU: {cpu_model}, {os.cpu_count()} cores; RAM {memory_gb:.1f} GB; kernel {platform.release()}",
        f"Python {platform.python_version()}; confluent-kafka {confluent_kafka.__version__}; "
        + f"librdkafka {confluent_kafka.libversion()[0]}",
    ]
    if peers.tansu_unavailable_reason() is None:
        lines.append(f"Tansu: {peers.tansu_version()} (memory storage)")
    return lines


def new_topic(label: str) -> str:
    return f"bench-{label}-{uuid.uuid4().hex[:8]}"


def make_row(workload: str, broker: str, result: dict | None = None, **extra) -> dict:
    row = {
        "workload": workload,
        "broker": broker,
        "messages": None,
        "payload_bytes": None,
        "seconds": None,
        "msg_per_s": None,
        "mb_per_s": None,
        "latency_p50_ms": None,
        "latency_p99_ms": None,
        "latency_p999_ms": None,
        "cpu_seconds_per_gb": None,
        "peak_rss_mb": None,
        "pybroker_vs_tansu": None,
        "error": None,
    }
    if result:
        row.update({key: value for key, value in result.items() if key in row})
        if result.get("seconds"):
            if result.get("messages"):
                row["msg_per_s"] = result["messages"] / result["seconds"]
            row["mb_per_s"] = result["payload_bytes"] / 1e6 / result["seconds"]
        if result.get("cpu_seconds") is not None and result.get("payload_bytes"):
            row["cpu_seconds_per_gb"] = result["cpu_seconds"] / (result["payload_bytes"] / 1e9)
    row.update(extra)
    return row


def measure(broker: peers.RunningBroker, workload: str, run: Callable[[], dict]) -> dict:
    """Run one workload against `broker`, adding the broker's CPU per GB and peak RSS; errors become a row."""
    try:
        cpu_before_s = broker.cpu_seconds()
        result = run()
    except Exception as exc:  # noqa: BLE001 - one failing workload must not hide the others
        traceback.print_exc(file=sys.stderr)
        return make_row(workload, broker.name, error=f"{type(exc).__name__}: {exc}"[:300])
    row = make_row(workload, broker.name, result)
    try:
        cpu_s = broker.cpu_seconds() - cpu_before_s
        row["peak_rss_mb"] = broker.peak_rss_bytes() / 1e6
    except OSError as exc:  # the broker exited: /proc/<pid> is gone
        row["error"] = f"broker gone after the workload: {exc}"
        return row
    if result.get("payload_bytes"):
        row["cpu_seconds_per_gb"] = cpu_s / (result["payload_bytes"] / 1e9)
    return row


def run_broker_workloads(broker: peers.RunningBroker, args: argparse.Namespace, selected: set[str]) -> list[dict]:
    bootstrap, messages = broker.bootstrap, args.messages
    deadline_s = deadline_for_s(messages)
    rows = []

    def produce_to_new_topic(label: str, count: int, size_bytes: int, acks: str, topic: str | None = None) -> dict:
        topic = topic or new_topic(label)
        workloads.create_topic(bootstrap, topic, 1)
        return workloads.produce(bootstrap, topic, count, size_bytes, acks, deadline_for_s(count))

    acks_one_topic = new_topic("acks1")
    acks_one_produced = False
    if "produce" in selected:
        row = measure(broker, f"produce {MESSAGE_BYTES}B acks=1", lambda: produce_to_new_topic("acks1", messages, MESSAGE_BYTES, "1", acks_one_topic))  # fmt: skip
        acks_one_produced = row["error"] is None
        rows.append(row)
        rows.append(measure(broker, f"produce {MESSAGE_BYTES}B acks=all", lambda: produce_to_new_topic("acksall", messages, MESSAGE_BYTES, "all")))  # fmt: skip
    if "consume" in selected:
        label = f"consume {MESSAGE_BYTES}B"
        try:
            if not acks_one_produced:  # seed a fresh topic, unmeasured (a failed produce may have left one half full)
                acks_one_topic = new_topic("acks1")
                produce_to_new_topic("acks1", messages, MESSAGE_BYTES, "1", acks_one_topic)
        except Exception as exc:  # noqa: BLE001 - one failing workload must not hide the others
            rows.append(make_row(label, broker.name, error=f"seeding the topic failed: {type(exc).__name__}: {exc}"[:300]))  # fmt: skip
        else:
            # Reading is cheap to repeat and, being bound by the client, noisy: each round
            # reads the topic CONSUME_PASSES times and keeps its median pass.
            passes = [measure(broker, label, lambda: workloads.consume(bootstrap, acks_one_topic, messages, deadline_s))
                      for _ in range(CONSUME_PASSES)]  # fmt: skip
            rows.append(median_rows(passes) | {"rounds": None})
    if "keyed" in selected:

        def keyed() -> dict:
            topic = new_topic("keyed")
            workloads.create_topic(bootstrap, topic, KEYED_PARTITIONS)
            return workloads.produce_keyed(bootstrap, topic, messages, MESSAGE_BYTES, KEYED_PROCESSES, deadline_s)

        rows.append(measure(broker, f"produce keyed {KEYED_PARTITIONS}p x{KEYED_PROCESSES} procs", keyed))
    if "latency" in selected:

        def latency() -> dict:
            topic = new_topic("latency")
            workloads.create_topic(bootstrap, topic, 1)
            return workloads.end_to_end_latency(bootstrap, topic, LATENCY_RATE_PER_S, args.latency_seconds,
                                                MESSAGE_BYTES, 60.0 + 2 * args.latency_seconds)  # fmt: skip

        rows.append(measure(broker, f"latency {LATENCY_RATE_PER_S}/s acks=all", latency))
    if "large" in selected:
        for size_bytes in LARGE_MESSAGE_SIZES_BYTES:
            count = max(1, int(args.large_total_mb * 1e6) // size_bytes)
            label = f"produce {size_bytes // 1000}KB acks=1"
            rows.append(measure(broker, label, lambda: produce_to_new_topic("large", count, size_bytes, "1")))  # noqa: B023 - called at once
    if "kafka-python" in selected:

        def kafka_python() -> dict:
            count = max(1, messages // KAFKA_PYTHON_SHARE)
            topic = new_topic("kafkapython")
            workloads.create_topic(bootstrap, topic, 1)
            return workloads.produce_kafka_python(bootstrap, topic, count, MESSAGE_BYTES, deadline_for_s(count))

        rows.append(measure(broker, f"kafka-python produce {MESSAGE_BYTES}B", kafka_python))
    return rows


def run_machine_limits(args: argparse.Namespace, scratch_dir: str) -> list[dict]:
    total_bytes = args.messages * MESSAGE_BYTES
    deadline_s = deadline_for_s(args.messages)
    runs = [
        ("limit: TCP sink 1MB writes", lambda: workloads.tcp_sink_limit(total_bytes, deadline_s)),
        (
            "limit: TCP sink -> file append",
            lambda: workloads.tcp_sink_limit(total_bytes, deadline_s, file_dir=scratch_dir),
        ),
        (
            "limit: file append 1MB writes",
            lambda: workloads.file_append_limit(scratch_dir, total_bytes, False, deadline_s),
        ),
        ("limit: file append + fsync", lambda: workloads.file_append_limit(scratch_dir, total_bytes, True, deadline_s)),
    ]
    rows = []
    for label, run in runs:
        try:
            rows.append(make_row(label, "machine", run()))
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            rows.append(make_row(label, "machine", error=f"{type(exc).__name__}: {exc}"[:300]))
    return rows


MEDIAN_KEYS = (
    "messages", "payload_bytes", "seconds", "msg_per_s", "mb_per_s",
    "latency_p50_ms", "latency_p99_ms", "latency_p999_ms", "cpu_seconds_per_gb",
)  # fmt: skip


def median_rows(rounds: list[dict]) -> dict:
    """One row for the rounds of one (workload, broker): the median of each figure over the
    rounds that succeeded, the largest peak RSS; failed when any round failed."""
    row = dict(rounds[0])
    row["rounds"] = len(rounds)
    failed = [r for r in rounds if r["error"] is not None]
    if failed:
        row.update({key: None for key in MEDIAN_KEYS})
        row["error"] = f"{len(failed)} of {len(rounds)} rounds failed, first: {failed[0]['error']}"
        return row
    for key in MEDIAN_KEYS:
        values = [r[key] for r in rounds if r[key] is not None]
        row[key] = statistics.median(values) if values else None
    rss_values = [r["peak_rss_mb"] for r in rounds if r["peak_rss_mb"] is not None]
    row["peak_rss_mb"] = max(rss_values) if rss_values else None
    return row


def summarize(round_rows: list[dict]) -> list[dict]:
    """Rows of every round -> one median row per (workload, broker), in first-seen order."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in round_rows:
        groups.setdefault((row["workload"], row["broker"]), []).append(row)
    return [median_rows(rounds) for rounds in groups.values()]


def add_ratios(rows: list[dict]) -> None:
    """pybroker msg/s over Tansu msg/s; for latency rows Tansu p99 over pybroker p99. Above 1: pybroker is better."""
    tansu_rows = {row["workload"]: row for row in rows if row["broker"] == "tansu" and row["error"] is None}
    for row in rows:
        tansu = tansu_rows.get(row["workload"])
        if row["broker"] != "pybroker" or row["error"] is not None or tansu is None:
            continue
        if row["latency_p99_ms"] and tansu["latency_p99_ms"]:
            row["pybroker_vs_tansu"] = tansu["latency_p99_ms"] / row["latency_p99_ms"]
        elif row["msg_per_s"] and tansu["msg_per_s"]:
            row["pybroker_vs_tansu"] = row["msg_per_s"] / tansu["msg_per_s"]


COLUMNS = (
    # (header, row key, width, format)
    ("workload", "workload", 36, "{}"),
    ("broker", "broker", 9, "{}"),
    ("msg/s", "msg_per_s", 11, "{:,.0f}"),
    ("MB/s", "mb_per_s", 9, "{:,.1f}"),
    ("p50 ms", "latency_p50_ms", 8, "{:.2f}"),
    ("p99 ms", "latency_p99_ms", 8, "{:.2f}"),
    ("p99.9 ms", "latency_p999_ms", 9, "{:.2f}"),
    ("CPU s/GB", "cpu_seconds_per_gb", 9, "{:,.1f}"),
    ("RSS MB", "peak_rss_mb", 8, "{:,.0f}"),
    ("py/tansu", "pybroker_vs_tansu", 9, "{:.2f}"),
)


def format_table(rows: list[dict]) -> str:
    def cell(row: dict, key: str, width: int, pattern: str) -> str:
        value = row[key]
        text = "-" if value is None else pattern.format(value)
        return text.ljust(width) if key in ("workload", "broker") else text.rjust(width)

    lines = ["  ".join(header.ljust(width) if index < 2 else header.rjust(width)
                       for index, (header, _, width, _) in enumerate(COLUMNS))]  # fmt: skip
    lines.append("-" * len(lines[0]))
    for row in rows:
        line = "  ".join(cell(row, key, width, pattern) for _, key, width, pattern in COLUMNS)
        if row["error"]:
            line = "  ".join(cell(row, key, width, pattern) for _, key, width, pattern in COLUMNS[:2])
            line += f"  FAILED: {row['error']}"
        lines.append(line.rstrip())
    return "\n".join(lines)


LEGEND = """\
Each figure is the median of the rounds. MB/s counts payload bytes only. CPU s/GB: broker process CPU seconds (user+system) during the
workload per GB of payload. RSS MB: the broker's peak resident memory since it started (VmHWM).
py/tansu: pybroker msg/s / Tansu msg/s; for latency rows Tansu p99 / pybroker p99. Above 1 means
pybroker is better. Latency: scheduled send time to receive time, same host, one partition,
producer linger.ms=1, consumer fetch.wait.max.ms=100 (a broker that answers a waiting fetch only
at its max wait shows p99 near 100 ms). Tansu runs with memory storage; pybroker writes its log
to disk. The limit rows move N x 100 B with no broker: the most any broker row could reach;
their CPU s/GB is the receiving process's (TCP sink) or the writer's (file append)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--messages", type=int, help=f"N, 100-byte messages per workload (default {DEFAULT_MESSAGES:,})"
    )
    parser.add_argument("--only", help=f"comma-separated workloads out of {','.join(WORKLOAD_NAMES)}")
    parser.add_argument("--brokers", default=",".join(BROKER_NAMES), help="comma-separated: pybroker,tansu")
    parser.add_argument("--latency-seconds", type=float, help=f"latency run length (default {DEFAULT_LATENCY_S:g})")
    parser.add_argument("--large-total-mb", type=float, help=f"payload per large-message run (default {DEFAULT_LARGE_TOTAL_MB})")  # fmt: skip
    parser.add_argument("--rounds", type=int, help=f"rounds of every workload; the median is shown (default {DEFAULT_ROUNDS}, quick 1)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="smoke run: N=50,000, latency 3 s, large messages 20 MB, 1 round")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write all rows as JSON to this file")
    args = parser.parse_args(argv)
    if args.messages is None:
        args.messages = QUICK_MESSAGES if args.quick else DEFAULT_MESSAGES
    if args.latency_seconds is None:
        args.latency_seconds = QUICK_LATENCY_S if args.quick else DEFAULT_LATENCY_S
    if args.large_total_mb is None:
        args.large_total_mb = QUICK_LARGE_TOTAL_MB if args.quick else DEFAULT_LARGE_TOTAL_MB
    if args.rounds is None:
        args.rounds = 1 if args.quick else DEFAULT_ROUNDS
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.selected = set(WORKLOAD_NAMES) if not args.only else {name.strip() for name in args.only.split(",")}
    args.broker_names = [name.strip() for name in args.brokers.split(",") if name.strip()]
    unknown = (args.selected - set(WORKLOAD_NAMES)) | (set(args.broker_names) - set(BROKER_NAMES))
    if unknown:
        parser.error(f"unknown workload or broker: {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("\n".join(machine_description()))
    print(f"N={args.messages:,} x {MESSAGE_BYTES} B; latency {args.latency_seconds:g} s at {LATENCY_RATE_PER_S}/s; "
          f"large messages {args.large_total_mb:g} MB per size; median of {args.rounds} round(s)\n", flush=True)  # fmt: skip
    round_rows, skipped = [], []
    started_s = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as scratch:
        broker_workloads = args.selected - {"limits"}
        broker_names = list(args.broker_names if broker_workloads else [])
        if "tansu" in broker_names and (reason := peers.tansu_unavailable_reason()) is not None:
            skipped.append(f"tansu skipped: {reason}")
            broker_names.remove("tansu")
        for round_index in range(args.rounds):
            for broker_name in broker_names:
                data_dir = Path(scratch) / f"{broker_name}-{round_index}"
                data_dir.mkdir()
                runner = peers.run_pybroker(data_dir) if broker_name == "pybroker" else peers.run_tansu(data_dir)
                print(f"round {round_index + 1}/{args.rounds}: {', '.join(sorted(broker_workloads))} against "
                      f"{broker_name}...", file=sys.stderr, flush=True)  # fmt: skip
                try:
                    with runner as broker:
                        rows_of_round = run_broker_workloads(broker, args, broker_workloads)
                except RuntimeError as exc:  # the broker did not start
                    rows_of_round = [make_row("start", broker_name, error=f"failed to start: {exc}"[:300])]
                for row in rows_of_round:
                    row["round"] = round_index + 1
                round_rows.extend(rows_of_round)
            if "limits" in args.selected:
                limit_rows = run_machine_limits(args, scratch)
                for row in limit_rows:
                    row["round"] = round_index + 1
                round_rows.extend(limit_rows)
    rows = summarize(round_rows)
    # Group rows by workload so the two brokers sit next to each other.
    order = {}
    for row in rows:
        order.setdefault(row["workload"], len(order))
    rows.sort(key=lambda row: order[row["workload"]])
    add_ratios(rows)
    print(format_table(rows))
    print()
    print(LEGEND)
    for line in skipped:
        print(line)
    print(f"\ntotal {time.perf_counter() - started_s:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(
            {"machine": machine_description(), "rounds": args.rounds, "rows": rows, "round_rows": round_rows,
             "skipped": skipped}, indent=2))  # fmt: skip
    return 1 if any(row["error"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
