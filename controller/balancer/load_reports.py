"""What the brokers measured, as the active controller last heard it (pure).

Brokers put a ``balancer_load`` in their heartbeats (protocol/messages/
broker_lifecycle.py): their log dirs' file-system capacity and use, their
client bytes in and out per second and, every ``SIZES_INTERVAL_MS`` only, the
size of every replica they hold. The active controller keeps the latest per
broker in memory only: measurements are not metadata, and a new active
controller waits for fresh ones (a broker's next heartbeat, and its next sizes
within ``SIZES_INTERVAL_MS``) rather than acting on a predecessor's.

The balancer's driver (controller/balancer/driver.py) reads them as the
planner's ``disk_bytes``, ``broker_rates`` and ``partition_sizes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# How often a broker sends its replicas' sizes (its disk use goes in every
# heartbeat). Sizes are a line per replica: every heartbeat (2 s) would make
# a broker of thousands of partitions send tens of kilobytes each time for a
# balancer that plans on a scale of minutes; the disk trigger itself reads the
# file systems' use, which is in every heartbeat.
SIZES_INTERVAL_MS = 5000
UNKNOWN = -1


@dataclass(frozen=True)
class BrokerLoadReport:
    """One broker's measurements. ``partition_sizes`` is None until a report
    with sizes has arrived; ``sizes_received_ms`` is when it did (-1: never).
    Rates are -1 when the broker does not measure them."""

    disk_capacity_bytes: int
    disk_used_bytes: int
    bytes_in_per_second: int = UNKNOWN
    bytes_out_per_second: int = UNKNOWN
    partition_sizes: Mapping[tuple[str, int], int] | None = None
    received_ms: int = 0
    sizes_received_ms: int = UNKNOWN

    def above(self, threshold_percent: int) -> bool:
        """Whether its disk use is above ``threshold_percent`` of its capacity (0 capacity: unknown, never)."""
        return self.disk_capacity_bytes > 0 and self.disk_used_bytes * 100 > threshold_percent * self.disk_capacity_bytes


def report_from_heartbeat(load, now_ms: int, previous: BrokerLoadReport | None) -> BrokerLoadReport:
    """A heartbeat's ``balancer_load`` as a report; sizes not sent are the previous report's."""
    if load.partition_sizes is None:
        sizes = previous.partition_sizes if previous is not None else None
        sizes_ms = previous.sizes_received_ms if previous is not None else UNKNOWN
    else:
        sizes = {(t.topic, p.partition_index): max(0, p.size_bytes) for t in load.partition_sizes for p in t.partitions}
        sizes_ms = now_ms
    return BrokerLoadReport(
        disk_capacity_bytes=max(0, load.disk_capacity_bytes),
        disk_used_bytes=max(0, load.disk_used_bytes),
        bytes_in_per_second=load.bytes_in_per_second,
        bytes_out_per_second=load.bytes_out_per_second,
        partition_sizes=sizes,
        received_ms=now_ms,
        sizes_received_ms=sizes_ms,
    )


class LoadReports:
    """The latest report per broker (the active controller's; in memory only)."""

    def __init__(self):
        self._reports: dict[int, BrokerLoadReport] = {}

    def received(self, broker_id: int, load, now_ms: int) -> None:
        """A heartbeat's ``balancer_load`` (None: the broker sent none, and its last report stands)."""
        if load is None:
            return
        self._reports[broker_id] = report_from_heartbeat(load, now_ms, self._reports.get(broker_id))

    def forget(self, broker_id: int) -> None:
        self._reports.pop(broker_id, None)

    def clear(self) -> None:
        self._reports.clear()

    def get(self, broker_id: int) -> BrokerLoadReport | None:
        return self._reports.get(broker_id)

    def snapshot(self) -> dict[int, BrokerLoadReport]:
        return dict(self._reports)


def planner_inputs(reports: Mapping[int, BrokerLoadReport]) -> tuple[dict, dict, dict]:
    """(``disk_bytes``, ``broker_rates``, ``partition_sizes``) for
    ``image_input.cluster_state_from_image``. A partition's size is the largest
    any of its replicas reported: its leader's, usually, which is what a new
    replica copies."""
    disk_bytes = {b: (r.disk_capacity_bytes, r.disk_used_bytes) for b, r in reports.items()}
    rates = {b: (max(0, r.bytes_in_per_second), max(0, r.bytes_out_per_second)) for b, r in reports.items()}
    sizes: dict[tuple[str, int], int] = {}
    for report in reports.values():
        for key, size in (report.partition_sizes or {}).items():
            if size > sizes.get(key, -1):
                sizes[key] = size
    return disk_bytes, rates, sizes
