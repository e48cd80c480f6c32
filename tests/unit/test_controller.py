"""The single-node metadata controller: topic naming, topic command planning,
MetadataController (commit, replay), and the KRaft metadata record frame.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from pathlib import Path

import pytest

from controller.features import default_feature_levels
from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import (
    CONFIG_RECORD,
    FEATURE_LEVEL_RECORD,
    PARTITION_RECORD,
    PRODUCER_IDS_RECORD,
    RECORD_TYPES,
    REMOVE_TOPIC_RECORD,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    TOPIC_RECORD,
    decode_record,
    encode_record,
    record_api_key,
)
from controller.topic_commands import (
    TOPIC_NAME_MAX_CHARS,
    ClusterDefaults,
    CreateTopicSpec,
    plan_create_topic,
    plan_delete_topic,
    topic_name_error,
)
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.records import decode_records
from tests.quorum_harness import METADATA_DIR_NAME
from tests.quorum_harness import SingleVoterController as MetadataController

ONE_BROKER = ClusterDefaults(broker_ids=(1,), num_partitions=1, replication_factor=1)
THREE_BROKERS = ClusterDefaults(broker_ids=(3, 1, 2), num_partitions=2, replication_factor=1)


def uuids(start: int = 1):
    counter = [start]

    def new() -> uuid.UUID:
        value = uuid.UUID(int=counter[0])
        counter[0] += 1
        return value

    return new


def kinds(records) -> list[int]:
    return [record_api_key(r) for r in records]


# --------------------------------------------------------------------------- topic names


@pytest.mark.parametrize(
    "name",
    ["a", "topic", "Topic_1", "a.b-c_d", "...a", "-", "_", "a" * 249, "0", "__consumer_offsets", "x" * 100 + ".y"],
)
def test_legal_topic_names(name):
    assert topic_name_error(name) is None


@pytest.mark.parametrize(
    "name",
    ["", None, ".", "..", "a" * 250, "a" * 1000, "a b", "a/b", "a\\b", "topic!", "t\u00e9", "a:b", "a\nb", "a\x00", "\u0661"],
)
def test_illegal_topic_names(name):
    problem = topic_name_error(name)
    assert isinstance(problem, str) and problem


def test_max_topic_name_length_is_kafkas():
    assert TOPIC_NAME_MAX_CHARS == 249
    assert topic_name_error("t" * 249) is None
    assert "249" in topic_name_error("t" * 250)


# --------------------------------------------------------------------------- plan_create_topic


def plan(spec: CreateTopicSpec, image: MetadataImage | None = None, defaults: ClusterDefaults = ONE_BROKER, topic_id: int = 7):
    return plan_create_topic(image or MetadataImage(), spec, defaults, uuid.UUID(int=topic_id))


def test_plan_create_topic_records():
    tid = uuid.UUID(int=7)
    result, records = plan(CreateTopicSpec("orders", num_partitions=3, configs={"retention.ms": "1000", "cleanup.policy": "compact"}))
    assert result.error_code == ErrorCode.NONE and result.error_message is None
    assert result.topic_id == tid
    assert result.num_partitions == 3 and result.replication_factor == 1
    assert result.configs == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert kinds(records) == [2, 4, 4, 3, 3, 3]
    topic = records[0]
    assert (topic.name, topic.topic_id) == ("orders", tid)
    # Config records sorted by name, on the topic resource.
    assert [(c.resource_type, c.resource_name, c.name, c.value) for c in records[1:3]] == [
        (RESOURCE_TOPIC, "orders", "cleanup.policy", "compact"),
        (RESOURCE_TOPIC, "orders", "retention.ms", "1000"),
    ]
    for i, p in enumerate(records[3:]):
        assert p.partition_id == i
        assert p.topic_id == tid
        assert p.replicas == [1] and p.isr == [1] and p.leader == 1
        assert p.leader_epoch == 0 and p.partition_epoch == 0
        assert p.removing_replicas == [] and p.adding_replicas == []


def test_plan_uses_cluster_defaults_and_round_robin_placement():
    result, records = plan(CreateTopicSpec("t", replication_factor=2), defaults=THREE_BROKERS)
    assert result.error_code == ErrorCode.NONE
    assert result.num_partitions == 2 and result.replication_factor == 2
    parts = [r for r in records if record_api_key(r) == 3]
    assert len(parts) == 2
    for p in parts:
        assert len(p.replicas) == 2 and len(set(p.replicas)) == 2
        assert set(p.replicas) <= {1, 2, 3}
        assert p.leader == p.replicas[0]
        assert p.isr == p.replicas
    assert parts[0].leader != parts[1].leader  # leadership is spread


def test_plan_with_explicit_assignments():
    result, records = plan(CreateTopicSpec("t", assignments={0: [2, 3], 1: [3, 1]}), defaults=THREE_BROKERS)
    assert result.error_code == ErrorCode.NONE
    assert result.num_partitions == 2 and result.replication_factor == 2
    parts = [r for r in records if record_api_key(r) == 3]
    assert [(p.partition_id, p.replicas, p.isr, p.leader) for p in parts] == [(0, [2, 3], [2, 3], 2), (1, [3, 1], [3, 1], 3)]


@pytest.mark.parametrize(
    "spec, defaults, code",
    [
        (CreateTopicSpec(""), ONE_BROKER, ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreateTopicSpec(".."), ONE_BROKER, ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreateTopicSpec("a" * 250), ONE_BROKER, ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreateTopicSpec("bad name"), ONE_BROKER, ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreateTopicSpec("t", num_partitions=0), ONE_BROKER, ErrorCode.INVALID_PARTITIONS),
        (CreateTopicSpec("t", num_partitions=-2), ONE_BROKER, ErrorCode.INVALID_PARTITIONS),
        (CreateTopicSpec("t", replication_factor=0), ONE_BROKER, ErrorCode.INVALID_REPLICATION_FACTOR),
        (CreateTopicSpec("t", replication_factor=2), ONE_BROKER, ErrorCode.INVALID_REPLICATION_FACTOR),
        (CreateTopicSpec("t", replication_factor=4), THREE_BROKERS, ErrorCode.INVALID_REPLICATION_FACTOR),
        (CreateTopicSpec("t", num_partitions=1, assignments={0: [1]}), ONE_BROKER, ErrorCode.INVALID_REQUEST),
        (CreateTopicSpec("t", replication_factor=1, assignments={0: [1]}), ONE_BROKER, ErrorCode.INVALID_REQUEST),
        (CreateTopicSpec("t", assignments={1: [1]}), ONE_BROKER, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreateTopicSpec("t", assignments={0: [1], 2: [1]}), ONE_BROKER, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreateTopicSpec("t", assignments={0: [1, 2], 1: [1]}), THREE_BROKERS, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreateTopicSpec("t", assignments={0: []}), ONE_BROKER, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreateTopicSpec("t", assignments={0: [1, 1]}), ONE_BROKER, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreateTopicSpec("t", assignments={0: [9]}), ONE_BROKER, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreateTopicSpec("t", configs={"no.such.config": "1"}), ONE_BROKER, ErrorCode.INVALID_CONFIG),
        (CreateTopicSpec("t", configs={"retention.ms": "soon"}), ONE_BROKER, ErrorCode.INVALID_CONFIG),
        (CreateTopicSpec("t", configs={"retention.ms": None}), ONE_BROKER, ErrorCode.INVALID_CONFIG),
    ],
)
def test_plan_create_topic_errors(spec, defaults, code):
    result, records = plan(spec, defaults=defaults)
    assert result.error_code == code, result.error_message
    assert result.error_message
    assert records == []


def test_plan_create_existing_topic():
    _, records = plan(CreateTopicSpec("t"))
    image = apply_records(MetadataImage(), [(record_api_key(r), r) for r in records], 0)
    result, records = plan(CreateTopicSpec("t"), image=image, topic_id=8)
    assert result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert records == []


@pytest.mark.parametrize("existing, new", [("a.b", "a_b"), ("a_b", "a.b"), ("x.y_z", "x_y.z")])
def test_plan_create_topic_colliding_with_existing_name(existing, new):
    """Kafka refuses a name that differs from an existing one only by '.' vs '_'
    (metric names replace '.' with '_'): INVALID_TOPIC_EXCEPTION "collides with existing topic"."""
    _, records = plan(CreateTopicSpec(existing))
    image = apply_records(MetadataImage(), [(record_api_key(r), r) for r in records], 0)
    result, records = plan(CreateTopicSpec(new), image=image, topic_id=8)
    assert result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, f"{new!r} was allowed next to {existing!r}"
    assert records == []


def test_plan_delete_topic():
    _, records = plan(CreateTopicSpec("t"))
    image = apply_records(MetadataImage(), [(record_api_key(r), r) for r in records], 0)
    tid = uuid.UUID(int=7)
    error, message, name, topic_id, recs = plan_delete_topic(image, "t", None)
    assert (error, name, topic_id) == (ErrorCode.NONE, "t", tid)
    assert [(record_api_key(r), r.topic_id) for r in recs] == [(REMOVE_TOPIC_RECORD.api_key, tid)]
    assert plan_delete_topic(image, None, tid)[0] == ErrorCode.NONE
    assert plan_delete_topic(image, "", tid)[2] == "t"
    assert plan_delete_topic(image, "nope", None)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert plan_delete_topic(image, None, uuid.UUID(int=99))[0] == ErrorCode.UNKNOWN_TOPIC_ID
    assert plan_delete_topic(image, None, None)[0] == ErrorCode.INVALID_REQUEST
    assert plan_delete_topic(image, None, uuid.UUID(int=0))[0] == ErrorCode.INVALID_REQUEST
    for result in (plan_delete_topic(image, "nope", None), plan_delete_topic(image, None, None)):
        assert result[4] == []


# --------------------------------------------------------------------------- MetadataController


@pytest.fixture
def controllers(tmp_path):
    opened: list[MetadataController] = []

    def make(defaults: ClusterDefaults = ONE_BROKER, start: int = 1) -> MetadataController:
        c = MetadataController(tmp_path, defaults, new_uuid=uuids(start))
        opened.append(c)
        return c

    yield make
    for c in opened:
        try:
            c.close()
        except Exception:
            pass


def metadata_log_bytes(tmp_path: Path) -> int:
    return sum(p.stat().st_size for p in (tmp_path / METADATA_DIR_NAME).glob("*.log"))


def image_summary(image: MetadataImage):
    return {
        name: (
            t.topic_id,
            {p: (v.replicas, v.isr, v.leader, v.leader_epoch, v.partition_epoch) for p, v in t.partitions.items()},
            dict(t.configs),
        )
        for name, t in image.topics.items()
    }


def test_create_topics_updates_the_image_and_the_log(controllers, tmp_path):
    c = controllers(THREE_BROKERS)
    seen = []
    c.subscribe(lambda old, new: seen.append((set(old.topics), set(new.topics))))
    results = c.create_topics(
        [CreateTopicSpec("a", num_partitions=3, configs={"retention.ms": "5"}), CreateTopicSpec("b", replication_factor=3)]
    )
    assert [r.error_code for r in results] == [ErrorCode.NONE, ErrorCode.NONE]
    assert set(c.image.topics) == {"a", "b"}
    a = c.image.topics["a"]
    assert a.topic_id == results[0].topic_id
    assert sorted(a.partitions) == [0, 1, 2]
    assert dict(a.configs) == {"retention.ms": "5"}
    assert c.image.topic_by_id(results[1].topic_id).name == "b"
    assert all(len(p.replicas) == 3 for p in c.image.topics["b"].partitions.values())
    assert seen == [(set(), {"a", "b"})]  # one commit per command, listeners told once
    assert metadata_log_bytes(tmp_path) > 0
    # The metadata log holds plain v2 batches: the leader's control batch (a
    # LeaderChange), the new cluster's feature levels, then framed records with null keys.
    records = decode_records(b"".join(p.read_bytes() for p in sorted((tmp_path / METADATA_DIR_NAME).glob("*.log"))))
    assert records[0].control is not None and records[0].control.control_type == 2
    data = records[1:]
    assert all(r.key is None and r.control is None for r in data)
    decoded = [decode_record(r.value) for r in data]
    features = [FEATURE_LEVEL_RECORD.api_key] * len(default_feature_levels())
    assert [k for k, _ in decoded] == features + [2, 4, 3, 3, 3, 2, 3, 3]
    assert c.image.offset == len(records) - 1


def test_validate_only_writes_nothing(controllers, tmp_path):
    c = controllers()
    calls = []
    c.subscribe(lambda old, new: calls.append(1))
    results = c.create_topics([CreateTopicSpec("a", num_partitions=2), CreateTopicSpec("b x")], validate_only=True)
    assert [r.error_code for r in results] == [ErrorCode.NONE, ErrorCode.INVALID_TOPIC_EXCEPTION]
    assert results[0].num_partitions == 2
    assert dict(c.image.topics) == {}
    written = 1 + len(default_feature_levels())  # the leader's control batch and the feature levels only
    assert c.image.offset == written - 1
    assert calls == []
    assert c.raft_log.end_offset == written
    c.close()
    assert dict(controllers().image.topics) == {}


def test_failed_creations_write_nothing(controllers, tmp_path):
    c = controllers()
    results = c.create_topics([CreateTopicSpec("x", num_partitions=0), CreateTopicSpec("y", configs={"bogus": "1"})])
    assert [r.error_code for r in results] == [ErrorCode.INVALID_PARTITIONS, ErrorCode.INVALID_CONFIG]
    assert c.raft_log.end_offset == 1 + len(default_feature_levels())  # the leader's control batch and the feature levels only
    assert dict(c.image.topics) == {}


def test_later_specs_see_earlier_ones_in_the_same_request(controllers):
    c = controllers()
    c.create_topics([CreateTopicSpec("a.b")])
    results = c.create_topics([CreateTopicSpec("new1"), CreateTopicSpec("a.b")])
    assert [r.error_code for r in results] == [ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS]


def test_duplicate_names_in_one_request_create_nothing(controllers):
    """Kafka (ControllerApis.createTopics) answers a name given twice with one
    INVALID_REQUEST "Duplicate topic name." and creates neither copy."""
    c = controllers()
    results = c.create_topics([CreateTopicSpec("dup", num_partitions=1), CreateTopicSpec("dup", num_partitions=2), CreateTopicSpec("ok")])
    by_name: dict[str, list] = {}
    for r in results:
        by_name.setdefault(r.name, []).append(r.error_code)
    assert ErrorCode.INVALID_REQUEST in by_name["dup"]
    assert by_name["ok"] == [ErrorCode.NONE]
    assert "ok" in c.image.topics
    assert "dup" not in c.image.topics, "a topic named twice in one request was created"
    assert by_name["dup"] == [ErrorCode.INVALID_REQUEST]


def test_duplicate_names_in_one_delete_request_delete_nothing(controllers):
    """Kafka (ControllerApis.deleteTopics) answers a name given twice with
    INVALID_REQUEST "Duplicate topic name." and does not delete it."""
    c = controllers()
    c.create_topics([CreateTopicSpec("dup"), CreateTopicSpec("other")])
    results = c.delete_topics([("dup", None), ("dup", None), ("other", None)])
    codes = {}
    for error, _, name, _ in results:
        codes.setdefault(name, []).append(error)
    assert codes["other"] == [ErrorCode.NONE]
    assert "other" not in c.image.topics
    assert ErrorCode.INVALID_REQUEST in codes["dup"], codes
    assert "dup" in c.image.topics


def test_cluster_metadata_topic_cannot_be_created(controllers):
    """Kafka refuses CreateTopics for __cluster_metadata (INVALID_REQUEST,
    "Creation of internal topic __cluster_metadata is prohibited."). Here a
    partition log for it would open the metadata log's own directory."""
    c = controllers()
    (result,) = c.create_topics([CreateTopicSpec("__cluster_metadata")])
    assert result.error_code != ErrorCode.NONE, "__cluster_metadata was created as a regular topic"
    assert "__cluster_metadata" not in c.image.topics


