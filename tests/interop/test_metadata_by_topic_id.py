"""Metadata v10+ by topic id. Kafka looks a topic up by its id whenever the id
is not zero, whatever the name says: the Java client's
Admin.describeTopics(TopicCollection.ofTopicIds(...)) sends the id with an
empty name (the field's default), not null, and failed here with
INVALID_TOPIC_EXCEPTION and a zero id (IllegalStateException in the client)."""

from __future__ import annotations

import uuid

import pytest

from protocol.errors import ErrorCode
from tests.interop._support import METADATA, REQ, RawConnection, create_topic, unique_topic

R = REQ[3]


def metadata(bootstrap: str, wanted: list, version: int = 12):
    body = R.MetadataRequest(
        topics=wanted,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    with RawConnection(bootstrap) as conn:
        return conn.request(METADATA, version, body).topics


@pytest.mark.parametrize("name_sent", ["", None])
def test_a_topic_is_found_by_its_id_whatever_the_name_field_holds(shared_broker, name_sent):
    topic = unique_topic("by-id")
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    [by_name] = metadata(shared_broker.bootstrap, [R.MetadataRequestTopic(name=topic)])
    assert by_name.error_code == ErrorCode.NONE and by_name.topic_id != uuid.UUID(int=0)
    [by_id] = metadata(shared_broker.bootstrap, [R.MetadataRequestTopic(name=name_sent, topic_id=by_name.topic_id)])
    assert (by_id.error_code, by_id.name, by_id.topic_id) == (ErrorCode.NONE, topic, by_name.topic_id)
    assert sorted(p.partition_index for p in by_id.partitions) == [0, 1]


def test_an_unknown_id_is_answered_unknown_topic_id_with_the_id(shared_broker):
    unknown = uuid.uuid4()
    [answer] = metadata(shared_broker.bootstrap, [R.MetadataRequestTopic(name="", topic_id=unknown)])
    assert (answer.error_code, answer.topic_id) == (ErrorCode.UNKNOWN_TOPIC_ID, unknown)
