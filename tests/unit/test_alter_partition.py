"""AlterPartition on the controller: every rule of the planner, then the real
QuorumController (commit, image, replay) and the controller listener on the wire."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from broker.controller_node.listener import build_controller_dispatcher
from broker.controller_node.quorum_controller import QuorumController
from controller.alter_partition import plan_alter_partition
from controller.broker_lifecycle import (
    plan_broker_heartbeat,
    plan_fence_brokers,
    plan_register_broker,
    plan_unregister_broker,
)
from controller.features import SUPPORTED_FEATURE_LEVELS
from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import (
    NO_LEADER_CHANGE,
    NO_LEADER_RECOVERY_STATE_CHANGE,
    PARTITION_CHANGE_RECORD,
    PARTITION_RECORD,
    TOPIC_RECORD,
    record_api_key,
)
from controller.raft.log import MemoryRaftLog
from controller.topic_commands import ClusterDefaults, CreateTopicSpec
from protocol.codec import decode_struct, encode_struct
from protocol.errors import ErrorCode
from protocol.framing import decode_response, encode_request
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes
from tests.quorum_harness import SingleVoterController

API = APIS_BY_NAME["AlterPartition"]
Q = struct_classes(API.request)
CLUSTER = "c1"
TOPIC_ID = uuid.UUID(int=9)
OTHER_TOPIC_ID = uuid.UUID(int=10)
ALL_VERSIONS = (0, 1, 2, 3)
RECOVERED, RECOVERING = 0, 1
ONE_BROKER = ClusterDefaults(broker_ids=(1,), num_partitions=1, replication_factor=1)


# --------------------------------------------------------------------------- images


def apply(image, records):
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset + len(records))


def epoch_of(broker_id: int) -> int:
    return 10 * broker_id


def registration(broker_id, cluster_id=CLUSTER):
    listener = SimpleNamespace(name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id, security_protocol=0)
    return SimpleNamespace(
        broker_id=broker_id, cluster_id=cluster_id, incarnation_id=uuid.UUID(int=broker_id),
        listeners=[listener], rack=None, log_dirs=[],
        # What a pybroker broker registers with: a new cluster finalizes feature levels.
        features=[
            SimpleNamespace(name=name, min_supported_version=low, max_supported_version=high)
            for name, (low, high) in SUPPORTED_FEATURE_LEVELS.items()
        ],
    )


def heartbeat(broker_id, epoch, offset=10**9, want_shut_down=False):
    return SimpleNamespace(
        broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=offset,
        want_fence=False, want_shut_down=want_shut_down,
    )


def brokers(*broker_ids):
    """Registered (broker epoch 10 * id) and unfenced brokers."""
    image = MetadataImage()
    for broker_id in broker_ids:
        _, records = plan_register_broker(
            image, registration(broker_id), cluster_id=CLUSTER, broker_epoch=epoch_of(broker_id), session_alive=False
        )
        image = apply(image, records)
        _, records = plan_broker_heartbeat(image, heartbeat(broker_id, epoch_of(broker_id)))
        image = apply(image, records)
    return image


def partition_record(partition_id, replicas, isr, leader, leader_epoch, partition_epoch, topic_id=TOPIC_ID, **extra):
    return PARTITION_RECORD(
        partition_id=partition_id, topic_id=topic_id, replicas=replicas, isr=isr, leader=leader,
        leader_epoch=leader_epoch, partition_epoch=partition_epoch, **extra,
    )


def cluster(*partitions, broker_ids=(1, 2, 3, 4)):
    """Brokers 1-4 and topic "t". By default partition 0 (replicas 1,2,3; ISR 1,2;
    leader 1; epochs 5/7) and partition 1 (replicas 2,3,1; ISR all; leader 2; epochs 3/4)."""
    if not partitions:
        partitions = (
            partition_record(0, [1, 2, 3], [1, 2], 1, leader_epoch=5, partition_epoch=7),
            partition_record(1, [2, 3, 1], [2, 3, 1], 2, leader_epoch=3, partition_epoch=4),
        )
    return apply(brokers(*broker_ids), [TOPIC_RECORD(name="t", topic_id=TOPIC_ID), *partitions])


def with_other_topic(image):
    return apply(image, [TOPIC_RECORD(name="u", topic_id=OTHER_TOPIC_ID),
                         partition_record(0, [1, 2], [1], 1, 2, 2, topic_id=OTHER_TOPIC_ID)])


# --------------------------------------------------------------------------- requests


def on_the_wire(struct, version, value):
    """``value`` as the broker would decode it at ``version`` (fields the version lacks at their defaults)."""
    decoded, _ = decode_struct(struct, version, True, encode_struct(struct, version, True, value))
    return decoded


def part(image, partition_id=0, isr=(1, 2), *, version=3, leader_epoch=None, partition_epoch=None,
         recovery=RECOVERED, epochs=None, topic="t"):
    """One PartitionData: epochs default to the image's current ones, broker
    epochs (v3) to the registered ones (``epochs`` overrides some)."""
    current = image.topics[topic].partitions.get(partition_id)
    if leader_epoch is None:
        leader_epoch = current.leader_epoch if current else 0
    if partition_epoch is None:
        partition_epoch = current.partition_epoch if current else 0
    states = [
        Q.BrokerState(
            broker_id=b,
            broker_epoch=(epochs or {}).get(b, image.brokers[b].epoch if b in image.brokers else -1),
        )
        for b in isr
    ]
    return Q.PartitionData(
        partition_index=partition_id,
        leader_epoch=leader_epoch,
        new_isr=list(isr) if version < 3 else [],
        new_isr_with_epochs=states if version >= 3 else [],
        leader_recovery_state=recovery,
        partition_epoch=partition_epoch,
    )


def topic_data(image, partitions, *, version=3, name="t", topic_id=None):
    if topic_id is None:
        topic = image.topics.get(name)
        topic_id = topic.topic_id if topic else uuid.UUID(int=404)
    if version < 2:
        return Q.TopicData(topic_name=name, partitions=partitions)
    return Q.TopicData(topic_id=topic_id, partitions=partitions)


def request(image, topics, *, version=3, broker_id=1, broker_epoch=None):
    if broker_epoch is None:
        broker_epoch = epoch_of(broker_id)
    value = Q.AlterPartitionRequest(broker_id=broker_id, broker_epoch=broker_epoch, topics=topics)
    return on_the_wire(API.request, version, value)


def alter(image, *partitions, version=3, broker_id=1, broker_epoch=None):
    """Plan a one-topic ("t") request; (response, records)."""
    req = request(image, [topic_data(image, list(partitions), version=version)], version=version,
                  broker_id=broker_id, broker_epoch=broker_epoch)
    response, records = plan_alter_partition(image, req, version)
    # Whatever the planner answers must be sendable at the request's version.
    on_the_wire(API.response, version, response)
    return response, records


def only(response):
    """The single partition answer of a one-topic, one-partition response."""
    assert response.error_code == ErrorCode.NONE
    (topic,) = response.topics
    (answer,) = topic.partitions
    return answer


def error_of(image, *args, **kwargs):
    response, records = alter(image, part(image, *args, **kwargs), version=kwargs.get("version", 3))
    answer = only(response)
    if answer.error_code not in (ErrorCode.NONE, ErrorCode.NEW_LEADER_ELECTED):
        assert records == []  # a refused change writes nothing
    return ErrorCode(answer.error_code)


# --------------------------------------------------------------------------- success


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_an_expansion_writes_one_change_record_and_answers_the_state_after_it(version):
    image = cluster()
    response, records = alter(image, part(image, 0, [1, 2, 3], version=version), version=version)
    (record,) = records
    assert record_api_key(record) == PARTITION_CHANGE_RECORD.api_key
    assert (record.topic_id, record.partition_id, record.isr) == (TOPIC_ID, 0, [1, 2, 3])
    # Only the ISR changes: the leader (and its epoch) and recovery state stay.
    assert record.leader == NO_LEADER_CHANGE
    assert record.leader_recovery_state == NO_LEADER_RECOVERY_STATE_CHANGE
    assert record.replicas is None
    answer = only(response)
    assert (answer.partition_index, answer.error_code) == (0, ErrorCode.NONE)
    assert (answer.leader_id, answer.leader_epoch) == (1, 5)
    assert (answer.isr, answer.leader_recovery_state, answer.partition_epoch) == ([1, 2, 3], RECOVERED, 8)
    # The answer is exactly what replaying the record makes of the partition.
    after = apply(image, records).topics["t"].partitions[0]
    assert (after.isr, after.leader, after.leader_epoch, after.partition_epoch) == ((1, 2, 3), 1, 5, 8)


def test_a_shrink_keeps_the_leader_epoch():
    # Kafka bumps the leader epoch on a shrink only for metadata versions before 3.6.
    image = cluster()
    response, records = alter(image, part(image, 1, [2], version=3), broker_id=2)
    assert [r.isr for r in records] == [[2]]
    assert records[0].leader == NO_LEADER_CHANGE
    answer = only(response)
    assert (answer.leader_id, answer.leader_epoch, answer.isr, answer.partition_epoch) == (2, 3, [2], 5)


def test_the_isr_keeps_the_order_the_leader_asked_for():
    image = cluster()
    response, records = alter(image, part(image, 0, [3, 1, 2]))
    assert records[0].isr == [3, 1, 2]
    assert only(response).isr == [3, 1, 2]


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_an_unchanged_isr_writes_nothing_and_answers_the_current_state(version):
    image = cluster()
    response, records = alter(image, part(image, 0, [1, 2], version=version), version=version)
    assert records == []
    answer = only(response)
    assert (answer.error_code, answer.leader_id, answer.leader_epoch, answer.isr, answer.partition_epoch) == (
        ErrorCode.NONE, 1, 5, [1, 2], 7
    )


# --------------------------------------------------------------------------- the request as a whole


@pytest.mark.parametrize("broker_id,broker_epoch", [(1, 11), (1, -1), (9, 90)])
def test_a_sender_not_registered_with_that_epoch_is_refused_as_a_whole(broker_id, broker_epoch):
    image = cluster()
    topics = [topic_data(image, [part(image, 0, [1, 2, 3])])]
    req = request(image, topics, broker_id=broker_id, broker_epoch=broker_epoch)
    response, records = plan_alter_partition(image, req, 3)
    assert (response.error_code, response.topics, records) == (ErrorCode.STALE_BROKER_EPOCH, [], [])


@pytest.mark.parametrize("version,expected", [
    (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (2, ErrorCode.UNKNOWN_TOPIC_ID),
    (3, ErrorCode.UNKNOWN_TOPIC_ID),
])
def test_an_unknown_topic_answers_every_partition_asked_for(version, expected):
    image = cluster()
    partitions = [part(image, 0, [1, 2, 3], version=version), part(image, 1, [2], version=version)]
    req = request(image, [topic_data(image, partitions, version=version, name="nope")], version=version)
    response, records = plan_alter_partition(image, req, version)
    assert records == []
    assert response.error_code == ErrorCode.NONE
    (topic,) = response.topics
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [(0, expected), (1, expected)]


def test_a_zero_topic_id_is_unknown():
    image = cluster()
    req = request(image, [topic_data(image, [part(image, 0, [1, 2, 3])], topic_id=ZERO_UUID)])
    response, _ = plan_alter_partition(image, req, 3)
    assert response.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_v0_1_name_topics_and_v2_plus_use_ids(version):
    image = with_other_topic(cluster())
    partitions = [part(image, 0, [1, 2], topic="u", version=version)]
    req = request(image, [topic_data(image, partitions, version=version, name="u")], version=version)
    response, records = plan_alter_partition(image, req, version)
    (topic,) = response.topics
    if version < 2:
        assert (topic.topic_name, topic.topic_id) == ("u", ZERO_UUID)
    else:
        assert (topic.topic_name, topic.topic_id) == ("", OTHER_TOPIC_ID)
    assert [(r.topic_id, r.isr) for r in records] == [(OTHER_TOPIC_ID, [1, 2])]
    assert topic.partitions[0].partition_epoch == 3


def test_v2_ignores_the_topic_name():
    # The v2 request has no name field: a right name cannot stand in for a wrong id.
    image = cluster()
    value = Q.AlterPartitionRequest(broker_id=1, broker_epoch=10, topics=[
        Q.TopicData(topic_name="t", topic_id=uuid.UUID(int=404), partitions=[part(image, 0, [1, 2, 3], version=2)])
    ])
    response, records = plan_alter_partition(image, on_the_wire(API.request, 2, value), 2)
    assert (response.topics[0].partitions[0].error_code, records) == (ErrorCode.UNKNOWN_TOPIC_ID, [])


# --------------------------------------------------------------------------- per partition


def test_an_unknown_partition():
    image = cluster()
    assert error_of(image, 7, [1]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_sender_that_does_not_lead_the_partition_is_refused():
    image = cluster()
    # Broker 2 is registered with its epoch, but broker 1 leads partition 0.
    response, records = alter(image, part(image, 0, [2, 1]), broker_id=2)
    assert (only(response).error_code, records) == (ErrorCode.INVALID_REQUEST, [])


@pytest.mark.parametrize("leader_epoch,partition_epoch,expected", [
    (4, 7, ErrorCode.FENCED_LEADER_EPOCH),
    (5, 6, ErrorCode.INVALID_UPDATE_VERSION),
    # Epochs ahead of the controller's: the sender has seen a newer controller.
    (6, 7, ErrorCode.NOT_CONTROLLER),
    (5, 8, ErrorCode.NOT_CONTROLLER),
    (4, 6, ErrorCode.FENCED_LEADER_EPOCH),
])
def test_epochs_must_be_the_current_ones(leader_epoch, partition_epoch, expected):
    image = cluster()
    assert error_of(image, 0, [1, 2, 3], leader_epoch=leader_epoch, partition_epoch=partition_epoch) == expected


def test_the_leader_epoch_is_checked_before_the_leadership():
    # Kafka's order: a deposed leader with an old epoch hears FENCED_LEADER_EPOCH.
    image = cluster()
    response, _ = alter(image, part(image, 1, [2, 3, 1], leader_epoch=2), broker_id=1)
    assert only(response).error_code == ErrorCode.FENCED_LEADER_EPOCH


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("isr", [[], [1, 4], [2, 3], [1, 1, 2], [1, -1]])
def test_an_isr_that_is_empty_repeats_leaves_the_replicas_or_the_leader_out_is_invalid(isr, version):
    image = cluster()
    assert error_of(image, 0, isr, version=version) == ErrorCode.INVALID_REQUEST


def recovering_cluster():
    return cluster(partition_record(0, [1, 2, 3], [1], 1, 5, 7, leader_recovery_state=RECOVERING))


def test_a_recovered_partition_cannot_go_back_to_recovering():
    image = cluster(partition_record(0, [1, 2, 3], [1], 1, 5, 7))
    assert error_of(image, 0, [1], recovery=RECOVERING) == ErrorCode.INVALID_REQUEST


def test_a_recovering_leader_cannot_take_followers_yet():
    image = recovering_cluster()
    assert error_of(image, 0, [1, 2], recovery=RECOVERING) == ErrorCode.INVALID_REQUEST


def test_an_unknown_leader_recovery_state_is_invalid():
    image = recovering_cluster()
    assert error_of(image, 0, [1], recovery=7) == ErrorCode.INVALID_REQUEST


def test_a_recovered_leader_ends_recovery_and_takes_followers():
    image = recovering_cluster()
    response, records = alter(image, part(image, 0, [1, 2], recovery=RECOVERED))
    (record,) = records
    assert (record.isr, record.leader_recovery_state, record.leader) == ([1, 2], RECOVERED, NO_LEADER_CHANGE)
    answer = only(response)
    assert (answer.isr, answer.leader_recovery_state, answer.partition_epoch) == ([1, 2], RECOVERED, 8)
    assert apply(image, records).topics["t"].partitions[0].leader_recovery_state == RECOVERED


def test_ending_recovery_alone_is_a_change():
    image = recovering_cluster()
    response, records = alter(image, part(image, 0, [1], recovery=RECOVERED))
    assert [(r.isr, r.leader_recovery_state) for r in records] == [(None, RECOVERED)]
    assert (only(response).leader_recovery_state, only(response).partition_epoch) == (RECOVERED, 8)


def test_still_recovering_with_the_same_isr_changes_nothing():
    image = recovering_cluster()
    response, records = alter(image, part(image, 0, [1], recovery=RECOVERING))
    assert records == []
    assert (only(response).leader_recovery_state, only(response).partition_epoch) == (RECOVERING, 7)


# --------------------------------------------------------------------------- ineligible replicas (KIP-841, KIP-903)


def fenced(image, broker_id):
    return apply(image, plan_fence_brokers(image, [broker_id]))


def shutting_down(image, broker_id):
    _, records = plan_broker_heartbeat(image, heartbeat(broker_id, epoch_of(broker_id), want_shut_down=True))
    image = apply(image, records)
    assert image.brokers[broker_id].in_controlled_shutdown
    return image


def unregistered(image, broker_id):
    _, records = plan_unregister_broker(image, broker_id)
    return apply(image, records)


def ineligible_expected(version):
    return ErrorCode.INELIGIBLE_REPLICA if version >= 2 else ErrorCode.OPERATION_NOT_ATTEMPTED


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("make_ineligible", [fenced, shutting_down, unregistered])
def test_a_replica_that_cannot_serve_may_not_join_the_isr(make_ineligible, version):
    image = make_ineligible(cluster(), 3)
    assert error_of(image, 0, [1, 2, 3], version=version) == ineligible_expected(version)
    # The same request without it goes through (the epochs above were current).
    assert error_of(image, 0, [1, 2], version=version) == ErrorCode.NONE


def test_v3_a_broker_epoch_other_than_the_registered_one_is_ineligible():
    image = cluster()
    assert error_of(image, 0, [1, 2, 3], epochs={3: epoch_of(3) - 1}) == ErrorCode.INELIGIBLE_REPLICA
    assert error_of(image, 0, [1, 2, 3], epochs={3: epoch_of(3) + 1}) == ErrorCode.INELIGIBLE_REPLICA
    # -1: the leader did not know the epoch, and Kafka then skips the check.
    response, records = alter(image, part(image, 0, [1, 2, 3], epochs={3: -1}))
    assert (only(response).error_code, [r.isr for r in records]) == (ErrorCode.NONE, [[1, 2, 3]])


def test_every_member_of_the_new_isr_is_checked_not_only_the_added_ones():
    # Broker 3 stays in partition 1's ISR, but its leader names an old
    # incarnation of it (Kafka checks the whole new ISR).
    image = cluster()
    response, records = alter(image, part(image, 1, [2, 3], epochs={3: 1}), broker_id=2)
    assert (only(response).error_code, records) == (ErrorCode.INELIGIBLE_REPLICA, [])


def test_the_leaders_own_ineligibility_counts_too():
    # A sole leader in controlled shutdown keeps leading (nobody could take over)
    # but may not grow the ISR: it is on its way out.
    image = shutting_down(cluster(partition_record(0, [1, 2, 3], [1], 1, 5, 7)), 1)
    partition = image.topics["t"].partitions[0]
    assert (partition.leader, partition.isr) == (1, (1,))
    assert error_of(image, 0, [1, 2]) == ErrorCode.INELIGIBLE_REPLICA


# --------------------------------------------------------------------------- several partitions


def test_each_partition_gets_its_own_answer_and_only_successes_write():
    image = with_other_topic(cluster())
    req = request(image, [
        topic_data(image, [
            part(image, 0, [1, 2, 3]),  # fine
            part(image, 1, [2, 3]),  # broker 1 does not lead partition 1
            part(image, 5, [1]),  # no such partition
        ]),
        topic_data(image, [part(image, 0, [1, 2], topic="u")], name="u"),  # fine
        topic_data(image, [part(image, 0, [1])], topic_id=uuid.UUID(int=77)),  # no such topic
    ])
    response, records = plan_alter_partition(image, req, 3)
    assert response.error_code == ErrorCode.NONE
    answers = [[(p.partition_index, ErrorCode(p.error_code)) for p in t.partitions] for t in response.topics]
    assert answers == [
        [(0, ErrorCode.NONE), (1, ErrorCode.INVALID_REQUEST), (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)],
        [(0, ErrorCode.NONE)],
        [(0, ErrorCode.UNKNOWN_TOPIC_ID)],
    ]
    assert [t.topic_id for t in response.topics] == [TOPIC_ID, OTHER_TOPIC_ID, uuid.UUID(int=77)]
    assert [(r.topic_id, r.partition_id, r.isr) for r in records] == [
        (TOPIC_ID, 0, [1, 2, 3]), (OTHER_TOPIC_ID, 0, [1, 2])
    ]
    after = apply(image, records)
    assert after.topics["t"].partitions[0].partition_epoch == 8
    assert after.topics["t"].partitions[1] == image.topics["t"].partitions[1]
    assert after.topics["u"].partitions[0].isr == (1, 2)


def test_a_partition_named_twice_sees_its_first_change():
    image = cluster()
    response, records = alter(image, part(image, 0, [1, 2, 3]), part(image, 0, [1]))
    assert [r.isr for r in records] == [[1, 2, 3]]
    assert [ErrorCode(p.error_code) for p in response.topics[0].partitions] == [
        ErrorCode.NONE, ErrorCode.INVALID_UPDATE_VERSION
    ]
    # With the epoch the first change left, the second one goes through as well.
    response, records = alter(image, part(image, 0, [1, 2, 3]), part(image, 0, [1], partition_epoch=8))
    assert [r.isr for r in records] == [[1, 2, 3], [1]]
    assert [p.partition_epoch for p in response.topics[0].partitions] == [8, 9]
    assert apply(image, records).topics["t"].partitions[0].partition_epoch == 9


# --------------------------------------------------------------------------- reassignments


def reassigning_cluster(removing):
    # Replicas 1,2,3,4 while moving from (1,2,3) to the replicas minus ``removing``.
    return cluster(
        partition_record(0, [1, 2, 3, 4], [1, 2, 3], 1, 5, 7, adding_replicas=[4], removing_replicas=removing)
    )


def test_an_isr_change_before_the_added_replica_caught_up_leaves_the_reassignment_running():
    image = reassigning_cluster([3])
    response, records = alter(image, part(image, 0, [1, 2]))
    (record,) = records
    assert (record.isr, record.replicas, record.adding_replicas, record.removing_replicas) == ([1, 2], None, None, None)
    assert only(response).error_code == ErrorCode.NONE


def test_completing_a_reassignment_that_keeps_the_leader_bumps_its_epoch():
    image = reassigning_cluster([3])
    response, records = alter(image, part(image, 0, [1, 2, 3, 4]))
    (record,) = records
    assert (record.replicas, record.isr) == ([1, 2, 4], [1, 2, 4])
    assert (record.adding_replicas, record.removing_replicas) == ([], [])
    # Naming the same leader fences the removed replica's fetches with a new leader epoch.
    assert record.leader == 1
    answer = only(response)
    assert (answer.error_code, answer.leader_id, answer.leader_epoch, answer.isr, answer.partition_epoch) == (
        ErrorCode.NONE, 1, 6, [1, 2, 4], 8
    )
    after = apply(image, records).topics["t"].partitions[0]
    assert (after.replicas, after.adding_replicas, after.removing_replicas) == ((1, 2, 4), (), ())


@pytest.mark.parametrize("version,expected", [
    (1, ErrorCode.FENCED_LEADER_EPOCH), (2, ErrorCode.NEW_LEADER_ELECTED), (3, ErrorCode.NEW_LEADER_ELECTED)
])
def test_completing_a_reassignment_that_removes_the_leader_elects_another(version, expected):
    image = reassigning_cluster([1])
    response, records = alter(image, part(image, 0, [1, 2, 3, 4], version=version), version=version)
    # The change is written and the sender is told to wait for the metadata.
    (record,) = records
    assert (record.leader, record.replicas, record.isr) == (2, [2, 3, 4], [2, 3, 4])
    assert ErrorCode(only(response).error_code) == expected
    after = apply(image, records).topics["t"].partitions[0]
    assert (after.leader, after.leader_epoch, after.partition_epoch, after.isr) == (2, 6, 8, (2, 3, 4))


# --------------------------------------------------------------------------- the active controller


def test_not_the_active_controller():
    controller = QuorumController(MemoryRaftLog(), ONE_BROKER)
    image = cluster()
    req = request(image, [topic_data(image, [part(image, 0, [1, 2, 3])])])
    response = asyncio.run(controller.alter_partition(req, 3))
    assert (response.error_code, response.topics) == (ErrorCode.NOT_CONTROLLER, [])


@pytest.fixture
def quorum(tmp_path):
    opened = []

    def make():
        c = SingleVoterController(tmp_path, ONE_BROKER)
        opened.append(c)
        return c

    yield make
    for c in opened:
        c.close()


def join(harness, *broker_ids):
    """Register and unfence brokers through the controller; their epochs by id."""
    epochs = {}
    for broker_id in broker_ids:
        asked = registration(broker_id, cluster_id=harness.controller.cluster_id)
        result = harness.run(harness.controller.register_broker(asked))
        assert result.error == ErrorCode.NONE
        epochs[broker_id] = result.broker_epoch
        answer = harness.run(harness.controller.broker_heartbeat(heartbeat(broker_id, result.broker_epoch)))
        assert answer.is_fenced is False
    return epochs


def test_through_the_quorum_controller_the_change_commits_and_survives_a_restart(quorum):
    harness = quorum()
    join(harness, 1, 2, 3)
    (created,) = harness.create_topics([CreateTopicSpec("t", num_partitions=1, replication_factor=3)])
    assert created.error_code == ErrorCode.NONE
    before = harness.image.topics["t"].partitions[0]
    leader = before.leader
    assert len(before.isr) == 3
    follower = next(b for b in before.isr if b != leader)
    image = harness.image
    shrunk = [b for b in before.isr if b != follower]
    req = request(image, [topic_data(image, [part(image, 0, shrunk)])], broker_id=leader,
                  broker_epoch=image.brokers[leader].epoch)
    offset_before = harness.image.offset

    response = harness.run(harness.controller.alter_partition(req, 3))

    answer = only(response)
    assert (answer.error_code, answer.isr, answer.leader_id) == (ErrorCode.NONE, shrunk, leader)
    assert (answer.leader_epoch, answer.partition_epoch) == (before.leader_epoch, before.partition_epoch + 1)
    # Answered only once committed: the image already holds the change.
    after = harness.image.topics["t"].partitions[0]
    assert harness.image.offset > offset_before
    assert after.isr == tuple(shrunk)
    assert (after.partition_epoch, after.leader_epoch) == (before.partition_epoch + 1, before.leader_epoch)

    # The same request again is now stale.
    again = harness.run(harness.controller.alter_partition(req, 3))
    assert only(again).error_code == ErrorCode.INVALID_UPDATE_VERSION

    harness.close()
    reopened = quorum()
    replayed = reopened.image.topics["t"].partitions[0]
    assert (replayed.isr, replayed.partition_epoch) == (tuple(shrunk), before.partition_epoch + 1)


def test_an_answer_without_records_waits_for_the_changes_in_flight(quorum):
    harness = quorum()
    join(harness, 1, 2)
    harness.create_topics([CreateTopicSpec("t", num_partitions=1, replication_factor=2)])
    image = harness.image
    before = image.topics["t"].partitions[0]
    leader = before.leader
    epoch = image.brokers[leader].epoch
    shrink = request(image, [topic_data(image, [part(image, 0, [leader])])], broker_id=leader, broker_epoch=epoch)
    # The same ISR with the epoch the shrink will leave: nothing to write.
    repeat = request(
        image, [topic_data(image, [part(image, 0, [leader], partition_epoch=before.partition_epoch + 1)])],
        broker_id=leader, broker_epoch=epoch,
    )
    controller = harness.controller

    async def both():
        first = asyncio.ensure_future(controller.alter_partition(shrink, 3))
        await asyncio.sleep(0)  # the shrink is planned and proposed, not yet committed
        assert controller.image.topics["t"].partitions[0].isr == before.isr
        second = await controller.alter_partition(repeat, 3)
        seen = controller.image.topics["t"].partitions[0]
        return await first, second, seen

    first, second, seen = harness.run(both())
    assert only(first).error_code == ErrorCode.NONE
    assert (only(second).error_code, only(second).isr) == (ErrorCode.NONE, [leader])
    assert seen.isr == (leader,)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_the_controller_listener_serves_alter_partition_on_the_wire(quorum, version):
    harness = quorum()
    join(harness, 1, 2)
    harness.create_topics([CreateTopicSpec("t", num_partitions=1, replication_factor=2)])
    dispatcher = build_controller_dispatcher(SimpleNamespace(controller=harness.controller, authorizer=None))
    assert (56, 0, 3) in dispatcher.supported_versions()
    image = harness.image
    before = image.topics["t"].partitions[0]
    leader = before.leader
    body = Q.AlterPartitionRequest(
        broker_id=leader, broker_epoch=image.brokers[leader].epoch,
        topics=[topic_data(image, [part(image, 0, [leader], version=version)], version=version)],
    )
    frame = encode_request(API, version, 7, "test", body)
    connection = SimpleNamespace(peer="test")
    answer_frame = harness.run(dispatcher.handle_frame(frame[4:], connection))
    correlation_id, response = decode_response(API, version, bytes(answer_frame[4:]))
    assert correlation_id == 7
    answer = only(response)
    assert (answer.error_code, answer.isr) == (ErrorCode.NONE, [leader])
    assert answer.partition_epoch == before.partition_epoch + 1
    assert harness.image.topics["t"].partitions[0].isr == (leader,)


def test_the_controller_listener_answers_not_controller_when_not_active():
    controller = QuorumController(MemoryRaftLog(), ONE_BROKER)
    dispatcher = build_controller_dispatcher(SimpleNamespace(controller=controller, authorizer=None))
    image = cluster()
    topics = [topic_data(image, [part(image, 0, [1, 2, 3])])]
    body = Q.AlterPartitionRequest(broker_id=1, broker_epoch=10, topics=topics)
    frame = encode_request(API, 3, 8, "test", body)
    answer_frame = asyncio.run(dispatcher.handle_frame(frame[4:], SimpleNamespace(peer="test")))
    _, response = decode_response(API, 3, bytes(answer_frame[4:]))
    assert (response.error_code, response.topics) == (ErrorCode.NOT_CONTROLLER, [])
