"""Broker registration, heartbeats and fencing, applied to images: the records mean what they say."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from controller.broker_lifecycle import (
    BrokerHeartbeatTracker,
    rack_alternating_order,
    plan_broker_heartbeat,
    plan_fence_brokers,
    plan_register_broker,
    usable_broker_ids,
)
from controller.metadata.image import MetadataImage, apply_records
from controller.metadata.records import PARTITION_RECORD, TOPIC_RECORD, record_api_key
from protocol.errors import ErrorCode

CLUSTER = "c1"
TOPIC_ID = uuid.UUID(int=9)


def apply(image, records):
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset + len(records))


def registration(broker_id, incarnation=None, cluster_id=CLUSTER, rack=None):
    listener = SimpleNamespace(name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id, security_protocol=0)
    return SimpleNamespace(
        broker_id=broker_id, cluster_id=cluster_id, incarnation_id=incarnation or uuid.UUID(int=broker_id),
        listeners=[listener], features=[], rack=rack, log_dirs=[],
    )


def heartbeat(broker_id, epoch, offset, want_fence=False, want_shut_down=False):
    return SimpleNamespace(
        broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=offset, want_fence=want_fence, want_shut_down=want_shut_down
    )


def registered(*broker_ids, unfenced=True):
    image = MetadataImage()
    for broker_id in broker_ids:
        result, records = plan_register_broker(
            image, registration(broker_id), cluster_id=CLUSTER, broker_epoch=10 * broker_id, session_alive=False
        )
        image = apply(image, records)
        if unfenced:
            _, records = plan_broker_heartbeat(image, heartbeat(broker_id, 10 * broker_id, 10 * broker_id))
            image = apply(image, records)
    return image


def with_partition(image, replicas, isr, leader):
    return apply(
        image,
        [
            TOPIC_RECORD(name="t", topic_id=TOPIC_ID),
            PARTITION_RECORD(partition_id=0, topic_id=TOPIC_ID, replicas=replicas, isr=isr, leader=leader, leader_epoch=0, partition_epoch=0),
        ],
    )


def partition(image):
    return image.topics["t"].partitions[0]


def test_a_new_broker_is_registered_fenced_with_its_epoch_and_endpoints():
    result, records = plan_register_broker(MetadataImage(), registration(1, rack="r1"), cluster_id=CLUSTER, broker_epoch=42, session_alive=False)
    assert (result.error, result.broker_epoch) == (ErrorCode.NONE, 42)
    broker = apply(MetadataImage(), records).brokers[1]
    assert (broker.epoch, broker.fenced, broker.rack) == (42, True, "r1")
    assert broker.endpoint("PLAINTEXT").port == 9001


def test_registration_errors():
    image = registered(1)
    other = registration(1, incarnation=uuid.UUID(int=99))
    assert plan_register_broker(image, other, cluster_id=CLUSTER, broker_epoch=50, session_alive=True)[0].error == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    # Once the old incarnation's session is gone, the new process may take the id.
    assert plan_register_broker(image, other, cluster_id=CLUSTER, broker_epoch=50, session_alive=False)[0].error == ErrorCode.NONE
    # The same incarnation re-registering (a lost response) is fine.
    assert plan_register_broker(image, registration(1), cluster_id=CLUSTER, broker_epoch=50, session_alive=True)[0].error == ErrorCode.NONE
    wrong = registration(2, cluster_id="other")
    assert plan_register_broker(image, wrong, cluster_id=CLUSTER, broker_epoch=50, session_alive=False)[0].error == ErrorCode.INCONSISTENT_CLUSTER_ID


def test_unfenced_only_once_caught_up_with_its_registration():
    image = registered(1, unfenced=False)
    result, records = plan_broker_heartbeat(image, heartbeat(1, 10, 9))
    assert (result.error, result.is_fenced, result.is_caught_up, records) == (ErrorCode.NONE, True, False, [])
    result, records = plan_broker_heartbeat(image, heartbeat(1, 10, 10))
    assert (result.is_fenced, result.is_caught_up) == (False, True)
    assert usable_broker_ids(apply(image, records)) == (1,)


def test_heartbeat_errors():
    image = registered(1)
    assert plan_broker_heartbeat(image, heartbeat(2, 20, 100))[0].error == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert plan_broker_heartbeat(image, heartbeat(1, 11, 100))[0].error == ErrorCode.STALE_BROKER_EPOCH


def test_fencing_the_leader_elects_from_the_isr_and_shrinks_it():
    image = with_partition(registered(1, 2, 3), [1, 2, 3], [1, 2, 3], 1)
    after = apply(image, plan_fence_brokers(image, [1]))
    assert after.brokers[1].fenced
    p = partition(after)
    assert (p.leader, p.isr, p.leader_epoch) == (2, (2, 3), 1)


def test_fencing_a_follower_removes_it_from_the_isr_only():
    image = with_partition(registered(1, 2), [1, 2], [1, 2], 1)
    p = partition(apply(image, plan_fence_brokers(image, [2])))
    assert (p.leader, p.isr, p.leader_epoch) == (1, (1,), 0)


def test_the_isr_never_empties_and_the_partition_waits_for_its_last_member():
    image = with_partition(registered(1, 2), [1, 2], [1], 1)
    after = apply(image, plan_fence_brokers(image, [1]))
    p = partition(after)
    assert (p.leader, p.isr) == (-1, (1,))
    # Broker 1 comes back: it is unfenced and leads again.
    _, records = plan_broker_heartbeat(after, heartbeat(1, 10, 1000))
    p = partition(apply(after, records))
    assert (p.leader, p.isr) == (1, (1,))


def test_controlled_shutdown_moves_leadership_then_allows_the_stop():
    image = with_partition(registered(1, 2), [1, 2], [1, 2], 1)
    result, records = plan_broker_heartbeat(image, heartbeat(1, 10, 1000, want_shut_down=True))
    after = apply(image, records)
    assert result.should_shut_down
    assert partition(after).leader == 2
    assert after.brokers[1].in_controlled_shutdown
    assert usable_broker_ids(after) == (2,)


def test_rack_aware_placement_spreads_replicas_over_racks():
    image = MetadataImage()
    racks = {1: "r1", 2: "r1", 3: "r2", 4: "r2", 5: "r3", 6: None}
    for broker_id, rack in racks.items():
        _, records = plan_register_broker(
            image, registration(broker_id, rack=rack), cluster_id=CLUSTER, broker_epoch=broker_id, session_alive=False
        )
        image = apply(image, records)
    order = rack_alternating_order(image, tuple(racks))
    assert order == (6, 1, 3, 5, 2, 4)
    from controller.topic_commands import ClusterDefaults, CreateTopicSpec, plan_create_topic

    defaults = ClusterDefaults(broker_ids=tuple(racks), num_partitions=6, replication_factor=3, placement_order=order)
    result, records = plan_create_topic(image, CreateTopicSpec("spread"), defaults, uuid.UUID(int=5))
    assert result.error_code == ErrorCode.NONE
    for record in records[1:]:
        assert len({racks[b] for b in record.replicas}) == 3, record.replicas
    assert sorted(r.leader for r in records[1:]) == sorted(racks)  # every broker leads one


def test_sessions_expire_and_a_new_controller_grants_fresh_ones():
    image = registered(1, 2)
    tracker = BrokerHeartbeatTracker(1000)
    tracker.reset_all(image, 0)
    tracker.touch(2, 800)
    assert tracker.expired(image, 999) == []
    assert tracker.expired(image, 1000) == [1]
    assert tracker.expired(image, 1800) == [1, 2]
    tracker.reset_all(image, 1800)
    assert tracker.expired(image, 2000) == []
    # A session granted at activation is not evidence of life (for duplicate checks).
    assert tracker.session_alive(1, 1900) and not tracker.heard_alive(1, 1900)
    tracker.touch(1, 1900)
    assert tracker.heard_alive(1, 1900)
    # Fenced brokers have nothing left to expire.
    assert tracker.expired(apply(image, plan_fence_brokers(image, [1])), 5000) == [2]
