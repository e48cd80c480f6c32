"""The REST proxy's resource URLs: each path part percent-encoded as a segment, so that a
KIP-848 member id (librdkafka's are base64 with ``+`` and ``/``) or a group id with a
space or a slash still names its resource, and names without such characters are unchanged."""

from __future__ import annotations

from types import SimpleNamespace

from broker.http.rest.resources import Call


def call() -> Call:
    return Call(broker=SimpleNamespace(cluster_id="c1"), kafka=None, base_url="http://127.0.0.1:8082", params={})


def test_parts_are_encoded_as_path_segments():
    url = call().url("consumer-groups", "billing team/eu", "consumers", "VK//ZUMwSgGS+7DNyaMWgQ", "assignments")
    assert url == ("http://127.0.0.1:8082/v3/clusters/c1/consumer-groups/billing%20team%2Feu/consumers/"
                   "VK%2F%2FZUMwSgGS+7DNyaMWgQ/assignments")
    assert call().url("topics", "orders.v1_x-y", "partitions", 3) == "http://127.0.0.1:8082/v3/clusters/c1/topics/orders.v1_x-y/partitions/3"
    assert call().related("brokers", 1) == {"related": "http://127.0.0.1:8082/v3/clusters/c1/brokers/1"}
