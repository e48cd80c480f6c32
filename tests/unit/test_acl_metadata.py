"""ACLs, SCRAM credentials and client quotas in the metadata: records, replay, snapshots.

Replay follows Kafka's AclsDelta, ScramDelta and ClientQuotasDelta; the
snapshot property (replay(snapshot(image)) == image, through the bytes too) is
checked over random logs that mix these records with every other kind
(tests/unit/test_metadata_image_delta.py's log steps).
"""

from __future__ import annotations

import math
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.metadata.delta import MetadataDelta, apply_records
from controller.metadata.image import AclBinding, MetadataImage, ScramCredential, quota_entity, quota_entity_sort_key
from controller.metadata.records import (
    ACCESS_CONTROL_ENTRY_RECORD,
    CLIENT_QUOTA_ENTITY,
    CLIENT_QUOTA_RECORD,
    FEATURE_LEVEL_RECORD,
    PRODUCER_IDS_RECORD,
    REMOVE_ACCESS_CONTROL_ENTRY_RECORD,
    REMOVE_USER_SCRAM_CREDENTIAL_RECORD,
    USER_SCRAM_CREDENTIAL_RECORD,
    decode_record,
    encode_record,
    loggable_record,
    record_api_key,
)
from controller.metadata.snapshot import decode_snapshot, encode_snapshot, image_from_snapshot_records, snapshot_records
from tests.unit.test_metadata_image_delta import draw_record, topic_with_partitions

A1, A2, A3 = (uuid.UUID(int=i) for i in (1, 2, 3))


def replay(records, image: MetadataImage | None = None, offset: int = 0) -> MetadataImage:
    return apply_records(image or MetadataImage(), [(record_api_key(r), r) for r in records], offset)


def ace(acl_id, name="t", principal="User:alice", operation=3, permission=3, resource_type=2, pattern=3, host="*"):
    return ACCESS_CONTROL_ENTRY_RECORD(
        id=acl_id,
        resource_type=resource_type,
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host=host,
        operation=operation,
        permission_type=permission,
    )


def quota(entity, key, value=0.0, remove=False):
    return CLIENT_QUOTA_RECORD(
        entity=[CLIENT_QUOTA_ENTITY(entity_type=t, entity_name=n) for t, n in entity],
        key=key,
        value=value,
        remove=remove,
    )


def scram(name, mechanism=1, iterations=4096, salt=b"s", stored=b"k", server=b"v"):
    return USER_SCRAM_CREDENTIAL_RECORD(
        name=name, mechanism=mechanism, salt=salt, stored_key=stored, server_key=server, iterations=iterations
    )


# --------------------------------------------------------------------------- records


def test_access_control_entry_record_golden_bytes():
    # Frame 01 12 00; the id; resource type 2; name "t" (compact: length+1); pattern 3;
    # principal "User:a"; host "*"; operation 3 (READ); permission 3 (ALLOW); no tags.
    record = ace(uuid.UUID("00112233-4455-6677-8899-aabbccddeeff"), principal="User:a")
    expected = bytes.fromhex("01 12 0000112233445566778899aabbccddeeff0202 740307 557365723a6102 2a030300")
    assert encode_record(record) == expected
    assert decode_record(expected) == (18, record)
    assert encode_record(REMOVE_ACCESS_CONTROL_ENTRY_RECORD(id=A1)) == bytes.fromhex(
        "01 13 00" + "00" * 15 + "01" + "00"
    )


def test_client_quota_record_golden_bytes():
    # Frame 01 0e 00; entity: compact array of 2: ("user", null), ("client-id", "c");
    # key; float64 big-endian; remove false; no tags.
    record = quota([("user", None), ("client-id", "c")], "producer_byte_rate", 1024.0)
    expected = bytes.fromhex(
        "01 0e 000305 7573657200000a 636c69656e742d696402 630013" + b"producer_byte_rate".hex() + "40900000000000000000"
    )
    assert encode_record(record) == expected
    assert decode_record(expected) == (14, record)


