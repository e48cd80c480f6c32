"""Draws a fault run as a Jepsen-style latency timeline: one point per client
operation at (start time, latency), coloured by outcome, over shaded nemesis
windows, so a reader sees at a glance when the cluster stalled and for how long.

matplotlib is imported inside draw() so that the checker and the harness run
without it.
"""

from __future__ import annotations

import math

# More points than this make the PNG slow to render and no more readable.
SEND_POINTS_MAX = 200_000
# Latency 0 cannot sit on a log axis; anything quicker than this is drawn at it.
LATENCY_FLOOR_MS = 0.01

OUTCOME_COLORS = {"ok": "#1f78b4", "info": "#ff7f00", "fail": "#e31a1c"}
MARKERS = {"send": "o", "txn": "o", "commit": "s", "committed": "D", "create_topic": "^", "poll": "."}
# Drawn bottom to top: the rare, interesting ops last so sends do not hide them.
DRAW_ORDER = ("poll", "send", "txn", "commit", "committed", "create_topic")
NEMESIS_COLORS = {
    "kill": "#fbb4ae",
    "pause": "#b3cde3",
    "isolate-leader": "#ccebc5",
    "split": "#decbe4",
    "one-way": "#fed9a6",
    "slow-link": "#ffffcc",
    "kill-controller-leader": "#e5d8bd",
    "disk-full": "#fddaec",
}
SPARE_NEMESIS_COLORS = ("#d9d9d9", "#b3e2cd", "#fdcdac", "#cbd5e8", "#f4cae4", "#e6f5c9", "#fff2ae", "#f1e2cc")


def draw(history: list[dict], nemeses: list[dict], summary: dict, path, title: str) -> None:
    """Write the run's timeline PNG to `path`."""
    # The object API with an Agg canvas renders off-screen without switching
    # pyplot's process-wide backend or leaving figures registered in it.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.transforms import blended_transform_factory

    figure = Figure(figsize=(14, 6), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)

    _draw_nemeses(axes, nemeses, blended_transform_factory(axes.transData, axes.transAxes))
    latest_s = _draw_operations(axes, history)
    latest_s = max([latest_s, 1.0] + [window["end_s"] for window in nemeses])

    axes.set_yscale("log")
    if not axes.lines:
        axes.set_ylim(0.1, 10_000)  # an empty log axis has no limits of its own
    axes.set_xlim(0, latest_s * 1.01)
    axes.set_xlabel("time since start (s)")
    axes.set_ylabel("latency (ms)")
    axes.grid(True, which="major", axis="both", linewidth=0.4, alpha=0.5)
    axes.set_title(_title_line(title, summary), fontsize=10)
    handles, labels = axes.get_legend_handles_labels()
    if handles:
        legend = axes.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
        # The plotted markers are tiny and faint so a million fit; the legend's should be readable.
        for handle in getattr(legend, "legend_handles", None) or getattr(legend, "legendHandles", []):
            if hasattr(handle, "set_markersize"):
                handle.set_markersize(5)
                handle.set_alpha(1.0)
    figure.subplots_adjust(left=0.06, right=0.84, top=0.92, bottom=0.09)
    figure.savefig(path, format="png")


def _title_line(title: str, summary: dict) -> str:
    keys = ("acknowledged", "lost", "duplicates", "inconsistent")
    if summary.get("workload") == "txn":
        keys = ("txn_committed", "txn_aborted", "txn_indeterminate", "txn_anomalies")
    figures = ", ".join(f"{key} {summary.get(key, '?')}" for key in keys)
    return f"{title} \u2014 {figures}"


def _draw_nemeses(axes, nemeses: list[dict], top_transform) -> None:
    colors: dict[str, str] = {}
    for window in sorted(nemeses, key=lambda window: window["start_s"]):
        kind = window["kind"]
        first_of_kind = kind not in colors
        if first_of_kind:
            spare = SPARE_NEMESIS_COLORS[len(colors) % len(SPARE_NEMESIS_COLORS)]
            colors[kind] = NEMESIS_COLORS.get(kind, spare)
        axes.axvspan(
            window["start_s"],
            window["end_s"],
            color=colors[kind],
            alpha=0.6,
            linewidth=0,
            zorder=0,
            label=kind if first_of_kind else None,
        )
        targets = ",".join(window.get("targets") or ())
        if targets:
            axes.text(
                window["start_s"],
                0.99,
                targets,
                transform=top_transform,
                fontsize=6,
                rotation=90,
                va="top",
                ha="left",
                color="#444444",
                zorder=1,
            )


def _send_stride(history: list[dict]) -> int:
    """Keep every k-th ok send so the drawn sends stay near SEND_POINTS_MAX."""
    sends = sum(1 for op in history if op.get("f") == "send")
    return max(1, math.ceil(sends / SEND_POINTS_MAX))


def _draw_operations(axes, history: list[dict]) -> float:
    """Plot every operation; return the latest end_s seen (0 when there are none)."""
    stride = _send_stride(history)
    points: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    ok_sends_seen = 0
    latest_s = 0.0
    for op in history:
        f = op.get("f")
        if f not in MARKERS or op.get("start_s") is None or op.get("end_s") is None:
            continue
        latest_s = max(latest_s, op["end_s"])
        if f == "send" and op["type"] == "ok":
            ok_sends_seen += 1
            if (ok_sends_seen - 1) % stride:
                continue
        xs, ys = points.setdefault((f, op["type"]), ([], []))
        xs.append(op["start_s"])
        ys.append(max((op["end_s"] - op["start_s"]) * 1000.0, LATENCY_FLOOR_MS))

    for f in DRAW_ORDER:
        for outcome in ("ok", "info", "fail"):
            if (f, outcome) not in points:
                continue
            xs, ys = points[(f, outcome)]
            label = f"{f} {outcome}"
            if f == "send" and outcome == "ok" and stride > 1:
                label += f" (every {stride}th)"
            axes.plot(
                xs,
                ys,
                linestyle="none",
                marker=MARKERS[f],
                markersize=1.5 if f in ("send", "poll") else 2.5 if f == "txn" else 4,
                alpha=0.15 if f == "poll" else 0.7,
                color=OUTCOME_COLORS.get(outcome, "#777777"),
                markeredgewidth=0,
                label=label,
                zorder=2,
                rasterized=True,
            )
    return latest_s
