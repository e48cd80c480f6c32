"""The balancer's Prometheus families (pybroker's own: Kafka has no balancer).

Only the active controller reports them: the balancer's driver
(controller/balancer/driver.py) runs there and nowhere else, and a scrape reads
it in memory without sending anything (broker/http/metrics.py: a scrape never
waits on another node). Elsewhere each family has no series, rather than a
value this node does not know; sum or max over the cluster's nodes reads the
active controller's. Per-broker counts come from the active controller's
metadata, like Kafka's global partition counts.

* ``pybroker_balancer_state{state}``: 1 for the current state (off, ready,
  in_progress, stalled), 0 for the others.
* ``pybroker_balancer_moves_in_flight``: the partition moves it has running.
* ``pybroker_balancer_bytes_to_move``: the size of the partitions the running
  moves copy (what they copied is not subtracted); only when the controller
  knows every moved partition's size from the brokers' reports.
* ``pybroker_balancer_seconds_since_balanced``: since a plan last found nothing
  to move; no series while moves run or before this controller's first check.
* ``pybroker_balancer_broker_replicas{broker}`` and
  ``pybroker_balancer_broker_leaders{broker}``: every registered broker's share.
* ``pybroker_balancer_broker_disk_used_ratio{broker}``: the used fraction of the
  file systems holding the broker's log dirs, as it last reported it to this
  controller (no series for a broker that has not reported since).
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

# The balancer's states (controller/balancer/driver.py BalancerState), each reported even at 0.
BALANCER_STATES = ("off", "ready", "in_progress", "stalled")
UNKNOWN = -1


def balancer_families(broker) -> list[GaugeMetricFamily]:
    state = GaugeMetricFamily("pybroker_balancer_state", "1 for the balancer's current state, 0 for the others", labels=["state"])
    moves = GaugeMetricFamily("pybroker_balancer_moves_in_flight", "Partition moves the balancer has running")
    to_move = GaugeMetricFamily("pybroker_balancer_bytes_to_move", "Size of the partitions the running moves copy (only when known)")
    balanced = GaugeMetricFamily(
        "pybroker_balancer_seconds_since_balanced",
        "Seconds since a plan last found nothing to move (no series while moves run or before the first check)",
    )
    replicas = GaugeMetricFamily("pybroker_balancer_broker_replicas", "Replicas each broker holds", labels=["broker"])
    leaders = GaugeMetricFamily("pybroker_balancer_broker_leaders", "Partitions each broker leads", labels=["broker"])
    disk = GaugeMetricFamily(
        "pybroker_balancer_broker_disk_used_ratio", "Used fraction of each broker's log dirs' file systems, as last reported",
        labels=["broker"],
    )
    view = broker.controller.balancer_view()
    if view is not None:
        status, shares, now_ms, reports = view
        current = status.state.value if status is not None else "off"
        for name in BALANCER_STATES:
            state.add_metric([name], int(name == current))
        moves.add_metric([], status.moves_in_flight if status is not None else 0)
        if status is not None and status.bytes_to_move != UNKNOWN:
            to_move.add_metric([], status.bytes_to_move)
        if status is not None and status.balanced_since_ms is not None:
            balanced.add_metric([], max(0, now_ms - status.balanced_since_ms) / 1000)
        for broker_id, held, led in shares:
            replicas.add_metric([str(broker_id)], held)
            leaders.add_metric([str(broker_id)], led)
            report = reports.get(broker_id)
            if report is not None and report.disk_capacity_bytes > 0 and report.disk_used_bytes >= 0:
                disk.add_metric([str(broker_id)], report.disk_used_bytes / report.disk_capacity_bytes)
    return [state, moves, to_move, balanced, replicas, leaders, disk]
