"""A network cut between the source and the destination of a cluster link,
longer than every timeout of the link, while an idempotent producer writes the
source: during the cut DescribeMirrors shows the error and a lag in
milliseconds that grows; once the network heals the mirror resumes by itself
and catches up, and its log is the source's byte for byte (same offsets: no
gap, no duplicate).

The two brokers run in their own network namespaces (tests/netns.py) joined
by a bridge; the test process reaches both through the bridge, so only the
traffic between the two clusters is cut (both directions: each side's frames
to the other are lost, as on a broken link, with no error to either side).
The link's request.timeout.ms and socket.connection.setup.timeout.ms are a
few seconds, so the cut outlasts each of them several times. A fetch session
has no time limit in Kafka (a session is evicted only when the cache is full,
and not before MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS, 120 s): the source
keeps one session slot here, so the session the link opens after the cut
finds the slot still taken by the one it lost, and the source answers with
full fetches outside any session, which the link must accept.

Skips, saying why, where namespaces cannot be made (not root, no iproute2).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import BrokerProcess
from tests.interop._support import create_topic, unique_topic
from tests.links._mirror_support import PARTITIONS, raw_log
from tests.links.test_links_control import links, mirrors
from tests.links.test_mirror_topics import high_watermarks
from tests.links.test_mirror_topics_cluster import SourceWriter
from tests.netns import NamespaceUnavailable, VirtualNetwork, check_available

confluent_kafka = pytest.importorskip("confluent_kafka")

CUT_S = 20.0
REQUEST_TIMEOUT_MS = 3000
CONNECT_TIMEOUT_MS = 2000
RETRY_BACKOFF_MS = 250
WAIT_S = 90
PORT = 9092
CONTROLLER_PORT = 9093


@pytest.fixture
def network():
    try:
        check_available()
    except NamespaceUnavailable as exc:
        pytest.skip(f"network namespaces cannot be made here: {exc}")
    net = VirtualNetwork(["source", "destination"])
    try:
        yield net
    finally:
        net.close()


def start_brokers(net: VirtualNetwork, tmp_path) -> tuple[BrokerProcess, BrokerProcess]:
    source_ip, dest_ip = net.ips["source"], net.ips["destination"]
    (tmp_path / "source").mkdir()
    (tmp_path / "destination").mkdir()
    source = BrokerProcess(
        tmp_path / "source",
        {
            "listeners": f"PLAINTEXT://{source_ip}:{PORT}",
            # One fetch session slot: the session lost in the cut still holds it afterwards.
            "max.incremental.fetch.session.cache.slots": "1",
        },
        command_prefix=net.exec_prefix("source"),
    )
    destination = BrokerProcess(
        tmp_path / "destination",
        {
            "node.id": "1",
            "cluster.id": "bGluay1uZXR3b3JrLWN1dA",
            "process.roles": "broker,controller",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": f"1@127.0.0.1:{CONTROLLER_PORT}",
            "listeners": f"PLAINTEXT://{dest_ip}:{PORT},CONTROLLER://127.0.0.1:{CONTROLLER_PORT}",
        },
        command_prefix=net.exec_prefix("destination"),
    )
    return source.start(), destination.start()


def mirror_partitions(destination: BrokerProcess, topic: str) -> list[dict]:
    out = mirrors(destination, "--describe", "--topics", topic, "--output", "json").stdout
    [mirror] = json.loads(out)["mirrors"]
    return mirror["partitions"]


def wait_until(predicate, timeout_s: float = WAIT_S, interval_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


def test_a_link_cut_for_longer_than_every_timeout_resumes_with_no_gap_and_no_duplicate(network, tmp_path):
    source, destination = start_brokers(network, tmp_path)
    try:
        topic = unique_topic("cut")
        create_topic(source.bootstrap, topic, partitions=PARTITIONS)
        links(destination, "--create", "--link", "across", "--config",
              f"bootstrap.servers={source.bootstrap},request.timeout.ms={REQUEST_TIMEOUT_MS},"
              f"socket.connection.setup.timeout.ms={CONNECT_TIMEOUT_MS},retry.backoff.ms={RETRY_BACKOFF_MS}")
        mirrors(destination, "--create", "--mirror-topic", topic, "--link", "across")
        writer = SourceWriter(source.bootstrap, topic).start()
        try:
            copying = wait_until(
                lambda: all(p["error"] is None and p["local_log_end_offset"] > 0 for p in mirror_partitions(destination, topic))
            )
            assert copying, mirror_partitions(destination, topic)

            network.block("source", "destination")
            network.block("destination", "source")
            cut_at = time.monotonic()
            samples = []  # (seconds into the cut, every partition's error, max lag_ms, lag_records)
            errors: set = set()
            while time.monotonic() - cut_at < CUT_S:
                partitions = mirror_partitions(destination, topic)
                errors = {p["error"] for p in partitions}
                samples.append((
                    round(time.monotonic() - cut_at, 1),
                    all(p["error"] for p in partitions),
                    max(p["lag_ms"] for p in partitions),
                    sum(max(p["lag_records"], 0) for p in partitions),
                ))
                time.sleep(1.0)
            network.unblock("source", "destination")
            network.unblock("destination", "source")
            healed_at = time.monotonic()
            print(f"during the cut (s, all partitions in error, max lag_ms, lag_records): {samples}")
            last_seconds = [s for s in samples if s[0] >= CUT_S - 5]
            assert last_seconds and all(errored for _, errored, _, _ in last_seconds), samples
            assert all(s[2] >= (s[0] - 8) * 1000 for s in last_seconds), samples  # grows with the cut
            assert last_seconds[-1][2] > last_seconds[0][2], samples
            print(f"errors shown at the end of the cut: {errors}")
            assert all(e and e.startswith("NETWORK_EXCEPTION: link across:") for e in errors), errors

            # Written for a while after the heal too, then stopped: the mirror must catch up by itself.
            wait_until(lambda: all(p["error"] is None for p in mirror_partitions(destination, topic)), 30)
        finally:
            writer.stop()
        expected = high_watermarks(source.bootstrap, topic)
        assert sum(expected.values()) == writer.sent  # the source took each record once
        caught_up = wait_until(lambda: high_watermarks(destination.bootstrap, topic) == expected)
        caught_up_s = time.monotonic() - healed_at
        assert caught_up, (high_watermarks(destination.bootstrap, topic), expected, mirror_partitions(destination, topic))
        print(f"records written: {writer.sent}; caught up {caught_up_s:.1f} s after the heal")
        for p in range(PARTITIONS):
            assert raw_log(destination.bootstrap, topic, p) == raw_log(source.bootstrap, topic, p), f"partition {p}"
        partitions = mirror_partitions(destination, topic)
        assert all(p["error"] is None and p["lag_records"] == 0 and p["lag_ms"] == 0 for p in partitions), partitions
    finally:
        destination.stop()
        source.stop()
