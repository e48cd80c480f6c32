"""Group administration through confluent-kafka's AdminClient and kafka-python's
KafkaAdminClient: listing (with filters), describing, committed offsets (list,
alter, delete), deleting groups, removing static members, consumer lag; and
offsets committed by consumers that assign partitions themselves.

Live groups are real consumers (``_groups.GroupMember``) of the same module
broker; every test uses its own topic and groups.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import BrokerProcess
from tests.interop._groups import GroupMember, produce_values, wait_for
from tests.interop._support import create_topic, unique_topic

ADMIN_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("group-admin-broker"), {"group.min.session.timeout.ms": "1000"}).start()
    yield broker
    broker.stop()


@pytest.fixture
def kadmin(broker):
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=ADMIN_TIMEOUT_S * 1000)
    yield admin
    admin.close()


@pytest.fixture
def cadmin(broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def close_all(members) -> None:
    for member in members:
        member.close()
    for member in members:
        member.raise_error()


def consumed_and_committed(kind: str, broker, group: str, topic: str, count: int, **kwargs) -> GroupMember:
    """A started member of ``group`` that has consumed ``count`` records and committed them."""
    member = GroupMember(kind, broker.bootstrap, group, [topic], name=f"{group}-{kind}", **kwargs).start()
    try:
        wait_for(lambda: len(member.values()) >= count, 30, lambda: member)
        member.commit()
    except BaseException:
        close_all([member])
        raise
    return member


def kafka_error(future):
    """The KafkaError a confluent-kafka admin future failed with (None: it succeeded)."""
    from confluent_kafka import KafkaException

    try:
        future.result(ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0]
    return None


def oam(offset: int, metadata: str = ""):
    from kafka.structs import OffsetAndMetadata

    return OffsetAndMetadata(offset, metadata, -1)


# --------------------------------------------------------------------------- confluent-kafka


def test_confluent_list_describe_offsets_and_delete(broker, cadmin):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition

    topic = unique_topic("adm-c")
    create_topic(broker.bootstrap, topic, 4)
    produce_values(broker.bootstrap, topic, range(4), 3, "c")
    live, empty = unique_topic("g-live"), unique_topic("g-empty")
    members = []
    try:
        consumed_and_committed("confluent", broker, empty, topic, 12).close()
        members = [
            GroupMember("confluent", broker.bootstrap, live, [topic], name=f"live-{i}", strategy="roundrobin").start()
            for i in range(2)
        ]
        wait_for(lambda: all(m.partitions(topic) for m in members) and sum(len(m.partitions(topic)) for m in members) == 4, 30, lambda: members)
        wait_for(lambda: len(members[0].values()) + len(members[1].values()) >= 12, 30, lambda: members)

        # ListConsumerGroups, unfiltered and by state.
        listed = cadmin.list_consumer_groups().result(ADMIN_TIMEOUT_S)
        assert not listed.errors
        by_id = {g.group_id: g for g in listed.valid}
        assert by_id[live].state == ConsumerGroupState.STABLE and not by_id[live].is_simple_consumer_group
        assert by_id[empty].state == ConsumerGroupState.EMPTY
        stable = {g.group_id for g in cadmin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(ADMIN_TIMEOUT_S).valid}
        assert live in stable and empty not in stable
        only_empty = {g.group_id for g in cadmin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(ADMIN_TIMEOUT_S).valid}
        assert empty in only_empty and live not in only_empty

        # DescribeConsumerGroups: members, their hosts and assignments.
        described = {g: f.result(ADMIN_TIMEOUT_S) for g, f in cadmin.describe_consumer_groups([live, empty]).items()}
        d = described[live]
        assert d.state == ConsumerGroupState.STABLE and d.partition_assignor == "roundrobin" and not d.is_simple_consumer_group
        assert d.coordinator.port == broker.port
        assert sorted(m.client_id for m in d.members) == ["live-0", "live-1"]
        assert {m.host for m in d.members} == {"/127.0.0.1"}
        assert all(m.group_instance_id is None for m in d.members)
        by_client = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic} for m in d.members}
        assert by_client == {m.name: m.partitions(topic) for m in members}
        assert (described[empty].state, described[empty].members) == (ConsumerGroupState.EMPTY, [])

        # ListConsumerGroupOffsets, all partitions and some.
        result = cadmin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(empty)])[empty].result(ADMIN_TIMEOUT_S)
        assert {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions} == {(topic, p): 3 for p in range(4)}
        some = [TopicPartition(topic, 1), TopicPartition(topic, 3)]
        result = cadmin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(empty, some)])[empty].result(ADMIN_TIMEOUT_S)
        assert [(tp.partition, tp.offset, tp.error) for tp in result.topic_partitions] == [(1, 3, None), (3, 3, None)]

        # AlterConsumerGroupOffsets: an empty group takes them; a live one refuses.
        altered = cadmin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(empty, [TopicPartition(topic, 0, 1), TopicPartition(topic, 2, 0)])]
        )[empty].result(ADMIN_TIMEOUT_S)
        assert all(tp.error is None for tp in altered.topic_partitions), altered.topic_partitions
        result = cadmin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(empty)])[empty].result(ADMIN_TIMEOUT_S)
        assert {tp.partition: tp.offset for tp in result.topic_partitions} == {0: 1, 1: 3, 2: 0, 3: 3}
        refused = cadmin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(live, [TopicPartition(topic, 0, 0)])])[live]
        error = kafka_error(refused)
        if error is None:  # librdkafka reports partition errors in the result
            error = refused.result().topic_partitions[0].error
        assert error is not None and error.code() == 25, error  # UNKNOWN_MEMBER_ID: not a member of the live group

        # DeleteConsumerGroups: live -> NON_EMPTY_GROUP, unknown -> GROUP_ID_NOT_FOUND, empty -> gone.
        unknown = unique_topic("g-never")
        futures = cadmin.delete_consumer_groups([live, unknown])
        assert kafka_error(futures[live]).code() == 68
        assert kafka_error(futures[unknown]).code() == 69
        assert kafka_error(cadmin.delete_consumer_groups([empty])[empty]) is None
        listed = {g.group_id for g in cadmin.list_consumer_groups().result(ADMIN_TIMEOUT_S).valid}
        assert empty not in listed and live in listed
        result = cadmin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(empty, [TopicPartition(topic, 0)])])[empty].result(ADMIN_TIMEOUT_S)
        assert [tp.offset for tp in result.topic_partitions] == [-1001]  # OFFSET_INVALID: nothing committed
        gone = cadmin.describe_consumer_groups([empty])[empty].result(ADMIN_TIMEOUT_S)
        assert gone.state == ConsumerGroupState.DEAD and gone.members == []
    finally:
        close_all(members)


# --------------------------------------------------------------------------- kafka-python


def test_kafka_python_list_describe_and_offsets(broker, kadmin):
    from kafka import TopicPartition

    topic = unique_topic("adm-k")
    create_topic(broker.bootstrap, topic, 3)
    produce_values(broker.bootstrap, topic, range(3), 4, "k")
    live, empty = unique_topic("g-live"), unique_topic("g-empty")
    members = []
    try:
        consumed_and_committed("kafka-python", broker, empty, topic, 12).close()
        members = [consumed_and_committed("aiokafka", broker, live, topic, 12)]

        listed = {g["group_id"]: g for g in kadmin.list_groups()}
        assert (listed[live]["protocol_type"], listed[live]["group_state"], listed[live]["group_type"]) == ("consumer", "Stable", "classic")
        assert (listed[empty]["protocol_type"], listed[empty]["group_state"]) == ("consumer", "Empty")
        assert {g["group_id"] for g in kadmin.list_groups(states_filter=["Stable"])} >= {live}
        assert empty not in {g["group_id"] for g in kadmin.list_groups(states_filter=["Stable"])}
        assert {live, empty} <= {g["group_id"] for g in kadmin.list_groups(types_filter=["classic"])}
        assert not {live, empty} & {g["group_id"] for g in kadmin.list_groups(types_filter=["consumer"])}

        described = kadmin.describe_groups([live, empty])
        d = described[live]
        assert (d["group_state"], d["protocol_type"], d["protocol_data"], d["error"]) == ("Stable", "consumer", "roundrobin", None)
        [member] = d["members"]
        assert member["client_id"] == members[0].name and member["client_host"] == "/127.0.0.1"
        assert member["member_metadata"]["topics"] == [topic]
        assert member["member_assignment"]["assigned_partitions"] == [{"topic": topic, "partitions": [0, 1, 2]}]
        assert set(d["authorized_operations"]) == {"READ", "DESCRIBE", "DELETE"}
        assert (described[empty]["group_state"], described[empty]["members"]) == ("Empty", [])

        # OffsetFetch v8: several groups in one request, all partitions or some.
        offsets = kadmin.list_group_offsets({live: None, empty: [TopicPartition(topic, 2)]})
        assert {tp.partition: o.offset for tp, o in offsets[live].items()} == {0: 4, 1: 4, 2: 4}
        assert {tp.partition: o.offset for tp, o in offsets[empty].items()} == {2: 4}

        # Consumer lag: committed offsets against the log end offsets.
        produce_values(broker.bootstrap, topic, [0, 2], 3, "more")
        from kafka.admin import OffsetSpec

        ends = kadmin.list_partition_offsets({TopicPartition(topic, p): OffsetSpec.LATEST for p in range(3)})
        committed = kadmin.list_group_offsets(empty)[empty]
        lag = {tp.partition: ends[tp].offset - committed[tp].offset for tp in committed}
        assert lag == {0: 3, 1: 0, 2: 3}

        # alter_group_offsets: an empty group takes them, a live group answers UNKNOWN_MEMBER_ID.
        result = kadmin.alter_group_offsets(empty, {TopicPartition(topic, 1): oam(1, "reset by admin")})
        assert [e.__name__ for e in result.values()] == ["NoError"]
        committed = kadmin.list_group_offsets(empty)[empty]
        assert (committed[TopicPartition(topic, 1)].offset, committed[TopicPartition(topic, 1)].metadata) == (1, "reset by admin")
        result = kadmin.alter_group_offsets(live, {TopicPartition(topic, 1): oam(0)})
        assert [e.__name__ for e in result.values()] == ["UnknownMemberIdError"]

        # delete_groups: live -> NonEmptyGroupError, unknown -> GroupIdNotFoundError, empty -> OK.
        unknown = unique_topic("g-never")
        assert kadmin.delete_groups([live, unknown, empty]) == {
            live: "NonEmptyGroupError",
            unknown: "GroupIdNotFoundError",
            empty: "OK",
        }
        assert empty not in {g["group_id"] for g in kadmin.list_groups()}
        assert kadmin.list_group_offsets(empty)[empty] == {}
        assert kadmin.describe_groups([empty])[empty]["group_state"] == "Dead"
    finally:
        close_all(members)


def test_kafka_python_delete_group_offsets(broker, kadmin):
    """OffsetDelete: partitions of a topic the live group consumes answer
    GROUP_SUBSCRIBED_TO_TOPIC, others are deleted; once the group is empty all go."""
    import kafka.errors as Errors
    from kafka import TopicPartition

    consumed, other = unique_topic("adm-del-a"), unique_topic("adm-del-b")
    create_topic(broker.bootstrap, consumed, 2)
    create_topic(broker.bootstrap, other, 2)
    produce_values(broker.bootstrap, consumed, range(2), 2, "a")
    group = unique_topic("g-offdel")
    # Offsets of a topic the group will not subscribe to, committed while it has no members.
    assert all(e is Errors.NoError for e in kadmin.alter_group_offsets(group, {TopicPartition(other, 0): oam(5), TopicPartition(other, 1): oam(6)}).values())
    member = consumed_and_committed("kafka-python", broker, group, consumed, 4)
    try:
        result = kadmin.delete_group_offsets(group, [TopicPartition(consumed, 0), TopicPartition(other, 0)])
        assert result == {TopicPartition(consumed, 0): Errors.GroupSubscribedToTopicError, TopicPartition(other, 0): Errors.NoError}
        left = {(tp.topic, tp.partition): o.offset for tp, o in kadmin.list_group_offsets(group)[group].items()}
        assert left == {(consumed, 0): 2, (consumed, 1): 2, (other, 1): 6}
        # A partition of a topic the cluster does not have.
        result = kadmin.delete_group_offsets(group, [TopicPartition(unique_topic("adm-del-none"), 0)])
        assert list(result.values()) == [Errors.UnknownTopicOrPartitionError]
    finally:
        close_all([member])
    wait_for(lambda: kadmin.describe_groups([group])[group]["group_state"] == "Empty", 30, "group did not become empty")
    result = kadmin.delete_group_offsets(group, [TopicPartition(consumed, 0), TopicPartition(consumed, 1)])
    assert set(result.values()) == {Errors.NoError}
    left = {(tp.topic, tp.partition): o.offset for tp, o in kadmin.list_group_offsets(group)[group].items()}
    assert left == {(other, 1): 6}
    with pytest.raises(Errors.GroupIdNotFoundError):
        kadmin.delete_group_offsets(unique_topic("g-never"), [TopicPartition(consumed, 0)])


@pytest.mark.parametrize("kind", ["kafka-python", "confluent"])
def test_kafka_python_remove_static_member(broker, kadmin, kind):
    """LeaveGroup v3+ by group instance id removes a static member that closed
    (static members do not leave on close); the group then empties at once,
    long before the member's session would expire."""
    import kafka.errors as Errors
    from kafka.admin import MemberToRemove

    topic = unique_topic("adm-static")
    create_topic(broker.bootstrap, topic, 2)
    group = unique_topic("g-static")
    member = GroupMember(kind, broker.bootstrap, group, [topic], name="static-1", instance_id="static-instance", session_timeout_ms=60000).start()
    try:
        wait_for(lambda: member.partitions(topic) == {0, 1}, 30, lambda: member)
    finally:
        close_all([member])
    described = kadmin.describe_groups([group])[group]
    assert described["group_state"] == "Stable"
    assert [m["group_instance_id"] for m in described["members"]] == ["static-instance"]

    result = kadmin.remove_group_members(group, [MemberToRemove(group_instance_id="static-instance"), MemberToRemove(group_instance_id="never-joined")])
    assert result == {"static-instance": Errors.NoError, "never-joined": Errors.UnknownMemberIdError}
    described = kadmin.describe_groups([group])[group]
    assert (described["group_state"], described["members"]) == ("Empty", [])
    assert kadmin.delete_groups([group]) == {group: "OK"}