def test_delete_topics(controllers):
    c = controllers()
    created = c.create_topics([CreateTopicSpec("a"), CreateTopicSpec("b"), CreateTopicSpec("c")])
    ids = {r.name: r.topic_id for r in created}
    results = c.delete_topics([("a", None), (None, ids["b"]), ("nope", None), (None, uuid.UUID(int=999)), (None, None)])
    assert [(e, n, t) for e, _, n, t in results[:2]] == [
        (ErrorCode.NONE, "a", ids["a"]),
        (ErrorCode.NONE, "b", ids["b"]),
    ]
    assert [e for e, *_ in results[2:]] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INVALID_REQUEST]
    assert set(c.image.topics) == {"c"}
    assert c.image.topic_by_id(ids["a"]) is None
    # Deleting again: already gone.
    assert c.delete_topics([("a", None)])[0][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_replay_after_reopen_gives_the_same_image(controllers, tmp_path):
    c = controllers(THREE_BROKERS)
    c.create_topics([CreateTopicSpec("a", num_partitions=4, replication_factor=2, configs={"cleanup.policy": "compact,delete"})])
    c.create_topics([CreateTopicSpec("b", assignments={0: [2], 1: [3]}), CreateTopicSpec("c")])
    c.delete_topics([("c", None)])
    c.create_topics([CreateTopicSpec("d", configs={"segment.bytes": "1048576", "retention.ms": "-1"})])
    image = c.image
    assert image.topics["a"].configs["cleanup.policy"] == "compact,delete"
    c.close()
    again = controllers(THREE_BROKERS, start=1000)
    assert image_summary(again.image) == image_summary(image)
    # The reopened node leads a new epoch: its control batch follows the replayed records.
    assert again.image.offset == image.offset + 1
    assert dict(again.image.topic_names_by_id) == dict(image.topic_names_by_id)
    assert dataclasses.replace(again.image, offset=image.offset) == image
    # And the reopened controller carries on from there.
    assert again.create_topics([CreateTopicSpec("e")])[0].error_code == ErrorCode.NONE
    assert again.create_topics([CreateTopicSpec("a")])[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert again.image.offset > image.offset


def test_deleted_topics_stay_deleted_after_replay(controllers):
    c = controllers()
    first = c.create_topics([CreateTopicSpec("gone"), CreateTopicSpec("kept")])
    c.delete_topics([("gone", None)])
    c.close()
    c2 = controllers(start=500)
    assert set(c2.image.topics) == {"kept"}
    assert c2.image.topic_by_id(first[0].topic_id) is None
    # Re-created under the same name: a new id, which also survives replay.
    (recreated,) = c2.create_topics([CreateTopicSpec("gone", num_partitions=2)])
    assert recreated.error_code == ErrorCode.NONE
    assert recreated.topic_id != first[0].topic_id
    c2.close()
    c3 = controllers(start=900)
    assert c3.image.topics["gone"].topic_id == recreated.topic_id
    assert sorted(c3.image.topics["gone"].partitions) == [0, 1]
    assert c3.image.topic_by_id(first[0].topic_id) is None


def test_controller_reopens_many_times(controllers):
    c = controllers()
    for i in range(5):
        c.create_topics([CreateTopicSpec(f"t{i}")])
        c.close()
        c = controllers(start=100 * (i + 1))
    assert set(c.image.topics) == {f"t{i}" for i in range(5)}


# --------------------------------------------------------------------------- image


def test_apply_records_configs_and_features():
    tid = uuid.UUID(int=5)
    image = apply_records(
        MetadataImage(),
        [
            (2, TOPIC_RECORD(name="t", topic_id=tid)),
            (4, CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name="t", name="retention.ms", value="1")),
            (4, CONFIG_RECORD(resource_type=RESOURCE_BROKER, resource_name="", name="x", value="y")),
            (12, FEATURE_LEVEL_RECORD(name="metadata.version", feature_level=20)),
            (15, PRODUCER_IDS_RECORD(broker_id=1, broker_epoch=-1, next_producer_id=1000)),
        ],
        4,
    )
    assert dict(image.topics["t"].configs) == {"retention.ms": "1"}
    assert dict(image.broker_configs) == {"x": "y"}
    assert dict(image.features) == {"metadata.version": 20}
    assert image.next_producer_id == 1000
    assert image.offset == 4
    image2 = apply_records(
        image,
        [
            (4, CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name="t", name="retention.ms", value=None)),
            (15, PRODUCER_IDS_RECORD(broker_id=1, broker_epoch=-1, next_producer_id=10)),
            (9, REMOVE_TOPIC_RECORD(topic_id=tid)),
            (3, PARTITION_RECORD(partition_id=0, topic_id=tid, replicas=[1], isr=[1], leader=1)),
        ],
        8,
    )
    assert dict(image2.topics) == {}
    assert image2.next_producer_id == 1000  # never goes back
    assert dict(image.topics["t"].configs) == {"retention.ms": "1"}  # the old image is untouched


