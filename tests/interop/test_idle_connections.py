"""connections.max.idle.ms: a connection with nothing received or answered for
that long is closed; one in use, or waiting on a long-polling fetch, is not."""

from __future__ import annotations

import time

from tests.interop._support import API_VERSIONS, FETCH, REQ, RawConnection, create_topic, fetch_request

IDLE_MS = 800


def api_versions(connection: RawConnection) -> None:
    body = REQ[18].ApiVersionsRequest(client_software_name="idle-test", client_software_version="1")
    assert connection.request(API_VERSIONS, 3, body).error_code == 0


def test_idle_connections_are_closed_and_busy_ones_kept(broker_factory):
    broker = broker_factory({"connections.max.idle.ms": str(IDLE_MS)})
    with RawConnection(broker.bootstrap) as idle, RawConnection(broker.bootstrap) as busy:
        api_versions(idle)
        api_versions(busy)
        started = time.monotonic()
        while time.monotonic() - started < 3 * IDLE_MS / 1000:
            api_versions(busy)  # every 200 ms: never idle
            time.sleep(0.2)
        assert idle.closed_by_peer(timeout_s=5)
        api_versions(busy)  # still open


def test_a_long_poll_longer_than_the_idle_time_is_answered(broker_factory):
    broker = broker_factory({"connections.max.idle.ms": str(IDLE_MS)})
    create_topic(broker.bootstrap, "idle-poll")
    with RawConnection(broker.bootstrap) as connection:
        api_versions(connection)
        started = time.monotonic()
        response = connection.request(FETCH, 12, fetch_request("idle-poll", 0, 0, max_wait_ms=3 * IDLE_MS, min_bytes=1))
        assert time.monotonic() - started >= 2 * IDLE_MS / 1000
        assert response.error_code == 0
