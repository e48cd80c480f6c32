"""kcat (librdkafka's command-line client; Debian's kcat 1.7.1 carries
librdkafka 2.0.2, an older client than confluent-kafka's) against pybroker:
metadata listing, keyed produce with each codec and headers, and reading it
all back. Skips when kcat is not installed (`apt-get install kcat`)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.interop._support import create_topic, unique_topic

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (apt-get install kcat)")

KCAT_TIMEOUT_S = 30


def kcat(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["kcat", *args], input=stdin, capture_output=True, text=True, timeout=KCAT_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_metadata_lists_the_topic_and_its_partitions(shared_broker):
    topic = unique_topic("kcat-meta")
    create_topic(shared_broker.bootstrap, topic, partitions=3)
    listing = json.loads(kcat("-b", shared_broker.bootstrap, "-L", "-J", "-t", topic))
    [entry] = [t for t in listing["topics"] if t["topic"] == topic]
    assert sorted(p["partition"] for p in entry["partitions"]) == [0, 1, 2]
    assert [b["id"] for b in listing["brokers"]] == [entry["partitions"][0]["leader"]]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_keyed_produce_with_headers_reads_back(shared_broker, codec):
    topic = unique_topic(f"kcat-{codec}")
    create_topic(shared_broker.bootstrap, topic)
    lines = [f"key-{i}:value-{i}" for i in range(50)]
    kcat(
        "-b", shared_broker.bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-z", codec,
        "-H", "origin=kcat", "-X", "linger.ms=50", stdin="\n".join(lines) + "\n",
    )
    read = kcat(
        "-b", shared_broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
        "-f", "%o %k=%s %h\n",
    )
    assert read.splitlines() == [f"{i} key-{i}=value-{i} origin=kcat" for i in range(50)]
