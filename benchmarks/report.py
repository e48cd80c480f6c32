"""Summaries and tables of benchmarks/suite.py's rows: the median of each figure over its
runs with the [min-max] range, ties where two brokers' ranges overlap, which side (client or
broker) ran out of CPU, and the printed tables, comparison and notes.

A row is a dict as suite.make_row builds it; rows of one (workload, broker) are its runs.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable

# A process using this share of one core or more has run out of CPU: it limits the row.
FULL_CORE_SHARE = 0.85
# Other processes using more than this many cores during a row: the row shared the machine.
SHARED_MACHINE_CORES = 0.25


def limiting_side(row: dict) -> str | None:
    """Which side of a row ran out of CPU: "client" when the busiest client process used
    (nearly) a whole core and the broker did not, "broker" the other way round, "both",
    "all cores" when the machine was busy without either using a core (many processes, or
    other load), "neither" (waiting on something else), "fixed rate" for a row sent at a
    set rate; None without CPU readings."""
    if row.get("rate_limited"):
        return "fixed rate"
    client, broker = row.get("client_busiest_cores"), row.get("broker_cores")
    if client is None or broker is None:
        return None
    client_full, broker_full = client >= FULL_CORE_SHARE, broker >= FULL_CORE_SHARE
    if client_full and broker_full:
        return "both"
    if client_full:
        return "client"
    if broker_full:
        return "broker"
    machine = row.get("machine_cores") or (row.get("client_cores") or 0.0) + broker
    if machine >= FULL_CORE_SHARE * (os.cpu_count() or 1):
        return "all cores"
    return "neither"


# Figures shown as median [min-max]; the ratio of two rows is a tie when their ranges overlap.
SPREAD_KEYS = (
    "cpu_seconds_per_gb", "latency_p50_ms", "latency_p99_ms", "latency_p999_ms",
    "mb_per_s", "msg_per_s", "read_mb_per_s",
)  # fmt: skip
MEDIAN_KEYS = (
    "messages", "payload_bytes", "seconds", *SPREAD_KEYS,
    "client_cpu_seconds", "client_cores", "client_busiest_cores", "broker_cpu_seconds", "broker_cores",
    "machine_cores",
)  # fmt: skip


def median_rows(samples: list[dict]) -> dict:
    """One row for the samples of one (workload, broker), one per round (per pass for
    consume): the median of each figure over them, its [min, max] in "spread", the largest
    peak RSS; failed when any sample failed."""
    row = {key: value for key, value in samples[0].items() if key not in ("round", "pass")}
    row["samples"] = len(samples)
    row["rounds"] = len({sample.get("round", f"sample {index}") for index, sample in enumerate(samples)})
    row["spread"] = {}
    failed = [sample for sample in samples if sample["error"] is not None]
    if failed:
        row.update({key: None for key in MEDIAN_KEYS} | {"limited_by": None, "peak_rss_mb": None})
        row["error"] = f"{len(failed)} of {len(samples)} runs failed, first: {failed[0]['error']}"
        return row
    for key in MEDIAN_KEYS:
        values = [sample[key] for sample in samples if sample[key] is not None]
        row[key] = statistics.median(values) if values else None
        if values and key in SPREAD_KEYS:
            row["spread"][key] = [min(values), max(values)]
    rss_values = [sample["peak_rss_mb"] for sample in samples if sample["peak_rss_mb"] is not None]
    row["peak_rss_mb"] = max(rss_values) if rss_values else None
    row["limited_by"] = limiting_side(row)
    return row


def summarize(round_rows: list[dict]) -> list[dict]:
    """Rows of every round -> one median row per (workload, broker), in first-seen order."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in round_rows:
        groups.setdefault((row["workload"], row["broker"]), []).append(row)
    return [median_rows(samples) for samples in groups.values()]


def compare(pybroker: dict, tansu: dict, key: str, higher_is_better: bool) -> tuple[float | None, bool | None]:
    """(how many times better pybroker's median of `key` is, whether the two [min, max]
    ranges overlap); the second is None when a side has a single sample: no range, no verdict."""
    ours, theirs = pybroker.get(key), tansu.get(key)
    if not ours or not theirs:  # missing, or 0 (below the clock's resolution): no ratio
        return None, None
    ratio = ours / theirs if higher_is_better else theirs / ours
    if pybroker.get("samples", 1) < 2 or tansu.get("samples", 1) < 2:
        return ratio, None
    (our_low, our_high), (their_low, their_high) = pybroker["spread"][key], tansu["spread"][key]
    return ratio, our_low <= their_high and their_low <= our_high


