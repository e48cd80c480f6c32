"""The share group offset admin APIs against one broker: DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets (90-92), the share
coordinator's ReadShareGroupStateSummary, InitializeShareGroupState and
DeleteShareGroupState (87, 83, 86), DeleteGroups of a share group, and
``pybroker share-groups --describe --offsets | --reset-offsets |
--delete-offsets | --delete`` with confluent-kafka's ShareConsumer.

Every wait is bounded; every consumer is closed and every broker stopped.
"""

from __future__ import annotations

import time
import uuid

import pytest

from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.interop._support import RawConnection, create_topic, unique_topic
from tests.interop.test_share_groups import (
    BROKER_OVERRIDES,
    WAIT_S,
    Member,
    describe,
    enable_share_groups,
    poll_until,
    produce,
    share_groups_tool,
)

NONE, UNKNOWN_TOPIC_OR_PARTITION, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, FENCED_STATE_EPOCH = 0, 3, 68, 69, 124
OFFSET_APIS = {90, 91, 92, 83, 86, 87}
API = {name: APIS_BY_NAME[name] for name in (
    "DescribeShareGroupOffsets", "AlterShareGroupOffsets", "DeleteShareGroupOffsets", "ReadShareGroupStateSummary",
    "InitializeShareGroupState", "DeleteShareGroupState", "ShareGroupHeartbeat", "ShareFetch", "ShareAcknowledge",
    "Metadata", "DeleteGroups", "ListGroups", "ApiVersions")}
REQ = {name: struct_classes(api.request) for name, api in API.items()}


