"""In-memory time series for the console's graphs, and their server-side SVG.

:class:`History` samples, on the event loop every ``interval_ms``
(``console.lag.history.ms`` / 600, at least one second, so a series holds
at most ~600 points), the lag of every (group, topic, partition) of the
cluster (high watermark less committed offset, as ``kafka_consumergroup_lag``;
groups coordinated elsewhere and high watermarks of partitions led elsewhere
read with views.cluster_groups: one ListGroups and one OffsetFetch per other
broker, one ListOffsets per leader, each with the reader's timeout, so a sample
waits at most a few seconds and the next starts one interval after it ends),
the lag of every mirror topic (links.cluster_mirrors: one DescribeMirrors
per live broker, only while the cluster has mirror topics; the sum of its
partitions' lag in records and the largest of their lag in milliseconds),
and a few broker-wide values. The counters come
from broker/http/metrics.py when ``metrics.listener`` is set (records and bytes in
and out, requests); without it the console keeps its own: records appended
(the sum of the log end offsets of the partitions this broker leads), log
bytes, connections, under-replicated partitions. Samples older than the window
go; at most ``MAX_LAG_SERIES`` lag series are kept (the first groups by name,
of at most views.MAX_GROUPS groups),
so a sample costs a bounded amount of work whatever the cluster holds.

:func:`svg_chart` draws a series set as an SVG line chart; every label passes
through :func:`html.escape`, as it is inserted into the page as markup.
"""

from __future__ import annotations

import html
import itertools
import time
from collections import deque

from broker.http.console.links import cluster_mirrors, mirror_lag_totals
from broker.http.console.views import cluster_groups

MAX_LAG_SERIES = 5000
MAX_MIRROR_SERIES = 5000  # mirror topics with a lag series (the first by name)
POINTS_PER_WINDOW = 600
MIN_INTERVAL_MS = 1000

# Broker-wide series: name -> (title, unit, counter?) — counters are drawn as a rate per second.
OWN_SERIES = {
    "records_appended": ("Records appended (led partitions)", "records/s", True),
    "log_bytes": ("Log bytes on this broker", "bytes", False),
    "connections": ("Open connections", "connections", False),
    "under_replicated": ("Under-replicated partitions (led here)", "partitions", False),
}
METRICS_SERIES = {
    "messages_in": ("Messages in (kafka_server_brokertopicmetrics_messagesin)", "records/s", True),
    "bytes_in": ("Bytes in (kafka_server_brokertopicmetrics_bytesin)", "bytes/s", True),
    "bytes_out": ("Bytes out (kafka_server_brokertopicmetrics_bytesout)", "bytes/s", True),
    "requests": ("Requests (kafka_network_requestmetrics_requests)", "requests/s", True),
}


