"""What a broker tells the active controller's balancer about itself, in its heartbeats.

Each heartbeat (broker/lifecycle.py) carries a ``balancer_load``
(protocol/messages/broker_lifecycle.py): the capacity and use of the file
systems holding ``log.dirs`` (statvfs, each file system once however many
log dirs it holds), the client bytes in and out per second since the last
report, and, every ``SIZES_INTERVAL_MS`` only
(controller/balancer/load_reports.py says why), the bytes of every replica
this broker holds.

Kept cheap: statvfs is a system call per file system; a replica's size is the
sum of its segments' sizes, known in memory for an open log; a log not opened
yet (after a clean start, logs open on first use) is measured once by
listing its directory and remembered, since nothing writes to a log without
opening it.

The rates are Kafka's BytesInPerSec and BytesOutPerSec (produced and fetched
by clients; replication is not counted), from the metrics counters; without
``metrics.listener`` nothing counts them and they are reported as -1
(unknown), not as 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from controller.balancer.load_reports import SIZES_INTERVAL_MS
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

log = logging.getLogger(__name__)

_HB = struct_classes(APIS_BY_NAME["BrokerHeartbeat"].request)
UNKNOWN = -1
# How long measuring the sizes may hold the event loop at a time: a log not
# opened yet is measured by listing its directory, slow on a busy disk.
SIZES_SLICE_S = 0.005


def file_system_usage(paths) -> tuple[int, int]:
    """(capacity, used) bytes of the file systems holding ``paths``, each
    counted once; a path that cannot be read is left out."""
    capacity = used = 0
    seen: set[int] = set()
    for path in paths:
        try:
            device = os.stat(path).st_dev
            if device in seen:
                continue
            stats = os.statvfs(path)
        except OSError:
            continue
        seen.add(device)
        capacity += stats.f_blocks * stats.f_frsize
        used += (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    return capacity, used


class LoadReporter:
    """Builds the ``balancer_load`` of this broker's next heartbeat. ``clock_s``
    is monotonic seconds (injectable for tests)."""

    def __init__(self, broker, *, clock_s=time.monotonic, sizes_interval_ms: int = SIZES_INTERVAL_MS):
        self.broker = broker
        self._clock_s = clock_s
        self.sizes_interval_s = sizes_interval_ms / 1000
        self._sizes_sent_s: float | None = None
        self._last_counters: tuple[float, int, int] | None = None
        # Sizes of logs not opened: measured once (nothing writes to a closed log).
        self._closed_sizes: dict[tuple[str, int], int] = {}
        # Measured by a task prepare() starts, in slices of the event loop's
        # time; once prepare() is used, a heartbeat never waits for them.
        self._prepared_sizes: list | None = None
        self._measuring: asyncio.Task | None = None
        self._measured_in_background = False

    def _sizes_due(self, now_s: float) -> bool:
        return self._sizes_sent_s is None or now_s - self._sizes_sent_s >= self.sizes_interval_s

    def prepare(self) -> None:
        """Called before each heartbeat (on the event loop): when the sizes are
        due and not being measured, start measuring them in a task that pauses
        every ``SIZES_SLICE_S``; a heartbeat carries them once they are ready,
        and goes without them until then. 100,000 open logs held the event
        loop for about a third of a second every five seconds; after a clean
        start, listing their 100,000 directories took far longer, and the
        heartbeats waiting for it left the broker fenced."""
        self._measured_in_background = True
        if self._measuring is not None or self._prepared_sizes is not None or not self._sizes_due(self._clock_s()):
            return
        self._measuring = asyncio.get_running_loop().create_task(self._measure(), name="replica sizes")

    async def _measure(self) -> None:
        try:
            steps = self._size_steps()
            slice_started = time.perf_counter()
            while True:
                try:
                    next(steps)
                except StopIteration as done:
                    self._prepared_sizes = done.value
                    return
                if time.perf_counter() - slice_started >= SIZES_SLICE_S:
                    await asyncio.sleep(0)
                    slice_started = time.perf_counter()
        except Exception:  # the next heartbeat starts another
            log.exception("measuring the replica sizes failed")
        finally:
            self._measuring = None

    def stop(self) -> None:
        if self._measuring is not None:
            self._measuring.cancel()

    def report(self):
        now_s = self._clock_s()
        logs = self.broker.logs
        capacity, used = file_system_usage(logs.log_dirs)
        rate_in, rate_out = self._rates(now_s)
        sizes = None
        if self._measured_in_background:
            sizes, self._prepared_sizes = self._prepared_sizes, None
            if sizes is not None:
                self._sizes_sent_s = now_s
        elif self._sizes_due(now_s):
            sizes = self._sizes()
            self._sizes_sent_s = now_s
        return _HB.BalancerLoad(
            disk_capacity_bytes=capacity,
            disk_used_bytes=used,
            bytes_in_per_second=rate_in,
            bytes_out_per_second=rate_out,
            partition_sizes=sizes,
        )

    def _rates(self, now_s: float) -> tuple[int, int]:
        metrics = getattr(self.broker, "metrics", None)
        if metrics is None:
            return UNKNOWN, UNKNOWN
        bytes_in, bytes_out = metrics.client_bytes()
        last, self._last_counters = self._last_counters, (now_s, bytes_in, bytes_out)
        if last is None or now_s <= last[0]:
            return UNKNOWN, UNKNOWN
        elapsed = now_s - last[0]
        return int(max(0, bytes_in - last[1]) / elapsed), int(max(0, bytes_out - last[2]) / elapsed)

    def _sizes(self) -> list:
        steps = self._size_steps()
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def _size_steps(self):
        """The sizes, as a generator that yields after each partition and returns
        the list (a partition deleted meanwhile is left out or sent once more)."""
        logs = self.broker.logs
        opened = logs.logs
        by_topic: dict[str, list] = {}
        keys = logs.partitions()
        for key in keys:
            yield
            plog = opened.get(key)
            try:
                if plog is not None:
                    self._closed_sizes.pop(key, None)
                    size = plog.size_bytes
                else:
                    size = self._closed_sizes.get(key)
                    if size is None:
                        size = self._closed_sizes[key] = logs.size_bytes(*key) or 0
            except (OSError, RuntimeError):  # a log closed or deleted meanwhile: next time
                continue
            by_topic.setdefault(key[0], []).append(_HB.PartitionSize(partition_index=key[1], size_bytes=size))
        if len(self._closed_sizes) > len(keys):
            registered = set(keys)
            self._closed_sizes = {k: v for k, v in self._closed_sizes.items() if k in registered}
        return [_HB.TopicSizes(topic=name, partitions=parts) for name, parts in sorted(by_topic.items())]
