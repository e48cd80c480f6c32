"""The controller's planning of cluster links and mirror topics (controller/link_commands.py,
controller/link_configs.py): link settings, state transitions, stop marks, the producer id move."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from controller.broker_lifecycle import plan_broker_heartbeat, plan_register_broker
from controller.config_commands import OP_DELETE, OP_SET, ConfigChange, ConfigOp
from controller.link_commands import (
    MirrorSpec,
    describe_links,
    mirror_record,
    plan_alter_links,
    plan_alter_mirrors,
    plan_create_links,
    plan_create_mirrors,
    plan_delete_links,
    plan_mirror_partitions_stopped,
    plan_update_mirror_topic,
)
from controller.link_configs import (
    LINK_CONFIGS,
    MIRROR_SYNCED_TOPIC_CONFIGS,
    LinkConfigError,
    group_selected,
    parse_group_filters,
    validate_link_configs,
)
from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import (
    MIRROR_ACTIVE,
    MIRROR_FAILED,
    MIRROR_FAILED_OVER,
    MIRROR_PAUSED,
    MIRROR_PENDING_FAILOVER,
    MIRROR_PENDING_PROMOTE,
    MIRROR_PROMOTED,
    MIRROR_SOURCE_DELETED,
    MIRROR_STATE_NAMES,
    RESOURCE_TOPIC,
    record_api_key,
)
from controller.metadata_commands import alter_configs, create_partitions
from controller.topic_commands import ClusterDefaults, CreatePartitionsSpec, CreateTopicSpec, plan_create_topic
from protocol.errors import ErrorCode
from protocol.messages.cluster_links import (
    LINK_CONFIG_DELETE,
    LINK_CONFIG_SET,
    MIRROR_OP_FAILOVER,
    MIRROR_OP_PAUSE,
    MIRROR_OP_PROMOTE,
    MIRROR_OP_RESUME,
)
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from storage.topic_config import TOPIC_CONFIG_KEYS

CLUSTER = "c1"
DEFAULTS = ClusterDefaults(broker_ids=(1,), num_partitions=1, replication_factor=1)
_CL = struct_classes(APIS_BY_NAME["CreateClusterLinks"].request)
_AL = struct_classes(APIS_BY_NAME["AlterClusterLinks"].request)
_DL = struct_classes(APIS_BY_NAME["DeleteClusterLinks"].request)
_DE = struct_classes(APIS_BY_NAME["DescribeClusterLinks"].request)
_AM = struct_classes(APIS_BY_NAME["AlterMirrors"].request)
_ST = struct_classes(APIS_BY_NAME["MirrorPartitionsStopped"].request)
_UP = struct_classes(APIS_BY_NAME["UpdateMirrorTopic"].request)
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="secret";'


def apply(image, records):
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset + len(records))


def with_brokers(*broker_ids):
    image = MetadataImage()
    for b in broker_ids:
        listener = SimpleNamespace(name="PLAINTEXT", host="127.0.0.1", port=9000 + b, security_protocol=0)
        registration = SimpleNamespace(
            broker_id=b, cluster_id=CLUSTER, incarnation_id=uuid.UUID(int=b), listeners=[listener], features=[],
            rack=None, log_dirs=[],
        )
        _, records = plan_register_broker(image, registration, cluster_id=CLUSTER, broker_epoch=10 * b, session_alive=False)
        image = apply(image, records)
        heartbeat = SimpleNamespace(broker_id=b, broker_epoch=10 * b, current_metadata_offset=10**9, want_fence=False, want_shut_down=False)
        _, records = plan_broker_heartbeat(image, heartbeat)
        image = apply(image, records)
    return image


def ids():
    counter = iter(range(100, 1000))
    return lambda: uuid.UUID(int=next(counter))


def create_link(image, name="east", **configs):
    configs = {"bootstrap.servers": "src:9092", **configs}
    request = _CL.CreateClusterLinksRequest(
        links=[_CL.CreatableLink(link_name=name, configs=[_CL.CreatableLinkConfig(name=k, value=v) for k, v in configs.items()])],
        validate_only=False, timeout_ms=1000,
    )
    response, records = plan_create_links(image, request, ids())
    return response.results[0], apply(image, records)


def with_mirror(partitions=3, source_configs=None, configs=None, image=None):
    image = image or with_brokers(1)
    _, image = create_link(image)
    spec = MirrorSpec(
        "orders", "east", "orders", configs=configs or {}, source_partitions=partitions,
        source_configs=source_configs or {"retention.ms": "1000", "max.message.bytes": "2048", "segment.jitter.ms": "5"},
    )
    results, records = plan_create_mirrors(image, [spec], DEFAULTS, ids())
    assert results[0].error_code == ErrorCode.NONE, results[0]
    return apply(image, records)


def alter_mirrors(image, operation, *topics):
    response, records = plan_alter_mirrors(image, _AM.AlterMirrorsRequest(operation=operation, topics=list(topics), validate_only=False))
    return response.results, apply(image, records)


def stopped(image, partitions, *, broker_id=1, broker_epoch=10, topic="orders", origin_id=0):
    topic_id = image.topics[topic].topic_id
    request = _ST.MirrorPartitionsStoppedRequest(broker_id=broker_id, broker_epoch=broker_epoch, topics=[
        _ST.StoppedMirrorTopic(topic_id=topic_id, partitions=[
            _ST.StoppedMirrorPartition(partition_index=p, leader_epoch=e, offset=o, last_epoch=le, max_producer_id=pid)
            for p, e, o, le, pid in partitions
        ]),
    ])
    response, records = plan_mirror_partitions_stopped(image, request, origin_id)
    return response, apply(image, records)


# ----------------------------------------------------------------------------- link settings


def test_every_known_key_has_a_meaning_and_synced_topic_configs_exist_here():
    assert all(key.doc for key in LINK_CONFIGS.values())
    assert MIRROR_SYNCED_TOPIC_CONFIGS <= set(TOPIC_CONFIG_KEYS)


@pytest.mark.parametrize("configs, key", [
    ({"bootstrap.servers": "a:1", "bootstrap.server": "a:1"}, "bootstrap.server"),
    ({}, "bootstrap.servers"),
    ({"bootstrap.servers": "a"}, "bootstrap.servers"),
    ({"bootstrap.servers": "a:1", "consumer.offset.sync.ms": "soon"}, "consumer.offset.sync.ms"),
    ({"bootstrap.servers": "a:1", "consumer.offset.sync.ms": "0"}, "consumer.offset.sync.ms"),
    ({"bootstrap.servers": "a:1", "consumer.offset.sync.enable": "yes"}, "consumer.offset.sync.enable"),
    ({"bootstrap.servers": "a:1", "consumer.offset.group.filters": "{"}, "consumer.offset.group.filters"),
    ({"bootstrap.servers": "a:1", "consumer.offset.group.filters": '{"groupFilters":[{"name":"a","patternType":"REGEX"}]}'},
     "consumer.offset.group.filters"),
    ({"bootstrap.servers": "a:1", "consumer.offset.sync.enable": "true"}, "consumer.offset.group.filters"),
])
def test_bad_link_settings_are_refused_naming_the_key(configs, key):
    with pytest.raises(LinkConfigError) as raised:
        validate_link_configs(configs)
    assert str(raised.value).startswith(key + ":")


def test_group_filters_as_cluster_linking_reads_them():
    filters = parse_group_filters(
        '{"groupFilters": [{"name": "*", "patternType": "LITERAL", "filterType": "INCLUDE"},'
        ' {"name": "tmp-", "patternType": "PREFIXED", "filterType": "EXCLUDE"}]}'
    )
    assert group_selected(filters, "billing") and not group_selected(filters, "tmp-1")
    assert not group_selected(parse_group_filters('{"groupFilters": [{"name": "a"}]}'), "b")


# ----------------------------------------------------------------------------- links


def test_create_describe_alter_and_delete_a_link_with_secrets_redacted():
    result, image = create_link(MetadataImage(), "east", **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": JAAS})
    assert result.error_code == ErrorCode.NONE and result.link_id == uuid.UUID(int=100)
    assert image.cluster_links["east"].configs["sasl.jaas.config"] == JAAS
    again, _ = create_link(image, "east")
    assert again.error_code == ErrorCode.DUPLICATE_RESOURCE
    typo, _ = create_link(image, "west", **{"boostrap.servers": "x:1"})
    assert typo.error_code == ErrorCode.INVALID_CONFIG and "boostrap.servers" in typo.error_message

    described = describe_links(image, _DE.DescribeClusterLinksRequest(link_names=None)).results[0]
    configs = {c.name: (c.value, c.sensitive) for c in described.configs}
    assert configs["sasl.jaas.config"] == (None, True) and configs["bootstrap.servers"] == ("src:9092", False)
    missing = describe_links(image, _DE.DescribeClusterLinksRequest(link_names=["nope"])).results[0]
    assert missing.error_code == ErrorCode.RESOURCE_NOT_FOUND

    def alter(*ops):
        request = _AL.AlterClusterLinksRequest(links=[_AL.AlterableLink(link_name="east", configs=[
            _AL.AlterableLinkConfig(name=n, value=v, operation=o) for n, v, o in ops
        ])], validate_only=False)
        response, records = plan_alter_links(image, request)
        return response.results[0], apply(image, records)

    result, altered = alter(("consumer.offset.sync.ms", "1000", LINK_CONFIG_SET), ("sasl.jaas.config", None, LINK_CONFIG_DELETE))
    assert result.error_code == ErrorCode.NONE
    assert altered.cluster_links["east"].configs["consumer.offset.sync.ms"] == "1000"
    assert "sasl.jaas.config" not in altered.cluster_links["east"].configs
    assert altered.cluster_links["east"].link_id == image.cluster_links["east"].link_id
    result, _ = alter(("bootstrap.servers", None, LINK_CONFIG_DELETE))
    assert result.error_code == ErrorCode.INVALID_CONFIG and "cannot be deleted" in result.error_message

    response, records = plan_delete_links(image, _DL.DeleteClusterLinksRequest(link_names=["east"], force=False, validate_only=False))
    assert response.results[0].error_code == ErrorCode.NONE
    assert apply(image, records).cluster_links == {}


def test_a_link_with_following_mirrors_is_deleted_only_with_force_and_they_fail():
    image = with_mirror()
    request = _DL.DeleteClusterLinksRequest(link_names=["east"], force=False, validate_only=False)
    response, records = plan_delete_links(image, request)
    assert response.results[0].error_code == ErrorCode.INVALID_REQUEST and "orders (ACTIVE)" in response.results[0].error_message
    assert records == []
    response, records = plan_delete_links(image, _DL.DeleteClusterLinksRequest(link_names=["east"], force=True, validate_only=False))
    after = apply(image, records)
    mirror = after.mirror_of("orders")
    assert (mirror.state, mirror.reason) == (MIRROR_FAILED, "link deleted") and after.cluster_links == {}


# ----------------------------------------------------------------------------- mirror topics


def test_a_mirror_takes_the_source_partitions_and_only_synced_configs():
    image = with_mirror(partitions=3, configs={"min.insync.replicas": "1"})
    topic = image.topics["orders"]
    assert len(topic.partitions) == 3
    assert dict(topic.configs) == {"retention.ms": "1000", "max.message.bytes": "2048", "min.insync.replicas": "1"}
    mirror = image.mirror_of("orders")
    assert (mirror.state, mirror.source_topic, mirror.link_id) == (MIRROR_ACTIVE, "orders", image.cluster_links["east"].link_id)


def test_mirror_creation_errors():
    image = with_mirror()
    specs = [
        MirrorSpec("orders", "east", "orders", source_partitions=1),
        MirrorSpec("b", "nowhere", "b", source_partitions=1),
        MirrorSpec("c", "east", "c", configs={"retention.ms": "5"}, source_partitions=1),
    ]
    results, records = plan_create_mirrors(image, specs, DEFAULTS, ids())
    assert [r.error_code for r in results] == [ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.RESOURCE_NOT_FOUND, ErrorCode.INVALID_CONFIG]
    assert "synced from the source" in results[2].error_message and records == []


@pytest.mark.parametrize("start, operation, end", [
    (MIRROR_ACTIVE, MIRROR_OP_PAUSE, MIRROR_PAUSED),
    (MIRROR_PAUSED, MIRROR_OP_RESUME, MIRROR_ACTIVE),
    (MIRROR_ACTIVE, MIRROR_OP_PROMOTE, MIRROR_PENDING_PROMOTE),
    (MIRROR_PAUSED, MIRROR_OP_PROMOTE, MIRROR_PENDING_PROMOTE),
    (MIRROR_SOURCE_DELETED, MIRROR_OP_PROMOTE, MIRROR_PENDING_FAILOVER),
    (MIRROR_ACTIVE, MIRROR_OP_FAILOVER, MIRROR_PENDING_FAILOVER),
    (MIRROR_PENDING_PROMOTE, MIRROR_OP_FAILOVER, MIRROR_PENDING_FAILOVER),
    (MIRROR_FAILED, MIRROR_OP_FAILOVER, MIRROR_PENDING_FAILOVER),
    (MIRROR_ACTIVE, MIRROR_OP_RESUME, None),
    (MIRROR_PAUSED, MIRROR_OP_PAUSE, None),
    (MIRROR_PENDING_FAILOVER, MIRROR_OP_PROMOTE, None),
    (MIRROR_PENDING_FAILOVER, MIRROR_OP_FAILOVER, None),
    (MIRROR_FAILED, MIRROR_OP_PROMOTE, None),
])
def test_mirror_state_transitions(start, operation, end):
    image = with_mirror()
    image = apply(image, [mirror_record(image.mirror_of("orders"), state=start)])
    results, after = alter_mirrors(image, operation, "orders")
    if end is None:
        assert results[0].error_code == ErrorCode.INVALID_REQUEST
        assert f"in state {MIRROR_STATE_NAMES[start]}" in results[0].error_message
        assert after.mirror_of("orders").state == start
    else:
        assert results[0].error_code == ErrorCode.NONE and after.mirror_of("orders").state == end


def test_altering_a_topic_that_is_not_a_mirror_says_so():
    image = with_mirror()
    _, records = plan_create_topic(image, CreateTopicSpec("plain", 1, 1), DEFAULTS, uuid.UUID(int=55))
    image = apply(image, records)
    results, _ = alter_mirrors(image, MIRROR_OP_PROMOTE, "plain", "ghost")
    assert results[0].error_code == ErrorCode.INVALID_REQUEST and "not a mirror topic" in results[0].error_message
    assert results[1].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_marks_complete_a_promote_move_epochs_and_the_producer_ids():
    image = with_mirror(partitions=2)
    _, image = alter_mirrors(image, MIRROR_OP_PROMOTE, "orders")
    epochs = {p: part.leader_epoch for p, part in image.topics["orders"].partitions.items()}
    next_pid = image.next_producer_id
    response, image = stopped(image, [(0, epochs[0], 40, 7, next_pid + 500)])
    assert response.error_code == ErrorCode.NONE
    mirror = image.mirror_of("orders")
    assert mirror.state == MIRROR_PENDING_PROMOTE and dict(mirror.partition_marks) == {0: (40, 7)}
    assert image.next_producer_id == next_pid + 501
    # A smaller producer id never moves it back.
    response, image = stopped(image, [(1, epochs[1], 0, -1, 3)])
    mirror = image.mirror_of("orders")
    assert mirror.state == MIRROR_PROMOTED and dict(mirror.partition_marks) == {0: (40, 7), 1: (0, -1)}
    assert image.next_producer_id == next_pid + 501
    partitions = image.topics["orders"].partitions
    assert partitions[0].leader_epoch == max(epochs[0], 7) + 1 and partitions[1].leader_epoch == epochs[1] + 1
    # A late report of a promoted mirror is answered without a change.
    late, again = stopped(image, [(0, epochs[0], 40, 7, -1)])
    assert late.error_code == ErrorCode.NONE and again.mirror_of("orders") == image.mirror_of("orders")


def test_producer_ids_of_another_origin_do_not_move_the_next_producer_id():
    # cluster.link.origin.id: ids of another origin never meet this cluster's, so a
    # promote keeps the next id in this cluster's own range (else it could not allocate).
    image = with_mirror(partitions=2)
    _, image = alter_mirrors(image, MIRROR_OP_PROMOTE, "orders")
    epochs = {p: part.leader_epoch for p, part in image.topics["orders"].partitions.items()}
    next_pid = image.next_producer_id
    _, image = stopped(image, [(0, epochs[0], 40, 7, (1 << 48) + 500)], origin_id=2)
    assert image.next_producer_id == next_pid
    _, image = stopped(image, [(1, epochs[1], 40, 7, (2 << 48) + 500)], origin_id=2)
    assert image.next_producer_id == (2 << 48) + 501


def test_a_failover_completes_as_failed_over():
    image = with_mirror(partitions=1)
    _, image = alter_mirrors(image, MIRROR_OP_FAILOVER, "orders")
    epoch = image.topics["orders"].partitions[0].leader_epoch
    _, image = stopped(image, [(0, epoch, 12, 2, -1)])
    assert image.mirror_of("orders").state == MIRROR_FAILED_OVER


@pytest.mark.parametrize("change, code", [
    ({"broker_epoch": 11}, ErrorCode.STALE_BROKER_EPOCH),
    ({"broker_id": 2, "broker_epoch": 20}, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    ({"leader_epoch_delta": -1}, ErrorCode.FENCED_LEADER_EPOCH),
    ({"not_pending": True}, ErrorCode.INVALID_REQUEST),
])
def test_stop_reports_only_from_the_current_leader_of_a_stopping_mirror(change, code):
    image = with_mirror(partitions=1, image=with_brokers(1, 2))
    if not change.get("not_pending"):
        _, image = alter_mirrors(image, MIRROR_OP_PROMOTE, "orders")
    partition = image.topics["orders"].partitions[0]
    assert partition.leader == 1
    epoch = partition.leader_epoch + change.get("leader_epoch_delta", 0)
    response, after = stopped(
        image, [(0, epoch, 5, 1, -1)], broker_id=change.get("broker_id", 1), broker_epoch=change.get("broker_epoch", 10)
    )
    assert response.error_code == code
    assert after.mirror_of("orders") == image.mirror_of("orders")


def update(image, **fields):
    defaults = {"broker_id": 1, "broker_epoch": 10, "topic_id": image.topics["orders"].topic_id, "expected_state": MIRROR_ACTIVE,
                    "state": -1, "reason": None, "source_partition_count": -1, "configs": []}
    defaults.update(fields)
    response, records = plan_update_mirror_topic(image, _UP.UpdateMirrorTopicRequest(**defaults), DEFAULTS)
    return response, apply(image, records)


def test_update_mirror_topic_is_compare_and_set_and_syncs_partitions_and_configs():
    image = with_mirror(partitions=2)
    response, after = update(image, expected_state=MIRROR_PAUSED, state=MIRROR_SOURCE_DELETED)
    assert response.error_code == ErrorCode.INVALID_UPDATE_VERSION and "ACTIVE" in response.error_message
    response, after = update(image, source_partition_count=4, configs=[_UP.SyncedTopicConfig(name="retention.ms", value="99"),
                                                                       _UP.SyncedTopicConfig(name="max.message.bytes", value=None)])
    assert response.error_code == ErrorCode.NONE
    assert len(after.topics["orders"].partitions) == 4
    assert dict(after.topics["orders"].configs) == {"retention.ms": "99"}
    response, _ = update(image, configs=[_UP.SyncedTopicConfig(name="min.insync.replicas", value="2")])
    assert response.error_code == ErrorCode.INVALID_CONFIG
    response, after = update(image, state=MIRROR_SOURCE_DELETED, reason="the source topic was deleted")
    assert after.mirror_of("orders").state == MIRROR_SOURCE_DELETED
    response, _ = update(image, state=MIRROR_PROMOTED)
    assert response.error_code == ErrorCode.INVALID_REQUEST


def test_users_cannot_change_synced_configs_or_partitions_of_a_following_mirror():
    image = with_mirror(partitions=1)

    def alter(name, value, op=OP_SET):
        change = ConfigChange(RESOURCE_TOPIC, "orders", [ConfigOp(name, op, value)])
        results, _ = alter_configs(image, [change], incremental=True, local_node_id=1)
        return results[0]

    refused = alter("retention.ms", "5")
    assert refused.error_code == ErrorCode.INVALID_CONFIG and "synced from the source" in refused.error_message
    assert alter("retention.ms", None, OP_DELETE).error_code == ErrorCode.INVALID_CONFIG
    assert alter("min.insync.replicas", "1").error_code == ErrorCode.NONE
    results, _ = create_partitions(image, [CreatePartitionsSpec("orders", 3)], DEFAULTS)
    assert results[0].error_code == ErrorCode.INVALID_REQUEST
    # Once promoted, the topic is an ordinary one.
    _, image = alter_mirrors(image, MIRROR_OP_PROMOTE, "orders")
    _, image = stopped(image, [(0, image.topics["orders"].partitions[0].leader_epoch, 0, -1, -1)])
    assert alter("retention.ms", "5").error_code == ErrorCode.NONE
    results, _ = create_partitions(image, [CreatePartitionsSpec("orders", 3)], DEFAULTS)
    assert results[0].error_code == ErrorCode.NONE
