"""controller.acl_commands: CreateAcls, DeleteAcls and DescribeAcls planned against an image.

Validation and results follow Kafka's AclControlManager (and the checks its
brokers make first); every answer is encoded and decoded at every version of
its API to show it is a valid wire value.
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from controller.acl_commands import (
    MAX_RECORDS_PER_REQUEST,
    acl_record,
    describe_acls,
    plan_create_acls,
    plan_delete_acls,
)
from controller.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType, StandardAuthorizer
from controller.metadata.delta import apply_records
from controller.metadata.image import AclBinding, MetadataImage
from controller.metadata.records import record_api_key
from protocol.codec import decode_struct, encode_struct
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

CREATE, DELETE, DESCRIBE = (APIS_BY_NAME[n] for n in ("CreateAcls", "DeleteAcls", "DescribeAcls"))
CQ, DQ, SQ = (struct_classes(api.request) for api in (CREATE, DELETE, DESCRIBE))
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED, MATCH, ANY = PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH, PatternType.ANY
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def ids():
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


def creation(
    name="t", resource_type=TOPIC, pattern=LITERAL, principal="User:alice", host="*", op=Op.READ, permission=ALLOW
):
    return CQ.AclCreation(
        resource_type=resource_type,
        resource_name=name,
        resource_pattern_type=pattern,
        principal=principal,
        host=host,
        operation=op,
        permission_type=permission,
    )


def create_request(*creations):
    return CQ.CreateAclsRequest(creations=list(creations))


def delete_filter(
    name=None,
    resource_type=ResourceType.ANY,
    pattern=ANY,
    principal=None,
    host=None,
    op=Op.ANY,
    permission=AclPermissionType.ANY,
):
    return DQ.DeleteAclsFilter(
        resource_type_filter=resource_type,
        resource_name_filter=name,
        pattern_type_filter=pattern,
        principal_filter=principal,
        host_filter=host,
        operation=op,
        permission_type=permission,
    )


def describe_request(
    name=None,
    resource_type=ResourceType.ANY,
    pattern=ANY,
    principal=None,
    host=None,
    op=Op.ANY,
    permission=AclPermissionType.ANY,
):
    return SQ.DescribeAclsRequest(
        resource_type_filter=resource_type,
        resource_name_filter=name,
        pattern_type_filter=pattern,
        principal_filter=principal,
        host_filter=host,
        operation=op,
        permission_type=permission,
    )


def apply(image, records):
    return apply_records(image, [(record_api_key(r), r) for r in records], image.offset + len(records))


def wire_round_trip(api, response, versions=(1, 2, 3)):
    """Encode and decode ``response`` at ``versions`` (v0 carries no pattern types: only
    literal ACLs can be answered in it, see test_v0_literal_only_answers_encode)."""
    for version in versions:
        flexible = version in api.flexible
        encoded = encode_struct(api.response, version, flexible, response)
        decoded, _ = decode_struct(api.response, version, flexible, encoded)
        assert decoded == response, version


def created(image, *creations, new_id=None):
    response, records = plan_create_acls(image, create_request(*creations), new_id=new_id or ids())
    wire_round_trip(CREATE, response, versions=(0, 1, 2, 3))
    return [(r.error_code, r.error_message) for r in response.results], records


# --------------------------------------------------------------------------- CreateAcls


def test_create_writes_one_record_per_new_binding():
    results, records = created(
        MetadataImage(), creation("t"), creation("p", pattern=PREFIXED, op=Op.WRITE, permission=DENY, host="10.0.0.1")
    )
    assert results == [(ErrorCode.NONE, None), (ErrorCode.NONE, None)]
    assert [r.id for r in records] == [uuid.UUID(int=1), uuid.UUID(int=2)]
    image = apply(MetadataImage(), records)
    assert image.acls[uuid.UUID(int=1)] == AclBinding(TOPIC, "t", LITERAL, "User:alice", "*", Op.READ, ALLOW)
    assert image.acls[uuid.UUID(int=2)] == AclBinding(TOPIC, "p", PREFIXED, "User:alice", "10.0.0.1", Op.WRITE, DENY)
    assert StandardAuthorizer(image.acls).authorize("User:alice", "h", Op.READ, TOPIC, "t")


def test_duplicate_bindings_are_not_added_twice():
    results, records = created(MetadataImage(), creation("t"), creation("t"))
    assert results == [(ErrorCode.NONE, None)] * 2 and len(records) == 1
    image = apply(MetadataImage(), records)
    results, records = created(image, creation("t"), creation("t", host="h"))
    assert results == [(ErrorCode.NONE, None)] * 2
    assert len(records) == 1 and records[0].host == "h"


def test_new_ids_avoid_taken_ones_and_the_zero_id():
    image = apply(MetadataImage(), created(MetadataImage(), creation("t"))[1])  # takes id 1
    draws = iter([uuid.UUID(int=0), uuid.UUID(int=1), uuid.UUID(int=5), uuid.UUID(int=5), uuid.UUID(int=6)])
    _, records = created(image, creation("a"), creation("b"), new_id=lambda: next(draws))
    assert [r.id for r in records] == [uuid.UUID(int=5), uuid.UUID(int=6)]
    with pytest.raises(RuntimeError):
        created(image, creation("c"), new_id=lambda: uuid.UUID(int=1))
    # The default draws random ids.
    _, records = plan_create_acls(MetadataImage(), create_request(creation("x"), creation("y")))
    assert len({r.id for r in records}) == 2 and all(r.id.version == 4 for r in records)


@pytest.mark.parametrize(
    "bad,message",
    [
        (creation(resource_type=ResourceType.ANY), "Invalid resourceType ANY"),
        (creation(resource_type=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
        (creation(resource_type=42), "Invalid resourceType UNKNOWN"),
        (creation(pattern=MATCH), "Invalid patternType MATCH"),
        (creation(pattern=ANY), "Invalid patternType ANY"),
        (creation(pattern=PatternType.UNKNOWN), "Invalid patternType UNKNOWN"),
        (creation(op=Op.ANY), "Invalid operation ANY"),
        (creation(op=Op.UNKNOWN), "Invalid operation UNKNOWN"),
        (creation(op=77), "Invalid operation UNKNOWN"),
        (creation(permission=AclPermissionType.ANY), "Invalid permissionType ANY"),
        (creation(permission=AclPermissionType.UNKNOWN), "Invalid permissionType UNKNOWN"),
        (creation(name=""), "Resource name should not be empty"),
        (
            creation(name="my-cluster", resource_type=CLUSTER, op=Op.ALTER),
            "The only valid name for the CLUSTER resource is kafka-cluster",
        ),
        (
            creation(principal="alice"),
            "Invalid principal: expected a string in format principalType:principalName but got alice",
        ),
        (creation(principal=""), "Invalid principal: expected a string in format principalType:principalName but got "),
    ],
)
def test_invalid_creations_are_refused_one_by_one(bad, message):
    results, records = created(MetadataImage(), creation("ok1"), bad, creation("ok2"))
    assert results == [(ErrorCode.NONE, None), (ErrorCode.INVALID_REQUEST, message), (ErrorCode.NONE, None)]
    assert [r.resource_name for r in records] == ["ok1", "ok2"]


def test_valid_unusual_creations():
    results, records = created(
        MetadataImage(),
        creation("kafka-cluster", resource_type=CLUSTER, op=Op.IDEMPOTENT_WRITE),
        creation("*", principal="User:*", op=Op.ALL),
        creation("x", resource_type=ResourceType.USER, op=Op.CREATE_TOKENS, principal="User:"),
        creation("tx", resource_type=ResourceType.TRANSACTIONAL_ID, op=Op.WRITE, principal="Group:ops"),
    )
    assert all(code == ErrorCode.NONE for code, _ in results) and len(records) == 4


def test_too_many_records_refuse_the_whole_request():
    request = create_request(*(creation(f"t{i}") for i in range(MAX_RECORDS_PER_REQUEST + 1)))
    response, records = plan_create_acls(MetadataImage(), request, new_id=ids())
    assert records == []
    assert {(r.error_code, r.error_message) for r in response.results} == {
        (ErrorCode.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
    }
    assert len(response.results) == MAX_RECORDS_PER_REQUEST + 1
    # Exactly the limit is fine, and duplicates do not count.
    request = create_request(*(creation(f"t{i}") for i in range(MAX_RECORDS_PER_REQUEST)), creation("t0"))
    assert len(plan_create_acls(MetadataImage(), request, new_id=ids())[1]) == MAX_RECORDS_PER_REQUEST


# --------------------------------------------------------------------------- DeleteAcls and DescribeAcls

BINDINGS = [
    creation("foo"),
    creation("foo", pattern=PREFIXED, op=Op.WRITE),
    creation("fo", pattern=PREFIXED, principal="User:bob"),
    creation("*", principal="User:*", op=Op.DESCRIBE),
    creation("foo", resource_type=GROUP, permission=DENY, host="10.0.0.1"),
    creation("bar"),
]


@pytest.fixture
def image():
    return apply(MetadataImage(), created(MetadataImage(), *BINDINGS)[1])


def names(acls):
    return [(a.resource_type, a.resource_name, a.pattern_type) for a in acls]


def deleted(image, *filters):
    response, records = plan_delete_acls(image, DQ.DeleteAclsRequest(filters=list(filters)))
    wire_round_trip(DELETE, response)
    return response.filter_results, records


def test_delete_by_exact_resource(image):
    (result,), records = deleted(image, delete_filter("foo", TOPIC, LITERAL))
    assert (result.error_code, result.error_message) == (ErrorCode.NONE, None)
    assert names(result.matching_acls) == [(TOPIC, "foo", LITERAL)]
    assert result.matching_acls[0].principal == "User:alice" and result.matching_acls[0].operation == Op.READ
    assert [r.id for r in records] == [uuid.UUID(int=1)]
    after = apply(image, records)
    assert uuid.UUID(int=1) not in after.acls and len(after.acls) == len(BINDINGS) - 1


def test_delete_with_match_removes_every_acl_that_applies_to_the_resource(image):
    (result,), records = deleted(image, delete_filter("foobar", TOPIC, MATCH))
    assert names(result.matching_acls) == [(TOPIC, "foo", PREFIXED), (TOPIC, "fo", PREFIXED), (TOPIC, "*", LITERAL)]
    assert len(records) == 3


def test_delete_with_null_fields_and_any(image):
    (everything,), records = deleted(image, delete_filter())
    assert len(everything.matching_acls) == len(BINDINGS) == len(records)
    (by_name,), _ = deleted(image, delete_filter("foo"))  # ANY pattern: exact name, any type
    assert names(by_name.matching_acls) == [(TOPIC, "foo", LITERAL), (TOPIC, "foo", PREFIXED), (GROUP, "foo", LITERAL)]
    (by_entry,), _ = deleted(image, delete_filter(principal="User:bob"))
    assert names(by_entry.matching_acls) == [(TOPIC, "fo", PREFIXED)]
    (by_host,), _ = deleted(image, delete_filter(host="10.0.0.1", permission=DENY))
    assert names(by_host.matching_acls) == [(GROUP, "foo", LITERAL)]
    (none,), records = deleted(image, delete_filter("nothing"))
    assert none.matching_acls == [] and records == []


def test_overlapping_filters_list_each_match_and_remove_it_once(image):
    results, records = deleted(image, delete_filter("foo", TOPIC), delete_filter(resource_type=TOPIC, op=Op.READ))
    assert names(results[0].matching_acls) == [(TOPIC, "foo", LITERAL), (TOPIC, "foo", PREFIXED)]
    assert names(results[1].matching_acls) == [
        (TOPIC, "foo", LITERAL),
        (TOPIC, "fo", PREFIXED),
        (TOPIC, "bar", LITERAL),
    ]
    assert sorted(r.id.int for r in records) == [1, 2, 3, 6]


@pytest.mark.parametrize(
    "bad,message",
    [
        (delete_filter(resource_type=ResourceType.UNKNOWN), "Unknown patternFilter."),
        (delete_filter(resource_type=99), "Unknown patternFilter."),
        (delete_filter(pattern=PatternType.UNKNOWN), "Unknown patternFilter."),
        (delete_filter(op=Op.UNKNOWN), "Unknown entryFilter."),
        (delete_filter(permission=AclPermissionType.UNKNOWN), "Unknown entryFilter."),
    ],
)
def test_unknown_filters_fail_alone(image, bad, message):
    results, records = deleted(image, bad, delete_filter("bar"))
    assert (results[0].error_code, results[0].error_message, results[0].matching_acls) == (
        ErrorCode.INVALID_REQUEST,
        message,
        [],
    )
    assert names(results[1].matching_acls) == [(TOPIC, "bar", LITERAL)] and len(records) == 1


def test_a_filter_past_the_record_limit_fails_and_removes_nothing():
    many = apply(
        MetadataImage(), created(MetadataImage(), *(creation(f"t{i}") for i in range(MAX_RECORDS_PER_REQUEST)))[1]
    )
    many = apply(many, created(many, creation("g", resource_type=GROUP), new_id=lambda: uuid.UUID(int=10**6))[1])
    results, records = deleted(many, delete_filter(resource_type=GROUP), delete_filter(resource_type=TOPIC))
    assert results[0].error_code == ErrorCode.NONE and len(results[0].matching_acls) == 1
    assert results[1].error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert (
        results[1].error_message
        == f"Cannot remove more than {MAX_RECORDS_PER_REQUEST} acls in a single delete operation."
    )
    assert results[1].matching_acls == [] and len(records) == 1
    _, records = deleted(many, delete_filter(resource_type=TOPIC))
    assert len(records) == MAX_RECORDS_PER_REQUEST


def described(image, request):
    response = describe_acls(image, request)
    wire_round_trip(DESCRIBE, response)
    return response


def test_describe_groups_by_resource_pattern(image):
    response = described(image, describe_request())
    assert (response.error_code, response.error_message) == (ErrorCode.NONE, None)
    assert names(response.resources) == [
        (TOPIC, "*", LITERAL),
        (TOPIC, "bar", LITERAL),
        (TOPIC, "fo", PREFIXED),
        (TOPIC, "foo", LITERAL),
        (TOPIC, "foo", PREFIXED),
        (GROUP, "foo", LITERAL),
    ]
    group = response.resources[-1]
    assert [(a.principal, a.host, a.operation, a.permission_type) for a in group.acls] == [
        ("User:alice", "10.0.0.1", Op.READ, DENY)
    ]
    response = described(image, describe_request("foobar", TOPIC, MATCH, op=Op.WRITE))
    assert names(response.resources) == [(TOPIC, "foo", PREFIXED)]
    response = described(image, describe_request("foo", pattern=LITERAL))
    assert names(response.resources) == [(TOPIC, "foo", LITERAL), (GROUP, "foo", LITERAL)]


def test_describe_lists_equal_bindings_once_and_refuses_unknown_filters(image):
    twice = apply(
        image, [acl_record(uuid.UUID(int=99), AclBinding(TOPIC, "bar", LITERAL, "User:alice", "*", Op.READ, ALLOW))]
    )
    response = described(twice, describe_request("bar", TOPIC, LITERAL))
    assert len(response.resources) == 1 and len(response.resources[0].acls) == 1
    # DeleteAcls, by contrast, lists (and removes) each id.
    (result,), records = deleted(twice, delete_filter("bar", TOPIC, LITERAL))
    assert len(result.matching_acls) == 2 and len(records) == 2
    response = described(image, describe_request(op=Op.UNKNOWN))
    assert (response.error_code, response.error_message, response.resources) == (
        ErrorCode.INVALID_REQUEST,
        "Unknown entryFilter.",
        [],
    )


def test_v0_literal_only_answers_encode():
    # DescribeAcls v0 has no pattern type: the decoded filter is LITERAL, so only literal ACLs are answered.
    image = apply(MetadataImage(), created(MetadataImage(), creation("a"), creation("b", pattern=PREFIXED))[1])
    request = describe_request()
    request.pattern_type_filter = LITERAL
    response = describe_acls(image, request)
    assert names(response.resources) == [(TOPIC, "a", LITERAL)]
    wire_round_trip(DESCRIBE, response, versions=[0])
    flt = delete_filter()
    flt.pattern_type_filter = LITERAL  # DeleteAcls v0: the same
    response, records = plan_delete_acls(image, DQ.DeleteAclsRequest(filters=[flt]))
    assert names(response.filter_results[0].matching_acls) == [(TOPIC, "a", LITERAL)] and len(records) == 1
    wire_round_trip(DELETE, response, versions=[0])
