from kafka import KafkaConsumer, KafkaProducer


def test_kafka_python_round_trip(shared_broker):
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, enable_idempotence=False)
    future = producer.send("smoke", b"hello")
    assert future.get(timeout=10).offset == 0
    producer.close()
    consumer = KafkaConsumer("smoke", bootstrap_servers=shared_broker.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000)
    assert [m.value for m in consumer] == [b"hello"]
    consumer.close()