class Wire:
    """One connection and the requests of these tests."""

    def __init__(self, bootstrap: str, group: str, topic: str):
        self.connection = RawConnection(bootstrap)
        self.group, self.topic = group, topic
        M = REQ["Metadata"]
        self.topic_id = self.call("Metadata", 12, M.MetadataRequest(
            topics=[M.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic)], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)).topics[0].topic_id

    def call(self, name: str, version: int, body):
        return self.connection.request(API[name], version, body)

    def heartbeat(self, member: str, epoch: int):
        H = REQ["ShareGroupHeartbeat"]
        return self.call("ShareGroupHeartbeat", 1, H.ShareGroupHeartbeatRequest(
            group_id=self.group, member_id=member, member_epoch=epoch, rack_id=None,
            subscribed_topic_names=[self.topic] if epoch == 0 else None))

    def fetch(self, member: str, epoch: int, max_records: int):
        F = REQ["ShareFetch"]
        return self.call("ShareFetch", 1, F.ShareFetchRequest(
            group_id=self.group, member_id=member, share_session_epoch=epoch, max_wait_ms=2000, min_bytes=1,
            max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
            topics=[F.FetchTopic(topic_id=self.topic_id, partitions=[F.FetchPartition(partition_index=0, acknowledgement_batches=[])])],
            forgotten_topics_data=[]))

    def accept_and_close(self, member: str, epoch: int, first: int, last: int):
        A = REQ["ShareAcknowledge"]
        return self.call("ShareAcknowledge", 1, A.ShareAcknowledgeRequest(
            group_id=self.group, member_id=member, share_session_epoch=epoch,
            topics=[A.AcknowledgeTopic(topic_id=self.topic_id, partitions=[A.AcknowledgePartition(
                partition_index=0, acknowledgement_batches=[A.AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=[1])])])]))

    def describe_offsets(self, topics=None, group: str | None = None):
        D = REQ["DescribeShareGroupOffsets"]
        asked = None if topics is None else [D.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in topics]
        (answer,) = self.call("DescribeShareGroupOffsets", 0, D.DescribeShareGroupOffsetsRequest(groups=[
            D.DescribeShareGroupOffsetsRequestGroup(group_id=group or self.group, topics=asked)])).groups
        return answer

    def start_offsets(self, topics=None) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) -> (start offset, error code)."""
        answer = self.describe_offsets(topics)
        assert answer.error_code == NONE, answer
        return {(t.topic_name, p.partition_index): (p.start_offset, p.error_code) for t in answer.topics for p in t.partitions}

    def alter(self, offsets: dict[tuple[str, int], int], group: str | None = None):
        A = REQ["AlterShareGroupOffsets"]
        by_topic: dict[str, list] = {}
        for (t, p), offset in offsets.items():
            by_topic.setdefault(t, []).append(A.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=offset))
        return self.call("AlterShareGroupOffsets", 0, A.AlterShareGroupOffsetsRequest(
            group_id=group or self.group, topics=[A.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in by_topic.items()]))

    def delete_offsets(self, topics: list[str]):
        D = REQ["DeleteShareGroupOffsets"]
        return self.call("DeleteShareGroupOffsets", 0, D.DeleteShareGroupOffsetsRequest(
            group_id=self.group, topics=[D.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics]))

    def delete_group(self) -> int:
        return self.call("DeleteGroups", 2, REQ["DeleteGroups"].DeleteGroupsRequest(groups_names=[self.group])).results[0].error_code

    def summary(self, partition: int = 0):
        S = REQ["ReadShareGroupStateSummary"]
        (result,) = self.call("ReadShareGroupStateSummary", 0, S.ReadShareGroupStateSummaryRequest(group_id=self.group, topics=[
            S.ReadStateSummaryData(topic_id=self.topic_id, partitions=[S.PartitionData(partition=partition, leader_epoch=0)])])).results
        return result.partitions[0]

    def close(self) -> None:
        self.connection.close()


@pytest.fixture
def wire_setup(broker_factory):
    broker = broker_factory(BROKER_OVERRIDES)
    enable_share_groups(broker.bootstrap)
    topic, group = unique_topic("share-offsets"), f"g-{uuid.uuid4()}"
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, [f"r{i}".encode() for i in range(5)])
    wire = Wire(broker.bootstrap, group, topic)
    yield broker, wire
    wire.close()


def test_offset_apis_are_listed_with_share_version(wire_setup):
    _, wire = wire_setup
    V = REQ["ApiVersions"]
    listed = {k.api_key: (k.min_version, k.max_version) for k in wire.call("ApiVersions", 3, V.ApiVersionsRequest(
        client_software_name="share-test", client_software_version="1")).api_keys}
    assert {key: listed.get(key) for key in OFFSET_APIS} == {key: (0, 0) for key in OFFSET_APIS}


def test_describe_alter_and_delete_offsets_on_the_wire(wire_setup):
    _, wire = wire_setup
    topic = wire.topic
    missing = wire.describe_offsets()
    assert (missing.error_code, missing.topics) == (GROUP_ID_NOT_FOUND, [])
    assert wire.alter({(topic, 0): 0}).error_code == GROUP_ID_NOT_FOUND
    assert wire.heartbeat("member-a", 0).error_code == NONE
    fetched = wire.fetch("member-a", 0, max_records=3)
    assert [(r.first_offset, r.last_offset) for r in fetched.responses[0].partitions[0].acquired_records] == [(0, 2)]
    assert wire.accept_and_close("member-a", -1, 0, 2).responses[0].partitions[0].error_code == NONE
    # Topics null: the subscribed topic's partitions, the one without state at -1.
    assert wire.start_offsets() == {(topic, 0): (3, NONE), (topic, 1): (-1, NONE)}
    explicit = wire.start_offsets([(topic, [0, 7]), ("no-such-topic", [0])])
    assert explicit == {(topic, 0): (3, NONE), (topic, 7): (-1, UNKNOWN_TOPIC_OR_PARTITION), ("no-such-topic", 0): (-1, UNKNOWN_TOPIC_OR_PARTITION)}
    (described_topic,) = [t for t in wire.describe_offsets([(topic, [0])]).topics]
    assert described_topic.topic_id == wire.topic_id and described_topic.partitions[0].leader_epoch >= 0
    # A member: no reset, no delete.
    busy = wire.alter({(topic, 0): 0})
    assert busy.error_code == NON_EMPTY_GROUP and busy.responses[0].partitions[0].error_code == NON_EMPTY_GROUP
    busy = wire.delete_offsets([topic])
    assert busy.error_code == NON_EMPTY_GROUP and busy.responses[0].error_code == NON_EMPTY_GROUP
    assert wire.delete_group() == NON_EMPTY_GROUP
    assert wire.heartbeat("member-a", -1).error_code == NONE

    before = wire.summary()
    assert (before.error_code, before.start_offset) == (NONE, 3)
    altered = wire.alter({(topic, 0): 1, (topic, 9): 0})
    assert altered.error_code == NONE
    assert {p.partition_index: p.error_code for p in altered.responses[0].partitions} == {0: NONE, 9: UNKNOWN_TOPIC_OR_PARTITION}
    assert wire.start_offsets([(topic, [0])]) == {(topic, 0): (1, NONE)}
    after = wire.summary()
    assert (after.start_offset, after.state_epoch) == (1, before.state_epoch + 1)
    # The next member starts at the new start offset: offsets 1 and 2 come again.
    assert wire.heartbeat("member-b", 0).error_code == NONE
    again = wire.fetch("member-b", 0, max_records=10)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in again.responses[0].partitions[0].acquired_records] == [(1, 4, 1)]
    assert wire.accept_and_close("member-b", -1, 1, 4).responses[0].partitions[0].error_code == NONE
    assert wire.heartbeat("member-b", -1).error_code == NONE
    assert wire.start_offsets([(topic, [0])]) == {(topic, 0): (5, NONE)}

    deleted = wire.delete_offsets([topic, "no-such-topic"])
    assert deleted.error_code == NONE
    assert {t.topic_name: t.error_code for t in deleted.responses} == {topic: NONE, "no-such-topic": UNKNOWN_TOPIC_OR_PARTITION}
    # Topics null for an empty group: only what it has state of, which is nothing now.
    assert wire.start_offsets() == {}
    assert wire.start_offsets([(topic, [0])]) == {(topic, 0): (-1, NONE)}
    assert wire.summary().error_code == UNKNOWN_TOPIC_OR_PARTITION

    assert wire.delete_group() == NONE
    assert wire.describe_offsets().error_code == GROUP_ID_NOT_FOUND
    L = REQ["ListGroups"]
    listed = wire.call("ListGroups", 5, L.ListGroupsRequest(states_filter=[], types_filter=["share"])).groups
    assert wire.group not in {g.group_id for g in listed}


def test_share_coordinator_state_apis_fence_an_older_state_epoch(wire_setup):
    _, wire = wire_setup
    I, D = REQ["InitializeShareGroupState"], REQ["DeleteShareGroupState"]

    def initialize(state_epoch: int, start_offset: int) -> int:
        (result,) = wire.call("InitializeShareGroupState", 0, I.InitializeShareGroupStateRequest(group_id=wire.group, topics=[
            I.InitializeStateData(topic_id=wire.topic_id, partitions=[
                I.PartitionData(partition=0, state_epoch=state_epoch, start_offset=start_offset)])])).results
        return result.partitions[0].error_code

    def delete() -> int:
        (result,) = wire.call("DeleteShareGroupState", 0, D.DeleteShareGroupStateRequest(group_id=wire.group, topics=[
            D.DeleteStateData(topic_id=wire.topic_id, partitions=[D.PartitionData(partition=0)])])).results
        return result.partitions[0].error_code

    assert wire.summary().error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert initialize(1, 2) == NONE
    summary = wire.summary()
    assert (summary.error_code, summary.state_epoch, summary.start_offset) == (NONE, 1, 2)
    assert initialize(1, 4) == FENCED_STATE_EPOCH
    assert initialize(2, 4) == NONE
    assert delete() == NONE
    assert wire.summary().error_code == UNKNOWN_TOPIC_OR_PARTITION
    # A state deleted at epoch 2 comes back only past it.
    assert initialize(2, 0) == FENCED_STATE_EPOCH
    assert initialize(3, 0) == NONE
    assert delete() == NONE and delete() == NONE


@pytest.fixture
def consumers():
    made: list[Member] = []
    yield made
    for member in made:
        member.close()


def test_tool_describes_resets_and_deletes_a_share_group(broker_factory, consumers):
    broker = broker_factory(BROKER_OVERRIDES)
    enable_share_groups(broker.bootstrap)
    topic, group = unique_topic("share-tool"), f"g-{uuid.uuid4()}"
    create_topic(broker.bootstrap, topic, 1)
    values = [f"v{i}".encode() for i in range(10)]
    produce(broker.bootstrap, topic, values)

    def consume_all() -> list[bytes]:
        member = Member(broker.bootstrap, group, topic, max_records=10)
        consumers.append(member)
        poll_until([member], lambda: len(member.got) >= len(values))
        member.consumer.commit_sync(10)
        member.close()
        # The group is empty once the member's leave is stored.
        deadline = time.monotonic() + WAIT_S
        while describe(broker.bootstrap, group).members:
            assert time.monotonic() < deadline, "the member did not leave"
            time.sleep(0.1)
        return sorted(v for v, _ in member.got)

    assert consume_all() == sorted(values)
    shown = share_groups_tool(broker, "--describe", "--group", group, "--offsets")
    assert shown.returncode == 0, shown.stderr
    assert f"Share group '{group}' has no active members." in shown.stderr
    assert shown.stdout.split("\n")[1:3] == ["GROUP" + " " * (len(group) - 5 + 1) + "TOPIC" + " " * (len(topic) - 5 + 1) + "PARTITION START-OFFSET",
                                             f"{group} {topic} 0         10"]
    dry = share_groups_tool(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.split("\n")[-2].split() == [group, topic, "0", "0"]
    assert share_groups_tool(broker, "--describe", "--group", group, "--offsets").stdout.split("\n")[2].split()[-1] == "10"
    reset = share_groups_tool(broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert reset.returncode == 0, reset.stderr
    assert share_groups_tool(broker, "--describe", "--group", group, "--offsets").stdout.split("\n")[2].split()[-1] == "0"
    # A new share consumer reads all of it again.
    assert consume_all() == sorted(values)

    deleted = share_groups_tool(broker, "--delete-offsets", "--group", group, "--topic", topic)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.split("\n")[1].split() == [topic, "Successful"]
    # The group has no state left, and no member reads anything: the header alone.
    assert share_groups_tool(broker, "--describe", "--group", group, "--offsets").stdout.split("\n")[1:] == [
        "GROUP TOPIC PARTITION START-OFFSET", ""]
    gone = share_groups_tool(broker, "--delete", "--group", group)
    assert gone.returncode == 0, gone.stderr
    assert f"('{group}') was successful" in gone.stdout
    listed = share_groups_tool(broker, "--list")
    assert listed.returncode == 0 and group not in listed.stdout.split()
    missing = share_groups_tool(broker, "--describe", "--group", group, "--offsets")
    assert missing.returncode == 1 and "GROUP_ID_NOT_FOUND" in missing.stderr
