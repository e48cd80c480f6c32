"""The metadata image, MetadataDelta and snapshots.

Replay rules are Kafka's (PartitionRegistration.merge, ClusterDelta,
FeaturesDelta); the snapshot property is replay(snapshot(image)) == image for
images built from random sequences of valid records.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.metadata.delta import MetadataDelta, MetadataLogError, apply_records, merge_partition_change
from controller.metadata.image import Endpoint, MetadataImage, PartitionImage, SupportedFeature
from controller.metadata.records import (
    ABORT_TRANSACTION_RECORD,
    BALANCER_THROTTLE_RECORD,
    BEGIN_TRANSACTION_RECORD,
    BROKER_ENDPOINT,
    BROKER_FEATURE,
    BROKER_PLACEMENT_RECORD,
    BROKER_REGISTRATION_CHANGE_RECORD,
    CLUSTER_LINK_CONFIG,
    CLUSTER_LINK_RECORD,
    CONFIG_RECORD,
    CONTROLLER_ENDPOINT,
    CONTROLLER_FEATURE,
    END_TRANSACTION_RECORD,
    FEATURE_LEVEL_RECORD,
    FENCE_BROKER_RECORD,
    MIRROR_PARTITION_MARK,
    MIRROR_TOPIC_RECORD,
    NO_OP_RECORD,
    PARTITION_CHANGE_RECORD,
    PARTITION_RECORD,
    PRODUCER_IDS_RECORD,
    REGISTER_BROKER_RECORD,
    REGISTER_CONTROLLER_RECORD,
    REMOVE_CLUSTER_LINK_RECORD,
    REMOVE_TOPIC_RECORD,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    TOPIC_RECORD,
    UNFENCE_BROKER_RECORD,
    UNREGISTER_BROKER_RECORD,
    decode_record,
    encode_record,
    record_api_key,
)
from controller.metadata.snapshot import decode_snapshot, encode_snapshot, image_from_snapshot_records, snapshot_records

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
RESOURCE_CLIENT_METRICS = 16


def replay(records, image: MetadataImage | None = None, offset: int = 0) -> MetadataImage:
    return apply_records(image or MetadataImage(), [(record_api_key(r), r) for r in records], offset)


def topic_with_partitions(topic_id=T1, name="t", count=2, replicas=(1, 2, 3)):
    records = [TOPIC_RECORD(name=name, topic_id=topic_id)]
    for p in range(count):
        records.append(
            PARTITION_RECORD(
                partition_id=p, topic_id=topic_id, replicas=list(replicas), isr=list(replicas),
                leader=replicas[0], leader_epoch=0, partition_epoch=0,
            )
        )
    return records


def register(broker_id=1, epoch=10, **extra):
    return REGISTER_BROKER_RECORD(broker_id=broker_id, incarnation_id=uuid.UUID(int=100 + broker_id), broker_epoch=epoch, **extra)


# --------------------------------------------------------------------------- partitions


def test_partition_record_fills_every_field():
    record = PARTITION_RECORD(
        partition_id=0, topic_id=T1, replicas=[1, 2], isr=[1], removing_replicas=[2], adding_replicas=[3], leader=1,
        leader_recovery_state=1, leader_epoch=4, partition_epoch=9, directories=[T1, T2],
        eligible_leader_replicas=[2], last_known_elr=None,
    )
    image = replay([TOPIC_RECORD(name="t", topic_id=T1), record])
    assert image.partition(T1, 0) == PartitionImage(0, (1, 2), (1,), 1, 4, 9, (2,), (3,), 1, (T1, T2), (2,), ())
    assert image.partition(T1, 1) is None and image.partition(T2, 0) is None


def test_partition_change_absent_fields_change_nothing_but_the_partition_epoch():
    image = replay(topic_with_partitions())
    before = image.topics["t"].partitions[0]
    after = replay([PARTITION_CHANGE_RECORD(partition_id=0, topic_id=T1)], image).topics["t"].partitions[0]
    assert after == PartitionImage(0, before.replicas, before.isr, before.leader, before.leader_epoch, before.partition_epoch + 1)


def test_partition_change_isr_only_keeps_the_leader_epoch():
    image = replay(topic_with_partitions() + [PARTITION_CHANGE_RECORD(partition_id=0, topic_id=T1, isr=[1, 2])])
    p = image.topics["t"].partitions[0]
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((1, 2), 1, 0, 1)
    assert image.topics["t"].partitions[1].partition_epoch == 0  # the other partition is untouched


@pytest.mark.parametrize(
    "leader, expected_leader, expected_epoch",
    [
        (-2, 1, 0),  # NO_LEADER_CHANGE
        (2, 2, 1),  # a new leader
        (1, 1, 1),  # the same leader named again: Kafka bumps the epoch all the same
        (-1, -1, 1),  # NO_LEADER: offline, and a new epoch
    ],
)
def test_partition_change_leader_rules(leader, expected_leader, expected_epoch):
    image = replay(topic_with_partitions() + [PARTITION_CHANGE_RECORD(partition_id=0, topic_id=T1, leader=leader)])
    p = image.topics["t"].partitions[0]
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (expected_leader, expected_epoch, 1)
    assert p.has_leader == (expected_leader >= 0)


def test_partition_change_reassignment_recovery_state_elr_and_directories():
    old = PartitionImage(0, (1, 2), (1, 2), 1, 3, 5, directories=(T1, T2))
    change = PARTITION_CHANGE_RECORD(
        partition_id=0, topic_id=T1, replicas=[1, 2, 3], adding_replicas=[3], leader_recovery_state=1,
        eligible_leader_replicas=[2], last_known_elr=[],
    )
    new = merge_partition_change(old, change)
    assert new.replicas == (1, 2, 3) and new.adding_replicas == (3,) and new.removing_replicas == ()
    assert new.leader_recovery_state == 1 and new.eligible_leader_replicas == (2,) and new.last_known_elr == ()
    # Three replicas, two known directories: unknown rather than misaligned.
    assert new.directories == ()
    assert (new.leader_epoch, new.partition_epoch) == (3, 6)
    # Recovery state -1 keeps the current one; directories given are taken.
    newer = merge_partition_change(new, PARTITION_CHANGE_RECORD(partition_id=0, topic_id=T1, directories=[T1, T2, T1]))
    assert newer.leader_recovery_state == 1 and newer.directories == (T1, T2, T1)
    # Replicas of the same length keep their directories.
    same = merge_partition_change(old, PARTITION_CHANGE_RECORD(partition_id=0, topic_id=T1, replicas=[2, 1]))
    assert same.directories == (T1, T2)


def test_records_about_unknown_topics_and_partitions_are_ignored():
    image = replay(topic_with_partitions(count=1))
    after = replay(
        [
            PARTITION_CHANGE_RECORD(partition_id=5, topic_id=T1, leader=2),
            PARTITION_CHANGE_RECORD(partition_id=0, topic_id=T2, leader=2),
            PARTITION_RECORD(partition_id=0, topic_id=T2, replicas=[1], isr=[1], leader=1),
            CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name="nope", name="a", value="b"),
            REMOVE_TOPIC_RECORD(topic_id=T2),
        ],
        image,
        offset=3,
    )
    assert after.topics == image.topics and after.offset == 3


def test_remove_and_recreate_a_topic_in_one_batch():
    image = replay(topic_with_partitions(count=3) + [CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name="t", name="a", value="1")])
    after = replay([REMOVE_TOPIC_RECORD(topic_id=T1)] + topic_with_partitions(topic_id=T2, count=1), image)
    assert after.topics["t"].topic_id == T2
    assert list(after.topics["t"].partitions) == [0] and dict(after.topics["t"].configs) == {}
    assert dict(after.topic_names_by_id) == {T2: "t"}
    assert image.topics["t"].topic_id == T1 and len(image.topics["t"].partitions) == 3  # the old image is untouched


# --------------------------------------------------------------------------- brokers and controllers


def test_broker_registration_fencing_and_unregistration():
    endpoint = BROKER_ENDPOINT(name="PLAINTEXT", host="h", port=9092, security_protocol=0)
    feature = BROKER_FEATURE(name="metadata.version", min_supported_version=1, max_supported_version=20)
    image = replay([register(1, 10, end_points=[endpoint], features=[feature], rack="r1", log_dirs=[T1])])
    broker = image.brokers[1]
    assert (broker.broker_id, broker.epoch, broker.rack, broker.fenced, broker.in_controlled_shutdown) == (1, 10, "r1", True, False)
    assert broker.incarnation_id == uuid.UUID(int=101) and broker.log_dirs == (T1,)
    assert broker.endpoints == (Endpoint("PLAINTEXT", "h", 9092, 0),) and broker.endpoint("PLAINTEXT").port == 9092
    assert dict(broker.features) == {"metadata.version": SupportedFeature(1, 20)}
    assert image.unfenced_broker_ids() == []

    image = replay([UNFENCE_BROKER_RECORD(id=1, epoch=10)], image)
    assert not image.brokers[1].fenced and image.unfenced_broker_ids() == [1]
    image = replay([FENCE_BROKER_RECORD(id=1, epoch=10)], image)
    assert image.brokers[1].fenced
    # A record about an older registration of the broker is stale.
    assert replay([UNFENCE_BROKER_RECORD(id=1, epoch=9)], image).brokers[1].fenced
    assert 1 in replay([UNREGISTER_BROKER_RECORD(broker_id=1, broker_epoch=9)], image).brokers
    assert replay([FENCE_BROKER_RECORD(id=7, epoch=10)], image).brokers.keys() == {1}
    # A new registration replaces the old one, epoch and all.
    image = replay([register(1, 50, fenced=False)], image)
    assert image.brokers[1].epoch == 50 and not image.brokers[1].fenced and image.brokers[1].endpoints == ()
    image = replay([UNREGISTER_BROKER_RECORD(broker_id=1, broker_epoch=50)], image)
    assert dict(image.brokers) == {}


def test_broker_registration_change_record():
    image = replay([register(2, 5)])
    change = BROKER_REGISTRATION_CHANGE_RECORD
    image = replay([change(broker_id=2, broker_epoch=5, fenced=-1)], image)
    assert not image.brokers[2].fenced and not image.brokers[2].in_controlled_shutdown
    image = replay([change(broker_id=2, broker_epoch=5, in_controlled_shutdown=1, log_dirs=[T2])], image)
    assert image.brokers[2].in_controlled_shutdown and image.brokers[2].log_dirs == (T2,) and not image.brokers[2].fenced
    unchanged = replay([change(broker_id=2, broker_epoch=5)], image)
    assert unchanged.brokers[2] is image.brokers[2]
    image = replay([change(broker_id=2, broker_epoch=5, fenced=1)], image)
    assert image.brokers[2].fenced and image.brokers[2].in_controlled_shutdown
    assert replay([change(broker_id=2, broker_epoch=4, fenced=-1)], image).brokers[2].fenced  # stale epoch


def test_controller_registration():
    record = REGISTER_CONTROLLER_RECORD(
        controller_id=3000, incarnation_id=T1, zk_migration_ready=False,
        end_points=[CONTROLLER_ENDPOINT(name="CONTROLLER", host="c", port=9093, security_protocol=0)],
        features=[CONTROLLER_FEATURE(name="kraft.version", min_supported_version=0, max_supported_version=1)],
    )
    image = replay([record])
    controller = image.controllers[3000]
    assert controller.incarnation_id == T1 and controller.endpoints == (Endpoint("CONTROLLER", "c", 9093, 0),)
    assert dict(controller.features) == {"kraft.version": SupportedFeature(0, 1)}


# --------------------------------------------------------------------------- configs, features, producer ids


def test_configs_per_resource():
    image = replay(
        topic_with_partitions()
        + [
            CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name="t", name="retention.ms", value="5"),
            CONFIG_RECORD(resource_type=RESOURCE_BROKER, resource_name="", name="log.retention.ms", value="7"),
            CONFIG_RECORD(resource_type=RESOURCE_BROKER, resource_name="1", name="log.retention.ms", value="8"),
            CONFIG_RECORD(resource_type=RESOURCE_CLIENT_METRICS, resource_name="m", name="interval.ms", value="9"),
        ]
    )
    assert dict(image.configs_of(RESOURCE_TOPIC, "t")) == {"retention.ms": "5"}
    assert dict(image.broker_configs) == {"log.retention.ms": "7"}  # the cluster-wide default only
    assert dict(image.configs_of(RESOURCE_BROKER, "1")) == {"log.retention.ms": "8"}
    assert dict(image.configs_of(RESOURCE_CLIENT_METRICS, "m")) == {"interval.ms": "9"}
    assert dict(image.configs_of(RESOURCE_TOPIC, "nope")) == {}
    image = replay([CONFIG_RECORD(resource_type=RESOURCE_BROKER, resource_name="1", name="log.retention.ms", value=None)], image)
    assert (RESOURCE_BROKER, "1") not in image.resource_configs  # a resource without configs is gone
    assert dict(image.broker_configs) == {"log.retention.ms": "7"}


def test_features_level_zero_removes_and_producer_ids_never_go_back():
    image = replay([FEATURE_LEVEL_RECORD(name="metadata.version", feature_level=20), FEATURE_LEVEL_RECORD(name="x", feature_level=1)])
    image = replay([FEATURE_LEVEL_RECORD(name="x", feature_level=0), PRODUCER_IDS_RECORD(broker_id=1, next_producer_id=1000)], image)
    assert dict(image.features) == {"metadata.version": 20}
    image = replay([PRODUCER_IDS_RECORD(broker_id=1, next_producer_id=10)], image)
    assert image.next_producer_id == 1000


# --------------------------------------------------------------------------- delta mechanics


def test_delta_copies_only_what_changes():
    base = replay(topic_with_partitions(T1, "a") + topic_with_partitions(T2, "b") + [register(1, 1), register(2, 2)])
    delta = MetadataDelta(base)
    delta.replay_values([PARTITION_CHANGE_RECORD(partition_id=1, topic_id=T1, isr=[1])])
    image = delta.apply(5)
    assert image.offset == 5
    assert image.topics["b"] is base.topics["b"]
    assert image.topics["a"].partitions[0] is base.topics["a"].partitions[0]
    assert image.topics["a"].partitions[1].isr == (1,) and base.topics["a"].partitions[1].isr == (1, 2, 3)
    assert image.brokers is base.brokers and image.topic_names_by_id is base.topic_names_by_id
    assert image.features is base.features and image.resource_configs is base.resource_configs
    delta.replay_values([FENCE_BROKER_RECORD(id=2, epoch=2), UNFENCE_BROKER_RECORD(id=1, epoch=1)])
    later = delta.apply(6)
    assert later.topics is image.topics  # the delta went on from the image it made
    assert not later.brokers[1].fenced and later.brokers[2].fenced and image.brokers[1].fenced
    with pytest.raises(TypeError):
        later.topics["x"] = None  # type: ignore[index]


def test_one_delta_equals_many_small_applies():
    records = (
        topic_with_partitions(T1, "a", count=4)
        + [register(1, 1), UNFENCE_BROKER_RECORD(id=1, epoch=1)]
        + [PARTITION_CHANGE_RECORD(partition_id=p % 4, topic_id=T1, leader=1 + p % 3, isr=[1 + p % 3]) for p in range(20)]
        + [CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name="a", name="k", value=str(i)) for i in range(3)]
        + [REMOVE_TOPIC_RECORD(topic_id=T1)]
        + topic_with_partitions(T2, "a", count=1)
    )
    stepwise = MetadataImage()
    for i, record in enumerate(records):
        stepwise = replay([record], stepwise, offset=i)
    delta = MetadataDelta(MetadataImage())
    delta.replay_values(records)
    assert delta.apply(len(records) - 1) == stepwise


def test_metadata_transactions():
    image = replay(topic_with_partitions(count=1))
    delta = MetadataDelta(image)
    delta.replay_values([BEGIN_TRANSACTION_RECORD(name="big"), PARTITION_CHANGE_RECORD(partition_id=0, topic_id=T1, leader=2)])
    assert delta.in_transaction
    mid = delta.apply(1)
    assert mid.topics["t"].partitions[0].leader == 1  # nothing of an open transaction is visible
    delta.replay_values([NO_OP_RECORD(), END_TRANSACTION_RECORD()])
    done = delta.apply(2)
    assert done.topics["t"].partitions[0].leader == 2 and not delta.in_transaction
    delta.replay_values([BEGIN_TRANSACTION_RECORD(), REMOVE_TOPIC_RECORD(topic_id=T1), ABORT_TRANSACTION_RECORD(reason="no")])
    assert "t" in delta.apply(3).topics
    with pytest.raises(MetadataLogError):
        delta.replay_values([END_TRANSACTION_RECORD()])
    with pytest.raises(MetadataLogError):
        replay([BEGIN_TRANSACTION_RECORD(), NO_OP_RECORD()], image)


# --------------------------------------------------------------------------- snapshots: random valid logs

BROKER_IDS = st.integers(0, 4)
SMALL_LISTS = st.lists(st.integers(0, 4), max_size=4, unique=True)
TOPIC_NAMES = st.sampled_from(["a", "b", "c", "d"])
CONFIG_NAMES = st.sampled_from(["retention.ms", "cleanup.policy", "x"])
CONFIG_VALUES = st.one_of(st.none(), st.sampled_from(["1", "2", "compact"]))
NULLABLE_LISTS = st.one_of(st.none(), SMALL_LISTS)


def draw_record(data, model) -> list:
    """One step of a valid metadata log: records that a controller could write next,
    given ``model`` (topic name -> (id, partition count); broker id -> epoch)."""
    topics, brokers, counter = model["topics"], model["brokers"], model["counter"]
    counter[0] += 1
    kind = data.draw(
        st.sampled_from(
            ["register", "fence", "unfence", "change", "unregister", "controller", "topic", "partition_change",
             "partition_change", "partition_change", "remove_topic", "config", "feature", "producer_ids", "noop", "stale", "link", "remove_link", "mirror", "placement", "balancer_throttle"]
        )
    )
    if kind == "register":
        broker_id = data.draw(BROKER_IDS)
        brokers[broker_id] = counter[0]
        endpoints = [
            BROKER_ENDPOINT(name=n, host=data.draw(st.sampled_from(["h1", "h2"])), port=data.draw(st.integers(0, 65535)), security_protocol=0)
            for n in data.draw(st.lists(st.sampled_from(["PLAINTEXT", "SSL"]), max_size=2, unique=True))
        ]
        features = [BROKER_FEATURE(name="metadata.version", min_supported_version=1, max_supported_version=data.draw(st.integers(1, 30)))]
        return [
            register(
                broker_id, counter[0], end_points=endpoints, features=features,
                rack=data.draw(st.one_of(st.none(), st.just("r1"))), fenced=data.draw(st.booleans()),
                in_controlled_shutdown=data.draw(st.booleans()), log_dirs=data.draw(st.lists(st.sampled_from([T1, T2]), max_size=2)),
            )
        ]
    if kind in ("fence", "unfence", "change", "unregister") and brokers:
        broker_id = data.draw(st.sampled_from(sorted(brokers)))
        epoch = brokers[broker_id]
        if kind == "fence":
            return [FENCE_BROKER_RECORD(id=broker_id, epoch=epoch)]
        if kind == "unfence":
            return [UNFENCE_BROKER_RECORD(id=broker_id, epoch=epoch)]
        if kind == "unregister":
            del brokers[broker_id]
            return [UNREGISTER_BROKER_RECORD(broker_id=broker_id, broker_epoch=epoch)]
        return [
            BROKER_REGISTRATION_CHANGE_RECORD(
                broker_id=broker_id, broker_epoch=epoch, fenced=data.draw(st.sampled_from([-1, 0, 1])),
                in_controlled_shutdown=data.draw(st.sampled_from([0, 1])), log_dirs=data.draw(st.lists(st.sampled_from([T1, T2]), max_size=2)),
            )
        ]
    if kind == "controller":
        return [
            REGISTER_CONTROLLER_RECORD(
                controller_id=data.draw(st.integers(3000, 3002)), incarnation_id=uuid.UUID(int=counter[0]),
                zk_migration_ready=data.draw(st.booleans()),
                end_points=[CONTROLLER_ENDPOINT(name="CONTROLLER", host="c", port=9093, security_protocol=0)],
                features=[CONTROLLER_FEATURE(name="kraft.version", min_supported_version=0, max_supported_version=1)],
            )
        ]
    if kind == "topic":
        name = data.draw(TOPIC_NAMES)
        records = []
        if name in topics:
            records.append(REMOVE_TOPIC_RECORD(topic_id=topics[name][0]))
        topic_id = uuid.UUID(int=counter[0])
        count = data.draw(st.integers(0, 4))
        topics[name] = (topic_id, count)
        records.append(TOPIC_RECORD(name=name, topic_id=topic_id))
        for p in range(count):
            replicas = data.draw(SMALL_LISTS)
            records.append(
                PARTITION_RECORD(
                    partition_id=p, topic_id=topic_id, replicas=replicas, isr=data.draw(SMALL_LISTS),
                    leader=replicas[0] if replicas else -1, leader_epoch=data.draw(st.integers(0, 3)),
                    partition_epoch=data.draw(st.integers(0, 3)), leader_recovery_state=data.draw(st.sampled_from([0, 1])),
                    directories=data.draw(st.sampled_from([[], [T1] * len(replicas)])),
                    eligible_leader_replicas=data.draw(NULLABLE_LISTS), last_known_elr=data.draw(NULLABLE_LISTS),
                )
            )
        return records
    if kind == "partition_change" and any(count for _, count in topics.values()):
        topic_id, count = data.draw(st.sampled_from(sorted(v for v in topics.values() if v[1])))
        return [
            PARTITION_CHANGE_RECORD(
                partition_id=data.draw(st.integers(0, count - 1)), topic_id=topic_id, isr=data.draw(NULLABLE_LISTS),
                leader=data.draw(st.sampled_from([-2, -2, -1, 0, 1, 2])), replicas=data.draw(NULLABLE_LISTS),
                removing_replicas=data.draw(NULLABLE_LISTS), adding_replicas=data.draw(NULLABLE_LISTS),
                leader_recovery_state=data.draw(st.sampled_from([-1, 0, 1])),
                directories=data.draw(st.one_of(st.none(), st.lists(st.just(T2), max_size=3))),
                eligible_leader_replicas=data.draw(NULLABLE_LISTS), last_known_elr=data.draw(NULLABLE_LISTS),
            )
        ]
    if kind == "remove_topic" and topics:
        name = data.draw(st.sampled_from(sorted(topics)))
        return [REMOVE_TOPIC_RECORD(topic_id=topics.pop(name)[0])]
    if kind == "config":
        resource_type, resource_name = data.draw(
            st.one_of(st.tuples(st.just(RESOURCE_TOPIC), TOPIC_NAMES), st.tuples(st.just(RESOURCE_BROKER), st.sampled_from(["", "1"])),
                      st.just((RESOURCE_CLIENT_METRICS, "m")))
        )
        return [CONFIG_RECORD(resource_type=resource_type, resource_name=resource_name, name=data.draw(CONFIG_NAMES), value=data.draw(CONFIG_VALUES))]
    if kind == "feature":
        return [FEATURE_LEVEL_RECORD(name=data.draw(st.sampled_from(["metadata.version", "kraft.version", "group.version"])),
                                     feature_level=data.draw(st.integers(0, 3)))]
    if kind == "producer_ids":
        return [PRODUCER_IDS_RECORD(broker_id=1, broker_epoch=-1, next_producer_id=data.draw(st.integers(0, 5000)))]
    if kind == "link":
        name = data.draw(st.sampled_from(["east", "west"]))
        link_id = uuid.UUID(int=1000 + data.draw(st.integers(0, 2)))
        configs = [CLUSTER_LINK_CONFIG(name="bootstrap.servers", value=data.draw(st.sampled_from(["a:9092", "b:9092"])))]
        return [CLUSTER_LINK_RECORD(link_id=link_id, link_name=name, configs=configs)]
    if kind == "remove_link":
        return [REMOVE_CLUSTER_LINK_RECORD(link_id=uuid.UUID(int=1000 + data.draw(st.integers(0, 2))))]
    if kind == "mirror" and topics:
        topic_id, count = topics[data.draw(st.sampled_from(sorted(topics)))]
        marks = [
            MIRROR_PARTITION_MARK(partition_id=p, offset=data.draw(st.integers(0, 50)), last_epoch=data.draw(st.integers(0, 9)))
            for p in range(count) if data.draw(st.booleans())
        ]
        return [
            MIRROR_TOPIC_RECORD(
                topic_id=topic_id, link_id=uuid.UUID(int=1000), source_topic="src", state=data.draw(st.integers(0, 7)),
                reason=data.draw(st.one_of(st.none(), st.just("why"))), partition_marks=marks,
            )
        ]
    if kind == "balancer_throttle":
        return [BALANCER_THROTTLE_RECORD(
            resource_type=data.draw(st.sampled_from([RESOURCE_BROKER, RESOURCE_TOPIC])),
            resource_name=data.draw(st.sampled_from(["1", "a"])), name=data.draw(st.sampled_from(["x", "y"])),
            value=data.draw(st.sampled_from(["5", "0:1"])), owned=data.draw(st.booleans()),
        )]
    if kind == "placement":
        # Any broker id, registered or not; state 0 removes the entry.
        return [BROKER_PLACEMENT_RECORD(broker_id=data.draw(BROKER_IDS), state=data.draw(st.integers(0, 2)))]
    if kind == "stale" and brokers:
        broker_id = data.draw(st.sampled_from(sorted(brokers)))
        return [FENCE_BROKER_RECORD(id=broker_id, epoch=brokers[broker_id] - 1)]
    return [NO_OP_RECORD()]


SNAPSHOT_SETTINGS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SNAPSHOT_SETTINGS
@given(data=st.data())
def test_replaying_a_snapshot_gives_the_same_image(data):
    model = {"topics": {}, "brokers": {}, "counter": [0]}
    steps = data.draw(st.integers(0, 60))
    image = MetadataImage()
    delta = MetadataDelta(image)
    offset = -1
    for _ in range(steps):
        records = draw_record(data, model)
        offset += len(records)
        delta.replay_values(records)
        if data.draw(st.booleans()):
            image = delta.apply(offset)  # publish images at random points, as a broker would
    image = delta.apply(offset)

    records = snapshot_records(image)
    assert image_from_snapshot_records(records, image.offset) == image
    # Through the bytes, as a snapshot file stores them; and deterministic.
    frames = encode_snapshot(image)
    assert decode_snapshot(frames, image.offset) == image
    assert encode_snapshot(image) == frames
    # A snapshot has no more records than the image has things in it.
    things = (
        len(image.features) + len(image.brokers) + len(image.controllers)
        + sum(1 + len(t.partitions) + len(t.configs) for t in image.topics.values())
        + sum(len(c) for c in image.resource_configs.values()) + (1 if image.next_producer_id else 0)
        + len(image.cluster_links) + len(image.mirror_topics) + len(image.broker_placement)
        + len(image.balancer_throttles)
    )
    assert len(records) == things
    # The snapshot of the replayed image is the same snapshot.
    assert snapshot_records(image_from_snapshot_records(records, 0)) == records


def test_broker_placement_is_kept_per_broker_and_normal_removes_it():
    image = replay([BROKER_PLACEMENT_RECORD(broker_id=4, state=2), BROKER_PLACEMENT_RECORD(broker_id=5, state=1)])
    assert dict(image.broker_placement) == {4: 2, 5: 1}
    image = replay([BROKER_PLACEMENT_RECORD(broker_id=4, state=0), BROKER_PLACEMENT_RECORD(broker_id=5, state=2)], image, 2)
    assert dict(image.broker_placement) == {5: 2}
    assert snapshot_records(image) == [BROKER_PLACEMENT_RECORD(broker_id=5, state=2)]


def test_snapshot_order_and_empty_image():
    assert snapshot_records(MetadataImage()) == []
    image = replay(
        [
            register(1, 4),
            FEATURE_LEVEL_RECORD(name="kraft.version", feature_level=1),
            FEATURE_LEVEL_RECORD(name="metadata.version", feature_level=20),
            PRODUCER_IDS_RECORD(broker_id=1, broker_epoch=4, next_producer_id=2000),
            CONFIG_RECORD(resource_type=RESOURCE_BROKER, resource_name="", name="x", value="y"),
        ]
        + topic_with_partitions(T2, "b", count=1)
        + topic_with_partitions(T1, "a", count=2)
        + [CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name="b", name="retention.ms", value="1")]
    )
    names = [(type(r).__name__, getattr(r, "name", None)) for r in snapshot_records(image)]
    assert names == [
        ("FeatureLevelRecord", "metadata.version"),  # first: it decides how the rest is read
        ("FeatureLevelRecord", "kraft.version"),
        ("RegisterBrokerRecord", None),
        ("TopicRecord", "a"),
        ("PartitionRecord", None),
        ("PartitionRecord", None),
        ("TopicRecord", "b"),
        ("PartitionRecord", None),
        ("ConfigRecord", "retention.ms"),
        ("ConfigRecord", "x"),
        ("ProducerIdsRecord", None),
    ]
    producer_ids = snapshot_records(image)[-1]
    assert (producer_ids.broker_id, producer_ids.broker_epoch, producer_ids.next_producer_id) == (-1, -1, 2000)
    frames = encode_snapshot(image)
    assert [decode_record(f)[1] for f in frames] == snapshot_records(image)
    assert all(f == encode_record(r) for f, r in zip(frames, snapshot_records(image)))
