"""The consumer groups' view of the topics follows every metadata change, but
only the topics whose image changed (or all, when a broker's rack changed) are
made again: remaking 100,000 partitions' racks on each leader election held the
event loop for most of a second."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from broker.config import load_config
from broker.coordinators.groups.service import GroupService
from controller.metadata.records import PARTITION_CHANGE_RECORD, PARTITION_RECORD, TOPIC_RECORD
from tests.unit.test_broker_lifecycle import apply, registered


def service_over(image):
    broker = SimpleNamespace(config=load_config({}), image=image)
    return broker, GroupService(broker)


def with_topics(image, names_and_replicas):
    records = []
    for index, (name, replicas) in enumerate(names_and_replicas):
        topic_id = uuid.UUID(int=500 + index)
        records.append(TOPIC_RECORD(name=name, topic_id=topic_id))
        records.append(
            PARTITION_RECORD(partition_id=0, topic_id=topic_id, replicas=replicas, isr=replicas, leader=replicas[0], leader_epoch=0, partition_epoch=0)
        )
    return apply(image, records)


def test_only_changed_topics_are_made_again_and_racks_follow_the_brokers():
    image = with_topics(registered(1, 2, racks={1: "a", 2: "b"}), [("x", [1, 2]), ("y", [2])])
    broker, service = service_over(image)
    service._refresh_topics()
    infos = dict(service.consumer_groups.topics)
    assert infos["x"].partition_racks == (frozenset({"a", "b"}),)
    assert infos["y"].partition_racks == (frozenset({"b"}),)

    # A leader change in x: x is made again, y's info is the same object.
    x = broker.image.topics["x"]
    broker.image = apply(broker.image, [PARTITION_CHANGE_RECORD(partition_id=0, topic_id=x.topic_id, leader=2)])
    service._refresh_topics()
    after = service.consumer_groups.topics
    assert after["y"] is infos["y"]
    assert after["x"] is not infos["x"] and after["x"].partition_racks == infos["x"].partition_racks

    # A replica change in y reaches its racks.
    y = broker.image.topics["y"]
    broker.image = apply(broker.image, [PARTITION_CHANGE_RECORD(partition_id=0, topic_id=y.topic_id, replicas=[1, 2], isr=[1, 2])])
    service._refresh_topics()
    assert service.consumer_groups.topics["y"].partition_racks == (frozenset({"a", "b"}),)

    # Broker 2 registers again in another rack: every topic is made again.
    from controller.broker_lifecycle import plan_register_broker
    from tests.unit.test_broker_lifecycle import registration

    _, records = plan_register_broker(
        broker.image, registration(2, incarnation=uuid.UUID(int=77), rack="c"), cluster_id="c1", broker_epoch=900, session_alive=False
    )
    broker.image = apply(broker.image, records[:1])
    service._refresh_topics()
    assert service.consumer_groups.topics["x"].partition_racks == (frozenset({"a", "c"}),)
    assert service.consumer_groups.topics["y"].partition_racks == (frozenset({"a", "c"}),)