def test_scram_credential_records_golden_bytes():
    record = scram("u", mechanism=2, iterations=8192, salt=b"\x01", stored=b"\x02\x03", server=b"")
    # Frame 01 0b 00; name "u"; mechanism 2; salt, stored key, server key (compact bytes); iterations; no tags.
    expected = bytes.fromhex("01 0b 0002 750202 0103 0203010000200000")
    assert encode_record(record) == expected
    assert decode_record(expected) == (11, record)
    assert encode_record(REMOVE_USER_SCRAM_CREDENTIAL_RECORD(name="u", mechanism=1)) == bytes.fromhex(
        "01 16 00 02 75 01 00"
    )


# --------------------------------------------------------------------------- replay


def test_acls_are_added_replaced_and_removed_by_id():
    image = replay([ace(A1), ace(A2, name="u"), ace(A3, name="u")])
    assert image.acls[A1] == AclBinding(2, "t", 3, "User:alice", "*", 3, 3)
    # Equal bindings under two ids are two entries, as in Kafka's image.
    assert image.acls[A2] == image.acls[A3]
    image = replay(
        [
            REMOVE_ACCESS_CONTROL_ENTRY_RECORD(id=A2),
            ace(A1, name="v"),
            REMOVE_ACCESS_CONTROL_ENTRY_RECORD(id=uuid.UUID(int=9)),
        ],
        image,
    )
    assert set(image.acls) == {A1, A3}
    assert image.acls[A1].resource_name == "v"
    assert not image.is_empty
    assert replay(
        [REMOVE_ACCESS_CONTROL_ENTRY_RECORD(id=A1), REMOVE_ACCESS_CONTROL_ENTRY_RECORD(id=A3)], image
    ).is_empty


def test_scram_credentials_by_user_and_mechanism():
    image = replay([scram("alice", 1), scram("alice", 2, iterations=8192), scram("bob", 1)])
    assert set(image.scram_credentials) == {("alice", 1), ("alice", 2), ("bob", 1)}
    assert image.scram_credentials[("alice", 2)] == ScramCredential(b"s", b"k", b"v", 8192)
    image = replay(
        [
            scram("alice", 1, salt=b"new"),
            REMOVE_USER_SCRAM_CREDENTIAL_RECORD(name="bob", mechanism=1),
            REMOVE_USER_SCRAM_CREDENTIAL_RECORD(name="carol", mechanism=1),
        ],
        image,
    )
    assert set(image.scram_credentials) == {("alice", 1), ("alice", 2)}
    assert image.scram_credentials[("alice", 1)].salt == b"new"


def test_loggable_record_redacts_scram_secrets():
    text = loggable_record(scram("alice", 2, 8192, salt=b"SALT", stored=b"STORED", server=b"SERVER"))
    assert (
        text == "UserScramCredentialRecord(name='alice', mechanism=2, salt=(redacted), stored_key=(redacted), "
        "server_key=(redacted), iterations=8192)"
    )
    record = ace(A1)
    assert loggable_record(record) == repr(record)


def test_scram_credential_repr_hides_the_keys():
    text = repr(ScramCredential(b"salt-bytes", b"stored-key", b"server-key", 4096))
    assert "salt-bytes" not in text and "stored-key" not in text and "server-key" not in text
    assert "4096" in text


