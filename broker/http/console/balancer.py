"""The console's balancer page: the active controller's balancer and the per-broker distribution.

Read with DescribeBalancerStatus through this broker's own dispatcher
(broker/http/console/admin.py), which forwards it to the active controller, so
every node's console shows the same: the state (off, ready, in_progress,
stalled, with the reason), the moves in flight, and for every broker its
replicas and leaders now and when the current or last balancing run started
("before"), each as a bar scaled to the largest count of the table. Sizes the
controller does not know are shown as unknown, never guessed.
"""

from __future__ import annotations

import asyncio

from broker.http.console.admin import Admin, AdminRefused, error_text
from protocol.errors import ErrorCode

DESCRIBE_BALANCER_VERSION = 0
UNKNOWN = -1
# An election under way answers NOT_CONTROLLER: asked again this many times, this far apart.
NOT_CONTROLLER_ATTEMPTS = 10
NOT_CONTROLLER_BACKOFF_S = 0.25
BAR_WIDTH_PX = 160


async def balancer_overview(admin: Admin, host: str) -> dict:
    """What balancer.html shows; AdminRefused with the error when the controller does not answer."""
    for attempt in range(NOT_CONTROLLER_ATTEMPTS):
        r = await admin.call("DescribeBalancerStatus", DESCRIBE_BALANCER_VERSION, host, include_plan=False)
        if r.error_code != ErrorCode.NOT_CONTROLLER or attempt == NOT_CONTROLLER_ATTEMPTS - 1:
            break
        await asyncio.sleep(NOT_CONTROLLER_BACKOFF_S)
    if r.error_code != ErrorCode.NONE:
        raise AdminRefused(f"cannot describe the balancer: {error_text(r.error_code, r.error_message)}")
    now = {s.broker_id: (s.replicas, s.leaders) for s in r.broker_loads}
    disk = {
        s.broker_id: (s.disk_used_bytes, s.disk_capacity_bytes)
        for s in r.broker_loads if s.disk_used_bytes != UNKNOWN and s.disk_capacity_bytes > 0
    }
    before = {s.broker_id: (s.replicas, s.leaders) for s in r.distribution_before}
    placements = {p.broker_id: p.state for p in r.broker_placements}
    most_replicas = max([1, *(v[0] for v in (*now.values(), *before.values()))])
    most_leaders = max([1, *(v[1] for v in (*now.values(), *before.values()))])

    def bar(count: int | None, most: int) -> int | None:
        return None if count is None else round(BAR_WIDTH_PX * count / most)

    rows = []
    for broker_id in sorted({*now, *before}):
        replicas, leaders = now.get(broker_id, (None, None))
        replicas_before, leaders_before = before.get(broker_id, (None, None))
        rows.append({
            "broker_id": broker_id,
            "placement": placements.get(broker_id, "normal"),
            "failed": broker_id in r.failed_brokers,
            "replicas": replicas, "replicas_bar": bar(replicas, most_replicas),
            "replicas_before": replicas_before, "replicas_before_bar": bar(replicas_before, most_replicas),
            "leaders": leaders, "leaders_bar": bar(leaders, most_leaders),
            "leaders_before": leaders_before, "leaders_before_bar": bar(leaders_before, most_leaders),
            # Disk use of the broker's log dirs' file systems, when it has reported it.
            "disk_percent": round(100 * disk[broker_id][0] / disk[broker_id][1]) if broker_id in disk else None,
            "disk_bar": round(BAR_WIDTH_PX * disk[broker_id][0] / disk[broker_id][1]) if broker_id in disk else None,
        })
    return {
        "state": r.state,
        "reason": r.reason,
        "trigger": r.trigger,
        "moves_in_flight": r.moves_in_flight,
        "bytes_to_move": None if r.bytes_to_move == UNKNOWN else r.bytes_to_move,
        "estimated_s": None if r.estimated_ms == UNKNOWN else round(r.estimated_ms / 1000),
        "balanced_since_ms": None if r.balanced_since_ms == UNKNOWN else r.balanced_since_ms,
        "before_ms": None if r.distribution_before_ms == UNKNOWN else r.distribution_before_ms,
        "failed_brokers": list(r.failed_brokers),
        "rows": rows,
        "bar_width": BAR_WIDTH_PX,
    }