# --------------------------------------------------------------------------- simple (non-group-managed) commits


def test_manual_assign_commits_with_each_client(broker, kadmin):
    """Consumers that assign partitions themselves commit with generation -1;
    the group holds offsets only (empty protocol type) and each client reads
    back what it committed."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition
    from kafka import KafkaConsumer, TopicPartition

    topic = unique_topic("adm-simple")
    create_topic(broker.bootstrap, topic, 3)
    groups = {kind: unique_topic(f"g-simple-{kind}") for kind in ("kafka-python", "confluent", "aiokafka")}

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=groups["kafka-python"], enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        consumer.commit({TopicPartition(topic, 0): oam(7, "kp"), TopicPartition(topic, 1): oam(3)})
        assert consumer.committed(TopicPartition(topic, 0)) == 7
        assert consumer.committed(TopicPartition(topic, 1)) == 3
        assert consumer.committed(TopicPartition(topic, 2)) is None
    finally:
        consumer.close()

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": groups["confluent"], "enable.auto.commit": False})
    try:
        consumer.assign([CTopicPartition(topic, 2)])
        consumer.commit(offsets=[CTopicPartition(topic, 2, 11)], asynchronous=False)
        [committed] = consumer.committed([CTopicPartition(topic, 2)], timeout=ADMIN_TIMEOUT_S)
        assert (committed.offset, committed.error) == (11, None)
    finally:
        consumer.close()

    async def aiokafka_commit():
        from aiokafka import AIOKafkaConsumer
        from aiokafka import TopicPartition as ATopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=groups["aiokafka"], enable_auto_commit=False)
        await asyncio.wait_for(consumer.start(), ADMIN_TIMEOUT_S)
        try:
            tp = ATopicPartition(topic, 1)
            consumer.assign([tp])
            await consumer.commit({tp: 5})
            return await consumer.committed(tp)
        finally:
            await consumer.stop()

    assert asyncio.run(aiokafka_commit()) == 5

    listed = {g["group_id"]: g for g in kadmin.list_groups()}
    for group in groups.values():
        assert (listed[group]["protocol_type"], listed[group]["group_state"]) == ("", "Empty"), listed[group]
    offsets = kadmin.list_group_offsets(list(groups.values()))
    assert {(tp.partition, o.offset, o.metadata) for tp, o in offsets[groups["kafka-python"]].items()} == {(0, 7, "kp"), (1, 3, "")}
    assert {tp.partition: o.offset for tp, o in offsets[groups["confluent"]].items()} == {2: 11}
    assert {tp.partition: o.offset for tp, o in offsets[groups["aiokafka"]].items()} == {1: 5}
    described = kadmin.describe_groups([groups["confluent"]])[groups["confluent"]]
    assert (described["group_state"], described["protocol_type"], described["members"]) == ("Empty", "", [])
