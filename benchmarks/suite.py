"""Side-by-side benchmark suite: the same workloads against pybroker and Tansu, one table.

The workloads run in rounds (3 by default): in each round every broker kind gets a fresh
broker (one after the other, so they never compete for the CPU) and each workload a fresh
topic. The table shows each figure's median over the rounds with its [min-max] range, and
calls a pybroker/Tansu ratio a tie when the two ranges overlap. Alternating the brokers
round by round spreads slow phases of the machine (page cache, memory the hypervisor hands
back) over both. Each row also shows the CPU cores its client processes and its broker used
while timed, and which side ran out of a core first: a figure limited by the client says
little about the broker. Machine rows show the limit for the same bytes without any broker:
a bare TCP sink, the same sink appending to a file, and a bare file append.

    python benchmarks/suite.py                      # full run, both brokers
    python benchmarks/suite.py --quick              # smoke run, under a minute
    python benchmarks/suite.py --only parallel --rounds 5 --markdown
    python benchmarks/suite.py --only produce,latency --brokers pybroker --json rows.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
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

import machine_limits  # after the sys.path lines: found in the benchmarks directory
import peers
import workloads
from report import add_ratios, comparison, format_table, legend, limiting_side, shared_machine_warning, summarize

WORKLOAD_NAMES = ("produce", "consume", "keyed", "latency", "large", "parallel", "kafka-python", "limits")
BROKER_NAMES = ("pybroker", "tansu")
MESSAGE_BYTES = 100
KEYED_PARTITIONS = 16
KEYED_PROCESSES = 4
LATENCY_RATE_PER_S = 5_000
LARGE_MESSAGE_SIZES_BYTES = (1_000, 10_000)
CONSUME_PASSES = 3
KAFKA_PYTHON_SHARE = 10  # kafka-python produces N / this: it is a pure-Python client, about 10x slower
# The load no single client limits: producer and consumer processes at once, many
# partitions, messages large enough that per-message client work is small next to the bytes.
PARALLEL_PRODUCERS = 4
PARALLEL_CONSUMERS = 4
PARALLEL_PARTITIONS = 64
PARALLEL_MESSAGE_SIZES_BYTES = (1_000, 10_000)
# Each producer sends this many bytes of messages to one partition, then moves to the next,
# as librdkafka's sticky partitioner does with messages that have no key.
PARALLEL_PARTITION_RUN_BYTES = 100_000

DEFAULT_MESSAGES = 2_000_000
DEFAULT_LATENCY_S = 10.0
DEFAULT_LARGE_TOTAL_MB = 200
DEFAULT_PARALLEL_S = 15.0
DEFAULT_ROUNDS = 3
QUICK_MESSAGES = 50_000
QUICK_LATENCY_S = 3.0
QUICK_LARGE_TOTAL_MB = 20
QUICK_PARALLEL_S = 3.0


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
        "read_mb_per_s": None,
        "latency_p50_ms": None,
        "latency_p99_ms": None,
        "latency_p999_ms": None,
        "cpu_seconds_per_gb": None,
        "peak_rss_mb": None,
        "client_processes": None,
        "client_cpu_seconds": None,
        "client_cores": None,
        "client_busiest_cores": None,
        "broker_cpu_seconds": None,
        "broker_cores": None,
        "machine_cores": None,
        "rate_limited": False,
        "limited_by": None,
        "pybroker_vs_tansu": None,
        "ratio_tie": None,
        "error": None,
    }
    if result:
        row.update({key: value for key, value in result.items() if key in row})
        if result.get("seconds"):
            if result.get("messages"):
                row["msg_per_s"] = result["messages"] / result["seconds"]
            row["mb_per_s"] = result["payload_bytes"] / 1e6 / result["seconds"]
        if result.get("read_seconds"):
            row["read_mb_per_s"] = result["read_payload_bytes"] / 1e6 / result["read_seconds"]
        if result.get("cpu_seconds") is not None and result.get("payload_bytes"):
            row["cpu_seconds_per_gb"] = result["cpu_seconds"] / (result["payload_bytes"] / 1e9)
        wall_s = wall_seconds(result)
        if result.get("client_cpu_seconds") is not None and wall_s:
            row["client_cores"] = result["client_cpu_seconds"] / wall_s
            if row["client_busiest_cores"] is None and result.get("client_processes") == 1:
                row["client_busiest_cores"] = row["client_cores"]
    row.update(extra)
    return row


def wall_seconds(result: dict) -> float | None:
    """The timed run's length: both sides' CPU is divided by it to give cores."""
    return result.get("wall_seconds") or result.get("seconds")


def machine_busy_seconds() -> float | None:
    """CPU seconds all cores of the machine have spent busy since boot (user, nice, system,
    irq, softirq from /proc/stat); None where there is no /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(value) for value in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def measure(broker: peers.RunningBroker, workload: str, run: Callable[[Callable[[], None]], dict]) -> dict:
    """Run one workload against `broker`: run(on_start) calls on_start() as its timed part
    begins (after creating topics, connecting, starting processes), and from there to its
    return the broker's CPU (per GB, and in cores) and the whole machine's are read. Adds
    the broker's peak RSS and the side that limited the row; errors become a row."""
    start: dict[str, float | None] = {}

    def on_start() -> None:
        start.update(broker_cpu_s=broker.cpu_seconds(), machine_busy_s=machine_busy_seconds(), at_s=time.monotonic())

    try:
        on_start()  # in case the workload never calls it: then its whole run is measured
        result = run(on_start)
    except Exception as exc:  # noqa: BLE001 - one failing workload must not hide the others
        traceback.print_exc(file=sys.stderr)
        return make_row(workload, broker.name, error=f"{type(exc).__name__}: {exc}"[:300])
    window_s = time.monotonic() - start["at_s"]
    machine_busy_s = machine_busy_seconds()
    row = make_row(workload, broker.name, result)
    try:
        cpu_s = broker.cpu_seconds() - start["broker_cpu_s"]
        row["peak_rss_mb"] = broker.peak_rss_bytes() / 1e6
    except OSError as exc:  # the broker exited: /proc/<pid> is gone
        row["error"] = f"broker gone after the workload: {exc}"
        return row
    row["broker_cpu_seconds"] = cpu_s
    # At a fixed low rate the broker's CPU is mostly per request and idle wake-ups: per GB it
    # would be large and mean little. Its cores (below) still show.
    if result.get("payload_bytes") and not row["rate_limited"]:
        row["cpu_seconds_per_gb"] = cpu_s / (result["payload_bytes"] / 1e9)
    if window_s > 0:
        row["broker_cores"] = cpu_s / window_s
        if machine_busy_s is not None and start["machine_busy_s"] is not None:
            row["machine_cores"] = (machine_busy_s - start["machine_busy_s"]) / window_s
    row["limited_by"] = limiting_side(row)
    return row


