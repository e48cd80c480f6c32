"""The broker's two clocks.

``monotonic_ms`` measures durations: timeouts, deadlines of waiting requests,
replica lag, sessions, leases, backoffs, quota windows. It never jumps, so a
wall clock stepped by minutes (NTP, an operator, a VM resumed) neither
expires them early nor holds them past their time.

``wall_ms`` is for what Kafka defines on the wall clock: record and
log-append timestamps, time-based retention and segment rolling (they compare
record timestamps with it), offset commit timestamps and offsets.retention,
a transaction's start time and timeout, producer id expiration, token
expiry, and times shown to people. docs/RELIABILITY.md ("Clock jumps") says
what each of those does when the wall clock jumps.
"""

from __future__ import annotations

import time


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    return int(time.time() * 1000)
