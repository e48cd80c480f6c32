"""Broker registration, heartbeats and fencing, applied to images: the records mean what they say."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from controller.broker_lifecycle import (
    LEADER_RECOVERY_STATE_RECOVERING,
    BrokerHeartbeatTracker,
    plan_broker_heartbeat,
    plan_fence_brokers,
    plan_register_broker,
    plan_unregister_broker,
    rack_alternating_order,
    usable_broker_ids,
)
from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import (
    CONFIG_RECORD,
    FEATURE_LEVEL_RECORD,
    PARTITION_RECORD,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    TOPIC_RECORD,
    record_api_key,
)
from controller.topic_commands import (
    ClusterDefaults,
    CreatePartitionsSpec,
    CreateTopicSpec,
    plan_create_partitions,
    plan_create_topic,
)
from protocol.errors import ErrorCode

CLUSTER = "c1"
TOPIC_ID = uuid.UUID(int=9)


def apply(image, records):
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset + len(records))


def registration(broker_id, incarnation=None, cluster_id=CLUSTER, rack=None, features=()):
    listener = SimpleNamespace(name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id, security_protocol=0)
    return SimpleNamespace(
        broker_id=broker_id, cluster_id=cluster_id, incarnation_id=incarnation or uuid.UUID(int=broker_id),
        listeners=[listener], features=list(features), rack=rack, log_dirs=[],
    )


def feature(name, low, high):
    return SimpleNamespace(name=name, min_supported_version=low, max_supported_version=high)


def heartbeat(broker_id, epoch, offset, want_fence=False, want_shut_down=False):
    return SimpleNamespace(
        broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=offset, want_fence=want_fence, want_shut_down=want_shut_down
    )


def registered(*broker_ids, unfenced=True, racks=None):
    image = MetadataImage()
    for broker_id in broker_ids:
        rack = (racks or {}).get(broker_id)
        _, records = plan_register_broker(
            image, registration(broker_id, rack=rack), cluster_id=CLUSTER, broker_epoch=10 * broker_id, session_alive=False
        )
        image = apply(image, records)
        if unfenced:
            _, records = plan_broker_heartbeat(image, heartbeat(broker_id, 10 * broker_id, 10 * broker_id))
            image = apply(image, records)
    return image


def with_partition(image, replicas, isr, leader, configs=None):
    records = [TOPIC_RECORD(name="t", topic_id=TOPIC_ID)]
    for name, value in (configs or {}).items():
        records.append(CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name="t", name=name, value=value))
    records.append(
        PARTITION_RECORD(partition_id=0, topic_id=TOPIC_ID, replicas=replicas, isr=isr, leader=leader, leader_epoch=0, partition_epoch=0)
    )
    return apply(image, records)


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


# --------------------------------------------------------------------------- registration


def test_re_registration_gets_the_new_epoch_and_starts_fenced_again():
    image = registered(1)
    assert not image.brokers[1].fenced
    result, records = plan_register_broker(image, registration(1), cluster_id=CLUSTER, broker_epoch=77, session_alive=True)
    assert (result.error, result.broker_epoch) == (ErrorCode.NONE, 77)
    broker = apply(image, records).brokers[1]
    assert (broker.epoch, broker.fenced) == (77, True)
    # Heartbeats of the old incarnation's epoch are stale now.
    assert plan_broker_heartbeat(apply(image, records), heartbeat(1, 10, 100))[0].error == ErrorCode.STALE_BROKER_EPOCH


def test_a_new_incarnation_of_an_unfenced_broker_leaves_its_isrs_and_leaderships_at_once():
    # Its old session is over but it was never fenced: it did not shut down cleanly,
    # and its log may have lost what it had not flushed, so it must not stay leader.
    image = with_partition(registered(1, 2), [1, 2], [1, 2], 1)
    result, records = plan_register_broker(
        image, registration(1, incarnation=uuid.uuid4()), cluster_id=CLUSTER, broker_epoch=77, session_alive=False
    )
    after = apply(image, records)
    assert result.error == ErrorCode.NONE and after.brokers[1].fenced
    assert (partition(after).leader, partition(after).isr) == (2, (2,))
    # The same process registering again (a retried request) changes nothing.
    _, again = plan_register_broker(image, registration(1), cluster_id=CLUSTER, broker_epoch=78, session_alive=False)
    assert (partition(apply(image, again)).leader, partition(apply(image, again)).isr) == (1, (1, 2))


def test_registration_refused_when_the_broker_cannot_run_the_finalized_metadata_version():
    image = apply(MetadataImage(), [FEATURE_LEVEL_RECORD(name="metadata.version", feature_level=7)])
    too_old = registration(1, features=[feature("metadata.version", 1, 6)])
    result, records = plan_register_broker(image, too_old, cluster_id=CLUSTER, broker_epoch=5, session_alive=False)
    assert (result.error, records) == (ErrorCode.UNSUPPORTED_VERSION, [])
    assert "finalized version 7 of metadata.version" in result.message
    fits = registration(1, features=[feature("metadata.version", 1, 7)])
    assert plan_register_broker(image, fits, cluster_id=CLUSTER, broker_epoch=5, session_alive=False)[0].error == ErrorCode.NONE
    # A broker that does not list a finalized feature runs it at level 0 only (Kafka 4's rule): refused.
    unlisted = plan_register_broker(image, registration(1), cluster_id=CLUSTER, broker_epoch=5, session_alive=False)[0]
    assert unlisted.error == ErrorCode.UNSUPPORTED_VERSION
    assert "wants a version between 0 and 0" in unlisted.message


# --------------------------------------------------------------------------- heartbeats


def test_a_heartbeat_renews_the_session_only_when_it_is_valid():
    image = registered(1)
    tracker = BrokerHeartbeatTracker(1000)
    plan_broker_heartbeat(image, heartbeat(1, 11, 100), 500, tracker=tracker)  # stale epoch
    assert not tracker.session_alive(1, 500)
    plan_broker_heartbeat(image, heartbeat(1, 10, 100), 500, tracker=tracker)
    assert tracker.heard_alive(1, 1499) and not tracker.session_alive(1, 1500)


def test_caught_up_is_measured_against_the_registration_offset_given():
    image = registered(1, unfenced=False)
    result, records = plan_broker_heartbeat(image, heartbeat(1, 10, 14), registration_offset=15)
    assert (result.is_caught_up, result.is_fenced, records) == (False, True, [])
    result, records = plan_broker_heartbeat(image, heartbeat(1, 10, 15), registration_offset=15)
    assert (result.is_caught_up, result.is_fenced) == (True, False)
    assert not apply(image, records).brokers[1].fenced


def test_a_broker_that_wants_to_be_fenced_is_fenced_and_loses_its_leaderships():
    image = with_partition(registered(1, 2), [1, 2], [1, 2], 1)
    result, records = plan_broker_heartbeat(image, heartbeat(1, 10, 1000, want_fence=True))
    after = apply(image, records)
    assert result.is_fenced and after.brokers[1].fenced
    assert (partition(after).leader, partition(after).isr) == (2, (2,))
    # A fenced broker asking to stay fenced changes nothing.
    result, records = plan_broker_heartbeat(after, heartbeat(1, 10, 1000, want_fence=True))
    assert (result.is_fenced, records) == (True, [])


def test_controlled_shutdown_takes_the_broker_out_of_the_isr_and_keeps_what_nobody_can_take():
    image = registered(1, 2, 3)
    records = [TOPIC_RECORD(name="t", topic_id=TOPIC_ID)]
    layout = {0: ([1, 2], [1, 2], 1), 1: ([2, 1], [2, 1], 2), 2: ([1, 3], [1], 1)}
    for p, (replicas, isr, leader) in layout.items():
        records.append(
            PARTITION_RECORD(partition_id=p, topic_id=TOPIC_ID, replicas=replicas, isr=isr, leader=leader, leader_epoch=0, partition_epoch=0)
        )
    image = apply(image, records)
    result, records = plan_broker_heartbeat(image, heartbeat(1, 10, 1000, want_shut_down=True))
    after = apply(image, records)
    parts = after.topics["t"].partitions
    assert result.should_shut_down and not result.is_fenced
    assert (parts[0].leader, parts[0].isr, parts[0].leader_epoch) == (2, (2,), 1)
    assert (parts[1].leader, parts[1].isr, parts[1].leader_epoch) == (2, (2,), 0)
    # Nobody else in sync: broker 1 keeps leading until it is fenced.
    assert (parts[2].leader, parts[2].isr) == (1, (1,))
    assert after.brokers[1].in_controlled_shutdown
    # Asking again writes nothing more.
    assert plan_broker_heartbeat(after, heartbeat(1, 10, 1000, want_shut_down=True))[1] == []
    # The session then runs out: fencing leaves the last partition leaderless, its ISR kept.
    fenced = apply(after, plan_fence_brokers(after, [1]))
    assert (fenced.topics["t"].partitions[2].leader, fenced.topics["t"].partitions[2].isr) == (-1, (1,))


def test_a_fenced_broker_may_shut_down_at_once():
    image = registered(1, unfenced=False)
    result, records = plan_broker_heartbeat(image, heartbeat(1, 10, 0, want_shut_down=True))
    assert (result.should_shut_down, result.is_fenced, records) == (True, True, [])


# --------------------------------------------------------------------------- fencing


def test_fencing_picks_the_first_usable_isr_member_and_skips_fenced_ones():
    image = with_partition(registered(1, 2, 3), [1, 2, 3], [1, 2, 3], 1)
    image = apply(image, plan_fence_brokers(image, [2]))
    p = partition(apply(image, plan_fence_brokers(image, [1])))
    assert (p.leader, p.isr, p.leader_epoch) == (3, (3,), 1)


def test_fencing_several_brokers_at_once_keeps_one_isr_member():
    image = with_partition(registered(1, 2, 3), [1, 2, 3], [1, 2], 1)
    after = apply(image, plan_fence_brokers(image, [1, 2]))
    p = partition(after)
    assert (p.leader, len(p.isr)) == (-1, 1)
    assert p.partition_epoch == 1 and p.leader_epoch == 1
    assert after.brokers[1].fenced and after.brokers[2].fenced and not after.brokers[3].fenced


def test_fencing_twice_writes_nothing_the_second_time():
    image = with_partition(registered(1, 2), [1, 2], [1, 2], 1)
    after = apply(image, plan_fence_brokers(image, [1]))
    assert plan_fence_brokers(after, [1]) == []
    assert plan_fence_brokers(after, [42]) == []


@pytest.mark.parametrize("unclean, expected", [("true", (3, (3,), LEADER_RECOVERY_STATE_RECOVERING)), ("false", (-1, (1,), 0))])
def test_unclean_election_only_when_the_topic_allows_it(unclean, expected):
    image = with_partition(registered(1, 2, 3), [1, 2, 3], [1], 1, configs={"unclean.leader.election.enable": unclean})
    image = apply(image, plan_fence_brokers(image, [2]))
    p = partition(apply(image, plan_fence_brokers(image, [1])))
    assert (p.leader, p.isr, p.leader_recovery_state) == expected


def test_an_unfenced_replica_outside_the_isr_leads_only_with_unclean_election():
    for unclean, leader in (("true", 2), ("false", -1)):
        image = with_partition(registered(1, 2), [1, 2], [1], 1, configs={"unclean.leader.election.enable": unclean})
        image = apply(image, plan_fence_brokers(image, [1, 2]))
        _, records = plan_broker_heartbeat(image, heartbeat(2, 20, 1000))
        assert partition(apply(image, records)).leader == leader


def test_unregistering_removes_the_broker_with_the_effects_of_fencing():
    image = with_partition(registered(1, 2), [1, 2], [1, 2], 1)
    error, records = plan_unregister_broker(image, 1)
    after = apply(image, records)
    assert error == ErrorCode.NONE and 1 not in after.brokers
    assert (partition(after).leader, partition(after).isr) == (2, (2,))
    assert plan_unregister_broker(after, 1) == (ErrorCode.BROKER_ID_NOT_REGISTERED, [])


# --------------------------------------------------------------------------- sessions


def test_next_expiry_is_the_earliest_unfenced_session_end():
    image = registered(1, 2)
    tracker = BrokerHeartbeatTracker(1000)
    assert tracker.next_expiry_ms(image) == 0  # no sessions yet: due at once
    tracker.reset_all(image, 100)
    tracker.touch(2, 400)
    assert tracker.next_expiry_ms(image) == 1100
    assert tracker.expired(image, 1099) == [] and tracker.expired(image, 1100) == [1]
    fenced = apply(image, plan_fence_brokers(image, [1]))
    assert tracker.next_expiry_ms(fenced) == 1400
    tracker.remove(2)
    assert not tracker.session_alive(2, 500)
    assert tracker.next_expiry_ms(apply(fenced, plan_fence_brokers(fenced, [2]))) is None


# --------------------------------------------------------------------------- placement of new topics

DEFAULTS = ClusterDefaults(broker_ids=(0,), num_partitions=1, replication_factor=1)


def test_new_topics_go_to_the_usable_brokers_rack_aware():
    racks = {1: "r1", 2: "r1", 3: "r2", 4: "r2", 5: "r3", 6: None}
    image = registered(*racks, racks=racks)
    assert rack_alternating_order(image, tuple(racks)) == (6, 1, 3, 5, 2, 4)
    spec = CreateTopicSpec("spread", num_partitions=6, replication_factor=3)
    result, records = plan_create_topic(image, spec, DEFAULTS, uuid.UUID(int=5))
    assert result.error_code == ErrorCode.NONE
    partitions = records[1:]  # after the TopicRecord; no configs
    for record in partitions:
        assert len({racks[b] for b in record.replicas}) == 3, record.replicas
        assert (record.isr, record.leader) == (record.replicas, record.replicas[0])
    assert sorted(r.leader for r in partitions) == sorted(racks)  # every broker leads one
    # The same plan again places the same way (replays and retries agree).
    assert plan_create_topic(image, spec, DEFAULTS, uuid.UUID(int=5))[1] == records


def test_fenced_and_shutting_down_brokers_get_no_new_replicas():
    image = registered(1, 2, 3)
    image = apply(image, plan_fence_brokers(image, [2]))
    image = apply(image, plan_broker_heartbeat(image, heartbeat(3, 30, 1000, want_shut_down=True))[1])
    result, records = plan_create_topic(image, CreateTopicSpec("t", 3, 1), DEFAULTS, uuid.UUID(int=5))
    assert result.error_code == ErrorCode.NONE
    assert {b for r in records[1:] for b in r.replicas} == {1}
    result, _ = plan_create_topic(image, CreateTopicSpec("t", 3, 2), DEFAULTS, uuid.UUID(int=5))
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert result.error_message == (
        "Unable to replicate the partition 2 time(s): The target replication factor of 2 cannot be reached "
        "because only 1 broker(s) are registered."
    )


def test_manual_assignments_must_name_registered_brokers_and_lead_with_an_unfenced_one():
    image = registered(1, 2, 3)
    image = apply(image, plan_fence_brokers(image, [1]))
    result, _ = plan_create_topic(image, CreateTopicSpec("t", assignments={0: [0, 1]}), DEFAULTS, uuid.UUID(int=5))
    assert result.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    result, records = plan_create_topic(image, CreateTopicSpec("t", assignments={0: [1, 2, 3]}), DEFAULTS, uuid.UUID(int=5))
    assert result.error_code == ErrorCode.NONE
    p = apply(image, records).topics["t"].partitions[0]
    assert (p.replicas, p.isr, p.leader) == ((1, 2, 3), (2, 3), 2)
    result, _ = plan_create_topic(image, CreateTopicSpec("u", assignments={0: [1]}), DEFAULTS, uuid.UUID(int=6))
    assert result.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "fenced or in controlled shutdown" in result.error_message


def test_added_partitions_continue_the_leader_rotation():
    image = registered(1, 2, 3)
    _, records = plan_create_topic(image, CreateTopicSpec("t", 2, 2), DEFAULTS, uuid.UUID(int=5))
    image = apply(image, records)
    result, records = plan_create_partitions(image, CreatePartitionsSpec("t", 6), DEFAULTS)
    assert result.error_code == ErrorCode.NONE
    image = apply(image, records)
    leaders = [p.leader for _, p in sorted(image.topics["t"].partitions.items())]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
    result, _ = plan_create_partitions(image, CreatePartitionsSpec("t", 7, [[9, 1]]), DEFAULTS)
    assert (result.error_code, result.error_message) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes broker 9, but no such broker is registered.",
    )


def test_the_controllers_static_unclean_setting_is_the_default_a_dynamic_one_overrides():
    """unclean.leader.election.enable in the controller's server.properties (found
    ignored by the fault suite's unsafe run): the cluster default for election
    plans while no dynamic cluster default is set, never shown as a dynamic one."""
    from broker.controller_node.quorum_controller import QuorumController
    from controller.broker_lifecycle import unclean_election_enabled
    from controller.raft.log import MemoryRaftLog

    image = with_partition(registered(1, 2, 3), [1, 2, 3], [1], 1)
    defaults = ClusterDefaults(broker_ids=(1, 2, 3), num_partitions=1, replication_factor=3)
    permissive = QuorumController(MemoryRaftLog(), defaults, unclean_leader_election=True)
    strict = QuorumController(MemoryRaftLog(), defaults)
    topic = image.topics["t"]
    assert unclean_election_enabled(permissive._election_view(image), topic)
    assert not unclean_election_enabled(strict._election_view(image), topic)
    assert strict._election_view(image) is image
    assert image.broker_configs.get("unclean.leader.election.enable") is None  # the image itself is untouched
    # Fencing the last in-sync replica elects an out-of-sync one under the static setting.
    view = permissive._election_view(image)
    view = apply(view, plan_fence_brokers(view, [2]))
    assert partition(apply(view, plan_fence_brokers(view, [1]))).leader == 3
    # A dynamic cluster default wins over the static one.
    dynamic = apply(image, [CONFIG_RECORD(resource_type=RESOURCE_BROKER, resource_name="", name="unclean.leader.election.enable", value="false")])
    assert not unclean_election_enabled(permissive._election_view(dynamic), topic)
