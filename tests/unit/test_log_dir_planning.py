"""JBOD in KRaft (KIP-858), the controller's pure planning: brokers register
their log dirs, assign replicas to them (AssignReplicasToDirs), and a dir
reported offline in a heartbeat takes its replicas out of ISRs and
leaderships, in bounded proposals, never electing an offline replica."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from controller.broker_lifecycle import (
    plan_broker_heartbeat,
    plan_register_broker,
    plan_unfinished_leadership,
)
from controller.directories import UNASSIGNED, offline_replicas, replica_directory, replica_offline
from controller.log_dirs import plan_assign_replicas_to_dirs, plan_directories_offline
from controller.metadata.image import MetadataImage
from controller.metadata.records import CONFIG_RECORD, PARTITION_RECORD, RESOURCE_TOPIC, TOPIC_RECORD
from protocol.errors import ErrorCode
from tests.unit.test_bounded_unfence import finish
from tests.unit.test_broker_lifecycle import CLUSTER, apply, heartbeat, registered, registration

TOPIC_ID = uuid.UUID(int=55)


def dir_id(broker_id: int, index: int) -> uuid.UUID:
    return uuid.UUID(int=(broker_id << 16) + 100 + index)


def jbod_cluster(broker_ids=(1, 2, 3)) -> MetadataImage:
    """Unfenced brokers, each registered with two log dirs."""
    image = MetadataImage()
    for broker_id in broker_ids:
        request = registration(broker_id)
        request.log_dirs = [dir_id(broker_id, 0), dir_id(broker_id, 1)]
        _, records = plan_register_broker(image, request, cluster_id=CLUSTER, broker_epoch=10 * broker_id, session_alive=False)
        image = apply(image, records)
        _, records = plan_broker_heartbeat(image, heartbeat(broker_id, 10 * broker_id, 10 * broker_id))
        image = apply(image, records)
    return image


def with_topic(image, count, replicas=(1, 2, 3), isr=None, leader=1):
    records = [TOPIC_RECORD(name="t", topic_id=TOPIC_ID)]
    records += [
        PARTITION_RECORD(
            partition_id=i, topic_id=TOPIC_ID, replicas=list(replicas), isr=list(isr or replicas), leader=leader,
            leader_epoch=0, partition_epoch=0,
        )
        for i in range(count)
    ]
    return apply(image, records)


def assign(broker_id, epoch, directory, partitions, topic_id=TOPIC_ID):
    return SimpleNamespace(
        broker_id=broker_id,
        broker_epoch=epoch,
        directories=[
            SimpleNamespace(
                id=directory,
                topics=[SimpleNamespace(topic_id=topic_id, partitions=[SimpleNamespace(partition_index=p) for p in partitions])],
            )
        ],
    )


def assigned(image, broker_id, directory, partitions):
    errors, records = plan_assign_replicas_to_dirs(image, assign(broker_id, 10 * broker_id, directory, partitions))
    assert set(errors.values()) == {ErrorCode.NONE}, errors
    return apply(image, records)


def test_registration_keeps_the_log_dirs():
    image = jbod_cluster()
    assert image.brokers[2].log_dirs == (dir_id(2, 0), dir_id(2, 1))


def test_assignment_names_the_dir_per_replica_and_only_once():
    image = with_topic(jbod_cluster(), 2)
    part = image.topics["t"].partitions[0]
    assert replica_directory(part, 1) == UNASSIGNED and not replica_offline(image, part, 1)
    image = assigned(image, 2, dir_id(2, 1), [0, 1])
    part = image.topics["t"].partitions[0]
    assert part.directories == (UNASSIGNED, dir_id(2, 1), UNASSIGNED)
    assert part.leader == 1 and part.isr == (1, 2, 3)  # nothing else changed
    # The same assignment again writes nothing.
    errors, records = plan_assign_replicas_to_dirs(image, assign(2, 20, dir_id(2, 1), [0, 1]))
    assert records == [] and set(errors.values()) == {ErrorCode.NONE}


def test_assignment_errors():
    image = with_topic(jbod_cluster(), 1, replicas=(1, 2))
    assert plan_assign_replicas_to_dirs(image, assign(9, 90, dir_id(9, 0), [0])) == ({None: ErrorCode.BROKER_ID_NOT_REGISTERED}, [])
    assert plan_assign_replicas_to_dirs(image, assign(2, 21, dir_id(2, 0), [0])) == ({None: ErrorCode.STALE_BROKER_EPOCH}, [])
    errors, records = plan_assign_replicas_to_dirs(image, assign(3, 30, dir_id(3, 0), [0, 7]))
    assert errors == {(dir_id(3, 0), TOPIC_ID, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER, (dir_id(3, 0), TOPIC_ID, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert records == []
    errors, _ = plan_assign_replicas_to_dirs(image, assign(3, 30, dir_id(3, 0), [0], topic_id=uuid.UUID(int=1)))
    assert set(errors.values()) == {ErrorCode.UNKNOWN_TOPIC_ID}


def test_an_offline_dir_moves_leadership_and_leaves_the_isr():
    image = with_topic(jbod_cluster(), 4)
    image = assigned(image, 1, dir_id(1, 0), [0, 1])  # broker 1's failing dir
    image = assigned(image, 1, dir_id(1, 1), [2, 3])  # its healthy one
    records, after, left = plan_directories_offline(image, 1, 10, [dir_id(1, 0)])
    assert not left
    image = apply(image, records)
    assert image.brokers[1].log_dirs == (dir_id(1, 1),)
    assert not image.brokers[1].fenced
    parts = image.topics["t"].partitions
    for p in (0, 1):
        assert parts[p].leader == 2 and parts[p].isr == (2, 3) and parts[p].leader_epoch == 1
        assert offline_replicas(image, parts[p]) == {1}
    for p in (2, 3):
        assert parts[p].leader == 1 and parts[p].isr == (1, 2, 3)
    # Reported again in the next heartbeat: nothing more to do.
    assert plan_directories_offline(image, 1, 10, [dir_id(1, 0)])[0] == []
    assert plan_unfinished_leadership(image, 100) == (False, [])


def test_an_offline_sole_isr_member_keeps_its_place_but_never_leads():
    image = with_topic(jbod_cluster(), 1, isr=(1,))
    image = assigned(image, 1, dir_id(1, 0), [0])
    records, _, _ = plan_directories_offline(image, 1, 10, [dir_id(1, 0)])
    image = apply(image, records)
    part = image.topics["t"].partitions[0]
    assert part.leader == -1 and part.isr == (1,)
    # The controller's later passes do not hand it back to the broker whose dir failed.
    assert plan_unfinished_leadership(image, 100) == (False, [])


def test_unclean_election_skips_offline_replicas():
    image = with_topic(jbod_cluster(), 1, replicas=(1, 2, 3), isr=(1,))
    image = apply(image, [CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name="t", name="unclean.leader.election.enable", value="true")])
    image = assigned(image, 1, dir_id(1, 0), [0])
    image = assigned(image, 2, dir_id(2, 0), [0])
    # Broker 2's dir went offline earlier: it must not be the unclean choice either.
    image = apply(image, plan_directories_offline(image, 2, 20, [dir_id(2, 0)])[0])
    image = apply(image, plan_directories_offline(image, 1, 10, [dir_id(1, 0)])[0])
    assert image.topics["t"].partitions[0].leader == 3


def test_offline_changes_are_bounded_and_finished_by_the_controller_passes():
    image = with_topic(jbod_cluster(), 25)
    image = assigned(image, 1, dir_id(1, 0), list(range(25)))
    records, _, left = plan_directories_offline(image, 1, 10, [dir_id(1, 0)], limit=10)
    assert left and len(records) == 1 + 10
    image, rounds = finish(apply(image, records), 10)
    assert rounds == [10, 5]
    assert {p.leader for p in image.topics["t"].partitions.values()} == {2}


def test_a_restart_registers_the_dir_again_and_its_replicas_are_online():
    image = with_topic(jbod_cluster(), 1)
    image = assigned(image, 1, dir_id(1, 0), [0])
    image = apply(image, plan_directories_offline(image, 1, 10, [dir_id(1, 0)])[0])
    assert replica_offline(image, image.topics["t"].partitions[0], 1)
    request = registration(1, incarnation=uuid.UUID(int=1001))
    request.log_dirs = [dir_id(1, 0), dir_id(1, 1)]
    _, records = plan_register_broker(image, request, cluster_id=CLUSTER, broker_epoch=500, session_alive=False)
    image = apply(image, records)
    assert not replica_offline(image, image.topics["t"].partitions[0], 1)


def test_assigning_to_a_dir_already_offline_leaves_isr_in_the_same_change():
    image = with_topic(jbod_cluster(), 2)
    image = assigned(image, 1, dir_id(1, 0), [0])
    image = apply(image, plan_directories_offline(image, 1, 10, [dir_id(1, 0)])[0])
    # Partition 1 was not assigned yet when the dir failed.
    assert image.topics["t"].partitions[1].leader == 1
    image = assigned(image, 1, dir_id(1, 0), [1])
    part = image.topics["t"].partitions[1]
    assert part.leader == 2 and 1 not in part.isr


def test_a_heartbeat_of_a_broker_without_dirs_changes_nothing():
    image = with_topic(registered(1, 2, 3), 1)
    assert plan_directories_offline(image, 1, 10, [dir_id(1, 0)]) == ([], image, False)


def test_a_leader_may_not_take_an_offline_replica_back_into_the_isr():
    """The offline replica's broker keeps fetching other partitions in the same
    fetch session, where the leader still counts it caught up: the controller
    refuses the expansion (INELIGIBLE_REPLICA), as Kafka's does."""
    from tests.unit.test_alter_partition import alter, only, part

    image = with_topic(jbod_cluster(), 1, leader=2)
    image = assigned(image, 1, dir_id(1, 0), [0])
    image = apply(image, plan_directories_offline(image, 1, 10, [dir_id(1, 0)])[0])
    assert image.topics["t"].partitions[0].isr == (2, 3)
    response, records = alter(image, part(image, 0, isr=(2, 3, 1)), broker_id=2, broker_epoch=20)
    assert only(response).error_code == ErrorCode.INELIGIBLE_REPLICA and records == []
    # Back after a restart, it may rejoin.
    request = registration(1, incarnation=uuid.UUID(int=1001))
    request.log_dirs = [dir_id(1, 0), dir_id(1, 1)]
    _, records = plan_register_broker(image, request, cluster_id=CLUSTER, broker_epoch=500, session_alive=False)
    image = apply(image, records)
    _, records = plan_broker_heartbeat(image, heartbeat(1, 500, 10**6))
    image = apply(image, records)
    response, records = alter(image, part(image, 0, isr=(2, 3, 1)), broker_id=2, broker_epoch=20)
    assert only(response).error_code == ErrorCode.NONE and records


def test_the_leader_counts_an_offline_replica_ineligible():
    """The leader side of the same rule: a follower whose log dir went offline is
    ineligible for this partition only (so the leader never proposes it back,
    and shrinks it out at once), not for the partitions of its other dir."""
    from broker.replica.manager import ReplicaManager

    image = with_topic(jbod_cluster(), 2, leader=2)
    image = assigned(image, 1, dir_id(1, 0), [0])
    image = assigned(image, 1, dir_id(1, 1), [1])
    image = apply(image, plan_directories_offline(image, 1, 10, [dir_id(1, 0)])[0])
    parts = image.topics["t"].partitions
    assert ReplicaManager._ineligible_for(image, parts[0], {9}) == {1, 9}
    assert ReplicaManager._ineligible_for(image, parts[1], {9}) == {9}
    assert ReplicaManager._ineligible_for(image, None, set()) == set()
