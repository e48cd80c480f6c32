"""Authorization of the share group offset admin APIs (90-92) and of the share
coordinator's admin APIs (83, 86, 87), a denied and an allowed principal each,
against tests/interop/test_authorization.py's in-process broker with an
authorizer: each refusal with Kafka's error code, then the same call succeeding
once the ACL Kafka's checks ask for exists."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AclOperation as Op  # noqa: E402
from confluent_kafka.admin import ResourceType  # noqa: E402

from protocol.errors import ErrorCode  # noqa: E402
from tests.interop.test_authorization import InProcessBroker, acl, add_acls, new_topic  # noqa: E402
from tests.interop.test_authorization_apis import Raw, raw  # noqa: E402


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    broker = InProcessBroker(tmp_path_factory.mktemp("authz-share-offsets"))
    yield broker
    broker.close()


def _empty_share_group(broker, topic: str) -> str:
    """A share group made by admin (a super user), its member gone."""
    group = f"share-{uuid.uuid4().hex[:6]}"
    with Raw(broker, "admin") as admin:
        joined = admin.request("ShareGroupHeartbeat", 1, group_id=group, member_id="m", member_epoch=0, rack_id=None,
                               subscribed_topic_names=[topic])
        assert joined.error_code == ErrorCode.NONE, joined
        left = admin.request("ShareGroupHeartbeat", 1, group_id=group, member_id=joined.member_id, member_epoch=-1,
                             rack_id=None, subscribed_topic_names=None)
        assert left.error_code == ErrorCode.NONE, left
    return group


def test_offset_apis_need_group_and_topic_permissions(secured):
    topic = new_topic(secured, "share-authz")
    group = _empty_share_group(secured, topic)

    def describe():
        (answer,) = raw(secured, "alice", "DescribeShareGroupOffsets", 0,
                        groups=[{"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]).groups
        return answer

    def alter():
        return raw(secured, "alice", "AlterShareGroupOffsets", 0, group_id=group,
                   topics=[{"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 0}]}])

    def delete():
        return raw(secured, "alice", "DeleteShareGroupOffsets", 0, group_id=group, topics=[{"topic_name": topic}])

    assert describe().error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    add_acls(secured, acl(ResourceType.GROUP, group, "User:alice", Op.DESCRIBE))
    answer = describe()
    assert answer.error_code == ErrorCode.NONE
    assert answer.topics[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    add_acls(secured, acl(ResourceType.TOPIC, topic, "User:alice", Op.DESCRIBE))
    partition = describe().topics[0].partitions[0]
    assert (partition.error_code, partition.start_offset) == (ErrorCode.NONE, -1)

    assert alter().error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    add_acls(secured, acl(ResourceType.GROUP, group, "User:alice", Op.READ))
    altered = alter()
    assert altered.error_code == ErrorCode.NONE
    assert altered.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    add_acls(secured, acl(ResourceType.TOPIC, topic, "User:alice", Op.READ))
    assert alter().responses[0].partitions[0].error_code == ErrorCode.NONE
    assert describe().topics[0].partitions[0].start_offset == 0

    assert delete().error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    add_acls(secured, acl(ResourceType.GROUP, group, "User:alice", Op.DELETE))
    deleted = delete()
    assert (deleted.error_code, deleted.responses[0].error_code) == (ErrorCode.NONE, ErrorCode.NONE)
    assert describe().topics[0].partitions[0].start_offset == -1


def test_share_coordinator_admin_apis_need_cluster_action(secured):
    topic_id = uuid.uuid4()
    summary = raw(secured, "alice", "ReadShareGroupStateSummary", 0, group_id="g", topics=[
        {"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": 0}]}])
    initialize = raw(secured, "alice", "InitializeShareGroupState", 0, group_id="g", topics=[
        {"topic_id": topic_id, "partitions": [{"partition": 0, "state_epoch": 1, "start_offset": 0}]}])
    delete = raw(secured, "alice", "DeleteShareGroupState", 0, group_id="g", topics=[
        {"topic_id": topic_id, "partitions": [{"partition": 0}]}])
    for answer in (summary, initialize, delete):
        assert answer.results[0].partitions[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    allowed = raw(secured, "admin", "ReadShareGroupStateSummary", 0, group_id="g", topics=[
        {"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": 0}]}])
    assert allowed.results[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
