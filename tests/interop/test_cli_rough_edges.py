"""The admin tools' rough edges against a running broker: ``configs --describe
--all`` into a closed pipe (or ``| head``) ends quietly, ``topics --describe
--topics-with-overrides`` shows only topics with overridden configs, and
``configs --entity-type ips`` describes and alters the connection_creation_rate
quotas of IP addresses (DescribeClientQuotas/AlterClientQuotas with the ``ip``
entity)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import PROJECT_ROOT
from tests.interop._support import unique_topic


def pybroker(broker, *args, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args[:1], "--bootstrap-server", broker.bootstrap, *args[1:]],
        stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )


def test_configs_describe_all_into_a_closed_pipe_is_quiet(shared_broker):
    read_end, write_end = os.pipe()
    os.close(read_end)  # what `| head` leaves once it has read its lines
    try:
        done = pybroker(shared_broker, "configs", "--describe", "--all", "--entity-type", "brokers", "--entity-name", "1",
                        stdout=write_end)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")

    # The pipeline of the issue, as a user types it.
    piped = subprocess.run(
        ["bash", "-c", (f'"{sys.executable}" -m broker configs --bootstrap-server {shared_broker.bootstrap} '
                       "--describe --all --entity-type brokers --entity-name 1 | head -n 2")],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60, check=False,
    )
    assert piped.stdout.splitlines()[0] == "All configs for broker 1 are:"
    assert len(piped.stdout.splitlines()) == 2 and piped.stderr == ""


def test_topics_with_overrides(shared_broker):
    overridden, plain = unique_topic("overridden"), unique_topic("plain")
    for topic, extra in ((overridden, ["--config", "retention.ms=60000"]), (plain, [])):
        made = pybroker(shared_broker, "topics", "--create", "--topic", topic, "--partitions", "2", *extra)
        assert made.returncode == 0, made.stderr
    both = f"{overridden}|{plain}"
    everything = pybroker(shared_broker, "topics", "--describe", "--topic", both).stdout.splitlines()
    assert len(everything) == 2 + 2 * 2  # a topic line and two partition lines each
    described = pybroker(shared_broker, "topics", "--describe", "--topic", both, "--topics-with-overrides")
    assert described.returncode == 0, described.stderr
    # Only the topic line of the topic with an override, no partition lines, as Kafka prints it.
    lines = described.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Topic: {overridden}\t") and "retention.ms=60000" in lines[0]
    assert lines[0] in everything
    refused = pybroker(shared_broker, "topics", "--list", "--topics-with-overrides")
    assert refused.returncode == 2 and "--topics-with-overrides goes with --describe" in refused.stderr


def test_ip_connection_creation_rate_quotas(shared_broker):
    address = "10.11.12.13"  # not the tests' own address: the quota must not slow them down
    altered = pybroker(shared_broker, "configs", "--alter", "--entity-type", "ips", "--entity-name", address,
                       "--add-config", "connection_creation_rate=25")
    assert (altered.returncode, altered.stdout) == (0, f"Completed updating config for ip {address}.\n"), altered.stderr
    default = pybroker(shared_broker, "configs", "--alter", "--entity-type", "ips", "--entity-default",
                       "--add-config", "connection_creation_rate=1000")
    assert (default.returncode, default.stdout) == (0, "Completed updating default config for ips in the cluster.\n")

    one = pybroker(shared_broker, "configs", "--describe", "--entity-type", "ips", "--entity-name", address)
    assert one.stdout == f"Quota configs for ip '{address}' are connection_creation_rate=25.0\n", one.stderr
    every = pybroker(shared_broker, "configs", "--describe", "--entity-type", "ips")
    assert f"Quota configs for ip '{address}' are connection_creation_rate=25.0" in every.stdout.splitlines()
    defaults = pybroker(shared_broker, "configs", "--describe", "--entity-type", "ips", "--entity-default")
    assert defaults.stdout == "Quota configs for the default ip are connection_creation_rate=1000.0\n"

    # Only connection_creation_rate belongs to an ip; the broker refuses others (exit code 1).
    wrong = pybroker(shared_broker, "configs", "--alter", "--entity-type", "ips", "--entity-name", address,
                     "--add-config", "producer_byte_rate=10")
    assert wrong.returncode == 1 and wrong.stderr.startswith("pybroker configs: cannot alter quotas of ip"), wrong.stderr
    not_ip = pybroker(shared_broker, "configs", "--alter", "--entity-type", "ips", "--entity-name", "not-an-address",
                      "--add-config", "connection_creation_rate=5")
    assert not_ip.returncode == 1 and "not a valid IP" in not_ip.stderr, not_ip.stderr

    for args in (["--entity-name", address], ["--entity-default"]):
        removed = pybroker(shared_broker, "configs", "--alter", "--entity-type", "ips", *args,
                           "--delete-config", "connection_creation_rate")
        assert removed.returncode == 0, removed.stderr
    assert pybroker(shared_broker, "configs", "--describe", "--entity-type", "ips").stdout == ""