def headline_key(row: dict) -> tuple[str, bool]:
    """The figure a row is about: p99 for a fixed-rate (latency) row, else messages per second."""
    return ("latency_p99_ms", False) if row.get("rate_limited") else ("msg_per_s", True)


def add_ratios(rows: list[dict]) -> None:
    """On each pybroker row: its headline figure over Tansu's (above 1: pybroker is better) and whether that is a tie."""
    tansu_rows = {row["workload"]: row for row in rows if row["broker"] == "tansu" and row["error"] is None}
    for row in rows:
        tansu = tansu_rows.get(row["workload"])
        if row["broker"] != "pybroker" or row["error"] is not None or tansu is None:
            continue
        row["pybroker_vs_tansu"], row["ratio_tie"] = compare(row, tansu, *headline_key(row))


def _three_figures(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _per_second(value: float) -> str:
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return _three_figures(value / scale) + suffix
    return _three_figures(value)


def _with_spread(row: dict, key: str, fmt: Callable[[float], str]) -> str:
    value = row.get(key)
    if value is None:
        return "-"
    text = fmt(value)
    if row.get("samples", 1) > 1 and key in row.get("spread", {}):
        low, high = row["spread"][key]
        text += f" [{fmt(low)}-{fmt(high)}]"
    return text


def other_cores(row: dict) -> float | None:
    """The machine's busy cores during a row that were neither its client's nor its broker's."""
    if row.get("machine_cores") is None or row.get("broker_cores") is None:
        return None
    return max(0.0, row["machine_cores"] - row["broker_cores"] - (row.get("client_cores") or 0.0))


def _cores(row: dict) -> str:
    if row.get("client_cores") is None or row.get("broker_cores") is None:
        return "-"
    processes = row.get("client_processes") or 1
    client = f"{row['client_cores']:.2f}" + (f" in {processes}" if processes > 1 else "")
    other = other_cores(row)
    return f"{client} / {row['broker_cores']:.2f} / " + ("-" if other is None else f"{other:.2f}")


def _ratio(ratio: float | None, tie: bool | None) -> str:
    if ratio is None:
        return "-"
    if tie is None:
        return f"{ratio:.2f}?"
    return f"tie {ratio:.2f}" if tie else f"{ratio:.2f}"


DETAIL_COLUMNS: tuple[tuple[str, Callable[[dict], str]], ...] = (
    # What the broker controls first (its CPU, memory, latency), then throughput.
    ("workload", lambda row: row["workload"]),
    ("broker", lambda row: row["broker"]),
    ("n", lambda row: str(row.get("samples", 1))),
    ("CPU s/GB", lambda row: _with_spread(row, "cpu_seconds_per_gb", _three_figures)),
    ("RSS MB", lambda row: "-" if row["peak_rss_mb"] is None else f"{row['peak_rss_mb']:,.0f}"),
    ("p50 ms", lambda row: _with_spread(row, "latency_p50_ms", _three_figures)),
    ("p99 ms", lambda row: _with_spread(row, "latency_p99_ms", _three_figures)),
    ("p99.9 ms", lambda row: _with_spread(row, "latency_p999_ms", _three_figures)),
    ("MB/s", lambda row: _with_spread(row, "mb_per_s", _three_figures)),
    ("msg/s", lambda row: _with_spread(row, "msg_per_s", _per_second)),
    ("read MB/s", lambda row: _with_spread(row, "read_mb_per_s", _three_figures)),
    ("cores client / broker / other", _cores),
    ("limited by", lambda row: row["limited_by"] or "-"),
    ("py/tansu", lambda row: _ratio(row["pybroker_vs_tansu"], row["ratio_tie"])),
)


def render(header: list[str], lines: list[list[str]], markdown: bool, left_columns: int = 2) -> str:
    """A table as aligned text (the first left_columns left-aligned, the rest right-aligned)
    or as Markdown. A line with fewer cells than the header (a failure's message) ends in
    its last cell, which widens no column."""
    if markdown:
        rule = ["---" if index < left_columns else "---:" for index in range(len(header))]
        padded = [cells + [""] * (len(header) - len(cells)) for cells in lines]
        return "\n".join("| " + " | ".join(cells) + " |" for cells in [header, rule, *padded])
    full = [header, *(cells for cells in lines if len(cells) == len(header))]
    widths = [max(len(cells[index]) for cells in full) for index in range(len(header))]
    aligned = []
    for cells in [header, *lines]:
        texts = [cell if index == len(cells) - 1 < len(header) - 1 else
                 cell.ljust(width) if index < left_columns else cell.rjust(width)
                 for index, (cell, width) in enumerate(zip(cells, widths))]  # fmt: skip
        aligned.append("  ".join(texts).rstrip())
    aligned.insert(1, "-" * len(aligned[0]))
    return "\n".join(aligned)


def format_table(rows: list[dict], markdown: bool = False) -> str:
    header = [title for title, _ in DETAIL_COLUMNS]
    lines = [[row["workload"], row["broker"], f"FAILED: {row['error']}"] if row["error"] else
             [cell(row) for _, cell in DETAIL_COLUMNS] for row in rows]  # fmt: skip
    return render(header, lines, markdown)


def _versus(pybroker: dict, tansu: dict, key: str, higher_is_better: bool, fmt: Callable[[float], str],
            with_ratio: bool = True) -> str:  # fmt: skip
    if pybroker.get(key) is None or tansu.get(key) is None:
        return "-"
    text = f"{fmt(pybroker[key])} vs {fmt(tansu[key])}"
    if not with_ratio:
        return text
    ratio, tie = compare(pybroker, tansu, key, higher_is_better)
    return text if ratio is None else f"{text}: {_ratio(ratio, tie)}"


def _verdicts(figure: str, better: str, worse: str, results: list[tuple[float | None, bool | None]]) -> str | None:
    """One summary line: in how many workloads pybroker is better, worse, tied, or not judged."""
    judged = [(ratio, tie) for ratio, tie in results if ratio is not None]
    if not judged:
        return None
    parts = []
    if any(tie is not None for _, tie in judged):
        parts.append(f"pybroker {better} in {sum(ratio > 1 and tie is False for ratio, tie in judged)}, "
                     f"{worse} in {sum(ratio < 1 and tie is False for ratio, tie in judged)}, "
                     f"tie in {sum(tie is True for _, tie in judged)}")  # fmt: skip
    single = [ratio for ratio, tie in judged if tie is None]
    if single:
        parts.append(f"{len(single)} with one run each, not judged (pybroker {better} in {sum(r > 1 for r in single)})")
    return f"{figure}, {len(judged)} workload{'s' if len(judged) > 1 else ''}: " + "; ".join(parts)


def comparison(rows: list[dict], markdown: bool = False) -> str:
    """pybroker against Tansu per workload, the broker's own costs first, then throughput,
    and a count of each verdict; empty when no workload has both brokers."""
    tansu_rows = {row["workload"]: row for row in rows if row["broker"] == "tansu" and row["error"] is None}
    pairs = [(row, tansu_rows[row["workload"]]) for row in rows
             if row["broker"] == "pybroker" and row["error"] is None and row["workload"] in tansu_rows]  # fmt: skip
    if not pairs:
        return ""
    header = [
        "workload",
        "broker CPU s/GB",
        "RSS MB",
        "p99 ms at a fixed rate",
        "throughput",
        "limited by (py / tansu)",
    ]
    lines = []
    cpu_results, latency_results, throughput_results = [], [], []
    client_limited = 0
    for ours, theirs in pairs:
        latency = "-"
        if ours["rate_limited"]:
            throughput = "fixed rate"
            latency = _versus(ours, theirs, "latency_p99_ms", False, _three_figures)
            latency_results.append(compare(ours, theirs, "latency_p99_ms", False))
        elif ours.get("read_mb_per_s") is not None:
            throughput = (_versus(ours, theirs, "mb_per_s", True, _three_figures) + " MB/s written; "
                          + _versus(ours, theirs, "read_mb_per_s", True, _three_figures) + " read")  # fmt: skip
        else:
            throughput = _versus(ours, theirs, "msg_per_s", True, _per_second) + " msg/s"
        if not ours["rate_limited"]:
            throughput_results.append(compare(ours, theirs, *headline_key(ours)))
            client_limited += "client" in (ours["limited_by"], theirs["limited_by"])
        cpu_results.append(compare(ours, theirs, "cpu_seconds_per_gb", False))
        lines.append([
            ours["workload"],
            _versus(ours, theirs, "cpu_seconds_per_gb", False, _three_figures),
            _versus(ours, theirs, "peak_rss_mb", False, lambda megabytes: f"{megabytes:,.0f}", with_ratio=False),
            latency,
            throughput,
            f"{ours['limited_by'] or '-'} / {theirs['limited_by'] or '-'}",
        ])  # fmt: skip
    peak_rss_mb = [max((row["peak_rss_mb"] for row in side if row["peak_rss_mb"] is not None), default=None)
                   for side in zip(*pairs)]  # fmt: skip
    memory = None
    if None not in peak_rss_mb:
        memory = f"peak memory (RSS) over the run: pybroker {peak_rss_mb[0]:,.0f} MB, Tansu {peak_rss_mb[1]:,.0f} MB"
    summary = [
        _verdicts("broker CPU per GB", "less", "more", cpu_results),
        memory,
        _verdicts("p99 latency at a fixed rate", "lower", "higher", latency_results),
        _verdicts("throughput", "higher", "lower", throughput_results),
    ]
    if client_limited:
        summary.append(f"  of the throughput rows, {client_limited} were limited by the client on one side or both: "
                       "they measure the client more than the broker")  # fmt: skip
    title = (
        'pybroker vs Tansu: medians, "X vs Y: ratio"; ratio above 1 means pybroker is better '
        '(less CPU, lower latency, more throughput); "tie" when the two [min-max] ranges overlap'
    )
    table = render(header, lines, markdown, left_columns=len(header))
    return "\n".join([title, "", table, "", *(line for line in summary if line)])


def shared_machine_warning(rows: list[dict]) -> str | None:
    shared = [row for row in rows if (other_cores(row) or 0.0) > SHARED_MACHINE_CORES]
    if not shared:
        return None
    worst = max(other_cores(row) for row in shared)
    return (f"WARNING: in {len(shared)} of {len(rows)} rows other processes used more than {SHARED_MACHINE_CORES:g} "
            f"cores (up to {worst:.2f}): the machine was shared, and those figures are not the brokers' alone.")  # fmt: skip


LEGEND = """\
Each figure is the median of its runs (n: one per round, three per round for consume) with
[min-max] over them. The broker's own costs come first:
- CPU s/GB: broker process CPU seconds (user+system, all threads) during the workload per GB
  of payload produced; counted in 10 ms ticks, so rough at --quick sizes. RSS MB: the broker's peak resident memory since it started (VmHWM;
  one broker serves all of a round's workloads, so it only grows down the table).
- p50/p99/p99.9 ms: on the latency row, scheduled send time to receive time at a fixed rate,
  one partition, producer linger.ms=1, consumer fetch.wait.max.ms=100 (a broker that answers
  a waiting fetch only at its max wait shows p99 near 100 ms). On parallel rows, produce()
  to receipt at full load, which includes time queued in the producers: there it mostly
  restates the throughput.
Then throughput: MB/s counts payload bytes only; parallel rows show the aggregate written
(until the last acks=all answer) and read (until the last message reached a consumer).
- cores client / broker / other: CPU seconds per second of the timed run used by the client
  process(es) ("in 8": eight processes together), by the broker, and by everything else on
  the machine (/proc/stat less the two; well above 0 means the run shared the machine and
  its figures are suspect). limited by: the side whose busiest process used at least {full:.0%}
  of a core while the other's did not ("client", "broker"; "both"; "all cores": neither
  did, but the machine's {cores} cores were busy; "neither": both waited). A row limited by
  the client measures the client: its throughput ratio says little about the broker, even
  when it is not a tie. Tansu is multi-threaded and can use more than one core.
- py/tansu: pybroker msg/s / Tansu msg/s; for the latency row Tansu p99 / pybroker p99.
  Above 1 means pybroker is better. "tie 0.97": the two brokers' [min-max] ranges overlap,
  so the difference is within the run-to-run spread; "1.05?": a single run each, no spread
  to judge by.
Tansu runs with memory storage; pybroker writes its log to disk. The limit rows move the
same bytes with no broker: the most any broker row could reach; their CPU s/GB is the
receiving process's (TCP sink) or the writer's (file append)."""


def legend() -> str:
    return LEGEND.format(full=FULL_CORE_SHARE, cores=os.cpu_count())