class History:
    def __init__(self, broker, window_ms: int, reader=None):
        self.broker = broker
        # broker.http.cluster_reader.ClusterReader: groups coordinated and partitions led elsewhere.
        self.reader = reader
        self.unavailable: list[str] = []
        self.window_ms = window_ms
        self.interval_ms = max(MIN_INTERVAL_MS, window_ms // POINTS_PER_WINDOW)
        # (group, topic, partition) -> deque of (time ms, lag)
        self.lag: dict[tuple[str, str, int], deque] = {}
        self.lag_series_dropped = 0
        # series name -> deque of (time ms, value)
        self.broker_series: dict[str, deque] = {}
        # mirror topic -> deque of (time ms, sum of lag records, max lag ms); None: not told
        self.mirror_lag: dict[str, deque] = {}
        self.mirror_notes: list[str] = []

    def series_specs(self) -> dict[str, tuple[str, str, bool]]:
        specs = dict(OWN_SERIES)
        if self.broker.metrics is not None:
            specs.update(METRICS_SERIES)
        return specs

    async def sample(self, now_ms: int | None = None) -> None:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        horizon_ms = now_ms - self.window_ms
        self._sample_broker(now_ms, horizon_ms)
        if self.reader is not None and self.broker.is_broker:
            view = await cluster_groups(self.broker, self.reader)
            self.unavailable = view.notes
            self._record_lag(view, now_ms, horizon_ms)
            mirrors = await cluster_mirrors(self.broker, self.reader)
            self.mirror_notes = mirrors.notes
            self._record_mirror_lag(mirrors.views, now_ms, horizon_ms)

    def _record_mirror_lag(self, views: dict, now_ms: int, horizon_ms: int) -> None:
        for topic in sorted(views):
            totals = mirror_lag_totals(views[topic])
            if totals == (None, None):
                continue  # no partition told its lag: a gap, not a made-up point
            series = self.mirror_lag.get(topic)
            if series is None:
                if len(self.mirror_lag) >= MAX_MIRROR_SERIES:
                    continue
                series = self.mirror_lag[topic] = deque()
            series.append((now_ms, *totals))
        for topic in list(self.mirror_lag):
            series = self.mirror_lag[topic]
            while series and series[0][0] < horizon_ms:
                series.popleft()
            if not series:
                del self.mirror_lag[topic]

    def mirror_lag_points(self, topic: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(lag records, lag ms) points of a mirror topic, each where told."""
        series = self.mirror_lag.get(topic, ())
        return ([(t, r) for t, r, _ in series if r is not None], [(t, m) for t, _, m in series if m is not None])

    def _record_lag(self, view, now_ms: int, horizon_ms: int) -> None:
        seen = set()
        dropped = 0
        for group_id in sorted(view.committed):
            for (topic, partition), committed in sorted(view.committed[group_id].items()):
                hw = view.hw.get((topic, partition))
                if hw is None:
                    continue  # its leader did not answer: a gap in the line, not a made-up point
                key = (group_id, topic, partition)
                series = self.lag.get(key)
                if series is None:
                    if len(self.lag) >= MAX_LAG_SERIES:
                        dropped += 1
                        continue
                    series = self.lag[key] = deque()
                seen.add(key)
                series.append((now_ms, max(hw - committed, 0)))
        self.lag_series_dropped = dropped
        for key in list(self.lag):
            series = self.lag[key]
            while series and series[0][0] < horizon_ms:
                series.popleft()
            if key not in seen and not series:
                del self.lag[key]

    def _sample_broker(self, now_ms: int, horizon_ms: int) -> None:
        broker = self.broker
        values = {}
        leaders = broker.replicas.leaders if broker.is_broker else {}
        appended = 0
        for key in leaders:
            plog = broker.logs.logs.get(key)
            if plog is not None:
                appended += plog.log_end_offset
        values["records_appended"] = appended
        values["log_bytes"] = sum(sum(s.size_bytes for s in plog.segments) for _, plog in broker.logs.opened_logs())
        values["connections"] = len(broker._connections)
        values["under_replicated"] = broker.replicas.hosted().under_replicated if broker.is_broker else 0
        metrics = broker.metrics
        if metrics is not None:
            from broker.http.metrics import BYTES_IN, BYTES_OUT, MESSAGES_IN

            values["messages_in"] = metrics.all_topics[MESSAGES_IN]
            values["bytes_in"] = metrics.all_topics[BYTES_IN]
            values["bytes_out"] = metrics.all_topics[BYTES_OUT]
            values["requests"] = sum(metrics.requests.values())
        for name, value in values.items():
            series = self.broker_series.setdefault(name, deque())
            series.append((now_ms, value))
            while series and series[0][0] < horizon_ms:
                series.popleft()

    def group_lag(self, group_id: str) -> dict[str, list[tuple[int, int]]]:
        return {f"{t}-{p}": list(s) for (g, t, p), s in sorted(self.lag.items()) if g == group_id}

    def broker_chart_points(self, name: str, rate: bool) -> list[tuple[int, float]]:
        points = list(self.broker_series.get(name, ()))
        if not rate:
            return points
        # A counter becomes its rate per second between samples (a counter reset, e.g. a log truncated: 0).
        return [
            (t1, max(v1 - v0, 0) * 1000 / (t1 - t0)) for (t0, v0), (t1, v1) in itertools.pairwise(points) if t1 > t0
        ]


PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
MAX_LINES = len(PALETTE)


def svg_chart(series: dict[str, list[tuple[int, float]]], *, title: str, unit: str, width: int = 560, height: int = 180, css_id: str = "") -> str:
    """A line chart of ``series`` (label -> points (time ms, value)); the first ``MAX_LINES`` lines are drawn."""
    left, right, top, bottom = 56, 10, 22, 22
    plot_w, plot_h = width - left - right, height - top - bottom
    drawn = dict(list(series.items())[:MAX_LINES])
    points = [p for pts in drawn.values() for p in pts]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}"'
        + (f' id="{html.escape(css_id)}"' if css_id else "")
        + f' data-points="{len(points)}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="{left}" y="14" class="chart-title">{html.escape(title)} ({html.escape(unit)})</text>',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="chart-frame"/>',
    ]
    if not points:
        parts.append(f'<text x="{left + 8}" y="{top + plot_h // 2}" class="chart-empty">no samples yet</text></svg>')
        return "".join(parts)
    t_min = min(p[0] for p in points)
    t_max = max(p[0] for p in points)
    v_max = max(max(p[1] for p in points), 1)
    t_span = max(t_max - t_min, 1)

    def xy(t: int, v: float) -> str:
        return f"{left + (t - t_min) * plot_w / t_span:.1f},{top + plot_h - v * plot_h / v_max:.1f}"

    parts.append(f'<text x="{left - 4}" y="{top + 8}" class="chart-axis" text-anchor="end">{_short(v_max)}</text>')
    parts.append(f'<text x="{left - 4}" y="{top + plot_h}" class="chart-axis" text-anchor="end">0</text>')
    parts.append(f'<text x="{left}" y="{height - 6}" class="chart-axis">-{(t_max - t_min) / 1000:.0f} s</text>')
    parts.append(f'<text x="{left + plot_w}" y="{height - 6}" class="chart-axis" text-anchor="end">now</text>')
    for index, (label, pts) in enumerate(drawn.items()):
        color = PALETTE[index]
        if len(pts) == 1:
            x, y = xy(*pts[0]).split(",")
            parts.append(f'<circle cx="{x}" cy="{y}" r="2.5" fill="{color}"/>')
        else:
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{" ".join(xy(t, v) for t, v in pts)}"/>')
        last = pts[-1][1] if pts else 0
        parts.append(
            f'<text x="{left + plot_w - 4}" y="{top + 12 + 12 * index}" text-anchor="end" class="chart-legend" fill="{color}">'
            f"{html.escape(label)}: {_short(last)}</text>"
        )
    if len(series) > MAX_LINES:
        parts.append(f'<text x="{left + 4}" y="{top + plot_h - 4}" class="chart-axis">{len(series) - MAX_LINES} more not drawn</text>')
    parts.append("</svg>")
    return "".join(parts)


def _short(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
