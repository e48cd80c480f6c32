"""Throughput over SSL and SASL_SSL against PLAINTEXT, and the SCRAM authentication rate, in one run.

Starts one pybroker with PLAINTEXT, SSL, SASL_SSL and SASL_PLAINTEXT listeners
(certificates made with the openssl command, as the tests make them; a
SCRAM-SHA-256 user created with AlterUserScramCredentials), then for
PLAINTEXT, SSL and SASL_SSL in turn produces N messages of S bytes to a fresh
one-partition topic with confluent-kafka (linger.ms=10, batch.size=1 MB) and
consumes them with an assigned consumer. Prints MB/s for each, the broker's
CPU seconds per GB moved (produce and consume together, from
/proc/<pid>/stat), and the ratios to PLAINTEXT (the issue's goal: >= 0.6 for
produce). Fetches over TLS read the segment files instead of using sendfile,
so consume shows that cost too. Then opens new SASL_PLAINTEXT connections one
after another for --auth-seconds, each authenticating with SCRAM-SHA-256
(4096 iterations) and sending ApiVersions, and prints connections per second
and the broker's CPU per authentication (the client's own PBKDF2 is part of
the wall time; the broker's CPU is what a server pays).

    python benchmarks/tls.py --messages 300000 --size 1000
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.produce_consume import start_broker
from tests.tls_certs import make_certs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SCRAM_USER, SCRAM_PASSWORD = "bench", "bench-secret"


def cpu_s(pid: int) -> float:
    """The process's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def create_scram_user(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsertion = UserScramCredentialUpsertion(
        SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), SCRAM_PASSWORD.encode()
    )
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(30)


def authentication_rate(port: int, seconds: float) -> tuple[int, float]:
    """(connections authenticated, elapsed s): new SCRAM-SHA-256 connections one after another."""
    from broker.tools.client import KafkaConnection, settings_from_properties

    settings = settings_from_properties({
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{SCRAM_USER}" password="{SCRAM_PASSWORD}";',
    })
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        connection = KafkaConnection("127.0.0.1", port, 10.0, settings)
        connection.call("ApiVersions", 3, client_software_name="bench", client_software_version="1")
        connection.close()
        done += 1
    return done, time.perf_counter() - started


def produce(settings: dict, topic: str, messages: int, size: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({**settings, "linger.ms": 10, "batch.size": 1_000_000, "acks": 1})
    value = b"x" * size
    started = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return time.perf_counter() - started


def consume(settings: dict, topic: str, messages: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**settings, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    while got < messages:
        batch = consumer.consume(10_000, timeout=1.0)
        got += sum(1 for m in batch if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--auth-seconds", type=float, default=10.0)
    parser.add_argument("--no-uvloop", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pybroker-tls-bench-") as tmp:
        certs = make_certs(Path(tmp) / "certs")
        ports = {name: free_port() for name in ("SSL", "PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT")}
        proc, _ = start_broker(
            Path(tmp) / "logs",
            args.no_uvloop,
            {
                "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
                "ssl.keystore.location": str(certs.server_keystore),
                "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            },
        )
        try:
            sasl = {
                "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": SCRAM_USER, "sasl.password": SCRAM_PASSWORD,
            }
            listeners = {
                "PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"},
                "SSL": {
                    "bootstrap.servers": f"127.0.0.1:{ports['SSL']}",
                    "security.protocol": "SSL",
                    "ssl.ca.location": str(certs.ca),
                },
                "SASL_SSL": {
                    "bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}",
                    "security.protocol": "SASL_SSL",
                    "ssl.ca.location": str(certs.ca),
                    **sasl,
                },
            }
            megabytes = args.messages * args.size / 1e6
            results = {}
            for name, settings in listeners.items():
                if name == "SASL_SSL":
                    # Made here, not first: with the admin client made before the PLAINTEXT row,
                    # that row's consume measured ~40 % lower in every run (its cause not found).
                    create_scram_user(f"127.0.0.1:{ports['PLAINTEXT']}")
                topic = f"bench-{name.lower()}-{uuid.uuid4().hex[:6]}"
                produce(settings, topic, 1000, args.size)  # creates the topic, warms the connection
                cpu_before = cpu_s(proc.pid)
                produce_s = produce(settings, topic, args.messages, args.size)
                consume_s = consume(settings, topic, args.messages + 1000)
                moved_gb = (2 * megabytes + 1000 * args.size / 1e6) / 1000
                cpu_per_gb = (cpu_s(proc.pid) - cpu_before) / moved_gb
                results[name] = (megabytes / produce_s, (megabytes + 1000 * args.size / 1e6) / consume_s, cpu_per_gb)
                print(
                    f"{name:9} produce {results[name][0]:8.1f} MB/s   consume {results[name][1]:8.1f} MB/s   "
                    f"broker CPU {cpu_per_gb:6.2f} s/GB",
                    flush=True,
                )
            for name in ("SSL", "SASL_SSL"):
                print(
                    f"{name}/PLAINTEXT ratio: produce {results[name][0] / results['PLAINTEXT'][0]:.2f}, "
                    f"consume {results[name][1] / results['PLAINTEXT'][1]:.2f}, "
                    f"CPU per GB {results[name][2] / results['PLAINTEXT'][2]:.2f}x"
                )
            cpu_before = cpu_s(proc.pid)
            count, elapsed = authentication_rate(ports["SASL_PLAINTEXT"], args.auth_seconds)
            broker_ms = (cpu_s(proc.pid) - cpu_before) * 1000 / max(count, 1)
            print(
                f"SCRAM-SHA-256 authentications: {count / elapsed:.0f} new connections/s, one client, sequential "
                f"({count} in {elapsed:.1f} s); broker CPU {broker_ms:.2f} ms each"
            )
            print(f"({args.messages} messages of {args.size} bytes, {'asyncio' if args.no_uvloop else 'uvloop'})")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
