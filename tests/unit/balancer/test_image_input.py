"""cluster_state_from_image: the planner's input from a metadata image."""

from __future__ import annotations

import uuid

from controller.balancer.image_input import cluster_state_from_image
from controller.balancer.model import BrokerState, GoalConfig
from controller.balancer.planner import plan
from controller.metadata.image import BrokerRegistration, MetadataImage, PartitionImage, TopicImage


def image() -> MetadataImage:
    brokers = {
        1: BrokerRegistration(1, uuid.uuid4(), 1, rack="a", fenced=False),
        2: BrokerRegistration(2, uuid.uuid4(), 2, rack="b", fenced=False),
        3: BrokerRegistration(3, uuid.uuid4(), 3, rack="a", fenced=True),
        4: BrokerRegistration(4, uuid.uuid4(), 4, rack="b", fenced=False, in_controlled_shutdown=True),
        5: BrokerRegistration(5, uuid.uuid4(), 5, rack=None, fenced=False),
    }
    partitions = {
        0: PartitionImage(0, (1, 2), (1, 2), 1, 0, 0),
        # Being reassigned from (1, 3) to (2, 1): replicas hold the target then the leaving replica.
        1: PartitionImage(1, (2, 1, 3), (1, 3), 1, 0, 0, removing_replicas=(3,), adding_replicas=(2,)),
    }
    topics = {"orders": TopicImage("orders", uuid.uuid4(), partitions)}
    return MetadataImage(topics=topics, brokers=brokers)


def test_broker_states_come_from_the_callers_decisions_and_the_registrations():
    state = cluster_state_from_image(image(), failed={3}, draining={5}, cordoned=())
    states = {b.broker_id: b.state for b in state.brokers}
    assert states == {1: BrokerState.ALIVE, 2: BrokerState.ALIVE, 3: BrokerState.DEAD,
                      4: BrokerState.CORDONED, 5: BrokerState.DRAINING}
    # Fenced but not given up on: kept, like a cordoned broker.
    assert {b.broker_id: b.state for b in cluster_state_from_image(image()).brokers}[3] is BrokerState.CORDONED
    assert [b.rack for b in state.brokers] == ["a", "b", "a", "b", None]


def test_measurements_are_carried_and_a_running_reassignment_is_its_target_and_not_movable():
    state = cluster_state_from_image(
        image(),
        disk_bytes={1: (1000, 600)},
        broker_rates={2: (10, 20)},
        partition_sizes={("orders", 0): 300},
        partition_rates={("orders", 1): 7},
    )
    brokers = {b.broker_id: b for b in state.brokers}
    assert (brokers[1].disk_capacity_bytes, brokers[1].disk_used_bytes) == (1000, 600)
    assert (brokers[2].bytes_in_per_second, brokers[2].bytes_out_per_second) == (10, 20)
    first, second = state.partitions
    assert (first.replicas, first.isr, first.leader, first.size_bytes, first.movable) == ((1, 2), (1, 2), 1, 300, True)
    assert (second.replicas, second.isr, second.bytes_in_per_second, second.movable) == ((2, 1), (1,), 7, False)


def test_the_planner_takes_the_state_built_from_an_image():
    state = cluster_state_from_image(image(), failed={3})
    result = plan(state, GoalConfig(max_moves_per_broker=None))
    assert not [m for m in result.moves if m.partition == 1]  # the running reassignment is left alone
    assert all(5 not in m.removed and 4 not in m.added and 3 not in m.added for m in result.moves)