def test_client_quotas_by_entity_and_key():
    alice = (("user", "alice"),)
    alice_c = (("client-id", "c"), ("user", "alice"))
    default_user = (("user", None),)
    image = replay(
        [
            quota([("user", "alice")], "producer_byte_rate", 100.0),
            quota([("user", "alice")], "consumer_byte_rate", 200.0),
            # Entity order in the record does not matter: the entity is a map.
            quota([("user", "alice"), ("client-id", "c")], "request_percentage", 50.5),
            quota([("client-id", "c"), ("user", "alice")], "producer_byte_rate", 10.0),
            quota([("user", None)], "producer_byte_rate", 1.0),
        ]
    )
    assert dict(image.client_quotas[alice]) == {"producer_byte_rate": 100.0, "consumer_byte_rate": 200.0}
    assert dict(image.client_quotas[alice_c]) == {"request_percentage": 50.5, "producer_byte_rate": 10.0}
    assert dict(image.client_quotas[default_user]) == {"producer_byte_rate": 1.0}
    image2 = replay(
        [
            quota([("user", "alice")], "producer_byte_rate", remove=True),
            quota([("user", "alice")], "producer_byte_rate", 300.0),
            quota([("user", None)], "producer_byte_rate", remove=True),
            quota([("user", "nobody")], "producer_byte_rate", remove=True),
        ],
        image,
    )
    assert dict(image2.client_quotas[alice]) == {"producer_byte_rate": 300.0, "consumer_byte_rate": 200.0}
    # An entity without keys leaves the image; removing from an unknown entity changes nothing.
    assert default_user not in image2.client_quotas and (("user", "nobody"),) not in image2.client_quotas
    # The older image is unchanged (copy on write), and untouched entities are shared.
    assert dict(image.client_quotas[alice])["producer_byte_rate"] == 100.0
    assert image2.client_quotas[alice_c] is image.client_quotas[alice_c]


def test_quota_entity_helpers():
    assert quota_entity([("user", "a"), ("client-id", None)]) == (("client-id", None), ("user", "a"))
    assert quota_entity([("user", "a"), ("user", "b")]) == (("user", "b"),)
    entities = [(("user", "b"),), (("user", None),), (("client-id", "x"), ("user", "a")), (("ip", None),)]
    assert sorted(entities, key=quota_entity_sort_key) == [
        (("client-id", "x"), ("user", "a")),
        (("ip", None),),
        (("user", None),),
        (("user", "b"),),
    ]


def test_security_maps_are_shared_when_untouched():
    image = replay([ace(A1), scram("alice"), quota([("user", "a")], "producer_byte_rate", 1.0)])
    after = replay(topic_with_partitions(), image)
    assert after.acls is image.acls
    assert after.scram_credentials is image.scram_credentials
    assert after.client_quotas is image.client_quotas
    after_acl = replay([ace(A2)], image)
    assert after_acl.scram_credentials is image.scram_credentials and after_acl.acls is not image.acls
    assert set(image.acls) == {A1}


# --------------------------------------------------------------------------- snapshots


def test_snapshot_order_follows_kafkas_image_writer():
    image = replay(
        [
            FEATURE_LEVEL_RECORD(name="metadata.version", feature_level=20),
            scram("zed", 1),
            scram("amy", 2),
            scram("bob", 1),
            ace(A2, name="b"),
            ace(A1, name="a"),
            PRODUCER_IDS_RECORD(broker_id=1, broker_epoch=1, next_producer_id=1000),
            quota([("user", "b")], "producer_byte_rate", 2.0),
            quota([("user", None)], "consumer_byte_rate", 3.0),
            quota([("user", None)], "producer_byte_rate", 4.0),
        ]
        + topic_with_partitions(count=1)
    )
    kinds = [type(r).__name__ for r in snapshot_records(image)]
    assert kinds == [
        "FeatureLevelRecord",
        "TopicRecord",
        "PartitionRecord",
        "ClientQuotaRecord",
        "ClientQuotaRecord",
        "ClientQuotaRecord",
        "ProducerIdsRecord",
        "AccessControlEntryRecord",
        "AccessControlEntryRecord",
        "UserScramCredentialRecord",
        "UserScramCredentialRecord",
        "UserScramCredentialRecord",
    ]
    records = snapshot_records(image)
    assert [(r.entity[0].entity_name, r.key) for r in records[3:6]] == [
        (None, "consumer_byte_rate"),
        (None, "producer_byte_rate"),
        ("b", "producer_byte_rate"),
    ]
    assert [r.id for r in records[7:9]] == [A1, A2]
    assert [(r.mechanism, r.name) for r in records[9:]] == [(1, "bob"), (1, "zed"), (2, "amy")]
    assert all(r.remove is False for r in records[3:6])
    assert image_from_snapshot_records(records, image.offset) == image


