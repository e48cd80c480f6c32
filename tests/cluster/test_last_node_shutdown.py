"""The last node of a three-node cluster stops promptly and quietly.

With the other two nodes already stopped no controller can answer: the last
node's heartbeats back off instead of retrying 20 times a second, their
failures are logged as a rate-limited WARNING, and its controlled shutdown
gives up once no controller has answered for a second (it could not hand its
leaderships to anyone), so SIGTERM ends it in about a second, whether it was
the active controller or a follower of a killed one when the others went.
"""

from __future__ import annotations

import signal
import time

import pytest

from broker.lifecycle import CONTROLLED_SHUTDOWN_UNREACHABLE_MS
from tests.cluster.test_quorum_processes import Cluster, find_leader

# The give-up window, the Raft driver's resignation grace and the rest of a
# clean stop (flush, checkpoints), with a margin for a busy two-core machine.
LAST_STOP_BOUND_S = CONTROLLED_SHUTDOWN_UNREACHABLE_MS / 1000 + 1.5
# Heartbeats fail all along: long enough for the old behaviour to log ~40 lines.
UNREACHABLE_BEFORE_STOP_S = 2.0
FAILURE_LINES_MAX = 3
# How long a follower may take to report its first heartbeat to the killed controller.
UNREACHABLE_REPORTED_WAIT_S = 15.0


def failure_lines(lines: list[str]) -> list[str]:
    return [
        line for line in lines
        if "forwarding" in line or "cannot reach controller" in line or "still cannot reach" in line
    ]


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path)
    yield cluster
    cluster.stop()


@pytest.mark.parametrize("last", ["follower", "active controller"])
def test_the_last_node_stops_within_a_bound_without_flooding_its_log(cluster, last):
    cluster.start()
    leader, _ = find_leader(cluster, [1, 2, 3], 15)
    assert leader is not None
    followers = [n for n in (1, 2, 3) if n != leader]
    if last == "active controller":
        last_node = leader
        for node in followers:
            assert cluster.nodes[node].stop() == 0
    else:
        # The other follower stops, then the active controller is killed: it
        # cannot resign, so the last node goes on heartbeating to it.
        last_node = followers[-1]
        assert cluster.nodes[followers[0]].stop() == 0
        cluster.nodes[leader].stop(signal.SIGKILL)
    survivor = cluster.nodes[last_node]
    lines_before = len(survivor.output)
    time.sleep(UNREACHABLE_BEFORE_STOP_S)
    if last == "follower":
        # Its first failed heartbeat comes within a heartbeat interval of the
        # kill, later on a busy machine: stop it only once it has met one.
        deadline = time.monotonic() + UNREACHABLE_REPORTED_WAIT_S
        while time.monotonic() < deadline and not any(
            f"cannot reach controller {leader}" in line for line in survivor.output[lines_before:]
        ):
            time.sleep(0.1)

    started = time.monotonic()
    survivor.process.send_signal(signal.SIGTERM)
    returncode = survivor.process.wait(15)
    took_s = time.monotonic() - started
    survivor.stop()  # joins the output reader

    after = survivor.output[lines_before:]
    assert returncode == 0, survivor.log_text()
    assert took_s < LAST_STOP_BOUND_S, (took_s, "".join(after))
    assert any("pybroker stopped" in line for line in after)
    failures = failure_lines(after)
    assert len(failures) <= FAILURE_LINES_MAX, "".join(failures)
    assert all(" WARNING " in line for line in failures), "".join(failures)
    if last == "follower":
        # It was heartbeating to a dead controller all along: reported, once.
        assert any(f"cannot reach controller {leader}" in line for line in failures), "".join(after)
    assert any("shutting down without moving leaderships" in line for line in after), "".join(after)
