"""Produce throughput with schema validation on produce, against the same topic
without it, in one run; and the registry's registration rate and lookup latency.

    python benchmarks/schema_validation.py --messages 200000 --size 1000 --rounds 3

One broker process with ``schema.registry.listener``. Three topics of one
partition: plain, ``confluent.value.schema.validation=true`` (id mode), and
the same with ``schema.validation.mode=full`` (each payload decoded by its Avro
schema). Each receives the same Avro records (a record with a string field
sized to ``--size`` bytes, serialized once with Confluent's framing) from a
confluent-kafka producer (acks=1, linger 10 ms, 1 MB batches); the rounds
alternate the topics so machine noise falls on each alike. The window of a
figure is the producer's, from the first produce to the last acknowledgement
(the broker's validation is inside it). Broker CPU per GB is read from
/proc for the broker process over each window.

Registry: registrations of distinct schemas (one HTTP request each) per
second, and lookups of a schema by id: the client's first (uncached, an HTTP
request) and its cached ones (confluent-kafka's SchemaRegistryClient cache).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from produce_consume import start_broker
from workloads import _produce_all, _producer_config, create_topic

REGISTRY_PORT_WAIT_S = 30
CLOCK_TICKS_PER_S = 100


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def http_json(port: int, method: str, path: str, body=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    connection.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, json.loads(data) if data else None


def alter_topic_config(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config=configs)
    for future in admin.alter_configs([resource]).values():
        future.result(30)


def produce_window(bootstrap: str, topic: str, payload: bytes, messages: int, broker_pid: int) -> dict:
    from confluent_kafka import Producer

    config, failures = _producer_config(bootstrap, "1")
    producer = Producer(config)
    producer.list_topics(topic, timeout=30)
    cpu_before = process_cpu_s(broker_pid)
    started = time.perf_counter()
    _produce_all(producer, topic, payload, messages, time.monotonic() + 600)
    seconds = time.perf_counter() - started
    cpu = process_cpu_s(broker_pid) - cpu_before
    if failures:
        raise RuntimeError(f"{len(failures)} messages to {topic} failed, first: {failures[0]}")
    megabytes = messages * len(payload) / 1e6
    return {"mb_per_s": megabytes / seconds, "broker_cpu_s_per_gb": cpu / (megabytes / 1000)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1000, help="bytes of each record's value (about)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--registrations", type=int, default=500)
    args = parser.parse_args()

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    with tempfile.TemporaryDirectory() as data_dir:
        port = http_port()
        broker, bootstrap = start_broker(Path(data_dir), overrides={
            "schema.registry.listener": f"http://127.0.0.1:{port}", "schema.registry.topic.replication.factor": "1",
        })
        try:
            deadline = time.monotonic() + REGISTRY_PORT_WAIT_S
            while http_json_or_none(port, "/subjects") is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("the registry did not answer")
                time.sleep(0.2)
            topics = {"plain": "bench-plain", "id": "bench-validated", "full": "bench-validated-full"}
            for topic in topics.values():
                create_topic(bootstrap, topic, 1)
            alter_topic_config(bootstrap, topics["id"], {"confluent.value.schema.validation": "true"})
            alter_topic_config(bootstrap, topics["full"], {"confluent.value.schema.validation": "true", "schema.validation.mode": "full"})
            schema = {"type": "record", "name": "Event", "namespace": "bench", "fields": [
                {"name": "id", "type": "long"}, {"name": "body", "type": "string"}]}
            client = SchemaRegistryClient({"url": f"http://127.0.0.1:{port}"})
            for topic in topics.values():
                http_json(port, "POST", f"/subjects/{topic}-value/versions", {"schema": json.dumps(schema)})
            serializer = AvroSerializer(client, json.dumps(schema), conf={"auto.register.schemas": False, "use.latest.version": True})
            # One payload for all (the subject differs by topic, the id does not: the schema is the same).
            payload = serializer({"id": 1, "body": "x" * max(0, args.size - 12)}, SerializationContext(topics["id"], MessageField.VALUE))

            results: dict[str, list[dict]] = {name: [] for name in topics}
            for round_no in range(args.rounds):
                order = list(topics) if round_no % 2 == 0 else list(reversed(topics))
                for name in order:
                    results[name].append(produce_window(bootstrap, topics[name], payload, args.messages, broker.pid))
            print(f"produce of {args.messages} records of {len(payload)} B, acks=1, one partition, {args.rounds} rounds (median):")
            plain = statistics.median(r["mb_per_s"] for r in results["plain"])
            for name in topics:
                rate = statistics.median(r["mb_per_s"] for r in results[name])
                cpu = statistics.median(r["broker_cpu_s_per_gb"] for r in results[name])
                rounds = ", ".join(f"{r['mb_per_s']:.1f}" for r in results[name])
                print(f"  {name:5s}: {rate:7.1f} MB/s (rounds {rounds}), ratio to plain {rate / plain:.2f}, broker CPU {cpu:.2f} s/GB")

            # The registry: registrations and lookups.
            started = time.perf_counter()
            for i in range(args.registrations):
                variant = {**schema, "name": f"Event{i}"}
                status, _ = http_json(port, "POST", f"/subjects/bench-reg-{i}-value/versions", {"schema": json.dumps(variant)})
                if status != 200:
                    raise RuntimeError(f"registration {i} answered {status}")
            registration_s = time.perf_counter() - started
            print(f"registrations: {args.registrations / registration_s:.0f}/s ({args.registrations} distinct schemas, one HTTP request each)")
            ids = [http_json(port, "GET", f"/subjects/bench-reg-{i}-value/versions/latest")[1]["id"] for i in range(min(100, args.registrations))]
            lookup = SchemaRegistryClient({"url": f"http://127.0.0.1:{port}"})
            uncached, cached = [], []
            for schema_id in ids:
                t0 = time.perf_counter()
                lookup.get_schema(schema_id)
                uncached.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                lookup.get_schema(schema_id)
                cached.append(time.perf_counter() - t0)
            uncached.sort()
            cached.sort()
            print(f"lookup by id, uncached (an HTTP request): p50 {uncached[len(uncached) // 2] * 1000:.2f} ms, p99 {uncached[int(len(uncached) * 0.99)] * 1000:.2f} ms")
            print(f"lookup by id, cached (the client's cache): p50 {cached[len(cached) // 2] * 1e6:.1f} us, p99 {cached[int(len(cached) * 0.99)] * 1e6:.1f} us")
        finally:
            broker.terminate()
            broker.wait(30)


def http_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json_or_none(port: int, path: str):
    try:
        return http_json(port, "GET", path)
    except OSError:
        return None


if __name__ == "__main__":
    main()