NAMES = st.sampled_from(["alice", "bob", "carol"])
QUOTA_KEYS = st.sampled_from(["producer_byte_rate", "consumer_byte_rate", "request_percentage"])
ENTITIES = st.sampled_from(
    [
        [("user", "alice")],
        [("user", None)],
        [("client-id", "c")],
        [("user", "bob"), ("client-id", None)],
        [("client-id", None), ("user", "bob")],
        [("ip", "10.0.0.1")],
        [("ip", None)],
    ]
)


def draw_security_record(data, model) -> list:
    """One step of a log about ACLs, SCRAM credentials or quotas, valid for ``model``'s ACL ids."""
    acl_ids = model.setdefault("acl_ids", [])
    model["counter"][0] += 1
    kind = data.draw(st.sampled_from(["acl", "remove_acl", "scram", "remove_scram", "quota", "remove_quota", "other"]))
    if kind == "acl":
        acl_id = uuid.UUID(int=1000 + model["counter"][0])
        if acl_ids and data.draw(st.booleans()):
            acl_id = data.draw(st.sampled_from(acl_ids))  # the same id again replaces the ACL
        else:
            acl_ids.append(acl_id)
        return [
            ace(
                acl_id,
                name=data.draw(st.sampled_from(["t", "u", "*"])),
                principal=data.draw(st.sampled_from(["User:a", "User:*"])),
                operation=data.draw(st.integers(2, 14)),
                permission=data.draw(st.sampled_from([2, 3])),
                resource_type=data.draw(st.integers(2, 7)),
                pattern=data.draw(st.sampled_from([3, 4])),
                host=data.draw(st.sampled_from(["*", "10.0.0.1"])),
            )
        ]
    if kind == "remove_acl":
        ids = acl_ids + [uuid.UUID(int=7)]  # an unknown id is ignored
        return [REMOVE_ACCESS_CONTROL_ENTRY_RECORD(id=data.draw(st.sampled_from(ids)))]
    if kind == "scram":
        return [
            scram(
                data.draw(NAMES),
                data.draw(st.sampled_from([1, 2])),
                data.draw(st.integers(4096, 16384)),
                data.draw(st.binary(max_size=4)),
                data.draw(st.binary(max_size=4)),
                data.draw(st.binary(max_size=4)),
            )
        ]
    if kind == "remove_scram":
        return [
            REMOVE_USER_SCRAM_CREDENTIAL_RECORD(name=data.draw(NAMES), mechanism=data.draw(st.sampled_from([1, 2])))
        ]
    if kind in ("quota", "remove_quota"):
        value = data.draw(st.floats(min_value=0.5, max_value=1e12, allow_nan=False))
        return [quota(data.draw(ENTITIES), data.draw(QUOTA_KEYS), value, remove=kind == "remove_quota")]
    return draw_record(data, model)


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_replaying_a_snapshot_with_security_records_gives_the_same_image(data):
    model = {"topics": {}, "brokers": {}, "counter": [0]}
    delta = MetadataDelta(MetadataImage())
    offset = -1
    for _ in range(data.draw(st.integers(0, 50))):
        records = draw_security_record(data, model)
        offset += len(records)
        delta.replay_values(records)
        if data.draw(st.booleans()):
            delta.apply(offset)
    image = delta.apply(offset)

    records = snapshot_records(image)
    assert image_from_snapshot_records(records, image.offset) == image
    frames = encode_snapshot(image)
    assert decode_snapshot(frames, image.offset) == image
    assert encode_snapshot(image) == frames
    things = (
        len(image.features)
        + len(image.brokers)
        + len(image.controllers)
        + sum(1 + len(t.partitions) + len(t.configs) for t in image.topics.values())
        + sum(len(c) for c in image.resource_configs.values())
        + (1 if image.next_producer_id else 0)
        + sum(len(q) for q in image.client_quotas.values())
        + len(image.acls)
        + len(image.scram_credentials)
        + len(image.cluster_links)
        + len(image.mirror_topics)
        + len(image.broker_placement)
        + len(image.balancer_throttles)
    )
    assert len(records) == things
    assert all(quotas for quotas in image.client_quotas.values())
    assert all(math.isfinite(v) for quotas in image.client_quotas.values() for v in quotas.values())
    assert snapshot_records(image_from_snapshot_records(records, 0)) == records
