"""Broker memory per idle connection (issue 16): 10,000 connections, each
served one ApiVersions request and then left idle, cost the broker a few
kilobytes each (no receive buffer of their own), and that memory is given back
once they close. The RSS figures come from /proc, as benchmarks/connections.py
prints them; the client sockets are plain sockets of this process.

What stays after the first 10,000 close is Python's small-object arenas that a
few objects made during the burst keep (docs/PERFORMANCE.md, "Memory per
connection"): 12-21 % over the starting RSS in runs on a 2-core machine,
depending on where those objects fall. A second burst reuses those arenas: it
must leave the broker within 5 % of where the first left it (measured:
+0-2 %), which a leak of 250 bytes or more per connection would not.
"""

from __future__ import annotations

import resource

import pytest

from benchmarks.connections import measure

CONNECTIONS = 10_000
# The goal is 16 KiB or less per idle connection (measured: about 2); twice
# that keeps the test steady on a busy machine.
RSS_PER_CONNECTION_MAX_BYTES = 32 * 1024
# RSS after the first burst closed, against before it (module doc).
FIRST_BURST_KEPT_MAX = 1.3
# RSS after a second burst closed, against after the first: 5 % is 250 bytes of
# each of the 10,000 connections kept.
SECOND_BURST_GROWTH_MAX = 1.05


def test_ten_thousand_idle_connections(broker_factory):
    # This process and the broker each hold one descriptor per connection.
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < CONNECTIONS + 500:
        pytest.skip(f"open-file limit {soft} is below {CONNECTIONS + 500}")
    broker = broker_factory()
    first = measure(broker.process.pid, broker.host, broker.port, CONNECTIONS)
    assert first["per_connection"] <= RSS_PER_CONNECTION_MAX_BYTES, first
    assert first["rss_after"] <= FIRST_BURST_KEPT_MAX * first["rss_before"], first
    second = measure(broker.process.pid, broker.host, broker.port, CONNECTIONS)
    assert second["rss_after"] <= SECOND_BURST_GROWTH_MAX * first["rss_after"], (first, second)