# --------------------------------------------------------------------------- record frames


def sample_records():
    tid = uuid.UUID("0123456789abcdef0123456789abcdef")
    return [
        TOPIC_RECORD(name="orders", topic_id=tid),
        PARTITION_RECORD(partition_id=3, topic_id=tid, replicas=[1, 2], isr=[2], leader=2, leader_epoch=5, partition_epoch=6),
        PARTITION_RECORD(partition_id=0, topic_id=tid, replicas=[1], isr=[1], leader=1, leader_recovery_state=1),
        PARTITION_RECORD(partition_id=1, topic_id=tid, replicas=[1], isr=[1], leader=1, directories=[uuid.UUID(int=9)],
                         eligible_leader_replicas=[1], last_known_elr=[]),
        CONFIG_RECORD(resource_type=RESOURCE_TOPIC, resource_name="orders", name="retention.ms", value="100"),
        CONFIG_RECORD(resource_type=RESOURCE_BROKER, resource_name="", name="x", value=None),
        REMOVE_TOPIC_RECORD(topic_id=tid),
        FEATURE_LEVEL_RECORD(name="metadata.version", feature_level=21),
        PRODUCER_IDS_RECORD(broker_id=1, broker_epoch=7, next_producer_id=2000),
    ]


@pytest.mark.parametrize("value", sample_records(), ids=lambda v: type(v).__name__)
def test_record_frame_round_trip(value):
    data = encode_record(value)
    api_key, decoded = decode_record(data)
    assert api_key == record_api_key(value)
    assert decoded == value
    record_type = RECORD_TYPES[api_key]
    assert data[0] == 1  # frame version
    assert data[1] == api_key
    assert data[2] == record_type.max_version


