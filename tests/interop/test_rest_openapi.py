"""Schemathesis against the REST proxy's own OpenAPI document (GET /v3/openapi.json):
every operation it lists, with generated path parameters and bodies, never answers
5xx and answers what the document says (status, content type, response schema).

Stateless and bounded (EXAMPLES per operation). Path parameters are steered to the
real cluster id and, for some cases, to a topic, broker, partition and group that
exist, so the operations' success paths are checked too, not only their 404s."""

from __future__ import annotations

import hashlib

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import BrokerProcess
from tests.interop._rest import Rest, rest_port
from tests.interop._support import Msg, confluent_consumer, create_topic, produce

EXAMPLES = 12
# Bodies may ask for any partition count: a generated one is kept small (a topic of
# two billion partitions is a test of memory, not of the proxy).
PARTITIONS_MAX = 4
TOPIC = "openapi-topic"
DELETED_TOPIC = "openapi-deleted"
GROUP = "openapi-group"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("rest-openapi"), {"rest.listener": "http://127.0.0.1:0"}).start()
    try:
        port = rest_port(broker)
        create_topic(broker.bootstrap, TOPIC, partitions=2)
        create_topic(broker.bootstrap, DELETED_TOPIC, partitions=1)
        produce("confluent", broker.bootstrap, TOPIC, [Msg(b"k", b"v")], partition=0)
        consumer = confluent_consumer(broker.bootstrap, {"group.id": GROUP})
        from confluent_kafka import TopicPartition

        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
        consumer.close()
        yield broker, port, Rest(port).cluster_id()
    finally:
        broker.stop()


def _steered(value: str, real):
    """Half of the generated values (by their hash, so reruns agree) become ``real``."""
    return real if hashlib.sha256(str(value).encode()).digest()[0] % 2 else value


def test_every_operation_conforms_to_the_served_document(served):
    _broker, port, cluster_id = served
    base_url = f"http://127.0.0.1:{port}"
    schema = schemathesis.openapi.from_url(base_url + "/v3/openapi.json")

    @schema.hook
    def map_path_parameters(context, path_parameters):
        if path_parameters is None:
            return path_parameters
        path_parameters = dict(path_parameters)
        if "cluster_id" in path_parameters:
            path_parameters["cluster_id"] = cluster_id
        operation = context.operation
        # Deleting the steered topic would leave the later operations only their 404s:
        # DELETE .../topics/{topic_name} is steered to a topic of its own.
        deleting = operation.method.upper() == "DELETE" and operation.path.endswith("{topic_name}")
        topic = DELETED_TOPIC if deleting else TOPIC
        for name, real in (("topic_name", topic), ("broker_id", 1), ("partition_id", 1), ("consumer_group_id", GROUP)):
            if name in path_parameters:
                path_parameters[name] = _steered(path_parameters[name], real)
        return path_parameters

    @schema.hook
    def map_body(context, body):
        if isinstance(body, dict) and isinstance(body.get("partitions_count"), int):
            body = {**body, "partitions_count": body["partitions_count"] % (PARTITIONS_MAX + 1)}
        return body

    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 22
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        def run(case):
            case.call_and_validate(base_url=base_url, checks=checks)

        run()
    # The steering worked: the topic is still there, the one for DELETE is gone.
    rest = Rest(port)
    assert rest.get(f"/v3/clusters/{cluster_id}/topics/{TOPIC}")[0] == 200
    assert rest.get(f"/v3/clusters/{cluster_id}/topics/{DELETED_TOPIC}")[0] == 404
