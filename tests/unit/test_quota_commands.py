"""controller.quota_commands: client quotas planned against an image (Kafka's ClientQuotaControlManager)
and described from it (Kafka's ClientQuotasImage, with the matching cases of its request tests)."""

from __future__ import annotations

import math

import pytest

from controller.metadata.delta import apply_records
from controller.metadata.image import MetadataImage
from controller.metadata.records import record_api_key
from controller.quota_commands import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    describe_client_quotas,
    plan_alter_client_quotas,
)
from protocol.codec import decode_struct, encode_struct
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

ALTER, DESCRIBE = APIS_BY_NAME["AlterClientQuotas"], APIS_BY_NAME["DescribeClientQuotas"]
AQ, DQ = struct_classes(ALTER.request), struct_classes(DESCRIBE.request)


def wire(api, response):
    for version in (0, 1):
        flexible = version in api.flexible
        encoded = encode_struct(api.response, version, flexible, response)
        assert decode_struct(api.response, version, flexible, encoded)[0] == response
    return response


def apply(image, records):
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset + len(records))


def entry(entity, *ops):
    """``entity``: (type, name) pairs; ``ops``: (key, value) to set or (key, None) to remove."""
    return AQ.EntryData(
        entity=[AQ.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[AQ.OpData(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops],
    )


def alter(image, *entries, validate_only=False):
    request = AQ.AlterClientQuotasRequest(entries=list(entries), validate_only=validate_only)
    response, records = plan_alter_client_quotas(image, request)
    wire(ALTER, response)
    return [
        (tuple((e.entity_type, e.entity_name) for e in r.entity), r.error_code, r.error_message)
        for r in response.entries
    ], records


def quotas(image):
    return {entity: dict(values) for entity, values in image.client_quotas.items()}


ALICE = (("user", "alice"),)
OK = ErrorCode.NONE
BAD = ErrorCode.INVALID_REQUEST


# --------------------------------------------------------------------------- AlterClientQuotas


def test_set_change_and_remove_quotas():
    results, records = alter(
        MetadataImage(),
        entry(ALICE, ("producer_byte_rate", 1024.0), ("request_percentage", 12.5)),
        entry((("client-id", "c"), ("user", None)), ("consumer_byte_rate", 2048.0)),
        entry((("ip", "10.0.0.1"),), ("connection_creation_rate", 5.0)),
        entry((("ip", None),), ("connection_creation_rate", 10.0)),
    )
    assert [code for _, code, _ in results] == [OK] * 4
    image = apply(MetadataImage(), records)
    assert quotas(image) == {
        ALICE: {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
        (("client-id", "c"), ("user", None)): {"consumer_byte_rate": 2048.0},
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
        (("ip", None),): {"connection_creation_rate": 10.0},
    }
    # Unchanged values and removals of absent keys write nothing.
    results, records = alter(
        image, entry(ALICE, ("producer_byte_rate", 1024.0), ("consumer_byte_rate", None), ("request_percentage", 50.0))
    )
    assert results == [(ALICE, OK, None)]
    assert [(r.key, r.value, r.remove) for r in records] == [("request_percentage", 50.0, False)]
    results, records = alter(image, entry(ALICE, ("producer_byte_rate", None), ("request_percentage", None)))
    assert [(r.key, r.remove) for r in records] == [("producer_byte_rate", True), ("request_percentage", True)]
    assert ALICE not in apply(image, records).client_quotas


def test_validate_only_answers_without_records():
    results, records = alter(
        MetadataImage(),
        entry(ALICE, ("producer_byte_rate", 1.0)),
        entry(ALICE + (("ip", "x"),), ("a", 1.0)),
        validate_only=True,
    )
    assert [code for _, code, _ in results] == [OK, BAD] and records == []


@pytest.mark.parametrize(
    "bad,message",
    [
        (entry((), ("producer_byte_rate", 1.0)), "Invalid empty client quota entity"),
        (entry((("group", "g"),), ("producer_byte_rate", 1.0)), "Unhandled client quota entity type: group"),
        (entry((("user", ""),), ("producer_byte_rate", 1.0)), "Empty user not supported"),
        (
            entry((("user", "a"), ("user", "b")), ("producer_byte_rate", 1.0)),
            "Invalid client quota entity, duplicate entity entry user",
        ),
        (
            entry((("ip", "1.2.3.4"), ("user", "a")), ("connection_creation_rate", 1.0)),
            "Invalid quota entity combination, IP entity should not be combined with User or ClientId",
        ),
        (
            entry((("ip", "not an address"),), ("connection_creation_rate", 1.0)),
            "not an address is not a valid IP or resolvable host.",
        ),
        (entry(ALICE, ("connection_creation_rate", 1.0)), "Invalid configuration key connection_creation_rate"),
        (entry((("ip", "::1"),), ("producer_byte_rate", 1.0)), "Invalid configuration key producer_byte_rate"),
        (entry(ALICE, ("producer_byte_rate", 0.0)), "Quota producer_byte_rate must be greater than 0"),
        (entry(ALICE, ("request_percentage", -1.0)), "Quota request_percentage must be greater than 0"),
        (entry(ALICE, ("request_percentage", math.nan)), "Quota request_percentage must be a number"),
        (entry(ALICE, ("producer_byte_rate", 10.5)), "producer_byte_rate cannot be a fractional value."),
        (entry(ALICE, ("consumer_byte_rate", 1e19)), "Proposed value for consumer_byte_rate is too large for a LONG."),
        (
            entry((("ip", None),), ("connection_creation_rate", 2.0**31)),
            "Proposed value for connection_creation_rate is too large for an INT.",
        ),
        (
            entry(ALICE, ("producer_byte_rate", 1.0), ("producer_byte_rate", None)),
            "Duplicate quota key producer_byte_rate not updating quota for this entity {user=alice}",
        ),
    ],
)
def test_invalid_entries_fail_alone(bad, message):
    other = (("user", "other"),)
    results, records = alter(MetadataImage(), bad, entry(other, ("producer_byte_rate", 5.0)))
    assert results[0][1:] == (BAD, message)
    assert results[1] == (other, OK, None)
    assert [r.entity[0].entity_name for r in records] == ["other"]


def test_an_invalid_op_drops_the_entitys_other_ops():
    results, records = alter(MetadataImage(), entry(ALICE, ("producer_byte_rate", 1.0), ("nonsense", 1.0)))
    assert results[0][1] == BAD and records == []


def test_valid_edges():
    results, records = alter(
        MetadataImage(),
        entry(
            ALICE,
            ("producer_byte_rate", 1.0 + 1e-9),
            ("controller_mutation_rate", 0.001),
            ("consumer_byte_rate", float(2**63)),
        ),
        entry((("ip", "2001:db8::1"),), ("connection_creation_rate", float(2**31 - 1))),
    )
    assert [code for _, code, _ in results] == [OK, OK] and len(records) == 4


def test_an_entity_given_twice_is_answered_once_and_not_applied():
    results, records = alter(
        MetadataImage(),
        entry((("user", "a"), ("client-id", "c")), ("producer_byte_rate", 1.0)),
        entry(ALICE, ("producer_byte_rate", 2.0)),
        entry((("client-id", "c"), ("user", "a")), ("consumer_byte_rate", 1.0)),
    )
    assert results == [
        ((("user", "a"), ("client-id", "c")), BAD, "Ignoring duplicate entity {client-id=c, user=a}"),
        (ALICE, OK, None),
    ]
    assert [r.entity[0].entity_name for r in records] == ["alice"]


# --------------------------------------------------------------------------- DescribeClientQuotas

# Kafka's request test set: user-1..3 and the default user, each alone and with client ids; client ids alone; ips.
ENTITIES = [
    (("user", "user-1"),),
    (("user", "user-2"),),
    (("user", "user-3"),),
    (("user", None),),
    (("client-id", "client-id-1"), ("user", "user-1")),
    (("client-id", "client-id-2"), ("user", "user-1")),
    (("client-id", "client-id-2"), ("user", "user-2")),
    (("client-id", None), ("user", "user-2")),
    (("client-id", "client-id-3"), ("user", None)),
    (("client-id", None), ("user", None)),
    (("client-id", "client-id-3"),),
    (("ip", "1.2.3.4"),),
    (("ip", None),),
]


@pytest.fixture
def image():
    entries = [
        entry(e, ("connection_creation_rate" if e[0][0] == "ip" else "producer_byte_rate", float(i + 1)))
        for i, e in enumerate(ENTITIES)
    ]
    results, records = alter(MetadataImage(), *entries)
    assert all(code == OK for _, code, _ in results)
    return apply(MetadataImage(), records)


def component(kind, match_type, match=None):
    return DQ.ComponentData(entity_type=kind, match_type=match_type, match=match)


def matched(image, *components, strict=False):
    response = wire(
        DESCRIBE,
        describe_client_quotas(image, DQ.DescribeClientQuotasRequest(components=list(components), strict=strict)),
    )
    assert (response.error_code, response.error_message) == (OK, None)
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }


@pytest.mark.parametrize(
    "components,strict,rule",
    [
        ([component("user", MATCH_EXACT, "user-1")], False, lambda d: d.get("user", 0) == "user-1"),
        ([component("user", MATCH_EXACT, "unknown")], False, lambda d: False),
        ([component("client-id", MATCH_EXACT, "client-id-2")], False, lambda d: d.get("client-id", 0) == "client-id-2"),
        ([component("user", MATCH_DEFAULT)], False, lambda d: "user" in d and d["user"] is None),
        ([component("user", MATCH_EXACT, "user-2")], True, lambda d: d == {"user": "user-2"}),
        ([component("client-id", MATCH_EXACT, "client-id-1")], True, lambda d: False),
        ([component("user", MATCH_SPECIFIED)], True, lambda d: "user" in d and "client-id" not in d),
        ([component("user", MATCH_SPECIFIED)], False, lambda d: "user" in d),
        ([component("client-id", MATCH_SPECIFIED)], True, lambda d: "client-id" in d and "user" not in d),
        ([component("client-id", MATCH_SPECIFIED)], False, lambda d: "client-id" in d),
        ([component("ip", MATCH_SPECIFIED)], False, lambda d: "ip" in d),
        (
            [component("user", MATCH_DEFAULT), component("client-id", MATCH_SPECIFIED)],
            True,
            lambda d: d.get("user", 0) is None and "client-id" in d,
        ),
        ([], False, lambda d: True),
        ([], True, lambda d: False),
    ],
)
def test_describe_matching(image, components, strict, rule):
    expected = [e for e in ENTITIES if rule(dict(e))]
    found = matched(image, *components, strict=strict)
    assert sorted(found, key=str) == sorted(expected, key=str)
    for entity, values in found.items():
        assert list(values.values()) == [float(ENTITIES.index(entity) + 1)]


def test_describe_counts_as_kafkas_test(image):
    assert len(matched(MetadataImage())) == 0
    counts = {
        ("user", False): 10,
        ("user", True): 4,
        ("client-id", False): 7,
        ("client-id", True): 1,
        ("ip", False): 2,
    }
    for (kind, strict), count in counts.items():
        assert len(matched(image, component(kind, MATCH_SPECIFIED), strict=strict)) == count
    assert len(matched(image)) == 13


@pytest.mark.parametrize(
    "components,code,message",
    [
        ([component("", MATCH_SPECIFIED)], BAD, "Invalid empty entity type."),
        (
            [component("user", MATCH_SPECIFIED), component("user", MATCH_DEFAULT)],
            BAD,
            "Entity type user cannot appear more than once in the filter.",
        ),
        ([component("other", MATCH_SPECIFIED)], ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type other"),
        ([component("user", MATCH_EXACT)], BAD, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
        (
            [component("user", MATCH_DEFAULT, "x")],
            BAD,
            "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
        ),
        (
            [component("user", MATCH_SPECIFIED, "x")],
            BAD,
            "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
        ),
        ([component("user", 7)], BAD, "Unknown match type 7"),
        (
            [component("ip", MATCH_SPECIFIED), component("client-id", MATCH_DEFAULT)],
            BAD,
            (
                "Invalid entity filter component combination. IP filter component should not be used with "
                "user or clientId filter component."
            ),
        ),
    ],
)
def test_describe_refuses_bad_filters_whole(image, components, code, message):
    response = wire(
        DESCRIBE, describe_client_quotas(image, DQ.DescribeClientQuotasRequest(components=components, strict=False))
    )
    assert (response.error_code, response.error_message, response.entries) == (code, message, None)
