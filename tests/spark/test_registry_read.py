"""spark.read.format("pybroker") with valueFormat=registry: values written by
confluent-kafka's AvroSerializer against a broker's own schema registry, read back
as one column per field from the broker's files (its _schemas topic included)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import BrokerProcess, wait_until
from tests.interop._support import create_topic, unique_topic
from tests.schemas._registry import REGISTRY_LINE, registry_port
from tests.spark._support import stopped_log_dir

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("fastavro")

USER_V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
USER_V2 = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": ["null", "int"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    ],
}


def test_avro_values_read_as_columns_of_the_latest_schema(spark, tmp_path):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    broker = BrokerProcess(tmp_path, {"schema.registry.listener": "http://127.0.0.1:0"}).start()
    try:
        assert wait_until(lambda: REGISTRY_LINE.search(broker.log_text()), timeout_s=30)
        topic = unique_topic("users")
        create_topic(broker.bootstrap, topic)
        client = SchemaRegistryClient({"url": f"http://127.0.0.1:{registry_port(broker)}"})
        context = SerializationContext(topic, MessageField.VALUE)
        v1 = AvroSerializer(client, json.dumps(USER_V1))
        v2 = AvroSerializer(client, json.dumps(USER_V2))
        values = [
            v1({"name": "ada"}, context),
            v2({"name": "bob", "age": 41, "tags": ["x", "y"]}, context),
            b"not framed",
            None,
        ]
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
        for value in values:
            producer.produce(topic, value=value, key=b"k")
        assert producer.flush(30) == 0
        del producer  # before the broker stops: no reconnect attempts in the test's output
        log_dir = str(stopped_log_dir(broker))
    finally:
        broker.stop()

    def read(**options):
        reader = spark.read.format("pybroker").option("path", log_dir).option("subscribe", topic)
        reader = reader.option("valueFormat", "registry")
        for name, value in options.items():
            reader = reader.option(name, value)
        return reader.load()

    frame = read(mode="PERMISSIVE")
    assert frame.columns[-4:] == ["name", "age", "tags", "_corrupt_record"]
    assert frame.schema["age"].dataType.simpleString() == "int"
    assert frame.schema["tags"].dataType.simpleString() == "array<string>"
    selected = frame.orderBy("offset").select("offset", "name", "age", "tags", "_corrupt_record")
    rows = [row.asDict() for row in selected.collect()]
    assert rows[:2] == [
        {"offset": 0, "name": "ada", "age": None, "tags": [], "_corrupt_record": None},  # v1 resolved to v2
        {"offset": 1, "name": "bob", "age": 41, "tags": ["x", "y"], "_corrupt_record": None},
    ]
    assert rows[2]["name"] is None and "not framed" in rows[2]["_corrupt_record"]
    assert rows[3] == {"offset": 3, "name": None, "age": None, "tags": None, "_corrupt_record": None}  # a tombstone

    with pytest.raises(Exception, match="offset 2: value: not framed"):
        read().collect()  # FAILFAST, the default