def run_broker_workloads(broker: peers.RunningBroker, args: argparse.Namespace, selected: set[str]) -> list[dict]:
    bootstrap, messages = broker.bootstrap, args.messages
    deadline_s = deadline_for_s(messages)
    rows = []

    def produce_to_new_topic(label: str, count: int, size_bytes: int, acks: str, topic: str | None = None,
                             on_start: Callable[[], None] | None = None) -> dict:  # fmt: skip
        topic = topic or new_topic(label)
        workloads.create_topic(bootstrap, topic, 1)
        return workloads.produce(bootstrap, topic, count, size_bytes, acks, deadline_for_s(count), on_start)

    def topic_of(label: str, partitions: int) -> str:
        topic = new_topic(label)
        workloads.create_topic(bootstrap, topic, partitions)
        return topic

    acks_one_topic = new_topic("acks1")
    acks_one_produced = False
    if "produce" in selected:
        row = measure(broker, f"produce {MESSAGE_BYTES}B acks=1", lambda on_start: produce_to_new_topic("acks1", messages, MESSAGE_BYTES, "1", acks_one_topic, on_start))  # fmt: skip
        acks_one_produced = row["error"] is None
        rows.append(row)
        rows.append(measure(broker, f"produce {MESSAGE_BYTES}B acks=all", lambda on_start: produce_to_new_topic("acksall", messages, MESSAGE_BYTES, "all", on_start=on_start)))  # fmt: skip
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
            # reads the topic CONSUME_PASSES times, and every pass is a sample of the row.
            for pass_index in range(CONSUME_PASSES):
                row = measure(broker, label, lambda on_start: workloads.consume(bootstrap, acks_one_topic, messages, deadline_s, on_start))  # fmt: skip
                rows.append(row | {"pass": pass_index + 1})
    if "keyed" in selected:

        def keyed(on_start: Callable[[], None]) -> dict:
            topic = topic_of("keyed", KEYED_PARTITIONS)
            return workloads.produce_keyed(
                bootstrap, topic, messages, MESSAGE_BYTES, KEYED_PROCESSES, deadline_s, on_start
            )

        rows.append(measure(broker, f"produce keyed {KEYED_PARTITIONS}p x{KEYED_PROCESSES} procs", keyed))
    if "latency" in selected:

        def latency(on_start: Callable[[], None]) -> dict:
            return workloads.end_to_end_latency(bootstrap, topic_of("latency", 1), LATENCY_RATE_PER_S,
                                                args.latency_seconds, MESSAGE_BYTES, 60.0 + 2 * args.latency_seconds,
                                                on_start)  # fmt: skip

        rows.append(measure(broker, f"latency {LATENCY_RATE_PER_S}/s acks=all", latency))
    if "large" in selected:
        for size_bytes in LARGE_MESSAGE_SIZES_BYTES:

            def large(on_start: Callable[[], None], size_bytes: int = size_bytes) -> dict:
                count = max(1, int(args.large_total_mb * 1e6) // size_bytes)
                return produce_to_new_topic("large", count, size_bytes, "1", on_start=on_start)

            rows.append(measure(broker, f"produce {size_bytes // 1000}KB acks=1", large))
    if "parallel" in selected:
        for size_bytes in PARALLEL_MESSAGE_SIZES_BYTES:

            def parallel(on_start: Callable[[], None], size_bytes: int = size_bytes) -> dict:
                return workloads.produce_consume_parallel(
                    bootstrap, topic_of("parallel", PARALLEL_PARTITIONS), args.parallel_seconds, size_bytes,
                    PARALLEL_PRODUCERS, PARALLEL_CONSUMERS, PARALLEL_PARTITIONS,
                    max(1, PARALLEL_PARTITION_RUN_BYTES // size_bytes), 120.0 + 4 * args.parallel_seconds, on_start,
                )  # fmt: skip

            label = f"parallel {PARALLEL_PRODUCERS}+{PARALLEL_CONSUMERS} procs {PARALLEL_PARTITIONS}p {size_bytes // 1000}KB acks=all"  # fmt: skip
            rows.append(measure(broker, label, parallel))
    if "kafka-python" in selected:

        def kafka_python(on_start: Callable[[], None]) -> dict:
            count = max(1, messages // KAFKA_PYTHON_SHARE)
            return workloads.produce_kafka_python(bootstrap, topic_of("kafkapython", 1), count, MESSAGE_BYTES,
                                                  deadline_for_s(count), on_start)  # fmt: skip

        rows.append(measure(broker, f"kafka-python produce {MESSAGE_BYTES}B", kafka_python))
    return rows


def run_machine_limits(args: argparse.Namespace, scratch_dir: str) -> list[dict]:
    total_bytes = args.messages * MESSAGE_BYTES
    deadline_s = deadline_for_s(args.messages)
    runs = [
        ("limit: TCP sink 1MB writes", lambda: machine_limits.tcp_sink_limit(total_bytes, deadline_s)),
        (
            "limit: TCP sink -> file append",
            lambda: machine_limits.tcp_sink_limit(total_bytes, deadline_s, file_dir=scratch_dir),
        ),
        (
            "limit: file append 1MB writes",
            lambda: machine_limits.file_append_limit(scratch_dir, total_bytes, False, deadline_s),
        ),
        (
            "limit: file append + fsync",
            lambda: machine_limits.file_append_limit(scratch_dir, total_bytes, True, deadline_s),
        ),
    ]
    rows = []
    for label, run in runs:
        try:
            rows.append(make_row(label, "machine", run()))
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc(file=sys.stderr)
            rows.append(make_row(label, "machine", error=f"{type(exc).__name__}: {exc}"[:300]))
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--messages", type=int, help=f"N, 100-byte messages per workload (default {DEFAULT_MESSAGES:,})"
    )
    parser.add_argument("--only", help=f"comma-separated workloads out of {','.join(WORKLOAD_NAMES)}")
    parser.add_argument("--brokers", default=",".join(BROKER_NAMES), help="comma-separated: pybroker,tansu")
    parser.add_argument("--latency-seconds", type=float, help=f"latency run length (default {DEFAULT_LATENCY_S:g})")
    parser.add_argument("--large-total-mb", type=float, help=f"payload per large-message run (default {DEFAULT_LARGE_TOTAL_MB})")  # fmt: skip
    parser.add_argument("--parallel-seconds", type=float, help=f"producing time of each parallel run (default {DEFAULT_PARALLEL_S:g})")  # fmt: skip
    parser.add_argument("--rounds", type=int, help=f"rounds of every workload; median and [min-max] are shown (default {DEFAULT_ROUNDS}, quick 1)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help=f"smoke run: N={QUICK_MESSAGES:,}, latency {QUICK_LATENCY_S:g} s, large messages {QUICK_LARGE_TOTAL_MB} MB, parallel {QUICK_PARALLEL_S:g} s, 1 round")  # fmt: skip
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument(
        "--json", type=Path, help="also write all rows as JSON to this file: the summary rows and every run's"
    )
    args = parser.parse_args(argv)
    if args.messages is None:
        args.messages = QUICK_MESSAGES if args.quick else DEFAULT_MESSAGES
    if args.latency_seconds is None:
        args.latency_seconds = QUICK_LATENCY_S if args.quick else DEFAULT_LATENCY_S
    if args.large_total_mb is None:
        args.large_total_mb = QUICK_LARGE_TOTAL_MB if args.quick else DEFAULT_LARGE_TOTAL_MB
    if args.parallel_seconds is None:
        args.parallel_seconds = QUICK_PARALLEL_S if args.quick else DEFAULT_PARALLEL_S
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
          f"large messages {args.large_total_mb:g} MB per size; parallel {PARALLEL_PRODUCERS} producer + "
          f"{PARALLEL_CONSUMERS} consumer processes, {PARALLEL_PARTITIONS} partitions, {args.parallel_seconds:g} s "
          f"per size; {args.rounds} round(s)\n", flush=True)  # fmt: skip
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
                # A round can leave gigabytes of log (the parallel rows): free them before the next.
                shutil.rmtree(data_dir, ignore_errors=True)
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
    print(format_table(rows, args.markdown))
    print()
    print(legend())
    if versus := comparison(rows, args.markdown):
        print()
        print(versus)
    if warning := shared_machine_warning(rows):
        print()
        print(warning)
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