@pytest.mark.parametrize("version", [0, 1, 2])
def test_partition_record_every_version(version):
    tid = uuid.UUID(int=3)
    fields = dict(partition_id=1, topic_id=tid, replicas=[4, 5], isr=[4], leader=4, leader_epoch=2, partition_epoch=3)
    if version >= 1:
        fields["directories"] = [uuid.UUID(int=1), uuid.UUID(int=2)]
    if version >= 2:
        fields["eligible_leader_replicas"] = [5]
    value = PARTITION_RECORD(**fields)
    data = encode_record(value, version)
    assert data[2] == version
    api_key, decoded = decode_record(data)
    assert api_key == 3
    assert decoded == value


def test_topic_record_golden_bytes():
    # uvarint frame version 1, uvarint api key 2, uvarint version 0, then the
    # flexible body: compact string "foo" (length + 1 = 4), the 16 uuid bytes,
    # and an empty tagged-field section.
    tid = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    expected = bytes.fromhex("01 02 00 04 666f6f 00112233445566778899aabbccddeeff 00")
    assert encode_record(TOPIC_RECORD(name="foo", topic_id=tid)) == expected
    assert decode_record(expected) == (2, TOPIC_RECORD(name="foo", topic_id=tid))


def test_remove_topic_and_feature_level_golden_bytes():
    assert encode_record(REMOVE_TOPIC_RECORD(topic_id=uuid.UUID(int=1))) == bytes.fromhex("01 09 00" + "00" * 15 + "01" + "00")
    # FeatureLevelRecord: compact string "mv", int16 7, no tagged fields.
    assert encode_record(FEATURE_LEVEL_RECORD(name="mv", feature_level=7)) == bytes.fromhex("01 0c 00 03 6d76 0007 00")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01",
        b"\x01\x02",
        b"\x02\x02\x00",  # unknown frame version
        b"\x00\x02\x00",
        b"\x01\x63\x00\x00",  # unknown api key 99
        b"\x01\x02\x01",  # TopicRecord v1 does not exist
        b"\x01\x03\x03",  # PartitionRecord v3 does not exist
        b"\x01\x02\x00\x04foo",  # truncated body
        b"\x01\x02\x00\x00",  # null (compact length 0) name in a non-nullable string
        b"\xff\xff\xff\xff\xff\xff",  # overlong varint
        b"\x01\x09\x00" + b"\x00" * 16 + b"\x00" + b"extra",  # trailing bytes
        b"\x01\x09\x00" + b"\x00" * 16 + b"\x05",  # tagged field count without fields
        b"\x01\x04\x00\x02\x02\x00",  # ConfigRecord cut short
    ],
)
def test_decode_record_rejects_garbage(data):
    with pytest.raises(ProtocolError):
        decode_record(data)


def test_decode_record_random_and_mutated_inputs_raise_only_protocol_error():
    rng = random.Random(1234)
    valid = [encode_record(v) for v in sample_records()]
    inputs = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 40))) for _ in range(400)]
    for data in valid:
        for _ in range(40):
            b = bytearray(data)
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(len(b))] = rng.getrandbits(8)
            inputs.append(bytes(b))
        inputs.extend(data[:i] for i in range(len(data)))
    decoded = 0
    for data in inputs:
        try:
            decode_record(data)
            decoded += 1
        except ProtocolError:
            pass
        # Any other exception type fails the test with its traceback.
    assert decoded < len(inputs)
